/* Host side of --transform plugins (transform.h, sluice/transform.h). */
#include "transform.h"

#include <sluice/transform.h>

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSORS 64          /* as the wire format */
#define MAX_TENSOR_NAME 64
#define MAX_RECORD ((size_t)1 << 30)

typedef int (*batch_fn)(void *, const sluice_record *, size_t, const sluice_transform_host *,
                        sluice_transform_out *);
typedef int (*init_fn)(void **, const char *);
typedef void (*fini_fn)(void *);
typedef const char *(*error_fn)(void *);

/* The output of one batch. Buffers are kept from batch to batch, so the
 * steady state allocates nothing. */
struct sluice_transform_out {
    /* records: bytes back to back, and where each one starts */
    unsigned char *bytes;
    size_t len, cap;
    size_t *offs;
    sluice_record *recs;       /* built after the batch: bytes may move while it grows */
    size_t nrec, reccap;
    /* tensors */
    sluice_tensor tens[MAX_TENSORS];
    char names[MAX_TENSORS][MAX_TENSOR_NAME + 1];
    void *data[MAX_TENSORS];
    size_t datacap[MAX_TENSORS];
    size_t ntens;
    uint64_t rows;
    /* first rule the plugin broke in this batch, "" if none */
    char why[256];
    int nomem;
};

struct sluicei_transform {
    void *dl;
    char *path;
    void *state;
    batch_fn batch;
    fini_fn fini;
    error_fn error;
    uint64_t batches;          /* apply calls so far */
    sluice_transform_out out;
    sluice_transform_host host;
};

/* Records the first broken rule; returns -1 for the plugin. */
static int refuse(sluice_transform_out *o, const char *why)
{
    if (!o->why[0])
        snprintf(o->why, sizeof o->why, "%s", why);
    return -1;
}

static int host_add_record(sluice_transform_out *o, const void *data, size_t len)
{
    if (o->ntens)
        return refuse(o, "add_record after add_tensor (a batch is records or tensors)");
    if (len > MAX_RECORD)
        return refuse(o, "add_record of more than 1 GiB");
    if (len && !data)
        return refuse(o, "add_record with NULL data");
    if (o->nrec == o->reccap) {
        size_t ncap = o->reccap ? o->reccap * 2 : 64;
        size_t *no = realloc(o->offs, ncap * sizeof *no);
        if (!no)
            goto nomem;
        o->offs = no;
        sluice_record *nr = realloc(o->recs, ncap * sizeof *nr);
        if (!nr)
            goto nomem;
        o->recs = nr;
        o->reccap = ncap;
    }
    if (len > o->cap - o->len) {
        size_t ncap = o->cap ? o->cap : 4096;
        while (ncap - o->len < len) {
            if (ncap > SIZE_MAX / 2)
                goto nomem;
            ncap *= 2;
        }
        unsigned char *nb = realloc(o->bytes, ncap);
        if (!nb)
            goto nomem;
        o->bytes = nb;
        o->cap = ncap;
    }
    if (len)
        memcpy(o->bytes + o->len, data, len);
    o->offs[o->nrec] = o->len;
    o->recs[o->nrec].len = len;
    o->nrec++;
    o->len += len;
    return 0;
nomem:
    o->nomem = 1;
    return refuse(o, "out of memory in add_record");
}

static int host_add_tensor(sluice_transform_out *o, const sluice_tensor *t)
{
    char why[160];
    if (o->nrec)
        return refuse(o, "add_tensor after add_record (a batch is records or tensors)");
    if (!t || !t->name)
        return refuse(o, "add_tensor without a tensor or a name");
    size_t nlen = strlen(t->name);
    if (nlen == 0 || nlen > MAX_TENSOR_NAME)
        return refuse(o, "add_tensor: a name must be 1..64 bytes");
    for (size_t i = 0; i < o->ntens; i++)
        if (strcmp(o->names[i], t->name) == 0) {
            snprintf(why, sizeof why, "add_tensor: tensor '%s' added twice", t->name);
            return refuse(o, why);
        }
    if (o->ntens == MAX_TENSORS)
        return refuse(o, "add_tensor: more than 64 tensors");
    size_t esize = sluice_dtype_size(t->dtype);
    if (esize == 0 || t->ndim < 1 || t->ndim > SLUICE_MAX_DIMS) {
        snprintf(why, sizeof why, "add_tensor '%s': bad dtype or ndim (want 1..%d)", t->name,
                 SLUICE_MAX_DIMS);
        return refuse(o, why);
    }
    if (o->ntens && t->shape[0] != o->rows) {
        snprintf(why, sizeof why, "add_tensor '%s': shape[0] %" PRIu64 " but the first tensor "
                 "has %" PRIu64 " rows", t->name, t->shape[0], o->rows);
        return refuse(o, why);
    }
    uint64_t bytes = esize;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] && bytes > UINT64_MAX / t->shape[d])
            return refuse(o, "add_tensor: shape overflows");
        bytes *= t->shape[d];
    }
    if (bytes != t->nbytes || (bytes && !t->data)) {
        snprintf(why, sizeof why, "add_tensor '%s': nbytes %zu but the shape and dtype give %"
                 PRIu64, t->name, t->nbytes, bytes);
        return refuse(o, why);
    }
    size_t i = o->ntens;
    if (t->nbytes > o->datacap[i] || !o->data[i]) {
        void *nd = realloc(o->data[i], t->nbytes ? t->nbytes : 1);
        if (!nd) {
            o->nomem = 1;
            return refuse(o, "out of memory in add_tensor");
        }
        o->data[i] = nd;
        o->datacap[i] = t->nbytes ? t->nbytes : 1;
    }
    if (t->nbytes)
        memcpy(o->data[i], t->data, t->nbytes);
    memcpy(o->names[i], t->name, nlen + 1);
    o->tens[i] = *t;
    o->tens[i].name = o->names[i];
    o->tens[i].data = o->data[i];
    if (i == 0)
        o->rows = t->shape[0];
    o->ntens++;
    return 0;
}

