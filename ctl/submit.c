/* sluice-ctl submit: a manifest's shards become a job of shards x epochs
 * tasks, each epoch in its own order (a seeded shuffle), sent in steps
 * (submit.lua) to the queue or spread over its partitions, all or
 * nothing. */
#include "ctl.h"
#include "num.h"
#include "rng.h"

#include <sluice/producer.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BATCH_SIZE 1000000
#define MAX_ATTEMPTS 1000
/* Most tasks (shards x epochs) one submit may queue. */
#define MAX_TASKS 10000000ULL

int submit_parse(int argc, char **argv, submit_opts *o)
{
    static const struct {
        const char *name;
        size_t off;             /* of a uint64_t in submit_opts */
        uint64_t max;
    } nums[] = {
        {"--epochs", offsetof(submit_opts, epochs), CTL_MAX_EPOCHS},
        {"--batch-size", offsetof(submit_opts, batch_size), MAX_BATCH_SIZE},
        {"--max-attempts", offsetof(submit_opts, max_attempts), MAX_ATTEMPTS},
        {"--max-crashes", offsetof(submit_opts, max_crashes), MAX_ATTEMPTS},
    };
    *o = (submit_opts){.max_attempts = 3, .max_crashes = 20};
    for (int i = 0; i < argc; i++) {
        const char *val;
        int got;
        if ((got = sluicei_flag_value(argc, argv, &i, "--manifest", &val)) != 0) {
            if (got < 0)
                return SLUICEI_EXIT_USAGE;
            o->manifest = val;
            continue;
        }
        if (strcmp(argv[i], "--drop-remainder") == 0) {
            o->drop_remainder = 1;
            continue;
        }
        if ((got = sluicei_flag_value(argc, argv, &i, "--shuffle-buffer", &val)) != 0) {
            if (got < 0)
                return SLUICEI_EXIT_USAGE;
            if (sluicei_parse_u64(val, strlen(val), SLUICE_SHUFFLE_BUFFER_MAX,
                                  &o->shuffle_buffer) != 0)
                return sluicei_usage_error("--shuffle-buffer '%s' is not an integer in 0..%d "
                                           "(records held per task being produced)", val,
                                           SLUICE_SHUFFLE_BUFFER_MAX);
            continue;
        }
        if ((got = sluicei_flag_value(argc, argv, &i, "--shuffle-seed", &val)) != 0) {
            if (got < 0)
                return SLUICEI_EXIT_USAGE;
            if (sluicei_parse_u64(val, strlen(val), UINT64_MAX, &o->seed) != 0)
                return sluicei_usage_error("--shuffle-seed '%s' is not an integer in 0..2^64-1",
                                           val);
            o->has_seed = 1;
            continue;
        }
        size_t k = 0;
        while (k < sizeof nums / sizeof nums[0] &&
               (got = sluicei_flag_value(argc, argv, &i, nums[k].name, &val)) == 0)
            k++;
        if (k == sizeof nums / sizeof nums[0])
            return sluicei_usage_error("submit: unknown argument '%s'", argv[i]);
        if (got < 0)
            return SLUICEI_EXIT_USAGE;
        uint64_t v;
        if (sluicei_parse_u64(val, strlen(val), nums[k].max, &v) != 0 || v == 0)
            return sluicei_usage_error("%s '%s' is not an integer in 1..%" PRIu64, nums[k].name,
                                       val, nums[k].max);
        *(uint64_t *)((char *)o + nums[k].off) = v;
    }
    if (!o->manifest)
        return sluicei_usage_error("submit: %s is required", "--manifest FILE");
    if (!o->epochs)
        return sluicei_usage_error("submit: %s is required", "--epochs E");
    if (!o->batch_size)
        return sluicei_usage_error("submit: %s is required", "--batch-size N");
    return 0;
}


/* Writes epoch's task order into perm (n shards): manifest order without
 * a seed; else a Fisher-Yates shuffle driven by splitmix64 seeded with
 * seed ^ epoch, so that the same seed always gives the same orders and
 * each epoch its own. */
static void epoch_perm(uint32_t *perm, size_t n, const submit_opts *o, uint64_t epoch)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    if (o->has_seed) {
        uint64_t st = o->seed ^ epoch;
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)sluicei_uniform(&st, i + 1);
            uint32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
}

/* Items one step of the submit script sends at most (submit.lua): a few
 * milliseconds of Redis's time each. */
#define SUBMIT_CHUNK 1000

/* Runs submit.lua's step op on partition p with the arguments args, and
 * on success stores its integer reply in *result (when not NULL). Returns
 * 0, or SLUICEI_EXIT_RUNTIME (printed). */
