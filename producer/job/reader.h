/* Record readers: turn input files into a sequence of records. Internal.
 *
 * A reader knows files and formats, nothing of Redis or batches. Each
 * format lives in one file under producer/src/readers/ and exports one
 * sluicei_reader_format; adding a format means writing that file and adding
 * one line to SLUICEI_READER_FORMATS below. reader.c holds the generic
 * layer every format shares: several paths read one after another, and a
 * record range [start, end) over their concatenation.
 *
 *     sluicei_reader *r;
 *     sluice_record rec;
 *     const char *paths[] = {"a.tfrecord", "b.tfrecord"};
 *     if (sluicei_reader_open(&r, "tfrecord", paths, 2, 100, 200, err, sizeof err) != SLUICE_OK) ...
 *     while ((e = sluicei_reader_next(r, &rec, err, sizeof err)) == SLUICE_OK)
 *         use(rec.data, rec.len);          // valid until the next call
 *     // e == SLUICE_EOF: clean end; anything else: err says what and where
 *     sluicei_reader_close(r);
 *
 * Record readers and tensor readers. Most formats yield opaque records.
 * A tensor format (idx) yields ROWS: each record is one row whose columns
 * are stored back to back, column i taking columns[i].row_bytes bytes, in
 * the order sluicei_reader_columns() lists them (idx: 784 image bytes then
 * 1 label byte). Whoever batches B rows makes, per column, the tensor
 * "name dtype [B, row shape...]"; the reader itself knows nothing of
 * batches. A transform plugin receives the rows as they are (packed).
 *
 * Errors are one line: "FILE: offset N: <what>" for corrupt or truncated
 * input (SLUICE_ERR_FORMAT, N = byte offset where the bad record starts;
 * gzip input names the record instead: "FILE: truncated at image K"),
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

#include "roots.h"

#include <stdio.h>
#include <string.h>

/* Largest single record any reader returns (1 GiB). */
#define SLUICEI_READER_MAX_RECORD ((uint64_t)1 << 30)
/* Most columns a tensor format may have. */
#define SLUICEI_READER_MAX_COLUMNS 8
/* Longest column name (the wire format's tensor-name limit). */
#define SLUICEI_COLUMN_NAME_MAX 64

typedef struct sluicei_reader sluicei_reader;   /* opaque: reader.c */
typedef struct sluicei_source sluicei_source;

/* One column of a tensor format: the shape of ONE row (a batch of B rows
 * is a tensor of shape [B, shape...]). */
typedef struct sluicei_column {
    char name[SLUICEI_COLUMN_NAME_MAX + 1];
    sluice_dtype dtype;
    int ndim;                              /* dims of a row: 0 (scalar) .. SLUICE_MAX_DIMS-1 */
    uint64_t shape[SLUICE_MAX_DIMS - 1];
    size_t row_bytes;                      /* product(shape) * sluice_dtype_size(dtype) */
} sluicei_column;

/* What a format file provides. The generic layer (reader.c) opens one
 * SOURCE per group of paths, reads sources one after another and applies
 * the record range. */
typedef struct sluicei_reader_format {
    const char *name;      /* as given to --format or in a manifest, before any ':' */
    const char *summary;   /* one line for --help */
    const char *unit;      /* what a record is called in messages ("images"); NULL: "records" */
    /* Paths per source: 1 for most formats (several paths are read one
     * after another); idx: 2 (images, labels), and then the number of
     * paths must be a multiple of it. */
    size_t group;
    /* Validates the text after "name:" (arg is NULL when there is none).
     * NULL: the format takes no argument. */
    sluice_err (*check_arg)(const char *arg, char *err, size_t errlen);
    /* Opens the `group` paths as one source, every file through
     * sluicei_input_open(roots, ...) (roots.h; NULL: no policy), and keeps
     * roots for files it opens later. On SLUICE_OK *out is a new source
     * whose first member is a sluicei_source whose fmt points back here.
     * arg as for check_arg (already checked). */
    sluice_err (*open)(sluicei_source **out, const sluicei_roots *roots,
                       const char *const *paths, const char *arg, char *err, size_t errlen);
    /* Next record: as sluicei_reader_next(). */
    sluice_err (*next)(sluicei_source *s, sluice_record *rec, char *err, size_t errlen);
    /* Optional: skips up to n records without returning them; *done is how
     * many were skipped (less than n only at the end of the source). NULL:
     * the generic layer calls next() n times. */
    sluice_err (*skip)(sluicei_source *s, uint64_t n, uint64_t *done, char *err, size_t errlen);
    /* Optional: the number of records of the whole source, cheaply (from a
     * header or the file size), right after open. NULL: counting scans. */
    sluice_err (*count)(sluicei_source *s, uint64_t *n, char *err, size_t errlen);
    /* Optional, tensor formats only: the columns of a row (*n of them,
     * at most SLUICEI_READER_MAX_COLUMNS), owned by the source. */
    const sluicei_column *(*columns)(sluicei_source *s, size_t *n);
    void (*close)(sluicei_source *s);
} sluicei_reader_format;

