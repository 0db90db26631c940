/* sluice — the --transform plugin ABI (sluice-producer --transform lib.so[:ARG]).
 *
 * A plugin is a shared library that turns each batch of input records into
 * the batch to push: C-speed preprocessing (decode, resize, tokenize...)
 * inside the producer. Build it with
 *
 *     cc -shared -fPIC -O2 -I/usr/local/include my_transform.c -o libmy.so
 *
 * and run `sluice-producer --queue Q --transform ./libmy.so:ARG ...`.
 * A plugin needs no sluice library: everything it calls comes through the
 * host table below. See examples/transform/upper.c.
 *
 * Exports (plain C symbols):
 *
 *   int sluice_transform_batch(void *state, const sluice_record *in, size_t n,
 *                              const sluice_transform_host *host,
 *                              sluice_transform_out *out);            REQUIRED
 *       Called once per batch of n input records (n >= 1; the records and
 *       their bytes belong to the host and are valid during the call only).
 *       For a tensor reader (idx) each record is one packed row: the
 *       columns back to back (idx: 784 image bytes, then 1 label byte).
 *       Describe the output by calling host->add_record() for each output
 *       record, OR host->add_tensor() for each output tensor (all with the
 *       same shape[0] = number of rows) — not both. Adding nothing drops
 *       the batch. Return 0 on success; anything else fails the task.
 *
 *   int sluice_transform_init(void **state, const char *arg);   optional
 *       Called once when the producer starts, before any batch. arg is the
 *       text after the first ':' of the --transform value ("" when there
 *       is none). Store anything in *state (it starts as NULL); it is
 *       passed to every other call. Non-zero: the producer refuses to run.
 *
 *   void sluice_transform_fini(void *state);                    optional
 *       Called once at the end.
 *
 *   const char *sluice_transform_error(void *state);            optional
 *       After a non-zero return, a one-line reason the producer reports
 *       (and stores as the task's failure). Valid until the next call.
 *
 *   int sluice_transform_abi;                                    optional
 *       If present, must equal SLUICE_TRANSFORM_ABI.
 *
 * Threads: the host calls a plugin from one thread at a time; one process
 * loads it once. A plugin must not exit(), and should not print to stdout. */
#ifndef SLUICE_TRANSFORM_H
#define SLUICE_TRANSFORM_H

#include <sluice/batch.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this ABI; host->abi holds the host's. */
#define SLUICE_TRANSFORM_ABI 1

/* The output being built: opaque, owned by the host. */
typedef struct sluice_transform_out sluice_transform_out;

/* Functions the host gives the plugin, valid during the call only. */
typedef struct sluice_transform_host {
    int abi;   /* SLUICE_TRANSFORM_ABI of the host */
    /* Appends one output record; the bytes are copied. Returns 0, or -1
     * when out of memory, when the record is larger than 1 GiB, or when
     * tensors were added already. */
    int (*add_record)(sluice_transform_out *o, const void *data, size_t len);
    /* Appends one output tensor; the name, shape and data are copied.
     * ndim >= 1 and shape[0] = rows, the same for every tensor of the
     * batch; nbytes must match the shape and dtype; names unique, 1..64
     * bytes; at most 64 tensors. Returns 0, or -1 when any of that does
     * not hold, when out of memory, or when records were added already. */
    int (*add_tensor)(sluice_transform_out *o, const sluice_tensor *t);
} sluice_transform_host;

/* The plugin's functions, declared so that a plugin's definitions are
 * checked against them. */
SLUICE_EXPORT int sluice_transform_batch(void *state, const sluice_record *in, size_t n,
                           const sluice_transform_host *host, sluice_transform_out *out);
SLUICE_EXPORT int sluice_transform_init(void **state, const char *arg);
SLUICE_EXPORT void sluice_transform_fini(void *state);
SLUICE_EXPORT const char *sluice_transform_error(void *state);

#ifdef __cplusplus
}
#endif
#endif
