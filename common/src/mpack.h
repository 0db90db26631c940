/* Raw msgpack, read without allocating: how long each type's header and
 * payload are (written once, in sluicei_mp_head()), and a walker that finds
 * where one object ends in a byte stream (sluicei_mp_skip()). Used by the
 * frame validator (wire_check.c) and by the exec reader's msgpack mode
 * (producer/job/readers/exec.c). No msgpack-c: these read bytes a peer
 * chose, before anything trusts a length in them. Internal header. */
#ifndef SLUICE_MPACK_H
#define SLUICE_MPACK_H

#include <stddef.h>
#include <stdint.h>

typedef enum sluicei_mp_kind {
    SLUICEI_MP_NIL,
    SLUICEI_MP_BOOL,
    SLUICEI_MP_UINT,   /* also a signed encoding of a value >= 0, as msgpack-c reads it */
    SLUICEI_MP_INT,    /* a negative integer */
    SLUICEI_MP_FLOAT,
    SLUICEI_MP_STR,
    SLUICEI_MP_BIN,
    SLUICEI_MP_EXT,
    SLUICEI_MP_ARRAY,
    SLUICEI_MP_MAP,
} sluicei_mp_kind;

/* What sluicei_mp_head() and sluicei_mp_skip() return. */
enum {
    SLUICEI_MP_OK,
    SLUICEI_MP_MORE,   /* the bytes end inside the header or object */
    SLUICEI_MP_BAD,    /* the reserved type byte 0xc1: not msgpack */
};

/* One msgpack header. An object is its header, then its payload, then (an
 * array or map) its elements: u of them, or 2u keys and values. */
typedef struct sluicei_mp_hdr {
    sluicei_mp_kind kind;
    unsigned size;      /* header bytes: the type byte and the value, length
                         * or count bytes after it (ext: and its type byte) */
    uint64_t u;         /* UINT: value; STR/BIN/EXT: payload bytes; ARRAY:
                         * elements; MAP: entries */
    uint64_t payload;   /* bytes after the header: u for STR/BIN/EXT, 4 or 8
                         * for FLOAT, 0 for the others */
} sluicei_mp_hdr;

/* The big-endian number in p[0..k). */
static inline uint64_t sluicei_mp_be(const uint8_t *p, unsigned k)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < k; i++)
        v = v << 8 | p[i];
    return v;
}

/* sluicei_mp_head() for a header of size bytes whose last k bytes hold a
 * length (STR, BIN, EXT: the payload's) or a count (ARRAY, MAP), and an ext
 * type byte after them when ext is 1. */
static inline int sluicei_mp_sized(const uint8_t *p, size_t n, sluicei_mp_hdr *h,
                                   sluicei_mp_kind kind, unsigned k, unsigned ext)
{
    h->kind = kind;
    h->size = 1 + k + ext;
    if (h->size > n)
        return SLUICEI_MP_MORE;
    h->u = sluicei_mp_be(p + 1, k);
    if (kind == SLUICEI_MP_ARRAY || kind == SLUICEI_MP_MAP)
        return SLUICEI_MP_OK;
    h->payload = h->u;
    return h->payload > n - h->size ? SLUICEI_MP_MORE : SLUICEI_MP_OK;
}

/* sluicei_mp_head() for an integer of k bytes after the type byte. A
 * signed encoding with the sign bit clear holds a value >= 0: a UINT. */
static inline int sluicei_mp_int(const uint8_t *p, size_t n, sluicei_mp_hdr *h, unsigned k,
                                 int is_signed)
{
    h->size = 1 + k;
    h->kind = SLUICEI_MP_UINT;
    if (h->size > n)
        return SLUICEI_MP_MORE;
    uint64_t v = sluicei_mp_be(p + 1, k);
    if (is_signed && v >> (k * 8 - 1))
        h->kind = SLUICEI_MP_INT;
    else
        h->u = v;
    return SLUICEI_MP_OK;
}

/* sluicei_mp_head() for a header of size bytes and a payload of payload
 * bytes that holds no length (float, fixext). */
static inline int sluicei_mp_fixed(size_t n, sluicei_mp_hdr *h, sluicei_mp_kind kind,
                                   unsigned size, uint64_t payload)
{
    h->kind = kind;
    h->size = size;
    if (size > n)
        return SLUICEI_MP_MORE;
    h->payload = payload;
    if (kind == SLUICEI_MP_EXT)
        h->u = payload;
    return payload > n - size ? SLUICEI_MP_MORE : SLUICEI_MP_OK;
}

/* Reads the header at p[0..n) into *h. SLUICEI_MP_OK: p[0..n) holds the
 * header and the payload (not checked: whether it holds an array's or a
 * map's elements). SLUICEI_MP_MORE: it does not, or n is 0; when n > 0,
 * kind and size are set (a signed integer's kind only once its bytes are
 * there), and u and payload too unless size > n (the header itself is
 * cut). SLUICEI_MP_BAD: p[0] is 0xc1. Never reads outside
 * p[0..n). Inline: the validator calls it for every header of every frame
 * it is given (a million records, two million calls). */
