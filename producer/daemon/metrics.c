/* sluice-producer's --metrics-addr endpoint: Prometheus text on /metrics
 * (metrics.h serves it). The producer's own counters come from the
 * producer API; the queue's gauges, and the counters this producer last
 * published, from Redis through the library (gauges.h). */
#include "daemon.h"

#include "cluster.h"
#include "gauges.h"
#include "metrics.h"
#include "wire.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* What --metrics-addr serves, shared by three threads. The main thread
 * stores the producer's counters after every push and task
 * (metrics_publish()); the server thread renders them on a scrape; the
 * refresher thread reads, on a Redis connection of its own (through
 * sluicei_queue_gauges_read()), the queue's depth and budgets and the
 * counters this producer published in pstats:<id>. Those matter while a
 * push waits for room: the wait happens inside the producer API, which
 * keeps counting (its pipelined pushes complete; the wait grows) and
 * publishes every second, but does not return to us until room comes. A
 * counter is served as the larger of the two readings: both count the
 * same thing, one of them late. */
struct pmetrics {
    const char *url, *queue;
    char id[SLUICE_MAX_PRODUCER_ID + 1];
    atomic_int id_set;                   /* id is written (release/acquire) */
    _Atomic uint64_t local[SLUICEI_PSTAT_COUNT];       /* from the API after each push and task */
    _Atomic uint64_t published[SLUICEI_PSTAT_COUNT];   /* pstats:<id> as last read */
    _Atomic uint64_t full_waits, reconnects;
    _Atomic int64_t depth, qbytes, max_batches, max_bytes;   /* -1: not read yet */
    atomic_int redis_up;                 /* the last refresh reached Redis */
    /* Refresher thread only; closed by metrics_close() after the thread
     * ended. */
    sluicei_router *router;
    int nparts;                          /* the queue's partitions (0: plain); -1: not known */
    sluicei_metrics *server;             /* the HTTP server and its threads */
};

void metrics_publish(pmetrics *pm, sluice_producer *p)
{
    if (!pm || !p)
        return;
    sluice_producer_stats st;
    sluice_producer_stats_get(p, &st);
    uint64_t v[SLUICEI_PSTAT_COUNT];
    v[SLUICEI_PSTAT_BATCHES] = st.batches;
    v[SLUICEI_PSTAT_BYTES] = st.bytes;
    v[SLUICEI_PSTAT_BLOCKED_US] = st.blocked_us;
    v[SLUICEI_PSTAT_DUPLICATES] = st.duplicates;
    v[SLUICEI_PSTAT_TASKS_DONE] = st.tasks_done;
    v[SLUICEI_PSTAT_TASKS_FAILED] = st.tasks_failed;
    for (int i = 0; i < SLUICEI_PSTAT_COUNT; i++)
        atomic_store(&pm->local[i], v[i]);
    atomic_store(&pm->full_waits, st.full_waits);
    atomic_store(&pm->reconnects, st.reconnects);
}

/* Refresher thread, every METRICS_REFRESH_MS: the queue's depth, bytes and
 * budgets, and this producer's published counters (a partitioned queue:
 * the sums over its partitions). A failure only shows as
 * sluice_producer_metrics_redis_up 0 and on /readyz (the return value):
 * the producer itself reports what is wrong with Redis. */
static int pm_refresh(void *arg, char *why, size_t whylen)
{
    pmetrics *pm = arg;
    char err[512];
    int64_t deadline = sluicei_now_ms() + METRICS_REDIS_TIMEOUT_MS;
    if (!pm->router &&
        sluicei_router_open(&pm->router, pm->url, METRICS_REDIS_TIMEOUT_MS,
                            METRICS_REDIS_TIMEOUT_MS, err, sizeof err) != SLUICE_OK) {
        atomic_store(&pm->redis_up, 0);
        snprintf(why, whylen, "Redis: %s", err);
        return 0;
    }
    const char *id = atomic_load_explicit(&pm->id_set, memory_order_acquire) ? pm->id : NULL;
    sluicei_queue_gauges g;
    sluice_err e = sluicei_queue_gauges_read(pm->router, pm->queue, pm->nparts, id, deadline, &g,
                                             &pm->nparts, err, sizeof err);
    int ok = e == SLUICE_OK;
    if (ok) {
        for (int i = 0; i < SLUICEI_PSTAT_COUNT; i++)
            if (g.published[i] > atomic_load(&pm->published[i]))
                atomic_store(&pm->published[i], g.published[i]);
        atomic_store(&pm->max_batches, g.max_batches);
        atomic_store(&pm->max_bytes, g.max_bytes);
        atomic_store(&pm->depth, g.depth);
        atomic_store(&pm->qbytes, g.bytes < 0 ? 0 : g.bytes);
    }
    atomic_store(&pm->redis_up, ok);
    /* A queue's meta always holds its budget: none, no queue (deleted,
     * or not created yet). Its partitions are looked up again next time:
     * it may come back with another number. */
    if (e == SLUICE_ERR_NOQUEUE || (ok && g.max_batches < 0)) {
        pm->nparts = -1;
        snprintf(why, whylen, "queue '%s' does not exist", pm->queue);
        return 0;
    }
    if (!ok)
        snprintf(why, whylen, "Redis: %s", err[0] ? err : sluice_strerror(e));
    return ok;
}

