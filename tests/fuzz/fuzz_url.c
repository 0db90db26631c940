/* libFuzzer target: Redis address parsing (common/src/url.c). Besides "no
 * crash": a parse either succeeds with a host or a socket path, or fails
 * with a message; the message and the printable form never contain the
 * password. */
#include "conn.h"

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
    sluicei_url u;
    char err[256] = "";
    if (sluicei_url_parse(s, &u, err, sizeof err) == SLUICE_OK) {
        if (!u.host == !u.unix_path)
            abort();
        char desc[512];
        sluicei_url_describe(&u, desc, sizeof desc);
        if (u.password) {
            char needle[300];
            snprintf(needle, sizeof needle, ":%s@", u.password);
            /* Look past the scheme: "redis://" itself may match ":pw@". */
            const char *rest = strstr(desc, "://");
            rest = rest ? rest + 3 : desc;
            if (strlen(u.password) < 250 && strstr(rest, needle))
                abort();
        }
        sluicei_url_free(&u);
    } else if (err[0] == '\0') {
        abort();
    }
    free(s);
    return 0;
}
