/* A small Prometheus endpoint: /metrics, /healthz and /readyz over HTTP/1.x,
 * served by a thread of its own with its own event_base, so that a
 * synchronous program (sluice-producer, sluice-ctl metrics) can publish
 * figures without an event loop of its own. Internal; linked into
 * sluice-producer and sluice-ctl, not into libsluice.
 *
 * Limits (docs/OBSERVE.md): at most 32 connections at once (an eighth of
 * the fd limit if that is less; one more gets 503 and is closed), 8 KiB of
 * request headers (431), 10 s per connection from accept to the end of
 * its answer, one request per connection.
 *
 *     sluicei_metrics_opts o = { .addr = "127.0.0.1:9100", .render = render,
 *                                .refresh = refresh, .refresh_ms = 1000,
 *                                .arg = &state };
 *     sluicei_metrics *m;
 *     if (sluicei_metrics_open(&m, &o, err, sizeof err) != SLUICE_OK) ...
 *     ... the program runs; scrapes call render() in the server thread ...
 *     sluicei_metrics_close(m);
 *
 * /healthz answers 200 while the server thread serves (liveness). /readyz
 * answers 200 only while the last refresh said ready and ended within
 * ready_max_age_ms, else 503 with a one-line reason; without a refresh
 * callback there is nothing to be ready for and it answers as /healthz.
 *
 * Threads: render() runs in the server thread on every GET /metrics; it must
 * only read state that is safe to read from another thread (atomics, or a
 * snapshot under the caller's mutex) and must not block: no Redis call.
 * refresh(), when given, runs in a third thread every refresh_ms (first at
 * once), where blocking work belongs (a synchronous Redis connection owned
 * by that thread). Both threads block every signal, so that SIGINT and
 * SIGTERM reach the program's main thread. */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H

#include <sluice/common.h>

#include <stddef.h>

/* ---- Prometheus text (exposition format 0.0.4) ---------------------------
 *
 * A growable text buffer. Appends never fail visibly: out of memory marks
 * the text as failed (sluicei_mtext_failed) and later appends do nothing. */
typedef struct sluicei_mtext {
    char *buf;       /* owned; NUL-terminated when len > 0 */
    size_t len, cap;
    int failed;      /* an allocation failed: the text is incomplete */
} sluicei_mtext;

/* Frees the buffer and zeroes t (which may then be reused). */
void sluicei_mtext_free(sluicei_mtext *t);
/* Appends n raw bytes. */
void sluicei_mtext_raw(sluicei_mtext *t, const char *s, size_t n);
/* Writes a metric family's "# HELP name help" and "# TYPE name type"
 * lines; type is "counter" or "gauge". help is one line of plain text. */
void sluicei_mtext_family(sluicei_mtext *t, const char *name, const char *type,
                          const char *help);
/* Writes one sample line: name{k1="v1",k2="v2"} value. labels is a
 * NULL-terminated list of key, value pairs (NULL: no labels); a pair whose
 * value is NULL is left out. Label values are escaped (\\, \", \n). Values
 * that are integers below 2^53 are written as integers, others in the
 * shortest form that reads back exactly; NaN and infinities as Prometheus
 * spells them. */
void sluicei_mtext_sample(sluicei_mtext *t, const char *name, const char *const *labels,
                          double value);

/* ---- the server ----------------------------------------------------------- */

typedef struct sluicei_metrics sluicei_metrics;

/* Appends the body of one /metrics answer to out (server thread). */
typedef void (*sluicei_metrics_render_fn)(sluicei_mtext *out, void *arg);
/* Periodic work (refresher thread). Returns 1 when the program is ready
 * (what it serves reflects a working source: Redis answered, the queue
 * exists), else 0 with why in one line ("queue 'q' does not exist"),
 * what /readyz answers until the next refresh. */
typedef int (*sluicei_metrics_refresh_fn)(void *arg, char *why, size_t whylen);

typedef struct sluicei_metrics_opts {
    const char *addr;                   /* HOST:PORT, [V6]:PORT or :PORT (127.0.0.1) */
    sluicei_metrics_render_fn render;   /* required */
    sluicei_metrics_refresh_fn refresh; /* optional */
    int refresh_ms;                     /* 0: 1000 */
    int ready_max_age_ms;               /* /readyz: 503 once the last refresh that said
                                           ready is older; 0: 2 x refresh_ms + 2000 */
    void *arg;                          /* passed to both; owned by the caller */
} sluicei_metrics_opts;

/* Checks the form of a listen address without binding: HOST:PORT with a
 * port in 1..65535 and a host that resolves. On failure writes why to err
 * ("--metrics-addr 'x:99999': port '99999' is not in 1..65535") using
 * flag in the message, and returns SLUICE_ERR_INVALID. */
sluice_err sluicei_metrics_addr_check(const char *flag, const char *addr, char *err,
                                      size_t errlen);

/* Binds o->addr, starts the server thread and, with o->refresh, the
 * refresher. On SLUICE_OK *out is the running server, owned by the caller
 * until sluicei_metrics_close(). On failure *out is NULL and err says why
 * in one line: SLUICE_ERR_INVALID for a malformed or unresolvable address,
 * SLUICE_ERR_SYS when the address cannot be bound (in use, not local,
 * permission) or a thread cannot start. */
sluice_err sluicei_metrics_open(sluicei_metrics **out, const sluicei_metrics_opts *o,
                                char *err, size_t errlen);

/* Stops both threads (a refresh in progress is waited for; connections
 * still open are closed), closes the socket and frees m.
 * After it returns neither callback runs again. NULL is a no-op. */
void sluicei_metrics_close(sluicei_metrics *m);

#endif
