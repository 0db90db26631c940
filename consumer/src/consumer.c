/* The consumer library (consumer.h): a background thread per consumer runs
 * its own libevent loop with two hiredis async connections to Redis and
 * keeps up to `prefetch` decoded batches ready; the caller's thread only
 * moves pointers in and out of a mutex-protected FIFO.
 *
 * Threads. The API thread (next, release, stats...) never touches a hiredis
 * context or the event base; it wakes the loop through an eventfd (an ack
 * to send, room in the FIFO, an epoch to start, close). The loop thread
 * hands batches, end-of-epoch marks and errors back under the mutex and
 * signals a condition variable.
 *
 * Three connections, so that a blocking read never delays an ack:
 *   data  take, BLMOVE, claim, GET, dead, requeue, restore: one operation
 *         at a time, pipelined within it (take, then the GETs of what it
 *         moved, and at most once their acks right behind).
 *   ctl   acks, heartbeats (beat), reaping (reap), CLIENT UNBLOCK at close.
 *   hand  written by next() itself, never read: CLIENT REPLY OFF, then one
 *         PEXPIREAT b:<id> per batch handed to the application (the mark
 *         of lib.lua: handed), so that Redis learns what the application
 *         received, at the cost of one write and no round trip. The write
 *         is corked (MSG_MORE): it stays in the kernel, which sends it
 *         with the next ones when the loop pushes them (every pump and
 *         tick: hand_flush), after about 200 ms on its own (the process
 *         frozen), and at once when the socket is closed (a kill -9 too).
 *         So next() makes no round trip and wakes nobody, and the mark is
 *         in Redis well before the lease can run out (lease_until). The
 *         socket is the loop's (it connects and closes it); next() writes
 *         to it only under the mutex, while hand_fd says it is up.
 * Acks go in batches: one ack script call for every batch released since
 * the last (up to ACK_BATCH_MAX).
 * All three are set up together (AUTH, SELECT, SCRIPT LOAD) and dropped
 * together: a failure of any ends the "session", and the next one starts
 * after an exponential backoff with jitter. Every session first restores
 * (restore script) what the application holds and what it acknowledged in
 * the last seconds, in case Redis lost its last writes, then reads its
 * pending list again. After a restart of Redis, takes are answered
 * RECOVERING until the consumers Redis knew have restored (restore.lua):
 * the loop polls every RECOVER_POLL_MS meanwhile.
 *
 * Leases run on the server's clock: every take, claim and beat renews
 * this consumer's registration (lib.lua: enter), and the loop notes when
 * it sent the last renewal that Redis confirmed. The lease then runs at
 * least until that moment plus the lease (the server renewed it later),
 * whatever the clocks of this host say; lease_until is that minus
 * max(lease/4, HAND_MARGIN_MS), the point up to which next() hands out
 * prefetched batches (their marks reach Redis before a reaper can act)
 * and the loop starts a BLMOVE (which may block block_ms <= lease/4). A
 * consumer that was silent for longer (frozen, starved) learns from Redis
 * that it lost the lease (LEASELOST): it drops its prefetched batches,
 * which went back to the queue (and forgets them: they are no duplicates
 * when they come again), and starts a new session.
 *
 * Where a batch is, from the consumer's point of view:
 *   ready (Redis) -> pending:<cid> (Redis) and then, locally, one of
 *     fifo     decoded, not yet returned by next()       (at most prefetch)
 *     out      returned by next(), not yet released
 *     acks     released; the loop has not picked the ack up yet
 *     unconf   ack sent (or to be sent), not yet confirmed by Redis
 *     recover  in pending:<cid> but in none of the above: the reply that
 *              moved it there was lost with the connection; fetched next.
 * A lost connection never loses a batch: whatever a lost reply moved is
 * still in pending:<cid>, and the LRANGE at the start of every session
 * finds it by elimination. Acks are idempotent, so unconfirmed ones are
 * simply sent again.
 *
 * Epochs: the loop takes from ready:<e>[:<rank>] until the take script (or
 * BLMOVE) shows the marker eof:<e>; it then stops fetching, reads the job's
 * number of epochs, and publishes "at marker". next() returns SLUICE_EOF
 * once the batches before the marker are gone and tells the loop to start
 * e+1, so no batch of e+1 is ever fetched before the EOF of e.
 *
 * Partitioned queues. A queue Q of P partitions is P complete queues
 * "Q#0".."Q#P-1" (cluster.h), possibly on different Redis nodes. open()
 * then returns a group: a sluice_consumer without a loop of its own that
 * holds one child consumer per partition, each exactly the consumer
 * described above (own thread, connections, prefetch, epochs). The
 * children use the group's mutex and condition variable (`top`), so every
 * signal a child sends wakes the group's next(), which takes from the home
 * partition first and then from the others in turn. A child that returned
 * the end of the group's epoch is not asked again until every child has:
 * then the group returns one SLUICE_EOF. A batch points to its child, so
 * release() does not know about groups.
 *
 * Redis Cluster and lists of servers. A consumer whose address is not a
 * single server keeps it (route_addr): after a failed session its loop
 * asks a router of its own (cluster.h) which node serves its queue now,
 * so a failover or a migrated slot is followed by reconnecting. A reply
 * that says the data is elsewhere or about to be (MOVED, ASK, TRYAGAIN,
 * ...: sluicei_cluster_retryable) ends the session like a lost
 * connection; nothing is fatal about it, and no batch goes to the dead
 * letters for it. When the node has replicas to wait for
 * (url.wait_replicas), a WAIT follows every write of the data operation
 * that moves batches to this consumer, before their GETs; a periodic ROLE
 * keeps it from waiting for replicas that are not connected. */
#include <sluice/consumer.h>

#include "cluster.h"
#include "conn.h"
#include "proto.h"
#include "wire.h"

#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>

#include <event2/event.h>

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PREFETCH_DEFAULT 4
#define PREFETCH_MAX 1024
#define MAX_CONSUMER_ID 64
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
/* Backoff between sessions: 50 ms doubling up to 2 s, +-25% jitter. */
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000
/* How long close() tries to send its acks and hand batches back. */
#define CLOSE_TIMEOUT_MS 3000
/* Frame bytes one MGET should fetch at most (estimated from the last
 * frame seen): many small frames per command, big ones one at a time so
 * that each is handed over as soon as it is in. */
#define FETCH_BYTES ((size_t)1 << 20)
/* Ids remembered per generation of the duplicate filter; two generations
 * are kept, so memory stays bounded on a queue without epochs. */
#define DUP_GEN_MAX 65536
#define LEASE_DEFAULT_MS 10000
/* Released batches whose acks wait for a busy loop before it is woken. */
#define ACK_WAKE_MAX 64
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
};

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

/* Open-addressing set of 64-bit id hashes (0 marks a free slot). */
typedef struct idset {
    uint64_t *v;
    size_t cap, n;
} idset;

typedef struct req {
    struct sluice_consumer *c;
    uint64_t gen;      /* session it belongs to; stale replies are ignored */
    int64_t sent_ms;   /* monotonic: a renewal's lease runs from here */
    int kind, conn;
    int in_op;         /* part of the current data operation */
    int item;          /* R_CLAIM, R_FRAME: index into c->items; -1: none */
    int nitems;        /* R_FRAME: items item.. fetched (MGET when more than one);
                          R_SETUP of SCRIPT LOAD: the script */
    char id[RID_MAX];  /* R_SETUP: the step's name */
    struct idbuf *ids; /* R_ACK: the ids acknowledged (owned) */
    size_t nids;
} req;

struct sluice_consumer {
    /* ---- fixed at open ---- */
    char queue[SLUICE_MAX_QUEUE_NAME + 1];
    char id[MAX_CONSUMER_ID + 1];
    char k_meta[SLUICE_MAX_KEY], k_pending[SLUICE_MAX_KEY], k_frame[SLUICE_MAX_KEY];
    char k_job[SLUICE_MAX_KEY];
    char rank_s[16];           /* "" for a free consumer */
    int world, rank;
    sluice_ack_mode ack_mode;
    int accept_partial;
    int prefetch;
    size_t max_batch_bytes;
    char tok[17];              /* this process's registration token (lib.lua: enter) */
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
    uint32_t epoch;            /* the epoch next() delivers */
    int at_marker, marker_last;
    int advance_req, finished, closing;
    int want_room, wake_pending;
    int parked;                /* the loop only works when woken (see pump()) */
    int waiting;               /* top: next() is waiting on cv for a batch */
    int low_water;             /* fifo_len at which a waiting loop is woken */
    sluice_err fatal;
    char fatal_msg[512];
    char note[512];            /* top: the last frame sent to the dead letters */
    uint64_t note_seq;         /* top */
    int64_t down_since_ms;     /* 0 while a session is up */
    char down_why[512];
    sluice_consumer_stats st;
    int hand_fd;               /* the hand connection's socket while it is up, else -1 */
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

    /* ---- API thread only ---- */
    char errstr[512];
    uint64_t note_seen;
    int thread_started;
    pthread_t thread;
    char hand_cmd[SLUICE_MAX_KEY + 128];   /* the PEXPIREAT next() writes */

    /* ---- loop thread only (after open) ---- */
    sluicei_url url;           /* of the node serving the queue */
    char addr[256];            /* its printable form, for messages */
    char sha[SLUICEI_SCRIPT_COUNT][41];
    sluicei_router *router;    /* route_addr's, opened at the first failed session */
    int resolve;               /* the next session finds the node anew */
    struct event_base *base;
    struct event *wake_ev, *tick_ev, *retry_ev, *oom_ev, *notify_ev;
    int notify_armed;          /* notify_ev is active: batches await a signal */
    int wake_fd;
    redisAsyncContext *ac[NCONN];
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
    uint32_t loop_epoch;
    size_t frame_est;          /* size of the last frame received */
    int stopped_at_marker, marker_published;
    int list_empty, oom_wait, need_resync;
    idbuf *unconf;
    size_t nunconf, unconf_cap;
    idbuf *recover;
    size_t nrecover, recover_cap;
    idset dups[2];
    int dups_cur;
    unsigned attempt;
    uint64_t rng;
    int64_t next_beat_ms, next_reap_ms, next_role_ms;
    int beat_inflight, reap_inflight, role_inflight;
    int wait_now;              /* replicas each WAIT asks for: url.wait_replicas, but
                                  no more than the node has connected (ROLE) */
    int unblock_sent, requeue_sent;
    int64_t close_deadline_ms; /* set once the loop saw close(): it is closing */
};

static void pump(sluice_consumer *c);
static void session_start(sluice_consumer *c);

static void mu_lock(sluice_consumer *c)
{
    pthread_mutex_lock(&c->top->mu);
}

static void mu_unlock(sluice_consumer *c)
{
    pthread_mutex_unlock(&c->top->mu);
}

static void cv_broadcast(sluice_consumer *c)
{
    pthread_cond_broadcast(&c->top->cv);
}

/* ---- small helpers ---------------------------------------------------- */

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int starts_with(const char *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(s, prefix, n) == 0;
}

static int is_err(const redisReply *r, const char *prefix)
{
    return r->type == REDIS_REPLY_ERROR && r->str && starts_with(r->str, r->len, prefix);
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

static void copy_id(char *dst, const char *s, size_t len)
{
    memcpy(dst, s, len);
    dst[len] = '\0';
}

/* The ack script's epoch, task and seq for a Redis id; -1 when its batch
 * id is malformed. */
static int ack_fields(const char *rid, char ep[16], char tk[24], char sq[16])
{
    int pad;
    size_t base;
    sluice_batch_id id;
    if (!sluicei_rid_check(rid, strlen(rid), &base, &pad) ||
        sluicei_batch_id_parse(rid, base, &id) != 0)
        return -1;
    snprintf(ep, 16, "%" PRIu32, id.epoch);
    snprintf(tk, 24, "%" PRIu64, id.task);
    snprintf(sq, 16, "%" PRIu32, id.seq);
    return 0;
}

static uint64_t id_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h ? h : 1;
}

/* ---- duplicate filter ------------------------------------------------- */

static int idset_has(const idset *s, uint64_t h)
{
    if (!s->cap)
        return 0;
    for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->v[i] == h)
            return 1;
        if (s->v[i] == 0)
            return 0;
    }
}

static void idset_put(idset *s, uint64_t h)
{
    size_t i = h & (s->cap - 1);
    while (s->v[i] != 0 && s->v[i] != h)
        i = (i + 1) & (s->cap - 1);
    if (s->v[i] == 0) {
        s->v[i] = h;
        s->n++;
    }
}

/* Adds h, doubling the table at half load. A failed allocation only
 * forgets the id (the filter is a best effort). */
static void idset_add(idset *s, uint64_t h)
{
    if ((s->n + 1) * 2 > s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 1024;
        uint64_t *nv = calloc(ncap, sizeof *nv);
        if (!nv)
            return;
        idset old = *s;
        s->v = nv;
        s->cap = ncap;
        s->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.v[i])
                idset_put(s, old.v[i]);
        free(old.v);
    }
    idset_put(s, h);
}

/* Removes h (linear probing: the entries after it in its run move back
 * into the hole when their home slot lies at or before it). */
static void idset_del(idset *s, uint64_t h)
{
    if (!s->cap)
        return;
    size_t mask = s->cap - 1, i = h & mask;
    while (s->v[i] != h) {
        if (s->v[i] == 0)
            return;
        i = (i + 1) & mask;
    }
    for (size_t j = (i + 1) & mask; s->v[j] != 0; j = (j + 1) & mask) {
        if (((j - (s->v[j] & mask)) & mask) >= ((j - i) & mask)) {
            s->v[i] = s->v[j];
            i = j;
        }
    }
    s->v[i] = 0;
    s->n--;
}

