/* The batcher (producer/job/batcher.h): batch boundaries for every shape of
 * input, record bytes carried intact, rows gathered into tensors, the
 * transform hook, and the stop and error paths. */
#include "test.h"

#include "batcher.h"
#include "crc32c.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------- */

/* Writes n bytes to a new temporary file at path (64 bytes; caller
 * unlinks). */
static void temp_file(char *path, const void *p, size_t n)
{
    snprintf(path, 64, "/tmp/sluice-batcher-XXXXXX");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(n == 0 || write(fd, p, n) == (ssize_t)n);
    close(fd);
}

/* The byte j of record i: every record distinct, every byte position too. */
static unsigned char pattern(size_t i, size_t j)
{
    return (unsigned char)(i * 131 + j * 7 + (j >> 8));
}

static int record_ok(const sluice_record *r, size_t i, size_t size)
{
    if (r->len != size)
        return 0;
    const unsigned char *p = r->data;
    for (size_t j = 0; j < size; j++)
        if (p[j] != pattern(i, j))
            return 0;
    return 1;
}

/* A file of n fixed-size records made by pattern(), opened as
 * "fixed:size". */
static sluicei_reader *open_fixed(char *path, size_t n, size_t size)
{
    unsigned char *buf = malloc(n * size + 1);
    CHECK(buf != NULL);
    for (size_t i = 0; buf && i < n; i++)
        for (size_t j = 0; j < size; j++)
            buf[i * size + j] = pattern(i, j);
    temp_file(path, buf, n * size);
    free(buf);
    char fmt[32], err[512];
    snprintf(fmt, sizeof fmt, "fixed:%zu", size);
    const char *paths[] = {path};
    sluicei_reader *rd = NULL;
    sluice_err e = sluicei_reader_open(&rd, fmt, paths, 1, 0, UINT64_MAX, err, sizeof err);
    CHECK(e == SLUICE_OK);
    if (e != SLUICE_OK)
        fprintf(stderr, "    %s\n", err);
    return rd;
}

/* What the batch hook saw. */
typedef struct seen {
    size_t batches;
    size_t sizes[64];     /* records of each of the first 64 batches */
    size_t records;       /* records seen in all */
    size_t record_size;   /* each record is checked against pattern() */
    int bad;              /* a record with other bytes, or out of order */
    size_t stop_at;       /* batch hook: return 5 on this batch (from 1); 0: never */
    size_t poll_stop_at;  /* poll hook: return 7 when this many are pending after the
                           * first batch; 0: never */
    size_t polls;
} seen;

static int on_batch(void *arg, const sluicei_batch_out *out)
{
    seen *s = arg;
    if (s->batches < 64)
        s->sizes[s->batches] = out->nrecords;
    s->batches++;
    if (out->ntensors != 0 || out->rows != out->nrecords)
        s->bad = 1;
    for (size_t i = 0; i < out->nrecords; i++)
        if (!record_ok(&out->records[i], s->records + i, s->record_size))
            s->bad = 1;
    s->records += out->nrecords;
    return s->stop_at && s->batches == s->stop_at ? 5 : 0;
}

static int on_poll(void *arg, size_t pending)
{
    seen *s = arg;
    s->polls++;
    return s->poll_stop_at && s->batches > 0 && pending == s->poll_stop_at ? 7 : 0;
}

/* Counts batches and records, whatever their bytes. */
static int on_count(void *arg, const sluicei_batch_out *out)
{
    seen *s = arg;
    s->batches++;
    s->records += out->nrecords;
    return 0;
}

/* Runs n records of size bytes through batches of k; checks every batch
 * but the last holds k, the last n % k (or k), and the bytes. */