/* Server thread, on each scrape: atomics only. */
static void pm_render(sluicei_mtext *t, void *arg)
{
    pmetrics *pm = arg;
    const char *id = atomic_load_explicit(&pm->id_set, memory_order_acquire) ? pm->id : NULL;
    const char *const lab[] = {"queue", pm->queue, "producer", id, NULL};
    double v[SLUICEI_PSTAT_COUNT];
    for (int i = 0; i < SLUICEI_PSTAT_COUNT; i++) {
        uint64_t a = atomic_load(&pm->local[i]), b = atomic_load(&pm->published[i]);
        v[i] = (double)(a > b ? a : b);
    }
    const struct {
        const char *name, *type, *help;
        double v;
    } rows[] = {
        {"sluice_producer_batches_pushed_total", "counter",
         "Batches this producer stored in the queue (pushes dropped as duplicates not counted).",
         v[SLUICEI_PSTAT_BATCHES]},
        {"sluice_producer_bytes_pushed_total", "counter",
         "Frame bytes of the batches this producer stored in the queue.", v[SLUICEI_PSTAT_BYTES]},
        {"sluice_producer_duplicates_total", "counter",
         "Pushes Redis dropped because the batch id was queued or acknowledged already.",
         v[SLUICEI_PSTAT_DUPLICATES]},
        {"sluice_producer_backpressure_seconds_total", "counter",
         "Seconds this producer waited for room in the queue (backpressure: the consumers are "
         "slower).",
         v[SLUICEI_PSTAT_BLOCKED_US] / 1e6},
        {"sluice_producer_backpressure_waits_total", "counter",
         "Pushes that found the queue at its budget and waited for room.",
         (double)atomic_load(&pm->full_waits)},
        {"sluice_producer_tasks_done_total", "counter", "Tasks of the job this producer completed.",
         v[SLUICEI_PSTAT_TASKS_DONE]},
        {"sluice_producer_tasks_failed_total", "counter",
         "Task attempts of this producer that failed (reader, command or transform error).",
         v[SLUICEI_PSTAT_TASKS_FAILED]},
        {"sluice_producer_reconnects_total", "counter",
         "Times this producer regained a lost Redis connection.",
         (double)atomic_load(&pm->reconnects)},
        {"sluice_producer_metrics_redis_up", "gauge",
         "1 when the metrics thread's last read of the queue from Redis succeeded, else 0.",
         (double)atomic_load(&pm->redis_up)},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        sluicei_mtext_family(t, rows[i].name, rows[i].type, rows[i].help);
        sluicei_mtext_sample(t, rows[i].name, lab, rows[i].v);
    }
    /* The queue's figures, read from Redis every second (none until the
     * first read succeeded). Labelled by queue only: every producer of the
     * queue reports the same values. */
    const char *const qlab[] = {"queue", pm->queue, NULL};
    const struct {
        const char *name, *help;
        int64_t v;
    } gauges[] = {
        {"sluice_queue_depth_batches",
         "Batches the queue holds (queued or delivered, not yet acknowledged).",
         atomic_load(&pm->depth)},
        {"sluice_queue_max_batches", "The queue's batch budget.", atomic_load(&pm->max_batches)},
        {"sluice_queue_bytes", "Frame bytes the queue holds.", atomic_load(&pm->qbytes)},
        {"sluice_queue_max_bytes", "The queue's byte budget.", atomic_load(&pm->max_bytes)},
    };
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
        sluicei_mtext_family(t, gauges[i].name, "gauge", gauges[i].help);
        if (gauges[i].v >= 0)
            sluicei_mtext_sample(t, gauges[i].name, qlab, (double)gauges[i].v);
    }
}

sluice_err metrics_open(pmetrics **out, const config *cf, char *err, size_t errlen)
{
    *out = NULL;
    pmetrics *pm = calloc(1, sizeof *pm);
    if (!pm) {
        snprintf(err, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    pm->url = cf->url;
    pm->queue = cf->queue;
    pm->nparts = -1;
    atomic_init(&pm->depth, -1);
    atomic_init(&pm->qbytes, -1);
    atomic_init(&pm->max_batches, -1);
    atomic_init(&pm->max_bytes, -1);
    sluicei_metrics_opts mo = {.addr = cf->metrics_addr, .render = pm_render,
                               .refresh = pm_refresh, .refresh_ms = METRICS_REFRESH_MS,
                               .ready_max_age_ms = METRICS_READY_MAX_AGE_MS, .arg = pm};
    sluice_err e = sluicei_metrics_open(&pm->server, &mo, err, errlen);
    if (e != SLUICE_OK) {
        free(pm);
        return e;
    }
    *out = pm;
    return SLUICE_OK;
}

void metrics_set_id(pmetrics *pm, const char *id)
{
    if (!pm)
        return;
    snprintf(pm->id, sizeof pm->id, "%s", id);
    atomic_store_explicit(&pm->id_set, 1, memory_order_release);
}

void metrics_close(pmetrics *pm)
{
    if (!pm)
        return;
    /* The threads end before what they read goes. */
    sluicei_metrics_close(pm->server);
    sluicei_router_close(pm->router);
    free(pm);
}
