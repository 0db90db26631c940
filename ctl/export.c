/* sluice-ctl metrics: a queue's figures (depth, budgets, counters, epochs,
 * tasks, every producer and consumer; a partitioned queue's sums and its
 * partitions) in Prometheus text, served over HTTP by common/cli/metrics.c
 * and refreshed from Redis by its thread. */
#include "ctl.h"
#include "metrics.h"

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A counter or gauge of a peer's published stats (pstats:/cstats:). */
typedef struct peer_metric {
    const char *field;      /* in the stats hash */
    const char *name, *type, *help;
    double scale;           /* value = field * scale */
} peer_metric;

static const peer_metric consumer_metrics[] = {
    {"batches", "sluice_consumer_batches_total", "counter",
     "Batches next() returned to this consumer's application.", 1},
    {"records", "sluice_consumer_records_total", "counter", "Records in those batches.", 1},
    {"bytes", "sluice_consumer_bytes_total", "counter", "Frame bytes of those batches.", 1},
    {"blocked_us", "sluice_consumer_blocked_seconds_total", "counter",
     "Seconds the application waited inside next() for a batch (high: the input pipeline "
     "is the bottleneck).", 1e-6},
    {"redelivered", "sluice_consumer_redelivered_total", "counter",
     "Batches this consumer got that had been delivered before (a consumer's lease expired).",
     1},
    {"duplicates", "sluice_consumer_duplicates_total", "counter",
     "Batches this consumer dropped because it had them already.", 1},
    {"padding", "sluice_consumer_padding_total", "counter",
     "Padding batches returned (coordinated queue, remainder pad).", 1},
    {"invalid", "sluice_consumer_invalid_total", "counter",
     "Frames that failed validation and went to the dead letters.", 1},
    {"reconnects", "sluice_consumer_reconnects_total", "counter",
     "Times this consumer regained a lost Redis connection.", 1},
    {"epochs_ended", "sluice_consumer_epochs_ended_total", "counter",
     "Ends of epochs this consumer returned (SLUICE_EOF).", 1},
    {"epoch", "sluice_consumer_epoch", "gauge", "The epoch this consumer is reading.", 1},
};

static const peer_metric producer_metrics[] = {
    {"batches", "sluice_producer_batches_pushed_total", "counter",
     "Batches this producer stored in the queue (pushes dropped as duplicates not counted).", 1},
    {"bytes", "sluice_producer_bytes_pushed_total", "counter",
     "Frame bytes of the batches this producer stored in the queue.", 1},
    {"duplicates", "sluice_producer_duplicates_total", "counter",
     "Pushes Redis dropped because the batch id was queued or acknowledged already.", 1},
    {"blocked_us", "sluice_producer_backpressure_seconds_total", "counter",
     "Seconds this producer waited for room in the queue (backpressure: the consumers are "
     "slower).", 1e-6},
    {"tasks_done", "sluice_producer_tasks_done_total", "counter",
     "Tasks of the job this producer completed.", 1},
    {"tasks_failed", "sluice_producer_tasks_failed_total", "counter",
     "Task attempts of this producer that failed (reader, command or transform error).", 1},
};

/* The labels of a peer: queue, producer=<id> or consumer=<cid> and, for a
 * consumer of a coordinated queue, rank. */
static void peer_labels(const char **lab, const qinfo *in, const peer *p, int producer)
{
    lab[0] = "queue";
    lab[1] = in->q;
    lab[2] = producer ? "producer" : "consumer";
    lab[3] = p->id;
    lab[4] = "rank";
    lab[5] = producer ? NULL : p->extra;
    lab[6] = NULL;
}

