/* The producer API (producer.h): encode, grouped and pipelined pushes,
 * backpressure, reconnect.
 *
 * Pushes live in a ring of max_inflight slots; each slot owns the frame it
 * sent, so that a push can be sent again after a lost connection or a
 * "full" answer, and so that steady state allocates nothing (a slot's
 * buffer is reused by the next batch).
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
 * A push answered "full" (or OOM, or a transient server error) is retried
 * after the others in flight were answered, after waiting for room: BLPOP
 * on the queue's room list, which the ack script feeds, with a 1 s
 * timeout. So a blocked producer wakes within milliseconds of an ack and
 * otherwise costs one round trip per second. The refused batches are then
 * sent again, grouped as above.
 *
 * After a lost connection every unanswered group is sent again: the push
 * script drops an id that is already stored or acknowledged, so this loses
 * nothing and duplicates nothing (a MULTI cut short never runs at all).
 *
 * Any error returned to the caller ends the pushes that were unanswered at
 * that moment: they may or may not be in Redis (errstr says how many).
 *
 * Housekeeping (the task lease and the heartbeat) runs only when no reply
 * is owed, so that a plain command cannot take a push's reply: when one is
 * due, a push first settles the pipeline (once a second at most, so the
 * pipelining is barely touched). It also runs inside every wait for room
 * and for a task, and in sluice_producer_flush(), which a caller doing long
 * work between pushes can call to keep its lease.
 *
 * Partitioned queues (cluster.h). The producer of a queue Q with P
 * partitions is a group: it has no connection of its own, and one child
 * producer per partition "Q#p" (same id), each with its own connection to
 * the node serving it, all resolved by the group's router. A child is an
 * ordinary producer of its partition; the group only chooses which child
 * works: a claimed task's child (every batch of a task goes to the task's
 * partition, where duplicates are dropped), or, for ad-hoc pushes, the
 * partitions in turn from home = hash(id) mod P. Only the working child
 * has pushes in flight; the others are idle, so that the group may use
 * their connections at any time (claims, heartbeats, probes for room).
 * A child holding a task whose partition is at its budget while another
 * partition has room and waiting tasks stops pushing with SLUICE_ERR_FULL
 * ("spilled"): the batches not stored are dropped from the ring and the
 * first of them is the task's resume point, handed back with the task;
 * whoever claims it again skips the batches before it.
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
#include <sluice/producer.h>

#include "cluster.h"
#include "conn.h"
#include "conn_send.h"
#include "producer_internal.h"
#include "proto.h"
#include "taskdef.h"
#include "wire.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define INFLIGHT_DEFAULT 4
#define INFLIGHT_MAX 1024
/* Batches and frame bytes per MULTI (see "Groups" above). */
#define GROUP_MAX 64
#define GROUP_BYTES ((size_t)1 << 20)
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
/* Heartbeat period: the producers hash and pstats:<pid> (sluice-ctl info). */
#define BEAT_MS 1000
#define LEASE_MS_DEFAULT 10000
/* Longest wait on task_wake before claiming again (each claim reaps). */
#define TASK_WAIT_S 1
/* task_done rounds of "Redis restarted: check the pushes first" before it
 * gives up (each takes a restart of Redis). */
#define TASK_DONE_ROUNDS 8
/* When a wait for room or for a task is first told to the log callback,
 * and how often again while it lasts. */
#define WAIT_NOTE_MS 5000
#define WAIT_NOTE_EVERY_MS 30000
/* A partitioned queue: one round of waiting on every partition's
 * task_wake at once (a token on one ends the round only after this). */
#define GROUP_TASK_WAIT_MS 200
/* A partitioned queue: how long a task's partition must refuse pushes for
 * lack of room before the task is left for another partition with room
 * (so that a partition that drains at once does not make tasks hop). */
#define SPILL_AFTER_MS 200
/* Pause after a retryable error reply on a routed connection: doubles
 * from the first to the second. */
#define REDIRECT_PAUSE_MS 100
#define REDIRECT_PAUSE_MAX_MS 2000
/* A partition's name "Q#p" (proto.h). */
#define QUEUE_NAME_MAX (SLUICE_MAX_QUEUE_NAME + 8)

enum slot_state {
    SLOT_OPEN,       /* encoded, in the group being filled, not sent yet */
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
    uint64_t gid;                      /* the group it was last sent in */
    enum slot_state state;
    int resent;                        /* sent again after a lost connection */
    int losses;                        /* connections lost awaiting its reply */
} slot;

struct sluice_producer {
    sluicei_conn *conn;                /* NULL in a group (partitioned queue) */
    char queue[QUEUE_NAME_MAX];
    char room_key[SLUICE_MAX_KEY];
    char meta_key[SLUICE_MAX_KEY];
    char in_prefix[SLUICE_MAX_KEY];    /* "sluice:{Q}:in:" */
    char id[SLUICE_MAX_PRODUCER_ID + 1];
    int reconnect_timeout_ms;
    volatile int *stop;
    void (*log)(void *arg, const char *msg);   /* opts.log */
    void *log_arg;
    uint64_t max_frame;                /* the queue's frame limit (meta max_frame) */

    uint32_t epoch;
    uint64_t task;
    uint64_t next_seq;                 /* 64-bit to notice the end of the 32-bit range */

    slot *ring;
    int nslots;
    int gmax;                          /* batches per group */
    int head;                          /* oldest slot in use */
    int used;                          /* slots in use, from head */
    int nopen;                         /* of those, the newest nopen are OPEN */
    size_t open_bytes;                 /* their frame bytes */
    int nsent;                         /* slots SENT */
    int nrefused;                      /* slots FULL or TRANSIENT */
    uint64_t gid_next;                 /* the next group's number */
    uint64_t gid_read;                 /* the oldest group not answered */
    int rstep;                         /* replies of group gid_read read so far (0..3) */
    char qerr[256];                    /* the first error among them, "" if none */
    int reload_scripts;                /* a NOSCRIPT was seen */
    int oom;                           /* Redis refused a group for lack of memory */
    int opened;                        /* open() succeeded: close() publishes counters */

    /* The request of a group, which refers to its frames. */
    sluicei_req req;

    sluice_producer_stats st;
    char errstr[512];

    /* The task held (sluice_producer_task_claim), or NULL. */
    sluice_task *task_held;
    char task_key[48];                 /* "epoch:shard" */
    int lease_ms;
    int64_t renewed_ms;                /* monotonic time of the last renewal */
    int lease_lost;                    /* task_renew said it is no longer ours */
    int earlier;                       /* task_renew: a task of an earlier epoch waits */
    int64_t beat_ms;                   /* monotonic time of the last heartbeat; 0: never */
    char task_wake_key[SLUICE_MAX_KEY];
    uint64_t resume;                   /* task held: its batches below this seq are stored
                                          already (task_claim): they are skipped */
    int may_spill;                     /* inside a push: settling may end in a spill */
    int spilled;                       /* the task held was spilled (see the top) */
    const char *spill_why;             /* why (a static string) */
    uint64_t spill_resume;             /* then: the first of its batches not stored */
    uint64_t lost_from;                /* task held: the first of its batches given up
                                          after an error (abandon()); UINT64_MAX: none */
    uint64_t claim_reconnects;         /* conn->reconnects when the task held was claimed */

    /* Cluster: retryable error replies (see the top). */
    int redirected;                    /* a group was refused by one: drop the connection */
    char redirect_msg[200];            /* that reply */
    int64_t redirect_since;            /* monotonic start of the present series; 0: none */
    int redirect_pause_ms;             /* the pause before the next try */
    redisReply *exec_reply;            /* with WAIT: the oldest group's EXEC reply, applied
                                          when its WAIT answered */
    /* WAIT asks for at most the replicas the node has connected (ROLE), so
     * that a replica that is down does not cost every push a second. */
    int wait_have;                     /* replicas ROLE showed; -1: not asked */
    int role_due;                      /* a WAIT came back short: ask ROLE */
    int64_t role_next_ms;              /* while below url.wait_replicas: ask again then */

