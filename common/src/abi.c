/* The sizes of the public structs, for bindings that mirror them. */
#include <sluice/batch.h>
#include <sluice/consumer.h>
#include <sluice/producer.h>

#include <string.h>

#define STRUCT(t) {#t, sizeof(t)}

static const struct {
    const char *name;
    size_t size;
} structs[] = {
    STRUCT(sluice_batch_id),       STRUCT(sluice_record),         STRUCT(sluice_tensor),
    STRUCT(sluice_consumer_opts),  STRUCT(sluice_consumer_stats), STRUCT(sluice_epoch_report),
    STRUCT(sluice_producer_opts),  STRUCT(sluice_task),           STRUCT(sluice_producer_stats),
};

size_t sluice_struct_size(const char *name)
{
    if (!name)
        return 0;
    for (size_t i = 0; i < sizeof structs / sizeof structs[0]; i++)
        if (strcmp(structs[i].name, name) == 0)
            return structs[i].size;
    return 0;
}
