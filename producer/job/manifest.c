/* Manifest parsing (manifest.h); task definitions are encoded by the
 * codec of common/src/taskdef.c. */
#include "manifest.h"
#include "num.h"
#include "reader.h"
#include "taskdef.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SPLIT 1000000
#define SEPARATORS " \t\r\v\f"

void sluicei_shard_clear(sluicei_shard *s)
{
    if (!s)
        return;
    free(s->reader);
    if (s->paths)
        for (size_t i = 0; i < s->npaths; i++)
            free(s->paths[i]);
    free(s->paths);
    memset(s, 0, sizeof *s);
}

void sluicei_shards_free(sluicei_shard *s, size_t n)
{
    if (!s)
        return;
    for (size_t i = 0; i < n; i++)
        sluicei_shard_clear(&s[i]);
    free(s);
}

/* ---- parsing ------------------------------------------------------------ */

typedef struct parser {
    const char *file;
    char *dir;               /* absolute folder of the manifest, no trailing '/' */
    unsigned long line;
    sluicei_shard *shards;
    size_t n, cap;
    char *err;
    size_t errlen;
} parser;

static sluice_err fail(parser *p, sluice_err e, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "%s:%lu: %s", p->file, p->line, what);
    return e;
}

/* Appends a shard that takes over reader and paths (copied per shard). */
static sluice_err add_shard(parser *p, const char *reader, char **paths, size_t npaths,
                            uint64_t start, uint64_t end)
{
    if (p->n >= SLUICEI_MANIFEST_MAX_SHARDS)
        return fail(p, SLUICE_ERR_INVALID, "more than %d shards", SLUICEI_MANIFEST_MAX_SHARDS);
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 16;
        sluicei_shard *ns = realloc(p->shards, ncap * sizeof *ns);
        if (!ns)
            return fail(p, SLUICE_ERR_NOMEM, "out of memory");
        p->shards = ns;
        p->cap = ncap;
    }
    sluicei_shard *s = &p->shards[p->n];
    memset(s, 0, sizeof *s);
    s->start = start;
    s->end = end;
    if (!(s->reader = strdup(reader)) || !(s->paths = calloc(npaths, sizeof *s->paths)))
        goto nomem;
    for (size_t i = 0; i < npaths; i++) {
        if (!(s->paths[i] = strdup(paths[i])))
            goto nomem;
        s->npaths = i + 1;
    }
    p->n++;
    return SLUICE_OK;
nomem:
    sluicei_shard_clear(s);
    return fail(p, SLUICE_ERR_NOMEM, "out of memory");
}

/* Makes path absolute (relative to the manifest's folder) and canonical,
 * and checks that it can be read. On SLUICE_OK *out is malloc'd. */
static sluice_err resolve(parser *p, const char *path, char **out)
{
    char *joined = NULL;
    *out = NULL;
    if (path[0] != '/') {
        size_t len = strlen(p->dir) + 1 + strlen(path) + 1;
        if (!(joined = malloc(len)))
            return fail(p, SLUICE_ERR_NOMEM, "out of memory");
        snprintf(joined, len, "%s/%s", p->dir, path);
    }
    char *abs = realpath(joined ? joined : path, NULL);
    int errnum = errno;
    free(joined);
    if (!abs)
        return fail(p, errnum == ENOMEM ? SLUICE_ERR_NOMEM : SLUICE_ERR_INVALID, "%s: %s",
                    path, strerror(errnum));
    if (access(abs, R_OK) != 0) {
        errnum = errno;
        free(abs);
        return fail(p, SLUICE_ERR_INVALID, "%s: %s", path, strerror(errnum));
    }
    if (strchr(abs, '\t') || strchr(abs, '\n')) {
        free(abs);
        return fail(p, SLUICE_ERR_INVALID, "%s: a path may not hold a tab or a newline", path);
    }
    *out = abs;
    return SLUICE_OK;
}