    /* Routing: the router that resolves this producer's connections (and
     * its children's); NULL on one plain server. Owned by the outermost
     * producer and closed after every connection bound to it. */
    sluicei_router *router;
    /* A group: the children, one per partition. */
    sluice_producer **part;
    int nparts;
    int home;                          /* hash(id) mod nparts */
    int cur;                           /* the working child */
    int rr;                            /* the child of the next ad-hoc task */
    int spilled_from;                  /* a task was just handed back for lack of room
                                          there: the next claim's room pass skips it;
                                          -1: none */
    int64_t beat_due_ms;               /* the next heartbeat due among idle children */
    /* A child: */
    sluice_producer *group;            /* its group, or NULL for a plain producer */
    int active;                        /* claimed or pushed here: it beats */
    int probe;                         /* a probe or wait is under way on its connection */
    int64_t conn_tried_ms;             /* last quick reconnect (idle_connected()) */
    char claim_kind[16];               /* its last task_claim answer (group_claim) */
    uint64_t job_failed;               /* tasks failed, when task_claim said 'done' */
};

/* A claimed task and its decoded definition, which its strings point into. */
typedef struct task_box {
    sluice_task t;
    sluicei_taskdef *def;              /* owned */
} task_box;

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

/* The timeout argument of a BLPOP of ms milliseconds (at least 10). */
static void blpop_secs(char secs[24], int64_t ms)
{
    snprintf(secs, 24, "%.3f", (double)(ms < 10 ? 10 : ms) / 1000.0);
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

/* A retryable error reply (cluster.h) on a routed connection: the
 * queue's data is elsewhere, or about to be. A connection to one plain
 * server has no resolver: there these errors keep their old meaning. */
static int redirect_error(const sluice_producer *p, const char *msg)
{
    return p->conn && p->conn->resolve && msg && sluicei_cluster_retryable(msg, strlen(msg));
}

/* A command went through: the series of retryable errors, if any, ended. */
static void redirect_over(sluice_producer *p)
{
    p->redirect_since = 0;
    p->redirect_pause_ms = 0;
}

/* After a retryable error reply msg to `what` on a routed connection:
 * drops the connection, so that the next connect (recover()) asks the
 * router where the queue lives now, and pauses (doubling, see the top).
 * SLUICE_ERR_REDIS (errstr set) once the series lasted longer than
 * reconnect_timeout_ms (when set); SLUICE_ERR_IO when stopped. */
static sluice_err redirect_pause(sluice_producer *p, const char *what, const char *msg)
{
    int64_t now = sluicei_now_ms();
    if (p->redirect_since == 0) {
        p->redirect_since = now;
    } else if (p->reconnect_timeout_ms > 0 &&
               now - p->redirect_since >= p->reconnect_timeout_ms) {
        seterr(p, "%s: redis: %.200s (answered for %lld ms, longer than the reconnect "
               "timeout)", what, msg, (long long)(now - p->redirect_since));
        redirect_over(p);
        return SLUICE_ERR_REDIS;
    }
    p->redirect_pause_ms = p->redirect_pause_ms == 0 ? REDIRECT_PAUSE_MS
                           : p->redirect_pause_ms >= REDIRECT_PAUSE_MAX_MS / 2
                               ? REDIRECT_PAUSE_MAX_MS
                               : p->redirect_pause_ms * 2;
    char why[sizeof p->conn->errstr];
    snprintf(why, sizeof why, "%s: redis: %.400s", what, msg);
    sluicei_conn_drop(p->conn, why);
    for (int64_t end = now + p->redirect_pause_ms; (now = sluicei_now_ms()) < end;) {
        if (stopped(p)) {
            seterr(p, "%s: stopped while the queue's node was changing (%.200s)", what, msg);
            return SLUICE_ERR_IO;
        }
        sleep_ms(end - now > 50 ? 50 : (int)(end - now));
    }
    return SLUICE_OK;
}

/* ---- sending ---------------------------------------------------------- */

/* Whether two batches belong to the same task (may share a group). */
static int same_task(const slot *a, const slot *b)
{
    return a->id.epoch == b->id.epoch && a->id.task == b->id.task;
}

/* Changes a slot's state, keeping the count of refused slots. */
static void set_state(sluice_producer *p, slot *s, enum slot_state st)
{
    p->nrefused += (st == SLOT_FULL || st == SLOT_TRANSIENT) -
                   (s->state == SLOT_FULL || s->state == SLOT_TRANSIENT);
    s->state = st;
}

/* The replicas a WAIT after a write asks for: the url's, but no more than
 * the node has connected (once ROLE was asked). Changes only while no
 * reply is owed (housekeep(), recover()), so a group's replies are read as
 * it was sent. */
static int wait_n(const sluice_producer *p)
{
    int n = p->conn->url.wait_replicas;
    return p->wait_have >= 0 && p->wait_have < n ? p->wait_have : n;
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
    sluicei_req_str(q, c->script_sha[SLUICEI_SCRIPT_PUSH]);
    sluicei_req_str(q, "1");
    sluicei_req_str(q, p->meta_key);
    sluicei_req_u64(q, m[0]->id.epoch);
    sluicei_req_u64(q, m[0]->id.task);
    for (int i = 0; i < k; i++)
        sluicei_req_u64(q, m[i]->id.seq);
    sluicei_req_command(q, 1);
    sluicei_req_str(q, "EXEC");
    if (wait_n(p) > 0) {
        sluicei_req_command(q, 3);
        sluicei_req_str(q, "WAIT");
        sluicei_req_u64(q, (uint64_t)wait_n(p));
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
        slot *s = slot_at(p, i);
        if (s->state == SLOT_SENT && s->gid == gid)
            m[k++] = s;
    }
    return k;
}

/* Makes m[0..k) a new group, SENT, and sends it. A request that cannot
 * be built leaves them as they were. */
static sluice_err send_group(sluice_producer *p, slot **m, int k)
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
static void check_role(sluice_producer *p);

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
        /* Perhaps another node: ask which replicas it has before the
         * groups go again (nothing is owed on the new connection). */
        p->wait_have = -1;
        p->role_due = 1;
        check_role(p);
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
            seterr(p, "after reconnecting: %s", p->conn->errstr);
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
        m[i] = slot_at(p, p->used - k + i);
    sluice_err e = send_group(p, m, k);
    if (e == SLUICE_ERR_IO)
        e = recover(p);
    else if (e != SLUICE_OK)
        seterr(p, "push %s: %s", m[0]->idstr, p->conn->errstr);
    if (m[0]->state == SLOT_SENT) {
        p->nopen = 0;
        p->open_bytes = 0;
    }
    return e;
}

/* ---- replies ---------------------------------------------------------- */

