/* Batch wire format v1: pack, validate, unpack. No I/O.
 *
 * Decoding happens in three steps, and msgpack-c only sees the frame in the
 * last one, because its C unpacker trusts every length it reads (the five
 * bytes dd 20 00 00 00 make it reserve 16 GiB):
 *
 *   1. walk_structure(): a hand-written, allocation-free walk over the raw
 *      bytes with an explicit stack of SLUICE_MAX_DEPTH entries. Every
 *      str/bin/ext length must fit in the bytes that remain, every array
 *      count too (an element takes at least one byte), every map count
 *      twice over, and the buffer must hold exactly one object. On the
 *      way it notes where the value of each known top-level key starts.
 *   2. check_schema(): the v1 schema (docs/PROTOCOL.md) on the same bytes.
 *   3. sluicei_wire_decode(): msgpack-c unpacks the value of each known key
 *      (never the unknown ones, so a peer cannot make msgpack-c build
 *      objects for data we ignore) and the batch is built from its objects.
 *      msgpack-c's C unpacker makes str/bin objects point into the input,
 *      so records and tensor data point into the frame and its zone can be
 *      freed before returning.
 */
#include "wire.h"

#include <msgpack.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

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
static bool tensor_bytes(const uint64_t *shape, int ndim, size_t elem, uint64_t *out)
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
    uint8_t *d = realloc(b->data, cap);
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
    if (need == SIZE_MAX)
        return SLUICE_ERR_TOOBIG;

    out->len = 0;
    /* One reservation up front: every record is copied exactly once. */
    if (sluicei_buf_reserve(out, need) != SLUICE_OK)
        return SLUICE_ERR_NOMEM;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, buf_write);
    if (msgpack_pack_map(&pk, 6) || pack_meta(&pk, m, producer, plen, n) || pack_key(&pk, "r") ||
        msgpack_pack_array(&pk, n))
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
    if (!tensor_bytes(t->shape, t->ndim, es, &bytes) || bytes != t->nbytes)
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
    if (need == SIZE_MAX)
        return SLUICE_ERR_TOOBIG;

    out->len = 0;
    if (sluicei_buf_reserve(out, need) != SLUICE_OK)
        return SLUICE_ERR_NOMEM;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, buf_write);
    if (msgpack_pack_map(&pk, 6) || pack_meta(&pk, m, producer, plen, n) || pack_key(&pk, "x") ||
        msgpack_pack_map(&pk, nt))
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

/* ------------------------------------------------------------------------ */
/* Reading raw msgpack                                                      */

