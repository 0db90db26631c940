/* Record readers: turn an input file into a sequence of records. Internal.
 *
 * A reader knows files and formats, nothing of Redis or batches. Each
 * format lives in one file under producer/src/readers/ and exports one
 * sluicei_reader_format; adding a format means writing that file and adding
 * one line to SLUICEI_READER_FORMATS below.
 *
 *     sluicei_reader *r;
 *     sluice_record rec;
 *     if (sluicei_reader_open(&r, "tfrecord", path, err, sizeof err) != SLUICE_OK) ...
 *     while ((e = sluicei_reader_next(r, &rec, err, sizeof err)) == SLUICE_OK)
 *         use(rec.data, rec.len);          // valid until the next call
 *     // e == SLUICE_EOF: clean end; anything else: err says what and where
 *     sluicei_reader_close(r);
 *
 * Errors are one line: "FILE: offset N: <what>" for corrupt or truncated
 * input (SLUICE_ERR_FORMAT, N = byte offset where the bad record starts),
 * "FILE: <call>: <strerror>" for system errors (SLUICE_ERR_SYS). No record
 * is ever larger than SLUICEI_READER_MAX_RECORD, and a reader never
 * allocates by a length read from the file before checking it against that
 * limit and against what the file still holds.
 *
 * A reader is used by one thread at a time. */
#ifndef SLUICE_READER_H
#define SLUICE_READER_H

#include <sluice/batch.h>
#include <sluice/common.h>

#include <stdio.h>
#include <string.h>

/* Largest single record any reader returns (1 GiB). */
#define SLUICEI_READER_MAX_RECORD ((uint64_t)1 << 30)

typedef struct sluicei_reader sluicei_reader;

/* What a format file provides. */
typedef struct sluicei_reader_format {
    const char *name;      /* as given to --format */
    const char *summary;   /* one line for --help */
    /* Opens path. On SLUICE_OK *out is a new reader whose first member is
     * a sluicei_reader whose fmt points back here. */
    sluice_err (*open)(sluicei_reader **out, const char *path, char *err, size_t errlen);
    sluice_err (*next)(sluicei_reader *r, sluice_record *rec, char *err, size_t errlen);
    void (*close)(sluicei_reader *r);
} sluicei_reader_format;

/* The common head of every format's reader struct. */
struct sluicei_reader {
    const sluicei_reader_format *fmt;
};

extern const sluicei_reader_format sluicei_reader_tfrecord;   /* readers/tfrecord.c */
extern const sluicei_reader_format sluicei_reader_lines;      /* readers/lines.c */

/* Every known format, in the order --help lists them. */
#define SLUICEI_READER_FORMATS { &sluicei_reader_tfrecord, &sluicei_reader_lines }

/* Number of formats and format i (NULL when out of range): for --help. */
static inline const sluicei_reader_format *sluicei_reader_format_at(size_t i)
{
    static const sluicei_reader_format *const all[] = SLUICEI_READER_FORMATS;
    return i < sizeof all / sizeof all[0] ? all[i] : NULL;
}

/* Opens path as format (a name from SLUICEI_READER_FORMATS). On SLUICE_OK
 * *out is a new reader owned by the caller (sluicei_reader_close()); on
 * failure *out is NULL and err says why: SLUICE_ERR_INVALID for an unknown
 * format, SLUICE_ERR_SYS when the file cannot be opened. */
static inline sluice_err sluicei_reader_open(sluicei_reader **out, const char *format,
                                             const char *path, char *err, size_t errlen)
{
    const sluicei_reader_format *f;
    *out = NULL;
    for (size_t i = 0; (f = sluicei_reader_format_at(i)) != NULL; i++)
        if (strcmp(f->name, format) == 0)
            return f->open(out, path, err, errlen);
    if (err && errlen)
        snprintf(err, errlen, "unknown format '%s'", format);
    return SLUICE_ERR_INVALID;
}

/* Reads the next record. SLUICE_OK: *rec points into the reader and stays
 * valid until the next call or close. SLUICE_EOF: the input ended cleanly.
 * SLUICE_ERR_FORMAT / SLUICE_ERR_SYS / SLUICE_ERR_NOMEM: err says what and
 * where; the reader must not be read further. */
static inline sluice_err sluicei_reader_next(sluicei_reader *r, sluice_record *rec, char *err,
                                             size_t errlen)
{
    return r->fmt->next(r, rec, err, errlen);
}

/* Closes the file and frees r. NULL is a no-op. */
static inline void sluicei_reader_close(sluicei_reader *r)
{
    if (r)
        r->fmt->close(r);
}

#endif
