/* delay-proxy: a TCP proxy that holds each direction's bytes for a fixed
 * time, so that the bench can run at a real network's latency on loopback
 * (the kernel here has no netem).
 *
 *   delay-proxy --listen HOST:PORT --to HOST:PORT --delay-us N [--port-file F]
 *
 * Every accepted client gets a connection of its own to --to. Bytes read
 * from either side at time t are written to the other side at t + N µs of
 * the monotonic clock, in order; a request and its reply so gain 2N. An
 * end of stream is passed on the same way (shutdown of the other side's
 * writing half, N µs after it came), and the pair is closed once both
 * directions are over. The bandwidth is not limited: a readable socket is
 * read into large blocks until it is empty, each read is queued with its
 * release time, and one timer per direction wakes at the head's release.
 * Memory is bounded: a direction that holds QUEUE_MAX bytes stops reading
 * its source until it is down to half of that.
 *
 * Prints "listening PORT" on stdout once listening (and writes PORT to F,
 * atomically, if given). Runs until SIGINT or SIGTERM, then exits 0; exits
 * 1 on a runtime error (cannot listen, cannot write F), 2 on bad usage. A
 * client whose upstream connection fails is closed, with one line on
 * stderr; the others go on. */
#include <event2/event.h>
#include <event2/listener.h>

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define BLOCK_BYTES (256u << 10)      /* the buffer of one read */
#define SMALL_BYTES (BLOCK_BYTES / 4) /* a shorter read is copied into a chunk of its size */
#define POOL_BLOCKS 64                /* free blocks kept for reuse (16 MiB) */
#define QUEUE_MAX (64u << 20)         /* bytes a direction holds before it stops reading */
#define READ_BUDGET (1u << 20)        /* bytes read per wake-up: timers and others get a turn */
#define MAX_IOV 64                    /* chunks per sendmsg */
#define DELAY_MAX_US 10000000L        /* 10 s */

static const char usage_text[] =
    "usage: delay-proxy --listen HOST:PORT --to HOST:PORT --delay-us N [--port-file F]\n"
    "\n"
    "A TCP proxy that delays each direction by N microseconds (0 to 10000000)\n"
    "without limiting bandwidth: a round trip through it gains 2N.\n"
    "\n"
    "  --listen HOST:PORT  where to accept clients; port 0 picks a free port\n"
    "  --to HOST:PORT      the upstream server; each client gets its own connection\n"
    "  --delay-us N        one-way delay, applied to each direction\n"
    "  --port-file F       also write the listening port to F (atomically)\n"
    "\n"
    "Prints \"listening PORT\" once listening; runs until SIGINT or SIGTERM, then\n"
    "exits 0. Exit 1: runtime error; 2: bad usage.\n";

/* Bytes of one read, waiting for their release time. */
struct chunk {
    struct chunk *next;
    uint64_t release_ns; /* monotonic time from which it may be written */
    size_t off, len;     /* bytes written so far, bytes held */
    size_t cost;         /* what it counts against QUEUE_MAX: its allocation */
    bool block;          /* a BLOCK_BYTES buffer, goes back to the pool */
    char data[];
};

struct conn;

/* One direction of a connection: dir[i] carries fd[i]'s bytes to fd[1 - i]. */
struct dir {
    struct conn *c;
    int src, dst; /* indexes into c->fd */
    struct chunk *head, *tail;
    size_t held;        /* sum of the chunks' costs */
    struct event *timer;
    uint64_t eof_ns;    /* when the source's end of stream is to be passed on */
    bool eof;           /* the source sent its last byte */
    bool paused;        /* reading stopped: QUEUE_MAX held */
    bool done;          /* nothing more goes this way */
};

struct proxy;

struct conn {
    struct proxy *p;
    struct conn *prev, *next;
    evutil_socket_t fd[2];      /* 0: the client, 1: upstream */
    struct event *rd[2], *wr[2]; /* rd[i] feeds dir[i]; wr[i] drains dir[1 - i] */
    struct dir dir[2];
    bool connecting;            /* upstream connect() not finished */
    char peer[NI_MAXHOST + NI_MAXSERV + 2];
};

