/* Runs every unit suite; prints one line per case and a final
 * "N passed, N failed". Usage: unit-tests [substring-filter] */
#include "test.h"

#include <stdlib.h>
#include <string.h>

int test_failures;

#define PASSWORD_ENV "SLUICE_REDIS_PASSWORD"
static char *saved_password;

void test_env_password(const char *v)
{
    const char *old = getenv(PASSWORD_ENV);
    free(saved_password);
    saved_password = old ? strdup(old) : NULL;
    if (v)
        setenv(PASSWORD_ENV, v, 1);
    else
        unsetenv(PASSWORD_ENV);
}

void test_env_restore(void)
{
    if (saved_password)
        setenv(PASSWORD_ENV, saved_password, 1);
    else
        unsetenv(PASSWORD_ENV);
    free(saved_password);
    saved_password = NULL;
}

int main(int argc, char **argv)
{
    const struct test *suites[] = {wire_tests, mpack_tests, url_tests, proto_tests,
                                   reader_tests, roots_tests, manifest_tests, taskdef_tests,
                                   cluster_tests, num_tests, batcher_tests, idset_tests,
                                   room_tests, abi_tests, reply_tests, metrics_tests,
                                   zframe_tests, child_tests, bufcache_tests};
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0;
    for (size_t s = 0; s < sizeof suites / sizeof suites[0]; s++) {
        for (const struct test *t = suites[s]; t->name; t++) {
            if (filter && !strstr(t->name, filter))
                continue;
            test_failures = 0;
            t->fn();
            if (test_failures) {
                printf("FAIL %s\n", t->name);
                failed++;
            } else {
                printf("ok   %s\n", t->name);
                passed++;
            }
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