static PRINTF_LIKE(4, 5) sluice_err fail(char *err, size_t errlen, sluice_err code,
                                         const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

enum kind { K_NIL, K_BOOL, K_UINT, K_NEG, K_FLOAT, K_STR, K_BIN, K_EXT, K_ARRAY, K_MAP };

static const char *const kind_names[] = {"nil", "bool", "uint", "int", "float",
                                         "str", "bin", "ext", "array", "map"};

/* One decoded msgpack header. */
struct hdr {
    enum kind kind;
    size_t off;    /* where the header starts */
    size_t body;   /* where the payload or the first element starts */
    uint64_t u;    /* K_UINT: value; K_STR/K_BIN/K_EXT: payload bytes;
                    * K_ARRAY: elements; K_MAP: entries */
    size_t end;    /* first byte after a scalar/str/bin/ext, == body for
                    * containers */
};

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static int64_t sext(uint64_t v, int bytes)
{
    /* Sign-extend without relying on implementation-defined conversions. */
    uint64_t sign = (uint64_t)1 << (bytes * 8 - 1);
    if (bytes == 8)
        return v & sign ? -(int64_t)(~v) - 1 : (int64_t)v;
    return (int64_t)(v ^ sign) - (int64_t)sign;
}

/* Reads the header at off. Never reads outside p[0..len); fails unless the
 * payload of a str/bin/ext fits in what remains and an array/map could hold
 * its elements at one byte each. A non-negative value stored in a signed
 * encoding is a K_UINT, as msgpack-c reads it. */
static sluice_err read_hdr(const uint8_t *p, size_t len, size_t off, struct hdr *h, char *err,
                           size_t errlen)
{
    if (off >= len)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: frame ends where a value should start",
                    off);
    uint8_t c = p[off];
    int extra = 0;      /* header bytes after the type byte */
    int lenbytes = 0;   /* of those, how many encode a length or count */
    uint64_t fixed = 0; /* payload bytes of fixed-size types */
    h->off = off;
    h->u = 0;
    if (c <= 0x7f) {
        h->kind = K_UINT;
        h->u = c;
    } else if (c <= 0x8f) {
        h->kind = K_MAP;
        h->u = c & 0x0f;
    } else if (c <= 0x9f) {
        h->kind = K_ARRAY;
        h->u = c & 0x0f;
    } else if (c <= 0xbf) {
        h->kind = K_STR;
        h->u = c & 0x1f;
    } else if (c >= 0xe0) {
        h->kind = K_NEG;
    } else {
        switch (c) {
        case 0xc0: h->kind = K_NIL; break;
        case 0xc2: case 0xc3: h->kind = K_BOOL; break;
        case 0xc4: case 0xc5: case 0xc6:
            h->kind = K_BIN; extra = lenbytes = 1 << (c - 0xc4); break;
        case 0xc7: case 0xc8: case 0xc9:
            h->kind = K_EXT; lenbytes = 1 << (c - 0xc7); extra = lenbytes + 1; break;
        case 0xca: h->kind = K_FLOAT; fixed = 4; break;
        case 0xcb: h->kind = K_FLOAT; fixed = 8; break;
        case 0xcc: case 0xcd: case 0xce: case 0xcf:
            h->kind = K_UINT; extra = 1 << (c - 0xcc); break;
        case 0xd0: case 0xd1: case 0xd2: case 0xd3:
            h->kind = K_NEG; extra = 1 << (c - 0xd0); break;
        case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
            h->kind = K_EXT; extra = 1; h->u = (uint64_t)1 << (c - 0xd4); break;
        case 0xd9: case 0xda: case 0xdb:
            h->kind = K_STR; extra = lenbytes = 1 << (c - 0xd9); break;
        case 0xdc: case 0xdd:
            h->kind = K_ARRAY; extra = lenbytes = 2 << (c - 0xdc); break;
        case 0xde: case 0xdf:
            h->kind = K_MAP; extra = lenbytes = 2 << (c - 0xde); break;
        default:
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: invalid type byte 0x%02x", off,
                        c);
        }
    }
    if ((size_t)extra > len - off - 1)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: type byte 0x%02x needs %d more bytes but only %zu remain", off, c,
                    extra, len - off - 1);
    const uint8_t *x = p + off + 1;
    if (lenbytes)
        h->u = be(x, lenbytes);
    else if (h->kind == K_UINT && extra)
        h->u = be(x, extra);
    else if (h->kind == K_NEG && extra) {
        int64_t v = sext(be(x, extra), extra);
        if (v >= 0) {
            h->kind = K_UINT;
            h->u = (uint64_t)v;
        }
    }
    h->body = off + 1 + (size_t)extra;
    size_t left = len - h->body;
    switch (h->kind) {
    case K_STR: case K_BIN: case K_EXT:
        if (h->u > left)
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: %s of %llu bytes but only %zu bytes remain", h->body,
                        kind_names[h->kind], (unsigned long long)h->u, left);
        h->end = h->body + (size_t)h->u;
        break;
    case K_ARRAY:
        if (h->u > left)
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: array of %llu elements but only %zu bytes remain", h->body,
                        (unsigned long long)h->u, left);
        h->end = h->body;
        break;
    case K_MAP:
        if (h->u * 2 > left)
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: map of %llu entries but only %zu bytes remain", h->body,
                        (unsigned long long)h->u, left);
        h->end = h->body;
        break;
    default:
        if (fixed > left)
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: %s needs %llu bytes but only %zu remain", h->body,
                        kind_names[h->kind], (unsigned long long)fixed, left);
        h->end = h->body + (size_t)fixed;
        break;
    }
    return SLUICE_OK;
}

