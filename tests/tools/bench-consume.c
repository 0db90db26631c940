/* bench-consume: the consumer side of `make bench` (bench/bench.py).
 *
 * Opens a consumer on an existing queue, prints "ready" (so the driver can
 * start the producers), then takes batches with sluice_consumer_next() and
 * releases each one at once. It stops after --expect batches, or, when
 * --expect is 0, at the first --idle-ms without a batch after SIGUSR1 (the
 * driver sends it once every producer is done, so a slow moment earlier
 * cannot end the run while batches are still coming). The
 * records are not read (a trainer gets them zero-copy); their lengths are
 * summed so the driver can check that every byte arrived. Prints one line:
 *
 *   consume batches=N payload=B frame_bytes=F t_first_us=T t_last_us=T
 *           cpu_us=C maxrss_kb=K [lat_n=.. lat_waited=.. lat_p50_ns=..
 *           lat_p99_ns=.. lat_max_ns=..]
 *
 * t_*_us are CLOCK_REALTIME microseconds at the first and the last batch;
 * cpu_us is getrusage(RUSAGE_SELF) (all threads); maxrss_kb the
 * peak resident set (VmHWM).
 *
 * --prefetch K sets the consumer's prefetch; absent or 0, the library's
 * default.
 *
 * --latency-sleep-us S: sleeps S µs before each next() after the first and
 * times the call with CLOCK_MONOTONIC; with a pre-filled queue and S longer
 * than a fetch, the prefetcher is always ahead. A call during which the
 * consumer's blocked_us counter grew did wait for Redis: it is counted in
 * lat_waited and left out of the percentiles.
 *
 * Exit status 0, 1 on a sluice error or when nothing arrived, 2 on bad
 * usage. */
#include <sluice/consumer.h>

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define PROG "bench-consume"

static int usage(const char *why)
{
    fprintf(stderr,
            PROG ": %s\n"
            "usage: " PROG " --redis URL --queue Q [--prefetch K] [--ack explicit|none]\n"
            "                     [--expect N] [--idle-ms T] [--start-ms T]\n"
            "                     [--latency-sleep-us S] [--latency-samples M]\n"
            "try '" PROG " --help'\n",
            why);
    return 2;
}