struct proxy {
    struct event_base *base;
    struct evconnlistener *listener;
    struct event *relisten; /* re-enables accepting after an accept error */
    struct sockaddr_storage to;
    socklen_t to_len;
    const char *to_text;
    uint64_t delay_ns;
    struct conn *conns;
    struct chunk *pool; /* free blocks */
    int pooled;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct chunk *block_get(struct proxy *p)
{
    struct chunk *k = p->pool;
    if (k) {
        p->pool = k->next;
        p->pooled--;
        return k;
    }
    k = malloc(sizeof *k + BLOCK_BYTES);
    if (k) {
        k->block = true;
        k->cost = sizeof *k + BLOCK_BYTES;
    }
    return k;
}

static void chunk_free(struct proxy *p, struct chunk *k)
{
    if (k->block && p->pooled < POOL_BLOCKS) {
        k->next = p->pool;
        p->pool = k;
        p->pooled++;
    } else {
        free(k);
    }
}

static void dir_clear(struct dir *d)
{
    while (d->head) {
        struct chunk *k = d->head;
        d->head = k->next;
        chunk_free(d->c->p, k);
    }
    d->tail = NULL;
    d->held = 0;
}

static void conn_free(struct conn *c)
{
    struct proxy *p = c->p;
    for (int i = 0; i < 2; i++) {
        dir_clear(&c->dir[i]);
        if (c->dir[i].timer)
            event_free(c->dir[i].timer);
        if (c->rd[i])
            event_free(c->rd[i]);
        if (c->wr[i])
            event_free(c->wr[i]);
        if (c->fd[i] >= 0)
            evutil_closesocket(c->fd[i]);
    }
    if (c->prev)
        c->prev->next = c->next;
    else if (p->conns == c)
        p->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
}

/* Frees the connection once neither direction has anything left to do. */
static bool conn_check(struct conn *c)
{
    if (!c->dir[0].done || !c->dir[1].done)
        return false;
    conn_free(c);
    return true;
}

/* The destination cannot take more (reset, closed): what is queued for it
 * is dropped and its source is no longer read. */
static void dir_drop(struct dir *d)
{
    dir_clear(d);
    event_del(d->c->rd[d->src]);
    event_del(d->c->wr[d->dst]);
    event_del(d->timer);
    d->eof = d->done = true;
}

static void arm_timer(struct dir *d, uint64_t at_ns, uint64_t now)
{
    /* Rounded up: a timer that fires early only costs a re-arm, but the
     * deadline is a lower bound. */
    uint64_t us = at_ns > now ? (at_ns - now + 999) / 1000 : 0;
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000u),
                         .tv_usec = (suseconds_t)(us % 1000000u)};
    evtimer_add(d->timer, &tv);
}

/* Writes every released byte of d that the destination takes; then waits
 * for what is left: the destination's write event when it is full, else
 * the timer at the next release (a chunk's or the end of stream's).
 * Passes the end of stream on when it is due. May free the connection:
 * the caller must not touch it afterwards. */
