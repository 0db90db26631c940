/* Readers (producer/job/reader.h) and CRC-32C (producer/job/crc32c.h).
 * Longer than ~800 lines because every format's cases share the file
 * writers at the top (TFRecord, IDX, fixed, lines), and each case is a
 * few lines. */
#include "test.h"

#include "crc32c.h"
#include "reader.h"
#include "transform.h"
#include "wire.h"

#include <inttypes.h>
#include <zlib.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------- */

/* Writes n bytes to a new temporary file; returns its path (static buffer
 * per slot, caller unlinks). */
static const char *temp_file(const void *p, size_t n)
{
    static char path[4][64];
    static int slot;
    char *s = path[slot++ % 4];
    snprintf(s, 64, "/tmp/sluice-test-XXXXXX");
    int fd = mkstemp(s);
    CHECK(fd >= 0);
    if (fd < 0)
        return s;
    CHECK(n == 0 || write(fd, p, n) == (ssize_t)n);
    close(fd);
    return s;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Appends one framed TFRecord to buf at *len (buf is large enough). */
static void tf_append(uint8_t *buf, size_t *len, const void *data, size_t n)
{
    uint8_t *p = buf + *len;
    put_le(p, n, 8);
    put_le(p + 8, sluicei_crc32c_mask(sluicei_crc32c(0, p, 8)), 4);
    if (n)
        memcpy(p + 12, data, n);
    put_le(p + 12 + n, sluicei_crc32c_mask(sluicei_crc32c(0, data, n)), 4);
    *len += 16 + n;
}

/* Opens path with format, or returns NULL after a failed CHECK. */
static sluicei_reader *open_ok(const char *format, const char *path)
{
    sluicei_reader *r = NULL;
    char err[256];
    sluice_err e = sluicei_reader_open(&r, format, (const char *[]){path}, 1, 0, UINT64_MAX, err, sizeof err);
    CHECK(e == SLUICE_OK);
    if (e != SLUICE_OK)
        fprintf(stderr, "    open: %s\n", err);
    return r;
}

static int rec_is(sluice_record rec, const void *p, size_t n)
{
    return rec.len == n && (n == 0 || memcmp(rec.data, p, n) == 0);
}

/* The three records of the sample file, and their offsets. */
static uint8_t sample[1024];
static size_t sample_len;
static size_t sample_off[4];
static uint8_t rec300[300];

static void build_sample(void)
{
    for (size_t i = 0; i < sizeof rec300; i++)
        rec300[i] = (uint8_t)(i * 7 + 1);
    sample_len = 0;
    sample_off[0] = sample_len;
    tf_append(sample, &sample_len, "", 0);
    sample_off[1] = sample_len;
    tf_append(sample, &sample_len, "hello", 5);
    sample_off[2] = sample_len;
    tf_append(sample, &sample_len, rec300, sizeof rec300);
    sample_off[3] = sample_len;
}

/* Reads path to the end; returns the result that ended it and copies the
 * error text to err. *count receives the number of records read. */
static sluice_err read_all(const char *format, const char *path, size_t *count, char *err,
                           size_t errlen)
{
    sluicei_reader *r = open_ok(format, path);
    sluice_record rec;
    sluice_err e;
    *count = 0;
    if (!r)
        return SLUICE_ERR_SYS;
    while ((e = sluicei_reader_next(r, &rec, err, errlen)) == SLUICE_OK)
        (*count)++;
    sluicei_reader_close(r);
    return e;
}

/* ---- CRC-32C ---------------------------------------------------------- */

static void test_crc_vectors(void)
{
    uint8_t zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++)
        inc[i] = (uint8_t)i;
    CHECK(sluicei_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(sluicei_crc32c(0, zeros, 32) == 0x8A9136AAu);
    CHECK(sluicei_crc32c(0, ones, 32) == 0x62A8AB43u);   /* RFC 3720 B.4 */
    CHECK(sluicei_crc32c(0, inc, 32) == 0x46DD794Eu);
    CHECK(sluicei_crc32c(0, "", 0) == 0);
    CHECK(sluicei_crc32c_sw(0, "123456789", 9) == 0xE3069283u);
    CHECK(sluicei_crc32c_sw(0, zeros, 32) == 0x8A9136AAu);
}

/* Hardware and table code agree at every length and alignment, and a CRC
 * computed in pieces equals the one-shot CRC. */
static void test_crc_paths_agree(void)
{
    uint8_t buf[300];
    uint64_t x = 0x123456789abcdefULL;
    for (size_t i = 0; i < sizeof buf; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 7) {
            uint32_t a = sluicei_crc32c(0, buf + off, n);
            CHECK(a == sluicei_crc32c_sw(0, buf + off, n));
            size_t cut = n / 3;
            CHECK(a == sluicei_crc32c(sluicei_crc32c(0, buf + off, cut), buf + off + cut,
                                      n - cut));
        }
}

static void test_crc_mask(void)
{
    /* Masking is a bijection, so distinct CRCs stay distinct; and the
     * documented formula. */
    CHECK(sluicei_crc32c_mask(0) == 0xa282ead8u);
    CHECK(sluicei_crc32c_mask(0x8000u) == 0xa282ead9u);
    CHECK(sluicei_crc32c_mask(1) == 0xa284ead8u);
}

/* ---- TFRecord --------------------------------------------------------- */

static void test_tfrecord_roundtrip(void)
{
    build_sample();
    const char *path = temp_file(sample, sample_len);
    sluicei_reader *r = open_ok("tfrecord", path);
    sluice_record rec;
    char err[256];
    if (r) {
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK && rec.len == 0);
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK &&
              rec_is(rec, "hello", 5));
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK &&
              rec_is(rec, rec300, sizeof rec300));
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_EOF);
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_EOF);
        sluicei_reader_close(r);
    }
    unlink(path);

    /* An empty file holds no record. */
    size_t count;
    path = temp_file("", 0);
    CHECK(read_all("tfrecord", path, &count, err, sizeof err) == SLUICE_EOF && count == 0);
    unlink(path);
}

/* Copies the sample, lets corrupt() change it, and checks that reading
 * fails with SLUICE_ERR_FORMAT at "offset <at>: " with text containing
 * what, after `good` records. */
