/* Compressed frames (zframe.h): the queue's setting, the envelope a
 * producer writes, and the consumer's way in: check the envelope's bytes,
 * decompress into a reused buffer of exactly u bytes, decode that frame as
 * any other (wire_decode.c). LZ4 is its block format
 * (LZ4_compress_default / LZ4_decompress_safe), zstd one frame of its
 * format; both decoders are given the u-byte buffer as their whole output
 * room, so a stream that claims more than u fails instead of growing. */
#include "zframe.h"

#include "mpack.h"
#include "num.h"
#include "url.h"
#include "wire_check.h"

#include <lz4.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Indexed by sluicei_zcodec: the names in the envelope and in meta. */
static const char *const codec_names[] = {"none", "lz4", "zstd"};

/* ------------------------------------------------------------------------ */
/* The setting                                                              */

sluice_err sluicei_zsetting_parse(const char *s, size_t n, sluicei_zsetting *out, char *err,
                                  size_t errlen)
{
    char q[SLUICEI_QUOTE_MAX + 8];
    uint64_t level;
    out->codec = SLUICEI_ZCODEC_NONE;
    out->level = 0;
    if (n == 0 || (n == 4 && memcmp(s, "none", 4) == 0))
        return SLUICE_OK;
    if (n == 3 && memcmp(s, "lz4", 3) == 0) {
        out->codec = SLUICEI_ZCODEC_LZ4;
        return SLUICE_OK;
    }
    if (n == 4 && memcmp(s, "zstd", 4) == 0) {
        out->codec = SLUICEI_ZCODEC_ZSTD;
        out->level = SLUICEI_ZSTD_LEVEL_DEFAULT;
        return SLUICE_OK;
    }
    sluicei_quote(q, sizeof q, s, n);
    if (n > 4 && memcmp(s, "lz4:", 4) == 0) {
        sluicei_seterr(err, errlen, "compression '%s': lz4 takes no level (write lz4, or "
                       "zstd:LEVEL for a codec with levels)", q);
        return SLUICE_ERR_INVALID;
    }
    if (n >= 5 && memcmp(s, "zstd:", 5) == 0) {
        if (sluicei_parse_u64(s + 5, n - 5, UINT64_MAX, &level) != 0 ||
            level < SLUICEI_ZSTD_LEVEL_MIN || level > SLUICEI_ZSTD_LEVEL_MAX) {
            sluicei_seterr(err, errlen, "compression '%s': the zstd level must be a number from "
                           "%d to %d", q, SLUICEI_ZSTD_LEVEL_MIN, SLUICEI_ZSTD_LEVEL_MAX);
            return SLUICE_ERR_INVALID;
        }
        out->codec = SLUICEI_ZCODEC_ZSTD;
        out->level = (int)level;
        return SLUICE_OK;
    }
    sluicei_seterr(err, errlen, "unknown compression '%s' (none, lz4, zstd or zstd:LEVEL with "
                   "LEVEL %d..%d)", q, SLUICEI_ZSTD_LEVEL_MIN, SLUICEI_ZSTD_LEVEL_MAX);
    return SLUICE_ERR_INVALID;
}

const char *sluicei_zsetting_str(const sluicei_zsetting *z, char out[SLUICEI_ZSETTING_MAX])
{
    if (z->codec == SLUICEI_ZCODEC_ZSTD)
        snprintf(out, SLUICEI_ZSETTING_MAX, "zstd:%d", z->level);
    else
        snprintf(out, SLUICEI_ZSETTING_MAX, "%s", z->codec == SLUICEI_ZCODEC_LZ4 ? "lz4" : "");
    return out;
}

/* ------------------------------------------------------------------------ */
/* Compressing                                                              */

/* The longest envelope header: the map, "v" 1, "z" and "zstd", "u" and a
 * uint64, "c" and a bin32 header. */
#define HEAD_MAX (1 + 3 + 2 + 5 + 2 + 9 + 2 + 5)

