/* sluice — the consumer library a trainer links (libsluice).
 *
 *     sluice_consumer_opts o = { .redis_url = "redis://localhost:6379", .queue = "train" };
 *     sluice_consumer *c;
 *     char err[256];
 *     if (sluice_consumer_open(&c, &o, err, sizeof err) != SLUICE_OK) { ... }
 *     for (;;) {
 *         sluice_batch *b;
 *         sluice_err e = sluice_consumer_next(c, &b, -1);
 *         if (e == SLUICE_EOF && sluice_consumer_finished(c))
 *             break;                        // the job is done
 *         if (e == SLUICE_EOF)
 *             continue;                     // end of an epoch: the next one starts
 *         if (e != SLUICE_OK) { ... sluice_consumer_errstr(c) ... }
 *         for (size_t i = 0; i < sluice_batch_num_records(b); i++)
 *             use(sluice_batch_record(b, i));
 *         sluice_batch_release(b);          // acknowledges the batch
 *     }
 *     sluice_consumer_close(c);
 *
 * Delivery: a batch that next() returns is held in this consumer's pending
 * list in Redis until sluice_batch_release() acknowledges it; if the process
 * dies first, the batch stays there (it is not lost): once the consumer's
 * lease (the queue's lease_ms, on the Redis server's clock) runs out, any
 * other consumer hands it back to the queue and it is delivered again, with
 * sluice_batch_deliveries() above 1. Before next() returns a batch, Redis
 * has been told that the application received it (one write, no round
 * trip): so a batch that was only prefetched goes back uncounted and
 * unflagged, and only batches an application received count toward the
 * queue's max_deliveries. Closing the consumer hands every batch it still
 * holds back to the queue at once.
 *
 * Leases: the consumer renews its lease with every heartbeat and take. If
 * it was silent for longer than the lease (the process was frozen, or
 * starved of CPU), the batches it held went back to the queue: it then
 * drops what it had prefetched instead of handing it out, and next() hands
 * out a prefetched batch only while the lease is known to run. A batch
 * the application still held comes back to whichever consumer takes it,
 * flagged; this one's later release() changes nothing in Redis. A consumer
 * never acknowledges a batch its application has not released.
 *
 * One consumer per id and per rank: open() refuses a consumer id, or a
 * coordinated rank, that a live consumer holds (SLUICE_ERR_BUSY, naming
 * it); a holder that died is waited for until its lease runs out.
 *
 * Prefetch: each consumer runs a background thread with its own event loop
 * and its Redis connections. It keeps batches ready ahead of next(), up
 * to `prefetch` batches and a window of bytes that grows to what the
 * link's round-trip time needs (prefetch_bytes), so next() returns in
 * about a microsecond when the pipeline keeps up; it heartbeats the lease (every lease_ms/3, with the counters of
 * sluice_consumer_stats, which `sluice-ctl` shows), reaps the batches of
 * dead consumers (every lease_ms/2), and reconnects with backoff after a
 * lost connection. Memory: at most prefetch batches and about
 * prefetch_bytes ahead, plus those the caller holds; a batch's records point into the frame received from Redis
 * (no copy).
 *
 * Partitioned queues (sluice-ctl create Q --partitions P): the consumer of
 * Q is a group of P consumers, one per partition "Q#p", each with its own
 * thread and connections to the Redis node that serves its partition, all
 * under the same consumer id. next() takes from the consumer's home
 * partition first (a coordinated rank's: rank mod P; a free consumer's:
 * a hash of its id mod P) and from the others in turn when it has nothing
 * ready. Each partition prefetches on its own: memory is bounded by
 * P x prefetch batches and prefetch_bytes in all ahead. Stats are the sums over the partitions;
 * blocked_us is the time next() waited and epochs_ended counts the queue's
 * epochs, each once.
 *
 * Redis Cluster: with a redis+cluster:// address (or a list of servers,
 * redis://a:1,redis://b:2) each partition's consumer finds the node of its
 * partition, and finds it again whenever a session fails, so a failover
 * or a migrated slot is followed by reconnecting; redirections (MOVED,
 * ASK, TRYAGAIN, CLUSTERDOWN...) are handled that way, never as errors.
 * When the node has replicas (or the address says ?wait=N), the take of
 * every batch is followed by WAIT (for at most as many replicas as are
 * connected), so a batch is handed out only once its take reached a
 * replica (or a second passed).
 *
 * Thread-safety: next() is called by one thread at a time.
 * sluice_batch_release(), sluice_consumer_stats_get(), _epoch(), _finished(),
 * _epoch_report(), _wait_status() and _id() may be called from any thread,
 * also while another thread waits in next(). errstr() belongs to the thread that called next(). close() must
 * not run concurrently with any other call on the consumer or on its
 * batches. Different consumers are independent. The library's thread blocks
 * every signal (so SIGPIPE from a socket Redis closed never reaches it). */
