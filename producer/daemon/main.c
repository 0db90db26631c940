/* sluice-producer: reads records and pushes them, in batches, into a sluice
 * queue. Built on the producer API (producer.h), the readers (reader.h) and
 * the transform host (transform.h); this file is only flags, signals, the
 * task loop, batching and reporting.
 *
 * Two modes:
 *   files given:    the files, in order, as epoch 0 of an ad-hoc task;
 *                   batches never span files (a file's last batch may be
 *                   short).
 *   no files given: job mode. Claims the tasks of the queue's job (sluice-ctl
 *                   submit) one after another under a lease, produces each
 *                   (reader, paths and record range from the manifest,
 *                   batch size from the job; a task's last batch may be
 *                   short), and exits when the job is finished (--follow:
 *                   waits for the next job). */
#include <sluice/producer.h>

#include "checksum.h"
#include "cluster.h"
#include "metrics.h"
#include "producer_internal.h"
#include "proto.h"
#include "reader.h"
#include "transform.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "sluice-producer"
#define DEFAULT_URL "redis://127.0.0.1:6379"
#define MAX_BATCH_SIZE 1000000
#define MAX_INFLIGHT 1024
#define LEASE_MS_DEFAULT 10000
#define LEASE_MS_MIN 1000
#define LEASE_MS_MAX 86400000
/* While reading between pushes takes this long, flush to keep the task's
 * lease and the heartbeat going (the API does both inside a flush). */
#define KEEPALIVE_MS 1000
/* --follow: pause between claims while the queue has no job to work on. */
#define FOLLOW_POLL_MS 1000
/* --metrics-addr: how often the queue's depth is read from Redis, and the
 * timeouts of that connection (short: closing waits for a read under way). */
#define METRICS_REFRESH_MS 1000
#define METRICS_REDIS_TIMEOUT_MS 2000
/* Longest producer id (producer.h). */
#define MAX_PRODUCER_ID 64

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

static volatile sig_atomic_t stop_flag;
static volatile sig_atomic_t stop_signal;

/* First signal: stop at the next record and shut down cleanly. Second:
 * leave at once (the task, if any, is then left to the lease reaper). */
static void on_signal(int sig)
{
    if (stop_flag)
        _exit(128 + sig);
    stop_signal = sig;
    stop_flag = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " --queue Q --batch-size N [options] FILE...     (files mode)\n"
            "       " PROG " --queue Q [options]                            (job mode)\n"
            "\n"
            "Files mode: reads every FILE in order, groups its records into batches of N\n"
            "records (a file's last batch may be shorter; a batch never spans two files)\n"
            "and pushes them into queue Q, waiting while the queue is at its budget.\n"
            "\n"
            "Job mode (no FILE): works on the job submitted to Q (sluice-ctl submit). It\n"
            "claims a task (one manifest shard of one epoch) under a lease, reads the\n"
            "task's records with the manifest's reader, pushes them in batches of the\n"
            "job's batch size (a task's last batch may be shorter), marks the task done\n"
            "and claims the next, until the job is finished. Any number of producers may\n"
            "work on one job and may be started and stopped at any time: a producer that\n"
            "dies loses its task to another once its lease expires (no failure of the\n"
            "task), and batch ids (epoch, task, seq) are deterministic, so the redone task\n"
            "adds no duplicate. A task whose reader or --exec command fails is retried\n"
            "(by any producer) up to the job's --max-attempts, then recorded as failed\n"
            "(sluice-ctl info); the consumers are told at the end of its epoch. Tasks are\n"
            "claimed lowest epoch first; a producer blocked on a full queue with a later\n"
            "epoch's task while a task of an earlier epoch waits hands its task back with\n"
            "its resume point and takes that one.\n"
            "\n"
            "Partitioned queues (sluice-ctl create Q --partitions P): every batch of a task\n"
            "goes to the task's partition. A claim prefers partitions below their budget.\n"
            "When the task's partition is at its budget while another partition has room\n"
            "and waiting tasks, the producer hands the task back with its resume point\n"
            "(whoever claims it again skips the batches stored already) and claims the\n"
            "next. Files mode: each FILE goes to the next partition in turn.\n"
            "\n"
            "  --redis URL        redis://[user[:password]@]host[:port][/db] or\n"
            "                     unix:///path/to/redis.sock[?db=N]; a Redis Cluster:\n"
            "                     redis+cluster://[user[:password]@]host:port[,host:port...];\n"
            "                     independent servers: redis://a:1,redis://b:2 (partition p\n"
            "                     on server p mod n); ?wait=N: every push waits for N\n"
            "                     replicas.\n"
            "                     Default: $SLUICE_REDIS_URL, else " DEFAULT_URL ".\n"
            "                     A password may come from $SLUICE_REDIS_PASSWORD instead of\n"
            "                     the URL.\n"
            "  --queue Q          the queue to push into (create it with: sluice-ctl create Q)\n"
            "  --format F         files mode: input format (default tfrecord):\n");
    const sluicei_reader_format *fmt;
    for (size_t i = 0; (fmt = sluicei_reader_format_at(i)) != NULL; i++)
        fprintf(f, "                       %-9s %s\n", fmt->name, fmt->summary);
    fprintf(f,
            "                     (job mode: the manifest names the reader of each shard)\n"
            "  --batch-size N     files mode: records per batch, 1..%d (job mode: the\n"
            "                     job's batch size, set by sluice-ctl submit)\n"
            "  --exec 'CMD'       read records from the stdout of a command instead of a\n"
            "                     reader: /bin/sh -c CMD, run once per file (files mode) or\n"
            "                     per task (job mode), with {path} replaced by the paths\n"
            "                     (shell-quoted), {start} and {end} by the record range\n"
            "                     ({end} empty: to the end); the command applies the range.\n"
            "                     A non-zero exit fails the file or task, with the tail of\n"
            "                     its stderr as the error.\n"
            "  --exec-format F    what CMD writes: records (default: each record a 4-byte\n"
            "                     little-endian length, then its bytes) or msgpack (whole\n"
            "                     batch frames, docs/PROTOCOL.md; their rows are rebatched)\n"
            "  --transform LIB[:ARG]\n"
            "                     pass every batch through a C plugin (sluice/transform.h)\n"
            "                     loaded from LIB (give a path with a '/', e.g. ./libx.so);\n"
            "                     ARG goes to its init. A plugin error fails the task.\n"
            "  --lease-ms MS      job mode: a task's lease, %d..%d (default %d), on the\n"
            "                     Redis server's clock. The producer renews it every MS/3,\n"
            "                     also while it waits for room; a producer that stops\n"
            "                     renewing (killed, frozen) loses the task to another\n"
            "                     producer once MS have passed.\n"
            "  --follow           job mode: when the job is finished (or there is none),\n"
            "                     wait for the next one instead of exiting\n"
            "  --id ID            producer id shown by sluice-ctl info (default:\n"
            "                     <hostname>-<pid>-<random>)\n"
            "  --inflight K       pushes pipelined before waiting for replies, 1..%d\n"
            "                     (default 4)\n"
            "  --summary          at the end print one line to stdout:\n"
            "                     records=R batches=B bytes=N checksum=<16 hex digits>\n"
            "                     (job mode adds tasks=T: the tasks this producer completed;\n"
            "                     the totals count those tasks only. bytes: payload bytes\n"
            "                     pushed; checksum: sum mod 2^64 of the FNV-1a 64 hash of\n"
            "                     every record pushed, or of every tensor's data buffer)\n"
            "  --quiet            no progress, no per-task lines, no final report, no notes\n"
            "                     of long waits (room, a task) on stderr\n"
            "  --metrics-addr HOST:PORT\n"
            "                     serve Prometheus metrics on http://HOST:PORT/metrics\n"
            "                     (batches and bytes pushed, seconds blocked by\n"
            "                     backpressure, tasks done and failed, reconnects, the\n"
            "                     queue's depth) and 200 \"ok\" on /healthz; e.g.\n"
            "                     0.0.0.0:9100 (every address), 127.0.0.1:9100, [::1]:9100.\n"
            "                     docs/OBSERVE.md lists the metrics.\n"
            "  --help             this text\n"
            "\n"
            "Files mode: a corrupt or truncated file stops the run: the batches before the\n"
            "damage stay pushed, the partly filled batch is not, and the error names the\n"
            "file and byte offset. Job mode: it fails the task instead, and the producer\n"
            "goes on with the next one. A lost Redis connection is regained and nothing is\n"
            "lost.\n"
            "\n"
            "Signals: on SIGINT or SIGTERM the producer stops reading and waits for the\n"
            "pushes in flight (not for room in a full queue). Files mode: exits 130\n"
            "(SIGINT) or 143 (SIGTERM), or 0 if all input had been pushed already. Job\n"
            "mode: hands its task back untried (another producer does it; the attempt is\n"
            "not counted) and exits 0. Reconnecting then, it tries once more at once;\n"
            "with Redis still out of reach it exits 1 (the task comes back through its\n"
            "lease). A second signal exits at once (128 + signal).\n"
            "\n"
            "Exit status: 0 success (job mode: the job is finished or the queue has none,\n"
            "or a clean shutdown on a signal), 1 runtime error, 2 usage error, 130/143\n"
            "interrupted (files mode).\n"
            "\n"
            "examples:\n"
            "  sluice-ctl create train --max-batches 64 --max-bytes 256M\n"
            "  " PROG " --redis redis://127.0.0.1:6379 --queue train --format tfrecord \\\n"
            "      --batch-size 64 --summary data/train-*.tfrecord\n"
            "\n"
            "  sluice-ctl submit train --manifest train.manifest --epochs 10 --batch-size 64\n"
            "  " PROG " --queue train &    # as many as it takes, on any host\n"
            "  " PROG " --queue train --exec 'python3 decode.py {path} {start} {end}'\n",
            MAX_BATCH_SIZE, LEASE_MS_MIN, LEASE_MS_MAX, LEASE_MS_DEFAULT, MAX_INFLIGHT);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\ntry --help\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* Parses a whole decimal integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    if (!s || !*s)
        return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- batches ------------------------------------------------------------ */