/* v as the shortest msgpack uint; returns its length. */
static size_t put_uint(uint8_t *o, uint64_t v)
{
    if (v < 0x80) {
        o[0] = (uint8_t)v;
        return 1;
    }
    unsigned k = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffu ? 4 : 8;
    o[0] = k == 1 ? 0xcc : k == 2 ? 0xcd : k == 4 ? 0xce : 0xcf;
    for (unsigned i = 0; i < k; i++)
        o[1 + i] = (uint8_t)(v >> (8 * (k - 1 - i)));
    return 1 + k;
}

/* The envelope's bytes before the compressed ones; returns their length
 * (at most HEAD_MAX). clen < 2^32. */
static size_t put_head(uint8_t *o, sluicei_zcodec codec, uint64_t u, size_t clen)
{
    const char *name = codec_names[codec];
    size_t nl = strlen(name), k = 0;
    static const uint8_t v[] = {0x84, 0xa1, 'v', 0x01, 0xa1, 'z'};
    memcpy(o, v, sizeof v);
    k = sizeof v;
    o[k++] = (uint8_t)(0xa0 | nl);
    memcpy(o + k, name, nl);
    k += nl;
    o[k++] = 0xa1;
    o[k++] = 'u';
    k += put_uint(o + k, u);
    o[k++] = 0xa1;
    o[k++] = 'c';
    unsigned w = clen <= 0xff ? 1 : clen <= 0xffff ? 2 : 4;
    o[k++] = w == 1 ? 0xc4 : w == 2 ? 0xc5 : 0xc6;
    for (unsigned i = 0; i < w; i++)
        o[k++] = (uint8_t)(clen >> (8 * (w - 1 - i)));
    return k;
}

sluice_err sluicei_zframe_compress(sluicei_zenc *z, sluicei_buf *frame)
{
    size_t raw = frame->len;
    /* A bin holds less than 4 GiB; LZ4 takes less than 2 GiB. */
    if (z->set.codec == SLUICEI_ZCODEC_NONE || raw <= HEAD_MAX + 1 || raw > UINT32_MAX)
        return SLUICE_OK;
    /* The output room is what keeps the envelope smaller than the frame:
     * a codec that needs more gives up (and the frame goes raw). */
    size_t room = raw - HEAD_MAX, clen;
    z->scratch.len = 0;
    if (sluicei_buf_reserve(&z->scratch, raw) != SLUICE_OK)
        return SLUICE_ERR_NOMEM;
    uint8_t *dst = z->scratch.data + HEAD_MAX;
    if (z->set.codec == SLUICEI_ZCODEC_LZ4) {
        if (raw > LZ4_MAX_INPUT_SIZE)
            return SLUICE_OK;
        int r = LZ4_compress_default((const char *)frame->data, (char *)dst, (int)raw,
                                     room > INT_MAX ? INT_MAX : (int)room);
        if (r <= 0)
            return SLUICE_OK;
        clen = (size_t)r;
    } else {
        if (!z->cctx && !(z->cctx = ZSTD_createCCtx()))
            return SLUICE_ERR_NOMEM;
        size_t r = ZSTD_compressCCtx(z->cctx, dst, room, frame->data, raw, z->set.level);
        if (ZSTD_isError(r))
            return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? SLUICE_ERR_NOMEM
                                                                         : SLUICE_OK;
        clen = r;
    }
    uint8_t head[HEAD_MAX];
    size_t h = put_head(head, z->set.codec, raw, clen);
    if (h + clen >= raw)
        return SLUICE_OK;
    memmove(z->scratch.data + h, dst, clen);
    memcpy(z->scratch.data, head, h);
    z->scratch.len = h + clen;
    sluicei_buf t = *frame;
    *frame = z->scratch;
    z->scratch = t;
    return SLUICE_OK;
}

void sluicei_zenc_free(sluicei_zenc *z)
{
    if (!z)
        return;
    ZSTD_freeCCtx(z->cctx);
    z->cctx = NULL;
    sluicei_buf_free(&z->scratch);
}

