/* Fixed-size binary records (reader.h), format "fixed:SIZE".
 *
 * The file is a plain array of records of SIZE bytes each (1 B .. 1 GiB),
 * without any header. Its size must be a multiple of SIZE: trailing bytes
 * are an error at open, naming them. Only regular files: the record count
 * comes from the size, so ranges seek instead of reading. */
#include "../reader.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IO_BUFFER_BYTES ((size_t)256 << 10)

typedef struct fixed_source {
    sluicei_source base;
    FILE *f;
    char *path;
    unsigned char *buf;
    size_t size;            /* bytes per record */
    uint64_t nrecords, next;
} fixed_source;

/* Parses SIZE: decimal, 1..SLUICEI_READER_MAX_RECORD, nothing else. */
static int parse_size(const char *arg, size_t *out)
{
    uint64_t v = 0;
    if (!arg || !*arg)
        return -1;
    for (const char *p = arg; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > SLUICEI_READER_MAX_RECORD)
            return -1;
    }
    if (v == 0)
        return -1;
    *out = (size_t)v;
    return 0;
}

static sluice_err fixed_check_arg(const char *arg, char *err, size_t errlen)
{
    size_t size;
    if (parse_size(arg, &size) != 0) {
        snprintf(err, errlen, "fixed:SIZE needs SIZE in bytes, 1..%" PRIu64 " (got '%s')",
                 SLUICEI_READER_MAX_RECORD, arg ? arg : "");
        return SLUICE_ERR_INVALID;
    }
    return SLUICE_OK;
}

static void fixed_close(sluicei_source *base)
{
    fixed_source *s = (fixed_source *)base;
    if (s->f)
        fclose(s->f);
    free(s->path);
    free(s->buf);
    free(s);
}

static sluice_err fail_sys(fixed_source *s, const char *call, int errnum, char *err,
                           size_t errlen)
{
    snprintf(err, errlen, "%s: %s: %s", s->path, call, strerror(errnum));
    return SLUICE_ERR_SYS;
}

static sluice_err fixed_open(sluicei_source **out, const sluicei_roots *roots,
                             const char *const *paths, const char *arg, char *err,
                             size_t errlen)
{
    struct stat st;
    size_t size;
    int fd;
    sluice_err e = SLUICE_OK;
    *out = NULL;
    if (parse_size(arg, &size) != 0)
        return fixed_check_arg(arg, err, errlen);
    fixed_source *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(paths[0]))) {
        free(s);
        snprintf(err, errlen, "%s: out of memory", paths[0]);
        return SLUICE_ERR_NOMEM;
    }
    s->base.fmt = &sluicei_reader_fixed;
    s->size = size;
    e = sluicei_input_open(roots, s->path, 0, &fd, &st, err, errlen);
    if (e == SLUICE_OK && !(s->f = fdopen(fd, "rb"))) {
        e = fail_sys(s, "fdopen", errno, err, errlen);
        close(fd);
    }
    if (e != SLUICE_OK) {
        fixed_close(&s->base);
        return e;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (fixed:SIZE needs the file size)",
                 s->path);
        e = SLUICE_ERR_INVALID;
    } else if ((uint64_t)st.st_size % size != 0) {
        snprintf(err, errlen, "%s: size %" PRIu64 " is not a multiple of %zu: %" PRIu64
                 " trailing bytes after %" PRIu64 " records", s->path, (uint64_t)st.st_size,
                 size, (uint64_t)st.st_size % size, (uint64_t)st.st_size / size);
        e = SLUICE_ERR_FORMAT;
    } else if (!(s->buf = malloc(size))) {
        snprintf(err, errlen, "%s: out of memory for records of %zu bytes", s->path, size);
        e = SLUICE_ERR_NOMEM;
    }
    if (e != SLUICE_OK) {
        fixed_close(&s->base);
        return e;
    }
    s->nrecords = (uint64_t)st.st_size / size;
    if (size < IO_BUFFER_BYTES)
        setvbuf(s->f, NULL, _IOFBF, IO_BUFFER_BYTES);
    *out = &s->base;
    return SLUICE_OK;
}

static sluice_err fixed_next(sluicei_source *base, sluice_record *rec, char *err, size_t errlen)
{
    fixed_source *s = (fixed_source *)base;
    if (s->next >= s->nrecords)
        return SLUICE_EOF;
    size_t n = fread(s->buf, 1, s->size, s->f);
    if (n < s->size) {
        if (ferror(s->f))
            return fail_sys(s, "read", errno ? errno : EIO, err, errlen);
        snprintf(err, errlen, "%s: offset %" PRIu64 ": truncated record (%zu of %zu bytes): "
                 "the file shrank while read", s->path, s->next * s->size, n, s->size);
        return SLUICE_ERR_FORMAT;
    }
    s->next++;
    rec->data = s->buf;
    rec->len = s->size;
    return SLUICE_OK;
}

static sluice_err fixed_skip(sluicei_source *base, uint64_t n, uint64_t *done, char *err,
                             size_t errlen)
{
    fixed_source *s = (fixed_source *)base;
    uint64_t left = s->nrecords - s->next;
    *done = n < left ? n : left;
    uint64_t off = (s->next + *done) * s->size;
    if (off > INT64_MAX || fseeko(s->f, (off_t)off, SEEK_SET) != 0)
        return fail_sys(s, "seek", errno ? errno : EINVAL, err, errlen);
    s->next += *done;
    return SLUICE_OK;
}

static sluice_err fixed_count(sluicei_source *base, uint64_t *n, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    *n = ((fixed_source *)base)->nrecords;
    return SLUICE_OK;
}

const sluicei_reader_format sluicei_reader_fixed = {
    .name = "fixed",
    .summary = "as fixed:SIZE: records of SIZE bytes back to back, no header",
    .group = 1,
    .check_arg = fixed_check_arg,
    .open = fixed_open,
    .next = fixed_next,
    .skip = fixed_skip,
    .count = fixed_count,
    .close = fixed_close,
};