static void expect_corrupt(size_t len, size_t good, size_t at, const char *what,
                           const uint8_t *data)
{
    char err[256], want[64];
    size_t count;
    const char *path = temp_file(data, len);
    sluice_err e = read_all("tfrecord", path, &count, err, sizeof err);
    snprintf(want, sizeof want, ": offset %zu: ", at);
    CHECK(e == SLUICE_ERR_FORMAT);
    CHECK(count == good);
    CHECK(strncmp(err, path, strlen(path)) == 0);
    CHECK(strstr(err, want) != NULL);
    CHECK(strstr(err, what) != NULL);
    if (e != SLUICE_ERR_FORMAT || !strstr(err, want) || !strstr(err, what))
        fprintf(stderr, "    got %s: %s (want '%s' '%s')\n", sluice_strerror(e), err, want, what);
    unlink(path);
}

static void test_tfrecord_corruption(void)
{
    uint8_t bad[1024];
    build_sample();

    memcpy(bad, sample, sample_len);
    bad[sample_off[2] + 9] ^= 0x01;   /* length CRC of record 2 */
    expect_corrupt(sample_len, 2, sample_off[2], "length CRC mismatch", bad);

    memcpy(bad, sample, sample_len);
    bad[sample_off[2] + 1] ^= 0x01;   /* the length itself */
    expect_corrupt(sample_len, 2, sample_off[2], "length CRC mismatch", bad);

    memcpy(bad, sample, sample_len);
    bad[sample_off[1] + 12 + 2] ^= 0x40;   /* a data byte of record 1 */
    expect_corrupt(sample_len, 1, sample_off[1], "data CRC mismatch", bad);

    memcpy(bad, sample, sample_len);
    bad[sample_off[3] - 1] ^= 0x80;   /* the data CRC of record 2 */
    expect_corrupt(sample_len, 2, sample_off[2], "data CRC mismatch", bad);

    /* A well-formed header whose length runs past the end of the file. */
    memcpy(bad, sample, sample_len);
    put_le(bad + sample_off[1], 1000, 8);
    put_le(bad + sample_off[1] + 8, sluicei_crc32c_mask(sluicei_crc32c(0, bad + sample_off[1], 8)), 4);
    expect_corrupt(sample_len, 1, sample_off[1], "truncated record", bad);

    /* A huge length is refused before any allocation. */
    memcpy(bad, sample, sample_len);
    put_le(bad, (uint64_t)1 << 40, 8);
    put_le(bad + 8, sluicei_crc32c_mask(sluicei_crc32c(0, bad, 8)), 4);
    expect_corrupt(sample_len, 0, 0, "exceeds the limit", bad);

    /* Not a TFRecord file at all. */
    static const char text[] = "this is plain text, not a TFRecord file\n";
    expect_corrupt(sizeof text - 1, 0, 0, "is this a TFRecord file?", (const uint8_t *)text);
}

/* Cutting the file at any byte gives the complete records before the cut,
 * then EOF at a record boundary or SLUICE_ERR_FORMAT naming the start of
 * the cut record. */
static void test_tfrecord_truncated_everywhere(void)
{
    build_sample();
    for (size_t cut = 0; cut <= sample_len; cut++) {
        size_t good = 0;
        while (good < 3 && sample_off[good + 1] <= cut)
            good++;
        if (cut == sample_off[good]) {
            /* At a boundary (or the very end). */
            char err[256];
            size_t count;
            const char *path = temp_file(sample, cut);
            CHECK(read_all("tfrecord", path, &count, err, sizeof err) == SLUICE_EOF);
            CHECK(count == good);
            unlink(path);
        } else {
            expect_corrupt(cut, good, sample_off[good], "truncated", sample);
        }
    }
}

/* From a pipe the size is unknown: records still read, and a lying length
 * ends in a clean truncation error. */
static void test_tfrecord_pipe(void)
{
    static uint8_t big[200 * 1024 + 64];
    static uint8_t payload[200 * 1024];
    size_t len = 0;
    char dir[] = "/tmp/sluice-fifo-XXXXXX", path[64], err[256];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (uint8_t)(i ^ (i >> 8));
    tf_append(big, &len, payload, sizeof payload);
    tf_append(big, &len, "x", 1);

    for (int lying = 0; lying < 2; lying++) {
        size_t n = len;
        if (lying) {
            /* A valid header announcing 500 MB, then 3 bytes. */
            n = 0;
            put_le(big, 500u << 20, 8);
            put_le(big + 8, sluicei_crc32c_mask(sluicei_crc32c(0, big, 8)), 4);
            n = 15;
        }
        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/f", dir);
        CHECK(mkfifo(path, 0600) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            FILE *f = fopen(path, "wb");
            if (f) {
                fwrite(big, 1, n, f);
                fclose(f);
            }
            _exit(0);
        }
        sluicei_reader *r = open_ok("tfrecord", path);
        sluice_record rec;
        if (r && !lying) {
            CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK &&
                  rec_is(rec, payload, sizeof payload));
            CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK &&
                  rec_is(rec, "x", 1));
            CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_EOF);
        } else if (r) {
            CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_ERR_FORMAT);
            CHECK(strstr(err, ": offset 0: truncated record") != NULL);
        }
        sluicei_reader_close(r);
        waitpid(pid, NULL, 0);
        unlink(path);
        rmdir(dir);
        memcpy(dir, "/tmp/sluice-fifo-XXXXXX", sizeof dir);
    }
}

