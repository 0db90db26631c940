/* What keeps a lost connection or a restarted Redis from losing or
 * repeating a batch: the ring of confirmed acks, the restore script at the
 * start of every session, the resync of pending:<cid> and the fetching of
 * what it held that never arrived; and close's last acks and requeue. */
#include "consumer_internal.h"

#include <inttypes.h>
#include <stdio.h>

/* Remembers a confirmed acknowledgement for restore (RESTORE_MS). A full
 * ring doubles while its oldest entry is younger than RESTORE_MS (up to
 * ACKED_RING_MAX), else the oldest goes. */
static void ring_add(sluice_consumer *c, const char *rid)
{
    if (!c->ring)
        return;
    int64_t now = sluicei_now_ms();
    if (c->ring_len == c->ring_cap && c->ring_cap < ACKED_RING_MAX &&
        c->ring[c->ring_head].ms > now - RESTORE_MS) {
        acked_id *r = malloc(2 * c->ring_cap * sizeof *r);
        if (r) {
            size_t first = c->ring_cap - c->ring_head;
            memcpy(r, c->ring + c->ring_head, first * sizeof *r);
            memcpy(r + first, c->ring, c->ring_head * sizeof *r);
            free(c->ring);
            c->ring = r;
            c->ring_head = 0;
            c->ring_cap *= 2;
        }
    }
    acked_id a = {0};
    /* rid was checked when it was taken (sluicei_rid_check). */
    size_t len = strlen(rid), base = len;
    int padding = 0;
    sluice_batch_id id = {0};
    uint64_t pad = 0;
    sluicei_rid_check(rid, len, &base, &padding);
    sluicei_batch_id_parse(rid, base, &id);
    if (padding)   /* ":pad<k>" */
        sluicei_parse_u64(rid + base + 4, len - base - 4, UINT32_MAX, &pad);
    a.e = id.epoch;
    a.t = id.task;
    a.seq = id.seq;
    a.pad = (uint32_t)pad;
    a.ms = now;
    c->ring[(c->ring_head + c->ring_len) % c->ring_cap] = a;
    if (c->ring_len == c->ring_cap)
        c->ring_head = (c->ring_head + 1) % c->ring_cap;
    else
        c->ring_len++;
}

/* Confirms one id: out of unconf (its first copy), into the ring. */
static void confirm_one(sluice_consumer *c, const char *id)
{
    for (size_t i = 0; i < c->nunconf; i++)
        if (strcmp(c->unconf[i].s, id) == 0) {
            ring_add(c, id);
            memmove(c->unconf + i, c->unconf + i + 1, (c->nunconf - i - 1) * sizeof *c->unconf);
            c->nunconf--;
            return;
        }
}

void recover_confirm_acks(sluice_consumer *c, const idbuf *ids, size_t n)
{
    /* Acks are sent, and so confirmed, in the order of unconf: the ids
     * are usually its first n, which leave with one move (one by one,
     * each move of the rest would make a window of acks quadratic). */
    size_t k = 0;
    while (k < n && k < c->nunconf && strcmp(c->unconf[k].s, ids[k].s) == 0)
        ring_add(c, ids[k++].s);
    if (k) {
        memmove(c->unconf, c->unconf + k, (c->nunconf - k) * sizeof *c->unconf);
        c->nunconf -= k;
    }
    for (; k < n; k++)
        confirm_one(c, ids[k].s);
}

/* At the start of every session, before anything is taken: the restore
 * script (restore.lua) with what the application holds ("held") and what
 * it acknowledged lately ("acked": released but not yet sent, sent but
 * not confirmed, and confirmed in the RESTORE_MS before the last reply of
 * the last session that had restored), in chunks; at least one call,
 * empty if need be: it is also how a restarted Redis is noticed (the
 * script then holds takes back until the consumers it knew restored). */
