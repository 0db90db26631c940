/* Pushes in flight: the ring, groups, the request written to Redis, the
 * replies, a lost connection, Redis Cluster redirects.
 *
 * Groups. Batches go to Redis in groups, one MULTI each (docs/PROTOCOL.md):
 *     MULTI / MSET in:<id> <frame> ... / EVALSHA push ... / EXEC
 * so that no frame passes through Lua and one script call serves many
 * small batches. A group holds up to GROUP_MAX batches and GROUP_BYTES of
 * frames (a bigger frame goes alone), and at most half the ring, so that
 * one group can fill while another is answered. The group being filled
 * (slots OPEN, always the newest ones) is sent when it is full, or when
 * no other group awaits its answer (replies that came in are read without
 * waiting, as Nagle's algorithm does with TCP segments): so a producer
 * faster than Redis sends full groups, a slower one each batch at once.
 * The request is written by hand straight from the slots' frames
 * (conn_send.h; hiredis would copy every frame into its output buffer);
 * hiredis only parses the replies. Invariant: the replies Redis
 * still owes us belong to the groups gid_read..gid_next-1, whose slots are
 * SENT, and each group owes four replies (MULTI, MSET, EVALSHA, EXEC).
 *
 * After a lost connection every unanswered group is sent again: the push
 * script drops an id that is already stored or acknowledged, so this loses
 * nothing and duplicates nothing (a MULTI cut short never runs at all).
 *
 * Any error returned to the caller ends the pushes that were unanswered at
 * that moment: they may or may not be in Redis (errstr says how many).
 *
 * Redis Cluster. A routed connection (one with a resolver) that gets a
 * retryable error reply (MOVED, TRYAGAIN, a script's migration guard...)
 * is dropped, so that the next connect asks the router where the queue
 * lives now, and the command is sent again after a pause that doubles
 * from 100 ms to 2 s; only after reconnect_timeout_ms of that is it an
 * error. With url.wait_replicas > 0 every push group is followed by a
 * WAIT, and a group counts as stored only when the WAIT answered (a WAIT
 * that times out is no error: the group is stored, only not known to be
 * on a replica yet); so is every task_done. */
#include "bufcache.h"
#include "producer_impl.h"
#include "retry.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* A retryable error reply (cluster.h) on a routed connection: the
 * queue's data is elsewhere, or about to be. A connection to one plain
 * server has no resolver: there these errors keep their old meaning. */
int pipe_redirect_error(const sluice_producer *p, const char *msg)
{
    return p->conn && p->conn->resolve && msg && sluicei_cluster_retryable(msg, strlen(msg));
}

/* A command went through: the series of retryable errors, if any, ended. */
void pipe_redirect_over(sluice_producer *p)
{
    p->redirect_since = 0;
    sluicei_backoff_reset(&p->redirect_backoff);
}

/* After a retryable error reply msg to `what` on a routed connection:
 * drops the connection, so that the next connect (pipe_recover()) asks the
 * router where the queue lives now, and pauses (redirect_backoff: 100 ms
 * doubling to 2 s, retry.h).
 * SLUICE_ERR_REDIS (errstr set) once the series lasted longer than
 * reconnect_timeout_ms (when set); SLUICE_ERR_IO when stopped. */
sluice_err pipe_redirect_pause(sluice_producer *p, const char *what, const char *msg)
{
    int64_t now = sluicei_now_ms();
    if (p->redirect_since == 0) {
        p->redirect_since = now;
    } else if (p->reconnect_timeout_ms > 0 &&
               now - p->redirect_since >= p->reconnect_timeout_ms) {
        producer_seterr(p, "%s: redis: %.200s (answered for %lld ms, longer than the reconnect "
                        "timeout)", what, msg, (long long)(now - p->redirect_since));
        pipe_redirect_over(p);
        return SLUICE_ERR_REDIS;
    }
    int64_t pause = sluicei_backoff_next(&p->redirect_backoff);
    char why[sizeof p->conn->errstr];
    snprintf(why, sizeof why, "%s: redis: %.400s", what, msg);
    sluicei_conn_drop(p->conn, why);
    for (int64_t end = now + pause; (now = sluicei_now_ms()) < end;) {
        if (producer_stopped(p)) {
            producer_seterr(p, "%s: stopped while the queue's node was changing (%.200s)", what,
                            msg);
            return SLUICE_ERR_IO;
        }
        producer_sleep_ms(end - now > 50 ? 50 : (int)(end - now));
    }
    return SLUICE_OK;
}

