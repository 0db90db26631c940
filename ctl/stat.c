/* sluice-ctl stat: a live view of a queue. Successive snapshots (qstate.c)
 * give the push and ack rates and each producer's and consumer's share of
 * time blocked; a snapshot is printed as text (bars for the budgets, the
 * job's epochs, the peers, failed tasks, dead letters) or as one JSON
 * object a line; --watch redraws it in place until the job finishes (or,
 * with --follow, until Ctrl-C). */
#include "ctl.h"
#include "json.h"
#include "num.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- stat: a live view of the queue --------------------------------------- */

/* Set by SIGINT and SIGTERM during stat --watch and metrics. */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

#define STAT_INTERVAL_MS_MIN 50
#define STAT_INTERVAL_MS_MAX 3600000
#define BAR_CELLS 30
/* Epoch lines shown by stat around the open epoch (a job may have many). */
#define STAT_EPOCHS_BEFORE 2
#define STAT_EPOCHS_AFTER 3
#define STAT_FAILED_SHOWN 5

/* The blocked share of a peer is estimated over a window of snapshots:
 * peers publish blocked_us only with their heartbeat (producers every
 * second, consumers every lease/3), and the time a heartbeat was sent is
 * not stored (the producers/consumers hashes are also updated by takes,
 * claims and task renewals). So the share is the growth of blocked_us
 * between an older snapshot and this one, over the time between them; a
 * span of several heartbeats keeps the error of the unknown beat times
 * small (at most one heartbeat's worth over the span). */
#define SHARE_WINDOW_MS_MIN 30000
#define SHARE_SAMPLES 32
/* Shortest span shown: 3 heartbeats (consumers: the lease). */
#define SHARE_SPAN_MS_PRODUCER 3000

/* A producer or consumer across snapshots. */
typedef struct peer_hist {
    char *id;                        /* owned */
    int producer;
    size_t n;                        /* samples, oldest first */
    int64_t t[SHARE_SAMPLES];        /* monotonic ms of the snapshot */
    long long b[SHARE_SAMPLES];      /* blocked_us it showed */
    double share;                    /* blocked / wall time; < 0: not known yet */
    long long span_ms;               /* the time the share is measured over */
} peer_hist;

/* What successive snapshots are compared with. */
typedef struct stat_hist {
    int have;                 /* a previous snapshot exists */
    int64_t t_ms;             /* its monotonic time */
    long long pushed, acked, pushed_bytes, acked_bytes;
    double push_rate, ack_rate, push_bps, ack_bps;   /* per second; < 0: n/a */
    peer_hist *peers;         /* owned */
    size_t npeers;
} stat_hist;

static void hist_free_peers(peer_hist *ps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ps[i].id);
    free(ps);
}

static const peer_hist *hist_find(const stat_hist *h, const char *id, int producer)
{
    for (size_t i = 0; i < h->npeers; i++)
        if (h->peers[i].producer == producer && strcmp(h->peers[i].id, id) == 0)
            return &h->peers[i];
    return NULL;
}

/* The blocked share of a peer in the last snapshot (< 0: n/a), and in
 * *span_ms (when not NULL) the time it was measured over. */
static double hist_share(const stat_hist *h, const char *id, int producer, long long *span_ms)
{
    const peer_hist *x = hist_find(h, id, producer);
    if (span_ms)
        *span_ms = x ? x->span_ms : 0;
    return x ? x->share : -1;
}

/* Adds the snapshot (t_ms, blocked_us) to x's samples (o: the same peer
 * in the previous snapshot, or NULL) and estimates its share over the
 * window: from the oldest sample kept to now. */
