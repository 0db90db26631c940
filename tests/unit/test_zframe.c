/* Unit tests of compressed frames (common/src/zframe.c): the setting, the
 * producer's compression, round trips of both codecs, the raw fallback,
 * and hostile envelopes, each refused with its reason and without a
 * buffer beyond what the envelope may ask for (the pool's bytes show what
 * was allocated). */
#include "test.h"
#include "zframe.h"

#include <lz4.h>
#include <msgpack.h>
#include <zstd.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXB ((size_t)1 << 20)

/* ---- helpers ------------------------------------------------------------ */

static int buf_write(void *data, const char *p, size_t n)
{
    return sluicei_buf_append(data, p, n) == SLUICE_OK ? 0 : -1;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* An envelope with the keys of `order`, in that order: v (1), V ("v": 2),
 * z (codec), u, c, x (an extra key "x": nil). */
static void pack_env_keys(sluicei_buf *out, const char *order, const char *codec, uint64_t u,
                          const void *c, size_t clen)
{
    msgpack_packer pk;
    out->len = 0;
    msgpack_packer_init(&pk, out, buf_write);
    msgpack_pack_map(&pk, strlen(order));
    for (const char *k = order; *k; k++) {
        switch (*k) {
        case 'v': case 'V':
            pack_str(&pk, "v");
            msgpack_pack_uint64(&pk, *k == 'v' ? 1 : 2);
            break;
        case 'z':
            pack_str(&pk, "z");
            pack_str(&pk, codec);
            break;
        case 'u':
            pack_str(&pk, "u");
            msgpack_pack_uint64(&pk, u);
            break;
        case 'c':
            pack_str(&pk, "c");
            msgpack_pack_bin(&pk, clen);
            msgpack_pack_bin_body(&pk, c, clen);
            break;
        default:
            pack_str(&pk, "x");
            msgpack_pack_nil(&pk);
        }
    }
}

static void pack_env(sluicei_buf *out, const char *codec, uint64_t u, const void *c, size_t clen)
{
    pack_env_keys(out, "vzuc", codec, u, c, clen);
}

/* A record frame of 40 records of 300 bytes each, repetitive text. */
static void make_frame(sluicei_buf *out, uint32_t seq)
{
    static char text[40][300];
    sluice_record recs[40];
    for (int i = 0; i < 40; i++) {
        for (int j = 0; j < 300; j++)
            text[i][j] = "the quick brown fox "[(i + j) % 20];
        recs[i].data = text[i];
        recs[i].len = sizeof text[i];
    }
    sluicei_batch_meta m = {{1, 2, seq}, "zt", 9};
    CHECK(sluicei_wire_encode_records(out, &m, recs, 40) == SLUICE_OK);
}

/* Compresses src with a codec into a new malloc'd buffer; returns its length. */
static size_t squeeze(const char *codec, const void *src, size_t n, uint8_t **out)
{
    size_t cap = strcmp(codec, "lz4") == 0 ? (size_t)LZ4_compressBound((int)n)
                                           : ZSTD_compressBound(n);
    *out = malloc(cap);
    if (strcmp(codec, "lz4") == 0)
        return (size_t)LZ4_compress_default(src, (char *)*out, (int)n, (int)cap);
    size_t r = ZSTD_compress(*out, cap, src, n, 3);
    CHECK(!ZSTD_isError(r));
    return r;
}

/* Decodes p[0..len) from an exact-size heap copy through a fresh pool;
 * returns the code, the reason in err, and in *bytes what the pool
 * allocated for it. */
static sluice_err zdecode(const void *p, size_t len, size_t max, char *err, size_t errlen,
                          size_t *bytes)
{
    uint8_t *q = malloc(len ? len : 1);
    memcpy(q, p, len);
    sluicei_zpool *z = sluicei_zpool_new(2, SIZE_MAX);
    sluice_batch *b = (sluice_batch *)&b; /* must come back NULL on failure */
    sluice_err e = sluicei_zframe_decode(z, q, len, max, 0, NULL, NULL, &b, err, errlen);
    if (e != SLUICE_OK)
        CHECK(b == NULL);
    *bytes = sluicei_zpool_bytes(z);
    if (e == SLUICE_OK)
        sluice_batch_free(b);
    sluicei_zpool_close(z);
    free(q);
    return e;
}

/* True when the envelope is refused with code and a reason containing
 * want, having allocated at most limit bytes. */
static bool refuses(const sluicei_buf *env, sluice_err code, const char *want, size_t limit)
{
    char err[512] = "";
    size_t bytes = 0;
    sluice_err e = zdecode(env->data, env->len, MAXB, err, sizeof err, &bytes);
    if (e == code && strstr(err, want) && bytes <= limit)
        return true;
    fprintf(stderr, "    got %d \"%s\" (%zu bytes allocated), wanted %d containing \"%s\" "
            "within %zu bytes\n", (int)e, err, bytes, (int)code, want, limit);
    return false;
}

/* ---- the setting -------------------------------------------------------- */

static void test_setting(void)
{
    struct {
        const char *s;
        sluice_err e;
        sluicei_zcodec codec;
        int level;
        const char *stored, *why;
    } cases[] = {
        {"", SLUICE_OK, SLUICEI_ZCODEC_NONE, 0, "", NULL},
        {"none", SLUICE_OK, SLUICEI_ZCODEC_NONE, 0, "", NULL},
        {"lz4", SLUICE_OK, SLUICEI_ZCODEC_LZ4, 0, "lz4", NULL},
        {"zstd", SLUICE_OK, SLUICEI_ZCODEC_ZSTD, 3, "zstd:3", NULL},
        {"zstd:1", SLUICE_OK, SLUICEI_ZCODEC_ZSTD, 1, "zstd:1", NULL},
        {"zstd:19", SLUICE_OK, SLUICEI_ZCODEC_ZSTD, 19, "zstd:19", NULL},
        {"zstd:0", SLUICE_ERR_INVALID, 0, 0, NULL, "from 1 to 19"},
        {"zstd:20", SLUICE_ERR_INVALID, 0, 0, NULL, "from 1 to 19"},
        {"zstd:", SLUICE_ERR_INVALID, 0, 0, NULL, "from 1 to 19"},
        {"zstd:-3", SLUICE_ERR_INVALID, 0, 0, NULL, "from 1 to 19"},
        {"zstd:99999999999999999999", SLUICE_ERR_INVALID, 0, 0, NULL, "from 1 to 19"},
        {"lz4:5", SLUICE_ERR_INVALID, 0, 0, NULL, "lz4 takes no level"},
        {"gzip", SLUICE_ERR_INVALID, 0, 0, NULL, "unknown compression 'gzip'"},
        {"LZ4", SLUICE_ERR_INVALID, 0, 0, NULL, "unknown compression"},
        {"zstd 3", SLUICE_ERR_INVALID, 0, 0, NULL, "unknown compression"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sluicei_zsetting z;
        char err[256] = "", out[SLUICEI_ZSETTING_MAX];
        sluice_err e = sluicei_zsetting_parse(cases[i].s, strlen(cases[i].s), &z, err, sizeof err);
        CHECK(e == cases[i].e);
        if (e != cases[i].e)
            fprintf(stderr, "    '%s': got %d \"%s\"\n", cases[i].s, (int)e, err);
        if (e == SLUICE_OK) {
            CHECK(z.codec == cases[i].codec && z.level == cases[i].level);
            CHECK(strcmp(sluicei_zsetting_str(&z, out), cases[i].stored) == 0);
        } else {
            CHECK(strstr(err, cases[i].why) != NULL);
        }
    }
}

/* ---- round trips -------------------------------------------------------- */

static void roundtrip(sluicei_zcodec codec, int level)
{
    sluicei_buf frame = {0}, orig = {0};
    sluicei_zenc enc = {.set = {codec, level}};
    sluicei_zpool *z = sluicei_zpool_new(2, SIZE_MAX);
    size_t steady = 0;
    for (uint32_t seq = 0; seq < 6; seq++) {
        make_frame(&frame, seq);
        orig.len = 0;
        sluicei_buf_append(&orig, frame.data, frame.len);
        CHECK(sluicei_zframe_compress(&enc, &frame) == SLUICE_OK);
        CHECK(frame.len < orig.len / 4);
        CHECK(sluicei_zframe_is_envelope(frame.data, frame.len));
        /* An exact-size copy, as a reply from Redis would be. */
        uint8_t *q = malloc(frame.len);
        memcpy(q, frame.data, frame.len);
        sluice_batch *b = NULL, *r = NULL;
        char err[256] = "";
        /* On success frame_free (free) has released q already. */
        sluice_err e = sluicei_zframe_decode(z, q, frame.len, MAXB, 0, free, q, &b, err,
                                             sizeof err);
        CHECK(e == SLUICE_OK);
        if (e != SLUICE_OK)
            free(q);
        CHECK(sluice_wire_decode(orig.data, orig.len, MAXB, &r) == SLUICE_OK);
        if (b && r) {
            CHECK(sluice_batch_get_id(b).seq == seq);
            CHECK(sluice_batch_frame_bytes(b) == orig.len);
            CHECK(sluice_batch_num_records(b) == sluice_batch_num_records(r));
            for (size_t i = 0; i < sluice_batch_num_records(r); i++) {
                sluice_record x = sluice_batch_record(b, i), y = sluice_batch_record(r, i);
                CHECK(x.len == y.len && memcmp(x.data, y.data, x.len) == 0);
            }
        }
        /* The public decoder opens envelopes too, with a buffer of its own. */
        sluice_batch *pb = NULL;
        CHECK(sluice_wire_decode(frame.data, frame.len, MAXB, &pb) == SLUICE_OK);
        CHECK(pb && sluice_batch_num_records(pb) == 40);
        sluice_batch_free(pb);
        sluice_batch_free(b);
        sluice_batch_free(r);
        /* Steady state: the same buffer again and again. */
        if (seq == 1)
            steady = sluicei_zpool_bytes(z);
        if (seq > 1)
            CHECK(sluicei_zpool_bytes(z) == steady);
    }
    CHECK(steady >= orig.len && steady <= orig.len + orig.len / 8);
    sluicei_zpool_close(z);
    sluicei_zenc_free(&enc);
    sluicei_buf_free(&frame);
    sluicei_buf_free(&orig);
}

static void test_lz4_roundtrip(void)
{
    roundtrip(SLUICEI_ZCODEC_LZ4, 0);
}

static void test_zstd_roundtrip(void)
{
    roundtrip(SLUICEI_ZCODEC_ZSTD, 3);
    roundtrip(SLUICEI_ZCODEC_ZSTD, 19);
}

/* A frame that does not get smaller is stored as it is; so is any frame
 * with no compression set. */
static void test_not_smaller_stored_raw(void)
{
    uint8_t noise[2000];
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < sizeof noise; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        noise[i] = (uint8_t)x;
    }
    sluice_record rec = {noise, sizeof noise};
    sluicei_batch_meta m = {{0, 1, 2}, "p", 3};
    sluicei_zcodec codecs[] = {SLUICEI_ZCODEC_LZ4, SLUICEI_ZCODEC_ZSTD, SLUICEI_ZCODEC_NONE};
    for (size_t k = 0; k < 3; k++) {
        sluicei_buf frame = {0};
        sluicei_zenc enc = {.set = {codecs[k], codecs[k] == SLUICEI_ZCODEC_ZSTD ? 19 : 0}};
        CHECK(sluicei_wire_encode_records(&frame, &m, &rec, 1) == SLUICE_OK);
        size_t len = frame.len;
        uint8_t *before = malloc(len);
        memcpy(before, frame.data, len);
        CHECK(sluicei_zframe_compress(&enc, &frame) == SLUICE_OK);
        CHECK(frame.len == len && memcmp(frame.data, before, len) == 0);
        CHECK(!sluicei_zframe_is_envelope(frame.data, frame.len));
        free(before);
        /* A tiny frame (shorter than any envelope) too. */
        CHECK(sluicei_wire_encode_records(&frame, &m, NULL, 0) == SLUICE_OK);
        len = frame.len;
        CHECK(sluicei_zframe_compress(&enc, &frame) == SLUICE_OK && frame.len == len);
        sluicei_zenc_free(&enc);
        sluicei_buf_free(&frame);
    }
}

/* The envelope's header is canonical msgpack: the shortest uint and bin
 * forms, keys in order. */
static void test_envelope_bytes(void)
{
    sluicei_buf frame = {0};
    sluicei_zenc enc = {.set = {SLUICEI_ZCODEC_LZ4, 0}};
    make_frame(&frame, 0);
    size_t raw = frame.len;
    CHECK(raw > 0xff && raw <= 0xffff);   /* u is a uint16 */
    CHECK(sluicei_zframe_compress(&enc, &frame) == SLUICE_OK);
    static const uint8_t head[] = {0x84, 0xa1, 'v', 0x01, 0xa1, 'z', 0xa3, 'l', 'z', '4',
                                   0xa1, 'u', 0xcd};
    CHECK(frame.len > 20 && memcmp(frame.data, head, sizeof head) == 0);
    CHECK(((size_t)frame.data[13] << 8 | frame.data[14]) == raw);
    CHECK(frame.data[15] == 0xa1 && frame.data[16] == 'c');
    /* c's bin header: the shortest that holds its length. */
    size_t clen = frame.data[17] == 0xc4 ? frame.data[18]
                                         : (size_t)frame.data[18] << 8 | frame.data[19];
    size_t at = frame.data[17] == 0xc4 ? 19 : 20;
    CHECK(frame.data[17] == (clen <= 0xff ? 0xc4 : 0xc5));
    CHECK(at + clen == frame.len);
    sluicei_zenc_free(&enc);
    sluicei_buf_free(&frame);
}

/* ---- hostile envelopes -------------------------------------------------- */

/* u beyond the limit: refused before anything is allocated, however the
 * data looks. */
static void test_u_above_limit(void)
{
    sluicei_buf env = {0};
    pack_env(&env, "lz4", (uint64_t)1 << 40, "\x10x", 2);
    CHECK(refuses(&env, SLUICE_ERR_TOOBIG, "more than the maximum of 1048576", 0));
    pack_env(&env, "zstd", MAXB + 1, "x", 1);
    CHECK(refuses(&env, SLUICE_ERR_TOOBIG, "1048577 bytes", 0));
    pack_env(&env, "zstd", 0, "x", 1);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "\"u\" is 0", 0));
    sluicei_buf_free(&env);
}