/* Skips the object at *off, however deeply nested, without recursion: it
 * counts the objects still owed. Safe on unvalidated bytes because
 * read_hdr() bounds every count by the bytes that remain. */
static sluice_err skip_obj(const uint8_t *p, size_t len, size_t *off, char *err, size_t errlen)
{
    uint64_t owed = 1;
    size_t o = *off;
    while (owed > 0) {
        struct hdr h;
        sluice_err e = read_hdr(p, len, o, &h, err, errlen);
        if (e != SLUICE_OK)
            return e;
        owed--;
        if (h.kind == K_ARRAY)
            owed += h.u;
        else if (h.kind == K_MAP)
            owed += h.u * 2;
        o = h.end;
    }
    *off = o;
    return SLUICE_OK;
}

/* Where the value of each known top-level key starts; 0 when absent (a
 * value never starts at offset 0). */
struct layout {
    size_t v, id, p, t, n, r, x;
};

static bool str_is(const uint8_t *p, const struct hdr *h, const char *s)
{
    size_t n = strlen(s);
    return h->kind == K_STR && h->u == n && memcmp(p + h->body, s, n) == 0;
}

/* Records in *lo where the value of the top-level key k starts. */
static sluice_err note_key(const uint8_t *p, const struct hdr *k, struct layout *lo, char *err,
                           size_t errlen)
{
    if (k->kind != K_STR)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: top-level key is a %s, not a str",
                    k->off, kind_names[k->kind]);
    size_t *slot = str_is(p, k, "v")    ? &lo->v
                   : str_is(p, k, "id") ? &lo->id
                   : str_is(p, k, "p")  ? &lo->p
                   : str_is(p, k, "t")  ? &lo->t
                   : str_is(p, k, "n")  ? &lo->n
                   : str_is(p, k, "r")  ? &lo->r
                   : str_is(p, k, "x")  ? &lo->x
                                        : NULL;
    if (slot && *slot)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL, "offset %zu: field \"%.*s\" appears twice",
                    k->off, (int)k->u, (const char *)p + k->body);
    if (slot)
        *slot = k->end;
    return SLUICE_OK;
}

/* Step 1: p[0..len) holds exactly one object, nested at most
 * SLUICE_MAX_DEPTH containers deep, with every length in bounds. Each
 * object takes at least one byte, so this runs at most len iterations.
 * Fills *lo on the way. */
static sluice_err walk_structure(const uint8_t *p, size_t len, struct layout *lo, char *err,
                                 size_t errlen)
{
    uint64_t owed[SLUICE_MAX_DEPTH]; /* elements still due in each open container */
    int depth = 0;
    size_t off = 0;
    memset(lo, 0, sizeof *lo);
    for (;;) {
        struct hdr h;
        sluice_err e = read_hdr(p, len, off, &h, err, errlen);
        if (e != SLUICE_OK)
            return e;
        off = h.end;
        /* Inside the frame's map an even number of elements still due
         * means a key: note where known values start, in this same pass. */
        if (depth == 1 && owed[0] % 2 == 0 && (e = note_key(p, &h, lo, err, errlen)) != SLUICE_OK)
            return e;
        if (h.kind == K_ARRAY || h.kind == K_MAP) {
            if (depth == SLUICE_MAX_DEPTH)
                return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                            "offset %zu: %s nested deeper than %d levels", h.off,
                            kind_names[h.kind], SLUICE_MAX_DEPTH);
            if (h.u > 0) {
                owed[depth++] = h.kind == K_MAP ? h.u * 2 : h.u;
                continue;
            }
        }
        /* An object is complete: close every container it completes. */
        while (depth > 0 && --owed[depth - 1] == 0)
            depth--;
        if (depth == 0)
            break;
    }
    if (off != len)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: %zu trailing bytes after the frame",
                    off, len - off);
    return SLUICE_OK;
}

/* Copies up to 64 bytes of an attacker-chosen string into out[65] for an
 * error message: anything but printable ASCII becomes '?', so the message
 * stays one line. */
