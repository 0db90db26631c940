/* Tasks of a job (producer.h): claim (on a plain or a partitioned queue),
 * done, fail, release (hand back), and the check of a task's pushes after
 * Redis restarted. A task's definition is decoded by common/src/taskdef.c. */
#include "num.h"
#include "producer_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest error kept with a failed task (the tail of a command's stderr). */
#define TASK_ERROR_MAX 4096

/* A claimed task and its decoded definition, which its strings point into. */
typedef struct task_box {
    sluice_task t;
    sluicei_taskdef *def;              /* owned */
} task_box;

/* A script reply that is a number, whether Redis sent it as an integer
 * (HINCRBY) or as a string (HGET). */
static int reply_u64(const redisReply *r, uint64_t max, uint64_t *v)
{
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0 && (uint64_t)r->integer <= max) {
        *v = (uint64_t)r->integer;
        return 0;
    }
    if (r->type == REDIS_REPLY_STRING)
        return sluicei_parse_u64(r->str, r->len, max, v);
    return -1;
}

/* Forgets the task held: frees it, and numbers later pushes as ad-hoc
 * batches again (a random task of this producer, epoch 0). */
static void end_task(sluice_producer *p)
{
    task_box *b = (task_box *)p->task_held;   /* t is the box's first member */
    if (b)
        free(b->def);
    free(b);
    p->task_held = NULL;
    p->task_key[0] = '\0';
    p->lease_lost = 0;
    p->resume = 0;
    p->spilled = 0;
    p->spill_resume = 0;
    p->lost_from = UINT64_MAX;
    p->epoch = 0;
    p->task = ADHOC_TASK_MIN + sluicei_random64() % (ADHOC_TASK_END - ADHOC_TASK_MIN);
    p->next_seq = 0;
    p->beat_ms = 0;                   /* publish the new counters soon */
}

/* Runs task_fail for the task held: handback 1 returns it untried, with
 * its resume point when resume > 0 (its batches below that seq are
 * stored); otherwise the attempt counts. Does not end the task. */
static sluice_err fail_script(sluice_producer *p, const char *error, int handback,
                              uint64_t resume)
{
    char msg[TASK_ERROR_MAX + 1], rs[24];
    snprintf(msg, sizeof msg, "%s", error && *error ? error : "failed (no reason given)");
    snprintf(rs, sizeof rs, "%" PRIu64, resume);
    const char *argv[5] = {p->id, p->task_key, msg, handback ? "1" : "0", rs};
    redisReply *r = NULL;
    sluice_err e = lease_run_script(p, SLUICEI_SCRIPT_TASK_FAIL, handback && resume > 0 ? 5 : 4,
                                    argv, &r, NULL);
    if (e != SLUICE_OK)
        producer_seterr(p, "task_fail %s: %s", p->task_key,
                        r && r->type == REDIS_REPLY_ERROR ? r->str : p->conn->errstr);
    else if (r->type == REDIS_REPLY_INTEGER && r->integer == 0)
        e = lease_lost_error(p);
    if (r)
        freeReplyObject(r);
    return e;
}

/* The job's record order of a 'task' reply (elements 7 to 9): the
 * shuffle window, drop_remainder and the seed ('' when the job has none).
 * Absent elements are 0. Returns 0, or -1 when one is malformed. */
static int order_fields(const redisReply *r, uint64_t *shuffle, uint64_t *drop, uint64_t *seed)
{
    if (r->elements >= 8 && r->element[7]->type != REDIS_REPLY_NIL &&
        reply_u64(r->element[7], SLUICE_SHUFFLE_BUFFER_MAX, shuffle))
        return -1;
    if (r->elements >= 9 && r->element[8]->type != REDIS_REPLY_NIL &&
        reply_u64(r->element[8], 1, drop))
        return -1;
    if (r->elements >= 10 && r->element[9]->type != REDIS_REPLY_NIL &&
        !(r->element[9]->type == REDIS_REPLY_STRING && r->element[9]->len == 0) &&
        reply_u64(r->element[9], UINT64_MAX, seed))
        return -1;
    return 0;
}

/* Makes the task of a 'task' reply r the one held; on SLUICE_OK *out is
 * it. A task whose definition is unusable is failed at once (the attempt
 * counts) and SLUICE_ERR_FORMAT returned, so that the caller claims the
 * next one. */