/* The common head of every format's source struct. */
struct sluicei_source {
    const sluicei_reader_format *fmt;
};

extern const sluicei_reader_format sluicei_reader_tfrecord;   /* readers/tfrecord.c */
extern const sluicei_reader_format sluicei_reader_lines;      /* readers/lines.c */
extern const sluicei_reader_format sluicei_reader_idx;        /* readers/idx.c */
extern const sluicei_reader_format sluicei_reader_fixed;      /* readers/fixed.c */
extern const sluicei_reader_format sluicei_reader_files;      /* readers/files.c */

/* Every known format, in the order --help lists them. */
#define SLUICEI_READER_FORMATS                                                    \
    {                                                                             \
        &sluicei_reader_tfrecord, &sluicei_reader_lines, &sluicei_reader_idx,     \
            &sluicei_reader_fixed, &sluicei_reader_files                          \
    }

/* Format i (NULL when out of range): for --help. */
const sluicei_reader_format *sluicei_reader_format_at(size_t i);

/* Looks up a format spec "name" or "name:arg" (fixed:4096) and checks the
 * argument and the number of paths (npaths >= 1 and a multiple of the
 * format's group). Pass npaths 0 to check only the name. On SLUICE_OK
 * *fmt (if not NULL) is the format; SLUICE_ERR_INVALID otherwise, err says
 * why ("unknown format 'x'", "fixed: SIZE must be 1..1073741824 bytes",
 * "idx takes pairs of paths (images labels), got 3"). */
sluice_err sluicei_reader_check(const char *format, size_t npaths,
                                const sluicei_reader_format **fmt, char *err, size_t errlen);

/* Opens paths[0..npaths) (read one after another, or in groups for a
 * tensor format) as format and positions it at record `start` of their
 * concatenation; the reader returns records [start, end), end UINT64_MAX
 * meaning "to the end". On SLUICE_OK *out is a new reader owned by the
 * caller (sluicei_reader_close()); on failure *out is NULL and err says
 * why: SLUICE_ERR_INVALID for an unknown format, a bad argument or path
 * count, or start > end; SLUICE_ERR_SYS when a file cannot be opened;
 * SLUICE_ERR_FORMAT for corrupt input met while skipping, or a range
 * beyond the data ("idx: range 0:70000 but FILE holds 60000 images").
 * The range check against the end of the data happens at open when the
 * format counts cheaply (idx, fixed, files) and otherwise when next()
 * reaches the end of the data before `end`. Files are opened one at a
 * time as reading reaches them, as open(2) does, with no policy: for
 * input a producer must not trust, see sluicei_reader_open_in(). */
sluice_err sluicei_reader_open(sluicei_reader **out, const char *format,
                               const char *const *paths, size_t npaths, uint64_t start,
                               uint64_t end, char *err, size_t errlen);

/* As sluicei_reader_open(), every file opened through roots (roots.h): a
 * path it refuses fails like a missing file, with SLUICE_ERR_INVALID and
 * "PATH: refused: <why>". roots must outlive the reader; NULL is no
 * policy. */
sluice_err sluicei_reader_open_in(sluicei_reader **out, const sluicei_roots *roots,
                                  const char *format, const char *const *paths, size_t npaths,
                                  uint64_t start, uint64_t end, char *err, size_t errlen);

