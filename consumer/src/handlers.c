/* The replies: take, BLMOVE, claim, the frames (decoded into batches and
 * put in the FIFO), the end-of-epoch sequence (job, failed tasks and
 * their errors), ROLE, beat, and the errors every script call shares
 * (a lost lease among them); handle_reply() dispatches by request kind. */
#include "consumer_internal.h"

#include <inttypes.h>
#include <stdio.h>

/* Redis says this consumer lost its lease (LEASELOST): the batches it
 * held went back to the queue. Drops what it prefetched (next() would
 * hand out batches that are others' now) and starts a new session, which
 * registers afresh and reads what its pending list holds. */
static void lease_lost(sluice_consumer *c, const char *msg)
{
    sluice_consumer *t = c->top;
    mu_lock(c);
    /* At most once, they are acknowledged already: nobody else gets them.
     * The duplicate filter (the loop's) forgets them: they were never the
     * application's, and when they come again they are new to it. */
    while (c->fifo_len > 0 && c->ack_mode == SLUICE_ACK_EXPLICIT) {
        dups_del(c, c->fifo[c->fifo_head].rid);
        c->fifo_bytes -= c->fifo[c->fifo_head].b->frame_bytes;
        sluice_batch_free(c->fifo[c->fifo_head].b);
        c->fifo_head = (c->fifo_head + 1) % c->prefetch;
        c->fifo_len--;
    }
    c->lease_until = 0;
    snprintf(t->note, sizeof t->note, "%s", msg);
    t->note_seq++;
    mu_unlock(c);
    c->registered = 0;
    session_fail(c, "%s", msg);
}

/* A renewal sent at sent_ms was confirmed: the lease runs at least until
 * sent_ms + lease on this host's monotonic clock (Redis renewed it later);
 * next() and BLMOVE rely on it up to max(lease/4, HAND_MARGIN_MS) before. */
static void lease_renewed(sluice_consumer *c, int64_t sent_ms)
{
    int64_t margin = c->lease_ms / 4 > HAND_MARGIN_MS ? c->lease_ms / 4 : HAND_MARGIN_MS;
    int64_t until = sent_ms + c->lease_ms - margin;
    c->registered = 1;
    mu_lock(c);
    if (until > c->lease_until)
        c->lease_until = until;
    if (c->want_lease) {
        c->want_lease = 0;
        cv_broadcast(c);
    }
    mu_unlock(c);
}

/* Errors every script call shares: lost scripts, a deleted queue, a lost
 * lease, a refused permission. Returns 1 when r was one of them (and was
 * dealt with). */
static int script_error(sluice_consumer *c, const char *what, redisReply *r)
{
    if (r->type != REDIS_REPLY_ERROR)
        return 0;
    if (is_err(r, "LEASELOST ")) {
        lease_lost(c, r->str + 10);
    } else if (is_err(r, "HELD ")) {
        /* "HELD <holder> <seen_ms> <text>": another process took this id. */
        const char *text = r->str + 5;
        for (int k = 0; k < 2 && strchr(text, ' '); k++)
            text = strchr(text, ' ') + 1;
        loop_fatal(c, SLUICE_ERR_BUSY, "%s", text);
        session_fail(c, "%s", text);
    } else if (sluicei_reply_error_code(r) == SLUICE_ERR_AUTH) {
        loop_fatal(c, SLUICE_ERR_AUTH, "redis %s: permission refused: %s: %s", c->addr, what,
                   r->str);
        session_fail(c, "redis %s: %s: %s", c->addr, what, r->str);
    } else if (sluicei_cluster_retryable(r->str, r->len)) {
        /* The queue's slot is elsewhere or moving: the next session finds
         * its node again and sends the same call (scripts write nothing
         * before such an error). */
        session_fail(c, "redis %s: %s: %s", c->addr, what, r->str);
    } else if (is_err(r, "NOSCRIPT")) {
        /* SCRIPT FLUSH on the server: a new session loads them again. */
        session_fail(c, "redis %s: %s: %s", c->addr, what, r->str);
    } else if (sluicei_reply_error_code(r) == SLUICE_ERR_NOQUEUE) {
        loop_fatal(c, SLUICE_ERR_NOQUEUE, "queue '%s' does not exist any more", c->queue);
    } else {
        session_fail(c, "redis %s: %s: %s", c->addr, what, r->str);
    }
    return 1;
}

