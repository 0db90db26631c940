/* A queue's gauges and a producer's published counters, read from Redis
 * (gauges.h), one partition after another. */
#include "gauges.h"

#include "num.h"
#include "proto.h"

#include <stdio.h>
#include <string.h>

static const char *const pstats_field[SLUICEI_PSTAT_COUNT] = {
    "batches", "bytes", "blocked_us", "duplicates", "tasks_done", "tasks_failed"};

const char *sluicei_pstats_field(int i)
{
    return i >= 0 && i < SLUICEI_PSTAT_COUNT ? pstats_field[i] : NULL;
}

/* The value of a reply that is an integer or a decimal string; -1 for nil
 * or anything else. */
static int64_t reply_value(const redisReply *r)
{
    uint64_t v;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING && sluicei_parse_u64(r->str, r->len, INT64_MAX, &v) == 0)
        return (int64_t)v;
    return -1;
}

/* Runs a command on the node of queue q whose reply is an integer, a
 * decimal string or nil, and adds its value to *sum (a sum of -1 is none
 * yet; nil adds nothing). */
static sluice_err add_value(sluicei_router *r, const char *q, int64_t deadline, int argc,
                            const char **argv, int64_t *sum, char *err, size_t errlen)
{
    redisReply *rep = NULL;
    sluice_err e = sluicei_router_command(r, q, deadline, &rep, argc, argv, NULL);
    if (e == SLUICE_OK) {
        int64_t v = reply_value(rep);
        if (v >= 0)
            *sum = *sum < 0 ? v : *sum + v;
    } else {
        snprintf(err, errlen, "%s", sluicei_router_errstr(r));
    }
    if (rep)
        freeReplyObject(rep);
    return e;
}

/* Adds the counters producer_id published on queue q (a plain queue or a
 * partition) to g->published. */
static sluice_err add_published(sluicei_router *r, const char *q, const char *producer_id,
                                int64_t deadline, sluicei_queue_gauges *g, char *err,
                                size_t errlen)
{
    char key[SLUICE_MAX_KEY];
    sluicei_keyf(key, q, "pstats:%s", producer_id);
    const char *argv[2 + SLUICEI_PSTAT_COUNT] = {"HMGET", key};
    for (int i = 0; i < SLUICEI_PSTAT_COUNT; i++)
        argv[2 + i] = pstats_field[i];
    redisReply *rep = NULL;
    sluice_err e =
        sluicei_router_command(r, q, deadline, &rep, 2 + SLUICEI_PSTAT_COUNT, argv, NULL);
    if (e != SLUICE_OK) {
        snprintf(err, errlen, "%s", sluicei_router_errstr(r));
    } else if (rep->type != REDIS_REPLY_ARRAY || rep->elements != SLUICEI_PSTAT_COUNT) {
        snprintf(err, errlen, "HMGET %s: unexpected reply", key);
        e = SLUICE_ERR_PROTOCOL;
    } else {
        for (int i = 0; i < SLUICEI_PSTAT_COUNT; i++) {
            const redisReply *f = rep->element[i];
            uint64_t v;
            if (f->type == REDIS_REPLY_STRING &&
                sluicei_parse_u64(f->str, f->len, UINT64_MAX, &v) == 0)
                g->published[i] += v;
        }
    }
    if (rep)
        freeReplyObject(rep);
    return e;
}

/* Adds one queue's figures (a plain queue or a partition) to g. */
static sluice_err add_queue(sluicei_router *r, const char *q, const char *producer_id,
                            int64_t deadline, sluicei_queue_gauges *g, char *err, size_t errlen)
{
    char k_meta[SLUICE_MAX_KEY], k_dlv[SLUICE_MAX_KEY], k_bytes[SLUICE_MAX_KEY];
    sluicei_key(k_meta, q, "meta");
    /* dlv holds one entry per batch the queue holds (queued or delivered
     * and not yet acknowledged), the depth the budgets count, and its pin
     * (SLUICEI_DLV_PIN). */
    sluicei_key(k_dlv, q, "dlv");
    sluicei_key(k_bytes, q, "bytes");
    const char *a_maxn[3] = {"HGET", k_meta, "max_batches"};
    const char *a_maxb[3] = {"HGET", k_meta, "max_bytes"};
    const char *a_depth[2] = {"HLEN", k_dlv};
    const char *a_pin[3] = {"HEXISTS", k_dlv, SLUICEI_DLV_PIN};
    const char *a_bytes[2] = {"GET", k_bytes};
    int64_t pin = -1;
    sluice_err e;
    if ((e = add_value(r, q, deadline, 3, a_maxn, &g->max_batches, err, errlen)) != SLUICE_OK ||
        (e = add_value(r, q, deadline, 3, a_maxb, &g->max_bytes, err, errlen)) != SLUICE_OK ||
        (e = add_value(r, q, deadline, 2, a_depth, &g->depth, err, errlen)) != SLUICE_OK ||
        (e = add_value(r, q, deadline, 3, a_pin, &pin, err, errlen)) != SLUICE_OK ||
        (e = add_value(r, q, deadline, 2, a_bytes, &g->bytes, err, errlen)) != SLUICE_OK)
        return e;
    if (pin > 0 && g->depth >= pin)
        g->depth -= pin;
    return producer_id ? add_published(r, q, producer_id, deadline, g, err, errlen) : SLUICE_OK;
}

sluice_err sluicei_queue_gauges_read(sluicei_router *r, const char *queue, int partitions,
                                     const char *producer_id, int64_t deadline_ms,
                                     sluicei_queue_gauges *out, int *partitions_out, char *err,
                                     size_t errlen)
{
    if (partitions < 0) {
        sluice_err e = sluicei_queue_partitions(r, queue, &partitions, err, errlen);
        if (e != SLUICE_OK)
            return e;
    }
    if (partitions_out)
        *partitions_out = partitions;
    memset(out, 0, sizeof *out);
    out->max_batches = out->max_bytes = out->depth = out->bytes = -1;
    for (int k = 0; k < (partitions ? partitions : 1); k++) {
        char q[SLUICE_MAX_QUEUE_NAME + 8];
        if (partitions)
            sluicei_partition_name(q, queue, k);
        else
            snprintf(q, sizeof q, "%s", queue);
        sluice_err e = add_queue(r, q, producer_id, deadline_ms, out, err, errlen);
        if (e != SLUICE_OK)
            return e;
    }
    return SLUICE_OK;
}