static void check_run(size_t n, size_t k, size_t size)
{
    char path[64], err[512];
    sluicei_reader *rd = open_fixed(path, n, size);
    sluicei_batcher *b = NULL;
    CHECK(sluicei_batcher_new(&b, k) == SLUICE_OK);
    seen s = {.record_size = size};
    sluicei_batcher_hooks h = {.batch = on_batch, .poll = on_poll, .arg = &s};
    uint64_t nread = 0;
    int rc = rd && b ? sluicei_batcher_run(b, rd, NULL, &h, &nread, err, sizeof err) : -2;
    CHECK(rc == 0);
    CHECK(nread == n);
    CHECK(s.records == n);
    CHECK(!s.bad);
    CHECK(s.batches == (n + k - 1) / k);
    for (size_t i = 0; i < s.batches && i < 64; i++) {
        size_t want = i + 1 < s.batches || n % k == 0 ? k : n % k;
        if (s.sizes[i] != want) {
            fprintf(stderr, "    n=%zu k=%zu: batch %zu holds %zu, expected %zu\n", n, k, i,
                    s.sizes[i], want);
            CHECK(s.sizes[i] == want);
        }
    }
    CHECK(s.polls == n + 1);   /* before each read, the one that finds the end too */
    CHECK(b == NULL || sluicei_batcher_count(b) == 0);
    sluicei_batcher_free(b);
    sluicei_reader_close(rd);
    unlink(path);
}

/* ---- cases ------------------------------------------------------------ */

static void test_boundaries(void)
{
    const size_t k = 4;
    const size_t ns[] = {0, 1, k - 1, k, k + 1, 2 * k, 10 * k + 3};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        check_run(ns[i], k, 3);
}

static void test_batch_size_one(void)
{
    check_run(0, 1, 5);
    check_run(1, 1, 5);
    check_run(9, 1, 5);
}

static void test_many(void)
{
    check_run(1000, 7, 16);   /* 142 full batches, then 6 */
    check_run(1000, 1000, 2);
    check_run(999, 1000, 2);
}

/* Records larger than the first buffer (64 KiB): the buffer grows and the
 * records, which point into it, stay right. */
static void test_large_records(void)
{
    check_run(5, 2, (size_t)300 << 10);
    check_run(3, 3, ((size_t)1 << 20) + 1);
}

/* Mixed sizes through add and take: each record keeps its bytes and its
 * length, the empty record too. */
static void test_add_take(void)
{
    const size_t sizes[] = {1, (size_t)3 << 20, 0, 70000, 5};
    const size_t n = sizeof sizes / sizeof sizes[0];
    sluicei_batcher *b = NULL;
    CHECK(sluicei_batcher_new(&b, n) == SLUICE_OK);
    if (!b)
        return;
    CHECK(sluicei_batcher_size(b) == n);
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = malloc(sizes[i] + 1);
        for (size_t j = 0; j < sizes[i]; j++)
            p[j] = pattern(i, j);
        sluice_record r = {p, sizes[i]};
        CHECK(sluicei_batcher_add(b, &r) == SLUICE_OK);
        /* The batcher copies: the caller's buffer may go at once. */
        memset(p, 0xEE, sizes[i] + 1);
        free(p);
    }
    CHECK(sluicei_batcher_count(b) == n);
    sluice_record extra = {"x", 1};
    CHECK(sluicei_batcher_add(b, &extra) == SLUICE_ERR_INVALID);   /* full */
    sluicei_batch_out out;
    char err[256];
    CHECK(sluicei_batcher_take(b, NULL, NULL, 0, &out, err, sizeof err) == SLUICE_OK);
    CHECK(out.nrecords == n && out.rows == n && out.ntensors == 0);
    for (size_t i = 0; i < n && out.nrecords == n; i++)
        CHECK(record_ok(&out.records[i], i, sizes[i]));
    CHECK(sluicei_batcher_count(b) == 0);
    /* Emptied: the next batch starts from nothing. */
    CHECK(sluicei_batcher_add(b, &extra) == SLUICE_OK);
    CHECK(sluicei_batcher_take(b, NULL, NULL, 0, &out, err, sizeof err) == SLUICE_OK);
    CHECK(out.nrecords == 1 && out.records[0].len == 1 &&
          memcmp(out.records[0].data, "x", 1) == 0);
    sluicei_batcher_free(b);
}

