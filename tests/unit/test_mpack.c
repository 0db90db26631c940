/* Unit tests of the raw msgpack reader (common/src/mpack.h): the header of
 * every type, the object walker, truncation at every byte, nesting, the
 * reserved byte 0xc1, and the walk resumed as bytes arrive. */
#include "mpack.h"
#include "test.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* One object of each header form: its bytes, what sluicei_mp_head() reads
 * from them, and the object's whole length. */
struct sample {
    const char *what;
    const uint8_t *bytes;
    size_t len;           /* the object's length: all of bytes */
    sluicei_mp_kind kind;
    unsigned size;        /* header bytes */
    uint64_t u;
    uint64_t payload;
};

#define B(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

static const struct sample samples[] = {
    {"positive fixint", B(0x05), SLUICEI_MP_UINT, 1, 5, 0},
    {"positive fixint 0x7f", B(0x7f), SLUICEI_MP_UINT, 1, 0x7f, 0},
    {"negative fixint", B(0xe0), SLUICEI_MP_INT, 1, 0, 0},
    {"negative fixint -1", B(0xff), SLUICEI_MP_INT, 1, 0, 0},
    {"nil", B(0xc0), SLUICEI_MP_NIL, 1, 0, 0},
    {"false", B(0xc2), SLUICEI_MP_BOOL, 1, 0, 0},
    {"true", B(0xc3), SLUICEI_MP_BOOL, 1, 0, 0},
    {"bin 8", B(0xc4, 0x02, 'a', 'b'), SLUICEI_MP_BIN, 2, 2, 2},
    {"bin 8 empty", B(0xc4, 0x00), SLUICEI_MP_BIN, 2, 0, 0},
    {"bin 16", B(0xc5, 0x00, 0x03, 1, 2, 3), SLUICEI_MP_BIN, 3, 3, 3},
    {"bin 32", B(0xc6, 0x00, 0x00, 0x00, 0x01, 9), SLUICEI_MP_BIN, 5, 1, 1},
    {"ext 8", B(0xc7, 0x02, 0x05, 'x', 'y'), SLUICEI_MP_EXT, 3, 2, 2},
    {"ext 16", B(0xc8, 0x00, 0x01, 0x05, 'x'), SLUICEI_MP_EXT, 4, 1, 1},
    {"ext 32", B(0xc9, 0x00, 0x00, 0x00, 0x00, 0x05), SLUICEI_MP_EXT, 6, 0, 0},
    {"float 32", B(0xca, 0x3f, 0x80, 0x00, 0x00), SLUICEI_MP_FLOAT, 1, 0, 4},
    {"float 64", B(0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0), SLUICEI_MP_FLOAT, 1, 0, 8},
    {"uint 8", B(0xcc, 0xfe), SLUICEI_MP_UINT, 2, 0xfe, 0},
    {"uint 16", B(0xcd, 0x12, 0x34), SLUICEI_MP_UINT, 3, 0x1234, 0},
    {"uint 32", B(0xce, 0x12, 0x34, 0x56, 0x78), SLUICEI_MP_UINT, 5, 0x12345678, 0},
    {"uint 64", B(0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe), SLUICEI_MP_UINT, 9,
     UINT64_MAX - 1, 0},
    {"int 8 negative", B(0xd0, 0x80), SLUICEI_MP_INT, 2, 0, 0},
    {"int 8 positive", B(0xd0, 0x7f), SLUICEI_MP_UINT, 2, 0x7f, 0},
    {"int 16 negative", B(0xd1, 0xff, 0xfe), SLUICEI_MP_INT, 3, 0, 0},
    {"int 16 positive", B(0xd1, 0x01, 0x00), SLUICEI_MP_UINT, 3, 0x100, 0},
    {"int 32 negative", B(0xd2, 0x80, 0, 0, 0), SLUICEI_MP_INT, 5, 0, 0},
    {"int 32 positive", B(0xd2, 0x7f, 0xff, 0xff, 0xff), SLUICEI_MP_UINT, 5, 0x7fffffff, 0},
    {"int 64 negative", B(0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), SLUICEI_MP_INT,
     9, 0, 0},
    {"int 64 positive", B(0xd3, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), SLUICEI_MP_UINT,
     9, INT64_MAX, 0},
    {"fixext 1", B(0xd4, 0x01, 'a'), SLUICEI_MP_EXT, 2, 1, 1},
    {"fixext 2", B(0xd5, 0x01, 'a', 'b'), SLUICEI_MP_EXT, 2, 2, 2},
    {"fixext 4", B(0xd6, 0x01, 1, 2, 3, 4), SLUICEI_MP_EXT, 2, 4, 4},
    {"fixext 8", B(0xd7, 0x01, 1, 2, 3, 4, 5, 6, 7, 8), SLUICEI_MP_EXT, 2, 8, 8},
    {"fixext 16", B(0xd8, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16),
     SLUICEI_MP_EXT, 2, 16, 16},
    {"fixstr", B(0xa3, 'a', 'b', 'c'), SLUICEI_MP_STR, 1, 3, 3},
    {"fixstr empty", B(0xa0), SLUICEI_MP_STR, 1, 0, 0},
    {"str 8", B(0xd9, 0x01, 'z'), SLUICEI_MP_STR, 2, 1, 1},
    {"str 16", B(0xda, 0x00, 0x02, 'y', 'z'), SLUICEI_MP_STR, 3, 2, 2},
    {"str 32", B(0xdb, 0x00, 0x00, 0x00, 0x01, 'z'), SLUICEI_MP_STR, 5, 1, 1},
    {"fixarray empty", B(0x90), SLUICEI_MP_ARRAY, 1, 0, 0},
    {"fixarray", B(0x92, 0x01, 0xc0), SLUICEI_MP_ARRAY, 1, 2, 0},
    {"array 16", B(0xdc, 0x00, 0x02, 0xa1, 'a', 0xc3), SLUICEI_MP_ARRAY, 3, 2, 0},
    {"array 32", B(0xdd, 0x00, 0x00, 0x00, 0x01, 0xcc, 0x80), SLUICEI_MP_ARRAY, 5, 1, 0},
    {"fixmap empty", B(0x80), SLUICEI_MP_MAP, 1, 0, 0},
    {"fixmap", B(0x81, 0xa1, 'k', 0x92, 0x01, 0x02), SLUICEI_MP_MAP, 1, 1, 0},
    {"map 16", B(0xde, 0x00, 0x01, 0x01, 0x02), SLUICEI_MP_MAP, 3, 1, 0},
    {"map 32", B(0xdf, 0x00, 0x00, 0x00, 0x02, 0x01, 0x02, 0x03, 0xc4, 0x01, 'x'),
     SLUICEI_MP_MAP, 5, 2, 0},
};
#define NSAMPLES (sizeof samples / sizeof samples[0])

