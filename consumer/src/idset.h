/* The duplicate filter's set: an open-addressed hash set of 64-bit id
 * hashes with linear probing, no I/O and no locking (its owner, the loop
 * thread, is its only user). Internal header. */
#ifndef SLUICE_IDSET_H
#define SLUICE_IDSET_H

#include <stddef.h>
#include <stdint.h>

/* Open-addressing set of 64-bit id hashes (0 marks a free slot).
 * Zero-initialise it; idset_clear() frees it and leaves it empty. */
typedef struct idset {
    uint64_t *v;
    size_t cap, n;
} idset;

/* The hash of a NUL-terminated id (FNV-1a; never 0, the free mark). */
uint64_t idset_hash(const char *s);

/* Whether h is in s. */
int idset_has(const idset *s, uint64_t h);

/* Adds h (not 0), doubling the table at half load. A failed allocation
 * only forgets the id (the filter is a best effort). */
void idset_add(idset *s, uint64_t h);

/* Removes h if present; the entries probed past it stay findable. */
void idset_del(idset *s, uint64_t h);

/* Frees the table: s is empty (and zero) again. */
void idset_clear(idset *s);

#endif
