/* Sending: every command goes out with a request (req) that says what
 * its reply answers and to which session it belongs; on_reply() routes the
 * reply to handle_reply() and keeps the data operation's count. Also the
 * commands built in more than one place: scripts, acks, dead letters,
 * WAIT, beat and reap. */
#include "consumer_internal.h"

#include <inttypes.h>
#include <stdio.h>

/* MOVED or ASK from a server not addressed as a cluster node: the address
 * is wrong, and no retry mends it (a cluster's are followed by the next
 * session). */
static int wrong_address(sluice_consumer *c, const redisReply *r)
{
    if (c->cluster || r->type != REDIS_REPLY_ERROR ||
        !(starts_with(r->str, r->len, "MOVED ") || starts_with(r->str, r->len, "ASK ")))
        return 0;
    loop_fatal(c, SLUICE_ERR_INVALID, "redis %s: %s (the server is a Redis Cluster node: use a "
               "redis+cluster:// address)", c->addr, r->str);
    session_fail(c, "redis %s: %s", c->addr, r->str);
    return 1;
}

/* Gives q back to its consumer's pool (up to REQ_POOL_MAX spare ones),
 * else frees it. NULL is a no-op. */
void send_req_free(req *q)
{
    if (!q)
        return;
    sluice_consumer *c = q->c;
    if (c->req_pooled < REQ_POOL_MAX) {
        q->next_free = c->req_pool;
        c->req_pool = q;
        c->req_pooled++;
        return;
    }
    free(q->ids);
    free(q);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    req *q = priv;
    sluice_consumer *c = q->c;
    if (q->gen == c->gen) {
        c->pend[q->conn]--;
        int64_t now_us = sluicei_now_us();
        c->prog_ms[q->conn] = now_us / 1000;
        if (q->kind == R_BLMOVE) {
            c->blocking = 0;
        } else {
            /* The session's quickest reply is its round trip (the others
             * waited behind data, or in Redis). */
            int64_t rtt = now_us - q->sent_us;
            if (rtt < 1)
                rtt = 1;
            if (c->rtt_min_us == 0 || rtt < c->rtt_min_us)
                c->rtt_min_us = rtt;
        }
        if (!reply) {
            /* hiredis is freeing this context (a socket error). */
            if (c->ac[q->conn] == ac)
                c->ac[q->conn] = NULL;
            session_lost(c, q->conn, ac, "no reply");
        } else {
            if (!wrong_address(c, reply))
                handle_reply(c, q, reply);
            if (q->gen == c->gen && c->restored)
                c->contact_ms = sluicei_now_ms();
            if (q->gen == c->gen) {
                if (q->in_op && --c->op_left == 0) {
                    if (c->op == OP_RESTORE)
                        c->restored = 1;
                    c->op = OP_NONE;
                    loop_pump(c);
                } else if (c->close_deadline_ms) {
                    loop_pump(c);
                }
            }
        }
    }
    send_req_free(q);
}

/* A request of c for a reply of this kind, from c's pool when it has a
 * spare one (whose ids buffer it keeps); NULL when out of memory. */
req *send_req_new(sluice_consumer *c, int kind, int item)
{
    req *q = c->req_pool;
    if (q) {
        idbuf *ids = q->ids;
        size_t cap = q->ids_cap;
        c->req_pool = q->next_free;
        c->req_pooled--;
        memset(q, 0, sizeof *q);
        q->ids = ids;
        q->ids_cap = cap;
    } else if (!(q = calloc(1, sizeof *q))) {
        return NULL;
    }
    q->c = c;
    q->kind = kind;
    q->item = item;
    return q;
}

/* Sends a command on connection conn; q (from send_req_new, may be NULL after
 * a failed allocation) is owned by the call. Returns -1 when the session
 * ended (the caller stops what it was doing). */
