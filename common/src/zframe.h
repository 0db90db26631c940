/* Compressed frames (docs/PROTOCOL.md, "Compressed frames"): a queue's
 * compression setting (meta field `compress`), the envelope a producer
 * wraps a frame in, and its checked decompression on the way in. No I/O.
 * Internal header; zframe.c implements it.
 *
 * An envelope is the msgpack map {v: 1, z: codec, u: bytes, c: bin}, in
 * that order; c decompresses to exactly u bytes, an ordinary v1 frame. A
 * decoder tells an envelope by its second key, "z". Nothing is allocated
 * for an envelope before it is checked whole, and never more than u bytes,
 * which must not exceed the reader's limit (max_batch_bytes): a
 * decompression bomb costs at most that. */
#ifndef SLUICE_ZFRAME_H
#define SLUICE_ZFRAME_H

#include "wire.h"

typedef enum sluicei_zcodec {
    SLUICEI_ZCODEC_NONE = 0,
    SLUICEI_ZCODEC_LZ4,    /* LZ4 block format */
    SLUICEI_ZCODEC_ZSTD,   /* one zstd frame */
} sluicei_zcodec;

#define SLUICEI_ZSTD_LEVEL_MIN 1
#define SLUICEI_ZSTD_LEVEL_MAX 19
#define SLUICEI_ZSTD_LEVEL_DEFAULT 3
/* Longest setting in its stored form ("zstd:19") and its NUL. */
#define SLUICEI_ZSETTING_MAX 8

/* How a queue's producers compress. */
typedef struct sluicei_zsetting {
    sluicei_zcodec codec;
    int level;             /* zstd: 1..19; 0 otherwise */
} sluicei_zsetting;

/* Parses s[0..n): "none" (or "": no compression), "lz4", "zstd" (level 3)
 * or "zstd:L" with L in 1..19. On failure writes a one-line reason naming
 * the value to err and returns SLUICE_ERR_INVALID. */
sluice_err sluicei_zsetting_parse(const char *s, size_t n, sluicei_zsetting *out, char *err,
                                  size_t errlen);

/* The setting as the meta field stores it: "" (none), "lz4", "zstd:L".
 * out has SLUICEI_ZSETTING_MAX bytes. */
const char *sluicei_zsetting_str(const sluicei_zsetting *z, char out[SLUICEI_ZSETTING_MAX]);

/* ---- producing ---------------------------------------------------------- */

/* A producer's compressor: the setting, the zstd context and a scratch
 * buffer, all reused from batch to batch. Zero-initialise it, set `set`;
 * sluicei_zenc_free() releases it. One thread at a time. */
typedef struct sluicei_zenc {
    sluicei_zsetting set;
    void *cctx;            /* ZSTD_CCtx, made at the first zstd frame */
    sluicei_buf scratch;
} sluicei_zenc;

/* Compresses the v1 frame in *frame by z->set. When the envelope is
 * smaller than the frame, *frame becomes the envelope (its buffer is
 * swapped with the scratch one, so nothing is copied and both stay
 * allocated for the next batches); otherwise *frame is unchanged (the
 * frame is stored raw). SLUICE_OK, or SLUICE_ERR_NOMEM (*frame
 * unchanged). */
sluice_err sluicei_zframe_compress(sluicei_zenc *z, sluicei_buf *frame);

void sluicei_zenc_free(sluicei_zenc *z);

/* ---- consuming ---------------------------------------------------------- */

/* Decompression buffers kept for reuse. A batch decoded from an envelope
 * owns one until it is freed, then gives it back here, from any thread;
 * the pool keeps at most `keep` free buffers of at most keep_bytes in all
 * (the rest are freed), so what it holds free stays within both. A buffer
 * is found by a walk of the free list: keep it short. Decoding through a pool is
 * for one thread at a time (its zstd context). */
typedef struct sluicei_zpool sluicei_zpool;

/* A new pool that keeps up to keep free buffers and keep_bytes of them;
 * NULL when out of memory. */
sluicei_zpool *sluicei_zpool_new(int keep, size_t keep_bytes);

/* Frees the free buffers and the pool; buffers that batches still hold are
 * freed when those batches are (the pool goes with the last one). No
 * decode may run on it any more. NULL is a no-op. */
void sluicei_zpool_close(sluicei_zpool *z);

/* Bytes of the buffers z has now, free or held by batches (for tests and
 * accounting). Any thread. */
size_t sluicei_zpool_bytes(sluicei_zpool *z);

/* Whether p[0..len) is an envelope: a map whose first key is "v" and whose
 * second is "z". Reads only those headers (safe on any bytes). */
int sluicei_zframe_is_envelope(const void *p, size_t len);

/* sluicei_wire_decode_ext() that also takes an envelope: checks it whole
 * (exactly the keys v, z, u, c in order; v 1; a known codec; u at most
 * max_bytes, else SLUICE_ERR_TOOBIG; nothing after c), decompresses c into
 * a buffer of u bytes from z (NULL: a buffer of its own, freed with the
 * batch), checks that it gives exactly u bytes, and decodes that frame
 * (refused if it is an envelope itself). Records then point into the
 * buffer. On SLUICE_OK the batch owns the frame as with
 * sluicei_wire_decode_ext(), except that for an envelope frame_free is
 * called at once (the compressed bytes are not needed any more). On
 * failure *out is NULL, err says what was wrong ("decompression failed:
 * ..." when the codec refused c), nothing was kept, and the caller still
 * owns p. */
sluice_err sluicei_zframe_decode(sluicei_zpool *z, const void *p, size_t len, size_t max_bytes,
                                 size_t room, void (*frame_free)(void *), void *frame_owner,
                                 sluice_batch **out, char *err, size_t errlen);

#endif
