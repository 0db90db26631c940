/* sluice-ctl create and delete: a queue's flags and settings, creating a
 * plain queue or its partitions (undone when one fails), and deleting it
 * in steps, also one whose delete stopped half-way. */
#include "ctl.h"
#include "num.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A valued flag of create: where its number goes, and whether it takes a
 * size suffix. */
typedef struct create_flag {
    const char *name;
    size_t off;                 /* of a uint64_t in create_opts */
    int size;                   /* "64M": binary suffixes k, M, G */
} create_flag;

static const create_flag create_flags[] = {
    {"--max-batches", offsetof(create_opts, max_batches), 0},
    {"--max-bytes", offsetof(create_opts, max_bytes), 1},
    {"--max-frame-bytes", offsetof(create_opts, max_frame), 1},
    {"--consumers", offsetof(create_opts, ranks), 0},
    {"--lease-ms", offsetof(create_opts, lease_ms), 0},
    {"--max-deliveries", offsetof(create_opts, max_deliveries), 0},
    {"--partitions", offsetof(create_opts, partitions), 0},
};
#define NFLAGS (sizeof create_flags / sizeof create_flags[0])

/* Parses a positive count, or with size a positive size ("64", "256M",
 * "1G"). Returns -1 on a malformed or zero value. */
static int parse_amount(const char *s, int size, uint64_t *out)
{
    uint64_t v;
    int rc = size ? sluicei_parse_size(s, INT64_MAX, &v)
                  : sluicei_parse_u64(s, strlen(s), INT64_MAX, &v);
    if (rc != 0 || v == 0)
        return -1;
    *out = v;
    return 0;
}

/* Reads create's flags. Returns 0 or SLUICEI_EXIT_USAGE (printed). */
static int parse_flags(int argc, char **argv, create_opts *o, const char **given)
{
    *o = (create_opts){.remainder = "drop", .lease_ms = SLUICE_LEASE_MS_DEFAULT, .max_deliveries = 3};
    for (int i = 0; i < argc; i++) {
        const char *val;
        int got;
        if (strcmp(argv[i], "--coordinated") == 0) {
            o->coordinated = 1;
            continue;
        }
        if ((got = sluicei_flag_value(argc, argv, &i, "--remainder", &val)) != 0) {
            if (got < 0)
                return SLUICEI_EXIT_USAGE;
            if (strcmp(val, "drop") != 0 && strcmp(val, "pad") != 0)
                return sluicei_usage_error("--remainder '%s' is not 'drop' or 'pad'", val);
            o->remainder = val;
            o->remainder_given = 1;
            continue;
        }
        if ((got = sluicei_flag_value(argc, argv, &i, "--compress", &val)) != 0) {
            char why[256];
            if (got < 0)
                return SLUICEI_EXIT_USAGE;
            if (val[0] == '\0')
                return sluicei_usage_error("create: --compress is empty (none, lz4, zstd or "
                                           "zstd:LEVEL)");
            if (sluicei_zsetting_parse(val, strlen(val), &o->compress, why, sizeof why) != 0)
                return sluicei_usage_error("create: --compress: %s", why);
            continue;
        }
        size_t k = 0;
        while (k < NFLAGS && (got = sluicei_flag_value(argc, argv, &i, create_flags[k].name,
                                                        &val)) == 0)
            k++;
        if (k == NFLAGS)
            return sluicei_usage_error("create: unknown argument '%s'", argv[i]);
        if (got < 0)
            return SLUICEI_EXIT_USAGE;
        const create_flag *f = &create_flags[k];
        if (parse_amount(val, f->size, (uint64_t *)((char *)o + f->off)) != 0)
            return sluicei_usage_error("%s '%s' is not a positive %s", f->name, val,
                                       f->size ? "size (e.g. 64M)" : "integer");
        given[k] = val;
    }
    return 0;
}

/* The value given for flag, for messages. */
static const char *given_for(const char *const *given, const char *flag)
{
    for (size_t k = 0; k < NFLAGS; k++)
        if (strcmp(create_flags[k].name, flag) == 0 && given[k])
            return given[k];
    return "?";
}

/* Checks create's settings together. Returns 0 or SLUICEI_EXIT_USAGE
 * (printed). */