int send_argv(sluice_consumer *c, int conn, req *q, int in_op, int argc, const char **argv,
              const size_t *lens)
{
    redisAsyncContext *ac = c->ac[conn];
    if (!q) {
        session_fail(c, "out of memory");
        return -1;
    }
    if (!ac) {
        send_req_free(q);
        return -1;
    }
    q->c = c;
    q->gen = c->gen;
    q->sent_us = sluicei_now_us();
    q->sent_ms = q->sent_us / 1000;
    q->conn = conn;
    q->in_op = in_op;
    if (redisAsyncCommandArgv(ac, on_reply, q, argc, argv, lens) != REDIS_OK) {
        send_req_free(q);
        session_fail(c, "redis %s: sending a command: %s", c->addr,
                     ac->err ? ac->errstr : "out of memory");
        return -1;
    }
    if (c->pend[conn]++ == 0)
        c->prog_ms[conn] = sluicei_now_ms();
    if (in_op)
        c->op_left++;
    if (q->kind == R_BLMOVE)
        c->blocking = 1;
    return 0;
}

/* EVALSHA of script s on the queue with the given ARGV. */
int send_script(sluice_consumer *c, int conn, req *q, int in_op, sluicei_script_id s,
                int argc, const char **argv)
{
    size_t need = (size_t)argc + 4;
    if (grow((void **)&c->script_av, &c->script_av_cap, need, sizeof *c->script_av) ||
        grow((void **)&c->script_al, &c->script_al_cap, need, sizeof *c->script_al)) {
        send_req_free(q);
        session_fail(c, "out of memory");
        return -1;
    }
    const char **av = c->script_av;
    size_t *al = c->script_al;
    av[0] = "EVALSHA";
    av[1] = sluicei_script_sha(s);
    av[2] = "1";
    av[3] = c->k_anchor;
    for (int i = 0; i < argc; i++)
        av[4 + i] = argv[i];
    for (int i = 0; i < argc + 4; i++)
        al[i] = strlen(av[i]);
    return send_argv(c, conn, q, in_op, argc + 4, av, al);
}

/* The ack script's epoch, task and seq for a Redis id; -1 when its batch
 * id is malformed. */
static int ack_fields(const char *rid, char ep[16], char tk[24], char sq[16])
{
    int pad;
    size_t base;
    if (!sluicei_rid_check(rid, strlen(rid), &base, &pad))
        return -1;
    /* The check found three canonical decimals (at most 10, 20 and 8
     * digits) before base: the arguments are the id's own parts. */
    const char *t = (const char *)memchr(rid, ':', base) + 1;
    const char *s = (const char *)memchr(t, ':', base - (size_t)(t - rid)) + 1;
    memcpy(ep, rid, (size_t)(t - 1 - rid));
    ep[t - 1 - rid] = 0;
    memcpy(tk, t, (size_t)(s - 1 - t));
    tk[s - 1 - t] = 0;
    memcpy(sq, s, base - (size_t)(s - rid));
    sq[base - (size_t)(s - rid)] = 0;
    return 0;
}

/* Acknowledges n batches whose Redis ids are at base, base + stride, ...
 * (idbuf or item arrays), in ack script calls of up to ACK_BATCH_MAX.
 * An R_ACK request keeps a copy of its ids for recover_confirm_acks(). Returns -1
 * when the session ended. */
int send_acks(sluice_consumer *c, int conn, int kind, int in_op, const char *base,
              size_t stride, size_t n)
{
    if (!c->ack_num)
        c->ack_num = malloc(ACK_BATCH_MAX * sizeof *c->ack_num);
    if (!c->ack_argv)
        c->ack_argv = malloc((2 + 4 * ACK_BATCH_MAX) * sizeof *c->ack_argv);
    char (*num)[3][24] = c->ack_num;
    const char **argv = c->ack_argv;
    int rc = 0;
    if (!num || !argv) {
        session_fail(c, "out of memory");
        rc = -1;
    }
    for (size_t i = 0; i < n && rc == 0;) {
        size_t k = 0, from = i;
        argv[0] = c->id;
        argv[1] = c->owner;   /* "": the frames go; else kept for checkpoints */
        for (; i < n && k < ACK_BATCH_MAX; i++) {
            const char *rid = base + i * stride;
            if (ack_fields(rid, num[k][0], num[k][1], num[k][2]) != 0)
                continue;   /* never handed out: such a frame fails the id check */
            argv[2 + 4 * k] = rid;
            argv[3 + 4 * k] = num[k][0];
            argv[4 + 4 * k] = num[k][1];
            argv[5 + 4 * k] = num[k][2];
            k++;
        }
        if (k == 0)
            continue;
        req *q = send_req_new(c, kind, -1);
        if (q && kind == R_ACK) {
            if (grow((void **)&q->ids, &q->ids_cap, i - from, sizeof *q->ids)) {
                send_req_free(q);
                q = NULL;
            }
            for (size_t j = from; q && j < i; j++)
                memcpy(q->ids[q->nids++].s, base + j * stride, RID_MAX);
        }
        rc = send_script(c, conn, q, in_op, SLUICEI_SCRIPT_ACK, (int)(2 + 4 * k), argv);
    }
    return rc;
}

