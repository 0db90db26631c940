/* The number parser (common/src/num.c) and the retry policy
 * (common/src/retry.c). */
#include "test.h"

#include <stdint.h>
#include <string.h>

#include "num.h"
#include "retry.h"

static int u64(const char *s, uint64_t max, uint64_t *v)
{
    return sluicei_parse_u64(s, strlen(s), max, v);
}

static void test_u64(void)
{
    uint64_t v = 7;
    CHECK(u64("0", UINT64_MAX, &v) == 0 && v == 0);
    CHECK(u64("42", UINT64_MAX, &v) == 0 && v == 42);
    CHECK(u64("18446744073709551615", UINT64_MAX, &v) == 0 && v == UINT64_MAX);
    v = 7;
    CHECK(u64("18446744073709551616", UINT64_MAX, &v) == -1 && v == 7);
    CHECK(u64("4294967295", UINT32_MAX, &v) == 0 && v == UINT32_MAX);
    CHECK(u64("4294967296", UINT32_MAX, &v) == -1);
    /* Digits only: strtoull would take all of these. */
    static const char *const bad[] = {"", " 1", "+1", "-1", "1 ", "0x10", "1e3", "１"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(u64(bad[i], UINT64_MAX, &v) == -1);
    /* Only len bytes count. */
    CHECK(sluicei_parse_u64("123abc", 3, UINT64_MAX, &v) == 0 && v == 123);

    const char *s = "12:34", *p = s;
    CHECK(sluicei_parse_u64_prefix(&p, s + strlen(s), UINT64_MAX, &v) == 0 && v == 12 && *p == ':');
    p = s + 2;
    CHECK(sluicei_parse_u64_prefix(&p, s + strlen(s), UINT64_MAX, &v) == -1 && p == s + 2);
}

static void test_i64(void)
{
    int64_t v = 7;
    CHECK(sluicei_parse_i64("-5", -10, 10, &v) == 0 && v == -5);
    CHECK(sluicei_parse_i64("10", -10, 10, &v) == 0 && v == 10);
    CHECK(sluicei_parse_i64("11", -10, 10, &v) == -1 && v == 10);
    CHECK(sluicei_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v) == 0 &&
          v == INT64_MIN);
    CHECK(sluicei_parse_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v) == 0 &&
          v == INT64_MAX);
    CHECK(sluicei_parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &v) == -1);
    CHECK(sluicei_parse_i64("-9223372036854775809", INT64_MIN, INT64_MAX, &v) == -1);
    static const char *const bad[] = {"", "-", "--1", "+1", " 1", "1x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(sluicei_parse_i64(bad[i], INT64_MIN, INT64_MAX, &v) == -1);
    CHECK(sluicei_parse_i64(NULL, 0, 1, &v) == -1);
}

static void test_size(void)
{
    uint64_t v = 0;
    CHECK(sluicei_parse_size("64", UINT64_MAX, &v) == 0 && v == 64);
    CHECK(sluicei_parse_size("64M", UINT64_MAX, &v) == 0 && v == (uint64_t)64 << 20);
    CHECK(sluicei_parse_size("1g", UINT64_MAX, &v) == 0 && v == (uint64_t)1 << 30);
    CHECK(sluicei_parse_size("256KiB", UINT64_MAX, &v) == 0 && v == (uint64_t)256 << 10);
    CHECK(sluicei_parse_size("3kB", UINT64_MAX, &v) == 0 && v == 3072);
    CHECK(sluicei_parse_size("1G", ((uint64_t)1 << 30) - 1, &v) == -1);
    static const char *const bad[] = {"", "M", "64T", "64Mi", "64 M", "64MB ", "-1", "0x40"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(sluicei_parse_size(bad[i], UINT64_MAX, &v) == -1);
    /* 2^64 / 2^30 and up overflows the shift. */
    CHECK(sluicei_parse_size("17179869184G", UINT64_MAX, &v) == -1);
}

static void test_backoff(void)
{
    sluicei_backoff b;
    sluicei_backoff_init(&b, 50, 2000, 12345);
    int64_t base = 50;
    for (int i = 0; i < 12; i++) {
        int64_t d = sluicei_backoff_next(&b);
        /* base +-25% */
        CHECK(d >= base - base / 4 && d <= base + base / 4);
        base = base * 2 > 2000 ? 2000 : base * 2;
    }
    sluicei_backoff_reset(&b);
    int64_t d = sluicei_backoff_next(&b);
    CHECK(d >= 38 && d <= 62);
    /* Two clients seeded differently do not wait the same. */
    sluicei_backoff a, c;
    sluicei_backoff_init(&a, 1000, 1000, 1);
    sluicei_backoff_init(&c, 1000, 1000, 2);
    int same = 0;
    for (int i = 0; i < 16; i++)
        same += sluicei_backoff_next(&a) == sluicei_backoff_next(&c);
    CHECK(same < 4);
}

static void test_transient(void)
{
    static const char *const yes[] = {"LOADING Redis is loading the dataset in memory",
                                      "BUSY Redis is busy running a script.",
                                      "MASTERDOWN Link with MASTER is down", "TRYAGAIN",
                                      "ERR max number of clients reached"};
    static const char *const no[] = {"",         "BUSYKEY Target key name already exists.",
                                     "LOADINGX", "ERR unknown command", "NOSCRIPT No script",
                                     "OOM command not allowed", "MOVED 1 h:1"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        CHECK(sluicei_error_transient(yes[i], strlen(yes[i])));
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        CHECK(!sluicei_error_transient(no[i], strlen(no[i])));
    CHECK(!sluicei_error_transient(NULL, 0));
    CHECK(!sluicei_error_transient("LOADING", 4));
}

const struct test num_tests[] = {
    {"num/unsigned", test_u64},
    {"num/signed", test_i64},
    {"num/sizes", test_size},
    {"retry/backoff", test_backoff},
    {"retry/transient errors", test_transient},
    {NULL, NULL},
};