static void flush(struct dir *d)
{
    struct conn *c = d->c;
    if (d->done || (c->connecting && d->dst == 1))
        return;
    uint64_t now = now_ns();
    bool full = false;
    while (d->head && d->head->release_ns <= now) {
        struct iovec iov[MAX_IOV];
        int n = 0;
        size_t want = 0;
        for (struct chunk *k = d->head; k && n < MAX_IOV && k->release_ns <= now; k = k->next) {
            iov[n].iov_base = k->data + k->off;
            iov[n].iov_len = k->len - k->off;
            want += iov[n].iov_len;
            n++;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd[d->dst], &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            full = true;
            break;
        }
        if (w < 0) {
            dir_drop(d);
            conn_check(c);
            return;
        }
        for (size_t left = (size_t)w; left > 0;) {
            struct chunk *k = d->head;
            size_t take = k->len - k->off < left ? k->len - k->off : left;
            k->off += take;
            left -= take;
            if (k->off == k->len) {
                d->head = k->next;
                if (!d->head)
                    d->tail = NULL;
                d->held -= k->cost;
                chunk_free(c->p, k);
            }
        }
        if ((size_t)w < want) {
            full = true;
            break;
        }
        /* Chunks that came due while writing go in the same wake-up. */
        now = now_ns();
    }
    if (d->paused && d->held < QUEUE_MAX / 2) {
        d->paused = false;
        event_add(c->rd[d->src], NULL);
    }
    if (full) {
        event_add(c->wr[d->dst], NULL);
        return;
    }
    event_del(c->wr[d->dst]);
    if (d->head) {
        arm_timer(d, d->head->release_ns, now);
    } else if (d->eof) {
        if (d->eof_ns > now) {
            arm_timer(d, d->eof_ns, now);
            return;
        }
        shutdown(c->fd[d->dst], SHUT_WR);
        d->done = true;
        conn_check(c);
    }
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct dir *d = arg;
    struct proxy *p = d->c->p;
    (void)what;
    for (size_t got = 0; got < READ_BUDGET && d->held < QUEUE_MAX;) {
        struct chunk *k = block_get(p);
        if (!k) {
            fprintf(stderr, "delay-proxy: client %s: out of memory; closed it\n", d->c->peer);
            conn_free(d->c);
            return;
        }
        ssize_t n = recv(fd, k->data, BLOCK_BYTES, 0);
        if (n <= 0) {
            chunk_free(p, k);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            /* End of stream, or the source is gone: what it sent still goes. */
            d->eof = true;
            d->eof_ns = now_ns() + p->delay_ns;
            event_del(d->c->rd[d->src]);
            break;
        }
        uint64_t t = now_ns();
        if ((size_t)n < SMALL_BYTES) {
            /* A short read does not keep a whole block busy until its release. */
            struct chunk *s = malloc(sizeof *s + (size_t)n);
            if (!s) {
                chunk_free(p, k);
                fprintf(stderr, "delay-proxy: client %s: out of memory; closed it\n", d->c->peer);
                conn_free(d->c);
                return;
            }
            memcpy(s->data, k->data, (size_t)n);
            s->block = false;
            s->cost = sizeof *s + (size_t)n;
            chunk_free(p, k);
            k = s;
        }
        k->next = NULL;
        k->release_ns = t + p->delay_ns;
        k->off = 0;
        k->len = (size_t)n;
        if (d->tail)
            d->tail->next = k;
        else
            d->head = k;
        d->tail = k;
        d->held += k->cost;
        got += (size_t)n;
        /* A read that did not fill the block emptied the socket (or nearly:
         * the level-triggered event calls again). */
        if ((size_t)n < BLOCK_BYTES)
            break;
    }
    if (!d->eof && d->held >= QUEUE_MAX) {
        d->paused = true;
        event_del(d->c->rd[d->src]);
    }
    flush(d);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    flush(arg);
}

/* The destination of the direction arg can take bytes again; for the
 * upstream socket, the first time, its connect() has finished. */
static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct dir *d = arg;
    struct conn *c = d->c;
    (void)what;
    if (c->connecting && d->dst == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err) {
            fprintf(stderr, "delay-proxy: client %s: cannot connect to %s: %s; closed it\n",
                    c->peer, c->p->to_text, strerror(err));
            conn_free(c);
            return;
        }
        c->connecting = false;
        event_add(c->rd[1], NULL);
    }
    flush(d);
}