#ifndef SLUICE_CONSUMER_H
#define SLUICE_CONSUMER_H

#include <sluice/batch.h>
#include <sluice/common.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sluice_consumer sluice_consumer;

/* How a consumer acknowledges. */
typedef enum sluice_ack_mode {
    /* Default, at-least-once: a batch is held under this consumer's lease
     * until sluice_batch_release(); if the consumer dies, it goes to
     * another consumer once the lease expires. */
    SLUICE_ACK_EXPLICIT = 0,
    /* At-most-once: a batch is acknowledged in Redis as the background
     * thread fetches it (the ack rides in the same round trip as the
     * fetch), so no batch is ever delivered twice and release() only frees
     * memory. The price: a consumer that dies loses every batch it holds,
     * and close() discards the prefetched batches next() has not returned
     * yet (up to prefetch); use prefetch 1 to keep that small. */
    SLUICE_ACK_NONE = 1,
} sluice_ack_mode;

typedef struct sluice_consumer_opts {
    const char *redis_url;    /* redis://[user[:pass]@]host[:port][/db], unix:///path[?db=N],
                                 redis+cluster://[user[:pass]@]host:port[,host:port...]
                                 or a list redis://a:1,redis://b:2; rediss:// and
                                 rediss+cluster:// over TLS (SLUICE_TLS_* in the
                                 environment: docs/DEPLOY.md) */
    const char *queue;        /* an existing queue (sluice-ctl create) */
    size_t max_batch_bytes;   /* 0: the queue's frame limit (sluice-ctl create
                                 --max-frame-bytes), which no producer exceeds; a value
                                 below it is refused by open() */
    int prefetch;             /* at most this many batches held ahead of next() (decoded, or
                                 on their way); 0: 1024 (see prefetch_bytes) */
    int connect_timeout_ms;   /* 0: SLUICE_CONNECT_TIMEOUT_MS_DEFAULT */
    int reconnect_timeout_ms; /* give up a lost connection after this long; 0: wait forever */
    const char *consumer_id;  /* NULL: a random id */
    int world;                /* coordinated queues: the number of ranks N (must match
                                 the queue); 0: a free consumer of a free queue */
    int rank;                 /* coordinated queues: this consumer's rank, 0..N-1 */
    sluice_ack_mode ack_mode; /* SLUICE_ACK_EXPLICIT (default) or SLUICE_ACK_NONE */
    int accept_partial;       /* 1: the end of an epoch that lost records to failed tasks is
                                 SLUICE_EOF like any other; 0: SLUICE_ERR_PARTIAL */
    int checkpoint_keep;      /* > 0: checkpoints on (sluice_consumer_checkpoint()), keeping the
                                 last checkpoint_keep (at most SLUICE_CHECKPOINT_KEEP_MAX);
                                 0: off, unless resume is given (then
                                 SLUICE_CHECKPOINT_KEEP_DEFAULT) */
    const char *resume;       /* NULL, or a token of sluice_consumer_checkpoint(): the consumer
                                 resumes from that checkpoint (see below) */
    size_t prefetch_bytes;    /* at most about this many frame bytes held ahead of next();
                                 0: 64 MiB. The window starts at 1 MiB and doubles whenever
                                 next() waited for a take it had cut short, so it grows to
                                 the bandwidth-delay product of the link and no further; a
                                 partitioned queue's partitions share it (at least 4 MiB
                                 each when 0). A take is sized by the last batch's size: a
                                 batch far larger than those before may exceed it once. */
} sluice_consumer_opts;

#define SLUICE_CHECKPOINT_KEEP_DEFAULT 2
#define SLUICE_CHECKPOINT_KEEP_MAX 1000
/* Room for a checkpoint token, its NUL included. */
#define SLUICE_CHECKPOINT_TOKEN_MAX 320