/* u smaller or larger than what c gives, for both codecs; and bombs: a few
 * bytes that would give far more than u. */
static void test_u_disagrees(void)
{
    sluicei_buf frame = {0}, env = {0};
    make_frame(&frame, 0);
    const char *codecs[] = {"lz4", "zstd"};
    for (int k = 0; k < 2; k++) {
        uint8_t *c;
        size_t clen = squeeze(codecs[k], frame.data, frame.len, &c);
        pack_env(&env, codecs[k], frame.len, c, clen);
        char err[256];
        size_t bytes;
        CHECK(zdecode(env.data, env.len, MAXB, err, sizeof err, &bytes) == SLUICE_OK);
        pack_env(&env, codecs[k], frame.len - 1, c, clen);
        CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "decompression failed: ",
                      frame.len + frame.len / 8));
        pack_env(&env, codecs[k], frame.len + 10, c, clen);
        CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "bytes, but u = ", frame.len + 10 + frame.len));
        /* c cut inside, its bin header telling the truth. */
        pack_env(&env, codecs[k], frame.len, c, clen / 2);
        CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "decompression failed: ",
                      frame.len + frame.len / 8));
        free(c);
    }
    /* lz4: one literal, then a match repeated for 255 x 4000 bytes. */
    sluicei_buf bomb = {0};
    sluicei_buf_append(&bomb, "\x1f" "A" "\x01\x00", 4);
    for (int i = 0; i < 4000; i++)
        sluicei_buf_append(&bomb, "\xff", 1);
    sluicei_buf_append(&bomb, "\x00\x50" "AAAAA", 7);
    pack_env(&env, "lz4", 1000, bomb.data, bomb.len);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "decompression failed: lz4", 1125));
    /* zstd: 64 MiB of zeros in a few bytes (its header says so). */
    size_t big = (size_t)64 << 20;
    uint8_t *zeros = calloc(1, big), *c = malloc(ZSTD_compressBound(big));
    size_t clen = ZSTD_compress(c, ZSTD_compressBound(big), zeros, big, 1);
    CHECK(!ZSTD_isError(clen) && clen < 10000);
    pack_env(&env, "zstd", 1000, c, clen);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "decompression failed: zstd", 1125));
    /* Two zstd frames back to back: only one is allowed. */
    sluicei_buf two = {0};
    uint8_t *c1;
    size_t n1 = squeeze("zstd", frame.data, frame.len, &c1);
    sluicei_buf_append(&two, c1, n1);
    sluicei_buf_append(&two, c1, n1);
    pack_env(&env, "zstd", frame.len, two.data, two.len);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "more than one zstd frame", 0));
    /* Not zstd at all. */
    pack_env(&env, "zstd", frame.len, "garbage!", 8);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "decompression failed: zstd", 0));
    free(c1);
    free(zeros);
    free(c);
    sluicei_buf_free(&two);
    sluicei_buf_free(&bomb);
    sluicei_buf_free(&env);
    sluicei_buf_free(&frame);
}

