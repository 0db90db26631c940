/* gen-tfrecord: writes a TFRecord file of random records, for tests.
 *
 *   gen-tfrecord --records N [--min-size A] [--max-size B] [--seed S] OUT.tfrecord
 *
 * Record sizes are uniform in [A, B] (default 100..2000) and the bytes are
 * random; the same seed gives the same file. Prints one line to stdout:
 *   records=N checksum=<16 hex digits>
 * where checksum is the sum modulo 2^64 of sluicei_record_hash() of every
 * record (checksum.h), the value sluice-producer --summary prints. */
#include "crc32c.h"
#include "checksum.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest record this tool writes (the readers accept up to 1 GiB). */
#define MAX_SIZE ((uint64_t)256 << 20)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gen-tfrecord --records N [--min-size A] [--max-size B] [--seed S] OUT\n"
            "  writes N random records of A..B bytes (default 100..2000) to OUT and\n"
            "  prints 'records=N checksum=<hex>' (sum of FNV-1a 64 of each record)\n");
}

static int bad_usage(const char *what)
{
    fprintf(stderr, "gen-tfrecord: %s\ntry --help\n", what);
    return 2;
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *v = x;
    return 0;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

int main(int argc, char **argv)
{
    uint64_t n = 0, lo = 100, hi = 2000, seed = 1;
    int have_n = 0;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t *dst = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--records") == 0) {
            dst = &n;
            have_n = 1;
        } else if (strcmp(a, "--min-size") == 0) {
            dst = &lo;
        } else if (strcmp(a, "--max-size") == 0) {
            dst = &hi;
        } else if (strcmp(a, "--seed") == 0) {
            dst = &seed;
        } else if (a[0] == '-' && a[1] != '\0') {
            char m[256];
            snprintf(m, sizeof m, "unknown flag '%s'", a);
            return bad_usage(m);
        } else if (out) {
            return bad_usage("only one output file");
        } else {
            out = a;
            continue;
        }
        if (i + 1 >= argc || parse_u64(argv[i + 1], dst) != 0) {
            char m[256];
            snprintf(m, sizeof m, "%s needs a non-negative integer", a);
            return bad_usage(m);
        }
        i++;
    }
    if (!have_n)
        return bad_usage("--records N is required");
    if (!out)
        return bad_usage("no output file");
    if (lo > hi || hi > MAX_SIZE)
        return bad_usage("need --min-size <= --max-size <= 268435456");

    FILE *f = fopen(out, "wb");
    if (!f) {
        fprintf(stderr, "gen-tfrecord: %s: %s\n", out, strerror(errno));
        return 1;
    }
    unsigned char *buf = malloc((size_t)hi + 8);
    if (!buf) {
        fprintf(stderr, "gen-tfrecord: out of memory\n");
        fclose(f);
        return 1;
    }
    uint64_t rng = seed, sum = 0;
    for (uint64_t r = 0; r < n; r++) {
        uint64_t len = lo + splitmix64(&rng) % (hi - lo + 1);
        for (uint64_t i = 0; i < len; i += 8) {
            uint64_t w = splitmix64(&rng);
            memcpy(buf + i, &w, 8);   /* buf has 8 bytes of slack */
        }
        unsigned char hdr[12], foot[4];
        put_le(hdr, len, 8);
        put_le(hdr + 8, sluicei_crc32c_mask(sluicei_crc32c(0, hdr, 8)), 4);
        put_le(foot, sluicei_crc32c_mask(sluicei_crc32c(0, buf, (size_t)len)), 4);
        fwrite(hdr, 1, sizeof hdr, f);
        fwrite(buf, 1, (size_t)len, f);
        fwrite(foot, 1, sizeof foot, f);
        sum += sluicei_record_hash(buf, (size_t)len);
    }
    free(buf);
    if (ferror(f) | (fclose(f) != 0)) {
        fprintf(stderr, "gen-tfrecord: %s: write failed: %s\n", out, strerror(errno));
        return 1;
    }
    printf("records=%" PRIu64 " checksum=%016" PRIx64 "\n", n, sum);
    return 0;
}
