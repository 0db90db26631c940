/* The consumer library: takes batches of a queue into this consumer's
 * pending list, hands them to the caller, acknowledges them on release and
 * gives back what it still holds at close. The key schema and the scripts
 * are in common/src/proto.c (docs/PROTOCOL.md).
 *
 * Where a batch is, from the consumer's point of view:
 *   ready (Redis) -> pending:<cid> (Redis) and then, locally, one of
 *     fifo     decoded, not yet returned by next()       (at most prefetch)
 *     out      returned by next(), not yet released
 *     acks     released, acknowledgement not yet confirmed by Redis
 *     recover  in pending:<cid> but in none of the above: the reply that
 *              moved it there was lost with the connection; fetched next.
 * A connection loss never loses a batch: whatever a lost reply moved is
 * still in pending:<cid>, and resync() finds it by elimination. */
#include <sluice/consumer.h>

#include "conn.h"
#include "proto.h"
#include "wire.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PREFETCH_DEFAULT 4
#define PREFETCH_MAX 1024
#define MAX_CONSUMER_ID 64
/* Longest single BLMOVE: between two, the take script refreshes the
 * consumer's last-seen time, and a dead connection shows within a slice. */
#define BLOCK_SLICE_MS 1000
#define BLOCK_MIN_MS 10
/* The socket timeout must outlast the blocking read, or hiredis treats the
 * server's silence as a dead connection. */
#define SOCKET_SLACK_MS 5000
/* Poll period of the take script while Redis refuses BLMOVE (OOM). */
#define OOM_POLL_MS 20
/* How long close() tries to regain a lost connection to hand batches back. */
#define CLOSE_RECONNECT_MS 1000

typedef struct idbuf {
    char s[SLUICE_MAX_BATCH_ID];
} idbuf;

struct sluice_consumer {
    sluicei_conn *conn;
    char queue[SLUICE_MAX_QUEUE_NAME + 1];
    char id[MAX_CONSUMER_ID + 1];
    char k_meta[SLUICE_MAX_KEY], k_ready[SLUICE_MAX_KEY], k_pending[SLUICE_MAX_KEY];
    char k_data[SLUICE_MAX_KEY], k_dlv[SLUICE_MAX_KEY], k_bytes[SLUICE_MAX_KEY];
    size_t max_batch_bytes;
    int prefetch;
    int reconnect_timeout_ms;   /* 0: forever */
    int lost;                   /* the connection must be regained first */
    int64_t lost_at_ms;         /* start of the current reconnect window, 0: none */

    sluice_batch **fifo;        /* ring of prefetch slots */
    int fifo_head, fifo_len;

    sluice_batch **out;         /* held by the caller */
    size_t nout, out_cap;

    /* ack_cap >= nacks + nout at all times, so release() never allocates. */
    sluice_batch_id *acks;
    size_t nacks, ack_cap;

    idbuf *recover;
    size_t nrecover, recover_cap;

    /* Scratch for one round, prefetch slots each (allocated once). */
    redisReply **replies;       /* HGET replies */
    const char **r_ids;         /* ids, pointing into a reply or r_held */
    size_t *r_lens;
    long long *r_dlv;           /* delivery counts */
    idbuf *r_held;              /* copies of recovered ids */
    sluice_consumer_stats st;
    char errstr[512];
};

/* ---- small helpers ---------------------------------------------------- */

static void set_err(sluice_consumer *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof c->errstr, fmt, ap);
    va_end(ap);
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int is_error(const redisReply *r, const char *prefix)
{
    return r && r->type == REDIS_REPLY_ERROR && r->str &&
           strncmp(r->str, prefix, strlen(prefix)) == 0;
}

/* Reads one pipelined reply. SLUICE_OK with *r set, possibly to an error
 * reply; any other result means the connection is gone (*r NULL). */
static sluice_err read_one(sluice_consumer *c, redisReply **r)
{
    sluice_err e = sluicei_conn_read_reply(c->conn, r);
    if (e == SLUICE_ERR_REDIS && *r)
        return SLUICE_OK;
    if (e != SLUICE_OK && *r) {
        freeReplyObject(*r);
        *r = NULL;
    }
    return e == SLUICE_OK ? SLUICE_OK : SLUICE_ERR_IO;
}

/* The scripts must be loaded before a pipeline starts: loading them inside
 * one would read the replies of the commands already appended. */
static sluice_err ensure_scripts(sluice_consumer *c)
{
    static const sluicei_script_id used[] = {SLUICEI_SCRIPT_TAKE, SLUICEI_SCRIPT_CLAIM,
                                             SLUICEI_SCRIPT_ACK, SLUICEI_SCRIPT_REQUEUE};
    for (size_t i = 0; i < sizeof used / sizeof used[0]; i++)
        if (c->conn->script_sha[used[i]][0] == '\0') {
            sluice_err e = sluicei_script_load(c->conn);
            if (e != SLUICE_OK && c->conn->ctx == NULL)
                return SLUICE_ERR_IO;
            if (e != SLUICE_OK)
                set_err(c, "%s", c->conn->errstr);
            return e;
        }
    return SLUICE_OK;
}