/* ------------------------------------------------------------------------ */
/* The pool of decompression buffers                                        */

typedef struct zbuf {
    sluicei_zpool *pool;   /* NULL: not pooled, freed when given back */
    struct zbuf *next;     /* in the pool's free list */
    size_t cap;
    uint8_t data[];
} zbuf;

struct sluicei_zpool {
    pthread_mutex_t mu;
    zbuf *free;            /* under mu, as the fields up to closed */
    int nfree, keep;
    size_t free_bytes, keep_bytes;   /* room of the free buffers; their most */
    long out;              /* buffers that batches hold */
    size_t bytes;          /* room of every buffer, free or held */
    int closed;
    ZSTD_DCtx *dctx;       /* the decoding thread's; made at the first zstd frame */
};

sluicei_zpool *sluicei_zpool_new(int keep, size_t keep_bytes)
{
    sluicei_zpool *z = calloc(1, sizeof *z);
    if (!z)
        return NULL;
    if (pthread_mutex_init(&z->mu, NULL) != 0) {
        free(z);
        return NULL;
    }
    z->keep = keep > 0 ? keep : 1;
    z->keep_bytes = keep_bytes;
    return z;
}

size_t sluicei_zpool_bytes(sluicei_zpool *z)
{
    pthread_mutex_lock(&z->mu);
    size_t n = z->bytes;
    pthread_mutex_unlock(&z->mu);
    return n;
}

static void pool_destroy(sluicei_zpool *z)
{
    pthread_mutex_destroy(&z->mu);
    free(z);
}

static void free_list(zbuf *b)
{
    while (b) {
        zbuf *n = b->next;
        free(b);
        b = n;
    }
}

void sluicei_zpool_close(sluicei_zpool *z)
{
    if (!z)
        return;
    pthread_mutex_lock(&z->mu);
    zbuf *f = z->free;
    z->free = NULL;
    z->nfree = 0;
    z->free_bytes = 0;
    z->closed = 1;
    /* Before the unlock: from then on the last batch given back may free
     * the pool. */
    ZSTD_freeDCtx(z->dctx);
    z->dctx = NULL;
    int last = z->out == 0;
    pthread_mutex_unlock(&z->mu);
    free_list(f);
    if (last)
        pool_destroy(z);
}

/* A buffer of at least need bytes (need <= max): the smallest free one
 * that is big enough, else the biggest free one grown, else a new one.
 * One of a pool gets some room to spare, up to max, so that the next,
 * slightly bigger frame still fits; without a pool exactly need. */
static zbuf *zbuf_get(sluicei_zpool *z, size_t need, size_t max)
{
    zbuf *b = NULL;
    if (z) {
        pthread_mutex_lock(&z->mu);
        zbuf **best = NULL, **big = NULL;
        for (zbuf **pp = &z->free; *pp; pp = &(*pp)->next) {
            if ((*pp)->cap >= need && (!best || (*pp)->cap < (*best)->cap))
                best = pp;
            if (!big || (*pp)->cap > (*big)->cap)
                big = pp;
        }
        zbuf **take = best ? best : big;
        if (take) {
            b = *take;
            *take = b->next;
            z->nfree--;
            z->free_bytes -= b->cap;
        }
        z->out++;
        pthread_mutex_unlock(&z->mu);
        if (b && b->cap >= need)
            return b;
    }
    size_t cap = need, old = b ? b->cap : 0;
    if (z && need <= max - need / 8)
        cap = need + need / 8;
    zbuf *nb = realloc(b, sizeof *nb + cap);
    if (!nb)
        free(b);
    if (z) {
        pthread_mutex_lock(&z->mu);
        z->bytes -= old;
        if (nb)
            z->bytes += cap;
        else
            z->out--;
        pthread_mutex_unlock(&z->mu);
    }
    if (!nb)
        return NULL;
    nb->pool = z;
    nb->next = NULL;
    nb->cap = cap;
    return nb;
}

