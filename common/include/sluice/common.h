/* sluice — shared definitions: error codes, version, limits.
 *
 * Every sluice call that can fail returns a sluice_err. SLUICE_OK is zero;
 * sluice_strerror() names any code. The handle that failed keeps a detailed
 * message (sluice_consumer_errstr(), sluice_producer_errstr()). */
#ifndef SLUICE_COMMON_H
#define SLUICE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of these headers. SLUICE_VERSION_NUMBER orders versions:
 * 0xMMmmpp00 for major MM, minor mm, patch pp. The shared library's soname
 * carries the major number (libsluice.so.MAJOR): releases of one major
 * number keep the ABI. */
#define SLUICE_VERSION_MAJOR 0
#define SLUICE_VERSION_MINOR 1
#define SLUICE_VERSION_PATCH 0
#define SLUICE_VERSION "0.1.0"
#define SLUICE_VERSION_NUMBER                                                            \
    (((uint32_t)SLUICE_VERSION_MAJOR << 24) | ((uint32_t)SLUICE_VERSION_MINOR << 16) |    \
     ((uint32_t)SLUICE_VERSION_PATCH << 8))
#define SLUICE_WIRE_VERSION 1

/* Marks what libsluice exports; it is built with -fvisibility=hidden, so
 * nothing else is (a --transform plugin's entry points carry it too). */
#if defined(__GNUC__) || defined(__clang__)
#define SLUICE_EXPORT __attribute__((visibility("default")))
#else
#define SLUICE_EXPORT
#endif

/* The defaults, in one place: what a zero in an options struct, or a flag
 * left out, means. */
/* Frames larger than this are refused unless a handle sets its own limit. */
#define SLUICE_MAX_BATCH_BYTES_DEFAULT ((size_t)64 << 20)
/* Connect timeout used when an options struct leaves it at zero. */
#define SLUICE_CONNECT_TIMEOUT_MS_DEFAULT 5000
/* A lease: a producer's on its task (sluice_producer_task_claim()), and a
 * queue's consumers' on their batches (sluice-ctl create --lease-ms). */
#define SLUICE_LEASE_MS_DEFAULT 10000
/* A Redis command's socket timeout; longer than any blocking read. */
#define SLUICE_COMMAND_TIMEOUT_MS_DEFAULT 10000

typedef enum sluice_err {
    SLUICE_OK = 0,
    SLUICE_EOF,            /* end of the data: no batch will come */
    SLUICE_ERR_TIMEOUT,    /* nothing arrived before the timeout */
    SLUICE_ERR_IO,         /* connection lost and not regained in time */
    SLUICE_ERR_PROTOCOL,   /* malformed frame or unexpected Redis reply */
    SLUICE_ERR_INVALID,    /* bad argument: URL, option, flag */
    SLUICE_ERR_NOMEM,      /* allocation failed */
    SLUICE_ERR_AUTH,       /* Redis refused the credentials, or a command they do not permit */
    SLUICE_ERR_NOQUEUE,    /* the queue does not exist (sluice-ctl create) */
    SLUICE_ERR_EXISTS,     /* the queue exists already */
    SLUICE_ERR_FULL,       /* the queue is at its budget */
    SLUICE_ERR_TOOBIG,     /* a batch larger than any budget allows */
    SLUICE_ERR_FORMAT,     /* corrupt or truncated input file */
    SLUICE_ERR_REDIS,      /* Redis answered with an error */
    SLUICE_ERR_SYS,        /* a system call failed (see errstr) */
    SLUICE_ERR_PARTIAL,    /* the end of an epoch that lost records: tasks of it failed */
    SLUICE_ERR_BUSY,       /* the consumer id or rank is held by another live consumer */
} sluice_err;

/* Returns a static, human-readable name for e ("connection lost", ...).
 * Never NULL; unknown codes give "unknown error". Thread-safe. */
SLUICE_EXPORT const char *sluice_strerror(sluice_err e);

/* Returns SLUICE_VERSION of the linked library, and its
 * SLUICE_VERSION_NUMBER: a program can compare it with the one it was
 * compiled against. */
SLUICE_EXPORT const char *sluice_version(void);
SLUICE_EXPORT uint32_t sluice_version_number(void);

/* Returns sizeof the public struct called name, without "struct"
 * ("sluice_consumer_opts"), as this library was compiled: a binding that
 * mirrors the structs (python/sluice, over ctypes) checks its copies
 * against the library it loaded. Knows every struct of batch.h,
 * consumer.h and producer.h: sluice_batch_id, sluice_record,
 * sluice_tensor, sluice_consumer_opts, sluice_consumer_stats,
 * sluice_epoch_report, sluice_producer_opts, sluice_task and
 * sluice_producer_stats. Returns 0 for any other name and for NULL.
 * Thread-safe. */
SLUICE_EXPORT size_t sluice_struct_size(const char *name);

#ifdef __cplusplus
}
#endif
#endif
