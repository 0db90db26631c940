/* Batch wire format v1, decoding: a frame that passed the validator
 * (wire_check.c) into a struct sluice_batch (wire.h, batch.c). msgpack-c
 * unpacks the value of each known key only; its C unpacker makes str/bin
 * objects point into the input, so records and tensor data point into the
 * frame and its zone can be freed before returning. */
#include "wire_check.h"
#include "zframe.h"

#include <msgpack.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Where a str/bin object's bytes are, as a pointer into the frame; NULL
 * when they are not inside it. msgpack-c's C unpacker points str/bin
 * objects into its input (checked here, so that a version that copied could
 * not leave records pointing into a freed zone), except that it gives an
 * empty str a NULL pointer: empty payloads get the frame's address instead,
 * so that memcpy(dst, data, 0) on any record is well-defined. */
static const void *in_frame(const void *frame, size_t len, const char *q, size_t n)
{
    if (n == 0)
        return q ? q : frame;
    uintptr_t a = (uintptr_t)frame, b = (uintptr_t)q;
    return q && b >= a && b - a <= len && n <= len - (b - a) ? q : NULL;
}

/* Unpacks the object at off with msgpack-c into zone. */
static bool unpack_at(const void *p, size_t len, size_t off, msgpack_zone *zone,
                      msgpack_object *obj)
{
    size_t o = off;
    msgpack_unpack_return r = msgpack_unpack(p, len, &o, zone, obj);
    return r == MSGPACK_UNPACK_SUCCESS || r == MSGPACK_UNPACK_EXTRA_BYTES;
}