/* Connects, checks that the queue exists and matches world (a coordinated
 * queue of N ranks needs world == N and 0 <= rank < N; a free queue needs
 * world 0), reads the job (the consumer starts at its first open epoch,
 * epoch 0 without a job) and starts the background thread (one per
 * partition of a partitioned queue, which every call below treats as one
 * consumer). On SLUICE_OK *out is a new consumer owned by the caller
 * (sluice_consumer_close()). On failure *out is NULL; when errbuf is not
 * NULL it receives the reason (errlen bytes, NUL-terminated):
 * SLUICE_ERR_INVALID for bad options or a world/rank that does not fit the
 * queue, SLUICE_ERR_BUSY when a live consumer holds the consumer id or the
 * rank (open() waits up to the queue's lease for a holder that stopped
 * renewing: a process that died), SLUICE_ERR_NOQUEUE, SLUICE_ERR_IO when
 * Redis does not answer within connect_timeout_ms (open() connects once,
 * so that a wrong address is an error, not a wait: a process started while
 * Redis is down or restarting must open again; only an open consumer
 * reconnects), SLUICE_ERR_AUTH... With o->resume, open() first gives back
 * what was acknowledged after the checkpoint (sluice_consumer_checkpoint());
 * a token that is malformed, of another queue or job, or of a checkpoint
 * no longer kept is SLUICE_ERR_INVALID, naming what is kept. o is not kept
 * after the call.
 * Thread-safe. */
SLUICE_EXPORT sluice_err sluice_consumer_open(sluice_consumer **out, const sluice_consumer_opts *o,
                                char *errbuf, size_t errlen);

/* Tells how queue `queue` at redis_url is consumed, without opening a
 * consumer: *ranks receives N for a coordinated queue of N ranks
 * (sluice-ctl create Q --consumers N --coordinated), whose consumers open
 * with world N, and 0 for a free queue (world 0). For a program that
 * learns its rank and world from its environment (torchrun's RANK and
 * WORLD_SIZE) and must know whether they apply to the queue. Reads the
 * queue's settings over a connection of its own (the addresses of
 * sluice_consumer_opts.redis_url; a consumer's credentials suffice),
 * closed before it returns; connect_timeout_ms 0 is
 * SLUICE_CONNECT_TIMEOUT_MS_DEFAULT. On failure *ranks is 0 and errbuf,
 * when not NULL, receives the reason: SLUICE_ERR_NOQUEUE,
 * SLUICE_ERR_INVALID (a bad address or queue name), SLUICE_ERR_IO,
 * SLUICE_ERR_AUTH, SLUICE_ERR_PROTOCOL (settings that are not sluice's).
 * Thread-safe. */
SLUICE_EXPORT sluice_err sluice_queue_ranks(const char *redis_url, const char *queue,
                                            int connect_timeout_ms, int *ranks, char *errbuf,
                                            size_t errlen);

/* Waits up to timeout_ms (< 0: forever, 0: no wait) for the next batch.
 *
 * Epochs: the batches of a job come epoch by epoch. When every batch of the
 * consumer's current epoch has been taken, next() returns SLUICE_EOF once;
 * the following call starts the next epoch (sluice_consumer_epoch() tells
 * which). No batch of epoch e+1 is returned before the SLUICE_EOF of e, and
 * the SLUICE_EOF comes within a round trip of the end of e being posted.
 * After the last epoch of the job, next() returns SLUICE_EOF for good and
 * sluice_consumer_finished() returns 1 (already right after the SLUICE_EOF
 * of the last epoch). The end of an epoch that lost records, because tasks
 * of it failed (their reader, --exec command or plugin kept failing, or
 * their producers kept dying), is SLUICE_ERR_PARTIAL instead of SLUICE_EOF
 * (unless opts.accept_partial): the epoch is over all the same, and errstr
 * and sluice_consumer_epoch_report() say how many tasks failed and which. A queue fed without a job has a single epoch 0 that
 * never ends. In a coordinated queue every rank gets the same number of
 * batches per epoch; with the remainder policy "pad" some are padding
 * copies (sluice_batch_is_padding()). In a partitioned queue an epoch ends
 * when it ended in every partition: a partition whose end of the epoch was
 * reached is not read again until then, so the rule above holds for the
 * whole queue; a coordinated rank gets the same number of batches from
 * each partition as every other rank.
 *
 * On SLUICE_OK *out belongs to the caller until sluice_batch_release(); its
 * records and tensors point into the batch and are valid until then. On any
 * other result *out is NULL: SLUICE_ERR_TIMEOUT when nothing arrived in
 * time (errstr then says "reconnecting: ..." if Redis is out of reach;
 * sluice_consumer_wait_status() says what it waits for);
 * SLUICE_ERR_IO when the connection was lost and not regained within
 * reconnect_timeout_ms (again on every call until it is regained; the
 * library keeps trying); SLUICE_ERR_NOQUEUE when the queue was deleted;
 * SLUICE_ERR_AUTH when Redis refused the credentials on a reconnect. A lost
 * connection is otherwise regained transparently: the blocking read is
 * issued again, unconfirmed acks are sent again and batches whose reply was
 * lost are fetched again, so no batch is lost. A frame that fails
 * validation is moved to the queue's dead-letter list with the reason,
 * counted (stats.invalid) and described in errstr; next() goes on with the
 * following batch. A batch this consumer already returned in the current
 * epoch (a duplicate after a lease ran out) is dropped (stats.duplicates):
 * acknowledged when the application released it already, else left for the
 * release of the copy the application holds. SLUICE_ERR_AUTH also when the
 * credentials lack a permission the protocol needs (errstr names the
 * step refused, e.g. ack, and quotes Redis's reply, which names the command
 * only when it was not run inside a script);
 * SLUICE_ERR_BUSY when another process took over this consumer's id. */