/* Parses one non-blank, non-comment line (modified in place). */
static sluice_err parse_line(parser *p, char *line)
{
    char *save = NULL;
    char *reader = strtok_r(line, SEPARATORS, &save);
    char **paths = NULL;
    size_t npaths = 0;
    uint64_t start = 0, end = UINT64_MAX, split = 0;
    int have_range = 0, have_split = 0;
    sluice_err e = SLUICE_OK;
    char rerr[512];
    const sluicei_reader_format *fmt;

    if ((e = sluicei_reader_check(reader, 0, &fmt, rerr, sizeof rerr)) != SLUICE_OK)
        return fail(p, SLUICE_ERR_INVALID, "%s (readers: tfrecord, lines, idx, fixed:SIZE, "
                    "files)", rerr);
    for (char *tok; (tok = strtok_r(NULL, SEPARATORS, &save)) != NULL;) {
        if (strncmp(tok, "records=", 8) == 0) {
            char *v = tok + 8, *colon = strchr(v, ':');
            if (have_range) {
                e = fail(p, SLUICE_ERR_INVALID, "records= given twice");
                break;
            }
            have_range = 1;
            if (!colon ||
                (colon > v && sluicei_parse_u64(v, (size_t)(colon - v), UINT64_MAX, &start)) ||
                (colon[1] && sluicei_parse_u64(colon + 1, strlen(colon + 1), UINT64_MAX, &end)) ||
                start > end) {
                e = fail(p, SLUICE_ERR_INVALID, "bad range '%s' (want records=START:END, "
                         "decimal, START <= END, either may be empty)", tok);
                break;
            }
            continue;
        }
        if (strncmp(tok, "split=", 6) == 0) {
            if (have_split) {
                e = fail(p, SLUICE_ERR_INVALID, "split= given twice");
                break;
            }
            have_split = 1;
            if (sluicei_parse_u64(tok + 6, strlen(tok + 6), UINT64_MAX, &split) != 0 || split < 1 ||
                split > MAX_SPLIT) {
                e = fail(p, SLUICE_ERR_INVALID, "bad split '%s' (want split=N, N 1..%d)", tok,
                         MAX_SPLIT);
                break;
            }
            continue;
        }
        char **np = realloc(paths, (npaths + 1) * sizeof *np);
        if (!np) {
            e = fail(p, SLUICE_ERR_NOMEM, "out of memory");
            break;
        }
        paths = np;
        if ((e = resolve(p, tok, &paths[npaths])) != SLUICE_OK)
            break;
        npaths++;
    }
    if (e == SLUICE_OK && npaths == 0)
        e = fail(p, SLUICE_ERR_INVALID, "no path (want: READER PATH [PATH...] "
                 "[records=START:END] [split=N])");
    if (e == SLUICE_OK && (e = sluicei_reader_check(reader, npaths, NULL, rerr, sizeof rerr)) !=
                              SLUICE_OK)
        e = fail(p, SLUICE_ERR_INVALID, "%s", rerr);

    /* The record count is needed to split, and to check a range: a range
     * past the data must fail here, at submit, not later in every producer
     * that claims the task. Formats without a cheap count (tfrecord, lines)
     * are scanned once. */
    uint64_t total = 0;
    int counted = 0;
    if (e == SLUICE_OK && (have_split || have_range)) {
        e = sluicei_reader_count(reader, (const char *const *)paths, npaths, &total, rerr,
                                 sizeof rerr);
        if (e != SLUICE_OK)
            e = fail(p, e == SLUICE_ERR_NOMEM ? e : SLUICE_ERR_INVALID, "%s", rerr);
        counted = e == SLUICE_OK;
    }
    if (counted) {
        if (start > total || (end != UINT64_MAX && end > total)) {
            char range[48] = "";
            if (end != UINT64_MAX)
                snprintf(range, sizeof range, "%" PRIu64, end);
            e = fail(p, SLUICE_ERR_INVALID, "bad range %" PRIu64 ":%s: the paths hold %" PRIu64
                     " %s", start, range, total, fmt->unit ? fmt->unit : "records");
        }
        else if (end == UINT64_MAX && have_split)
            end = total;
    }
    if (e == SLUICE_OK && have_split && split > end - start)
        e = fail(p, SLUICE_ERR_INVALID, "split=%" PRIu64 " but the line selects only %" PRIu64
                 " %s", split, end - start, fmt->unit ? fmt->unit : "records");
    if (e == SLUICE_OK && !have_split)
        e = add_shard(p, reader, paths, npaths, start, end);
    for (uint64_t i = 0; e == SLUICE_OK && have_split && i < split; i++) {
        uint64_t count = end - start, q = count / split, r = count % split;
        uint64_t s0 = start + i * q + (i < r ? i : r);
        e = add_shard(p, reader, paths, npaths, s0, s0 + q + (i < r ? 1 : 0));
    }
    for (size_t i = 0; i < npaths; i++)
        free(paths[i]);
    free(paths);
    return e;
}