/* Rows of a tensor reader: each column gathered into [rows, shape...]. */
static void test_rows_to_tensors(void)
{
    sluicei_column cols[2];
    memset(cols, 0, sizeof cols);
    snprintf(cols[0].name, sizeof cols[0].name, "pixels");
    cols[0].dtype = SLUICE_DTYPE_UINT8;
    cols[0].ndim = 2;
    cols[0].shape[0] = 2;
    cols[0].shape[1] = 2;
    cols[0].row_bytes = 4;
    snprintf(cols[1].name, sizeof cols[1].name, "label");
    cols[1].dtype = SLUICE_DTYPE_UINT8;
    cols[1].ndim = 0;
    cols[1].row_bytes = 1;

    sluicei_batcher *b = NULL;
    CHECK(sluicei_batcher_new(&b, 3) == SLUICE_OK);
    if (!b)
        return;
    const unsigned char rows[3][5] = {{1, 2, 3, 4, 10}, {5, 6, 7, 8, 20}, {9, 9, 9, 9, 30}};
    for (int i = 0; i < 3; i++) {
        sluice_record r = {rows[i], 5};
        CHECK(sluicei_batcher_add(b, &r) == SLUICE_OK);
    }
    sluicei_batch_out out;
    char err[256];
    CHECK(sluicei_batcher_take(b, NULL, cols, 2, &out, err, sizeof err) == SLUICE_OK);
    CHECK(out.nrecords == 0 && out.ntensors == 2 && out.rows == 3);
    if (out.ntensors == 2) {
        const sluice_tensor *t = out.tensors;
        CHECK(strcmp(t[0].name, "pixels") == 0 && t[0].dtype == SLUICE_DTYPE_UINT8);
        CHECK(t[0].ndim == 3 && t[0].shape[0] == 3 && t[0].shape[1] == 2 && t[0].shape[2] == 2);
        CHECK(t[0].nbytes == 12);
        const unsigned char px[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9};
        CHECK(memcmp(t[0].data, px, 12) == 0);
        CHECK(strcmp(t[1].name, "label") == 0 && t[1].ndim == 1 && t[1].shape[0] == 3);
        CHECK(t[1].nbytes == 3 && memcmp(t[1].data, "\x0a\x14\x1e", 3) == 0);
    }
    /* A record that is not one row. */
    sluice_record bad = {"abcd", 4};
    CHECK(sluicei_batcher_add(b, &bad) == SLUICE_OK);
    CHECK(sluicei_batcher_take(b, NULL, cols, 2, &out, err, sizeof err) == SLUICE_ERR_FORMAT);
    CHECK(strcmp(err, "row of 4 bytes, expected 5") == 0);
    CHECK(out.nrecords == 0 && out.ntensors == 0);
    CHECK(sluicei_batcher_count(b) == 0);
    sluicei_batcher_free(b);
}

static void test_sizes_and_limits(void)
{
    sluicei_batcher *b = (sluicei_batcher *)&b;
    CHECK(sluicei_batcher_new(&b, 0) == SLUICE_ERR_INVALID);
    CHECK(b == NULL);
    /* A batch size whose arrays would not fit in memory at all: refused
     * before any allocation (no overflow in the size computation). */
    CHECK(sluicei_batcher_new(&b, SIZE_MAX / 2) == SLUICE_ERR_NOMEM);
    CHECK(b == NULL);
    CHECK(sluicei_batcher_new(&b, 2) == SLUICE_OK);
    if (!b)
        return;
    sluice_record r = {"ab", 2};
    CHECK(sluicei_batcher_add(b, &r) == SLUICE_OK);
    CHECK(sluicei_batcher_resize(b, SIZE_MAX / 4) == SLUICE_ERR_NOMEM);
    CHECK(sluicei_batcher_size(b) == 2);    /* the former size stays */
    CHECK(sluicei_batcher_count(b) == 0);   /* and the batch was emptied */
    CHECK(sluicei_batcher_resize(b, 0) == SLUICE_ERR_INVALID);
    CHECK(sluicei_batcher_size(b) == 2);
    /* Larger, then smaller again: the arrays are kept. */
    CHECK(sluicei_batcher_resize(b, 100) == SLUICE_OK && sluicei_batcher_size(b) == 100);
    CHECK(sluicei_batcher_resize(b, 3) == SLUICE_OK && sluicei_batcher_size(b) == 3);
    for (int i = 0; i < 3; i++)
        CHECK(sluicei_batcher_add(b, &r) == SLUICE_OK);
    CHECK(sluicei_batcher_add(b, &r) == SLUICE_ERR_INVALID);
    sluicei_batcher_clear(b);
    CHECK(sluicei_batcher_count(b) == 0);
    sluicei_batcher_free(b);
    sluicei_batcher_free(NULL);
}

/* A hook that says stop ends the run with its value; a batch not yet full
 * is dropped, never handed over. */