static inline int sluicei_mp_head(const uint8_t *p, size_t n, sluicei_mp_hdr *h)
{
    if (n == 0)
        return SLUICEI_MP_MORE;
    uint8_t c = p[0];
    h->size = 1;
    h->u = 0;
    h->payload = 0;
    if (c <= 0x7f) {
        h->kind = SLUICEI_MP_UINT;
        h->u = c;
        return SLUICEI_MP_OK;
    }
    if (c >= 0xe0) {
        h->kind = SLUICEI_MP_INT;
        return SLUICEI_MP_OK;
    }
    if (c <= 0x9f) {
        h->kind = c <= 0x8f ? SLUICEI_MP_MAP : SLUICEI_MP_ARRAY;
        h->u = c & 0x0f;
        return SLUICEI_MP_OK;
    }
    if (c <= 0xbf) {
        h->kind = SLUICEI_MP_STR;
        h->u = h->payload = c & 0x1f;
        return h->payload > n - 1 ? SLUICEI_MP_MORE : SLUICEI_MP_OK;
    }
    switch (c) {
    case 0xc0: h->kind = SLUICEI_MP_NIL; return SLUICEI_MP_OK;
    case 0xc2: case 0xc3: h->kind = SLUICEI_MP_BOOL; return SLUICEI_MP_OK;
    case 0xc4: return sluicei_mp_sized(p, n, h, SLUICEI_MP_BIN, 1, 0);
    case 0xc5: return sluicei_mp_sized(p, n, h, SLUICEI_MP_BIN, 2, 0);
    case 0xc6: return sluicei_mp_sized(p, n, h, SLUICEI_MP_BIN, 4, 0);
    case 0xc7: return sluicei_mp_sized(p, n, h, SLUICEI_MP_EXT, 1, 1);
    case 0xc8: return sluicei_mp_sized(p, n, h, SLUICEI_MP_EXT, 2, 1);
    case 0xc9: return sluicei_mp_sized(p, n, h, SLUICEI_MP_EXT, 4, 1);
    case 0xca: return sluicei_mp_fixed(n, h, SLUICEI_MP_FLOAT, 1, 4);
    case 0xcb: return sluicei_mp_fixed(n, h, SLUICEI_MP_FLOAT, 1, 8);
    case 0xcc: return sluicei_mp_int(p, n, h, 1, 0);
    case 0xcd: return sluicei_mp_int(p, n, h, 2, 0);
    case 0xce: return sluicei_mp_int(p, n, h, 4, 0);
    case 0xcf: return sluicei_mp_int(p, n, h, 8, 0);
    case 0xd0: return sluicei_mp_int(p, n, h, 1, 1);
    case 0xd1: return sluicei_mp_int(p, n, h, 2, 1);
    case 0xd2: return sluicei_mp_int(p, n, h, 4, 1);
    case 0xd3: return sluicei_mp_int(p, n, h, 8, 1);
    /* fixext 1 to 16: the ext type byte, then the payload */
    case 0xd4: return sluicei_mp_fixed(n, h, SLUICEI_MP_EXT, 2, 1);
    case 0xd5: return sluicei_mp_fixed(n, h, SLUICEI_MP_EXT, 2, 2);
    case 0xd6: return sluicei_mp_fixed(n, h, SLUICEI_MP_EXT, 2, 4);
    case 0xd7: return sluicei_mp_fixed(n, h, SLUICEI_MP_EXT, 2, 8);
    case 0xd8: return sluicei_mp_fixed(n, h, SLUICEI_MP_EXT, 2, 16);
    case 0xd9: return sluicei_mp_sized(p, n, h, SLUICEI_MP_STR, 1, 0);
    case 0xda: return sluicei_mp_sized(p, n, h, SLUICEI_MP_STR, 2, 0);
    case 0xdb: return sluicei_mp_sized(p, n, h, SLUICEI_MP_STR, 4, 0);
    case 0xdc: return sluicei_mp_sized(p, n, h, SLUICEI_MP_ARRAY, 2, 0);
    case 0xdd: return sluicei_mp_sized(p, n, h, SLUICEI_MP_ARRAY, 4, 0);
    case 0xde: return sluicei_mp_sized(p, n, h, SLUICEI_MP_MAP, 2, 0);
    case 0xdf: return sluicei_mp_sized(p, n, h, SLUICEI_MP_MAP, 4, 0);
    default: return SLUICEI_MP_BAD; /* 0xc1 */
    }
}

/* Where a walk through an object that is still arriving got to. */
typedef struct sluicei_mp_scan {
    uint64_t owed; /* objects still to skip; 0: not started */
    size_t at;     /* bytes of the object walked: where the next header starts */
} sluicei_mp_scan;

/* Finds where the msgpack object at p[0] ends. Zero *st before the first
 * call for an object. SLUICEI_MP_OK: *len is the object's length in bytes,
 * and *st is zeroed for the next one. SLUICEI_MP_MORE: p[0..n) holds only
 * the start of it; call again with the same p and st when more bytes have
 * arrived after those (n larger), and the walk goes on from where it stopped,
 * so an object arriving in many reads is walked once. SLUICEI_MP_BAD: the
 * reserved byte 0xc1, at p[st->at]. On MORE and BAD, st->at is where the
 * header the walk stopped at starts (n when the bytes ended between
 * objects). Iterative: it counts the objects still owed, so nesting costs
 * nothing; every count is taken as given (an array of 2^32-1 elements is
 * only "more bytes needed" until they came), and each header takes at least
 * one byte, so a walk ends within n headers. */
int sluicei_mp_skip(const uint8_t *p, size_t n, sluicei_mp_scan *st, size_t *len);

#endif
