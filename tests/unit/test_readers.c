/* Readers (producer/src/reader.h) and CRC-32C (producer/src/crc32c.h). */
#include "test.h"

#include "../../producer/src/crc32c.h"
#include "../../producer/src/reader.h"

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
    sluice_err e = sluicei_reader_open(&r, format, path, err, sizeof err);
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
    CHECK(sluicei_reader_open(&r, "tfrecord", "/nonexistent/x.tfrecord", err, sizeof err) ==
          SLUICE_ERR_SYS);
    CHECK(r == NULL);
    CHECK(strstr(err, "/nonexistent/x.tfrecord: open: ") == err);
    CHECK(sluicei_reader_open(&r, "lines", "/tmp", err, sizeof err) == SLUICE_ERR_SYS);
    CHECK(sluicei_reader_open(&r, "csv", "/tmp/x", err, sizeof err) == SLUICE_ERR_INVALID);
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
    {NULL, NULL},
};
