/* The duplicate filter's hash set (idset.h): open addressing with linear
 * probing over a power-of-two table; deletion shifts the rest of a probe
 * run back instead of leaving tombstones, so lookups never degrade. */
#include "idset.h"

#include <stdlib.h>
#include <string.h>

uint64_t idset_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h ? h : 1;
}

int idset_has(const idset *s, uint64_t h)
{
    if (!s->cap)
        return 0;
    for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->v[i] == h)
            return 1;
        if (s->v[i] == 0)
            return 0;
    }
}

static void idset_put(idset *s, uint64_t h)
{
    size_t i = h & (s->cap - 1);
    while (s->v[i] != 0 && s->v[i] != h)
        i = (i + 1) & (s->cap - 1);
    if (s->v[i] == 0) {
        s->v[i] = h;
        s->n++;
    }
}

/* Adds h, doubling the table at half load. A failed allocation only
 * forgets the id (the filter is a best effort). */
void idset_add(idset *s, uint64_t h)
{
    if ((s->n + 1) * 2 > s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 1024;
        uint64_t *nv = calloc(ncap, sizeof *nv);
        if (!nv)
            return;
        idset old = *s;
        s->v = nv;
        s->cap = ncap;
        s->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.v[i])
                idset_put(s, old.v[i]);
        free(old.v);
    }
    idset_put(s, h);
}

/* Removes h (linear probing: the entries after it in its run move back
 * into the hole when their home slot lies at or before it). */
void idset_del(idset *s, uint64_t h)
{
    if (!s->cap)
        return;
    size_t mask = s->cap - 1, i = h & mask;
    while (s->v[i] != h) {
        if (s->v[i] == 0)
            return;
        i = (i + 1) & mask;
    }
    for (size_t j = (i + 1) & mask; s->v[j] != 0; j = (j + 1) & mask) {
        if (((j - (s->v[j] & mask)) & mask) >= ((j - i) & mask)) {
            s->v[i] = s->v[j];
            i = j;
        }
    }
    s->v[i] = 0;
    s->n--;
}

void idset_clear(idset *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}
