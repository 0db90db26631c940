/* Batch wire format v1, validation: checks a frame whole, without
 * allocating, before anything unpacks it (wire_check.h).
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
 *   3. sluicei_wire_decode() (wire_decode.c): msgpack-c unpacks the value
 *      of each known key (never the unknown ones, so a peer cannot make
 *      msgpack-c build objects for data we ignore) and the batch is built
 *      from its objects.
 */
#include "wire_check.h"

#include "mpack.h"
#include "zframe.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Reading raw msgpack                                                      */

sluice_err wire_fail(char *err, size_t errlen, sluice_err code, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Indexed by sluicei_mp_kind. */
static const char *const kind_names[] = {"nil", "bool", "uint", "int", "float",
                                         "str", "bin", "ext", "array", "map"};

/* One decoded msgpack header, at its place in the frame. */
struct hdr {
    sluicei_mp_kind kind;
    size_t off;    /* where the header starts */
    size_t body;   /* where the payload or the first element starts */
    uint64_t u;    /* UINT: value; STR/BIN/EXT: payload bytes;
                    * ARRAY: elements; MAP: entries */
    size_t end;    /* first byte after a scalar/str/bin/ext, == body for
                    * containers */
};

/* Reads the header at off. Never reads outside p[0..len); fails unless the
 * payload of a str/bin/ext fits in what remains and an array/map could hold
 * its elements at one byte each. A non-negative value stored in a signed
 * encoding is a UINT, as msgpack-c reads it. The lengths are
 * sluicei_mp_head()'s (mpack.h); the messages say which one failed. */
static sluice_err read_hdr(const uint8_t *p, size_t len, size_t off, struct hdr *h, char *err,
                           size_t errlen)
{
    if (off >= len)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: frame ends where a value should start", off);
    sluicei_mp_hdr m;
    int r = sluicei_mp_head(p + off, len - off, &m);
    uint8_t c = p[off];
    if (r == SLUICEI_MP_BAD)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL, "offset %zu: invalid type byte 0x%02x",
                         off, c);
    if (m.size > len - off)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: type byte 0x%02x needs %u more bytes but only %zu remain",
                         off, c, m.size - 1, len - off - 1);
    h->kind = m.kind;
    h->off = off;
    h->u = m.u;
    h->body = off + m.size;
    size_t left = len - h->body;
    switch (h->kind) {
    case SLUICEI_MP_STR: case SLUICEI_MP_BIN: case SLUICEI_MP_EXT:
        if (r != SLUICEI_MP_OK)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "offset %zu: %s of %llu bytes but only %zu bytes remain", h->body,
                             kind_names[h->kind], (unsigned long long)h->u, left);
        break;
    case SLUICEI_MP_ARRAY:
        if (h->u > left)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "offset %zu: array of %llu elements but only %zu bytes remain",
                             h->body, (unsigned long long)h->u, left);
        break;
    case SLUICEI_MP_MAP:
        if (h->u * 2 > left)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "offset %zu: map of %llu entries but only %zu bytes remain", h->body,
                             (unsigned long long)h->u, left);
        break;
    default:
        if (r != SLUICEI_MP_OK)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "offset %zu: %s needs %llu bytes but only %zu remain", h->body,
                             kind_names[h->kind], (unsigned long long)m.payload, left);
        break;
    }
    h->end = h->body + (size_t)m.payload;
    return SLUICE_OK;
}

/* Skips the object at *off, however deeply nested, without recursion
 * (sluicei_mp_skip()). Safe on unvalidated bytes: the walk ends within the
 * bytes that remain. */
static sluice_err skip_obj(const uint8_t *p, size_t len, size_t *off, char *err, size_t errlen)
{
    sluicei_mp_scan st = {0, 0};
    size_t n;
    if (*off <= len && sluicei_mp_skip(p + *off, len - *off, &st, &n) == SLUICEI_MP_OK) {
        *off += n;
        return SLUICE_OK;
    }
    /* The walk stopped at a header read_hdr() refuses too; it says why. */
    struct hdr h;
    sluice_err e = read_hdr(p, len, *off + st.at, &h, err, errlen);
    return e != SLUICE_OK ? e
                          : wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                                      "offset %zu: value cut short", *off + st.at);
}