/* Changes a slot's state, keeping the count of refused slots. */
static void set_state(sluice_producer *p, slot *s, enum slot_state st)
{
    p->nrefused += (st == SLOT_FULL || st == SLOT_TRANSIENT) -
                   (s->state == SLOT_FULL || s->state == SLOT_TRANSIENT);
    s->state = st;
}

/* Builds the request for the group m[0..k) (batches of one task), one
 * transaction:
 *   MULTI / MSET in:<id> <frame> ... / EVALSHA push 1 meta <e t s s...> / EXEC
 * and, when the connection's url asks for it, WAIT <replicas> <ms>,
 * as p->req, whose frames are the slots' (sent without a copy). Changes
 * nothing else. */
static sluice_err build_group(sluice_producer *p, slot **m, int k)
{
    sluicei_conn *c = p->conn;
    sluicei_req *q = &p->req;
    sluicei_req_reset(q);
    sluicei_req_command(q, 1);
    sluicei_req_str(q, "MULTI");
    sluicei_req_command(q, 1 + 2 * k);
    sluicei_req_str(q, "MSET");
    for (int i = 0; i < k; i++) {
        sluicei_req_str2(q, p->in_prefix, m[i]->idstr);
        sluicei_req_ref_arg(q, m[i]->frame.data, m[i]->frame.len);
    }
    sluicei_req_command(q, 6 + k);
    sluicei_req_str(q, "EVALSHA");
    sluicei_req_str(q, sluicei_script_sha(SLUICEI_SCRIPT_PUSH));
    sluicei_req_str(q, "1");
    sluicei_req_str(q, p->anchor_key);
    sluicei_req_u64(q, m[0]->id.epoch);
    sluicei_req_u64(q, m[0]->id.task);
    for (int i = 0; i < k; i++)
        sluicei_req_u64(q, m[i]->id.seq);
    sluicei_req_command(q, 1);
    sluicei_req_str(q, "EXEC");
    if (producer_wait_n(p) > 0) {
        sluicei_req_command(q, 3);
        sluicei_req_str(q, "WAIT");
        sluicei_req_u64(q, (uint64_t)producer_wait_n(p));
        sluicei_req_u64(q, SLUICEI_WAIT_MS);
    }
    if (q->err != SLUICE_OK) {
        snprintf(c->errstr, sizeof c->errstr, "building a push: %s", sluice_strerror(q->err));
        return q->err;
    }
    return SLUICE_OK;
}

/* Builds and sends the request for the group m[0..k). */
static sluice_err write_group(sluice_producer *p, slot **m, int k)
{
    if (!p->conn->ctx)
        return SLUICE_ERR_IO;
    sluice_err e = build_group(p, m, k);
    return e == SLUICE_OK ? sluicei_conn_send(p->conn, &p->req) : e;
}

/* The slots of group gid, in ring order (the order they were sent in). */
static int members(sluice_producer *p, uint64_t gid, slot **m)
{
    int k = 0;
    for (int i = 0; i < p->used && k < GROUP_MAX; i++) {
        slot *s = producer_slot_at(p, i);
        if (s->state == SLOT_SENT && s->gid == gid)
            m[k++] = s;
    }
    return k;
}

/* Makes m[0..k) a new group, SENT, and sends it. A request that cannot
 * be built leaves them as they were. */