static void idset_clear(idset *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int dups_seen(sluice_consumer *c, const char *rid)
{
    uint64_t h = id_hash(rid);
    return idset_has(&c->dups[0], h) || idset_has(&c->dups[1], h);
}

static void dups_add(sluice_consumer *c, const char *rid)
{
    idset *cur = &c->dups[c->dups_cur];
    if (cur->n >= DUP_GEN_MAX) {
        c->dups_cur ^= 1;
        cur = &c->dups[c->dups_cur];
        idset_clear(cur);
    }
    idset_add(cur, id_hash(rid));
}

/* Forgets rid: a prefetched batch dropped before next() handed it out
 * (lease_lost()), so that when it comes again it is no duplicate. */
static void dups_del(sluice_consumer *c, const char *rid)
{
    uint64_t h = id_hash(rid);
    idset_del(&c->dups[0], h);
    idset_del(&c->dups[1], h);
}

static void dups_reset(sluice_consumer *c)
{
    idset_clear(&c->dups[0]);
    idset_clear(&c->dups[1]);
}

/* ---- shared state (the loop side) ------------------------------------- */

/* Records an error that ends the consumer's work (the queue is gone, the
 * credentials were refused, Redis answers nonsense). */
static void set_fatal(sluice_consumer *c, sluice_err e, const char *fmt, ...)
{
    mu_lock(c);
    if (c->fatal == SLUICE_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->fatal_msg, sizeof c->fatal_msg, fmt, ap);
        va_end(ap);
        c->fatal = e;
    }
    cv_broadcast(c);
    mu_unlock(c);
}

/* Whether the loop must be woken (the caller holds mu): at most one
 * wake-up is in flight. The caller writes with wake_write() after
 * unlocking, so that the woken loop does not wait for mu. */
static int wake_needed(sluice_consumer *c)
{
    if (c->wake_pending)
        return 0;
    c->wake_pending = 1;
    return 1;
}

static void wake_write(sluice_consumer *c)
{
    uint64_t one = 1;
    /* Cannot fail short of a bug: the counter is far from overflowing. */
    ssize_t n = write(c->wake_fd, &one, sizeof one);
    (void)n;
}

/* ---- sessions --------------------------------------------------------- */

static int64_t backoff_ms(sluice_consumer *c)
{
    int64_t d = BACKOFF_MIN_MS;
    for (unsigned i = 0; i < c->attempt && d < BACKOFF_MAX_MS; i++)
        d *= 2;
    if (d > BACKOFF_MAX_MS)
        d = BACKOFF_MAX_MS;
    c->attempt++;
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    /* +-25% so that consumers dropped together do not come back together. */
    return d * 3 / 4 + (int64_t)(c->rng % (uint64_t)(d / 2 + 1));
}

static void arm(struct event *ev, int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

/* Ends the current session: both connections are dropped, replies still
 * due are forgotten (their ids stay in pending:<cid>, the next session
 * finds them), and a new session is scheduled. Safe inside any callback:
 * hiredis defers freeing a context whose callback is running. */
static void session_fail(sluice_consumer *c, const char *fmt, ...)
{
    if (c->state == ST_DOWN)
        return;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);

    c->gen++;
    c->state = ST_DOWN;
    /* next() stops writing to the hand socket before it is closed. */
    mu_lock(c);
    c->hand_fd = -1;
    mu_unlock(c);
    for (int i = 0; i < NCONN; i++) {
        redisAsyncContext *ac = c->ac[i];
        c->ac[i] = NULL;
        c->pend[i] = 0;
        if (ac)
            redisAsyncFree(ac);
    }
    c->blocking = 0;
    c->op = OP_NONE;
    c->op_left = 0;
    c->restored = 0;
    c->unblock_sent = c->requeue_sent = 0;
    c->beat_inflight = c->reap_inflight = c->role_inflight = 0;
    c->oom_wait = 0;
    evtimer_del(c->oom_ev);
    /* A marker seen but not yet announced is seen again by the next take. */
    if (!c->marker_published)
        c->stopped_at_marker = 0;
    c->nrecover = 0;
    /* The node may have changed (failover, migrated slot, MOVED). */
    c->resolve = c->route_addr != NULL;

    mu_lock(c);
    if (c->down_since_ms == 0)
        c->down_since_ms = sluicei_now_ms();
    snprintf(c->down_why, sizeof c->down_why, "%s", why);
    int closing = c->closing, fatal = c->fatal != SLUICE_OK;
    cv_broadcast(c);
    mu_unlock(c);

    if (fatal) {
        if (closing)
            event_base_loopbreak(c->base);
        return;
    }
    arm(c->retry_ev, closing ? BACKOFF_MIN_MS : backoff_ms(c));
}

static redisAsyncContext *conn_of(sluice_consumer *c, const redisAsyncContext *ac, int *which)
{
    for (int i = 0; i < NCONN; i++)
        if (c->ac[i] == ac) {
            *which = i;
            return c->ac[i];
        }
    return NULL;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    sluice_consumer *c = ac->data;
    int which;
    if (status == REDIS_OK || !conn_of(c, ac, &which))
        return;
    /* hiredis frees a context whose connect failed. */
    c->ac[which] = NULL;
    session_fail(c, "redis %s: connect: %s", c->addr, ac->errstr);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    sluice_consumer *c = ac->data;
    int which;
    (void)status;
    if (!conn_of(c, ac, &which))
        return;   /* one we dropped ourselves */
    c->ac[which] = NULL;
    session_fail(c, "redis %s: connection lost: %s", c->addr,
                 ac->err ? ac->errstr : "closed by the server");
}

static void handle(sluice_consumer *c, req *q, redisReply *r);
static void set_fatal(sluice_consumer *c, sluice_err e, const char *fmt, ...);

/* MOVED or ASK from a server not addressed as a cluster node: the address
 * is wrong, and no retry mends it (a cluster's are followed by the next
 * session). */
static int wrong_address(sluice_consumer *c, const redisReply *r)
{
    if (c->cluster || r->type != REDIS_REPLY_ERROR ||
        !(starts_with(r->str, r->len, "MOVED ") || starts_with(r->str, r->len, "ASK ")))
        return 0;
    set_fatal(c, SLUICE_ERR_INVALID, "redis %s: %s (the server is a Redis Cluster node: use a "
              "redis+cluster:// address)", c->addr, r->str);
    session_fail(c, "redis %s: %s", c->addr, r->str);
    return 1;
}

static void req_free(req *q)
{
    if (q)
        free(q->ids);
    free(q);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    req *q = priv;
    sluice_consumer *c = q->c;
    if (q->gen == c->gen) {
        c->pend[q->conn]--;
        c->prog_ms[q->conn] = sluicei_now_ms();
        if (q->kind == R_BLMOVE)
            c->blocking = 0;
        if (!reply) {
            /* hiredis is freeing this context (a socket error). */
            if (c->ac[q->conn] == ac)
                c->ac[q->conn] = NULL;
            session_fail(c, "redis %s: connection lost: %s", c->addr,
                         ac->err ? ac->errstr : "no reply");
        } else {
            if (!wrong_address(c, reply))
                handle(c, q, reply);
            if (q->gen == c->gen && c->restored)
                c->contact_ms = sluicei_now_ms();
            if (q->gen == c->gen) {
                if (q->in_op && --c->op_left == 0) {
                    if (c->op == OP_RESTORE)
                        c->restored = 1;
                    c->op = OP_NONE;
                    pump(c);
                } else if (c->close_deadline_ms) {
                    pump(c);
                }
            }
        }
    }
    req_free(q);
}

static req *new_req(int kind, int item)
{
    req *q = calloc(1, sizeof *q);
    if (q) {
        q->kind = kind;
        q->item = item;
    }
    return q;
}

/* Sends a command on connection conn; q (from new_req, may be NULL after
 * a failed allocation) is owned by the call. Returns -1 when the session
 * ended (the caller stops what it was doing). */
static int send_argv(sluice_consumer *c, int conn, req *q, int in_op, int argc, const char **argv,
                     const size_t *lens)
{
    redisAsyncContext *ac = c->ac[conn];
    if (!q) {
        session_fail(c, "out of memory");
        return -1;
    }
    if (!ac) {
        req_free(q);
        return -1;
    }
    q->c = c;
    q->gen = c->gen;
    q->sent_ms = sluicei_now_ms();
    q->conn = conn;
    q->in_op = in_op;
    if (redisAsyncCommandArgv(ac, on_reply, q, argc, argv, lens) != REDIS_OK) {
        req_free(q);
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
static int send_script(sluice_consumer *c, int conn, req *q, int in_op, sluicei_script_id s,
                       int argc, const char **argv)
{
    const char *sav[40], **av = sav;
    size_t sal[40], *al = sal;
    if (argc + 4 > 40) {
        av = malloc((size_t)(argc + 4) * sizeof *av);
        al = malloc((size_t)(argc + 4) * sizeof *al);
        if (!av || !al) {
            free(av == sav ? NULL : av);
            free(al == sal ? NULL : al);
            req_free(q);
            session_fail(c, "out of memory");
            return -1;
        }
    }
    av[0] = "EVALSHA";
    av[1] = c->sha[s];
    av[2] = "1";
    av[3] = c->k_meta;
    for (int i = 0; i < argc; i++)
        av[4 + i] = argv[i];
    for (int i = 0; i < argc + 4; i++)
        al[i] = strlen(av[i]);
    int rc = send_argv(c, conn, q, in_op, argc + 4, av, al);
    if (av != sav) {
        free(av);
        free(al);
    }
    return rc;
}

/* Acknowledges n batches whose Redis ids are at base, base + stride, ...
 * (idbuf or item arrays), in ack script calls of up to ACK_BATCH_MAX.
 * An R_ACK request keeps a copy of its ids for confirm_ack(). Returns -1
 * when the session ended. */
static int send_acks(sluice_consumer *c, int conn, int kind, int in_op, const char *base,
                     size_t stride, size_t n)
{
    char (*num)[3][24] = malloc(ACK_BATCH_MAX * sizeof *num);
    const char **argv = malloc((1 + 4 * ACK_BATCH_MAX) * sizeof *argv);
    int rc = 0;
    if (!num || !argv) {
        session_fail(c, "out of memory");
        rc = -1;
    }
    for (size_t i = 0; i < n && rc == 0;) {
        size_t k = 0, from = i;
        argv[0] = c->id;
        for (; i < n && k < ACK_BATCH_MAX; i++) {
            const char *rid = base + i * stride;
            if (ack_fields(rid, num[k][0], num[k][1], num[k][2]) != 0)
                continue;   /* never handed out: such a frame fails the id check */
            argv[1 + 4 * k] = rid;
            argv[2 + 4 * k] = num[k][0];
            argv[3 + 4 * k] = num[k][1];
            argv[4 + 4 * k] = num[k][2];
            k++;
        }
        if (k == 0)
            continue;
        req *q = new_req(kind, -1);
        if (q && kind == R_ACK) {
            q->ids = malloc((i - from) * sizeof *q->ids);
            if (!q->ids) {
                req_free(q);
                q = NULL;
            }
            for (size_t j = from; q && j < i; j++)
                memcpy(q->ids[q->nids++].s, base + j * stride, RID_MAX);
        }
        rc = send_script(c, conn, q, in_op, SLUICEI_SCRIPT_ACK, (int)(1 + 4 * k), argv);
    }
    free(num);
    free(argv);
    return rc;
}

/* Sends an invalid frame's id to the dead letters with its reason (part of
 * the current data operation) and counts it. */
static int send_dead(sluice_consumer *c, const char *rid, size_t len, const char *reason)
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
    const char *av[7] = {"EVALSHA", c->sha[SLUICEI_SCRIPT_DEAD], "1", c->k_meta, c->id, rid,
                         reason};
    size_t lens[7];
    for (int i = 0; i < 7; i++)
        lens[i] = i == 5 ? len : strlen(av[i]);
    return send_argv(c, CONN_DATA, new_req(R_DEAD, -1), 1, 7, av, lens);
}

/* A setup command; script is the script a SCRIPT LOAD loads (else -1). */
static void send_setup(sluice_consumer *c, int conn, int argc, const char **argv, const char *step,
                       int script)
{
    req *q = new_req(strcmp(step, "CLIENT ID") == 0 ? R_CLIENT_ID : R_SETUP, -1);
    if (q) {
        snprintf(q->id, sizeof q->id, "%s", step);
        q->nitems = script;
    }
    if (send_argv(c, conn, q, 0, argc, argv, NULL) == 0)
        c->setup_left++;
}

static const sluicei_script_id used_scripts[] = {
    SLUICEI_SCRIPT_TAKE, SLUICEI_SCRIPT_CLAIM, SLUICEI_SCRIPT_ACK,  SLUICEI_SCRIPT_REQUEUE,
    SLUICEI_SCRIPT_REAP, SLUICEI_SCRIPT_BEAT,  SLUICEI_SCRIPT_DEAD, SLUICEI_SCRIPT_RESTORE,
};

/* Points url at the node that serves the queue now, from a slot map read
 * again (a router of this thread's own, opened the first time). This is a
 * synchronous call in the loop, bounded by the connect timeout per seed;
 * it only happens while the session is down, when the loop has nothing
 * else to send. Returns -1 when the session failed. */
static int resolve_node(sluice_consumer *c)
{
    char err[256] = "";
    sluice_err e = SLUICE_OK;
    int fresh = 0;
    if (!c->router) {
        e = sluicei_router_open(&c->router, c->route_addr, c->connect_timeout_ms,
                                c->connect_timeout_ms, err, sizeof err);
        if (e != SLUICE_OK)
            c->router = NULL;
        fresh = 1;
    }
    sluicei_url u;
    memset(&u, 0, sizeof u);
    if (e == SLUICE_OK)
        e = sluicei_router_url(c->router, c->queue, !fresh, &u, err, sizeof err);
    if (e != SLUICE_OK) {
        if (e == SLUICE_ERR_AUTH)
            set_fatal(c, SLUICE_ERR_AUTH, "redis %s: authentication failed: %s", c->addr, err);
        session_fail(c, "redis %s: finding the node of queue '%s': %s", c->addr, c->queue,
                     err[0] ? err : sluice_strerror(e));
        return -1;
    }
    sluicei_url_free(&c->url);
    c->url = u;
    sluicei_url_describe(&c->url, c->addr, sizeof c->addr);
    c->resolve = 0;
    return 0;
}

/* Starts a session: three non-blocking connects, and the setup commands
 * queued behind them (hiredis sends them once connected). Scripts are
 * loaded again every time: a restarted server has none. The hand
 * connection proves it may set the mark (a PEXPIREAT of a key that does
 * not exist) and then turns its replies off: from then on next() writes
 * to it and nobody reads. */
static void session_start(sluice_consumer *c)
{
    c->gen++;
    c->state = ST_CONNECTING;
    c->conn_started_ms = sluicei_now_ms();
    c->setup_left = 0;
    c->data_client_id = 0;
    /* Not while closing: reading the slot map blocks the loop for up to a
     * connect timeout per seed, past close()'s own deadline; the last
     * known node is tried instead. */
    if (c->resolve && !c->close_deadline_ms && resolve_node(c) != 0)
        return;
    for (int i = 0; i < NCONN; i++) {
        redisAsyncContext *ac = c->url.unix_path ? redisAsyncConnectUnix(c->url.unix_path)
                                                 : redisAsyncConnect(c->url.host, c->url.port);
        if (!ac) {
            session_fail(c, "redis %s: connect: out of memory", c->addr);
            return;
        }
        if (ac->err) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", ac->errstr);
            redisAsyncFree(ac);
            session_fail(c, "redis %s: connect: %s", c->addr, msg);
            return;
        }
        ac->data = c;
        c->ac[i] = ac;
        if (redisLibeventAttach(ac, c->base) != REDIS_OK) {
            session_fail(c, "redis %s: attaching to the event loop failed", c->addr);
            return;
        }
        redisAsyncSetConnectCallback(ac, on_connect);
        redisAsyncSetDisconnectCallback(ac, on_disconnect);
    }
    uint64_t gen = c->gen;
    for (int i = 0; i < NCONN && gen == c->gen; i++) {
        if (c->url.password) {
            const char *a3[3] = {"AUTH", c->url.user, c->url.password};
            const char *a2[2] = {"AUTH", c->url.password};
            send_setup(c, i, c->url.user ? 3 : 2, c->url.user ? a3 : a2, "AUTH", -1);
        }
        if (c->url.db && gen == c->gen) {
            char db[16];
            snprintf(db, sizeof db, "%d", c->url.db);
            const char *av[2] = {"SELECT", db};
            send_setup(c, i, 2, av, "SELECT", -1);
        }
    }
    if (gen == c->gen) {
        const char *av[2] = {"CLIENT", "ID"};
        send_setup(c, CONN_DATA, 2, av, "CLIENT ID", -1);
    }
    for (size_t i = 0; i < sizeof used_scripts / sizeof used_scripts[0] && gen == c->gen; i++) {
        const char *av[3] = {"SCRIPT", "LOAD", sluicei_script_source(used_scripts[i])};
        send_setup(c, CONN_CTL, 3, av, "SCRIPT LOAD", (int)used_scripts[i]);
    }
    if (gen == c->gen && c->ack_mode == SLUICE_ACK_EXPLICIT) {
        char probe[SLUICE_MAX_KEY + 2];
        snprintf(probe, sizeof probe, "%s-", c->k_frame);   /* never a batch's */
        const char *av[3] = {"PEXPIREAT", probe, SLUICEI_HANDED_AT};
        send_setup(c, CONN_HAND, 3, av, "PEXPIREAT", -1);
        if (gen == c->gen &&
            redisAsyncCommand(c->ac[CONN_HAND], NULL, NULL, "CLIENT REPLY OFF") != REDIS_OK)
            session_fail(c, "redis %s: CLIENT REPLY OFF: out of memory", c->addr);
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    sluice_consumer *c = arg;
    (void)fd;
    (void)what;
    if (c->state == ST_DOWN)
        session_start(c);
}

static void send_beat(sluice_consumer *c)
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
    if (send_script(c, CONN_CTL, new_req(R_BEAT, -1), 0, SLUICEI_SCRIPT_BEAT, 27, argv) == 0)
        c->beat_inflight = 1;
}