void recover_restore(sluice_consumer *c)
{
    size_t nout = 0, nrel = 0, cap = 0;
    idbuf *mine = NULL;
    mu_lock(c);
    if ((c->nout || c->nacks) && !grow((void **)&mine, &cap, c->nout + c->nacks, sizeof *mine)) {
        for (; nout < c->nout; nout++)
            memcpy(mine[nout].s, c->out[nout].rid, RID_MAX);
        for (; nrel < c->nacks; nrel++)
            memcpy(mine[nout + nrel].s, c->acks[nrel].s, RID_MAX);
    }
    mu_unlock(c);
    int64_t since = c->contact_ms - RESTORE_MS;
    size_t total = nout + nrel + c->nunconf + c->ring_len, sent = 0;
    const char **argv = malloc((5 + 2 * RESTORE_CHUNK) * sizeof *argv);
    idbuf *txt = malloc(RESTORE_CHUNK * sizeof *txt);
    c->need_restore = 0;
    if (!argv || !txt) {
        free(argv);
        free(txt);
        free(mine);
        session_fail(c, "out of memory");
        return;
    }
    c->op = OP_RESTORE;
    uint64_t gen = c->gen;
    int calls = 0;
    while ((sent < total || calls == 0) && gen == c->gen) {
        int k = 5, nt = 0;
        argv[0] = c->id;
        argv[1] = c->tok;
        argv[2] = c->registered ? "0" : "1";
        argv[3] = c->rank_s;
        argv[4] = c->owner;
        for (; sent < total && k < 5 + 2 * RESTORE_CHUNK; sent++) {
            size_t i = sent;
            if (i < nout + nrel) {
                argv[k++] = i < nout ? "held" : "acked";
                argv[k++] = mine[i].s;
                continue;
            }
            i -= nout + nrel;
            if (i < c->nunconf) {
                argv[k++] = "acked";
                argv[k++] = c->unconf[i].s;
                continue;
            }
            i -= c->nunconf;
            const acked_id *a = &c->ring[(c->ring_head + i) % c->ring_cap];
            if (a->ms >= since) {
                char *b = txt[nt++].s;
                int n = snprintf(b, RID_MAX, "%" PRIu32 ":%" PRIu64 ":%" PRIu32, a->e, a->t,
                                 a->seq);
                if (a->pad)
                    snprintf(b + n, (size_t)(RID_MAX - n), ":pad%" PRIu32, a->pad);
                argv[k++] = "acked";
                argv[k++] = b;
            }
        }
        send_script(c, CONN_DATA, send_req_new(c, R_RESTORE, -1), 1, SLUICEI_SCRIPT_RESTORE, k,
                    argv);
        calls++;
    }
    free(argv);
    free(txt);
    free(mine);
}

/* Whether an id in pending:<cid> is accounted for in this process. */
static int known_locally(sluice_consumer *c, const char *s, size_t len)
{
    char id[RID_MAX];
    if (len >= RID_MAX)
        return 0;
    copy_id(id, s, len);
    for (size_t i = 0; i < c->nunconf; i++)
        if (strcmp(c->unconf[i].s, id) == 0)
            return 1;
    for (size_t i = 0; i < c->nrecover; i++)
        if (strcmp(c->recover[i].s, id) == 0)
            return 1;
    int found = 0;
    mu_lock(c);
    for (int i = 0; i < c->fifo_len && !found; i++)
        found = strcmp(c->fifo[(c->fifo_head + i) % c->prefetch].rid, id) == 0;
    for (size_t i = 0; i < c->nout && !found; i++)
        found = strcmp(c->out[i].rid, id) == 0;
    for (size_t i = 0; i < c->nacks && !found; i++)
        found = strcmp(c->acks[i].s, id) == 0;
    mu_unlock(c);
    return found;
}

