/* The cache of freed big buffers (common/src/bufcache.c): what it keeps,
 * what it gives back for which size, its bounds. No Redis needed. */
#include "test.h"

#include "bufcache.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void test_reuse(void)
{
    sluicei_bufcache_drain();
    char *a = malloc(64 << 10);
    CHECK(a != NULL);
    size_t cap = malloc_usable_size(a);
    sluicei_bufcache_put(a);
    size_t bytes = 0;
    CHECK(sluicei_bufcache_count(&bytes) == 1 && bytes == cap);
    /* Too big, and less than half of it: malloc's, and a stays. */
    char *big = sluicei_bufcache_get(cap + 1);
    char *small = sluicei_bufcache_get(cap / 2 - 4096);
    CHECK(big != a && small != a && sluicei_bufcache_count(NULL) == 1);
    free(big);
    free(small);
    /* Within [n, 2n]: the kept one, which is writable over n bytes. */
    char *b = sluicei_bufcache_get(40 << 10);
    CHECK(b == a && sluicei_bufcache_count(&bytes) == 0 && bytes == 0);
    memset(b, 'x', 40 << 10);
    free(b);
}

static void test_best_fit(void)
{
    sluicei_bufcache_drain();
    char *p1 = malloc(200 << 10), *p2 = malloc(100 << 10);
    sluicei_bufcache_put(p1);
    sluicei_bufcache_put(p2);
    /* 100 KiB fits both: the smaller is given. */
    char *g = sluicei_bufcache_get(100 << 10);
    CHECK(g == p2 && sluicei_bufcache_count(NULL) == 1);
    free(g);
    sluicei_bufcache_drain();
    CHECK(sluicei_bufcache_count(NULL) == 0);
}

static void test_bounds(void)
{
    sluicei_bufcache_drain();
    /* Small ones are freed, not kept; NULL is nothing. */
    sluicei_bufcache_put(malloc(1000));
    sluicei_bufcache_put(NULL);
    CHECK(sluicei_bufcache_count(NULL) == 0);
    /* A get below the minimum is plain malloc, even with one kept. */
    char *k = malloc(SLUICEI_BUFCACHE_MIN);
    sluicei_bufcache_put(k);
    char *s = sluicei_bufcache_get(SLUICEI_BUFCACHE_MIN - 1);
    CHECK(s != k);
    free(s);
    sluicei_bufcache_drain();
    /* At most SLUICEI_BUFCACHE_BYTES: 1 MiB buffers stop short of it. */
    int n = 0;
    for (int i = 0; i < 10; i++)
        sluicei_bufcache_put(malloc(1 << 20));
    size_t bytes = 0;
    n = sluicei_bufcache_count(&bytes);
    CHECK(n >= 1 && n < 10 && bytes <= SLUICEI_BUFCACHE_BYTES);
    sluicei_bufcache_drain();
    /* At most SLUICEI_BUFCACHE_COUNT buffers. */
    for (int i = 0; i < SLUICEI_BUFCACHE_COUNT + 8; i++)
        sluicei_bufcache_put(malloc(SLUICEI_BUFCACHE_MIN));
    CHECK(sluicei_bufcache_count(&bytes) == SLUICEI_BUFCACHE_COUNT);
    CHECK(bytes <= SLUICEI_BUFCACHE_BYTES);
    sluicei_bufcache_drain();
}

static atomic_int churning;

/* Takes and gives back big buffers until told to stop, as a consumer's
 * loop thread and its application do. */
static void *churn(void *arg)
{
    (void)arg;
    while (atomic_load(&churning)) {
        void *p = sluicei_bufcache_get(64 << 10);
        sluicei_bufcache_put(p);
    }
    return NULL;
}

/* A fork() while another thread uses the cache: the child can use it (the
 * cache's lock is not left held in the child), every time. */
static void test_fork(void)
{
    sluicei_bufcache_drain();
    pthread_t th;
    atomic_store(&churning, 1);
    CHECK(pthread_create(&th, NULL, churn, NULL) == 0);
    int stuck = 0;
    for (int i = 0; i < 50 && !stuck; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            void *p = sluicei_bufcache_get(64 << 10);
            sluicei_bufcache_put(p);
            sluicei_bufcache_count(NULL);
            _exit(0);
        }
        CHECK(pid > 0);
        if (pid < 0)
            break;
        int status = 0;
        struct timespec pause = {0, 1000000};
        pid_t w = 0;
        /* Up to 10 s: a child stuck on the lock never exits. */
        for (int t = 0; t < 10000 && (w = waitpid(pid, &status, WNOHANG)) == 0; t++)
            nanosleep(&pause, NULL);
        if (w == 0) {
            stuck = 1;
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        CHECK(w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    atomic_store(&churning, 0);
    pthread_join(th, NULL);
    sluicei_bufcache_drain();
}

const struct test bufcache_tests[] = {
    {"bufcache/reuse within twice the size", test_reuse},
    {"bufcache/the smallest that fits", test_best_fit},
    {"bufcache/bounds", test_bounds},
    {"bufcache/fork while another thread uses it", test_fork},
    {NULL, NULL},
};
