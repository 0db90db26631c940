/* An example --transform plugin (sluice/transform.h): upper-cases ASCII
 * letters of every record.
 *
 * Build:   cc -shared -fPIC -O2 -Icommon/include \
 *             examples/transform/upper.c -o build/examples/libupper.so
 *          (`make unit` does this; installed headers: -I$PREFIX/include)
 * Use:     sluice-producer --queue Q --format lines --transform ./build/examples/libupper.so ...
 *
 * Its argument (after ':') picks a mode, to show the whole ABI:
 *   (none)      records out: each input record upper-cased
 *   lengths     tensors out: "length" uint32 [n], the input record sizes
 *   fail-at=K   fails on its K-th batch (from 0), with a message */
#include <sluice/transform.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct upper_state {
    int lengths;                 /* mode "lengths" */
    long fail_at;                /* -1: never */
    long batches;
    unsigned char *buf;
    size_t cap;
    char error[128];
} upper_state;

/* Lets the host refuse a plugin built for another ABI. */
int sluice_transform_abi = SLUICE_TRANSFORM_ABI;

int sluice_transform_init(void **state, const char *arg)
{
    upper_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->fail_at = -1;
    if (strcmp(arg, "lengths") == 0)
        s->lengths = 1;
    else if (strncmp(arg, "fail-at=", 8) == 0)
        s->fail_at = strtol(arg + 8, NULL, 10);
    else if (*arg) {
        free(s);
        return -1;               /* unknown mode: the producer refuses to start */
    }
    *state = s;
    return 0;
}

void sluice_transform_fini(void *state)
{
    upper_state *s = state;
    free(s->buf);
    free(s);
}

const char *sluice_transform_error(void *state)
{
    return state ? ((upper_state *)state)->error : "unknown mode (want lengths or fail-at=K)";
}

int sluice_transform_batch(void *state, const sluice_record *in, size_t n,
                           const sluice_transform_host *host, sluice_transform_out *out)
{
    upper_state *s = state;
    if (s->batches++ == s->fail_at) {
        snprintf(s->error, sizeof s->error, "asked to fail at batch %ld", s->fail_at);
        return -1;
    }
    if (s->lengths) {
        uint32_t *len = malloc(n * sizeof *len);
        if (!len)
            return -1;
        for (size_t i = 0; i < n; i++)
            len[i] = (uint32_t)in[i].len;
        sluice_tensor t = {.name = "length", .dtype = SLUICE_DTYPE_UINT32, .ndim = 1,
                           .shape = {n}, .data = len, .nbytes = n * sizeof *len};
        int rc = host->add_tensor(out, &t);   /* copies: len can go */
        free(len);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if (in[i].len > s->cap) {
            unsigned char *nb = realloc(s->buf, in[i].len);
            if (!nb)
                return -1;
            s->buf = nb;
            s->cap = in[i].len;
        }
        const unsigned char *p = in[i].data;
        for (size_t k = 0; k < in[i].len; k++)
            s->buf[k] = (unsigned char)toupper(p[k]);
        if (host->add_record(out, s->buf, in[i].len) != 0)
            return -1;
    }
    return 0;
}
