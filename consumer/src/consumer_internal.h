/* What the files of the consumer half (consumer/src) share: its limits,
 * the consumer's state (struct sluice_consumer, whose fields say which
 * thread owns them), the request that travels with every command, and the
 * functions one file calls in another, each named after its file. The
 * design (threads, connections, leases, epochs, groups) is told at the top
 * of consumer.c. Internal header: never installed, nothing exported. */
#ifndef SLUICE_CONSUMER_INTERNAL_H
#define SLUICE_CONSUMER_INTERNAL_H

#include <sluice/consumer.h>

#include "cluster.h"
#include "bufcache.h"
#include "conn.h"
#include "idset.h"
#include "num.h"
#include "proto.h"
#include "retry.h"
#include "tls.h"
#include "wire.h"
#include "zframe.h"

#include <hiredis/async.h>

#include <event2/event.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Batches held ahead at most: prefetch, or PREFETCH_MAX when it is 0. */
#define PREFETCH_MAX 1024
/* The window of bytes held ahead (decoded in the FIFO, or asked for and on
 * the way) starts at WINDOW_START and doubles, up to prefetch_bytes
 * (WINDOW_MAX_DEFAULT when 0, shared by the partitions of a group), each
 * time the application waited for a take that the window had cut short:
 * it grows until it covers the bandwidth-delay product, whatever the
 * round-trip time. FRAME_GUESS sizes the first take, before any frame
 * was seen. */
#define WINDOW_START ((size_t)1 << 20)
#define WINDOW_MAX_DEFAULT ((size_t)64 << 20)
#define WINDOW_MIN_PART ((size_t)4 << 20)
#define FRAME_GUESS ((size_t)64 << 10)
/* Decompression buffers a consumer keeps free at most (and no more bytes
 * than its window's most). */
#define ZPOOL_KEEP 64
#define MAX_CONSUMER_ID 64
#define WORLD_MAX 1000000 /* the most ranks a consumer's world (and a queue's ranks) may have */
/* Room for a batch id, ":pad<k>" and the NUL; longer ids in a queue are
 * not sluice's and go to the dead letters as they are. */
#define RID_MAX 72
/* Longest server-side timeout of one BLMOVE: a quarter of the lease at
 * most (see lease_until). */
#define BLOCK_MS 1000
/* hiredis async has no command timeouts: a connection whose oldest
 * outstanding command got no reply for this long (plus BLOCK_MS for a
 * BLMOVE) is taken for dead, dropped and reconnected. */
#define REPLY_SLACK_MS 5000
/* Period of the housekeeping timer (watchdog, heartbeat, reaping). */
#define TICK_MS 100
/* Poll period of the take script while Redis refuses BLMOVE (OOM). */
#define OOM_POLL_MS 20
/* How long close() tries to send its acks and hand batches back. */
#define CLOSE_TIMEOUT_MS 3000
/* Frame bytes the GETs on their way may bring at most (fetch_more): the
 * link's round trip at FETCH_RATE bytes a microsecond (2 GB/s), and at
 * least FETCH_OUT_MIN. */
#define FETCH_OUT_MIN ((size_t)1 << 20)
#define FETCH_RATE 2000
/* Frame bytes one MGET should fetch at most (estimated from the last
 * frame seen): many small frames per command, big ones one at a time so
 * that each is handed over as soon as it is in. */
#define FETCH_BYTES ((size_t)1 << 20)
/* Ids remembered per generation of the duplicate filter; two generations
 * are kept, so memory stays bounded on a queue without epochs. */
#define DUP_GEN_MAX 65536
/* Spare requests a consumer keeps for its next commands (send.c). */
#define REQ_POOL_MAX 256
/* Released batches whose acks wait for a busy loop before it is woken. */
#define ACK_WAKE_MAX 64
/* A loop sends the acks released meanwhile ACK_DELAY_MS after the first
 * of them, or at once when ACK_WAKE_MAX wait, next() has nothing
 * prefetched to return, a checkpoint is asked for, the next epoch is
 * started or the consumer closes: a trainer slower than the queue costs
 * Redis one ack call (and one wake-up) per ACK_DELAY_MS instead of one
 * per batch. */
