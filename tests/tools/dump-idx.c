/* dump-idx: reads an IDX pair through the producer's idx reader and prints
 * what it saw, for comparison with an independent reading (Python) in
 * tests/integration/idx_python.sh.
 *
 * usage: dump-idx IMAGES LABELS [START END]
 * Prints "columns image uint8 [28,28] label uint8 []" then one line per
 * row: "<FNV-1a 64 of the image bytes, 16 hex digits> <label bytes in hex>".
 * Exit 0, or 1 with the reader's error on stderr. */
#include "reader.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t fnv1a64(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: dump-idx IMAGES LABELS [START END]\n");
        return 2;
    }
    uint64_t start = argc == 5 ? strtoull(argv[3], NULL, 10) : 0;
    uint64_t end = argc == 5 ? strtoull(argv[4], NULL, 10) : UINT64_MAX;
    const char *paths[] = {argv[1], argv[2]};
    char err[1024];
    sluicei_reader *r;
    if (sluicei_reader_open(&r, "idx", paths, 2, start, end, err, sizeof err) != SLUICE_OK) {
        fprintf(stderr, "dump-idx: %s\n", err);
        return 1;
    }
    size_t nc;
    const sluicei_column *c = sluicei_reader_columns(r, &nc);
    printf("columns");
    for (size_t i = 0; i < nc; i++) {
        printf(" %s %s [", c[i].name, sluice_dtype_name(c[i].dtype));
        for (int d = 0; d < c[i].ndim; d++)
            printf("%s%" PRIu64, d ? "," : "", c[i].shape[d]);
        printf("]");
    }
    printf("\n");
    sluice_record rec;
    sluice_err e;
    while ((e = sluicei_reader_next(r, &rec, err, sizeof err)) == SLUICE_OK) {
        const unsigned char *p = rec.data;
        printf("%016" PRIx64 " ", fnv1a64(p, c[0].row_bytes));
        for (size_t i = c[0].row_bytes; i < rec.len; i++)
            printf("%02x", p[i]);
        printf("\n");
    }
    sluicei_reader_close(r);
    if (e != SLUICE_EOF) {
        fprintf(stderr, "dump-idx: %s\n", err);
        return 1;
    }
    return 0;
}
