/* Task definitions: the value a submit stores for each task of a job
 * (sluice:{Q}:taskdef, docs/PROTOCOL.md) and a producer decodes when it
 * claims the task. The one codec of that format; no I/O, and no knowledge
 * of readers (the job logic checks the reader name, manifest.c). Internal.
 *
 *     READER \t START \t END \t PATH1 [\t PATH2 ...]
 *
 * START and END are decimal (digits only, no sign) with START <= END; an
 * empty END means UINT64_MAX (to the end), an empty START means 0 (the
 * encoder always writes START; producers have always accepted it empty).
 * READER and every PATH are non-empty, and nothing holds a NUL byte. */
#ifndef SLUICE_TASKDEF_H
#define SLUICE_TASKDEF_H

#include <sluice/common.h>

#include <stddef.h>
#include <stdint.h>

/* A decoded task definition. Everything lies in the one allocation that
 * sluicei_taskdef_decode() returns: free() it as a whole. */
typedef struct sluicei_taskdef {
    const char *reader;
    const char *const *paths;   /* npaths >= 1 paths, none empty */
    size_t npaths;
    uint64_t start, end;        /* records [start, end); end UINT64_MAX: to the end */
} sluicei_taskdef;

/* Encodes a definition. Returns a malloc'd NUL-terminated string owned by
 * the caller, or NULL when a string holds a tab (it cannot be encoded) or
 * out of memory. */
char *sluicei_taskdef_encode(const char *reader, const char *const *paths, size_t npaths,
                             uint64_t start, uint64_t end);

/* Decodes s[0..len) (any bytes: read from Redis). On SLUICE_OK *out is a
 * new definition owned by the caller (free()). Otherwise *out is NULL and
 * why says what is wrong (one line, quoting at most a few dozen bytes of
 * s): SLUICE_ERR_INVALID (malformed) or SLUICE_ERR_NOMEM. */
sluice_err sluicei_taskdef_decode(const char *s, size_t len, sluicei_taskdef **out, char *why,
                                  size_t whylen);

#endif