static void test_open_errors(void)
{
    sluicei_reader *r = (sluicei_reader *)1;
    char err[256];
    CHECK(sluicei_reader_open(&r, "tfrecord", (const char *[]){"/nonexistent/x.tfrecord"}, 1, 0, UINT64_MAX, err, sizeof err) ==
          SLUICE_ERR_SYS);
    CHECK(r == NULL);
    CHECK(strstr(err, "/nonexistent/x.tfrecord: open: ") == err);
    CHECK(sluicei_reader_open(&r, "lines", (const char *[]){"/tmp"}, 1, 0, UINT64_MAX, err, sizeof err) == SLUICE_ERR_SYS);
    CHECK(sluicei_reader_open(&r, "csv", (const char *[]){"/tmp/x"}, 1, 0, UINT64_MAX, err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strstr(err, "'csv'") != NULL);
    CHECK(sluicei_reader_format_at(0) != NULL && sluicei_reader_format_at(99) == NULL);
    sluicei_reader_close(NULL);
}

/* ---- lines ------------------------------------------------------------ */

/* Reads text as lines and checks that the records are exactly want[0..n). */
static void expect_lines(const char *text, size_t len, const char *const *want, size_t n)
{
    const char *path = temp_file(text, len);
    sluicei_reader *r = open_ok("lines", path);
    sluice_record rec;
    char err[256];
    for (size_t i = 0; r && i < n; i++)
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK &&
              rec_is(rec, want[i], strlen(want[i])));
    if (r)
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_EOF);
    sluicei_reader_close(r);
    unlink(path);
}

static void test_lines_basic(void)
{
    static const char *const ab[] = {"a", "bb"};
    static const char *const empties[] = {"", "", "x", ""};
    static const char *const cr[] = {"a\r", "b"};
    static const char *const one_empty[] = {""};
    expect_lines("a\nbb\n", 5, ab, 2);
    expect_lines("a\nbb", 4, ab, 2);
    expect_lines("\n\nx\n\n", 5, empties, 4);
    expect_lines("a\r\nb", 4, cr, 2);
    expect_lines("\n", 1, one_empty, 1);
    expect_lines("", 0, NULL, 0);

    /* A NUL byte is just a byte. */
    const char *path = temp_file("a\0b\n", 4);
    sluicei_reader *r = open_ok("lines", path);
    sluice_record rec;
    char err[256];
    if (r) {
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK && rec_is(rec, "a\0b", 3));
        sluicei_reader_close(r);
    }
    unlink(path);
}

/* Lines longer than the initial window: the window grows and slides. */
static void test_lines_long(void)
{
    const size_t n1 = 70 * 1024, n2 = 600 * 1024, n3 = 300 * 1024;
    size_t total = n1 + 1 + n2 + 1 + n3;
    char *text = malloc(total);
    if (!text)
        return;
    memset(text, 'a', n1);
    text[n1] = '\n';
    memset(text + n1 + 1, 'b', n2);
    text[n1 + 1 + n2] = '\n';
    memset(text + n1 + n2 + 2, 'c', n3);   /* no final newline */
    const char *path = temp_file(text, total);
    sluicei_reader *r = open_ok("lines", path);
    sluice_record rec;
    char err[256];
    if (r) {
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK &&
              rec_is(rec, text, n1));
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK &&
              rec_is(rec, text + n1 + 1, n2));
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK &&
              rec_is(rec, text + n1 + n2 + 2, n3));
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_EOF);
        sluicei_reader_close(r);
    }
    unlink(path);
    free(text);
}

/* Many short lines across window refills. */
static void test_lines_many(void)
{
    const size_t n = 100000;
    char *text = malloc(n * 8);
    size_t len = 0;
    if (!text)
        return;
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(text + len, "%zu\n", i);
    const char *path = temp_file(text, len);
    sluicei_reader *r = open_ok("lines", path);
    sluice_record rec;
    char err[256], want[32];
    size_t i = 0, bad = 0;
    if (r) {
        while (sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK) {
            int wl = snprintf(want, sizeof want, "%zu", i++);
            bad += !rec_is(rec, want, (size_t)wl);
        }
        sluicei_reader_close(r);
    }
    CHECK(i == n);
    CHECK(bad == 0);
    unlink(path);
    free(text);
}


/* ---- ranges, several paths, counting ------------------------------------- */

/* Reads every record of an open reader; returns the result of the last
 * next() and the records joined by ',' in out. */
static sluice_err join_all(sluicei_reader *r, char *out, size_t outlen, char *err,
                           size_t errlen)
{
    sluice_record rec;
    sluice_err e;
    size_t at = 0;
    out[0] = '\0';
    while ((e = sluicei_reader_next(r, &rec, err, errlen)) == SLUICE_OK) {
        int n = snprintf(out + at, outlen - at, "%s%.*s", at ? "," : "", (int)rec.len,
                         (const char *)rec.data);
        at += (size_t)n < outlen - at ? (size_t)n : 0;
    }
    return e;
}

/* Opens format over paths with a range and expects the records `want`
 * (joined by ',') then EOF. */
static void expect_range(const char *format, const char *const *paths, size_t n,
                         uint64_t start, uint64_t end, const char *want)
{
    sluicei_reader *r;
    char err[512], got[512];
    sluice_err e = sluicei_reader_open(&r, format, paths, n, start, end, err, sizeof err);
    CHECK(e == SLUICE_OK);
    if (e != SLUICE_OK) {
        fprintf(stderr, "    open: %s\n", err);
        return;
    }
    e = join_all(r, got, sizeof got, err, sizeof err);
    CHECK(e == SLUICE_EOF);
    CHECK(strcmp(got, want) == 0);
    if (strcmp(got, want) != 0 || e != SLUICE_EOF)
        fprintf(stderr, "    %s %" PRIu64 ":%" PRIu64 ": got '%s' (%s), want '%s'\n", format,
                start, end, got, e == SLUICE_EOF ? "eof" : err, want);
    sluicei_reader_close(r);
}