static void peers_metrics(sluicei_mtext *t, const qinfo *in, int producer)
{
    const peer *ps = producer ? in->prod : in->cons;
    size_t n = producer ? in->nprod : in->ncons;
    const char *kind = producer ? "producer" : "consumer";
    const peer_metric *pm = producer ? producer_metrics : consumer_metrics;
    size_t npm = producer ? sizeof producer_metrics / sizeof producer_metrics[0]
                          : sizeof consumer_metrics / sizeof consumer_metrics[0];
    const char *lab[7];
    char name[64], help[160];
    snprintf(name, sizeof name, "sluice_%s_alive", kind);
    snprintf(help, sizeof help, "1 while this %s was seen within the queue's lease.", kind);
    sluicei_mtext_family(t, name, "gauge", help);
    for (size_t i = 0; i < n; i++) {
        peer_labels(lab, in, &ps[i], producer);
        sluicei_mtext_sample(t, name, lab, ps[i].seen_ago_ms <= in->lease_ms);
    }
    snprintf(name, sizeof name, "sluice_%s_last_seen_age_seconds", kind);
    snprintf(help, sizeof help,
             "Seconds since this %s last showed it is alive (heartbeat, take or claim).", kind);
    sluicei_mtext_family(t, name, "gauge", help);
    for (size_t i = 0; i < n; i++) {
        peer_labels(lab, in, &ps[i], producer);
        sluicei_mtext_sample(t, name, lab, (double)ps[i].seen_ago_ms / 1000.0);
    }
    if (!producer) {
        sluicei_mtext_family(t, "sluice_consumer_pending_batches", "gauge",
                             "Batches delivered to this consumer and not acknowledged yet.");
        for (size_t i = 0; i < n; i++) {
            peer_labels(lab, in, &ps[i], producer);
            sluicei_mtext_sample(t, "sluice_consumer_pending_batches", lab,
                                 (double)ps[i].pending);
        }
    }
    /* Those that left: how many, and their counters added up in one
     * series per counter (label left="1" instead of the id), so that a
     * sum over a family does not drop when a peer leaves. */
    const ctl_fields *gone = producer ? &in->pgone : &in->cgone;
    const char *const ql[] = {"queue", in->q, NULL};
    const char *const gl[] = {"queue", in->q, "left", "1", NULL};
    snprintf(name, sizeof name, "sluice_%ss_left", kind);
    snprintf(help, sizeof help, "%s that left the queue's registry (closed, or silent for a "
             "lease).", producer ? "Producers" : "Consumers");
    sluicei_mtext_family(t, name, "gauge", help);
    sluicei_mtext_sample(t, name, ql, (double)ctl_fields_num(gone, "left"));
    for (size_t m = 0; m < npm; m++) {
        sluicei_mtext_family(t, pm[m].name, pm[m].type, pm[m].help);
        for (size_t i = 0; i < n; i++) {
            const char *v = ctl_fields_get(&ps[i].stats, pm[m].field);
            if (!v)
                continue;   /* not published (yet) */
            peer_labels(lab, in, &ps[i], producer);
            sluicei_mtext_sample(t, pm[m].name, lab, (double)ctl_num(v) * pm[m].scale);
        }
        if (strcmp(pm[m].type, "counter") == 0 && ctl_fields_get(gone, "left"))
            sluicei_mtext_sample(t, pm[m].name, gl,
                                 (double)ctl_fields_num(gone, pm[m].field) * pm[m].scale);
    }
}

/* Counters of the stats hash and their metrics. */
static const struct {
    const char *field, *name, *help;
} queue_counters[] = {
    {"pushed", "sluice_queue_pushed_total", "Batches stored in the queue by all producers."},
    {"pushed_bytes", "sluice_queue_pushed_bytes_total", "Frame bytes of those batches."},
    {"acked", "sluice_queue_acked_total", "Batches acknowledged by the consumers."},
    {"acked_bytes", "sluice_queue_acked_bytes_total", "Frame bytes of those batches."},
    {"requeued", "sluice_queue_requeued_total",
     "Batches handed back to the queue (a consumer closed or its lease expired)."},
    {"dead", "sluice_queue_dead_total", "Batches moved to the dead letters."},
    {"dup_dropped", "sluice_queue_dup_dropped_total",
     "Pushes dropped because the batch was queued or acknowledged already."},
    {"tasks_done", "sluice_queue_tasks_done_total", "Tasks of jobs completed."},
    {"tasks_reaped", "sluice_queue_tasks_reaped_total",
     "Tasks taken back from producers whose lease expired."},
};