static bool str_is(const uint8_t *p, const struct hdr *h, const char *s)
{
    size_t n = strlen(s);
    return h->kind == SLUICEI_MP_STR && h->u == n && memcmp(p + h->body, s, n) == 0;
}

/* Records in *lo where the value of the top-level key k starts. */
static sluice_err note_key(const uint8_t *p, const struct hdr *k, struct wire_layout *lo, char *err,
                           size_t errlen)
{
    if (k->kind != SLUICEI_MP_STR)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: top-level key is a %s, not a str", k->off,
                         kind_names[k->kind]);
    size_t *slot = str_is(p, k, "v")    ? &lo->v
                   : str_is(p, k, "id") ? &lo->id
                   : str_is(p, k, "p")  ? &lo->p
                   : str_is(p, k, "t")  ? &lo->t
                   : str_is(p, k, "n")  ? &lo->n
                   : str_is(p, k, "r")  ? &lo->r
                   : str_is(p, k, "x")  ? &lo->x
                                        : NULL;
    if (slot && *slot)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: field \"%.*s\" appears twice", k->off, (int)k->u,
                         (const char *)p + k->body);
    if (slot)
        *slot = k->end;
    return SLUICE_OK;
}

/* Step 1: p[0..len) holds exactly one object, nested at most
 * SLUICE_MAX_DEPTH containers deep, with every length in bounds. Each
 * object takes at least one byte, so this runs at most len iterations.
 * Fills *lo on the way. */
static sluice_err walk_structure(const uint8_t *p, size_t len, struct wire_layout *lo, char *err,
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
        if (h.kind == SLUICEI_MP_ARRAY || h.kind == SLUICEI_MP_MAP) {
            if (depth == SLUICE_MAX_DEPTH)
                return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                                 "offset %zu: %s nested deeper than %d levels", h.off,
                                 kind_names[h.kind], SLUICE_MAX_DEPTH);
            if (h.u > 0) {
                owed[depth++] = h.kind == SLUICEI_MP_MAP ? h.u * 2 : h.u;
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
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: %zu trailing bytes after the frame", off, len - off);
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
    if (h.kind != SLUICEI_MP_UINT)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: field \"%s\": expected an unsigned integer, got %s", off,
                         field, kind_names[h.kind]);
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
    if (h.kind == SLUICEI_MP_ARRAY && h.u == 3) {
        size_t o = h.body;
        for (int i = 0; i < 3; i++) {
            struct hdr x;
            if ((e = read_hdr(p, len, o, &x, err, errlen)) != SLUICE_OK)
                return e;
            if (x.kind != SLUICEI_MP_UINT)
                goto bad;
            v[i] = x.u;
            o = x.end;
        }
        if (v[0] > UINT32_MAX || v[2] > UINT32_MAX)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "offset %zu: field \"id\": epoch %llu or seq %llu exceeds 2^32-1", off,
                             (unsigned long long)v[0], (unsigned long long)v[2]);
        id->epoch = (uint32_t)v[0];
        id->task = v[1];
        id->seq = (uint32_t)v[2];
        return SLUICE_OK;
    }
