/* IDX (the MNIST format) reader (reader.h), format "idx": a tensor format.
 *
 * An IDX file is a header, then a dense array in C order:
 *     byte    0, 0
 *     byte    type: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
 *                   0x0D float32, 0x0E float64
 *     byte    ndim (1 .. SLUICE_MAX_DIMS)
 *     uint32  dims[ndim], big-endian; dims[0] is the number of rows
 *     data    product(dims) elements, big-endian
 * (MNIST images: 0x00000803, uint8 [N,28,28]; labels: 0x00000801, uint8
 * [N].) A file may be gzip-compressed (detected by its first bytes, 1f 8b)
 * or plain.
 *
 * A source is a PAIR of paths, images then labels, with the same N. Each
 * row is one image then its label, packed (reader.h): columns "image"
 * [dims 1..] and "label" [dims 1..] of the files' types, converted to
 * little-endian as the wire format wants. Checks: every dim 1..2^24
 * (dims[0] may be 0), a row at most SLUICEI_READER_MAX_RECORD bytes, a
 * plain file exactly as long as its header says; a gzip file that ends
 * early gives "FILE: truncated at image K", and its CRC is checked by
 * reading to the end of the stream after the last row. */
#include "../reader.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_DIM ((uint64_t)1 << 24)
#define GZ_BUFFER_BYTES (256u << 10)
#define DISCARD_BYTES ((size_t)64 << 10)

typedef struct idx_file {
    gzFile gz;
    char *path;
    const char *what;        /* "image" or "label", for messages */
    int gzip;
    uint64_t n;              /* dims[0] */
    sluicei_column col;
    size_t esize;            /* bytes per element */
} idx_file;

typedef struct idx_source {
    sluicei_source base;
    idx_file f[2];           /* images, labels */
    uint64_t next;           /* next row */
    int checked_end;
    unsigned char *row;      /* one packed row; see reserve_row() */
    size_t rowcap;
    unsigned char *discard;  /* DISCARD_BYTES, for skipping in gzip files */
    sluicei_column cols[2];
} idx_source;

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static sluice_dtype idx_dtype(unsigned code, size_t *esize)
{
    switch (code) {
    case 0x08: *esize = 1; return SLUICE_DTYPE_UINT8;
    case 0x09: *esize = 1; return SLUICE_DTYPE_INT8;
    case 0x0B: *esize = 2; return SLUICE_DTYPE_INT16;
    case 0x0C: *esize = 4; return SLUICE_DTYPE_INT32;
    case 0x0D: *esize = 4; return SLUICE_DTYPE_FLOAT32;
    case 0x0E: *esize = 8; return SLUICE_DTYPE_FLOAT64;
    default: *esize = 0; return SLUICE_DTYPE_INVALID;
    }
}

/* Reads exactly len bytes; returns the count read (short at end or on
 * error: see gz_fail). */