/* The envelope's own bytes: cut short, wrong keys, wrong types. */
static void test_envelope_shape(void)
{
    sluicei_buf frame = {0}, env = {0};
    make_frame(&frame, 0);
    uint8_t *c;
    size_t clen = squeeze("lz4", frame.data, frame.len, &c);
    /* Truncated: c's bin header claims more than the frame holds. */
    pack_env(&env, "lz4", frame.len, c, clen);
    env.len -= 10;
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "field \"c\" is cut short", 0));
    env.len = 20;
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "compressed frame: ", 0));
    pack_env(&env, "gzip", frame.len, c, clen);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "unknown codec \"gzip\"", 0));
    pack_env(&env, "", frame.len, c, clen);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "unknown codec \"\"", 0));
    pack_env_keys(&env, "vzcu", "lz4", frame.len, c, clen);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "the third key is not \"u\"", 0));
    pack_env_keys(&env, "vzux", "lz4", frame.len, c, clen);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "the fourth key is not \"c\"", 0));
    pack_env_keys(&env, "vzucx", "lz4", frame.len, c, clen);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "a map of 5 keys", 0));
    pack_env_keys(&env, "vzu", "lz4", frame.len, c, clen);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "a map of 3 keys", 0));
    pack_env_keys(&env, "Vzuc", "lz4", frame.len, c, clen);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "field \"v\" is 2", 0));
    pack_env(&env, "lz4", frame.len, c, clen);
    sluicei_buf_append(&env, "\xc0", 1);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "1 trailing bytes after the envelope", 0));
    /* Types: z an int, u a str, c a str. */
    static const uint8_t z_int[] = {0x84, 0xa1, 'v', 0x01, 0xa1, 'z', 0x05, 0xa1, 'u', 0x01,
                                    0xa1, 'c', 0xc4, 0x01, 0x00};
    static const uint8_t u_str[] = {0x84, 0xa1, 'v', 0x01, 0xa1, 'z', 0xa3, 'l', 'z', '4',
                                    0xa1, 'u', 0xa1, '9', 0xa1, 'c', 0xc4, 0x01, 0x00};
    static const uint8_t c_str[] = {0x84, 0xa1, 'v', 0x01, 0xa1, 'z', 0xa3, 'l', 'z', '4',
                                    0xa1, 'u', 0x01, 0xa1, 'c', 0xa1, 0x00};
    sluicei_buf t = {0};
    sluicei_buf_append(&t, z_int, sizeof z_int);
    CHECK(refuses(&t, SLUICE_ERR_PROTOCOL, "field \"z\": expected the codec's name", 0));
    t.len = 0;
    sluicei_buf_append(&t, u_str, sizeof u_str);
    CHECK(refuses(&t, SLUICE_ERR_PROTOCOL, "field \"u\": expected an unsigned integer", 0));
    t.len = 0;
    sluicei_buf_append(&t, c_str, sizeof c_str);
    CHECK(refuses(&t, SLUICE_ERR_PROTOCOL, "field \"c\": expected bin, got str", 0));
    /* An envelope whose frame is an envelope. */
    uint8_t *cc;
    size_t cclen = squeeze("lz4", env.data, env.len - 1, &cc);
    pack_env(&env, "lz4", env.len - 1, cc, cclen);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "compressed frames do not nest", env.len * 64));
    /* An envelope as such is refused by the plain decoder too. */
    char err[256] = "";
    CHECK(sluicei_wire_validate(env.data, env.len, MAXB, err, sizeof err) ==
          SLUICE_ERR_PROTOCOL);
    CHECK(strstr(err, "do not nest") != NULL);
    /* The frame inside is checked as any frame: here one cut short. */
    uint8_t *cf;
    size_t cflen = squeeze("zstd", frame.data, frame.len - 3, &cf);
    pack_env(&env, "zstd", frame.len - 3, cf, cflen);
    CHECK(refuses(&env, SLUICE_ERR_PROTOCOL, "compressed frame (zstd, ", frame.len * 2));
    free(cf);
    free(cc);
    free(c);
    sluicei_buf_free(&t);
    sluicei_buf_free(&env);
    sluicei_buf_free(&frame);
}

