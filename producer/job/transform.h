/* Host side of --transform plugins (sluice/transform.h): load, apply,
 * unload. Internal; knows nothing of Redis. */
#ifndef SLUICE_TRANSFORM_HOST_H
#define SLUICE_TRANSFORM_HOST_H

#include <sluice/batch.h>
#include <sluice/common.h>

typedef struct sluicei_transform sluicei_transform;

/* A plugin's output for one batch. Exactly one of records / tensors is
 * used: nrecords > 0 (records), or ntensors > 0 (tensors of `rows` rows
 * each); both 0 when the plugin added nothing (drop the batch). Every
 * pointer is owned by the transform and valid until the next apply or
 * close. */
typedef struct sluicei_transform_result {
    const sluice_record *records;
    size_t nrecords;
    const sluice_tensor *tensors;
    size_t ntensors;
    uint64_t rows;
} sluicei_transform_result;

/* Loads spec = "PATH[:ARG]" (dlopen of PATH, which needs a '/' to be
 * taken as a file rather than searched for: "./libx.so"), checks its ABI
 * and calls its sluice_transform_init(ARG). On SLUICE_OK *out is owned by
 * the caller (sluicei_transform_close()); otherwise *out is NULL and err
 * says why (SLUICE_ERR_INVALID: cannot load, no sluice_transform_batch,
 * ABI mismatch, init failed). */
sluice_err sluicei_transform_open(sluicei_transform **out, const char *spec, char *err,
                                  size_t errlen);

/* Runs the plugin on in[0..n) (n >= 1). On SLUICE_OK *res describes the
 * output. On failure (the plugin returned non-zero, or broke the rules of
 * add_record/add_tensor) returns SLUICE_ERR_FORMAT with "transform PATH
 * failed on batch K: <plugin's error or what rule>", K counting apply
 * calls from 0; SLUICE_ERR_NOMEM when the host ran out of memory. */
sluice_err sluicei_transform_apply(sluicei_transform *t, const sluice_record *in, size_t n,
                                   sluicei_transform_result *res, char *err, size_t errlen);

/* Calls the plugin's fini, unloads it and frees t. NULL is a no-op. */
void sluicei_transform_close(sluicei_transform *t);

#endif
