/* Batch wire format v1, encoding: a record batch or a tensor batch into a
 * v1 frame (docs/PROTOCOL.md), in a growable buffer (sluicei_buf) that is
 * reused across encodes. The encoder refuses what a decoder would refuse,
 * so that a frame it writes always passes the validator (wire_check.c). */
#include "wire.h"

#include "bufcache.h"

#include <msgpack.h>

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* sluicei_buf                                                              */

sluice_err sluicei_buf_reserve(sluicei_buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return SLUICE_OK;
    if (extra > SIZE_MAX - b->len)
        return SLUICE_ERR_NOMEM;
    size_t need = b->len + extra;
    /* Double for small appends; take exactly what a big reservation asks
     * for, so an encoder's up-front reserve does not overshoot 2x. */
    size_t cap = b->cap > SIZE_MAX / 2 ? SIZE_MAX : b->cap * 2;
    if (cap < 256)
        cap = 256;
    if (cap < need)
        cap = need;
    /* A first buffer of some size comes from the cache of freed ones
     * (bufcache.h): fresh memory would be faulted in page by page. */
    uint8_t *d = b->data || cap < SLUICEI_BUFCACHE_MIN ? realloc(b->data, cap)
                                                       : sluicei_bufcache_get(cap);
    if (!d)
        return SLUICE_ERR_NOMEM;
    b->data = d;
    b->cap = cap;
    return SLUICE_OK;
}

sluice_err sluicei_buf_append(sluicei_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return SLUICE_OK;
    sluice_err e = sluicei_buf_reserve(b, n);
    if (e != SLUICE_OK)
        return e;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return SLUICE_OK;
}

void sluicei_buf_free(sluicei_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                 */

/* msgpack_packer write callback: nonzero tells the packer we ran out of
 * memory, and every pack call returns it. */
static int buf_write(void *data, const char *p, size_t n)
{
    return sluicei_buf_append(data, p, n) == SLUICE_OK ? 0 : -1;
}

/* Saturating sum, so size estimates cannot wrap. */
static size_t add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static int pack_key(msgpack_packer *pk, const char *k)
{
    size_t n = strlen(k);
    return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, k, n);
}

/* Packs "v", "id", "p", "t", "n": the five keys every encoded frame starts
 * with. The caller has packed the map header. */
static int pack_meta(msgpack_packer *pk, const sluicei_batch_meta *m, const char *producer,
                     size_t plen, uint64_t n)
{
    return pack_key(pk, "v") || msgpack_pack_uint64(pk, SLUICE_WIRE_VERSION) ||
           pack_key(pk, "id") || msgpack_pack_array(pk, 3) ||
           msgpack_pack_uint64(pk, m->id.epoch) || msgpack_pack_uint64(pk, m->id.task) ||
           msgpack_pack_uint64(pk, m->id.seq) || pack_key(pk, "p") ||
           msgpack_pack_str(pk, plen) || msgpack_pack_str_body(pk, producer, plen) ||
           pack_key(pk, "t") || msgpack_pack_uint64(pk, m->created_us) || pack_key(pk, "n") ||
           msgpack_pack_uint64(pk, n);
}

static sluice_err check_meta(const sluicei_batch_meta *m, const char **producer, size_t *plen)
{
    if (!m)
        return SLUICE_ERR_INVALID;
    *producer = m->producer ? m->producer : "";
    *plen = strlen(*producer);
    return *plen <= SLUICE_MAX_PRODUCER_ID ? SLUICE_OK : SLUICE_ERR_INVALID;
}

/* Starts a frame of need bytes at most (SIZE_MAX: too big) in out: one
 * reservation up front, so that every byte is copied exactly once, then
 * the map of six entries, the metadata and the key of the payload, "r"
 * (records) or "x" (tensors). */
static sluice_err begin_frame(sluicei_buf *out, size_t need, msgpack_packer *pk,
                              const sluicei_batch_meta *m, const char *producer, size_t plen,
                              uint64_t n, const char *payload_key)
{
    if (need == SIZE_MAX)
        return SLUICE_ERR_TOOBIG;
    out->len = 0;
    if (sluicei_buf_reserve(out, need) != SLUICE_OK)
        return SLUICE_ERR_NOMEM;
    msgpack_packer_init(pk, out, buf_write);
    if (msgpack_pack_map(pk, 6) || pack_meta(pk, m, producer, plen, n) ||
        pack_key(pk, payload_key)) {
        out->len = 0;
        return SLUICE_ERR_NOMEM;
    }
    return SLUICE_OK;
}