bad:
    return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
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
    if (m.kind != SLUICEI_MP_MAP)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL, "offset 0: frame is not a map (got %s)",
                         kind_names[m.kind]);
    if (m.u == 0)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL, "offset %zu: first key is not \"v\"",
                         m.body);
    if ((e = read_hdr(p, len, m.body, &k, err, errlen)) != SLUICE_OK)
        return e;
    if (!str_is(p, &k, "v"))
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL, "offset %zu: first key is not \"v\"",
                         m.body);
    if ((e = read_hdr(p, len, k.end, &v, err, errlen)) != SLUICE_OK)
        return e;
    if (v.kind != SLUICEI_MP_UINT || v.u == 0)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: field \"v\": expected a positive integer, got %s", k.end,
                         v.kind == SLUICEI_MP_UINT ? "0" : kind_names[v.kind]);
    if (v.u != SLUICE_WIRE_VERSION)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
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
    if (h.kind != SLUICEI_MP_ARRAY)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: field \"r\": expected an array of bin, got %s", off,
                         kind_names[h.kind]);
    if (h.u != n)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: field \"r\": %llu records but \"n\" is %llu", off,
                         (unsigned long long)h.u, (unsigned long long)n);
    /* The decoder allocates a 16-byte entry per record: bound it by a named
     * limit, not only by the frame (a frame of empty records would ask for
     * eight times its size). */
    if (n > SLUICE_MAX_RECORDS)
        return wire_fail(
            err, errlen, SLUICE_ERR_PROTOCOL,
            "offset %zu: field \"r\": %llu records, more than the limit of %d per batch", off,
            (unsigned long long)n, SLUICE_MAX_RECORDS);
    size_t o = h.body;
    for (uint64_t i = 0; i < n; i++) {
        struct hdr x;
        if ((e = read_hdr(p, len, o, &x, err, errlen)) != SLUICE_OK)
            return e;
        if (x.kind != SLUICEI_MP_BIN && x.kind != SLUICEI_MP_STR)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
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
    if (h.kind != SLUICEI_MP_MAP)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
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
        if (k.kind != SLUICEI_MP_STR)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
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
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "offset %zu: tensor \"%s\": key \"%.*s\" appears twice", o, name,
                             (int)k.u, (const char *)p + k.body);
        if (seen)
            *seen = vo;
        if (seen == &at_dtype) {
            if (v.kind != SLUICEI_MP_STR)
                return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                                 "offset %zu: tensor \"%s\": expected \"dtype\" as str, got %s", vo,
                                 name, kind_names[v.kind]);
            dt = sluice_dtype_from_name((const char *)p + v.body, (size_t)v.u);
            if (dt == SLUICE_DTYPE_INVALID) {
                char buf[65];
                return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                                 "offset %zu: tensor \"%s\": unknown dtype \"%s\"", vo, name,
                                 printable(p + v.body, (size_t)v.u, buf));
            }
        } else if (seen == &at_shape) {
            if (v.kind != SLUICEI_MP_ARRAY || v.u < 1 || v.u > SLUICE_MAX_DIMS)
                goto bad_shape;
            size_t so = v.body;
            for (uint64_t d = 0; d < v.u; d++) {
                struct hdr x;
                if ((e = read_hdr(p, len, so, &x, err, errlen)) != SLUICE_OK)
                    return e;
                if (x.kind != SLUICEI_MP_UINT)
                    goto bad_shape;
                shape[d] = x.u;
                so = x.end;
            }
            ndim = (int)v.u;
        } else if (seen == &at_data) {
            if (v.kind != SLUICEI_MP_BIN)
                return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                                 "offset %zu: tensor \"%s\": expected \"data\" as bin, got %s", vo,
                                 name, kind_names[v.kind]);
            datalen = v.u;
        }
        o = vo;
        if ((e = skip_obj(p, len, &o, err, errlen)) != SLUICE_OK)
            return e;
    }
    if (!at_dtype || !at_shape || !at_data)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: tensor \"%s\": missing \"%s\"", off, name,
                         !at_dtype   ? "dtype"
                         : !at_shape ? "shape"
                                     : "data");
    if (shape[0] != n)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: tensor \"%s\": shape[0] is %llu but \"n\" is %llu", at_shape,
                         name, (unsigned long long)shape[0], (unsigned long long)n);
    uint64_t need;
    if (!sluicei_tensor_bytes(shape, ndim, sluice_dtype_size(dt), &need))
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: tensor \"%s\": shape and dtype overflow 64 bits", at_shape,
                         name);
    if (need != datalen)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: tensor \"%s\": data is %llu bytes, shape and dtype need %llu",
                         at_data, name, (unsigned long long)datalen, (unsigned long long)need);
    return SLUICE_OK;
