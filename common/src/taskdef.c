/* The task definition codec (taskdef.h): what a submit writes for each task
 * and what a producer reads back when it claims one. The error messages
 * are those producers have always written into a task's error. */
#include "taskdef.h"
#include "num.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *sluicei_taskdef_encode(const char *reader, const char *const *paths, size_t npaths,
                             uint64_t start, uint64_t end)
{
    if (strchr(reader, '\t'))
        return NULL;
    size_t len = strlen(reader) + 2 * 21 + 3;
    for (size_t i = 0; i < npaths; i++) {
        if (strchr(paths[i], '\t'))
            return NULL;
        len += strlen(paths[i]) + 1;
    }
    char *out = malloc(len);
    if (!out)
        return NULL;
    size_t at = (size_t)snprintf(out, len, "%s\t%" PRIu64 "\t", reader, start);
    if (end != UINT64_MAX)
        at += (size_t)snprintf(out + at, len - at, "%" PRIu64, end);
    for (size_t i = 0; i < npaths; i++)
        at += (size_t)snprintf(out + at, len - at, "\t%s", paths[i]);
    return out;
}

/* The definition, its path array and a copy of the text split in place,
 * in one allocation (the struct first, so that free() of it frees all). */
typedef struct box {
    sluicei_taskdef d;
    char *text;
    const char *paths[];
} box;

sluice_err sluicei_taskdef_decode(const char *def, size_t len, sluicei_taskdef **out, char *why,
                                  size_t whylen)
{
    size_t tabs = 0;
    *out = NULL;
    if (memchr(def, '\0', len)) {
        snprintf(why, whylen, "the definition contains a NUL byte");
        return SLUICE_ERR_INVALID;
    }
    for (size_t i = 0; i < len; i++)
        tabs += def[i] == '\t';
    if (tabs < 3) {
        snprintf(why, whylen, "the definition has %zu fields, expected reader, start, end "
                 "and at least one path", tabs + 1);
        return SLUICE_ERR_INVALID;
    }
    size_t npaths = tabs - 2;
    box *b = malloc(sizeof *b + npaths * sizeof b->paths[0] + len + 1);
    if (!b) {
        snprintf(why, whylen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    b->text = (char *)(b->paths + npaths);
    memcpy(b->text, def, len);
    b->text[len] = '\0';

    char *field[3];
    char *s = b->text;
    for (int i = 0; i < 3; i++) {
        field[i] = s;
        s = strchr(s, '\t');
        *s++ = '\0';
    }
    for (size_t i = 0; i < npaths; i++) {
        b->paths[i] = s;
        char *tab = strchr(s, '\t');
        if (tab) {
            *tab = '\0';
            s = tab + 1;
        }
        if (b->paths[i][0] == '\0') {
            snprintf(why, whylen, "path %zu of the definition is empty", i + 1);
            free(b);
            return SLUICE_ERR_INVALID;
        }
    }
    b->d.reader = field[0];
    b->d.paths = b->paths;
    b->d.npaths = npaths;
    b->d.start = 0;
    b->d.end = UINT64_MAX;
    const size_t l1 = strlen(field[1]), l2 = strlen(field[2]);
    if (field[0][0] == '\0' || (l1 && sluicei_parse_u64(field[1], l1, UINT64_MAX, &b->d.start)) ||
        (l2 && sluicei_parse_u64(field[2], l2, UINT64_MAX, &b->d.end)) || b->d.start > b->d.end) {
        snprintf(why, whylen, "the definition's reader or record range is malformed "
                 "(reader '%.64s', start '%.32s', end '%.32s')", field[0], field[1], field[2]);
        free(b);
        return SLUICE_ERR_INVALID;
    }
    *out = &b->d;
    return SLUICE_OK;
}