/* A map whose second key is not "z" is a plain frame (or none), never an
 * envelope; the check reads nothing past the end. */
static void test_detection(void)
{
    static const uint8_t plain[] = {0x82, 0xa1, 'v', 0x01, 0xa2, 'i', 'd'};
    static const uint8_t v_arr[] = {0x82, 0xa1, 'v', 0x91, 0x01, 0xa1, 'z'};
    static const uint8_t cut[] = {0x84, 0xa1, 'v', 0x01, 0xa1};
    static const uint8_t env[] = {0x84, 0xa1, 'v', 0x01, 0xa1, 'z'};
    CHECK(!sluicei_zframe_is_envelope(plain, sizeof plain));
    CHECK(!sluicei_zframe_is_envelope(v_arr, sizeof v_arr));
    CHECK(!sluicei_zframe_is_envelope(cut, sizeof cut));
    CHECK(!sluicei_zframe_is_envelope(NULL, 0));
    CHECK(sluicei_zframe_is_envelope(env, sizeof env));
    for (size_t n = 0; n < sizeof env; n++) {
        uint8_t *q = malloc(n ? n : 1);
        memcpy(q, env, n);
        CHECK(!sluicei_zframe_is_envelope(q, n));
        free(q);
    }
}

/* The pool keeps at most `keep` free buffers, whatever was out at once,
 * and a batch may outlive it. */