static sluice_err take_task(sluice_producer *p, const redisReply *r, int lease_ms,
                            int64_t sent_ms, sluice_task **out)
{
    uint64_t epoch, shard, attempt, batch_size, epochs, resume = 0;
    uint64_t shuffle = 0, drop = 0, seed = 0;
    const char *key, *colon;
    if (r->elements < 6 || r->element[1]->type != REDIS_REPLY_STRING ||
        (key = r->element[1]->str, colon = strchr(key, ':')) == NULL ||
        sluicei_parse_u64(key, (size_t)(colon - key), UINT32_MAX, &epoch) ||
        sluicei_parse_u64(colon + 1, strlen(colon + 1), UINT64_MAX, &shard) ||
        strlen(key) >= sizeof p->task_key) {
        producer_seterr(p, "task_claim on queue '%s': malformed 'task' reply", p->queue);
        return SLUICE_ERR_PROTOCOL;
    }
    /* Held from here on, so that a bad one can be failed in its name. */
    snprintf(p->task_key, sizeof p->task_key, "%s", key);
    p->lease_ms = lease_ms;
    p->renewed_ms = sent_ms;   /* the lease runs from when Redis had the claim, later */
    p->lease_lost = 0;
    p->earlier = 0;

    char why[256] = "";
    task_box *b = NULL;
    sluicei_taskdef *d = NULL;
    const redisReply *def = r->element[2];
    if (def->type != REDIS_REPLY_STRING)
        snprintf(why, sizeof why, "the job has no definition for shard %" PRIu64, shard);
    else if (reply_u64(r->element[3], INT32_MAX, &attempt) ||
             reply_u64(r->element[4], UINT32_MAX, &batch_size) || batch_size == 0 ||
             reply_u64(r->element[5], UINT32_MAX, &epochs))
        snprintf(why, sizeof why, "the job's batch_size or epochs is malformed");
    else if (r->elements >= 7 && r->element[6]->type != REDIS_REPLY_NIL &&
             reply_u64(r->element[6], (uint64_t)UINT32_MAX + 1, &resume))
        snprintf(why, sizeof why, "the task's resume point is malformed");
    else if (order_fields(r, &shuffle, &drop, &seed) != 0)
        snprintf(why, sizeof why, "the job's shuffle_buffer (at most %d), drop_remainder "
                 "(0 or 1) or seed is malformed", SLUICE_SHUFFLE_BUFFER_MAX);
    else if (sluicei_taskdef_decode(def->str, def->len, &d, why, sizeof why) == SLUICE_OK &&
             !(b = calloc(1, sizeof *b)))
        snprintf(why, sizeof why, "out of memory");
    if (!b) {
        free(d);
        char msg[400];
        snprintf(msg, sizeof msg, "task %s cannot be produced: %s", key, why);
        sluice_err e = fail_script(p, msg, 0, 0);   /* needs only task_key */
        p->task_key[0] = '\0';
        producer_seterr(p, "%s", msg);
        return e == SLUICE_OK ? SLUICE_ERR_FORMAT : e;
    }
    b->def = d;
    b->t.reader = d->reader;
    b->t.paths = d->paths;
    b->t.npaths = d->npaths;
    b->t.start = d->start;
    b->t.end = d->end;
    b->t.epoch = (uint32_t)epoch;
    b->t.shard = shard;
    b->t.attempt = (int)attempt;
    b->t.batch_size = (uint32_t)batch_size;
    b->t.epochs = (uint32_t)epochs;
    b->t.shuffle_buffer = (uint32_t)shuffle;
    b->t.drop_remainder = (int)drop;
    b->t.shuffle_seed = seed;
    p->task_held = &b->t;
    p->epoch = (uint32_t)epoch;
    p->task = shard;
    p->next_seq = 0;
    p->resume = resume;
    p->claim_reconnects = p->conn->reconnects;
    p->spilled = 0;
    p->spill_why = NULL;   /* end_task() keeps it, for the group */
    p->lost_from = UINT64_MAX;
    *out = &b->t;
    return SLUICE_OK;
}

/* Waits up to ms (at least 10) for a token in task_wake: another producer
 * gave a task back, a job was submitted, or an epoch ended. */
