/* The TLS relay (tls_relay.h): one thread per process that carries the
 * bytes of every tunnel between hiredis's local socket and the TLS
 * connection, both ways, without waiting on either. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2 */
#endif

#include "tls_relay.h"
#include "url.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>

/* Rounds of a tunnel's copying before the relay turns to the others: one
 * busy tunnel does not starve the rest. */
#define PUMP_ROUNDS 8
/* How long a tunnel whose hiredis end closed keeps trying to pass on what
 * hiredis sent before (a server that reads nothing must not keep it). */
#define LINGER_MS 10000

#define seterr sluicei_seterr

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A tunnel's mu guards its SSL and its buffers: the relay holds it while
 * it looks at the tunnel or pumps it, and sluicei_tunnel_write() while it
 * writes (never while either waits). refs and dead are under relay.mu. */
typedef struct sluicei_tunnel {
    struct sluicei_tunnel *next;
    pthread_mutex_t mu;
    int refs;                     /* references from sluicei_tls_accept() */
    int dead;                     /* over: out of the relay's lists, freed with the last ref */
    SSL *ssl;
    int tls_fd, local_fd;
    short rd_want, wr_want;       /* what SSL_read, SSL_write wait for (POLLIN/POLLOUT) */
    int local_eof, tls_eof, again;
    int64_t linger_until;         /* hiredis closed, bytes still to send: give up then */
    size_t up_off, up_len;        /* hiredis to the server: bytes read, not yet sent */
    size_t down_off, down_len;    /* the server to hiredis */
    unsigned char up[SLUICEI_TLS_BUF_BYTES], down[SLUICEI_TLS_BUF_BYTES];
} tunnel;

/* The relay thread holds mu while it copies, and lets go of it only while
 * it waits in poll(): a fork() (whose prepare handler takes mu,
 * sluicei_relay_fork_prepare()) thus finds every tunnel at rest. */
static struct {
    pthread_mutex_t mu;
    int running, joinable, stop;
    pthread_t thread;
    int wake[2];                  /* a byte on it: new tunnels, or stop */
    tunnel *incoming;             /* handed over, not yet polled */
    tunnel *live;                 /* the relay thread's */
    tunnel *forsaken;             /* a fork's child: the parent's, never touched */
} relay = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake = {-1, -1}};