/* The marker of the loop's epoch was reached: stop fetching and read,
 * behind the GETs of the batches before the marker, what the end says:
 * the job's number of epochs, and how many tasks of the epoch failed
 * (then which: publish_marker() once known). */
static int reached_marker(sluice_consumer *c)
{
    char field[32];
    c->stopped_at_marker = 1;
    c->mk_epoch = c->loop_epoch;
    snprintf(field, sizeof field, "%" PRIu32 ":failed_tasks", c->loop_epoch);
    char k_estats[SLUICE_MAX_KEY];
    sluicei_key(k_estats, c->queue, "estats");
    const char *av[4] = {"HMGET", c->k_jrun, "epochs", "epoch_open"};
    const char *ef[3] = {"HGET", k_estats, field};
    if (send_argv(c, CONN_DATA, send_req_new(c, R_JOB, -1), 1, 4, av, NULL) != 0)
        return -1;
    return send_argv(c, CONN_DATA, send_req_new(c, R_EFAILED, -1), 1, 3, ef, NULL);
}

/* The end of the loop's epoch is known: next() may return it. */
static void publish_marker(sluice_consumer *c, const char *desc)
{
    c->marker_published = 1;
    mu_lock(c);
    c->at_marker = 1;
    c->marker_last = c->mk_last;
    c->mk_failed = c->mk_nfailed;
    snprintf(c->mk_desc, sizeof c->mk_desc, "%s", desc);
    cv_broadcast(c);
    mu_unlock(c);
}

/* Copies the id s[0..len) into items[*n] (counting it) when it is a batch
 * id; else sends it to the dead letters as it is. */
static void add_item(sluice_consumer *c, const char *s, size_t len, long long dlv, int *n)
{
    size_t base;
    int pad;
    if (!sluicei_rid_check(s, len, &base, &pad)) {
        send_dead(c, s, len, "not a batch id");
        return;
    }
    copy_id(c->items[*n].rid, s, len);
    c->items[*n].dlv = dlv;
    (*n)++;
}

/* A take the window cut short got all it asked for: when the application
 * already waits for the next batch, the window did not cover the time its
 * frames take to come (the round trips), and doubles. */
static void window_grow(sluice_consumer *c)
{
    mu_lock(c);
    if (c->top->waiting && c->win < c->win_max)
        c->win = c->win <= c->win_max / 2 ? c->win * 2 : c->win_max;
    mu_unlock(c);
}

static void handle_take(sluice_consumer *c, req *q, redisReply *r)
{
    if (is_err(r, "RECOVERING")) {
        /* Redis restarted: the consumers registered before it restore
         * what they did in its last seconds first (restore.lua). */
        lease_renewed(c, q->sent_ms);
        mu_lock(c);
        c->recovering = 1;
        mu_unlock(c);
        c->oom_wait = 1;
        loop_arm(c->oom_ev, RECOVER_POLL_MS);
        return;
    }
    if (c->recovering) {
        mu_lock(c);
        c->recovering = 0;
        mu_unlock(c);
    }
    if (script_error(c, "take", r))
        return;
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2) {
        loop_fatal(c, SLUICE_ERR_PROTOCOL, "take: unexpected reply (type %d)", r->type);
        return;
    }
    lease_renewed(c, q->sent_ms);
    size_t want = (size_t)c->items[0].dlv;   /* stashed by fetch_take */
    int n = 0, marker = 0;
    uint64_t gen = c->gen;
    for (size_t i = 0; i + 1 < r->elements && gen == c->gen; i += 2) {
        redisReply *id = r->element[i], *d = r->element[i + 1];
        uint32_t me;
        if (id->type != REDIS_REPLY_STRING || d->type != REDIS_REPLY_INTEGER) {
            loop_fatal(c, SLUICE_ERR_PROTOCOL, "take: unexpected element types");
            return;
        }
        if (sluicei_marker_parse(id->str, id->len, &me)) {
            marker = me == c->loop_epoch;   /* the script returns only that one */
            break;
        }
        if (n >= c->prefetch) {
            loop_fatal(c, SLUICE_ERR_PROTOCOL, "take: more ids than asked for");
            return;
        }
        add_item(c, id->str, id->len, d->integer, &n);
    }
    if (gen == c->gen)
        fetch_items(c, 0, n);
    if (gen != c->gen)
        return;
    /* A take that got something takes again (in the same two round
     * trips it brings what came meanwhile); one that got nothing blocks
     * in BLMOVE, which wakes with the next push. */
    c->list_empty = !marker && n == 0;
    if (!marker && r->elements / 2 >= want && c->take_cut)
        window_grow(c);
    if (marker)
        reached_marker(c);
}

