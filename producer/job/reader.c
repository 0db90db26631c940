/* The generic reader layer (reader.h): format names, several paths read
 * one after another, record ranges, counting. Formats only read one source
 * from its first record. */
#include "reader.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct sluicei_reader {
    const sluicei_reader_format *fmt;
    const sluicei_roots *roots;   /* borrowed; NULL: no policy */
    char *arg;                /* text after "name:", or NULL */
    char **paths;             /* copies; NULL for an adopted source */
    size_t npaths;
    size_t next_group;        /* first path of the next source to open */
    sluicei_source *src;      /* current source, NULL between sources */
    uint64_t pos;             /* records of the concatenation passed so far */
    uint64_t start, end;
    sluicei_column cols[SLUICEI_READER_MAX_COLUMNS];
    size_t ncols;
    int have_cols;            /* cols taken from the first source */
};

const sluicei_reader_format *sluicei_reader_format_at(size_t i)
{
    static const sluicei_reader_format *const all[] = SLUICEI_READER_FORMATS;
    return i < sizeof all / sizeof all[0] ? all[i] : NULL;
}

static const char *unit_of(const sluicei_reader_format *f)
{
    return f->unit ? f->unit : "records";
}

sluice_err sluicei_reader_check(const char *format, size_t npaths,
                                const sluicei_reader_format **out, char *err, size_t errlen)
{
    const char *colon = strchr(format, ':');
    size_t nlen = colon ? (size_t)(colon - format) : strlen(format);
    const sluicei_reader_format *f = NULL;
    for (size_t i = 0; (f = sluicei_reader_format_at(i)) != NULL; i++)
        if (strlen(f->name) == nlen && memcmp(f->name, format, nlen) == 0)
            break;
    if (!f) {
        snprintf(err, errlen, "unknown format '%s'", format);
        return SLUICE_ERR_INVALID;
    }
    if (!f->check_arg && colon) {
        snprintf(err, errlen, "format '%s' takes no ':' argument", f->name);
        return SLUICE_ERR_INVALID;
    }
    if (f->check_arg) {
        sluice_err e = f->check_arg(colon ? colon + 1 : NULL, err, errlen);
        if (e != SLUICE_OK)
            return e;
    }
    if (npaths > 0 && f->group > 1 && npaths % f->group != 0) {
        snprintf(err, errlen, "%s takes groups of %zu paths (%s), got %zu", f->name, f->group,
                 f == &sluicei_reader_idx ? "images labels" : "see --help", npaths);
        return SLUICE_ERR_INVALID;
    }
    if (out)
        *out = f;
    return SLUICE_OK;
}

/* Names the data a range did not fit: one file, or the first and last. */
static sluice_err range_error(const sluicei_reader *r, uint64_t total, char *err, size_t errlen)
{
    char range[64];
    if (r->end == UINT64_MAX)
        snprintf(range, sizeof range, "%" PRIu64 ":", r->start);
    else
        snprintf(range, sizeof range, "%" PRIu64 ":%" PRIu64, r->start, r->end);
    if (r->npaths <= r->fmt->group)
        snprintf(err, errlen, "%s: range %s but %s holds %" PRIu64 " %s", r->fmt->name, range,
                 r->paths[0], total, unit_of(r->fmt));
    else
        snprintf(err, errlen, "%s: range %s but the %zu paths %s ... %s hold %" PRIu64 " %s",
                 r->fmt->name, range, r->npaths, r->paths[0], r->paths[r->npaths - 1], total,
                 unit_of(r->fmt));
    return SLUICE_ERR_FORMAT;
}

/* Keeps the first n (at most SLUICEI_READER_MAX_COLUMNS) of columns c as
 * the reader's: the shape and type every later file's rows must have. */
static void keep_columns(sluicei_reader *r, const sluicei_column *c, size_t n)
{
    if (n > SLUICEI_READER_MAX_COLUMNS)
        n = SLUICEI_READER_MAX_COLUMNS;
    if (n)
        memcpy(r->cols, c, n * sizeof *c);
    r->ncols = n;
    r->have_cols = 1;
}

static int same_columns(const sluicei_column *a, size_t na, const sluicei_column *b, size_t nb)
{
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++) {
        if (strcmp(a[i].name, b[i].name) != 0 || a[i].dtype != b[i].dtype ||
            a[i].ndim != b[i].ndim || a[i].row_bytes != b[i].row_bytes)
            return 0;
        for (int d = 0; d < a[i].ndim; d++)
            if (a[i].shape[d] != b[i].shape[d])
                return 0;
    }
    return 1;
}