/* A batch's frame_free: gives the buffer back to its pool, which keeps it
 * if it has room (and is open), else frees it; frees the closed pool with
 * its last buffer. Any thread. */
static void zbuf_put(void *arg)
{
    zbuf *b = arg;
    sluicei_zpool *z = b->pool;
    if (!z) {
        free(b);
        return;
    }
    pthread_mutex_lock(&z->mu);
    z->out--;
    if (!z->closed && z->nfree < z->keep && z->free_bytes + b->cap <= z->keep_bytes) {
        b->next = z->free;
        z->free = b;
        z->nfree++;
        z->free_bytes += b->cap;
        b = NULL;
    } else {
        z->bytes -= b->cap;
    }
    int last = z->closed && z->out == 0;
    pthread_mutex_unlock(&z->mu);
    free(b);
    if (last)
        pool_destroy(z);
}

/* ------------------------------------------------------------------------ */
/* Reading an envelope                                                      */

/* Indexed by sluicei_mp_kind. */
static const char *const kind_names[] = {"nil", "bool", "uint", "int", "float",
                                         "str", "bin", "ext", "array", "map"};

typedef struct envelope {
    sluicei_zcodec codec;
    uint64_t u;
    const uint8_t *c;
    size_t clen;
} envelope;

/* The header at p[off] with its payload inside p[0..len) (sluicei_mp_head). */
static int head_at(const uint8_t *p, size_t len, size_t off, sluicei_mp_hdr *h)
{
    /* What a reader of *h sees when no header is there, or 0xc1. */
    h->kind = SLUICEI_MP_NIL;
    h->size = 1;
    h->u = h->payload = 0;
    return off < len ? sluicei_mp_head(p + off, len - off, h) : SLUICEI_MP_MORE;
}

/* Whether the str at *off is key; moves *off past it when it is. */
static int key_is(const uint8_t *p, size_t len, size_t *off, const char *key)
{
    sluicei_mp_hdr h;
    size_t n = strlen(key);
    if (head_at(p, len, *off, &h) != SLUICEI_MP_OK || h.kind != SLUICEI_MP_STR || h.u != n ||
        memcmp(p + *off + h.size, key, n) != 0)
        return 0;
    *off += h.size + n;
    return 1;
}

int sluicei_zframe_is_envelope(const void *frame, size_t len)
{
    const uint8_t *p = frame;
    sluicei_mp_hdr h;
    size_t off;
    if (!p || head_at(p, len, 0, &h) != SLUICEI_MP_OK || h.kind != SLUICEI_MP_MAP || h.u < 2)
        return 0;
    off = h.size;
    if (!key_is(p, len, &off, "v"))
        return 0;
    if (head_at(p, len, off, &h) != SLUICEI_MP_OK || h.kind == SLUICEI_MP_ARRAY ||
        h.kind == SLUICEI_MP_MAP)
        return 0;
    off += h.size + (size_t)h.payload;
    return key_is(p, len, &off, "z");
}

/* What is at off, for messages: "a str", "the end of the frame". */
static const char *found(const uint8_t *p, size_t len, size_t off)
{
    sluicei_mp_hdr h;
    int r = head_at(p, len, off, &h);
    if (off >= len)
        return "the end of the frame";
    if (r == SLUICEI_MP_BAD)
        return "the invalid type byte 0xc1";
    if (r == SLUICEI_MP_MORE)
        return "a value cut short";
    return kind_names[h.kind];
}

/* Checks p[0..len), an envelope (sluicei_zframe_is_envelope()), whole:
 * exactly the keys v, z, u, c in that order, their types, v 1, a known
 * codec, 0 < u <= max, and c the last bytes. */