#define ACK_DELAY_MS 10
/* How long next() waits for room on a full hand socket (api.c,
 * hand_write) before the session starts anew. */
#define HAND_WAIT_MS 1000
/* Batches acknowledged by one ack script call. */
#define ACK_BATCH_MAX 128
/* Acknowledgements remembered for restore after a reconnect: those
 * confirmed in the last RESTORE_MS before the last reply of the session
 * that was lost (Redis with appendfsync everysec loses about its last
 * second, two at most), in a ring that grows from ACKED_RING to
 * ACKED_RING_MAX entries (32 bytes each) while it holds less than that;
 * sent RESTORE_CHUNK at a time. */
#define RESTORE_MS 5000
#define ACKED_RING 4096
#define ACKED_RING_MAX 262144
#define RESTORE_CHUNK 256
/* What the lease must still run when next() hands a batch out: time for
 * its corked mark to reach Redis (the kernel sends it within about 200
 * ms even when the process is frozen). */
#define HAND_MARGIN_MS 500
/* take answered RECOVERING (Redis restarted; consumers registered before
 * restore first): the next take after this long. */
#define RECOVER_POLL_MS 50


enum { CONN_DATA = 0, CONN_CTL = 1, CONN_HAND = 2, NCONN = 3 };
enum { ST_DOWN = 0, ST_CONNECTING, ST_READY };
enum { OP_NONE = 0, OP_TAKE, OP_BLMOVE, OP_RECOVER, OP_RESYNC, OP_RESTORE };

/* What a reply answers. */
enum req_kind {
    R_SETUP,      /* AUTH, SELECT, SCRIPT LOAD */
    R_CLIENT_ID,  /* CLIENT ID of the data connection */
    R_TAKE,
    R_BLMOVE,
    R_CLAIM,
    R_FRAME,      /* GET b:<id> */
    R_JOB,        /* HMGET job epochs epoch_open, after a marker */
    R_EFAILED,    /* HGET estats <e>:failed_tasks, after a marker */
    R_FAILED,     /* LRANGE failed: which tasks failed */
    R_TERR,       /* HMGET terr: their errors */
    R_RESTORE,    /* restore script, at the start of a session */
    R_MARK,       /* PEXPIREAT of a duplicate the application holds */
    R_RESYNC,     /* LRANGE pending */
    R_ACK,        /* released batches */
    R_ACK_QUIET,  /* at-most-once acks and duplicates: nobody waits for them */
    R_DEAD,
    R_REQUEUE,
    R_BEAT,
    R_REAP,
    R_UNBLOCK,
    R_WAIT,       /* WAIT behind a take, BLMOVE or claim */
    R_ROLE,       /* ROLE: the replicas a WAIT can count on */
    R_CKPT,       /* checkpoint take */
};

/* Where a checkpoint request stands (ckpt_state). */
enum { CK_IDLE = 0, CK_WANTED, CK_DONE, CK_FAILED };

typedef struct slot {
    sluice_batch *b;
    char rid[RID_MAX];   /* the id in Redis (with ":pad<k>" for padding) */
} slot;

typedef struct idbuf {
    char s[RID_MAX];
} idbuf;

/* An id fetched by the current data operation. */
typedef struct item {
    char rid[RID_MAX];
    long long dlv;     /* -1: claim sent it to the dead letters: its GET is ignored */
} item;

/* An acknowledgement Redis confirmed, remembered for restore: the batch
 * id "e:t:seq[:pad<k>]" as numbers. */
typedef struct acked_id {
    uint64_t t;
    uint32_t e, seq, pad;   /* pad 0: not a padding copy */
    int64_t ms;             /* monotonic */
} acked_id;

/* What the consumer keeps with each batch it decodes, in the room the
 * decoder reserves after the batch (wire.h: sluicei_batch_room). */
typedef struct delivery {
    struct sluice_consumer *consumer;   /* owning consumer, NULL: release() only frees */
    uint32_t deliveries;
    int acked;                 /* release() already sent its ack */
    int padding;               /* delivered as padding (sluice_batch_is_padding) */
} delivery;