static void test_ranges_tfrecord_lines(void)
{
    uint8_t a[256], b[256];
    size_t alen = 0, blen = 0;
    tf_append(a, &alen, "a0", 2);
    tf_append(a, &alen, "a1", 2);
    tf_append(a, &alen, "a2", 2);
    tf_append(b, &blen, "b0", 2);
    tf_append(b, &blen, "b1", 2);
    char pa[64], pb[64];
    snprintf(pa, sizeof pa, "%s", temp_file(a, alen));
    snprintf(pb, sizeof pb, "%s", temp_file(b, blen));
    const char *tf[] = {pa, pb};
    expect_range("tfrecord", tf, 2, 0, UINT64_MAX, "a0,a1,a2,b0,b1");
    expect_range("tfrecord", tf, 2, 2, 4, "a2,b0");
    expect_range("tfrecord", tf, 2, 3, UINT64_MAX, "b0,b1");
    expect_range("tfrecord", tf, 2, 5, 5, "");
    expect_range("tfrecord", tf, 2, 5, UINT64_MAX, "");
    expect_range("tfrecord", tf, 1, 1, 2, "a1");

    /* Beyond the data: at open for the start, at the end for the end. */
    sluicei_reader *r;
    char err[512], got[256];
    CHECK(sluicei_reader_open(&r, "tfrecord", tf, 2, 6, UINT64_MAX, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(r == NULL && strstr(err, "range 6: but the 2 paths") && strstr(err, "hold 5 records"));
    CHECK(sluicei_reader_open(&r, "tfrecord", tf, 2, 1, 9, err, sizeof err) == SLUICE_OK);
    if (r) {
        CHECK(join_all(r, got, sizeof got, err, sizeof err) == SLUICE_ERR_FORMAT);
        CHECK(strcmp(got, "a1,a2,b0,b1") == 0);
        CHECK(strstr(err, "tfrecord: range 1:9 but") && strstr(err, "hold 5 records"));
        sluicei_reader_close(r);
    }
    CHECK(sluicei_reader_open(&r, "tfrecord", tf, 1, 0, 4, err, sizeof err) == SLUICE_OK);
    if (r) {
        CHECK(join_all(r, got, sizeof got, err, sizeof err) == SLUICE_ERR_FORMAT);
        CHECK(strstr(err, pa) && strstr(err, "holds 3 records"));
        sluicei_reader_close(r);
    }
    CHECK(sluicei_reader_open(&r, "tfrecord", tf, 2, 3, 2, err, sizeof err) ==
          SLUICE_ERR_INVALID);
    CHECK(sluicei_reader_open(&r, "tfrecord", tf, 0, 0, 2, err, sizeof err) ==
          SLUICE_ERR_INVALID);

    uint64_t n = 0;
    CHECK(sluicei_reader_count("tfrecord", tf, 2, &n, err, sizeof err) == SLUICE_OK && n == 5);
    /* A corrupt record met while skipping to the start. */
    a[alen - 1] ^= 1;
    const char *bad = temp_file(a, alen);
    CHECK(sluicei_reader_open(&r, "tfrecord", &bad, 1, 3, UINT64_MAX, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "data CRC mismatch") != NULL);
    CHECK(sluicei_reader_count("tfrecord", &bad, 1, &n, err, sizeof err) == SLUICE_ERR_FORMAT);
    unlink(bad);

    unlink(pa);
    unlink(pb);
    static const char text1[] = "l0\nl1\nl2", text2[] = "m0\n\nm2\n";
    snprintf(pa, sizeof pa, "%s", temp_file(text1, sizeof text1 - 1));
    snprintf(pb, sizeof pb, "%s", temp_file(text2, sizeof text2 - 1));
    const char *ln[] = {pa, pb};
    expect_range("lines", ln, 2, 0, UINT64_MAX, "l0,l1,l2,m0,,m2");
    expect_range("lines", ln, 2, 2, 5, "l2,m0,");
    CHECK(sluicei_reader_count("lines", ln, 2, &n, err, sizeof err) == SLUICE_OK && n == 6);
    unlink(pa);
    unlink(pb);
}

static void test_fixed(void)
{
    char data[41];
    for (unsigned i = 0; i < 10; i++)
        snprintf(data + 4 * i, 5, "r%03u", i % 10);
    const char *p = temp_file(data, 40);
    char path[64], err[512];
    snprintf(path, sizeof path, "%s", p);
    const char *paths[] = {path, path};
    expect_range("fixed:4", paths, 1, 0, UINT64_MAX,
                 "r000,r001,r002,r003,r004,r005,r006,r007,r008,r009");
    expect_range("fixed:4", paths, 1, 3, 6, "r003,r004,r005");
    expect_range("fixed:8", paths, 1, 4, 5, "r008r009");
    expect_range("fixed:4", paths, 2, 9, 12, "r009,r000,r001");
    expect_range("fixed:40", paths, 2, 1, 2, "r000r001r002r003r004r005r006r007r008r009");
    uint64_t n = 0;
    CHECK(sluicei_reader_count("fixed:4", paths, 2, &n, err, sizeof err) == SLUICE_OK && n == 20);

    sluicei_reader *r;
    /* Known count: a range beyond the data fails at open. */
    CHECK(sluicei_reader_open(&r, "fixed:4", paths, 1, 0, 11, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "fixed: range 0:11 but") && strstr(err, "holds 10 records"));
    CHECK(sluicei_reader_open(&r, "fixed:3", paths, 1, 0, UINT64_MAX, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(strstr(err, path) && strstr(err, "not a multiple of 3: 1 trailing bytes"));
    const char *bad[] = {"fixed", "fixed:", "fixed:0", "fixed:x", "fixed:1073741825",
                         "fixed:4:4", "lines:4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(sluicei_reader_open(&r, bad[i], paths, 1, 0, UINT64_MAX, err, sizeof err) ==
              SLUICE_ERR_INVALID);
        CHECK(r == NULL);
    }
    CHECK(sluicei_reader_check("fixed:1073741824", 1, NULL, err, sizeof err) == SLUICE_OK);
    unlink(path);
}

static void write_at(const char *dir, const char *name, const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_files(void)
{
    char dir[] = "/tmp/sluice-files-XXXXXX", sub[64], one[80], err[512];
    CHECK(mkdtemp(dir) != NULL);
    write_at(dir, "b.jpg", "BBB");
    write_at(dir, "a.jpg", "AA");
    write_at(dir, "c.txt", "");
    write_at(dir, ".hidden", "H");
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CHECK(mkdir(sub, 0700) == 0);
    write_at(sub, "z", "Z");
    snprintf(one, sizeof one, "%s/z", sub);
    const char *paths[] = {dir, one};
    expect_range("files", paths, 1, 0, UINT64_MAX, "AA,BBB,");
    expect_range("files", paths, 2, 0, UINT64_MAX, "AA,BBB,,Z");
    expect_range("files", paths, 2, 1, 4, "BBB,,Z");
    uint64_t n = 0;
    CHECK(sluicei_reader_count("files", paths, 2, &n, err, sizeof err) == SLUICE_OK && n == 4);
    sluicei_reader *r;
    CHECK(sluicei_reader_open(&r, "files", paths, 2, 0, 5, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "hold 4 files") != NULL);
    const char *missing = "/nonexistent/dir";
    CHECK(sluicei_reader_open(&r, "files", &missing, 1, 0, UINT64_MAX, err, sizeof err) ==
          SLUICE_ERR_SYS);
    char p[320];
    snprintf(p, sizeof p, "%s/z", sub);
    unlink(p);
    rmdir(sub);
    const char *names[] = {"a.jpg", "b.jpg", "c.txt", ".hidden"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* ---- idx --------------------------------------------------------------- */

/* An IDX file: header for dims[0..ndim) of type code, then data. */
static size_t idx_build(uint8_t *out, uint8_t code, int ndim, const uint32_t *dims,
                        const void *data, size_t len)
{
    out[0] = out[1] = 0;
    out[2] = code;
    out[3] = (uint8_t)ndim;
    for (int d = 0; d < ndim; d++)
        for (int k = 0; k < 4; k++)
            out[4 + 4 * d + k] = (uint8_t)(dims[d] >> (24 - 8 * k));
    memcpy(out + 4 + 4 * ndim, data, len);
    return 4 + 4 * (size_t)ndim + len;
}

/* Writes p[0..n) gzip-compressed to a new temporary file. */
static const char *temp_gz(const void *p, size_t n)
{
    static char path[4][64];
    static int slot;
    char *s = path[slot++ % 4];
    const char *t = temp_file("", 0);
    snprintf(s, 64, "%s", t);
    gzFile gz = gzopen(s, "wb");
    CHECK(gz != NULL);
    if (gz) {
        CHECK(gzwrite(gz, p, (unsigned)n) == (int)n);
        gzclose(gz);
    }
    return s;
}

enum { NIMG = 50, H = 3, W = 4 };
static uint8_t img_file[16 + NIMG * H * W], lab_file[8 + NIMG];
static size_t img_len, lab_len;

static void build_idx(void)
{
    static uint8_t pix[NIMG * H * W], lab[NIMG];
    for (size_t i = 0; i < sizeof pix; i++)
        pix[i] = (uint8_t)(i * 31 + 7);
    for (size_t i = 0; i < NIMG; i++)
        lab[i] = (uint8_t)(i % 10);
    img_len = idx_build(img_file, 0x08, 3, (const uint32_t[]){NIMG, H, W}, pix, sizeof pix);
    lab_len = idx_build(lab_file, 0x08, 1, (const uint32_t[]){NIMG}, lab, sizeof lab);
}

/* Reads rows [start, end) of the pair and checks each against the source. */
static void check_idx_rows(const char *img, const char *lab, uint64_t start, uint64_t end)
{
    sluicei_reader *r;
    char err[512];
    const char *paths[] = {img, lab};
    sluice_err e = sluicei_reader_open(&r, "idx", paths, 2, start, end, err, sizeof err);
    CHECK(e == SLUICE_OK);
    if (e != SLUICE_OK) {
        fprintf(stderr, "    open: %s\n", err);
        return;
    }
    size_t nc;
    const sluicei_column *c = sluicei_reader_columns(r, &nc);
    CHECK(nc == 2 && strcmp(c[0].name, "image") == 0 && strcmp(c[1].name, "label") == 0);
    CHECK(c[0].dtype == SLUICE_DTYPE_UINT8 && c[0].ndim == 2 && c[0].shape[0] == H &&
          c[0].shape[1] == W && c[0].row_bytes == H * W);
    CHECK(c[1].ndim == 0 && c[1].row_bytes == 1);
    sluice_record rec;
    uint64_t i = start;
    while ((e = sluicei_reader_next(r, &rec, err, sizeof err)) == SLUICE_OK) {
        CHECK(rec.len == H * W + 1);
        CHECK(memcmp(rec.data, img_file + 16 + i * H * W, H * W) == 0);
        CHECK(((const uint8_t *)rec.data)[H * W] == i % 10);
        i++;
    }
    CHECK(e == SLUICE_EOF);
    CHECK(i == (end == UINT64_MAX ? NIMG : end));
    sluicei_reader_close(r);
}

static void test_idx_plain_gzip(void)
{
    char img[64], lab[64], imgz[64], labz[64], err[512];
    build_idx();
    snprintf(img, sizeof img, "%s", temp_file(img_file, img_len));
    snprintf(lab, sizeof lab, "%s", temp_file(lab_file, lab_len));
    snprintf(imgz, sizeof imgz, "%s", temp_gz(img_file, img_len));
    snprintf(labz, sizeof labz, "%s", temp_gz(lab_file, lab_len));
    check_idx_rows(img, lab, 0, UINT64_MAX);
    check_idx_rows(imgz, labz, 0, UINT64_MAX);
    check_idx_rows(imgz, lab, 17, 33);
    check_idx_rows(img, labz, 49, 50);
    check_idx_rows(imgz, labz, 50, UINT64_MAX);
    uint64_t n = 0;
    const char *two[] = {imgz, labz, img, lab};
    CHECK(sluicei_reader_count("idx", two, 4, &n, err, sizeof err) == SLUICE_OK && n == 100);
    expect_range("idx", two, 4, 100, 100, "");
    sluicei_reader *r;
    CHECK(sluicei_reader_open(&r, "idx", two, 2, 0, 51, err, sizeof err) == SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "idx: range 0:51 but") && strstr(err, "holds 50 images"));
    CHECK(sluicei_reader_open(&r, "idx", two, 3, 0, UINT64_MAX, err, sizeof err) ==
          SLUICE_ERR_INVALID);
    CHECK(strstr(err, "got 3") != NULL);
    /* Counts that disagree name both files. */
    uint8_t lab49[64];
    size_t l49 = idx_build(lab49, 0x08, 1, (const uint32_t[]){49}, lab_file + 8, 49);
    char p49[64];
    snprintf(p49, sizeof p49, "%s", temp_file(lab49, l49));
    const char *mism[] = {img, p49};
    CHECK(sluicei_reader_open(&r, "idx", mism, 2, 0, UINT64_MAX, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "holds 50 images but") && strstr(err, "holds 49 labels"));
    unlink(p49);
    unlink(img);
    unlink(lab);
    unlink(imgz);
    unlink(labz);
}

/* Damaged IDX files: every one fails with SLUICE_ERR_FORMAT and a message
 * containing `what`, at open or while reading. */
static void expect_idx_bad(const void *img, size_t ilen, int gz, const char *what)
{
    char ip[64], lp[64], err[512], got[4096];
    snprintf(ip, sizeof ip, "%s", gz ? temp_gz(img, ilen) : temp_file(img, ilen));
    snprintf(lp, sizeof lp, "%s", temp_file(lab_file, lab_len));
    const char *paths[] = {ip, lp};
    sluicei_reader *r;
    sluice_err e = sluicei_reader_open(&r, "idx", paths, 2, 0, UINT64_MAX, err, sizeof err);
    if (e == SLUICE_OK) {
        e = join_all(r, got, sizeof got, err, sizeof err);
        sluicei_reader_close(r);
    }
    CHECK(e == SLUICE_ERR_FORMAT);
    CHECK(strstr(err, what) != NULL);
    if (e != SLUICE_ERR_FORMAT || !strstr(err, what))
        fprintf(stderr, "    want '%s', got %d '%s'\n", what, (int)e, err);
    unlink(ip);
    unlink(lp);
}

static void test_idx_corrupt(void)
{
    static uint8_t bad[sizeof img_file + 64];
    build_idx();
    expect_idx_bad(img_file, img_len - 5, 0, "truncated");
    expect_idx_bad(img_file, img_len - 5, 1, "truncated at image 49");
    expect_idx_bad(img_file, 16 + 12 * 20 + 3, 1, "truncated at image 20");
    expect_idx_bad(img_file, 10, 0, "truncated IDX header");
    memcpy(bad, img_file, img_len);
    bad[img_len] = 1;
    expect_idx_bad(bad, img_len + 1, 0, "trailing bytes");
    expect_idx_bad(bad, img_len + 1, 1, "data after the last image");
    memcpy(bad, img_file, img_len);
    bad[2] = 0x07;
    expect_idx_bad(bad, img_len, 0, "not an IDX file");
    memcpy(bad, img_file, img_len);
    bad[3] = 9;
    expect_idx_bad(bad, img_len, 0, "not an IDX file");
    /* A huge dimension; then dims that multiply past the record limit. */
    uint8_t hdr[64];
    size_t n = idx_build(hdr, 0x08, 3, (const uint32_t[]){1, 1u << 25, 1}, "", 0);
    expect_idx_bad(hdr, n, 0, "dimension 1 is 33554432");
    n = idx_build(hdr, 0x0E, 4, (const uint32_t[]){1, 1u << 12, 1u << 12, 1u << 12}, "", 0);
    expect_idx_bad(hdr, n, 0, "rows of more than");
    n = idx_build(hdr, 0x08, 3, (const uint32_t[]){NIMG, 1u << 20, 1u << 4}, "", 0);
    expect_idx_bad(hdr, n, 0, "truncated");
    /* A gzip file with a damaged byte in its compressed data or CRC. */
    const char *z = temp_gz(img_file, img_len);
    FILE *f = fopen(z, "rb");
    size_t zlen = f ? fread(bad, 1, sizeof bad, f) : 0;
    if (f)
        fclose(f);
    unlink(z);
    CHECK(zlen > 30);
    bad[zlen - 6] ^= 0xff;   /* in the CRC-32 of the trailer */
    char ip[64], lp[64], err[512], got[4096];
    snprintf(ip, sizeof ip, "%s", temp_file(bad, zlen));
    snprintf(lp, sizeof lp, "%s", temp_file(lab_file, lab_len));
    const char *paths[] = {ip, lp};
    sluicei_reader *r;
    /* zlib may meet the bad CRC at the first read (small file): at open. */
    sluice_err e = sluicei_reader_open(&r, "idx", paths, 2, 0, UINT64_MAX, err, sizeof err);
    if (e == SLUICE_OK) {
        e = join_all(r, got, sizeof got, err, sizeof err);
        sluicei_reader_close(r);
    }
    CHECK(e == SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "gzip: incorrect data check") != NULL);
    if (!strstr(err, "gzip: incorrect data check"))
        fprintf(stderr, "    got '%s'\n", err);
    unlink(ip);
    unlink(lp);
}

/* Multi-byte IDX types arrive little-endian. */
static void test_idx_int32(void)
{
    uint8_t img[64], lab[64];
    const uint8_t be[] = {0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe};   /* 258, -2 */
    size_t il = idx_build(img, 0x0C, 2, (const uint32_t[]){2, 1}, be, sizeof be);
    size_t ll = idx_build(lab, 0x08, 1, (const uint32_t[]){2}, "\x05\x06", 2);
    char ip[64], lp[64], err[512];
    snprintf(ip, sizeof ip, "%s", temp_file(img, il));
    snprintf(lp, sizeof lp, "%s", temp_file(lab, ll));
    const char *paths[] = {ip, lp};
    sluicei_reader *r;
    sluice_record rec;
    CHECK(sluicei_reader_open(&r, "idx", paths, 2, 0, UINT64_MAX, err, sizeof err) == SLUICE_OK);
    if (r) {
        size_t nc;
        const sluicei_column *c = sluicei_reader_columns(r, &nc);
        CHECK(c[0].dtype == SLUICE_DTYPE_INT32 && c[0].ndim == 1 && c[0].row_bytes == 4);
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK &&
              rec_is(rec, "\x02\x01\x00\x00\x05", 5));
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK &&
              rec_is(rec, "\xfe\xff\xff\xff\x06", 5));
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_EOF);
        sluicei_reader_close(r);
    }
    unlink(ip);
    unlink(lp);
}

/* ---- exec ----------------------------------------------------------------- */

static sluice_err exec_join(const char *cmd, sluicei_exec_mode mode, char *got, size_t gotlen,
                            char *err, size_t errlen)
{
    sluicei_reader *r;
    const char *paths[] = {"/tmp/it's here", "/tmp/b"};
    got[0] = '\0';
    sluice_err e = sluicei_exec_open(&r, cmd, paths, 2, 5, 9, mode, NULL, err, errlen);
    if (e != SLUICE_OK)
        return e;
    e = join_all(r, got, gotlen, err, errlen);
    sluicei_reader_close(r);
    return e;
}

static void test_exec_framed(void)
{
    char got[8192], err[1024];
    CHECK(exec_join("printf '\\002\\0\\0\\0hi\\0\\0\\0\\0\\003\\0\\0\\0abc'", SLUICEI_EXEC_FRAMED,
                    got, sizeof got, err, sizeof err) == SLUICE_EOF);
    CHECK(strcmp(got, "hi,,abc") == 0);
    /* Substitution: quoted paths, start, end. */
    CHECK(exec_join("for a in {path} {start} {end}; do n=$(printf %s \"$a\" | wc -c); "
                    "printf \"\\\\$(printf %o $n)\\0\\0\\0%s\" \"$a\"; done",
                    SLUICEI_EXEC_FRAMED, got, sizeof got, err, sizeof err) == SLUICE_EOF);
    CHECK(strcmp(got, "/tmp/it's here,/tmp/b,5,9") == 0);
    if (strcmp(got, "/tmp/it's here,/tmp/b,5,9") != 0)
        fprintf(stderr, "    got '%s' (%s)\n", got, err);
    /* A failing command: status and the stderr tail, on one line. */
    CHECK(exec_join("printf '\\001\\0\\0\\0x'; echo 'first line' >&2; echo 'bad input' >&2; "
                    "exit 3", SLUICEI_EXEC_FRAMED, got, sizeof got, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(strcmp(got, "x") == 0);
    CHECK(strstr(err, "exited with status 3: first line bad input") != NULL);
    /* Only the last 512 bytes of stderr are kept. */
    CHECK(exec_join("i=0; while [ $i -lt 200 ]; do echo \"line $i\" >&2; i=$((i+1)); done; "
                    "exit 1", SLUICEI_EXEC_FRAMED, got, sizeof got, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "line 199") && !strstr(err, "line 100 "));
    CHECK(exec_join("kill -9 $$", SLUICEI_EXEC_FRAMED, got, sizeof got, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "killed by signal 9") != NULL);
    /* Truncated record, and a length over the limit. */
    CHECK(exec_join("printf '\\005\\0\\0\\0ab'", SLUICEI_EXEC_FRAMED, got, sizeof got, err,
                    sizeof err) == SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "stdout ended inside a record (2 of 5 bytes)") != NULL);
    CHECK(exec_join("printf '\\0\\0\\0\\377'", SLUICEI_EXEC_FRAMED, got, sizeof got, err,
                    sizeof err) == SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "exceeds the limit") != NULL);
}

/* Much on stderr and stdout at once must not deadlock; closing early kills
 * a command that would write forever. */
static void test_exec_no_deadlock(void)
{
    char err[1024];
    sluicei_reader *r;
    sluice_record rec;
    const char *paths[] = {"x"};
    /* 2 MB of stderr before any stdout, then 20000 records. */
    CHECK(sluicei_exec_open(&r, "head -c 2000000 /dev/zero >&2; i=0; while [ $i -lt 20000 ]; do "
                                "printf '\\001\\0\\0\\0z'; i=$((i+1)); done",
                            paths, 1, 0, UINT64_MAX, SLUICEI_EXEC_FRAMED, NULL, err, sizeof err) ==
          SLUICE_OK);
    size_t n = 0;
    sluice_err e;
    while (r && (e = sluicei_reader_next(r, &rec, err, sizeof err)) == SLUICE_OK) {
        CHECK(rec.len == 1 && ((const char *)rec.data)[0] == 'z');
        n++;
    }
    CHECK(n == 20000);
    sluicei_reader_close(r);
    CHECK(sluicei_exec_open(&r, "while :; do printf '\\001\\0\\0\\0y'; done", paths, 1, 0,
                            UINT64_MAX, SLUICEI_EXEC_FRAMED, NULL, err, sizeof err) == SLUICE_OK);
    for (int i = 0; r && i < 3; i++)
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK);
    sluicei_reader_close(r);   /* must return: the command is killed */
}

