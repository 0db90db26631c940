/* A small, process-wide cache of freed big buffers. A consumer's frames
 * arrive in buffers of tens of KiB to MiB, allocated by its loop thread
 * and freed as the application releases them, and a producer lets go of
 * the frame buffers above its window: freed to malloc, glibc hands the top
 * of the heap back to the kernel (more than 128 KiB free there) and the
 * next frames fault it in again (at 64 KiB, 10% of the consumer's CPU and
 * 21% of the producer's). Kept here, they are used again as they are.
 * Thread-safe. */
#ifndef SLUICE_BUFCACHE_H
#define SLUICE_BUFCACHE_H

#include <stddef.h>

/* Buffers smaller than this are not kept (malloc reuses them well). */
#define SLUICEI_BUFCACHE_MIN ((size_t)16 << 10)
/* The most the cache keeps: buffers, and their bytes. */
#define SLUICEI_BUFCACHE_COUNT 64
#define SLUICEI_BUFCACHE_BYTES ((size_t)4 << 20)

/* A buffer of at least n bytes, to be freed with free() or given to
 * sluicei_bufcache_put(): a kept one no more than twice that size, else
 * malloc's. NULL when out of memory. */
void *sluicei_bufcache_get(size_t n);

/* Keeps buffer p (from malloc, or sluicei_bufcache_get) for a later get
 * when it is big enough and the cache has room, else frees it. NULL is a
 * no-op. */
void sluicei_bufcache_put(void *p);

/* How many buffers are kept, and (bytes not NULL) their bytes. */
int sluicei_bufcache_count(size_t *bytes);

/* Frees every kept buffer. */
void sluicei_bufcache_drain(void);

#endif
