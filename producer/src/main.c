/* sluice-producer: reads record files and pushes them, in batches, into a
 * sluice queue. Built on the producer API (producer.h) and the readers
 * (reader.h); this file is only flags, signals, batching and reporting.
 *
 * Batches never span files: the last batch of each file may be short. */
#include <sluice/producer.h>

#include "checksum.h"
#include "reader.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "sluice-producer"
#define DEFAULT_URL "redis://127.0.0.1:6379"
#define MAX_BATCH_SIZE 1000000
#define MAX_INFLIGHT 1024

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

static volatile sig_atomic_t stop_flag;
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
    stop_flag = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " --queue Q --batch-size N [options] FILE...\n"
            "\n"
            "Reads every FILE in order, groups its records into batches of N records\n"
            "(a file's last batch may be shorter; a batch never spans two files) and\n"
            "pushes them into queue Q, waiting while the queue is at its budget.\n"
            "\n"
            "  --redis URL        redis://[user[:password]@]host[:port][/db] or\n"
            "                     unix:///path/to/redis.sock[?db=N]; default: $SLUICE_REDIS_URL,\n"
            "                     else " DEFAULT_URL ". A password may come from\n"
            "                     $SLUICE_REDIS_PASSWORD instead of the URL.\n"
            "  --queue Q          the queue to push into (create it with: sluice-ctl create Q)\n"
            "  --format F         input format (default tfrecord):\n");
    const sluicei_reader_format *fmt;
    for (size_t i = 0; (fmt = sluicei_reader_format_at(i)) != NULL; i++)
        fprintf(f, "                       %-9s %s\n", fmt->name, fmt->summary);
    fprintf(f,
            "  --batch-size N     records per batch, 1..%d\n"
            "  --inflight K       pushes pipelined before waiting for replies, 1..%d\n"
            "                     (default 4)\n"
            "  --summary          at the end print one line to stdout:\n"
            "                     records=R batches=B bytes=N checksum=<16 hex digits>\n"
            "                     (bytes: record payload bytes; checksum: sum mod 2^64 of the\n"
            "                     FNV-1a 64 hash of every record pushed)\n"
            "  --quiet            no progress and no final report on stderr\n"
            "  --help             this text\n"
            "\n"
            "A corrupt or truncated file stops the run: the batches before the damage\n"
            "stay pushed, the partly filled batch is not, and the error names the file\n"
            "and byte offset. A lost Redis connection is regained and nothing is lost.\n"
            "On SIGINT or SIGTERM the producer stops reading, waits for the pushes in\n"
            "flight (not for room in a full queue) and exits 130 (SIGINT) or 143\n"
            "(SIGTERM), or 0 if all input had been pushed already.\n"
            "\n"
            "Exit status: 0 success, 1 runtime error, 2 usage error, 130/143 interrupted.\n"
            "\n"
            "example:\n"
            "  sluice-ctl create train\n"
            "  " PROG " --redis redis://127.0.0.1:6379 --queue train --format tfrecord \\\n"
            "      --batch-size 64 --summary data/train-*.tfrecord\n",
            MAX_BATCH_SIZE, MAX_INFLIGHT);
}

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
    uint64_t sum;           /* checksum of these records */
} batch;

static int batch_init(batch *b, size_t max)
{
    memset(b, 0, sizeof *b);
    b->max = max;
    b->end = malloc(max * sizeof *b->end);
    b->recs = malloc(max * sizeof *b->recs);
    return b->end && b->recs ? 0 : -1;
}

static void batch_free(batch *b)
{
    free(b->data);
    free(b->end);
    free(b->recs);
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
    b->sum += sluicei_record_hash(r->data, r->len);
    return 0;
}

/* ---- run state ------------------------------------------------------- */

typedef struct run {
    sluice_producer *p;
    int quiet, tty;
    double t0, last_progress;
    uint64_t batches, records, bytes, sum;   /* handed to the producer */
    int progress_shown;
} run;