bad_shape:
    return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
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
    if (h.kind != SLUICEI_MP_MAP)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: field \"x\": expected a map of tensors, got %s", off,
                         kind_names[h.kind]);
    if (h.u > SLUICE_MAX_TENSORS)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: field \"x\": %llu tensors, at most %d allowed", off,
                         (unsigned long long)h.u, SLUICE_MAX_TENSORS);
    struct hdr names[SLUICE_MAX_TENSORS];
    size_t o = h.body;
    for (uint64_t i = 0; i < h.u; i++) {
        struct hdr *k = &names[i];
        char name[65];
        if ((e = read_hdr(p, len, o, k, err, errlen)) != SLUICE_OK)
            return e;
        if (k->kind != SLUICEI_MP_STR || k->u == 0 || k->u > SLUICE_MAX_TENSOR_NAME)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "offset %zu: field \"x\": tensor name must be a str of 1 to %d bytes",
                             o, SLUICE_MAX_TENSOR_NAME);
        printable(p + k->body, (size_t)k->u, name);
        /* The name becomes a C string: an embedded NUL would hide its tail. */
        if (memchr(p + k->body, 0, (size_t)k->u))
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "offset %zu: tensor \"%s\": name contains a NUL byte", o, name);
        for (uint64_t j = 0; j < i; j++)
            if (names[j].u == k->u && memcmp(p + names[j].body, p + k->body, (size_t)k->u) == 0)
                return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
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
static sluice_err check_schema(const uint8_t *p, size_t len, const struct wire_layout *lo,
                               char *err, size_t errlen)
{
    sluice_err e;
    sluice_batch_id id;
    uint64_t t, n;
    if (!lo->id)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL, "missing field \"id\"");
    if ((e = check_id(p, len, lo->id, &id, err, errlen)) != SLUICE_OK)
        return e;
    if (lo->p) {
        struct hdr h;
        if ((e = read_hdr(p, len, lo->p, &h, err, errlen)) != SLUICE_OK)
            return e;
        if (h.kind != SLUICEI_MP_STR || h.u > SLUICE_MAX_PRODUCER_ID)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "offset %zu: field \"p\": expected a str of at most %d bytes", lo->p,
                             SLUICE_MAX_PRODUCER_ID);
        if (memchr(p + h.body, 0, (size_t)h.u))
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "offset %zu: field \"p\": contains a NUL byte", lo->p);
    }
    if (lo->t && (e = read_uint(p, len, lo->t, "t", &t, err, errlen)) != SLUICE_OK)
        return e;
    if (!lo->n)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL, "missing field \"n\"");
    if ((e = read_uint(p, len, lo->n, "n", &n, err, errlen)) != SLUICE_OK)
        return e;
    /* Every frame: readers loop over n (sluice_batch_num_records()), and a
     * tensor batch need not carry n in bytes (no tensors, or a dimension of
     * 0), so n is bounded by the named limit, not by the frame. */
    if (n > SLUICE_MAX_RECORDS)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "field \"n\": %llu rows, more than the limit of %d per batch",
                         (unsigned long long)n, SLUICE_MAX_RECORDS);
    if (lo->r && lo->x)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "fields \"r\" and \"x\" both present; a frame carries one of them");
    if (lo->r)
        return check_records(p, len, lo->r, n, err, errlen);
    if (lo->x)
        return check_tensors(p, len, lo->x, n, err, errlen);
    return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL, "missing field \"r\" or \"x\"");
}

sluice_err wire_check(const void *p, size_t len, size_t max_bytes, struct wire_layout *lo,
                      char *err, size_t errlen)
{
    if (len > max_bytes)
        return wire_fail(err, errlen, SLUICE_ERR_TOOBIG,
                         "frame of %zu bytes exceeds the maximum of %zu", len, max_bytes);
    if (!p || len == 0)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL, "empty frame");
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
    /* zframe.c opens an envelope before this check of the frame inside,
     * which is never an envelope itself. */
    if (sluicei_zframe_is_envelope(p, len))
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "offset %zu: a compressed frame (second key \"z\") where an "
                         "uncompressed one belongs: compressed frames do not nest", off);
    return check_schema(p, len, lo, err, errlen);
}

sluice_err sluicei_wire_validate(const void *p, size_t len, size_t max_bytes, char *err,
                                 size_t errlen)
{
    struct wire_layout lo;
    return wire_check(p, len, max_bytes, &lo, err, errlen);
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
        if (read_hdr(p, len, off, &k, NULL, 0) != SLUICE_OK || k.kind != SLUICEI_MP_STR)
            return SLUICE_ERR_PROTOCOL;
        if (str_is(p, &k, "id"))
            return check_id(p, len, k.end, id, NULL, 0);
        off = k.end;
        if (skip_obj(p, len, &off, NULL, 0) != SLUICE_OK)
            return SLUICE_ERR_PROTOCOL;
    }
    return SLUICE_ERR_PROTOCOL;
}