/* Per partition of a partitioned queue: what it holds against its
 * budgets (families of their own, so that sums over the queue's series
 * do not count anything twice). */
static void partition_metrics(sluicei_mtext *t, const qview *v)
{
    const struct {
        const char *name, *help;
        size_t off;       /* of a long long in qinfo */
    } gauges[] = {
        {"sluice_partition_depth_batches",
         "Batches the partition holds (queued or delivered, not yet acknowledged).",
         offsetof(qinfo, held)},
        {"sluice_partition_max_batches", "The partition's batch budget.",
         offsetof(qinfo, max_batches)},
        {"sluice_partition_bytes", "Frame bytes the partition holds.", offsetof(qinfo, bytes)},
        {"sluice_partition_max_bytes", "The partition's byte budget.", offsetof(qinfo, max_bytes)},
        {"sluice_partition_ready_batches", "Batches of the partition waiting to be taken.",
         offsetof(qinfo, ready)},
        {"sluice_partition_delivered_batches",
         "Batches of the partition delivered to consumers and not acknowledged yet.",
         offsetof(qinfo, pending)},
        {"sluice_partition_dead_letters", "Batches in the partition's dead-letter list now.",
         offsetof(qinfo, dead)},
    };
    if (!v->partitions)
        return;
    sluicei_mtext_family(t, "sluice_queue_partitions", "gauge", "Partitions of the queue.");
    const char *const ql[] = {"queue", v->all.q, NULL};
    sluicei_mtext_sample(t, "sluice_queue_partitions", ql, v->partitions);
    for (size_t g = 0; g < sizeof gauges / sizeof gauges[0]; g++) {
        sluicei_mtext_family(t, gauges[g].name, "gauge", gauges[g].help);
        for (int p = 0; p < v->partitions; p++) {
            const qinfo *in = &v->part[p];
            char ps[16];
            long long val;
            snprintf(ps, sizeof ps, "%d", p);
            const char *const l[] = {"queue", v->all.q, "partition", ps, NULL};
            memcpy(&val, (const char *)in + gauges[g].off, sizeof val);
            sluicei_mtext_sample(t, gauges[g].name, l, (double)val);
        }
    }
}

/* Epochs exported around the open one: this many ended epochs before
 * it, and up to this many after it that have started (producers run
 * ahead of the trainers). */
#define EXPORT_EPOCHS_AROUND 3

/* The epochs whose sluice_epoch_* series are exported: [*lo, *hi), the
 * open epoch (the lowest whose end is not posted), the
 * EXPORT_EPOCHS_AROUND before it and as many after it; of those after it
 * only the started ones (epoch_shown). A finished job: its last
 * EXPORT_EPOCHS_AROUND epochs. So at most 2 x EXPORT_EPOCHS_AROUND + 1
 * epochs, however many the job has. */
static void export_epochs(const qinfo *in, long long *lo, long long *hi)
{
    long long open = in->job.present ? in->job.epoch_open : 0;
    if (open > in->epochs)
        open = in->epochs;
    *lo = open - EXPORT_EPOCHS_AROUND < 0 ? 0 : open - EXPORT_EPOCHS_AROUND;
    *hi = open + EXPORT_EPOCHS_AROUND + 1 > in->epochs ? in->epochs
                                                        : open + EXPORT_EPOCHS_AROUND + 1;
}

/* Whether epoch e of the window is exported: up to the open one, always;
 * after it, once a task of it finished, a batch of it was pushed or its
 * end was posted. */
static int epoch_shown(const qinfo *in, long long e)
{
    const epoch_info *x = &in->ep[e];
    long long open = in->job.present ? in->job.epoch_open : 0;
    return e <= open || x->finished || x->pushed || x->ended || x->ready;
}