static void test_exec_msgpack(void)
{
    sluicei_buf buf = {0};
    uint8_t all[4096];
    size_t len = 0;
    sluicei_batch_meta m = {.id = {1, 2, 3}, .producer = "t", .created_us = 1};
    sluice_record recs[] = {{"ab", 2}, {"", 0}, {"cde", 3}};
    CHECK(sluicei_wire_encode_records(&buf, &m, recs, 3) == SLUICE_OK);
    memcpy(all, buf.data, buf.len);
    len += buf.len;
    CHECK(sluicei_wire_encode_records(&buf, &m, recs + 2, 1) == SLUICE_OK);
    memcpy(all + len, buf.data, buf.len);
    len += buf.len;
    const char *p = temp_file(all, len);
    char cmd[128], got[1024], err[1024];
    snprintf(cmd, sizeof cmd, "cat %s", p);
    CHECK(exec_join(cmd, SLUICEI_EXEC_MSGPACK, got, sizeof got, err, sizeof err) == SLUICE_EOF);
    CHECK(strcmp(got, "ab,,cde,cde") == 0);
    /* Cut in the middle of the second frame. */
    snprintf(cmd, sizeof cmd, "head -c %zu %s", len - 3, p);
    CHECK(exec_join(cmd, SLUICEI_EXEC_MSGPACK, got, sizeof got, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "stdout ended inside frame 1") != NULL);
    unlink(p);

    /* Tensor frames: rows packed, columns from the first frame. */
    uint8_t img[2 * 2 * 3], lab[2] = {7, 8};
    for (size_t i = 0; i < sizeof img; i++)
        img[i] = (uint8_t)('a' + i);
    sluice_tensor t[2] = {
        {.name = "image", .dtype = SLUICE_DTYPE_UINT8, .ndim = 3, .shape = {2, 2, 3},
         .data = img, .nbytes = sizeof img},
        {.name = "label", .dtype = SLUICE_DTYPE_UINT8, .ndim = 1, .shape = {2}, .data = lab,
         .nbytes = 2},
    };
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 2, t, 2) == SLUICE_OK);
    p = temp_file(buf.data, buf.len);
    snprintf(cmd, sizeof cmd, "cat %s %s", p, p);
    sluicei_reader *r;
    const char *paths[] = {"x"};
    CHECK(sluicei_exec_open(&r, cmd, paths, 1, 0, UINT64_MAX, SLUICEI_EXEC_MSGPACK, NULL,
                            err, sizeof err) == SLUICE_OK);
    if (r) {
        size_t nc;
        const sluicei_column *c = sluicei_reader_columns(r, &nc);
        CHECK(nc == 2 && c[0].ndim == 2 && c[0].shape[0] == 2 && c[0].shape[1] == 3 &&
              c[0].row_bytes == 6 && c[1].ndim == 0 && c[1].row_bytes == 1);
        sluice_record rec;
        for (int i = 0; i < 4; i++) {
            CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK);
            CHECK(rec.len == 7 && memcmp(rec.data, img + 6 * (i % 2), 6) == 0 &&
                  ((const uint8_t *)rec.data)[6] == lab[i % 2]);
        }
        CHECK(sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_EOF);
        sluicei_reader_close(r);
    }
    unlink(p);
    sluicei_buf_free(&buf);
    /* Not msgpack at all. */
    CHECK(exec_join("printf '\\301'", SLUICEI_EXEC_MSGPACK, got, sizeof got, err, sizeof err) ==
          SLUICE_ERR_FORMAT);
    CHECK(strstr(err, "not msgpack") != NULL);
}

