/* sluice-consume: drains batches from a queue with libsluice, prints them
 * (or one summary line) and acknowledges each one. Used by hand to look at
 * a queue, and by the tests to check that every record arrived once. */
#include <sluice/consumer.h>

#include "checksum.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG "sluice-consume"
#define DEFAULT_URL "redis://127.0.0.1:6379"
/* Longest single wait, so that SIGINT/SIGTERM are noticed promptly. */
#define SLICE_MS 1000

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: " PROG " --queue Q [--redis URL] [--count N] [--timeout-ms T]\n"
        "                      [--summary] [--prefetch K] [--quiet]\n"
        "\n"
        "Takes batches from the sluice queue Q, prints them and acknowledges each\n"
        "one after printing it.\n"
        "\n"
        "  --redis URL       redis://[user[:pass]@]host[:port][/db] or unix:///path[?db=N]\n"
        "                    (default: $SLUICE_REDIS_URL, else " DEFAULT_URL ";\n"
        "                    a password may come from $SLUICE_REDIS_PASSWORD)\n"
        "  --queue Q         the queue to read (created with sluice-ctl create Q)\n"
        "  --count N         stop after N batches\n"
        "  --timeout-ms T    stop, successfully, when no batch arrives within T ms\n"
        "                    (the normal way to drain a queue)\n"
        "                    Without --count or --timeout-ms: run until SIGINT/SIGTERM.\n"
        "  --summary         instead of a line per batch, print one line at the end:\n"
        "                      records=R batches=B bytes=N checksum=<16 hex>\n"
        "                    bytes is the sum of the record lengths; checksum is the\n"
        "                    sum modulo 2^64 of the FNV-1a 64 hash of every record, so\n"
        "                    the summaries of several consumers add up to the\n"
        "                    producers'. For a tensor batch each tensor's data buffer\n"
        "                    counts as one record for bytes and checksum, and records\n"
        "                    counts the rows (leading dimension).\n"
        "  --prefetch K      batches fetched per round trip and held ahead (default 4)\n"
        "  --quiet           no closing statistics line on stderr\n"
        "  --help            this text\n"
        "\n"
        "Output (without --summary), one line per batch on stdout:\n"
        "  batch <epoch>:<task>:<seq> records=<n> bytes=<frame bytes> deliveries=<d>\n"
        "At the end, unless --quiet, on stderr:\n"
        "  consumed B batches, R records, X MB in T s (Y MB/s), waited Z s\n"
        "where MB counts frame bytes (10^6 bytes) and waited is the time spent\n"
        "waiting for batches. Invalid frames are skipped, counted and reported on\n"
        "stderr.\n"
        "\n"
        "Examples:\n"
        "  " PROG " --queue train --count 10\n"
        "  " PROG " --redis redis://10.0.0.5:6379/1 --queue train --timeout-ms 2000 --summary\n"
        "\n"
        "Exit status: 0 success (also when --timeout-ms ends the run or a signal\n"
        "stops it), 1 runtime error (Redis unreachable, no such queue...), 2 bad usage.\n");
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\ntry '" PROG " --help'\n");
    return 2;
}