/* Reads the next record (or row). SLUICE_OK: *rec points into the reader
 * and stays valid until the next call or close. SLUICE_EOF: the range
 * ended cleanly. SLUICE_ERR_FORMAT / SLUICE_ERR_SYS / SLUICE_ERR_NOMEM:
 * err says what and where; the reader must not be read further. */
sluice_err sluicei_reader_next(sluicei_reader *r, sluice_record *rec, char *err, size_t errlen);

/* The columns of a tensor reader's rows (*n of them), owned by r and valid
 * until close; NULL with *n = 0 for a record reader. Known right after
 * open. */
const sluicei_column *sluicei_reader_columns(const sluicei_reader *r, size_t *n);

/* Closes the files and frees r. NULL is a no-op. */
void sluicei_reader_close(sluicei_reader *r);

/* Counts the records of the concatenation of paths as format (no range).
 * Cheap for idx (headers), fixed (file sizes) and files (directory
 * listings); tfrecord and lines read every file through (CRCs checked).
 * Errors as for sluicei_reader_open(). */
sluice_err sluicei_reader_count(const char *format, const char *const *paths, size_t npaths,
                                uint64_t *n, char *err, size_t errlen);

/* ---- --exec: records from a command's stdout (readers/exec.c) ---------- */

typedef enum sluicei_exec_mode {
    /* Each record: a 4-byte little-endian length, then that many bytes
     * (at most SLUICEI_READER_MAX_RECORD). End of stdout between two
     * records is the end. */
    SLUICEI_EXEC_FRAMED = 0,
    /* A stream of complete v1 msgpack batch frames (docs/PROTOCOL.md),
     * each at most SLUICE_MAX_BATCH_BYTES_DEFAULT bytes. Their ids are
     * ignored (the producer stamps its own). A record frame yields its
     * records; a tensor frame yields its rows packed as above, with the
     * columns of the FIRST frame (every frame must have the same kind,
     * tensor names, dtypes and row shapes). */
    SLUICEI_EXEC_MSGPACK = 1,
} sluicei_exec_mode;

/* Runs `/bin/sh -c CMD` where CMD is cmd with every "{path}" replaced by
 * the paths (shell-quoted, space-separated), "{start}" by start and
 * "{end}" by end ("" when end is UINT64_MAX). The command applies the
 * range itself: the reader returns every record it writes. Its stdin is
 * /dev/null; its stderr is collected (the last 512 bytes kept) while
 * stdout is read, so neither pipe can fill and block it. At the end of
 * stdout the reader waits for the exit: status 0 gives SLUICE_EOF; any
 * other status or a signal gives SLUICE_ERR_FORMAT with "exec: CMD exited
 * with status N: <stderr tail, one line>" ("killed by signal N"). The
 * command leads a process group of its own (child.h); whatever it leaves
 * running in it when it exits is ended. Closing the reader early ends the
 * group: SIGTERM, SLUICEI_CHILD_GRACE_MS for it to exit, then SIGKILL; the
 * command is reaped. After sluicei_child_stop() (a signal handler's call)
 * a read under way or to come returns at once with SLUICE_ERR_SYS and
 * "exec: CMD: stopped: the producer is shutting down", and no command
 * starts. The command's environment is the caller's without any
 * SLUICE_* variable and without REDISCLI_AUTH.
 * roots not NULL: before the command starts, every path is checked with
 * sluicei_input_check() (a regular file or a folder under the roots; a
 * refusal is returned as such and nothing runs), and {path} gets the paths
 * as resolved (absolute, no symbolic link). NULL: paths go in as given,
 * unchecked (they need not be files at all).
 * On SLUICE_OK *out is a reader as for sluicei_reader_open() (columns: in
 * msgpack mode, those of the first tensor frame, which open reads). */
sluice_err sluicei_exec_open(sluicei_reader **out, const char *cmd, const char *const *paths,
                             size_t npaths, uint64_t start, uint64_t end,
                             sluicei_exec_mode mode, const sluicei_roots *roots, char *err,
                             size_t errlen);

/* For readers/exec.c: wraps an already open source (no range, no further
 * paths) as a reader. On failure s is closed. */
sluice_err sluicei_reader_adopt(sluicei_reader **out, sluicei_source *s, char *err,
                                size_t errlen);

#endif
