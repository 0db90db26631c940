/* hold: takes K batches from a queue and holds them without releasing,
 * until it is killed. The tests kill it with -9 to play a consumer that
 * dies holding unacknowledged batches.
 *
 *   hold --redis URL --queue Q --count K [--prefetch P] [--timeout-ms T]
 *        [--rank R --world N] [--kill]
 *
 * Prints one line per batch taken, "id <epoch>:<task>:<seq> deliveries=<d>",
 * then "held K" once it has all of them (flushed, so a test can wait for
 * it), and sleeps. With --kill it kills itself (SIGKILL) the moment the
 * K-th next() returns, without printing that batch: a consumer that dies
 * as its application receives a batch. Exits 1 when a batch does not come
 * within T ms (default 10000) or on any error; 2 on bad usage. */
#include <sluice/consumer.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int usage(void)
{
    fprintf(stderr, "usage: hold --redis URL --queue Q --count K [--prefetch P] [--timeout-ms T]\n"
                    "            [--rank R --world N] [--kill]\n");
    return 2;
}

int main(int argc, char **argv)
{
    sluice_consumer_opts o = {0};
    long count = -1, timeout_ms = 10000;
    int kill_self = argc > 1 && !strcmp(argv[argc - 1], "--kill");
    if (kill_self)
        argc--;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--redis"))
            o.redis_url = v;
        else if (!strcmp(a, "--queue"))
            o.queue = v;
        else if (!strcmp(a, "--count"))
            count = atol(v);
        else if (!strcmp(a, "--prefetch"))
            o.prefetch = atoi(v);
        else if (!strcmp(a, "--timeout-ms"))
            timeout_ms = atol(v);
        else if (!strcmp(a, "--rank"))
            o.rank = atoi(v);
        else if (!strcmp(a, "--world"))
            o.world = atoi(v);
        else
            return usage();
    }
    if (argc % 2 == 0 || !o.redis_url || !o.queue || count < 1)
        return usage();

    sluice_consumer *c;
    char err[512];
    sluice_err e = sluice_consumer_open(&c, &o, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, "hold: %s\n", err);
        return 1;
    }
    for (long i = 0; i < count; i++) {
        sluice_batch *b;
        e = sluice_consumer_next(c, &b, (int)timeout_ms);
        if (e != SLUICE_OK) {
            fprintf(stderr, "hold: batch %ld of %ld: %s %s\n", i + 1, count, sluice_strerror(e),
                    sluice_consumer_errstr(c));
            sluice_consumer_close(c);
            return 1;
        }
        if (kill_self && i == count - 1)
            raise(SIGKILL);
        sluice_batch_id id = sluice_batch_get_id(b);
        printf("id %" PRIu32 ":%" PRIu64 ":%" PRIu32 " deliveries=%" PRIu32 "\n", id.epoch,
               id.task, id.seq, sluice_batch_deliveries(b));
        fflush(stdout);
        /* Never released: the batch stays under this consumer's lease. */
    }
    printf("held %ld\n", count);
    fflush(stdout);
    for (;;)
        pause();
}