static void tunnel_free(tunnel *t)
{
    SSL_free(t->ssl);
    close(t->tls_fd);
    close(t->local_fd);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* A tunnel out of the relay's lists: freed now, or by the release of its
 * last reference (a writer may be in sluicei_tunnel_write(), which then
 * finds it dead). relay.mu is held. */
static void tunnel_end(tunnel *t)
{
    if (t->refs == 0) {
        tunnel_free(t);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->dead = 1;
    pthread_mutex_unlock(&t->mu);
}

/* Moves what buf holds to its front when the free room at its end is less
 * than a quarter, and what it holds no more than what was taken from its
 * front: each byte is moved at most once on average. */
static void compact(unsigned char *buf, size_t *off, size_t len)
{
    if (*off >= len && SLUICEI_TLS_BUF_BYTES - *off - len < SLUICEI_TLS_BUF_BYTES / 4) {
        memmove(buf, buf + *off, len);
        *off = 0;
    }
}

static short ssl_want(SSL *ssl, int r, int *failed)
{
    int se = SSL_get_error(ssl, r);
    if (se == SSL_ERROR_WANT_READ)
        return POLLIN;
    if (se == SSL_ERROR_WANT_WRITE)
        return POLLOUT;
    *failed = 1;
    return 0;
}

/* Copies what can be copied without waiting, both ways. Returns 1 when the
 * tunnel is over: hiredis closed its end (and what it sent is on its way),
 * or the server closed its end, or failed (and what it sent before is
 * delivered), or hiredis's end failed. */
static int pump(tunnel *t)
{
    t->again = 0;
    for (int round = 0; round < PUMP_ROUNDS; round++) {
        int progress = 0, failed = 0;
        if (!t->local_eof && t->up_off + t->up_len < SLUICEI_TLS_BUF_BYTES) {
            ssize_t n = read(t->local_fd, t->up + t->up_off + t->up_len,
                             SLUICEI_TLS_BUF_BYTES - t->up_off - t->up_len);
            if (n > 0)
                t->up_len += (size_t)n, progress = 1;
            else if (n == 0)
                t->local_eof = 1, progress = 1;
            else if (errno != EAGAIN && errno != EINTR)
                return 1;
        }
        if (t->up_len > 0 && !t->tls_eof) {
            ERR_clear_error();
            int r = SSL_write(t->ssl, t->up + t->up_off, (int)t->up_len);
            if (r > 0) {
                t->up_off += (size_t)r, t->up_len -= (size_t)r, progress = 1;
                t->wr_want = 0;
                if (t->up_len == 0)
                    t->up_off = 0;
                else
                    compact(t->up, &t->up_off, t->up_len);
            } else {
                t->wr_want = ssl_want(t->ssl, r, &failed);
                if (failed)
                    t->tls_eof = 1, progress = 1;
            }
        }
        /* SSL_read gives one record (16 KiB at most) a call: the buffer
         * is filled before hiredis's end gets it, in one write. */
        while (!t->tls_eof && t->down_off + t->down_len < SLUICEI_TLS_BUF_BYTES) {
            ERR_clear_error();
            int r = SSL_read(t->ssl, t->down + t->down_off + t->down_len,
                             (int)(SLUICEI_TLS_BUF_BYTES - t->down_off - t->down_len));
            if (r > 0) {
                t->down_len += (size_t)r, progress = 1;
                t->rd_want = POLLIN;
                continue;
            }
            t->rd_want = ssl_want(t->ssl, r, &failed);
            if (failed)
                t->tls_eof = 1, progress = 1;
            break;
        }
        if (t->local_eof) {
            /* hiredis closed: nobody reads what the server says now. */
            t->down_off = t->down_len = 0;
        } else if (t->down_len > 0) {
            ssize_t n = send(t->local_fd, t->down + t->down_off, t->down_len,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                t->down_off += (size_t)n, t->down_len -= (size_t)n, progress = 1;
                if (t->down_len == 0)
                    t->down_off = 0;
                else
                    compact(t->down, &t->down_off, t->down_len);
            } else if (errno != EAGAIN && errno != EINTR) {
                return 1;
            }
        }
        if (t->local_eof && t->up_len > 0 && !t->linger_until)
            t->linger_until = mono_ms() + LINGER_MS;
        if (t->local_eof && (t->up_len == 0 || t->tls_eof)) {
            if (!t->tls_eof) {
                /* One try at a close_notify; the server needs none. */
                ERR_clear_error();
                SSL_shutdown(t->ssl);
                ERR_clear_error();
            }
            return 1;
        }
        if (t->tls_eof && t->down_len == 0)
            return 1;
        if (!progress)
            return 0;
    }
    t->again = 1;
    return 0;
}

/* The poll() entries of t, after pump(): what each side waits for. A side
 * that waits for nothing is left out (a negative fd), so that a hang-up
 * there does not wake the relay again and again. */
static void poll_entries(const tunnel *t, struct pollfd *local, struct pollfd *tls)
{
    short lev = 0, tev = 0;
    if (!t->local_eof && t->up_off + t->up_len < SLUICEI_TLS_BUF_BYTES)
        lev |= POLLIN;
    if (t->down_len > 0)
        lev |= POLLOUT;
    if (!t->tls_eof && t->down_off + t->down_len < SLUICEI_TLS_BUF_BYTES)
        tev |= t->rd_want ? t->rd_want : POLLIN;
    if (!t->tls_eof && t->up_len > 0)
        tev |= t->wr_want ? t->wr_want : POLLOUT;
    local->fd = lev ? t->local_fd : -1;
    local->events = lev;
    local->revents = 0;
    tls->fd = tev ? t->tls_fd : -1;
    tls->events = tev;
    tls->revents = 0;
}

static void *relay_main(void *arg)
{
    (void)arg;
    struct pollfd *pf = NULL;
    tunnel **who = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&relay.mu);
    for (;;) {
        while (relay.incoming) {
            tunnel *t = relay.incoming;
            relay.incoming = t->next;
            t->next = relay.live;
            relay.live = t;
        }
        if (relay.stop || !relay.live)
            break;
        size_t n = 0;
        for (tunnel *t = relay.live; t; t = t->next)
            n++;
        if (n > cap) {
            size_t want = n * 2;
            struct pollfd *npf = realloc(pf, (1 + 2 * want) * sizeof *npf);
            if (npf)
                pf = npf;
            tunnel **nwho = npf ? realloc(who, want * sizeof *nwho) : NULL;
            if (nwho)
                who = nwho;
            if (!npf || !nwho) {
                /* No memory to watch them all: the newest tunnel goes. */
                tunnel *t = relay.live;
                relay.live = t->next;
                tunnel_free(t);
                continue;
            }
            cap = want;
        }
        pf[0].fd = relay.wake[0];
        pf[0].events = POLLIN;
        pf[0].revents = 0;
        int timeout = -1;
        int64_t now = mono_ms();
        size_t i = 0;
        for (tunnel *t = relay.live; t; t = t->next, i++) {
            who[i] = t;
            pthread_mutex_lock(&t->mu);
            poll_entries(t, &pf[1 + 2 * i], &pf[2 + 2 * i]);
            pthread_mutex_unlock(&t->mu);
            if (t->again)
                timeout = 0;
            if (t->linger_until) {
                int64_t left = t->linger_until > now ? t->linger_until - now : 0;
                if (timeout < 0 || left < timeout)
                    timeout = (int)left;
            }
        }
        pthread_mutex_unlock(&relay.mu);
        int r = poll(pf, (nfds_t)(1 + 2 * n), timeout);
        pthread_mutex_lock(&relay.mu);
        if (r < 0)
            continue;   /* EINTR */
        if (pf[0].revents) {
            char drain[64];
            while (read(relay.wake[0], drain, sizeof drain) > 0) {
            }
        }
        now = mono_ms();
        for (i = 0; i < n; i++) {
            tunnel *t = who[i];
            int lingered = t->linger_until && now >= t->linger_until;
            if (!lingered && !pf[1 + 2 * i].revents && !pf[2 + 2 * i].revents && !t->again)
                continue;
            pthread_mutex_lock(&t->mu);
            int over = lingered || pump(t);
            pthread_mutex_unlock(&t->mu);
            if (!over)
                continue;
            tunnel **pp = &relay.live;
            while (*pp != t)
                pp = &(*pp)->next;
            *pp = t->next;
            tunnel_end(t);
        }
    }
    while (relay.live) {
        tunnel *t = relay.live;
        relay.live = t->next;
        tunnel_end(t);
    }
    /* From here on this thread touches nothing shared: a new tunnel starts
     * a new thread, which joins this one first. */
    relay.running = 0;
    close(relay.wake[0]);
    close(relay.wake[1]);
    relay.wake[0] = relay.wake[1] = -1;
    pthread_mutex_unlock(&relay.mu);
    free(pf);
    free(who);
    return NULL;
}

sluice_err sluicei_relay_add(int tls_fd, int local_fd, SSL *ssl, sluicei_tunnel **ref, char *err,
                             size_t errlen)
{
    if (ref)
        *ref = NULL;
    tunnel *t = calloc(1, sizeof *t);
    if (!t || pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        SSL_free(ssl);
        close(tls_fd);
        close(local_fd);
        seterr(err, errlen, "TLS: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    t->ssl = ssl;
    t->tls_fd = tls_fd;
    t->local_fd = local_fd;
    t->rd_want = POLLIN;
    pthread_mutex_lock(&relay.mu);
    if (!relay.running) {
        if (relay.joinable) {
            /* It has let go of everything shared: joining it cannot wait on us. */
            pthread_join(relay.thread, NULL);
            relay.joinable = 0;
        }
        int rc = 0;
        if (pipe2(relay.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
            rc = errno;
        } else {
            /* Signals go to the program's own threads, never to the relay. */
            sigset_t all, old;
            sigfillset(&all);
            pthread_sigmask(SIG_SETMASK, &all, &old);
            rc = pthread_create(&relay.thread, NULL, relay_main, NULL);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            if (rc != 0) {
                close(relay.wake[0]);
                close(relay.wake[1]);
                relay.wake[0] = relay.wake[1] = -1;
            }
        }
        if (rc != 0) {
            pthread_mutex_unlock(&relay.mu);
            tunnel_free(t);
            seterr(err, errlen, "TLS: starting the relay thread: %s", strerror(rc));
            return SLUICE_ERR_SYS;
        }
        relay.running = relay.joinable = 1;
    }
    t->next = relay.incoming;
    relay.incoming = t;
    if (ref) {
        t->refs = 1;
        *ref = t;
    }
    ssize_t w = write(relay.wake[1], "", 1);
    (void)w;   /* full: a wake-up is pending anyway */
    pthread_mutex_unlock(&relay.mu);
    return SLUICE_OK;
}

int sluicei_tunnel_tcp_fd(const sluicei_tunnel *t)
{
    return t->tls_fd;
}

void sluicei_tunnel_release(sluicei_tunnel *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&relay.mu);
    if (--t->refs == 0 && t->dead)
        tunnel_free(t);
    pthread_mutex_unlock(&relay.mu);
}

/* One step of sluicei_tunnel_write(), t->mu held: takes in what hiredis
 * wrote before, then buf (*left bytes of it still out) when there is room,
 * and hands the server what the buffer holds. Returns 1 when nothing is
 * left to hand over, 0 when the TLS socket has no room now (*want: what
 * to poll for), -1 when the tunnel is over or failed. */
static int write_step(tunnel *t, const unsigned char **buf, size_t *left, short *want)
{
    if (t->dead || t->tls_eof || t->local_eof)
        return -1;
    while (t->up_off + t->up_len < SLUICEI_TLS_BUF_BYTES) {
        ssize_t n = read(t->local_fd, t->up + t->up_off + t->up_len,
                         SLUICEI_TLS_BUF_BYTES - t->up_off - t->up_len);
        if (n > 0)
            t->up_len += (size_t)n;
        else if (n < 0 && errno == EAGAIN)
            break;
        else if (n == 0 || errno != EINTR)
            return -1;   /* hiredis's end closed or failed: the relay ends the tunnel */
    }
    size_t room = SLUICEI_TLS_BUF_BYTES - t->up_off - t->up_len;
    if (*left > 0 && room < *left && t->up_off > 0) {
        memmove(t->up, t->up + t->up_off, t->up_len);
        t->up_off = 0;
        room = SLUICEI_TLS_BUF_BYTES - t->up_len;
    }
    if (*left > 0 && room >= *left) {
        memcpy(t->up + t->up_off + t->up_len, *buf, *left);
        t->up_len += *left;
        *buf += *left;
        *left = 0;
    }
    while (t->up_len > 0) {
        int failed = 0;
        ERR_clear_error();
        int r = SSL_write(t->ssl, t->up + t->up_off, (int)t->up_len);
        if (r <= 0) {
            *want = ssl_want(t->ssl, r, &failed);
            t->wr_want = *want;
            if (failed) {
                t->tls_eof = 1;
                return -1;
            }
            return 0;
        }
        t->up_off += (size_t)r, t->up_len -= (size_t)r;
        t->wr_want = 0;
    }
    t->up_off = 0;
    if (*left > 0) {
        *want = POLLOUT;
        return 0;   /* buf did not fit before the buffer emptied: again */
    }
    return 1;
}

/* Makes the relay compute what it waits for again. */
static void relay_wake(void)
{
    pthread_mutex_lock(&relay.mu);
    if (relay.running && relay.wake[1] >= 0) {
        ssize_t w = write(relay.wake[1], "", 1);
        (void)w;   /* full: a wake-up is pending anyway */
    }
    pthread_mutex_unlock(&relay.mu);
}

int sluicei_tunnel_write(sluicei_tunnel *t, const void *buf, size_t len, int64_t deadline_ms)
{
    const unsigned char *p = buf;
    size_t left = len;
    int woke = 0;
    for (;;) {
        short want = POLLOUT;
        pthread_mutex_lock(&t->mu);
        int r = write_step(t, &p, &left, &want);
        pthread_mutex_unlock(&t->mu);
        if (r != 0)
            return r > 0 ? 0 : -1;
        /* The TLS socket is full: bytes wait in the buffer, which the
         * relay, told so, also sends when room comes (whoever finds it
         * first), even once this call has given up. */
        if (!woke) {
            relay_wake();
            woke = 1;
        }
        int64_t wait = deadline_ms - mono_ms();
        if (wait <= 0)
            return -1;
        struct pollfd pfd = {.fd = t->tls_fd, .events = want};
        if (poll(&pfd, 1, wait > 100 ? 100 : (int)wait) < 0 && errno != EINTR)
            return -1;
    }
}


/* ---- fork and exit ---------------------------------------------------- */

void sluicei_relay_fork_prepare(void)
{
    pthread_mutex_lock(&relay.mu);
}

void sluicei_relay_fork_parent(void)
{
    pthread_mutex_unlock(&relay.mu);
}

/* The child has no relay thread. Its copies of the tunnels' sockets are
 * closed, so that the parent's connections end when the parent closes
 * them; their memory is left alone (freeing an SSL may take a lock of
 * OpenSSL that another thread of the parent held at the fork). */
void sluicei_relay_fork_child(void)
{
    tunnel **ends[2] = {&relay.live, &relay.incoming};
    for (int k = 0; k < 2; k++)
        while (*ends[k]) {
            tunnel *t = *ends[k];
            *ends[k] = t->next;
            close(t->tls_fd);
            close(t->local_fd);
            t->next = relay.forsaken;
            relay.forsaken = t;
        }
    if (relay.wake[0] >= 0) {
        close(relay.wake[0]);
        close(relay.wake[1]);
    }
    relay.wake[0] = relay.wake[1] = -1;
    relay.running = relay.joinable = 0;
    pthread_mutex_unlock(&relay.mu);
}

void sluicei_relay_stop(void)
{
    pthread_mutex_lock(&relay.mu);
    relay.stop = 1;
    if (relay.running) {
        ssize_t w = write(relay.wake[1], "", 1);
        (void)w;
    }
    int join = relay.joinable;
    relay.joinable = 0;
    pthread_mutex_unlock(&relay.mu);
    if (join)
        pthread_join(relay.thread, NULL);
}