sluice_err sluicei_wire_encode_records(sluicei_buf *out, const sluicei_batch_meta *m,
                                       const sluice_record *recs, size_t n)
{
    const char *producer;
    size_t plen;
    sluice_err e = check_meta(m, &producer, &plen);
    if (e != SLUICE_OK)
        return e;
    if (n > 0 && !recs)
        return SLUICE_ERR_INVALID;
    /* msgpack arrays carry 32-bit lengths, and decoders refuse more records
     * than SLUICE_MAX_RECORDS. */
    if ((uint64_t)n > SLUICE_MAX_RECORDS)
        return SLUICE_ERR_TOOBIG;
    size_t need = add_sat(64, plen);
    for (size_t i = 0; i < n; i++) {
        if ((uint64_t)recs[i].len > UINT32_MAX)
            return SLUICE_ERR_TOOBIG;
        if (recs[i].len > 0 && !recs[i].data)
            return SLUICE_ERR_INVALID;
        need = add_sat(need, add_sat(recs[i].len, 5));
    }
    msgpack_packer pk;
    if ((e = begin_frame(out, need, &pk, m, producer, plen, n, "r")) != SLUICE_OK)
        return e;
    if (msgpack_pack_array(&pk, n))
        goto nomem;
    for (size_t i = 0; i < n; i++)
        if (msgpack_pack_bin(&pk, recs[i].len) ||
            msgpack_pack_bin_body(&pk, recs[i].data, recs[i].len))
            goto nomem;
    return SLUICE_OK;
nomem:
    out->len = 0;
    return SLUICE_ERR_NOMEM;
}

/* Checks one tensor the caller wants to encode; SLUICE_ERR_INVALID when it
 * would produce a frame the decoder refuses. */
static sluice_err check_tensor(const sluice_tensor *t, uint64_t n)
{
    if (!t->name)
        return SLUICE_ERR_INVALID;
    size_t nl = strlen(t->name);
    size_t es = sluice_dtype_size(t->dtype);
    uint64_t bytes;
    if (nl == 0 || nl > SLUICE_MAX_TENSOR_NAME || es == 0 || t->ndim < 1 ||
        t->ndim > SLUICE_MAX_DIMS || t->shape[0] != n)
        return SLUICE_ERR_INVALID;
    if (!sluicei_tensor_bytes(t->shape, t->ndim, es, &bytes) || bytes != t->nbytes)
        return SLUICE_ERR_INVALID;
    if (t->nbytes > 0 && !t->data)
        return SLUICE_ERR_INVALID;
    if ((uint64_t)t->nbytes > UINT32_MAX)
        return SLUICE_ERR_TOOBIG;
    return SLUICE_OK;
}

sluice_err sluicei_wire_encode_tensors(sluicei_buf *out, const sluicei_batch_meta *m, uint64_t n,
                                       const sluice_tensor *t, size_t nt)
{
    const char *producer;
    size_t plen;
    sluice_err e = check_meta(m, &producer, &plen);
    if (e != SLUICE_OK)
        return e;
    if (nt > SLUICE_MAX_TENSORS || (nt > 0 && !t))
        return SLUICE_ERR_INVALID;
    if (n > SLUICE_MAX_RECORDS)
        return SLUICE_ERR_TOOBIG;   /* decoders refuse it (see sluicei_wire_encode_records) */
    size_t need = add_sat(64, plen);
    for (size_t i = 0; i < nt; i++) {
        if ((e = check_tensor(&t[i], n)) != SLUICE_OK)
            return e;
        /* Duplicate names would make the decoder refuse the frame. */
        for (size_t j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return SLUICE_ERR_INVALID;
        need = add_sat(need, add_sat(t[i].nbytes, 128));
    }
    msgpack_packer pk;
    if ((e = begin_frame(out, need, &pk, m, producer, plen, n, "x")) != SLUICE_OK)
        return e;
    if (msgpack_pack_map(&pk, nt))
        goto nomem;
    for (size_t i = 0; i < nt; i++) {
        const char *dn = sluice_dtype_name(t[i].dtype);
        if (pack_key(&pk, t[i].name) || msgpack_pack_map(&pk, 3) || pack_key(&pk, "dtype") ||
            pack_key(&pk, dn) || pack_key(&pk, "shape") ||
            msgpack_pack_array(&pk, (size_t)t[i].ndim))
            goto nomem;
        for (int d = 0; d < t[i].ndim; d++)
            if (msgpack_pack_uint64(&pk, t[i].shape[d]))
                goto nomem;
        if (pack_key(&pk, "data") || msgpack_pack_bin(&pk, t[i].nbytes) ||
            msgpack_pack_bin_body(&pk, t[i].data, t[i].nbytes))
            goto nomem;
    }
    return SLUICE_OK;
nomem:
    out->len = 0;
    return SLUICE_ERR_NOMEM;
}
