/* sluice — the producer API (libsluice); sluice-producer is built on it.
 *
 *     sluice_producer_opts o = { .redis_url = url, .queue = "train" };
 *     sluice_producer *p;
 *     sluice_producer_open(&p, &o, err, sizeof err);
 *     sluice_record recs[32] = ...;
 *     sluice_producer_push_records(p, recs, 32);   // waits while the queue is full
 *     sluice_producer_flush(p);                      // every push stored in Redis
 *     sluice_producer_close(p);
 *
 * Backpressure: a queue has a batch budget and a byte budget, enforced
 * atomically in Redis. A push that would exceed either waits, without
 * polling, until a consumer acknowledges a batch (or stop is raised). A
 * Redis out-of-memory refusal is treated the same way. Nothing is dropped.
 *
 * Compression: on a queue created with compression (sluice-ctl create
 * --compress lz4|zstd[:LEVEL]; meta field compress, read at open) every
 * frame is compressed, and stored compressed only when that is smaller.
 * The queue's frame limit applies to the frame before compression, so a
 * batch fits the same queue with or without it. A setting this library
 * does not know makes open() fail with SLUICE_ERR_INVALID.
 *
 * Batch ids: every batch gets (epoch, task, seq). The producer uses the
 * epoch and task set with sluice_producer_set_task() (by default epoch 0 and
 * a random task number of this producer) and numbers batches 0, 1, 2...
 * within it. Pushing an id that is queued or was acknowledged already is a
 * no-op, so a task produced again yields no duplicates.
 *
 * Partitioned queues (sluice-ctl create Q --partitions P): the producer
 * opens one connection per partition, each to the server or cluster node
 * that serves it. Every batch of a task goes to that task's partition (so
 * that duplicates are dropped there): task t of sluice_producer_set_task()
 * to partition t mod P (as sluice-ctl submit deals a job's shards), the
 * producer's own ad-hoc tasks to the partitions in turn, starting at its
 * home partition, hash(id) mod P. The budgets are those of each
 * partition. In a Redis Cluster the producer follows a partition that moves
 * (failover, slot migration) by reconnecting, and retries meanwhile; that
 * is an error only after reconnect_timeout_ms.
 *
 * Thread-safety: one thread at a time per producer. */
#ifndef SLUICE_PRODUCER_H
#define SLUICE_PRODUCER_H

#include <sluice/batch.h>
#include <sluice/common.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sluice_producer sluice_producer;

typedef struct sluice_producer_opts {
    const char *redis_url;      /* as for the consumer: one server, a list of servers
                                   "redis://a:1,redis://b:2", or a cluster
                                   "redis+cluster://host:port,..." */
    const char *queue;          /* an existing queue */
    const char *producer_id;    /* NULL: "<hostname>-<pid>-<random>" (at most 64 bytes) */
    int max_inflight;           /* pushes pipelined before waiting for replies; 0: up to
                                   1024, their frames held to a window of bytes that
                                   starts at 1 MiB and doubles, up to 32 MiB, whenever
                                   the replies are slower than sending it: so it covers
                                   the round-trip time of the link */
    int connect_timeout_ms;     /* 0: SLUICE_CONNECT_TIMEOUT_MS_DEFAULT */
    int reconnect_timeout_ms;   /* give up a lost connection after this long; 0: forever */
    volatile int *stop;         /* optional: when *stop != 0, waits end with SLUICE_ERR_IO */
    /* Optional: called (on the calling thread, inside a push or claim) with
     * one line when a wait lasts: after 5 s, and every 30 s while it lasts,
     * for room in a queue at its budget ("queue 'train' is at its budget
     * (it holds 64 of 64 batches...): ... waited 5 s for consumers to
     * acknowledge batches") and for a task that others hold. */
    void (*log)(void *arg, const char *msg);
    void *log_arg;
} sluice_producer_opts;

/* Connects and checks that the queue exists (a partitioned queue: connects
 * to every partition). On SLUICE_OK *out is a new producer owned by the
 * caller; on failure *out is NULL and errbuf (if not NULL) receives the
 * reason. */
SLUICE_EXPORT sluice_err sluice_producer_open(sluice_producer **out, const sluice_producer_opts *o,
                                char *errbuf, size_t errlen);