static void count_stored(sluice_producer *p, const slot *s)
{
    p->st.batches++;
    p->st.records += s->nrecords;
    p->st.bytes += s->frame.len;
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
    if (redirect_error(p, msg)) {
        p->redirected = 1;
        snprintf(p->redirect_msg, sizeof p->redirect_msg, "%s", msg);
        return SLOT_TRANSIENT;
    }
    if (transient_error(msg)) {
        if (starts_with(msg, "NOSCRIPT"))
            p->reload_scripts = 1;
        return SLOT_TRANSIENT;
    }
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
        seterr(p, "push %s: %s (use smaller batches or raise the queue's byte budget)",
               s->idstr, why ? why + 7 : r->str);
    } else if (r->type == REDIS_REPLY_ERROR) {
        seterr(p, "push %s: redis: %s", s->idstr, r->str);
    } else {
        seterr(p, "push %s: unexpected reply type %d from the push script", s->idstr, r->type);
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
            seterr(p, "push %s: queue '%s' does not exist (create it with: sluice-ctl create %s)",
                   k ? m[0]->idstr : "?", p->queue, p->queue);
        else
            seterr(p, "push %s: redis: %s", k ? m[0]->idstr : "?", err);
        return code;
    }
    redirect_over(p);
    if (!sr || sr->type != REDIS_REPLY_ARRAY || sr->elements != (size_t)k) {
        for (int i = 0; i < k; i++)
            set_state(p, m[i], SLOT_FAILED);
        if (say)
            seterr(p, "push %s: unexpected reply to the push transaction (type %d)",
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
    if (p->rstep == 3 && wait_n(p) > 0) {
        p->exec_reply = r;
        p->rstep++;
        return SLUICE_OK;
    }
    if (p->rstep == 4) {
        if (r->type != REDIS_REPLY_INTEGER || r->integer < wait_n(p))
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
        seterr(p, "push %s: connection lost %d times awaiting the reply to this group of %d "
               "batch%s, %zu bytes (does the server refuse it? see proto-max-bulk-len): %s",
               k ? m[0]->idstr : "?", worst, k, k == 1 ? "" : "es", bytes, p->conn->errstr);
        return SLUICE_ERR_IO;
    }
    return recover(p);
}

/* Reads (waiting for it) and consumes the next reply owed. A lost
 * connection is recovered here (the groups stay SENT, sent again). */
static sluice_err read_one(sluice_producer *p)
{
    if (p->nsent == 0)
        return SLUICE_OK;
    redisReply *r = NULL;
    sluice_err e = sluicei_conn_read_reply(p->conn, &r);
    if (e == SLUICE_ERR_IO)
        return lost_reply(p);
    if (!r) {
        seterr(p, "push: %s", p->conn->errstr);
        return e;
    }
    return take_reply(p, r, 1);
}

/* Consumes the replies that have arrived, without waiting. */
static sluice_err read_ready(sluice_producer *p)
{
    while (p->nsent > 0 && p->conn->ctx) {
        redisReply *r = NULL;
        if (sluicei_conn_read_ready(p->conn, &r) != SLUICE_OK)
            return lost_reply(p);
        if (!r)
            return SLUICE_OK;
        sluice_err e = take_reply(p, r, 1);
        if (e != SLUICE_OK)
            return e;
    }
    return SLUICE_OK;
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
    uint64_t dropped = 0, failed = 0;
    /* The failed push itself is not counted: errstr names it. */
    for (int i = 0; i < p->used; i++) {
        slot *s = slot_at(p, i);
        failed += s->state == SLOT_FAILED;
        if (p->task_held && s->state != SLOT_DONE && s->id.seq < p->lost_from)
            p->lost_from = s->id.seq;
    }
    while (p->nsent > 0 && p->conn->ctx) {
        redisReply *r = NULL;
        if (sluicei_conn_read_reply(p->conn, &r) == SLUICE_ERR_IO || !r)
            break;
        take_reply(p, r, 0);
    }
    for (int i = 0; i < p->used; i++)
        dropped += slot_at(p, i)->state != SLOT_DONE;
    dropped -= failed;
    p->head = p->used = p->nsent = p->nrefused = p->nopen = 0;
    p->open_bytes = 0;
    p->gid_read = p->gid_next;
    p->rstep = 0;
    p->qerr[0] = '\0';
    if (p->exec_reply) {
        freeReplyObject(p->exec_reply);
        p->exec_reply = NULL;
    }
    if (dropped) {
        size_t n = strlen(p->errstr);
        snprintf(p->errstr + n, sizeof p->errstr - n, " (%" PRIu64 " other unconfirmed batch%s dropped)",
                 dropped, dropped == 1 ? "" : "es");
    }
}

/* ---- housekeeping: task lease and heartbeat -------------------------------- */

/* Runs script id with nothing in flight, regaining a lost connection (and
 * running the script again) as pushes do, and following the queue to
 * another node after a retryable error reply (the script did not run:
 * docs/PROTOCOL.md, "Redis Cluster"). Same contract as
 * sluicei_script_run(); *resent tells whether it was sent more than once
 * after a lost connection (the first call may have run). */
static sluice_err run_script(sluice_producer *p, sluicei_script_id id, int argc,
                             const char **argv, redisReply **out, int *resent)
{
    if (resent)
        *resent = 0;
    for (;;) {
        sluice_err e = sluicei_script_run(p->conn, id, p->queue, argc, argv, NULL, out);
        if (*out && (*out)->type == REDIS_REPLY_ERROR && redirect_error(p, (*out)->str)) {
            char msg[sizeof p->redirect_msg];
            snprintf(msg, sizeof msg, "%s", (*out)->str);
            freeReplyObject(*out);
            *out = NULL;
            if ((e = redirect_pause(p, sluicei_script_name(id), msg)) != SLUICE_OK ||
                (e = recover(p)) != SLUICE_OK) {
                snprintf(p->conn->errstr, sizeof p->conn->errstr, "%s", p->errstr);
                return e;
            }
            continue;
        }
        if (e != SLUICE_ERR_IO) {
            if (*out)
                redirect_over(p);
            return e;
        }
        if ((e = recover(p)) != SLUICE_OK)
            return e;
        if (resent)
            *resent = 1;
    }
}

/* WAIT for the url's replicas after a write that was run as a plain
 * command (task_done): its outcome does not matter (a timeout is no
 * error), only that the write had the chance to reach a replica. */
static void wait_replicas(sluice_producer *p)
{
    int n = wait_n(p);
    if (!p->conn->ctx || n <= 0)
        return;
    redisReply *r = NULL;
    sluicei_conn_command(p->conn, &r, "WAIT %d %d", n, SLUICEI_WAIT_MS);
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer < n)
        p->role_due = 1;
    if (r)
        freeReplyObject(r);
    check_role(p);   /* nothing is owed: ask at once */
}

/* ROLE of the node: ["master", offset, [[ip, port, offset], ...]] lists
 * the replicas connected. Asked after a WAIT came back short, and then
 * every second until as many replicas as the url asks for are back. Any
 * other answer (a replica, ROLE refused by an ACL) leaves WAIT as it is:
 * the writes themselves will tell. */
static void check_role(sluice_producer *p)
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

static int housekeeping_due(const sluice_producer *p)
{
    int64_t now = sluicei_now_ms();
    return renew_due(p, now) || p->beat_ms == 0 || now - p->beat_ms >= BEAT_MS || p->role_due;
}

/* Publishes this producer's counters (the beat script: liveness in the
 * producers hash, counters in pstats:<id>). At most six counters fit the
 * script runner's argument limit. Without may_reconnect a lost connection
 * is not regained (at close). */
static sluice_err beat(sluice_producer *p, int may_reconnect)
{
    char v[6][24];
    const sluice_producer_stats *st = &p->st;
    uint64_t vals[6] = {st->batches, st->bytes, st->blocked_us, st->duplicates, st->tasks_done,
                        st->tasks_failed};
    const char *argv[17] = {"producer", p->id, "", "", "",
                            "batches", v[0], "bytes", v[1], "blocked_us", v[2],
                            "duplicates", v[3], "tasks_done", v[4], "tasks_failed", v[5]};
    for (int i = 0; i < 6; i++)
        snprintf(v[i], sizeof v[i], "%" PRIu64, vals[i]);
    redisReply *r = NULL;
    sluice_err e = may_reconnect ? run_script(p, SLUICEI_SCRIPT_BEAT, 17, argv, &r, NULL)
                                 : sluicei_script_run(p->conn, SLUICEI_SCRIPT_BEAT, p->queue, 17,
                                                      argv, NULL, &r);
    if (r && r->type == REDIS_REPLY_ERROR && redirect_error(p, r->str) && p->conn->ctx) {
        /* The partition moved: the next connect finds it (idle_connected()). */
        sluicei_conn_drop(p->conn, NULL);
    }
    if (r)
        freeReplyObject(r);
    p->beat_ms = sluicei_now_ms();
    return e;
}

/* Extends the lease of the task held; sets lease_lost when a reaper took
 * it meanwhile, and earlier when a task of an earlier epoch waits. */
