/* The cache of freed big buffers (bufcache.h). */
#include "bufcache.h"

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *bufs[SLUICEI_BUFCACHE_COUNT];
static size_t caps[SLUICEI_BUFCACHE_COUNT];
static int nbufs;
static size_t total;

void *sluicei_bufcache_get(size_t n)
{
    if (n >= SLUICEI_BUFCACHE_MIN) {
        void *p = NULL;
        pthread_mutex_lock(&mu);
        int best = -1;
        for (int i = 0; i < nbufs; i++)
            if (caps[i] >= n && caps[i] / 2 <= n && (best < 0 || caps[i] < caps[best]))
                best = i;
        if (best >= 0) {
            p = bufs[best];
            total -= caps[best];
            nbufs--;
            bufs[best] = bufs[nbufs];
            caps[best] = caps[nbufs];
        }
        pthread_mutex_unlock(&mu);
        if (p)
            return p;
    }
    return malloc(n ? n : 1);
}

void sluicei_bufcache_put(void *p)
{
    if (!p)
        return;
    size_t cap = malloc_usable_size(p);
    if (cap >= SLUICEI_BUFCACHE_MIN) {
        pthread_mutex_lock(&mu);
        int kept = nbufs < SLUICEI_BUFCACHE_COUNT && cap <= SLUICEI_BUFCACHE_BYTES - total;
        if (kept) {
            bufs[nbufs] = p;
            caps[nbufs] = cap;
            nbufs++;
            total += cap;
        }
        pthread_mutex_unlock(&mu);
        if (kept)
            return;
    }
    free(p);
}

void sluicei_bufcache_drain(void)
{
    pthread_mutex_lock(&mu);
    while (nbufs > 0)
        free(bufs[--nbufs]);
    total = 0;
    pthread_mutex_unlock(&mu);
}

int sluicei_bufcache_count(size_t *bytes)
{
    pthread_mutex_lock(&mu);
    int n = nbufs;
    if (bytes)
        *bytes = total;
    pthread_mutex_unlock(&mu);
    return n;
}
