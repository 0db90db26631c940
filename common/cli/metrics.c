/* The Prometheus endpoint of metrics.h: text writer, address checks, and
 * a small HTTP/1.x server on a thread of its own.
 *
 * The server is the peer's adversary, not its host: it answers GET and
 * HEAD of /metrics, /healthz and /readyz, one request per connection, and bounds
 * everything a client could use up. At most MAX_CONNS connections (and no
 * more than an eighth of the process's file descriptor limit) are served
 * at once; one more is accepted, told 503 and closed at once. A request's
 * headers may take MAX_HEADERS_BYTES; a connection lives
 * REQUEST_TIMEOUT_S from accept to the last byte of its answer, however
 * slowly its bytes trickle in. When accept() fails for want of file
 * descriptors or memory the listener rests ACCEPT_PAUSE_MS instead of
 * being woken again and again by the connection it cannot take.
 *
 * Stopping: the server thread's event_base watches the read end of a pipe;
 * close() writes a byte to it, which breaks the loop from inside (a plain
 * event_base_loopbreak() from another thread would need libevent's
 * evthread locking, i.e. global state). The refresher sleeps on a
 * condition variable that close() signals. */
#include "metrics.h"

#include <event2/event.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define REFRESH_MS_DEFAULT 1000
/* /readyz by default: the last good refresh within two intervals and this
 * (the time a refresh itself may take). */
#define READY_SLACK_MS 2000
#define LISTEN_BACKLOG 64
/* Connections served at once (fewer when the fd limit is below 8 times
 * this): each takes a file descriptor, which the data path needs more. */
#define MAX_CONNS 32
/* From accept to the last byte of the answer. */
#define REQUEST_TIMEOUT_S 10
/* The request line and headers, with the blank line that ends them. */
#define MAX_HEADERS_BYTES 8192
/* accept() failed for want of descriptors or memory: listen again after. */
#define ACCEPT_PAUSE_MS 1000
/* Connections taken per wake-up of the listener. */
#define ACCEPT_BURST 64
/* Where an empty HOST (":PORT") listens. */
#define DEFAULT_HOST "127.0.0.1"
#define MAX_HOST 256

typedef struct hconn hconn;

struct sluicei_metrics {
    struct event_base *base;      /* used only by the server thread once it runs */
    int listen_fd;
    struct event *listen_ev, *pause_ev;
    hconn *conns;                 /* those served now, a list */
    int nconns, max_conns;
    struct event *wake_ev;
    int wake[2];                  /* pipe: close() writes, the server thread stops */
    pthread_t server, refresher;
    int server_started, refresher_started;

    pthread_mutex_t lock;         /* guards stopping, for the refresher's sleep,
                                     and the readiness below */
    pthread_cond_t cond;
    int stopping;
    int ready;                    /* the last refresh: 1 ready, 0 not; -1 none yet */
    int64_t ready_ms;             /* monotonic ms when a refresh last said ready */
    char why[256];                /* why the last refresh said not ready */
    int ready_max_age_ms;

    sluicei_metrics_render_fn render;
    sluicei_metrics_refresh_fn refresh;
    int refresh_ms;
    void *arg;
};

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- text ----------------------------------------------------------------- */

void sluicei_mtext_free(sluicei_mtext *t)
{
    free(t->buf);
    memset(t, 0, sizeof *t);
}

void sluicei_mtext_raw(sluicei_mtext *t, const char *s, size_t n)
{
    if (t->failed || n == 0)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *nb = realloc(t->buf, cap);
        if (!nb) {
            t->failed = 1;
            return;
        }
        t->buf = nb;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static void mtext_str(sluicei_mtext *t, const char *s)
{
    sluicei_mtext_raw(t, s, strlen(s));
}

/* Appends s with the escapes of a label value (quote) or of HELP text
 * (backslash and newline only). */
static void mtext_escaped(sluicei_mtext *t, const char *s, int quote)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\')
            mtext_str(t, "\\\\");
        else if (*p == '\n')
            mtext_str(t, "\\n");
        else if (*p == '"' && quote)
            mtext_str(t, "\\\"");
        else
            sluicei_mtext_raw(t, p, 1);
    }
}

