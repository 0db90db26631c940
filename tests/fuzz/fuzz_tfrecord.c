/* libFuzzer target: the TFRecord reader (CRC checks, truncation, lengths).
 * The first input byte picks a record range, the rest is the file. Every
 * record returned must be readable to its last byte; an error must say
 * what and where. */
#include "fuzz_input.h"
#include "reader.h"

#include <string.h>

static volatile uint8_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char path[64], err[512];
    int fd = fuzz_file(path, sizeof path, data + 1, size - 1);
    if (fd < 0)
        return 0;
    const char *paths[] = {path};
    uint64_t start = data[0] & 3, end = (data[0] & 4) ? start + 2 : UINT64_MAX;
    sluicei_reader *r;
    if (sluicei_reader_open(&r, "tfrecord", paths, 1, start, end, err, sizeof err) == SLUICE_OK) {
        sluice_record rec;
        sluice_err e;
        while ((e = sluicei_reader_next(r, &rec, err, sizeof err)) == SLUICE_OK)
            if (rec.len)
                sink ^= ((const uint8_t *)rec.data)[rec.len - 1];
        if (e != SLUICE_EOF && err[0] == '\0')
            abort();
        sluicei_reader_close(r);
    }
    uint64_t n;
    sluicei_reader_count("tfrecord", paths, 1, &n, err, sizeof err);
    close(fd);
    return 0;
}