SLUICE_EXPORT sluice_err sluice_consumer_next(sluice_consumer *c, sluice_batch **out, int timeout_ms);

/* Acknowledges b and frees it: after the call b is no longer valid, nor is
 * anything its accessors returned. The acknowledgement is queued for the
 * background thread, which sends it within 10 ms, with those released
 * meanwhile in one call (at once when 64 wait or nothing prefetched is
 * left for next(), and at close); release() itself makes no system call
 * while batches flow. A batch of an at-most-once consumer, or one whose
 * consumer was closed, is only freed. NULL is a no-op. */
SLUICE_EXPORT void sluice_batch_release(sluice_batch *b);

/* Acknowledges b now but keeps it: b and what its accessors returned stay
 * valid until sluice_batch_release(), which then only frees. For bindings
 * whose views of a batch may outlive the point where the application is
 * done with it (Python's numpy arrays). NULL, or a second call, is a
 * no-op. Same thread rules as release(). */
SLUICE_EXPORT void sluice_batch_ack(sluice_batch *b);

/* Stops the background thread after it sent the queued acks and handed
 * back every batch this consumer holds but has not acknowledged: the
 * prefetched ones (their delivery is not counted) and the ones the caller
 * still has (they stay valid memory, but their later release() only frees
 * them). They are back in the queue at once, not after a lease timeout.
 * When Redis cannot be reached for about 3 s, close() gives up and the
 * batches come back once the lease runs out. Then disconnects and frees c.
 * NULL is a no-op. */
SLUICE_EXPORT void sluice_consumer_close(sluice_consumer *c);

typedef struct sluice_consumer_stats {
    uint64_t batches;          /* returned by next() */
    uint64_t records;
    uint64_t bytes;            /* frame bytes returned by next() */
    uint64_t redelivered;      /* batches whose delivery count was > 1 */
    uint64_t duplicates;       /* batches dropped because this consumer had them already */
    uint64_t padding;          /* padding batches returned (coordinated, remainder pad) */
    uint64_t invalid;          /* frames that failed validation (sent to the dead letters) */
    uint64_t reconnects;
    uint64_t blocked_us;       /* time spent waiting inside next() */
    uint64_t epochs_ended;     /* SLUICE_EOF results for ended epochs */
} sluice_consumer_stats;

/* Copies the consumer's counters into *st. Thread-safe. */
SLUICE_EXPORT void sluice_consumer_stats_get(const sluice_consumer *c, sluice_consumer_stats *st);

/* The epoch the next batch comes from (the one in progress): the job's
 * first open epoch at open, one more after each SLUICE_EOF (so the job's
 * number of epochs once it is finished). Thread-safe. */
SLUICE_EXPORT uint32_t sluice_consumer_epoch(const sluice_consumer *c);

/* 1 once next() returned the SLUICE_EOF of the job's last epoch (or the
 * job had ended before the consumer opened): next() then returns
 * SLUICE_EOF for good; else 0. Thread-safe. */
