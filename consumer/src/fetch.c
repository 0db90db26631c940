/* The data operations that bring batches in: take (the script) and
 * BLMOVE when the list was empty, then GET or MGET of what they moved
 * into pending:<cid>, and at most once their acks right behind. */
#include "consumer_internal.h"

#include <inttypes.h>
#include <stdio.h>

/* Frame bytes the GETs on their way may bring at most. A GET sent at
 * once for every frame a take moved would have Redis build all their
 * replies before the first has left, in memory it faults in anew each
 * time (at 64 KiB, a third of its CPU went to MGET). Enough to cover the
 * round trip at FETCH_RATE keeps a slow link full. */
static size_t fetch_cap(const sluice_consumer *c)
{
    size_t bdp = (size_t)c->rtt_min_us * FETCH_RATE;
    return bdp > FETCH_OUT_MIN ? bdp : FETCH_OUT_MIN;
}

/* At most once: acknowledges items[0..n) right behind their GETs (one
 * script call), so that the batches are gone from Redis on arrival. Until
 * the reply confirms it, the ack counts as unconfirmed: a session that
 * ends first sends it again, and its ids are not fetched a second time
 * from pending:<cid>. */
static int fetch_ack(sluice_consumer *c, int n)
{
    if (c->ack_mode != SLUICE_ACK_NONE || n == 0)
        return 0;
    if (grow((void **)&c->unconf, &c->unconf_cap, c->nunconf + (size_t)n, sizeof *c->unconf))
        return send_acks(c, CONN_DATA, R_ACK_QUIET, 1, c->items[0].rid, sizeof *c->items,
                         (size_t)n);
    for (int i = 0; i < n; i++)
        memcpy(c->unconf[c->nunconf++].s, c->items[i].rid, RID_MAX);
    return send_acks(c, CONN_DATA, R_ACK, 1, c->items[0].rid, sizeof *c->items, (size_t)n);
}

/* Sends the GETs of the items still to fetch (GET b:<id> for one, MGET
 * for several, as many per command as FETCH_BYTES allows, estimated from
 * the last frame) while the frame bytes on their way are under
 * fetch_cap() (the last one sent may pass it); the reply of each sends
 * more. Once the last is sent, an
 * at-most-once consumer's ack follows. Returns -1 when the session
 * ended. */
int fetch_more(sluice_consumer *c)
{
    size_t est = c->frame_est ? c->frame_est : 1;
    int per = est >= FETCH_BYTES ? 1 : (int)(FETCH_BYTES / est);
    size_t plen = strlen(c->k_frame), cap = fetch_cap(c);
    while (c->fetch_next < c->fetch_end && c->fetch_out < cap) {
        int from = c->fetch_next, left = c->fetch_end - from;
        int k = left < per ? left : per;
        size_t total = 0;
        for (int i = 0; i < k; i++)
            total += plen + strlen(c->items[from + i].rid) + 1;
        req *q = send_req_new(c, R_FRAME, from);
        if (grow((void **)&c->fetch_keys, &c->fetch_keys_cap, total, 1) ||
            grow((void **)&c->fetch_av, &c->fetch_av_cap, (size_t)k + 1, sizeof *c->fetch_av) ||
            !q) {
            send_req_free(q);
            session_fail(c, "out of memory");
            return -1;
        }
        q->nitems = k;
        q->bytes = (size_t)k * est;
        const char **av = c->fetch_av;
        char *kp = c->fetch_keys;
        av[0] = k == 1 ? "GET" : "MGET";
        for (int i = 0; i < k; i++) {
            av[1 + i] = kp;
            kp += sprintf(kp, "%s%s", c->k_frame, c->items[from + i].rid) + 1;
        }
        if (send_argv(c, CONN_DATA, q, 1, k + 1, av, NULL) != 0)
            return -1;
        c->fetch_out += (size_t)k * est;   /* q->bytes: q is hiredis's now */
        c->fetch_next += k;
    }
    if (c->fetch_next < c->fetch_end || !c->fetch_ack_n)
        return 0;
    int n = c->fetch_ack_n;
    c->fetch_ack_n = 0;
    return fetch_ack(c, n);
}

/* Fetches items[from..from+n) (fetch_more), then, at most once,
 * acknowledges items[0..from+n). Returns -1 when the session ended. */
int fetch_items(sluice_consumer *c, int from, int n)
{
    c->fetch_next = from;
    c->fetch_end = from + n;
    c->fetch_ack_n = from + n;
    return fetch_more(c);
}

/* The claim script's ARGV for id (a NUL-free string) taken from the list
 * of epoch ep; bufs holds the numbers. */
void fetch_claim_args(sluice_consumer *c, const char *id, uint32_t ep, char epbuf[16],
                      const char *argv[6])
{
    snprintf(epbuf, 16, "%" PRIu32, ep);
    argv[0] = c->id;
    argv[1] = c->tok;
    argv[2] = c->registered ? "0" : "1";
    argv[3] = id;
    argv[4] = epbuf;
    argv[5] = c->rank_s;
}

void fetch_take(sluice_consumer *c, int room)
{
    char n[16], ep[16];
    snprintf(n, sizeof n, "%d", room);
    snprintf(ep, sizeof ep, "%" PRIu32, c->loop_epoch);
    c->items[0].dlv = room;   /* read back by handle_take before it is overwritten */
    const char *argv[6] = {c->id, c->tok, c->registered ? "0" : "1", n, ep, c->rank_s};
    c->op = OP_TAKE;
    req *q = send_req_new(c, R_TAKE, -1);
    if (send_script(c, CONN_DATA, q, 1, SLUICEI_SCRIPT_TAKE, 6, argv) == 0)
        send_wait(c);
}

/* Whether a BLMOVE sent now ends, at the latest, while the lease surely
 * runs: what it moves into pending:<cid> then belongs to a consumer that
 * any later reaper finds (lib.lua: give_back). Otherwise a take renews
 * the lease first. */
int fetch_blmove_safe(sluice_consumer *c)
{
    mu_lock(c);
    int ok = sluicei_now_ms() + c->block_ms < c->lease_until;
    mu_unlock(c);
    return ok;
}

void fetch_blmove(sluice_consumer *c)
{
    char src[SLUICE_MAX_KEY];
    sluicei_key_ready(src, c->queue, c->loop_epoch, c->rank_s[0] ? c->rank : -1);
    const char *av[6] = {"BLMOVE", src, c->k_pending, "RIGHT", "LEFT", c->block_arg};
    c->op = OP_BLMOVE;
    if (send_argv(c, CONN_DATA, send_req_new(c, R_BLMOVE, -1), 1, 6, av, NULL) == 0)
        send_wait(c);
}