static void help(void)
{
    printf("usage: " PROG " --redis URL --queue Q [--prefetch K] [--ack explicit|none]\n"
           "                     [--expect N] [--idle-ms T] [--start-ms T]\n"
           "                     [--latency-sleep-us S] [--latency-samples M]\n"
           "Prints \"ready\", takes batches from queue Q with sluice_consumer_next() and\n"
           "releases each at once; prints one line of key=value results.\n"
           "  --prefetch K   the consumer's prefetch; 0 or absent: the library's default\n"
           "  --ack MODE     explicit (default: acks on) or none (at-most-once)\n"
           "  --expect N     stop after N batches; 0 (default): at the first --idle-ms\n"
           "                 (default 500) without a batch after SIGUSR1\n"
           "  --start-ms T   how long to wait for the first batch (default 60000)\n"
           "  --latency-sleep-us S  sleep S us before each next() and time the call\n"
           "  --latency-samples M   time at most M calls (default 100000)\n"
           "Exit status 0, 1 on a sluice error or when nothing arrived, 2 on bad usage.\n");
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

static volatile sig_atomic_t producers_done;

static void on_usr1(int sig)
{
    (void)sig;
    producers_done = 1;
}

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Value at quantile q (0..1) of the n sorted samples, nearest rank. */
static uint64_t quantile(const uint64_t *s, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t k = (size_t)(q * (double)n + 0.999999);
    return s[k == 0 ? 0 : (k > n ? n - 1 : k - 1)];
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
    const char *url = NULL, *queue = NULL, *ack = "explicit";
    long long prefetch = 0, expect = 0, idle_ms = 500, start_ms = 60000;
    long long lat_sleep_us = 0, lat_max = 100000;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help();
            return 0;
        }
        if (i + 1 >= argc)
            return usage("every option takes a value");
        const char *a = argv[i], *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--redis"))
            url = v;
        else if (!strcmp(a, "--queue"))
            queue = v;
        else if (!strcmp(a, "--ack"))
            ack = v;
        else if (!strcmp(a, "--prefetch"))
            bad = parse_ll(v, 0, 4096, &prefetch);
        else if (!strcmp(a, "--expect"))
            bad = parse_ll(v, 0, INT32_MAX, &expect);
        else if (!strcmp(a, "--idle-ms"))
            bad = parse_ll(v, 1, INT32_MAX, &idle_ms);
        else if (!strcmp(a, "--start-ms"))
            bad = parse_ll(v, 1, INT32_MAX, &start_ms);
        else if (!strcmp(a, "--latency-sleep-us"))
            bad = parse_ll(v, 0, 10000000, &lat_sleep_us);
        else if (!strcmp(a, "--latency-samples"))
            bad = parse_ll(v, 1, 10000000, &lat_max);
        else
            return usage("unknown option");
        if (bad)
            return usage("bad number");
    }
    if (!url || !queue)
        return usage("--redis and --queue are required");
    if (strcmp(ack, "explicit") && strcmp(ack, "none"))
        return usage("--ack is explicit or none");

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);

    uint64_t *lat = NULL;
    if (lat_sleep_us > 0 && !(lat = malloc((size_t)lat_max * sizeof *lat))) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }

    sluice_consumer_opts o = {
        .redis_url = url,
        .queue = queue,
        .prefetch = (int)prefetch,
        .ack_mode = strcmp(ack, "none") ? SLUICE_ACK_EXPLICIT : SLUICE_ACK_NONE,
    };
    sluice_consumer *c;
    char err[512];
    sluice_err e = sluice_consumer_open(&c, &o, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": open: %s: %s\n", sluice_strerror(e), err);
        free(lat);
        return 1;
    }
    printf("ready\n");
    fflush(stdout);

    uint64_t n = 0, payload = 0, frames = 0, t_first = 0, t_last = 0;
    size_t nlat = 0, waited = 0;
    int rc = 0;
    while (expect == 0 || n < (uint64_t)expect) {
        sluice_batch *b;
        sluice_consumer_stats before, after;
        uint64_t l0 = 0, l1 = 0;
        int timed = lat && n > 0 && nlat + waited < (size_t)lat_max;
        if (timed) {
            struct timespec d = {.tv_sec = lat_sleep_us / 1000000,
                                 .tv_nsec = (lat_sleep_us % 1000000) * 1000};
            nanosleep(&d, NULL);
            sluice_consumer_stats_get(c, &before);
            l0 = mono_ns();
        }
        e = sluice_consumer_next(c, &b, n == 0 ? (int)start_ms : (int)idle_ms);
        if (timed) {
            l1 = mono_ns();
            sluice_consumer_stats_get(c, &after);
        }
        if (e == SLUICE_ERR_TIMEOUT && n > 0) {
            if (producers_done)
                break;
            continue;
        }
        if (e == SLUICE_EOF)
            break;
        if (e != SLUICE_OK) {
            fprintf(stderr, PROG ": next: %s: %s\n", sluice_strerror(e), sluice_consumer_errstr(c));
            rc = 1;
            break;
        }
        if (timed) {
            if (after.blocked_us > before.blocked_us)
                waited++;
            else
                lat[nlat++] = l1 - l0;
        }
        for (size_t i = 0, nr = sluice_batch_num_records(b); i < nr; i++)
            payload += sluice_batch_record(b, i).len;
        frames += sluice_batch_frame_bytes(b);
        t_last = wall_us();
        if (n++ == 0)
            t_first = t_last;
        sluice_batch_release(b);
    }
    sluice_consumer_close(c);
    if (n == 0 && rc == 0) {
        fprintf(stderr, PROG ": no batch arrived\n");
        rc = 1;
    }

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t cpu = (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec +
                   (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
    printf("consume batches=%" PRIu64 " payload=%" PRIu64 " frame_bytes=%" PRIu64
           " t_first_us=%" PRIu64 " t_last_us=%" PRIu64 " cpu_us=%" PRIu64 " maxrss_kb=%ld",
           n, payload, frames, t_first, t_last, cpu, peak_rss_kb());
    if (lat) {
        qsort(lat, nlat, sizeof *lat, cmp_u64);
        printf(" lat_n=%zu lat_waited=%zu lat_p50_ns=%" PRIu64 " lat_p99_ns=%" PRIu64
               " lat_max_ns=%" PRIu64,
               nlat, waited, quantile(lat, nlat, 0.5), quantile(lat, nlat, 0.99),
               nlat ? lat[nlat - 1] : 0);
    }
    printf("\n");
    free(lat);
    return rc;
}
