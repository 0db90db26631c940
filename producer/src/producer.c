/* The producer API (producer.h): encode, pipelined pushes through the push
 * script, backpressure, reconnect.
 *
 * Pushes in flight live in a ring of max_inflight slots; each slot owns the
 * frame it sent, so that a push can be sent again after a lost connection
 * or a "full" answer, and so that steady state allocates nothing (a slot's
 * buffer is reused by the next batch). Invariant: the replies Redis still
 * owes us belong to the slots in state SENT, in ring order.
 *
 * A push answered "full" (or OOM, or a transient server error) is retried
 * after the others in flight were answered, one at a time, each after
 * waiting for room: BLPOP on the queue's room list, which the ack script
 * feeds, with a 1 s timeout. So a blocked producer wakes within
 * milliseconds of an ack and otherwise costs one round trip per second.
 *
 * After a lost connection every unanswered push is sent again: the push
 * script drops an id that is already stored or acknowledged, so this loses
 * nothing and duplicates nothing.
 *
 * Any error returned to the caller ends the pushes that were unanswered at
 * that moment: they may or may not be in Redis (errstr says how many). */
#include <sluice/producer.h>

#include "conn.h"
#include "proto.h"
#include "wire.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define INFLIGHT_DEFAULT 4
#define INFLIGHT_MAX 1024
/* Socket timeout; must exceed the BLPOP timeout below. */
#define CMD_TIMEOUT_MS 10000
#define ROOM_WAIT_S 1
/* Pause before retrying after a transient server error (LOADING...). */
#define TRANSIENT_PAUSE_MS 100
/* Ad-hoc task numbers lie in [2^32, 2^53): above any job's task numbers,
 * and exact in a double for Python. */
#define ADHOC_TASK_MIN ((uint64_t)1 << 32)
#define ADHOC_TASK_END ((uint64_t)1 << 53)
/* A push whose reply is lost this many times in a row (each time on a
 * fresh connection) is not a network problem: most likely the server
 * closes the connection on it (a frame above proto-max-bulk-len). */
#define MAX_LOSSES_PER_PUSH 8

enum slot_state {
    SLOT_SENT,       /* reply pending */
    SLOT_FULL,       /* refused for lack of room: wait, then push again */
    SLOT_TRANSIENT,  /* refused by a passing server condition: pause, push again */
    SLOT_DONE,       /* stored, or dropped as a duplicate */
    SLOT_FAILED,     /* refused for good (errstr) */
};

typedef struct slot {
    sluicei_buf frame;                 /* owned; reused by later batches */
    sluice_batch_id id;
    char idstr[SLUICE_MAX_BATCH_ID];
    uint64_t nrecords;
    enum slot_state state;
    int resent;                        /* sent again after a lost connection */
    int losses;                        /* connections lost awaiting its reply */
} slot;

struct sluice_producer {
    sluicei_conn *conn;
    char queue[SLUICE_MAX_QUEUE_NAME + 1];
    char room_key[SLUICE_MAX_KEY];
    char id[SLUICE_MAX_PRODUCER_ID + 1];
    int reconnect_timeout_ms;
    volatile int *stop;

    uint32_t epoch;
    uint64_t task;
    uint64_t next_seq;                 /* 64-bit to notice the end of the 32-bit range */

    slot *ring;
    int nslots;
    int head;                          /* oldest slot in use */
    int used;                          /* slots in use, from head */
    int nsent;                         /* of those, how many await a reply */
    int reload_scripts;                /* a NOSCRIPT was seen */

    sluice_producer_stats st;
    char errstr[512];
};

static void seterr(sluice_producer *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void seterr(sluice_producer *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->errstr, sizeof p->errstr, fmt, ap);
    va_end(ap);
}