static sluice_err wait_task_wake(sluice_producer *p, int64_t ms)
{
    char secs[24];
    producer_blpop_secs(secs, ms);
    redisReply *r = NULL;
    sluice_err e = sluicei_conn_command(p->conn, &r, "BLPOP %s %s", p->task_wake_key, secs);
    if (e == SLUICE_ERR_REDIS && r && pipe_redirect_error(p, r->str) && p->conn->ctx) {
        /* The claim that follows finds the queue's node again. */
        sluicei_conn_drop(p->conn, NULL);
    }
    if (r)
        freeReplyObject(r);
    if (e == SLUICE_ERR_IO)
        return pipe_recover(p);
    return SLUICE_OK;   /* an error reply (LOADING...) shows again at the claim */
}

/* One task_claim on p's queue. room_only: a partition at its budget
 * answers 'full' instead of giving a task. On SLUICE_OK kind is the
 * answer ("task": *out is the task held now; "wait", "full", "done",
 * "nojob"). SLUICE_ERR_FORMAT: the task claimed was unusable and failed
 * (errstr); claim again. */
static sluice_err claim_once(sluice_producer *p, int room_only, int lease_ms, sluice_task **out,
                             char *kind, size_t kindlen)
{
    char lease[16];
    snprintf(lease, sizeof lease, "%d", lease_ms);
    const char *argv[3] = {p->id, lease, "1"};
    redisReply *r = NULL;
    kind[0] = '\0';
    int64_t t0 = sluicei_now_ms();
    sluice_err e =
        lease_run_script(p, SLUICEI_SCRIPT_TASK_CLAIM, room_only ? 3 : 2, argv, &r, NULL);
    if (e != SLUICE_OK) {
        producer_seterr(p, "task_claim on queue '%s': %s", p->queue,
                        r && r->type == REDIS_REPLY_ERROR ? r->str : p->conn->errstr);
        if (r)
            freeReplyObject(r);
        return e;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
        r->element[0]->type == REDIS_REPLY_STRING)
        snprintf(kind, kindlen, "%s", r->element[0]->str);
    if (strcmp(kind, "task") == 0) {
        e = take_task(p, r, lease_ms, t0, out);
        freeReplyObject(r);
        return e;
    }
    if (strcmp(kind, "done") == 0 && r->elements >= 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
        p->job_failed = (uint64_t)r->element[1]->integer;
    freeReplyObject(r);
    if (strcmp(kind, "done") != 0 && strcmp(kind, "nojob") != 0 && strcmp(kind, "wait") != 0 &&
        strcmp(kind, "full") != 0) {
        producer_seterr(p, "task_claim on queue '%s': unexpected reply '%.32s'", p->queue, kind);
        return SLUICE_ERR_PROTOCOL;
    }
    return SLUICE_OK;
}

static sluice_err job_finished(sluice_producer *p)
{
    uint64_t failed = p->job_failed;
    for (int k = 0; k < p->nparts; k++)
        failed += p->part[k]->job_failed;
    if (failed)
        producer_seterr(p, "the job of queue '%s' is finished with %" PRIu64 " failed task%s "
                        "(sluice-ctl jobs %s)", p->queue, failed, failed == 1 ? "" : "s", p->queue);
    else
        producer_seterr(p, "the job of queue '%s' is finished", p->queue);
    return SLUICE_EOF;
}

static sluice_err no_job(sluice_producer *p)
{
    producer_seterr(p, "queue '%s' has no job (submit one: sluice-ctl submit %s --manifest ...)",
                    p->queue, p->queue);
    return SLUICE_EOF;
}

/* Checks the arguments of a claim; on SLUICE_OK *lease_ms is the lease. */
static sluice_err claim_args(sluice_producer *p, int *lease_ms)
{
    if (p->task_held) {
        producer_seterr(p, "task_claim: task %s is still held (task_done/_fail/_release first)",
                        p->task_key);
        return SLUICE_ERR_INVALID;
    }
    if (*lease_ms < 0) {
        producer_seterr(p, "task_claim: lease_ms %d is negative", *lease_ms);
        return SLUICE_ERR_INVALID;
    }
    if (*lease_ms == 0)
        *lease_ms = SLUICE_LEASE_MS_DEFAULT;
    return SLUICE_OK;
}

/* Tells the log callback (if any) that the claim has waited since `since`
 * (monotonic ms) for a task that other producers hold. */
static void note_task_wait(sluice_producer *p, int64_t since, int64_t *noted)
{
    int64_t now = sluicei_now_ms();
    if (!p->log || now - since < WAIT_NOTE_MS ||
        now - *noted < (*noted ? WAIT_NOTE_EVERY_MS : WAIT_NOTE_MS))
        return;
    *noted = now;
    char msg[512];
    snprintf(msg, sizeof msg, "waited %.0f s for a task of queue '%s': other producers hold the "
             "ones left (a task comes back when its producer hands it back or its lease "
             "runs out)", (double)(now - since) / 1000.0, p->queue);
    p->log(p->log_arg, msg);
}

/* How long the next wait for a task may last, from the caller's deadline
 * (< 0: none); SLUICE_ERR_TIMEOUT when it has passed. */
static sluice_err claim_wait_ms(sluice_producer *p, int64_t deadline, int timeout_ms,
                                int64_t *wait)
{
    if (deadline < 0)
        return SLUICE_OK;
    int64_t left = deadline - sluicei_now_ms();
    if (left <= 0) {
        producer_seterr(p, "no task of queue '%s' free within %d ms (others hold the rest)",
                        p->queue, timeout_ms);
        return SLUICE_ERR_TIMEOUT;
    }
    if (left < *wait)
        *wait = left;
    return SLUICE_OK;
}

/* A group waits up to ms for a token in the task_wake list of any of its
 * partitions that may still give a task: one BLPOP on each, all at once
 * (each child is idle). A partition whose connection is lost is not
 * waited on: the next claim there regains it. */
static void group_wait_task(sluice_producer *g, int64_t ms)
{
    char secs[24];
    producer_blpop_secs(secs, ms);
    int waiting = 0;
    for (int k = 0; k < g->nparts; k++) {
        sluice_producer *c = g->part[k];
        c->probe = 0;
        if (strcmp(c->claim_kind, "wait") != 0 && strcmp(c->claim_kind, "full") != 0)
            continue;
        if (!group_idle_connected(c))
            continue;
        const char *argv[3] = {"BLPOP", c->task_wake_key, secs};
        if (sluicei_conn_append_argv(c->conn, 3, argv, NULL) == SLUICE_OK &&
            sluicei_conn_flush(c->conn) == SLUICE_OK)
            c->probe = waiting = 1;
    }
    if (!waiting)
        producer_sleep_ms((int)ms);   /* no busy loop while every such node is out of reach */
    for (int k = 0; k < g->nparts; k++) {
        sluice_producer *c = g->part[k];
        if (!c->probe)
            continue;
        c->probe = 0;
        redisReply *r = NULL;
        group_probe_reply(c, &r);
        if (r)
            freeReplyObject(r);
    }
}

/* sluice_producer_task_claim() on a partitioned queue: see producer.h. */
static sluice_err group_claim(sluice_producer *g, sluice_task **out, int timeout_ms,
                              int lease_ms)
{
    int n = g->nparts;
    int64_t deadline = timeout_ms < 0 ? -1 : sluicei_now_ms() + timeout_ms;
    int64_t since = sluicei_now_ms(), noted = 0;
    sluice_err e = pipe_settle(g->part[g->cur], 0);   /* ad-hoc pushes before */
    if (e != SLUICE_OK)
        return producer_fwd(g, g->part[g->cur], e);
    for (;;) {
        if (producer_stopped(g)) {
            producer_seterr(g, "stopped while waiting for a task of queue '%s'", g->queue);
            return SLUICE_ERR_IO;
        }
        /* First the partitions with room, from home on; then any. */
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < n; i++) {
                int k = (g->home + i) % n;
                sluice_producer *c = g->part[k];
                char kind[16];
                if (pass == 1 && strcmp(c->claim_kind, "full") != 0)
                    continue;
                if (pass == 0 && k == g->spilled_from) {
                    /* The task just handed back is first in line there. */
                    snprintf(c->claim_kind, sizeof c->claim_kind, "full");
                    continue;
                }
                do
                    e = claim_once(c, pass == 0, lease_ms, out, kind, sizeof kind);
                while (e == SLUICE_ERR_FORMAT);   /* that one was failed; claim the next */
                if (e != SLUICE_OK)
                    return producer_fwd(g, c, e);
                if (strcmp(kind, "task") == 0) {
                    g->spilled_from = -1;
                    g->cur = k;
                    c->active = 1;
                    g->task_held = *out;
                    snprintf(g->task_key, sizeof g->task_key, "%s", c->task_key);
                    return SLUICE_OK;
                }
                snprintf(c->claim_kind, sizeof c->claim_kind, "%s", kind);
            }
        }
        int done = 0, nojob = 0;
        for (int k = 0; k < n; k++) {
            done += strcmp(g->part[k]->claim_kind, "done") == 0;
            nojob += strcmp(g->part[k]->claim_kind, "nojob") == 0;
        }
        if (nojob == n)
            return no_job(g);
        if (done + nojob == n)
            return job_finished(g);
        group_beat(g, NULL);
        note_task_wait(g, since, &noted);
        int64_t wait = GROUP_TASK_WAIT_MS;
        if ((e = claim_wait_ms(g, deadline, timeout_ms, &wait)) != SLUICE_OK)
            return e;
        group_wait_task(g, wait);
    }
}