static void test_stops(void)
{
    char path[64], err[512];
    sluicei_batcher *b = NULL;
    CHECK(sluicei_batcher_new(&b, 3) == SLUICE_OK);
    if (!b)
        return;

    /* The batch hook stops at the second batch. */
    sluicei_reader *rd = open_fixed(path, 10, 4);
    seen s = {.record_size = 4, .stop_at = 2};
    sluicei_batcher_hooks h = {.batch = on_batch, .arg = &s};
    uint64_t nread = 0;
    CHECK(rd && sluicei_batcher_run(b, rd, NULL, &h, &nread, err, sizeof err) == 5);
    CHECK(s.batches == 2 && s.records == 6 && nread == 6 && !s.bad);
    sluicei_reader_close(rd);
    unlink(path);

    /* The poll hook stops with two records pending: the first batch was
     * handed over, the two records after it are dropped. */
    rd = open_fixed(path, 10, 4);
    seen s2 = {.record_size = 4, .poll_stop_at = 2};
    h = (sluicei_batcher_hooks){.batch = on_batch, .poll = on_poll, .arg = &s2};
    nread = 0;
    CHECK(rd && sluicei_batcher_run(b, rd, NULL, &h, &nread, err, sizeof err) == 7);
    CHECK(s2.batches == 1 && s2.records == 3 && nread == 5 && !s2.bad);
    CHECK(sluicei_batcher_count(b) == 0);
    sluicei_reader_close(rd);
    unlink(path);

    /* The same batcher runs again from nothing. */
    rd = open_fixed(path, 4, 4);
    seen s3 = {.record_size = 4};
    h = (sluicei_batcher_hooks){.batch = on_batch, .arg = &s3};
    nread = 0;
    CHECK(rd && sluicei_batcher_run(b, rd, NULL, &h, &nread, err, sizeof err) == 0);
    CHECK(s3.batches == 2 && s3.sizes[0] == 3 && s3.sizes[1] == 1 && !s3.bad);
    sluicei_reader_close(rd);
    unlink(path);
    sluicei_batcher_free(b);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Corrupt input: the batches before the damage went out, the partly
 * filled one does not, and the reader's error is the run's. */
static void test_reader_error(void)
{
    uint8_t buf[256];
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
        uint8_t *p = buf + len;
        put_le(p, 4, 8);
        put_le(p + 8, sluicei_crc32c_mask(sluicei_crc32c(0, p, 8)), 4);
        for (size_t j = 0; j < 4; j++)
            p[12 + j] = pattern((size_t)i, j);
        put_le(p + 16, sluicei_crc32c_mask(sluicei_crc32c(0, p + 12, 4)), 4);
        len += 20;
    }
    memcpy(buf + len, "\x09\x00\x00", 3);   /* a cut length header */
    len += 3;
    char path[64], err[512] = "";
    temp_file(path, buf, len);
    const char *paths[] = {path};
    sluicei_reader *rd = NULL;
    CHECK(sluicei_reader_open(&rd, "tfrecord", paths, 1, 0, UINT64_MAX, err, sizeof err) ==
          SLUICE_OK);
    sluicei_batcher *b = NULL;
    CHECK(sluicei_batcher_new(&b, 2) == SLUICE_OK);
    seen s = {.record_size = 4};
    sluicei_batcher_hooks h = {.batch = on_batch, .arg = &s};
    uint64_t nread = 0;
    CHECK(rd && b &&
          sluicei_batcher_run(b, rd, NULL, &h, &nread, err, sizeof err) ==
              SLUICEI_BATCHER_INPUT_ERROR);
    CHECK(s.batches == 1 && s.records == 2 && nread == 3 && !s.bad);
    CHECK(strstr(err, path) != NULL && strstr(err, "offset 60") != NULL);
    CHECK(b == NULL || sluicei_batcher_count(b) == 0);
    sluicei_batcher_free(b);
    sluicei_reader_close(rd);
    unlink(path);
}

/* The transform hook: the plugin's output is what the batch hook gets; a
 * plugin error is an input error. */
typedef struct upper_seen {
    size_t batches;
    char text[64];
    size_t len;
} upper_seen;