static void share_update(peer_hist *x, const peer_hist *o, int64_t t_ms, long long blocked_us,
                         long long lease_ms)
{
    long long window = lease_ms * 3 > SHARE_WINDOW_MS_MIN ? lease_ms * 3 : SHARE_WINDOW_MS_MIN;
    long long min_span = x->producer ? SHARE_SPAN_MS_PRODUCER : lease_ms;
    x->n = 0;
    x->share = -1;
    x->span_ms = 0;
    /* A counter that went back: the same id started again. */
    if (o && o->n && blocked_us >= o->b[o->n - 1]) {
        x->n = o->n;
        memcpy(x->t, o->t, sizeof x->t);
        memcpy(x->b, o->b, sizeof x->b);
    }
    size_t old = 0;
    while (old < x->n && t_ms - x->t[old] > window)
        old++;
    if (old) {
        x->n -= old;
        memmove(x->t, x->t + old, x->n * sizeof x->t[0]);
        memmove(x->b, x->b + old, x->n * sizeof x->b[0]);
    }
    /* Samples at least window/SHARE_SAMPLES apart: any refresh rate fits. */
    if (x->n == 0 || t_ms - x->t[x->n - 1] >= window / SHARE_SAMPLES) {
        if (x->n == SHARE_SAMPLES) {
            x->n--;
            memmove(x->t, x->t + 1, x->n * sizeof x->t[0]);
            memmove(x->b, x->b + 1, x->n * sizeof x->b[0]);
        }
        x->t[x->n] = t_ms;
        x->b[x->n] = blocked_us;
        x->n++;
    }
    long long span = t_ms - x->t[0];
    if (span >= min_span && span > 0) {
        double share = (double)(blocked_us - x->b[0]) / ((double)span * 1000.0);
        x->share = share > 1 ? 1 : share;
        x->span_ms = span;
    }
}

/* Per second between two readings of a counter; < 0 when unknown (first
 * snapshot, or a counter that went back: the queue was recreated). */
static double rate(long long now, long long before, int64_t dt_ms)
{
    if (dt_ms <= 0 || now < before)
        return -1;
    return (double)(now - before) * 1000.0 / (double)dt_ms;
}

/* Moves h on to snapshot in, read at monotonic time t_ms: the push and ack
 * rates since the previous snapshot, and for each peer the share of wall
 * time it was blocked (share_update). Returns 0, or -1 when out of memory
 * (h unchanged). */
static int hist_update(stat_hist *h, const qinfo *in, int64_t t_ms)
{
    size_t n = in->nprod + in->ncons, k = 0;
    peer_hist *np = calloc(n ? n : 1, sizeof *np);
    if (!np)
        return -1;
    for (int producer = 0; producer < 2; producer++) {
        const peer *ps = producer ? in->prod : in->cons;
        size_t cnt = producer ? in->nprod : in->ncons;
        for (size_t i = 0; i < cnt; i++, k++) {
            peer_hist *x = &np[k];
            if (!(x->id = strdup(ps[i].id))) {
                hist_free_peers(np, k);
                return -1;
            }
            x->producer = producer;
            share_update(x, hist_find(h, x->id, producer), t_ms,
                         ctl_fields_num(&ps[i].stats, "blocked_us"), in->lease_ms);
        }
    }
    const ctl_fields *st = &in->stats;
    long long pushed = ctl_fields_num(st, "pushed"), acked = ctl_fields_num(st, "acked");
    long long pb = ctl_fields_num(st, "pushed_bytes"), ab = ctl_fields_num(st, "acked_bytes");
    int64_t dt = h->have ? t_ms - h->t_ms : 0;
    h->push_rate = rate(pushed, h->pushed, dt);
    h->ack_rate = rate(acked, h->acked, dt);
    h->push_bps = rate(pb, h->pushed_bytes, dt);
    h->ack_bps = rate(ab, h->acked_bytes, dt);
    h->pushed = pushed;
    h->acked = acked;
    h->pushed_bytes = pb;
    h->acked_bytes = ab;
    h->t_ms = t_ms;
    h->have = 1;
    hist_free_peers(h->peers, h->npeers);
    h->peers = np;
    h->npeers = n;
    return 0;
}

/* "512 B", "3.1 MiB" (binary units, as --max-bytes takes them). */
static void fmt_bytes(char *out, size_t n, double v)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, n, "%.0f B", v);
    else
        snprintf(out, n, "%.1f %s", v, unit[u]);
}

/* "12.5 batches/s", "3.1 MiB/s", or "n/a". */
static void fmt_rate(char *out, size_t n, double r, int bytes)
{
    if (r < 0) {
        snprintf(out, n, "n/a");
    } else if (bytes) {
        fmt_bytes(out, n, r);
        size_t k = strlen(out);
        snprintf(out + k, n - k, "/s");
    } else {
        snprintf(out, n, "%.1f batches/s", r);
    }
}