/* Opens the next group of paths as r->src (which must be NULL). Returns
 * SLUICE_EOF when there is none. */
static sluice_err open_next(sluicei_reader *r, char *err, size_t errlen)
{
    if (r->next_group >= r->npaths)
        return SLUICE_EOF;
    const char *const *group = (const char *const *)r->paths + r->next_group;
    sluice_err e = r->fmt->open(&r->src, r->roots, group, r->arg, err, errlen);
    if (e != SLUICE_OK) {
        r->src = NULL;
        return e;
    }
    r->next_group += r->fmt->group;
    size_t n = 0;
    const sluicei_column *c = r->fmt->columns ? r->fmt->columns(r->src, &n) : NULL;
    if (!r->have_cols) {
        keep_columns(r, c, n);
    } else if (!same_columns(r->cols, r->ncols, c, n)) {
        snprintf(err, errlen, "%s: rows differ in shape or type from those of %s", group[0],
                 r->paths[0]);
        return SLUICE_ERR_FORMAT;
    }
    return SLUICE_OK;
}

static void close_src(sluicei_reader *r)
{
    if (r->src)
        r->src->fmt->close(r->src);
    r->src = NULL;
}

/* Skips up to n records of the current source; *done as for fmt->skip. */
static sluice_err skip_src(sluicei_reader *r, uint64_t n, uint64_t *done, char *err,
                           size_t errlen)
{
    if (r->fmt->skip)
        return r->fmt->skip(r->src, n, done, err, errlen);
    sluice_record rec;
    *done = 0;
    while (*done < n) {
        sluice_err e = r->fmt->next(r->src, &rec, err, errlen);
        if (e == SLUICE_EOF)
            break;
        if (e != SLUICE_OK)
            return e;
        ++*done;
    }
    return SLUICE_OK;
}

/* Counts the records of the group at paths (a fresh source). */
static sluice_err count_group(sluicei_reader *r, uint64_t *n, char *err, size_t errlen)
{
    sluice_err e = open_next(r, err, errlen);
    if (e == SLUICE_OK)
        e = r->fmt->count ? r->fmt->count(r->src, n, err, errlen)
                          : skip_src(r, UINT64_MAX, n, err, errlen);
    close_src(r);
    return e;
}

void sluicei_reader_close(sluicei_reader *r)
{
    if (!r)
        return;
    close_src(r);
    if (r->paths)
        for (size_t i = 0; i < r->npaths; i++)
            free(r->paths[i]);
    free(r->paths);
    free(r->arg);
    free(r);
}

/* Allocates a reader for format over a copy of paths, opening through
 * roots. */
static sluice_err new_reader(sluicei_reader **out, const sluicei_roots *roots,
                             const char *format, const char *const *paths, size_t npaths,
                             char *err, size_t errlen)
{
    const sluicei_reader_format *f;
    *out = NULL;
    if (npaths == 0) {
        snprintf(err, errlen, "%s: no path given", format);
        return SLUICE_ERR_INVALID;
    }
    sluice_err e = sluicei_reader_check(format, npaths, &f, err, errlen);
    if (e != SLUICE_OK)
        return e;
    sluicei_reader *r = calloc(1, sizeof *r);
    const char *colon = strchr(format, ':');
    if (!r || !(r->paths = calloc(npaths, sizeof *r->paths)) || (colon && !(r->arg = strdup(colon + 1))))
        goto nomem;
    r->fmt = f;
    r->roots = roots;
    r->npaths = npaths;
    for (size_t i = 0; i < npaths; i++)
        if (!(r->paths[i] = strdup(paths[i])))
            goto nomem;
    r->end = UINT64_MAX;
    *out = r;
    return SLUICE_OK;
nomem:
    sluicei_reader_close(r);
    snprintf(err, errlen, "%s: out of memory", paths[0]);
    return SLUICE_ERR_NOMEM;
}

sluice_err sluicei_reader_open(sluicei_reader **out, const char *format,
                               const char *const *paths, size_t npaths, uint64_t start,
                               uint64_t end, char *err, size_t errlen)
{
    return sluicei_reader_open_in(out, NULL, format, paths, npaths, start, end, err, errlen);
}

