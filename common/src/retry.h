/* When to try again, decided once for the whole library: which Redis error
 * replies are passing conditions, and how long to wait between attempts.
 * Internal.
 *
 * Every retry loop (a connection's reconnect, the cluster router's
 * redirects, a consumer's sessions, a producer's pushes) waits with a
 * sluicei_backoff: min_ms doubling per failed attempt up to max_ms, then
 * +-25% jitter, so that clients cut off together do not come back in step. */
#ifndef SLUICE_RETRY_H
#define SLUICE_RETRY_H

#include <stddef.h>
#include <stdint.h>

/* The policy of reconnects and consumer sessions. */
#define SLUICEI_BACKOFF_MIN_MS 50
#define SLUICEI_BACKOFF_MAX_MS 2000

typedef struct sluicei_backoff {
    int min_ms, max_ms;
    unsigned attempt;   /* failed attempts since the last success */
    uint64_t rng;       /* jitter state; 0 is replaced by a fixed seed */
} sluicei_backoff;

/* A backoff from min_ms to max_ms, jitter seeded by seed (e.g.
 * sluicei_random64()). */
void sluicei_backoff_init(sluicei_backoff *b, int min_ms, int max_ms, uint64_t seed);
/* The wait before the next attempt; counts one more failed attempt. */
int64_t sluicei_backoff_next(sluicei_backoff *b);
/* An attempt succeeded: the next failure waits min_ms again. */
void sluicei_backoff_reset(sluicei_backoff *b);

/* A step of a xorshift64 generator (s = 0 is replaced by a fixed seed). */
uint64_t sluicei_xorshift64(uint64_t *s);

/* Whether msg[0..len) (an error reply) is a condition of the server that
 * passes by itself: it loads its data (LOADING), runs a long script
 * (BUSY), has lost its master (MASTERDOWN), cannot serve a multi-key
 * command during a resharding (TRYAGAIN), or has no room for another
 * client ("ERR max number of clients"). Worth another attempt, never a
 * final failure. */
int sluicei_error_transient(const char *msg, size_t len);

#endif
