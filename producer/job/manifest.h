/* Manifests: the list of shards a job is made of. Internal.
 *
 * A manifest is a text file, one shard per line:
 *
 *     READER PATH [PATH...] [records=START:END] [split=N]
 *
 * - Blank lines and lines whose first non-blank character is '#' are
 *   ignored. Fields are separated by spaces or tabs; there is no quoting,
 *   so a path cannot hold a space, a tab or a newline.
 * - READER is a reader name: tfrecord, lines, idx, fixed:SIZE, files
 *   (reader.h). idx takes two paths: images then labels (or several such
 *   pairs, read one after another).
 * - A relative PATH is relative to the manifest's folder; it is stored as
 *   an absolute path, since producers may run elsewhere. Every path must
 *   exist and be readable when the manifest is parsed. For `files` a path
 *   may be a folder: its regular files, sorted by name, are read when the
 *   task runs (a glob is NOT expanded: no shell is involved).
 * - records=START:END selects records [START, END) of the concatenation of
 *   the paths; START or END may be empty (records=:5000, records=5000:),
 *   meaning the start and the end.
 * - split=N turns the line into N shards of equal record ranges (the first
 *   ones one record larger when the count does not divide). It needs the
 *   record count, which costs: idx reads the headers, fixed the file sizes,
 *   files the folder listings (cheap); tfrecord and lines read every file
 *   through once, at parse time. N is 1..1000000 and at most the number
 *   of records selected.
 *
 * Errors are "FILE:LINE: <what>" (SLUICE_ERR_INVALID): unknown reader, no
 * path, bad range, bad split, a path that does not exist ("FILE:LINE:
 * PATH: No such file or directory"). */
#ifndef SLUICE_MANIFEST_H
#define SLUICE_MANIFEST_H

#include <sluice/common.h>

/* One task's input: records [start, end) of the concatenation of paths,
 * read as reader (end UINT64_MAX: to the end). Every string is malloc'd
 * and owned by the shard. */
typedef struct sluicei_shard {
    char *reader;
    char **paths;
    size_t npaths;
    uint64_t start, end;
} sluicei_shard;

/* Most shards one manifest may produce (after split). */
#define SLUICEI_MANIFEST_MAX_SHARDS 1000000

/* Parses the manifest `file`. On SLUICE_OK *out is a new array of *n
 * shards in manifest order, owned by the caller (sluicei_shards_free()).
 * On failure *out is NULL, *n is 0 and err holds "FILE:LINE: <what>"
 * (SLUICE_ERR_INVALID), "FILE: <strerror>" (SLUICE_ERR_SYS: cannot read
 * the manifest) or SLUICE_ERR_NOMEM. A manifest without any shard is
 * SLUICE_ERR_INVALID ("FILE: no shard"). */
sluice_err sluicei_manifest_parse(const char *file, sluicei_shard **out, size_t *n, char *err,
                                  size_t errlen);

/* Frees the n shards of s and s itself. NULL is a no-op. */
void sluicei_shards_free(sluicei_shard *s, size_t n);

/* Frees what one shard owns (not the struct). NULL is a no-op. */
void sluicei_shard_clear(sluicei_shard *s);

/* The task definition stored in Redis (the job's taskdef) of shard s:
 * sluicei_taskdef_encode() (common/src/taskdef.h, which also decodes it).
 * Returns a malloc'd NUL-terminated string owned by the caller, NULL when
 * a path holds a tab or out of memory. */
char *sluicei_shard_encode(const sluicei_shard *s);

#endif
