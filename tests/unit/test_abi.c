/* sluice_struct_size: what a binding checks its copies of the structs with. */
#include "test.h"

#include <sluice/batch.h>
#include <sluice/consumer.h>
#include <sluice/producer.h>

static void test_known_structs(void)
{
    static const struct {
        const char *name;
        size_t size;
    } cases[] = {
        {"sluice_batch_id", sizeof(sluice_batch_id)},
        {"sluice_record", sizeof(sluice_record)},
        {"sluice_tensor", sizeof(sluice_tensor)},
        {"sluice_consumer_opts", sizeof(sluice_consumer_opts)},
        {"sluice_consumer_stats", sizeof(sluice_consumer_stats)},
        {"sluice_epoch_report", sizeof(sluice_epoch_report)},
        {"sluice_producer_opts", sizeof(sluice_producer_opts)},
        {"sluice_task", sizeof(sluice_task)},
        {"sluice_producer_stats", sizeof(sluice_producer_stats)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = sluice_struct_size(cases[i].name);
        if (got != cases[i].size)
            fprintf(stderr, "    %s: %zu, sizeof says %zu\n", cases[i].name, got, cases[i].size);
        CHECK(got == cases[i].size);
        CHECK(got > 0);
    }
}

static void test_unknown_names(void)
{
    CHECK(sluice_struct_size(NULL) == 0);
    CHECK(sluice_struct_size("") == 0);
    CHECK(sluice_struct_size("sluice_consumer") == 0);           /* opaque */
    CHECK(sluice_struct_size("struct sluice_consumer_opts") == 0);
    CHECK(sluice_struct_size("sluice_consumer_opts ") == 0);
    CHECK(sluice_struct_size("SLUICE_CONSUMER_OPTS") == 0);
    CHECK(sluice_struct_size("sluice_transform_host") == 0);     /* a plugin's, not the library's */
}

const struct test abi_tests[] = {
    {"abi/struct sizes", test_known_structs},
    {"abi/unknown names", test_unknown_names},
    {NULL, NULL},
};
