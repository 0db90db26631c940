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

/* A fork() while another thread holds mu (a consumer's loop thread taking
 * a buffer) would leave it locked for good in the child: the fork waits
 * for it, and both sides release it. The child keeps what was kept. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&mu);
}

static void fork_release(void)
{
    pthread_mutex_unlock(&mu);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
}

static void lock(void)
{
    pthread_once(&once, init);
    pthread_mutex_lock(&mu);
}

void *sluicei_bufcache_get(size_t n)
{
    if (n >= SLUICEI_BUFCACHE_MIN) {
        void *p = NULL;
        lock();
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
        lock();
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
    lock();
    while (nbufs > 0)
        free(bufs[--nbufs]);
    total = 0;
    pthread_mutex_unlock(&mu);
}

int sluicei_bufcache_count(size_t *bytes)
{
    lock();
    int n = nbufs;
    if (bytes)
        *bytes = total;
    pthread_mutex_unlock(&mu);
    return n;
}