sluice_err pipe_send_group(sluice_producer *p, slot **m, int k)
{
    if (!p->conn->ctx)
        return SLUICE_ERR_IO;
    sluice_err e = build_group(p, m, k);
    if (e != SLUICE_OK)
        return e;
    uint64_t gid = p->gid_next++;
    for (int i = 0; i < k; i++) {
        set_state(p, m[i], SLOT_SENT);
        m[i]->gid = gid;
    }
    p->nsent += k;
    return sluicei_conn_send(p->conn, &p->req);
}

/* After a lost connection: reconnects (within reconnect_timeout_ms, or
 * forever) and sends every unanswered group again, in order. */
sluice_err pipe_recover(sluice_producer *p)
{
    int64_t deadline =
        p->reconnect_timeout_ms > 0 ? sluicei_now_ms() + p->reconnect_timeout_ms : -1;
    for (;;) {
        sluice_err e = sluicei_conn_reconnect(p->conn, deadline, p->stop);
        p->st.reconnects = p->conn->reconnects;
        if (e != SLUICE_OK) {
            producer_seterr(p, "connection lost: %s", p->conn->errstr);
            return e;
        }
        p->reload_scripts = 0;   /* reconnect loaded them */
        /* Perhaps another node: ask which replicas it has before the
         * groups go again (nothing is owed on the new connection). */
        p->wait_have = -1;
        p->role_due = 1;
        lease_check_role(p);
        p->rstep = 0;
        p->qerr[0] = '\0';
        if (p->exec_reply) {
            freeReplyObject(p->exec_reply);   /* its group is sent again */
            p->exec_reply = NULL;
        }
        for (uint64_t g = p->gid_read; g < p->gid_next && e == SLUICE_OK; g++) {
            slot *m[GROUP_MAX];
            int k = members(p, g, m);
            for (int i = 0; i < k; i++)
                m[i]->resent = 1;
            if (k > 0)
                e = write_group(p, m, k);
        }
        if (e == SLUICE_OK)
            return SLUICE_OK;
        if (e != SLUICE_ERR_IO) {
            producer_seterr(p, "after reconnecting: %s", p->conn->errstr);
            return e;
        }
        /* Lost again while re-sending: start over. */
    }
}

/* Sends the group being filled, if any. */
static sluice_err send_open(sluice_producer *p)
{
    slot *m[GROUP_MAX];
    int k = p->nopen;
    if (k == 0)
        return SLUICE_OK;
    for (int i = 0; i < k; i++)
        m[i] = producer_slot_at(p, p->used - k + i);
    sluice_err e = pipe_send_group(p, m, k);
    if (e == SLUICE_ERR_IO)
        e = pipe_recover(p);
    else if (e != SLUICE_OK)
        producer_seterr(p, "push %s: %s", m[0]->idstr, p->conn->errstr);
    if (m[0]->state == SLOT_SENT) {
        p->nopen = 0;
        p->open_bytes = 0;
    }
    return e;
}

static void count_stored(sluice_producer *p, const slot *s)
{
    p->st.batches++;
    p->st.records += s->nrecords;
    p->st.bytes += s->frame.len;
    p->st.raw_bytes += s->raw_len;
}

/* What an error refusing a whole group means: Redis at maxmemory (OOM, a
 * transaction discarded because of it), a passing condition, or neither. */
static enum slot_state group_error_kind(sluice_producer *p, const char *msg)
{
    const char *inner = strstr(msg, "because of: ");
    if (inner) {
        inner += strlen("because of: ");
        if (*inner == '-')
            inner++;
        msg = inner;
    }
    if (starts_with(msg, "OOM")) {
        p->oom = 1;
        return SLOT_FULL;
    }
    if (pipe_redirect_error(p, msg)) {
        p->redirected = 1;
        snprintf(p->redirect_msg, sizeof p->redirect_msg, "%s", msg);
        return SLOT_TRANSIENT;
    }
    /* Server conditions that pass by themselves (retry.h), or that a
     * reload fixes (NOSCRIPT). */
    if (starts_with(msg, "NOSCRIPT")) {
        p->reload_scripts = 1;
        return SLOT_TRANSIENT;
    }
    if (sluicei_error_transient(msg, strlen(msg)))
        return SLOT_TRANSIENT;
    return SLOT_FAILED;
}