static void set_nodelay(evutil_socket_t fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
    struct proxy *p = arg;
    (void)l;
    struct conn *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "delay-proxy: out of memory for a new client; closed it\n");
        evutil_closesocket(fd);
        return;
    }
    c->p = p;
    c->fd[0] = fd;
    c->fd[1] = -1;
    if ((c->next = p->conns))
        c->next->prev = c;
    p->conns = c;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(sa, (socklen_t)salen, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        snprintf(c->peer, sizeof c->peer, "%s:%s", host, serv);
    else
        snprintf(c->peer, sizeof c->peer, "(unknown)");
    set_nodelay(fd);

    c->fd[1] = socket(p->to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd[1] < 0) {
        fprintf(stderr, "delay-proxy: client %s: cannot make a socket for %s: %s; closed it\n",
                c->peer, p->to_text, strerror(errno));
        conn_free(c);
        return;
    }
    set_nodelay(c->fd[1]);
    for (int i = 0; i < 2; i++) {
        struct dir *d = &c->dir[i];
        d->c = c;
        d->src = i;
        d->dst = 1 - i;
        c->rd[i] = event_new(p->base, c->fd[i], EV_READ | EV_PERSIST, on_read, d);
        c->wr[i] = event_new(p->base, c->fd[i], EV_WRITE | EV_PERSIST, on_write, &c->dir[1 - i]);
        d->timer = evtimer_new(p->base, on_timer, d);
        if (!c->rd[i] || !c->wr[i] || !d->timer) {
            fprintf(stderr, "delay-proxy: client %s: out of memory; closed it\n", c->peer);
            conn_free(c);
            return;
        }
    }
    if (connect(c->fd[1], (struct sockaddr *)&p->to, p->to_len) < 0 && errno != EINPROGRESS) {
        fprintf(stderr, "delay-proxy: client %s: cannot connect to %s: %s; closed it\n", c->peer,
                p->to_text, strerror(errno));
        conn_free(c);
        return;
    }
    /* The client is read at once, so that its first bytes are delayed from
     * when they came; they wait in the queue until upstream is connected,
     * which its first write event tells. */
    c->connecting = true;
    event_add(c->rd[0], NULL);
    event_add(c->wr[1], NULL);
}