/* Everything sluice-ctl metrics serves, from one snapshot. */
static void queue_metrics(sluicei_mtext *t, const qview *v)
{
    const qinfo *in = &v->all;
    const char *const lab[] = {"queue", in->q, NULL};
    const struct {
        const char *name, *help;
        long long v;
    } gauges[] = {
        {"sluice_queue_depth_batches",
         "Batches the queue holds (queued or delivered, not yet acknowledged).", in->held},
        {"sluice_queue_max_batches", "The queue's batch budget.", in->max_batches},
        {"sluice_queue_bytes", "Frame bytes the queue holds.", in->bytes},
        {"sluice_queue_max_bytes", "The queue's byte budget.", in->max_bytes},
        {"sluice_queue_ready_batches", "Batches waiting to be taken by a consumer.", in->ready},
        {"sluice_queue_delivered_batches",
         "Batches delivered to consumers and not acknowledged yet.", in->pending},
        {"sluice_queue_dead_letters", "Batches in the dead-letter list now.", in->dead},
        {"sluice_queue_retained_bytes",
         "Frame bytes kept for consumers' checkpoints (outside the budgets).",
         in->retained_bytes},
    };
    sluicei_mtext_family(t, "sluice_up", "gauge",
                         "1 when the last read of the queue from Redis succeeded, else 0.");
    sluicei_mtext_sample(t, "sluice_up", lab, 1);
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
        sluicei_mtext_family(t, gauges[i].name, "gauge", gauges[i].help);
        sluicei_mtext_sample(t, gauges[i].name, lab, (double)gauges[i].v);
    }
    for (size_t i = 0; i < sizeof queue_counters / sizeof queue_counters[0]; i++) {
        sluicei_mtext_family(t, queue_counters[i].name, "counter", queue_counters[i].help);
        sluicei_mtext_sample(t, queue_counters[i].name, lab,
                             (double)ctl_fields_num(&in->stats, queue_counters[i].field));
    }

    const job_info *j = &in->job;
    sluicei_mtext_family(t, "sluice_job_running", "gauge",
                         "1 while the queue runs a job, 0 when it is finished or there is none.");
    sluicei_mtext_sample(t, "sluice_job_running", lab,
                         j->present && j->state && !strcmp(j->state, "running"));
    if (j->present) {
        sluicei_mtext_family(t, "sluice_job_epochs", "gauge", "Epochs of the job.");
        sluicei_mtext_sample(t, "sluice_job_epochs", lab, (double)in->epochs);
        sluicei_mtext_family(t, "sluice_job_epoch_open", "gauge",
                             "The lowest epoch whose end is not posted yet.");
        sluicei_mtext_sample(t, "sluice_job_epoch_open", lab, (double)j->epoch_open);
        sluicei_mtext_family(t, "sluice_job_tasks", "gauge",
                             "Tasks of the job (shards x epochs) by state.");
        const struct {
            const char *state;
            long long v;
        } ts[] = {{"total", j->ntasks * in->epochs},
                  {"waiting", in->waiting},
                  {"claimed", in->claimed},
                  {"done", in->done},
                  {"failed", (long long)in->nfailed}};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            const char *const l[] = {"queue", in->q, "state", ts[i].state, NULL};
            sluicei_mtext_sample(t, "sluice_job_tasks", l, (double)ts[i].v);
        }
    }

    /* Per epoch (a queue without a job: epoch 0 only), a window around
     * the open one (export_epochs): a long job does not grow a series
     * per epoch. */
    long long elo, ehi;
    export_epochs(in, &elo, &ehi);
    const struct {
        const char *name, *type, *help;
        size_t off;
    } per_epoch[] = {
        {"sluice_epoch_pushed_total", "counter", "Batches of the epoch stored in the queue.",
         offsetof(epoch_info, pushed)},
        {"sluice_epoch_acked_total", "counter", "Batches of the epoch acknowledged.",
         offsetof(epoch_info, acked)},
        {"sluice_epoch_ready_batches", "gauge", "Batches of the epoch waiting to be taken.",
         offsetof(epoch_info, ready)},
        {"sluice_epoch_tasks_finished", "gauge", "Tasks of the epoch done or failed.",
         offsetof(epoch_info, finished)},
        {"sluice_epoch_dropped_records_total", "counter",
         "Records of the epoch not pushed: the short last batches of its tasks "
         "(drop_remainder).", offsetof(epoch_info, dropped_records)},
    };
    for (size_t m = 0; m < sizeof per_epoch / sizeof per_epoch[0]; m++) {
        sluicei_mtext_family(t, per_epoch[m].name, per_epoch[m].type, per_epoch[m].help);
        for (long long e = elo; e < ehi; e++) {
            if (!epoch_shown(in, e))
                continue;
            char es[24];
            snprintf(es, sizeof es, "%lld", e);
            const char *const l[] = {"queue", in->q, "epoch", es, NULL};
            long long v;
            memcpy(&v, (const char *)&in->ep[e] + per_epoch[m].off, sizeof v);
            sluicei_mtext_sample(t, per_epoch[m].name, l, (double)v);
        }
    }
    sluicei_mtext_family(t, "sluice_epoch_end_posted", "gauge",
                         "1 once the end of the epoch is posted (every task done or failed).");
    for (long long e = elo; e < ehi; e++) {
        if (!epoch_shown(in, e))
            continue;
        char es[24];
        snprintf(es, sizeof es, "%lld", e);
        const char *const l[] = {"queue", in->q, "epoch", es, NULL};
        sluicei_mtext_sample(t, "sluice_epoch_end_posted", l, in->ep[e].ended);
    }
    peers_metrics(t, in, 1);
    peers_metrics(t, in, 0);
    partition_metrics(t, v);
}