sluice_err sluice_producer_task_claim(sluice_producer *p, sluice_task **out, int timeout_ms,
                                      int lease_ms)
{
    *out = NULL;
    sluice_err e = claim_args(p, &lease_ms);
    if (e != SLUICE_OK)
        return e;
    if (p->nparts > 0)
        return group_claim(p, out, timeout_ms, lease_ms);
    e = pipe_settle(p, 0);
    if (e != SLUICE_OK)
        return e;
    int64_t deadline = timeout_ms < 0 ? -1 : sluicei_now_ms() + timeout_ms;
    int64_t since = sluicei_now_ms(), noted = 0;
    for (;;) {
        if (producer_stopped(p)) {
            producer_seterr(p, "stopped while waiting for a task of queue '%s'", p->queue);
            return SLUICE_ERR_IO;
        }
        char kind[16];
        e = claim_once(p, 0, lease_ms, out, kind, sizeof kind);
        if (e == SLUICE_ERR_FORMAT)
            continue;   /* that one was failed; claim the next */
        if (e != SLUICE_OK || strcmp(kind, "task") == 0)
            return e;
        if (strcmp(kind, "done") == 0)
            return job_finished(p);
        if (strcmp(kind, "nojob") == 0)
            return no_job(p);
        if ((e = lease_housekeep(p)) != SLUICE_OK)
            return e;
        note_task_wait(p, since, &noted);
        int64_t wait = TASK_WAIT_S * 1000;
        if ((e = claim_wait_ms(p, deadline, timeout_ms, &wait)) != SLUICE_OK ||
            (e = wait_task_wake(p, wait)) != SLUICE_OK)
            return e;
    }
}