/* Sends an invalid frame's id to the dead letters with its reason (part of
 * the current data operation) and counts it. */
int send_dead(sluice_consumer *c, const char *rid, size_t len, const char *reason)
{
    char idq[SLUICEI_QUOTE_MAX + 8];
    sluice_consumer *t = c->top;
    /* The id may be any bytes: quoted printably here, sent as it is. */
    sluicei_quote(idq, sizeof idq, rid, len);
    mu_lock(c);
    c->st.invalid++;
    if (t == c)
        snprintf(t->note, sizeof t->note, "batch %s: %s", idq, reason);
    else   /* a partition's: its dead letters are that queue's */
        snprintf(t->note, sizeof t->note, "batch %s of %s: %s", idq, c->queue, reason);
    t->note_seq++;
    mu_unlock(c);
    const char *av[7] = {"EVALSHA", sluicei_script_sha(SLUICEI_SCRIPT_DEAD), "1", c->k_anchor,
                         c->id, rid, reason};
    size_t lens[7];
    for (int i = 0; i < 7; i++)
        lens[i] = i == 5 ? len : strlen(av[i]);
    return send_argv(c, CONN_DATA, send_req_new(c, R_DEAD, -1), 1, 7, av, lens);
}

/* When the node has replicas to wait for: WAIT right behind a take,
 * BLMOVE or claim, as part of the same data operation. The GETs sent
 * after it on this connection run, and their batches are handed out, only
 * once the move into pending:<cid> reached the replicas (or
 * SLUICEI_WAIT_MS passed), so that a failover right after the take does
 * not bring back, for another consumer, a batch this one returned. */
int send_wait(sluice_consumer *c)
{
    if (c->wait_now <= 0)
        return 0;
    char n[16], ms[16];
    snprintf(n, sizeof n, "%d", c->wait_now);
    snprintf(ms, sizeof ms, "%d", SLUICEI_WAIT_MS);
    const char *av[3] = {"WAIT", n, ms};
    return send_argv(c, CONN_DATA, send_req_new(c, R_WAIT, -1), 1, 3, av, NULL);
}

void send_beat(sluice_consumer *c)
{
    sluice_consumer_stats st;
    uint32_t ep;
    mu_lock(c);
    st = c->st;
    ep = c->epoch;
    mu_unlock(c);
    char v[11][24];
    const char *names[11] = {"batches", "records",    "bytes",      "redelivered",
                             "duplicates", "padding", "invalid",    "reconnects",
                             "blocked_us", "epochs_ended", "epoch"};
    uint64_t vals[11] = {st.batches,    st.records, st.bytes,      st.redelivered,
                         st.duplicates, st.padding, st.invalid,    st.reconnects,
                         st.blocked_us, st.epochs_ended, ep};
    const char *argv[5 + 22] = {"consumer", c->id, c->tok, c->registered ? "0" : "1",
                                c->rank_s};
    for (int i = 0; i < 11; i++) {
        snprintf(v[i], sizeof v[i], "%" PRIu64, vals[i]);
        argv[5 + 2 * i] = names[i];
        argv[6 + 2 * i] = v[i];
    }
    req *q = send_req_new(c, R_BEAT, -1);
    if (send_script(c, CONN_CTL, q, 0, SLUICEI_SCRIPT_BEAT, 27, argv) == 0)
        c->beat_inflight = 1;
}

void send_reap(sluice_consumer *c)
{
    if (send_script(c, CONN_CTL, send_req_new(c, R_REAP, -1), 0, SLUICEI_SCRIPT_REAP, 0, NULL) == 0)
        c->reap_inflight = 1;
}