/* State of sluice-ctl metrics. The refresher thread alone uses x (and
 * its router); the server thread only copies text under lock. */
typedef struct ctl_metrics {
    ctl *x;
    const char *q;
    pthread_mutex_t lock;
    sluicei_mtext text;          /* the last snapshot's exposition; guarded by lock */
    int failing;                 /* refresher: the last read failed */
    char why[256];               /* refresher: why (what /readyz says) */
    int64_t next_try_ms;         /* refresher: after failures, back off until then */
    int backoff_ms;
} ctl_metrics;

#define METRICS_BACKOFF_MAX_MS 30000

/* Refresher thread: reads the queue and replaces the served text. After a
 * failure it serves sluice_up 0 and retries with a doubling pause (up to
 * 30 s), so that a lost Redis costs one error line per attempt. Returns
 * whether the last read worked (/readyz), else why not. */
static int ctl_metrics_refresh(void *arg, char *why, size_t whylen)
{
    ctl_metrics *m = arg;
    int64_t now = sluicei_now_ms();
    if (m->failing && now < m->next_try_ms) {
        snprintf(why, whylen, "%s", m->why);
        return 0;
    }
    sluicei_mtext t = {0};
    qview v;
    memset(&v, 0, sizeof v);
    /* After a failed read, look at the queue again: it may have been
     * deleted and created anew. */
    int ok = (!m->failing || ctl_discover(m->x) == 0) && qview_read(m->x, &v) == 0;
    if (ok)
        queue_metrics(&t, &v);
    qview_free(&v);
    if (!ok) {
        const char *const lab[] = {"queue", m->q, NULL};
        const char *last = sluicei_router_errstr(m->x->r);
        if (m->x->missing)
            snprintf(m->why, sizeof m->why, "queue '%s' does not exist", m->q);
        else
            snprintf(m->why, sizeof m->why, "reading queue '%s' from Redis failed%s%s", m->q,
                     last && *last ? ": " : "", last && *last ? last : "");
        sluicei_mtext_free(&t);
        sluicei_mtext_family(&t, "sluice_up", "gauge",
                             "1 when the last read of the queue from Redis succeeded, else 0.");
        sluicei_mtext_sample(&t, "sluice_up", lab, 0);
        m->backoff_ms = m->failing ? m->backoff_ms * 2 : 1000;
        if (m->backoff_ms > METRICS_BACKOFF_MAX_MS)
            m->backoff_ms = METRICS_BACKOFF_MAX_MS;
        m->next_try_ms = sluicei_now_ms() + m->backoff_ms;
    } else if (m->failing) {
        fprintf(stderr, "sluice-ctl: metrics: reading queue '%s' works again\n", m->q);
    }
    m->failing = !ok;
    snprintf(why, whylen, "%s", ok ? "" : m->why);
    if (t.failed) {   /* out of memory: keep serving the previous text */
        sluicei_mtext_free(&t);
        return ok;
    }
    pthread_mutex_lock(&m->lock);
    sluicei_mtext old = m->text;
    m->text = t;
    pthread_mutex_unlock(&m->lock);
    sluicei_mtext_free(&old);
    return ok;
}