/* " (35% of the last 30 s)", or "" while the share is not known. */
static void fmt_share(char *out, size_t n, double share, long long span_ms)
{
    if (share < 0)
        out[0] = '\0';
    else
        snprintf(out, n, " (%.0f%% of the last %.0f s)", share * 100, (double)span_ms / 1000.0);
}

/* "[#########.....................]" for v of max. */
static void put_bar(FILE *f, long long v, long long max)
{
    int fill = 0;
    if (max > 0) {
        double x = (double)v / (double)max * BAR_CELLS + 0.5;
        fill = x < 0 ? 0 : x > BAR_CELLS ? BAR_CELLS : (int)x;
    }
    fputc('[', f);
    for (int i = 0; i < BAR_CELLS; i++)
        fputc(i < fill ? '#' : '.', f);
    fputc(']', f);
}

static void stat_peers_text(FILE *f, const qinfo *in, const stat_hist *h, int producer)
{
    const peer *ps = producer ? in->prod : in->cons;
    size_t n = producer ? in->nprod : in->ncons;
    size_t alive = qstate_alive(ps, n, in->lease_ms);
    const ctl_fields *gone = producer ? &in->pgone : &in->cgone;
    fprintf(f, "%s  %zu alive", producer ? "producers" : "consumers", alive);
    if (n > alive)
        fprintf(f, ", %zu silent", n - alive);
    if (ctl_fields_num(gone, "left") > 0)
        fprintf(f, ", %lld left", ctl_fields_num(gone, "left"));
    fputc('\n', f);
    if (ctl_fields_num(gone, "left") > 0) {
        /* Their counters, folded into one line when they left. */
        char bytes[32];
        fmt_bytes(bytes, sizeof bytes, (double)ctl_fields_num(gone, "bytes"));
        double blocked = (double)ctl_fields_num(gone, "blocked_us") / 1e6;
        if (producer)
            fprintf(f, "  (left)  batches %lld  %s  backpressure %.1f s  tasks %lld done, "
                    "%lld failed\n", ctl_fields_num(gone, "batches"), bytes, blocked,
                    ctl_fields_num(gone, "tasks_done"), ctl_fields_num(gone, "tasks_failed"));
        else
            fprintf(f, "  (left)  batches %lld  %s  blocked in next() %.1f s  redelivered %lld"
                    "  duplicates %lld  invalid %lld\n", ctl_fields_num(gone, "batches"), bytes,
                    blocked, ctl_fields_num(gone, "redelivered"),
                    ctl_fields_num(gone, "duplicates"), ctl_fields_num(gone, "invalid"));
    }
    for (size_t i = 0; i < n; i++) {
        const peer *p = &ps[i];
        const ctl_fields *s = &p->stats;
        char bytes[32], share[48];
        long long span = 0;
        double sh = hist_share(h, p->id, producer, &span);
        fmt_bytes(bytes, sizeof bytes, (double)ctl_fields_num(s, "bytes"));
        fmt_share(share, sizeof share, sh, span);
        double blocked = (double)ctl_fields_num(s, "blocked_us") / 1e6;
        fprintf(f, "  %s", p->id);
        if (!producer)
            fprintf(f, "  rank %s", p->extra ? p->extra : "-");
        fprintf(f, "  seen %.1f s ago%s", (double)p->seen_ago_ms / 1000.0,
                p->seen_ago_ms > in->lease_ms ? " (silent: lease expired)" : "");
        if (producer) {
            fprintf(f, "  task %s", p->extra ? p->extra : "-");
            fprintf(f, "  batches %lld  %s  backpressure %.1f s%s  tasks %lld done, %lld failed",
                    ctl_fields_num(s, "batches"), bytes, blocked, share,
                    ctl_fields_num(s, "tasks_done"), ctl_fields_num(s, "tasks_failed"));
            if (ctl_fields_num(s, "duplicates"))
                fprintf(f, "  duplicates %lld", ctl_fields_num(s, "duplicates"));
        } else {
            fprintf(f, "  epoch %lld  batches %lld  %s  blocked in next() %.1f s%s  pending %lld"
                    "  redelivered %lld  duplicates %lld  invalid %lld",
                    ctl_fields_num(s, "epoch"), ctl_fields_num(s, "batches"), bytes, blocked, share,
                    p->pending, ctl_fields_num(s, "redelivered"), ctl_fields_num(s, "duplicates"),
                    ctl_fields_num(s, "invalid"));
        }
        fputc('\n', f);
    }
}

