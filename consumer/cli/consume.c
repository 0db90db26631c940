/* sluice-consume: drains batches from a queue with libsluice, prints them
 * (or one summary line) and acknowledges each one. Used by hand to look at
 * a queue, and by the tests to check that every record arrived once. */
#include <sluice/consumer.h>

#include "checksum.h"
#include "cli.h"
#include "num.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "sluice-consume"
#define DEFAULT_URL "redis://127.0.0.1:6379"
/* Longest single wait, so that SIGINT/SIGTERM are noticed promptly. */
#define SLICE_MS 1000
/* A wait this long says on stderr what it waits for. */
#define WAIT_SAY_MS 5000
/* Exit status when an epoch ended without the records of failed tasks. */
#define EXIT_PARTIAL 3

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
        "                      [--summary [--epochs]] [--print-ids] [--prefetch K]\n"
        "                      [--rank R --world N] [--at-most-once]\n"
        "                      [--max-batch-bytes B] [--consumer-id ID] [--quiet]\n"
        "                      [--checkpoint-every N --checkpoint-file F [--checkpoint-keep K]]\n"
        "                      [--resume TOKEN|@FILE]\n"
        "\n"
        "Takes batches from the sluice queue Q, prints them and acknowledges each\n"
        "one after printing it. When the queue runs a job, the batches come epoch\n"
        "by epoch; the run ends (exit 0) when the job is finished.\n"
        "\n"
        "  --redis URL       redis://[user[:pass]@]host[:port][/db] or unix:///path[?db=N];\n"
        "                    a Redis Cluster: redis+cluster://host:port[,host:port...];\n"
        "                    independent servers: redis://a:1,redis://b:2\n"
        "                    (default: $SLUICE_REDIS_URL, else " DEFAULT_URL ";\n"
        "                    a password may come from $SLUICE_REDIS_PASSWORD, or from\n"
        "                    the file $SLUICE_REDIS_PASSWORD_FILE names).\n"
        "                    TLS: rediss://, rediss+cluster:// (the server's\n"
        "                    certificate checked against $SLUICE_TLS_CA_FILE, else the\n"
        "                    system's CAs; $SLUICE_TLS_SERVER_NAME,\n"
        "                    $SLUICE_TLS_CERT_FILE, $SLUICE_TLS_KEY_FILE: see\n"
        "                    sluice-ctl --help)\n"
        "  --queue Q         the queue to read (created with sluice-ctl create Q)\n"
        "  --count N         stop after N batches\n"
        "  --timeout-ms T    stop, successfully, when no batch arrives within T ms\n"
        "                    (the normal way to drain a queue without a job)\n"
        "                    Without --count or --timeout-ms: run until the job is\n"
        "                    finished, or until SIGINT/SIGTERM.\n"
        "  --summary         instead of a line per batch, print one line at the end:\n"
        "                      records=R batches=B bytes=N checksum=<16 hex>\n"
        "                    bytes is the sum of the record lengths; checksum is the\n"
        "                    sum modulo 2^64 of the FNV-1a 64 hash of every record, so\n"
        "                    the summaries of several consumers add up to the\n"
        "                    producers'. For a tensor batch each tensor's data buffer\n"
        "                    counts as one record for bytes and checksum, and records\n"
        "                    counts the rows (leading dimension).\n"
        "  --epochs          with --summary, also one line at the end of each epoch:\n"
        "                      epoch=E records=R batches=B bytes=N checksum=X padding=P\n"
        "                      failed_tasks=F\n"
        "  --print-ids       one line per batch: id <epoch>:<task>:<seq> deliveries=<d>\n"
        "                    padding=<0|1> (instead of the batch line; with --summary too),\n"
        "                    written line by line\n"
        "  --prefetch K      batches fetched ahead in the background, 1..1024 (default:\n"
        "                    1024, within a window of bytes that grows from 1 MiB to\n"
        "                    64 MiB to cover the round trips to Redis)\n"
        "  --rank R --world N  read a coordinated queue as rank R of N\n"
        "  --at-most-once    acknowledge each batch as it is fetched: faster, but the\n"
        "                    batches a killed consumer holds are lost\n"
        "  --max-batch-bytes B  the largest frame accepted (default: the queue's frame\n"
        "                    limit, which producers keep to; a smaller B is refused)\n"
        "  --consumer-id ID  register under this id (default: a random one). An id\n"
        "                    (or a rank) a live consumer holds is refused; one whose\n"
        "                    holder died is taken over once its lease ran out\n"
        "  --checkpoint-every N  take a checkpoint every N batches, and at the end,\n"
        "                    and write its token to --checkpoint-file F (replaced\n"
        "                    atomically; the batches printed before count as\n"
        "                    done); keep the last K (--checkpoint-keep, default 2)\n"
        "  --resume TOKEN    start from that checkpoint (@FILE: the token in FILE): the\n"
        "                    batches acknowledged after it come again, first\n"
        "  --quiet           no closing statistics line on stderr\n"
        "  --help            this text\n"
        "  --version         the version of sluice-consume and of libsluice\n"
        "\n"
        "Output (without --summary), one line per batch on stdout:\n"
        "  batch <epoch>:<task>:<seq> records=<n> bytes=<frame bytes> deliveries=<d>\n"
        "and, in a job, 'eof epoch=<e>' at the end of each epoch ('eof epoch=<e>\n"
        "partial' when tasks of it failed: their records never came) and 'finished'\n"
        "at the end of the job. A wait of 5 s or more says on stderr what it waits\n"
        "for (no job, no producer alive...). At the end, unless --quiet, on stderr:\n"
        "  consumed B batches, R records, X MB in T s (Y MB/s), waited Z s\n"
        "where MB counts frame bytes (10^6 bytes) and waited is the time spent\n"
        "waiting for batches. Invalid frames go to the dead-letter list; each one\n"
        "is reported on stderr.\n"
        "\n"
        "Examples:\n"
        "  " PROG " --queue train --count 10\n"
        "  " PROG " --redis redis://10.0.0.5:6379/1 --queue train --timeout-ms 2000 --summary\n"
        "  " PROG " --queue train --rank 0 --world 4 --summary --epochs\n"
        "\n"
        "Exit status: 0 success (the job finished, --count reached, --timeout-ms\n"
        "ended the run or a signal stopped it), 1 runtime error (Redis unreachable,\n"
        "no such queue, the consumer id or rank held by a live consumer...), 2 bad\n"
        "usage, 3 the job finished but an epoch lost records to failed tasks (each\n"
        "such end is told on stderr: which tasks failed and why).\n");
}