/* The delivery of a batch the consumer decoded; NULL for any other batch
 * (sluice_wire_decode()'s). */
static inline delivery *delivery_of(const sluice_batch *b)
{
    return sluicei_batch_room(b, sizeof(delivery));
}

typedef struct req {
    struct sluice_consumer *c;
    uint64_t gen;      /* session it belongs to; stale replies are ignored */
    int64_t sent_ms;   /* monotonic: a renewal's lease runs from here */
    int64_t sent_us;   /* the same, in microseconds (the round trip) */
    int kind, conn;
    int in_op;         /* part of the current data operation */
    int item;          /* R_CLAIM, R_FRAME: index into c->items; -1: none */
    int nitems;        /* R_FRAME: items item.. fetched (MGET when more than one);
                          R_SETUP of SCRIPT LOAD: the script */
    size_t bytes;      /* R_FRAME: the frame bytes it was sent for (estimated) */
    char id[RID_MAX];  /* R_SETUP: the step's name */
    struct idbuf *ids; /* R_ACK: the ids acknowledged (owned) */
    size_t nids;
    size_t ids_cap;    /* ids has room for this many (kept when the req is reused) */
    struct req *next_free;   /* in the consumer's pool of spare requests */
} req;

struct sluice_consumer {
    /* ---- fixed at open ---- */
    char queue[SLUICE_MAX_QUEUE_NAME + 1];
    char id[MAX_CONSUMER_ID + 1];
    char k_meta[SLUICE_MAX_KEY], k_pending[SLUICE_MAX_KEY], k_frame[SLUICE_MAX_KEY];
    char k_anchor[SLUICE_MAX_KEY];  /* KEYS[1] of its scripts (sluicei_script_anchor()) */
    char k_jrun[SLUICE_MAX_KEY];   /* the job's progress (epochs, epoch_open) */
    char rank_s[16];           /* "" for a free consumer */
    int world, rank;
    sluice_ack_mode ack_mode;
    int accept_partial;
    int prefetch;
    size_t max_batch_bytes;
    sluicei_zpool *zpool;      /* buffers of decompressed frames; the loop decodes into
                                  them, a batch's release gives one back (any thread) */
    char tok[17];              /* this process's registration token (lib.lua: enter) */
    char owner[MAX_CONSUMER_ID + 2];   /* whose checkpoints it writes ("#<rank>" or a
                                          consumer id); "" without checkpoints */
    int ckpt_keep;             /* checkpoints kept */
    int connect_timeout_ms, reconnect_timeout_ms;
    int64_t lease_ms;
    char *route_addr;          /* cluster or list address the node is found from; NULL:
                                  one server, url is all there is */
    int cluster;               /* route_addr is a Redis Cluster's */
    /* The group whose mu, cv, waiting and note serve this consumer: itself,
     * unless it is a child of a partitioned queue's group. */
    struct sluice_consumer *top;

    /* ---- a group (nparts > 0): fixed at open, but rr and wakes (API thread) ---- */
    struct sluice_consumer **part; /* the children, partition p at part[p] */
    int nparts;
    int home, rr;              /* the home partition; the next other one to ask first */
    int *wakes;                /* children to wake once next() unlocks (nparts entries) */