static void stat_job_text(FILE *f, const qinfo *in)
{
    const job_info *j = &in->job;
    if (!j->present) {
        fprintf(f, "job        none (epoch 0, no end)\n");
        return;
    }
    long long ntasks = j->ntasks, open = j->epoch_open;
    const char *state = j->state;
    fprintf(f, "job        %s: ", state ? state : "?");
    if (state && strcmp(state, "finished") == 0)
        fprintf(f, "all %lld epochs ended", in->epochs);
    else
        fprintf(f, "epoch %lld of 0..%lld open", open, in->epochs - 1);
    fprintf(f, "; tasks %lld/%lld done (%lld claimed, %lld waiting, %zu failed)\n", in->done,
            ntasks * in->epochs, in->claimed, in->waiting, in->nfailed);
    long long lo = open - STAT_EPOCHS_BEFORE, hi = open + STAT_EPOCHS_AFTER;
    if (lo < 0)
        lo = 0;
    if (hi > in->epochs)
        hi = in->epochs;
    if (lo > 0)
        fprintf(f, "  (epochs 0..%lld ended)\n", lo - 1);
    for (long long e = lo; e < hi; e++) {
        const epoch_info *x = &in->ep[e];
        fprintf(f, "  epoch %lld  tasks %lld/%lld  batches pushed %lld, acked %lld, ready %lld", e,
                x->finished, ntasks, x->pushed, x->acked, x->ready);
        if (x->dropped || x->padded)
            fprintf(f, ", dropped %lld, padded %lld", x->dropped, x->padded);
        if (x->dropped_records)
            fprintf(f, ", records dropped %lld", x->dropped_records);
        fprintf(f, "  %s\n", x->ended ? "end posted" : "open");
    }
    if (hi < in->epochs)
        fprintf(f, "  (epochs %lld..%lld to come)\n", hi, in->epochs - 1);
}

/* One line per partition of a partitioned queue: its node, what it holds
 * against its budgets. */
static void stat_partitions_text(FILE *f, const qview *v)
{
    if (!v->partitions)
        return;
    fprintf(f, "partitions %d\n", v->partitions);
    for (int p = 0; p < v->partitions; p++) {
        const qinfo *in = &v->part[p];
        long long maxn = in->max_batches, maxb = in->max_bytes;
        char b1[32], b2[32];
        fmt_bytes(b1, sizeof b1, (double)in->bytes);
        fmt_bytes(b2, sizeof b2, (double)maxb);
        fprintf(f, "  %d  %s  batches %lld/%lld (%.0f%%)  bytes %s/%s (%.0f%%)  ready %lld"
                "  delivered %lld  dead %lld\n", p, v->node[p], in->held, maxn,
                maxn > 0 ? 100.0 * (double)in->held / (double)maxn : 0.0, b1, b2,
                maxb > 0 ? 100.0 * (double)in->bytes / (double)maxb : 0.0, in->ready,
                in->pending, in->dead);
    }
}

