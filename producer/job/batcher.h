/* The batcher: groups the records of a reader into batches of a fixed
 * number of records and turns each into what is pushed (the records, the
 * rows of a tensor reader gathered into one tensor per column, or the
 * output of a --transform plugin). Internal; knows nothing of Redis: full
 * batches go to a callback, which pushes them.
 *
 *     sluicei_batcher *b;
 *     if (sluicei_batcher_new(&b, 64) != SLUICE_OK) ...
 *     sluicei_batcher_hooks h = {.batch = push_it, .arg = ctx};
 *     int rc = sluicei_batcher_run(b, rd, NULL, &h, &nread, err, sizeof err);
 *     // 0: rd ended and every batch went to push_it; the last may be short
 *     sluicei_batcher_free(b);
 *
 * A batch never holds more than its batch size; only the last one of a run
 * (the end of the reader) may hold fewer, never none (with drop_remainder,
 * sluicei_batcher_set_order(), that one is dropped). A batch that was not
 * full when the run stopped (a reader error, a hook said stop) is dropped.
 * Records are copied out of the reader (whose record is valid only until
 * its next call); the buffers are kept and reused from batch to batch.
 *
 * A batcher is used by one thread at a time. */
#ifndef SLUICE_BATCHER_H
#define SLUICE_BATCHER_H

#include "reader.h"
#include "transform.h"

#include <sluice/batch.h>
#include <sluice/common.h>
#include <sluice/producer.h>

#include <stddef.h>
#include <stdint.h>

typedef struct sluicei_batcher sluicei_batcher;   /* opaque: batcher.c */

/* A batch as it is pushed. Exactly one of records / tensors is used:
 * nrecords > 0 (records), or ntensors > 0 (tensors of `rows` rows each).
 * rows is the number of records, or of rows of the tensors. The pointers
 * are owned by the batcher (or by the transform) and valid until the next
 * call on the batcher. */
typedef struct sluicei_batch_out {
    const sluice_record *records;
    size_t nrecords;
    const sluice_tensor *tensors;
    size_t ntensors;
    uint64_t rows;
} sluicei_batch_out;

/* A new, empty batcher for batches of batch_size records (>= 1). On
 * SLUICE_OK *out is owned by the caller (sluicei_batcher_free()); else
 * *out is NULL: SLUICE_ERR_INVALID for a batch size of 0, SLUICE_ERR_NOMEM. */
sluice_err sluicei_batcher_new(sluicei_batcher **out, size_t batch_size);

/* Frees b and its buffers. NULL is a no-op. */
void sluicei_batcher_free(sluicei_batcher *b);

/* Sets the batch size (>= 1) and empties the batch being filled. On
 * failure (SLUICE_ERR_INVALID for 0, SLUICE_ERR_NOMEM) b keeps its former
 * size and is emptied all the same. */
sluice_err sluicei_batcher_resize(sluicei_batcher *b, size_t batch_size);

size_t sluicei_batcher_size(const sluicei_batcher *b);    /* the batch size */
size_t sluicei_batcher_count(const sluicei_batcher *b);   /* records in the batch being filled */

/* Copies rec into the batch being filled, which must not be full yet.
 * SLUICE_ERR_NOMEM leaves the batch as it was. */
sluice_err sluicei_batcher_add(sluicei_batcher *b, const sluice_record *rec);

/* Empties the batch being filled (its records are dropped). */
void sluicei_batcher_clear(sluicei_batcher *b);

/* Turns the batch being filled (at least one record) into what is pushed,
 * and empties it. With tf: the records go through the plugin, whose output
 * is taken as it is (both counts 0: the plugin dropped the batch). Else,
 * with columns (ncols > 0, a tensor reader's, reader.h): each record is a
 * row of the columns back to back, gathered into one tensor per column of
 * shape [rows, row shape...]. Else the records themselves. *out is valid
 * until the next call on b (or on tf). Errors, with err set (*out then
 * empty): the transform's (sluicei_transform_apply()); SLUICE_ERR_FORMAT
 * "row of N bytes, expected M" when a record is not one row;
 * SLUICE_ERR_NOMEM "out of memory for a batch". */
