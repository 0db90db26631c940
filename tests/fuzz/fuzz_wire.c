/* libFuzzer target: the batch validator and decoder (common/src/wire_check.c, wire_decode.c),
 * and compressed frames (zframe.c).
 * Checks, beyond "no crash": validate and decode agree; a failed decode
 * leaves no batch; peek_id agrees with decode; every record and tensor byte
 * of a decoded batch is readable; re-encoding a decoded record batch gives
 * a frame that decodes to the same records, also compressed by each codec.
 * The input as an envelope: the envelope decoder refuses it (no batch) or
 * gives a batch whose bytes are all readable, allocating at most the
 * limit; on anything else it agrees with the plain decoder. */
#include "wire.h"
#include "zframe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FRAME (1u << 20)

static volatile uint8_t sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        sink ^= b[i];
}

static void touch_batch(const sluice_batch *b)
{
    for (size_t i = 0; i < sluice_batch_num_records(b) && sluice_batch_num_tensors(b) == 0; i++) {
        sluice_record r = sluice_batch_record(b, i);
        touch(r.data, r.len);
    }
    for (size_t i = 0; i < sluice_batch_num_tensors(b); i++) {
        const sluice_tensor *t = sluice_batch_tensor(b, i);
        touch(t->data, t->nbytes);
    }
}

/* The input through the envelope-aware decoder, with a pool. */
static void check_envelope_path(const uint8_t *frame, size_t size, sluice_err plain)
{
    sluicei_zpool *z = sluicei_zpool_new(1, SIZE_MAX);
    if (!z)
        return;
    char err[256];
    sluice_batch *b = (sluice_batch *)z; /* must come back NULL on failure */
    sluice_err e = sluicei_zframe_decode(z, frame, size, MAX_FRAME, 0, NULL, NULL, &b, err,
                                         sizeof err);
    if (!sluicei_zframe_is_envelope(frame, size) && e != plain)
        abort();
    if (e != SLUICE_OK && (b != NULL || err[0] == '\0'))
        abort();
    if (sluicei_zpool_bytes(z) > MAX_FRAME)
        abort();
    if (e == SLUICE_OK) {
        touch_batch(b);
        sluice_batch_free(b);
    }
    sluicei_zpool_close(z);
}

/* The records of b, re-encoded in out, compressed by each codec and
 * decoded again: the same records. */
static void check_compressed_roundtrip(const sluice_batch *b, const sluicei_buf *out)
{
    static const sluicei_zsetting sets[] = {{SLUICEI_ZCODEC_LZ4, 0}, {SLUICEI_ZCODEC_ZSTD, 1}};
    for (size_t k = 0; k < 2; k++) {
        sluicei_zenc enc = {.set = sets[k]};
        sluicei_buf f = {0};
        sluice_batch *b2 = NULL;
        if (sluicei_buf_append(&f, out->data, out->len) != SLUICE_OK ||
            sluicei_zframe_compress(&enc, &f) != SLUICE_OK) {
            sluicei_buf_free(&f);
            sluicei_zenc_free(&enc);
            continue;
        }
        if (f.len > out->len)
            abort();
        if (sluice_wire_decode(f.data, f.len, out->len, &b2) != SLUICE_OK)
            abort();
        size_t n = sluice_batch_num_records(b);
        if (sluice_batch_num_records(b2) != n)
            abort();
        for (size_t i = 0; i < n; i++) {
            sluice_record x = sluice_batch_record(b, i), y = sluice_batch_record(b2, i);
            if (x.len != y.len || (x.len && memcmp(x.data, y.data, x.len) != 0))
                abort();
        }
        sluice_batch_free(b2);
        sluicei_buf_free(&f);
        sluicei_zenc_free(&enc);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so that any overread is an ASan report. */
    uint8_t *frame = malloc(size ? size : 1);
    if (!frame)
        return 0;
    memcpy(frame, data, size);
    char err[256];
    sluice_err v = sluicei_wire_validate(frame, size, MAX_FRAME, err, sizeof err);
    sluice_batch *b = (sluice_batch *)frame; /* must come back NULL on failure */
    sluice_err d = sluicei_wire_decode(frame, size, MAX_FRAME, NULL, NULL, &b, err, sizeof err);
    if ((v == SLUICE_OK) != (d == SLUICE_OK))
        abort();
    check_envelope_path(frame, size, d);
    if (d != SLUICE_OK) {
        if (b != NULL || err[0] == '\0')
            abort();
        free(frame);
        return 0;
    }
    sluice_batch_id id;
    if (sluicei_wire_peek_id(frame, size, &id) != SLUICE_OK || id.epoch != b->id.epoch ||
        id.task != b->id.task || id.seq != b->id.seq)
        abort();
    size_t n = sluice_batch_num_records(b);
    touch_batch(b);
    if (sluice_batch_num_tensors(b) == 0) {
        sluicei_buf out = {0};
        sluicei_batch_meta m = {b->id, b->producer, b->created_us};
        if (sluicei_wire_encode_records(&out, &m, b->records, n) == SLUICE_OK) {
            sluice_batch *b2 = NULL;
            if (sluice_wire_decode(out.data, out.len, out.len, &b2) != SLUICE_OK)
                abort();
            if (sluice_batch_num_records(b2) != n)
                abort();
            for (size_t i = 0; i < n; i++) {
                sluice_record x = sluice_batch_record(b, i), y = sluice_batch_record(b2, i);
                if (x.len != y.len || (x.len && memcmp(x.data, y.data, x.len) != 0))
                    abort();
            }
            sluice_batch_free(b2);
            check_compressed_roundtrip(b, &out);
        }
        sluicei_buf_free(&out);
    }
    sluice_batch_free(b);
    free(frame);
    return 0;
}
