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
    {NULL, NULL},
};