static void handle_blmove(sluice_consumer *c, redisReply *r)
{
    if (r->type == REDIS_REPLY_NIL) {
        /* Nothing within block_ms: take once before blocking again, which
         * also notices a queue deleted meanwhile. */
        c->list_empty = 0;
        return;
    }
    if (is_err(r, "OOM")) {
        /* BLMOVE is refused at maxmemory; take is not. */
        c->oom_wait = 1;
        c->list_empty = 0;
        loop_arm(c->oom_ev, OOM_POLL_MS);
        return;
    }
    if (r->type != REDIS_REPLY_STRING) {
        session_fail(c, "redis %s: BLMOVE: %s", c->addr,
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return;
    }
    c->list_empty = 0;
    if (c->close_deadline_ms)
        return;   /* stays in pending:<cid>; requeue hands it back */
    char ep[16];
    const char *argv[6];
    uint32_t me;
    if (sluicei_marker_parse(r->str, r->len, &me)) {
        /* claim puts a true end marker back for the other consumers (0),
         * and sends any other to the dead letters (-1). */
        char mk[RID_MAX];
        copy_id(mk, r->str, r->len);
        fetch_claim_args(c, mk, c->loop_epoch, ep, argv);
        req *q = send_req_new(c, R_CLAIM, -1);
        if (q)
            q->nitems = 1;   /* a marker */
        if (send_script(c, CONN_DATA, q, 1, SLUICEI_SCRIPT_CLAIM, 6, argv) == 0)
            send_wait(c);
        return;
    }
    int n = 0;
    add_item(c, r->str, r->len, 1, &n);
    if (n == 0)
        return;
    fetch_claim_args(c, c->items[0].rid, c->loop_epoch, ep, argv);
    req *q = send_req_new(c, R_CLAIM, 0);
    if (send_script(c, CONN_DATA, q, 1, SLUICEI_SCRIPT_CLAIM, 6, argv) == 0 &&
        send_wait(c) == 0)
        fetch_items(c, 0, 1);
}

/* The claim script's answer: the delivery count of an item, -1 when it
 * went to the dead letters (its GET is ignored); for a marker 0 when it is
 * the true end of the loop's epoch. */
static void handle_claim(sluice_consumer *c, req *q, redisReply *r)
{
    if (script_error(c, "claim", r))
        return;
    if (r->type != REDIS_REPLY_INTEGER) {
        loop_fatal(c, SLUICE_ERR_PROTOCOL, "claim: unexpected reply (type %d)", r->type);
        return;
    }
    lease_renewed(c, q->sent_ms);
    if (q->item >= 0)
        c->items[q->item].dlv = r->integer;
    else if (q->nitems == 1 && r->integer == 0)
        reached_marker(c);
}

/* Reply r to the GET of items[i] (or its element of an MGET reply). */
static void handle_frame(sluice_consumer *c, int i, redisReply *r)
{
    item *it = &c->items[i];
    char why[256];
    if (it->dlv < 0)
        return;   /* claim sent it to the dead letters */
    if (r->type == REDIS_REPLY_NIL) {
        send_dead(c, it->rid, strlen(it->rid), "no data in Redis for this id");
        return;
    }
    if (is_err(r, "WRONGTYPE")) {
        send_dead(c, it->rid, strlen(it->rid), "the value in Redis for this id is not a string");
        return;
    }
    if (r->type != REDIS_REPLY_STRING) {
        session_fail(c, "redis %s: GET: %s", c->addr,
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return;
    }
    /* The batch takes over the frame's bytes from the reply hiredis is
     * about to free and points into them (zero copy); sluice_batch_free()
     * gives them to the buffer cache, for the frames to come. */
    char *frame = r->str;
    size_t flen = r->len;
    r->str = NULL;
    r->len = 0;
    c->frame_est = flen;
    sluice_batch *b = NULL;
    sluice_err e = sluicei_zframe_decode(c->zpool, frame, flen, c->max_batch_bytes,
                                         sizeof(delivery), sluicei_bufcache_put, frame, &b, why,
                                         sizeof why);
    if (e != SLUICE_OK) {
        sluicei_bufcache_put(frame);
        send_dead(c, it->rid, strlen(it->rid), why);
        return;
    }
    c->mem_est = b->frame_bytes;
    /* The frame must carry the id it is stored under (a padding copy: the
     * id it copies). */
    int padding = 0;
    size_t bl = 0;
    sluicei_rid_check(it->rid, strlen(it->rid), &bl, &padding);   /* checked by add_item */
    char s[SLUICE_MAX_BATCH_ID];
    sluicei_batch_id_str(s, b->id);
    if (strlen(s) != bl || memcmp(s, it->rid, bl) != 0) {
        snprintf(why, sizeof why, "the frame carries the id %s", s);
        sluice_batch_free(b);
        send_dead(c, it->rid, strlen(it->rid), why);
        return;
    }
    if (dups_seen(c, it->rid)) {
        /* Delivered by this consumer in this epoch already: its lease ran
         * out while the batch was held, say, and it took the batch back.
         * The copy the application holds stays the one that counts: its
         * release acknowledges the id, which pending:<cid> holds again, so
         * it is marked handed once more. One the application released is
         * acknowledged now: never one it still holds. */
        sluice_batch_free(b);
        int held = 0, queued = 0;
        mu_lock(c);
        c->st.duplicates++;
        for (size_t k = 0; k < c->nout && !held; k++)
            held = strcmp(c->out[k].rid, it->rid) == 0;
        for (int k = 0; k < c->fifo_len && !queued; k++)
            queued = strcmp(c->fifo[(c->fifo_head + k) % c->prefetch].rid, it->rid) == 0;
        mu_unlock(c);
        if (c->ack_mode != SLUICE_ACK_EXPLICIT || queued)
            return;
        if (held) {
            char key[SLUICE_MAX_KEY + RID_MAX];
            snprintf(key, sizeof key, "%s%s", c->k_frame, it->rid);
            const char *av[3] = {"PEXPIREAT", key, SLUICEI_HANDED_AT};
            send_argv(c, CONN_DATA, send_req_new(c, R_MARK, -1), 1, 3, av, NULL);
        } else {
            send_acks(c, CONN_DATA, R_ACK_QUIET, 1, it->rid, RID_MAX, 1);
        }
        return;
    }
    dups_add(c, it->rid);
    delivery *d = delivery_of(b);
    d->deliveries = it->dlv > 0 && it->dlv <= UINT32_MAX ? (uint32_t)it->dlv : 1;
    d->padding = padding;
    /* At most once: the batch is acknowledged already; release() only frees. */
    d->consumer = c->ack_mode == SLUICE_ACK_EXPLICIT ? c : NULL;
    d->acked = c->ack_mode != SLUICE_ACK_EXPLICIT;
    mu_lock(c);
    slot *sl = &c->fifo[(c->fifo_head + c->fifo_len) % c->prefetch];
    sl->b = b;
    memcpy(sl->rid, it->rid, sizeof sl->rid);
    c->fifo_len++;   /* room: an operation never asks for more than the free slots */
    c->fifo_bytes += b->frame_bytes;
    int signal = c->top->waiting && !c->notify_armed;
    mu_unlock(c);
    if (signal) {
        /* One wake-up for all the batches of this read: notify_ev runs
         * once hiredis is done with the replies it has. */
        c->notify_armed = 1;
        event_active(c->notify_ev, EV_TIMEOUT, 1);
    }
}

/* The reply to a GET or MGET of q->nitems items from q->item. */
static void handle_frames(sluice_consumer *c, req *q, redisReply *r)
{
    c->fetch_out = c->fetch_out > q->bytes ? c->fetch_out - q->bytes : 0;
    uint64_t gen = c->gen;
    if (q->nitems == 1 && r->type != REDIS_REPLY_ARRAY) {
        handle_frame(c, q->item, r);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)q->nitems) {
        session_fail(c, "redis %s: MGET: %s", c->addr,
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    } else {
        for (int i = 0; i < q->nitems && gen == c->gen; i++)
            handle_frame(c, q->item + i, r->element[i]);
    }
    if (gen == c->gen)
        fetch_more(c);
}

/* An answer of the marker sequence that is an error reply (MOVED,
 * LOADING...): the next session's take sees the marker again and asks
 * again. Returns 1 when r was one. */
static int marker_error(sluice_consumer *c, const char *what, redisReply *r)
{
    if (r->type != REDIS_REPLY_ERROR)
        return 0;
    session_fail(c, "redis %s: %s: %s", c->addr, what, r->str);
    return 1;
}

static void handle_job(sluice_consumer *c, redisReply *r)
{
    if (marker_error(c, "HMGET job", r))
        return;
    long long epochs = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1)
        epochs = reply_num(r->element[0], 0);
    c->mk_last = epochs > 0 && (long long)c->mk_epoch + 1 >= epochs;
}

/* How many tasks of the marker's epoch failed: none ends the sequence;
 * else the failed list says which. */
static void handle_efailed(sluice_consumer *c, redisReply *r)
{
    if (marker_error(c, "HGET estats", r))
        return;
    long long n = reply_num(r, 0);
    c->mk_nfailed = n > 0 && n <= UINT32_MAX ? (uint32_t)n : 0;
    if (c->mk_nfailed == 0) {
        publish_marker(c, "");
        return;
    }
    char k_failed[SLUICE_MAX_KEY];
    sluicei_key(k_failed, c->queue, "failed");
    const char *av[4] = {"LRANGE", k_failed, "0", "9999"};
    send_argv(c, CONN_DATA, send_req_new(c, R_FAILED, -1), 1, 4, av, NULL);
}

/* The tasks that failed, of every epoch: up to 8 of the marker's epoch
 * have their errors read (R_TERR, their names in the request). */
#define FAILED_NAMED 8
static void handle_failed(sluice_consumer *c, redisReply *r)
{
    if (marker_error(c, "LRANGE failed", r))
        return;
    char pfx[16];
    int pl = snprintf(pfx, sizeof pfx, "%" PRIu32 ":", c->mk_epoch);
    req *q = send_req_new(c, R_TERR, -1);
    if (q && grow((void **)&q->ids, &q->ids_cap, FAILED_NAMED, sizeof *q->ids)) {
        send_req_free(q);
        q = NULL;
    }
    for (size_t i = 0; q && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *t = r->element[i];
        if (q->nids < FAILED_NAMED && t->type == REDIS_REPLY_STRING &&
            t->len < RID_MAX && t->len > (size_t)pl && memcmp(t->str, pfx, (size_t)pl) == 0)
            copy_id(q->ids[q->nids++].s, t->str, t->len);
    }
    if (!q || q->nids == 0) {
        send_req_free(q);
        publish_marker(c, "");
        return;
    }
    char k_terr[SLUICE_MAX_KEY];
    sluicei_key(k_terr, c->queue, "terr");
    const char *av[2 + FAILED_NAMED] = {"HMGET", k_terr};
    for (size_t i = 0; i < q->nids; i++)
        av[2 + i] = q->ids[i].s;
    send_argv(c, CONN_DATA, q, 1, (int)(2 + q->nids), av, NULL);
}

/* Their errors: "0:4 (exec: ... exited with status 1); 0:7 (...)". */
static void handle_terr(sluice_consumer *c, req *q, redisReply *r)
{
    if (marker_error(c, "HMGET terr", r))
        return;
    char desc[sizeof c->mk_desc] = "";
    size_t len = 0;
    for (size_t i = 0; i < q->nids; i++) {
        const char *err = r->type == REDIS_REPLY_ARRAY && i < r->elements &&
                                  r->element[i]->type == REDIS_REPLY_STRING
                              ? r->element[i]->str
                              : "no error recorded";
        int k = snprintf(desc + len, sizeof desc - len, "%s%s (%.160s)", i ? "; " : "",
                         q->ids[i].s, err);
        if (k < 0 || (size_t)k >= sizeof desc - len) {
            snprintf(desc + sizeof desc - 4, 4, "...");
            break;
        }
        len += (size_t)k;
    }
    if (c->mk_nfailed > q->nids && len + 8 < sizeof desc)
        snprintf(desc + len, sizeof desc - len, "; ...");
    publish_marker(c, desc);
}

/* ROLE of the data node: ["master", offset, [[ip, port, offset]...]]. A
 * WAIT can only count replicas that are connected: asking for more would
 * only make every take wait SLUICEI_WAIT_MS while a replica is down (and
 * give no safety), so each WAIT asks for as many as are connected, up to
 * url.wait_replicas. A node that is a replica now lost its slots in a
 * failover: the next session finds the new master. */
static void handle_role(sluice_consumer *c, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;   /* ROLE not allowed (ACL): WAIT as configured */
    if (strcmp(r->element[0]->str, "master") != 0) {
        session_fail(c, "redis %s: the node is a %s now", c->addr, r->element[0]->str);
        return;
    }
    int connected = r->elements >= 3 && r->element[2]->type == REDIS_REPLY_ARRAY
                        ? (int)r->element[2]->elements : 0;
    c->wait_now = connected < c->url.wait_replicas ? connected : c->url.wait_replicas;
}

/* A consumer's beat: {1, job state, producers alive}: the lease runs, and
 * what a waiting next() tells its user (sluice_consumer_wait_status). */
static void handle_beat(sluice_consumer *c, req *q, redisReply *r)
{
    lease_renewed(c, q->sent_ms);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[1]->type != REDIS_REPLY_STRING || r->element[2]->type != REDIS_REPLY_INTEGER)
        return;
    mu_lock(c);
    snprintf(c->job_state, sizeof c->job_state, "%s", r->element[1]->str);
    c->producers_alive = (int)r->element[2]->integer;
    mu_unlock(c);
}