static int submit_step(ctl *x, int p, const char *op, const char *token, size_t n,
                       const char **args, long long *result)
{
    const char **argv = malloc((2 + n) * sizeof *argv);
    if (!argv) {
        fprintf(stderr, "sluice-ctl: out of memory building the job\n");
        return SLUICEI_EXIT_RUNTIME;
    }
    argv[0] = op;
    argv[1] = token;
    for (size_t i = 0; i < n; i++)
        argv[2 + i] = args[i];
    redisReply *r;
    sluice_err e = ctl_script_call(x, SLUICEI_SCRIPT_SUBMIT, ctl_pname(x, p), 2 + n, argv, &r);
    free(argv);
    if (e == SLUICE_ERR_EXISTS && x->partitions && r && strstr(r->str, "JOBEXISTS")) {
        /* "... (epoch 0 of 2); wait ..." -> "... (epoch 0 of 2 in partition p); wait ..." */
        const char *t = ctl_error_text(r, "JOBEXISTS"), *paren = strstr(t, ");");
        if (paren)
            fprintf(stderr, "sluice-ctl: queue '%s': %.*s in partition %d%s\n", x->q,
                    (int)(paren - t), t, p, paren);
        else
            fprintf(stderr, "sluice-ctl: queue '%s': %s (partition %d)\n", x->q, t, p);
        freeReplyObject(r);
        return SLUICEI_EXIT_RUNTIME;
    }
    if (e != SLUICE_OK)
        return ctl_script_failed(x, SLUICEI_SCRIPT_SUBMIT, ctl_pname(x, p), e, &r, 2 + n);
    if (result)
        *result = ctl_reply_num(r);
    freeReplyObject(r);
    return 0;
}

/* Gives up what the submit staged in partition p, in steps. */
static void submit_abort(ctl *x, int p, const char *token)
{
    for (long long left = 1; left > 0;)
        if (submit_step(x, p, "abort", token, 0, NULL, &left))
            break;
}

/* Sends pending[0..*n) as one 'tasks' step of epoch e and empties it. */
static int flush_tasks(ctl *x, int p, const char *token, const char *e, char (*pending)[48],
                       size_t *n)
{
    if (*n == 0)
        return 0;
    const char *args[1 + SUBMIT_CHUNK];
    args[0] = e;
    for (size_t i = 0; i < *n; i++)
        args[1 + i] = pending[i];
    int rc = submit_step(x, p, "tasks", token, 1 + *n, args, NULL);
    *n = 0;
    return rc;
}

/* Submits the job in steps (submit.lua): every partition (a plain queue:
 * the one) begins, clears what the previous job left, and stages its
 * definitions and its tasks, epoch by epoch; then each commits, which
 * makes its part visible at once. A failure before the commits leaves
 * nothing visible (the staging is given up); the commits are one call
 * each, and only a partition lost between them leaves a job in part
 * (the error says which). */