static void test_pool_bounds(void)
{
    sluicei_buf frame = {0};
    sluicei_zenc enc = {.set = {SLUICEI_ZCODEC_ZSTD, 1}};
    make_frame(&frame, 0);
    size_t raw = frame.len;
    CHECK(sluicei_zframe_compress(&enc, &frame) == SLUICE_OK);
    sluicei_zpool *z = sluicei_zpool_new(2, SIZE_MAX);
    sluice_batch *held[8];
    char err[256];
    for (int i = 0; i < 8; i++)
        CHECK(sluicei_zframe_decode(z, frame.data, frame.len, MAXB, 0, NULL, NULL, &held[i], err,
                                    sizeof err) == SLUICE_OK);
    CHECK(sluicei_zpool_bytes(z) >= 8 * raw);
    for (int i = 0; i < 7; i++)
        sluice_batch_free(held[i]);
    /* Two kept free, one still held. */
    CHECK(sluicei_zpool_bytes(z) >= 3 * raw && sluicei_zpool_bytes(z) <= 3 * (raw + raw / 8));
    sluicei_zpool_close(z);
    CHECK(sluice_batch_num_records(held[7]) == 40);
    sluice_batch_free(held[7]);   /* frees the pool too (ASan/valgrind see a leak if not) */

    /* A byte bound: room for one buffer (and a bit) keeps one free. */
    z = sluicei_zpool_new(8, raw + raw / 4);
    for (int i = 0; i < 4; i++)
        CHECK(sluicei_zframe_decode(z, frame.data, frame.len, MAXB, 0, NULL, NULL, &held[i], err,
                                    sizeof err) == SLUICE_OK);
    for (int i = 0; i < 4; i++)
        sluice_batch_free(held[i]);
    CHECK(sluicei_zpool_bytes(z) >= raw && sluicei_zpool_bytes(z) <= raw + raw / 8);
    sluicei_zpool_close(z);
    sluicei_zenc_free(&enc);
    sluicei_buf_free(&frame);
}

const struct test zframe_tests[] = {
    {"zframe/setting", test_setting},
    {"zframe/lz4 round trip", test_lz4_roundtrip},
    {"zframe/zstd round trip", test_zstd_roundtrip},
    {"zframe/not smaller: stored raw", test_not_smaller_stored_raw},
    {"zframe/envelope bytes", test_envelope_bytes},
    {"zframe/u above the limit", test_u_above_limit},
    {"zframe/u disagrees and bombs", test_u_disagrees},
    {"zframe/envelope shape", test_envelope_shape},
    {"zframe/detection", test_detection},
    {"zframe/pool bounds", test_pool_bounds},
    {NULL, NULL},
};