static void on_relisten(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    evconnlistener_enable(((struct proxy *)arg)->listener);
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
    struct proxy *p = arg;
    int err = EVUTIL_SOCKET_ERROR();
    fprintf(stderr, "delay-proxy: accept: %s; pausing accepts for 100 ms\n",
            evutil_socket_error_to_string(err));
    /* Out of descriptors would otherwise make the listener spin. */
    evconnlistener_disable(l);
    struct timeval tv = {0, 100000};
    evtimer_add(p->relisten, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    event_base_loopbreak(arg);
}

/* Parses HOST:PORT (HOST may be [IPv6]) for the flag named flag. Port 0
 * only when zero_ok. Returns 0, or prints why not and returns -1. */
static int parse_addr(const char *flag, const char *text, bool zero_ok,
                      struct sockaddr_storage *out, socklen_t *out_len)
{
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text || !colon[1]) {
        fprintf(stderr, "delay-proxy: %s: '%s' is not HOST:PORT\n", flag, text);
        return -1;
    }
    char host[NI_MAXHOST];
    const char *h = text;
    size_t hlen = (size_t)(colon - text);
    if (hlen >= 2 && h[0] == '[' && colon[-1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= sizeof host) {
        fprintf(stderr, "delay-proxy: %s: '%s' has no usable host\n", flag, text);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (*end || errno || colon[1] < '0' || colon[1] > '9' || port > 65535 ||
        (port == 0 && !zero_ok)) {
        fprintf(stderr, "delay-proxy: %s: port '%s' is not a number from %d to 65535\n", flag,
                colon + 1, zero_ok ? 0 : 1);
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV}, *res;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc) {
        fprintf(stderr, "delay-proxy: %s: cannot resolve '%s': %s\n", flag, host, gai_strerror(rc));
        return -1;
    }
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *out_len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* Writes "PORT\n" to path through a temporary file and a rename, so that
 * a reader never sees it half written. */
static int write_port_file(const char *path, int port)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        fprintf(stderr, "delay-proxy: --port-file: path too long: %s\n", path);
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "delay-proxy: --port-file: cannot write %s: %s\n", path, strerror(errno));
        if (f)
            unlink(tmp);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *listen_text = NULL, *to_text = NULL, *delay_text = NULL, *port_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--listen")     ? &listen_text
                            : !strcmp(a, "--to")        ? &to_text
                            : !strcmp(a, "--delay-us")  ? &delay_text
                            : !strcmp(a, "--port-file") ? &port_file
                                                        : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!slot) {
            fprintf(stderr, "delay-proxy: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "delay-proxy: %s needs a value (see --help)\n", a);
            return 2;
        }
        *slot = argv[++i];
    }
    const char *missing = !listen_text  ? "--listen"
                          : !to_text    ? "--to"
                          : !delay_text ? "--delay-us"
                                        : NULL;
    if (missing) {
        fprintf(stderr, "delay-proxy: %s is required (see --help)\n", missing);
        return 2;
    }
    char *end;
    errno = 0;
    long delay_us = strtol(delay_text, &end, 10);
    if (*end || errno || delay_text[0] < '0' || delay_text[0] > '9' || delay_us > DELAY_MAX_US) {
        fprintf(stderr, "delay-proxy: --delay-us: '%s' is not a whole number of microseconds "
                        "from 0 to %ld\n", delay_text, DELAY_MAX_US);
        return 2;
    }
    if (port_file && !*port_file) {
        fprintf(stderr, "delay-proxy: --port-file: empty path\n");
        return 2;
    }
    struct proxy p = {.to_text = to_text, .delay_ns = (uint64_t)delay_us * 1000u};
    struct sockaddr_storage la;
    socklen_t la_len;
    if (parse_addr("--listen", listen_text, true, &la, &la_len) ||
        parse_addr("--to", to_text, false, &p.to, &p.to_len))
        return 2;

    signal(SIGPIPE, SIG_IGN);
    /* Precise timers: epoll's millisecond timeout would make every release
     * up to 1 ms late. No cached time: a timer's deadline is counted from
     * the moment it is armed, not from the start of the loop's turn. And no
     * timer slack: Linux lets a timer of this process fire up to 50 µs late
     * by default, to batch wake-ups. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NO_CACHE_TIME);
        p.base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    if (!p.base) {
        fprintf(stderr, "delay-proxy: cannot create an event loop\n");
        return 1;
    }
    int rc = 1;
    struct event *sig_int = evsignal_new(p.base, SIGINT, on_signal, p.base);
    struct event *sig_term = evsignal_new(p.base, SIGTERM, on_signal, p.base);
    p.relisten = evtimer_new(p.base, on_relisten, &p);
    p.listener = evconnlistener_new_bind(p.base, on_accept, &p,
                                         LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC |
                                             LEV_OPT_REUSEABLE,
                                         -1, (struct sockaddr *)&la, (int)la_len);
    if (!p.listener) {
        fprintf(stderr, "delay-proxy: cannot listen on %s: %s\n", listen_text, strerror(errno));
        goto out;
    }
    if (!sig_int || !sig_term || !p.relisten || evsignal_add(sig_int, NULL) ||
        evsignal_add(sig_term, NULL)) {
        fprintf(stderr, "delay-proxy: cannot set up signal handling\n");
        goto out;
    }
    evconnlistener_set_error_cb(p.listener, on_accept_error);
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    char serv[NI_MAXSERV];
    if (getsockname(evconnlistener_get_fd(p.listener), (struct sockaddr *)&bound, &bound_len) ||
        getnameinfo((struct sockaddr *)&bound, bound_len, NULL, 0, serv, sizeof serv,
                    NI_NUMERICSERV)) {
        fprintf(stderr, "delay-proxy: cannot read the listening port: %s\n", strerror(errno));
        goto out;
    }
    if (port_file && write_port_file(port_file, atoi(serv)))
        goto out;
    printf("listening %s\n", serv);
    fflush(stdout);

    if (event_base_dispatch(p.base) < 0) {
        fprintf(stderr, "delay-proxy: the event loop failed\n");
        goto out;
    }
    rc = 0;
out:
    while (p.conns)
        conn_free(p.conns);
    while (p.pool) {
        struct chunk *k = p.pool;
        p.pool = k->next;
        free(k);
    }
    if (p.listener)
        evconnlistener_free(p.listener);
    if (p.relisten)
        event_free(p.relisten);
    if (sig_int)
        event_free(sig_int);
    if (sig_term)
        event_free(sig_term);
    event_base_free(p.base);
    libevent_global_shutdown();
    return rc;
}