static sluice_err parse_envelope(const uint8_t *p, size_t len, size_t max, envelope *ev,
                                 char *err, size_t errlen)
{
    static const char pre[] = "compressed frame: ";
    sluicei_mp_hdr h;
    size_t off;
    head_at(p, len, 0, &h);
    if (h.u != 4)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%sa map of %llu keys, not the 4 of an envelope (v, z, u, c)", pre,
                         (unsigned long long)h.u);
    off = h.size;
    key_is(p, len, &off, "v");
    if (head_at(p, len, off, &h) != SLUICEI_MP_OK || h.kind != SLUICEI_MP_UINT)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: field \"v\": expected 1, got %s", pre, off,
                         found(p, len, off));
    if (h.u != 1)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: field \"v\" is %llu; an envelope has version 1", pre,
                         off, (unsigned long long)h.u);
    off += h.size;
    key_is(p, len, &off, "z");
    if (head_at(p, len, off, &h) != SLUICEI_MP_OK || h.kind != SLUICEI_MP_STR)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: field \"z\": expected the codec's name as a str, got %s",
                         pre, off, found(p, len, off));
    const char *name = (const char *)p + off + h.size;
    ev->codec = h.u == 3 && memcmp(name, "lz4", 3) == 0    ? SLUICEI_ZCODEC_LZ4
                : h.u == 4 && memcmp(name, "zstd", 4) == 0 ? SLUICEI_ZCODEC_ZSTD
                                                           : SLUICEI_ZCODEC_NONE;
    if (ev->codec == SLUICEI_ZCODEC_NONE) {
        char q[SLUICEI_QUOTE_MAX + 8];
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: unknown codec \"%s\" (this library reads lz4 and zstd)",
                         pre, off, sluicei_quote(q, sizeof q, name, (size_t)h.u));
    }
    off += h.size + (size_t)h.u;
    if (!key_is(p, len, &off, "u"))
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: the third key is not \"u\" (an envelope's keys are v, z, "
                         "u, c, in this order)", pre, off);
    if (head_at(p, len, off, &h) != SLUICEI_MP_OK || h.kind != SLUICEI_MP_UINT)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: field \"u\": expected an unsigned integer, got %s", pre,
                         off, found(p, len, off));
    if (h.u == 0)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: field \"u\" is 0 (a frame is never empty)", pre, off);
    if (h.u > max)
        return wire_fail(err, errlen, SLUICE_ERR_TOOBIG,
                         "%soffset %zu: field \"u\": the frame inside has %llu bytes, more than "
                         "the maximum of %zu", pre, off, (unsigned long long)h.u, max);
    ev->u = h.u;
    off += h.size;
    if (!key_is(p, len, &off, "c"))
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: the fourth key is not \"c\" (an envelope's keys are v, z, "
                         "u, c, in this order)", pre, off);
    int r = head_at(p, len, off, &h);
    if (h.kind != SLUICEI_MP_BIN || off >= len)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: field \"c\": expected bin, got %s", pre, off,
                         found(p, len, off));
    if (r != SLUICEI_MP_OK)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: field \"c\" is cut short: %zu bytes remain of the frame",
                         pre, off, len - off);
    ev->c = p + off + h.size;
    ev->clen = (size_t)h.u;
    off += h.size + (size_t)h.u;
    if (off != len)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "%soffset %zu: %zu trailing bytes after the envelope", pre, off,
                         len - off);
    return SLUICE_OK;
}

/* What can be checked of c before a buffer is allocated: a zstd c is
 * one whole frame (a second one after it would be decompressed too). */
static sluice_err check_stream(const envelope *ev, char *err, size_t errlen)
{
    if (ev->codec != SLUICEI_ZCODEC_ZSTD)
        return SLUICE_OK;
    size_t first = ZSTD_findFrameCompressedSize(ev->c, ev->clen);
    if (ZSTD_isError(first))
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "decompression failed: zstd: %s (in the %zu bytes of \"c\")",
                         ZSTD_getErrorName(first), ev->clen);
    if (first != ev->clen)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "decompression failed: zstd: \"c\" holds more than one zstd frame (the "
                         "first ends at byte %zu of %zu)", first, ev->clen);
    /* The size the frame states, when it states one, must be u. */
    unsigned long long fcs = ZSTD_getFrameContentSize(ev->c, ev->clen);
    if (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != ev->u)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                         "decompression failed: zstd: the frame holds %llu bytes, but u = %llu",
                         fcs, (unsigned long long)ev->u);
    return SLUICE_OK;
}

