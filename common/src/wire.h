/* Batch wire format v1: pack, validate, unpack. No I/O. Internal header.
 * wire_encode.c packs, wire_check.c validates, wire_decode.c unpacks,
 * batch.c holds the decoded batch's accessors and the dtypes.
 *
 * A frame is one msgpack map whose first key is "v" (see docs/PROTOCOL.md).
 * Decoding never lets the frame choose an allocation size: the frame length
 * is checked against a maximum, then every array/map/str/bin length against
 * the bytes that remain, and only then does msgpack-c unpack it. */
#ifndef SLUICE_WIRE_H
#define SLUICE_WIRE_H

#include <sluice/batch.h>

#include <stdbool.h>

#define SLUICE_MAX_PRODUCER_ID 64   /* bytes of the "p" field */
#define SLUICE_MAX_TENSORS 64       /* entries of the "x" map */
#define SLUICE_MAX_RECORDS (1 << 20) /* records (rows) of one batch (16 MiB of record table) */
#define SLUICE_MAX_TENSOR_NAME 64   /* bytes of a tensor name */
#define SLUICE_MAX_DEPTH 6          /* msgpack nesting accepted at all */

/* A growable byte buffer; reused across encodes so steady state allocates
 * nothing. Zero-initialise it; sluicei_buf_free() releases it. */
typedef struct sluicei_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} sluicei_buf;

sluice_err sluicei_buf_reserve(sluicei_buf *b, size_t extra);
sluice_err sluicei_buf_append(sluicei_buf *b, const void *p, size_t n);
void sluicei_buf_free(sluicei_buf *b);

typedef struct sluicei_batch_meta {
    sluice_batch_id id;
    const char *producer;   /* NUL-terminated, at most SLUICE_MAX_PRODUCER_ID bytes */
    uint64_t created_us;
} sluicei_batch_meta;

/* Encodes a record batch into out (out->len is reset first). */
sluice_err sluicei_wire_encode_records(sluicei_buf *out, const sluicei_batch_meta *m,
                                       const sluice_record *recs, size_t n);
/* Encodes a tensor batch of n rows (at most SLUICE_MAX_RECORDS): every
 * tensor must have ndim >= 1, shape[0] == n and nbytes matching its shape
 * and dtype. */
sluice_err sluicei_wire_encode_tensors(sluicei_buf *out, const sluicei_batch_meta *m, uint64_t n,
                                       const sluice_tensor *t, size_t nt);

/* Checks that p[0..len) is a well-formed v1 frame no larger than max_bytes,
 * without allocating. On failure writes a one-line reason to err (which
 * names the field and offset) and returns SLUICE_ERR_PROTOCOL or
 * SLUICE_ERR_TOOBIG. */
sluice_err sluicei_wire_validate(const void *p, size_t len, size_t max_bytes, char *err, size_t errlen);

/* Reads only the batch id of a frame, cheaply (validates what it reads). */
sluice_err sluicei_wire_peek_id(const void *p, size_t len, sluice_batch_id *id);

/* Validates, then decodes. On SLUICE_OK *out is a new batch whose records
 * and tensor data point into p: p must stay valid until the batch is freed,
 * and sluice_batch_free() calls frame_free(frame_owner) (when frame_free is
 * not NULL) to let the caller release it. On failure *out is NULL, err holds
 * the reason, and frame_free is NOT called: the caller still owns p. */
sluice_err sluicei_wire_decode(const void *p, size_t len, size_t max_bytes,
                               void (*frame_free)(void *), void *frame_owner,
                               sluice_batch **out, char *err, size_t errlen);

/* sluicei_wire_decode(), with room bytes reserved right after the batch,
 * zeroed, for whoever receives it to keep its own state with the batch (the
 * consumer: how it was delivered); sluicei_batch_room() finds them, and
 * sluice_batch_free() frees them with the batch. */
sluice_err sluicei_wire_decode_ext(const void *p, size_t len, size_t max_bytes, size_t room,
                                   void (*frame_free)(void *), void *frame_owner,
                                   sluice_batch **out, char *err, size_t errlen);

/* The room reserved after b (aligned for any type), or NULL when b has
 * less than size bytes of it (a batch from sluicei_wire_decode()). */
void *sluicei_batch_room(const sluice_batch *b, size_t size);

/* sluice_wire_decode() (batch.h) is the short form: no owner, no error text. */

/* A new zeroed batch with room bytes reserved after it (see
 * sluicei_batch_room()); NULL when out of memory. sluice_batch_free()
 * frees it. */
sluice_batch *sluicei_batch_new(size_t room);

/* Bytes of a tensor of ndim dimensions shape[] of elem-byte elements in
 * *out; false when that overflows 64 bits. */
bool sluicei_tensor_bytes(const uint64_t *shape, int ndim, size_t elem, uint64_t *out);

/* The decoded batch, filled by the decoder. */
struct sluice_batch {
    sluice_batch_id id;
    char producer[SLUICE_MAX_PRODUCER_ID + 1];
    uint64_t created_us;
    size_t frame_bytes;
    size_t nrecords;
    sluice_record *records;    /* nrecords entries, or NULL for a tensor batch */
    size_t ntensors;
    sluice_tensor *tensors;    /* ntensors entries; names point into names[] */
    char *names;               /* NUL-terminated tensor names, back to back */
    void *zone;                /* msgpack_zone used while decoding */
    void (*frame_free)(void *);
    void *frame_owner;
    size_t room;               /* bytes reserved after the batch (sluicei_batch_room) */
};

#endif
