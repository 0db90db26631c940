/* skew: an LD_PRELOAD shim that sets a process's wall clock off by
 * SLUICE_SKEW_MS milliseconds (may be negative), to play a host whose
 * clock is wrong (tests/integration/clock_skew.sh, tests/faults/churn.sh).
 *
 *   SLUICE_SKEW_MS=-20000 LD_PRELOAD=build/libskew.so sluice-producer ...
 *
 * Shifted: clock_gettime() of CLOCK_REALTIME and CLOCK_REALTIME_COARSE,
 * gettimeofday(), time() and timespec_get(TIME_UTC) — what C programs and
 * Python's time.time() read. CLOCK_MONOTONIC (and every other clock) is
 * left alone: a wrong wall clock does not make time run faster. Without
 * SLUICE_SKEW_MS (or with 0) every call passes through unchanged. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static long long skew_ns(void)
{
    static int done;
    static long long ns;
    if (!done) {
        const char *s = getenv("SLUICE_SKEW_MS");
        ns = s ? strtoll(s, NULL, 10) * 1000000LL : 0;
        done = 1; /* a race here computes the same value twice */
    }
    return ns;
}

static clock_gettime_fn real_clock_gettime(void)
{
    static clock_gettime_fn fn;
    if (!fn)
        fn = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    return fn;
}

static void shift(struct timespec *ts)
{
    long long t = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + skew_ns();
    long long sec = t / 1000000000LL, nsec = t % 1000000000LL;
    if (nsec < 0) {
        nsec += 1000000000LL;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)nsec;
}

int clock_gettime(clockid_t clk, struct timespec *ts)
{
    int rc = real_clock_gettime()(clk, ts);
    if (rc == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE))
        shift(ts);
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    struct timespec ts;
    (void)tz; /* obsolete; glibc fills nothing useful either */
    if (real_clock_gettime()(CLOCK_REALTIME, &ts) != 0)
        return -1;
    shift(&ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out)
{
    struct timespec ts;
    if (real_clock_gettime()(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    shift(&ts);
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base)
{
    if (base != TIME_UTC || real_clock_gettime()(CLOCK_REALTIME, ts) != 0)
        return 0;
    shift(ts);
    return base;
}