/* Sets s's state from its element r of the push script's reply, or
 * returns the final error it carries (errstr set when say). */
static sluice_err apply_result(sluice_producer *p, slot *s, const redisReply *r, int say)
{
    if (r->type == REDIS_REPLY_INTEGER) {
        switch (r->integer) {
        case SLUICEI_PUSH_OK:
            count_stored(p, s);
            set_state(p, s, SLOT_DONE);
            return SLUICE_OK;
        case SLUICEI_PUSH_DUP:
            /* Re-sent after a lost connection: most likely our own first
             * send was stored before the reply got lost. */
            if (s->resent)
                count_stored(p, s);
            else
                p->st.duplicates++;
            set_state(p, s, SLOT_DONE);
            return SLUICE_OK;
        case SLUICEI_PUSH_FULL:
            set_state(p, s, SLOT_FULL);
            return SLUICE_OK;
        }
    }
    set_state(p, s, SLOT_FAILED);
    sluice_err code = r->type == REDIS_REPLY_ERROR ? sluicei_reply_error_code(r)
                                                   : SLUICE_ERR_PROTOCOL;
    if (!say)
        return code;
    if (code == SLUICE_ERR_TOOBIG) {
        const char *why = strstr(r->str, "TOOBIG ");
        producer_seterr(p, "push %s: %s (use smaller batches or raise the queue's byte budget)",
                        s->idstr, why ? why + 7 : r->str);
    } else if (r->type == REDIS_REPLY_ERROR) {
        producer_seterr(p, "push %s: redis: %s", s->idstr, r->str);
    } else {
        producer_seterr(p, "push %s: unexpected reply type %d from the push script", s->idstr,
                        r->type);
    }
    return code;
}

/* Applies the EXEC reply r of the oldest group to its slots. Returns the
 * first final error (errstr set when say) after applying them all. */
static sluice_err finish_group(sluice_producer *p, const redisReply *r, int say)
{
    slot *m[GROUP_MAX];
    int k = members(p, p->gid_read, m);
    const redisReply *sr = NULL;
    const char *err = NULL;
    p->gid_read++;
    p->nsent -= k;
    if (r->type == REDIS_REPLY_ERROR)
        err = p->qerr[0] ? p->qerr : r->str;   /* EXECABORT: the reason came first */
    else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             (sr = r->element[1])->type == REDIS_REPLY_ERROR)
        err = sr->str;
    if (err) {
        /* Refused as a whole: Redis full, a passing condition, or final. */
        enum slot_state st = group_error_kind(p, err);
        for (int i = 0; i < k; i++)
            set_state(p, m[i], st);
        if (st != SLOT_FAILED)
            return SLUICE_OK;
        redisReply er = {.type = REDIS_REPLY_ERROR, .str = (char *)err, .len = strlen(err)};
        sluice_err code = sluicei_reply_error_code(&er);
        if (!say)
            return code;
        if (code == SLUICE_ERR_NOQUEUE)
            producer_seterr(
                p, "push %s: queue '%s' does not exist (create it with: sluice-ctl create %s)",
                k ? m[0]->idstr : "?", p->queue, p->queue);
        else
            producer_seterr(p, "push %s: redis: %s", k ? m[0]->idstr : "?", err);
        return code;
    }
    pipe_redirect_over(p);
    if (!sr || sr->type != REDIS_REPLY_ARRAY || sr->elements != (size_t)k) {
        for (int i = 0; i < k; i++)
            set_state(p, m[i], SLOT_FAILED);
        if (say)
            producer_seterr(p, "push %s: unexpected reply to the push transaction (type %d)",
                            k ? m[0]->idstr : "?", r->type);
        return SLUICE_ERR_PROTOCOL;
    }
    sluice_err first = SLUICE_OK;
    for (int i = 0; i < k; i++) {
        sluice_err e = apply_result(p, m[i], sr->element[i], say && first == SLUICE_OK);
        if (first == SLUICE_OK)
            first = e;
    }
    return first;
}