static void progress(run *r, int force)
{
    double now = mono_s();
    if (r->quiet || !r->tty || (!force && now - r->last_progress < 1.0))
        return;
    r->last_progress = now;
    double el = now - r->t0;
    fprintf(stderr, "\r%" PRIu64 " batches, %" PRIu64 " records, %.1f MB, %.1f MB/s\033[K",
            r->batches, r->records, (double)r->bytes / 1e6,
            el > 0 ? (double)r->bytes / 1e6 / el : 0.0);
    r->progress_shown = 1;
}

static sluice_err push_batch(run *r, batch *b)
{
    if (b->n == 0)
        return SLUICE_OK;
    size_t start = 0;
    for (size_t i = 0; i < b->n; i++) {
        b->recs[i].data = b->data + start;
        b->recs[i].len = b->end[i] - start;
        start = b->end[i];
    }
    sluice_err e = sluice_producer_push_records(r->p, b->recs, b->n);
    if (e == SLUICE_OK) {
        r->batches++;
        r->records += b->n;
        r->bytes += b->len;
        r->sum += b->sum;
        progress(r, 0);
    }
    b->n = 0;
    b->len = 0;
    b->sum = 0;
    return e;
}

/* Pushes every record of path. Returns 0, or 1 after printing the error
 * (a failed push is reported by the caller through errstr). *push_failed
 * tells which. */
static int push_file(run *r, batch *b, const char *format, const char *path, int *push_failed)
{
    sluicei_reader *rd;
    sluice_record rec;
    char err[1024];
    sluice_err e = sluicei_reader_open(&rd, format, path, err, sizeof err);
    *push_failed = 0;
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    while (!stop_flag && (e = sluicei_reader_next(rd, &rec, err, sizeof err)) == SLUICE_OK) {
        if (batch_add(b, &rec) != 0) {
            snprintf(err, sizeof err, "%s: out of memory for a batch", path);
            e = SLUICE_ERR_NOMEM;
            break;
        }
        if (b->n == b->max && (e = push_batch(r, b)) != SLUICE_OK) {
            *push_failed = 1;
            break;
        }
    }
    sluicei_reader_close(rd);
    if (stop_flag && !*push_failed && e == SLUICE_OK) {
        /* Interrupted: the partly filled batch is not pushed. */
        b->n = b->len = 0;
        b->sum = 0;
        return 0;
    }
    if (e == SLUICE_EOF) {
        if (push_batch(r, b) == SLUICE_OK)
            return 0;
        *push_failed = 1;
        return 1;
    }
    if (!*push_failed) {
        /* Corrupt input: what was pushed stays pushed (the caller flushes
         * before reporting); the partial batch is dropped. */
        b->n = b->len = 0;
        b->sum = 0;
        fprintf(stderr, PROG ": %s\n", err);
    }
    return 1;
}