static void send_reap(sluice_consumer *c)
{
    if (send_script(c, CONN_CTL, new_req(R_REAP, -1), 0, SLUICEI_SCRIPT_REAP, 0, NULL) == 0)
        c->reap_inflight = 1;
}

static int64_t reap_period(sluice_consumer *c)
{
    int64_t half = c->lease_ms / 2 > 1 ? c->lease_ms / 2 : 1;
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return half * 3 / 4 + (int64_t)(c->rng % (uint64_t)(half / 2 + 1));
}

/* Publishes the hand connection's socket to next(), once hiredis has
 * written everything it queued there (CLIENT REPLY OFF the last): from
 * then on only next() writes to it. */
static void publish_hand(sluice_consumer *c)
{
    redisAsyncContext *ac = c->ac[CONN_HAND];
    if (c->state != ST_READY || !ac || sdslen(ac->c.obuf) > 0)
        return;
    mu_lock(c);
    if (c->hand_fd < 0) {
        c->hand_fd = ac->c.fd;
        cv_broadcast(c);
    }
    mu_unlock(c);
}

/* Pushes the marks next() wrote corked to Redis now (setting TCP_NODELAY
 * sends what a socket holds back; on a unix socket nothing is held back).
 * The loop runs it at every pump and tick, and before a close's requeue.
 * The push (on loopback, Redis's side of the delivery too) runs outside
 * the mutex, so next() does not wait for it: only this thread closes the
 * socket. */
static void hand_flush(sluice_consumer *c)
{
    mu_lock(c);
    int fd = c->hand_dirty ? c->hand_fd : -1;
    c->hand_dirty = 0;
    mu_unlock(c);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
}

static void session_ready(sluice_consumer *c)
{
    c->state = ST_READY;
    c->attempt = 0;
    mu_lock(c);
    if (c->ever_ready)
        c->st.reconnects++;
    c->down_since_ms = 0;
    c->down_why[0] = '\0';
    int closing = c->closing;
    cv_broadcast(c);
    mu_unlock(c);
    c->ever_ready = 1;
    c->need_restore = !closing;
    c->need_resync = !closing;
    c->list_empty = 0;
    if (c->ack_mode == SLUICE_ACK_EXPLICIT)
        publish_hand(c);
    /* Acks whose confirmation was lost are sent again (they are idempotent). */
    if (c->nunconf &&
        send_acks(c, CONN_CTL, R_ACK, 0, c->unconf[0].s, sizeof *c->unconf, c->nunconf) != 0)
        return;
    int64_t now = sluicei_now_ms();
    c->next_beat_ms = now;
    c->next_reap_ms = now + reap_period(c);
    c->wait_now = c->url.wait_replicas;
    c->next_role_ms = now;
    pump(c);
}

/* ---- replies ---------------------------------------------------------- */

static void handle_setup(sluice_consumer *c, req *q, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        const char *m = r->str;
        if (sluicei_cluster_retryable(m, r->len)) {
            ;   /* a node in a passing state (LOADING, CLUSTERDOWN...) */
        } else if (starts_with(m, r->len, "NOPERM")) {
            set_fatal(c, SLUICE_ERR_AUTH, "redis %s: permission refused: %s: %s", c->addr, q->id,
                      m);
        } else if (strcmp(q->id, "AUTH") == 0 || starts_with(m, r->len, "NOAUTH") ||
                   starts_with(m, r->len, "WRONGPASS")) {
            set_fatal(c, SLUICE_ERR_AUTH, "redis %s: authentication failed: %s", c->addr, m);
        } else if (strcmp(q->id, "SELECT") == 0 && !starts_with(m, r->len, "LOADING")) {
            set_fatal(c, SLUICE_ERR_INVALID, "redis %s: SELECT: %s", c->addr, m);
        }
        /* Anything else (LOADING after a restart...) is tried again. */
        session_fail(c, "redis %s: %s: %s", c->addr, q->id, m);
        return;
    }
    if (q->kind == R_CLIENT_ID && r->type == REDIS_REPLY_INTEGER)
        c->data_client_id = r->integer;
    /* The SHA1s come from the node itself (open() may not have asked one). */
    if (q->nitems >= 0 && q->nitems < SLUICEI_SCRIPT_COUNT && r->type == REDIS_REPLY_STRING &&
        r->len == 40)
        copy_id(c->sha[q->nitems], r->str, r->len);
    if (--c->setup_left == 0 && c->state == ST_CONNECTING)
        session_ready(c);
}

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
        set_fatal(c, SLUICE_ERR_BUSY, "%s", text);
        session_fail(c, "%s", text);
    } else if (sluicei_reply_error_code(r) == SLUICE_ERR_AUTH) {
        set_fatal(c, SLUICE_ERR_AUTH, "redis %s: permission refused: %s: %s", c->addr, what,
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
        set_fatal(c, SLUICE_ERR_NOQUEUE, "queue '%s' does not exist any more", c->queue);
    } else {
        session_fail(c, "redis %s: %s: %s", c->addr, what, r->str);
    }
    return 1;
}

/* Fetches items[from..from+n): GET b:<id> for one, MGET for several, as
 * many per command as FETCH_BYTES allows. Returns -1 when the session
 * ended. */
static int fetch_items(sluice_consumer *c, int from, int n)
{
    size_t est = c->frame_est ? c->frame_est : 1;
    int per = est >= FETCH_BYTES ? 1 : (int)(FETCH_BYTES / est);
    size_t plen = strlen(c->k_frame);
    while (n > 0) {
        int k = n < per ? n : per;
        size_t total = 0;
        for (int i = 0; i < k; i++)
            total += plen + strlen(c->items[from + i].rid) + 1;
        char *keys = malloc(total);
        const char **av = malloc((size_t)(k + 1) * sizeof *av);
        req *q = new_req(R_FRAME, from);
        if (!keys || !av || !q) {
            free(keys);
            free(av);
            req_free(q);
            session_fail(c, "out of memory");
            return -1;
        }
        q->nitems = k;
        av[0] = k == 1 ? "GET" : "MGET";
        char *kp = keys;
        for (int i = 0; i < k; i++) {
            av[1 + i] = kp;
            kp += sprintf(kp, "%s%s", c->k_frame, c->items[from + i].rid) + 1;
        }
        int rc = send_argv(c, CONN_DATA, q, 1, k + 1, av, NULL);
        free(keys);
        free(av);
        if (rc != 0)
            return -1;
        from += k;
        n -= k;
    }
    return 0;
}

/* At most once: acknowledges items[0..n) right behind their GETs (one
 * script call), so that the batches are gone from Redis on arrival. Until
 * the reply confirms it, the ack counts as unconfirmed: a session that
 * ends first sends it again, and its ids are not fetched a second time
 * from pending:<cid>. */
static int ack_fetched(sluice_consumer *c, int n)
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

/* When the node has replicas to wait for: WAIT right behind a take,
 * BLMOVE or claim, as part of the same data operation. The GETs sent
 * after it on this connection run, and their batches are handed out, only
 * once the move into pending:<cid> reached the replicas (or
 * SLUICEI_WAIT_MS passed), so that a failover right after the take does
 * not bring back, for another consumer, a batch this one returned. */
static int send_wait(sluice_consumer *c)
{
    if (c->wait_now <= 0)
        return 0;
    char n[16], ms[16];
    snprintf(n, sizeof n, "%d", c->wait_now);
    snprintf(ms, sizeof ms, "%d", SLUICEI_WAIT_MS);
    const char *av[3] = {"WAIT", n, ms};
    return send_argv(c, CONN_DATA, new_req(R_WAIT, -1), 1, 3, av, NULL);
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
    const char *av[4] = {"HMGET", c->k_job, "epochs", "epoch_open"};
    const char *ef[3] = {"HGET", k_estats, field};
    if (send_argv(c, CONN_DATA, new_req(R_JOB, -1), 1, 4, av, NULL) != 0)
        return -1;
    return send_argv(c, CONN_DATA, new_req(R_EFAILED, -1), 1, 3, ef, NULL);
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
        arm(c->oom_ev, RECOVER_POLL_MS);
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
        set_fatal(c, SLUICE_ERR_PROTOCOL, "take: unexpected reply (type %d)", r->type);
        return;
    }
    lease_renewed(c, q->sent_ms);
    size_t want = (size_t)c->items[0].dlv;   /* stashed by start_take */
    int n = 0, marker = 0;
    uint64_t gen = c->gen;
    for (size_t i = 0; i + 1 < r->elements && gen == c->gen; i += 2) {
        redisReply *id = r->element[i], *d = r->element[i + 1];
        uint32_t me;
        if (id->type != REDIS_REPLY_STRING || d->type != REDIS_REPLY_INTEGER) {
            set_fatal(c, SLUICE_ERR_PROTOCOL, "take: unexpected element types");
            return;
        }
        if (sluicei_marker_parse(id->str, id->len, &me)) {
            marker = me == c->loop_epoch;   /* the script returns only that one */
            break;
        }
        if (n >= c->prefetch) {
            set_fatal(c, SLUICE_ERR_PROTOCOL, "take: more ids than asked for");
            return;
        }
        add_item(c, id->str, id->len, d->integer, &n);
    }
    if (gen == c->gen && fetch_items(c, 0, n) == 0)
        ack_fetched(c, n);
    if (gen != c->gen)
        return;
    c->list_empty = !marker && r->elements / 2 < want;
    if (marker)
        reached_marker(c);
}

