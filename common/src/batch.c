/* The decoded batch and the dtypes: the public accessors of batch.h
 * (sluice_batch_*, sluice_dtype_*), sluice_batch_free(), the room a batch
 * may carry for its receiver (sluicei_batch_room), and the one rule for a
 * tensor's size in bytes, shared by the encoder and the validator. The
 * decoder (wire_decode.c) fills struct sluice_batch (wire.h). */
#include "wire.h"

#include <msgpack.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* dtypes                                                                   */

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [SLUICE_DTYPE_INVALID] = {NULL, 0},
    [SLUICE_DTYPE_BOOL] = {"bool", 1},
    [SLUICE_DTYPE_UINT8] = {"uint8", 1},
    [SLUICE_DTYPE_INT8] = {"int8", 1},
    [SLUICE_DTYPE_UINT16] = {"uint16", 2},
    [SLUICE_DTYPE_INT16] = {"int16", 2},
    [SLUICE_DTYPE_UINT32] = {"uint32", 4},
    [SLUICE_DTYPE_INT32] = {"int32", 4},
    [SLUICE_DTYPE_UINT64] = {"uint64", 8},
    [SLUICE_DTYPE_INT64] = {"int64", 8},
    [SLUICE_DTYPE_FLOAT16] = {"float16", 2},
    [SLUICE_DTYPE_BFLOAT16] = {"bfloat16", 2},
    [SLUICE_DTYPE_FLOAT32] = {"float32", 4},
    [SLUICE_DTYPE_FLOAT64] = {"float64", 8},
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

size_t sluice_dtype_size(sluice_dtype dt)
{
    return (unsigned)dt < NDTYPES ? dtypes[dt].size : 0;
}

const char *sluice_dtype_name(sluice_dtype dt)
{
    return (unsigned)dt < NDTYPES ? dtypes[dt].name : NULL;
}

sluice_dtype sluice_dtype_from_name(const char *name, size_t len)
{
    if (!name)
        return SLUICE_DTYPE_INVALID;
    for (size_t i = 1; i < NDTYPES; i++)
        if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, name, len) == 0)
            return (sluice_dtype)i;
    return SLUICE_DTYPE_INVALID;
}

/* Elements of a shape times the element size, or false on overflow. */
bool sluicei_tensor_bytes(const uint64_t *shape, int ndim, size_t elem, uint64_t *out)
{
    uint64_t total = elem;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] != 0 && total > UINT64_MAX / shape[i])
            return false;
        total *= shape[i];
    }
    *out = total;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                */

/* Where the room reserved after a batch starts: past the struct, aligned
 * for any type. */
#define ROOM_AT                                                                                  \
    ((sizeof(sluice_batch) + _Alignof(max_align_t) - 1) / _Alignof(max_align_t) *               \
     _Alignof(max_align_t))

sluice_batch *sluicei_batch_new(size_t room)
{
    return calloc(1, room ? ROOM_AT + room : sizeof(sluice_batch));
}

sluice_batch_id sluice_batch_get_id(const sluice_batch *b)
{
    return b->id;
}

const char *sluice_batch_producer(const sluice_batch *b)
{
    return b->producer;
}

uint64_t sluice_batch_created_us(const sluice_batch *b)
{
    return b->created_us;
}

size_t sluice_batch_frame_bytes(const sluice_batch *b)
{
    return b->frame_bytes;
}

size_t sluice_batch_num_records(const sluice_batch *b)
{
    return b->nrecords;
}

sluice_record sluice_batch_record(const sluice_batch *b, size_t i)
{
    sluice_record none = {NULL, 0};
    return b->records && i < b->nrecords ? b->records[i] : none;
}

size_t sluice_batch_num_tensors(const sluice_batch *b)
{
    return b->ntensors;
}

const sluice_tensor *sluice_batch_tensor(const sluice_batch *b, size_t i)
{
    return i < b->ntensors ? &b->tensors[i] : NULL;
}

const sluice_tensor *sluice_batch_find_tensor(const sluice_batch *b, const char *name)
{
    for (size_t i = 0; name && i < b->ntensors; i++)
        if (strcmp(b->tensors[i].name, name) == 0)
            return &b->tensors[i];
    return NULL;
}

void *sluicei_batch_room(const sluice_batch *b, size_t size)
{
    return size > 0 && b->room >= size ? (void *)((const char *)b + ROOM_AT) : NULL;
}

void sluice_batch_free(sluice_batch *b)
{
    if (!b)
        return;
    free(b->records);
    free(b->tensors);
    free(b->names);
    if (b->zone)
        msgpack_zone_free(b->zone);
    if (b->frame_free)
        b->frame_free(b->frame_owner);
    free(b);
}