/* Looks up an optional symbol and returns it as a function pointer (dlsym
 * gives a void *; memcpy avoids the conversion C leaves undefined). */
static void *lookup(void *dl, const char *name)
{
    dlerror();
    return dlsym(dl, name);
}

void sluicei_transform_close(sluicei_transform *t)
{
    if (!t)
        return;
    if (t->fini)
        t->fini(t->state);
    if (t->dl)
        dlclose(t->dl);
    free(t->out.bytes);
    free(t->out.offs);
    free(t->out.recs);
    for (size_t i = 0; i < MAX_TENSORS; i++)
        free(t->out.data[i]);
    free(t->path);
    free(t);
}

sluice_err sluicei_transform_open(sluicei_transform **out, const char *spec, char *err,
                                  size_t errlen)
{
    *out = NULL;
    sluicei_transform *t = calloc(1, sizeof *t);
    const char *colon = strchr(spec, ':');
    if (!t || !(t->path = colon ? strndup(spec, (size_t)(colon - spec)) : strdup(spec))) {
        free(t);
        snprintf(err, errlen, "transform %s: out of memory", spec);
        return SLUICE_ERR_NOMEM;
    }
    const char *arg = colon ? colon + 1 : "";
    t->host.abi = SLUICE_TRANSFORM_ABI;
    t->host.add_record = host_add_record;
    t->host.add_tensor = host_add_tensor;
    if (!(t->dl = dlopen(t->path, RTLD_NOW | RTLD_LOCAL))) {
        snprintf(err, errlen, "transform %s: %s", t->path, dlerror());
        goto invalid;
    }
    void *sym = lookup(t->dl, "sluice_transform_batch");
    if (!sym) {
        snprintf(err, errlen, "transform %s: no function sluice_transform_batch (see "
                 "sluice/transform.h)", t->path);
        goto invalid;
    }
    memcpy(&t->batch, &sym, sizeof sym);
    const int *abi = lookup(t->dl, "sluice_transform_abi");
    if (abi && *abi != SLUICE_TRANSFORM_ABI) {
        snprintf(err, errlen, "transform %s: built for plugin ABI %d, this producer has %d",
                 t->path, *abi, SLUICE_TRANSFORM_ABI);
        goto invalid;
    }
    if ((sym = lookup(t->dl, "sluice_transform_error")) != NULL)
        memcpy(&t->error, &sym, sizeof sym);
    init_fn init = NULL;
    if ((sym = lookup(t->dl, "sluice_transform_init")) != NULL)
        memcpy(&init, &sym, sizeof sym);
    if (init && init(&t->state, arg) != 0) {
        const char *why = t->error ? t->error(t->state) : NULL;
        snprintf(err, errlen, "transform %s: init('%s') failed%s%s", t->path, arg,
                 why ? ": " : "", why ? why : "");
        goto invalid;
    }
    /* Only now: fini pairs with a successful init. */
    if ((sym = lookup(t->dl, "sluice_transform_fini")) != NULL)
        memcpy(&t->fini, &sym, sizeof sym);
    *out = t;
    return SLUICE_OK;
invalid:
    sluicei_transform_close(t);
    return SLUICE_ERR_INVALID;
}

sluice_err sluicei_transform_apply(sluicei_transform *t, const sluice_record *in, size_t n,
                                   sluicei_transform_result *res, char *err, size_t errlen)
{
    sluice_transform_out *o = &t->out;
    uint64_t k = t->batches++;
    memset(res, 0, sizeof *res);
    o->len = o->nrec = o->ntens = 0;
    o->rows = 0;
    o->why[0] = '\0';
    o->nomem = 0;
    int rc = t->batch(t->state, in, n, &t->host, o);
    if (o->nomem) {
        snprintf(err, errlen, "transform %s failed on batch %" PRIu64 ": %s", t->path, k,
                 o->why);
        return SLUICE_ERR_NOMEM;
    }
    if (rc != 0 || o->why[0]) {
        const char *why = rc != 0 && t->error ? t->error(t->state) : NULL;
        if (!why || !*why)
            why = o->why[0] ? o->why : "it returned non-zero";
        snprintf(err, errlen, "transform %s failed on batch %" PRIu64 ": %.*s", t->path, k, 512,
                 why);
        return SLUICE_ERR_FORMAT;
    }
    for (size_t i = 0; i < o->nrec; i++)
        o->recs[i].data = o->bytes + o->offs[i];
    res->records = o->nrec ? o->recs : NULL;
    res->nrecords = o->nrec;
    res->tensors = o->ntens ? o->tens : NULL;
    res->ntensors = o->ntens;
    res->rows = o->ntens ? o->rows : o->nrec;
    return SLUICE_OK;
}