/* Records copied out of the reader (whose record is valid only until its
 * next call) until a batch is full. Buffers are reused across batches. */
typedef struct batch {
    unsigned char *data;
    size_t len, cap;
    size_t *end;            /* end[i]: end offset of record i in data */
    sluice_record *recs;
    size_t n, max;
    /* Tensor formats: the rows' columns gathered, one buffer per column. */
    unsigned char *col[SLUICEI_READER_MAX_COLUMNS];
    size_t colcap[SLUICEI_READER_MAX_COLUMNS];
} batch;

/* Sets the batch size (buffers grow as needed). Returns 0, or -1 when
 * out of memory. */
static int batch_resize(batch *b, size_t max)
{
    if (max > b->max) {
        size_t *ne = realloc(b->end, max * sizeof *ne);
        if (ne)
            b->end = ne;
        sluice_record *nr = realloc(b->recs, max * sizeof *nr);
        if (nr)
            b->recs = nr;
        if (!ne || !nr)
            return -1;
    }
    b->max = max;
    b->n = b->len = 0;
    return 0;
}

static void batch_free(batch *b)
{
    free(b->data);
    free(b->end);
    free(b->recs);
    for (int i = 0; i < SLUICEI_READER_MAX_COLUMNS; i++)
        free(b->col[i]);
}

static int batch_add(batch *b, const sluice_record *r)
{
    if (r->len > b->cap - b->len) {
        size_t ncap = b->cap ? b->cap : 64 << 10;
        while (ncap - b->len < r->len) {
            if (ncap > SIZE_MAX / 2)
                return -1;
            ncap *= 2;
        }
        unsigned char *nd = realloc(b->data, ncap);
        if (!nd)
            return -1;
        b->data = nd;
        b->cap = ncap;
    }
    if (r->len)
        memcpy(b->data + b->len, r->data, r->len);
    b->len += r->len;
    b->end[b->n++] = b->len;
    return 0;
}

/* ---- run state ------------------------------------------------------- */

typedef struct config {
    const char *url, *queue, *format, *exec_cmd, *transform, *producer_id, *metrics_addr;
    sluicei_exec_mode exec_mode;
    long batch_size, inflight, lease_ms;
    int summary, quiet, follow;
    char **files;
    int nfiles;
} config;

/* What was pushed: of a file, of a task, of the whole run. */
typedef struct counts {
    uint64_t batches, records, bytes, sum;
} counts;

static void counts_add(counts *to, const counts *c)
{
    to->batches += c->batches;
    to->records += c->records;
    to->bytes += c->bytes;
    to->sum += c->sum;
}

/* The counters the producer API publishes in pstats:<id> (its heartbeat),
 * in the order of pc_field. */
enum { PC_BATCHES, PC_BYTES, PC_BLOCKED_US, PC_DUPLICATES, PC_TASKS_DONE, PC_TASKS_FAILED,
       PC_COUNT };
static const char *const pc_field[PC_COUNT] = {"batches",    "bytes",      "blocked_us",
                                               "duplicates", "tasks_done", "tasks_failed"};

