/* Unit tests of the task definition codec (common/src/taskdef.c): the
 * value submit stores per task and producers decode when they claim it. */
#include "test.h"
#include "taskdef.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_roundtrip(void)
{
    const char *paths[] = {"/data/a b.tfrecord", "/data/c"};
    char why[256];
    sluicei_taskdef *d = NULL;
    char *s = sluicei_taskdef_encode("tfrecord", paths, 2, 5, UINT64_MAX);
    CHECK(s && strcmp(s, "tfrecord\t5\t\t/data/a b.tfrecord\t/data/c") == 0);
    CHECK(s && sluicei_taskdef_decode(s, strlen(s), &d, why, sizeof why) == SLUICE_OK);
    CHECK(d && strcmp(d->reader, "tfrecord") == 0 && d->start == 5 && d->end == UINT64_MAX &&
          d->npaths == 2 && strcmp(d->paths[0], paths[0]) == 0 &&
          strcmp(d->paths[1], paths[1]) == 0);
    free(d);
    free(s);

    s = sluicei_taskdef_encode("lines", paths, 1, 0, 18446744073709551614u);
    CHECK(s && strcmp(s, "lines\t0\t18446744073709551614\t/data/a b.tfrecord") == 0);
    CHECK(s && sluicei_taskdef_decode(s, strlen(s), &d, why, sizeof why) == SLUICE_OK);
    CHECK(d && d->start == 0 && d->end == 18446744073709551614u && d->npaths == 1);
    free(d);
    free(s);

    const char *tab[] = {"/tab\there"};
    CHECK(sluicei_taskdef_encode("lines", tab, 1, 0, 1) == NULL);
    CHECK(sluicei_taskdef_encode("li\tnes", paths, 1, 0, 1) == NULL);
}

/* An empty start means 0, as an empty end means "to the end": what
 * producers have always accepted (the encoder never writes it). */
static void test_empty_start(void)
{
    char why[256];
    sluicei_taskdef *d = NULL;
    const char *s = "lines\t\t7\t/a";
    CHECK(sluicei_taskdef_decode(s, strlen(s), &d, why, sizeof why) == SLUICE_OK);
    CHECK(d && d->start == 0 && d->end == 7 && d->npaths == 1 && strcmp(d->paths[0], "/a") == 0);
    free(d);
    s = "lines\t\t\t/a";
    CHECK(sluicei_taskdef_decode(s, strlen(s), &d, why, sizeof why) == SLUICE_OK);
    CHECK(d && d->start == 0 && d->end == UINT64_MAX);
    free(d);
}

static void test_malformed(void)
{
    static const char *bad[] = {
        "", "tfrecord", "tfrecord\t0\t", "tfrecord\t0\t\t", "tfrecord\tx\t\t/a",
        "tfrecord\t5\t4\t/a", "tfrecord\t0\t18446744073709551616\t/a", "\t0\t\t/a",
        "tfrecord\t0\t\t/a\t", "tfrecord\t-1\t\t/a", "tfrecord\t+1\t\t/a", "tfrecord\t\t\t\t/a",
    };
    char why[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sluicei_taskdef *d = (sluicei_taskdef *)1;
        why[0] = '\0';
        CHECK(sluicei_taskdef_decode(bad[i], strlen(bad[i]), &d, why, sizeof why) ==
              SLUICE_ERR_INVALID);
        CHECK(d == NULL && why[0] != '\0');
    }
    sluicei_taskdef *d = NULL;
    CHECK(sluicei_taskdef_decode("lines\t0\t\t/a\0b", 13, &d, why, sizeof why) ==
          SLUICE_ERR_INVALID);
    CHECK(d == NULL && strstr(why, "NUL") != NULL);
}

const struct test taskdef_tests[] = {
    {"taskdef/round trip", test_roundtrip},
    {"taskdef/empty start is 0", test_empty_start},
    {"taskdef/malformed definitions", test_malformed},
    {NULL, NULL},
};