/* Checks that t is the task p holds. */
static int holds(sluice_producer *p, const sluice_task *t, const char *what)
{
    if (t && t == p->task_held)
        return 1;
    producer_seterr(p, "%s: not the task this producer holds", what);
    return 0;
}

/* The resume point of the task held, for handing it back: the first of
 * its batches not known to be stored (where it was spilled; or, when every
 * push was answered (ok), the next batch; or the first batch given up
 * after an error, which is all that is known when not ok), at least the
 * point it was claimed with. 0: none known. */
static uint64_t resume_point(const sluice_producer *p, int ok)
{
    uint64_t r = p->spilled ? p->spill_resume : ok ? p->next_seq : 0;
    if (r > p->lost_from || (!ok && !p->spilled && p->lost_from != UINT64_MAX))
        r = p->lost_from;
    return r > p->resume ? r : p->resume;
}

/* Before task_done, when the connection was lost while the task was
 * held, or when task_done found that Redis restarted since the claim:
 * Redis may have come back without its last writes, among them pushes it
 * had answered. task_check looks for every batch of the task this
 * producer pushed, 1024 at a time (at least one call); at the first
 * missing one it hands the task back with that resume point
 * (SLUICE_ERR_FULL; errstr says so), and whoever claims it next pushes
 * from there. The last call, when Redis is still the server the first
 * call saw (its run_id), records the task as checked on it. */