/* Server thread: the last snapshot. */
static void ctl_metrics_render(sluicei_mtext *out, void *arg)
{
    ctl_metrics *m = arg;
    pthread_mutex_lock(&m->lock);
    sluicei_mtext_raw(out, m->text.buf ? m->text.buf : "", m->text.len);
    pthread_mutex_unlock(&m->lock);
}

/* sluice-ctl metrics: reads the queue once (a missing queue is an error
 * before anything listens), then serves /metrics, /healthz and /readyz on addr,
 * refreshed every interval_ms by a thread with this connection, until
 * SIGINT or SIGTERM. */
int export_run(ctl *x, const char *addr, long long interval_ms)
{
    const char *q = x->q;
    ctl_metrics m = {.x = x, .q = q};
    pthread_mutex_init(&m.lock, NULL);
    int rc = SLUICEI_EXIT_RUNTIME;
    sluicei_metrics *srv = NULL;
    /* SIGINT and SIGTERM wait for sigwait() below; blocked before the
     * threads start, so that they inherit the mask. */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &old);

    char why[256];
    ctl_metrics_refresh(&m, why, sizeof why);
    if (m.failing)
        goto out;   /* the reason is printed */
    char err[512];
    sluicei_metrics_opts mo = {.addr = addr, .render = ctl_metrics_render,
                               .refresh = ctl_metrics_refresh, .refresh_ms = (int)interval_ms,
                               .arg = &m};
    sluice_err e = sluicei_metrics_open(&srv, &mo, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, "sluice-ctl: metrics: %s\n", err);
        rc = e == SLUICE_ERR_INVALID ? SLUICEI_EXIT_USAGE : SLUICEI_EXIT_RUNTIME;
        goto out;
    }
    fprintf(stderr, "sluice-ctl: serving metrics of queue '%s' on http://%s/metrics "
            "(Ctrl-C stops)\n", q, addr);
    int sig = 0;
    while (sigwait(&stop, &sig) != 0)
        ;
    sluicei_metrics_close(srv);
    rc = 0;
out:
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    sluicei_mtext_free(&m.text);
    pthread_mutex_destroy(&m.lock);
    return rc;
}

/* Reads metrics' flags. Returns 0 or SLUICEI_EXIT_USAGE (printed). */
int export_parse(int argc, char **argv, const char **addr, long long *interval_ms)
{
    *addr = NULL;
    *interval_ms = STAT_INTERVAL_MS_DEFAULT;
    for (int i = 0; i < argc; i++) {
        int got;
        if (strcmp(argv[i], "--addr") == 0 && i + 1 >= argc) {
            return sluicei_usage_error("%s needs a value (HOST:PORT, e.g. 0.0.0.0:9101)",
                                       "--addr");
        } else if ((got = sluicei_flag_value(argc, argv, &i, "--addr", addr)) != 0) {
            if (got < 0)
                return SLUICEI_EXIT_USAGE;
        } else if ((got = stat_interval_flag(argc, argv, &i, interval_ms)) != 0) {
            if (got < 0)
                return SLUICEI_EXIT_USAGE;
        } else {
            return sluicei_usage_error("metrics: unexpected argument '%s'", argv[i]);
        }
    }
    if (!*addr)
        return sluicei_usage_error("metrics: %s is required", "--addr HOST:PORT");
    char err[512];
    if (sluicei_metrics_addr_check("--addr", *addr, err, sizeof err) != SLUICE_OK)
        return sluicei_usage_error("%s", err);
    return 0;
}