/* Consumes reply r (and frees it) of the oldest group: the MULTI, MSET
 * and EVALSHA replies only say "queued" (or why not); the fourth, EXEC's,
 * carries the outcome, which counts at once, or, when the group ends in a
 * WAIT, once the WAIT answered (with the number of replicas that have the
 * group: fewer than asked, after its timeout, is no error). */
static sluice_err take_reply(sluice_producer *p, redisReply *r, int say)
{
    if (p->rstep < 3) {
        if (r->type == REDIS_REPLY_ERROR && !p->qerr[0])
            snprintf(p->qerr, sizeof p->qerr, "%s", r->str);
        p->rstep++;
        freeReplyObject(r);
        return SLUICE_OK;
    }
    if (p->rstep == 3 && producer_wait_n(p) > 0) {
        p->exec_reply = r;
        p->rstep++;
        return SLUICE_OK;
    }
    if (p->rstep == 4) {
        if (r->type != REDIS_REPLY_INTEGER || r->integer < producer_wait_n(p))
            p->role_due = 1;
        freeReplyObject(r);
        r = p->exec_reply;
        p->exec_reply = NULL;
    }
    p->rstep = 0;
    sluice_err e = finish_group(p, r, say);
    p->qerr[0] = '\0';
    freeReplyObject(r);
    return e;
}

/* A connection lost awaiting the oldest group's replies: sent again,
 * unless this keeps happening to it. */
static sluice_err lost_reply(sluice_producer *p)
{
    slot *m[GROUP_MAX];
    int k = members(p, p->gid_read, m), worst = 0;
    size_t bytes = 0;
    for (int i = 0; i < k; i++) {
        if (++m[i]->losses > worst)
            worst = m[i]->losses;
        bytes += m[i]->frame.len;
    }
    if (worst >= MAX_LOSSES_PER_PUSH) {
        producer_seterr(
            p,
            "push %s: connection lost %d times awaiting the reply to this group of %d "
            "batch%s, %zu bytes (does the server refuse it? see proto-max-bulk-len): %s",
            k ? m[0]->idstr : "?", worst, k, k == 1 ? "" : "es", bytes, p->conn->errstr);
        return SLUICE_ERR_IO;
    }
    return pipe_recover(p);
}

/* Reads (waiting for it) and consumes the next reply owed. A lost
 * connection is recovered here (the groups stay SENT, sent again). */
sluice_err pipe_read_one(sluice_producer *p)
{
    if (p->nsent == 0)
        return SLUICE_OK;
    redisReply *r = NULL;
    sluice_err e = sluicei_conn_read_reply(p->conn, &r);
    if (e == SLUICE_ERR_IO)
        return lost_reply(p);
    if (!r) {
        producer_seterr(p, "push: %s", p->conn->errstr);
        return e;
    }
    return take_reply(p, r, 1);
}

/* Consumes the replies that have arrived, without waiting. */
static sluice_err read_ready(sluice_producer *p)
{
    while (p->nsent > 0 && p->conn->ctx) {
        redisReply *r = NULL;
        sluice_err e = sluicei_conn_read_ready(p->conn, &r);
        if (e == SLUICE_ERR_PROTOCOL) {
            producer_seterr(p, "push: %s", p->conn->errstr);
            return e;
        }
        if (e != SLUICE_OK)
            return lost_reply(p);
        if (!r)
            return SLUICE_OK;
        e = take_reply(p, r, 1);
        if (e != SLUICE_OK)
            return e;
    }
    return SLUICE_OK;
}

