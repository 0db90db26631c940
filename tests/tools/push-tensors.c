/* push-tensors: pushes tensor batches with deterministic contents through
 * sluice_producer_push_tensors(), for the tests of readers of tensors.
 *
 *   push-tensors --redis URL --queue Q [--batches N] [--batch-size B]
 *
 * Batch k holds the rows g = k*B .. k*B+B-1, and for row g:
 *   image  uint8   [B,28,28]  image[g][y][x] = (g*31 + y*7 + x*13) mod 256
 *   label  uint8   [B]        label[g] = g mod 10
 *   value  float32 [B,4]      value[g][j] = g + j/4   (exact in float32)
 * Prints one line to stdout when every batch is stored:
 *   batches=N records=N*B checksum=<16 hex>
 * where checksum is the sum modulo 2^64 of sluicei_record_hash() of each
 * tensor's data buffer, as sluice-consume --summary counts tensor batches. */
#include <sluice/producer.h>

#include "checksum.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIDE 28
#define NVALUES 4

static int parse_count(const char *s, long max, long *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : -1;
    if (!s || errno || end == s || *end || v < 1 || v > max)
        return -1;
    *out = v;
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: push-tensors --redis URL --queue Q [--batches N] [--batch-size B]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *url = NULL, *queue = NULL;
    long nbatches = 10, bsize = 16;
    for (int i = 1; i < argc; i += 2) {   /* every flag takes a value */
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--redis") == 0 && v)
            url = v;
        else if (strcmp(argv[i], "--queue") == 0 && v)
            queue = v;
        else if (strcmp(argv[i], "--batches") == 0 && parse_count(v, 1000000, &nbatches) == 0)
            ;
        else if (strcmp(argv[i], "--batch-size") == 0 && parse_count(v, 100000, &bsize) == 0)
            ;
        else
            return usage();
    }
    if (!url || !queue)
        return usage();

    size_t b = (size_t)bsize;
    uint8_t *image = malloc(b * SIDE * SIDE);
    uint8_t *label = malloc(b);
    float *value = malloc(b * NVALUES * sizeof *value);
    if (!image || !label || !value) {
        fprintf(stderr, "push-tensors: out of memory\n");
        return 1;
    }
    char err[256];
    sluice_producer *p;
    sluice_producer_opts o = {.redis_url = url, .queue = queue};
    sluice_err e = sluice_producer_open(&p, &o, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, "push-tensors: %s\n", err);
        return 1;
    }
    uint64_t sum = 0;
    for (long k = 0; k < nbatches && e == SLUICE_OK; k++) {
        for (size_t r = 0; r < b; r++) {
            uint64_t g = (uint64_t)k * b + r;
            for (int y = 0; y < SIDE; y++)
                for (int x = 0; x < SIDE; x++)
                    image[(r * SIDE + (size_t)y) * SIDE + (size_t)x] =
                        (uint8_t)((g * 31 + (uint64_t)y * 7 + (uint64_t)x * 13) & 0xff);
            label[r] = (uint8_t)(g % 10);
            for (int j = 0; j < NVALUES; j++)
                value[r * NVALUES + (size_t)j] = (float)g + (float)j / 4.0f;
        }
        sluice_tensor t[3] = {
            {.name = "image", .dtype = SLUICE_DTYPE_UINT8, .ndim = 3, .shape = {b, SIDE, SIDE},
             .data = image, .nbytes = b * SIDE * SIDE},
            {.name = "label", .dtype = SLUICE_DTYPE_UINT8, .ndim = 1, .shape = {b},
             .data = label, .nbytes = b},
            {.name = "value", .dtype = SLUICE_DTYPE_FLOAT32, .ndim = 2, .shape = {b, NVALUES},
             .data = value, .nbytes = b * NVALUES * sizeof *value},
        };
        for (int i = 0; i < 3; i++)
            sum += sluicei_record_hash(t[i].data, t[i].nbytes);
        e = sluice_producer_push_tensors(p, b, t, 3);
    }
    if (e == SLUICE_OK)
        e = sluice_producer_flush(p);
    if (e != SLUICE_OK)
        fprintf(stderr, "push-tensors: %s: %s\n", sluice_strerror(e), sluice_producer_errstr(p));
    else
        printf("batches=%ld records=%ld checksum=%016" PRIx64 "\n", nbatches, nbatches * bsize, sum);
    sluice_producer_close(p);
    free(image);
    free(label);
    free(value);
    return e == SLUICE_OK ? 0 : 1;
}