void recover_resync_reply(sluice_consumer *c, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY) {
        session_fail(c, "redis %s: LRANGE %s: %s", c->addr, c->k_pending,
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return;
    }
    c->nrecover = 0;
    uint64_t gen = c->gen;
    /* pending:<cid> is filled at the left: the oldest is at the right. */
    for (size_t i = r->elements; i-- > 0 && gen == c->gen;) {
        redisReply *id = r->element[i];
        uint32_t me;
        size_t base;
        int pad;
        if (id->type != REDIS_REPLY_STRING || known_locally(c, id->str, id->len))
            continue;
        if (!sluicei_marker_parse(id->str, id->len, &me) &&
            !sluicei_rid_check(id->str, id->len, &base, &pad)) {
            send_dead(c, id->str, id->len, "not a batch id");
            continue;
        }
        if (grow((void **)&c->recover, &c->recover_cap, c->nrecover + 1, sizeof *c->recover)) {
            session_fail(c, "out of memory");
            return;
        }
        copy_id(c->recover[c->nrecover++].s, id->str, id->len);
    }
}

/* Claims and fetches ids found in pending:<cid> that never arrived. */
void recover_fetch(sluice_consumer *c, int room)
{
    size_t k = c->nrecover < (size_t)room ? c->nrecover : (size_t)room;
    char ep[16];
    const char *argv[6];
    c->op = OP_RECOVER;
    uint64_t gen = c->gen;
    int n = 0;
    for (size_t i = 0; i < k && gen == c->gen; i++) {
        const char *rid = c->recover[i].s;
        uint32_t me;
        if (sluicei_marker_parse(rid, strlen(rid), &me)) {
            /* A marker a lost BLMOVE moved: claim puts it back. */
            fetch_claim_args(c, rid, me, ep, argv);
            send_script(c, CONN_DATA, send_req_new(c, R_CLAIM, -1), 1, SLUICEI_SCRIPT_CLAIM, 6,
                        argv);
            continue;
        }
        memcpy(c->items[n].rid, rid, RID_MAX);
        c->items[n].dlv = 1;
        fetch_claim_args(c, c->items[n].rid, c->loop_epoch, ep, argv);
        send_script(c, CONN_DATA, send_req_new(c, R_CLAIM, n), 1, SLUICEI_SCRIPT_CLAIM, 6, argv);
        n++;
    }
    if (gen == c->gen && send_wait(c) == 0)
        fetch_items(c, 0, n);
    if (gen != c->gen)
        return;
    memmove(c->recover, c->recover + k, (c->nrecover - k) * sizeof *c->recover);
    c->nrecover -= k;
}

/* Close, once the data connection is idle: the last acks, then requeue of
 * everything still held, with the ids the application still has named,
 * so that their delivery counts even if a mark did not arrive yet. */
void recover_close_step(sluice_consumer *c)
{
    if (c->requeue_sent || c->state != ST_READY)
        return;
    if (c->op != OP_NONE) {
        if (c->blocking && !c->unblock_sent && c->data_client_id > 0) {
            char id[24];
            snprintf(id, sizeof id, "%lld", c->data_client_id);
            const char *av[3] = {"CLIENT", "UNBLOCK", id};
            if (send_argv(c, CONN_CTL, send_req_new(c, R_UNBLOCK, -1), 0, 3, av, NULL) == 0)
                c->unblock_sent = 1;
        }
        return;
    }
    if (c->pend[CONN_CTL] > 0)
        return;   /* acks in flight must land before requeue */
    if (c->nunconf &&
        send_acks(c, CONN_DATA, R_ACK, 0, c->unconf[0].s, sizeof *c->unconf, c->nunconf) != 0)
        return;
    mu_lock(c);
    int n = (int)c->nout;
    const char **argv = malloc((size_t)(n + 2) * sizeof *argv);
    if (argv) {
        argv[0] = c->id;
        argv[1] = c->tok;
        for (int i = 0; i < n; i++)
            argv[2 + i] = c->out[i].rid;
    }
    mu_unlock(c);
    if (!argv) {
        event_base_loopbreak(c->base);   /* what we hold comes back after the lease */
        return;
    }
    /* out does not change any more: close() runs alone (consumer.h). The
     * marks go first: one landing after the requeue would mark a batch
     * that is back in its list. */
    session_hand_flush(c);
    if (send_script(c, CONN_DATA, send_req_new(c, R_REQUEUE, -1), 0, SLUICEI_SCRIPT_REQUEUE, n + 2,
                    argv) == 0)
        c->requeue_sent = 1;
    free(argv);
}
