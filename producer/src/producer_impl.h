/* What the files of the producer half (producer/src) share: the producer's
 * struct, its tunables, and the functions one file offers the others.
 * Internal: not installed, and not for sluice-producer either (it has
 * producer_internal.h and gauges.h). Each function's contract is written
 * at its definition.
 *
 *   producer.c  the API: open, push, flush, set_task, close, counters
 *   pipeline.c  pushes in flight: groups, the request, replies, a lost
 *               connection, Redis Cluster redirects             (pipe_)
 *   room.c      backpressure: waiting for room, pushing refused batches
 *               again, spilling a task                          (room_)
 *   lease.c     housekeeping: task lease, heartbeat, WAIT/ROLE, plain
 *               script calls that survive a lost connection     (lease_)
 *   group.c     partitioned queues: the children, their heartbeats,
 *               probes for room                                 (group_)
 *   task.c      tasks: claim, done, fail, release, check
 *   gauges.c    a queue's gauges and a producer's counters, read back for
 *               sluice-producer's metrics (gauges.h)
 *
 * Pushes live in a ring of max_inflight slots; each slot owns the frame it
 * sent, so that a push can be sent again after a lost connection or a
 * "full" answer, and so that steady state allocates nothing (a slot's
 * buffer is reused by the next batch). */
#ifndef SLUICE_PRODUCER_IMPL_H
#define SLUICE_PRODUCER_IMPL_H

#include <sluice/producer.h>

#include "cluster.h"
#include "conn.h"
#include "conn_send.h"
#include "producer_internal.h"
#include "proto.h"
#include "retry.h"
#include "taskdef.h"
#include "wire.h"
#include "zframe.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define INFLIGHT_MAX 1024
/* max_inflight 0: a ring of INFLIGHT_MAX slots, whose frames in flight are
 * held to a window of bytes. It starts at WINDOW_START and doubles, up to
 * WINDOW_MAX, whenever a push finds it full and no reply in yet: the
 * replies take longer than sending the window does, so it grows to the
 * bandwidth-delay product of the link, whatever the round-trip time.
 * Slot buffers beyond WINDOW_MAX in all are freed as they come free. */
#define WINDOW_START ((size_t)1 << 20)
#define WINDOW_MAX ((size_t)32 << 20)
/* Batches and frame bytes per MULTI (see "Groups" in pipeline.c). */
#define GROUP_MAX 64
#define GROUP_BYTES ((size_t)1 << 20)
/* Socket timeout; must exceed the BLPOP timeout below. */
#define CMD_TIMEOUT_MS SLUICE_COMMAND_TIMEOUT_MS_DEFAULT
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
 * from the first to the second, +-25% (retry.h). */
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
    size_t raw_len;                    /* the frame's length before compression */
    sluice_batch_id id;
    char idstr[SLUICE_MAX_BATCH_ID];
    uint64_t nrecords;
    uint64_t gid;                      /* the group it was last sent in */
    enum slot_state state;
    int resent;                        /* sent again after a lost connection */
    int losses;                        /* connections lost awaiting its reply */
    size_t cap_seen;                   /* frame.cap as counted in buf_held */
} slot;

struct sluice_producer {
    sluicei_conn *conn;                /* NULL in a group (partitioned queue) */
    char queue[QUEUE_NAME_MAX];
    char room_key[SLUICE_MAX_KEY];
    char meta_key[SLUICE_MAX_KEY];
    char anchor_key[SLUICE_MAX_KEY];  /* KEYS[1] of the push (sluicei_script_anchor()) */
    char in_prefix[SLUICE_MAX_KEY];    /* "sluice:{Q}:in:" */
    char id[SLUICE_MAX_PRODUCER_ID + 1];
    char tok[17];              /* this process's token (hex): the beat publishes it, so
                                  that counters reaped while frozen come back (beat.lua) */
    int reconnect_timeout_ms;
    volatile int *stop;
    void (*log)(void *arg, const char *msg);   /* opts.log */
    void *log_arg;
    uint64_t max_frame;                /* the queue's frame limit (meta max_frame) */
    sluicei_zenc zenc;                 /* the queue's compression (meta compress) */
    sluicei_abandoned abandoned;       /* batches given up (abandon()) */

    uint32_t epoch;
    uint64_t task;
    uint64_t next_seq;                 /* 64-bit to notice the end of the 32-bit range */

    slot *ring;
    int nslots;
    int gmax;                          /* batches per group */
    int head;                          /* oldest slot in use */
    int used;                          /* slots in use, from head */
    size_t used_bytes;                 /* their frame bytes */
    size_t win;                        /* the window of used_bytes (max_inflight 0), or 0 */
    size_t buf_held;                   /* capacity of the slots' buffers */
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
    int spilled;                       /* the task held was spilled (group.c) */
    const char *spill_why;             /* why (a static string) */
    uint64_t spill_resume;             /* then: the first of its batches not stored */
    uint64_t lost_from;                /* task held: the first of its batches given up
                                          after an error (abandon()); UINT64_MAX: none */
    uint64_t claim_reconnects;         /* conn->reconnects when the task held was claimed */