sluice_err sluicei_batcher_take(sluicei_batcher *b, sluicei_transform *tf,
                                const sluicei_column *cols, size_t ncols, sluicei_batch_out *out,
                                char *err, size_t errlen);

/* What sluicei_batcher_run() calls back. Each hook returns 0 to go on; any
 * other value (a positive one: the run's own results are 0 and
 * SLUICEI_BATCHER_INPUT_ERROR) stops the run, which returns it. */
typedef struct sluicei_batcher_hooks {
    /* A batch to push: every full batch, then the short last one (a batch
     * the transform dropped is not handed over). out is valid only during
     * the call. */
    int (*batch)(void *arg, const sluicei_batch_out *out);
    /* Optional: called before each record is read, with the number of
     * records in the batch being filled. For a stop request, or to keep
     * something alive while the input is slow. Stopping drops that batch. */
    int (*poll)(void *arg, size_t pending);
    void *arg;
} sluicei_batcher_hooks;

/* sluicei_batcher_run(): the reader failed (its error), or a record or a
 * batch could not be made (sluicei_batcher_take()'s errors); err says why. */
#define SLUICEI_BATCHER_INPUT_ERROR (-1)

/* The record order and remainder of the runs that follow (a job's, for
 * one task; all zero, as after sluicei_batcher_new(): file order, every
 * batch handed over). */
typedef struct sluicei_batch_order {
    /* > 1: the records are shuffled within consecutive windows of this
     * many (window w: records w*window .. (w+1)*window - 1 of the run),
     * each by sluicei_shuffle_perm(seed, epoch, shard, w), and batches are
     * cut from the shuffled windows one after another; the whole window is
     * held (copied) until it is full or the reader ends. 0 or 1: no
     * shuffle. At most SLUICE_SHUFFLE_BUFFER_MAX. */
    uint32_t window;
    uint64_t seed;
    uint32_t epoch;
    uint64_t shard;
    /* 1: a short last batch is not handed over; its records are counted
     * (sluicei_batcher_dropped()). */
    int drop_remainder;
} sluicei_batch_order;

/* Sets the order of the runs to come. SLUICE_ERR_INVALID (nothing
 * changed) for a window over SLUICE_SHUFFLE_BUFFER_MAX. */
sluice_err sluicei_batcher_set_order(sluicei_batcher *b, const sluicei_batch_order *o);

/* Records the last run did not hand over because of drop_remainder (its
 * short last batch), whatever the outcome; 0 when it did not end, or
 * ended on a full batch. */
uint64_t sluicei_batcher_dropped(const sluicei_batcher *b);

/* Empties b, then reads rd to its end in batches of b's size, each made by
 * sluicei_batcher_take() (tf and the reader's columns) and handed to
 * hooks->batch; in the order set by sluicei_batcher_set_order(). *nread
 * (not NULL) counts the records read, whatever the outcome. Returns 0 when
 * rd ended and every batch was handed over (but a short last one with
 * drop_remainder), SLUICEI_BATCHER_INPUT_ERROR (err set; also "out of
 * memory for a shuffle window of N records"), or the value with which a
 * hook stopped the run. b is empty on return. The batches depend only on
 * the records, the batch size and the order: a run over the same input
 * gives the same batches every time. */
int sluicei_batcher_run(sluicei_batcher *b, sluicei_reader *rd, sluicei_transform *tf,
                        const sluicei_batcher_hooks *hooks, uint64_t *nread, char *err,
                        size_t errlen);

/* The permutation of shuffle window `window` of a task: perm[i] (i < n) is
 * the position in the window of the record that goes i-th. Fisher-Yates
 * driven by splitmix64, seeded from (seed, epoch, shard, window) as
 * docs/PROTOCOL.md ("Record shuffle") states, so that any producer, in
 * any language, makes the same. n at most SLUICE_SHUFFLE_BUFFER_MAX. */
void sluicei_shuffle_perm(uint32_t *perm, size_t n, uint64_t seed, uint32_t epoch,
                          uint64_t shard, uint64_t window);

#endif
