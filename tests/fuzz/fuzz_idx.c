/* libFuzzer target: the IDX reader (headers, gzip, image/label pairing).
 * Input: one byte for the range, one byte for where the images file ends
 * and the labels file begins, then both files. Rows must be readable to
 * their last byte and match the columns the reader announced. */
#include "fuzz_input.h"
#include "reader.h"

#include <string.h>

static volatile uint8_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t body = size - 2;
    size_t split = body ? (size_t)data[1] * body / 255 : 0;
    char images[64], labels[64], err[512];
    int fa = fuzz_file(images, sizeof images, data + 2, split);
    int fb = fuzz_file(labels, sizeof labels, data + 2 + split, body - split);
    if (fa >= 0 && fb >= 0) {
        const char *paths[] = {images, labels};
        uint64_t start = data[0] & 3, end = (data[0] & 4) ? start + 2 : UINT64_MAX;
        sluicei_reader *r;
        if (sluicei_reader_open(&r, "idx", paths, 2, start, end, err, sizeof err) == SLUICE_OK) {
            size_t ncols, row = 0;
            const sluicei_column *cols = sluicei_reader_columns(r, &ncols);
            for (size_t i = 0; i < ncols; i++)
                row += cols[i].row_bytes;
            sluice_record rec;
            sluice_err e;
            while ((e = sluicei_reader_next(r, &rec, err, sizeof err)) == SLUICE_OK) {
                if (ncols && rec.len != row)
                    abort();
                if (rec.len)
                    sink ^= ((const uint8_t *)rec.data)[rec.len - 1];
            }
            if (e != SLUICE_EOF && err[0] == '\0')
                abort();
            sluicei_reader_close(r);
        }
    }
    if (fa >= 0)
        close(fa);
    if (fb >= 0)
        close(fb);
    return 0;
}