void sluicei_mtext_family(sluicei_mtext *t, const char *name, const char *type,
                          const char *help)
{
    mtext_str(t, "# HELP ");
    mtext_str(t, name);
    mtext_str(t, " ");
    mtext_escaped(t, help, 0);
    mtext_str(t, "\n# TYPE ");
    mtext_str(t, name);
    mtext_str(t, " ");
    mtext_str(t, type);
    mtext_str(t, "\n");
}

/* The shortest "%.Ng" form of v that reads back as v (2.997, not
 * 2.9969999999999999). */
static void shortest(char *out, size_t n, double v)
{
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(out, n, "%.*g", digits, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

void sluicei_mtext_sample(sluicei_mtext *t, const char *name, const char *const *labels,
                          double value)
{
    mtext_str(t, name);
    int open = 0;
    for (size_t i = 0; labels && labels[i]; i += 2) {
        if (!labels[i + 1])
            continue;
        mtext_str(t, open ? "," : "{");
        open = 1;
        mtext_str(t, labels[i]);
        mtext_str(t, "=\"");
        mtext_escaped(t, labels[i + 1], 1);
        mtext_str(t, "\"");
    }
    if (open)
        mtext_str(t, "}");
    char v[40];
    const double exact = 9007199254740992.0;   /* 2^53 */
    if (isnan(value))
        snprintf(v, sizeof v, "NaN");
    else if (isinf(value))
        snprintf(v, sizeof v, "%sInf", value > 0 ? "+" : "-");
    else if (value > -exact && value < exact && (double)(long long)value == value)
        snprintf(v, sizeof v, "%lld", (long long)value);
    else
        shortest(v, sizeof v, value);
    mtext_str(t, " ");
    mtext_str(t, v);
    mtext_str(t, "\n");
}

/* ---- addresses ------------------------------------------------------------ */

/* Splits addr into host (empty: loopback) and port, checking the
 * form. Returns 0, or -1 with err set. */
static int split_addr(const char *flag, const char *addr, char *host, char *port,
                      char *err, size_t errlen)
{
    const char *colon;
    size_t hlen;
    const char *h = addr;
    if (!addr || !*addr) {
        seterr(err, errlen, "%s needs HOST:PORT (e.g. 127.0.0.1:9100)", flag);
        return -1;
    }
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':') {
            seterr(err, errlen, "%s '%s': write an IPv6 address as [ADDRESS]:PORT", flag, addr);
            return -1;
        }
        h = addr + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon) {
            seterr(err, errlen, "%s '%s' has no port: give HOST:PORT (e.g. 127.0.0.1:9100)",
                   flag, addr);
            return -1;
        }
        hlen = (size_t)(colon - addr);
        if (memchr(addr, ':', hlen)) {
            seterr(err, errlen, "%s '%s': write an IPv6 address as [ADDRESS]:PORT", flag, addr);
            return -1;
        }
    }
    if (hlen >= MAX_HOST) {
        seterr(err, errlen, "%s '%.64s...': host name too long", flag, addr);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    const char *p = colon + 1;
    size_t plen = strlen(p);
    long v = 0;
    int ok = plen > 0 && plen <= 5;
    for (size_t i = 0; ok && i < plen; i++) {
        ok = p[i] >= '0' && p[i] <= '9';
        v = v * 10 + (p[i] - '0');
    }
    if (!ok || v < 1 || v > 65535) {
        seterr(err, errlen, "%s '%s': port '%s' is not in 1..65535", flag, addr, p);
        return -1;
    }
    snprintf(port, 6, "%ld", v);
    return 0;
}

/* Resolves host:port for listening. Returns 0 with *res (freeaddrinfo),
 * or -1 with err set. */
static int resolve(const char *flag, const char *addr, const char *host, const char *port,
                   struct addrinfo **res, char *err, size_t errlen)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    /* No host (":PORT"): loopback; every address must be asked for. */
    int rc = getaddrinfo(*host ? host : DEFAULT_HOST, port, &hints, res);
    if (rc != 0) {
        seterr(err, errlen, "%s '%s': host '%s' does not resolve: %s", flag, addr, host,
               gai_strerror(rc));
        return -1;
    }
    return 0;
}

