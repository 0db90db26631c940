/* The retry policy (retry.h). */
#include "retry.h"

#include <string.h>

void sluicei_backoff_init(sluicei_backoff *b, int min_ms, int max_ms, uint64_t seed)
{
    *b = (sluicei_backoff){.min_ms = min_ms, .max_ms = max_ms, .rng = seed};
}

uint64_t sluicei_xorshift64(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x2545f4914f6cdd1du;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

int64_t sluicei_backoff_next(sluicei_backoff *b)
{
    int64_t d = b->min_ms;
    for (unsigned i = 0; i < b->attempt && d < b->max_ms; i++)
        d *= 2;
    if (d > b->max_ms)
        d = b->max_ms;
    if (b->attempt < 64)
        b->attempt++;
    return d - d / 4 + (int64_t)(sluicei_xorshift64(&b->rng) % (uint64_t)(d / 2 + 1));
}

void sluicei_backoff_reset(sluicei_backoff *b)
{
    b->attempt = 0;
}

int sluicei_error_transient(const char *msg, size_t len)
{
    static const char *const prefixes[] = {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN",
                                           "ERR max number of clients"};
    if (!msg)
        return 0;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t n = strlen(prefixes[i]);
        /* A whole word: BUSYKEY is no BUSY. */
        if (len >= n && memcmp(msg, prefixes[i], n) == 0 && (len == n || msg[n] == ' '))
            return 1;
    }
    return 0;
}
