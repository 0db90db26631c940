/* bench-produce: the producer side of `make bench` (bench/bench.py).
 *
 * Pushes --count batches of --size payload bytes each (split into --records
 * equal records) into an existing queue with the libsluice producer API,
 * flushes, and prints one line of key=value pairs on stdout:
 *
 *   produce batches=N payload=B frame_bytes=F t0_us=T t1_us=T cpu_us=C
 *           maxrss_kb=K full_waits=W blocked_us=U duplicates=D
 *
 * t0_us/t1_us are CLOCK_REALTIME microseconds (comparable across the
 * processes of one run) taken just before the first push and just after the
 * flush; cpu_us comes from getrusage(RUSAGE_SELF), so it covers every
 * thread of the process; maxrss_kb is the peak resident set (VmHWM).
 *
 * --chunk N starts a new task every N batches (task numbers T << 32 | k,
 * distinct across producers of distinct --task T). On a partitioned queue
 * each new task goes to the next partition, so one producer spreads its
 * batches over every partition, N at a time; without it they all go to
 * one partition.
 * Exit status 0, 1 on a sluice error, 2 on bad usage. */
#include <sluice/producer.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define PROG "bench-produce"

static int usage(const char *why)
{
    fprintf(stderr,
            PROG ": %s\n"
            "usage: " PROG " --redis URL --queue Q --size BYTES --count N\n"
            "                     [--records R] [--inflight K] [--task T] [--chunk N]\n",
            why);
    return 2;
}

/* Parses a decimal integer in [min, max] into *out; -1 when s is not one. */
static int parse_ll(const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Peak resident set of this process in KiB (VmHWM), 0 if unknown. Not
 * ru_maxrss: Linux keeps that across execve, so it would report the
 * driver's size for a child the Python driver started. */
static long peak_rss_kb(void)
{
    char line[256];
    long kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    const char *url = NULL, *queue = NULL;
    long long size = -1, count = -1, nrec = 1, inflight = 0, task = 1, chunk = 0;

    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            return usage("every option takes a value");
        const char *a = argv[i], *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--redis"))
            url = v;
        else if (!strcmp(a, "--queue"))
            queue = v;
        else if (!strcmp(a, "--size"))
            bad = parse_ll(v, 1, (long long)1 << 30, &size);
        else if (!strcmp(a, "--count"))
            bad = parse_ll(v, 1, INT32_MAX, &count);
        else if (!strcmp(a, "--records"))
            bad = parse_ll(v, 1, 1 << 20, &nrec);
        else if (!strcmp(a, "--inflight"))
            bad = parse_ll(v, 0, 1024, &inflight);
        else if (!strcmp(a, "--task"))
            bad = parse_ll(v, 0, INT32_MAX, &task);
        else if (!strcmp(a, "--chunk"))
            bad = parse_ll(v, 0, INT32_MAX, &chunk);
        else
            return usage("unknown option");
        if (bad)
            return usage("bad number");
    }
    if (!url || !queue || size < 0 || count < 0)
        return usage("--redis, --queue, --size and --count are required");
    if (nrec > size)
        return usage("--records exceeds --size");

    /* Payload that does not compress or repeat (xorshift), made once: the
     * benchmark measures moving bytes, not generating them. */
    unsigned char *payload = malloc((size_t)size);
    sluice_record *recs = calloc((size_t)nrec, sizeof *recs);
    if (!payload || !recs) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15u ^ (uint64_t)task;
    for (long long i = 0; i < size; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        payload[i] = (unsigned char)x;
    }
    /* R records of size/R bytes; the last one takes the remainder. */
    size_t each = (size_t)(size / nrec);
    for (long long r = 0; r < nrec; r++) {
        recs[r].data = payload + (size_t)r * each;
        recs[r].len = r == nrec - 1 ? (size_t)size - (size_t)r * each : each;
    }

    sluice_producer_opts o = {.redis_url = url, .queue = queue, .max_inflight = (int)inflight};
    sluice_producer *p;
    char err[512];
    sluice_err e = sluice_producer_open(&p, &o, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": open: %s: %s\n", sluice_strerror(e), err);
        return 1;
    }
    /* Distinct task numbers per producer keep batch ids unique in a run. */
    uint64_t base = chunk > 0 ? (uint64_t)task << 32 : (uint64_t)task;
    e = sluice_producer_set_task(p, 0, base);

    uint64_t t0 = wall_us();
    for (long long n = 0; e == SLUICE_OK && n < count; n++) {
        if (chunk > 0 && n > 0 && n % chunk == 0)
            e = sluice_producer_set_task(p, 0, base | (uint64_t)(n / chunk));
        if (e == SLUICE_OK)
            e = sluice_producer_push_records(p, recs, (size_t)nrec);
    }
    if (e == SLUICE_OK)
        e = sluice_producer_flush(p);
    uint64_t t1 = wall_us();
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": push: %s: %s\n", sluice_strerror(e), sluice_producer_errstr(p));
        sluice_producer_close(p);
        return 1;
    }

    sluice_producer_stats st;
    sluice_producer_stats_get(p, &st);
    sluice_producer_close(p);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t cpu = (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec +
                   (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
    printf("produce batches=%" PRIu64 " payload=%lld frame_bytes=%" PRIu64 " t0_us=%" PRIu64
           " t1_us=%" PRIu64 " cpu_us=%" PRIu64 " maxrss_kb=%ld full_waits=%" PRIu64
           " blocked_us=%" PRIu64 " duplicates=%" PRIu64 "\n",
           st.batches, size * count, st.bytes, t0, t1, cpu, peak_rss_kb(), st.full_waits,
           st.blocked_us, st.duplicates);
    free(recs);
    free(payload);
    return 0;
}