    /* Cluster: retryable error replies (pipeline.c). */
    int redirected;                    /* a group was refused by one: drop the connection */
    char redirect_msg[200];            /* that reply */
    int64_t redirect_since;            /* monotonic start of the present series; 0: none */
    sluicei_backoff redirect_backoff;  /* the pauses between tries (retry.h) */
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
    int64_t conn_tried_ms;             /* last quick reconnect (group_idle_connected()) */
    char claim_kind[16];               /* its last task_claim answer (group_claim) */
    uint64_t job_failed;               /* tasks failed, when task_claim said 'done' */
};

/* ---- producer.c: shared helpers and opening ----------------------------- */

void producer_seterr(sluice_producer *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
sluice_err producer_new(sluice_producer **out, const sluice_producer_opts *o, const char *q,
                        const char *id);
sluice_err producer_queue_exists(sluice_producer *p, int *exists, char *err, size_t errlen);
sluice_err producer_fwd(sluice_producer *g, const sluice_producer *c, sluice_err e);

/* ---- pipeline.c --------------------------------------------------------- */

int pipe_redirect_error(const sluice_producer *p, const char *msg);
void pipe_redirect_over(sluice_producer *p);
sluice_err pipe_redirect_pause(sluice_producer *p, const char *what, const char *msg);
sluice_err pipe_send_group(sluice_producer *p, slot **m, int k);
sluice_err pipe_recover(sluice_producer *p);
sluice_err pipe_read_one(sluice_producer *p);
sluice_err pipe_settle(sluice_producer *p, int keep);
sluice_err pipe_next_slot(sluice_producer *p, slot **out);
sluice_err pipe_launch(sluice_producer *p, slot *s, uint64_t nrecords);

/* ---- room.c ------------------------------------------------------------- */

sluice_err room_retry_refused(sluice_producer *p);
/* p->spill_why of a task spilled for another partition with room. */
extern const char room_why_partition[];

/* ---- lease.c ------------------------------------------------------------ */

sluice_err lease_run_script(sluice_producer *p, sluicei_script_id id, int argc,
                            const char **argv, redisReply **out, int *resent);
void lease_wait_replicas(sluice_producer *p);
void lease_check_role(sluice_producer *p);
int lease_housekeeping_due(const sluice_producer *p);
sluice_err lease_beat(sluice_producer *p, int may_reconnect, int leaving);
sluice_err lease_renew(sluice_producer *p);
sluice_err lease_housekeep(sluice_producer *p);
sluice_err lease_lost_error(sluice_producer *p);

/* ---- group.c ------------------------------------------------------------ */

sluice_err group_routed_conn(sluicei_router *r, const char *q, const sluice_producer_opts *o,
                             sluicei_conn **out, char *err, size_t errlen);
sluice_err group_open(sluice_producer *p, const sluice_producer_opts *o, sluicei_router *r,
                      int nparts, char *err, size_t errlen);
int group_idle_connected(sluice_producer *c);
void group_beat(sluice_producer *g, const sluice_producer *skip);
void group_probe_reply(sluice_producer *c, redisReply **r);
int group_spill_target(sluice_producer *g, const sluice_producer *from, size_t frame);
sluice_err group_next_child(sluice_producer *g, int to, sluice_producer **out);

/* ---- small helpers ------------------------------------------------------ */

static inline slot *producer_slot_at(sluice_producer *p, int i)
{
    return &p->ring[(p->head + i) % p->nslots];
}

static inline void producer_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The timeout argument of a BLPOP of ms milliseconds (at least 10). */
static inline void producer_blpop_secs(char secs[24], int64_t ms)
{
    snprintf(secs, 24, "%.3f", (double)(ms < 10 ? 10 : ms) / 1000.0);
}

static inline int producer_stopped(const sluice_producer *p)
{
    return p->stop && *p->stop;
}

/* Whether two batches belong to the same task (may share a group). */
static inline int producer_same_task(const slot *a, const slot *b)
{
    return a->id.epoch == b->id.epoch && a->id.task == b->id.task;
}

/* The replicas a WAIT after a write asks for: the url's, but no more than
 * the node has connected (once ROLE was asked). Changes only while no
 * reply is owed (lease_housekeep(), pipe_recover()), so a group's replies
 * are read as it was sent. */
static inline int producer_wait_n(const sluice_producer *p)
{
    int n = p->conn->url.wait_replicas;
    return p->wait_have >= 0 && p->wait_have < n ? p->wait_have : n;
}

/* A reply as a number: an integer, a decimal string, nil (0); -1 for
 * anything else or no reply. */
static inline int64_t producer_reply_int(const redisReply *r)
{
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return r->type == REDIS_REPLY_NIL ? 0 : -1;
}

/* The room rule of the scripts (has_room in common/lua/lib.lua) for a
 * batch of an epoch ahead of the trainers (room.c). */
int sluicei_room_ahead(int64_t count, int64_t used, int64_t size, int64_t maxn, int64_t maxb);

#endif
