/* sluice-ctl acl: the ACL SETUSER line of a least-privilege Redis user for
 * one role on one queue (docs/DEPLOY.md, "Roles").
 *
 * Every role reads all of the queue's keys. What it may write is a list of
 * key families, the ones its scripts write (docs/PROTOCOL.md, "Keys"):
 * Redis checks every command a script runs against the caller's ACL, and
 * the key EVALSHA names (KEYS[1], the role's anchor, proto.c) too. A
 * producer's frames, ready lists and delivery counts are writable through
 * selectors of single commands only: it creates frames (RENAMENX from its
 * in: keys) but can neither overwrite nor delete one, appends to ready
 * lists but cannot take from them, and sets delivery counts but cannot
 * remove one. */
#include "ctl.h"
#include "metrics.h"

#include <stdlib.h>
#include <string.h>

/* What every role runs: connecting (role, cluster topology, WAIT), the
 * scripts, and the commands inside them and beside them. */
static const char *const base_cmds[] = {
    "ping", "select", "role", "info", "time", "wait", "readonly", "asking",
    "cluster|slots", "cluster|nodes", "script|load", "evalsha", "eval", "multi", "exec",
    "discard",
    /* reading */
    "get", "mget", "strlen", "exists", "pttl", "hget", "hmget", "hgetall", "hlen",
    "hexists", "hkeys", "hvals", "hrandfield", "llen", "lrange", "lindex", "lpos", "scard",
    "smembers", "sismember", "zcard", "zrangebyscore", "zscore", "getbit", "bitfield_ro",
    /* writing (the keys allowed decide where) */
    "set", "del", "unlink", "rename", "renamenx", "copy", "incrby", "decrby", "hset",
    "hsetnx", "hdel", "hincrby", "lpush", "rpush", "lpop", "rpop", "lmove", "lrem",
    "ltrim", "sadd", "srem", "spop", "zadd", "zrem", "setbit", "bitfield", "persist",
    "pexpire", "pexpireat",
};
static const char *const producer_cmds[] = {"blpop", "mset"};
static const char *const consumer_cmds[] = {"blmove", "client|id", "client|reply",
                                            "client|unblock"};
static const char *const admin_cmds[] = {"scan", "blpop", "mset", "blmove", "client|id",
                                         "client|reply", "client|unblock"};

/* The families a producer writes freely. */
static const char *const producer_keys[] = {
    "producers", "pstats:*", "ptoken", "pstats_gone", "pgone:*", "in:*", "room", "task_wake",
    "jrun", "stats", "estats", "bytes", "tasks:*", "tlease", "towner", "tattempts", "tcrashes",
    "terr", "tbatches", "tresume", "trun", "failed", "edone", "eof", "redo", "stage:*",
    "dropped",
};
/* A consumer's: everything but the admin's (meta, job, taskdef, jstage,
 * deleting) and the producers' own (producers, pstats:, ptoken,
 * pstats_gone, pgone:, in:). */
static const char *const consumer_keys[] = {
    "consumers", "cstats:*", "cstats_gone", "cgone:*", "ctoken", "crank", "cckpt", "rholder",
    "pending:*", "ready:*", "stage:*", "b:*", "dlv", "bytes", "acked:*", "bitmaps", "dead",
    "deadinfo", "deadb:*", "recover", "recover_pause", "unsure", "runid", "redo", "stats",
    "estats", "room", "task_wake", "jrun", "tasks:*", "tlease", "towner", "tattempts",
    "tcrashes", "terr", "tbatches", "tresume", "trun", "failed", "edone", "eof", "dropped",
    "ret:*", "retained", "retained_bytes", "cowners", "ckpt:*", "ckpts:*", "clog:*", "cseg:*",
    "cdrop:*",
};

typedef sluicei_mtext out;