static sluice_err check_task(sluice_producer *p)
{
    char rid[64] = "";
    uint64_t from = p->resume < p->next_seq ? p->resume : p->next_seq;
    for (;;) {
        uint64_t to = p->next_seq - from > 1024 ? from + 1024 : p->next_seq;
        int last = to == p->next_seq;
        char a[24], b[24];
        snprintf(a, sizeof a, "%" PRIu64, from);
        snprintf(b, sizeof b, "%" PRIu64, to);
        const char *argv[5] = {p->id, p->task_key, a, b, rid};
        redisReply *r = NULL;
        sluice_err e = lease_run_script(p, SLUICEI_SCRIPT_TASK_CHECK, last ? 5 : 4, argv, &r, NULL);
        if (e != SLUICE_OK) {
            producer_seterr(p, "task_check %s: %s", p->task_key,
                            r && r->type == REDIS_REPLY_ERROR ? r->str : p->conn->errstr);
        } else if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
            e = lease_lost_error(p);
        } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
                   r->element[0]->type != REDIS_REPLY_INTEGER) {
            producer_seterr(p, "task_check %s: unexpected reply", p->task_key);
            e = SLUICE_ERR_PROTOCOL;
        } else if (r->element[0]->integer == 0 && r->element[1]->type == REDIS_REPLY_INTEGER) {
            long long seq = r->element[1]->integer;
            producer_seterr(p,
                            "handed back (it resumes at batch %lld): Redis came back without its "
                            "last writes, and batch %lld of this task with them",
                            seq, seq);
            e = SLUICE_ERR_FULL;
        } else if (from == (p->resume < p->next_seq ? p->resume : p->next_seq) &&
                   r->element[1]->type == REDIS_REPLY_STRING) {
            snprintf(rid, sizeof rid, "%s", r->element[1]->str);
        }
        if (r)
            freeReplyObject(r);
        if (e != SLUICE_OK)
            return e;
        if (last)
            return SLUICE_OK;
        from = to;
    }
}

sluice_err sluice_producer_task_done(sluice_producer *p, sluice_task *t)
{
    if (!holds(p, t, "task_done"))
        return SLUICE_ERR_INVALID;
    if (p->nparts > 0) {
        sluice_producer *c = p->part[p->cur];
        p->task_held = NULL;
        sluice_err e = sluice_producer_task_done(c, t);
        if (e == SLUICE_ERR_FULL && c->spill_why == room_why_partition)
            p->spilled_from = p->cur;   /* handed back for lack of room */
        return producer_fwd(p, c, e);
    }
    sluice_err e = SLUICE_OK;
    if (!p->spilled) {
        /* Its last batches may find the partition full: spilling them is
         * as good as spilling a push (see "spilled" in group.c). */
        p->may_spill = 1;
        e = pipe_settle(p, 0);
        p->may_spill = 0;
    }
    if (p->spilled && !p->lease_lost) {
        /* Its last batches were not stored: not done; handed back. */
        char why[SLUICE_MAX_PRODUCER_ID + 64];
        snprintf(why, sizeof why, "handed back by producer %s", p->id);
        uint64_t resume = resume_point(p, 0);
        e = fail_script(p, why, 1, resume);
        if (e == SLUICE_OK) {
            producer_seterr(p, "handed back (it resumes at batch %" PRIu64 "): %s", resume,
                            p->spill_why);
            e = SLUICE_ERR_FULL;
        }
        end_task(p);
        return e;
    }
    if (e == SLUICE_OK && p->lease_lost)
        e = lease_lost_error(p);
    if (e == SLUICE_OK && p->conn->reconnects != p->claim_reconnects) {
        e = check_task(p);
        if (e == SLUICE_ERR_FULL || p->lease_lost) {
            end_task(p);   /* handed back (or no longer ours): errstr says so */
            return e;
        }
    }
    if (e != SLUICE_OK && p->stop && *p->stop && !p->lease_lost && p->conn->ctx) {
        /* Told to stop while its last batches waited (for room, say): no
         * failure of the task; handed back untried, with the resume point
         * of what is known to be stored. */
        char why[SLUICE_MAX_PRODUCER_ID + 64];
        snprintf(why, sizeof why, "handed back by producer %s (shutting down)", p->id);
        uint64_t resume = resume_point(p, 0);
        e = fail_script(p, why, 1, resume);
        if (e == SLUICE_OK) {
            producer_seterr(p, "handed back (shutting down; it resumes at batch %" PRIu64 ")",
                            resume);
            e = SLUICE_ERR_FULL;
        }
        end_task(p);
        return e;
    }
    if (e != SLUICE_OK) {
        /* Some batch is not stored: the task is not done. Fail the attempt
         * (keeping the push error as the task's error), unless it is no
         * longer ours or Redis is out of reach. */
        if (!p->lease_lost && p->conn->ctx) {
            char why[sizeof p->errstr];
            snprintf(why, sizeof why, "%s", p->errstr);
            if (fail_script(p, why, 0, 0) == SLUICE_OK)
                p->st.tasks_failed++;
            snprintf(p->errstr, sizeof p->errstr, "%s", why);
        }
        end_task(p);
        return e;
    }
    char nb[24], nd[24];
    snprintf(nb, sizeof nb, "%" PRIu64, p->next_seq);
    snprintf(nd, sizeof nd, "%" PRIu64, t->dropped_records);
    const char *argv[4] = {p->id, p->task_key, nb, nd};
    redisReply *r = NULL;
    int resent = 0;
    /* 2: Redis restarted since the claim (or the last check), perhaps
     * without pushes it had answered: check them, then again. Each round
     * takes a restart of Redis. */
    for (int round = 0;; round++) {
        e = lease_run_script(p, SLUICEI_SCRIPT_TASK_DONE, t->dropped_records ? 4 : 3, argv, &r,
                             &resent);
        if (e != SLUICE_OK || r->type != REDIS_REPLY_INTEGER || r->integer != 2)
            break;
        freeReplyObject(r);
        r = NULL;
        if (round == TASK_DONE_ROUNDS) {
            producer_seterr(p, "task_done %s: Redis restarted %d times while the task was checked",
                            p->task_key, round);
            end_task(p);
            return SLUICE_ERR_IO;
        }
        e = check_task(p);
        if (e != SLUICE_OK) {
            end_task(p);   /* handed back, no longer ours, or no Redis: errstr says so */
            return e;
        }
    }
    if (e != SLUICE_OK) {
        producer_seterr(p, "task_done %s: %s", p->task_key,
                        r && r->type == REDIS_REPLY_ERROR ? r->str : p->conn->errstr);
    } else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        p->st.tasks_done++;
        lease_wait_replicas(p);
    } else if (resent) {
        /* Sent again after a lost connection: 0 may mean that our first
         * call went through. Either way the task is done by someone. */
        p->st.tasks_done++;
        lease_wait_replicas(p);
    } else {
        e = lease_lost_error(p);
    }
    if (r)
        freeReplyObject(r);
    end_task(p);
    return e;
}