static bool obj_is(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

/* Fills b's tensors from the unpacked "x" map. Tensor data is not aligned
 * (msgpack puts it right after a 2-5 byte header): consumers that need
 * aligned data must copy it. */
static bool build_tensors(sluice_batch *b, const void *p, size_t len, const msgpack_object *x)
{
    const msgpack_object_map *m = &x->via.map;
    size_t names = 0;
    for (uint32_t i = 0; i < m->size; i++)
        names += m->ptr[i].key.via.str.size + 1;
    b->ntensors = m->size;
    b->tensors = calloc(m->size ? m->size : 1, sizeof *b->tensors);
    b->names = malloc(names ? names : 1);
    if (!b->tensors || !b->names)
        return false;
    char *nm = b->names;
    for (uint32_t i = 0; i < m->size; i++) {
        sluice_tensor *t = &b->tensors[i];
        const msgpack_object_str *k = &m->ptr[i].key.via.str;
        memcpy(nm, k->ptr, k->size);
        nm[k->size] = '\0';
        t->name = nm;
        nm += k->size + 1;
        const msgpack_object_map *f = &m->ptr[i].val.via.map;
        for (uint32_t j = 0; j < f->size; j++) {
            const msgpack_object *key = &f->ptr[j].key, *v = &f->ptr[j].val;
            if (obj_is(key, "dtype")) {
                t->dtype = sluice_dtype_from_name(v->via.str.ptr, v->via.str.size);
            } else if (obj_is(key, "shape")) {
                t->ndim = (int)v->via.array.size;
                for (int d = 0; d < t->ndim; d++)
                    t->shape[d] = v->via.array.ptr[d].via.u64;
            } else if (obj_is(key, "data")) {
                t->data = in_frame(p, len, v->via.bin.ptr, v->via.bin.size);
                t->nbytes = v->via.bin.size;
                if (!t->data)
                    return false;
            }
        }
    }
    return true;
}

static bool build_records(sluice_batch *b, const void *p, size_t len, const msgpack_object *r)
{
    const msgpack_object_array *a = &r->via.array;
    /* At least one entry, so that records != NULL marks a record batch. */
    b->records = malloc((a->size ? a->size : 1) * sizeof *b->records);
    if (!b->records)
        return false;
    for (uint32_t i = 0; i < a->size; i++) {
        const msgpack_object *o = &a->ptr[i];
        const char *q = o->type == MSGPACK_OBJECT_BIN ? o->via.bin.ptr : o->via.str.ptr;
        size_t n = o->type == MSGPACK_OBJECT_BIN ? o->via.bin.size : o->via.str.size;
        b->records[i].data = in_frame(p, len, q, n);
        b->records[i].len = n;
        if (!b->records[i].data)
            return false;
    }
    return true;
}

sluice_err sluicei_wire_decode(const void *p, size_t len, size_t max_bytes,
                               void (*frame_free)(void *), void *frame_owner, sluice_batch **out,
                               char *err, size_t errlen)
{
    return sluicei_wire_decode_ext(p, len, max_bytes, 0, frame_free, frame_owner, out, err,
                                   errlen);
}

sluice_err sluicei_wire_decode_ext(const void *p, size_t len, size_t max_bytes, size_t room,
                                   void (*frame_free)(void *), void *frame_owner,
                                   sluice_batch **out, char *err, size_t errlen)
{
    struct wire_layout lo;
    *out = NULL;
    sluice_err e = wire_check(p, len, max_bytes, &lo, err, errlen);
    if (e != SLUICE_OK)
        return e;

    sluice_batch *b = sluicei_batch_new(room);
    msgpack_zone zone;
    if (!b || !msgpack_zone_init(&zone, 4096)) {
        free(b);
        return wire_fail(err, errlen, SLUICE_ERR_NOMEM,
                         "out of memory decoding a frame of %zu bytes", len);
    }
    msgpack_object o;
    bool ok = unpack_at(p, len, lo.id, &zone, &o) && o.type == MSGPACK_OBJECT_ARRAY &&
              o.via.array.size == 3;
    if (ok) {
        b->id.epoch = (uint32_t)o.via.array.ptr[0].via.u64;
        b->id.task = o.via.array.ptr[1].via.u64;
        b->id.seq = (uint32_t)o.via.array.ptr[2].via.u64;
    }
    if (ok && lo.p) {
        ok = unpack_at(p, len, lo.p, &zone, &o) && o.type == MSGPACK_OBJECT_STR &&
             o.via.str.size <= SLUICE_MAX_PRODUCER_ID;
        if (ok && o.via.str.size > 0)
            memcpy(b->producer, o.via.str.ptr, o.via.str.size);
    }
    if (ok && lo.t) {
        ok = unpack_at(p, len, lo.t, &zone, &o) && o.type == MSGPACK_OBJECT_POSITIVE_INTEGER;
        if (ok)
            b->created_us = o.via.u64;
    }
    if (ok) {
        ok = unpack_at(p, len, lo.n, &zone, &o) && o.type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
             o.via.u64 <= SIZE_MAX;
        if (ok)
            b->nrecords = (size_t)o.via.u64;
    }
    /* The validator checked every type and count below; msgpack-c reading
     * the same bytes differently is reported, not trusted. */
    if (ok && lo.r)
        ok = unpack_at(p, len, lo.r, &zone, &o) && o.type == MSGPACK_OBJECT_ARRAY &&
             o.via.array.size == b->nrecords && build_records(b, p, len, &o);
    else if (ok)
        ok = unpack_at(p, len, lo.x, &zone, &o) && o.type == MSGPACK_OBJECT_MAP &&
             build_tensors(b, p, len, &o);
    /* Nothing points into the zone any more. */
    msgpack_zone_destroy(&zone);
    if (!ok) {
        sluice_batch_free(b);
        return wire_fail(
            err, errlen, SLUICE_ERR_NOMEM,
            "out of memory (or msgpack-c disagreed with the validator) decoding a frame "
            "of %zu bytes",
            len);
    }
    b->frame_bytes = len;
    b->zone = NULL;
    b->frame_free = frame_free;
    b->frame_owner = frame_owner;
    b->room = room;
    *out = b;
    return SLUICE_OK;
}

/* A compressed frame too: producers write them on a queue with compression. */
sluice_err sluice_wire_decode(const void *p, size_t len, size_t max_bytes, sluice_batch **out)
{
    return sluicei_zframe_decode(NULL, p, len, max_bytes, 0, NULL, NULL, out, NULL, 0);
}
