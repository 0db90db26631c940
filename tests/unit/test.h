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

/* One suite per file: a NULL-terminated table defined there. */
extern const struct test wire_tests[];
extern const struct test url_tests[];
extern const struct test proto_tests[];
extern const struct test reader_tests[];
extern const struct test manifest_tests[];
extern const struct test cluster_tests[];

#endif