SLUICE_EXPORT int sluice_consumer_finished(const sluice_consumer *c);

/* What the end of an epoch said: its number, and the tasks of it that
 * failed (their records never came). */
typedef struct sluice_epoch_report {
    uint32_t epoch;           /* the epoch that ended */
    uint32_t failed_tasks;    /* its tasks recorded as failed */
    char failed[512];         /* which: "epoch:shard (error)", joined by "; ",
                                 cut with "..." when longer; "" when none */
} sluice_epoch_report;

/* Fills *r with the report of the last epoch whose end next() returned
 * (SLUICE_EOF or SLUICE_ERR_PARTIAL); all zero before the first.
 * Thread-safe. */
SLUICE_EXPORT void sluice_consumer_epoch_report(const sluice_consumer *c, sluice_epoch_report *r);

/* What a consumer waiting for batches waits for, to tell its user: writes
 * one line to buf ("no producer of queue 'train' is alive", "the queue has
 * no job", "reconnecting: ...", "the producers are working (3 alive)") and
 * returns how long next() has been waiting without a batch, in ms; 0 and
 * "" while batches come. Thread-safe. */
SLUICE_EXPORT int64_t sluice_consumer_wait_status(const sluice_consumer *c, char *buf, size_t len);

/* The detail of the last failure of next() on c, or of the last frame it
 * sent to the dead letters (one line, owned by c, valid until the next call
 * of next()); "" when none. */
SLUICE_EXPORT const char *sluice_consumer_errstr(const sluice_consumer *c);

/* The id this consumer registered under in Redis (owned by c). */
SLUICE_EXPORT const char *sluice_consumer_id(const sluice_consumer *c);

/* Checkpoints: a trainer saves its place in the job with its model, and
 * after any crash resumes from it.
 *
 * Takes a checkpoint of this consumer's place in the job and writes its
 * token (a printable string under SLUICE_CHECKPOINT_TOKEN_MAX bytes) to
 * token; save it with the model's checkpoint. Every batch next() returned
 * before the call counts as trained: those the application still holds
 * are acknowledged (as by sluice_batch_ack(); they stay valid until
 * released), and the call returns once Redis has every acknowledgement and
 * the checkpoint (one round trip after the last acknowledgement; up to
 * timeout_ms, < 0: no limit). Opening a consumer with opts.resume = token
 * (after a crash of the trainer, its producers, or Redis restarted from
 * its AOF) gives back every batch acknowledged after the checkpoint, at
 * the front of its epoch's list, and starts at the epoch the consumer was
 * reading when it took the checkpoint: the batches after the checkpoint
 * come again, first, none before it does, and the ends of epochs come as
 * they did. A batch the crashed process held without acknowledging comes
 * back as always (flagged, sluice_batch_deliveries() > 1).
 *
 * Whose checkpoints: a coordinated rank's (every consumer of rank r, one
 * after the other, writes rank r's), or a free consumer's (the id it was
 * opened with; resuming carries them on under the new consumer's id).
 * Checkpoints are numbered 1, 2, ... per owner; a token names its number,
 * and on a coordinated queue each rank resumes its own checkpoint of that
 * number: ranks that take their checkpoints at the same steps (as DDP
 * does) may all resume from the token rank 0 saved, and then get equal
 * counts again. On a partitioned queue the checkpoint spans every
 * partition.
 *
 * The cost: Redis keeps the frames of the batches acknowledged since the
 * oldest of the last checkpoint_keep checkpoints (sluice-ctl checkpoints
 * shows how many bytes); they do not count against the queue's budgets.
 * Opening with checkpoints on but without resume: an owner that never took
 * a checkpoint gets back everything it acknowledged (its trainer crashed
 * before saving anything); one that has checkpoints goes on where the
 * queue is, its checkpoints still resumable until newer ones replace them.
 *
 * Returns SLUICE_OK; SLUICE_ERR_INVALID when the consumer was opened
 * without checkpoints or acknowledges at most once, or len is too small
 * (errstr says why); SLUICE_ERR_TIMEOUT (Redis out of reach; nothing was
 * recorded, or it was and a later call numbers the next one higher); or
 * an error of next(). Call it from the thread that calls next(), while no
 * other thread releases batches of this consumer. */
SLUICE_EXPORT sluice_err sluice_consumer_checkpoint(sluice_consumer *c, char *token, size_t len,
                                                    int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
