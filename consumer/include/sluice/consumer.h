/* sluice — the consumer library a trainer links (libsluice).
 *
 *     sluice_consumer_opts o = { .redis_url = "redis://localhost:6379", .queue = "train" };
 *     sluice_consumer *c;
 *     if (sluice_consumer_open(&c, &o) != SLUICE_OK) { ... }
 *     sluice_batch *b;
 *     while (sluice_consumer_next(c, &b, 1000) == SLUICE_OK) {
 *         for (size_t i = 0; i < sluice_batch_num_records(b); i++)
 *             use(sluice_batch_record(b, i));
 *         sluice_batch_release(b);          // acknowledges the batch
 *     }
 *     sluice_consumer_close(c);
 *
 * Delivery: a batch that next() returns is held in this consumer's pending
 * list in Redis until sluice_batch_release() acknowledges it; if the process
 * dies first, the batch stays there (it is not lost). Closing the consumer
 * hands every batch it still holds back to the queue at once.
 *
 * Thread-safety: a consumer is used by one thread at a time. Different
 * consumers are independent. */
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
    /* At-most-once: a batch is removed from Redis as it is taken. Faster
     * (no ack round trip), but the batches a dying consumer holds are lost. */
    SLUICE_ACK_NONE = 1,
} sluice_ack_mode;

typedef struct sluice_consumer_opts {
    const char *redis_url;    /* redis://[user[:pass]@]host[:port][/db] or unix:///path[?db=N] */
    const char *queue;        /* an existing queue (sluice-ctl create) */
    size_t max_batch_bytes;   /* larger frames are refused; 0: SLUICE_MAX_BATCH_BYTES_DEFAULT */
    int prefetch;             /* batches fetched per round trip and held ahead; 0: 4 */
    int connect_timeout_ms;   /* 0: SLUICE_CONNECT_TIMEOUT_MS_DEFAULT */
    int reconnect_timeout_ms; /* give up a lost connection after this long; 0: wait forever */
    const char *consumer_id;  /* NULL: a random id */
    int world;                /* coordinated queues: the number of ranks N (must match
                                 the queue); 0: a free consumer of a free queue */
    int rank;                 /* coordinated queues: this consumer's rank, 0..N-1 */
    sluice_ack_mode ack_mode; /* SLUICE_ACK_EXPLICIT (default) or SLUICE_ACK_NONE */
} sluice_consumer_opts;

/* Connects and checks that the queue exists. On SLUICE_OK *out is a new
 * consumer owned by the caller (sluice_consumer_close()). On failure *out is
 * NULL; when errbuf is not NULL it receives the reason (errlen bytes,
 * NUL-terminated). o is not kept after the call. */
sluice_err sluice_consumer_open(sluice_consumer **out, const sluice_consumer_opts *o,
                                char *errbuf, size_t errlen);

/* Waits up to timeout_ms (< 0: forever, 0: no wait) for the next batch.
 *
 * Epochs: the batches of a job come epoch by epoch. When every batch of the
 * consumer's current epoch has been taken, next() returns SLUICE_EOF once;
 * the following call starts the next epoch (sluice_consumer_epoch() tells
 * which). After the last epoch of the job, next() returns SLUICE_EOF for
 * good and sluice_consumer_finished() returns 1. A queue fed without a job
 * has a single epoch 0 that never ends.
 *
 * On SLUICE_OK *out belongs to the caller until sluice_batch_release(); its
 * records and tensors point into the batch and are valid until then. On any
 * other result *out is NULL: SLUICE_ERR_TIMEOUT when nothing arrived in
 * time; SLUICE_ERR_IO when the connection was lost and not regained within
 * reconnect_timeout_ms. A lost connection is otherwise regained
 * transparently: the blocking read is issued again and no batch is lost.
 * A frame that fails validation is skipped and counted (see errstr). */
sluice_err sluice_consumer_next(sluice_consumer *c, sluice_batch **out, int timeout_ms);

/* Acknowledges b and frees it: after the call b is no longer valid, nor is
 * anything its accessors returned. The acknowledgement is sent with the
 * next request to Redis (or at close). NULL is a no-op. */
void sluice_batch_release(sluice_batch *b);

/* Hands back every batch this consumer holds but has not acknowledged
 * (including ones the caller still has: they stay valid memory, but their
 * later release() sends no ack), flushes pending acks, disconnects and
 * frees c. NULL is a no-op. */
void sluice_consumer_close(sluice_consumer *c);

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

/* Copies the consumer's counters into *st. */
void sluice_consumer_stats_get(const sluice_consumer *c, sluice_consumer_stats *st);

/* The epoch the next batch comes from (the one in progress). */
uint32_t sluice_consumer_epoch(const sluice_consumer *c);

/* 1 once the job's last epoch has ended (next() then returns SLUICE_EOF
 * for good), else 0. */
int sluice_consumer_finished(const sluice_consumer *c);

/* The detail of the last failure on c (one line, owned by c, valid until
 * the next call on c); "" when none. */
const char *sluice_consumer_errstr(const sluice_consumer *c);

/* The id this consumer registered under in Redis (owned by c). */
const char *sluice_consumer_id(const sluice_consumer *c);

#ifdef __cplusplus
}
#endif
#endif
