/* What sluice-producer needs of the producer API beyond producer.h.
 * Internal: not installed. */
#ifndef SLUICE_PRODUCER_INTERNAL_H
#define SLUICE_PRODUCER_INTERNAL_H

#include <sluice/producer.h>

/* Files mode on a partitioned queue: flushes, then numbers the following
 * batches in a new ad-hoc task (epoch 0, a random task number) in the next
 * partition, round robin from the producer's home partition. On a plain
 * queue it does nothing: the whole run stays one ad-hoc task. Fails
 * (SLUICE_ERR_INVALID) while a task is held, or as sluice_producer_flush(). */
sluice_err sluicei_producer_new_adhoc(sluice_producer *p);

/* What became of the batches p gave up after a final error (a signal
 * while they waited for room, a push refused for good, Redis out of
 * reach), since p was opened: never sent; sent and refused (not stored);
 * sent without an answer (stored or not, nobody knows). A partitioned
 * queue: summed over its partitions. */
typedef struct sluicei_abandoned {
    uint64_t unsent;
    uint64_t refused_room;    /* refused for lack of room */
    uint64_t refused_other;   /* refused by a passing server condition, or for good */
    uint64_t unanswered;
} sluicei_abandoned;
void sluicei_producer_abandoned(const sluice_producer *p, sluicei_abandoned *out);

/* The partitions of p's queue; 0 for a plain queue. */
int sluicei_producer_partitions(const sluice_producer *p);

#endif