/* Starts numbering batches of (epoch, task) from seq 0. Flushes first. On
 * a partitioned queue the task's batches go to partition task mod P. */
SLUICE_EXPORT sluice_err sluice_producer_set_task(sluice_producer *p, uint32_t epoch, uint64_t task);

/* Packs n records into one batch and pushes it. The records are copied
 * into the frame before the call returns; the caller keeps ownership. May
 * return before Redis stored the batch (pipelining, and grouping of small
 * batches into one request): sluice_producer_flush() waits for that, so
 * call it before pausing, or a batch may wait in the producer until the
 * next push. Waits while the queue is at its budget.
 *
 * On a partitioned queue, with a task held (sluice_producer_task_claim):
 * when the task's partition stays at its budget while another partition
 * has room and waiting tasks, returns SLUICE_ERR_FULL instead of waiting
 * (errstr says so). The task's batches not stored yet are dropped; call
 * sluice_producer_task_release(), which hands the task back with its
 * resume point, and claim the next task (the claim prefers partitions with
 * room). Until then every push returns SLUICE_ERR_FULL. Without another
 * partition with room it waits, as for a plain queue. */
SLUICE_EXPORT sluice_err sluice_producer_push_records(sluice_producer *p, const sluice_record *recs, size_t n);

/* Same, for a batch of nt tensors of n rows each (shape[0] == n). A batch
 * holds at most 2^20 records or rows: more is SLUICE_ERR_TOOBIG. */
SLUICE_EXPORT sluice_err sluice_producer_push_tensors(sluice_producer *p, uint64_t n, const sluice_tensor *t,
                                        size_t nt);

/* Waits until every push so far is stored in Redis (or dropped as a
 * duplicate). May return SLUICE_ERR_FULL as a push does. */
SLUICE_EXPORT sluice_err sluice_producer_flush(sluice_producer *p);

/* Flushes (best effort), disconnects and frees p. NULL is a no-op. */
SLUICE_EXPORT void sluice_producer_close(sluice_producer *p);

/* ---- Jobs: tasks claimed under a lease ----------------------------------
 *
 * A job (sluice-ctl submit) is a list of tasks, one per shard of the
 * manifest and epoch. A producer claims a task, pushes its batches (their
 * ids are (epoch, shard, 0..)), and marks it done. While it holds a task,
 * every push and every wait renews the task's lease; a producer that stops
 * renewing (killed) loses the task to whoever reaps it after lease_ms, and
 * another producer does it again — the same ids, so no batch is doubled.
 * That takes batches that are the same every time: a task's batch seq k
 * must always hold the same records.
 *
 * The job's record order and remainder, which the producer applies (as
 * sluice-producer does; docs/JOBS.md):
 *
 * - shuffle_buffer N > 0: the task's records are shuffled within windows
 *   of N: window w is records [start + w*N, start + (w+1)*N) of the task
 *   (the last one may be shorter), each permuted by a Fisher-Yates shuffle
 *   whose generator is seeded from (shuffle_seed, epoch, shard, w)
 *   (docs/PROTOCOL.md, "Record shuffle", gives it exactly), and batches of
 *   batch_size are cut from the windows one after another. 0: file order.
 * - drop_remainder 1: a task's last batch, when short, is not pushed. Set
 *   dropped_records to the number of records so left out before
 *   sluice_producer_task_done(), which adds it to the epoch's count once
 *   (a task done again counts nothing more). */
typedef struct sluice_task {
    uint32_t epoch;
    uint64_t shard;           /* the manifest entry: also the task number in batch ids */
    const char *reader;       /* reader name from the manifest ("tfrecord", "idx", ...) */
    const char *const *paths; /* npaths input paths */
    size_t npaths;
    uint64_t start, end;      /* record range [start, end); end == UINT64_MAX: to the end */
    uint32_t batch_size;      /* records per batch, from the job */
    uint32_t epochs;          /* epochs of the job */
    int attempt;              /* 1 on the first try */
    /* Fields added after the ones above; the library allocates the struct,
     * so reading them needs no other change. */
    uint32_t shuffle_buffer;  /* records per shuffle window; 0: no shuffle (at most
                                 SLUICE_SHUFFLE_BUFFER_MAX) */
    int drop_remainder;       /* 1: the short last batch is not pushed */
    uint64_t shuffle_seed;    /* the job's --shuffle-seed; 0 when it has none */
    uint64_t dropped_records; /* set by the caller before task_done: records of the
                                 task not pushed (drop_remainder); 0 on claim */
} sluice_task;

