/* sluice — a received batch and its contents.
 *
 * A batch is what sluice_consumer_next() returns: an id, some metadata and
 * either a list of raw records or a set of named tensors. Every pointer an
 * accessor returns points into the received frame (no copy) and stays valid
 * until the batch is released (sluice_batch_release() in consumer.h) or
 * freed (sluice_batch_free()). A batch is not thread-safe: use it from one
 * thread at a time. */
#ifndef SLUICE_BATCH_H
#define SLUICE_BATCH_H

#include <sluice/common.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sluice_batch sluice_batch;

/* Deterministic identity of a batch: the epoch, the task that produced it
 * and its sequence number within that task. A task that is produced again
 * yields the same ids. */
typedef struct sluice_batch_id {
    uint32_t epoch;
    uint64_t task;
    uint32_t seq;
} sluice_batch_id;

/* One raw record: len bytes at data. */
typedef struct sluice_record {
    const void *data;
    size_t len;
} sluice_record;

typedef enum sluice_dtype {
    SLUICE_DTYPE_INVALID = 0,
    SLUICE_DTYPE_BOOL,
    SLUICE_DTYPE_UINT8,
    SLUICE_DTYPE_INT8,
    SLUICE_DTYPE_UINT16,
    SLUICE_DTYPE_INT16,
    SLUICE_DTYPE_UINT32,
    SLUICE_DTYPE_INT32,
    SLUICE_DTYPE_UINT64,
    SLUICE_DTYPE_INT64,
    SLUICE_DTYPE_FLOAT16,
    SLUICE_DTYPE_BFLOAT16,
    SLUICE_DTYPE_FLOAT32,
    SLUICE_DTYPE_FLOAT64,
} sluice_dtype;

#define SLUICE_MAX_DIMS 8

/* A named, dense, C-order tensor. data holds nbytes =
 * product(shape) * sluice_dtype_size(dtype) bytes. As an input to the
 * producer API the caller owns every pointer; as an output of a batch the
 * batch owns them. */
typedef struct sluice_tensor {
    const char *name;       /* NUL-terminated */
    sluice_dtype dtype;
    int ndim;               /* 0 .. SLUICE_MAX_DIMS */
    uint64_t shape[SLUICE_MAX_DIMS];
    const void *data;
    size_t nbytes;
} sluice_tensor;

/* Size in bytes of one element of dt, 0 for SLUICE_DTYPE_INVALID. */
SLUICE_EXPORT size_t sluice_dtype_size(sluice_dtype dt);
/* Wire name of dt ("uint8", "float32", ...), NULL when invalid. */
SLUICE_EXPORT const char *sluice_dtype_name(sluice_dtype dt);
/* Inverse of sluice_dtype_name(); SLUICE_DTYPE_INVALID when unknown. */
SLUICE_EXPORT sluice_dtype sluice_dtype_from_name(const char *name, size_t len);

SLUICE_EXPORT sluice_batch_id sluice_batch_get_id(const sluice_batch *b);
/* Producer id string carried in the frame (NUL-terminated, owned by b). */
SLUICE_EXPORT const char *sluice_batch_producer(const sluice_batch *b);
/* Creation time set by the producer, microseconds since the Unix epoch. */
SLUICE_EXPORT uint64_t sluice_batch_created_us(const sluice_batch *b);
/* Size of the whole frame in bytes (uncompressed). */
SLUICE_EXPORT size_t sluice_batch_frame_bytes(const sluice_batch *b);
/* Number of records (for a tensor batch: the leading dimension). */
SLUICE_EXPORT size_t sluice_batch_num_records(const sluice_batch *b);
/* Record i of a record batch; {NULL, 0} when i is out of range or the batch
 * carries tensors. */
SLUICE_EXPORT sluice_record sluice_batch_record(const sluice_batch *b, size_t i);
/* Number of tensors (0 for a record batch). */
SLUICE_EXPORT size_t sluice_batch_num_tensors(const sluice_batch *b);
/* Tensor i, or NULL when out of range. */
SLUICE_EXPORT const sluice_tensor *sluice_batch_tensor(const sluice_batch *b, size_t i);
/* The tensor called name, or NULL. */
SLUICE_EXPORT const sluice_tensor *sluice_batch_find_tensor(const sluice_batch *b,
                                                         const char *name);
/* How many times this batch was handed to a consumer, this time included:
 * 1 on first delivery, more when a consumer died or gave it back unacked.
 * Always 1 for a batch decoded outside a consumer. */
SLUICE_EXPORT uint32_t sluice_batch_deliveries(const sluice_batch *b);

/* 1 when b is padding: a batch of the epoch delivered again to complete
 * the last round of a coordinated queue whose remainder policy is "pad";
 * else 0. */
SLUICE_EXPORT int sluice_batch_is_padding(const sluice_batch *b);

/* Decodes one frame as producers write it (docs/PROTOCOL.md, "Wire
 * format"), compressed or not, into *out, checking it whole: a frame over
 * max_bytes (a compressed one: or holding more than max_bytes), truncated,
 * or not of the format is SLUICE_ERR_PROTOCOL (or SLUICE_ERR_TOOBIG), and
 * *out is NULL. The batch copies nothing: its records and tensors point
 * into p, which must outlive it (those of a compressed frame point into
 * the batch's own decompressed copy). Free it with sluice_batch_free(). */
SLUICE_EXPORT sluice_err sluice_wire_decode(const void *p, size_t len, size_t max_bytes,
                                            sluice_batch **out);

/* Frees a batch that did not come from a consumer (sluice_wire_decode()).
 * For a consumer's batch use sluice_batch_release(). NULL is a no-op. */
SLUICE_EXPORT void sluice_batch_free(sluice_batch *b);

#ifdef __cplusplus
}
#endif
#endif
