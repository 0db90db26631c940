/* TFRecord reader (reader.h).
 *
 * A TFRecord file is a sequence of records, each framed as
 *     uint64  length, little-endian
 *     uint32  masked CRC-32C of the 8 length bytes
 *     byte    data[length]
 *     uint32  masked CRC-32C of data
 * (masking: crc32c.h). Both CRCs are checked; an error names the offset at
 * which the bad record starts. */
#include "../reader.h"
#include "../crc32c.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES 12
#define FOOTER_BYTES 4
/* stdio buffer: large enough that small records cost no syscall each. */
#define IO_BUFFER_BYTES ((size_t)256 << 10)
/* First allocation when the file size is unknown (a pipe). */
#define GROW_MIN ((size_t)64 << 10)

typedef struct tf_reader {
    sluicei_source base;
    FILE *f;
    char *path;
    char *iobuf;
    uint64_t off;            /* offset of the next record */
    int sized;               /* regular file: size is known */
    uint64_t size;
    unsigned char *buf;      /* data + footer of the current record */
    size_t cap;
} tf_reader;

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static sluice_err fail_format(tf_reader *r, uint64_t at, char *err, size_t errlen,
                              const char *what)
{
    snprintf(err, errlen, "%s: offset %" PRIu64 ": %s", r->path, at, what);
    return SLUICE_ERR_FORMAT;
}

static sluice_err fail_sys(tf_reader *r, const char *call, int errnum, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s: %s", r->path, call, strerror(errnum));
    return SLUICE_ERR_SYS;
}

static void tf_close(sluicei_source *base)
{
    tf_reader *r = (tf_reader *)base;
    if (r->f)
        fclose(r->f);
    free(r->iobuf);
    free(r->path);
    free(r->buf);
    free(r);
}

static sluice_err tf_open(sluicei_source **out, const sluicei_roots *roots,
                          const char *const *paths, const char *arg, char *err, size_t errlen)
{
    const char *path = paths[0];
    (void)arg;
    struct stat st;
    tf_reader *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r || !(r->path = strdup(path)) || !(r->iobuf = malloc(IO_BUFFER_BYTES))) {
        if (r) {
            free(r->path);
            free(r);
        }
        snprintf(err, errlen, "%s: out of memory", path);
        return SLUICE_ERR_NOMEM;
    }
    r->base.fmt = &sluicei_reader_tfrecord;
    int fd;
    sluice_err e = sluicei_input_open(roots, path, 0, &fd, &st, err, errlen);
    if (e == SLUICE_OK && !(r->f = fdopen(fd, "rb"))) {
        e = fail_sys(r, "fdopen", errno, err, errlen);
        close(fd);
    }
    if (e != SLUICE_OK) {
        tf_close(&r->base);
        return e;
    }
    r->sized = S_ISREG(st.st_mode);
    r->size = r->sized ? (uint64_t)st.st_size : 0;
    setvbuf(r->f, r->iobuf, _IOFBF, IO_BUFFER_BYTES);
    *out = &r->base;
    return SLUICE_OK;
}

/* Makes room for at least want bytes in r->buf (want is already checked
 * against the record limit). */
static int reserve(tf_reader *r, size_t want)
{
    if (want <= r->cap)
        return 0;
    unsigned char *nb = realloc(r->buf, want);
    if (!nb)
        return -1;
    r->buf = nb;
    r->cap = want;
    return 0;
}

static sluice_err tf_next(sluicei_source *base, sluice_record *rec, char *err, size_t errlen)
{
    tf_reader *r = (tf_reader *)base;
    const uint64_t start = r->off;
    unsigned char hdr[HEADER_BYTES];
    char what[160];

    size_t got = fread(hdr, 1, sizeof hdr, r->f);
    if (got < sizeof hdr) {
        if (ferror(r->f))
            return fail_sys(r, "read", errno ? errno : EIO, err, errlen);
        if (got == 0)
            return SLUICE_EOF;
        snprintf(what, sizeof what, "truncated record header (%zu of %d bytes)", got,
                 HEADER_BYTES);
        return fail_format(r, start, err, errlen, what);
    }

    const uint64_t len = le64(hdr);
    const uint32_t len_crc = sluicei_crc32c_mask(sluicei_crc32c(0, hdr, 8));
    if (len_crc != le32(hdr + 8)) {
        snprintf(what, sizeof what, "length CRC mismatch (stored 0x%08" PRIx32
                 ", computed 0x%08" PRIx32 ")%s", le32(hdr + 8), len_crc,
                 start == 0 ? ": is this a TFRecord file?" : "");
        return fail_format(r, start, err, errlen, what);
    }
    if (len > SLUICEI_READER_MAX_RECORD) {
        snprintf(what, sizeof what, "record length %" PRIu64 " exceeds the limit of %" PRIu64
                 " bytes", len, SLUICEI_READER_MAX_RECORD);
        return fail_format(r, start, err, errlen, what);
    }
    const uint64_t need = len + FOOTER_BYTES;
    if (r->sized) {
        uint64_t left = r->size > start + HEADER_BYTES ? r->size - start - HEADER_BYTES : 0;
        if (need > left) {
            snprintf(what, sizeof what, "truncated record: length %" PRIu64 " needs %" PRIu64
                     " more bytes, the file has %" PRIu64, len, need, left);
            return fail_format(r, start, err, errlen, what);
        }
    }

    /* With a known size the whole record is checked to be there, so one
     * allocation is safe; from a pipe, grow only as bytes actually arrive,
     * so that a lying length cannot make us allocate a GiB up front. */
    uint64_t have = 0;
    while (have < need) {
        if (have == r->cap) {
            uint64_t want = r->sized ? need : (r->cap ? (uint64_t)r->cap * 2 : GROW_MIN);
            if (want > need)
                want = need;
            if (reserve(r, (size_t)want) != 0) {
                snprintf(what, sizeof what, "out of memory for a record of %" PRIu64 " bytes",
                         len);
                fail_format(r, start, err, errlen, what);
                return SLUICE_ERR_NOMEM;
            }
        }
        uint64_t chunk = need - have < r->cap - have ? need - have : r->cap - have;
        size_t n = fread(r->buf + have, 1, (size_t)chunk, r->f);
        if (n == 0) {
            if (ferror(r->f))
                return fail_sys(r, "read", errno ? errno : EIO, err, errlen);
            snprintf(what, sizeof what, "truncated record: %" PRIu64 " of %" PRIu64
                     " data and CRC bytes present", have, need);
            return fail_format(r, start, err, errlen, what);
        }
        have += n;
    }

    const uint32_t data_crc = sluicei_crc32c_mask(sluicei_crc32c(0, r->buf, (size_t)len));
    if (data_crc != le32(r->buf + len)) {
        snprintf(what, sizeof what, "data CRC mismatch (stored 0x%08" PRIx32
                 ", computed 0x%08" PRIx32 ") in a record of %" PRIu64 " bytes",
                 le32(r->buf + len), data_crc, len);
        return fail_format(r, start, err, errlen, what);
    }
    r->off = start + HEADER_BYTES + need;
    rec->data = r->buf;
    rec->len = (size_t)len;
    return SLUICE_OK;
}

const sluicei_reader_format sluicei_reader_tfrecord = {
    .name = "tfrecord",
    .summary = "TFRecord, both CRC-32Cs checked",
    .group = 1,
    .open = tf_open,
    .next = tf_next,
    .close = tf_close,
};
