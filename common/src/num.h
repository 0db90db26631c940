/* Decimal numbers, parsed one way everywhere: from flags, manifests, task
 * definitions, batch ids and Redis replies. Internal.
 *
 * Digits only: no sign, no white space, no base prefix, no empty string,
 * and no overflow past the given maximum (strtoull would accept " +7" and
 * wrap "-1"). */
#ifndef SLUICE_NUM_H
#define SLUICE_NUM_H

#include <stddef.h>
#include <stdint.h>

/* Parses s[0..len) as a whole decimal number not above max into *out.
 * Returns 0, or -1 (out untouched) when it is not one. */
int sluicei_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out);

/* Parses the longest run of digits at *p (before end) as a number not above
 * max; on success *p points past it. Returns 0, or -1 when *p holds no digit
 * or the number is above max. For fields within a string ("1:2:3"). */
int sluicei_parse_u64_prefix(const char **p, const char *end, uint64_t max, uint64_t *out);

/* Parses the NUL-terminated s as a decimal integer in [min, max], with an
 * optional leading '-'. Returns 0, or -1 when it is not one. */
int sluicei_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/* Parses a size: a number with an optional binary suffix k, M or G (also
 * written KB, KiB ...; any case), at most max. "64M" is 64 << 20. Returns
 * 0, or -1 when malformed or over max. */
int sluicei_parse_size(const char *s, uint64_t max, uint64_t *out);

#endif
