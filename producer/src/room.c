/* Backpressure: pushes refused for lack of room (or by a passing server
 * condition) wait and are sent again, or their task is spilled.
 *
 * A push answered "full" (or OOM, or a transient server error) is retried
 * after the others in flight were answered, after waiting for room: BLPOP
 * on the queue's room list, which the ack script feeds, with a 1 s
 * timeout. So a blocked producer wakes within milliseconds of an ack and
 * otherwise costs one round trip per second. The refused batches are then
 * sent again, grouped as pipeline.c says ("Groups"). */
#include "producer_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static const char why_earlier[] =
    "the queue is at its budget and a task of an earlier epoch waits for a producer";

const char room_why_partition[] =
    "its partition is at its budget while another partition has room and waiting tasks";

/* Whether p, whose pushes of the task it holds were refused for lack of
 * room, should stop pushing that task and hand it back (see "spilled" at
 * the top): when a task of an earlier epoch waits (task_renew said so;
 * the consumers wait for that epoch, and the budget left is kept for it:
 * docs/JOBS.md), or, in a partitioned queue, when another partition could
 * use the producer. Sets p->spill_why. */
static int spill_due(sluice_producer *p, const slot *s)
{
    if (!p->may_spill || !p->task_held || p->lease_lost)
        return 0;
    if (p->earlier)
        p->spill_why = why_earlier;
    else if (p->group && p->group->nparts > 1 && group_spill_target(p->group, p, s->frame.len))
        p->spill_why = room_why_partition;
    else
        return 0;
    return 1;
}

/* Gives the task held up for now (spill_due()). Nothing is in flight: the
 * ring holds stored batches and refused ones, oldest first; the first
 * refused one is the resume point. The ring is emptied; pushes now fail
 * with SLUICE_ERR_FULL until the task is handed back. */
static sluice_err spill(sluice_producer *p)
{
    uint64_t resume = p->next_seq;
    for (int i = 0; i < p->used; i++) {
        slot *s = producer_slot_at(p, i);
        if (s->state != SLOT_DONE) {
            resume = s->id.seq;
            break;
        }
    }
    if (resume > p->lost_from)
        resume = p->lost_from;   /* given up after an error: not stored either */
    p->head = p->used = p->nsent = p->nrefused = p->nopen = 0;
    p->open_bytes = p->used_bytes = 0;
    p->gid_read = p->gid_next;
    p->rstep = 0;
    p->qerr[0] = '\0';
    p->oom = 0;
    p->spilled = 1;
    p->spill_resume = resume;
    producer_seterr(p,
                    "task %s: %s: hand the task back (sluice_producer_task_release) and claim the "
                    "next; it resumes at batch %" PRIu64,
                    p->task_key, p->spill_why, resume);
    return SLUICE_ERR_FULL;
}

/* Tells the log callback (if any) that pushes have waited waited_ms for
 * room, how full the queue is and how many consumers are alive (seen
 * within the queue's lease, on the server's clock). Nothing is in flight. */
