/* Partitioned queues (cluster.h): opening the children, their heartbeats,
 * probes for room.
 *
 * The producer of a queue Q with P partitions is a group: it has no connection of its own, and one child
 * producer per partition "Q#p" (same id), each with its own connection to
 * the node serving it, all resolved by the group's router. A child is an
 * ordinary producer of its partition; the group only chooses which child
 * works: a claimed task's child (every batch of a task goes to the task's
 * partition, where duplicates are dropped), or, for ad-hoc pushes, the
 * partitions in turn from home = hash(id) mod P. Only the working child
 * has pushes in flight; the others are idle, so that the group may use
 * their connections at any time (claims, heartbeats, probes for room).
 * A child holding a task whose partition is at its budget while another
 * partition has room and waiting tasks stops pushing with SLUICE_ERR_FULL
 * ("spilled"): the batches not stored are dropped from the ring and the
 * first of them is the task's resume point, handed back with the task;
 * whoever claims it again skips the batches before it. */
#include "producer_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Opens a connection to the node that serves queue q (a plain queue or a
 * partition) now, that follows q when it moves (sluicei_router_bind). */
sluice_err group_routed_conn(sluicei_router *r, const char *q, const sluice_producer_opts *o,
                             sluicei_conn **out, char *err, size_t errlen)
{
    sluicei_url u;
    sluice_err e = sluicei_router_url(r, q, 0, &u, err, errlen);
    if (e != SLUICE_OK)
        return e;
    e = sluicei_conn_open_url(out, &u, o->connect_timeout_ms, CMD_TIMEOUT_MS, err, errlen);
    if (e == SLUICE_OK)
        sluicei_router_bind(r, q, *out);
    sluicei_url_free(&u);
    return e;
}

