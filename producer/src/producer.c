/* The producer API (producer.h): open, push (encode, then the pipeline),
 * flush, set_task, close, counters. How a push travels is pipeline.c;
 * waiting for room is room.c; the lease and heartbeat are lease.c;
 * partitioned queues are group.c; tasks are task.c (producer_impl.h). */
#include "num.h"
#include "producer_impl.h"
#include "producer_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void producer_seterr(sluice_producer *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->errstr, sizeof p->errstr, fmt, ap);
    va_end(ap);
}

static void default_id(char *out)
{
    char host[256], tail[40];
    if (gethostname(host, sizeof host) != 0 || host[0] == '\0')
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    int tl = snprintf(tail, sizeof tail, "-%ld-%04x", (long)getpid(),
                      (unsigned)(sluicei_random64() & 0xffff));
    /* A long host name is cut, never the pid and random part that make
     * the id unique. */
    size_t hl = strlen(host), room = SLUICE_MAX_PRODUCER_ID - (size_t)tl;
    if (hl > room)
        hl = room;
    memcpy(out, host, hl);
    memcpy(out + hl, tail, (size_t)tl + 1);
}

static void set_errbuf(char *errbuf, size_t errlen, const char *msg)
{
    if (errbuf && errlen)
        snprintf(errbuf, errlen, "%s", msg);
}

/* A new producer of queue q (a plain queue or one partition), without a
 * connection. */
sluice_err producer_new(sluice_producer **out, const sluice_producer_opts *o,
                        const char *q, const char *id)
{
    sluice_producer *p = calloc(1, sizeof *p);
    if (!p)
        return SLUICE_ERR_NOMEM;
    p->nslots = o->max_inflight > 0 ? o->max_inflight : INFLIGHT_MAX;
    p->win = o->max_inflight > 0 ? 0 : WINDOW_START;
    p->ring = calloc((size_t)p->nslots, sizeof *p->ring);
    if (!p->ring) {
        free(p);
        return SLUICE_ERR_NOMEM;
    }
    p->gmax = p->nslots / 2 < 1 ? 1 : p->nslots / 2 > GROUP_MAX ? GROUP_MAX : p->nslots / 2;
    sluicei_backoff_init(&p->redirect_backoff, REDIRECT_PAUSE_MS, REDIRECT_PAUSE_MAX_MS,
                         sluicei_random64() | 1);
    snprintf(p->queue, sizeof p->queue, "%s", q);
    sluicei_key(p->room_key, p->queue, "room");
    sluicei_key(p->meta_key, p->queue, "meta");
    sluicei_key(p->anchor_key, p->queue, "producers");
    sluicei_key(p->in_prefix, p->queue, "in:");
    sluicei_key(p->task_wake_key, p->queue, "task_wake");
    snprintf(p->id, sizeof p->id, "%s", id);
    snprintf(p->tok, sizeof p->tok, "%016" PRIx64, sluicei_random64());
    p->reconnect_timeout_ms = o->reconnect_timeout_ms;
    p->stop = o->stop;
    p->log = o->log;
    p->log_arg = o->log_arg;
    p->max_frame = SLUICEI_MAX_FRAME_DEFAULT;
    p->epoch = 0;
    p->task = ADHOC_TASK_MIN + sluicei_random64() % (ADHOC_TASK_END - ADHOC_TASK_MIN);
    p->lost_from = UINT64_MAX;
    p->wait_have = -1;
    p->role_due = 1;   /* lease_housekeep() before the first push asks ROLE */
    *out = p;
    return SLUICE_OK;
}

/* Whether queue q exists on p's connection (SLUICE_OK and *exists, with
 * its frame limit and compression read into p), or the error (err says
 * why; a compression this library does not know is SLUICE_ERR_INVALID). */
sluice_err producer_queue_exists(sluice_producer *p, int *exists, char *err, size_t errlen)
{
    redisReply *r = NULL;
    sluice_err e = sluicei_conn_command(p->conn, &r, "HMGET %s version max_frame compress",
                                        p->meta_key);
    if (e == SLUICE_OK && r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
        *exists = r->element[0]->type == REDIS_REPLY_STRING;
        uint64_t v;
        if (r->element[1]->type == REDIS_REPLY_STRING &&
            sluicei_parse_u64(r->element[1]->str, r->element[1]->len, UINT64_MAX, &v) == 0)
            p->max_frame = v;
        const redisReply *z = r->element[2];
        char why[256];
        if (z->type == REDIS_REPLY_STRING &&
            sluicei_zsetting_parse(z->str, z->len, &p->zenc.set, why, sizeof why) != SLUICE_OK) {
            snprintf(err, errlen, "queue '%s': meta field compress: %s; this library cannot "
                     "compress that way (a newer sluice made the queue?)", p->queue, why);
            e = SLUICE_ERR_INVALID;
        }
    } else if (e == SLUICE_OK) {
        snprintf(err, errlen, "HMGET %s: unexpected reply", p->meta_key);
        e = SLUICE_ERR_PROTOCOL;
    } else {
        if (r)
            e = sluicei_reply_error_code(r);   /* NOAUTH, NOPERM... */
        snprintf(err, errlen, "%s", p->conn->errstr);
    }
    if (r)
        freeReplyObject(r);
    return e;
}