static sluice_err renew(sluice_producer *p)
{
    char lease[16];
    snprintf(lease, sizeof lease, "%d", p->lease_ms);
    const char *argv[3] = {p->id, p->task_key, lease};
    redisReply *r = NULL;
    int64_t t0 = sluicei_now_ms();
    sluice_err e = run_script(p, SLUICEI_SCRIPT_TASK_RENEW, 3, argv, &r, NULL);
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
static sluice_err housekeep(sluice_producer *p)
{
    sluice_err e = SLUICE_OK;
    check_role(p);
    if (renew_due(p, sluicei_now_ms()))
        e = renew(p);
    if (e != SLUICE_ERR_IO && (p->beat_ms == 0 || sluicei_now_ms() - p->beat_ms >= BEAT_MS))
        e = beat(p, 1);
    return e == SLUICE_ERR_IO ? e : SLUICE_OK;
}

static sluice_err lease_lost_error(sluice_producer *p)
{
    seterr(p, "lease lost: task %s was reaped (this producer did not renew its lease in "
           "time) and is redone by another producer", p->task_key);
    return SLUICE_ERR_IO;
}

/* ---- partitions: heartbeats and spilling ------------------------------- */

/* Whether idle child c has a connection: one that was lost (a node that
 * died or moved, a redirect) gets one quick attempt to connect again, at
 * most once a beat and without waiting, so that the group's probes and
 * heartbeats neither stall on a dead node nor lose a partition for good
 * (the child regains it with patience when it works again). */
static int idle_connected(sluice_producer *c)
{
    if (c->conn->ctx)
        return 1;
    int64_t now = sluicei_now_ms();
    if (c->conn_tried_ms != 0 && now - c->conn_tried_ms < BEAT_MS)
        return 0;
    c->conn_tried_ms = now;
    if (sluicei_conn_reconnect(c->conn, now, NULL) != SLUICE_OK)
        return 0;
    c->reload_scripts = 0;   /* the reconnect loaded them */
    c->st.reconnects = c->conn->reconnects;
    return 1;
}

/* Beats, when due, every child of group g that worked (claimed or pushed)
 * and is idle (nothing in its ring), except skip: so that sluice-ctl info
 * of each partition this producer uses sees it alive. */
static void group_beat(sluice_producer *g, const sluice_producer *skip)
{
    int64_t now = sluicei_now_ms();
    if (now < g->beat_due_ms)
        return;
    int64_t next = now + BEAT_MS;
    for (int k = 0; k < g->nparts; k++) {
        sluice_producer *c = g->part[k];
        if (!c->active || c == skip || c->used > 0)
            continue;
        if (c->beat_ms == 0 || now - c->beat_ms >= BEAT_MS) {
            if (idle_connected(c))
                beat(c, 0);
            else
                c->beat_ms = now;   /* try again in a beat */
        }
        if (c->beat_ms + BEAT_MS < next)
            next = c->beat_ms + BEAT_MS;
    }
    g->beat_due_ms = next;
}

/* Reads one reply of a probe; *r NULL when the connection was lost (it
 * is dropped then) or the reply is an error (a retryable one drops the
 * connection too, so that the child follows its partition when it works
 * again). */
static void probe_reply(sluice_producer *c, redisReply **r)
{
    sluice_err e = sluicei_conn_read_reply(c->conn, r);
    if (e == SLUICE_OK)
        return;
    if (*r && redirect_error(c, (*r)->str) && c->conn->ctx) {
        /* The other replies still owed go with the connection. */
        sluicei_conn_drop(c->conn, NULL);
    }
    if (*r)
        freeReplyObject(*r);
    *r = NULL;
}

static int64_t reply_int(const redisReply *r)
{
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return r->type == REDIS_REPLY_NIL ? 0 : -1;
}

/* Whether a partition of group g other than from's has room and tasks
 * waiting: room for one more batch of `frame` bytes within 3/4 of both
 * budgets, which is what the push script admits for an epoch ahead of the
 * trainers. Anything less would send the producer to a partition that
 * refuses it too, and back (the task it handed back is still first in
 * line where it was). One round trip, to every such partition at once;
 * idle children only (their connections carry nothing else). */
static int spill_target(sluice_producer *g, const sluice_producer *from, size_t frame)
{
    int found = 0;
    for (int k = 0; k < g->nparts; k++) {
        sluice_producer *c = g->part[k];
        c->probe = 0;
        if (c == from || c->used > 0 || !idle_connected(c))
            continue;
        char dlv[SLUICE_MAX_KEY], bytes[SLUICE_MAX_KEY], job[SLUICE_MAX_KEY];
        sluicei_key(dlv, c->queue, "dlv");
        sluicei_key(bytes, c->queue, "bytes");
        sluicei_key(job, c->queue, "job");
        const char *a_meta[4] = {"HMGET", c->meta_key, "max_batches", "max_bytes"};
        const char *a_dlv[2] = {"HLEN", dlv}, *a_bytes[2] = {"GET", bytes};
        const char *a_tasks[3] = {"HGET", job, "twaiting"};
        if (sluicei_conn_append_argv(c->conn, 4, a_meta, NULL) == SLUICE_OK &&
            sluicei_conn_append_argv(c->conn, 2, a_dlv, NULL) == SLUICE_OK &&
            sluicei_conn_append_argv(c->conn, 2, a_bytes, NULL) == SLUICE_OK &&
            sluicei_conn_append_argv(c->conn, 3, a_tasks, NULL) == SLUICE_OK &&
            sluicei_conn_flush(c->conn) == SLUICE_OK)
            c->probe = 1;
    }
    for (int k = 0; k < g->nparts; k++) {
        sluice_producer *c = g->part[k];
        if (!c->probe)
            continue;
        c->probe = 0;
        redisReply *r[4] = {NULL, NULL, NULL, NULL};
        for (int i = 0; i < 4 && c->conn->ctx; i++)
            probe_reply(c, &r[i]);
        if (r[0] && r[0]->type == REDIS_REPLY_ARRAY && r[0]->elements == 2) {
            int64_t maxn = reply_int(r[0]->element[0]), maxb = reply_int(r[0]->element[1]);
            int64_t held = reply_int(r[1]), used = reply_int(r[2]), waiting = reply_int(r[3]);
            int64_t roomn = maxn * 3 / 4 > 1 ? maxn * 3 / 4 : 1, roomb = maxb * 3 / 4;
            if (maxn > 0 && maxb > 0 && held >= 0 && held + 1 <= roomn && used >= 0 &&
                used + (int64_t)frame <= roomb && waiting > 0)
                found = 1;
        }
        for (int i = 0; i < 4; i++)
            if (r[i])
                freeReplyObject(r[i]);
    }
    return found;
}

static const char why_earlier[] =
    "the queue is at its budget and a task of an earlier epoch waits for a producer";
static const char why_partition[] =
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
    else if (p->group && p->group->nparts > 1 && spill_target(p->group, p, s->frame.len))
        p->spill_why = why_partition;
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
        slot *s = slot_at(p, i);
        if (s->state != SLOT_DONE) {
            resume = s->id.seq;
            break;
        }
    }
    if (resume > p->lost_from)
        resume = p->lost_from;   /* given up after an error: not stored either */
    p->head = p->used = p->nsent = p->nrefused = p->nopen = 0;
    p->open_bytes = 0;
    p->gid_read = p->gid_next;
    p->rstep = 0;
    p->qerr[0] = '\0';
    p->oom = 0;
    p->spilled = 1;
    p->spill_resume = resume;
    seterr(p, "task %s: %s: hand the task back (sluice_producer_task_release) and claim the "
           "next; it resumes at batch %" PRIu64, p->task_key, p->spill_why, resume);
    return SLUICE_ERR_FULL;
}

/* ---- waiting for room --------------------------------------------------- */

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
    redisReply *r[5] = {NULL, NULL, NULL, NULL, NULL};
    if (sluicei_conn_append_argv(p->conn, 5, a_meta, NULL) != SLUICE_OK ||
        sluicei_conn_append_argv(p->conn, 2, a_dlv, NULL) != SLUICE_OK ||
        sluicei_conn_append_argv(p->conn, 2, a_bytes, NULL) != SLUICE_OK ||
        sluicei_conn_append_argv(p->conn, 2, a_cons, NULL) != SLUICE_OK ||
        sluicei_conn_append_argv(p->conn, 1, a_time, NULL) != SLUICE_OK)
        return;
    for (int i = 0; i < 5 && p->conn->ctx; i++)
        sluicei_conn_read_reply(p->conn, &r[i]);
    if (r[0] && r[0]->type == REDIS_REPLY_ARRAY && r[0]->elements == 3 && r[1] && r[2] && r[3] &&
        r[3]->type == REDIS_REPLY_ARRAY && r[4] && r[4]->type == REDIS_REPLY_ARRAY &&
        r[4]->elements == 2) {
        int64_t now = reply_int(r[4]->element[0]) * 1000 + reply_int(r[4]->element[1]) / 1000;
        int64_t lease = reply_int(r[0]->element[2]) > 0 ? reply_int(r[0]->element[2]) : 10000;
        int alive = 0;
        for (size_t i = 0; i < r[3]->elements; i++)
            alive += now - reply_int(r[3]->element[i]) <= lease;
        char who[64];
        if (alive)
            snprintf(who, sizeof who, "%d consumer%s alive", alive, alive == 1 ? "" : "s");
        else
            snprintf(who, sizeof who, "no consumer is alive");
        char msg[512];
        snprintf(msg, sizeof msg, "queue '%s' is at its budget (it holds %lld of %lld batches, "
                 "%.1f of %.1f MB): pushes%s%s waited %.0f s for consumers to acknowledge "
                 "batches (%s)", p->queue, (long long)reply_int(r[1]),
                 (long long)reply_int(r[0]->element[0]), (double)reply_int(r[2]) / 1e6,
                 (double)reply_int(r[0]->element[1]) / 1e6, p->task_held ? " of task " : "",
                 p->task_held ? p->task_key : "", (double)waited_ms / 1000.0, who);
        p->log(p->log_arg, msg);
    }
    for (int i = 0; i < 5; i++)
        if (r[i])
            freeReplyObject(r[i]);
}

/* Waits until a push refused in state `why` is worth sending again, for
 * room at most cap_ms (when >= 0). With nothing in flight, so that a
 * plain command is safe. */