sluice_err sluice_producer_task_fail(sluice_producer *p, sluice_task *t, const char *error)
{
    if (!holds(p, t, "task_fail"))
        return SLUICE_ERR_INVALID;
    if (p->nparts > 0) {
        sluice_producer *c = p->part[p->cur];
        p->task_held = NULL;
        return producer_fwd(p, c, sluice_producer_task_fail(c, t, error));
    }
    /* What was pushed stays pushed (a retry drops those ids as duplicates);
     * a push refused for good does not stop the failure from being kept. */
    pipe_settle(p, 0);
    sluice_err e = p->lease_lost ? lease_lost_error(p) : fail_script(p, error, 0, 0);
    if (e == SLUICE_OK)
        p->st.tasks_failed++;
    end_task(p);
    return e;
}

sluice_err sluice_producer_task_release(sluice_producer *p, sluice_task *t)
{
    if (!holds(p, t, "task_release"))
        return SLUICE_ERR_INVALID;
    if (p->nparts > 0) {
        sluice_producer *c = p->part[p->cur];
        int spilled = c->spilled;
        p->task_held = NULL;
        if (spilled && c->spill_why == room_why_partition)
            p->spilled_from = p->cur;
        sluice_err e = sluice_producer_task_release(c, t);
        /* "handed back (it resumes at batch N): why", as for a plain queue. */
        if (e == SLUICE_OK && spilled)
            snprintf(p->errstr, sizeof p->errstr, "%s", c->errstr);
        return producer_fwd(p, c, e);
    }
    int ok = pipe_settle(p, 0) == SLUICE_OK;
    char why[SLUICE_MAX_PRODUCER_ID + 64];
    snprintf(why, sizeof why, "handed back by producer %s", p->id);
    uint64_t resume = resume_point(p, ok);
    sluice_err e = p->lease_lost ? lease_lost_error(p) : fail_script(p, why, 1, resume);
    if (e == SLUICE_OK && p->spilled)
        producer_seterr(p, "handed back (it resumes at batch %" PRIu64 "): %s", resume,
                        p->spill_why);
    end_task(p);
    return e;
}