sluice_err sluice_producer_open(sluice_producer **out, const sluice_producer_opts *o,
                                char *errbuf, size_t errlen)
{
    char err[512];
    sluice_err e;
    *out = NULL;
    if (!o || !o->redis_url) {
        set_errbuf(errbuf, errlen, o ? "no Redis URL given (opts.redis_url is NULL)"
                                     : "no options given");
        return SLUICE_ERR_INVALID;
    }
    if ((e = sluicei_queue_name_check(o->queue, err, sizeof err)) != SLUICE_OK) {
        set_errbuf(errbuf, errlen, err);
        return e;
    }
    if (o->producer_id && (o->producer_id[0] == '\0' ||
                           strlen(o->producer_id) > SLUICE_MAX_PRODUCER_ID)) {
        snprintf(err, sizeof err, "producer id must be 1 to %d bytes", SLUICE_MAX_PRODUCER_ID);
        set_errbuf(errbuf, errlen, err);
        return SLUICE_ERR_INVALID;
    }
    if (o->max_inflight < 0 || o->max_inflight > INFLIGHT_MAX) {
        snprintf(err, sizeof err, "max_inflight %d out of range 0..%d", o->max_inflight,
                 INFLIGHT_MAX);
        set_errbuf(errbuf, errlen, err);
        return SLUICE_ERR_INVALID;
    }

    char id[SLUICE_MAX_PRODUCER_ID + 1];
    if (o->producer_id)
        snprintf(id, sizeof id, "%s", o->producer_id);
    else
        default_id(id);
    sluice_producer *p;
    if (producer_new(&p, o, o->queue, id) != SLUICE_OK) {
        set_errbuf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    sluicei_router *r = NULL;
    int nparts = 0, exists = 0;
    e = sluicei_router_open(&r, o->redis_url, o->connect_timeout_ms, CMD_TIMEOUT_MS, err,
                            sizeof err);
    if (e == SLUICE_OK && sluicei_router_kind_of(r) == SLUICEI_ROUTER_SINGLE) {
        /* One server: a plain queue is opened as it always was (its meta
         * key is there); the router serves only to find partitions. */
        sluicei_url u;
        e = sluicei_router_url(r, p->queue, 0, &u, err, sizeof err);
        if (e == SLUICE_OK) {
            e = sluicei_conn_open_url(&p->conn, &u, o->connect_timeout_ms, CMD_TIMEOUT_MS, err,
                                      sizeof err);
            sluicei_url_free(&u);
        }
        if (e == SLUICE_OK)
            e = producer_queue_exists(p, &exists, err, sizeof err);
        if (e == SLUICE_OK && !exists)
            e = sluicei_queue_partitions(r, p->queue, &nparts, err, sizeof err);
        if (e == SLUICE_OK && nparts > 0) {
            sluicei_conn_close(p->conn);   /* the group has none */
            p->conn = NULL;
        }
        sluicei_router_close(r);
        r = NULL;
    } else if (e == SLUICE_OK) {
        p->router = r;   /* closed by sluice_producer_close() */
        e = sluicei_queue_partitions(r, p->queue, &nparts, err, sizeof err);
        if (e == SLUICE_OK && nparts == 0)
            e = group_routed_conn(r, p->queue, o, &p->conn, err, sizeof err);
        if (e == SLUICE_OK && nparts == 0)
            e = producer_queue_exists(p, &exists, err, sizeof err);
    }
    if (e == SLUICE_ERR_NOQUEUE || (e == SLUICE_OK && !exists && nparts == 0))
        e = SLUICE_ERR_NOQUEUE;
    if (e == SLUICE_ERR_NOQUEUE)
        snprintf(err, sizeof err,
                 "queue '%s' does not exist (create it with: sluice-ctl create %s)", p->queue,
                 p->queue);
    if (e == SLUICE_OK && nparts > 0)
        e = group_open(p, o, p->router, nparts, err, sizeof err);
    if (e != SLUICE_OK) {
        set_errbuf(errbuf, errlen, err);
        sluice_producer_close(p);
        return e;
    }
    p->opened = 1;
    *out = p;
    return SLUICE_OK;
}

static sluice_err encode_failed(sluice_producer *p, const slot *s, sluice_err e)
{
    producer_seterr(p, "push %s: cannot encode the batch: %s", s->idstr, sluice_strerror(e));
    return e;
}

/* Copies the error of child c to its group g, whose errstr the caller
 * reads. */
sluice_err producer_fwd(sluice_producer *g, const sluice_producer *c, sluice_err e)
{
    if (e != SLUICE_OK)
        snprintf(g->errstr, sizeof g->errstr, "%s", c->errstr);
    return e;
}

static sluice_err spilled_error(sluice_producer *p)
{
    producer_seterr(p, "task %s was given up (%s; SLUICE_ERR_FULL): hand it back "
                    "(sluice_producer_task_release)", p->task_key, p->spill_why);
    return SLUICE_ERR_FULL;
}

/* Before each push: housekeeping when due (after settling, so that no
 * reply is owed), and no push for a task whose lease was lost or that
 * was spilled. */
static sluice_err before_push(sluice_producer *p)
{
    if (p->spilled)
        return spilled_error(p);
    if (lease_housekeeping_due(p)) {
        sluice_err e = pipe_settle(p, 0);
        if (e == SLUICE_OK)
            e = lease_housekeep(p);
        if (e != SLUICE_OK)
            return e;
    }
    if (p->task_held && p->lease_lost)
        return lease_lost_error(p);
    return SLUICE_OK;
}

/* Pushes one batch: records recs[0..n), or, when tensors, nt tensors t of
 * rows rows. In a group, through the working child. */
static sluice_err push_batch(sluice_producer *p, const sluice_record *recs, size_t n,
                             int tensors, uint64_t rows, const sluice_tensor *t, size_t nt)
{
    if (p->nparts > 0) {
        sluice_producer *c = p->part[p->cur];
        group_beat(p, c);
        c->active = 1;
        return producer_fwd(p, c, push_batch(c, recs, n, tensors, rows, t, nt));
    }
    slot *s;
    p->may_spill = 1;
    sluice_err e = before_push(p);
    if (e == SLUICE_OK && p->task_held && p->next_seq < p->resume) {
        /* Stored by an earlier holder of the task, before its resume
         * point: neither encoded nor sent. */
        p->next_seq++;
        p->may_spill = 0;
        return SLUICE_OK;
    }
    if (e == SLUICE_OK)
        e = pipe_next_slot(p, &s);
    if (e == SLUICE_OK) {
        sluicei_batch_meta m = {s->id, p->id, sluicei_wall_us()};
        e = tensors ? sluicei_wire_encode_tensors(&s->frame, &m, rows, t, nt)
                    : sluicei_wire_encode_records(&s->frame, &m, recs, n);
        if (e != SLUICE_OK) {
            e = encode_failed(p, s, e);
        } else if (s->frame.len > p->max_frame) {
            /* The queue's consumers would refuse it: refused here, before
             * it costs Redis anything. */
            producer_seterr(
                p,
                "push %s: batch of %zu bytes exceeds the frame limit of queue '%s', %" PRIu64
                " bytes (use smaller batches, or create the queue with a larger "
                "--max-frame-bytes)",
                s->idstr, s->frame.len, p->queue, p->max_frame);
            e = SLUICE_ERR_TOOBIG;
        } else {
            /* max_frame is the uncompressed size: a queue's limits mean
             * the same with or without compression. */
            s->raw_len = s->frame.len;
            e = sluicei_zframe_compress(&p->zenc, &s->frame);
            e = e != SLUICE_OK ? encode_failed(p, s, e) : pipe_launch(p, s, tensors ? rows : n);
        }
    }
    p->may_spill = 0;
    return e;
}

sluice_err sluice_producer_push_records(sluice_producer *p, const sluice_record *recs, size_t n)
{
    return push_batch(p, recs, n, 0, 0, NULL, 0);
}

sluice_err sluice_producer_push_tensors(sluice_producer *p, uint64_t n, const sluice_tensor *t,
                                        size_t nt)
{
    return push_batch(p, NULL, 0, 1, n, t, nt);
}

/* Also the occasion for housekeeping (lease, heartbeat) when it is due, so
 * that a caller busy between pushes keeps its task by flushing now and
 * then; a lost lease is reported as SLUICE_ERR_IO "lease lost: ...". */
sluice_err sluice_producer_flush(sluice_producer *p)
{
    if (p->nparts > 0) {
        sluice_producer *c = p->part[p->cur];
        sluice_err e = producer_fwd(p, c, sluice_producer_flush(c));
        group_beat(p, c);
        return e;
    }
    if (p->spilled)
        return spilled_error(p);
    p->may_spill = 1;   /* a flush is part of pushing */
    sluice_err e = pipe_settle(p, 0);
    p->may_spill = 0;
    if (e == SLUICE_OK && lease_housekeeping_due(p))
        e = lease_housekeep(p);
    if (e == SLUICE_OK && p->task_held && p->lease_lost)
        e = lease_lost_error(p);
    return e;
}

sluice_err sluice_producer_set_task(sluice_producer *p, uint32_t epoch, uint64_t task)
{
    if (p->task_held) {
        producer_seterr(p, "set_task: task %s is held; finish it first (task_done/_fail/_release)",
                        p->task_key);
        return SLUICE_ERR_INVALID;
    }
    if (p->nparts > 0) {
        /* Task t in partition t mod P, as sluice-ctl submit deals shards:
         * the same (epoch, task) always meets the same duplicate check. */
        sluice_producer *c;
        sluice_err e = group_next_child(p, (int)(task % (uint64_t)p->nparts), &c);
        return e == SLUICE_OK ? producer_fwd(p, c, sluice_producer_set_task(c, epoch, task)) : e;
    }
    sluice_err e = pipe_settle(p, 0);
    if (e != SLUICE_OK)
        return e;
    p->epoch = epoch;
    p->task = task;
    p->next_seq = 0;
    return SLUICE_OK;
}

sluice_err sluicei_producer_new_adhoc(sluice_producer *p)
{
    if (p->nparts == 0)
        return SLUICE_OK;
    if (p->task_held) {
        producer_seterr(p, "task %s is held; finish it first (task_done/_fail/_release)",
                        p->task_key);
        return SLUICE_ERR_INVALID;
    }
    sluice_producer *c;
    sluice_err e = group_next_child(p, -1, &c);
    if (e == SLUICE_OK) {
        c->epoch = 0;
        c->task = ADHOC_TASK_MIN + sluicei_random64() % (ADHOC_TASK_END - ADHOC_TASK_MIN);
        c->next_seq = 0;
    }
    return e;
}

int sluicei_producer_partitions(const sluice_producer *p)
{
    return p->nparts;
}

void sluicei_producer_abandoned(const sluice_producer *p, sluicei_abandoned *out)
{
    *out = p->abandoned;
    for (int k = 0; k < p->nparts; k++) {
        out->unsent += p->part[k]->abandoned.unsent;
        out->refused_room += p->part[k]->abandoned.refused_room;
        out->refused_other += p->part[k]->abandoned.refused_other;
        out->unanswered += p->part[k]->abandoned.unanswered;
    }
}

/* The first half of closing: hands the task back, settles the pushes and
 * publishes the final counters. A child's waits may touch its siblings
 * (group_beat()), so every child of a group gets this before any is
 * freed. */
static void close_finish(sluice_producer *p)
{
    if (p->task_held && p->conn)
        sluice_producer_task_release(p, p->task_held);   /* not left to the reaper */
    if (p->conn && p->used > 0)
        pipe_settle(p, 0);
    if (p->opened && p->conn && p->conn->ctx && (!p->group || p->active))
        lease_beat(p, 0, 1);   /* the final counters, then it leaves the registry */
}

static void close_free(sluice_producer *p)
{
    sluicei_conn_close(p->conn);
    sluicei_router_close(p->router);   /* after every connection bound to it */
    if (p->exec_reply)
        freeReplyObject(p->exec_reply);
    for (int i = 0; i < p->nslots; i++)
        sluicei_buf_free(&p->ring[i].frame);
    sluicei_req_free(&p->req);
    sluicei_zenc_free(&p->zenc);
    free(p->ring);
    free(p);
}

void sluice_producer_close(sluice_producer *p)
{
    if (!p)
        return;
    if (p->part) {
        for (int k = 0; k < p->nparts; k++)
            close_finish(p->part[k]);
        for (int k = 0; k < p->nparts; k++)
            close_free(p->part[k]);
        free(p->part);
        p->task_held = NULL;   /* the child's */
    }
    close_finish(p);
    close_free(p);
}

void sluice_producer_stats_get(const sluice_producer *p, sluice_producer_stats *st)
{
    *st = p->st;
    for (int k = 0; k < p->nparts; k++) {
        const sluice_producer_stats *c = &p->part[k]->st;
        st->batches += c->batches;
        st->records += c->records;
        st->bytes += c->bytes;
        st->raw_bytes += c->raw_bytes;
        st->duplicates += c->duplicates;
        st->full_waits += c->full_waits;
        st->blocked_us += c->blocked_us;
        st->reconnects += p->part[k]->conn ? p->part[k]->conn->reconnects : c->reconnects;
        st->tasks_done += c->tasks_done;
        st->tasks_failed += c->tasks_failed;
    }
}

const char *sluice_producer_errstr(const sluice_producer *p)
{
    return p->errstr;
}

const char *sluice_producer_id(const sluice_producer *p)
{
    return p->id;
}