/* The claim script's ARGV for id (a NUL-free string) taken from the list
 * of epoch ep; bufs holds the numbers. */
static void claim_args(sluice_consumer *c, const char *id, uint32_t ep, char epbuf[16],
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
        arm(c->oom_ev, OOM_POLL_MS);
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
        claim_args(c, mk, c->loop_epoch, ep, argv);
        req *q = new_req(R_CLAIM, -1);
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
    claim_args(c, c->items[0].rid, c->loop_epoch, ep, argv);
    if (send_script(c, CONN_DATA, new_req(R_CLAIM, 0), 1, SLUICEI_SCRIPT_CLAIM, 6, argv) == 0 &&
        send_wait(c) == 0 && fetch_items(c, 0, 1) == 0)
        ack_fetched(c, 1);
}

/* The claim script's answer: the delivery count of an item, -1 when it
 * went to the dead letters (its GET is ignored); for a marker 0 when it is
 * the true end of the loop's epoch. */
static void handle_claim(sluice_consumer *c, req *q, redisReply *r)
{
    if (script_error(c, "claim", r))
        return;
    if (r->type != REDIS_REPLY_INTEGER) {
        set_fatal(c, SLUICE_ERR_PROTOCOL, "claim: unexpected reply (type %d)", r->type);
        return;
    }
    lease_renewed(c, q->sent_ms);
    if (q->item >= 0)
        c->items[q->item].dlv = r->integer;
    else if (q->nitems == 1 && r->integer == 0)
        reached_marker(c);
}

/* Takes over the string of a reply hiredis is about to free: the batch
 * keeps pointing into it (zero copy), and sluice_batch_free() frees it. */
static redisReply *steal_string(redisReply *r)
{
    redisReply *m = malloc(sizeof *m);
    if (!m)
        return NULL;
    *m = *r;
    r->str = NULL;
    r->len = 0;
    return m;
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
    redisReply *m = steal_string(r);
    if (!m) {
        session_fail(c, "out of memory");
        return;
    }
    c->frame_est = m->len;
    sluice_batch *b = NULL;
    sluice_err e = sluicei_wire_decode(m->str, m->len, c->max_batch_bytes, freeReplyObject, m, &b,
                                       why, sizeof why);
    if (e != SLUICE_OK) {
        freeReplyObject(m);
        send_dead(c, it->rid, strlen(it->rid), why);
        return;
    }
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
            send_argv(c, CONN_DATA, new_req(R_MARK, -1), 1, 3, av, NULL);
        } else {
            send_acks(c, CONN_DATA, R_ACK_QUIET, 1, it->rid, RID_MAX, 1);
        }
        return;
    }
    dups_add(c, it->rid);
    b->deliveries = it->dlv > 0 && it->dlv <= UINT32_MAX ? (uint32_t)it->dlv : 1;
    b->padding = padding;
    /* At most once: the batch is acknowledged already; release() only frees. */
    b->consumer = c->ack_mode == SLUICE_ACK_EXPLICIT ? c : NULL;
    b->acked = c->ack_mode != SLUICE_ACK_EXPLICIT;
    mu_lock(c);
    slot *sl = &c->fifo[(c->fifo_head + c->fifo_len) % c->prefetch];
    sl->b = b;
    memcpy(sl->rid, it->rid, sizeof sl->rid);
    c->fifo_len++;   /* room: an operation never asks for more than the free slots */
    int signal = c->top->waiting && !c->notify_armed;
    mu_unlock(c);
    if (signal) {
        /* One wake-up for all the batches of this read: notify_ev runs
         * once hiredis is done with the replies it has. */
        c->notify_armed = 1;
        event_active(c->notify_ev, EV_TIMEOUT, 1);
    }
}

static void on_notify(evutil_socket_t fd, short what, void *arg)
{
    sluice_consumer *c = arg;
    (void)fd;
    (void)what;
    c->notify_armed = 0;
    mu_lock(c);
    cv_broadcast(c);
    mu_unlock(c);
}

/* The reply to a GET or MGET of q->nitems items from q->item. */
static void handle_frames(sluice_consumer *c, req *q, redisReply *r)
{
    if (q->nitems == 1 && r->type != REDIS_REPLY_ARRAY) {
        handle_frame(c, q->item, r);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)q->nitems) {
        session_fail(c, "redis %s: MGET: %s", c->addr,
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return;
    }
    uint64_t gen = c->gen;
    for (int i = 0; i < q->nitems && gen == c->gen; i++)
        handle_frame(c, q->item + i, r->element[i]);
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
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_STRING)
        epochs = strtoll(r->element[0]->str, NULL, 10);
    c->mk_last = epochs > 0 && (long long)c->mk_epoch + 1 >= epochs;
}

/* How many tasks of the marker's epoch failed: none ends the sequence;
 * else the failed list says which. */
static void handle_efailed(sluice_consumer *c, redisReply *r)
{
    if (marker_error(c, "HGET estats", r))
        return;
    long long n = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    c->mk_nfailed = n > 0 && n <= UINT32_MAX ? (uint32_t)n : 0;
    if (c->mk_nfailed == 0) {
        publish_marker(c, "");
        return;
    }
    char k_failed[SLUICE_MAX_KEY];
    sluicei_key(k_failed, c->queue, "failed");
    const char *av[4] = {"LRANGE", k_failed, "0", "9999"};
    send_argv(c, CONN_DATA, new_req(R_FAILED, -1), 1, 4, av, NULL);
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
    req *q = new_req(R_TERR, -1);
    if (q && !(q->ids = calloc(FAILED_NAMED, sizeof *q->ids))) {
        req_free(q);
        q = NULL;
    }
    for (size_t i = 0; q && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *t = r->element[i];
        if (q->nids < FAILED_NAMED && t->type == REDIS_REPLY_STRING &&
            t->len < RID_MAX && t->len > (size_t)pl && memcmp(t->str, pfx, (size_t)pl) == 0)
            copy_id(q->ids[q->nids++].s, t->str, t->len);
    }
    if (!q || q->nids == 0) {
        req_free(q);
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

static void handle_resync(sluice_consumer *c, redisReply *r)
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
    char *end;
    a.e = (uint32_t)strtoul(rid, &end, 10);
    a.t = strtoull(end + 1, &end, 10);
    a.seq = (uint32_t)strtoul(end + 1, &end, 10);
    if (*end == ':')
        a.pad = (uint32_t)strtoul(end + 4, NULL, 10);   /* ":pad<k>" */
    a.ms = now;
    c->ring[(c->ring_head + c->ring_len) % c->ring_cap] = a;
    if (c->ring_len == c->ring_cap)
        c->ring_head = (c->ring_head + 1) % c->ring_cap;
    else
        c->ring_len++;
}

static void confirm_ack(sluice_consumer *c, const char *id)
{
    for (size_t i = 0; i < c->nunconf; i++)
        if (strcmp(c->unconf[i].s, id) == 0) {
            ring_add(c, id);
            memmove(c->unconf + i, c->unconf + i + 1, (c->nunconf - i - 1) * sizeof *c->unconf);
            c->nunconf--;
            return;
        }
}

static void handle(sluice_consumer *c, req *q, redisReply *r)
{
    switch (q->kind) {
    case R_SETUP:
    case R_CLIENT_ID:
        handle_setup(c, q, r);
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
        handle_resync(c, r);
        break;
    case R_ACK: {
        /* Done, for every id: one the consumer no longer held (its lease
         * ran out and it went to someone else) needs nothing more. Only a
         * lost script, or a script that did not run on this node (its slot
         * moved), is worth another try. */
        int again = is_err(r, "NOSCRIPT") ||
                    (r->type == REDIS_REPLY_ERROR && sluicei_cluster_retryable(r->str, r->len));
        for (size_t i = 0; i < q->nids && !again; i++)
            confirm_ack(c, q->ids[i].s);
        script_error(c, "ack", r);
        break;
    }
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

/* ---- the fetch engine ------------------------------------------------- */

static void start_take(sluice_consumer *c, int room)
{
    char n[16], ep[16];
    snprintf(n, sizeof n, "%d", room);
    snprintf(ep, sizeof ep, "%" PRIu32, c->loop_epoch);
    c->items[0].dlv = room;   /* read back by handle_take before it is overwritten */
    const char *argv[6] = {c->id, c->tok, c->registered ? "0" : "1", n, ep, c->rank_s};
    c->op = OP_TAKE;
    if (send_script(c, CONN_DATA, new_req(R_TAKE, -1), 1, SLUICEI_SCRIPT_TAKE, 6, argv) == 0)
        send_wait(c);
}

/* Whether a BLMOVE sent now ends, at the latest, while the lease surely
 * runs: what it moves into pending:<cid> then belongs to a consumer that
 * any later reaper finds (lib.lua: give_back). Otherwise a take renews
 * the lease first. */
static int blmove_safe(sluice_consumer *c)
{
    mu_lock(c);
    int ok = sluicei_now_ms() + c->block_ms < c->lease_until;
    mu_unlock(c);
    return ok;
}

static void start_blmove(sluice_consumer *c)
{
    char src[SLUICE_MAX_KEY], name[48];
    if (c->rank_s[0])
        snprintf(name, sizeof name, "ready:%" PRIu32 ":%s", c->loop_epoch, c->rank_s);
    else
        snprintf(name, sizeof name, "ready:%" PRIu32, c->loop_epoch);
    sluicei_key(src, c->queue, name);
    const char *av[6] = {"BLMOVE", src, c->k_pending, "RIGHT", "LEFT", c->block_arg};
    c->op = OP_BLMOVE;
    if (send_argv(c, CONN_DATA, new_req(R_BLMOVE, -1), 1, 6, av, NULL) == 0)
        send_wait(c);
}

/* Claims and fetches ids found in pending:<cid> that never arrived. */
static void start_recover(sluice_consumer *c, int room)
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
            claim_args(c, rid, me, ep, argv);
            send_script(c, CONN_DATA, new_req(R_CLAIM, -1), 1, SLUICEI_SCRIPT_CLAIM, 6, argv);
            continue;
        }
        memcpy(c->items[n].rid, rid, RID_MAX);
        c->items[n].dlv = 1;
        claim_args(c, c->items[n].rid, c->loop_epoch, ep, argv);
        send_script(c, CONN_DATA, new_req(R_CLAIM, n), 1, SLUICEI_SCRIPT_CLAIM, 6, argv);
        n++;
    }
    if (gen == c->gen && send_wait(c) == 0 && fetch_items(c, 0, n) == 0)
        ack_fetched(c, n);
    if (gen != c->gen)
        return;
    memmove(c->recover, c->recover + k, (c->nrecover - k) * sizeof *c->recover);
    c->nrecover -= k;
}

/* At the start of every session, before anything is taken: the restore
 * script (restore.lua) with what the application holds ("held") and what
 * it acknowledged lately ("acked": released but not yet sent, sent but
 * not confirmed, and confirmed in the RESTORE_MS before the last reply of
 * the last session that had restored), in chunks; at least one call,
 * empty if need be: it is also how a restarted Redis is noticed (the
 * script then holds takes back until the consumers it knew restored). */
static void start_restore(sluice_consumer *c)
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
    const char **argv = malloc((4 + 2 * RESTORE_CHUNK) * sizeof *argv);
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
        int k = 4, nt = 0;
        argv[0] = c->id;
        argv[1] = c->tok;
        argv[2] = c->registered ? "0" : "1";
        argv[3] = c->rank_s;
        for (; sent < total && k < 4 + 2 * RESTORE_CHUNK; sent++) {
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
                int n = snprintf(b, RID_MAX, "%" PRIu32 ":%" PRIu64 ":%" PRIu32, a->e, a->t, a->seq);
                if (a->pad)
                    snprintf(b + n, (size_t)(RID_MAX - n), ":pad%" PRIu32, a->pad);
                argv[k++] = "acked";
                argv[k++] = b;
            }
        }
        send_script(c, CONN_DATA, new_req(R_RESTORE, -1), 1, SLUICEI_SCRIPT_RESTORE, k, argv);
        calls++;
    }
    free(argv);
    free(txt);
    free(mine);
}

/* Close, once the data connection is idle: the last acks, then requeue of
 * everything still held, with the ids the application still has named,
 * so that their delivery counts even if a mark did not arrive yet. */