sluice_err sluicei_reader_open_in(sluicei_reader **out, const sluicei_roots *roots,
                                  const char *format, const char *const *paths, size_t npaths,
                                  uint64_t start, uint64_t end, char *err, size_t errlen)
{
    sluicei_reader *r;
    sluice_err e = new_reader(&r, roots, format, paths, npaths, err, errlen);
    *out = NULL;
    if (e != SLUICE_OK)
        return e;
    r->start = start;
    r->end = end;
    if (start > end) {
        snprintf(err, errlen, "%s: bad range %" PRIu64 ":%" PRIu64 " (start after end)",
                 r->fmt->name, start, end);
        sluicei_reader_close(r);
        return SLUICE_ERR_INVALID;
    }
    /* A format that counts cheaply has its range checked now, not after
     * the task pushed half of it. */
    if (r->fmt->count && end != UINT64_MAX) {
        uint64_t total = 0, n;
        while (r->next_group < r->npaths) {
            if ((e = count_group(r, &n, err, errlen)) != SLUICE_OK)
                goto fail;
            total += n;
        }
        if (total < end) {
            e = range_error(r, total, err, errlen);
            goto fail;
        }
        r->next_group = 0;
    }
    if ((e = open_next(r, err, errlen)) != SLUICE_OK)
        goto fail;
    /* Skip to start: whole sources by their count when it is cheap. */
    int fresh = 1;
    while (r->pos < start) {
        uint64_t n;
        if (!r->src) {
            if ((e = open_next(r, err, errlen)) == SLUICE_EOF) {
                e = range_error(r, r->pos, err, errlen);
                goto fail;
            }
            if (e != SLUICE_OK)
                goto fail;
            fresh = 1;
        }
        if (fresh && r->fmt->count) {
            if ((e = r->fmt->count(r->src, &n, err, errlen)) != SLUICE_OK)
                goto fail;
            if (n <= start - r->pos) {
                r->pos += n;
                close_src(r);
                continue;
            }
        }
        fresh = 0;
        if ((e = skip_src(r, start - r->pos, &n, err, errlen)) != SLUICE_OK)
            goto fail;
        r->pos += n;
        if (r->pos < start)
            close_src(r);
    }
    *out = r;
    return SLUICE_OK;
fail:
    sluicei_reader_close(r);
    return e;
}

sluice_err sluicei_reader_adopt(sluicei_reader **out, sluicei_source *s, char *err,
                                size_t errlen)
{
    sluicei_reader *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r) {
        s->fmt->close(s);
        snprintf(err, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    r->fmt = s->fmt;
    r->src = s;
    r->end = UINT64_MAX;
    size_t n = 0;
    const sluicei_column *c = s->fmt->columns ? s->fmt->columns(s, &n) : NULL;
    keep_columns(r, c, n);
    *out = r;
    return SLUICE_OK;
}

sluice_err sluicei_reader_next(sluicei_reader *r, sluice_record *rec, char *err, size_t errlen)
{
    if (r->pos >= r->end)
        return SLUICE_EOF;
    for (;;) {
        sluice_err e;
        if (!r->src) {
            e = open_next(r, err, errlen);
            if (e == SLUICE_EOF && r->end != UINT64_MAX)
                return range_error(r, r->pos, err, errlen);
            if (e != SLUICE_OK)
                return e;
        }
        e = r->src->fmt->next(r->src, rec, err, errlen);
        if (e == SLUICE_OK) {
            r->pos++;
            return SLUICE_OK;
        }
        if (e != SLUICE_EOF)
            return e;
        close_src(r);
        if (!r->paths)   /* adopted: one source only */
            return SLUICE_EOF;
    }
}

const sluicei_column *sluicei_reader_columns(const sluicei_reader *r, size_t *n)
{
    *n = r->ncols;
    return r->ncols ? r->cols : NULL;
}

sluice_err sluicei_reader_count(const char *format, const char *const *paths, size_t npaths,
                                uint64_t *n, char *err, size_t errlen)
{
    sluicei_reader *r;
    *n = 0;
    sluice_err e = new_reader(&r, NULL, format, paths, npaths, err, errlen);
    if (e != SLUICE_OK)
        return e;
    uint64_t total = 0, k;
    while (r->next_group < r->npaths) {
        if ((e = count_group(r, &k, err, errlen)) != SLUICE_OK)
            break;
        total += k;
    }
    sluicei_reader_close(r);
    if (e == SLUICE_OK)
        *n = total;
    return e;
}