static slot *slot_at(sluice_producer *p, int i)
{
    return &p->ring[(p->head + i) % p->nslots];
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int stopped(const sluice_producer *p)
{
    return p->stop && *p->stop;
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Server conditions that pass by themselves (restart, failover, a busy
 * script) or that a reload fixes (NOSCRIPT). */
static int transient_error(const char *msg)
{
    return starts_with(msg, "LOADING") || starts_with(msg, "BUSY") ||
           starts_with(msg, "TRYAGAIN") || starts_with(msg, "MASTERDOWN") ||
           starts_with(msg, "NOSCRIPT");
}

/* ---- sending ---------------------------------------------------------- */

/* Appends the push of s to the pipeline and sends it. */
static sluice_err send_slot(sluice_producer *p, slot *s)
{
    char epoch[16], task[24], seq[16];
    snprintf(epoch, sizeof epoch, "%" PRIu32, s->id.epoch);
    snprintf(task, sizeof task, "%" PRIu64, s->id.task);
    snprintf(seq, sizeof seq, "%" PRIu32, s->id.seq);
    const char *argv[5] = {s->idstr, (const char *)s->frame.data, epoch, task, seq};
    size_t argvlen[5] = {strlen(s->idstr), s->frame.len, strlen(epoch), strlen(task),
                         strlen(seq)};
    sluice_err e = sluicei_script_append(p->conn, SLUICEI_SCRIPT_PUSH, p->queue, 5, argv, argvlen);
    if (e == SLUICE_OK)
        e = sluicei_conn_flush(p->conn);
    return e;
}

/* After a lost connection: reconnects (within reconnect_timeout_ms, or
 * forever) and sends every unanswered push again, in order. */
static sluice_err recover(sluice_producer *p)
{
    int64_t deadline =
        p->reconnect_timeout_ms > 0 ? sluicei_now_ms() + p->reconnect_timeout_ms : -1;
    for (;;) {
        sluice_err e = sluicei_conn_reconnect(p->conn, deadline, p->stop);
        p->st.reconnects = p->conn->reconnects;
        if (e != SLUICE_OK) {
            seterr(p, "connection lost: %s", p->conn->errstr);
            return e;
        }
        p->reload_scripts = 0;   /* reconnect loaded them */
        for (int i = 0; i < p->used && e == SLUICE_OK; i++) {
            slot *s = slot_at(p, i);
            if (s->state == SLOT_SENT) {
                s->resent = 1;
                e = send_slot(p, s);
            }
        }
        if (e == SLUICE_OK)
            return SLUICE_OK;
        if (e != SLUICE_ERR_IO) {
            seterr(p, "after reconnecting: %s", p->conn->errstr);
            return e;
        }
        /* Lost again while re-sending: start over. */
    }
}

/* ---- replies ---------------------------------------------------------- */

static void count_stored(sluice_producer *p, const slot *s)
{
    p->st.batches++;
    p->st.records += s->nrecords;
    p->st.bytes += s->frame.len;
}

/* Sets s's state from the push script's reply r, or returns the final
 * error it carries (errstr set). */
static sluice_err apply_reply(sluice_producer *p, slot *s, const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER) {
        switch (r->integer) {
        case SLUICEI_PUSH_OK:
            count_stored(p, s);
            s->state = SLOT_DONE;
            return SLUICE_OK;
        case SLUICEI_PUSH_DUP:
            /* Re-sent after a lost connection: most likely our own first
             * send was stored before the reply got lost. */
            if (s->resent)
                count_stored(p, s);
            else
                p->st.duplicates++;
            s->state = SLOT_DONE;
            return SLUICE_OK;
        case SLUICEI_PUSH_FULL:
            s->state = SLOT_FULL;
            return SLUICE_OK;
        }
    } else if (r->type == REDIS_REPLY_ERROR) {
        sluice_err code = sluicei_reply_error_code(r);
        if (code == SLUICE_ERR_FULL) {   /* OOM: Redis itself is full */
            s->state = SLOT_FULL;
            return SLUICE_OK;
        }
        if (transient_error(r->str)) {
            if (starts_with(r->str, "NOSCRIPT"))
                p->reload_scripts = 1;
            s->state = SLOT_TRANSIENT;
            return SLUICE_OK;
        }
        if (code == SLUICE_ERR_NOQUEUE) {
            seterr(p, "push %s: queue '%s' does not exist (create it with: sluice-ctl create %s)",
                   s->idstr, p->queue, p->queue);
        } else if (code == SLUICE_ERR_TOOBIG) {
            const char *why = strstr(r->str, "TOOBIG ");
            seterr(p, "push %s: %s (use smaller batches or raise the queue's byte budget)",
                   s->idstr, why ? why + 7 : r->str);
        } else {
            seterr(p, "push %s: redis: %s", s->idstr, r->str);
        }
        return code;
    }
    seterr(p, "push %s: unexpected reply type %d from the push script", s->idstr, r->type);
    return SLUICE_ERR_PROTOCOL;
}

/* Reads the reply of the oldest SENT slot and applies it. A lost
 * connection is recovered here (the slot stays SENT, re-sent). */
static sluice_err read_one(sluice_producer *p)
{
    slot *s = NULL;
    for (int i = 0; i < p->used && !s; i++)
        if (slot_at(p, i)->state == SLOT_SENT)
            s = slot_at(p, i);
    if (!s)
        return SLUICE_OK;
    redisReply *r = NULL;
    sluice_err e = sluicei_conn_read_reply(p->conn, &r);
    if (e == SLUICE_ERR_IO) {
        if (++s->losses >= MAX_LOSSES_PER_PUSH) {
            seterr(p, "push %s: connection lost %d times awaiting the reply to this batch of "
                   "%zu bytes (does the server refuse it? see proto-max-bulk-len): %s",
                   s->idstr, s->losses, s->frame.len, p->conn->errstr);
            return SLUICE_ERR_IO;
        }
        return recover(p);
    }
    if (!r) {
        seterr(p, "push %s: %s", s->idstr, p->conn->errstr);
        return e;
    }
    e = apply_reply(p, s, r);
    freeReplyObject(r);
    if (e != SLUICE_OK)
        s->state = SLOT_FAILED;
    p->nsent--;
    return e;
}

static void pop_done(sluice_producer *p)
{
    while (p->used > 0 && slot_at(p, 0)->state == SLOT_DONE) {
        p->head = (p->head + 1) % p->nslots;
        p->used--;
    }
}

/* Ends every push still in the ring after a final error: reads the
 * replies still owed (so that the connection stays in step), counts what
 * was stored, drops the rest. Appends the number dropped to errstr. */
static void abandon(sluice_producer *p)
{
    uint64_t dropped = 0;
    /* The failed push itself is not counted: errstr names it. */
    for (int i = 0; i < p->used; i++) {
        slot *s = slot_at(p, i);
        if (s->state == SLOT_SENT && p->conn->ctx) {
            redisReply *r = NULL;
            sluicei_conn_read_reply(p->conn, &r);
            if (r && r->type == REDIS_REPLY_INTEGER && r->integer == SLUICEI_PUSH_OK) {
                count_stored(p, s);
                s->state = SLOT_DONE;
            } else if (r && r->type == REDIS_REPLY_INTEGER && r->integer == SLUICEI_PUSH_DUP) {
                s->state = SLOT_DONE;
            }
            if (r)
                freeReplyObject(r);
        }
        if (s->state != SLOT_DONE && s->state != SLOT_FAILED)
            dropped++;
    }
    p->head = p->used = p->nsent = 0;
    if (dropped) {
        size_t n = strlen(p->errstr);
        snprintf(p->errstr + n, sizeof p->errstr - n, " (%" PRIu64 " other unconfirmed batch%s dropped)",
                 dropped, dropped == 1 ? "" : "es");
    }
}

/* ---- waiting for room --------------------------------------------------- */

/* Waits until a push refused in state `why` is worth sending again. With
 * nothing in flight, so that a plain command is safe. */
static sluice_err wait_retry(sluice_producer *p, const slot *s, enum slot_state why)
{
    if (stopped(p)) {
        seterr(p, "push %s: stopped while waiting for room in queue '%s'", s->idstr, p->queue);
        return SLUICE_ERR_IO;
    }
    uint64_t t0 = now_us();
    sluice_err e = SLUICE_OK;
    if (why == SLOT_FULL) {
        /* A token in the room list means a consumer acknowledged a batch
         * since; the timeout covers room made any other way (a purge, a
         * budget raised) and another producer taking the token. */
        redisReply *r = NULL;
        e = sluicei_conn_command(p->conn, &r, "BLPOP %s %d", p->room_key, ROOM_WAIT_S);
        if (r)
            freeReplyObject(r);
        if (e == SLUICE_ERR_REDIS) {
            sleep_ms(TRANSIENT_PAUSE_MS);   /* LOADING and the like; the push tells */
            e = SLUICE_OK;
        }
    } else {
        sleep_ms(TRANSIENT_PAUSE_MS);
    }
    if (e == SLUICE_OK && p->reload_scripts && p->conn->ctx) {
        if (sluicei_script_load(p->conn) == SLUICE_OK)
            p->reload_scripts = 0;
    }
    p->st.blocked_us += now_us() - t0;
    if (e == SLUICE_ERR_IO || !p->conn->ctx)
        return recover(p);
    return SLUICE_OK;
}

/* Pushes s (refused once, state FULL or TRANSIENT) again until Redis
 * stores it or drops it as a duplicate. Nothing else is in flight. */
static sluice_err push_until_stored(sluice_producer *p, slot *s)
{
    p->st.full_waits += s->state == SLOT_FULL;
    for (;;) {
        sluice_err e = wait_retry(p, s, s->state);
        if (e != SLUICE_OK)
            return e;
        s->state = SLOT_SENT;
        p->nsent++;
        e = send_slot(p, s);
        if (e == SLUICE_ERR_IO)
            e = recover(p);   /* re-sends s */
        while (e == SLUICE_OK && s->state == SLOT_SENT)
            e = read_one(p);
        if (e != SLUICE_OK)
            return e;
        if (s->state == SLOT_DONE)
            return SLUICE_OK;
    }
}

/* Reads replies, oldest first, until at most keep pushes are unanswered.
 * When one was refused, reads all of them, then pushes the refused ones
 * again one at a time: afterwards nothing is in flight. On error the ring
 * is emptied (abandon()). */
static sluice_err settle(sluice_producer *p, int keep)
{
    int refused = 0;
    sluice_err e = SLUICE_OK;
    while (e == SLUICE_OK && p->nsent > (refused ? 0 : keep)) {
        e = read_one(p);
        for (int i = 0; i < p->used; i++)
            if (slot_at(p, i)->state == SLOT_FULL || slot_at(p, i)->state == SLOT_TRANSIENT)
                refused = 1;
        pop_done(p);
    }
    for (int i = 0; e == SLUICE_OK && i < p->used; i++) {
        slot *s = slot_at(p, i);
        if (s->state == SLOT_FULL || s->state == SLOT_TRANSIENT)
            e = push_until_stored(p, s);
    }
    if (e != SLUICE_OK) {
        abandon(p);
        return e;
    }
    pop_done(p);
    return SLUICE_OK;
}

/* ---- the API ---------------------------------------------------------- */

static void default_id(char *out)
{
    char host[256], tail[40];
    if (gethostname(host, sizeof host) != 0 || host[0] == '\0')
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    int tl = snprintf(tail, sizeof tail, "-%ld-%04x", (long)getpid(),
                      (unsigned)(sluicei_random64() & 0xffff));
    /* A long host name is cut, never the pid and random part that make
     * the id unique. */
    size_t hl = strlen(host), room = SLUICE_MAX_PRODUCER_ID - (size_t)tl;
    if (hl > room)
        hl = room;
    memcpy(out, host, hl);
    memcpy(out + hl, tail, (size_t)tl + 1);
}

static void set_errbuf(char *errbuf, size_t errlen, const char *msg)
{
    if (errbuf && errlen)
        snprintf(errbuf, errlen, "%s", msg);
}

sluice_err sluice_producer_open(sluice_producer **out, const sluice_producer_opts *o,
                                char *errbuf, size_t errlen)
{
    char err[512];
    sluice_err e;
    *out = NULL;
    if (!o || !o->redis_url) {
        set_errbuf(errbuf, errlen, o ? "no Redis URL given (opts.redis_url is NULL)"
                                     : "no options given");
        return SLUICE_ERR_INVALID;
    }
    if ((e = sluicei_queue_name_check(o->queue, err, sizeof err)) != SLUICE_OK) {
        set_errbuf(errbuf, errlen, err);
        return e;
    }
    if (o->producer_id && (o->producer_id[0] == '\0' ||
                           strlen(o->producer_id) > SLUICE_MAX_PRODUCER_ID)) {
        snprintf(err, sizeof err, "producer id must be 1 to %d bytes", SLUICE_MAX_PRODUCER_ID);
        set_errbuf(errbuf, errlen, err);
        return SLUICE_ERR_INVALID;
    }
    if (o->max_inflight < 0 || o->max_inflight > INFLIGHT_MAX) {
        snprintf(err, sizeof err, "max_inflight %d out of range 0..%d", o->max_inflight,
                 INFLIGHT_MAX);
        set_errbuf(errbuf, errlen, err);
        return SLUICE_ERR_INVALID;
    }

    sluice_producer *p = calloc(1, sizeof *p);
    if (!p) {
        set_errbuf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    p->nslots = o->max_inflight > 0 ? o->max_inflight : INFLIGHT_DEFAULT;
    p->ring = calloc((size_t)p->nslots, sizeof *p->ring);
    if (!p->ring) {
        free(p);
        set_errbuf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    snprintf(p->queue, sizeof p->queue, "%s", o->queue);
    sluicei_key(p->room_key, p->queue, "room");
    if (o->producer_id)
        snprintf(p->id, sizeof p->id, "%s", o->producer_id);
    else
        default_id(p->id);
    p->reconnect_timeout_ms = o->reconnect_timeout_ms;
    p->stop = o->stop;
    p->epoch = 0;
    p->task = ADHOC_TASK_MIN + sluicei_random64() % (ADHOC_TASK_END - ADHOC_TASK_MIN);

    e = sluicei_conn_open(&p->conn, o->redis_url, o->connect_timeout_ms, CMD_TIMEOUT_MS, err,
                          sizeof err);
    if (e != SLUICE_OK) {
        set_errbuf(errbuf, errlen, err);
        sluice_producer_close(p);
        return e;
    }
    char meta[SLUICE_MAX_KEY];
    redisReply *r = NULL;
    sluicei_key(meta, p->queue, "meta");
    e = sluicei_conn_command(p->conn, &r, "EXISTS %s", meta);
    if (e == SLUICE_OK && r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
        snprintf(err, sizeof err, "queue '%s' does not exist (create it with: sluice-ctl create %s)",
                 p->queue, p->queue);
        e = SLUICE_ERR_NOQUEUE;
    } else if (e == SLUICE_OK && r->type != REDIS_REPLY_INTEGER) {
        snprintf(err, sizeof err, "EXISTS %s: unexpected reply", meta);
        e = SLUICE_ERR_PROTOCOL;
    } else if (e != SLUICE_OK) {
        if (r)
            e = sluicei_reply_error_code(r);   /* NOAUTH, NOPERM... */
        snprintf(err, sizeof err, "%s", p->conn->errstr);
    }
    if (r)
        freeReplyObject(r);
    if (e != SLUICE_OK) {
        set_errbuf(errbuf, errlen, err);
        sluice_producer_close(p);
        return e;
    }
    *out = p;
    return SLUICE_OK;
}

/* Takes the next free slot and numbers it; settles first when the ring is
 * full. */
static sluice_err next_slot(sluice_producer *p, slot **out)
{
    if (p->next_seq > UINT32_MAX) {
        seterr(p, "task %" PRIu32 ":%" PRIu64 ": all 2^32 sequence numbers used "
               "(call sluice_producer_set_task)", p->epoch, p->task);
        return SLUICE_ERR_INVALID;
    }
    if (p->used == p->nslots) {
        sluice_err e = settle(p, p->nslots - 1);
        if (e != SLUICE_OK)
            return e;
    }
    slot *s = slot_at(p, p->used);
    s->id.epoch = p->epoch;
    s->id.task = p->task;
    s->id.seq = (uint32_t)p->next_seq;
    sluicei_batch_id_str(s->idstr, s->id);
    s->resent = 0;
    s->losses = 0;
    *out = s;
    return SLUICE_OK;
}

/* Puts the encoded slot s in flight. */
static sluice_err launch(sluice_producer *p, slot *s, uint64_t nrecords)
{
    s->nrecords = nrecords;
    s->state = SLOT_SENT;
    p->used++;
    p->nsent++;
    p->next_seq++;
    sluice_err e = send_slot(p, s);
    if (e == SLUICE_ERR_IO)
        e = recover(p);
    else if (e != SLUICE_OK)
        seterr(p, "push %s: %s", s->idstr, p->conn->errstr);
    if (e != SLUICE_OK)
        abandon(p);
    return e;
}

static sluice_err encode_failed(sluice_producer *p, const slot *s, sluice_err e)
{
    seterr(p, "push %s: cannot encode the batch: %s", s->idstr, sluice_strerror(e));
    return e;
}

sluice_err sluice_producer_push_records(sluice_producer *p, const sluice_record *recs, size_t n)
{
    slot *s;
    sluice_err e = next_slot(p, &s);
    if (e != SLUICE_OK)
        return e;
    sluicei_batch_meta m = {s->id, p->id, sluicei_wall_us()};
    e = sluicei_wire_encode_records(&s->frame, &m, recs, n);
    if (e != SLUICE_OK)
        return encode_failed(p, s, e);
    return launch(p, s, n);
}

sluice_err sluice_producer_push_tensors(sluice_producer *p, uint64_t n, const sluice_tensor *t,
                                        size_t nt)
{
    slot *s;
    sluice_err e = next_slot(p, &s);
    if (e != SLUICE_OK)
        return e;
    sluicei_batch_meta m = {s->id, p->id, sluicei_wall_us()};
    e = sluicei_wire_encode_tensors(&s->frame, &m, n, t, nt);
    if (e != SLUICE_OK)
        return encode_failed(p, s, e);
    return launch(p, s, n);
}

sluice_err sluice_producer_flush(sluice_producer *p)
{
    return settle(p, 0);
}

sluice_err sluice_producer_set_task(sluice_producer *p, uint32_t epoch, uint64_t task)
{
    sluice_err e = settle(p, 0);
    if (e != SLUICE_OK)
        return e;
    p->epoch = epoch;
    p->task = task;
    p->next_seq = 0;
    return SLUICE_OK;
}

void sluice_producer_close(sluice_producer *p)
{
    if (!p)
        return;
    if (p->conn && p->used > 0)
        settle(p, 0);
    sluicei_conn_close(p->conn);
    for (int i = 0; i < p->nslots; i++)
        sluicei_buf_free(&p->ring[i].frame);
    free(p->ring);
    free(p);
}

void sluice_producer_stats_get(const sluice_producer *p, sluice_producer_stats *st)
{
    *st = p->st;
}

const char *sluice_producer_errstr(const sluice_producer *p)
{
    return p->errstr;
}

const char *sluice_producer_id(const sluice_producer *p)
{
    return p->id;
}