static size_t gz_read_all(gzFile gz, void *p, size_t len)
{
    size_t have = 0;
    while (have < len) {
        int n = gzread(gz, (unsigned char *)p + have, (unsigned)(len - have));
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    return have;
}

/* zlib's message for the last error, without the "<fd:N>: " it prefixes
 * (the file is opened by descriptor; messages name f->path instead). */
static const char *zmsg(idx_file *f, int *zerr)
{
    const char *msg = gzerror(f->gz, zerr);
    const char *end = strncmp(msg, "<fd:", 4) == 0 ? strstr(msg, ">: ") : NULL;
    return end ? end + 3 : msg;
}

/* Explains a short read of row k of f. */
static sluice_err gz_fail(idx_file *f, uint64_t k, char *err, size_t errlen)
{
    int zerr = Z_OK;
    const char *msg = zmsg(f, &zerr);
    if (zerr == Z_ERRNO) {
        snprintf(err, errlen, "%s: read: %s", f->path, strerror(errno ? errno : EIO));
        return SLUICE_ERR_SYS;
    }
    if (zerr == Z_OK || zerr == Z_BUF_ERROR) /* Z_BUF_ERROR: the stream ended early */
        snprintf(err, errlen, "%s: truncated at %s %" PRIu64, f->path, f->what, k);
    else
        snprintf(err, errlen, "%s: %s %" PRIu64 ": gzip: %s", f->path, f->what, k, msg);
    return SLUICE_ERR_FORMAT;
}

/* Explains a short read of the header at offset at: a gzip or system
 * error when zlib has one, else a truncation. */
static sluice_err header_fail(idx_file *f, unsigned at, const char *what, char *err,
                              size_t errlen)
{
    int zerr = Z_OK;
    const char *msg = zmsg(f, &zerr);
    if (zerr == Z_ERRNO) {
        snprintf(err, errlen, "%s: read: %s", f->path, strerror(errno ? errno : EIO));
        return SLUICE_ERR_SYS;
    }
    if (zerr != Z_OK && zerr != Z_BUF_ERROR)
        snprintf(err, errlen, "%s: header: gzip: %s", f->path, msg);
    else
        snprintf(err, errlen, "%s: offset %u: %s", f->path, at, what);
    return SLUICE_ERR_FORMAT;
}

/* Opens f->path through roots and reads and checks its header. */
static sluice_err open_file(idx_file *f, const sluicei_roots *roots, char *err, size_t errlen)
{
    unsigned char hdr[4 + 4 * SLUICE_MAX_DIMS];
    struct stat st;
    int fd;
    sluice_err e = sluicei_input_open(roots, f->path, 0, &fd, &st, err, errlen);
    if (e != SLUICE_OK)
        return e;
    /* The first two bytes, read in place (pread), tell gzip. A stream that
     * cannot seek (no policy: a pipe) is treated as gzip is: read through,
     * its header's sizes not trusted before the data arrives. */
    unsigned char magic[2] = {0, 0};
    ssize_t nm = S_ISREG(st.st_mode) ? pread(fd, magic, 2, 0) : 0;
    f->gzip = !S_ISREG(st.st_mode) || (nm == 2 && magic[0] == 0x1f && magic[1] == 0x8b);
    /* zlib reads a plain file as is ("transparent"), so one code path
     * serves both; the probe above only decides which checks apply. The
     * same descriptor: what was checked is what is read. */
    if (!(f->gz = gzdopen(fd, "rb"))) {
        snprintf(err, errlen, "%s: open: %s", f->path, strerror(errno ? errno : ENOMEM));
        close(fd);
        return SLUICE_ERR_SYS;
    }
    gzbuffer(f->gz, GZ_BUFFER_BYTES);
    if (gz_read_all(f->gz, hdr, 4) < 4)
        return header_fail(f, 0, "truncated IDX header", err, errlen);
    unsigned ndim = hdr[3];
    f->col.dtype = idx_dtype(hdr[2], &f->esize);
    if (hdr[0] != 0 || hdr[1] != 0 || f->col.dtype == SLUICE_DTYPE_INVALID || ndim < 1 ||
        ndim > SLUICE_MAX_DIMS) {
        snprintf(err, errlen, "%s: offset 0: not an IDX file (magic %02x %02x %02x %02x; "
                 "want 00 00 TYPE NDIM, TYPE 08/09/0b/0c/0d/0e, NDIM 1..%d)", f->path, hdr[0],
                 hdr[1], hdr[2], hdr[3], SLUICE_MAX_DIMS);
        return SLUICE_ERR_FORMAT;
    }
    if (gz_read_all(f->gz, hdr + 4, 4 * ndim) < 4 * ndim)
        return header_fail(f, 4, "truncated IDX header", err, errlen);
    uint64_t row_bytes = f->esize;
    f->col.ndim = (int)ndim - 1;
    for (unsigned d = 0; d < ndim; d++) {
        uint64_t v = be32(hdr + 4 + 4 * d);
        if (v > MAX_DIM || (d > 0 && v == 0)) {
            snprintf(err, errlen, "%s: offset %u: dimension %u is %" PRIu64 " (want %s..%"
                     PRIu64 ")", f->path, 4 + 4 * d, d, v, d ? "1" : "0", MAX_DIM);
            return SLUICE_ERR_FORMAT;
        }
        if (d == 0) {
            f->n = v;
            continue;
        }
        f->col.shape[d - 1] = v;
        /* Both factors are at most 2^30 and 2^24 here: no overflow. */
        row_bytes *= v;
        if (row_bytes > SLUICEI_READER_MAX_RECORD) {
            snprintf(err, errlen, "%s: rows of more than %" PRIu64 " bytes", f->path,
                     SLUICEI_READER_MAX_RECORD);
            return SLUICE_ERR_FORMAT;
        }
    }
    f->col.row_bytes = (size_t)row_bytes;
    if (!f->gzip) {
        uint64_t want = 4 + 4 * (uint64_t)ndim + f->n * row_bytes;
        uint64_t size = (uint64_t)st.st_size;
        if (S_ISREG(st.st_mode) && size != want) {
            snprintf(err, errlen, "%s: the header says %" PRIu64 " %ss of %" PRIu64
                     " bytes (%" PRIu64 " bytes in all), the file has %" PRIu64 "%s", f->path,
                     f->n, f->what, row_bytes, want, size,
                     size < want ? ": truncated" : ": trailing bytes");
            return SLUICE_ERR_FORMAT;
        }
    }
    return SLUICE_OK;
}

static void idx_close(sluicei_source *base)
{
    idx_source *s = (idx_source *)base;
    for (int i = 0; i < 2; i++) {
        if (s->f[i].gz)
            gzclose(s->f[i].gz);
        free(s->f[i].path);
    }
    free(s->row);
    free(s->discard);
    free(s);
}

static sluice_err idx_open(sluicei_source **out, const sluicei_roots *roots,
                           const char *const *paths, const char *arg, char *err, size_t errlen)
{
    sluice_err e = SLUICE_OK;
    (void)arg;
    *out = NULL;
    idx_source *s = calloc(1, sizeof *s);
    if (!s || !(s->f[0].path = strdup(paths[0])) || !(s->f[1].path = strdup(paths[1])))
        goto nomem;
    s->base.fmt = &sluicei_reader_idx;
    s->f[0].what = "image";
    s->f[1].what = "label";
    for (int i = 0; i < 2 && e == SLUICE_OK; i++)
        e = open_file(&s->f[i], roots, err, errlen);
    if (e == SLUICE_OK && s->f[0].n != s->f[1].n) {
        snprintf(err, errlen, "idx: %s holds %" PRIu64 " images but %s holds %" PRIu64
                 " labels", s->f[0].path, s->f[0].n, s->f[1].path, s->f[1].n);
        e = SLUICE_ERR_FORMAT;
    }
    if (e != SLUICE_OK) {
        idx_close(&s->base);
        return e;
    }
    if (s->f[0].col.row_bytes + s->f[1].col.row_bytes > SLUICEI_READER_MAX_RECORD) {
        snprintf(err, errlen, "%s: rows of more than %" PRIu64 " bytes", s->f[0].path,
                 SLUICEI_READER_MAX_RECORD);
        idx_close(&s->base);
        return SLUICE_ERR_FORMAT;
    }
    /* Plain files were checked to hold every row: the buffer can be
     * allocated now. A gzip header's dims are unverified until the data
     * arrives, so there the buffer grows with what is actually read. */
    if (!s->f[0].gzip && !s->f[1].gzip) {
        s->rowcap = s->f[0].col.row_bytes + s->f[1].col.row_bytes;
        if (!(s->row = malloc(s->rowcap)))
            goto nomem;
    }
    for (int i = 0; i < 2; i++) {
        s->cols[i] = s->f[i].col;
        snprintf(s->cols[i].name, sizeof s->cols[i].name, "%s", s->f[i].what);
    }
    *out = &s->base;
    return SLUICE_OK;
nomem:
    snprintf(err, errlen, "%s: out of memory", paths[0]);
    if (s)
        idx_close(&s->base);
    return SLUICE_ERR_NOMEM;
}

/* IDX data is big-endian, the wire format little-endian. */
static void to_little_endian(unsigned char *p, size_t len, size_t esize)
{
    if (esize == 1)
        return;
    for (size_t i = 0; i + esize <= len; i += esize)
        for (size_t a = i, b = i + esize - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* After the last row: a gzip stream must end there (this also makes zlib
 * check the stream's CRC). */
static sluice_err check_end(idx_source *s, char *err, size_t errlen)
{
    for (int i = 0; i < 2; i++) {
        idx_file *f = &s->f[i];
        unsigned char extra;
        if (!f->gzip)
            continue;
        int n = gzread(f->gz, &extra, 1);
        if (n == 1) {
            snprintf(err, errlen, "%s: data after the last %s (%" PRIu64 ")", f->path, f->what,
                     f->n);
            return SLUICE_ERR_FORMAT;
        }
        int zerr = Z_OK;
        const char *msg = zmsg(f, &zerr);
        if (n < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR)) {
            snprintf(err, errlen, "%s: after the last %s: gzip: %s", f->path, f->what, msg);
            return zerr == Z_ERRNO ? SLUICE_ERR_SYS : SLUICE_ERR_FORMAT;
        }
        if (zerr == Z_BUF_ERROR) {
            snprintf(err, errlen, "%s: truncated after the last %s (gzip trailer missing)",
                     f->path, f->what);
            return SLUICE_ERR_FORMAT;
        }
    }
    return SLUICE_OK;
}

static sluice_err idx_next(sluicei_source *base, sluice_record *rec, char *err, size_t errlen)
{
    idx_source *s = (idx_source *)base;
    if (s->next >= s->f[0].n) {
        if (!s->checked_end) {
            sluice_err e = check_end(s, err, errlen);
            if (e != SLUICE_OK)
                return e;
            s->checked_end = 1;
        }
        return SLUICE_EOF;
    }
    size_t at = 0;
    for (int i = 0; i < 2; i++) {
        idx_file *f = &s->f[i];
        size_t have = 0;
        while (have < f->col.row_bytes) {
            if (at + have == s->rowcap) {
                /* Grow by what arrived so far (at least 64 KiB), never
                 * straight to what the header claims. */
                size_t want = at + f->col.row_bytes + (i == 0 ? s->f[1].col.row_bytes : 0);
                size_t ncap = s->rowcap < ((size_t)64 << 10) ? (size_t)64 << 10 : s->rowcap * 2;
                if (ncap > want)
                    ncap = want;
                unsigned char *nr = realloc(s->row, ncap);
                if (!nr) {
                    snprintf(err, errlen, "%s: out of memory for rows of %zu bytes", f->path,
                             want);
                    return SLUICE_ERR_NOMEM;
                }
                s->row = nr;
                s->rowcap = ncap;
            }
            size_t chunk = s->rowcap - at - have;
            if (chunk > f->col.row_bytes - have)
                chunk = f->col.row_bytes - have;
            size_t got = gz_read_all(f->gz, s->row + at + have, chunk);
            have += got;
            if (got < chunk)
                return gz_fail(f, s->next, err, errlen);
        }
        to_little_endian(s->row + at, f->col.row_bytes, f->esize);
        at += f->col.row_bytes;
    }
    s->next++;
    rec->data = s->row;
    rec->len = at;
    return SLUICE_OK;
}

/* Skips rows: a plain file seeks, a gzip file decompresses and discards,
 * so that a truncation is found where it is. */
static sluice_err idx_skip(sluicei_source *base, uint64_t n, uint64_t *done, char *err,
                           size_t errlen)
{
    idx_source *s = (idx_source *)base;
    uint64_t left = s->f[0].n - s->next;
    uint64_t want = n < left ? n : left;
    *done = 0;
    for (int i = 0; i < 2; i++) {
        idx_file *f = &s->f[i];
        if (!f->gzip) {
            uint64_t off = 4 + 4 * (uint64_t)(f->col.ndim + 1) +
                           (s->next + want) * f->col.row_bytes;
            if (sizeof(z_off_t) < 8 && off > (uint64_t)INT32_MAX) {
                snprintf(err, errlen, "%s: file too large to seek in", f->path);
                return SLUICE_ERR_SYS;
            }
            if (gzseek(f->gz, (z_off_t)off, SEEK_SET) < 0)
                return gz_fail(f, s->next, err, errlen);
            continue;
        }
        if (!s->discard && !(s->discard = malloc(DISCARD_BYTES))) {
            snprintf(err, errlen, "%s: out of memory", f->path);
            return SLUICE_ERR_NOMEM;
        }
        uint64_t rows = 0;
        while (rows < want) {
            uint64_t chunk = DISCARD_BYTES / f->col.row_bytes;
            if (chunk == 0) {   /* rows larger than the buffer: one at a time, in pieces */
                size_t left_row = f->col.row_bytes;
                while (left_row) {
                    size_t k = left_row < DISCARD_BYTES ? left_row : DISCARD_BYTES;
                    if (gz_read_all(f->gz, s->discard, k) < k)
                        return gz_fail(f, s->next + rows, err, errlen);
                    left_row -= k;
                }
                rows++;
                continue;
            }
            if (chunk > want - rows)
                chunk = want - rows;
            size_t bytes = (size_t)chunk * f->col.row_bytes;
            size_t got = gz_read_all(f->gz, s->discard, bytes);
            if (got < bytes)
                return gz_fail(f, s->next + rows + got / f->col.row_bytes, err, errlen);
            rows += chunk;
        }
    }
    s->next += want;
    *done = want;
    return SLUICE_OK;
}

static sluice_err idx_count(sluicei_source *base, uint64_t *n, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    *n = ((idx_source *)base)->f[0].n;
    return SLUICE_OK;
}

static const sluicei_column *idx_columns(sluicei_source *base, size_t *n)
{
    *n = 2;
    return ((idx_source *)base)->cols;
}

const sluicei_reader_format sluicei_reader_idx = {
    .name = "idx",
    .summary = "MNIST IDX (gzip or plain), paths in pairs IMAGES LABELS",
    .unit = "images",
    .group = 2,
    .open = idx_open,
    .next = idx_next,
    .skip = idx_skip,
    .count = idx_count,
    .columns = idx_columns,
    .close = idx_close,
};