/* sluicei_mp_skip() on p[0..n) from a zeroed state. */
static int skip_all(const uint8_t *p, size_t n, size_t *len, sluicei_mp_scan *st)
{
    memset(st, 0, sizeof *st);
    return sluicei_mp_skip(p, n, st, len);
}

/* A copy of exactly n bytes, so that a read past them is an ASan report. */
static uint8_t *exact(const uint8_t *p, size_t n)
{
    uint8_t *q = malloc(n ? n : 1);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

static void test_every_type(void)
{
    for (size_t i = 0; i < NSAMPLES; i++) {
        const struct sample *s = &samples[i];
        uint8_t *p = exact(s->bytes, s->len);
        sluicei_mp_hdr h;
        int r = sluicei_mp_head(p, s->len, &h);
        if (r != SLUICEI_MP_OK || h.kind != s->kind || h.size != s->size || h.u != s->u ||
            h.payload != s->payload)
            fprintf(stderr, "    %s: r %d kind %d size %u u %llu payload %llu\n", s->what, r,
                    (int)h.kind, h.size, (unsigned long long)h.u,
                    (unsigned long long)h.payload);
        CHECK(r == SLUICEI_MP_OK);
        CHECK(h.kind == s->kind && h.size == s->size && h.u == s->u && h.payload == s->payload);
        sluicei_mp_scan st;
        size_t len = 0;
        CHECK(skip_all(p, s->len, &len, &st) == SLUICEI_MP_OK);
        if (len != s->len)
            fprintf(stderr, "    %s: length %zu, want %zu\n", s->what, len, s->len);
        CHECK(len == s->len);
        CHECK(st.owed == 0 && st.at == 0); /* ready for the next object */
        free(p);
    }
}

/* Every type byte is either a header or 0xc1, and a lone type byte is
 * never an object longer than one byte. */
static void test_every_type_byte(void)
{
    for (unsigned c = 0; c < 256; c++) {
        uint8_t b = (uint8_t)c;
        sluicei_mp_hdr h;
        int r = sluicei_mp_head(&b, 1, &h);
        if (c == 0xc1) {
            CHECK(r == SLUICEI_MP_BAD);
            continue;
        }
        CHECK(r == SLUICEI_MP_OK || r == SLUICEI_MP_MORE);
        CHECK(h.size >= 1 && h.size <= 9);
        sluicei_mp_scan st;
        size_t len = 0;
        r = skip_all(&b, 1, &len, &st);
        /* Complete alone: fixints, nil, bools, empty fixstr/fixarray/fixmap. */
        bool alone = c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3 ||
                     c == 0xa0 || c == 0x90 || c == 0x80;
        CHECK(r == (alone ? SLUICEI_MP_OK : SLUICEI_MP_MORE));
        if (alone)
            CHECK(len == 1);
    }
    sluicei_mp_hdr h;
    CHECK(sluicei_mp_head(NULL, 0, &h) == SLUICEI_MP_MORE);
}

/* Cut anywhere before its end, an object needs more bytes; the header is
 * cut while fewer than size bytes remain, and then kind and size are
 * already right. */
static void test_truncated_at_every_byte(void)
{
    for (size_t i = 0; i < NSAMPLES; i++) {
        const struct sample *s = &samples[i];
        for (size_t k = 0; k < s->len; k++) {
            uint8_t *p = exact(s->bytes, k);
            sluicei_mp_scan st;
            size_t len = 12345;
            CHECK(skip_all(p, k, &len, &st) == SLUICEI_MP_MORE);
            CHECK(len == 12345);
            sluicei_mp_hdr h;
            int r = sluicei_mp_head(p, k, &h);
            if (k == 0) {
                CHECK(r == SLUICEI_MP_MORE);
            } else if (k < s->size) {
                /* A signed integer's kind waits for its sign bit. */
                bool is_signed = s->bytes[0] >= 0xd0 && s->bytes[0] <= 0xd3;
                CHECK(r == SLUICEI_MP_MORE && h.size == s->size);
                CHECK(is_signed || h.kind == s->kind);
            } else if (k < s->size + s->payload) {
                CHECK(r == SLUICEI_MP_MORE && h.u == s->u && h.payload == s->payload);
            } else {
                /* An array's or a map's elements are the walker's business. */
                CHECK(r == SLUICEI_MP_OK);
                CHECK(s->kind == SLUICEI_MP_ARRAY || s->kind == SLUICEI_MP_MAP);
            }
            free(p);
        }
    }
}

static void test_nesting(void)
{
    /* [[[...[nil]...]]], 10,000 deep: the walker counts, it does not
     * recurse. */
    enum { DEPTH = 10000 };
    uint8_t *p = malloc(DEPTH + 1);
    memset(p, 0x91, DEPTH);
    p[DEPTH] = 0xc0;
    sluicei_mp_scan st;
    size_t len = 0;
    CHECK(skip_all(p, DEPTH + 1, &len, &st) == SLUICEI_MP_OK && len == DEPTH + 1);
    CHECK(skip_all(p, DEPTH, &len, &st) == SLUICEI_MP_MORE && st.at == DEPTH);
    free(p);

    /* {"a": [1, {"b": [], "c": {}}, "x"], "d": {1: [nil, true]}} then a
     * second object: the walk stops at the end of the first. */
    static const uint8_t m[] = {0x82, 0xa1, 'a', 0x93, 0x01, 0x82, 0xa1, 'b', 0x90, 0xa1,
                                'c',  0x80, 0xa1, 'x', 0xa1, 'd',  0x81, 0x01, 0x92, 0xc0,
                                0xc3, /* next object: */ 0x07};
    CHECK(skip_all(m, sizeof m, &len, &st) == SLUICEI_MP_OK && len == sizeof m - 1);
    for (size_t k = 0; k + 1 < sizeof m; k++)
        CHECK(skip_all(m, k, &len, &st) == SLUICEI_MP_MORE);

    /* A count is taken as given: more bytes are needed, nothing is
     * allocated, and the walk ends with the bytes. */
    static const uint8_t bomb[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03};
    CHECK(skip_all(bomb, sizeof bomb, &len, &st) == SLUICEI_MP_MORE);
    CHECK(st.at == sizeof bomb && st.owed == 0xffffffffull - 3);
    static const uint8_t mbomb[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0x01};
    CHECK(skip_all(mbomb, sizeof mbomb, &len, &st) == SLUICEI_MP_MORE);
    CHECK(st.owed == 2 * 0xffffffffull - 1);
}

static void test_reserved_byte(void)
{
    sluicei_mp_scan st;
    size_t len = 0;
    static const uint8_t top[] = {0xc1};
    CHECK(skip_all(top, 1, &len, &st) == SLUICEI_MP_BAD && st.at == 0);
    /* Inside an array, a map key and a map value: st.at says where. */
    static const uint8_t in_array[] = {0x93, 0x01, 0xa1, 'a', 0xc1, 0x02};
    CHECK(skip_all(in_array, sizeof in_array, &len, &st) == SLUICEI_MP_BAD && st.at == 4);
    static const uint8_t as_key[] = {0x81, 0xc1, 0x01};
    CHECK(skip_all(as_key, sizeof as_key, &len, &st) == SLUICEI_MP_BAD && st.at == 1);
    static const uint8_t as_value[] = {0x81, 0xa1, 'k', 0x91, 0xc1};
    CHECK(skip_all(as_value, sizeof as_value, &len, &st) == SLUICEI_MP_BAD && st.at == 4);
    /* Inside a payload it is only a byte. */
    static const uint8_t in_bin[] = {0xc4, 0x02, 0xc1, 0xc1};
    CHECK(skip_all(in_bin, sizeof in_bin, &len, &st) == SLUICEI_MP_OK && len == 4);
    /* After a cut, the walk has not reached it yet. */
    CHECK(skip_all(in_array, 4, &len, &st) == SLUICEI_MP_MORE && st.at == 4);
}

/* The bytes of a stream arrive a few at a time, and the buffer moves
 * between reads (as exec.c's does): each object is walked once, resumed
 * where it stopped, and the state is ready for the next object. */
static void test_resumable(void)
{
    /* Two objects back to back: {"r": [bin 300, "ab"]} and [1, 2]. */
    uint8_t stream[320];
    size_t n = 0;
    const uint8_t head[] = {0x81, 0xa1, 'r', 0x92, 0xc5, 0x01, 0x2c};
    memcpy(stream, head, sizeof head);
    n = sizeof head;
    memset(stream + n, 0xc1, 300); /* payload bytes, not headers */
    n += 300;
    const uint8_t tail[] = {0xa2, 'a', 'b', 0x92, 0x01, 0x02};
    memcpy(stream + n, tail, sizeof tail);
    n += sizeof tail;
    const size_t first = n - 3;

    for (size_t step = 1; step <= 11; step += 5) {
        sluicei_mp_scan st = {0, 0};
        size_t pos = 0, have = 0, len = 0, found[2] = {0, 0}, nfound = 0;
        uint8_t *buf = NULL;
        while (nfound < 2) {
            have = have + step > n ? n : have + step;
            /* A new buffer on every read: the state holds offsets only. */
            free(buf);
            buf = exact(stream + pos, have - pos);
            size_t at_before = st.at;
            int r = sluicei_mp_skip(buf, have - pos, &st, &len);
            CHECK(r != SLUICEI_MP_BAD);
            if (r == SLUICEI_MP_MORE) {
                CHECK(have < n);
                CHECK(st.at >= at_before); /* never walks back */
                continue;
            }
            found[nfound++] = len;
            pos += len;
            CHECK(st.owed == 0 && st.at == 0);
            /* What arrived beyond the first object may hold the second. */
            if (pos < have) {
                free(buf);
                buf = exact(stream + pos, have - pos);
                if (sluicei_mp_skip(buf, have - pos, &st, &len) == SLUICEI_MP_OK) {
                    found[nfound++] = len;
                    pos += len;
                }
            }
        }
        free(buf);
        CHECK(found[0] == first && found[1] == 3 && pos == n);
    }

    /* Cut inside a bin payload: the walk waits at the bin's header until
     * the payload has come, then goes on from there. */
    sluicei_mp_scan st = {0, 0};
    size_t len;
    CHECK(sluicei_mp_skip(stream, 100, &st, &len) == SLUICEI_MP_MORE);
    CHECK(st.at == 4 && st.owed == 2); /* at the bin header; the str still owed */
    CHECK(sluicei_mp_skip(stream, 307, &st, &len) == SLUICEI_MP_MORE);
    CHECK(st.at == 307 && st.owed == 1);
    CHECK(sluicei_mp_skip(stream, n, &st, &len) == SLUICEI_MP_OK && len == first);
}

const struct test mpack_tests[] = {
    {"mpack/every type", test_every_type},
    {"mpack/every type byte", test_every_type_byte},
    {"mpack/truncated at every byte", test_truncated_at_every_byte},
    {"mpack/nesting", test_nesting},
    {"mpack/reserved byte 0xc1", test_reserved_byte},
    {"mpack/resumable", test_resumable},
    {NULL, NULL},
};