static const char *printable(const uint8_t *s, size_t n, char out[65])
{
    size_t i;
    for (i = 0; i < n && i < 64; i++)
        out[i] = s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' ? (char)s[i] : '?';
    out[i] = '\0';
    return out;
}

static sluice_err read_uint(const uint8_t *p, size_t len, size_t off, const char *field,
                            uint64_t *v, char *err, size_t errlen)
{
    struct hdr h;
    sluice_err e = read_hdr(p, len, off, &h, err, errlen);
    if (e != SLUICE_OK)
        return e;
    if (h.kind != K_UINT)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: field \"%s\": expected an unsigned integer, got %s", off, field,
                    kind_names[h.kind]);
    *v = h.u;
    return SLUICE_OK;
}

static sluice_err check_id(const uint8_t *p, size_t len, size_t off, sluice_batch_id *id,
                           char *err, size_t errlen)
{
    struct hdr h;
    uint64_t v[3];
    sluice_err e = read_hdr(p, len, off, &h, err, errlen);
    if (e != SLUICE_OK)
        return e;
    if (h.kind == K_ARRAY && h.u == 3) {
        size_t o = h.body;
        for (int i = 0; i < 3; i++) {
            struct hdr x;
            if ((e = read_hdr(p, len, o, &x, err, errlen)) != SLUICE_OK)
                return e;
            if (x.kind != K_UINT)
                goto bad;
            v[i] = x.u;
            o = x.end;
        }
        if (v[0] > UINT32_MAX || v[2] > UINT32_MAX)
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: field \"id\": epoch %llu or seq %llu exceeds 2^32-1", off,
                        (unsigned long long)v[0], (unsigned long long)v[2]);
        id->epoch = (uint32_t)v[0];
        id->task = v[1];
        id->seq = (uint32_t)v[2];
        return SLUICE_OK;
    }
bad:
    return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                "offset %zu: field \"id\": expected array of 3 unsigned integers", off);
}

/* Checks the version key that must come first in the map at p[0]. On
 * success *off is where the second key starts and *entries is the map's
 * size. */
static sluice_err check_head(const uint8_t *p, size_t len, size_t *off, uint64_t *entries,
                             char *err, size_t errlen)
{
    struct hdr m, k, v;
    sluice_err e = read_hdr(p, len, 0, &m, err, errlen);
    if (e != SLUICE_OK)
        return e;
    if (m.kind != K_MAP)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL, "offset 0: frame is not a map (got %s)",
                    kind_names[m.kind]);
    if (m.u == 0)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL, "offset %zu: first key is not \"v\"", m.body);
    if ((e = read_hdr(p, len, m.body, &k, err, errlen)) != SLUICE_OK)
        return e;
    if (!str_is(p, &k, "v"))
        return fail(err, errlen, SLUICE_ERR_PROTOCOL, "offset %zu: first key is not \"v\"", m.body);
    if ((e = read_hdr(p, len, k.end, &v, err, errlen)) != SLUICE_OK)
        return e;
    if (v.kind != K_UINT || v.u == 0)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: field \"v\": expected a positive integer, got %s", k.end,
                    v.kind == K_UINT ? "0" : kind_names[v.kind]);
    if (v.u != SLUICE_WIRE_VERSION)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: unsupported wire version %llu (this library reads %d)", k.end,
                    (unsigned long long)v.u, SLUICE_WIRE_VERSION);
    *off = v.end;
    *entries = m.u;
    return SLUICE_OK;
}

static sluice_err check_records(const uint8_t *p, size_t len, size_t off, uint64_t n, char *err,
                                size_t errlen)
{
    struct hdr h;
    sluice_err e = read_hdr(p, len, off, &h, err, errlen);
    if (e != SLUICE_OK)
        return e;
    if (h.kind != K_ARRAY)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: field \"r\": expected an array of bin, got %s", off,
                    kind_names[h.kind]);
    if (h.u != n)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: field \"r\": %llu records but \"n\" is %llu", off,
                    (unsigned long long)h.u, (unsigned long long)n);
    /* The decoder allocates a 16-byte entry per record: bound it by a named
     * limit, not only by the frame (a frame of empty records would ask for
     * eight times its size). */
    if (n > SLUICE_MAX_RECORDS)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: field \"r\": %llu records, more than the limit of %d per batch",
                    off, (unsigned long long)n, SLUICE_MAX_RECORDS);
    size_t o = h.body;
    for (uint64_t i = 0; i < n; i++) {
        struct hdr x;
        if ((e = read_hdr(p, len, o, &x, err, errlen)) != SLUICE_OK)
            return e;
        if (x.kind != K_BIN && x.kind != K_STR)
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: field \"r\": record %llu is a %s, not bin or str", o,
                        (unsigned long long)i, kind_names[x.kind]);
        o = x.end;
    }
    return SLUICE_OK;
}

