/* Newline-separated records (reader.h).
 *
 * Each record is the bytes up to, not including, a '\n'. A last line
 * without a final '\n' is still a record; an empty line is an empty record
 * (so "a\n\nb" holds "a", "" and "b", and an empty file holds none). Only
 * '\n' separates: a '\r' before it is part of the record, and so is any
 * other byte, NUL included. */
#include "../reader.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BUF_INITIAL ((size_t)256 << 10)

typedef struct lines_reader {
    sluicei_source base;
    FILE *f;
    char *path;
    char *buf;           /* window of the file: [start, end) is unread */
    size_t cap, start, end;
    size_t scanned;      /* [start, scanned) holds no '\n' */
    uint64_t buf_off;    /* file offset of buf[0] */
    int eof;
} lines_reader;

static sluice_err fail_sys(lines_reader *r, const char *call, int errnum, char *err,
                           size_t errlen)
{
    snprintf(err, errlen, "%s: %s: %s", r->path, call, strerror(errnum));
    return SLUICE_ERR_SYS;
}

static void lines_close(sluicei_source *base)
{
    lines_reader *r = (lines_reader *)base;
    if (r->f)
        fclose(r->f);
    free(r->path);
    free(r->buf);
    free(r);
}

static sluice_err lines_open(sluicei_source **out, const sluicei_roots *roots,
                             const char *const *paths, const char *arg, char *err,
                             size_t errlen)
{
    const char *path = paths[0];
    (void)arg;
    struct stat st;
    int fd = -1;
    lines_reader *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r || !(r->path = strdup(path)) || !(r->buf = malloc(BUF_INITIAL))) {
        if (r) {
            free(r->path);
            free(r);
        }
        snprintf(err, errlen, "%s: out of memory", path);
        return SLUICE_ERR_NOMEM;
    }
    r->base.fmt = &sluicei_reader_lines;
    r->cap = BUF_INITIAL;
    sluice_err e = sluicei_input_open(roots, path, 0, &fd, &st, err, errlen);
    if (e == SLUICE_OK && !(r->f = fdopen(fd, "rb"))) {
        e = fail_sys(r, "fdopen", errno, err, errlen);
        close(fd);
    }
    if (e != SLUICE_OK) {
        lines_close(&r->base);
        return e;
    }
    /* We read in large chunks into our own window: stdio's buffer would
     * only add a copy. */
    setvbuf(r->f, NULL, _IONBF, 0);
    *out = &r->base;
    return SLUICE_OK;
}

static sluice_err lines_next(sluicei_source *base, sluice_record *rec, char *err, size_t errlen)
{
    lines_reader *r = (lines_reader *)base;
    for (;;) {
        char *nl = memchr(r->buf + r->scanned, '\n', r->end - r->scanned);
        if (nl) {
            rec->data = r->buf + r->start;
            rec->len = (size_t)(nl - (r->buf + r->start));
            r->start = r->scanned = (size_t)(nl - r->buf) + 1;
            return SLUICE_OK;
        }
        r->scanned = r->end;
        if (r->eof) {
            if (r->start == r->end)
                return SLUICE_EOF;
            rec->data = r->buf + r->start;
            rec->len = r->end - r->start;
            r->start = r->end;
            return SLUICE_OK;
        }
        /* Keep only the unfinished line; the record returned last time
         * is no longer needed. */
        if (r->start > 0) {
            memmove(r->buf, r->buf + r->start, r->end - r->start);
            r->buf_off += r->start;
            r->end -= r->start;
            r->scanned -= r->start;
            r->start = 0;
        }
        if (r->end == r->cap) {
            if (r->cap > SLUICEI_READER_MAX_RECORD) {
                snprintf(err, errlen, "%s: offset %" PRIu64 ": line longer than %" PRIu64
                         " bytes", r->path, r->buf_off, SLUICEI_READER_MAX_RECORD);
                return SLUICE_ERR_FORMAT;
            }
            /* One byte beyond the limit, for the '\n' of a longest line. */
            size_t ncap = r->cap * 2;
            if (ncap > SLUICEI_READER_MAX_RECORD + 1)
                ncap = (size_t)SLUICEI_READER_MAX_RECORD + 1;
            char *nb = realloc(r->buf, ncap);
            if (!nb) {
                snprintf(err, errlen, "%s: offset %" PRIu64 ": out of memory for a line of "
                         "over %zu bytes", r->path, r->buf_off, r->end);
                return SLUICE_ERR_NOMEM;
            }
            r->buf = nb;
            r->cap = ncap;
        }
        size_t n = fread(r->buf + r->end, 1, r->cap - r->end, r->f);
        if (n == 0) {
            if (ferror(r->f))
                return fail_sys(r, "read", errno ? errno : EIO, err, errlen);
            r->eof = 1;
        }
        r->end += n;
    }
}

const sluicei_reader_format sluicei_reader_lines = {
    .name = "lines",
    .summary = "one record per line, newline removed; an empty line is an empty record",
    .group = 1,
    .open = lines_open,
    .next = lines_next,
    .close = lines_close,
};