static void close_step(sluice_consumer *c)
{
    if (c->requeue_sent || c->state != ST_READY)
        return;
    if (c->op != OP_NONE) {
        if (c->blocking && !c->unblock_sent && c->data_client_id > 0) {
            char id[24];
            snprintf(id, sizeof id, "%lld", c->data_client_id);
            const char *av[3] = {"CLIENT", "UNBLOCK", id};
            if (send_argv(c, CONN_CTL, new_req(R_UNBLOCK, -1), 0, 3, av, NULL) == 0)
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
    hand_flush(c);
    if (send_script(c, CONN_DATA, new_req(R_REQUEUE, -1), 0, SLUICEI_SCRIPT_REQUEUE, n + 2,
                    argv) == 0)
        c->requeue_sent = 1;
    free(argv);
}

/* Decides the next step after anything happened: sends released acks,
 * starts the next epoch when asked to, and starts a data operation when
 * none runs and the FIFO has room. Returns whether the loop is now parked
 * (see pump()), or -1 when there is no session. */
static int pump_once(sluice_consumer *c)
{
    if (c->state != ST_READY)
        return -1;
    mu_lock(c);
    size_t first = c->nunconf;
    if (c->nacks && !grow((void **)&c->unconf, &c->unconf_cap, c->nunconf + c->nacks,
                          sizeof *c->unconf)) {
        memcpy(c->unconf + c->nunconf, c->acks, c->nacks * sizeof *c->acks);
        c->nunconf += c->nacks;
        c->nacks = 0;
    }
    int adv = c->advance_req;
    c->advance_req = 0;
    uint32_t ep = c->epoch;
    int closing = c->closing, finished = c->finished, fatal = c->fatal != SLUICE_OK;
    int room = c->prefetch - c->fifo_len;
    if (room <= 0)
        c->want_room = 1;
    int want_lease = c->want_lease, hand_broken = c->hand_broken;
    mu_unlock(c);

    if (hand_broken) {
        mu_lock(c);
        c->hand_broken = 0;
        mu_unlock(c);
        session_fail(c, "redis %s: the hand connection stopped taking writes", c->addr);
        return -1;
    }
    uint64_t gen = c->gen;
    if (first < c->nunconf && send_acks(c, CONN_CTL, R_ACK, 0, c->unconf[first].s,
                                        sizeof *c->unconf, c->nunconf - first) != 0)
        return -1;
    /* next() waits for a batch it may not hand out before a renewal. */
    if (want_lease && !c->beat_inflight && !closing)
        send_beat(c);
    if (gen != c->gen)
        return -1;
    if (adv) {
        c->loop_epoch = ep;
        dups_reset(c);
        c->stopped_at_marker = c->marker_published = 0;
        c->list_empty = 0;
    }
    if (closing) {
        close_step(c);
        return 1;
    }
    if (c->op == OP_NONE && !fatal && !finished && c->need_restore)
        start_restore(c);
    if (c->op == OP_NONE && !fatal && !finished && gen == c->gen) {
        if (c->need_resync) {
            c->need_resync = 0;
            const char *av[4] = {"LRANGE", c->k_pending, "0", "-1"};
            c->op = OP_RESYNC;
            send_argv(c, CONN_DATA, new_req(R_RESYNC, -1), 1, 4, av, NULL);
        } else if (!c->stopped_at_marker && room > 0) {
            if (c->nrecover)
                start_recover(c, room);
            else if (c->oom_wait)
                ;   /* on_oom_timer pumps again */
            else if (c->list_empty && blmove_safe(c))
                start_blmove(c);
            else
                start_take(c, room);
        }
    }
    if (gen != c->gen)
        return -1;
    /* Busy with a round trip: it pumps again when done. Idle with a full
     * FIFO: next() wakes it at the low-water mark. Otherwise (BLMOVE, at
     * a marker, finished) only a wake-up makes it send acks promptly. */
    if (c->op != OP_NONE)
        return c->op == OP_BLMOVE;
    return room > 0 || c->stopped_at_marker || finished || fatal;
}

/* pump_once(), then publishes whether the loop is parked: release() wakes
 * a parked loop for every ack and leaves a busy one alone (it drains the
 * acks when its round trip ends), so that a trainer's release() costs no
 * system call while batches flow. */
static void pump(sluice_consumer *c)
{
    hand_flush(c);
    for (int round = 0; round < 4; round++) {
        int parked = pump_once(c);
        if (parked < 0)
            return;
        mu_lock(c);
        /* An ack released since the drain above would wait for the tick. */
        int again = parked && c->nacks > 0 && round < 3;
        if (!again)
            c->parked = parked;
        mu_unlock(c);
        if (!again)
            return;
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    sluice_consumer *c = arg;
    uint64_t v;
    (void)what;
    ssize_t n = read(fd, &v, sizeof v);
    (void)n;
    mu_lock(c);
    c->wake_pending = 0;
    int closing = c->closing, fatal = c->fatal != SLUICE_OK;
    mu_unlock(c);
    if (closing && c->close_deadline_ms == 0) {
        c->close_deadline_ms = sluicei_now_ms() + CLOSE_TIMEOUT_MS;
        if (c->state != ST_READY && fatal) {
            event_base_loopbreak(c->base);
            return;
        }
        if (c->state == ST_DOWN) {
            evtimer_del(c->retry_ev);
            arm(c->retry_ev, 0);
        }
    }
    pump(c);
}

static void on_oom_timer(evutil_socket_t fd, short what, void *arg)
{
    sluice_consumer *c = arg;
    (void)fd;
    (void)what;
    c->oom_wait = 0;
    pump(c);
}

/* Housekeeping: dead-connection watchdog, heartbeat, reaping, close deadline. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    sluice_consumer *c = arg;
    (void)fd;
    (void)what;
    hand_flush(c);
    int64_t now = sluicei_now_ms();
    if (c->close_deadline_ms && now >= c->close_deadline_ms) {
        event_base_loopbreak(c->base);
        return;
    }
    if (c->state == ST_CONNECTING && now - c->conn_started_ms > c->connect_timeout_ms) {
        session_fail(c, "redis %s: connect: no answer within %d ms", c->addr,
                     c->connect_timeout_ms);
        return;
    }
    if (c->state != ST_READY)
        return;
    for (int i = 0; i < NCONN; i++) {
        int64_t allow = REPLY_SLACK_MS + (i == CONN_DATA && c->blocking ? c->block_ms : 0);
        if (c->pend[i] > 0 && now - c->prog_ms[i] > allow) {
            session_fail(c, "redis %s: no reply within %" PRId64 " ms", c->addr, allow);
            return;
        }
    }
    if (now >= c->next_beat_ms && !c->beat_inflight) {
        c->next_beat_ms = now + (c->lease_ms / 3 > 1 ? c->lease_ms / 3 : 1);
        send_beat(c);
    }
    if (c->state == ST_READY && now >= c->next_reap_ms && !c->reap_inflight) {
        c->next_reap_ms = now + reap_period(c);
        send_reap(c);
    }
    if (c->state == ST_READY && c->url.wait_replicas > 0 && now >= c->next_role_ms &&
        !c->role_inflight) {
        /* As often as the heartbeat, and at once after a WAIT fell short. */
        c->next_role_ms = now + (c->lease_ms / 3 > 1 ? c->lease_ms / 3 : 1);
        const char *av[1] = {"ROLE"};
        if (send_argv(c, CONN_CTL, new_req(R_ROLE, -1), 0, 1, av, NULL) == 0)
            c->role_inflight = 1;
    }
    if (c->ack_mode == SLUICE_ACK_EXPLICIT)
        publish_hand(c);   /* if hiredis had not written all of its setup yet */
    /* Acks released while the loop was busy, if nothing else sent them. */
    pump(c);
}

static void *loop_main(void *arg)
{
    sluice_consumer *c = arg;
    session_start(c);
    event_base_dispatch(c->base);
    /* Replies still due belong to no one now. */
    c->gen++;
    mu_lock(c);
    c->hand_fd = -1;
    mu_unlock(c);
    for (int i = 0; i < NCONN; i++) {
        redisAsyncContext *ac = c->ac[i];
        c->ac[i] = NULL;
        if (ac)
            redisAsyncFree(ac);
    }
    /* The router belongs to this thread (cluster.h: not thread-safe). */
    sluicei_router_close(c->router);
    c->router = NULL;
    return NULL;
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

/* Frees what open() built; no loop thread of c (or of its children) is
 * running. A group frees its children first: they use its mutex. */
static void free_consumer(sluice_consumer *c)
{
    for (int p = 0; c->part && p < c->nparts; p++)
        if (c->part[p])
            free_consumer(c->part[p]);
    free(c->part);
    free(c->wakes);
    while (c->fifo && c->fifo_len > 0) {
        sluice_batch_free(c->fifo[c->fifo_head].b);
        c->fifo_head = (c->fifo_head + 1) % c->prefetch;
        c->fifo_len--;
    }
    if (c->wake_ev)
        event_free(c->wake_ev);
    if (c->tick_ev)
        event_free(c->tick_ev);
    if (c->retry_ev)
        event_free(c->retry_ev);
    if (c->oom_ev)
        event_free(c->oom_ev);
    if (c->notify_ev)
        event_free(c->notify_ev);
    if (c->base)
        event_base_free(c->base);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    sluicei_url_free(&c->url);
    sluicei_router_close(c->router);
    free(c->route_addr);
    dups_reset(c);
    if (c->top == c) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
    }
    free(c->fifo);
    free(c->out);
    free(c->acks);
    free(c->items);
    free(c->unconf);
    free(c->recover);
    free(c->ring);
    free(c);
}

/* Where open() reads a queue's settings: over a connection of its own to
 * the one server, or through a router (a cluster, a list of servers),
 * which follows redirections and finds the queue's node. */
typedef struct setup_link {
    sluicei_conn *sc;
    sluicei_router *r;
    int64_t deadline_ms;   /* router: when to give up a node that does not answer */
} setup_link;

static sluice_err link_command(setup_link *l, const char *q, redisReply **out, int argc,
                               const char **argv)
{
    if (l->r)
        return sluicei_router_command(l->r, q, l->deadline_ms, out, argc, argv, NULL);
    return sluicei_conn_commandargv(l->sc, out, argc, argv, NULL);
}

/* Why a call of link_command() (result e, reply r) failed. */
static void link_why(setup_link *l, const char *q, sluice_err e, const redisReply *r, char *errbuf,
                     size_t errlen)
{
    if (r && r->type == REDIS_REPLY_ERROR && l->sc &&
        (starts_with(r->str, r->len, "MOVED ") || starts_with(r->str, r->len, "ASK ")))
        snprintf(errbuf, errlen, "%s (the server is a Redis Cluster node: use a "
                 "redis+cluster:// address)", r->str);
    else if (r && r->type == REDIS_REPLY_ERROR)
        snprintf(errbuf, errlen, "%s", r->str);
    else if (l->sc)
        snprintf(errbuf, errlen, "%s", l->sc->errstr);
    else if (sluicei_router_errstr(l->r)[0])
        snprintf(errbuf, errlen, "%s", sluicei_router_errstr(l->r));
    else
        snprintf(errbuf, errlen, "redis %s: reading queue '%s': %s", sluicei_router_describe(l->r),
                 q, sluice_strerror(e));
}

static sluice_err link_script(setup_link *l, const char *q, sluicei_script_id id, int argc,
                              const char **argv, redisReply **out)
{
    if (l->r)
        return sluicei_router_script(l->r, q, l->deadline_ms, id, argc, argv, NULL, out);
    return sluicei_script_run(l->sc, id, q, argc, argv, NULL, out);
}

/* Registers c with its queue (lib.lua: enter), which open() does so that
 * a consumer id or rank held by a live consumer is an error at once. The
 * holder may be a process that died: then its lease runs out, and the
 * registration succeeds. So while the holder does not renew its lease,
 * this waits (up to the lease); once it renews, it is alive:
 * SLUICE_ERR_BUSY, naming it. */
static sluice_err register_consumer(sluice_consumer *c, setup_link *l, char *errbuf,
                                    size_t errlen)
{
    int64_t give_up = sluicei_now_ms() + c->lease_ms + 2000;
    char first_seen[32] = "";
    for (;;) {
        int64_t t0 = sluicei_now_ms();
        const char *argv[5] = {"consumer", c->id, c->tok, "1", c->rank_s};
        redisReply *r = NULL;
        sluice_err e = link_script(l, c->queue, SLUICEI_SCRIPT_BEAT, 5, argv, &r);
        if (e == SLUICE_OK && r && r->type == REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            c->registered = 1;
            c->lease_until = t0 + c->lease_ms * 3 / 4;
            return SLUICE_OK;
        }
        if (!r || r->type != REDIS_REPLY_ERROR || strncmp(r->str, "HELD ", 5) != 0) {
            if (e == SLUICE_OK)
                e = SLUICE_ERR_PROTOCOL;
            if (e == SLUICE_ERR_AUTH)
                snprintf(errbuf, errlen, "permission refused registering the consumer: %s",
                         r ? r->str : "no reply");
            else
                link_why(l, c->queue, e, r, errbuf, errlen);
            if (r)
                freeReplyObject(r);
            return e;
        }
        /* "HELD <holder> <seen_ms> <text>" */
        char holder[80] = "", seen[32] = "";
        const char *text = r->str;
        sscanf(r->str + 5, "%79s %31s", holder, seen);
        for (int k = 0; k < 3 && strchr(text, ' '); k++)
            text = strchr(text, ' ') + 1;
        int renewed = first_seen[0] && strcmp(first_seen, seen) != 0;
        if (!first_seen[0])
            snprintf(first_seen, sizeof first_seen, "%s", seen);
        if (renewed || sluicei_now_ms() >= give_up) {
            snprintf(errbuf, errlen, "queue '%s': %s%s", c->queue, text,
                     renewed ? ", and it renews its lease: one consumer per id and per rank "
                               "(is another process using them? RANK vs LOCAL_RANK?)"
                             : "");
            freeReplyObject(r);
            return SLUICE_ERR_BUSY;
        }
        freeReplyObject(r);
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Reads the queue's configuration and the job, which also proves the
 * address and credentials, and registers the consumer. o->queue is the
 * name the caller opened (c's queue, or the partitioned queue c is a
 * partition of). */
static sluice_err read_setup(sluice_consumer *c, const sluice_consumer_opts *o, setup_link *l,
                             char *errbuf, size_t errlen)
{
    const char *q = c->queue;
    int part = strcmp(q, o->queue) != 0;
    redisReply *m = NULL, *j = NULL;
    /* Batches held by consumers that died first go back to the lists now:
     * when the others have finished the job, no one else would reap them
     * for this consumer (which, seeing every list drained, would finish at
     * once). A failure here is left to the checks below. */
    sluice_err e = link_script(l, q, SLUICEI_SCRIPT_REAP, 0, NULL, &m);
    if (e == SLUICE_ERR_IO) {
        link_why(l, q, e, NULL, errbuf, errlen);
        goto out;
    }
    e = SLUICE_OK;
    if (m)
        freeReplyObject(m);
    m = NULL;
    const char *mv[6] = {"HMGET", c->k_meta, "version", "ranks", "lease_ms", "max_frame"};
    const char *jv[4] = {"HMGET", c->k_job, "epochs", "epoch_open"};
    e = link_command(l, q, &m, 6, mv);
    if (e == SLUICE_OK)
        e = link_command(l, q, &j, 4, jv);
    if (e != SLUICE_OK) {
        link_why(l, q, e, m && m->type == REDIS_REPLY_ERROR ? m : j, errbuf, errlen);
        goto out;
    }
    if (m->type != REDIS_REPLY_ARRAY || m->elements != 4 || j->type != REDIS_REPLY_ARRAY ||
        j->elements != 2) {
        snprintf(errbuf, errlen, "unexpected reply reading the queue's settings");
        e = SLUICE_ERR_PROTOCOL;
        goto out;
    }
    if (m->element[0]->type != REDIS_REPLY_STRING) {
        if (part)
            snprintf(errbuf, errlen, "queue '%s' has no partition '%s' (delete it and create it "
                     "again)", o->queue, q);
        else
            snprintf(errbuf, errlen, "queue '%s' does not exist (create it with: sluice-ctl "
                     "create %s)", q, q);
        e = SLUICE_ERR_NOQUEUE;
        goto out;
    }
    long long ranks = m->element[1]->type == REDIS_REPLY_STRING
                          ? strtoll(m->element[1]->str, NULL, 10) : 0;
    long long lease = m->element[2]->type == REDIS_REPLY_STRING
                          ? strtoll(m->element[2]->str, NULL, 10) : 0;
    if (ranks > 0 && o->world == 0) {
        snprintf(errbuf, errlen,
                 "queue '%s' is coordinated over %lld ranks: open it with world=%lld and this "
                 "consumer's rank (sluice-consume --world %lld --rank R)",
                 o->queue, ranks, ranks, ranks);
        e = SLUICE_ERR_INVALID;
        goto out;
    }
    if (o->world > 0 && ranks != o->world) {
        if (ranks == 0)
            snprintf(errbuf, errlen, "queue '%s' is not coordinated: open it without world/rank "
                     "(or create it with --consumers %d --coordinated)", o->queue, o->world);
        else
            snprintf(errbuf, errlen, "queue '%s' is coordinated over %lld ranks, not world=%d",
                     o->queue, ranks, o->world);
        e = SLUICE_ERR_INVALID;
        goto out;
    }
    c->lease_ms = lease > 0 ? lease : LEASE_DEFAULT_MS;
    c->block_ms = c->lease_ms / 4 < BLOCK_MS ? (int)(c->lease_ms / 4) : BLOCK_MS;
    if (c->block_ms < 10)
        c->block_ms = 10;
    snprintf(c->block_arg, sizeof c->block_arg, "%d.%03d", c->block_ms / 1000, c->block_ms % 1000);
    long long frame = m->element[3]->type == REDIS_REPLY_STRING
                          ? strtoll(m->element[3]->str, NULL, 10)
                          : (long long)SLUICEI_MAX_FRAME_DEFAULT;
    if (o->max_batch_bytes == 0) {
        c->max_batch_bytes = frame > 0 ? (size_t)frame : SLUICEI_MAX_FRAME_DEFAULT;
    } else if ((long long)o->max_batch_bytes < frame) {
        snprintf(errbuf, errlen, "queue '%s' admits frames of up to %lld bytes, more than this "
                 "consumer's max_batch_bytes of %zu: leave it 0 (the queue's limit) or raise it",
                 o->queue, frame, o->max_batch_bytes);
        e = SLUICE_ERR_INVALID;
        goto out;
    }
    if ((e = register_consumer(c, l, errbuf, errlen)) != SLUICE_OK)
        goto out;
    if (j->element[0]->type == REDIS_REPLY_STRING) {
        long long epochs = strtoll(j->element[0]->str, NULL, 10);
        long long open = j->element[1]->type == REDIS_REPLY_STRING
                             ? strtoll(j->element[1]->str, NULL, 10) : 0;
        if (open < 0 || open > UINT32_MAX)
            open = 0;
        /* epoch_open only says which epochs have their end posted; their
         * lists may still hold batches nobody took yet. Start at the first
         * epoch whose list holds more than its end marker. */
        long long start = 0;
        for (; start < open && start < epochs; start++) {
            char list[SLUICE_MAX_KEY + 32], marker[32];
            if (o->world > 0)
                snprintf(list, sizeof list, "sluice:{%s}:ready:%lld:%d", q, start, o->rank);
            else
                snprintf(list, sizeof list, "sluice:{%s}:ready:%lld", q, start);
            snprintf(marker, sizeof marker, "eof:%lld", start);
            redisReply *lr = NULL;
            const char *lv[4] = {"LRANGE", list, "-2", "-1"};
            sluice_err le = link_command(l, q, &lr, 4, lv);
            if (le != SLUICE_OK) {
                link_why(l, q, le, lr, errbuf, errlen);
                if (lr)
                    freeReplyObject(lr);
                e = SLUICE_ERR_IO;
                goto out;
            }
            /* The consumer end of a list is its right: "-2 -1" is what comes
             * next. Only the marker left means the epoch is drained. */
            int drained = lr->type == REDIS_REPLY_ARRAY &&
                          (lr->elements == 0 ||
                           (lr->elements == 1 && strcmp(lr->element[0]->str, marker) == 0));
            freeReplyObject(lr);
            if (!drained)
                break;
        }
        c->epoch = c->loop_epoch = (uint32_t)start;
        /* The job ended, and was drained, before this consumer came. */
        c->finished = epochs > 0 && start >= epochs;
    }
    if (l->sc)
        memcpy(c->sha, l->sc->script_sha, sizeof c->sha);
out:
    if (m)
        freeReplyObject(m);
    if (j)
        freeReplyObject(j);
    return e;
}

/* Builds a consumer of queue q (o->queue, or partition q of it) with its
 * event loop, and reads the queue's settings; the thread is not started.
 * top is the group of a partition's consumer (NULL: none). With a router,
 * the queue's node comes from it, and is found again after every failed
 * session unless the router is a single server; without, c connects to
 * o->redis_url over a connection of its own first. */
static sluice_err consumer_new(sluice_consumer **out, const sluice_consumer_opts *o, const char *q,
                               const char *id, sluicei_router *r, sluice_consumer *top,
                               char *errbuf, size_t errlen)
{
    *out = NULL;
    sluice_consumer *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    c->wake_fd = -1;
    if (top) {
        c->top = top;
    } else {
        c->top = c;
        pthread_mutex_init(&c->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&c->cv, &ca);
        pthread_condattr_destroy(&ca);
    }

    snprintf(c->queue, sizeof c->queue, "%s", q);
    snprintf(c->id, sizeof c->id, "%s", id);
    char name[SLUICE_MAX_KEY];
    sluicei_key(c->k_meta, c->queue, "meta");
    sluicei_key(c->k_frame, c->queue, "b:");
    sluicei_key(c->k_job, c->queue, "job");
    snprintf(name, sizeof name, "pending:%s", c->id);
    sluicei_key(c->k_pending, c->queue, name);
    c->world = o->world;
    c->rank = o->rank;
    if (o->world > 0)
        snprintf(c->rank_s, sizeof c->rank_s, "%d", o->rank);
    c->ack_mode = o->ack_mode;
    c->accept_partial = o->accept_partial != 0;
    c->max_batch_bytes = o->max_batch_bytes;
    c->prefetch = o->prefetch ? o->prefetch : PREFETCH_DEFAULT;
    c->low_water = c->prefetch - (c->prefetch / 2 > 1 ? c->prefetch / 2 : 1);
    c->connect_timeout_ms =
        o->connect_timeout_ms ? o->connect_timeout_ms : SLUICE_CONNECT_TIMEOUT_MS_DEFAULT;
    c->reconnect_timeout_ms = o->reconnect_timeout_ms;
    c->rng = sluicei_random64() | 1;
    snprintf(c->tok, sizeof c->tok, "%016" PRIx64, sluicei_random64());
    c->hand_fd = -1;
    c->producers_alive = -1;
    c->fifo = calloc((size_t)c->prefetch, sizeof *c->fifo);
    c->items = calloc((size_t)c->prefetch, sizeof *c->items);
    c->ring_cap = ACKED_RING;
    c->ring = calloc(c->ring_cap, sizeof *c->ring);
    if (!c->fifo || !c->items || !c->ring) {
        snprintf(errbuf, errlen, "out of memory");
        free_consumer(c);
        return SLUICE_ERR_NOMEM;
    }

    sluice_err e;
    if (r) {
        e = sluicei_router_url(r, c->queue, 0, &c->url, errbuf, errlen);
        c->cluster = sluicei_router_kind_of(r) == SLUICEI_ROUTER_CLUSTER;
        if (e == SLUICE_OK && sluicei_router_kind_of(r) != SLUICEI_ROUTER_SINGLE &&
            !(c->route_addr = strdup(o->redis_url))) {
            snprintf(errbuf, errlen, "out of memory");
            e = SLUICE_ERR_NOMEM;
        }
        if (e == SLUICE_OK) {
            setup_link l = {NULL, r, sluicei_now_ms() + c->connect_timeout_ms + REPLY_SLACK_MS};
            e = read_setup(c, o, &l, errbuf, errlen);
        }
    } else {
        e = sluicei_url_parse(o->redis_url, &c->url, errbuf, errlen);
        sluicei_conn *sc = NULL;
        if (e == SLUICE_OK)
            e = sluicei_conn_open(&sc, o->redis_url, o->connect_timeout_ms, 0, errbuf, errlen);
        if (e == SLUICE_OK) {
            setup_link l = {sc, NULL, 0};
            e = read_setup(c, o, &l, errbuf, errlen);
        }
        sluicei_conn_close(sc);
    }
    if (e != SLUICE_OK) {
        free_consumer(c);
        return e;
    }
    sluicei_url_describe(&c->url, c->addr, sizeof c->addr);

    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->base = event_base_new();
    if (c->wake_fd < 0 || !c->base) {
        snprintf(errbuf, errlen, "setting up the event loop: %s",
                 c->wake_fd < 0 ? strerror(errno) : "event_base_new failed");
        free_consumer(c);
        return SLUICE_ERR_SYS;
    }
    c->wake_ev = event_new(c->base, c->wake_fd, EV_READ | EV_PERSIST, on_wake, c);
    c->tick_ev = event_new(c->base, -1, EV_PERSIST, on_tick, c);
    c->retry_ev = evtimer_new(c->base, on_retry, c);
    c->oom_ev = evtimer_new(c->base, on_oom_timer, c);
    c->notify_ev = event_new(c->base, -1, 0, on_notify, c);
    struct timeval tick = {0, TICK_MS * 1000};
    if (!c->wake_ev || !c->tick_ev || !c->retry_ev || !c->oom_ev || !c->notify_ev ||
        event_add(c->wake_ev, NULL) != 0 || event_add(c->tick_ev, &tick) != 0) {
        snprintf(errbuf, errlen, "setting up the event loop failed");
        free_consumer(c);
        return SLUICE_ERR_SYS;
    }
    *out = c;
    return SLUICE_OK;
}

/* Starts c's loop thread. */
static sluice_err consumer_start(sluice_consumer *c, char *errbuf, size_t errlen)
{
    /* The loop thread takes no signals: the application's handlers run on
     * its own threads, and a write to a socket Redis closed gives EPIPE
     * there instead of killing the process with SIGPIPE. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->thread, NULL, loop_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(errbuf, errlen, "starting the consumer thread: %s", strerror(rc));
        return SLUICE_ERR_SYS;
    }
    c->thread_started = 1;
    return SLUICE_OK;
}

/* Stops the loop threads of cs[0..n): all are told first, then joined, so
 * that they hand their batches back at the same time. */
static void stop_loops(sluice_consumer **cs, int n)
{
    for (int i = 0; i < n; i++) {
        sluice_consumer *c = cs[i];
        if (!c || !c->thread_started)
            continue;
        mu_lock(c);
        c->closing = 1;
        int wake = wake_needed(c);
        mu_unlock(c);
        if (wake)
            wake_write(c);
    }
    for (int i = 0; i < n; i++)
        if (cs[i] && cs[i]->thread_started) {
            pthread_join(cs[i]->thread, NULL);
            cs[i]->thread_started = 0;
        }
}

/* The group of a partitioned queue of nparts partitions: one consumer per
 * partition, all with the same id and options, all started. */
static sluice_err open_group(sluice_consumer **out, const sluice_consumer_opts *o, const char *id,
                             sluicei_router *r, int nparts, char *errbuf, size_t errlen)
{
    *out = NULL;
    sluice_consumer *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    g->wake_fd = -1;
    g->hand_fd = -1;
    g->producers_alive = -1;
    g->accept_partial = o->accept_partial != 0;
    g->top = g;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(g->queue, sizeof g->queue, "%s", o->queue);
    snprintf(g->id, sizeof g->id, "%s", id);
    g->world = o->world;
    g->rank = o->rank;
    g->ack_mode = o->ack_mode;
    g->prefetch = o->prefetch ? o->prefetch : PREFETCH_DEFAULT;
    g->part = calloc((size_t)nparts, sizeof *g->part);
    g->wakes = calloc((size_t)nparts, sizeof *g->wakes);
    if (!g->part || !g->wakes) {
        free_consumer(g);
        snprintf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    g->nparts = nparts;
    sluice_err e = SLUICE_OK;
    for (int p = 0; p < nparts && e == SLUICE_OK; p++) {
        char q[SLUICE_MAX_QUEUE_NAME + 8];
        sluicei_partition_name(q, o->queue, p);
        if (strlen(q) > SLUICE_MAX_QUEUE_NAME) {
            snprintf(errbuf, errlen, "queue '%s': the name of its partition %d is longer than %d "
                     "bytes", o->queue, p, SLUICE_MAX_QUEUE_NAME);
            e = SLUICE_ERR_INVALID;
        } else {
            e = consumer_new(&g->part[p], o, q, id, r, g, errbuf, errlen);
        }
    }
    if (e != SLUICE_OK) {
        free_consumer(g);
        return e;
    }
    /* Partitions may have drained different epochs before this consumer
     * came: the group starts at the earliest, and a partition ahead of it
     * counts as having ended the epochs it skipped. */
    uint32_t lo = UINT32_MAX, hi = 0;
    int fin = 1;
    for (int p = 0; p < nparts; p++) {
        sluice_consumer *ch = g->part[p];
        lo = ch->epoch < lo ? ch->epoch : lo;
        hi = ch->epoch > hi ? ch->epoch : hi;
        fin &= ch->finished;
    }
    g->epoch = lo;
    g->finished = fin && lo == hi;
    /* Consumers of one queue start at different partitions, so that they
     * do not all drain the same one first. */
    g->home = o->world > 0 ? o->rank % nparts : (int)(id_hash(id) % (uint64_t)nparts);
    g->rr = (g->home + 1) % nparts;
    for (int p = 0; p < nparts && e == SLUICE_OK; p++)
        e = consumer_start(g->part[p], errbuf, errlen);
    if (e != SLUICE_OK) {
        stop_loops(g->part, nparts);
        free_consumer(g);
        return e;
    }
    *out = g;
    return SLUICE_OK;
}

/* Whether an address names more than one server (a cluster, a list):
 * then the queue may live anywhere, and only a router can tell. */
static int many_servers(const char *url)
{
    return strncmp(url, "redis+cluster://", 16) == 0 || strstr(url, ",redis://") ||
           strstr(url, ",unix://");
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
    if (o->world < 0 || o->world > 1000000 || (o->world > 0 && (o->rank < 0 || o->rank >= o->world)) ||
        (o->world == 0 && o->rank != 0)) {
        snprintf(errbuf, errlen, "rank %d of world %d: the rank must be 0 to world-1 (world 0: "
                 "a free consumer, rank 0)", o->rank, o->world);
        return SLUICE_ERR_INVALID;
    }
    if (o->ack_mode != SLUICE_ACK_EXPLICIT && o->ack_mode != SLUICE_ACK_NONE) {
        snprintf(errbuf, errlen, "ack_mode must be SLUICE_ACK_EXPLICIT or SLUICE_ACK_NONE");
        return SLUICE_ERR_INVALID;
    }
    char id[MAX_CONSUMER_ID + 1];
    if (o->consumer_id)
        snprintf(id, sizeof id, "%s", o->consumer_id);
    else
        snprintf(id, sizeof id, "%016" PRIx64, sluicei_random64());

    /* Messages are built here in full, whatever errlen is. */
    char msg[512] = "", noqueue[512] = "";
    sluice_consumer *c = NULL;
    if (!many_servers(o->redis_url)) {
        /* One server: a plain queue costs what it always did. */
        e = consumer_new(&c, o, o->queue, id, NULL, NULL, msg, sizeof msg);
        if (e != SLUICE_OK && e != SLUICE_ERR_NOQUEUE) {
            snprintf(errbuf, errlen, "%s", msg);
            return e;
        }
        /* No such queue: it may be a partitioned one. */
        snprintf(noqueue, sizeof noqueue, "%s", msg);
    }
    if (!c) {
        sluicei_router *r = NULL;
        int nparts = 0;
        int ct = o->connect_timeout_ms ? o->connect_timeout_ms : SLUICE_CONNECT_TIMEOUT_MS_DEFAULT;
        e = sluicei_router_open(&r, o->redis_url, ct, 0, msg, sizeof msg);
        if (e == SLUICE_OK)
            e = sluicei_queue_partitions(r, o->queue, &nparts, msg, sizeof msg);
        if (e == SLUICE_ERR_NOQUEUE) {
            if (noqueue[0])
                snprintf(msg, sizeof msg, "%s", noqueue);
            else
                snprintf(msg, sizeof msg, "queue '%s' does not exist (create it with: sluice-ctl "
                         "create %s)", o->queue, o->queue);
        } else if (e == SLUICE_OK && nparts > SLUICE_MAX_PARTITIONS) {
            snprintf(msg, sizeof msg, "queue '%s' says it has %d partitions (at most %d)",
                     o->queue, nparts, SLUICE_MAX_PARTITIONS);
            e = SLUICE_ERR_PROTOCOL;
        } else if (e == SLUICE_OK && nparts > 0) {
            e = open_group(&c, o, id, r, nparts, msg, sizeof msg);
        } else if (e == SLUICE_OK) {
            e = consumer_new(&c, o, o->queue, id, r, NULL, msg, sizeof msg);
        }
        sluicei_router_close(r);
        if (e != SLUICE_OK) {
            snprintf(errbuf, errlen, "%s", msg);
            return e;
        }
    }
    if (!c->nparts && (e = consumer_start(c, msg, sizeof msg)) != SLUICE_OK) {
        free_consumer(c);
        snprintf(errbuf, errlen, "%s", msg);
        return e;
    }
    *out = c;
    return SLUICE_OK;
}

/* Moves the head of the FIFO to the caller; mu is held. Sets *wake when
 * the loop waits for room: once the FIFO is down to its low-water mark, so
 * that one refill fetches several batches and most calls make no system
 * call at all. */
static sluice_batch *pop_batch(sluice_consumer *c, int *wake)
{
    slot *s = &c->fifo[c->fifo_head];
    sluice_batch *b = s->b;
    if (c->ack_mode == SLUICE_ACK_EXPLICIT)
        c->out[c->nout++] = *s;
    c->fifo_head = (c->fifo_head + 1) % c->prefetch;
    c->fifo_len--;
    c->st.batches++;
    c->st.records += b->nrecords;
    c->st.bytes += b->frame_bytes;
    if (b->deliveries > 1)
        c->st.redelivered++;
    if (b->padding)
        c->st.padding++;
    if (c->want_room && c->fifo_len <= c->low_water) {
        c->want_room = 0;
        *wake = wake_needed(c);
    }
    return b;
}

/* Tells Redis, on the hand connection, that the batch at the head of c's
 * FIFO goes to the application (lib.lua: handed), before next() hands it
 * out: one corked write (see the top), no reply (CLIENT REPLY OFF). mu is
 * held. Returns 0, or
 * -1 when it cannot be told now: the connection is down, or the lease may
 * have run out (a renewal is asked for); *wake is set when the loop must
 * be woken, and next() waits. Explicit acks only: an at-most-once batch
 * is acknowledged already. */
static int hand_out(sluice_consumer *c, int *wake)
{
    if (c->ack_mode != SLUICE_ACK_EXPLICIT)
        return 0;
    if (c->hand_fd < 0 || sluicei_now_ms() >= c->lease_until) {
        if (!c->want_lease) {
            c->want_lease = 1;
            *wake |= wake_needed(c);
        }
        return -1;
    }
    const char *rid = c->fifo[c->fifo_head].rid;
    size_t klen = strlen(c->k_frame) + strlen(rid);
    int n = snprintf(c->hand_cmd, sizeof c->hand_cmd,
                     "*3\r\n$9\r\nPEXPIREAT\r\n$%zu\r\n%s%s\r\n$%zu\r\n%s\r\n", klen, c->k_frame,
                     rid, strlen(SLUICEI_HANDED_AT), SLUICEI_HANDED_AT);
    ssize_t w;
    do
        w = send(c->hand_fd, c->hand_cmd, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT | MSG_MORE);
    while (w < 0 && errno == EINTR);
    c->hand_dirty = 1;
    if (w != n) {
        /* A socket Redis stopped reading (its buffer is full) or closed; a
         * partial write cut the stream. The loop starts a new session,
         * whose restore marks again what the application holds. */
        c->hand_fd = -1;
        c->hand_broken = 1;
        *wake |= wake_needed(c);
        return -1;
    }
    return 0;
}

/* release() must find room in out and acks without allocating; mu is held. */
static int reserve_out(sluice_consumer *c)
{
    return grow((void **)&c->out, &c->out_cap, c->nout + 1, sizeof *c->out) ||
           grow((void **)&c->acks, &c->ack_cap, c->nacks + c->nout + 1, sizeof *c->acks);
}

/* next() reached the end of c's epoch: the loop starts the next one; mu
 * is held. Sets *wake when the loop must be woken. */
static void end_epoch(sluice_consumer *c, int *wake)
{
    c->at_marker = 0;
    if (c->top == c) {
        c->st.epochs_ended++;   /* a group counts its own (see group_next) */
        c->report.epoch = c->epoch;
        c->report.failed_tasks = c->mk_failed;
        snprintf(c->report.failed, sizeof c->report.failed, "%s", c->mk_desc);
    }
    c->epoch++;
    if (c->marker_last)
        c->finished = 1;
    c->advance_req = 1;
    if (wake_needed(c))
        *wake = 1;
}

/* The result of next() at the end of an epoch whose report is in
 * t->report (mu held): SLUICE_ERR_PARTIAL (errstr says why) when tasks of
 * it failed and the consumer does not accept partial epochs. */
static sluice_err epoch_result(sluice_consumer *t)
{
    if (t->report.failed_tasks == 0 || t->accept_partial)
        return SLUICE_EOF;
    snprintf(t->errstr, sizeof t->errstr, "epoch %" PRIu32 " ended without the records of %" PRIu32
             " failed task%s: %.420s", t->report.epoch, t->report.failed_tasks,
             t->report.failed_tasks == 1 ? "" : "s", t->report.failed);
    return SLUICE_ERR_PARTIAL;
}

/* Copies the last dead-letter note into errstr, unless errstr says
 * something already; mu is held. */
static void take_note(sluice_consumer *c)
{
    if (c->note_seq != c->note_seen) {
        c->note_seen = c->note_seq;
        if (!c->errstr[0])
            snprintf(c->errstr, sizeof c->errstr, "%s", c->note);
    }
}

/* One look at a group (mu held): SLUICE_OK with *out set, SLUICE_EOF, a
 * child's error, or -1 when nothing is ready yet (*limit: when to look
 * again at the latest, beyond the caller's deadline; *down: a child that
 * is reconnecting). Children to wake go to g->wakes. */
static int group_look(sluice_consumer *g, sluice_batch **out, int *nwake, int64_t *limit,
                      sluice_consumer **down)
{
    int n = g->nparts;
    if (g->finished)
        return SLUICE_EOF;
    uint32_t ep = g->epoch;
    int left = 0;
    /* The home partition first, then the others in turn from rr. */
    for (int k = -1; k < n; k++) {
        int p = k < 0 ? g->home : (g->rr + k) % n;
        if (k >= 0 && p == g->home)
            continue;
        sluice_consumer *ch = g->part[p];
        if (ch->finished || ch->epoch > ep)
            continue;   /* done with ep: its next batches belong to a later epoch */
        if (ch->fifo_len > 0) {
            if (reserve_out(ch)) {
                snprintf(g->errstr, sizeof g->errstr, "out of memory");
                return SLUICE_ERR_NOMEM;
            }
            int wake = 0;
            if (hand_out(ch, &wake) != 0) {
                if (wake)
                    g->wakes[(*nwake)++] = p;
                left++;
                continue;
            }
            *out = pop_batch(ch, &wake);
            if (wake)
                g->wakes[(*nwake)++] = p;
            if (p != g->home)
                g->rr = (p + 1) % n;
            return SLUICE_OK;
        }
        if (ch->at_marker)
            continue;   /* at the end of ep: it waits (fetching nothing) for the others */
        left++;
    }
    if (left == 0) {
        /* Every partition ended epoch ep: each one at its marker goes on
         * to the next epoch only now, so none fetches a batch of ep + 1
         * before the queue's end of ep. The report adds theirs up. */
        sluice_epoch_report *rep = &g->report;
        size_t dl = 0;
        memset(rep, 0, sizeof *rep);
        rep->epoch = ep;
        for (int p = 0; p < n; p++) {
            sluice_consumer *ch = g->part[p];
            if (ch->finished || ch->epoch != ep || !ch->at_marker)
                continue;
            rep->failed_tasks += ch->mk_failed;
            if (ch->mk_failed && dl + 4 < sizeof rep->failed) {
                int k = snprintf(rep->failed + dl, sizeof rep->failed - dl, "%s%s", dl ? "; " : "",
                                 ch->mk_desc);
                dl = k < 0 || (size_t)k >= sizeof rep->failed - dl ? sizeof rep->failed - 1
                                                                  : dl + (size_t)k;
            }
            int wake = 0;
            end_epoch(ch, &wake);
            if (wake)
                g->wakes[(*nwake)++] = p;
        }
        g->epoch++;
        /* Published by the home partition's heartbeat, so that sluice-ctl,
         * which sums the partitions, counts it once. */
        g->part[g->home]->st.epochs_ended++;
        int fin = 1;
        for (int p = 0; p < n && fin; p++)
            fin = g->part[p]->finished && g->part[p]->epoch <= g->epoch;
        g->finished = fin;
        return epoch_result(g);
    }
    for (int p = 0; p < n; p++)
        if (g->part[p]->fatal != SLUICE_OK) {
            snprintf(g->errstr, sizeof g->errstr, "%s", g->part[p]->fatal_msg);
            return g->part[p]->fatal;
        }
    int64_t now = sluicei_now_ms();
    for (int p = 0; p < n; p++) {
        sluice_consumer *ch = g->part[p];
        if (ch->finished || !ch->down_since_ms)
            continue;
        if (!*down)
            *down = ch;
        if (ch->reconnect_timeout_ms > 0) {
            int64_t give_up = ch->down_since_ms + ch->reconnect_timeout_ms;
            if (now >= give_up) {
                snprintf(g->errstr, sizeof g->errstr,
                         "connection lost and not regained within %d ms: %.400s",
                         ch->reconnect_timeout_ms, ch->down_why);
                return SLUICE_ERR_IO;
            }
            if (*limit < 0 || give_up < *limit)
                *limit = give_up;
        }
    }
    return -1;
}

/* Wakes the loops of the children in g->wakes; mu is not held. */
static void group_wake(sluice_consumer *g, int nwake)
{
    for (int i = 0; i < nwake; i++)
        wake_write(g->part[g->wakes[i]]);
}

/* next() starts waiting (mu held): the wait status counts from here. */
static void wait_begin(sluice_consumer *t, uint64_t *t0)
{
    if (!*t0)
        *t0 = mono_us();
    if (!t->wait_since)
        t->wait_since = sluicei_now_ms();
}

static sluice_err group_next(sluice_consumer *g, sluice_batch **out, int timeout_ms)
{
    g->errstr[0] = '\0';
    int64_t deadline = timeout_ms < 0 ? -1 : sluicei_now_ms() + timeout_ms;
    uint64_t t0 = 0;
    sluice_err e;
    int nwake = 0;
    mu_lock(g);
    for (;;) {
        int64_t limit = deadline;
        sluice_consumer *down = NULL;
        int r = group_look(g, out, &nwake, &limit, &down);
        if (r >= 0) {
            e = (sluice_err)r;
            if (e == SLUICE_OK || e == SLUICE_EOF || e == SLUICE_ERR_PARTIAL)
                g->wait_since = 0;
            break;
        }
        if (deadline >= 0 && sluicei_now_ms() >= deadline) {
            if (down)
                snprintf(g->errstr, sizeof g->errstr, "reconnecting: %.480s", down->down_why);
            e = SLUICE_ERR_TIMEOUT;
            break;
        }
        wait_begin(g, &t0);
        /* The acks may be what a producer waits for to push more. */
        for (int p = 0; p < g->nparts; p++)
            if (g->part[p]->nacks && wake_needed(g->part[p]))
                g->wakes[nwake++] = p;
        if (nwake) {
            /* Each child is in wakes at most once: wake_needed() says yes
             * once until its loop ran. */
            mu_unlock(g);
            group_wake(g, nwake);
            nwake = 0;
            mu_lock(g);
            continue;
        }
        g->waiting++;
        if (limit < 0) {
            pthread_cond_wait(&g->cv, &g->mu);
        } else {
            struct timespec ts = {(time_t)(limit / 1000), (long)(limit % 1000) * 1000000L};
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        }
        g->waiting--;
    }
    if (t0)
        g->part[g->home]->st.blocked_us += mono_us() - t0;   /* as epochs_ended */
    take_note(g);
    mu_unlock(g);
    group_wake(g, nwake);
    return e;
}

sluice_err sluice_consumer_next(sluice_consumer *c, sluice_batch **out, int timeout_ms)
{
    if (!out)
        return SLUICE_ERR_INVALID;
    *out = NULL;
    if (!c)
        return SLUICE_ERR_INVALID;
    if (c->nparts)
        return group_next(c, out, timeout_ms);
    c->errstr[0] = '\0';
    int64_t deadline = timeout_ms < 0 ? -1 : sluicei_now_ms() + timeout_ms;
    uint64_t t0 = 0;
    sluice_err e;
    int wake = 0;
    mu_lock(c);
    if (reserve_out(c)) {
        mu_unlock(c);
        snprintf(c->errstr, sizeof c->errstr, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    for (;;) {
        if (c->fifo_len > 0 && hand_out(c, &wake) == 0) {
            *out = pop_batch(c, &wake);
            c->wait_since = 0;
            e = SLUICE_OK;
            break;
        }
        if (c->fifo_len == 0 && c->finished) {
            e = SLUICE_EOF;
            break;
        }
        if (c->fifo_len == 0 && c->at_marker) {
            end_epoch(c, &wake);
            c->wait_since = 0;
            e = epoch_result(c);
            break;
        }
        if (c->fatal != SLUICE_OK) {
            snprintf(c->errstr, sizeof c->errstr, "%s", c->fatal_msg);
            e = c->fatal;
            break;
        }
        int64_t now = sluicei_now_ms(), limit = deadline;
        if (c->down_since_ms && c->reconnect_timeout_ms > 0) {
            int64_t give_up = c->down_since_ms + c->reconnect_timeout_ms;
            if (now >= give_up) {
                snprintf(c->errstr, sizeof c->errstr,
                         "connection lost and not regained within %d ms: %.400s",
                         c->reconnect_timeout_ms, c->down_why);
                e = SLUICE_ERR_IO;
                break;
            }
            if (limit < 0 || give_up < limit)
                limit = give_up;
        }
        if (deadline >= 0 && now >= deadline) {
            if (c->down_since_ms)
                snprintf(c->errstr, sizeof c->errstr, "reconnecting: %.480s", c->down_why);
            e = SLUICE_ERR_TIMEOUT;
            break;
        }
        wait_begin(c, &t0);
        if ((c->nacks && wake_needed(c)) || wake) {
            /* The acks may be what a producer waits for to push more; a
             * renewal may be what next() waits for. */
            wake = 0;
            mu_unlock(c);
            wake_write(c);
            mu_lock(c);
            continue;
        }
        c->waiting++;
        if (limit < 0) {
            pthread_cond_wait(&c->cv, &c->mu);
        } else {
            struct timespec ts = {(time_t)(limit / 1000), (long)(limit % 1000) * 1000000L};
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        }
        c->waiting--;
    }
    if (t0)
        c->st.blocked_us += mono_us() - t0;
    take_note(c);
    mu_unlock(c);
    if (wake)
        wake_write(c);
    return e;
}

void sluice_batch_ack(sluice_batch *b)
{
    if (!b)
        return;
    sluice_consumer *c = b->consumer;
    if (c && !b->acked) {
        int wake = 0;
        mu_lock(c);
        for (size_t i = 0; i < c->nout; i++)
            if (c->out[i].b == b) {
                memcpy(c->acks[c->nacks++].s, c->out[i].rid, RID_MAX);
                c->out[i] = c->out[--c->nout];
                if (c->parked || c->nacks >= ACK_WAKE_MAX)
                    wake = wake_needed(c);
                break;
            }
        mu_unlock(c);
        if (wake)
            wake_write(c);
        b->acked = 1;
    }
}

void sluice_batch_release(sluice_batch *b)
{
    sluice_batch_ack(b);
    sluice_batch_free(b);
}

void sluice_consumer_close(sluice_consumer *c)
{
    if (!c)
        return;
    sluice_consumer **cs = c->nparts ? c->part : &c;
    int n = c->nparts ? c->nparts : 1;
    stop_loops(cs, n);
    /* Handed back by requeue (or, if Redis was out of reach, by the next
     * reap): acknowledging them later would be wrong. */
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < cs[k]->nout; i++) {
            cs[k]->out[i].b->consumer = NULL;
            cs[k]->out[i].b->acked = 1;
        }
    free_consumer(c);
}

void sluice_consumer_stats_get(const sluice_consumer *c, sluice_consumer_stats *st)
{
    if (!c || !st)
        return;
    sluice_consumer *m = (sluice_consumer *)c;   /* the mutex is not part of the value */
    mu_lock(m);
    *st = c->st;
    /* A group: the sums of its partitions (its waiting and its epochs are
     * counted in the home partition's). */
    for (int p = 0; p < c->nparts; p++) {
        const sluice_consumer_stats *s = &c->part[p]->st;
        st->blocked_us += s->blocked_us;
        st->epochs_ended += s->epochs_ended;
        st->batches += s->batches;
        st->records += s->records;
        st->bytes += s->bytes;
        st->redelivered += s->redelivered;
        st->duplicates += s->duplicates;
        st->padding += s->padding;
        st->invalid += s->invalid;
        st->reconnects += s->reconnects;
    }
    mu_unlock(m);
}

uint32_t sluice_consumer_epoch(const sluice_consumer *c)
{
    if (!c)
        return 0;
    sluice_consumer *m = (sluice_consumer *)c;
    mu_lock(m);
    uint32_t e = c->epoch;
    mu_unlock(m);
    return e;
}

int sluice_consumer_finished(const sluice_consumer *c)
{
    if (!c)
        return 0;
    sluice_consumer *m = (sluice_consumer *)c;
    mu_lock(m);
    int f = c->finished;
    mu_unlock(m);
    return f;
}

const char *sluice_consumer_errstr(const sluice_consumer *c)
{
    return c ? c->errstr : "";
}

void sluice_consumer_epoch_report(const sluice_consumer *c, sluice_epoch_report *r)
{
    if (!r)
        return;
    memset(r, 0, sizeof *r);
    if (!c)
        return;
    sluice_consumer *m = (sluice_consumer *)c;   /* the mutex is not part of the value */
    mu_lock(m);
    *r = c->report;
    mu_unlock(m);
}

int64_t sluice_consumer_wait_status(const sluice_consumer *c, char *buf, size_t len)
{
    if (buf && len)
        buf[0] = '\0';
    if (!c)
        return 0;
    sluice_consumer *m = (sluice_consumer *)c;
    sluice_consumer *const *cs = c->nparts ? c->part : &m;
    int n = c->nparts ? c->nparts : 1;
    char why[600] = "";
    mu_lock(m);
    int64_t since = c->wait_since;
    const sluice_consumer *fatal = NULL, *down = NULL;
    const char *state = NULL;
    int alive = -1, renewing = 0, recovering = 0;
    for (int k = 0; k < n; k++) {
        const sluice_consumer *ch = cs[k];
        recovering |= ch->recovering;
        if (ch->fatal != SLUICE_OK && !fatal)
            fatal = ch;
        if (ch->down_since_ms && !ch->finished && !down)
            down = ch;
        renewing |= ch->want_lease;
        if (ch->producers_alive > alive)
            alive = ch->producers_alive;
        if (!state || strcmp(ch->job_state, "running") == 0)
            state = ch->job_state;
    }
    if (!since)
        ;
    else if (fatal)
        snprintf(why, sizeof why, "%s", fatal->fatal_msg);
    else if (down)
        snprintf(why, sizeof why, "reconnecting: %.500s", down->down_why);
    else if (renewing)
        snprintf(why, sizeof why, "renewing the consumer's lease in queue '%s'", c->queue);
    else if (recovering)
        snprintf(why, sizeof why, "Redis restarted: queue '%s' waits for the consumers it knew to "
                 "restore what they did in its last seconds (at most the lease + 2.5 s)",
                 c->queue);
    else if (alive < 0)
        snprintf(why, sizeof why, "waiting for batches of queue '%s'", c->queue);
    else if (strcmp(state, "none") == 0 && alive == 0)
        snprintf(why, sizeof why, "queue '%s' has no job (sluice-ctl submit) and no producer is "
                 "alive", c->queue);
    else if (strcmp(state, "none") == 0)
        snprintf(why, sizeof why, "queue '%s' has no job; %d producer%s alive push into it",
                 c->queue, alive, alive == 1 ? " is" : "s are");
    else if (strcmp(state, "finished") == 0)
        snprintf(why, sizeof why, "the job of queue '%s' is finished; its end comes once every "
                 "batch is acknowledged (other consumers still hold some)", c->queue);
    else if (alive == 0)
        snprintf(why, sizeof why, "no producer of queue '%s' is alive (start sluice-producer "
                 "--queue %s)", c->queue, c->queue);
    else
        snprintf(why, sizeof why, "waiting for the producers of queue '%s' (%d alive)", c->queue,
                 alive);
    mu_unlock(m);
    if (buf && len)
        snprintf(buf, len, "%s", why);
    return since ? sluicei_now_ms() - since : 0;
}

const char *sluice_consumer_id(const sluice_consumer *c)
{
    return c ? c->id : "";
}