static void pop_done(sluice_producer *p)
{
    while (p->used > 0 && producer_slot_at(p, 0)->state == SLOT_DONE) {
        slot *s = producer_slot_at(p, 0);
        p->used_bytes -= s->frame.len;
        if (p->win && p->buf_held > WINDOW_MAX) {
            /* A window's worth of buffers is reused; more is let go, to
             * the cache of freed buffers (bufcache.h) the next slot to
             * encode a frame takes one from. */
            p->buf_held -= s->cap_seen;
            sluicei_bufcache_put(s->frame.data);
            s->frame = (sluicei_buf){0};
            s->cap_seen = 0;
        }
        p->head = (p->head + 1) % p->nslots;
        p->used--;
    }
}

/* Ends every push still in the ring after a final error: reads the
 * replies still owed (so that the connection stays in step), counts what
 * was stored, drops the rest. Appends to errstr what became of the
 * batches dropped: not stored (never sent, or refused), or sent without an
 * answer (stored or not: nobody knows). */
static void abandon(sluice_producer *p)
{
    for (int i = 0; i < p->used; i++) {
        slot *s = producer_slot_at(p, i);
        if (p->task_held && s->state != SLOT_DONE && s->id.seq < p->lost_from)
            p->lost_from = s->id.seq;
    }
    while (p->nsent > 0 && p->conn->ctx) {
        redisReply *r = NULL;
        if (sluicei_conn_read_reply(p->conn, &r) == SLUICE_ERR_IO || !r)
            break;
        take_reply(p, r, 0);
    }
    uint64_t n[SLOT_FAILED + 1] = {0};
    for (int i = 0; i < p->used; i++)
        n[producer_slot_at(p, i)->state]++;
    p->head = p->used = p->nsent = p->nrefused = p->nopen = 0;
    p->open_bytes = p->used_bytes = 0;
    p->gid_read = p->gid_next;
    p->rstep = 0;
    p->qerr[0] = '\0';
    if (p->exec_reply) {
        freeReplyObject(p->exec_reply);
        p->exec_reply = NULL;
    }
    static const struct {
        enum slot_state st;
        const char *what;
    } gone[] = {
        {SLOT_OPEN, "not sent"},
        {SLOT_FULL, "refused for lack of room"},
        {SLOT_TRANSIENT, "refused by a passing server condition"},
        {SLOT_FAILED, "refused for good"},
    };
    const char *sep = "; not stored: ";
    for (size_t k = 0; k < sizeof gone / sizeof gone[0]; k++) {
        uint64_t c = n[gone[k].st];
        if (!c)
            continue;
        size_t len = strlen(p->errstr);
        snprintf(p->errstr + len, sizeof p->errstr - len, "%s%" PRIu64 "%s %s", sep, c,
                 *sep == ';' ? (c == 1 ? " batch" : " batches") : "", gone[k].what);
        sep = ", ";
    }
    p->abandoned.unsent += n[SLOT_OPEN];
    p->abandoned.refused_room += n[SLOT_FULL];
    p->abandoned.refused_other += n[SLOT_TRANSIENT] + n[SLOT_FAILED];
    p->abandoned.unanswered += n[SLOT_SENT];
    if (n[SLOT_SENT]) {
        size_t len = strlen(p->errstr);
        snprintf(p->errstr + len, sizeof p->errstr - len,
                 "; %" PRIu64 " sent without an answer: %s may or may not be stored",
                 n[SLOT_SENT], n[SLOT_SENT] == 1 ? "it" : "each");
    }
}

/* Sends the group being filled, then reads replies, oldest first, until
 * at most keep pushes are unanswered. When one was refused, reads all of
 * them and pushes the refused ones again: afterwards nothing is in flight.
 * On error the ring is emptied (abandon()). */
sluice_err pipe_settle(sluice_producer *p, int keep)
{
    sluice_err e = send_open(p);
    while (e == SLUICE_OK && p->nsent > (p->nrefused ? 0 : keep))
        e = pipe_read_one(p);
    if (e == SLUICE_OK)
        e = room_retry_refused(p);
    if (e != SLUICE_OK) {
        if (!(e == SLUICE_ERR_FULL && p->spilled))
            abandon(p);
        return e;
    }
    pop_done(p);
    return SLUICE_OK;
}

