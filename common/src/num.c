/* Decimal number parsing (num.h). */
#include "num.h"

#include <string.h>

int sluicei_parse_u64_prefix(const char **p, const char *end, uint64_t max, uint64_t *out)
{
    const char *s = *p;
    uint64_t x = 0;
    if (s == end || *s < '0' || *s > '9')
        return -1;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (x > (max - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *p = s;
    *out = x;
    return 0;
}

int sluicei_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    const char *p = s, *end = s + len;
    uint64_t v;
    if (sluicei_parse_u64_prefix(&p, end, max, &v) != 0 || p != end)
        return -1;
    *out = v;
    return 0;
}

int sluicei_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s)
        return -1;
    int neg = *s == '-';
    uint64_t v;
    /* The magnitude of INT64_MIN is INT64_MAX + 1. */
    if (sluicei_parse_u64(s + neg, strlen(s + neg), (uint64_t)INT64_MAX + (uint64_t)neg, &v) != 0)
        return -1;
    int64_t x = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    if (x < min || x > max)
        return -1;
    *out = x;
    return 0;
}

int sluicei_parse_size(const char *s, uint64_t max, uint64_t *out)
{
    if (!s)
        return -1;
    const char *p = s, *end = s + strlen(s);
    uint64_t v;
    if (sluicei_parse_u64_prefix(&p, end, UINT64_MAX, &v) != 0)
        return -1;
    unsigned shift = 0;
    if (p < end) {
        switch (*p++) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return -1;
        }
        if (p[0] == 'i' && p[1] == 'B')
            p += 2;
        else if (p[0] == 'B')
            p++;
    }
    if (p != end || v > (UINT64_MAX >> shift) || (v << shift) > max)
        return -1;
    *out = v << shift;
    return 0;
}
