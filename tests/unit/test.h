/* Minimal unit-test harness: a table of named cases per suite. */
#ifndef SLUICE_TEST_H
#define SLUICE_TEST_H

#include <stdio.h>

struct test {
    const char *name;
    void (*fn)(void);
};

/* Failures of the running case; test_main.c resets it per case. */
extern int test_failures;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "    %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            test_failures++;                                                   \
        }                                                                      \
    } while (0)

/* SLUICE_REDIS_PASSWORD for the address tests: test_env_password(v) sets
 * it (NULL: unsets it) after saving what the environment had;
 * test_env_restore() puts that back. */
void test_env_password(const char *v);
void test_env_restore(void);

/* One suite per file: a NULL-terminated table defined there. */
extern const struct test wire_tests[];
extern const struct test mpack_tests[];
extern const struct test url_tests[];
extern const struct test proto_tests[];
extern const struct test reader_tests[];
extern const struct test roots_tests[];
extern const struct test manifest_tests[];
extern const struct test taskdef_tests[];
extern const struct test cluster_tests[];
extern const struct test num_tests[];
extern const struct test batcher_tests[];
extern const struct test idset_tests[];
extern const struct test room_tests[];
extern const struct test abi_tests[];
extern const struct test reply_tests[];
extern const struct test metrics_tests[];
extern const struct test zframe_tests[];
extern const struct test child_tests[];
extern const struct test bufcache_tests[];

#endif
