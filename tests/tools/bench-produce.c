/* bench-produce: the producer side of `make bench` (bench/bench.py).
 *
 * Pushes --count batches of --size payload bytes each (split into --records
 * equal records) into an existing queue with the libsluice producer API,
 * flushes, and prints one line of key=value pairs on stdout:
 *
 *   produce batches=N payload=B frame_bytes=F t0_us=T t1_us=T cpu_us=C
 *           maxrss_kb=K full_waits=W blocked_us=U duplicates=D payload_kind=P
 *
 * t0_us/t1_us are CLOCK_REALTIME microseconds (comparable across the
 * processes of one run) taken just before the first push and just after the
 * flush; cpu_us comes from getrusage(RUSAGE_SELF), so it covers every
 * thread of the process, less the CPU spent making the payload;
 * maxrss_kb is the peak resident set (VmHWM).
 *
 * --inflight K sets max_inflight; absent or 0, the library's default.
 *
 * --duration-ms T stops pushing after T ms (at least one batch; --count is
 * then a cap): runs whose speed is not known in advance (over a slow
 * network) take a known time. batches= and payload= say what was pushed.
 *
 * --chunk N starts a new task every N batches (task numbers T << 32 | k,
 * distinct across producers of distinct --task T). On a partitioned queue
 * each new task goes to the next partition, so one producer spreads its
 * batches over every partition, N at a time; without it they all go to
 * one partition.
 *
 * --payload says what the bytes are (made once, before the first push: the
 * benchmark measures moving bytes, not making them):
 *   random  bytes that do not compress (xorshift), the same for every batch;
 *   fmnist  the pixel bytes of Fashion-MNIST's training images (FMNIST_FILE,
 *           gunzipped with zlib, repeated when a batch needs more), or text
 *           when that file is missing (said on stderr);
 *   text    English-like words from a fixed vocabulary in recurring
 *           sentence patterns, deterministic: about 3x smaller with lz4 and
 *           5x with zstd at 64 KiB and more (less at 1 KiB).
 * fmnist and text fill a pool of POOL_BYTES (or one batch, if larger) and
 * each batch starts where the previous one ended, wrapping round, so
 * batches differ as real ones do; the line printed ends with
 * payload_kind=random|fmnist|text, what was used.
 * Exit status 0, 1 on a sluice or file error, 2 on bad usage. */
#include <sluice/producer.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <zlib.h>

#define PROG "bench-produce"

/* Where Debian's dataset-fashion-mnist puts the training images. */
#define FMNIST_FILE "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
/* The pool the batches of fmnist and text payloads are cut from. */
#define POOL_BYTES ((size_t)16 << 20)

static int usage(const char *why)
{
    fprintf(stderr,
            PROG ": %s\n"
            "usage: " PROG " --redis URL --queue Q --size BYTES --count N\n"
            "                     [--records R] [--inflight K] [--task T] [--chunk N]\n"
            "                     [--payload random|fmnist|text] [--duration-ms T]\n"
            "try '" PROG " --help'\n",
            why);
    return 2;
}

static void help(void)
{
    printf("usage: " PROG " --redis URL --queue Q --size BYTES --count N\n"
           "                     [--records R] [--inflight K] [--task T] [--chunk N]\n"
           "                     [--payload random|fmnist|text] [--duration-ms T]\n"
           "Pushes N batches of BYTES payload bytes (R records each, default 1) into the\n"
           "existing queue Q, flushes, and prints one line of key=value results.\n"
           "  --inflight K   max_inflight; 0 or absent: the library's default\n"
           "  --task T       task number of the batch ids (distinct per producer of a run)\n"
           "  --chunk N      a new task every N batches (spreads over partitions)\n"
           "  --payload P    random (default: does not compress), fmnist (Fashion-MNIST\n"
           "                 pixels from " FMNIST_FILE ";\n"
           "                 text when it is missing) or text (English-like words)\n"
           "  --duration-ms T  stop pushing after T ms (N is then a cap)\n"
           "Exit status 0, 1 on a sluice or file error, 2 on bad usage.\n");
}