static int on_upper(void *arg, const sluicei_batch_out *out)
{
    upper_seen *s = arg;
    s->batches++;
    for (size_t i = 0; i < out->nrecords; i++) {
        if (s->len + out->records[i].len + 1 < sizeof s->text) {
            memcpy(s->text + s->len, out->records[i].data, out->records[i].len);
            s->len += out->records[i].len;
            s->text[s->len++] = '|';
        }
    }
    return 0;
}

static void plugin_path(char *out, size_t len, const char *arg)
{
    const char *build = getenv("BUILD");
    snprintf(out, len, "%s/examples/libupper.so%s%s", build && *build ? build : "build",
             arg ? ":" : "", arg ? arg : "");
}

static void test_transform(void)
{
    char path[64], spec[512], err[1024];
    temp_file(path, "ab\ncd\nef\n", 9);
    const char *paths[] = {path};
    for (int fail = 0; fail < 2; fail++) {
        sluicei_transform *tf = NULL;
        plugin_path(spec, sizeof spec, fail ? "fail-at=1" : NULL);
        CHECK(sluicei_transform_open(&tf, spec, err, sizeof err) == SLUICE_OK);
        sluicei_reader *rd = NULL;
        CHECK(sluicei_reader_open(&rd, "lines", paths, 1, 0, UINT64_MAX, err, sizeof err) ==
              SLUICE_OK);
        sluicei_batcher *b = NULL;
        CHECK(sluicei_batcher_new(&b, 2) == SLUICE_OK);
        upper_seen s = {0};
        sluicei_batcher_hooks h = {.batch = on_upper, .arg = &s};
        uint64_t nread = 0;
        int rc = tf && rd && b ? sluicei_batcher_run(b, rd, tf, &h, &nread, err, sizeof err)
                               : -2;
        if (!fail) {
            CHECK(rc == 0);
            CHECK(s.batches == 2 && s.len == 9 && memcmp(s.text, "AB|CD|EF|", 9) == 0);
        } else {
            CHECK(rc == SLUICEI_BATCHER_INPUT_ERROR);
            CHECK(s.batches == 1 && strstr(err, "asked to fail at batch 1") != NULL);
        }
        sluicei_batcher_free(b);
        sluicei_reader_close(rd);
        sluicei_transform_close(tf);
    }
    unlink(path);
}

/* ---- record order: shuffle windows, drop_remainder --------------------- */

/* A file of n records of 8 bytes each, record i holding i (little-endian),
 * opened as "fixed:8": a batch's records name their positions. */
static sluicei_reader *open_indexed(char *path, size_t n)
{
    uint8_t *buf = malloc(n * 8 + 1);
    CHECK(buf != NULL);
    for (size_t i = 0; buf && i < n; i++)
        put_le(buf + 8 * i, i, 8);
    temp_file(path, buf, n * 8);
    free(buf);
    char err[512];
    const char *paths[] = {path};
    sluicei_reader *rd = NULL;
    CHECK(sluicei_reader_open(&rd, "fixed:8", paths, 1, 0, UINT64_MAX, err, sizeof err) ==
          SLUICE_OK);
    return rd;
}

/* What a run handed over, record positions in order. */
typedef struct stream {
    uint64_t pos[4096];
    size_t n;
    size_t sizes[512];       /* records of each batch */
    size_t batches;
    size_t skip;             /* batches below this seq are not kept (a resumed task) */
    int bad;
} stream;

static int on_stream(void *arg, const sluicei_batch_out *out)
{
    stream *s = arg;
    size_t seq = s->batches++;
    if (seq < 512)
        s->sizes[seq] = out->nrecords;
    if (seq < s->skip)
        return 0;
    for (size_t i = 0; i < out->nrecords; i++) {
        const uint8_t *p = out->records[i].data;
        uint64_t v = 0;
        if (out->records[i].len != 8 || s->n == 4096) {
            s->bad = 1;
            continue;
        }
        for (int k = 7; k >= 0; k--)
            v = v << 8 | p[k];
        s->pos[s->n++] = v;
    }
    return 0;
}

/* Runs n indexed records through b (batches of its size) in order o into
 * s (zeroed first but for skip); returns the run's result. *dropped gets
 * sluicei_batcher_dropped(). */