/* Appends a, then b and c when not NULL. */
static void put(out *o, const char *a, const char *b, const char *c)
{
    sluicei_mtext_raw(o, a, strlen(a));
    if (b)
        sluicei_mtext_raw(o, b, strlen(b));
    if (c)
        sluicei_mtext_raw(o, c, strlen(c));
}

static void cmds(out *o, const char *const *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put(o, " +", c[i], NULL);
}

/* " %RW~sluice:{q}:fam" for each family. */
static void keys(out *o, const char *perm, const char *q, const char *const *fam, size_t n)
{
    char pre[SLUICE_MAX_KEY];
    sluicei_key(pre, q, "");
    for (size_t i = 0; i < n; i++) {
        put(o, " ", perm, "~");
        put(o, pre, fam[i], NULL);
    }
}

#define N(a) (sizeof(a) / sizeof(a)[0])

/* The line for role on the queue names[0..nparts). */
static char *acl_line(const char *role, const char *user, const char *q,
                      char (*names)[PART_NAME_MAX], int nparts, int aclfile)
{
    out o = {0};
    put(&o, aclfile ? "user " : "ACL SETUSER ", user, " reset on resetchannels");
    cmds(&o, base_cmds, N(base_cmds));
    int admin = strcmp(role, "admin") == 0;
    if (admin)
        cmds(&o, admin_cmds, N(admin_cmds));
    else if (strcmp(role, "producer") == 0)
        cmds(&o, producer_cmds, N(producer_cmds));
    else
        cmds(&o, consumer_cmds, N(consumer_cmds));
    /* Whether the queue is plain or partitioned is read from its own
     * meta key and that of its first partition. */
    const char *all[] = {"*"}, *meta[] = {"meta"};
    keys(&o, admin ? "%RW" : "%R", q, all, 1);
    if (nparts == 1 && !strchr(q, '#')) {
        char p0[PART_NAME_MAX];
        sluicei_partition_name(p0, q, 0);
        keys(&o, "%R", p0, meta, 1);
    }
    for (int p = 0; p < nparts; p++) {
        const char *pq = names[p];
        if (strcmp(pq, q) != 0)
            keys(&o, admin ? "%RW" : "%R", pq, all, 1);
        if (strcmp(role, "consumer") == 0)
            keys(&o, "%RW", pq, consumer_keys, N(consumer_keys));
        if (strcmp(role, "producer") != 0)
            continue;
        keys(&o, "%RW", pq, producer_keys, N(producer_keys));
        /* Frames: created from in: keys, never replaced nor deleted. */
        const char *in[] = {"in:*"}, *b[] = {"b:*"}, *stage[] = {"stage:*"},
                   *ready[] = {"ready:*"}, *dlv[] = {"dlv"};
        put(&o, " (+renamenx", NULL, NULL);
        keys(&o, "%RW", pq, in, 1);
        keys(&o, "%W", pq, b, 1);
        /* Ready lists: appended to (a round moved from stage), never taken
         * from. */
        put(&o, ") (+lpush +lmove", NULL, NULL);
        keys(&o, "%RW", pq, stage, 1);
        keys(&o, "%W", pq, ready, 1);
        /* Delivery counts: set for a batch stored, never removed. */
        put(&o, ") (+hset", NULL, NULL);
        keys(&o, "%W", pq, dlv, 1);
        put(&o, ")", NULL, NULL);
    }
    if (o.failed || !o.buf) {
        sluicei_mtext_free(&o);
        return NULL;
    }
    return o.buf;
}

int acl_run(ctl *x, const char *role, const char *user, int aclfile)
{
    char def[SLUICE_MAX_QUEUE_NAME + 32];
    if (!user) {
        snprintf(def, sizeof def, "sluice-%s-%s", x->q, role);
        user = def;
    }
    char *line = acl_line(role, user, x->q, x->names, ctl_nparts(x), aclfile);
    if (!line) {
        fprintf(stderr, "sluice-ctl: acl: out of memory\n");
        return SLUICEI_EXIT_RUNTIME;
    }
    puts(line);
    free(line);
    return 0;
}