static sluice_err wait_retry(sluice_producer *p, const slot *s, enum slot_state why,
                             int64_t cap_ms)
{
    if (stopped(p)) {
        seterr(p, "push %s: stopped while waiting for room in queue '%s'", s->idstr, p->queue);
        return SLUICE_ERR_IO;
    }
    uint64_t t0 = now_us();
    sluice_err e = SLUICE_OK;
    int final = 0;   /* redirect_pause() gave up: no reconnect */
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
        blpop_secs(secs, ms);
        redisReply *r = NULL;
        e = sluicei_conn_command(p->conn, &r, "BLPOP %s %s", p->room_key, secs);
        if (e == SLUICE_ERR_REDIS && r && redirect_error(p, r->str)) {
            char msg[sizeof p->redirect_msg];
            snprintf(msg, sizeof msg, "%s", r->str);
            e = redirect_pause(p, "waiting for room", msg);
            final = e != SLUICE_OK;
        } else if (e == SLUICE_ERR_REDIS) {
            sleep_ms(TRANSIENT_PAUSE_MS);   /* LOADING and the like; the push tells */
            e = SLUICE_OK;
        }
        if (r)
            freeReplyObject(r);
    } else if (p->redirected) {
        /* The group was refused by a retryable error: the queue's node is
         * changing. Follow it (the push is sent again after recover()). */
        p->redirected = 0;
        e = redirect_pause(p, s->idstr, p->redirect_msg);
        final = e != SLUICE_OK;
        if (e == SLUICE_ERR_REDIS) {
            char why[sizeof p->errstr];
            snprintf(why, sizeof why, "%s", p->errstr);
            seterr(p, "push %s", why);
        }
    } else {
        sleep_ms(TRANSIENT_PAUSE_MS);
    }
    if (e == SLUICE_OK && p->reload_scripts && p->conn->ctx) {
        if (sluicei_script_load(p->conn) == SLUICE_OK)
            p->reload_scripts = 0;
    }
    if (!final && (e == SLUICE_ERR_IO || !p->conn->ctx))
        e = recover(p);
    /* A producer blocked here keeps its task: the lease is renewed, at
     * least every second while it waits for room (which also tells
     * whether a task of an earlier epoch waits: spill_due()); and its
     * other partitions still see it. */
    if (e == SLUICE_OK && why == SLOT_FULL && p->task_held && !p->lease_lost &&
        sluicei_now_ms() - p->renewed_ms >= 1000 && renew(p) == SLUICE_ERR_IO)
        e = SLUICE_ERR_IO;
    if (e == SLUICE_OK)
        e = housekeep(p);
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
static sluice_err retry_refused(sluice_producer *p)
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
            slot *s = slot_at(p, i);
            if (s->state != SLOT_FULL && s->state != SLOT_TRANSIENT)
                continue;
            if (k > 0 && (bytes + s->frame.len > GROUP_BYTES || !same_task(m[0], s)))
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
            e = send_group(p, m, k);
            if (e == SLUICE_ERR_IO)
                e = recover(p);   /* sends the group again */
            else if (e != SLUICE_OK)
                seterr(p, "push %s: %s", m[0]->idstr, p->conn->errstr);
        }
        while (e == SLUICE_OK && p->nsent > 0)
            e = read_one(p);
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

/* Sends the group being filled, then reads replies, oldest first, until
 * at most keep pushes are unanswered. When one was refused, reads all of
 * them and pushes the refused ones again: afterwards nothing is in flight.
 * On error the ring is emptied (abandon()). */