/* Parses a decimal integer in [min, max]; returns -1 when s is not one. */
static int parse_long(const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct totals {
    uint64_t records, payload, checksum;
};

/* Adds one batch's records (or tensors) to the summary. */
static void account(struct totals *t, const sluice_batch *b)
{
    size_t nt = sluice_batch_num_tensors(b);
    t->records += sluice_batch_num_records(b);
    if (nt > 0) {
        for (size_t i = 0; i < nt; i++) {
            const sluice_tensor *x = sluice_batch_tensor(b, i);
            t->payload += x->nbytes;
            t->checksum += sluicei_record_hash(x->data, x->nbytes);
        }
        return;
    }
    for (size_t i = 0, n = sluice_batch_num_records(b); i < n; i++) {
        sluice_record r = sluice_batch_record(b, i);
        t->payload += r.len;
        t->checksum += sluicei_record_hash(r.data, r.len);
    }
}

int main(int argc, char **argv)
{
    const char *url = getenv("SLUICE_REDIS_URL");
    const char *queue = NULL;
    long long count = -1, timeout_ms = -1, prefetch = 0;
    int summary = 0, quiet = 0;

    if (!url || !*url)
        url = DEFAULT_URL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        char name[32];
        /* --flag=value and --flag value are both accepted. */
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            a = name;
            val = eq + 1;
        }
        int takes_value = !strcmp(a, "--redis") || !strcmp(a, "--queue") ||
                          !strcmp(a, "--count") || !strcmp(a, "--timeout-ms") ||
                          !strcmp(a, "--prefetch");
        if (takes_value && !val) {
            if (i + 1 >= argc)
                return bad_usage("%s needs a value", a);
            val = argv[++i];
        } else if (!takes_value && val) {
            return bad_usage("%s takes no value", a);
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--redis")) {
            url = val;
        } else if (!strcmp(a, "--queue")) {
            queue = val;
        } else if (!strcmp(a, "--count")) {
            if (parse_long(val, 1, INT64_MAX, &count))
                return bad_usage("--count: '%s' is not a positive integer", val);
        } else if (!strcmp(a, "--timeout-ms")) {
            if (parse_long(val, 0, INT32_MAX, &timeout_ms))
                return bad_usage("--timeout-ms: '%s' is not an integer from 0 to 2147483647", val);
        } else if (!strcmp(a, "--prefetch")) {
            if (parse_long(val, 1, 1024, &prefetch))
                return bad_usage("--prefetch: '%s' is not an integer from 1 to 1024", val);
        } else if (!strcmp(a, "--summary")) {
            summary = 1;
        } else if (!strcmp(a, "--quiet")) {
            quiet = 1;
        } else {
            return bad_usage("unknown argument '%s'", argv[i]);
        }
    }
    if (!queue)
        return bad_usage("%s", "--queue is required");

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    /* A write to a full stdout pipe resumes; the loop checks the flag. */
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* A closed stdout (| head) or a socket Redis reset must give an error,
     * not kill the process before it hands its batches back. */
    signal(SIGPIPE, SIG_IGN);

    sluice_consumer_opts o = {.redis_url = url, .queue = queue, .prefetch = (int)prefetch};
    sluice_consumer *c;
    char err[512];
    double t0 = now_s();
    sluice_err e = sluice_consumer_open(&c, &o, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": %s\n", *err ? err : sluice_strerror(e));
        /* A malformed --redis URL or queue name is a usage error. */
        return e == SLUICE_ERR_INVALID ? 2 : 1;
    }

    struct totals tot = {0, 0, 0};
    uint64_t batches = 0, invalid_seen = 0;
    int status = 0;
    while (!stop_requested && (count < 0 || (long long)batches < count)) {
        /* Waits in slices so that a signal is noticed within a second; with
         * --timeout-ms the slices add up to T since the last batch. */
        double wait_start = now_s();
        sluice_batch *b = NULL;
        for (;;) {
            int slice = SLICE_MS;
            if (timeout_ms >= 0) {
                long long left = timeout_ms - (long long)((now_s() - wait_start) * 1000.0);
                if (left < 0)
                    left = 0;
                if (left < slice)
                    slice = (int)left;
            }
            e = sluice_consumer_next(c, &b, slice);
            if (e != SLUICE_ERR_TIMEOUT || stop_requested)
                break;
            if (timeout_ms >= 0 && (now_s() - wait_start) * 1000.0 >= (double)timeout_ms)
                break;
        }
        sluice_consumer_stats st;
        sluice_consumer_stats_get(c, &st);
        int skipped = st.invalid > invalid_seen;
        if (skipped) {
            uint64_t k = st.invalid - invalid_seen;
            if (k == 1)
                fprintf(stderr, PROG ": skipped an invalid batch: %s\n", sluice_consumer_errstr(c));
            else
                fprintf(stderr, PROG ": skipped %" PRIu64 " invalid batches (the last: %s)\n", k,
                        sluice_consumer_errstr(c));
            invalid_seen = st.invalid;
        }
        if (e == SLUICE_ERR_TIMEOUT && !stop_requested && !skipped &&
            *sluice_consumer_errstr(c)) {
            /* errstr on a timeout that skipped nothing: Redis is unreachable,
             * which is not a drained queue. */
            fprintf(stderr, PROG ": no batch within %lld ms: %s\n", timeout_ms,
                    sluice_consumer_errstr(c));
            status = 1;
            break;
        }
        if (e == SLUICE_ERR_TIMEOUT)
            break;   /* a signal, or no batch within --timeout-ms: the normal end */
        if (e != SLUICE_OK) {
            const char *detail = sluice_consumer_errstr(c);
            fprintf(stderr, PROG ": %s%s%s\n", sluice_strerror(e), *detail ? ": " : "", detail);
            status = 1;
            break;
        }
        batches++;
        account(&tot, b);
        if (!summary) {
            sluice_batch_id id = sluice_batch_get_id(b);
            printf("batch %" PRIu32 ":%" PRIu64 ":%" PRIu32 " records=%zu bytes=%zu deliveries=%" PRIu32
                   "\n",
                   id.epoch, id.task, id.seq, sluice_batch_num_records(b),
                   sluice_batch_frame_bytes(b), sluice_batch_deliveries(b));
        }
        sluice_batch_release(b);
        if (ferror(stdout)) {
            fprintf(stderr, PROG ": writing to stdout: %s\n", strerror(errno));
            status = 1;
            break;
        }
    }

    sluice_consumer_stats st;
    sluice_consumer_stats_get(c, &st);
    sluice_consumer_close(c);
    if (summary)
        printf("records=%" PRIu64 " batches=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64 "\n",
               tot.records, batches, tot.payload, tot.checksum);
    if (status == 0 && fflush(stdout) != 0) {
        fprintf(stderr, PROG ": writing to stdout: %s\n", strerror(errno));
        status = 1;
    }
    if (!quiet) {
        double secs = now_s() - t0;
        double mb = (double)st.bytes / 1e6;
        fprintf(stderr,
                "consumed %" PRIu64 " batches, %" PRIu64 " records, %.1f MB in %.2f s (%.1f MB/s), "
                "waited %.2f s\n",
                batches, tot.records, mb, secs, secs > 0 ? mb / secs : 0.0,
                (double)st.blocked_us / 1e6);
    }
    return status;
}