/* The largest shuffle window a job may have, in records (sluice-ctl submit
 * --shuffle-buffer). A task claimed with a larger one fails at once. */
#define SLUICE_SHUFFLE_BUFFER_MAX 1048576

/* Claims the next task of the queue's job, waiting up to timeout_ms (< 0:
 * until one comes or the job ends) while other producers hold the
 * remaining ones. On SLUICE_OK *out is the task, owned by p until
 * sluice_producer_task_done/_fail/_release; the producer's batch ids now
 * count within it (as sluice_producer_set_task(epoch, shard)). SLUICE_EOF:
 * the job is finished (or there is no job). SLUICE_ERR_TIMEOUT: no task
 * free yet. lease_ms 0 means SLUICE_LEASE_MS_DEFAULT (10000).
 *
 * A task handed back with a resume point (sluice_producer_task_release)
 * comes with it: its pushes below that seq are stored already, so they
 * return SLUICE_OK at once without encoding or sending anything (produce
 * the task from its start as always; only the tail is pushed).
 *
 * A partitioned queue: tries the partitions from the producer's home
 * partition on, first those below their budget, then any; waits while
 * every partition's remaining tasks are held by others; SLUICE_EOF once
 * every partition's job is finished. */
SLUICE_EXPORT sluice_err sluice_producer_task_claim(sluice_producer *p, sluice_task **out, int timeout_ms,
                                      int lease_ms);
/* Flushes every push of the task, then marks it done (and adds
 * t->dropped_records to its epoch's dropped records). Frees t. Returns
 * SLUICE_ERR_IO with errstr "lease lost" when the task was reaped
 * meanwhile (someone else redoes it; nothing is lost). SLUICE_ERR_FULL:
 * the task was handed back with its resume point instead; claim the next.
 * That happens on a partitioned queue when the last pushes found the
 * partition at its budget while another had room (see the pushes), and
 * when the connection was lost while the task was held and Redis turns
 * out to have come back without some of its pushes (its last writes lost:
 * before marking a task done after a reconnect, the producer checks that
 * every batch it pushed is there; errstr names the first missing), and
 * when *opts.stop was raised while its last batches waited (for room):
 * handed back untried. */
SLUICE_EXPORT sluice_err sluice_producer_task_done(sluice_producer *p, sluice_task *t);
/* The task failed: error (one line) is kept; it is retried, or after the
 * job's max attempts recorded as failed. Frees t. */
SLUICE_EXPORT sluice_err sluice_producer_task_fail(sluice_producer *p, sluice_task *t, const char *error);
/* Hands the task back untried (shutting down, or after SLUICE_ERR_FULL): it
 * is not counted as an attempt. Its resume point goes with it: the first
 * of its batches not known to be stored (whoever claims it again skips
 * those before). Frees t. */
SLUICE_EXPORT sluice_err sluice_producer_task_release(sluice_producer *p, sluice_task *t);

typedef struct sluice_producer_stats {
    uint64_t batches;         /* stored in Redis */
    uint64_t records;
    uint64_t bytes;           /* frame bytes stored (compressed, on a queue with compression) */
    uint64_t duplicates;      /* pushes dropped by Redis as already present */
    uint64_t full_waits;      /* times a push waited for room */
    uint64_t blocked_us;      /* time spent waiting for room */
    uint64_t reconnects;
    uint64_t tasks_done;
    uint64_t tasks_failed;
    uint64_t raw_bytes;       /* the same frames before compression (= bytes without it) */
} sluice_producer_stats;

/* The counters since open; a partitioned queue: summed over its partitions. */
SLUICE_EXPORT void sluice_producer_stats_get(const sluice_producer *p, sluice_producer_stats *st);

/* Detail of the last failure on p (owned by p); "" when none. */
SLUICE_EXPORT const char *sluice_producer_errstr(const sluice_producer *p);

/* This producer's id (owned by p). */
SLUICE_EXPORT const char *sluice_producer_id(const sluice_producer *p);

#ifdef __cplusplus
}
#endif
#endif