/* What --metrics-addr serves, shared by three threads. The main thread
 * stores the producer's counters after every push and task (publish());
 * the server thread renders them on a scrape; the refresher thread reads,
 * on a Redis connection of its own, the queue's depth and budgets and the
 * counters this producer published in pstats:<id>. Those matter while a
 * push waits for room: the wait happens inside the producer API, which
 * keeps counting (its pipelined pushes complete; the wait grows) and
 * publishes every second, but does not return to us until room comes. A
 * counter is served as the larger of the two readings: both count the
 * same thing, one of them late. */
typedef struct pmetrics {
    const char *url, *queue;
    char id[MAX_PRODUCER_ID + 1];
    atomic_int id_set;                   /* id is written (release/acquire) */
    _Atomic uint64_t local[PC_COUNT];    /* from the API after each push and task */
    _Atomic uint64_t published[PC_COUNT];   /* pstats:<id> as last read */
    _Atomic uint64_t full_waits, reconnects;
    _Atomic int64_t depth, qbytes, max_batches, max_bytes;   /* -1: not read yet */
    atomic_int redis_up;                 /* the last refresh reached Redis */
    /* Refresher thread only; closed by main after the thread ended. */
    sluicei_router *router;
    int nparts;                          /* the queue's partitions (0: plain), once known */
    int nparts_known;
} pmetrics;

typedef struct run {
    const config *cf;
    sluice_producer *p;
    pmetrics *pm;              /* NULL without --metrics-addr */
    sluicei_transform *tf;
    int tty;
    double t0, last_progress;
    double last_push;          /* for the lease keepalive */
    counts total;              /* files mode: everything; job mode: tasks completed */
    counts live;               /* pushed so far, for the progress line */
    uint64_t tasks_done, tasks_failed, tasks_lost;
    uint64_t tasks_handed_back;  /* partition at its budget: handed back to resume later */
    sluice_err push_err;       /* the code of the last failed push or flush */
    int progress_shown;
    char err[1024];            /* the last reader or transform error */
} run;

static void progress(run *r, int force)
{
    double now = mono_s();
    if (r->cf->quiet || !r->tty || (!force && now - r->last_progress < 1.0))
        return;
    r->last_progress = now;
    double el = now - r->t0;
    fprintf(stderr, "\r%" PRIu64 " batches, %" PRIu64 " records, %.1f MB, %.1f MB/s\033[K",
            r->live.batches, r->live.records, (double)r->live.bytes / 1e6,
            el > 0 ? (double)r->live.bytes / 1e6 / el : 0.0);
    r->progress_shown = 1;
}

