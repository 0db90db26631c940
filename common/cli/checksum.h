/* Order-independent checksum of a set of records, so that the summaries of
 * several consumers can be added up and compared with the producers'.
 * Each record hashes to FNV-1a 64 of its bytes; a set's checksum is the sum
 * of its records' hashes modulo 2^64 (printed as 16 hex digits). */
#ifndef SLUICE_CHECKSUM_H
#define SLUICE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t sluicei_record_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

#endif