static int run_order(sluicei_batcher *b, size_t n, const sluicei_batch_order *o, stream *s,
                     uint64_t *dropped)
{
    char path[64], err[512];
    size_t skip = s->skip;
    memset(s, 0, sizeof *s);
    s->skip = skip;
    sluicei_reader *rd = open_indexed(path, n);
    CHECK(sluicei_batcher_set_order(b, o) == SLUICE_OK);
    sluicei_batcher_hooks h = {.batch = on_stream, .arg = s};
    uint64_t nread = 0;
    int rc = rd ? sluicei_batcher_run(b, rd, NULL, &h, &nread, err, sizeof err) : -2;
    if (rc != 0)
        fprintf(stderr, "    run: %d %s\n", rc, err);
    CHECK(nread == n);
    CHECK(!s->bad);
    *dropped = sluicei_batcher_dropped(b);
    sluicei_reader_close(rd);
    unlink(path);
    return rc;
}

/* perm[0..n) holds every value below n once. */
static int is_perm(const uint32_t *perm, size_t n)
{
    unsigned char *had = calloc(n ? n : 1, 1);
    int ok = had != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        if (perm[i] >= n || had[perm[i]])
            ok = 0;
        else
            had[perm[i]] = 1;
    }
    free(had);
    return ok;
}

/* The permutation: a true one, the same for the same key, another for
 * another seed, epoch, shard or window; the documented generator (the
 * vectors below come from docs/PROTOCOL.md's description, written out
 * apart from this code). */
static void test_shuffle_perm(void)
{
    enum { N = 1000 };
    static uint32_t a[N], b[N];
    const size_t ns[] = {0, 1, 2, 7, N};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        sluicei_shuffle_perm(a, ns[k], 7, 1, 3, 2);
        sluicei_shuffle_perm(b, ns[k], 7, 1, 3, 2);
        CHECK(is_perm(a, ns[k]));
        CHECK(memcmp(a, b, ns[k] * sizeof a[0]) == 0);
    }
    size_t fixed = 0;
    for (size_t i = 0; i < N; i++)
        fixed += a[i] == i;
    CHECK(fixed < 10);   /* about 1 expected: not file order */
    const struct {
        uint64_t seed;
        uint32_t epoch;
        uint64_t shard, window;
    } other[] = {{8, 1, 3, 2}, {7, 2, 3, 2}, {7, 1, 4, 2}, {7, 1, 3, 3}, {0, 0, 0, 0}};
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
        sluicei_shuffle_perm(b, N, other[k].seed, other[k].epoch, other[k].shard,
                             other[k].window);
        CHECK(is_perm(b, N));
        CHECK(memcmp(a, b, sizeof a) != 0);
    }
    static const uint32_t v1[10] = {7, 9, 1, 2, 5, 8, 3, 6, 4, 0};
    static const uint32_t v0[10] = {6, 3, 2, 9, 8, 1, 4, 7, 0, 5};
    sluicei_shuffle_perm(a, 10, 7, 1, 3, 2);
    CHECK(memcmp(a, v1, sizeof v1) == 0);
    sluicei_shuffle_perm(a, 10, 0, 0, 0, 0);
    CHECK(memcmp(a, v0, sizeof v0) == 0);
}

/* Batches are cut from the shuffled windows one after another: window w's
 * records fill stream positions [w*W, (w+1)*W) in its permutation's
 * order, batches span windows, and only the last batch is short. */
static void test_shuffle_windows(void)
{
    enum { N = 103, B = 10, W = 25 };
    sluicei_batcher *b = NULL;
    CHECK(sluicei_batcher_new(&b, B) == SLUICE_OK);
    if (!b)
        return;
    static stream s;
    uint64_t dropped = 1;
    const sluicei_batch_order o = {.window = W, .seed = 5, .epoch = 1, .shard = 9};
    CHECK(run_order(b, N, &o, &s, &dropped) == 0);
    CHECK(dropped == 0);
    CHECK(s.n == N && s.batches == (N + B - 1) / B);
    for (size_t i = 0; i < s.batches; i++)
        CHECK(s.sizes[i] == (i + 1 < s.batches ? B : N % B));
    uint32_t perm[W];
    size_t moved = 0;
    for (size_t w = 0; w * W < N; w++) {
        size_t len = N - w * W < W ? N - w * W : W;
        sluicei_shuffle_perm(perm, len, 5, 1, 9, w);
        for (size_t i = 0; i < len && w * W + i < s.n; i++) {
            CHECK(s.pos[w * W + i] == w * W + perm[i]);
            moved += s.pos[w * W + i] != w * W + i;
        }
    }
    CHECK(moved > N / 2);   /* not file order */
    /* A window of 1 (and 0) is file order. */
    const sluicei_batch_order one = {.window = 1, .seed = 5};
    CHECK(run_order(b, N, &one, &s, &dropped) == 0);
    for (size_t i = 0; i < N && s.n == N; i++)
        CHECK(s.pos[i] == i);
    /* A window larger than the task: one window of all its records. */
    const sluicei_batch_order big = {.window = 5000, .seed = 5, .epoch = 1, .shard = 9};
    CHECK(run_order(b, N, &big, &s, &dropped) == 0);
    uint32_t all[N];
    sluicei_shuffle_perm(all, N, 5, 1, 9, 0);
    for (size_t i = 0; i < N && s.n == N; i++)
        CHECK(s.pos[i] == all[i]);
    sluicei_batcher_free(b);
}