/* Checks one {dtype, shape, data} map; name is printable, for messages. */
static sluice_err check_tensor_map(const uint8_t *p, size_t len, size_t off, const char *name,
                                   uint64_t n, char *err, size_t errlen)
{
    struct hdr h, k, v;
    sluice_err e = read_hdr(p, len, off, &h, err, errlen);
    if (e != SLUICE_OK)
        return e;
    if (h.kind != K_MAP)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: tensor \"%s\": expected a map, got %s", off, name,
                    kind_names[h.kind]);
    size_t o = h.body, at_dtype = 0, at_shape = 0, at_data = 0;
    sluice_dtype dt = SLUICE_DTYPE_INVALID;
    uint64_t shape[SLUICE_MAX_DIMS] = {0};
    int ndim = 0;
    uint64_t datalen = 0;
    for (uint64_t i = 0; i < h.u; i++) {
        if ((e = read_hdr(p, len, o, &k, err, errlen)) != SLUICE_OK)
            return e;
        if (k.kind != K_STR)
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: tensor \"%s\": key is a %s, not a str", o, name,
                        kind_names[k.kind]);
        size_t vo = k.end;
        if ((e = read_hdr(p, len, vo, &v, err, errlen)) != SLUICE_OK)
            return e;
        size_t *seen = str_is(p, &k, "dtype") ? &at_dtype
                       : str_is(p, &k, "shape") ? &at_shape
                       : str_is(p, &k, "data")  ? &at_data
                                                : NULL;
        if (seen && *seen)
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: tensor \"%s\": key \"%.*s\" appears twice", o, name,
                        (int)k.u, (const char *)p + k.body);
        if (seen)
            *seen = vo;
        if (seen == &at_dtype) {
            if (v.kind != K_STR)
                return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                            "offset %zu: tensor \"%s\": expected \"dtype\" as str, got %s", vo,
                            name, kind_names[v.kind]);
            dt = sluice_dtype_from_name((const char *)p + v.body, (size_t)v.u);
            if (dt == SLUICE_DTYPE_INVALID) {
                char buf[65];
                return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                            "offset %zu: tensor \"%s\": unknown dtype \"%s\"", vo, name,
                            printable(p + v.body, (size_t)v.u, buf));
            }
        } else if (seen == &at_shape) {
            if (v.kind != K_ARRAY || v.u < 1 || v.u > SLUICE_MAX_DIMS)
                goto bad_shape;
            size_t so = v.body;
            for (uint64_t d = 0; d < v.u; d++) {
                struct hdr x;
                if ((e = read_hdr(p, len, so, &x, err, errlen)) != SLUICE_OK)
                    return e;
                if (x.kind != K_UINT)
                    goto bad_shape;
                shape[d] = x.u;
                so = x.end;
            }
            ndim = (int)v.u;
        } else if (seen == &at_data) {
            if (v.kind != K_BIN)
                return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                            "offset %zu: tensor \"%s\": expected \"data\" as bin, got %s", vo,
                            name, kind_names[v.kind]);
            datalen = v.u;
        }
        o = vo;
        if ((e = skip_obj(p, len, &o, err, errlen)) != SLUICE_OK)
            return e;
    }
    if (!at_dtype || !at_shape || !at_data)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL, "offset %zu: tensor \"%s\": missing \"%s\"",
                    off, name, !at_dtype ? "dtype" : !at_shape ? "shape" : "data");
    if (shape[0] != n)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: tensor \"%s\": shape[0] is %llu but \"n\" is %llu", at_shape, name,
                    (unsigned long long)shape[0], (unsigned long long)n);
    uint64_t need;
    if (!tensor_bytes(shape, ndim, sluice_dtype_size(dt), &need))
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: tensor \"%s\": shape and dtype overflow 64 bits", at_shape, name);
    if (need != datalen)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: tensor \"%s\": data is %llu bytes, shape and dtype need %llu",
                    at_data, name, (unsigned long long)datalen, (unsigned long long)need);
    return SLUICE_OK;