    /* ---- shared between the threads: under top->mu ---- */
    pthread_mutex_t mu;        /* of top only */
    pthread_cond_t cv;         /* of top only */
    slot *fifo;                /* ring of prefetch slots */
    int fifo_head, fifo_len;
    slot *out;                 /* held by the caller (explicit acks only) */
    size_t nout, out_cap;
    idbuf *acks;               /* ack_cap >= nacks + nout: release() never allocates */
    size_t nacks, ack_cap;
    int64_t acks_since_ms;     /* monotonic ms the first of acks[] was released */
    int acks_held;             /* the loop holds acks[] until ack_ev (ACK_DELAY_MS) */
    uint32_t epoch;            /* the epoch next() delivers */
    int at_marker, marker_last;
    int advance_req, finished, closing;
    int want_room, wake_pending;
    int parked;                /* the loop only works when woken (see loop_pump()) */
    int waiting;               /* top: next() is waiting on cv for a batch */
    int low_water;             /* fifo_len at which a waiting loop is woken */
    size_t fifo_bytes;         /* frame bytes of the batches in the FIFO */
    size_t win;                /* the window (see WINDOW_START); the loop grows it */
    sluice_err fatal;
    char fatal_msg[512];
    char note[512];            /* top: the last frame sent to the dead letters */
    uint64_t note_seq;         /* top */
    int64_t down_since_ms;     /* 0 while a session is up */
    char down_why[512];
    sluice_consumer_stats st;
    int hand_fd;               /* the hand connection's socket while it is up, else -1 */
    sluicei_tunnel *hand_tunnel;   /* over TLS: its tunnel, which next() writes through */
    int64_t lease_until;       /* monotonic ms up to which the lease surely runs (3/4) */
    int want_lease;            /* next() waits for a renewal (lease_until passed) */
    int hand_broken;           /* a write to the hand socket failed: a new session */
    int hand_dirty;            /* marks were written (corked) since the last push */
    int64_t wait_since;        /* monotonic ms since next() waits without a batch; 0 */
    char job_state[12];        /* from the last beat: "none", "running", "finished" */
    int producers_alive;       /* from the last beat; -1 before it */
    uint32_t mk_failed;        /* at the marker: failed tasks of the loop's epoch */
    char mk_desc[512];         /* which ("e:s (error); ...") */
    sluice_epoch_report report;   /* top: of the last epoch next() ended */
    int ckpt_state;            /* CK_*: a checkpoint asked of the loop (checkpoint.c) */
    uint64_t ckpt_n;           /* its number */
    uint32_t ckpt_epoch;       /* the epoch next() delivers when it was asked */
    char ckpt_req[17];         /* its request id (sent again, the script answers the same) */
    uint64_t ckpt_last;        /* the owner's last checkpoint number known */
    char ckpt_job[48];         /* the job's token, from the reply */
    char ckpt_err[512];        /* CK_FAILED: why */

    /* ---- API thread only ---- */
    char errstr[512];
    uint64_t note_seen;
    int thread_started;
    pthread_t thread;
    char hand_cmd[SLUICE_MAX_KEY + 128];   /* the PEXPIREAT next() writes */

