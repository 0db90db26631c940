/* Housekeeping: the task lease, the heartbeat, the replicas a WAIT asks
 * for (ROLE), and plain script calls that survive a lost connection.
 *
 * Housekeeping (the task lease and the heartbeat) runs only when no reply
 * is owed, so that a plain command cannot take a push's reply: when one is
 * due, a push first settles the pipeline (once a second at most, so the
 * pipelining is barely touched). It also runs inside every wait for room
 * and for a task, and in sluice_producer_flush(), which a caller doing long
 * work between pushes can call to keep its lease. */
#include "gauges.h"
#include "producer_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs script id with nothing in flight, regaining a lost connection (and
 * running the script again) as pushes do, and following the queue to
 * another node after a retryable error reply (the script did not run:
 * docs/PROTOCOL.md, "Redis Cluster"). Same contract as
 * sluicei_script_run(); *resent tells whether it was sent more than once
 * after a lost connection (the first call may have run). */
sluice_err lease_run_script(sluice_producer *p, sluicei_script_id id, int argc,
                            const char **argv, redisReply **out, int *resent)
{
    if (resent)
        *resent = 0;
    for (;;) {
        sluice_err e = sluicei_script_run(p->conn, id, p->queue, argc, argv, NULL, out);
        if (*out && (*out)->type == REDIS_REPLY_ERROR && pipe_redirect_error(p, (*out)->str)) {
            char msg[sizeof p->redirect_msg];
            snprintf(msg, sizeof msg, "%s", (*out)->str);
            freeReplyObject(*out);
            *out = NULL;
            if ((e = pipe_redirect_pause(p, sluicei_script_name(id), msg)) != SLUICE_OK ||
                (e = pipe_recover(p)) != SLUICE_OK) {
                snprintf(p->conn->errstr, sizeof p->conn->errstr, "%s", p->errstr);
                return e;
            }
            continue;
        }
        if (e != SLUICE_ERR_IO) {
            if (*out)
                pipe_redirect_over(p);
            return e;
        }
        if ((e = pipe_recover(p)) != SLUICE_OK)
            return e;
        if (resent)
            *resent = 1;
    }
}

/* WAIT for the url's replicas after a write that was run as a plain
 * command (task_done): its outcome does not matter (a timeout is no
 * error), only that the write had the chance to reach a replica. */
void lease_wait_replicas(sluice_producer *p)
{
    int n = producer_wait_n(p);
    if (!p->conn->ctx || n <= 0)
        return;
    redisReply *r = NULL;
    sluicei_conn_command(p->conn, &r, "WAIT %d %d", n, SLUICEI_WAIT_MS);
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer < n)
        p->role_due = 1;
    if (r)
        freeReplyObject(r);
    lease_check_role(p);   /* nothing is owed: ask at once */
}

/* ROLE of the node: ["master", offset, [[ip, port, offset], ...]] lists
 * the replicas connected. Asked after a WAIT came back short, and then
 * every second until as many replicas as the url asks for are back. Any
 * other answer (a replica, ROLE refused by an ACL) leaves WAIT as it is:
 * the writes themselves will tell. */
void lease_check_role(sluice_producer *p)
{
    int64_t now = sluicei_now_ms();
    int want = p->conn->url.wait_replicas;
    if (!p->role_due && !(p->wait_have >= 0 && p->wait_have < want && now >= p->role_next_ms))
        return;
    p->role_due = 0;
    if (!p->conn->ctx || want <= 0)
        return;
    p->role_next_ms = now + 1000;
    redisReply *r = NULL;
    if (sluicei_conn_command(p->conn, &r, "ROLE") == SLUICE_OK && r->type == REDIS_REPLY_ARRAY &&
        r->elements >= 3 && r->element[0]->type == REDIS_REPLY_STRING &&
        strcmp(r->element[0]->str, "master") == 0 && r->element[2]->type == REDIS_REPLY_ARRAY)
        p->wait_have = (int)r->element[2]->elements;
    if (r)
        freeReplyObject(r);
}

static int renew_due(const sluice_producer *p, int64_t now)
{
    return p->task_held && !p->lease_lost && now - p->renewed_ms >= p->lease_ms / 3;
}

int lease_housekeeping_due(const sluice_producer *p)
{
    int64_t now = sluicei_now_ms();
    return renew_due(p, now) || p->beat_ms == 0 || now - p->beat_ms >= BEAT_MS || p->role_due;
}