bad_shape:
    return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                "offset %zu: tensor \"%s\": expected \"shape\" as array of 1 to %d unsigned "
                "integers",
                at_shape, name, SLUICE_MAX_DIMS);
}

static sluice_err check_tensors(const uint8_t *p, size_t len, size_t off, uint64_t n, char *err,
                                size_t errlen)
{
    struct hdr h;
    sluice_err e = read_hdr(p, len, off, &h, err, errlen);
    if (e != SLUICE_OK)
        return e;
    if (h.kind != K_MAP)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: field \"x\": expected a map of tensors, got %s", off,
                    kind_names[h.kind]);
    if (h.u > SLUICE_MAX_TENSORS)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "offset %zu: field \"x\": %llu tensors, at most %d allowed", off,
                    (unsigned long long)h.u, SLUICE_MAX_TENSORS);
    struct hdr names[SLUICE_MAX_TENSORS];
    size_t o = h.body;
    for (uint64_t i = 0; i < h.u; i++) {
        struct hdr *k = &names[i];
        char name[65];
        if ((e = read_hdr(p, len, o, k, err, errlen)) != SLUICE_OK)
            return e;
        if (k->kind != K_STR || k->u == 0 || k->u > SLUICE_MAX_TENSOR_NAME)
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: field \"x\": tensor name must be a str of 1 to %d bytes", o,
                        SLUICE_MAX_TENSOR_NAME);
        printable(p + k->body, (size_t)k->u, name);
        /* The name becomes a C string: an embedded NUL would hide its tail. */
        if (memchr(p + k->body, 0, (size_t)k->u))
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: tensor \"%s\": name contains a NUL byte", o, name);
        for (uint64_t j = 0; j < i; j++)
            if (names[j].u == k->u && memcmp(p + names[j].body, p + k->body, (size_t)k->u) == 0)
                return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                            "offset %zu: tensor \"%s\" appears twice", o, name);
        o = k->end;
        if ((e = check_tensor_map(p, len, o, name, n, err, errlen)) != SLUICE_OK)
            return e;
        if ((e = skip_obj(p, len, &o, err, errlen)) != SLUICE_OK)
            return e;
    }
    return SLUICE_OK;
}

/* Step 2: the v1 schema, given where walk_structure() found each known
 * value ("v" was checked by check_head()). */
static sluice_err check_schema(const uint8_t *p, size_t len, const struct layout *lo, char *err,
                               size_t errlen)
{
    sluice_err e;
    sluice_batch_id id;
    uint64_t t, n;
    if (!lo->id)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL, "missing field \"id\"");
    if ((e = check_id(p, len, lo->id, &id, err, errlen)) != SLUICE_OK)
        return e;
    if (lo->p) {
        struct hdr h;
        if ((e = read_hdr(p, len, lo->p, &h, err, errlen)) != SLUICE_OK)
            return e;
        if (h.kind != K_STR || h.u > SLUICE_MAX_PRODUCER_ID)
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: field \"p\": expected a str of at most %d bytes", lo->p,
                        SLUICE_MAX_PRODUCER_ID);
        if (memchr(p + h.body, 0, (size_t)h.u))
            return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                        "offset %zu: field \"p\": contains a NUL byte", lo->p);
    }
    if (lo->t && (e = read_uint(p, len, lo->t, "t", &t, err, errlen)) != SLUICE_OK)
        return e;
    if (!lo->n)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL, "missing field \"n\"");
    if ((e = read_uint(p, len, lo->n, "n", &n, err, errlen)) != SLUICE_OK)
        return e;
    /* Every frame: readers loop over n (sluice_batch_num_records()), and a
     * tensor batch need not carry n in bytes (no tensors, or a dimension of
     * 0), so n is bounded by the named limit, not by the frame. */
    if (n > SLUICE_MAX_RECORDS)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "field \"n\": %llu rows, more than the limit of %d per batch",
                    (unsigned long long)n, SLUICE_MAX_RECORDS);
    if (lo->r && lo->x)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL,
                    "fields \"r\" and \"x\" both present; a frame carries one of them");
    if (lo->r)
        return check_records(p, len, lo->r, n, err, errlen);
    if (lo->x)
        return check_tensors(p, len, lo->x, n, err, errlen);
    return fail(err, errlen, SLUICE_ERR_PROTOCOL, "missing field \"r\" or \"x\"");
}