/* After NOSCRIPT (SCRIPT FLUSH on the server) every script is reloaded. */
static void forget_scripts(sluice_consumer *c)
{
    for (int i = 0; i < SLUICEI_SCRIPT_COUNT; i++)
        c->conn->script_sha[i][0] = '\0';
}

static int fifo_push(sluice_consumer *c, sluice_batch *b)
{
    if (c->fifo_len == c->prefetch)
        return -1;
    c->fifo[(c->fifo_head + c->fifo_len) % c->prefetch] = b;
    c->fifo_len++;
    return 0;
}

static sluice_batch *fifo_pop(sluice_consumer *c)
{
    sluice_batch *b = c->fifo[c->fifo_head];
    c->fifo_head = (c->fifo_head + 1) % c->prefetch;
    c->fifo_len--;
    return b;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 8;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* Appends an id (shorter than SLUICE_MAX_BATCH_ID) to the recover list. */
static sluice_err push_recover(sluice_consumer *c, const char *id, size_t len)
{
    if (grow((void **)&c->recover, &c->recover_cap, c->nrecover + 1, sizeof *c->recover)) {
        set_err(c, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    memcpy(c->recover[c->nrecover].s, id, len);
    c->recover[c->nrecover].s[len] = '\0';
    c->nrecover++;
    return SLUICE_OK;
}

static int id_equals(sluice_batch_id a, const char *s, size_t len)
{
    char buf[SLUICE_MAX_BATCH_ID];
    sluicei_batch_id_str(buf, a);
    return strlen(buf) == len && memcmp(buf, s, len) == 0;
}

/* Whether the id is somewhere in this process already (fifo, out, acks). */
static int known_locally(const sluice_consumer *c, const char *s, size_t len)
{
    for (int i = 0; i < c->fifo_len; i++)
        if (id_equals(c->fifo[(c->fifo_head + i) % c->prefetch]->id, s, len))
            return 1;
    for (size_t i = 0; i < c->nout; i++)
        if (id_equals(c->out[i]->id, s, len))
            return 1;
    for (size_t i = 0; i < c->nacks; i++)
        if (id_equals(c->acks[i], s, len))
            return 1;
    return 0;
}

/* ---- acknowledgements ------------------------------------------------- */

static sluice_err append_ack(sluice_consumer *c, sluice_batch_id id)
{
    char s[SLUICE_MAX_BATCH_ID], ep[16], tk[24], sq[16];
    sluicei_batch_id_str(s, id);
    snprintf(ep, sizeof ep, "%" PRIu32, id.epoch);
    snprintf(tk, sizeof tk, "%" PRIu64, id.task);
    snprintf(sq, sizeof sq, "%" PRIu32, id.seq);
    const char *argv[5] = {c->id, s, ep, tk, sq};
    return sluicei_script_append(c->conn, SLUICEI_SCRIPT_ACK, c->queue, 5, argv, NULL);
}

static sluice_err append_acks(sluice_consumer *c)
{
    for (size_t i = 0; i < c->nacks; i++) {
        sluice_err e = append_ack(c, c->acks[i]);
        if (e != SLUICE_OK)
            return SLUICE_ERR_IO;
    }
    return SLUICE_OK;
}

/* Reads the replies of the first n queued acks (appended earlier) and
 * forgets the confirmed ones. Acks whose reply was not read stay queued:
 * the ack script is idempotent, so sending one again is harmless. Sets
 * *again when the server had lost its scripts (they are reloaded by the
 * caller once the pipeline is drained). An error reply other than NOSCRIPT
 * keeps the ack and records the message (SLUICE_ERR_REDIS in *failed). */
static sluice_err read_acks(sluice_consumer *c, size_t n, int *again, sluice_err *failed)
{
    size_t keep = 0;
    for (size_t i = 0; i < n; i++) {
        redisReply *r;
        if (read_one(c, &r) != SLUICE_OK) {
            memmove(c->acks + keep, c->acks + i, (c->nacks - i) * sizeof *c->acks);
            c->nacks -= i - keep;
            return SLUICE_ERR_IO;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            c->acks[keep++] = c->acks[i];
            if (is_error(r, "NOSCRIPT")) {
                *again = 1;
            } else {
                char s[SLUICE_MAX_BATCH_ID];
                sluicei_batch_id_str(s, c->acks[i]);
                set_err(c, "acknowledging batch %s: %s", s, r->str);
                *failed = SLUICE_ERR_REDIS;
            }
        }
        freeReplyObject(r);
    }
    memmove(c->acks + keep, c->acks + n, (c->nacks - n) * sizeof *c->acks);
    c->nacks -= n - keep;
    return SLUICE_OK;
}

/* ---- frames that cannot be delivered ---------------------------------- */

/* Removes an id from this consumer's pending list and its data and
 * delivery count from the queue, without marking it acknowledged (so a
 * producer may push it again). The byte budget gets the data's size back. */
static sluice_err remove_raw(sluice_consumer *c, const char *id, size_t len)
{
    redisReply *r;
    const char *hs[3] = {"HSTRLEN", c->k_data, id};
    size_t hl[3] = {7, strlen(c->k_data), len};
    sluicei_conn_commandargv(c->conn, &r, 3, hs, hl);
    if (!r)
        return SLUICE_ERR_IO;
    long long size = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);

    char sz[24];
    snprintf(sz, sizeof sz, "%lld", size);
    const char *multi[1] = {"MULTI"}, *exec[1] = {"EXEC"};
    const char *lrem[4] = {"LREM", c->k_pending, "-1", id};
    size_t lreml[4] = {4, strlen(c->k_pending), 2, len};
    const char *hdel_d[3] = {"HDEL", c->k_data, id};
    size_t hdel_dl[3] = {4, strlen(c->k_data), len};
    const char *hdel_v[3] = {"HDEL", c->k_dlv, id};
    size_t hdel_vl[3] = {4, strlen(c->k_dlv), len};
    const char *decr[3] = {"DECRBY", c->k_bytes, sz};
    int n = size > 0 ? 6 : 5;
    if (sluicei_conn_append_argv(c->conn, 1, multi, NULL) != SLUICE_OK ||
        sluicei_conn_append_argv(c->conn, 4, lrem, lreml) != SLUICE_OK ||
        sluicei_conn_append_argv(c->conn, 3, hdel_d, hdel_dl) != SLUICE_OK ||
        sluicei_conn_append_argv(c->conn, 3, hdel_v, hdel_vl) != SLUICE_OK ||
        (size > 0 && sluicei_conn_append_argv(c->conn, 3, decr, NULL) != SLUICE_OK) ||
        sluicei_conn_append_argv(c->conn, 1, exec, NULL) != SLUICE_OK)
        return SLUICE_ERR_IO;
    for (int i = 0; i < n; i++) {
        if (read_one(c, &r) != SLUICE_OK)
            return SLUICE_ERR_IO;
        freeReplyObject(r);
    }
    return SLUICE_OK;
}

/* A frame that failed validation: counted, explained in errstr, and taken
 * out of the way so that it does not block the queue. With a well-formed
 * id it is acknowledged (a producer pushing the same id again is then
 * dropped as a duplicate); an id that is not "epoch:task:seq" cannot be
 * acknowledged and is removed as such. */
static sluice_err drop_invalid(sluice_consumer *c, const char *id, size_t len, const char *reason)
{
    sluice_batch_id bid;
    c->st.invalid++;
    set_err(c, "batch %.*s: %s", (int)(len < 64 ? len : 64), id, reason);
    if (sluicei_batch_id_parse(id, len, &bid) != 0)
        return remove_raw(c, id, len);

    char ep[16], tk[24], sq[16];
    snprintf(ep, sizeof ep, "%" PRIu32, bid.epoch);
    snprintf(tk, sizeof tk, "%" PRIu64, bid.task);
    snprintf(sq, sizeof sq, "%" PRIu32, bid.seq);
    const char *argv[5] = {c->id, id, ep, tk, sq};
    size_t argl[5] = {strlen(c->id), len, strlen(ep), strlen(tk), strlen(sq)};
    redisReply *r = NULL;
    sluice_err e = sluicei_script_run(c->conn, SLUICEI_SCRIPT_ACK, c->queue, 5, argv, argl, &r);
    if (r)
        freeReplyObject(r);
    if (e != SLUICE_OK && c->conn->ctx == NULL)
        return SLUICE_ERR_IO;
    /* Another error leaves the id pending: close() hands it back, and the
     * next consumer skips it the same way. */
    return SLUICE_OK;
}

/* Takes charge of an id found in pending:<cid>: it is fetched next, or
 * dropped at once when it is too long to be a batch id. */
static sluice_err adopt_id(sluice_consumer *c, const char *id, size_t len)
{
    if (len >= SLUICE_MAX_BATCH_ID) {
        char why[64];
        snprintf(why, sizeof why, "id of %zu bytes is not a batch id", len);
        return drop_invalid(c, id, len, why);
    }
    return push_recover(c, id, len);
}

/* Turns one HGET reply r for id (delivered the dlv-th time) into a batch
 * in the FIFO, or drops it. r is consumed either way. */
static sluice_err take_frame(sluice_consumer *c, const char *id, size_t len, long long dlv,
                             redisReply *r)
{
    char why[256];
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        c->st.invalid++;
        set_err(c, "batch %.*s: no data in Redis (removed from the pending list)",
                (int)(len < 64 ? len : 64), id);
        return remove_raw(c, id, len);
    }
    if (r->type != REDIS_REPLY_STRING) {
        snprintf(why, sizeof why, "unexpected reply to HGET (type %d%s%s)", r->type,
                 r->type == REDIS_REPLY_ERROR ? ": " : "",
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
        freeReplyObject(r);
        set_err(c, "batch %.*s: %s", (int)(len < 64 ? len : 64), id, why);
        return SLUICE_ERR_REDIS;
    }
    sluice_batch *b = NULL;
    /* Zero copy: the batch's records point into the reply, and freeing
     * the batch frees the reply. */
    sluice_err e = sluicei_wire_decode(r->str, r->len, c->max_batch_bytes, freeReplyObject, r,
                                       &b, why, sizeof why);
    if (e != SLUICE_OK) {
        freeReplyObject(r);
        return drop_invalid(c, id, len, why);
    }
    if (!id_equals(b->id, id, len)) {
        char s[SLUICE_MAX_BATCH_ID];
        sluicei_batch_id_str(s, b->id);
        snprintf(why, sizeof why, "the frame carries the id %s", s);
        sluice_batch_free(b);
        return drop_invalid(c, id, len, why);
    }
    b->deliveries = dlv > 0 && dlv <= UINT32_MAX ? (uint32_t)dlv : 1;
    b->consumer = c;
    b->acked = 0;
    fifo_push(c, b);   /* room: a round never asks for more than the free slots */
    return SLUICE_OK;
}

/* ---- one round trip (or two) with Redis ------------------------------- */

/* Reads n HGET replies into c->replies; on failure frees what was read. */
static sluice_err read_frames(sluice_consumer *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (read_one(c, &c->replies[i]) != SLUICE_OK) {
            while (i > 0)
                freeReplyObject(c->replies[--i]);
            return SLUICE_ERR_IO;
        }
    return SLUICE_OK;
}

static sluice_err append_hget(sluice_consumer *c, const char *id, size_t len)
{
    const char *argv[3] = {"HGET", c->k_data, id};
    size_t argl[3] = {4, strlen(c->k_data), len};
    return sluicei_conn_append_argv(c->conn, 3, argv, argl);
}

/* Decodes the n frames read into c->replies for the ids in c->r_ids,
 * c->r_lens, c->r_dlv. After a lost connection the remaining replies are
 * only freed (their ids stay pending in Redis; resync() finds them). */
static sluice_err take_frames(sluice_consumer *c, size_t n)
{
    sluice_err first = SLUICE_OK;
    for (size_t i = 0; i < n; i++) {
        if (first == SLUICE_ERR_IO) {
            freeReplyObject(c->replies[i]);
            continue;
        }
        sluice_err e = take_frame(c, c->r_ids[i], c->r_lens[i], c->r_dlv[i], c->replies[i]);
        if (e != SLUICE_OK && (first == SLUICE_OK || e == SLUICE_ERR_IO))
            first = e;
    }
    return first;
}

/* Ends a round whose replies are all read: the scripts are reloaded when
 * the server had lost them. */
static sluice_err end_round(sluice_consumer *c, sluice_err e, int again, sluice_err failed)
{
    if (again && e == SLUICE_OK) {
        forget_scripts(c);
        e = ensure_scripts(c);
    }
    return e != SLUICE_OK ? e : failed;
}

/* Fetches ids of the recover list (claim + HGET, one round trip). */
static sluice_err round_recover(sluice_consumer *c, size_t na, int *progress)
{
    size_t k = (size_t)(c->prefetch - c->fifo_len);
    if (k > c->nrecover)
        k = c->nrecover;
    char now[24];
    snprintf(now, sizeof now, "%" PRIu64, sluicei_wall_us() / 1000);
    for (size_t i = 0; i < k; i++) {
        const char *argv[5] = {c->id, c->recover[i].s, now, "0", ""};
        if (sluicei_script_append(c->conn, SLUICEI_SCRIPT_CLAIM, c->queue, 5, argv, NULL) !=
                SLUICE_OK ||
            append_hget(c, c->recover[i].s, strlen(c->recover[i].s)) != SLUICE_OK)
            return SLUICE_ERR_IO;
    }
    int again = 0;
    sluice_err failed = SLUICE_OK;
    if (read_acks(c, na, &again, &failed) != SLUICE_OK)
        return SLUICE_ERR_IO;

    /* On a lost connection the recover list need not be kept consistent:
     * regain() rebuilds it from pending:<cid>. */
    size_t n = 0, keep = 0;
    for (size_t i = 0; i < k; i++) {
        redisReply *claim, *frame;
        if (read_one(c, &claim) != SLUICE_OK)
            goto io;
        if (read_one(c, &frame) != SLUICE_OK) {
            freeReplyObject(claim);
            goto io;
        }
        if (claim->type != REDIS_REPLY_INTEGER) {
            /* Not claimed: keep it for the next round. */
            if (is_error(claim, "NOSCRIPT")) {
                again = 1;
            } else {
                set_err(c, "claiming batch %s: %s", c->recover[i].s,
                        claim->type == REDIS_REPLY_ERROR ? claim->str : "unexpected reply");
                failed = SLUICE_ERR_REDIS;
            }
            c->recover[keep++] = c->recover[i];
            freeReplyObject(claim);
            freeReplyObject(frame);
            continue;
        }
        c->r_held[n] = c->recover[i];
        c->r_ids[n] = c->r_held[n].s;
        c->r_lens[n] = strlen(c->r_held[n].s);
        c->r_dlv[n] = claim->integer;
        c->replies[n++] = frame;
        freeReplyObject(claim);
    }
    memmove(c->recover + keep, c->recover + k, (c->nrecover - k) * sizeof *c->recover);
    c->nrecover -= k - keep;
    *progress = 1;
    return end_round(c, take_frames(c, n), again, failed);
io:
    for (size_t i = 0; i < n; i++)
        freeReplyObject(c->replies[i]);
    return SLUICE_ERR_IO;
}

/* Takes up to the free FIFO room from ready with the take script (in the
 * round trip of the acks), then fetches the frames (HGET, pipelined). */
static sluice_err round_take(sluice_consumer *c, size_t na, int *progress)
{
    int room = c->prefetch - c->fifo_len;
    char want[16], now[24];
    snprintf(want, sizeof want, "%d", room);
    snprintf(now, sizeof now, "%" PRIu64, sluicei_wall_us() / 1000);
    const char *argv[5] = {c->id, want, now, "0", ""};
    if (sluicei_script_append(c->conn, SLUICEI_SCRIPT_TAKE, c->queue, 5, argv, NULL) != SLUICE_OK)
        return SLUICE_ERR_IO;
    int again = 0;
    sluice_err failed = SLUICE_OK;
    if (read_acks(c, na, &again, &failed) != SLUICE_OK)
        return SLUICE_ERR_IO;
    redisReply *t;
    if (read_one(c, &t) != SLUICE_OK)
        return SLUICE_ERR_IO;
    if (is_error(t, "NOSCRIPT")) {
        freeReplyObject(t);
        *progress = 1;
        return end_round(c, SLUICE_OK, 1, failed);
    }
    if (t->type == REDIS_REPLY_ERROR) {
        sluice_err e = sluicei_reply_error_code(t);
        if (e == SLUICE_ERR_NOQUEUE)
            set_err(c, "queue '%s' does not exist any more", c->queue);
        else
            set_err(c, "take: %s", t->str);
        freeReplyObject(t);
        return e == SLUICE_OK ? SLUICE_ERR_REDIS : e;
    }
    size_t n = t->type == REDIS_REPLY_ARRAY ? t->elements / 2 : 0;
    if (t->type != REDIS_REPLY_ARRAY || t->elements % 2 || n > (size_t)room) {
        set_err(c, "take: unexpected reply (type %d, %zu elements)", t->type,
                t->type == REDIS_REPLY_ARRAY ? t->elements : 0);
        freeReplyObject(t);
        return SLUICE_ERR_PROTOCOL;
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *id = t->element[2 * i], *d = t->element[2 * i + 1];
        if (id->type != REDIS_REPLY_STRING || d->type != REDIS_REPLY_INTEGER) {
            set_err(c, "take: unexpected element types");
            freeReplyObject(t);
            return SLUICE_ERR_PROTOCOL;
        }
        c->r_ids[i] = id->str;
        c->r_lens[i] = id->len;
        c->r_dlv[i] = d->integer;
    }
    for (size_t i = 0; i < n; i++)
        if (append_hget(c, c->r_ids[i], c->r_lens[i]) != SLUICE_OK) {
            freeReplyObject(t);
            return SLUICE_ERR_IO;
        }
    /* A lost reply here leaves the ids in pending:<cid>; resync() finds them. */
    if (read_frames(c, n) != SLUICE_OK) {
        freeReplyObject(t);
        return SLUICE_ERR_IO;
    }
    *progress = n > 0;
    sluice_err e = take_frames(c, n);
    freeReplyObject(t);   /* r_ids pointed into it */
    return end_round(c, e, again, failed);
}

/* One non-blocking round: sends the queued acks and, in the same round
 * trip, claims ids to recover or takes new ones; then fetches and decodes
 * their frames into the FIFO. *progress is set when the round moved
 * something (so another round may find more without waiting). */
static sluice_err fetch_round(sluice_consumer *c, int *progress)
{
    *progress = 0;
    sluice_err e = ensure_scripts(c);
    if (e != SLUICE_OK)
        return e;
    size_t na = c->nacks;
    if (append_acks(c) != SLUICE_OK)
        return SLUICE_ERR_IO;
    return c->nrecover ? round_recover(c, na, progress) : round_take(c, na, progress);
}

/* Waits up to ms for an id with BLMOVE; an id that arrives goes to the
 * recover list, from which the next round claims and fetches it. Sets
 * *oom when Redis refuses BLMOVE for lack of memory. */
static sluice_err block_one(sluice_consumer *c, int64_t ms, int *oom)
{
    if (ms < BLOCK_MIN_MS)
        ms = BLOCK_MIN_MS;
    char tmo[32];
    snprintf(tmo, sizeof tmo, "%" PRId64 ".%03d", ms / 1000, (int)(ms % 1000));
    const char *argv[6] = {"BLMOVE", c->k_ready, c->k_pending, "RIGHT", "LEFT", tmo};
    redisReply *r = NULL;
    sluicei_conn_set_timeout(c->conn, (int)ms + SOCKET_SLACK_MS);
    sluicei_conn_commandargv(c->conn, &r, 6, argv, NULL);
    if (!r)
        return SLUICE_ERR_IO;
    sluicei_conn_set_timeout(c->conn, 0);
    sluice_err e = SLUICE_OK;
    if (r->type == REDIS_REPLY_STRING) {
        e = adopt_id(c, r->str, r->len);
    } else if (is_error(r, "OOM")) {
        *oom = 1;
    } else if (r->type != REDIS_REPLY_NIL) {
        set_err(c, "BLMOVE: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        e = SLUICE_ERR_REDIS;
    }
    freeReplyObject(r);
    return e;
}

/* Rebuilds the recover list: every id in pending:<cid> that this process
 * does not know was moved by a command whose reply never arrived. */
static sluice_err resync(sluice_consumer *c)
{
    const char *argv[4] = {"LRANGE", c->k_pending, "0", "-1"};
    redisReply *r = NULL;
    sluicei_conn_commandargv(c->conn, &r, 4, argv, NULL);
    if (!r)
        return SLUICE_ERR_IO;
    sluice_err e = SLUICE_OK;
    c->nrecover = 0;
    if (r->type != REDIS_REPLY_ARRAY) {
        set_err(c, "LRANGE %s: %s", c->k_pending,
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        e = SLUICE_ERR_REDIS;
    }
    /* pending:<cid> is filled at the left, so the oldest is at the right. */
    for (size_t i = r->type == REDIS_REPLY_ARRAY ? r->elements : 0; i-- > 0 && e == SLUICE_OK;) {
        redisReply *id = r->element[i];
        if (id->type == REDIS_REPLY_STRING && !known_locally(c, id->str, id->len))
            e = adopt_id(c, id->str, id->len);
    }
    freeReplyObject(r);
    return e;
}

/* Regains the connection, waiting at most until deadline_ms (< 0: no
 * limit of the caller) and at most until reconnect_timeout_ms after the
 * loss. SLUICE_ERR_TIMEOUT when the caller's deadline came first (the next
 * call goes on trying), SLUICE_ERR_IO when the loss outlasted
 * reconnect_timeout_ms. */
static sluice_err regain(sluice_consumer *c, int64_t deadline_ms)
{
    for (;;) {
        int64_t now = sluicei_now_ms();
        if (c->lost_at_ms == 0)
            c->lost_at_ms = now;
        int64_t give_up = c->reconnect_timeout_ms > 0 ? c->lost_at_ms + c->reconnect_timeout_ms : -1;
        int64_t d = give_up;
        if (deadline_ms >= 0 && (d < 0 || deadline_ms < d))
            d = deadline_ms;
        sluice_err e = sluicei_conn_reconnect(c->conn, d, NULL);
        if (e == SLUICE_OK) {
            e = resync(c);
            if (e == SLUICE_OK) {
                c->lost = 0;
                c->lost_at_ms = 0;
                return SLUICE_OK;
            }
            if (e != SLUICE_ERR_IO)
                return e;
        } else if (e != SLUICE_ERR_IO) {
            set_err(c, "%s", c->conn->errstr);
            return e;
        }
        now = sluicei_now_ms();
        if (give_up >= 0 && now >= give_up) {
            set_err(c, "connection lost and not regained within %d ms: %s",
                    c->reconnect_timeout_ms, c->conn->errstr);
            c->lost_at_ms = 0;   /* a later call starts a new window */
            return SLUICE_ERR_IO;
        }
        if (deadline_ms >= 0 && now >= deadline_ms) {
            set_err(c, "reconnecting: %s", c->conn->errstr);
            return SLUICE_ERR_TIMEOUT;
        }
    }
}

static void mark_lost(sluice_consumer *c)
{
    c->lost = 1;
    if (c->lost_at_ms == 0)
        c->lost_at_ms = sluicei_now_ms();
}

/* Fills the empty FIFO, waiting until deadline_ms (< 0: forever). */
static sluice_err fill(sluice_consumer *c, int64_t deadline_ms)
{
    int oom = 0;
    for (;;) {
        sluice_err e;
        int progress = 0;
        if (c->lost && (e = regain(c, deadline_ms)) != SLUICE_OK)
            return e;
        e = fetch_round(c, &progress);
        if (e == SLUICE_ERR_IO)
            mark_lost(c);
        else if (e != SLUICE_OK)
            return e;
        if (c->fifo_len > 0)
            return SLUICE_OK;

        int64_t left = deadline_ms < 0 ? BLOCK_SLICE_MS : deadline_ms - sluicei_now_ms();
        /* Ids already ours (to recover, or frames that all proved invalid)
         * are worked off without waiting, even past the deadline. */
        if (!c->lost && (progress || c->nrecover))
            continue;
        if (left <= 0)
            return SLUICE_ERR_TIMEOUT;
        if (c->lost)
            continue;
        if (oom) {
            sleep_ms(left < OOM_POLL_MS ? left : OOM_POLL_MS);
            continue;
        }
        e = block_one(c, left < BLOCK_SLICE_MS ? left : BLOCK_SLICE_MS, &oom);
        if (e == SLUICE_ERR_IO)
            mark_lost(c);
        else if (e != SLUICE_OK)
            return e;
    }
}

/* ---- public API ------------------------------------------------------- */

static int consumer_id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MAX_CONSUMER_ID)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-' || ch == ':'))
            return 0;
    }
    return 1;
}

static void free_consumer(sluice_consumer *c)
{
    while (c->fifo_len > 0)
        sluice_batch_free(fifo_pop(c));
    sluicei_conn_close(c->conn);
    free(c->fifo);
    free(c->out);
    free(c->acks);
    free(c->recover);
    free(c->replies);
    free(c->r_ids);
    free(c->r_lens);
    free(c->r_dlv);
    free(c->r_held);
    free(c);
}

sluice_err sluice_consumer_open(sluice_consumer **out, const sluice_consumer_opts *o,
                                char *errbuf, size_t errlen)
{
    char scratch[8];
    if (!errbuf) {
        errbuf = scratch;
        errlen = sizeof scratch;
    }
    if (errlen)
        errbuf[0] = '\0';
    if (!out || !o) {
        snprintf(errbuf, errlen, "sluice_consumer_open: out and opts must not be NULL");
        return SLUICE_ERR_INVALID;
    }
    *out = NULL;
    if (!o->redis_url) {
        snprintf(errbuf, errlen, "no Redis URL given (opts.redis_url is NULL)");
        return SLUICE_ERR_INVALID;
    }
    sluice_err e = sluicei_queue_name_check(o->queue, errbuf, errlen);
    if (e != SLUICE_OK)
        return e;
    if (o->prefetch < 0 || o->prefetch > PREFETCH_MAX) {
        snprintf(errbuf, errlen, "prefetch must be 0 to %d, got %d", PREFETCH_MAX, o->prefetch);
        return SLUICE_ERR_INVALID;
    }
    if (o->reconnect_timeout_ms < 0 || o->connect_timeout_ms < 0) {
        snprintf(errbuf, errlen, "timeouts must not be negative");
        return SLUICE_ERR_INVALID;
    }
    if (o->consumer_id && !consumer_id_ok(o->consumer_id)) {
        snprintf(errbuf, errlen,
                 "consumer id must be 1 to %d characters of A-Z a-z 0-9 _ . - :", MAX_CONSUMER_ID);
        return SLUICE_ERR_INVALID;
    }

    sluice_consumer *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    snprintf(c->queue, sizeof c->queue, "%s", o->queue);
    if (o->consumer_id)
        snprintf(c->id, sizeof c->id, "%s", o->consumer_id);
    else
        snprintf(c->id, sizeof c->id, "%016" PRIx64, sluicei_random64());
    char name[SLUICE_MAX_KEY];
    sluicei_key(c->k_meta, c->queue, "meta");
    sluicei_key(c->k_ready, c->queue, "ready:0");
    sluicei_key(c->k_data, c->queue, "data");
    sluicei_key(c->k_dlv, c->queue, "dlv");
    sluicei_key(c->k_bytes, c->queue, "bytes");
    snprintf(name, sizeof name, "pending:%s", c->id);
    sluicei_key(c->k_pending, c->queue, name);
    c->max_batch_bytes = o->max_batch_bytes ? o->max_batch_bytes : SLUICE_MAX_BATCH_BYTES_DEFAULT;
    c->prefetch = o->prefetch ? o->prefetch : PREFETCH_DEFAULT;
    c->reconnect_timeout_ms = o->reconnect_timeout_ms;
    c->fifo = calloc((size_t)c->prefetch, sizeof *c->fifo);
    c->replies = calloc((size_t)c->prefetch, sizeof *c->replies);
    c->r_ids = calloc((size_t)c->prefetch, sizeof *c->r_ids);
    c->r_lens = calloc((size_t)c->prefetch, sizeof *c->r_lens);
    c->r_dlv = calloc((size_t)c->prefetch, sizeof *c->r_dlv);
    c->r_held = calloc((size_t)c->prefetch, sizeof *c->r_held);
    if (!c->fifo || !c->replies || !c->r_ids || !c->r_lens || !c->r_dlv || !c->r_held) {
        snprintf(errbuf, errlen, "out of memory");
        free_consumer(c);
        return SLUICE_ERR_NOMEM;
    }

    e = sluicei_conn_open(&c->conn, o->redis_url, o->connect_timeout_ms, 0, errbuf, errlen);
    if (e != SLUICE_OK) {
        free_consumer(c);
        return e;
    }
    redisReply *r = NULL;
    const char *argv[2] = {"EXISTS", c->k_meta};
    e = sluicei_conn_commandargv(c->conn, &r, 2, argv, NULL);
    if (e == SLUICE_OK && (r->type != REDIS_REPLY_INTEGER || r->integer != 1)) {
        snprintf(errbuf, errlen, "queue '%s' does not exist (create it with: sluice-ctl create %s)",
                 c->queue, c->queue);
        e = SLUICE_ERR_NOQUEUE;
    } else if (e != SLUICE_OK) {
        snprintf(errbuf, errlen, "%s", c->conn->errstr);
    }
    if (r)
        freeReplyObject(r);
    /* A consumer id that was given may be the one of a process that died
     * holding batches: pick them up again. */
    if (e == SLUICE_OK && o->consumer_id && (e = resync(c)) != SLUICE_OK)
        snprintf(errbuf, errlen, "%s", c->errstr[0] ? c->errstr : c->conn->errstr);
    if (e != SLUICE_OK) {
        free_consumer(c);
        return e;
    }
    *out = c;
    return SLUICE_OK;
}

sluice_err sluice_consumer_next(sluice_consumer *c, sluice_batch **out, int timeout_ms)
{
    if (!out)
        return SLUICE_ERR_INVALID;
    *out = NULL;
    if (!c)
        return SLUICE_ERR_INVALID;
    c->errstr[0] = '\0';
    /* release() must find room in both arrays without allocating. */
    if (grow((void **)&c->out, &c->out_cap, c->nout + 1, sizeof *c->out) ||
        grow((void **)&c->acks, &c->ack_cap, c->nacks + c->nout + 1, sizeof *c->acks)) {
        set_err(c, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    if (c->fifo_len == 0) {
        uint64_t t0 = mono_us();
        int64_t deadline = timeout_ms < 0 ? -1 : sluicei_now_ms() + timeout_ms;
        sluice_err e = fill(c, deadline);
        c->st.blocked_us += mono_us() - t0;
        if (e != SLUICE_OK)
            return e;
    }
    sluice_batch *b = fifo_pop(c);
    c->out[c->nout++] = b;
    c->st.batches++;
    c->st.records += b->nrecords;
    c->st.bytes += b->frame_bytes;
    if (b->deliveries > 1)
        c->st.redelivered++;
    *out = b;
    return SLUICE_OK;
}

/* Runs on the consumer's thread like next() (the consumer is not
 * thread-safe). A batch of a closed consumer was detached by close()
 * (consumer NULL, acked set) and is only freed. */
void sluice_batch_release(sluice_batch *b)
{
    if (!b)
        return;
    sluice_consumer *c = b->consumer;
    if (c && !b->acked) {
        for (size_t i = 0; i < c->nout; i++)
            if (c->out[i] == b) {
                c->out[i] = c->out[--c->nout];
                c->acks[c->nacks++] = b->id;
                break;
            }
        b->acked = 1;
    }
    sluice_batch_free(b);
}

/* Sends the queued acks and the requeue script in one round trip. */
static sluice_err hand_back(sluice_consumer *c)
{
    sluice_err e = ensure_scripts(c);
    if (e != SLUICE_OK)
        return e;
    size_t na = c->nacks;
    char now[24];
    snprintf(now, sizeof now, "%" PRIu64, sluicei_wall_us() / 1000);
    const char *argv[2] = {c->id, now};
    if (append_acks(c) != SLUICE_OK ||
        sluicei_script_append(c->conn, SLUICEI_SCRIPT_REQUEUE, c->queue, 2, argv, NULL) !=
            SLUICE_OK)
        return SLUICE_ERR_IO;
    int again = 0;
    sluice_err failed = SLUICE_OK;
    if (read_acks(c, na, &again, &failed) != SLUICE_OK)
        return SLUICE_ERR_IO;
    redisReply *r;
    if (read_one(c, &r) != SLUICE_OK)
        return SLUICE_ERR_IO;
    e = is_error(r, "NOSCRIPT") || again ? SLUICE_ERR_PROTOCOL : SLUICE_OK;
    freeReplyObject(r);
    if (e != SLUICE_OK) {
        /* The server lost its scripts: reload and send again (both idempotent). */
        forget_scripts(c);
        return SLUICE_ERR_IO;
    }
    return SLUICE_OK;
}

/* Batches the caller still holds are detached: they stay valid memory, and
 * their release() only frees them (they are handed back to the queue here,
 * so acknowledging them later would be wrong). */
void sluice_consumer_close(sluice_consumer *c)
{
    if (!c)
        return;
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((c->lost || !c->conn->ctx) &&
            sluicei_conn_reconnect(c->conn, sluicei_now_ms() + CLOSE_RECONNECT_MS, NULL) !=
                SLUICE_OK)
            break;   /* what we hold stays in pending:<cid>, not lost */
        c->lost = 0;
        if (hand_back(c) != SLUICE_ERR_IO)
            break;
        c->lost = 1;
    }
    for (size_t i = 0; i < c->nout; i++) {
        c->out[i]->consumer = NULL;
        c->out[i]->acked = 1;
    }
    free_consumer(c);
}

void sluice_consumer_stats_get(const sluice_consumer *c, sluice_consumer_stats *st)
{
    if (!c || !st)
        return;
    *st = c->st;
    st->reconnects = c->conn ? c->conn->reconnects : 0;
}

const char *sluice_consumer_errstr(const sluice_consumer *c)
{
    return c ? c->errstr : "";
}

const char *sluice_consumer_id(const sluice_consumer *c)
{
    return c ? c->id : "";
}
