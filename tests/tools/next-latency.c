/* next-latency: how long sluice_consumer_next() takes when a batch is
 * already prefetched — the cost the library adds to a training step.
 *
 *   next-latency --redis URL --queue Q [--batches N] [--records R]
 *                [--record-bytes S] [--prefetch P] [--step-us U]
 *
 * Pushes N batches (default 2000) of R records (16) of S bytes (1024) into
 * the existing queue Q with the producer API, then consumes them with a
 * consumer of prefetch P (4): between two calls it "trains" for U µs
 * (default 300, time for the background thread to refill the FIFO), and
 * times every next() and every release(). Prints
 *   next_us median=<m> p90=<x> p99=<y> max=<z> n=<calls> waited=<calls that blocked>
 *   release_us median=<m> p90=<x> p99=<y>
 * where waited counts the calls that found the FIFO empty (by the
 * consumer's blocked_us counter). Exit 0 on success, 1 on error. */
#include <sluice/consumer.h>
#include <sluice/producer.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spins rather than sleeps: a sleep's wake-up jitter would swamp what is
 * measured, and a trainer's step keeps its core busy too. */
static void busy_us(long us)
{
    uint64_t end = now_ns() + (uint64_t)us * 1000u;
    while (now_ns() < end)
        ;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *url = NULL, *queue = NULL;
    long n = 2000, nrec = 16, rbytes = 1024, prefetch = 4, step = 300;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--redis"))
            url = v;
        else if (!strcmp(a, "--queue"))
            queue = v;
        else if (!strcmp(a, "--batches"))
            n = atol(v);
        else if (!strcmp(a, "--records"))
            nrec = atol(v);
        else if (!strcmp(a, "--record-bytes"))
            rbytes = atol(v);
        else if (!strcmp(a, "--prefetch"))
            prefetch = atol(v);
        else if (!strcmp(a, "--step-us"))
            step = atol(v);
        else {
            fprintf(stderr, "next-latency: unknown argument '%s'\n", a);
            return 2;
        }
    }
    if (!url || !queue || n < 1 || nrec < 1 || rbytes < 0 || prefetch < 1 || step < 0) {
        fprintf(stderr, "usage: next-latency --redis URL --queue Q [--batches N] [--records R]\n"
                        "       [--record-bytes S] [--prefetch P] [--step-us U]\n");
        return 2;
    }

    char err[512];
    sluice_producer_opts po = {.redis_url = url, .queue = queue};
    sluice_producer *p;
    if (sluice_producer_open(&p, &po, err, sizeof err) != SLUICE_OK) {
        fprintf(stderr, "next-latency: producer: %s\n", err);
        return 1;
    }
    char *buf = calloc((size_t)rbytes + 1, 1);
    sluice_record *recs = calloc((size_t)nrec, sizeof *recs);
    uint64_t *lat = calloc((size_t)n, sizeof *lat), *rel = calloc((size_t)n, sizeof *rel);
    if (!buf || !recs || !lat || !rel) {
        fprintf(stderr, "next-latency: out of memory\n");
        return 1;
    }
    for (long i = 0; i < nrec; i++)
        recs[i] = (sluice_record){buf, (size_t)rbytes};
    for (long i = 0; i < n; i++)
        if (sluice_producer_push_records(p, recs, (size_t)nrec) != SLUICE_OK) {
            fprintf(stderr, "next-latency: push: %s\n", sluice_producer_errstr(p));
            return 1;
        }
    if (sluice_producer_flush(p) != SLUICE_OK) {
        fprintf(stderr, "next-latency: flush: %s\n", sluice_producer_errstr(p));
        return 1;
    }
    sluice_producer_close(p);

    sluice_consumer_opts co = {.redis_url = url, .queue = queue, .prefetch = (int)prefetch};
    sluice_consumer *c;
    if (sluice_consumer_open(&c, &co, err, sizeof err) != SLUICE_OK) {
        fprintf(stderr, "next-latency: consumer: %s\n", err);
        return 1;
    }
    long waited = 0;
    for (long i = 0; i < n; i++) {
        busy_us(i == 0 ? 50000 : step);   /* the first fill: a connect and a round trip */
        sluice_consumer_stats before, after;
        sluice_consumer_stats_get(c, &before);
        sluice_batch *b;
        uint64_t t0 = now_ns();
        sluice_err e = sluice_consumer_next(c, &b, 5000);
        uint64_t t1 = now_ns();
        lat[i] = t1 - t0;
        if (e == SLUICE_OK)
            sluice_batch_release(b);
        rel[i] = now_ns() - t1;
        if (e != SLUICE_OK) {
            fprintf(stderr, "next-latency: next: %s %s\n", sluice_strerror(e),
                    sluice_consumer_errstr(c));
            return 1;
        }
        sluice_consumer_stats_get(c, &after);
        waited += after.blocked_us != before.blocked_us;
    }
    sluice_consumer_close(c);
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    printf("next_us median=%.2f p90=%.2f p99=%.2f max=%.2f n=%ld waited=%ld\n",
           (double)lat[n / 2] / 1e3, (double)lat[n * 9 / 10] / 1e3, (double)lat[n * 99 / 100] / 1e3,
           (double)lat[n - 1] / 1e3, n, waited);
    qsort(rel, (size_t)n, sizeof *rel, cmp_u64);
    printf("release_us median=%.2f p90=%.2f p99=%.2f\n", (double)rel[n / 2] / 1e3,
           (double)rel[n * 9 / 10] / 1e3, (double)rel[n * 99 / 100] / 1e3);
    free(rel);
    free(buf);
    free(recs);
    free(lat);
    return 0;
}