static int parse_create(int argc, char **argv, create_opts *o)
{
    const char *given[NFLAGS] = {0};
    int rc = parse_flags(argc, argv, o, given);
    if (rc)
        return rc;
    if (!o->max_batches)
        return sluicei_usage_error("create: %s is required", "--max-batches");
    if (!o->max_bytes)
        return sluicei_usage_error("create: %s is required", "--max-bytes");
    if (o->lease_ms < SLUICEI_MIN_LEASE_MS)
        return sluicei_usage_error("create: --lease-ms %s is below the minimum of 1000 (a "
                                   "consumer's blocking read, a quarter of its lease, must end "
                                   "well inside it)", given_for(given, "--lease-ms"));
    if (!o->max_frame)
        o->max_frame = o->max_bytes < SLUICEI_MAX_FRAME_DEFAULT ? o->max_bytes
                                                                : SLUICEI_MAX_FRAME_DEFAULT;
    if (o->max_frame > o->max_bytes)
        return sluicei_usage_error("create: --max-frame-bytes %s is larger than --max-bytes (no "
                                   "batch could be that large)",
                                   given_for(given, "--max-frame-bytes"));
    if (o->coordinated && !o->ranks)
        return sluicei_usage_error("create: %s",
                                   "--coordinated needs --consumers N (the number of ranks)");
    if (!o->coordinated && o->ranks)
        return sluicei_usage_error("create: %s", "--consumers N needs --coordinated (a free "
                                   "queue serves any number of consumers)");
    if (!o->coordinated && o->remainder_given)
        return sluicei_usage_error("create: %s", "--remainder needs --coordinated");
    if (o->ranks > 4096)
        return sluicei_usage_error("create: --consumers %s is more than 4096 ranks",
                                   given_for(given, "--consumers"));
    if (o->partitions > SLUICE_MAX_PARTITIONS)
        return sluicei_usage_error("create: --partitions %s is more than 1024 partitions",
                                   given_for(given, "--partitions"));
    return 0;
}

/* The name of a new queue: '#' is kept for partitions ("Q#3"), and with
 * --partitions P every "Q#<P-1>" must be a valid name. Returns 0 or
 * SLUICEI_EXIT_USAGE (printed). */
static int check_create_name(const char *q, const create_opts *o)
{
    if (strchr(q, '#'))
        return sluicei_usage_error("create: queue name '%s' contains '#', which only the names "
                                   "of partitions have (Q#0, Q#1, ...)", q);
    char last[24];
    int n = snprintf(last, sizeof last, "#%" PRIu64, o->partitions ? o->partitions - 1 : 0);
    if (o->partitions && strlen(q) + (size_t)n > SLUICE_MAX_QUEUE_NAME)
        return sluicei_usage_error("create: queue name '%s' is too long for %" PRIu64
                                   " partitions: the name of the last one, '%s%s', has %zu "
                                   "bytes, more than %d", q, o->partitions, q, last,
                                   strlen(q) + (size_t)n, SLUICE_MAX_QUEUE_NAME);
    return 0;
}

/* Whether key (of queue q: prefix, plen bytes) is one sweep_keys removes. */
static int swept_kind(const char *key, const char *prefix, size_t plen)
{
    static const char *const kinds[] = {"in:", "pgone:", "cgone:"};
    if (strncmp(key, prefix, plen) != 0)
        return 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (strncmp(key + plen, kinds[k], strlen(kinds[k])) == 0)
            return 1;
    return 0;
}

/* The keys of q no registry names, on the node of q, removed with one SCAN
 * from here (a script walking the key space would hold Redis for as long
 * as the walk): the frames of pushes whose script never ran (in:*) and
 * what producers and consumers reaped while frozen left to expire
 * (pgone:*, cgone:*). The delete script has removed every other key but
 * its own progress by then, so matching the queue's whole prefix costs
 * nothing more. Returns how many were removed, or -1 (printed) when a
 * command failed. */
static long long sweep_keys(ctl *x, const char *q)
{
    char pattern[SLUICE_MAX_KEY];
    sluicei_key(pattern, q, "*");
    size_t plen = strlen(pattern) - 1;
    char cursor[32] = "0";
    long long removed = 0;
    do {
        const char *scan[6] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        redisReply *r = ctl_must(x, q, 6, scan);
        if (!r)
            return -1;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "sluice-ctl: SCAN on queue '%s': unexpected reply\n", q);
            freeReplyObject(r);
            return -1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        const redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            if (keys->element[i]->type != REDIS_REPLY_STRING ||
                !swept_kind(keys->element[i]->str, pattern, plen))
                continue;
            const char *unlink[2] = {"UNLINK", keys->element[i]->str};
            redisReply *u = ctl_must(x, q, 2, unlink);
            if (!u) {
                freeReplyObject(r);
                return -1;
            }
            removed += ctl_reply_num(u);
            freeReplyObject(u);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return removed;
}

/* Runs delete.lua on queue q (a plain queue or a partition) until it is
 * gone, with the sweep of its other keys when the script asks for it; adds
 * the keys removed to *keys. On an error *out is the script's reply (or
 * NULL) for ctl_script_failed(). */