void handle_reply(sluice_consumer *c, req *q, redisReply *r)
{
    switch (q->kind) {
    case R_SETUP:
    case R_CLIENT_ID:
        session_setup_reply(c, q, r);
        break;
    case R_TAKE:
        handle_take(c, q, r);
        break;
    case R_BLMOVE:
        handle_blmove(c, r);
        break;
    case R_CLAIM:
        handle_claim(c, q, r);
        break;
    case R_FRAME:
        handle_frames(c, q, r);
        break;
    case R_JOB:
        handle_job(c, r);
        break;
    case R_EFAILED:
        handle_efailed(c, r);
        break;
    case R_FAILED:
        handle_failed(c, r);
        break;
    case R_TERR:
        handle_terr(c, q, r);
        break;
    case R_RESTORE:
        if (!script_error(c, "restore", r))
            lease_renewed(c, q->sent_ms);
        break;
    case R_MARK:
        if (r->type == REDIS_REPLY_ERROR)
            session_fail(c, "redis %s: PEXPIREAT: %s", c->addr, r->str);
        break;
    case R_RESYNC:
        recover_resync_reply(c, r);
        break;
    case R_ACK: {
        /* Done, for every id: one the consumer no longer held (its lease
         * ran out and it went to someone else) needs nothing more. Only a
         * lost script, or a script that did not run on this node (its slot
         * moved), is worth another try. */
        int again = is_err(r, "NOSCRIPT") ||
                    (r->type == REDIS_REPLY_ERROR && sluicei_cluster_retryable(r->str, r->len));
        if (!again)
            recover_confirm_acks(c, q->ids, q->nids);
        if (!script_error(c, "ack", r))
            ckpt_pump(c);
        break;
    }
    case R_CKPT:
        /* INVALID is the checkpoint's own answer; anything else ends the
         * session, and the next one asks again (the same request). */
        if (r->type == REDIS_REPLY_ERROR && !is_err(r, "INVALID ")) {
            c->ckpt_inflight = 0;
            script_error(c, "checkpoint", r);
        } else {
            ckpt_reply(c, r);
        }
        break;
    case R_ACK_QUIET:
    case R_DEAD:
        script_error(c, q->kind == R_DEAD ? "dead" : "ack", r);
        break;
    case R_REQUEUE:
        if (!script_error(c, "requeue", r))
            event_base_loopbreak(c->base);
        break;
    case R_WAIT:
        /* Fewer replicas than asked within SLUICEI_WAIT_MS is no error:
         * the move stands; but a replica may be gone, so ROLE is asked
         * now rather than at its next period. An error (the node is a
         * replica now...) ends the session. */
        if (r->type == REDIS_REPLY_ERROR)
            session_fail(c, "redis %s: WAIT: %s", c->addr, r->str);
        else if (r->type == REDIS_REPLY_INTEGER && r->integer < c->wait_now)
            c->next_role_ms = 0;
        break;
    case R_ROLE:
        c->role_inflight = 0;
        handle_role(c, r);
        break;
    case R_BEAT:
        c->beat_inflight = 0;
        if (!script_error(c, "beat", r))
            handle_beat(c, q, r);
        break;
    case R_REAP:
        c->reap_inflight = 0;
        script_error(c, "reap", r);
        break;
    default:
        break;
    }
}