sluice_err sluicei_metrics_addr_check(const char *flag, const char *addr, char *err,
                                      size_t errlen)
{
    char host[MAX_HOST], port[6];
    struct addrinfo *res = NULL;
    if (split_addr(flag, addr, host, port, err, errlen) != 0 ||
        resolve(flag, addr, host, port, &res, err, errlen) != 0)
        return SLUICE_ERR_INVALID;
    freeaddrinfo(res);
    return SLUICE_OK;
}

/* A listening, non-blocking socket on the first address of res that
 * binds; -1 with err set when none does. */
static int listen_on(const char *addr, struct addrinfo *res, char *err, size_t errlen)
{
    int saved = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        /* A restarted server may bind while old connections linger. */
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, LISTEN_BACKLOG) == 0)
            return fd;
        saved = errno;
        close(fd);
    }
    if (saved == EADDRINUSE)
        seterr(err, errlen, "cannot listen on %s: the address is in use (another program "
               "listens there; choose another port)", addr);
    else if (saved == EADDRNOTAVAIL)
        seterr(err, errlen, "cannot listen on %s: not an address of this host", addr);
    else
        seterr(err, errlen, "cannot listen on %s: %s", addr, strerror(saved));
    return -1;
}

/* ---- server --------------------------------------------------------------- */

/* One connection: its request read into req, then its answer written
 * from out; closed after the answer, or at its deadline. */
struct hconn {
    sluicei_metrics *m;
    int fd;
    struct event *rev, *wev;     /* reading the request; writing the answer */
    struct event *deadline;
    char *out;                   /* the answer, malloc'd */
    size_t olen, osent;
    int answered;                /* out is all sent: what comes in is read and dropped */
    hconn *prev, *next;
    size_t rlen;
    char req[MAX_HEADERS_BYTES];
};

static void conn_close(hconn *h)
{
    sluicei_metrics *m = h->m;
    if (h->prev)
        h->prev->next = h->next;
    else
        m->conns = h->next;
    if (h->next)
        h->next->prev = h->prev;
    m->nconns--;
    if (h->rev)
        event_free(h->rev);
    if (h->wev)
        event_free(h->wev);
    if (h->deadline)
        event_free(h->deadline);
    close(h->fd);
    free(h->out);
    free(h);
}

static void on_writable(evutil_socket_t fd, short what, void *arg);

/* Writes what is left of the answer. Once it is all out, the connection
 * is shut for writing and read until the client closes it (or the
 * deadline), so that what the client sent beyond the request (the rest of
 * headers too long) does not reset the connection before it read the
 * answer. */
static void conn_flush(hconn *h)
{
    while (h->osent < h->olen) {
        ssize_t w = send(h->fd, h->out + h->osent, h->olen - h->osent, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!h->wev && (!(h->wev = event_new(h->m->base, h->fd, EV_WRITE | EV_PERSIST,
                                                  on_writable, h)) ||
                            event_add(h->wev, NULL) != 0))
                break;
            return;
        }
        if (w <= 0)
            break;
        h->osent += (size_t)w;
    }
    if (h->osent < h->olen || shutdown(h->fd, SHUT_WR) != 0 || event_add(h->rev, NULL) != 0) {
        conn_close(h);
        return;
    }
    if (h->wev)
        event_del(h->wev);
    h->answered = 1;
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_flush(arg);
}

/* Builds the answer (status, a plain-text body unless head) and starts
 * writing it. */
static void conn_answer(hconn *h, int status, const char *reason, const char *ctype,
                        const char *extra, const char *body, size_t blen, int head)
{
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     status, reason, ctype, blen, extra ? extra : "");
    if (head)
        blen = 0;
    event_del(h->rev);
    h->out = malloc((size_t)n + blen);
    if (!h->out) {
        conn_close(h);
        return;
    }
    memcpy(h->out, hdr, (size_t)n);
    if (blen)
        memcpy(h->out + n, body, blen);
    h->olen = (size_t)n + blen;
    /* What the socket does not take now, on_writable() sends later; h may
     * be gone after this. */
    conn_flush(h);
}