    /* ---- loop thread only (after open) ---- */
    sluicei_url url;           /* of the node serving the queue */
    char addr[256];            /* its printable form, for messages */
    sluicei_router *router;    /* route_addr's, opened at the first failed session */
    int resolve;               /* the next session finds the node anew */
    struct event_base *base;
    struct event *wake_ev, *tick_ev, *retry_ev, *oom_ev, *notify_ev, *ack_ev;
    int notify_armed;          /* notify_ev is active: batches await a signal */
    int wake_fd;
    redisAsyncContext *ac[NCONN];
    sluicei_reply_guard guard[NCONN]; /* the limits of each one's replies (reply.h) */
    int registered;            /* enter() knows this process (fresh '0' from now on) */
    int block_ms;              /* BLMOVE timeout: min(BLOCK_MS, lease / 4) */
    char block_arg[16];
    acked_id *ring;            /* acknowledgements confirmed, for restore */
    size_t ring_head, ring_len, ring_cap;
    int need_restore;          /* the session has not sent restore yet */
    int restored;              /* this session's restore is done */
    int recovering;            /* take answered RECOVERING last (mu) */
    int64_t contact_ms;        /* the last reply of a restored session */
    uint32_t mk_epoch;         /* the marker being read (R_JOB, R_EFAILED...) */
    int mk_last;               /* it ends the job's last epoch */
    uint32_t mk_nfailed;       /* tasks of its epoch that failed */
    uint64_t gen;
    int state, ever_ready;
    int64_t conn_started_ms;
    int setup_left;
    long long data_client_id;
    int pend[NCONN];           /* commands without a reply, per connection */
    int64_t prog_ms[NCONN];    /* last reply (or first send after idle) */
    int blocking;              /* a BLMOVE is outstanding */
    int op, op_left;
    item *items;               /* prefetch entries */
    int fetch_next, fetch_end; /* items fetch_next..fetch_end wait for their GET */
    int fetch_ack_n;           /* at most once: items 0..n to ack once all are sent */
    size_t fetch_out;          /* frame bytes of the GETs sent and not yet answered */
    int64_t rtt_min_us;        /* the session's quickest reply (0: none yet) */
    uint32_t loop_epoch;
    size_t frame_est;          /* size of the last frame received */
    size_t mem_est;            /* the memory of the last batch decoded (its frame
                                  decompressed) */
    size_t win_max;            /* the most the window grows to */
    int take_cut;              /* the take under way asked for less than the free slots
                                  because of the window */
    int stopped_at_marker, marker_published;
    int list_empty, oom_wait, need_resync;
    idbuf *unconf;
    size_t nunconf, unconf_cap;
    idbuf *recover;
    size_t nrecover, recover_cap;
    idset dups[2];
    int dups_cur;
    sluicei_backoff backoff;   /* between sessions (retry.h) */
    uint64_t rng;              /* jitter of the reap period */
    int64_t next_beat_ms, next_reap_ms, next_role_ms;
    int beat_inflight, reap_inflight, role_inflight;
    int wait_now;              /* replicas each WAIT asks for: url.wait_replicas, but
                                  no more than the node has connected (ROLE) */
    int unblock_sent, requeue_sent;
    int ckpt_inflight;         /* the checkpoint script was sent in this session */
    int64_t close_deadline_ms; /* set once the loop saw close(): it is closing */
    /* Kept between commands so that the steady state allocates nothing of
     * its own (send.c, fetch.c): spare requests, and the argument arrays
     * of the last scripts, acks and GETs, each grown to the largest yet.
     * Each is used within one call only: hiredis formats a command before
     * redisAsyncCommandArgv() returns. */
    req *req_pool;
    int req_pooled;
    const char **script_av;
    size_t *script_al;
    size_t script_av_cap, script_al_cap;
    char (*ack_num)[3][24];    /* ACK_BATCH_MAX entries: epoch, task and seq of each */
    const char **ack_argv;     /* 1 + 4 * ACK_BATCH_MAX entries */
    char *fetch_keys;          /* the keys of one GET or MGET, back to back */
    size_t fetch_keys_cap;
    const char **fetch_av;
    size_t fetch_av_cap;
};

/* ---- small helpers ---------------------------------------------------- */

static inline void mu_lock(sluice_consumer *c)
{
    pthread_mutex_lock(&c->top->mu);
}

static inline void mu_unlock(sluice_consumer *c)
{
    pthread_mutex_unlock(&c->top->mu);
}

static inline void cv_broadcast(sluice_consumer *c)
{
    pthread_cond_broadcast(&c->top->cv);
}

static inline int starts_with(const char *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(s, prefix, n) == 0;
}

static inline int is_err(const redisReply *r, const char *prefix)
{
    return r->type == REDIS_REPLY_ERROR && r->str && starts_with(r->str, r->len, prefix);
}

static inline int grow(void **p, size_t *cap, size_t need, size_t elem)
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

static inline void copy_id(char *dst, const char *s, size_t len)
{
    memcpy(dst, s, len);
    dst[len] = '\0';
}

/* ---- loop.c: the loop thread ------------------------------------------ */