static sluice_err validate(const void *p, size_t len, size_t max_bytes, struct layout *lo,
                           char *err, size_t errlen)
{
    if (len > max_bytes)
        return fail(err, errlen, SLUICE_ERR_TOOBIG, "frame of %zu bytes exceeds the maximum of %zu",
                    len, max_bytes);
    if (!p || len == 0)
        return fail(err, errlen, SLUICE_ERR_PROTOCOL, "empty frame");
    /* The version first (check_head() is safe on unchecked bytes), so that
     * a frame of a later version is reported as such rather than by
     * whatever v1 rule it breaks. */
    size_t off;
    uint64_t entries;
    sluice_err e = check_head(p, len, &off, &entries, err, errlen);
    if (e != SLUICE_OK)
        return e;
    if ((e = walk_structure(p, len, lo, err, errlen)) != SLUICE_OK)
        return e;
    return check_schema(p, len, lo, err, errlen);
}

sluice_err sluicei_wire_validate(const void *p, size_t len, size_t max_bytes, char *err,
                                 size_t errlen)
{
    struct layout lo;
    return validate(p, len, max_bytes, &lo, err, errlen);
}

sluice_err sluicei_wire_peek_id(const void *p, size_t len, sluice_batch_id *id)
{
    size_t off;
    uint64_t entries;
    if (!p || len == 0 || check_head(p, len, &off, &entries, NULL, 0) != SLUICE_OK)
        return SLUICE_ERR_PROTOCOL;
    /* Encoders put "id" second, so this normally reads one key. */
    for (uint64_t i = 1; i < entries; i++) {
        struct hdr k;
        if (read_hdr(p, len, off, &k, NULL, 0) != SLUICE_OK || k.kind != K_STR)
            return SLUICE_ERR_PROTOCOL;
        if (str_is(p, &k, "id"))
            return check_id(p, len, k.end, id, NULL, 0);
        off = k.end;
        if (skip_obj(p, len, &off, NULL, 0) != SLUICE_OK)
            return SLUICE_ERR_PROTOCOL;
    }
    return SLUICE_ERR_PROTOCOL;
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                 */

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

/* Where the room reserved after a batch starts: past the struct, aligned
 * for any type. */
#define ROOM_AT                                                                                  \
    ((sizeof(sluice_batch) + _Alignof(max_align_t) - 1) / _Alignof(max_align_t) *               \
     _Alignof(max_align_t))

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
    struct layout lo;
    *out = NULL;
    sluice_err e = validate(p, len, max_bytes, &lo, err, errlen);
    if (e != SLUICE_OK)
        return e;

    sluice_batch *b = calloc(1, room ? ROOM_AT + room : sizeof *b);
    msgpack_zone zone;
    if (!b || !msgpack_zone_init(&zone, 4096)) {
        free(b);
        return fail(err, errlen, SLUICE_ERR_NOMEM, "out of memory decoding a frame of %zu bytes",
                    len);
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
        return fail(err, errlen, SLUICE_ERR_NOMEM,
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

sluice_err sluice_wire_decode(const void *p, size_t len, size_t max_bytes, sluice_batch **out)
{
    return sluicei_wire_decode(p, len, max_bytes, NULL, NULL, out, NULL, 0);
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                */

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