static void conn_text(hconn *h, int status, const char *reason, const char *extra,
                      const char *text, int head)
{
    conn_answer(h, status, reason, "text/plain; charset=utf-8", extra, text, strlen(text), head);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether /readyz says ready; if not, the line it answers in why. */
static int is_ready(sluicei_metrics *m, char *why, size_t n)
{
    if (!m->refresh)
        return 1;
    int ok = 0;
    pthread_mutex_lock(&m->lock);
    int64_t age = mono_ms() - m->ready_ms;
    if (m->ready < 0)
        snprintf(why, n, "not ready: the first read has not finished\n");
    else if (!m->ready)
        snprintf(why, n, "not ready: %s\n", m->why[0] ? m->why : "the last read failed");
    else if (age > m->ready_max_age_ms)
        snprintf(why, n, "not ready: no successful read for %lld ms (more than %d ms)\n",
                 (long long)age, m->ready_max_age_ms);
    else
        ok = 1;
    pthread_mutex_unlock(&m->lock);
    return ok;
}

/* Answers the request in req, whose headers are complete. */
static void conn_request(hconn *h)
{
    sluicei_metrics *m = h->m;
    /* The request line: METHOD SP TARGET SP HTTP/1.x */
    char line[MAX_HEADERS_BYTES];
    size_t n = 0;
    while (n < h->rlen && h->req[n] != '\r' && h->req[n] != '\n')
        n++;
    memcpy(line, h->req, n);
    line[n] = '\0';
    char *method = line, *target = NULL, *version = NULL, *sp;
    if ((sp = strchr(method, ' '))) {
        *sp = '\0';
        target = sp + 1;
        if ((sp = strchr(target, ' '))) {
            *sp = '\0';
            version = sp + 1;
        }
    }
    if (!version || !*method || *target != '/' || strchr(version, ' ') ||
        strncmp(version, "HTTP/1.", 7) != 0) {
        conn_text(h, 400, "Bad Request", NULL, "malformed request\n", 0);
        return;
    }
    int head = strcmp(method, "HEAD") == 0;
    if (!head && strcmp(method, "GET") != 0) {
        conn_text(h, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n",
                  "only GET and HEAD are served\n", 0);
        return;
    }
    size_t plen = strcspn(target, "?#");
    if (plen == 8 && strncmp(target, "/metrics", 8) == 0) {
        sluicei_mtext t = {0};
        m->render(&t, m->arg);
        if (t.failed)
            conn_text(h, 500, "Internal Server Error", NULL, "out of memory\n", head);
        else
            conn_answer(h, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", NULL,
                        t.buf ? t.buf : "", t.len, head);
        sluicei_mtext_free(&t);
    } else if (plen == 8 && strncmp(target, "/healthz", 8) == 0) {
        conn_text(h, 200, "OK", NULL, "ok\n", head);
    } else if (plen == 7 && strncmp(target, "/readyz", 7) == 0) {
        char why[sizeof m->why + 64];
        if (is_ready(m, why, sizeof why))
            conn_text(h, 200, "OK", NULL, "ready\n", head);
        else
            conn_text(h, 503, "Service Unavailable", NULL, why, head);
    } else {
        conn_text(h, 404, "Not Found", NULL, "not found: try /metrics, /healthz or /readyz\n",
                  head);
    }
}

/* Whether req[0..len) holds the blank line that ends the headers. */
static int headers_end(const char *req, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (req[i] != '\n')
            continue;
        if (req[i + 1] == '\n' || (req[i + 1] == '\r' && i + 2 < len && req[i + 2] == '\n'))
            return 1;
    }
    return 0;
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    hconn *h = arg;
    (void)what;
    if (h->answered) {
        char sink[4096];
        ssize_t r = recv(fd, sink, sizeof sink, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            conn_close(h);
        return;
    }
    size_t before = h->rlen;
    ssize_t r = recv(fd, h->req + h->rlen, sizeof h->req - h->rlen, 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (r <= 0) {
        conn_close(h);   /* gone before its request was complete */
        return;
    }
    h->rlen += (size_t)r;
    /* Looked for from a line before the new bytes (the blank line may
     * straddle two reads). */
    size_t from = before > 3 ? before - 3 : 0;
    if (headers_end(h->req + from, h->rlen - from)) {
        conn_request(h);
    } else if (h->rlen == sizeof h->req) {
        char why[64];
        snprintf(why, sizeof why, "request headers over %d bytes\n", MAX_HEADERS_BYTES);
        conn_text(h, 431, "Request Header Fields Too Large", NULL, why, 0);
    }
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_close(arg);
}

/* A connection beyond the limit: told so, in one write to a socket that
 * has room for it, and closed. */
static void refuse(int fd)
{
    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n"
                               "Content-Type: text/plain; charset=utf-8\r\n"
                               "Content-Length: 21\r\nRetry-After: 10\r\n"
                               "Connection: close\r\n\r\ntoo many connections\n";
    char sink[1024];
    /* What the client sent already is read, so that closing does not reset
     * the connection before it reads the answer. */
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0)
        ;
    ssize_t w = send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    shutdown(fd, SHUT_WR);
    close(fd);
}

/* Serves fd (non-blocking). Returns -1 when out of memory (fd untouched). */
static int conn_open(sluicei_metrics *m, int fd)
{
    hconn *h = calloc(1, sizeof *h);
    if (!h)
        return -1;
    h->m = m;
    h->fd = fd;
    struct timeval tv = {REQUEST_TIMEOUT_S, 0};
    if (!(h->rev = event_new(m->base, fd, EV_READ | EV_PERSIST, on_readable, h)) ||
        !(h->deadline = evtimer_new(m->base, on_deadline, h)) ||
        event_add(h->rev, NULL) != 0 || evtimer_add(h->deadline, &tv) != 0) {
        if (h->rev)
            event_free(h->rev);
        if (h->deadline)
            event_free(h->deadline);
        free(h);
        return -1;
    }
    h->next = m->conns;
    if (m->conns)
        m->conns->prev = h;
    m->conns = h;
    m->nconns++;
    return 0;
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    sluicei_metrics *m = arg;
    (void)fd;
    (void)what;
    event_add(m->listen_ev, NULL);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    sluicei_metrics *m = arg;
    (void)what;
    for (int i = 0; i < ACCEPT_BURST; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            /* The connection went away, or the network failed it (Linux
             * reports that here): the next one may do. */
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO ||
                errno == ENETDOWN || errno == ENOPROTOOPT || errno == EHOSTDOWN ||
                errno == ENONET || errno == EHOSTUNREACH || errno == EOPNOTSUPP ||
                errno == ENETUNREACH)
                continue;
            /* Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS,
             * ENOMEM...): the pending connection stays pending and the
             * listener would wake again at once; rest instead. */
            struct timeval tv = {ACCEPT_PAUSE_MS / 1000, (ACCEPT_PAUSE_MS % 1000) * 1000};
            event_del(m->listen_ev);
            evtimer_add(m->pause_ev, &tv);
            return;
        }
        if (m->nconns >= m->max_conns || conn_open(m, fd) != 0)
            refuse(fd);
    }
}

