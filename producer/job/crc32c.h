/* CRC-32C (Castagnoli), as used by TFRecord framing. Internal. */
#ifndef SLUICE_CRC32C_H
#define SLUICE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) with p[0..n) and returns the new CRC-32C, so
 * that crc32c(crc32c(0, a, na), b, nb) == crc32c(0, ab, na + nb).
 * "123456789" gives 0xE3069283. Thread-safe; uses the SSE4.2 crc32
 * instruction when the CPU has it. */
uint32_t sluicei_crc32c(uint32_t crc, const void *p, size_t n);

/* Same, always with the portable table code (lets tests compare the two). */
uint32_t sluicei_crc32c_sw(uint32_t crc, const void *p, size_t n);

/* TFRecord's masked form of a CRC: rotate right by 15, add a constant, so
 * that a CRC stored next to the data it covers does not checksum to a
 * fixed value. */
static inline uint32_t sluicei_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
