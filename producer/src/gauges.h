/* A queue's gauges as read from Redis: its budgets, the batches and bytes
 * it holds, and the counters one producer published (its heartbeat's
 * pstats:<id> hash, docs/PROTOCOL.md). What sluice-producer's metrics
 * endpoint serves. Internal: not installed, not exported. */
#ifndef SLUICE_GAUGES_H
#define SLUICE_GAUGES_H

#include "cluster.h"

#include <sluice/common.h>

#include <stdint.h>

/* The counters a producer publishes in pstats:<id>, in the order of
 * sluicei_pstats_field. */
enum {
    SLUICEI_PSTAT_BATCHES,
    SLUICEI_PSTAT_BYTES,
    SLUICEI_PSTAT_BLOCKED_US,
    SLUICEI_PSTAT_DUPLICATES,
    SLUICEI_PSTAT_TASKS_DONE,
    SLUICEI_PSTAT_TASKS_FAILED,
    SLUICEI_PSTAT_COUNT
};

/* The field name of counter i in pstats:<id> ("batches", "blocked_us"). */
const char *sluicei_pstats_field(int i);

/* A queue's figures; a partitioned queue's are the sums over its
 * partitions. -1: no partition has the value (not set). */
typedef struct sluicei_queue_gauges {
    int64_t max_batches;    /* the batch budget (meta max_batches) */
    int64_t max_bytes;      /* the byte budget (meta max_bytes) */
    int64_t depth;          /* batches held: queued, or delivered and not acknowledged */
    int64_t bytes;          /* frame bytes held */
    /* The producer's published counters (0 when it published none). */
    uint64_t published[SLUICEI_PSTAT_COUNT];
} sluicei_queue_gauges;

/* Reads the gauges of queue through r (the router's thread only), and the
 * counters producer_id published (NULL: none read, all 0). partitions is
 * the queue's partition count when the caller knows it (0: a plain queue)
 * or -1 to have it read first (sluicei_queue_partitions()); *partitions_out
 * (may be NULL) gets the count used, to pass next time. Every command is
 * retried (cluster redirects, lost connections) until deadline_ms
 * (sluicei_now_ms() clock). On SLUICE_OK *out is filled; on failure *out
 * is undefined and err says why. */
sluice_err sluicei_queue_gauges_read(sluicei_router *r, const char *queue, int partitions,
                                     const char *producer_id, int64_t deadline_ms,
                                     sluicei_queue_gauges *out, int *partitions_out, char *err,
                                     size_t errlen);

#endif