void loop_fatal(sluice_consumer *c, sluice_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int loop_wake_needed(sluice_consumer *c);
void loop_wake(sluice_consumer *c);
void loop_arm(struct event *ev, int64_t ms);
void loop_pump(sluice_consumer *c);
sluice_err loop_init(sluice_consumer *c, char *errbuf, size_t errlen);
sluice_err loop_start(sluice_consumer *c, char *errbuf, size_t errlen);
void loop_stop(sluice_consumer **cs, int n);

/* ---- session.c: connections, setup, the hand connection --------------- */

/* Closes the three connections; replies still due are dropped (the
 * session generation moves on) and next() stops writing to the hand
 * socket first. */
void session_drop_conns(sluice_consumer *c);
void session_fail(sluice_consumer *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void session_start(sluice_consumer *c);
/* Connection conn (ac, which hiredis is freeing) was lost: the session
 * fails with ac's error (else why), and for good when the connection
 * broke a limit of its replies (reply.h). */
void session_lost(sluice_consumer *c, int conn, const redisAsyncContext *ac, const char *why);
void session_setup_reply(sluice_consumer *c, req *q, redisReply *r);
int64_t session_reap_period(sluice_consumer *c);
void session_publish_hand(sluice_consumer *c);
void session_hand_flush(sluice_consumer *c);

/* ---- send.c: commands and scripts ------------------------------------- */

req *send_req_new(sluice_consumer *c, int kind, int item);
void send_req_free(req *q);
int send_argv(sluice_consumer *c, int conn, req *q, int in_op, int argc, const char **argv,
              const size_t *lens);
int send_script(sluice_consumer *c, int conn, req *q, int in_op, sluicei_script_id s, int argc,
                const char **argv);
int send_acks(sluice_consumer *c, int conn, int kind, int in_op, const char *base, size_t stride,
              size_t n);
int send_dead(sluice_consumer *c, const char *rid, size_t len, const char *reason);
int send_wait(sluice_consumer *c);
void send_beat(sluice_consumer *c);
void send_reap(sluice_consumer *c);

/* ---- handlers.c: the replies ------------------------------------------ */

void handle_reply(sluice_consumer *c, req *q, redisReply *r);

/* ---- fetch.c: the data operations that bring batches in ---------------- */

int fetch_items(sluice_consumer *c, int from, int n);
int fetch_more(sluice_consumer *c);
void fetch_claim_args(sluice_consumer *c, const char *id, uint32_t ep, char epbuf[16],
                      const char *argv[6]);
void fetch_take(sluice_consumer *c, int room);
int fetch_blmove_safe(sluice_consumer *c);
void fetch_blmove(sluice_consumer *c);

/* ---- dups.c: the duplicate filter ------------------------------------- */

int dups_seen(sluice_consumer *c, const char *rid);
void dups_add(sluice_consumer *c, const char *rid);
void dups_del(sluice_consumer *c, const char *rid);
void dups_reset(sluice_consumer *c);

/* ---- recover.c: restore, recovery, close ------------------------------ */

/* The ids of an ack call that Redis answered: no longer to confirm. */
void recover_confirm_acks(sluice_consumer *c, const idbuf *ids, size_t n);
void recover_restore(sluice_consumer *c);
void recover_resync_reply(sluice_consumer *c, redisReply *r);
void recover_fetch(sluice_consumer *c, int room);
void recover_close_step(sluice_consumer *c);

/* ---- checkpoint.c: checkpoints ---------------------------------------- */

/* Sends the checkpoint asked for once every acknowledgement before it is
 * confirmed (loop thread). */
void ckpt_pump(sluice_consumer *c);
void ckpt_reply(sluice_consumer *c, redisReply *r);
/* Parses a token "sluice-ckpt/1/<queue>/<owner>/<n>/<job>"; 0, or -1 with
 * why in err. */
int ckpt_token_parse(const char *tok, char queue[SLUICE_MAX_QUEUE_NAME + 1],
                     char owner[MAX_CONSUMER_ID + 2], uint64_t *n, char job[48], char *err,
                     size_t errlen);

/* ---- consumer.c: opening ---------------------------------------------- */

void consumer_free(sluice_consumer *c);

/* The value of a reply that holds a decimal string (HGET, HMGET's
 * elements), else dflt: a field the scripts write as an integer. */
static inline long long reply_num(const redisReply *r, long long dflt)
{
    int64_t v;
    if (r && r->type == REDIS_REPLY_STRING && sluicei_parse_i64(r->str, INT64_MIN, INT64_MAX, &v) == 0)
        return (long long)v;
    return dflt;
}

#endif