/* Publishes this producer's counters (the beat script: liveness in the
 * producers hash, counters in pstats:<id>). At most six counters fit the
 * script runner's argument limit. Without may_reconnect a lost connection
 * is not regained (at close). leaving: the last beat, at close: the
 * producer then leaves the registry, its counters folded into the queue's
 * pstats_gone. */
sluice_err lease_beat(sluice_producer *p, int may_reconnect, int leaving)
{
    enum { ARGC = 5 + 2 * SLUICEI_PSTAT_COUNT };
    char v[SLUICEI_PSTAT_COUNT][24];
    const sluice_producer_stats *st = &p->st;
    uint64_t vals[SLUICEI_PSTAT_COUNT] = {
        [SLUICEI_PSTAT_BATCHES] = st->batches,       [SLUICEI_PSTAT_BYTES] = st->bytes,
        [SLUICEI_PSTAT_BLOCKED_US] = st->blocked_us, [SLUICEI_PSTAT_DUPLICATES] = st->duplicates,
        [SLUICEI_PSTAT_TASKS_DONE] = st->tasks_done, [SLUICEI_PSTAT_TASKS_FAILED] = st->tasks_failed};
    /* The field names are gauges.c's, which reads them back. */
    const char *argv[ARGC] = {"producer", p->id, p->tok, leaving ? "left" : "", ""};
    for (int i = 0; i < SLUICEI_PSTAT_COUNT; i++) {
        snprintf(v[i], sizeof v[i], "%" PRIu64, vals[i]);
        argv[5 + 2 * i] = sluicei_pstats_field(i);
        argv[6 + 2 * i] = v[i];
    }
    redisReply *r = NULL;
    sluice_err e = may_reconnect ? lease_run_script(p, SLUICEI_SCRIPT_BEAT, ARGC, argv, &r, NULL)
                                 : sluicei_script_run(p->conn, SLUICEI_SCRIPT_BEAT, p->queue, ARGC,
                                                      argv, NULL, &r);
    if (r && r->type == REDIS_REPLY_ERROR && pipe_redirect_error(p, r->str) && p->conn->ctx) {
        /* The partition moved: the next connect finds it (group_idle_connected()). */
        sluicei_conn_drop(p->conn, NULL);
    }
    if (r)
        freeReplyObject(r);
    p->beat_ms = sluicei_now_ms();
    return e;
}

/* Extends the lease of the task held; sets lease_lost when a reaper took
 * it meanwhile, and earlier when a task of an earlier epoch waits. */
sluice_err lease_renew(sluice_producer *p)
{
    char lease[16];
    snprintf(lease, sizeof lease, "%d", p->lease_ms);
    const char *argv[3] = {p->id, p->task_key, lease};
    redisReply *r = NULL;
    int64_t t0 = sluicei_now_ms();
    sluice_err e = lease_run_script(p, SLUICEI_SCRIPT_TASK_RENEW, 3, argv, &r, NULL);
    if (e == SLUICE_OK) {
        p->renewed_ms = t0;
        if (r->type == REDIS_REPLY_INTEGER && r->integer == 0)
            p->lease_lost = 1;
        p->earlier = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                     r->element[1]->type == REDIS_REPLY_INTEGER && r->element[1]->integer == 1;
    }
    if (r)
        freeReplyObject(r);
    return e;
}

/* Renews the lease and beats when due. Nothing may be in flight. Only a
 * connection that cannot be regained is an error: a refused renewal or
 * beat is tried again at the next occasion (the lease has two more
 * renewals' worth of slack). */
sluice_err lease_housekeep(sluice_producer *p)
{
    sluice_err e = SLUICE_OK;
    lease_check_role(p);
    if (renew_due(p, sluicei_now_ms()))
        e = lease_renew(p);
    if (e != SLUICE_ERR_IO && (p->beat_ms == 0 || sluicei_now_ms() - p->beat_ms >= BEAT_MS))
        e = lease_beat(p, 1, 0);
    return e == SLUICE_ERR_IO ? e : SLUICE_OK;
}

sluice_err lease_lost_error(sluice_producer *p)
{
    producer_seterr(p, "lease lost: task %s was reaped (this producer did not renew its lease in "
                    "time) and is redone by another producer", p->task_key);
    return SLUICE_ERR_IO;
}