int main(int argc, char **argv)
{
    const char *url = getenv("SLUICE_REDIS_URL");
    const char *queue = NULL, *format = "tfrecord";
    long batch_size = 0, inflight = 0;
    int summary = 0, quiet = 0, nfiles = 0;
    char **files = calloc((size_t)argc, sizeof *files);
    if (!files) {
        fprintf(stderr, PROG ": out of memory\n");
        return EXIT_RUNTIME;
    }
    if (!url || !*url)
        url = DEFAULT_URL;

    int only_files = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_files || a[0] != '-' || a[1] == '\0') {
            files[nfiles++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_files = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            free(files);
            return 0;
        }
        if (strcmp(a, "--summary") == 0) {
            summary = 1;
            continue;
        }
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            quiet = 1;
            continue;
        }
        /* Flags with a value: "--flag value" or "--flag=value". */
        static const char *const valued[] = {"--redis", "--queue", "--format", "--batch-size",
                                             "--inflight"};
        const char *val = NULL, *name = NULL;
        char namebuf[64];
        for (size_t k = 0; k < sizeof valued / sizeof valued[0] && !name; k++) {
            size_t kl = strlen(valued[k]);
            if (strcmp(a, valued[k]) == 0) {
                name = valued[k];
                if (i + 1 >= argc) {
                    free(files);
                    return usage_error("%s needs a value", name);
                }
                val = argv[++i];
            } else if (strncmp(a, valued[k], kl) == 0 && a[kl] == '=') {
                name = valued[k];
                val = a + kl + 1;
            }
        }
        if (!name) {
            snprintf(namebuf, sizeof namebuf, "%s", a);
            free(files);
            return usage_error("unknown flag '%s'", namebuf);
        }
        if (strcmp(name, "--redis") == 0) {
            url = val;
        } else if (strcmp(name, "--queue") == 0) {
            queue = val;
        } else if (strcmp(name, "--format") == 0) {
            format = val;
        } else if (strcmp(name, "--batch-size") == 0) {
            if (parse_int(val, 1, MAX_BATCH_SIZE, &batch_size) != 0) {
                free(files);
                return usage_error("--batch-size '%s' is not a number in 1..%d", val,
                                   MAX_BATCH_SIZE);
            }
        } else if (strcmp(name, "--inflight") == 0) {
            if (parse_int(val, 1, MAX_INFLIGHT, &inflight) != 0) {
                free(files);
                return usage_error("--inflight '%s' is not a number in 1..%d", val,
                                   MAX_INFLIGHT);
            }
        }
    }

    int known = 0;
    const sluicei_reader_format *fmt;
    for (size_t i = 0; (fmt = sluicei_reader_format_at(i)) != NULL; i++)
        known |= strcmp(fmt->name, format) == 0;
    int rc = 0;
    if (!queue)
        rc = usage_error("--queue is required");
    else if (batch_size == 0)
        rc = usage_error("--batch-size is required");
    else if (!known)
        rc = usage_error("unknown --format '%s' (tfrecord or lines)", format);
    else if (nfiles == 0)
        rc = usage_error("no input files");
    if (rc) {
        free(files);
        return rc;
    }
    /* Fail before pushing anything when an input is plainly missing. */
    for (int i = 0; i < nfiles; i++)
        if (access(files[i], R_OK) != 0) {
            fprintf(stderr, PROG ": %s: %s\n", files[i], strerror(errno));
            free(files);
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

    sluice_producer_opts o = {
        .redis_url = url,
        .queue = queue,
        .max_inflight = (int)inflight,
        .stop = (volatile int *)&stop_flag,
    };
    char err[1024];
    run r = {0};
    r.quiet = quiet;
    r.tty = isatty(STDERR_FILENO);
    r.t0 = r.last_progress = mono_s();
    sluice_err e = sluice_producer_open(&r.p, &o, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        free(files);
        /* A malformed --redis URL or queue name is a usage error. */
        return e == SLUICE_ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
    }

    batch b;
    if (batch_init(&b, (size_t)batch_size) != 0) {
        fprintf(stderr, PROG ": out of memory\n");
        sluice_producer_close(r.p);
        free(files);
        return EXIT_RUNTIME;
    }
    int failed = 0, push_failed = 0, done_files = 0;
    for (int i = 0; i < nfiles && !failed && !stop_flag; i++) {
        failed = push_file(&r, &b, format, files[i], &push_failed);
        done_files += !failed && !stop_flag;
    }
    /* Everything handed over must be stored before we report; after a
     * failed push the producer has already given up on what it held. */
    int flushed = 0;
    if (!push_failed) {
        e = sluice_producer_flush(r.p);
        flushed = e == SLUICE_OK;
        push_failed = !flushed;
    }
    if (push_failed)
        fprintf(stderr, PROG ": %s\n", sluice_producer_errstr(r.p));

    sluice_producer_stats st;
    sluice_producer_stats_get(r.p, &st);
    if (r.progress_shown)
        fputc('\n', stderr);
    if (!quiet) {
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
        fputc('\n', stderr);
    }
    int interrupted = stop_flag && (done_files < nfiles || !flushed);
    if (interrupted)
        fprintf(stderr, PROG ": interrupted by %s: %d of %d files pushed completely\n",
                stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", done_files, nfiles);
    if (summary && flushed)
        printf("records=%" PRIu64 " batches=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64
               "\n", r.records, r.batches, r.bytes, r.sum);

    batch_free(&b);
    sluice_producer_close(r.p);
    free(files);
    if (interrupted)
        return 128 + (stop_signal ? stop_signal : SIGINT);
    return failed || push_failed ? EXIT_RUNTIME : 0;
}