static void note_room(sluice_producer *p, int64_t waited_ms)
{
    if (!p->log || !p->conn->ctx)
        return;
    char dlv[SLUICE_MAX_KEY], bytes[SLUICE_MAX_KEY], cons[SLUICE_MAX_KEY];
    sluicei_key(dlv, p->queue, "dlv");
    sluicei_key(bytes, p->queue, "bytes");
    sluicei_key(cons, p->queue, "consumers");
    const char *a_meta[5] = {"HMGET", p->meta_key, "max_batches", "max_bytes", "lease_ms"};
    const char *a_dlv[2] = {"HLEN", dlv}, *a_bytes[2] = {"GET", bytes};
    const char *a_cons[2] = {"HVALS", cons}, *a_time[1] = {"TIME"};
    const char *a_pin[3] = {"HEXISTS", dlv, SLUICEI_DLV_PIN};
    redisReply *r[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    if (sluicei_conn_append_argv(p->conn, 5, a_meta, NULL) != SLUICE_OK ||
        sluicei_conn_append_argv(p->conn, 2, a_dlv, NULL) != SLUICE_OK ||
        sluicei_conn_append_argv(p->conn, 2, a_bytes, NULL) != SLUICE_OK ||
        sluicei_conn_append_argv(p->conn, 2, a_cons, NULL) != SLUICE_OK ||
        sluicei_conn_append_argv(p->conn, 1, a_time, NULL) != SLUICE_OK ||
        sluicei_conn_append_argv(p->conn, 3, a_pin, NULL) != SLUICE_OK)
        return;
    for (int i = 0; i < 6 && p->conn->ctx; i++)
        sluicei_conn_read_reply(p->conn, &r[i]);
    if (r[0] && r[0]->type == REDIS_REPLY_ARRAY && r[0]->elements == 3 && r[1] && r[2] && r[3] &&
        r[3]->type == REDIS_REPLY_ARRAY && r[4] && r[4]->type == REDIS_REPLY_ARRAY &&
        r[4]->elements == 2 && r[5]) {
        int64_t now = producer_reply_int(r[4]->element[0]) * 1000 +
                      producer_reply_int(r[4]->element[1]) / 1000;
        int64_t lease = producer_reply_int(r[0]->element[2]) > 0
                            ? producer_reply_int(r[0]->element[2])
                            : SLUICE_LEASE_MS_DEFAULT;
        int alive = 0;
        for (size_t i = 0; i < r[3]->elements; i++)
            alive += now - producer_reply_int(r[3]->element[i]) <= lease;
        char who[64];
        if (alive)
            snprintf(who, sizeof who, "%d consumer%s alive", alive, alive == 1 ? "" : "s");
        else
            snprintf(who, sizeof who, "no consumer is alive");
        char msg[512];
        snprintf(
            msg, sizeof msg,
            "queue '%s' is at its budget (it holds %lld of %lld batches, "
            "%.1f of %.1f MB): pushes%s%s waited %.0f s for consumers to acknowledge "
            "batches (%s)",
            p->queue, (long long)(producer_reply_int(r[1]) - producer_reply_int(r[5])),
            (long long)producer_reply_int(r[0]->element[0]), (double)producer_reply_int(r[2]) / 1e6,
            (double)producer_reply_int(r[0]->element[1]) / 1e6, p->task_held ? " of task " : "",
            p->task_held ? p->task_key : "", (double)waited_ms / 1000.0, who);
        p->log(p->log_arg, msg);
    }
    for (int i = 0; i < 6; i++)
        if (r[i])
            freeReplyObject(r[i]);
}

/* Waits until a push refused in state `why` is worth sending again, for
 * room at most cap_ms (when >= 0). With nothing in flight, so that a
 * plain command is safe. */
static sluice_err wait_retry(sluice_producer *p, const slot *s, enum slot_state why,
                             int64_t cap_ms)
{
    if (producer_stopped(p)) {
        producer_seterr(p, "push %s: stopped while waiting for room in queue '%s'", s->idstr,
                        p->queue);
        return SLUICE_ERR_IO;
    }
    uint64_t t0 = now_us();
    sluice_err e = SLUICE_OK;
    int final = 0;   /* pipe_redirect_pause() gave up: no reconnect */
    if (why == SLOT_FULL) {
        /* A token in the room list means a consumer acknowledged a batch
         * since; the timeout covers room made any other way (a purge, a
         * budget raised) and another producer taking the token. */
        int64_t ms = ROOM_WAIT_S * 1000;
        if (p->task_held && !p->lease_lost) {
            /* Back in time for the next renewal of the task's lease. */
            int64_t due = p->renewed_ms + p->lease_ms / 3 - sluicei_now_ms();
            ms = due < 10 ? 10 : due < ms ? due : ms;
        }
        if (cap_ms >= 0 && cap_ms < ms)
            ms = cap_ms < 10 ? 10 : cap_ms;
        char secs[24];
        producer_blpop_secs(secs, ms);
        redisReply *r = NULL;
        e = sluicei_conn_command(p->conn, &r, "BLPOP %s %s", p->room_key, secs);
        if (e == SLUICE_ERR_REDIS && r && pipe_redirect_error(p, r->str)) {
            char msg[sizeof p->redirect_msg];
            snprintf(msg, sizeof msg, "%s", r->str);
            e = pipe_redirect_pause(p, "waiting for room", msg);
            final = e != SLUICE_OK;
        } else if (e == SLUICE_ERR_REDIS) {
            producer_sleep_ms(TRANSIENT_PAUSE_MS);   /* LOADING and the like; the push tells */
            e = SLUICE_OK;
        }
        if (r)
            freeReplyObject(r);
    } else if (p->redirected) {
        /* The group was refused by a retryable error: the queue's node is
         * changing. Follow it (the push is sent again after pipe_recover()). */
        p->redirected = 0;
        e = pipe_redirect_pause(p, s->idstr, p->redirect_msg);
        final = e != SLUICE_OK;
        if (e == SLUICE_ERR_REDIS) {
            char why[sizeof p->errstr];
            snprintf(why, sizeof why, "%s", p->errstr);
            producer_seterr(p, "push %s", why);
        }
    } else {
        producer_sleep_ms(TRANSIENT_PAUSE_MS);
    }
    if (e == SLUICE_OK && p->reload_scripts && p->conn->ctx) {
        if (sluicei_script_load(p->conn) == SLUICE_OK)
            p->reload_scripts = 0;
    }
    if (!final && (e == SLUICE_ERR_IO || !p->conn->ctx))
        e = pipe_recover(p);
    /* A producer blocked here keeps its task: the lease is renewed, at
     * least every second while it waits for room (which also tells
     * whether a task of an earlier epoch waits: spill_due()); and its
     * other partitions still see it. */
    if (e == SLUICE_OK && why == SLOT_FULL && p->task_held && !p->lease_lost &&
        sluicei_now_ms() - p->renewed_ms >= 1000 && lease_renew(p) == SLUICE_ERR_IO)
        e = SLUICE_ERR_IO;
    if (e == SLUICE_OK)
        e = lease_housekeep(p);
    if (e == SLUICE_OK && p->group)
        group_beat(p->group, p);
    p->st.blocked_us += now_us() - t0;
    if (e == SLUICE_OK && p->task_held && p->lease_lost)
        e = lease_lost_error(p);
    return e;
}

/* Sends the refused slots again, in ring order, one group at a time,
 * until none is refused. Nothing else is in flight. The producer waits
 * for room (or for a passing condition to pass) first, and again whenever
 * a group is refused again: so a full queue costs one group per room
 * token, not every batch of the ring. While Redis is short of memory the
 * groups are single batches: whatever room there is may fit one batch
 * and not a whole group. */
sluice_err room_retry_refused(sluice_producer *p)
{
    int wait = 1;
    int64_t full_since = 0;   /* the partition refuses for lack of room since */
    int64_t noted = 0;        /* when the wait was last told (note_room()) */
    while (p->nrefused > 0) {
        slot *m[GROUP_MAX];
        int k = 0, full = 0;
        size_t bytes = 0;
        int kmax = p->oom ? 1 : p->gmax;
        p->oom = 0;
        for (int i = 0; i < p->used && k < kmax; i++) {
            slot *s = producer_slot_at(p, i);
            if (s->state != SLOT_FULL && s->state != SLOT_TRANSIENT)
                continue;
            if (k > 0 && (bytes + s->frame.len > GROUP_BYTES || !producer_same_task(m[0], s)))
                break;
            full |= s->state == SLOT_FULL;
            m[k++] = s;
            bytes += s->frame.len;
        }
        if (k == 0)
            break;
        sluice_err e = SLUICE_OK;
        if (wait) {
            /* A partition that stays full while another has room is left
             * (spill); one that has room again soon is not. */
            int64_t cap = -1, now = sluicei_now_ms();
            if (full && full_since == 0)
                full_since = now;
            if (full && now - full_since >= SPILL_AFTER_MS && spill_due(p, m[0]))
                return spill(p);
            if (full && now - full_since < SPILL_AFTER_MS && p->may_spill && p->group &&
                p->task_held)
                cap = SPILL_AFTER_MS - (now - full_since);
            p->st.full_waits += full;
            e = wait_retry(p, m[0], full ? SLOT_FULL : SLOT_TRANSIENT, cap);
            now = sluicei_now_ms();
            if (e == SLUICE_OK && full && now - full_since >= WAIT_NOTE_MS &&
                now - noted >= (noted ? WAIT_NOTE_EVERY_MS : WAIT_NOTE_MS)) {
                noted = now;
                note_room(p, now - full_since);
            }
        }
        if (e == SLUICE_OK) {
            e = pipe_send_group(p, m, k);
            if (e == SLUICE_ERR_IO)
                e = pipe_recover(p);   /* sends the group again */
            else if (e != SLUICE_OK)
                producer_seterr(p, "push %s: %s", m[0]->idstr, p->conn->errstr);
        }
        while (e == SLUICE_OK && p->nsent > 0)
            e = pipe_read_one(p);
        if (e != SLUICE_OK)
            return e;
        wait = 0;
        for (int i = 0; i < k; i++) {
            wait |= m[i]->state == SLOT_FULL || m[i]->state == SLOT_TRANSIENT;
            if (m[i]->state == SLOT_DONE)
                full_since = 0;   /* room came */
        }
    }
    return SLUICE_OK;
}

/* The scripts' room rule, has_room in common/lua/lib.lua (task_claim uses
 * it, push holds a copy), for a batch of an epoch ahead of the trainers:
 * whether a queue that holds count batches of used bytes has room for one
 * more of size bytes within 3/4 of its budgets maxn and maxb (at least one
 * batch). Written again here because no script answers the question
 * without claiming a task or pushing: a probe through a script would be a
 * change of the protocol. Keep it the same as the Lua function
 * (tests/unit/test_room.c compares them). */
int sluicei_room_ahead(int64_t count, int64_t used, int64_t size, int64_t maxn, int64_t maxb)
{
    int64_t roomn = maxn * 3 / 4 > 1 ? maxn * 3 / 4 : 1, roomb = maxb * 3 / 4;
    return count + 1 <= roomn && used + size <= roomb;
}