/* A line on stderr that must not mix with the \r progress line. */
static void say(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(run *r, const char *fmt, ...)
{
    va_list ap;
    if (r->progress_shown) {
        fputs("\r\033[K", stderr);
        r->progress_shown = 0;
    }
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* The producer API's notes of long waits (producer.h: opts.log). */
static void log_line(void *arg, const char *msg)
{
    say(arg, PROG ": %s\n", msg);
}

/* Stores the producer's counters for the metrics endpoint. */
static void publish(run *r)
{
    pmetrics *pm = r->pm;
    if (!pm || !r->p)
        return;
    sluice_producer_stats st;
    sluice_producer_stats_get(r->p, &st);
    const uint64_t v[PC_COUNT] = {st.batches,    st.bytes,      st.blocked_us,
                                  st.duplicates, st.tasks_done, st.tasks_failed};
    for (int i = 0; i < PC_COUNT; i++)
        atomic_store(&pm->local[i], v[i]);
    atomic_store(&pm->full_waits, st.full_waits);
    atomic_store(&pm->reconnects, st.reconnects);
}

enum outcome {
    OUT_DONE,         /* the input ended and every batch was handed over */
    OUT_STOPPED,      /* a signal: the partly filled batch was dropped */
    OUT_INPUT_ERROR,  /* reader, command or transform failed: r->err */
    OUT_PUSH_ERROR,   /* the producer refused: sluice_producer_errstr() */
};

/* Gathers the packed rows of b into one tensor per column. */
static enum outcome rows_to_tensors(run *r, batch *b, const sluicei_column *cols, size_t ncols,
                                    sluice_tensor *t)
{
    size_t row = 0;
    for (size_t c = 0; c < ncols; c++)
        row += cols[c].row_bytes;
    for (size_t i = 0; i < b->n; i++)
        if (b->recs[i].len != row) {
            snprintf(r->err, sizeof r->err, "row of %zu bytes, expected %zu", b->recs[i].len,
                     row);
            return OUT_INPUT_ERROR;
        }
    size_t off = 0;
    for (size_t c = 0; c < ncols; c++) {
        size_t need = b->n * cols[c].row_bytes;
        if (need > b->colcap[c]) {
            unsigned char *nc = realloc(b->col[c], need);
            if (!nc) {
                snprintf(r->err, sizeof r->err, "out of memory for a batch");
                return OUT_INPUT_ERROR;
            }
            b->col[c] = nc;
            b->colcap[c] = need;
        }
        for (size_t i = 0; i < b->n; i++)
            memcpy(b->col[c] + i * cols[c].row_bytes,
                   (const unsigned char *)b->recs[i].data + off, cols[c].row_bytes);
        off += cols[c].row_bytes;
        memset(&t[c], 0, sizeof t[c]);
        t[c].name = cols[c].name;
        t[c].dtype = cols[c].dtype;
        t[c].ndim = cols[c].ndim + 1;
        t[c].shape[0] = b->n;
        for (int d = 0; d < cols[c].ndim; d++)
            t[c].shape[d + 1] = cols[c].shape[d];
        t[c].data = b->col[c];
        t[c].nbytes = need;
    }
    return OUT_DONE;
}

/* Pushes batch b (n >= 1 records or rows), through the transform when
 * there is one, and empties it. */
static enum outcome emit(run *r, batch *b, const sluicei_column *cols, size_t ncols,
                         counts *c)
{
    size_t start = 0;
    for (size_t i = 0; i < b->n; i++) {
        b->recs[i].data = b->data + start;
        b->recs[i].len = b->end[i] - start;
        start = b->end[i];
    }
    const sluice_record *recs = b->recs;
    size_t nrec = b->n;
    const sluice_tensor *tens = NULL;
    size_t nt = 0;
    uint64_t rows = b->n;
    sluice_tensor gathered[SLUICEI_READER_MAX_COLUMNS];
    enum outcome o = OUT_DONE;

    if (r->tf) {
        sluicei_transform_result res;
        if (sluicei_transform_apply(r->tf, b->recs, b->n, &res, r->err, sizeof r->err) !=
            SLUICE_OK)
            o = OUT_INPUT_ERROR;
        recs = res.records;
        nrec = res.nrecords;
        tens = res.tensors;
        nt = res.ntensors;
        rows = nt ? res.rows : nrec;
    } else if (ncols > 0) {
        o = rows_to_tensors(r, b, cols, ncols, gathered);
        tens = gathered;
        nt = ncols;
        nrec = 0;
    }
    b->n = b->len = 0;
    if (o != OUT_DONE)
        return o;
    if (nrec == 0 && nt == 0)
        return OUT_DONE;   /* the transform dropped the batch */

    sluice_err e = nt ? sluice_producer_push_tensors(r->p, rows, tens, nt)
                      : sluice_producer_push_records(r->p, recs, nrec);
    if (e != SLUICE_OK) {
        r->push_err = e;
        return OUT_PUSH_ERROR;
    }
    counts one = {1, rows, 0, 0};
    for (size_t i = 0; i < nrec; i++) {
        one.bytes += recs[i].len;
        one.sum += sluicei_record_hash(recs[i].data, recs[i].len);
    }
    for (size_t i = 0; i < nt; i++) {
        one.bytes += tens[i].nbytes;
        one.sum += sluicei_record_hash(tens[i].data, tens[i].nbytes);
    }
    counts_add(c, &one);
    counts_add(&r->live, &one);
    r->last_push = mono_s();
    publish(r);
    progress(r, 0);
    return OUT_DONE;
}

/* Reads rd to its end in batches of b->max and pushes them; *c counts
 * what was handed over. *nread counts the records read. */
static enum outcome produce(run *r, batch *b, sluicei_reader *rd, counts *c, uint64_t *nread)
{
    size_t ncols = 0;
    const sluicei_column *cols = sluicei_reader_columns(rd, &ncols);
    sluice_record rec;
    sluice_err e;
    r->last_push = mono_s();
    b->n = b->len = 0;
    for (;;) {
        if (stop_flag) {
            b->n = b->len = 0;   /* a partly filled batch is not pushed */
            return OUT_STOPPED;
        }
        e = sluicei_reader_next(rd, &rec, r->err, sizeof r->err);
        if (e == SLUICE_EOF)
            return b->n ? emit(r, b, cols, ncols, c) : OUT_DONE;
        if (e != SLUICE_OK) {
            b->n = b->len = 0;
            return OUT_INPUT_ERROR;
        }
        (*nread)++;
        if (batch_add(b, &rec) != 0) {
            snprintf(r->err, sizeof r->err, "out of memory for a batch");
            b->n = b->len = 0;
            return OUT_INPUT_ERROR;
        }
        if (b->n == b->max) {
            enum outcome o = emit(r, b, cols, ncols, c);
            if (o != OUT_DONE)
                return o;
        } else if (mono_s() - r->last_push >= KEEPALIVE_MS / 1000.0) {
            /* Slow input: keep the task's lease and the heartbeat. */
            sluice_err e = sluice_producer_flush(r->p);
            if (e != SLUICE_OK) {
                r->push_err = e;
                return OUT_PUSH_ERROR;
            }
            r->last_push = mono_s();
        }
    }
}

static sluice_err open_input(run *r, sluicei_reader **rd, const char *format,
                             const char *const *paths, size_t npaths, uint64_t start,
                             uint64_t end)
{
    if (r->cf->exec_cmd)
        return sluicei_exec_open(rd, r->cf->exec_cmd, paths, npaths, start, end,
                                 r->cf->exec_mode, r->err, sizeof r->err);
    return sluicei_reader_open(rd, format, paths, npaths, start, end, r->err, sizeof r->err);
}

/* ---- files mode ---------------------------------------------------------- */

static int run_files(run *r, batch *b)
{
    const config *cf = r->cf;
    size_t group = 1;
    if (!cf->exec_cmd) {
        const sluicei_reader_format *fmt;
        if (sluicei_reader_check(cf->format, (size_t)cf->nfiles, &fmt, r->err, sizeof r->err) ==
            SLUICE_OK)
            group = fmt->group;
    }
    int failed = 0, push_failed = 0;
    size_t done_groups = 0, ngroups = (size_t)cf->nfiles / group;
    enum outcome o = OUT_DONE;
    for (size_t g = 0; g < ngroups && !stop_flag; g++) {
        const char *const *paths = (const char *const *)cf->files + g * group;
        sluicei_reader *rd;
        uint64_t nread = 0;
        /* A partitioned queue: each file to the next partition. */
        if (g > 0 && sluicei_producer_new_adhoc(r->p) != SLUICE_OK) {
            push_failed = 1;
            break;
        }
        if (open_input(r, &rd, cf->format, paths, group, 0, UINT64_MAX) != SLUICE_OK) {
            say(r, PROG ": %s\n", r->err);
            failed = 1;
            break;
        }
        o = produce(r, b, rd, &r->total, &nread);
        sluicei_reader_close(rd);
        if (o == OUT_DONE) {
            done_groups++;
            continue;
        }
        if (o == OUT_INPUT_ERROR) {
            say(r, PROG ": %s\n", r->err);
            failed = 1;
        } else if (o == OUT_PUSH_ERROR) {
            push_failed = 1;
        }
        break;
    }
    /* Everything handed over must be stored before we report; after a
     * failed push the producer has already given up on what it held. */
    int flushed = 0;
    if (!push_failed) {
        flushed = sluice_producer_flush(r->p) == SLUICE_OK;
        publish(r);
        push_failed = !flushed;
    }
    if (push_failed)
        say(r, PROG ": %s\n", sluice_producer_errstr(r->p));
    int interrupted = stop_flag && (done_groups < ngroups || !flushed);
    if (interrupted)
        say(r, PROG ": interrupted by %s: %zu of %d files pushed completely\n",
            stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", done_groups * group, cf->nfiles);
    if (cf->summary && flushed)
        printf("records=%" PRIu64 " batches=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64
               "\n", r->total.records, r->total.batches, r->total.bytes, r->total.sum);
    if (interrupted)
        return 128 + (stop_signal ? stop_signal : SIGINT);
    return failed || push_failed ? EXIT_RUNTIME : 0;
}

/* ---- job mode ------------------------------------------------------------ */

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s && s[1] ? s + 1 : p;
}

/* "tfrecord shard-7.tfrecord records 0:5000" for progress and errors: the
 * task's range, its end as read when the task runs to the end of its
 * paths (nread records read; none read: an open end). */
static void describe_task(const sluice_task *t, uint64_t nread, int exec, char *out, size_t n)
{
    char end[24] = "";
    if (t->end != UINT64_MAX)
        snprintf(end, sizeof end, "%" PRIu64, t->end);
    else if (nread)
        snprintf(end, sizeof end, "%" PRIu64, t->start + nread);
    int k = snprintf(out, n, "%s %s", exec ? "exec" : t->reader, base_name(t->paths[0]));
    if (t->npaths > 1 && k > 0 && (size_t)k < n)
        k += snprintf(out + k, n - (size_t)k, " +%zu more", t->npaths - 1);
    if (k > 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, " records %" PRIu64 ":%s", t->start, end);
}

/* The API reports a task lease lost to a reaper as SLUICE_ERR_IO with an
 * errstr starting "lease lost" (producer.h). */
static int lease_lost(sluice_producer *p)
{
    return strncmp(sluice_producer_errstr(p), "lease lost", 10) == 0;
}

/* Push errors after which this producer cannot go on with any task. */
static int fatal_push_error(sluice_producer *p, sluice_err e)
{
    return e == SLUICE_ERR_NOQUEUE || e == SLUICE_ERR_AUTH ||
           (e == SLUICE_ERR_IO && !lease_lost(p));
}

/* Produces one claimed task and finishes it (done, failed, handed back).
 * Returns 0 to go on, EXIT_RUNTIME when the producer cannot go on, or -1
 * after a signal. */
static int run_task(run *r, batch *b, sluice_task *t)
{
    char what[512], key[64];
    double t0 = mono_s();
    counts c = {0};
    uint64_t nread = 0;
    snprintf(key, sizeof key, "%" PRIu32 ":%" PRIu64, t->epoch, t->shard);
    if (batch_resize(b, t->batch_size) != 0) {
        snprintf(r->err, sizeof r->err, "out of memory for batches of %" PRIu32 " records",
                 t->batch_size);
        sluice_producer_task_release(r->p, t);
        say(r, PROG ": task %s: %s\n", key, r->err);
        return EXIT_RUNTIME;
    }
    sluicei_reader *rd = NULL;
    enum outcome o = OUT_INPUT_ERROR;
    if (open_input(r, &rd, t->reader, t->paths, t->npaths, t->start, t->end) == SLUICE_OK) {
        o = produce(r, b, rd, &c, &nread);
        sluicei_reader_close(rd);   /* kills an --exec command still running */
    }
    describe_task(t, nread, r->cf->exec_cmd != NULL, what, sizeof what);
    /* A push cut short by the signal (a wait for room ends at once). */
    if (o == OUT_PUSH_ERROR && stop_flag)
        o = OUT_STOPPED;

    sluice_err e;
    switch (o) {
    case OUT_DONE:
        e = sluice_producer_task_done(r->p, t);
        if (e == SLUICE_OK) {
            r->tasks_done++;
            counts_add(&r->total, &c);
            if (!r->cf->quiet)
                say(r, "task %s (%s) done: %" PRIu64 " batches in %.1f s\n", key, what,
                    c.batches, mono_s() - t0);
            return 0;
        }
        if (e == SLUICE_ERR_FULL) {
            /* Its last batches found the queue (its partition) at its
             * budget while the producer is wanted elsewhere, or the signal
             * came while they waited: handed back with its resume point;
             * errstr says why. */
            if (!stop_flag)
                r->tasks_handed_back++;
            if (!r->cf->quiet)
                say(r, "task %s (%s): %s\n", key, what, sluice_producer_errstr(r->p));
            return stop_flag ? -1 : 0;
        }
        if (lease_lost(r->p)) {
            r->tasks_lost++;
            if (!r->cf->quiet)
                say(r, "task %s (%s): %s\n", key, what, sluice_producer_errstr(r->p));
            return 0;
        }
        say(r, PROG ": task %s (%s): %s\n", key, what, sluice_producer_errstr(r->p));
        return fatal_push_error(r->p, e) ? EXIT_RUNTIME : 0;
    case OUT_STOPPED:
        e = sluice_producer_task_release(r->p, t);
        if (!r->cf->quiet)
            say(r, "task %s (%s): %s\n", key, what,
                e == SLUICE_OK ? "handed back (shutting down)" : sluice_producer_errstr(r->p));
        return -1;
    case OUT_INPUT_ERROR:
        say(r, PROG ": task %s (%s) attempt %d failed: %s\n", key, what, t->attempt, r->err);
        e = sluice_producer_task_fail(r->p, t, r->err);   /* frees t */
        if (e == SLUICE_OK)
            r->tasks_failed++;
        return e == SLUICE_OK || lease_lost(r->p) ? 0 : EXIT_RUNTIME;
    case OUT_PUSH_ERROR:
        break;
    }
    /* A push failed (r->push_err). */
    char why[1024];
    snprintf(why, sizeof why, "%s", sluice_producer_errstr(r->p));
    if (r->push_err == SLUICE_ERR_FULL) {
        /* The queue is at its budget and a task of an earlier epoch waits,
         * or its partition is while another has room and waiting tasks:
         * hand it back (with its resume point) and claim the next, which
         * is that task, or prefers a partition with room. */
        e = sluice_producer_task_release(r->p, t);
        if (e == SLUICE_OK)
            r->tasks_handed_back++;
        if (e == SLUICE_OK && !r->cf->quiet)
            say(r, "task %s (%s): %s\n", key, what, sluice_producer_errstr(r->p));
        else if (e != SLUICE_OK)
            say(r, PROG ": task %s (%s): %s\n", key, what, sluice_producer_errstr(r->p));
        return e == SLUICE_OK || lease_lost(r->p) ? 0 : EXIT_RUNTIME;
    }
    if (lease_lost(r->p)) {
        sluice_producer_task_release(r->p, t);   /* only frees it: it is not ours */
        r->tasks_lost++;
        if (!r->cf->quiet)
            say(r, "task %s (%s): %s\n", key, what, why);
        return 0;
    }
    int fatal = fatal_push_error(r->p, r->push_err);
    if (fatal)
        sluice_producer_task_release(r->p, t);
    else if (sluice_producer_task_fail(r->p, t, why) == SLUICE_OK)
        r->tasks_failed++;
    say(r, PROG ": task %s (%s): %s\n", key, what, why);
    return fatal ? EXIT_RUNTIME : 0;
}

/* Sleeps up to ms, waking early on a signal. */
static void nap(int ms)
{
    for (int i = 0; i < ms / 50 && !stop_flag; i++) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int run_job(run *r, batch *b)
{
    const config *cf = r->cf;
    int rc = 0, said_waiting = 0;
    for (;;) {
        sluice_task *t = NULL;
        sluice_err e = sluice_producer_task_claim(r->p, &t, -1, (int)cf->lease_ms);
        publish(r);
        if (e == SLUICE_OK) {
            said_waiting = 0;
            int k = run_task(r, b, t);
            publish(r);
            if (k == -1)
                break;
            if (k != 0) {
                rc = k;
                break;
            }
            continue;
        }
        if (stop_flag)
            break;
        if (e == SLUICE_EOF) {
            if (!cf->follow) {
                if (!cf->quiet && r->tasks_done + r->tasks_failed + r->tasks_lost == 0)
                    say(r, "%s\n", sluice_producer_errstr(r->p));
                break;
            }
            if (!cf->quiet && !said_waiting)
                say(r, "%s; waiting for the next job (--follow)\n",
                    sluice_producer_errstr(r->p));
            said_waiting = 1;
            /* A claim that finds no job does not beat; a flush does (when
             * due), so that an idle producer stays alive in sluice-ctl
             * info/stat and its final counters reach pstats. */
            sluice_producer_flush(r->p);
            publish(r);
            nap(FOLLOW_POLL_MS);
            continue;
        }
        say(r, PROG ": %s\n", sluice_producer_errstr(r->p));
        rc = EXIT_RUNTIME;
        break;
    }
    /* Every task ended through done/fail/release, each of which flushes. */
    if (stop_flag && !cf->quiet)
        say(r, PROG ": %s: shut down cleanly\n", stop_signal == SIGTERM ? "SIGTERM" : "SIGINT");
    if (cf->summary && rc == 0)
        printf("records=%" PRIu64 " batches=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64
               " tasks=%" PRIu64 "\n", r->total.records, r->total.batches, r->total.bytes,
               r->total.sum, r->tasks_done);
    return rc;
}

/* ---- metrics (--metrics-addr) -------------------------------------------- */

/* Runs a command on the node of queue q whose reply is an integer, a
 * decimal string or nil (-1), and adds its value to *sum (unless -1).
 * Returns 0, or -1 when the command failed. */
static int redis_add(pmetrics *pm, const char *q, int64_t deadline, int argc, const char **argv,
                     int64_t *sum)
{
    redisReply *r = NULL;
    sluice_err e = sluicei_router_command(pm->router, q, deadline, &r, argc, argv, NULL);
    int rc = -1;
    if (e == SLUICE_OK) {
        int64_t v = -1;
        rc = 0;
        if (r->type == REDIS_REPLY_INTEGER)
            v = r->integer;
        else if (r->type == REDIS_REPLY_STRING)
            v = strtoll(r->str, NULL, 10);
        if (v >= 0)
            *sum = *sum < 0 ? v : *sum + v;
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Reads one queue (a plain queue or a partition) into the sums: its
 * budgets, depth, bytes and this producer's published counters. */
static int pm_read(pmetrics *pm, const char *q, int64_t deadline, int64_t v[4],
                   uint64_t published[PC_COUNT])
{
    char k_meta[SLUICE_MAX_KEY], k_dlv[SLUICE_MAX_KEY], k_bytes[SLUICE_MAX_KEY];
    char k_pstats[SLUICE_MAX_KEY + MAX_PRODUCER_ID + 8];
    sluicei_key(k_meta, q, "meta");
    /* dlv holds one entry per batch the queue holds (queued or delivered
     * and not yet acknowledged): the depth the budgets count. */
    sluicei_key(k_dlv, q, "dlv");
    sluicei_key(k_bytes, q, "bytes");
    const char *a_maxn[3] = {"HGET", k_meta, "max_batches"};
    const char *a_maxb[3] = {"HGET", k_meta, "max_bytes"};
    const char *a_depth[2] = {"HLEN", k_dlv};
    const char *a_bytes[2] = {"GET", k_bytes};
    int ok = redis_add(pm, q, deadline, 3, a_maxn, &v[0]) == 0 &&
             redis_add(pm, q, deadline, 3, a_maxb, &v[1]) == 0 &&
             redis_add(pm, q, deadline, 2, a_depth, &v[2]) == 0 &&
             redis_add(pm, q, deadline, 2, a_bytes, &v[3]) == 0;
    if (ok && atomic_load_explicit(&pm->id_set, memory_order_acquire)) {
        char name[MAX_PRODUCER_ID + 8];
        snprintf(name, sizeof name, "pstats:%s", pm->id);
        sluicei_key(k_pstats, q, name);
        const char *argv[2 + PC_COUNT] = {"HMGET", k_pstats};
        for (int i = 0; i < PC_COUNT; i++)
            argv[2 + i] = pc_field[i];
        redisReply *r = NULL;
        ok = sluicei_router_command(pm->router, q, deadline, &r, 2 + PC_COUNT, argv, NULL) ==
                 SLUICE_OK &&
             r->type == REDIS_REPLY_ARRAY && r->elements == PC_COUNT;
        for (int i = 0; ok && i < PC_COUNT; i++)
            if (r->element[i]->type == REDIS_REPLY_STRING)
                published[i] += strtoull(r->element[i]->str, NULL, 10);
        if (r)
            freeReplyObject(r);
    }
    return ok;
}

/* Refresher thread, every METRICS_REFRESH_MS: the queue's depth, bytes and
 * budgets, and this producer's published counters (a partitioned queue:
 * the sums over its partitions). A failure only shows as
 * sluice_producer_metrics_redis_up 0: the producer itself reports what is
 * wrong with Redis. */
static void pm_refresh(void *arg)
{
    pmetrics *pm = arg;
    char err[512];
    int64_t deadline = sluicei_now_ms() + METRICS_REDIS_TIMEOUT_MS;
    if (!pm->router && sluicei_router_open(&pm->router, pm->url, METRICS_REDIS_TIMEOUT_MS,
                                           METRICS_REDIS_TIMEOUT_MS, err, sizeof err) != SLUICE_OK) {
        atomic_store(&pm->redis_up, 0);
        return;
    }
    if (!pm->nparts_known) {
        if (sluicei_queue_partitions(pm->router, pm->queue, &pm->nparts, err, sizeof err) !=
            SLUICE_OK) {
            atomic_store(&pm->redis_up, 0);
            return;
        }
        pm->nparts_known = 1;
    }
    int64_t v[4] = {-1, -1, -1, -1};   /* max_batches, max_bytes, depth, bytes */
    uint64_t published[PC_COUNT] = {0};
    int ok = 1;
    for (int k = 0; ok && k < (pm->nparts ? pm->nparts : 1); k++) {
        char q[SLUICE_MAX_QUEUE_NAME + 8];
        if (pm->nparts)
            sluicei_partition_name(q, pm->queue, k);
        else
            snprintf(q, sizeof q, "%s", pm->queue);
        ok = pm_read(pm, q, deadline, v, published);
    }
    if (ok) {
        for (int i = 0; i < PC_COUNT; i++)
            if (published[i] > atomic_load(&pm->published[i]))
                atomic_store(&pm->published[i], published[i]);
        atomic_store(&pm->max_batches, v[0]);
        atomic_store(&pm->max_bytes, v[1]);
        atomic_store(&pm->depth, v[2]);
        atomic_store(&pm->qbytes, v[3] < 0 ? 0 : v[3]);
    }
    atomic_store(&pm->redis_up, ok);
}

/* Server thread, on each scrape: atomics only. */
static void pm_render(sluicei_mtext *t, void *arg)
{
    pmetrics *pm = arg;
    const char *id = atomic_load_explicit(&pm->id_set, memory_order_acquire) ? pm->id : NULL;
    const char *const lab[] = {"queue", pm->queue, "producer", id, NULL};
    double v[PC_COUNT];
    for (int i = 0; i < PC_COUNT; i++) {
        uint64_t a = atomic_load(&pm->local[i]), b = atomic_load(&pm->published[i]);
        v[i] = (double)(a > b ? a : b);
    }
    const struct {
        const char *name, *type, *help;
        double v;
    } rows[] = {
        {"sluice_producer_batches_pushed_total", "counter",
         "Batches this producer stored in the queue (pushes dropped as duplicates not counted).",
         v[PC_BATCHES]},
        {"sluice_producer_bytes_pushed_total", "counter",
         "Frame bytes of the batches this producer stored in the queue.", v[PC_BYTES]},
        {"sluice_producer_duplicates_total", "counter",
         "Pushes Redis dropped because the batch id was queued or acknowledged already.",
         v[PC_DUPLICATES]},
        {"sluice_producer_backpressure_seconds_total", "counter",
         "Seconds this producer waited for room in the queue (backpressure: the consumers are "
         "slower).",
         v[PC_BLOCKED_US] / 1e6},
        {"sluice_producer_backpressure_waits_total", "counter",
         "Pushes that found the queue at its budget and waited for room.",
         (double)atomic_load(&pm->full_waits)},
        {"sluice_producer_tasks_done_total", "counter", "Tasks of the job this producer completed.",
         v[PC_TASKS_DONE]},
        {"sluice_producer_tasks_failed_total", "counter",
         "Task attempts of this producer that failed (reader, command or transform error).",
         v[PC_TASKS_FAILED]},
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

/* ---- flags --------------------------------------------------------------- */

/* Parses argv into cf. Returns 0, -1 after --help, or EXIT_USAGE (message
 * printed). Everything is checked before any connection. */
static int parse_flags(int argc, char **argv, config *cf)
{
    int only_files = 0, format_given = 0;
    const char *exec_format = NULL;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_files || a[0] != '-' || a[1] == '\0') {
            cf->files[cf->nfiles++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_files = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return -1;
        }
        if (strcmp(a, "--summary") == 0) {
            cf->summary = 1;
            continue;
        }
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            cf->quiet = 1;
            continue;
        }
        if (strcmp(a, "--follow") == 0) {
            cf->follow = 1;
            continue;
        }
        /* Flags with a value: "--flag value" or "--flag=value". */
        static const char *const valued[] = {"--redis",     "--queue",     "--format",
                                             "--batch-size", "--inflight", "--lease-ms",
                                             "--exec",      "--exec-format", "--transform",
                                             "--id",        "--metrics-addr"};
        const char *val = NULL, *name = NULL;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0] && !name; k++) {
            size_t kl = strlen(valued[k]);
            if (strcmp(a, valued[k]) == 0) {
                name = valued[k];
                if (i + 1 >= argc)
                    return usage_error("%s needs a value", name);
                val = argv[++i];
            } else if (strncmp(a, valued[k], kl) == 0 && a[kl] == '=') {
                name = valued[k];
                val = a + kl + 1;
            }
        }
        if (!name)
            return usage_error("unknown flag '%.64s'", a);
        if (strcmp(name, "--redis") == 0) {
            cf->url = val;
        } else if (strcmp(name, "--queue") == 0) {
            cf->queue = val;
        } else if (strcmp(name, "--format") == 0) {
            cf->format = val;
            format_given = 1;
        } else if (strcmp(name, "--batch-size") == 0) {
            if (parse_int(val, 1, MAX_BATCH_SIZE, &cf->batch_size) != 0)
                return usage_error("--batch-size '%s' is not a number in 1..%d", val,
                                   MAX_BATCH_SIZE);
        } else if (strcmp(name, "--inflight") == 0) {
            if (parse_int(val, 1, MAX_INFLIGHT, &cf->inflight) != 0)
                return usage_error("--inflight '%s' is not a number in 1..%d", val,
                                   MAX_INFLIGHT);
        } else if (strcmp(name, "--lease-ms") == 0) {
            if (parse_int(val, LEASE_MS_MIN, LEASE_MS_MAX, &cf->lease_ms) != 0)
                return usage_error("--lease-ms '%s' is not a number in %d..%d", val,
                                   LEASE_MS_MIN, LEASE_MS_MAX);
        } else if (strcmp(name, "--exec") == 0) {
            if (!*val)
                return usage_error("--exec needs a command");
            cf->exec_cmd = val;
        } else if (strcmp(name, "--exec-format") == 0) {
            exec_format = val;
            if (strcmp(val, "records") == 0)
                cf->exec_mode = SLUICEI_EXEC_FRAMED;
            else if (strcmp(val, "msgpack") == 0)
                cf->exec_mode = SLUICEI_EXEC_MSGPACK;
            else
                return usage_error("--exec-format '%s' is not 'records' or 'msgpack'", val);
        } else if (strcmp(name, "--transform") == 0) {
            if (!*val)
                return usage_error("--transform needs a library path");
            cf->transform = val;
        } else if (strcmp(name, "--id") == 0) {
            if (!*val || strlen(val) > 64)
                return usage_error("--id must be 1 to 64 bytes");
            cf->producer_id = val;
        } else if (strcmp(name, "--metrics-addr") == 0) {
            char err[512];
            if (sluicei_metrics_addr_check("--metrics-addr", val, err, sizeof err) != SLUICE_OK)
                return usage_error("%s", err);
            cf->metrics_addr = val;
        }
    }

    int job = cf->nfiles == 0;
    if (!cf->queue)
        return usage_error("--queue is required");
    if (exec_format && !cf->exec_cmd)
        return usage_error("--exec-format goes with --exec");
    if (job) {
        if (cf->batch_size)
            return usage_error("--batch-size is for files mode; in job mode (no FILE) the "
                               "job's batch size applies (sluice-ctl submit --batch-size)");
        if (format_given)
            return usage_error("--format is for files mode; in job mode (no FILE) the "
                               "manifest names each shard's reader");
        if (!cf->lease_ms)
            cf->lease_ms = LEASE_MS_DEFAULT;
        return 0;
    }
    if (cf->lease_ms || cf->follow)
        return usage_error("%s is for job mode (no FILE given)",
                           cf->follow ? "--follow" : "--lease-ms");
    if (cf->batch_size == 0)
        return usage_error("--batch-size is required with FILEs (or give no FILE for job mode)");
    if (cf->exec_cmd) {
        if (format_given)
            return usage_error("--format and --exec exclude each other (the command "
                               "writes the records)");
        return 0;
    }
    char err[256];
    if (sluicei_reader_check(cf->format, 0, NULL, err, sizeof err) != SLUICE_OK)
        return usage_error("--format: %s", err);
    if (sluicei_reader_check(cf->format, (size_t)cf->nfiles, NULL, err, sizeof err) != SLUICE_OK)
        return usage_error("%s", err);
    return 0;
}

int main(int argc, char **argv)
{
    config cf = {.format = "tfrecord", .exec_mode = SLUICEI_EXEC_FRAMED};
    cf.url = getenv("SLUICE_REDIS_URL");
    if (!cf.url || !*cf.url)
        cf.url = DEFAULT_URL;
    cf.files = calloc((size_t)argc, sizeof *cf.files);
    if (!cf.files) {
        fprintf(stderr, PROG ": out of memory\n");
        return EXIT_RUNTIME;
    }
    int rc = parse_flags(argc, argv, &cf);
    if (rc != 0) {
        free(cf.files);
        return rc < 0 ? 0 : rc;
    }
    /* Fail before pushing anything when an input is plainly missing. */
    for (int i = 0; i < cf.nfiles && !cf.exec_cmd; i++)
        if (access(cf.files[i], R_OK) != 0) {
            fprintf(stderr, PROG ": %s: %s\n", cf.files[i], strerror(errno));
            free(cf.files);
            return EXIT_RUNTIME;
        }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* Restart reads and writes: the loop looks at stop_flag itself. */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    run r = {.cf = &cf};
    char err[1024];
    r.tty = isatty(STDERR_FILENO);
    r.t0 = r.last_progress = mono_s();
    /* The metrics port is bound before anything else: a port in use fails
     * the start, before any connection or task. */
    pmetrics pm = {.url = cf.url, .queue = cf.queue};
    sluicei_metrics *ms = NULL;
    if (cf.metrics_addr) {
        atomic_init(&pm.depth, -1);
        atomic_init(&pm.qbytes, -1);
        atomic_init(&pm.max_batches, -1);
        atomic_init(&pm.max_bytes, -1);
        sluicei_metrics_opts mo = {.addr = cf.metrics_addr, .render = pm_render,
                                   .refresh = pm_refresh, .refresh_ms = METRICS_REFRESH_MS,
                                   .arg = &pm};
        if (sluicei_metrics_open(&ms, &mo, err, sizeof err) != SLUICE_OK) {
            fprintf(stderr, PROG ": --metrics-addr: %s\n", err);
            free(cf.files);
            return EXIT_RUNTIME;
        }
        r.pm = &pm;
    }
    if (cf.transform &&
        sluicei_transform_open(&r.tf, cf.transform, err, sizeof err) != SLUICE_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        sluicei_metrics_close(ms);
        free(cf.files);
        return EXIT_RUNTIME;
    }
    sluice_producer_opts o = {
        .redis_url = cf.url,
        .queue = cf.queue,
        .producer_id = cf.producer_id,
        .max_inflight = (int)cf.inflight,
        .stop = (volatile int *)&stop_flag,
        .log = cf.quiet ? NULL : log_line,
        .log_arg = &r,
    };
    sluice_err e = sluice_producer_open(&r.p, &o, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        sluicei_metrics_close(ms);
        sluicei_router_close(pm.router);
        sluicei_transform_close(r.tf);
        free(cf.files);
        /* A malformed --redis URL or queue name is a usage error. */
        return e == SLUICE_ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
    }
    if (r.pm) {
        snprintf(pm.id, sizeof pm.id, "%s", sluice_producer_id(r.p));
        atomic_store_explicit(&pm.id_set, 1, memory_order_release);
    }
    batch b = {0};
    if (batch_resize(&b, cf.nfiles ? (size_t)cf.batch_size : 1) != 0) {
        fprintf(stderr, PROG ": out of memory\n");
        rc = EXIT_RUNTIME;
    } else {
        rc = cf.nfiles ? run_files(&r, &b) : run_job(&r, &b);
    }

    sluice_producer_stats st;
    sluice_producer_stats_get(r.p, &st);
    if (r.progress_shown)
        fputc('\n', stderr);
    if (!cf.quiet) {
        double el = mono_s() - r.t0;
        fprintf(stderr,
                "pushed %" PRIu64 " batches, %" PRIu64 " records, %.1f MB in %.1f s "
                "(%.1f MB/s), blocked %.1f s by backpressure",
                st.batches + st.duplicates, st.records, (double)st.bytes / 1e6, el,
                el > 0 ? (double)st.bytes / 1e6 / el : 0.0, (double)st.blocked_us / 1e6);
        if (st.duplicates)
            fprintf(stderr, ", %" PRIu64 " already present", st.duplicates);
        if (st.reconnects)
            fprintf(stderr, ", %" PRIu64 " reconnect%s", st.reconnects,
                    st.reconnects == 1 ? "" : "s");
        if (!cf.nfiles) {
            fprintf(stderr, "; tasks: %" PRIu64 " done, %" PRIu64 " failed", r.tasks_done,
                    r.tasks_failed);
            if (r.tasks_lost)
                fprintf(stderr, ", %" PRIu64 " lost to the reaper", r.tasks_lost);
            if (r.tasks_handed_back)
                fprintf(stderr, ", %" PRIu64 " handed back to make way", r.tasks_handed_back);
        }
        fputc('\n', stderr);
    }
    batch_free(&b);
    /* The threads end before what they read goes. */
    sluicei_metrics_close(ms);
    sluicei_router_close(pm.router);
    sluice_producer_close(r.p);
    sluicei_transform_close(r.tf);
    free(cf.files);
    return rc;
}