/* The window is full (max_inflight 0): the answers already in make room,
 * or else it doubles (the link's round trip is longer than sending the
 * window takes); at WINDOW_MAX it waits for answers. */
static sluice_err window_wait(sluice_producer *p)
{
    sluice_err e = send_open(p);
    if (e == SLUICE_OK)
        e = read_ready(p);
    if (e != SLUICE_OK) {
        abandon(p);
        return e;
    }
    if (p->nrefused == 0)
        pop_done(p);
    if (p->used_bytes < p->win)
        return SLUICE_OK;
    if (p->win < WINDOW_MAX) {
        p->win *= 2;
        return SLUICE_OK;
    }
    /* Each round reads one answer (or sends refused pushes again); with
     * nothing in flight or refused there is nothing to wait for. */
    while (e == SLUICE_OK && p->used_bytes >= p->win && (p->nsent > 0 || p->nrefused > 0))
        e = pipe_settle(p, p->nsent > 0 ? p->nsent - 1 : 0);
    return e;
}

/* Takes the next free slot and numbers it; settles first when the ring or
 * the window is full. */
sluice_err pipe_next_slot(sluice_producer *p, slot **out)
{
    if (p->next_seq > SLUICEI_MAX_SEQ) {
        if (p->task_held || p->task < ADHOC_TASK_MIN) {
            producer_seterr(p,
                            "task %" PRIu32 ":%" PRIu64
                            " has more than %u batches, the most one task "
                            "may have (split its shard: split= in the manifest)",
                            p->epoch, p->task, SLUICEI_MAX_SEQ + 1);
            return SLUICE_ERR_INVALID;
        }
        /* An ad-hoc run goes on as a new ad-hoc task (unique ids). */
        p->task = ADHOC_TASK_MIN + sluicei_random64() % (ADHOC_TASK_END - ADHOC_TASK_MIN);
        p->next_seq = 0;
    }
    if (p->used == p->nslots) {
        sluice_err e = pipe_settle(p, p->nslots - 1);
        if (e != SLUICE_OK)
            return e;
    }
    if (p->win && p->used > 0 && p->used_bytes >= p->win) {
        sluice_err e = window_wait(p);
        if (e != SLUICE_OK)
            return e;
    }
    slot *s = producer_slot_at(p, p->used);
    s->id.epoch = p->epoch;
    s->id.task = p->task;
    s->id.seq = (uint32_t)p->next_seq;
    sluicei_batch_id_str(s->idstr, s->id);
    s->resent = 0;
    s->losses = 0;
    *out = s;
    return SLUICE_OK;
}

/* Adds the encoded slot s to the group being filled, and sends the group
 * when it is full or when no other group awaits its answer (see "Groups"
 * at the top). A refusal seen on the way is dealt with at once: the push
 * waits for room. */
sluice_err pipe_launch(sluice_producer *p, slot *s, uint64_t nrecords)
{
    /* A group is one task's batches: a new task starts a new group. */
    if (p->nopen > 0 && !producer_same_task(producer_slot_at(p, p->used - 1), s)) {
        sluice_err e = send_open(p);
        if (e != SLUICE_OK) {
            abandon(p);
            return e;
        }
    }
    s->nrecords = nrecords;
    s->state = SLOT_OPEN;
    p->buf_held += s->frame.cap - s->cap_seen;
    s->cap_seen = s->frame.cap;
    p->used_bytes += s->frame.len;
    p->used++;
    p->nopen++;
    p->open_bytes += s->frame.len;
    p->next_seq++;
    sluice_err e = SLUICE_OK;
    int send = p->nopen >= p->gmax || p->open_bytes >= GROUP_BYTES || p->nsent == 0;
    if (!send) {
        e = read_ready(p);
        send = p->nsent == 0;
    }
    if (e == SLUICE_OK && send)
        e = send_open(p);
    if (e == SLUICE_OK && p->nrefused > 0)
        return pipe_settle(p, p->nslots);
    if (e != SLUICE_OK)
        abandon(p);
    return e;
}