/* One snapshot as text. */
static void stat_text(FILE *f, const qview *v, const stat_hist *h, const stat_opts *o)
{
    const qinfo *in = &v->all;
    char when[40], b1[32], b2[32], r1[32], r2[32], r3[32], r4[32];
    ctl_iso_time((long long)(sluicei_wall_us() / 1000u), when, sizeof when);
    fprintf(f, "queue '%s'  %s", in->q, when);
    if (o->watch)
        fprintf(f, "  (every %.1f s%s; Ctrl-C quits)", (double)o->interval_ms / 1000.0,
                o->follow ? "" : " until the job finishes");
    fputc('\n', f);
    long long maxn = in->max_batches, maxb = in->max_bytes;
    fprintf(f, "batches    ");
    put_bar(f, in->held, maxn);
    fprintf(f, " %lld/%lld batches  (ready %lld, delivered %lld)\n", in->held, maxn, in->ready,
            in->pending);
    fmt_bytes(b1, sizeof b1, (double)in->bytes);
    fmt_bytes(b2, sizeof b2, (double)maxb);
    fprintf(f, "bytes      ");
    put_bar(f, in->bytes, maxb);
    fprintf(f, " %s/%s\n", b1, b2);
    stat_partitions_text(f, v);
    fmt_rate(r1, sizeof r1, h->push_rate, 0);
    fmt_rate(r2, sizeof r2, h->push_bps, 1);
    fmt_rate(r3, sizeof r3, h->ack_rate, 0);
    fmt_rate(r4, sizeof r4, h->ack_bps, 1);
    if (h->push_rate < 0 && h->ack_rate < 0)
        fprintf(f, "rates      n/a (first snapshot)\n");
    else
        fprintf(f, "rates      push %s (%s)  ack %s (%s)\n", r1, r2, r3, r4);
    fprintf(f, "totals     pushed %lld  acked %lld  requeued %lld  dead %lld  dup_dropped %lld\n",
            ctl_fields_num(&in->stats, "pushed"), ctl_fields_num(&in->stats, "acked"),
            ctl_fields_num(&in->stats, "requeued"), ctl_fields_num(&in->stats, "dead"),
            ctl_fields_num(&in->stats, "dup_dropped"));
    if (in->ranks > 0)
        fprintf(f, "coordinated over %lld ranks, remainder %s\n", in->ranks,
                ctl_fields_or(&in->meta, "remainder", "drop"));
    stat_job_text(f, in);
    stat_peers_text(f, in, h, 1);
    stat_peers_text(f, in, h, 0);
    size_t nf = in->nfailed;
    fprintf(f, "failed tasks  %zu\n", nf);
    for (size_t i = 0; i < nf && i < STAT_FAILED_SHOWN; i++) {
        const char *t = in->failed[i].task, *err = in->failed[i].error;
        fprintf(f, "  %s  attempts %lld: %s\n", t, in->failed[i].attempts, err ? err : "");
    }
    if (nf > STAT_FAILED_SHOWN)
        fprintf(f, "  (%zu more: sluice-ctl jobs %s)\n", nf - STAT_FAILED_SHOWN, in->q);
    fprintf(f, "dead letters  %lld%s\n", in->dead, in->dead ? "  (sluice-ctl dead lists them)" : "");
}

/* A JSON number with 4 decimals (no exponent: rates of bytes are large),
 * or null when v < 0 (not known). */
static void json_num_or_null(json_writer *w, const char *key, double v)
{
    if (v < 0)
        json_null(w, key);
    else
        json_fixed(w, key, v, 4);
}

/* One snapshot as one JSON object on one line. */
static void stat_json(const qview *v, const stat_hist *h)
{
    const qinfo *in = &v->all;
    json_writer w;
    json_init(&w, stdout);
    json_object_begin(&w, NULL);
    json_str(&w, "queue", in->q);
    json_int(&w, "time_ms", (long long)(sluicei_wall_us() / 1000u));
    json_int(&w, "batches", in->held);
    json_int(&w, "max_batches", in->max_batches);
    json_int(&w, "bytes", in->bytes);
    json_int(&w, "max_bytes", in->max_bytes);
    json_int(&w, "ready", in->ready);
    json_int(&w, "pending", in->pending);
    json_int(&w, "dead_letters", in->dead);
    info_json_hash(&w, "meta", &in->meta);
    info_json_hash(&w, "stats", &in->stats);
    json_object_begin(&w, "rates");
    json_num_or_null(&w, "push_batches_per_s", h->push_rate);
    json_num_or_null(&w, "push_bytes_per_s", h->push_bps);
    json_num_or_null(&w, "ack_batches_per_s", h->ack_rate);
    json_num_or_null(&w, "ack_bytes_per_s", h->ack_bps);
    json_object_end(&w);
    info_json_job(&w, in);
    info_json_peers(&w, "producers", in->prod, in->nprod, 1, in->lease_ms);
    info_json_peers(&w, "consumers", in->cons, in->ncons, 0, in->lease_ms);
    /* The counters of those that left the registries, added up. */
    info_json_hash(&w, "producers_left", &in->pgone);
    info_json_hash(&w, "consumers_left", &in->cgone);
    /* Per peer: blocked time / wall time over the window (share_update). */
    json_object_begin(&w, "blocked_share");
    for (int producer = 1; producer >= 0; producer--) {
        const peer *ps = producer ? in->prod : in->cons;
        size_t n = producer ? in->nprod : in->ncons;
        json_object_begin(&w, producer ? "producers" : "consumers");
        for (size_t i = 0; i < n; i++)
            json_num_or_null(&w, ps[i].id, hist_share(h, ps[i].id, producer, NULL));
        json_object_end(&w);
    }
    json_object_end(&w);
    info_json_partitions(&w, v);
    json_object_end(&w);
    putchar('\n');
}

