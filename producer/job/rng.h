/* The random numbers of a job: splitmix64 (Steele, Lea and Flood), its
 * output function alone to mix seeds, and uniform draws without modulo
 * bias. sluice-ctl submit draws the task order of each epoch with them,
 * the batcher the record order of a shuffle window; docs/JOBS.md and
 * docs/PROTOCOL.md spell both out, so that they never change. */
#ifndef SLUICE_JOB_RNG_H
#define SLUICE_JOB_RNG_H

#include <stdint.h>

static inline uint64_t sluicei_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t sluicei_splitmix64(uint64_t *state)
{
    return sluicei_mix64(*state += 0x9e3779b97f4a7c15ULL);
}

/* A uniform value in [0, bound), bound >= 1 (rejection, no modulo bias). */
static inline uint64_t sluicei_uniform(uint64_t *state, uint64_t bound)
{
    uint64_t threshold = (0 - bound) % bound;   /* 2^64 mod bound */
    for (;;) {
        uint64_t x = sluicei_splitmix64(state);
        if (x >= threshold)
            return x % bound;
    }
}

#endif