int submit_run(ctl *x, const submit_opts *o, const sluicei_shard *shards, size_t n)
{
    if ((uint64_t)n * o->epochs > MAX_TASKS) {
        fprintf(stderr, "sluice-ctl: %zu shards x %" PRIu64 " epochs is more than %llu tasks\n",
                n, o->epochs, MAX_TASKS);
        return SLUICEI_EXIT_RUNTIME;
    }
    int P = ctl_nparts(x);
    if (x->partitions && n < (size_t)P) {
        fprintf(stderr, "sluice-ctl: queue '%s' has %d partitions but the job only %zu shard%s: "
                "every partition needs one at least (split= in the manifest makes more)\n",
                x->q, P, n, n == 1 ? "" : "s");
        return SLUICEI_EXIT_RUNTIME;
    }
    char token[40], ep[24], ns[24], bs[24], seed[24], ma[24], mc[24], num[24], sb[24];
    snprintf(token, sizeof token, "%016" PRIx64 "-%" PRIu64, sluicei_random64(),
             sluicei_wall_us());
    snprintf(ep, sizeof ep, "%" PRIu64, o->epochs);
    snprintf(bs, sizeof bs, "%" PRIu64, o->batch_size);
    seed[0] = '\0';
    if (o->has_seed)
        snprintf(seed, sizeof seed, "%" PRIu64, o->seed);
    snprintf(ma, sizeof ma, "%" PRIu64, o->max_attempts);
    snprintf(mc, sizeof mc, "%" PRIu64, o->max_crashes);
    snprintf(sb, sizeof sb, "%" PRIu64, o->shuffle_buffer);
    uint32_t *perm = malloc(n * sizeof *perm);
    char (*pending)[48] = malloc((size_t)P * SUBMIT_CHUNK * sizeof *pending);
    size_t *npend = calloc((size_t)P, sizeof *npend);
    char **defs = calloc(2 * SUBMIT_CHUNK, sizeof *defs);
    int rc = SLUICEI_EXIT_RUNTIME, begun = 0;
    long long tasks = 0;
    if (!perm || !pending || !npend || !defs) {
        fprintf(stderr, "sluice-ctl: out of memory building the job\n");
        goto out;
    }
    /* Begin and clear every partition first: a refusal (a job running)
     * comes before anything is staged anywhere. */
    for (int p = 0; p < P; p++) {
        size_t mine = n / (size_t)P + ((size_t)p < n % (size_t)P);
        snprintf(ns, sizeof ns, "%zu", mine);
        const char *args[8] = {ep, ns, bs, seed, ma, mc, sb, o->drop_remainder ? "1" : "0"};
        long long left = 0;
        if (submit_step(x, p, "begin", token, 8, args, &left))
            goto out;
        begun = p + 1;
        while (left > 0)
            if (submit_step(x, p, "clear", token, 0, NULL, &left))
                goto out;
    }
    /* Definitions: shard s goes to partition s mod P under its global number. */
    for (int p = 0; p < P; p++) {
        size_t k = 0;
        for (size_t sh = (size_t)p; sh < n; sh += (size_t)P) {
            char *d = sluicei_shard_encode(&shards[sh]);
            char *nb = malloc(24);
            if (!d || !nb) {
                free(d);
                free(nb);
                fprintf(stderr, "sluice-ctl: out of memory building the job\n");
                goto out_defs;
            }
            snprintf(nb, 24, "%zu", sh);
            defs[k++] = nb;
            defs[k++] = d;
            if (k == 2 * SUBMIT_CHUNK || sh + (size_t)P >= n) {
                int bad = submit_step(x, p, "defs", token, k, (const char **)defs, NULL);
                for (size_t i = 0; i < k; i++) {
                    free(defs[i]);
                    defs[i] = NULL;
                }
                k = 0;
                if (bad)
                    goto out;
            }
        }
    }
    /* Tasks, epoch by epoch in the job's order (a partition's: the job's
     * order without the other partitions' shards). */
    for (uint64_t e = 0; e < o->epochs; e++) {
        snprintf(num, sizeof num, "%" PRIu64, e);
        epoch_perm(perm, n, o, e);
        for (size_t i = 0; i < n; i++) {
            int p = (int)(perm[i] % (uint32_t)P);
            snprintf(pending[(size_t)p * SUBMIT_CHUNK + npend[p]++], 48, "%" PRIu64 ":%" PRIu32,
                     e, perm[i]);
            if (npend[p] == SUBMIT_CHUNK &&
                flush_tasks(x, p, token, num, pending + (size_t)p * SUBMIT_CHUNK, &npend[p]))
                goto out;
        }
        for (int p = 0; p < P; p++)
            if (flush_tasks(x, p, token, num, pending + (size_t)p * SUBMIT_CHUNK, &npend[p]))
                goto out;
    }
    for (int p = 0; p < P; p++) {
        long long got = 0;
        if (submit_step(x, p, "commit", token, 0, NULL, &got)) {
            if (p > 0) {
                char done[48];
                if (p == 1)
                    snprintf(done, sizeof done, "partition 0 has its part");
                else
                    snprintf(done, sizeof done, "partitions 0..%d have theirs", p - 1);
                fprintf(stderr, "sluice-ctl: queue '%s': the job is only partly submitted: %s "
                        "(%lld tasks), partition %d failed%s; delete the queue and create it "
                        "again (sluice-ctl delete %s)\n", x->q, done, tasks, p,
                        p + 1 < P ? " and those after it have nothing" : "", x->q);
                begun = 0;   /* the committed parts stay; the others are given up */
                for (int k = p; k < P; k++)
                    submit_abort(x, k, token);
            }
            goto out;
        }
        tasks += got;
    }
    begun = 0;
    if (x->partitions)
        printf("submitted %lld tasks (%zu shard%s \xc3\x97 %" PRIu64 " epoch%s) to queue '%s' over %d "
               "partitions\n", tasks, n, n == 1 ? "" : "s", o->epochs, o->epochs == 1 ? "" : "s",
               x->q, P);
    else
        printf("submitted %lld tasks (%zu shard%s \xc3\x97 %" PRIu64 " epoch%s) to queue '%s'\n",
               tasks, n, n == 1 ? "" : "s", o->epochs, o->epochs == 1 ? "" : "s", x->q);
    rc = 0;
    goto out;
out_defs:
    for (size_t i = 0; i < 2 * SUBMIT_CHUNK; i++)
        free(defs[i]);
out:
    /* Nothing of a failed submit is visible; what it staged goes. */
    for (int p = 0; p < begun; p++)
        submit_abort(x, p, token);
    free(perm);
    free(pending);
    free(npend);
    free(defs);
    return rc;
}