/* ---- transform plugins --------------------------------------------------- */

static void plugin_path(char *out, size_t len, const char *arg)
{
    const char *build = getenv("BUILD");
    snprintf(out, len, "%s/examples/libupper.so%s%s", build && *build ? build : "build",
             arg ? ":" : "", arg ? arg : "");
}

static void test_transform(void)
{
    char spec[512], err[1024];
    sluicei_transform *t;
    sluicei_transform_result res;
    sluice_record in[] = {{"abc", 3}, {"", 0}, {"Hello, World", 12}};

    plugin_path(spec, sizeof spec, NULL);
    sluice_err e = sluicei_transform_open(&t, spec, err, sizeof err);
    CHECK(e == SLUICE_OK);
    if (e != SLUICE_OK) {
        fprintf(stderr, "    %s (run from the source tree after make unit)\n", err);
        return;
    }
    for (int round = 0; round < 2; round++) {
        CHECK(sluicei_transform_apply(t, in, 3, &res, err, sizeof err) == SLUICE_OK);
        CHECK(res.nrecords == 3 && res.ntensors == 0 && res.rows == 3);
        CHECK(rec_is(res.records[0], "ABC", 3) && rec_is(res.records[1], "", 0) &&
              rec_is(res.records[2], "HELLO, WORLD", 12));
    }
    sluicei_transform_close(t);

    plugin_path(spec, sizeof spec, "lengths");
    CHECK(sluicei_transform_open(&t, spec, err, sizeof err) == SLUICE_OK);
    if (t) {
        CHECK(sluicei_transform_apply(t, in, 3, &res, err, sizeof err) == SLUICE_OK);
        CHECK(res.nrecords == 0 && res.ntensors == 1 && res.rows == 3);
        const uint32_t want[] = {3, 0, 12};
        CHECK(strcmp(res.tensors[0].name, "length") == 0 &&
              res.tensors[0].dtype == SLUICE_DTYPE_UINT32 && res.tensors[0].nbytes == 12 &&
              memcmp(res.tensors[0].data, want, 12) == 0);
        sluicei_transform_close(t);
    }

    plugin_path(spec, sizeof spec, "fail-at=1");
    CHECK(sluicei_transform_open(&t, spec, err, sizeof err) == SLUICE_OK);
    if (t) {
        CHECK(sluicei_transform_apply(t, in, 3, &res, err, sizeof err) == SLUICE_OK);
        CHECK(sluicei_transform_apply(t, in, 3, &res, err, sizeof err) == SLUICE_ERR_FORMAT);
        CHECK(strstr(err, "libupper.so failed on batch 1: asked to fail at batch 1") != NULL);
        sluicei_transform_close(t);
    }

    plugin_path(spec, sizeof spec, "nonsense");
    CHECK(sluicei_transform_open(&t, spec, err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(t == NULL && strstr(err, "init('nonsense') failed: unknown mode") != NULL);
    CHECK(sluicei_transform_open(&t, "/nonexistent/lib.so", err, sizeof err) ==
          SLUICE_ERR_INVALID);
    CHECK(strstr(err, "transform /nonexistent/lib.so: ") == err);
    /* A library without sluice_transform_batch. */
    CHECK(sluicei_transform_open(&t, "libz.so.1", err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strstr(err, "no function sluice_transform_batch") != NULL);
    sluicei_transform_close(NULL);
}

const struct test reader_tests[] = {
    {"crc32c/known vectors", test_crc_vectors},
    {"crc32c/hardware and table code agree", test_crc_paths_agree},
    {"crc32c/mask", test_crc_mask},
    {"reader/tfrecord roundtrip", test_tfrecord_roundtrip},
    {"reader/tfrecord corruption", test_tfrecord_corruption},
    {"reader/tfrecord truncated at every byte", test_tfrecord_truncated_everywhere},
    {"reader/tfrecord from a pipe", test_tfrecord_pipe},
    {"reader/open errors", test_open_errors},
    {"reader/lines basic", test_lines_basic},
    {"reader/lines longer than the buffer", test_lines_long},
    {"reader/lines many", test_lines_many},
    {"reader/ranges over tfrecord and lines files", test_ranges_tfrecord_lines},
    {"reader/fixed:SIZE", test_fixed},
    {"reader/files and folders", test_files},
    {"reader/idx plain and gzip, ranges", test_idx_plain_gzip},
    {"reader/idx corrupt and truncated", test_idx_corrupt},
    {"reader/idx int32 becomes little-endian", test_idx_int32},
    {"exec/framed records, status, stderr tail", test_exec_framed},
    {"exec/no deadlock, kill on close", test_exec_no_deadlock},
    {"exec/msgpack frames", test_exec_msgpack},
    {"transform/example plugin", test_transform},
    {NULL, NULL},
};