/* FNV-1a 64 of s: the home partition of a producer id. */
static uint64_t hash_str(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Makes p the group of the nparts partitions of its queue: one child per
 * partition, connected. r is the router (NULL: every partition is on the
 * server of o->redis_url). */
sluice_err group_open(sluice_producer *p, const sluice_producer_opts *o,
                      sluicei_router *r, int nparts, char *err, size_t errlen)
{
    p->part = calloc((size_t)nparts, sizeof *p->part);
    if (!p->part) {
        snprintf(err, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    p->home = (int)(hash_str(p->id) % (uint64_t)nparts);
    p->spilled_from = -1;
    p->cur = p->home;
    p->rr = (p->home + 1) % nparts;
    for (int k = 0; k < nparts; k++) {
        char name[QUEUE_NAME_MAX];
        sluicei_partition_name(name, p->queue, k);
        sluice_err e = producer_new(&p->part[k], o, name, p->id);
        if (e != SLUICE_OK) {
            snprintf(err, errlen, "out of memory");
            return e;
        }
        p->nparts = k + 1;   /* so that close() frees it */
        sluice_producer *c = p->part[k];
        c->group = p;
        e = r ? group_routed_conn(r, name, o, &c->conn, err, errlen)
              : sluicei_conn_open(&c->conn, o->redis_url, o->connect_timeout_ms, CMD_TIMEOUT_MS,
                                  err, errlen);
        if (e != SLUICE_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, errlen, "partition '%s': %.300s", name, why);
            return e;
        }
        int exists = 0;
        e = producer_queue_exists(c, &exists, err, errlen);
        if (e == SLUICE_OK && !exists) {
            snprintf(err, errlen, "queue '%s' has no partition '%s' (delete it and create it "
                     "again)", p->queue, name);
            e = SLUICE_ERR_NOQUEUE;
        }
        if (e != SLUICE_OK)
            return e;
        c->opened = 1;
    }
    return SLUICE_OK;
}

/* Whether idle child c has a connection: one that was lost (a node that
 * died or moved, a redirect) gets one quick attempt to connect again, at
 * most once a beat and without waiting, so that the group's probes and
 * heartbeats neither stall on a dead node nor lose a partition for good
 * (the child regains it with patience when it works again). */
int group_idle_connected(sluice_producer *c)
{
    if (c->conn->ctx)
        return 1;
    int64_t now = sluicei_now_ms();
    if (c->conn_tried_ms != 0 && now - c->conn_tried_ms < BEAT_MS)
        return 0;
    c->conn_tried_ms = now;
    if (sluicei_conn_reconnect(c->conn, now, NULL) != SLUICE_OK)
        return 0;
    c->reload_scripts = 0;   /* the reconnect loaded them */
    c->st.reconnects = c->conn->reconnects;
    return 1;
}

/* Beats, when due, every child of group g that worked (claimed or pushed)
 * and is idle (nothing in its ring), except skip: so that sluice-ctl info
 * of each partition this producer uses sees it alive. */
void group_beat(sluice_producer *g, const sluice_producer *skip)
{
    int64_t now = sluicei_now_ms();
    if (now < g->beat_due_ms)
        return;
    int64_t next = now + BEAT_MS;
    for (int k = 0; k < g->nparts; k++) {
        sluice_producer *c = g->part[k];
        if (!c->active || c == skip || c->used > 0)
            continue;
        if (c->beat_ms == 0 || now - c->beat_ms >= BEAT_MS) {
            if (group_idle_connected(c))
                lease_beat(c, 0, 0);
            else
                c->beat_ms = now;   /* try again in a beat */
        }
        if (c->beat_ms + BEAT_MS < next)
            next = c->beat_ms + BEAT_MS;
    }
    g->beat_due_ms = next;
}

/* Reads one reply of a probe; *r NULL when the connection was lost (it
 * is dropped then) or the reply is an error (a retryable one drops the
 * connection too, so that the child follows its partition when it works
 * again). */
void group_probe_reply(sluice_producer *c, redisReply **r)
{
    sluice_err e = sluicei_conn_read_reply(c->conn, r);
    if (e == SLUICE_OK)
        return;
    if (*r && pipe_redirect_error(c, (*r)->str) && c->conn->ctx) {
        /* The other replies still owed go with the connection. */
        sluicei_conn_drop(c->conn, NULL);
    }
    if (*r)
        freeReplyObject(*r);
    *r = NULL;
}

/* Whether a partition of group g other than from's has room and tasks
 * waiting: room for one more batch of `frame` bytes within 3/4 of both
 * budgets (sluicei_room_ahead()), which is what the push script admits for an
 * epoch ahead of the trainers. Anything less would send the producer to a partition that
 * refuses it too, and back (the task it handed back is still first in
 * line where it was). One round trip, to every such partition at once;
 * idle children only (their connections carry nothing else). */
int group_spill_target(sluice_producer *g, const sluice_producer *from, size_t frame)
{
    int found = 0;
    for (int k = 0; k < g->nparts; k++) {
        sluice_producer *c = g->part[k];
        c->probe = 0;
        if (c == from || c->used > 0 || !group_idle_connected(c))
            continue;
        char dlv[SLUICE_MAX_KEY], bytes[SLUICE_MAX_KEY], jrun[SLUICE_MAX_KEY];
        sluicei_key(dlv, c->queue, "dlv");
        sluicei_key(bytes, c->queue, "bytes");
        sluicei_key(jrun, c->queue, "jrun");
        const char *a_meta[4] = {"HMGET", c->meta_key, "max_batches", "max_bytes"};
        const char *a_dlv[2] = {"HLEN", dlv}, *a_bytes[2] = {"GET", bytes};
        const char *a_tasks[3] = {"HGET", jrun, "twaiting"};
        const char *a_pin[3] = {"HEXISTS", dlv, SLUICEI_DLV_PIN};
        if (sluicei_conn_append_argv(c->conn, 4, a_meta, NULL) == SLUICE_OK &&
            sluicei_conn_append_argv(c->conn, 2, a_dlv, NULL) == SLUICE_OK &&
            sluicei_conn_append_argv(c->conn, 2, a_bytes, NULL) == SLUICE_OK &&
            sluicei_conn_append_argv(c->conn, 3, a_tasks, NULL) == SLUICE_OK &&
            sluicei_conn_append_argv(c->conn, 3, a_pin, NULL) == SLUICE_OK &&
            sluicei_conn_flush(c->conn) == SLUICE_OK)
            c->probe = 1;
    }
    for (int k = 0; k < g->nparts; k++) {
        sluice_producer *c = g->part[k];
        if (!c->probe)
            continue;
        c->probe = 0;
        redisReply *r[5] = {NULL, NULL, NULL, NULL, NULL};
        for (int i = 0; i < 5 && c->conn->ctx; i++)
            group_probe_reply(c, &r[i]);
        if (r[0] && r[0]->type == REDIS_REPLY_ARRAY && r[0]->elements == 2) {
            int64_t maxn = producer_reply_int(r[0]->element[0]),
                    maxb = producer_reply_int(r[0]->element[1]);
            int64_t pin = producer_reply_int(r[4]),
                    held = producer_reply_int(r[1]) - (pin > 0 ? pin : 0),
                    used = producer_reply_int(r[2]), waiting = producer_reply_int(r[3]);
            if (maxn > 0 && maxb > 0 && pin >= 0 && held >= 0 && used >= 0 && waiting > 0 &&
                sluicei_room_ahead(held, used, (int64_t)frame, maxn, maxb))
                found = 1;
        }
        for (int i = 0; i < 5; i++)
            if (r[i])
                freeReplyObject(r[i]);
    }
    return found;
}

/* Settles the child pushing so far and makes partition `to` the current
 * one; to < 0: the next in turn. */
sluice_err group_next_child(sluice_producer *g, int to, sluice_producer **out)
{
    sluice_producer *c = g->part[g->cur];
    sluice_err e = pipe_settle(c, 0);
    if (e != SLUICE_OK)
        return producer_fwd(g, c, e);
    if (to < 0) {
        g->cur = g->rr;
        g->rr = (g->rr + 1) % g->nparts;
    } else {
        g->cur = to;
    }
    *out = g->part[g->cur];
    return SLUICE_OK;
}