/* Writes token to path, replacing it atomically (a new file, renamed). */
static int save_token(const char *path, const char *token)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        fprintf(stderr, PROG ": --checkpoint-file: path too long\n");
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    int ok = f && fprintf(f, "%s\n", token) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, PROG ": writing the checkpoint token to %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Reads the token of --resume @FILE into buf (its first line). */
static int load_token(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, PROG ": --resume @%s: %s\n", path, strerror(errno));
        return -1;
    }
    int ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    buf[ok ? strcspn(buf, "\r\n") : 0] = '\0';
    if (!buf[0]) {
        fprintf(stderr, PROG ": --resume @%s: the file holds no token\n", path);
        return -1;
    }
    return 0;
}

/* Takes a checkpoint and saves its token; 0, or -1 (printed). */
static int checkpoint(sluice_consumer *c, const char *path)
{
    char tok[SLUICE_CHECKPOINT_TOKEN_MAX];
    sluice_err e = sluice_consumer_checkpoint(c, tok, sizeof tok, 30000);
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": checkpoint: %s: %s\n", sluice_strerror(e),
                sluice_consumer_errstr(c));
        return -1;
    }
    return save_token(path, tok);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct totals {
    uint64_t records, payload, checksum, batches, padding;
};

/* Adds one batch's records (or tensors) to the summary. */
static void account(struct totals *t, const sluice_batch *b)
{
    size_t nt = sluice_batch_num_tensors(b);
    t->batches++;
    t->padding += sluice_batch_is_padding(b) != 0;
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

/* One summary line; an epoch's (with_epoch) adds padding and failed_tasks. */
static void print_totals(const char *prefix, const struct totals *t, int with_epoch,
                         uint32_t failed_tasks)
{
    printf("%srecords=%" PRIu64 " batches=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64,
           prefix, t->records, t->batches, t->payload, t->checksum);
    if (with_epoch)
        printf(" padding=%" PRIu64 " failed_tasks=%" PRIu32, t->padding, failed_tasks);
    printf("\n");
}

int main(int argc, char **argv)
{
    sluicei_cli_init(PROG);
    const char *url = getenv("SLUICE_REDIS_URL");
    const char *queue = NULL, *consumer_id = NULL, *ckpt_file = NULL, *resume = NULL;
    long long count = -1, timeout_ms = -1, prefetch = 0, rank = -1, world = -1;
    long long ckpt_every = 0, ckpt_keep = 0;
    long long max_batch_bytes = 0;
    int summary = 0, quiet = 0, epochs = 0, print_ids = 0, at_most_once = 0;

    if (!url || !*url)
        url = DEFAULT_URL;
    const struct {
        const char *flag, *what;
        int64_t min, max;
        long long *out;
    } nums[] = {
        {"--count", "a positive integer", 1, INT64_MAX, &count},
        {"--timeout-ms", "an integer from 0 to 2147483647", 0, INT32_MAX, &timeout_ms},
        {"--prefetch", "an integer from 1 to 1024", 1, 1024, &prefetch},
        {"--rank", "an integer from 0 to 999999", 0, 999999, &rank},
        {"--world", "an integer from 1 to 1000000", 1, 1000000, &world},
        {"--max-batch-bytes", "a positive integer", 1, INT64_MAX, &max_batch_bytes},
        {"--checkpoint-every", "a positive integer", 1, INT64_MAX, &ckpt_every},
        {"--checkpoint-keep", "an integer from 1 to 1000", 1, SLUICE_CHECKPOINT_KEEP_MAX,
         &ckpt_keep},
    };
    const struct {
        const char *flag;
        int *on;
    } switches[] = {
        {"--summary", &summary},   {"--epochs", &epochs},       {"--print-ids", &print_ids},
        {"--at-most-once", &at_most_once}, {"--quiet", &quiet},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        int got = 0;
        if (sluicei_flag_is(a, "--help", "-h")) {
            usage(stdout);
            return 0;
        }
        if (sluicei_cli_version(a, stdout))
            return 0;
        for (size_t k = 0; !got && k < sizeof switches / sizeof switches[0]; k++) {
            size_t n = strlen(switches[k].flag);
            if (strncmp(a, switches[k].flag, n) == 0 && a[n] == '=')
                return sluicei_usage_error("%s takes no value", switches[k].flag);
            if (strcmp(a, switches[k].flag) == 0)
                got = *switches[k].on = 1;
        }
        if (!got && (got = sluicei_flag_value(argc, argv, &i, "--redis", &val)) == 1)
            url = val;
        if (!got && (got = sluicei_flag_value(argc, argv, &i, "--queue", &val)) == 1)
            queue = val;
        if (!got && (got = sluicei_flag_value(argc, argv, &i, "--consumer-id", &val)) == 1)
            consumer_id = val;
        if (!got && (got = sluicei_flag_value(argc, argv, &i, "--checkpoint-file", &val)) == 1)
            ckpt_file = val;
        if (!got && (got = sluicei_flag_value(argc, argv, &i, "--resume", &val)) == 1)
            resume = val;
        for (size_t k = 0; got == 0 && k < sizeof nums / sizeof nums[0]; k++) {
            if ((got = sluicei_flag_value(argc, argv, &i, nums[k].flag, &val)) != 1)
                continue;
            int64_t v;
            if (sluicei_parse_i64(val, nums[k].min, nums[k].max, &v) != 0)
                return sluicei_usage_error("%s: '%.64s' is not %s", nums[k].flag, val,
                                           nums[k].what);
            *nums[k].out = (long long)v;
        }
        if (got < 0)
            return SLUICEI_EXIT_USAGE;
        if (got == 0)
            return sluicei_usage_error("unknown argument '%.64s'", a);
    }
    if (!queue)
        return sluicei_usage_error("--queue is required");
    if ((rank >= 0) != (world >= 0))
        return sluicei_usage_error("--rank and --world go together");
    if (world >= 0 && rank >= world)
        return sluicei_usage_error("--rank must be below --world");
    if ((ckpt_every > 0) != (ckpt_file != NULL))
        return sluicei_usage_error("--checkpoint-every and --checkpoint-file go together");
    if (ckpt_keep && !ckpt_every)
        return sluicei_usage_error("--checkpoint-keep needs --checkpoint-every");
    if (at_most_once && (ckpt_every || resume))
        return sluicei_usage_error("--at-most-once has nothing to give back: no checkpoints "
                                   "(--checkpoint-every, --resume) with it");
    if (epochs && !summary)
        return sluicei_usage_error("--epochs needs --summary (without it every epoch's end is "
                                   "a line 'eof epoch=E' already)");
    char resume_buf[SLUICE_CHECKPOINT_TOKEN_MAX + 2];
    if (resume && resume[0] == '@') {
        if (load_token(resume + 1, resume_buf, sizeof resume_buf))
            return 1;
        resume = resume_buf;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    /* A write to a full stdout pipe resumes; the loop checks the flag. */
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* A closed stdout (| head) must give an error, not kill the process
     * before it hands its batches back. */
    signal(SIGPIPE, SIG_IGN);
    /* --print-ids is for watching a run as it happens (tests read it live). */
    if (print_ids)
        setvbuf(stdout, NULL, _IOLBF, 0);

    sluice_consumer_opts o = {
        .redis_url = url,
        .queue = queue,
        .prefetch = (int)prefetch,
        .max_batch_bytes = (size_t)max_batch_bytes,
        .consumer_id = consumer_id,
        .world = world > 0 ? (int)world : 0,
        .rank = rank > 0 ? (int)rank : 0,
        .ack_mode = at_most_once ? SLUICE_ACK_NONE : SLUICE_ACK_EXPLICIT,
        .checkpoint_keep = ckpt_every ? (ckpt_keep ? (int)ckpt_keep
                                                   : SLUICE_CHECKPOINT_KEEP_DEFAULT) : 0,
        .resume = resume,
    };
    sluice_consumer *c;
    char err[512];
    double t0 = now_s();
    sluice_err e = sluice_consumer_open(&c, &o, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": %s\n", *err ? err : sluice_strerror(e));
        /* A malformed --redis URL or queue name is a usage error. */
        return e == SLUICE_ERR_INVALID ? 2 : 1;
    }

    struct totals tot = {0, 0, 0, 0, 0}, ep_tot = {0, 0, 0, 0, 0};
    uint64_t invalid_seen = 0, ended_seen = 0;
    int status = 0, partial = 0;
    char said[600] = "";
    int64_t said_at = 0;
    while (!stop_requested && (count < 0 || (long long)tot.batches < count)) {
        uint32_t epoch = sluice_consumer_epoch(c);
        /* Waits in slices so that a signal is noticed within a second; with
         * --timeout-ms the slices add up to T since the last batch. */
        double wait_start = now_s();
        sluice_batch *b = NULL;
        int skipped = 0;
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
            /* Each call's errstr is its own: dead letters are told now. */
            sluice_consumer_stats st;
            sluice_consumer_stats_get(c, &st);
            if (st.invalid > invalid_seen) {
                uint64_t k = st.invalid - invalid_seen;
                if (k == 1)
                    fprintf(stderr, PROG ": an invalid batch went to the dead letters: %s\n",
                            sluice_consumer_errstr(c));
                else
                    fprintf(stderr, PROG ": %" PRIu64 " invalid batches went to the dead "
                            "letters (the last: %s)\n", k, sluice_consumer_errstr(c));
                invalid_seen = st.invalid;
                skipped = 1;
            }
            if (e != SLUICE_ERR_TIMEOUT || stop_requested)
                break;
            /* A wait of a few seconds says what it waits for, once per
             * reason and then once a minute. */
            char why[600];
            int64_t waited = sluice_consumer_wait_status(c, why, sizeof why);
            if (!quiet && waited >= WAIT_SAY_MS && why[0] &&
                (strcmp(why, said) != 0 || waited - said_at >= 60000)) {
                fprintf(stderr, PROG ": waited %.0f s: %s\n", (double)waited / 1000.0, why);
                snprintf(said, sizeof said, "%s", why);
                said_at = waited;
            }
            if (timeout_ms >= 0 && (now_s() - wait_start) * 1000.0 >= (double)timeout_ms)
                break;
        }
        sluice_consumer_stats st;
        sluice_consumer_stats_get(c, &st);
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
        if (e == SLUICE_ERR_PARTIAL) {
            /* The epoch ended, without the records of its failed tasks. */
            fprintf(stderr, PROG ": %s\n", sluice_consumer_errstr(c));
            partial = 1;
            e = SLUICE_EOF;
        }
        if (e == SLUICE_EOF) {
            int finished = sluice_consumer_finished(c);
            /* A consumer opened after the job ended sees no epoch end. */
            if (st.epochs_ended > ended_seen) {
                ended_seen = st.epochs_ended;
                sluice_epoch_report rep;
                sluice_consumer_epoch_report(c, &rep);
                if (summary && epochs) {
                    char prefix[32];
                    snprintf(prefix, sizeof prefix, "epoch=%" PRIu32 " ", epoch);
                    print_totals(prefix, &ep_tot, 1, rep.failed_tasks);
                } else if (!summary) {
                    printf("eof epoch=%" PRIu32 "%s\n", epoch,
                           rep.failed_tasks ? " partial" : "");
                }
                memset(&ep_tot, 0, sizeof ep_tot);
            }
            if (finished && !summary)
                printf("finished\n");
            /* Promptly: tests time the end of an epoch from this line. */
            fflush(stdout);
            if (finished)
                break;
            continue;
        }
        if (e != SLUICE_OK) {
            const char *detail = sluice_consumer_errstr(c);
            fprintf(stderr, PROG ": %s%s%s\n", sluice_strerror(e), *detail ? ": " : "", detail);
            status = 1;
            break;
        }
        account(&tot, b);
        account(&ep_tot, b);
        sluice_batch_id id = sluice_batch_get_id(b);
        if (print_ids)
            printf("id %" PRIu32 ":%" PRIu64 ":%" PRIu32 " deliveries=%" PRIu32 " padding=%d\n",
                   id.epoch, id.task, id.seq, sluice_batch_deliveries(b),
                   sluice_batch_is_padding(b));
        else if (!summary)
            printf("batch %" PRIu32 ":%" PRIu64 ":%" PRIu32 " records=%zu bytes=%zu deliveries=%" PRIu32
                   "\n",
                   id.epoch, id.task, id.seq, sluice_batch_num_records(b),
                   sluice_batch_frame_bytes(b), sluice_batch_deliveries(b));
        sluice_batch_release(b);
        if (ferror(stdout)) {
            fprintf(stderr, PROG ": writing to stdout: %s\n", strerror(errno));
            status = 1;
            break;
        }
        /* What was printed is out of this process before it counts as done. */
        if (ckpt_every && tot.batches % (uint64_t)ckpt_every == 0 &&
            (fflush(stdout) != 0 || checkpoint(c, ckpt_file) != 0)) {
            status = 1;
            break;
        }
    }
    if (ckpt_every && status == 0 && (fflush(stdout) != 0 || checkpoint(c, ckpt_file) != 0))
        status = 1;

    sluice_consumer_stats st;
    sluice_consumer_stats_get(c, &st);
    sluice_consumer_close(c);
    if (summary)
        print_totals("", &tot, 0, 0);
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
                tot.batches, tot.records, mb, secs, secs > 0 ? mb / secs : 0.0,
                (double)st.blocked_us / 1e6);
        if (st.redelivered || st.duplicates || st.invalid || st.padding || st.reconnects)
            fprintf(stderr,
                    "  redelivered %" PRIu64 ", duplicates dropped %" PRIu64 ", invalid %" PRIu64
                    ", padding %" PRIu64 ", reconnects %" PRIu64 "\n",
                    st.redelivered, st.duplicates, st.invalid, st.padding, st.reconnects);
    }
    if (status == 0 && partial)
        status = EXIT_PARTIAL;
    return status;
}