static sluice_err delete_one(ctl *x, const char *q, long long *keys, redisReply **out)
{
    const char *swept[1] = {"swept"};
    size_t argc = 0;
    *out = NULL;
    for (;;) {
        redisReply *r = NULL;
        sluice_err e = ctl_script_call(x, SLUICEI_SCRIPT_DELETE, q, argc, swept, &r);
        if (e != SLUICE_OK) {
            *out = r;
            return e;
        }
        long long more = 0;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
            *keys += ctl_reply_num(r->element[0]);
            more = ctl_reply_num(r->element[1]);
        }
        freeReplyObject(r);
        if (more == 0)
            return SLUICE_OK;
        if (more == 2) {
            long long n = sweep_keys(x, q);
            if (n < 0)
                return SLUICE_ERR_REDIS;
            *keys += n;
            argc = 1;
        }
    }
}

/* Deletes partitions lo..hi-1 of x (a create being undone). Returns how
 * many could not be deleted (each printed). */
static int delete_partitions(ctl *x, int lo, int hi)
{
    int left = 0;
    for (int p = lo; p < hi; p++) {
        long long keys = 0;
        redisReply *r = NULL;
        sluice_err e = delete_one(x, ctl_pname(x, p), &keys, &r);
        if (e != SLUICE_OK) {
            ctl_script_failed(x, SLUICEI_SCRIPT_DELETE, ctl_pname(x, p), e, &r, 0);
            left++;
        }
    }
    return left;
}

/* Creates the queue, or its partitions from the last to the first: the
 * queue is found (sluicei_queue_partitions reads partition 0) only once
 * all exist. If one fails, those made are deleted again. */
int create_run(ctl *x, const create_opts *o)
{
    char nb[24], nB[24], now[24], ranks[24], lease[24], maxd[24], mf[24], np[24], pp[24];
    char z[SLUICEI_ZSETTING_MAX];
    snprintf(nb, sizeof nb, "%" PRIu64, o->max_batches);
    snprintf(nB, sizeof nB, "%" PRIu64, o->max_bytes);
    snprintf(now, sizeof now, "%" PRIu64, sluicei_wall_us());
    snprintf(ranks, sizeof ranks, "%" PRIu64, o->ranks);
    snprintf(lease, sizeof lease, "%" PRIu64, o->lease_ms);
    snprintf(maxd, sizeof maxd, "%" PRIu64, o->max_deliveries);
    snprintf(mf, sizeof mf, "%" PRIu64, o->max_frame);
    /* partitions and partition are '' for a plain queue. */
    np[0] = pp[0] = '\0';
    if (o->partitions)
        snprintf(np, sizeof np, "%" PRIu64, o->partitions);
    const char *args[] = {nb, nB, now, ranks, o->ranks ? o->remainder : "", lease, maxd, mf, np,
                          pp, sluicei_zsetting_str(&o->compress, z)};
    /* Q may exist in the other form (plain / partitioned), which the
     * script, looking at one name, would not see. */
    int have;
    char err[1024];
    sluice_err e = sluicei_queue_partitions(x->r, x->q, &have, err, sizeof err);
    if (e == SLUICE_OK) {
        if (have)
            fprintf(stderr, "sluice-ctl: queue '%s' exists already, with %d partition%s "
                    "(sluice-ctl delete %s removes it)\n", x->q, have, have == 1 ? "" : "s", x->q);
        else
            fprintf(stderr, "sluice-ctl: queue '%s' exists already (sluice-ctl delete %s removes "
                    "it)\n", x->q, x->q);
        return SLUICEI_EXIT_RUNTIME;
    }
    if (e != SLUICE_ERR_NOQUEUE) {
        fprintf(stderr, "sluice-ctl: %s\n", err);
        return SLUICEI_EXIT_RUNTIME;
    }
    for (int p = ctl_nparts(x) - 1; p >= 0; p--) {
        redisReply *r;
        if (x->partitions)
            snprintf(pp, sizeof pp, "%d", p);
        if (ctl_run_script(x, SLUICEI_SCRIPT_CREATE, ctl_pname(x, p), 11, args, &r)) {
            if (p + 1 < ctl_nparts(x)) {
                int left = delete_partitions(x, p + 1, ctl_nparts(x));
                if (left)
                    fprintf(stderr, "sluice-ctl: queue '%s' is left incomplete: %d partition%s "
                            "could not be deleted again (sluice-ctl delete %s#N removes one)\n",
                            x->q, left, left == 1 ? "" : "s", x->q);
                else
                    fprintf(stderr, "sluice-ctl: queue '%s' not created: the %d partition%s "
                            "made before were deleted again\n", x->q, ctl_nparts(x) - 1 - p,
                            ctl_nparts(x) - 1 - p == 1 ? "" : "s");
            }
            return SLUICEI_EXIT_RUNTIME;
        }
        freeReplyObject(r);
    }
    if (x->partitions)
        printf("created queue '%s' of %d partitions (%s#0..%s#%d): at most %s batches, %s bytes "
               "per partition", x->q, x->partitions, x->q, x->q, x->partitions - 1, nb, nB);
    else
        printf("created queue '%s': at most %s batches, %s bytes", x->q, nb, nB);
    if (o->ranks)
        printf("; coordinated over %s ranks, remainder %s", ranks, o->remainder);
    if (o->compress.codec != SLUICEI_ZCODEC_NONE)
        printf("; frames compressed with %s", z);
    printf("\n");
    return 0;
}