/* Writes a frame of text to the terminal in place: home, each line
 * cleared to its end, the rest of the screen cleared. */
static void put_frame(const char *text, size_t len, int first)
{
    fputs(first ? "\033[H\033[2J" : "\033[H", stdout);
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\n')
            fputs("\033[K", stdout);
        putchar(text[i]);
    }
    fputs("\033[J", stdout);
}

/* ---- what changed between snapshots (--watch to a pipe) ------------------ */

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    /* The terminating NUL too: "ab","c" differs from "a","bc". */
    return fnv_bytes(h, s ? s : "", s ? strlen(s) + 1 : 1);
}

static uint64_t fnv_num(uint64_t h, long long v)
{
    return fnv_bytes(h, &v, sizeof v);
}

static uint64_t fnv_fields(uint64_t h, const ctl_fields *f)
{
    for (size_t i = 0; i < f->n; i++)
        h = fnv_str(fnv_str(h, f->f[i].name), f->f[i].value);
    return fnv_num(h, (long long)f->n);
}

static uint64_t fnv_qinfo(uint64_t h, const qinfo *in)
{
    const long long nums[] = {in->held,     in->bytes,    in->ready,   in->pending,
                              in->dead,     in->waiting,  in->claimed, in->done,
                              in->epochs,   in->max_batches, in->max_bytes,
                              (long long)in->nfailed, in->job.epoch_open};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        h = fnv_num(h, nums[i]);
    h = fnv_str(fnv_fields(h, &in->stats), in->job.state);
    h = fnv_fields(fnv_fields(h, &in->pgone), &in->cgone);
    for (long long e = 0; e < in->epochs && in->ep; e++)
        h = fnv_bytes(h, &in->ep[e], sizeof in->ep[e]);
    for (int producer = 0; producer < 2; producer++) {
        const peer *ps = producer ? in->prod : in->cons;
        size_t n = producer ? in->nprod : in->ncons;
        for (size_t i = 0; i < n; i++) {
            h = fnv_str(fnv_str(h, ps[i].id), ps[i].extra);
            h = fnv_num(fnv_num(h, ps[i].pending), ps[i].seen_ago_ms <= in->lease_ms);
            h = fnv_fields(h, &ps[i].stats);
        }
    }
    return h;
}

/* A digest of what a text snapshot shows apart from the clock: the time,
 * the rates, "seen ... ago" and the blocked shares move on every refresh
 * while the figures may stand still. */
static uint64_t stat_digest(const qview *v)
{
    uint64_t h = fnv_qinfo(14695981039346656037ull, &v->all);
    for (int p = 0; p < v->partitions; p++)
        h = fnv_str(fnv_qinfo(h, &v->part[p]), v->node[p]);
    return h;
}

/* The job of the snapshot is finished (every partition's, for a
 * partitioned queue: qstate.c merges the states). */
static int job_finished(const qview *v)
{
    const job_info *j = &v->all.job;
    return j->present && j->state && strcmp(j->state, "finished") == 0;
}