/* The same task gives the same batches every time; another epoch or
 * another task (shard) another order of the same records. */
static void test_shuffle_deterministic(void)
{
    enum { N = 300, B = 16 };
    sluicei_batcher *b = NULL;
    CHECK(sluicei_batcher_new(&b, B) == SLUICE_OK);
    if (!b)
        return;
    static stream s1, s2;
    uint64_t d;
    sluicei_batch_order o = {.window = 64, .seed = 11, .epoch = 0, .shard = 4};
    CHECK(run_order(b, N, &o, &s1, &d) == 0);
    CHECK(run_order(b, N, &o, &s2, &d) == 0);
    CHECK(s1.n == N && s2.n == N && memcmp(s1.pos, s2.pos, sizeof s1.pos) == 0);
    const sluicei_batch_order alt[] = {
        {.window = 64, .seed = 11, .epoch = 1, .shard = 4},
        {.window = 64, .seed = 11, .epoch = 0, .shard = 5},
        {.window = 64, .seed = 12, .epoch = 0, .shard = 4},
    };
    for (size_t k = 0; k < sizeof alt / sizeof alt[0]; k++) {
        CHECK(run_order(b, N, &alt[k], &s2, &d) == 0);
        CHECK(s2.n == N && memcmp(s1.pos, s2.pos, N * sizeof s1.pos[0]) != 0);
        /* The same records, each once. */
        unsigned char had[N] = {0};
        for (size_t i = 0; i < s2.n; i++)
            if (s2.pos[i] < N)
                had[s2.pos[i]]++;
        for (size_t i = 0; i < N; i++)
            CHECK(had[i] == 1);
    }
    sluicei_batcher_free(b);
}

/* A task resumed at a batch inside a window (the earlier batches are
 * stored: a producer that handed it back, then a redo on another
 * batcher, after other tasks) gives the same batches from there on. */
static void test_shuffle_resume(void)
{
    enum { N = 200, B = 7, W = 20 };
    sluicei_batcher *b1 = NULL, *b2 = NULL;
    CHECK(sluicei_batcher_new(&b1, B) == SLUICE_OK);
    CHECK(sluicei_batcher_new(&b2, B) == SLUICE_OK);
    if (!b1 || !b2) {
        sluicei_batcher_free(b1);
        sluicei_batcher_free(b2);
        return;
    }
    static stream full, other, resumed;
    uint64_t d;
    const sluicei_batch_order o = {.window = W, .seed = 3, .epoch = 2, .shard = 6,
                                   .drop_remainder = 1};
    CHECK(run_order(b1, N, &o, &full, &d) == 0);
    CHECK(d == N % B);
    /* b2 runs another task first (another window and size). */
    const sluicei_batch_order x = {.window = 33, .seed = 1, .epoch = 0, .shard = 1};
    CHECK(run_order(b2, 77, &x, &other, &d) == 0);
    /* Resume at seq 3: batch 3 starts at record 21, inside window 1. */
    for (size_t k = 3; k <= 5; k++) {
        resumed.skip = k;
        CHECK(run_order(b2, N, &o, &resumed, &d) == 0);
        CHECK(d == N % B);
        CHECK(resumed.batches == full.batches);
        CHECK(resumed.n == full.n - k * B);
        CHECK(memcmp(resumed.pos, full.pos + k * B, resumed.n * sizeof full.pos[0]) == 0);
    }
    sluicei_batcher_free(b1);
    sluicei_batcher_free(b2);
}