/* How many connections to serve at once: MAX_CONNS, or an eighth of the
 * file descriptor limit when that is less. */
static int conns_allowed(void)
{
    struct rlimit rl;
    int n = MAX_CONNS;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 8 < (rlim_t)n)
        n = (int)(rl.rlim_cur / 8);
    return n > 0 ? n : 1;
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

static void *server_main(void *arg)
{
    sluicei_metrics *m = arg;
    event_base_dispatch(m->base);
    return NULL;
}

static void *refresher_main(void *arg)
{
    sluicei_metrics *m = arg;
    pthread_mutex_lock(&m->lock);
    while (!m->stopping) {
        pthread_mutex_unlock(&m->lock);
        char why[sizeof m->why] = "";
        int ok = m->refresh(m->arg, why, sizeof why);
        pthread_mutex_lock(&m->lock);
        m->ready = ok != 0;
        if (ok)
            m->ready_ms = mono_ms();
        /* One line: the answer's body is this line and its newline. */
        why[strcspn(why, "\r\n")] = '\0';
        memcpy(m->why, why, sizeof why);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += m->refresh_ms / 1000;
        until.tv_nsec += (long)(m->refresh_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!m->stopping && pthread_cond_timedwait(&m->cond, &m->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

/* Frees what open() set up; the threads must have ended (or never run). */
static void release(sluicei_metrics *m)
{
    while (m->conns)
        conn_close(m->conns);
    if (m->listen_ev)
        event_free(m->listen_ev);
    if (m->pause_ev)
        event_free(m->pause_ev);
    if (m->listen_fd >= 0)
        close(m->listen_fd);
    if (m->wake_ev)
        event_free(m->wake_ev);
    if (m->base)
        event_base_free(m->base);
    for (int i = 0; i < 2; i++)
        if (m->wake[i] >= 0)
            close(m->wake[i]);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

sluice_err sluicei_metrics_open(sluicei_metrics **out, const sluicei_metrics_opts *o,
                                char *err, size_t errlen)
{
    char host[MAX_HOST], port[6];
    struct addrinfo *res = NULL;
    *out = NULL;
    if (!o->render) {
        seterr(err, errlen, "metrics server: no render callback");
        return SLUICE_ERR_INVALID;
    }
    if (split_addr("metrics address", o->addr, host, port, err, errlen) != 0 ||
        resolve("metrics address", o->addr, host, port, &res, err, errlen) != 0)
        return SLUICE_ERR_INVALID;
    int fd = listen_on(o->addr, res, err, errlen);
    freeaddrinfo(res);
    if (fd < 0)
        return SLUICE_ERR_SYS;

    sluicei_metrics *m = calloc(1, sizeof *m);
    if (!m) {
        close(fd);
        seterr(err, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    m->wake[0] = m->wake[1] = -1;
    m->listen_fd = fd;
    m->max_conns = conns_allowed();
    m->render = o->render;
    m->refresh = o->refresh;
    m->refresh_ms = o->refresh_ms > 0 ? o->refresh_ms : REFRESH_MS_DEFAULT;
    m->ready = -1;
    m->ready_max_age_ms = o->ready_max_age_ms > 0 ? o->ready_max_age_ms
                                                  : 2 * m->refresh_ms + READY_SLACK_MS;
    m->arg = o->arg;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&m->lock, NULL);

    if (pipe2(m->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        seterr(err, errlen, "metrics server: pipe: %s", strerror(errno));
        release(m);
        return SLUICE_ERR_SYS;
    }
    if (!(m->base = event_base_new()) ||
        !(m->wake_ev = event_new(m->base, m->wake[0], EV_READ, on_wake, m->base)) ||
        event_add(m->wake_ev, NULL) != 0 ||
        !(m->listen_ev = event_new(m->base, fd, EV_READ | EV_PERSIST, on_accept, m)) ||
        !(m->pause_ev = evtimer_new(m->base, on_resume, m)) ||
        event_add(m->listen_ev, NULL) != 0) {
        seterr(err, errlen, "metrics server: cannot set up the event loop");
        release(m);
        return SLUICE_ERR_SYS;
    }

    /* The threads start with every signal blocked (they inherit the mask). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&m->server, NULL, server_main, m);
    m->server_started = rc == 0;
    if (rc == 0 && m->refresh) {
        rc = pthread_create(&m->refresher, NULL, refresher_main, m);
        m->refresher_started = rc == 0;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        seterr(err, errlen, "metrics server: cannot start a thread: %s", strerror(rc));
        sluicei_metrics_close(m);
        return SLUICE_ERR_SYS;
    }
    *out = m;
    return SLUICE_OK;
}

void sluicei_metrics_close(sluicei_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    m->stopping = 1;
    pthread_cond_signal(&m->cond);
    pthread_mutex_unlock(&m->lock);
    if (m->server_started) {
        ssize_t w;
        do
            w = write(m->wake[1], "x", 1);
        while (w < 0 && errno == EINTR);
        pthread_join(m->server, NULL);
    }
    if (m->refresher_started)
        pthread_join(m->refresher, NULL);
    release(m);
}
