/* The Prometheus endpoint of metrics.h: text writer, address checks, and
 * an evhttp server on a thread of its own.
 *
 * Stopping: the server thread's event_base watches the read end of a pipe;
 * close() writes a byte to it, which breaks the loop from inside (a plain
 * event_base_loopbreak() from another thread would need libevent's
 * evthread locking, i.e. global state). The refresher sleeps on a
 * condition variable that close() signals. */
#include "metrics.h"

#include <event2/event.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

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
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define REFRESH_MS_DEFAULT 1000
#define LISTEN_BACKLOG 64
/* A scrape that has not sent its request within this long is dropped. */
#define HTTP_TIMEOUT_S 10
#define MAX_HEADERS_BYTES 8192
#define MAX_HOST 256

struct sluicei_metrics {
    struct event_base *base;      /* used only by the server thread once it runs */
    struct evhttp *http;
    struct event *wake_ev;
    int wake[2];                  /* pipe: close() writes, the server thread stops */
    pthread_t server, refresher;
    int server_started, refresher_started;

    pthread_mutex_t lock;         /* guards stopping, for the refresher's sleep */
    pthread_cond_t cond;
    int stopping;

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

/* Splits addr into host (empty: every address) and port, checking the
 * form. Returns 0, or -1 with err set. */
static int split_addr(const char *flag, const char *addr, char *host, char *port,
                      char *err, size_t errlen)
{
    const char *colon;
    size_t hlen;
    const char *h = addr;
    if (!addr || !*addr) {
        seterr(err, errlen, "%s needs HOST:PORT (e.g. 0.0.0.0:9100)", flag);
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
            seterr(err, errlen, "%s '%s' has no port: give HOST:PORT (e.g. 0.0.0.0:9100)",
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
    int rc = getaddrinfo(*host ? host : NULL, port, &hints, res);
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

static void on_request(struct evhttp_request *req, void *arg)
{
    sluicei_metrics *m = arg;
    const char *uri = evhttp_request_get_uri(req);
    size_t plen = strcspn(uri, "?#");
    struct evbuffer *body = evhttp_request_get_output_buffer(req);
    struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
    if (plen == 8 && strncmp(uri, "/metrics", 8) == 0) {
        sluicei_mtext t = {0};
        m->render(&t, m->arg);
        if (t.failed) {
            sluicei_mtext_free(&t);
            evbuffer_add_printf(body, "out of memory\n");
            evhttp_add_header(hdr, "Content-Type", "text/plain; charset=utf-8");
            evhttp_send_reply(req, 500, "Internal Server Error", body);
            return;
        }
        evbuffer_add(body, t.buf ? t.buf : "", t.len);
        sluicei_mtext_free(&t);
        evhttp_add_header(hdr, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
        evhttp_send_reply(req, 200, "OK", body);
    } else if (plen == 8 && strncmp(uri, "/healthz", 8) == 0) {
        evbuffer_add_printf(body, "ok\n");
        evhttp_add_header(hdr, "Content-Type", "text/plain; charset=utf-8");
        evhttp_send_reply(req, 200, "OK", body);
    } else {
        evbuffer_add_printf(body, "not found: try /metrics or /healthz\n");
        evhttp_add_header(hdr, "Content-Type", "text/plain; charset=utf-8");
        evhttp_send_reply(req, 404, "Not Found", body);
    }
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
        m->refresh(m->arg);
        pthread_mutex_lock(&m->lock);
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
    if (m->http)
        evhttp_free(m->http);   /* closes the listening socket and open connections */
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
    m->render = o->render;
    m->refresh = o->refresh;
    m->refresh_ms = o->refresh_ms > 0 ? o->refresh_ms : REFRESH_MS_DEFAULT;
    m->arg = o->arg;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&m->lock, NULL);

    if (pipe2(m->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        seterr(err, errlen, "metrics server: pipe: %s", strerror(errno));
        close(fd);
        release(m);
        return SLUICE_ERR_SYS;
    }
    if (!(m->base = event_base_new()) || !(m->http = evhttp_new(m->base)) ||
        !(m->wake_ev = event_new(m->base, m->wake[0], EV_READ, on_wake, m->base)) ||
        event_add(m->wake_ev, NULL) != 0) {
        seterr(err, errlen, "metrics server: cannot set up the event loop");
        close(fd);
        release(m);
        return SLUICE_ERR_SYS;
    }
    if (!evhttp_accept_socket_with_handle(m->http, fd)) {
        seterr(err, errlen, "metrics server: cannot accept on %s", o->addr);
        close(fd);
        release(m);
        return SLUICE_ERR_SYS;
    }
    evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_timeout(m->http, HTTP_TIMEOUT_S);
    evhttp_set_max_headers_size(m->http, MAX_HEADERS_BYTES);
    evhttp_set_max_body_size(m->http, 0);
    evhttp_set_gencb(m->http, on_request, m);

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
