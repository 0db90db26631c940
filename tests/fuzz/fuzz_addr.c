/* libFuzzer target: many-server addresses (common/src/cluster_addr.c): cluster
 * seed lists and lists of servers, parsed without any I/O. Besides "no
 * crash": a parse either succeeds with a printable form or fails with a
 * message, and the classification of error replies and the key slot take
 * any bytes. (Each server of a list and each seed goes through
 * sluicei_url_parse, whose target checks that no password is shown.) */
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    (void)sluicei_cluster_retryable(s, size);
    if (sluicei_key_slot(s, size) >= SLUICEI_CLUSTER_SLOTS)
        abort();

    sluicei_router *r = NULL;
    char err[512] = "";
    if (sluicei_router_parse(&r, s, err, sizeof err) == SLUICE_OK) {
        if (!sluicei_router_describe(r)[0])
            abort();
        sluicei_router_close(r);
    } else if (err[0] == '\0') {
        abort();
    }
    free(s);
    return 0;
}