/* Deletes the queue; a partitioned one from its last partition to the
 * first, so that a delete that stops half-way can be run again (it finds
 * the queue through partition 0, or its 'deleting' key). Each partition
 * goes in steps of about 1000 keys (delete.lua), so that Redis never
 * stops for it. */
static int delete_partitions_all(ctl *x)
{
    long long keys = 0;
    int missing = 0;
    for (int p = ctl_nparts(x) - 1; p >= 0; p--) {
        redisReply *r = NULL;
        sluice_err e = delete_one(x, ctl_pname(x, p), &keys, &r);
        if (e == SLUICE_ERR_NOQUEUE && x->partitions && p > 0) {
            /* A partition lost earlier: delete the others. */
            if (r)
                freeReplyObject(r);
            missing++;
            continue;
        }
        if (e != SLUICE_OK) {
            if (r)
                ctl_script_failed(x, SLUICEI_SCRIPT_DELETE, ctl_pname(x, p), e, &r, 0);
            /* A user without the admin's rights is refused at the first
             * step: nothing was deleted. */
            if (!(e == SLUICE_ERR_AUTH && p == ctl_nparts(x) - 1 && keys == 0))
                fprintf(stderr, "sluice-ctl: queue '%s' is deleted only in part: run the "
                        "delete again to finish it\n", x->q);
            return SLUICEI_EXIT_RUNTIME;
        }
    }
    if (x->partitions)
        printf("deleted queue '%s' (%d partitions, %lld keys)\n", x->q, x->partitions, keys);
    else
        printf("deleted queue '%s' (%lld keys)\n", x->q, keys);
    if (missing)
        fprintf(stderr, "sluice-ctl: queue '%s': %d of its partitions did not exist\n", x->q,
                missing);
    return 0;
}

/* The queue a delete works on: as ctl_discover(), or one whose delete
 * stopped half-way (its meta renamed 'deleting', delete.lua). */
static int delete_discover(ctl *x)
{
    int partitions = 0;
    char err[1024], k_plain[SLUICE_MAX_KEY], k_p0[SLUICE_MAX_KEY], p0[PART_NAME_MAX];
    sluice_err e = sluicei_queue_partitions(x->r, x->q, &partitions, err, sizeof err);
    if (e == SLUICE_OK)
        return ctl_set_partitions(x, partitions) ? SLUICEI_EXIT_RUNTIME : 0;
    if (e != SLUICE_ERR_NOQUEUE) {
        fprintf(stderr, "sluice-ctl: %s\n", err);
        return SLUICEI_EXIT_RUNTIME;
    }
    sluicei_key(k_plain, x->q, "deleting");
    sluicei_partition_name(p0, x->q, 0);
    sluicei_key(k_p0, p0, "deleting");
    const char *ex[2] = {"EXISTS", k_plain}, *hg[3] = {"HGET", k_p0, "partitions"};
    redisReply *a = ctl_must(x, x->q, 2, ex), *b = a ? ctl_must(x, p0, 3, hg) : NULL;
    int rc = SLUICEI_EXIT_RUNTIME;
    if (a && b) {
        if (a->type == REDIS_REPLY_INTEGER && a->integer == 1)
            rc = ctl_set_partitions(x, 0) ? SLUICEI_EXIT_RUNTIME : 0;
        else if (b->type == REDIS_REPLY_STRING)
            rc = ctl_set_partitions(x, (int)ctl_num(b->str)) ? SLUICEI_EXIT_RUNTIME : 0;
        else
            fprintf(stderr, "sluice-ctl: queue '%s' does not exist (create it with: sluice-ctl "
                    "create %s)\n", x->q, x->q);
    }
    if (a)
        freeReplyObject(a);
    if (b)
        freeReplyObject(b);
    return rc;
}


int create_parse(const char *q, int argc, char **argv, create_opts *o)
{
    if (parse_create(argc, argv, o) || check_create_name(q, o))
        return SLUICEI_EXIT_USAGE;
    return 0;
}

int delete_run(ctl *x)
{
    return delete_discover(x) ? SLUICEI_EXIT_RUNTIME : delete_partitions_all(x);
}
