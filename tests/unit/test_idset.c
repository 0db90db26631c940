/* The duplicate filter's hash set (consumer/src/idset.c): add, has,
 * delete with backward shift, growth, clear, and a long run of random
 * operations checked against a plain array. No Redis needed. */
#include "test.h"

#include "idset.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Hashes whose home slot (h & (cap - 1)) in the first table (1024 slots)
 * is `home`: distinct values, the same run. */
static uint64_t at_home(size_t home, uint64_t k)
{
    return ((k + 1) << 10) | home;
}

static void test_add_has(void)
{
    idset s = {0};
    CHECK(!idset_has(&s, 42));   /* an empty set has no table yet */
    idset_add(&s, 42);
    idset_add(&s, 7);
    CHECK(idset_has(&s, 42));
    CHECK(idset_has(&s, 7));
    CHECK(!idset_has(&s, 8));
    CHECK(s.n == 2);
    idset_add(&s, 42);   /* twice is once */
    CHECK(s.n == 2);
    idset_clear(&s);
}

static void test_hash(void)
{
    CHECK(idset_hash("0:1:2") == idset_hash("0:1:2"));
    CHECK(idset_hash("0:1:2") != idset_hash("0:1:3"));
    CHECK(idset_hash("") != 0);   /* 0 marks a free slot */
}

/* Deleting from the middle of a probe run keeps what follows findable:
 * the later entries move back into the hole. */
static void test_delete_in_cluster(void)
{
    idset s = {0};
    uint64_t h[6];
    for (int i = 0; i < 6; i++) {
        h[i] = at_home(100, (uint64_t)i);
        idset_add(&s, h[i]);
    }
    /* One of another home that lands inside the run (slot 106). */
    uint64_t other = at_home(103, 99);
    idset_add(&s, other);
    CHECK(s.n == 7);
    idset_del(&s, h[1]);
    CHECK(!idset_has(&s, h[1]));
    for (int i = 0; i < 6; i++)
        if (i != 1)
            CHECK(idset_has(&s, h[i]));
    CHECK(idset_has(&s, other));
    idset_del(&s, h[0]);
    idset_del(&s, h[5]);
    CHECK(idset_has(&s, h[2]) && idset_has(&s, h[3]) && idset_has(&s, h[4]));
    CHECK(idset_has(&s, other));
    CHECK(s.n == 4);
    idset_del(&s, 12345);   /* absent: nothing changes */
    CHECK(s.n == 4);
    idset_clear(&s);
    idset_del(&s, h[2]);   /* on an empty set */
    CHECK(s.n == 0);
}

/* A run that wraps around the end of the table. */
static void test_delete_wrapping(void)
{
    idset s = {0};
    uint64_t h[4];
    for (int i = 0; i < 4; i++) {
        h[i] = at_home(1022, (uint64_t)i);
        idset_add(&s, h[i]);
    }
    uint64_t zero = at_home(0, 50);   /* home 0, pushed to slot 2 */
    idset_add(&s, zero);
    idset_del(&s, h[0]);
    for (int i = 1; i < 4; i++)
        CHECK(idset_has(&s, h[i]));
    CHECK(idset_has(&s, zero));
    idset_del(&s, h[2]);
    CHECK(idset_has(&s, h[1]) && idset_has(&s, h[3]) && idset_has(&s, zero));
    CHECK(!idset_has(&s, h[0]) && !idset_has(&s, h[2]));
    idset_clear(&s);
}

static void test_growth(void)
{
    idset s = {0};
    for (uint64_t i = 1; i <= 5000; i++)
        idset_add(&s, i * 0x9e3779b97f4a7c15ULL);
    CHECK(s.n == 5000);
    CHECK(s.cap >= 10000);   /* at most half full */
    CHECK((s.cap & (s.cap - 1)) == 0);
    int all = 1;
    for (uint64_t i = 1; i <= 5000; i++)
        all &= idset_has(&s, i * 0x9e3779b97f4a7c15ULL);
    CHECK(all);
    CHECK(!idset_has(&s, 5001 * 0x9e3779b97f4a7c15ULL));
    idset_clear(&s);
}

static void test_clear(void)
{
    idset s = {0};
    for (uint64_t i = 1; i <= 100; i++)
        idset_add(&s, i);
    idset_clear(&s);
    CHECK(s.n == 0 && s.cap == 0 && s.v == NULL);
    CHECK(!idset_has(&s, 5));
    idset_add(&s, 5);   /* usable again */
    CHECK(idset_has(&s, 5) && s.n == 1);
    idset_clear(&s);
}

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Random adds and deletes from a small universe (many collisions in few
 * home slots), each checked against a plain array of what is in. */
static void test_random_against_reference(void)
{
    enum { UNIVERSE = 1000, OPS = 100000 };
    uint64_t *val = malloc(UNIVERSE * sizeof *val);
    unsigned char *in = calloc(UNIVERSE, 1);
    idset s = {0};
    uint64_t x = 0x2545f4914f6cdd1dULL;
    size_t count = 0;
    if (!val || !in) {
        CHECK(0);
        free(val);
        free(in);
        return;
    }
    /* Values clustered on 64 home slots of any table up to 2^16 slots. */
    for (size_t i = 0; i < UNIVERSE; i++)
        val[i] = ((uint64_t)(i + 1) << 16) | (rng_next(&x) % 64);
    int bad = 0;
    for (int op = 0; op < OPS && !bad; op++) {
        size_t i = rng_next(&x) % UNIVERSE;
        switch (rng_next(&x) % 3) {
        case 0:
        case 1:
            if (rng_next(&x) % 2) {
                idset_add(&s, val[i]);
                count += !in[i];
                in[i] = 1;
            } else {
                idset_del(&s, val[i]);
                count -= in[i];
                in[i] = 0;
            }
            break;
        default:
            bad |= idset_has(&s, val[i]) != in[i];
            break;
        }
        bad |= s.n != count;
        if (op % 10000 == 0)
            for (size_t k = 0; k < UNIVERSE; k++)
                bad |= idset_has(&s, val[k]) != in[k];
    }
    for (size_t k = 0; k < UNIVERSE; k++)
        bad |= idset_has(&s, val[k]) != in[k];
    CHECK(!bad);
    idset_clear(&s);
    free(val);
    free(in);
}

const struct test idset_tests[] = {
    {"idset/add and has", test_add_has},
    {"idset/hash", test_hash},
    {"idset/delete in a cluster", test_delete_in_cluster},
    {"idset/delete in a wrapping run", test_delete_wrapping},
    {"idset/growth", test_growth},
    {"idset/clear", test_clear},
    {"idset/random against a reference", test_random_against_reference},
    {NULL, NULL},
};