static sluice_err settle(sluice_producer *p, int keep)
{
    sluice_err e = send_open(p);
    while (e == SLUICE_OK && p->nsent > (p->nrefused ? 0 : keep))
        e = read_one(p);
    if (e == SLUICE_OK)
        e = retry_refused(p);
    if (e != SLUICE_OK) {
        if (!(e == SLUICE_ERR_FULL && p->spilled))
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

/* A new producer of queue q (a plain queue or one partition), without a
 * connection. */
static sluice_err producer_new(sluice_producer **out, const sluice_producer_opts *o,
                               const char *q, const char *id)
{
    sluice_producer *p = calloc(1, sizeof *p);
    if (!p)
        return SLUICE_ERR_NOMEM;
    p->nslots = o->max_inflight > 0 ? o->max_inflight : INFLIGHT_DEFAULT;
    p->ring = calloc((size_t)p->nslots, sizeof *p->ring);
    if (!p->ring) {
        free(p);
        return SLUICE_ERR_NOMEM;
    }
    p->gmax = p->nslots / 2 < 1 ? 1 : p->nslots / 2 > GROUP_MAX ? GROUP_MAX : p->nslots / 2;
    snprintf(p->queue, sizeof p->queue, "%s", q);
    sluicei_key(p->room_key, p->queue, "room");
    sluicei_key(p->meta_key, p->queue, "meta");
    sluicei_key(p->in_prefix, p->queue, "in:");
    sluicei_key(p->task_wake_key, p->queue, "task_wake");
    snprintf(p->id, sizeof p->id, "%s", id);
    p->reconnect_timeout_ms = o->reconnect_timeout_ms;
    p->stop = o->stop;
    p->log = o->log;
    p->log_arg = o->log_arg;
    p->max_frame = SLUICEI_MAX_FRAME_DEFAULT;
    p->epoch = 0;
    p->task = ADHOC_TASK_MIN + sluicei_random64() % (ADHOC_TASK_END - ADHOC_TASK_MIN);
    p->lost_from = UINT64_MAX;
    p->wait_have = -1;
    p->role_due = 1;   /* housekeep() before the first push asks ROLE */
    *out = p;
    return SLUICE_OK;
}

/* Opens a connection to the node that serves queue q (a plain queue or a
 * partition) now, that follows q when it moves (sluicei_router_bind). */
static sluice_err routed_conn(sluicei_router *r, const char *q, const sluice_producer_opts *o,
                              sluicei_conn **out, char *err, size_t errlen)
{
    sluicei_url u;
    sluice_err e = sluicei_router_url(r, q, 0, &u, err, errlen);
    if (e != SLUICE_OK)
        return e;
    e = sluicei_conn_open_url(out, &u, o->connect_timeout_ms, CMD_TIMEOUT_MS, err, errlen);
    if (e == SLUICE_OK)
        sluicei_router_bind(r, q, *out);
    sluicei_url_free(&u);
    return e;
}

/* FNV-1a 64 of s: the home partition of a producer id. */
static uint64_t hash_str(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static sluice_err queue_exists(sluice_producer *p, int *exists, char *err, size_t errlen);

/* Makes p the group of the nparts partitions of its queue: one child per
 * partition, connected. r is the router (NULL: every partition is on the
 * server of o->redis_url). */
static sluice_err open_partitions(sluice_producer *p, const sluice_producer_opts *o,
                                  sluicei_router *r, int nparts, char *err, size_t errlen)
{
    p->part = calloc((size_t)nparts, sizeof *p->part);
    if (!p->part) {
        snprintf(err, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    p->home = (int)(hash_str(p->id) % (uint64_t)nparts);
    p->spilled_from = -1;
    p->cur = p->home;
    p->rr = (p->home + 1) % nparts;
    for (int k = 0; k < nparts; k++) {
        char name[QUEUE_NAME_MAX];
        sluicei_partition_name(name, p->queue, k);
        sluice_err e = producer_new(&p->part[k], o, name, p->id);
        if (e != SLUICE_OK) {
            snprintf(err, errlen, "out of memory");
            return e;
        }
        p->nparts = k + 1;   /* so that close() frees it */
        sluice_producer *c = p->part[k];
        c->group = p;
        e = r ? routed_conn(r, name, o, &c->conn, err, errlen)
              : sluicei_conn_open(&c->conn, o->redis_url, o->connect_timeout_ms, CMD_TIMEOUT_MS,
                                  err, errlen);
        if (e != SLUICE_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, errlen, "partition '%s': %.300s", name, why);
            return e;
        }
        int exists = 0;
        e = queue_exists(c, &exists, err, errlen);
        if (e == SLUICE_OK && !exists) {
            snprintf(err, errlen, "queue '%s' has no partition '%s' (delete it and create it "
                     "again)", p->queue, name);
            e = SLUICE_ERR_NOQUEUE;
        }
        if (e != SLUICE_OK)
            return e;
        c->opened = 1;
    }
    return SLUICE_OK;
}

/* Whether queue q exists on p's connection (SLUICE_OK and *exists, with
 * its frame limit read into p), or the error (err says why). */
static sluice_err queue_exists(sluice_producer *p, int *exists, char *err, size_t errlen)
{
    redisReply *r = NULL;
    sluice_err e = sluicei_conn_command(p->conn, &r, "HMGET %s version max_frame", p->meta_key);
    if (e == SLUICE_OK && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        *exists = r->element[0]->type == REDIS_REPLY_STRING;
        if (r->element[1]->type == REDIS_REPLY_STRING)
            p->max_frame = strtoull(r->element[1]->str, NULL, 10);
    } else if (e == SLUICE_OK) {
        snprintf(err, errlen, "HMGET %s: unexpected reply", p->meta_key);
        e = SLUICE_ERR_PROTOCOL;
    } else {
        if (r)
            e = sluicei_reply_error_code(r);   /* NOAUTH, NOPERM... */
        snprintf(err, errlen, "%s", p->conn->errstr);
    }
    if (r)
        freeReplyObject(r);
    return e;
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

    char id[SLUICE_MAX_PRODUCER_ID + 1];
    if (o->producer_id)
        snprintf(id, sizeof id, "%s", o->producer_id);
    else
        default_id(id);
    sluice_producer *p;
    if (producer_new(&p, o, o->queue, id) != SLUICE_OK) {
        set_errbuf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    sluicei_router *r = NULL;
    int nparts = 0, exists = 0;
    e = sluicei_router_open(&r, o->redis_url, o->connect_timeout_ms, CMD_TIMEOUT_MS, err,
                            sizeof err);
    if (e == SLUICE_OK && sluicei_router_kind_of(r) == SLUICEI_ROUTER_SINGLE) {
        /* One server: a plain queue is opened as it always was (its meta
         * key is there); the router serves only to find partitions. */
        e = sluicei_conn_open(&p->conn, o->redis_url, o->connect_timeout_ms, CMD_TIMEOUT_MS, err,
                              sizeof err);
        if (e == SLUICE_OK)
            e = queue_exists(p, &exists, err, sizeof err);
        if (e == SLUICE_OK && !exists)
            e = sluicei_queue_partitions(r, p->queue, &nparts, err, sizeof err);
        if (e == SLUICE_OK && nparts > 0) {
            sluicei_conn_close(p->conn);   /* the group has none */
            p->conn = NULL;
        }
        sluicei_router_close(r);
        r = NULL;
    } else if (e == SLUICE_OK) {
        p->router = r;   /* closed by sluice_producer_close() */
        e = sluicei_queue_partitions(r, p->queue, &nparts, err, sizeof err);
        if (e == SLUICE_OK && nparts == 0)
            e = routed_conn(r, p->queue, o, &p->conn, err, sizeof err);
        if (e == SLUICE_OK && nparts == 0)
            e = queue_exists(p, &exists, err, sizeof err);
    }
    if (e == SLUICE_ERR_NOQUEUE || (e == SLUICE_OK && !exists && nparts == 0))
        e = SLUICE_ERR_NOQUEUE;
    if (e == SLUICE_ERR_NOQUEUE)
        snprintf(err, sizeof err, "queue '%s' does not exist (create it with: sluice-ctl create %s)",
                 p->queue, p->queue);
    if (e == SLUICE_OK && nparts > 0)
        e = open_partitions(p, o, p->router, nparts, err, sizeof err);
    if (e != SLUICE_OK) {
        set_errbuf(errbuf, errlen, err);
        sluice_producer_close(p);
        return e;
    }
    p->opened = 1;
    *out = p;
    return SLUICE_OK;
}

/* Takes the next free slot and numbers it; settles first when the ring is
 * full. */
static sluice_err next_slot(sluice_producer *p, slot **out)
{
    if (p->next_seq > SLUICEI_MAX_SEQ) {
        if (p->task_held || p->task < ADHOC_TASK_MIN) {
            seterr(p, "task %" PRIu32 ":%" PRIu64 " has more than %u batches, the most one task "
                   "may have (split its shard: split= in the manifest)", p->epoch, p->task,
                   SLUICEI_MAX_SEQ + 1);
            return SLUICE_ERR_INVALID;
        }
        /* An ad-hoc run goes on as a new ad-hoc task (unique ids). */
        p->task = ADHOC_TASK_MIN + sluicei_random64() % (ADHOC_TASK_END - ADHOC_TASK_MIN);
        p->next_seq = 0;
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

/* Adds the encoded slot s to the group being filled, and sends the group
 * when it is full or when no other group awaits its answer (see "Groups"
 * at the top). A refusal seen on the way is dealt with at once: the push
 * waits for room. */
static sluice_err launch(sluice_producer *p, slot *s, uint64_t nrecords)
{
    /* A group is one task's batches: a new task starts a new group. */
    if (p->nopen > 0 && !same_task(slot_at(p, p->used - 1), s)) {
        sluice_err e = send_open(p);
        if (e != SLUICE_OK) {
            abandon(p);
            return e;
        }
    }
    s->nrecords = nrecords;
    s->state = SLOT_OPEN;
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
        return settle(p, p->nslots);
    if (e != SLUICE_OK)
        abandon(p);
    return e;
}

static sluice_err encode_failed(sluice_producer *p, const slot *s, sluice_err e)
{
    seterr(p, "push %s: cannot encode the batch: %s", s->idstr, sluice_strerror(e));
    return e;
}

/* Copies the error of child c to its group g, whose errstr the caller
 * reads. */
static sluice_err fwd(sluice_producer *g, const sluice_producer *c, sluice_err e)
{
    if (e != SLUICE_OK)
        snprintf(g->errstr, sizeof g->errstr, "%s", c->errstr);
    return e;
}

static sluice_err spilled_error(sluice_producer *p)
{
    seterr(p, "task %s was given up (%s; SLUICE_ERR_FULL): hand it back "
           "(sluice_producer_task_release)", p->task_key, p->spill_why);
    return SLUICE_ERR_FULL;
}

/* Before each push: housekeeping when due (after settling, so that no
 * reply is owed), and no push for a task whose lease was lost or that
 * was spilled. */
static sluice_err before_push(sluice_producer *p)
{
    if (p->spilled)
        return spilled_error(p);
    if (housekeeping_due(p)) {
        sluice_err e = settle(p, 0);
        if (e == SLUICE_OK)
            e = housekeep(p);
        if (e != SLUICE_OK)
            return e;
    }
    if (p->task_held && p->lease_lost)
        return lease_lost_error(p);
    return SLUICE_OK;
}

/* Pushes one batch: records recs[0..n), or, when tensors, nt tensors t of
 * rows rows. In a group, through the working child. */
static sluice_err push_batch(sluice_producer *p, const sluice_record *recs, size_t n,
                             int tensors, uint64_t rows, const sluice_tensor *t, size_t nt)
{
    if (p->nparts > 0) {
        sluice_producer *c = p->part[p->cur];
        group_beat(p, c);
        c->active = 1;
        return fwd(p, c, push_batch(c, recs, n, tensors, rows, t, nt));
    }
    slot *s;
    p->may_spill = 1;
    sluice_err e = before_push(p);
    if (e == SLUICE_OK && p->task_held && p->next_seq < p->resume) {
        /* Stored by an earlier holder of the task, before its resume
         * point: neither encoded nor sent. */
        p->next_seq++;
        p->may_spill = 0;
        return SLUICE_OK;
    }
    if (e == SLUICE_OK)
        e = next_slot(p, &s);
    if (e == SLUICE_OK) {
        sluicei_batch_meta m = {s->id, p->id, sluicei_wall_us()};
        e = tensors ? sluicei_wire_encode_tensors(&s->frame, &m, rows, t, nt)
                    : sluicei_wire_encode_records(&s->frame, &m, recs, n);
        if (e != SLUICE_OK) {
            e = encode_failed(p, s, e);
        } else if (s->frame.len > p->max_frame) {
            /* The queue's consumers would refuse it: refused here, before
             * it costs Redis anything. */
            seterr(p, "push %s: batch of %zu bytes exceeds the frame limit of queue '%s', %" PRIu64
                   " bytes (use smaller batches, or create the queue with a larger "
                   "--max-frame-bytes)", s->idstr, s->frame.len, p->queue, p->max_frame);
            e = SLUICE_ERR_TOOBIG;
        } else {
            e = launch(p, s, tensors ? rows : n);
        }
    }
    p->may_spill = 0;
    return e;
}

sluice_err sluice_producer_push_records(sluice_producer *p, const sluice_record *recs, size_t n)
{
    return push_batch(p, recs, n, 0, 0, NULL, 0);
}

sluice_err sluice_producer_push_tensors(sluice_producer *p, uint64_t n, const sluice_tensor *t,
                                        size_t nt)
{
    return push_batch(p, NULL, 0, 1, n, t, nt);
}

/* Also the occasion for housekeeping (lease, heartbeat) when it is due, so
 * that a caller busy between pushes keeps its task by flushing now and
 * then; a lost lease is reported as SLUICE_ERR_IO "lease lost: ...". */
sluice_err sluice_producer_flush(sluice_producer *p)
{
    if (p->nparts > 0) {
        sluice_producer *c = p->part[p->cur];
        sluice_err e = fwd(p, c, sluice_producer_flush(c));
        group_beat(p, c);
        return e;
    }
    if (p->spilled)
        return spilled_error(p);
    p->may_spill = 1;   /* a flush is part of pushing */
    sluice_err e = settle(p, 0);
    p->may_spill = 0;
    if (e == SLUICE_OK && housekeeping_due(p))
        e = housekeep(p);
    if (e == SLUICE_OK && p->task_held && p->lease_lost)
        e = lease_lost_error(p);
    return e;
}

/* A group: settles the working child's pushes and makes the child of
 * the next ad-hoc task (round robin) the working one. */
/* Settles the child pushing so far and makes partition `to` the current
 * one; to < 0: the next in turn. */
static sluice_err group_next_child(sluice_producer *g, int to, sluice_producer **out)
{
    sluice_producer *c = g->part[g->cur];
    sluice_err e = settle(c, 0);
    if (e != SLUICE_OK)
        return fwd(g, c, e);
    if (to < 0) {
        g->cur = g->rr;
        g->rr = (g->rr + 1) % g->nparts;
    } else {
        g->cur = to;
    }
    *out = g->part[g->cur];
    return SLUICE_OK;
}

sluice_err sluice_producer_set_task(sluice_producer *p, uint32_t epoch, uint64_t task)
{
    if (p->task_held) {
        seterr(p, "set_task: task %s is held; finish it first (task_done/_fail/_release)",
               p->task_key);
        return SLUICE_ERR_INVALID;
    }
    if (p->nparts > 0) {
        /* Task t in partition t mod P, as sluice-ctl submit deals shards:
         * the same (epoch, task) always meets the same duplicate check. */
        sluice_producer *c;
        sluice_err e = group_next_child(p, (int)(task % (uint64_t)p->nparts), &c);
        return e == SLUICE_OK ? fwd(p, c, sluice_producer_set_task(c, epoch, task)) : e;
    }
    sluice_err e = settle(p, 0);
    if (e != SLUICE_OK)
        return e;
    p->epoch = epoch;
    p->task = task;
    p->next_seq = 0;
    return SLUICE_OK;
}

sluice_err sluicei_producer_new_adhoc(sluice_producer *p)
{
    if (p->nparts == 0)
        return SLUICE_OK;
    if (p->task_held) {
        seterr(p, "task %s is held; finish it first (task_done/_fail/_release)", p->task_key);
        return SLUICE_ERR_INVALID;
    }
    sluice_producer *c;
    sluice_err e = group_next_child(p, -1, &c);
    if (e == SLUICE_OK) {
        c->epoch = 0;
        c->task = ADHOC_TASK_MIN + sluicei_random64() % (ADHOC_TASK_END - ADHOC_TASK_MIN);
        c->next_seq = 0;
    }
    return e;
}

int sluicei_producer_partitions(const sluice_producer *p)
{
    return p->nparts;
}

/* The first half of closing: hands the task back, settles the pushes and
 * publishes the final counters. A child's waits may touch its siblings
 * (group_beat()), so every child of a group gets this before any is
 * freed. */
static void close_finish(sluice_producer *p)
{
    if (p->task_held && p->conn)
        sluice_producer_task_release(p, p->task_held);   /* not left to the reaper */
    if (p->conn && p->used > 0)
        settle(p, 0);
    if (p->opened && p->conn && p->conn->ctx && (!p->group || p->active))
        beat(p, 0);   /* the final counters, for sluice-ctl info */
}

static void close_free(sluice_producer *p)
{
    sluicei_conn_close(p->conn);
    sluicei_router_close(p->router);   /* after every connection bound to it */
    if (p->exec_reply)
        freeReplyObject(p->exec_reply);
    for (int i = 0; i < p->nslots; i++)
        sluicei_buf_free(&p->ring[i].frame);
    sluicei_req_free(&p->req);
    free(p->ring);
    free(p);
}

void sluice_producer_close(sluice_producer *p)
{
    if (!p)
        return;
    if (p->part) {
        for (int k = 0; k < p->nparts; k++)
            close_finish(p->part[k]);
        for (int k = 0; k < p->nparts; k++)
            close_free(p->part[k]);
        free(p->part);
        p->task_held = NULL;   /* the child's */
    }
    close_finish(p);
    close_free(p);
}

/* ---- tasks ------------------------------------------------------------- */

/* Longest error kept with a failed task (the tail of a command's stderr). */
#define TASK_ERROR_MAX 4096

/* Parses all of s[0..len) as a decimal number <= max. */
static int parse_dec(const char *s, size_t len, uint64_t max, uint64_t *v)
{
    uint64_t x = 0;
    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (max - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

/* A script reply that is a number, whether Redis sent it as an integer
 * (HINCRBY) or as a string (HGET). */
static int reply_u64(const redisReply *r, uint64_t max, uint64_t *v)
{
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0 && (uint64_t)r->integer <= max) {
        *v = (uint64_t)r->integer;
        return 0;
    }
    if (r->type == REDIS_REPLY_STRING)
        return parse_dec(r->str, r->len, max, v);
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
    sluice_err e = run_script(p, SLUICEI_SCRIPT_TASK_FAIL, handback && resume > 0 ? 5 : 4, argv,
                              &r, NULL);
    if (e != SLUICE_OK)
        seterr(p, "task_fail %s: %s", p->task_key,
               r && r->type == REDIS_REPLY_ERROR ? r->str : p->conn->errstr);
    else if (r->type == REDIS_REPLY_INTEGER && r->integer == 0)
        e = lease_lost_error(p);
    if (r)
        freeReplyObject(r);
    return e;
}

/* Makes the task of a 'task' reply r the one held; on SLUICE_OK *out is
 * it. A task whose definition is unusable is failed at once (the attempt
 * counts) and SLUICE_ERR_FORMAT returned, so that the caller claims the
 * next one. */
static sluice_err take_task(sluice_producer *p, const redisReply *r, int lease_ms,
                            int64_t sent_ms, sluice_task **out)
{
    uint64_t epoch, shard, attempt, batch_size, epochs, resume = 0;
    const char *key, *colon;
    if (r->elements < 6 || r->element[1]->type != REDIS_REPLY_STRING ||
        (key = r->element[1]->str, colon = strchr(key, ':')) == NULL ||
        parse_dec(key, (size_t)(colon - key), UINT32_MAX, &epoch) ||
        parse_dec(colon + 1, strlen(colon + 1), UINT64_MAX, &shard) ||
        strlen(key) >= sizeof p->task_key) {
        seterr(p, "task_claim on queue '%s': malformed 'task' reply", p->queue);
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
    else if (sluicei_taskdef_decode(def->str, def->len, &d, why, sizeof why) == SLUICE_OK &&
             !(b = calloc(1, sizeof *b)))
        snprintf(why, sizeof why, "out of memory");
    if (!b) {
        free(d);
        char msg[400];
        snprintf(msg, sizeof msg, "task %s cannot be produced: %s", key, why);
        sluice_err e = fail_script(p, msg, 0, 0);   /* needs only task_key */
        p->task_key[0] = '\0';
        seterr(p, "%s", msg);
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
    blpop_secs(secs, ms);
    redisReply *r = NULL;
    sluice_err e = sluicei_conn_command(p->conn, &r, "BLPOP %s %s", p->task_wake_key, secs);
    if (e == SLUICE_ERR_REDIS && r && redirect_error(p, r->str) && p->conn->ctx) {
        /* The claim that follows finds the queue's node again. */
        sluicei_conn_drop(p->conn, NULL);
    }
    if (r)
        freeReplyObject(r);
    if (e == SLUICE_ERR_IO)
        return recover(p);
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
    sluice_err e = run_script(p, SLUICEI_SCRIPT_TASK_CLAIM, room_only ? 3 : 2, argv, &r, NULL);
    if (e != SLUICE_OK) {
        seterr(p, "task_claim on queue '%s': %s", p->queue,
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
        seterr(p, "task_claim on queue '%s': unexpected reply '%.32s'", p->queue, kind);
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
        seterr(p, "the job of queue '%s' is finished with %" PRIu64 " failed task%s "
               "(sluice-ctl jobs %s)", p->queue, failed, failed == 1 ? "" : "s", p->queue);
    else
        seterr(p, "the job of queue '%s' is finished", p->queue);
    return SLUICE_EOF;
}

static sluice_err no_job(sluice_producer *p)
{
    seterr(p, "queue '%s' has no job (submit one: sluice-ctl submit %s --manifest ...)",
           p->queue, p->queue);
    return SLUICE_EOF;
}

/* Checks the arguments of a claim; on SLUICE_OK *lease_ms is the lease. */
static sluice_err claim_args(sluice_producer *p, int *lease_ms)
{
    if (p->task_held) {
        seterr(p, "task_claim: task %s is still held (task_done/_fail/_release first)",
               p->task_key);
        return SLUICE_ERR_INVALID;
    }
    if (*lease_ms < 0) {
        seterr(p, "task_claim: lease_ms %d is negative", *lease_ms);
        return SLUICE_ERR_INVALID;
    }
    if (*lease_ms == 0)
        *lease_ms = LEASE_MS_DEFAULT;
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
        seterr(p, "no task of queue '%s' free within %d ms (others hold the rest)", p->queue,
               timeout_ms);
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
    blpop_secs(secs, ms);
    int waiting = 0;
    for (int k = 0; k < g->nparts; k++) {
        sluice_producer *c = g->part[k];
        c->probe = 0;
        if (strcmp(c->claim_kind, "wait") != 0 && strcmp(c->claim_kind, "full") != 0)
            continue;
        if (!idle_connected(c))
            continue;
        const char *argv[3] = {"BLPOP", c->task_wake_key, secs};
        if (sluicei_conn_append_argv(c->conn, 3, argv, NULL) == SLUICE_OK &&
            sluicei_conn_flush(c->conn) == SLUICE_OK)
            c->probe = waiting = 1;
    }
    if (!waiting)
        sleep_ms((int)ms);   /* no busy loop while every such node is out of reach */
    for (int k = 0; k < g->nparts; k++) {
        sluice_producer *c = g->part[k];
        if (!c->probe)
            continue;
        c->probe = 0;
        redisReply *r = NULL;
        probe_reply(c, &r);
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
    sluice_err e = settle(g->part[g->cur], 0);   /* ad-hoc pushes before */
    if (e != SLUICE_OK)
        return fwd(g, g->part[g->cur], e);
    for (;;) {
        if (stopped(g)) {
            seterr(g, "stopped while waiting for a task of queue '%s'", g->queue);
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
                    return fwd(g, c, e);
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
    e = settle(p, 0);
    if (e != SLUICE_OK)
        return e;
    int64_t deadline = timeout_ms < 0 ? -1 : sluicei_now_ms() + timeout_ms;
    int64_t since = sluicei_now_ms(), noted = 0;
    for (;;) {
        if (stopped(p)) {
            seterr(p, "stopped while waiting for a task of queue '%s'", p->queue);
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
        if ((e = housekeep(p)) != SLUICE_OK)
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
    seterr(p, "%s: not the task this producer holds", what);
    return 0;
}

/* The resume point of the task held, for handing it back: the first of
 * its batches not known to be stored (where it was spilled; or, when every
 * push was answered (ok), the next batch, unless some were given up after
 * an error), at least the point it was claimed with. 0: none known. */
static uint64_t resume_point(const sluice_producer *p, int ok)
{
    uint64_t r = p->spilled ? p->spill_resume : ok ? p->next_seq : 0;
    if (r > p->lost_from)
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
        sluice_err e = run_script(p, SLUICEI_SCRIPT_TASK_CHECK, last ? 5 : 4, argv, &r, NULL);
        if (e != SLUICE_OK) {
            seterr(p, "task_check %s: %s", p->task_key,
                   r && r->type == REDIS_REPLY_ERROR ? r->str : p->conn->errstr);
        } else if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
            e = lease_lost_error(p);
        } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
                   r->element[0]->type != REDIS_REPLY_INTEGER) {
            seterr(p, "task_check %s: unexpected reply", p->task_key);
            e = SLUICE_ERR_PROTOCOL;
        } else if (r->element[0]->integer == 0 && r->element[1]->type == REDIS_REPLY_INTEGER) {
            long long seq = r->element[1]->integer;
            seterr(p, "handed back (it resumes at batch %lld): Redis came back without its "
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
        if (e == SLUICE_ERR_FULL && c->spill_why == why_partition)
            p->spilled_from = p->cur;   /* handed back for lack of room */
        return fwd(p, c, e);
    }
    sluice_err e = SLUICE_OK;
    if (!p->spilled) {
        /* Its last batches may find the partition full: spilling them is
         * as good as spilling a push (see the top). */
        p->may_spill = 1;
        e = settle(p, 0);
        p->may_spill = 0;
    }
    if (p->spilled && !p->lease_lost) {
        /* Its last batches were not stored: not done; handed back. */
        char why[SLUICE_MAX_PRODUCER_ID + 64];
        snprintf(why, sizeof why, "handed back by producer %s", p->id);
        uint64_t resume = resume_point(p, 0);
        e = fail_script(p, why, 1, resume);
        if (e == SLUICE_OK) {
            seterr(p, "handed back (it resumes at batch %" PRIu64 "): %s", resume, p->spill_why);
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
            seterr(p, "handed back (shutting down; it resumes at batch %" PRIu64 ")", resume);
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
    char nb[24];
    snprintf(nb, sizeof nb, "%" PRIu64, p->next_seq);
    const char *argv[3] = {p->id, p->task_key, nb};
    redisReply *r = NULL;
    int resent = 0;
    /* 2: Redis restarted since the claim (or the last check), perhaps
     * without pushes it had answered: check them, then again. Each round
     * takes a restart of Redis. */
    for (int round = 0;; round++) {
        e = run_script(p, SLUICEI_SCRIPT_TASK_DONE, 3, argv, &r, &resent);
        if (e != SLUICE_OK || r->type != REDIS_REPLY_INTEGER || r->integer != 2)
            break;
        freeReplyObject(r);
        r = NULL;
        if (round == TASK_DONE_ROUNDS) {
            seterr(p, "task_done %s: Redis restarted %d times while the task was checked",
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
        seterr(p, "task_done %s: %s", p->task_key,
               r && r->type == REDIS_REPLY_ERROR ? r->str : p->conn->errstr);
    } else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        p->st.tasks_done++;
        wait_replicas(p);
    } else if (resent) {
        /* Sent again after a lost connection: 0 may mean that our first
         * call went through. Either way the task is done by someone. */
        p->st.tasks_done++;
        wait_replicas(p);
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
        return fwd(p, c, sluice_producer_task_fail(c, t, error));
    }
    /* What was pushed stays pushed (a retry drops those ids as duplicates);
     * a push refused for good does not stop the failure from being kept. */
    settle(p, 0);
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
        p->task_held = NULL;
        if (c->spilled && c->spill_why == why_partition)
            p->spilled_from = p->cur;
        return fwd(p, c, sluice_producer_task_release(c, t));
    }
    int ok = settle(p, 0) == SLUICE_OK;
    char why[SLUICE_MAX_PRODUCER_ID + 64];
    snprintf(why, sizeof why, "handed back by producer %s", p->id);
    uint64_t resume = resume_point(p, ok);
    sluice_err e = p->lease_lost ? lease_lost_error(p) : fail_script(p, why, 1, resume);
    if (e == SLUICE_OK && p->spilled)
        seterr(p, "handed back (it resumes at batch %" PRIu64 "): %s", resume, p->spill_why);
    end_task(p);
    return e;
}

void sluice_producer_stats_get(const sluice_producer *p, sluice_producer_stats *st)
{
    *st = p->st;
    for (int k = 0; k < p->nparts; k++) {
        const sluice_producer_stats *c = &p->part[k]->st;
        st->batches += c->batches;
        st->records += c->records;
        st->bytes += c->bytes;
        st->duplicates += c->duplicates;
        st->full_waits += c->full_waits;
        st->blocked_us += c->blocked_us;
        st->reconnects += p->part[k]->conn ? p->part[k]->conn->reconnects : c->reconnects;
        st->tasks_done += c->tasks_done;
        st->tasks_failed += c->tasks_failed;
    }
}

const char *sluice_producer_errstr(const sluice_producer *p)
{
    return p->errstr;
}

const char *sluice_producer_id(const sluice_producer *p)
{
    return p->id;
}