/* The absolute folder of file, without a trailing '/'. */
static char *folder_of(const char *file)
{
    const char *slash = strrchr(file, '/');
    char cwd[PATH_MAX];
    if (slash == file)
        return strdup("/");
    if (slash && file[0] == '/')
        return strndup(file, (size_t)(slash - file));
    if (!getcwd(cwd, sizeof cwd))
        return NULL;
    size_t len = strlen(cwd) + 1 + (slash ? (size_t)(slash - file) : 0) + 1;
    char *d = malloc(len);
    if (d)
        snprintf(d, len, "%s%s%.*s", cwd, slash ? "/" : "",
                 slash ? (int)(slash - file) : 0, file);
    return d;
}

sluice_err sluicei_manifest_parse(const char *file, sluicei_shard **out, size_t *n, char *err,
                                  size_t errlen)
{
    parser p = {.file = file, .err = err, .errlen = errlen};
    sluice_err e = SLUICE_OK;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    *out = NULL;
    *n = 0;
    FILE *f = fopen(file, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", file, strerror(errno));
        return SLUICE_ERR_SYS;
    }
    if (!(p.dir = folder_of(file))) {
        snprintf(err, errlen, "%s: cannot find its folder: %s", file, strerror(errno));
        fclose(f);
        return SLUICE_ERR_SYS;
    }
    while (e == SLUICE_OK && (len = getline(&line, &cap, f)) >= 0) {
        p.line++;
        if ((size_t)len != strlen(line)) {
            e = fail(&p, SLUICE_ERR_INVALID, "a NUL byte in the line");
            break;
        }
        char *s = line + strspn(line, SEPARATORS "\n");
        if (*s == '\0' || *s == '#')
            continue;
        s[strcspn(s, "\n")] = '\0';
        e = parse_line(&p, s);
    }
    if (e == SLUICE_OK && ferror(f)) {
        snprintf(err, errlen, "%s: read: %s", file, strerror(errno));
        e = SLUICE_ERR_SYS;
    }
    if (e == SLUICE_OK && p.n == 0) {
        snprintf(err, errlen, "%s: no shard (want lines of: READER PATH [PATH...] "
                 "[records=START:END] [split=N])", file);
        e = SLUICE_ERR_INVALID;
    }
    free(line);
    free(p.dir);
    fclose(f);
    if (e != SLUICE_OK) {
        sluicei_shards_free(p.shards, p.n);
        return e;
    }
    *out = p.shards;
    *n = p.n;
    return SLUICE_OK;
}

/* ---- task definitions --------------------------------------------------- */

char *sluicei_shard_encode(const sluicei_shard *s)
{
    return sluicei_taskdef_encode(s->reader, (const char *const *)s->paths, s->npaths, s->start,
                                  s->end);
}