/* Parses a decimal integer in [min, max] into *out; -1 when s is not one. */
static int parse_ll(const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* An index in [0, n) that favours small ones (the product of two uniform
 * 16-bit draws): common words and patterns recur as in prose. */
static size_t skewed(uint64_t r, size_t n)
{
    return (size_t)((((r & 0xffff) * ((r >> 16) & 0xffff)) >> 16) * n >> 16);
}

static const char *const words[] = {
    "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "was", "with",
    "be", "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but",
    "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her",
    "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no", "model",
    "training", "batch", "queue", "data", "record", "epoch", "layer", "weight", "gradient",
    "loss", "rate", "value", "shard", "worker", "between", "through", "under", "during",
    "before", "after", "because", "however", "although", "several", "different", "important",
    "number", "system", "network", "memory", "server", "process", "result", "example",
    "question", "answer", "people", "government", "company", "morning", "evening", "river",
    "mountain", "window", "garden", "library", "language", "history", "science", "music",
};
#define NWORDS (sizeof words / sizeof words[0])
#define NPATTERNS 64
#define PATTERN_MAX 12

/* Fills p[0..n) with sentences: each follows one of NPATTERNS fixed word
 * patterns (skewed choice), with about one word in 7 drawn afresh, so
 * that a compressor finds long repeats but not only repeats. */
static void fill_text(unsigned char *p, size_t n)
{
    unsigned char pat[NPATTERNS][PATTERN_MAX + 1];
    uint64_t x = 0x2545f4914f6cdd1du;
    for (int t = 0; t < NPATTERNS; t++) {
        pat[t][0] = (unsigned char)(5 + xorshift(&x) % (PATTERN_MAX - 4));
        for (int j = 1; j <= pat[t][0]; j++)
            pat[t][j] = (unsigned char)skewed(xorshift(&x), NWORDS);
    }
    size_t i = 0;
    while (i < n) {
        uint64_t r = xorshift(&x);
        const unsigned char *t = pat[skewed(r, NPATTERNS)];
        for (int j = 1; j <= t[0] && i < n; j++) {
            uint64_t q = xorshift(&x);
            const char *w = words[q % 7 == 0 ? skewed(q >> 20, NWORDS) : t[j]];
            for (size_t k = 0; w[k] && i < n; k++)
                p[i++] = (unsigned char)(k == 0 && j == 1 ? w[k] - 'a' + 'A' : w[k]);
            if (j == t[0] && i < n)
                p[i++] = '.';
            if (i < n)
                p[i++] = j < t[0] ? ' ' : (r >> 60) == 0 ? '\n' : ' ';
        }
    }
}

/* Fills p[0..n) with the pixel bytes of the IDX images in the gzipped
 * file path, from the first image on, repeated when n is larger. Returns
 * 0, 1 when the file does not exist, -1 (said on stderr) on another
 * error. */
static int fill_fmnist(unsigned char *p, size_t n, const char *path)
{
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        if (errno == ENOENT)
            return 1;
        fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
        return -1;
    }
    fclose(probe);
    gzFile f = gzopen(path, "rb");
    unsigned char h[16];
    if (!f || gzread(f, h, sizeof h) != (int)sizeof h || h[2] != 0x08 || h[3] != 3) {
        fprintf(stderr, PROG ": %s: not a gzipped IDX file of 3-dimensional unsigned bytes\n",
                path);
        if (f)
            gzclose(f);
        return -1;
    }
    size_t got = 0;
    while (got < n) {
        unsigned want = n - got > (1u << 30) ? 1u << 30 : (unsigned)(n - got);
        int r = gzread(f, p + got, want);
        if (r < 0) {
            int zerr;
            fprintf(stderr, PROG ": %s: %s\n", path, gzerror(f, &zerr));
            gzclose(f);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    gzclose(f);
    if (got == 0) {
        fprintf(stderr, PROG ": %s: no pixels\n", path);
        return -1;
    }
    for (size_t i = got; i < n; i++)
        p[i] = p[i - got];
    return 0;
}

/* CPU time of every thread of this process so far, in µs. */
static uint64_t cpu_now_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec +
           (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
}

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Peak resident set of this process in KiB (VmHWM), 0 if unknown. Not
 * ru_maxrss: Linux keeps that across execve, so it would report the
 * driver's size for a child the Python driver started. */
static long peak_rss_kb(void)
{
    char line[256];
    long kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    const char *url = NULL, *queue = NULL, *kind = "random";
    long long size = -1, count = -1, nrec = 1, inflight = 0, task = 1, chunk = 0;
    long long duration_ms = 0;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help();
            return 0;
        }
        if (i + 1 >= argc)
            return usage("every option takes a value");
        const char *a = argv[i], *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--redis"))
            url = v;
        else if (!strcmp(a, "--queue"))
            queue = v;
        else if (!strcmp(a, "--size"))
            bad = parse_ll(v, 1, (long long)1 << 30, &size);
        else if (!strcmp(a, "--count"))
            bad = parse_ll(v, 1, INT32_MAX, &count);
        else if (!strcmp(a, "--records"))
            bad = parse_ll(v, 1, 1 << 20, &nrec);
        else if (!strcmp(a, "--inflight"))
            bad = parse_ll(v, 0, 1024, &inflight);
        else if (!strcmp(a, "--task"))
            bad = parse_ll(v, 0, INT32_MAX, &task);
        else if (!strcmp(a, "--chunk"))
            bad = parse_ll(v, 0, INT32_MAX, &chunk);
        else if (!strcmp(a, "--payload"))
            kind = v;
        else if (!strcmp(a, "--duration-ms"))
            bad = parse_ll(v, 0, INT32_MAX, &duration_ms);
        else
            return usage("unknown option");
        if (bad)
            return usage("bad number");
    }
    if (!url || !queue || size < 0 || count < 0)
        return usage("--redis, --queue, --size and --count are required");
    if (nrec > size)
        return usage("--records exceeds --size");
    if (strcmp(kind, "random") && strcmp(kind, "fmnist") && strcmp(kind, "text"))
        return usage("--payload is random, fmnist or text");

    /* Making the payload (gunzip, text) is not billed to the push. */
    uint64_t cpu_made = cpu_now_us();
    size_t plen = strcmp(kind, "random") && (size_t)size < POOL_BYTES ? POOL_BYTES : (size_t)size;
    unsigned char *pool = malloc(plen);
    sluice_record *recs = calloc((size_t)nrec, sizeof *recs);
    if (!pool || !recs) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    if (!strcmp(kind, "fmnist")) {
        int r = fill_fmnist(pool, plen, FMNIST_FILE);
        if (r < 0)
            return 1;
        if (r > 0) {
            fprintf(stderr, PROG ": %s is missing (apt-get install dataset-fashion-mnist): "
                            "the payload is text\n", FMNIST_FILE);
            kind = "text";
        }
    }
    if (!strcmp(kind, "text")) {
        fill_text(pool, plen);
    } else if (!strcmp(kind, "random")) {
        uint64_t x = 0x9e3779b97f4a7c15u ^ (uint64_t)task;
        for (size_t i = 0; i < plen; i++)
            pool[i] = (unsigned char)xorshift(&x);
    }
    cpu_made = cpu_now_us() - cpu_made;
    /* R records of size/R bytes; the last one takes the remainder. */
    size_t each = (size_t)(size / nrec), off = 0;

    sluice_producer_opts o = {.redis_url = url, .queue = queue, .max_inflight = (int)inflight};
    sluice_producer *p;
    char err[512];
    sluice_err e = sluice_producer_open(&p, &o, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": open: %s: %s\n", sluice_strerror(e), err);
        return 1;
    }
    /* Distinct task numbers per producer keep batch ids unique in a run. */
    uint64_t base = chunk > 0 ? (uint64_t)task << 32 : (uint64_t)task;
    e = sluice_producer_set_task(p, 0, base);

    uint64_t t0 = wall_us();
    long long n = 0;
    for (; e == SLUICE_OK && n < count; n++) {
        if (duration_ms > 0 && n > 0 && wall_us() - t0 >= (uint64_t)duration_ms * 1000u)
            break;
        if (chunk > 0 && n > 0 && n % chunk == 0)
            e = sluice_producer_set_task(p, 0, base | (uint64_t)(n / chunk));
        for (long long r = 0; r < nrec; r++) {
            recs[r].data = pool + off + (size_t)r * each;
            recs[r].len = r == nrec - 1 ? (size_t)size - (size_t)r * each : each;
        }
        /* The next batch starts where this one ended (always 0 for random). */
        off += (size_t)size;
        if (off + (size_t)size > plen)
            off = 0;
        if (e == SLUICE_OK)
            e = sluice_producer_push_records(p, recs, (size_t)nrec);
    }
    if (e == SLUICE_OK)
        e = sluice_producer_flush(p);
    uint64_t t1 = wall_us();
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": push: %s: %s\n", sluice_strerror(e), sluice_producer_errstr(p));
        sluice_producer_close(p);
        return 1;
    }

    sluice_producer_stats st;
    sluice_producer_stats_get(p, &st);
    sluice_producer_close(p);
    uint64_t cpu = cpu_now_us() - cpu_made;
    printf("produce batches=%" PRIu64 " payload=%lld frame_bytes=%" PRIu64 " t0_us=%" PRIu64
           " t1_us=%" PRIu64 " cpu_us=%" PRIu64 " maxrss_kb=%ld full_waits=%" PRIu64
           " blocked_us=%" PRIu64 " duplicates=%" PRIu64 " payload_kind=%s\n",
           st.batches, size * n, st.bytes, t0, t1, cpu, peak_rss_kb(), st.full_waits,
           st.blocked_us, st.duplicates, kind);
    free(recs);
    free(pool);
    return 0;
}