/* drop_remainder: only full batches are handed over, the short last one
 * counted as dropped (its records are the end of the shuffled stream);
 * without it the same run hands that batch over. */
static void test_drop_remainder(void)
{
    enum { B = 10 };
    sluicei_batcher *b = NULL;
    CHECK(sluicei_batcher_new(&b, B) == SLUICE_OK);
    if (!b)
        return;
    static stream keep, drop;
    const size_t ns[] = {0, 3, 10, 20, 25, 99};
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            size_t n = ns[k];
            uint64_t d0 = 7, d1 = 7;
            sluicei_batch_order o = {.window = shuffle ? 8 : 0, .seed = 2, .shard = n};
            CHECK(run_order(b, n, &o, &keep, &d0) == 0);
            o.drop_remainder = 1;
            CHECK(run_order(b, n, &o, &drop, &d1) == 0);
            CHECK(d0 == 0);
            CHECK(d1 == n % B);
            CHECK(drop.batches == n / B);
            CHECK(keep.batches == (n + B - 1) / B);
            for (size_t i = 0; i < drop.batches; i++)
                CHECK(drop.sizes[i] == B);
            CHECK(drop.n == n - n % B);
            CHECK(memcmp(drop.pos, keep.pos, drop.n * sizeof drop.pos[0]) == 0);
        }
    }
    sluicei_batcher_free(b);
}

/* A window over the limit is refused; a poll stop drops what the window
 * holds; the next run starts from nothing. */
static void test_order_limits(void)
{
    sluicei_batcher *b = NULL;
    CHECK(sluicei_batcher_new(&b, 4) == SLUICE_OK);
    if (!b)
        return;
    sluicei_batch_order o = {.window = SLUICE_SHUFFLE_BUFFER_MAX + 1};
    CHECK(sluicei_batcher_set_order(b, &o) == SLUICE_ERR_INVALID);
    o.window = SLUICE_SHUFFLE_BUFFER_MAX;
    CHECK(sluicei_batcher_set_order(b, &o) == SLUICE_OK);

    char path[64], err[512];
    sluicei_reader *rd = open_indexed(path, 30);
    o = (sluicei_batch_order){.window = 16, .seed = 1};
    CHECK(sluicei_batcher_set_order(b, &o) == SLUICE_OK);
    /* Stops once 6 records are pending: the first window was handed over
     * (16 records: 4 batches), 6 of the second are held and dropped. */
    seen s = {.poll_stop_at = 6};
    sluicei_batcher_hooks h = {.batch = on_count, .poll = on_poll, .arg = &s};
    uint64_t nread = 0;
    CHECK(rd && sluicei_batcher_run(b, rd, NULL, &h, &nread, err, sizeof err) == 7);
    CHECK(s.batches == 4 && s.records == 16 && nread == 22);
    CHECK(sluicei_batcher_count(b) == 0 && sluicei_batcher_dropped(b) == 0);
    sluicei_reader_close(rd);
    unlink(path);
    static stream st;
    uint64_t d;
    CHECK(run_order(b, 30, &o, &st, &d) == 0);
    CHECK(st.n == 30 && st.batches == 8);
    sluicei_batcher_free(b);
}

const struct test batcher_tests[] = {
    {"batcher/boundaries n = 0, 1, k-1, k, k+1, 2k, many", test_boundaries},
    {"batcher/batch size 1", test_batch_size_one},
    {"batcher/many records", test_many},
    {"batcher/large records", test_large_records},
    {"batcher/add and take keep bytes", test_add_take},
    {"batcher/rows to tensors", test_rows_to_tensors},
    {"batcher/sizes and limits", test_sizes_and_limits},
    {"batcher/hooks stop the run", test_stops},
    {"batcher/reader error drops the partial batch", test_reader_error},
    {"batcher/transform", test_transform},
    {"batcher/shuffle permutation", test_shuffle_perm},
    {"batcher/shuffle windows", test_shuffle_windows},
    {"batcher/shuffle per epoch and task, the same every time", test_shuffle_deterministic},
    {"batcher/shuffle resumed inside a window", test_shuffle_resume},
    {"batcher/drop remainder", test_drop_remainder},
    {"batcher/order limits and stops", test_order_limits},
    {NULL, NULL},
};