/* Decompresses ev->c into dst, which has room for exactly ev->u bytes,
 * and checks that it gives that many. */
static sluice_err inflate(sluicei_zpool *z, const envelope *ev, uint8_t *dst, char *err,
                          size_t errlen)
{
    static const char pre[] = "decompression failed: ";
    unsigned long long u = (unsigned long long)ev->u;
    if (ev->codec == SLUICEI_ZCODEC_LZ4) {
        if (ev->clen > INT_MAX || ev->u > INT_MAX)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "%slz4: %zu bytes into %llu is beyond what lz4 handles (2 GiB)", pre,
                             ev->clen, u);
        int r = LZ4_decompress_safe((const char *)ev->c, (char *)dst, (int)ev->clen, (int)ev->u);
        if (r < 0)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "%slz4: the %zu bytes of \"c\" are corrupt, or hold more than u = "
                             "%llu bytes", pre, ev->clen, u);
        if ((uint64_t)r != ev->u)
            return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL,
                             "%slz4 gives %d bytes, but u = %llu", pre, r, u);
        return SLUICE_OK;
    }
    size_t r;
    if (z) {
        if (!z->dctx && !(z->dctx = ZSTD_createDCtx()))
            return wire_fail(err, errlen, SLUICE_ERR_NOMEM, "out of memory for a zstd context");
        r = ZSTD_decompressDCtx(z->dctx, dst, (size_t)ev->u, ev->c, ev->clen);
    } else {
        r = ZSTD_decompress(dst, (size_t)ev->u, ev->c, ev->clen);
    }
    if (ZSTD_isError(r))
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL, "%szstd: %s (u = %llu bytes)", pre,
                         ZSTD_getErrorName(r), u);
    if (r != ev->u)
        return wire_fail(err, errlen, SLUICE_ERR_PROTOCOL, "%szstd gives %zu bytes, but u = %llu",
                         pre, r, u);
    return SLUICE_OK;
}

sluice_err sluicei_zframe_decode(sluicei_zpool *z, const void *p, size_t len, size_t max_bytes,
                                 size_t room, void (*frame_free)(void *), void *frame_owner,
                                 sluice_batch **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!sluicei_zframe_is_envelope(p, len))
        return sluicei_wire_decode_ext(p, len, max_bytes, room, frame_free, frame_owner, out, err,
                                       errlen);
    if (len > max_bytes)
        return wire_fail(err, errlen, SLUICE_ERR_TOOBIG,
                         "compressed frame of %zu bytes exceeds the maximum of %zu", len,
                         max_bytes);
    envelope ev = {SLUICEI_ZCODEC_NONE, 0, NULL, 0};
    sluice_err e = parse_envelope(p, len, max_bytes, &ev, err, errlen);
    if (e == SLUICE_OK)
        e = check_stream(&ev, err, errlen);
    if (e != SLUICE_OK)
        return e;
    zbuf *b = zbuf_get(z, (size_t)ev.u, max_bytes);
    if (!b)
        return wire_fail(err, errlen, SLUICE_ERR_NOMEM,
                         "out of memory for the %llu bytes of a compressed frame",
                         (unsigned long long)ev.u);
    e = inflate(z, &ev, b->data, err, errlen);
    if (e == SLUICE_OK) {
        char why[512];
        e = sluicei_wire_decode_ext(b->data, (size_t)ev.u, max_bytes, room, zbuf_put, b, out, why,
                                    sizeof why);
        if (e != SLUICE_OK)
            wire_fail(err, errlen, e, "compressed frame (%s, %llu bytes inside): %s",
                      codec_names[ev.codec], (unsigned long long)ev.u, why);
    }
    if (e != SLUICE_OK) {
        zbuf_put(b);
        return e;
    }
    if (frame_free)
        frame_free(frame_owner);
    return SLUICE_OK;
}
