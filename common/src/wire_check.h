/* What the validator (wire_check.c) gives the decoder (wire_decode.c): the
 * check of a whole frame, with where each known top-level value starts, and
 * the formatter of their one-line error messages. Internal to the wire
 * codec; everything else uses wire.h. */
#ifndef SLUICE_WIRE_CHECK_H
#define SLUICE_WIRE_CHECK_H

#include "wire.h"

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

/* Where the value of each known top-level key starts; 0 when absent (a
 * value never starts at offset 0). */
struct wire_layout {
    size_t v, id, p, t, n, r, x;
};

/* sluicei_wire_validate(), filling *lo on success (on failure *lo is
 * partly filled and means nothing). */
sluice_err wire_check(const void *p, size_t len, size_t max_bytes, struct wire_layout *lo,
                      char *err, size_t errlen);

/* Writes the message to err (when err is not NULL and errlen > 0) and
 * returns code. */
PRINTF_LIKE(4, 5)
sluice_err wire_fail(char *err, size_t errlen, sluice_err code, const char *fmt, ...);

#endif