/* Sleeps ms, waking early on a signal. */
static void stat_sleep(long long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (!stop_requested && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* sluice-ctl stat: one snapshot, or with --watch one every interval until
 * the job is finished (exit 0, after the snapshot that shows it) or the
 * queue is deleted (exit 1, one line saying so); with --follow until
 * SIGINT/SIGTERM, following a queue deleted and created anew. SIGINT and
 * SIGTERM exit 0 in both. On a terminal the view is redrawn in place;
 * otherwise a text snapshot is printed only when its figures differ from
 * the last one printed (stat_digest), after a blank line; JSON: one object
 * a line, every interval. A failed read ends a single snapshot with an
 * error; while watching, the view keeps trying (reconnecting) after it
 * worked once. */
int stat_run(ctl *x, const stat_opts *o)
{
    if (o->watch) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);   /* no SA_RESTART: the sleep ends at once */
        sigaction(SIGTERM, &sa, NULL);
    }
    int tty = o->watch && !o->json && isatty(STDOUT_FILENO);
    stat_hist h = {.push_rate = -1, .ack_rate = -1, .push_bps = -1, .ack_bps = -1};
    int rc = 0, shown = 0, failed = 0, finished = 0;
    uint64_t last_digest = 0;
    while (!stop_requested) {
        qview v;
        memset(&v, 0, sizeof v);
        int r = failed ? ctl_discover(x) : 0;
        if (r == 0)
            r = qview_read(x, &v);
        if (r == 0 && hist_update(&h, &v.all, sluicei_now_ms()) != 0) {
            fprintf(stderr, "sluice-ctl: out of memory\n");
            r = SLUICEI_EXIT_RUNTIME;
        }
        finished = r == 0 && o->watch && !o->follow && job_finished(&v);
        uint64_t digest = r == 0 ? stat_digest(&v) : 0;
        if (r == 0 && o->json) {
            stat_json(&v, &h);
        } else if (r == 0 && o->watch && !tty && shown && digest == last_digest) {
            ;   /* a pipe gets a snapshot only when something changed */
        } else if (r == 0) {
            char *text = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&text, &len);
            if (f) {
                stat_text(f, &v, &h, o);
                fclose(f);
            }
            if (!f || !text) {
                fprintf(stderr, "sluice-ctl: out of memory\n");
                r = SLUICEI_EXIT_RUNTIME;
            } else if (tty) {
                put_frame(text, len, !shown);
            } else {
                if (shown)
                    putchar('\n');
                fwrite(text, 1, len, stdout);
            }
            free(text);
            last_digest = digest;
        }
        qview_free(&v);
        fflush(stdout);
        if (r == 0)
            shown++;
        failed = r != 0;
        if (r != 0 && (!o->watch || !shown)) {
            rc = r;
            break;
        }
        if (r != 0 && x->missing && !o->follow) {
            fprintf(stderr, "sluice-ctl: stat: queue '%s' was deleted while watching it "
                    "(stat --watch --follow waits for it to be created again)\n", x->q);
            rc = SLUICEI_EXIT_RUNTIME;
            break;
        }
        if (!o->watch || finished)
            break;
        stat_sleep(o->interval_ms);
    }
    hist_free_peers(h.peers, h.npeers);
    return rc;
}

int stat_interval_flag(int argc, char **argv, int *i, long long *out)
{
    const char *val;
    uint64_t v;
    int got = sluicei_flag_value(argc, argv, i, "--interval-ms", &val);
    if (got <= 0)
        return got;
    if (sluicei_parse_u64(val, strlen(val), STAT_INTERVAL_MS_MAX, &v) != 0 ||
        v < STAT_INTERVAL_MS_MIN) {
        sluicei_usage_error("--interval-ms '%s' is not an integer in 50..3600000", val);
        return -1;
    }
    *out = (long long)v;
    return 1;
}

/* Reads stat's flags. Returns 0 or SLUICEI_EXIT_USAGE (printed). */
int stat_parse(int argc, char **argv, stat_opts *o)
{
    int interval_given = 0;
    *o = (stat_opts){.interval_ms = STAT_INTERVAL_MS_DEFAULT};
    for (int i = 0; i < argc; i++) {
        int got;
        if (strcmp(argv[i], "--watch") == 0) {
            o->watch = 1;
        } else if (strcmp(argv[i], "--follow") == 0) {
            o->follow = 1;
        } else if (strcmp(argv[i], "--json") == 0) {
            o->json = 1;
        } else if ((got = stat_interval_flag(argc, argv, &i, &o->interval_ms)) != 0) {
            if (got < 0)
                return SLUICEI_EXIT_USAGE;
            interval_given = 1;
        } else {
            return sluicei_usage_error("stat: unexpected argument '%s'", argv[i]);
        }
    }
    if (interval_given && !o->watch)
        return sluicei_usage_error("stat: %s", "--interval-ms goes with --watch");
    if (o->follow && !o->watch)
        return sluicei_usage_error("stat: %s", "--follow goes with --watch");
    return 0;
}
