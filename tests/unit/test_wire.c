/* Unit tests of the batch wire format v1 (common/src/wire_*.c, batch.c).
 * Longer than ~800 lines because it is one table of frames: the hostile
 * ones are built with the same msgpack helpers as the good ones, at the
 * top, and each case is a few lines. */
#include "test.h"
#include "wire.h"

#include <msgpack.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BYTES ((size_t)64 << 20)

/* ---- helpers ------------------------------------------------------------ */

static sluicei_batch_meta meta(void)
{
    sluicei_batch_meta m = {{2, 7, 3}, "py", 5};
    return m;
}

static bool points_into(const void *frame, size_t len, const void *q, size_t n)
{
    uintptr_t a = (uintptr_t)frame, b = (uintptr_t)q;
    return b >= a && b - a <= len && n <= len - (b - a);
}

/* Decodes p[0..len) from an exact-size heap copy, so ASan sees any read
 * past the end. Returns the code; *err gets the reason. */
static sluice_err decode_copy(const void *p, size_t len, size_t max, char *err, size_t errlen)
{
    void *q = malloc(len ? len : 1);
    if (len)
        memcpy(q, p, len);
    sluice_batch *b = (sluice_batch *)&b; /* must be overwritten with NULL */
    sluice_err e = sluicei_wire_decode(q, len, max, NULL, NULL, &b, err, errlen);
    if (e != SLUICE_OK)
        CHECK(b == NULL);
    /* The validator alone must agree with the decoder. */
    CHECK(sluicei_wire_validate(q, len, max, NULL, 0) == e);
    sluice_batch_free(e == SLUICE_OK ? b : NULL);
    free(q);
    return e;
}

/* True when decoding fails with code and an error containing want. */
static bool rejects(const void *p, size_t len, sluice_err code, const char *want)
{
    char err[256] = "";
    sluice_err e = decode_copy(p, len, MAX_BYTES, err, sizeof err);
    if (e == code && strstr(err, want))
        return true;
    fprintf(stderr, "    got %d \"%s\", wanted %d containing \"%s\"\n", (int)e, err, (int)code,
            want);
    return false;
}

static bool accepts(const void *p, size_t len)
{
    char err[256] = "";
    sluice_err e = decode_copy(p, len, MAX_BYTES, err, sizeof err);
    if (e != SLUICE_OK)
        fprintf(stderr, "    rejected: %s\n", err);
    return e == SLUICE_OK;
}

/* A msgpack builder for hand-made frames. */
struct fb {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

static msgpack_packer *fb_init(struct fb *f)
{
    msgpack_sbuffer_init(&f->sb);
    msgpack_packer_init(&f->pk, &f->sb, msgpack_sbuffer_write);
    return &f->pk;
}

static void fb_free(struct fb *f)
{
    msgpack_sbuffer_destroy(&f->sb);
}

static void str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void bin(msgpack_packer *pk, const void *p, size_t n)
{
    msgpack_pack_bin_with_body(pk, p, n);
}

static void pack_id(msgpack_packer *pk, uint64_t e, uint64_t t, uint64_t s)
{
    msgpack_pack_array(pk, 3);
    msgpack_pack_uint64(pk, e);
    msgpack_pack_uint64(pk, t);
    msgpack_pack_uint64(pk, s);
}

/* The value kinds used to test wrong types. */
enum val { V_NIL, V_TRUE, V_NEG, V_FLOAT, V_STR, V_BIN, V_ARR, V_MAP, V_EXT, V_UINT, NVAL };

static void pack_val(msgpack_packer *pk, enum val v)
{
    switch (v) {
    case V_NIL: msgpack_pack_nil(pk); break;
    case V_TRUE: msgpack_pack_true(pk); break;
    case V_NEG: msgpack_pack_int64(pk, -1); break;
    case V_FLOAT: msgpack_pack_double(pk, 1.5); break;
    case V_STR: str(pk, "s"); break;
    case V_BIN: bin(pk, "abc", 3); break;
    case V_ARR: msgpack_pack_array(pk, 0); break;
    case V_MAP: msgpack_pack_map(pk, 0); break;
    case V_EXT: msgpack_pack_ext_with_body(pk, "e", 1, 5); break;
    case V_UINT: msgpack_pack_uint64(pk, 1); break;
    case NVAL: break;
    }
}

enum field { F_V, F_ID, F_P, F_T, F_N, F_R, NFIELD };
static const char *const field_names[] = {"v", "id", "p", "t", "n", "r"};

/* Packs a valid frame of 2 records, except that field bad (< NFIELD) gets
 * the value val. */
static void record_frame(struct fb *f, int bad, enum val val)
{
    msgpack_packer *pk = fb_init(f);
    msgpack_pack_map(pk, 6);
    str(pk, "v");
    bad == F_V ? pack_val(pk, val) : (void)msgpack_pack_uint64(pk, 1);
    str(pk, "id");
    bad == F_ID ? pack_val(pk, val) : pack_id(pk, 1, 2, 3);
    str(pk, "p");
    bad == F_P ? pack_val(pk, val) : str(pk, "prod");
    str(pk, "t");
    bad == F_T ? pack_val(pk, val) : (void)msgpack_pack_uint64(pk, 1000);
    str(pk, "n");
    bad == F_N ? pack_val(pk, val) : (void)msgpack_pack_uint64(pk, 2);
    str(pk, "r");
    if (bad == F_R) {
        pack_val(pk, val);
    } else {
        msgpack_pack_array(pk, 2);
        bin(pk, "one", 3);
        bin(pk, "two", 3);
    }
}

enum tfield { T_DTYPE, T_SHAPE, T_DATA, NTFIELD };

/* Packs a valid frame with one uint8 tensor "img" of shape [2,3], except
 * that tensor field bad (< NTFIELD) gets the value val. */
static void tensor_frame(struct fb *f, int bad, enum val val)
{
    static const uint8_t data[6] = {1, 2, 3, 4, 5, 6};
    msgpack_packer *pk = fb_init(f);
    msgpack_pack_map(pk, 4);
    str(pk, "v");
    msgpack_pack_uint64(pk, 1);
    str(pk, "id");
    pack_id(pk, 0, 0, 0);
    str(pk, "n");
    msgpack_pack_uint64(pk, 2);
    str(pk, "x");
    msgpack_pack_map(pk, 1);
    str(pk, "img");
    msgpack_pack_map(pk, 3);
    str(pk, "dtype");
    bad == T_DTYPE ? pack_val(pk, val) : str(pk, "uint8");
    str(pk, "shape");
    if (bad == T_SHAPE) {
        pack_val(pk, val);
    } else {
        msgpack_pack_array(pk, 2);
        msgpack_pack_uint64(pk, 2);
        msgpack_pack_uint64(pk, 3);
    }
    str(pk, "data");
    bad == T_DATA ? pack_val(pk, val) : bin(pk, data, sizeof data);
}

/* Starts a frame with "v": 1 and "id", in a map of nkeys entries. */
static msgpack_packer *frame_head(struct fb *f, uint32_t nkeys)
{
    msgpack_packer *pk = fb_init(f);
    msgpack_pack_map(pk, nkeys);
    str(pk, "v");
    msgpack_pack_uint64(pk, 1);
    str(pk, "id");
    pack_id(pk, 1, 2, 3);
    return pk;
}

/* A tensor frame whose only tensor "a" has the given dtype, shape and
 * data length; n rows. */
static void shaped_frame(struct fb *f, uint64_t n, const char *dtype, const uint64_t *shape,
                         int ndim, size_t datalen)
{
    msgpack_packer *pk = frame_head(f, 4);
    str(pk, "n");
    msgpack_pack_uint64(pk, n);
    str(pk, "x");
    msgpack_pack_map(pk, 1);
    str(pk, "a");
    msgpack_pack_map(pk, 3);
    str(pk, "dtype");
    str(pk, dtype);
    str(pk, "shape");
    msgpack_pack_array(pk, (size_t)ndim);
    for (int i = 0; i < ndim; i++)
        msgpack_pack_uint64(pk, shape[i]);
    str(pk, "data");
    uint8_t *d = calloc(datalen ? datalen : 1, 1);
    bin(pk, d, datalen);
    free(d);
}

/* ---- round trips -------------------------------------------------------- */

static void test_records_roundtrip(void)
{
    sluicei_buf buf = {0};
    sluicei_batch_meta m = meta();
    sluice_record recs[3] = {{"hello", 5}, {NULL, 0}, {"world!", 6}};
    CHECK(sluicei_wire_encode_records(&buf, &m, recs, 3) == SLUICE_OK);
    sluice_batch *b = NULL;
    CHECK(sluice_wire_decode(buf.data, buf.len, MAX_BYTES, &b) == SLUICE_OK);
    if (b) {
        sluice_batch_id id = sluice_batch_get_id(b);
        CHECK(id.epoch == 2 && id.task == 7 && id.seq == 3);
        CHECK(strcmp(sluice_batch_producer(b), "py") == 0);
        CHECK(sluice_batch_created_us(b) == 5);
        CHECK(sluice_batch_frame_bytes(b) == buf.len);
        CHECK(sluice_batch_num_records(b) == 3);
        CHECK(sluice_batch_num_tensors(b) == 0);
        CHECK(sluice_batch_tensor(b, 0) == NULL);
        CHECK(sluice_batch_find_tensor(b, "x") == NULL);
        CHECK(sluice_batch_deliveries(b) == 1);
        for (size_t i = 0; i < 3; i++) {
            sluice_record r = sluice_batch_record(b, i);
            CHECK(r.len == recs[i].len);
            CHECK(r.data != NULL);
            CHECK(r.len == 0 || memcmp(r.data, recs[i].data, r.len) == 0);
            /* No copy: the record lies inside the frame. */
            CHECK(points_into(buf.data, buf.len, r.data, r.len));
        }
        sluice_record none = sluice_batch_record(b, 3);
        CHECK(none.data == NULL && none.len == 0);
    }
    sluice_batch_free(b);
    sluicei_buf_free(&buf);
}

/* The exact bytes of a small frame, identical to what Python's
 * msgpack.packb(..., use_bin_type=True) produces for the same dict. */
static void test_encoding_is_canonical(void)
{
    static const uint8_t want[] = {0x86, 0xa1, 'v', 0x01, 0xa2, 'i', 'd', 0x93, 0x02, 0x07, 0x03,
                                   0xa1, 'p', 0xa2, 'p', 'y', 0xa1, 't', 0x05, 0xa1, 'n', 0x02,
                                   0xa1, 'r', 0x92, 0xc4, 0x02, 'a', 'b', 0xc4, 0x00};
    sluicei_buf buf = {0};
    sluicei_batch_meta m = meta();
    sluice_record recs[2] = {{"ab", 2}, {"", 0}};
    CHECK(sluicei_wire_encode_records(&buf, &m, recs, 2) == SLUICE_OK);
    CHECK(buf.len == sizeof want && memcmp(buf.data, want, sizeof want) == 0);
    sluicei_buf_free(&buf);
}

static void test_big_record(void)
{
    size_t big = (size_t)1 << 20;
    uint8_t *rec = malloc(big);
    for (size_t i = 0; i < big; i++)
        rec[i] = (uint8_t)(i * 7 + 1);
    sluicei_buf buf = {0};
    sluicei_batch_meta m = meta();
    sluice_record recs[2] = {{rec, big}, {"x", 1}};
    CHECK(sluicei_wire_encode_records(&buf, &m, recs, 2) == SLUICE_OK);
    /* Reserved once up front, so the big record was copied once. */
    CHECK(buf.cap >= buf.len && buf.cap < buf.len + 4096);
    sluice_batch *b = NULL;
    CHECK(sluice_wire_decode(buf.data, buf.len, MAX_BYTES, &b) == SLUICE_OK);
    if (b) {
        sluice_record r = sluice_batch_record(b, 0);
        CHECK(r.len == big && memcmp(r.data, rec, big) == 0);
        CHECK(points_into(buf.data, buf.len, r.data, r.len));
        /* bin 32 for the big record, bin 8 for the small one. */
        CHECK(((const uint8_t *)r.data)[-5] == 0xc6);
        sluice_record s = sluice_batch_record(b, 1);
        CHECK(((const uint8_t *)s.data)[-2] == 0xc4);
    }
    sluice_batch_free(b);
    CHECK(sluice_wire_decode(buf.data, buf.len, big, &b) == SLUICE_ERR_TOOBIG);
    CHECK(b == NULL);
    sluicei_buf_free(&buf);
    free(rec);
}

static void test_zero_records(void)
{
    sluicei_buf buf = {0};
    sluicei_batch_meta m = meta();
    CHECK(sluicei_wire_encode_records(&buf, &m, NULL, 0) == SLUICE_OK);
    sluice_batch *b = NULL;
    CHECK(sluice_wire_decode(buf.data, buf.len, MAX_BYTES, &b) == SLUICE_OK);
    if (b) {
        CHECK(sluice_batch_num_records(b) == 0);
        CHECK(sluice_batch_num_tensors(b) == 0);
        CHECK(sluice_batch_record(b, 0).data == NULL);
    }
    sluice_batch_free(b);
    sluicei_buf_free(&buf);
}

static void test_many_records(void)
{
    size_t n = 70000; /* array 32 */
    sluice_record *recs = malloc(n * sizeof *recs);
    uint32_t *vals = malloc(n * sizeof *vals);
    for (size_t i = 0; i < n; i++) {
        vals[i] = (uint32_t)i;
        recs[i].data = &vals[i];
        recs[i].len = i % 5;
    }
    sluicei_buf buf = {0};
    sluicei_batch_meta m = meta();
    CHECK(sluicei_wire_encode_records(&buf, &m, recs, n) == SLUICE_OK);
    sluice_batch *b = NULL;
    CHECK(sluice_wire_decode(buf.data, buf.len, MAX_BYTES, &b) == SLUICE_OK);
    if (b) {
        CHECK(sluice_batch_num_records(b) == n);
        for (size_t i = 0; i < n; i++) {
            sluice_record r = sluice_batch_record(b, i);
            if (r.len != i % 5 || (r.len && memcmp(r.data, &vals[i], r.len) != 0)) {
                CHECK(!"record mismatch");
                break;
            }
        }
    }
    sluice_batch_free(b);
    sluicei_buf_free(&buf);
    free(recs);
    free(vals);
}

static void test_tensors_roundtrip(void)
{
    enum { B = 4 };
    uint8_t img[B * 28 * 28], label[B];
    float f[B * 3];
    for (size_t i = 0; i < sizeof img; i++)
        img[i] = (uint8_t)(i * 31);
    for (int i = 0; i < B; i++)
        label[i] = (uint8_t)(i + 1);
    for (int i = 0; i < B * 3; i++)
        f[i] = (float)i * 0.5f;
    sluice_tensor t[3] = {
        {"image", SLUICE_DTYPE_UINT8, 3, {B, 28, 28}, img, sizeof img},
        {"label", SLUICE_DTYPE_UINT8, 1, {B}, label, sizeof label},
        {"feat", SLUICE_DTYPE_FLOAT32, 2, {B, 3}, f, sizeof f},
    };
    sluicei_buf buf = {0};
    sluicei_batch_meta m = meta();
    CHECK(sluicei_wire_encode_tensors(&buf, &m, B, t, 3) == SLUICE_OK);
    sluice_batch *b = NULL;
    CHECK(sluice_wire_decode(buf.data, buf.len, MAX_BYTES, &b) == SLUICE_OK);
    if (b) {
        CHECK(sluice_batch_num_records(b) == B);
        CHECK(sluice_batch_num_tensors(b) == 3);
        CHECK(sluice_batch_record(b, 0).data == NULL);
        for (size_t i = 0; i < 3; i++) {
            const sluice_tensor *x = sluice_batch_tensor(b, i);
            CHECK(x && strcmp(x->name, t[i].name) == 0);
            CHECK(x && x->dtype == t[i].dtype && x->ndim == t[i].ndim);
            CHECK(x && memcmp(x->shape, t[i].shape, sizeof x->shape) == 0);
            CHECK(x && x->nbytes == t[i].nbytes && memcmp(x->data, t[i].data, x->nbytes) == 0);
            CHECK(x && points_into(buf.data, buf.len, x->data, x->nbytes));
        }
        CHECK(sluice_batch_tensor(b, 3) == NULL);
        const sluice_tensor *lab = sluice_batch_find_tensor(b, "label");
        CHECK(lab && lab->nbytes == B && ((const uint8_t *)lab->data)[3] == 4);
        const sluice_tensor *ft = sluice_batch_find_tensor(b, "feat");
        float v;
        /* Tensor data is unaligned in the frame: read it with memcpy. */
        if (ft) {
            memcpy(&v, (const char *)ft->data + 5 * sizeof v, sizeof v);
            CHECK(v == 2.5f);
        }
        CHECK(sluice_batch_find_tensor(b, "nope") == NULL);
    }
    sluice_batch_free(b);
    sluicei_buf_free(&buf);
}

static void test_python_frames(void)
{
    /* msgpack.packb({'v':1,'id':[2,7,3],'n':2,'r':[b'ab',b'']}, use_bin_type=False):
     * old-style peers send records as str. */
    static const uint8_t strs[] = {0x84, 0xa1, 0x76, 0x01, 0xa2, 0x69, 0x64, 0x93, 0x02, 0x07, 0x03,
                                   0xa1, 0x6e, 0x02, 0xa1, 0x72, 0x92, 0xa2, 0x61, 0x62, 0xa0};
    sluice_batch *b = NULL;
    CHECK(sluice_wire_decode(strs, sizeof strs, MAX_BYTES, &b) == SLUICE_OK);
    if (b) {
        CHECK(sluice_batch_record(b, 0).len == 2);
        CHECK(memcmp(sluice_batch_record(b, 0).data, "ab", 2) == 0);
        CHECK(sluice_batch_record(b, 0).data == strs + 18);
        CHECK(sluice_batch_record(b, 1).len == 0);
        /* Empty records still get a usable pointer (msgpack-c gives NULL). */
        CHECK(sluice_batch_record(b, 1).data != NULL);
        CHECK(sluice_batch_producer(b)[0] == '\0' && sluice_batch_created_us(b) == 0);
    }
    sluice_batch_free(b);

    /* A numpy float32 array [[0,1,2],[3,4,5]] as packed by Python. */
    static const char hex[] =
        "84a17601a2696493000100a16e02a17881a16183a56474797065a7666c6f61743332a5736861706592"
        "0203a464617461c418000000000000803f0000004000004040000080400000a040";
    uint8_t frame[sizeof hex / 2];
    for (size_t i = 0; i < sizeof frame; i++) {
        unsigned x;
        sscanf(hex + 2 * i, "%2x", &x);
        frame[i] = (uint8_t)x;
    }
    CHECK(sluice_wire_decode(frame, sizeof frame, MAX_BYTES, &b) == SLUICE_OK);
    if (b) {
        const sluice_tensor *a = sluice_batch_find_tensor(b, "a");
        CHECK(a && a->dtype == SLUICE_DTYPE_FLOAT32 && a->ndim == 2 && a->shape[1] == 3);
        if (a) {
            float v[6];
            memcpy(v, a->data, sizeof v);
            CHECK(v[0] == 0.0f && v[5] == 5.0f);
        }
    }
    sluice_batch_free(b);
}

static void test_ids(void)
{
    sluicei_buf buf = {0};
    sluicei_batch_meta m = {{UINT32_MAX, UINT64_MAX, UINT32_MAX}, "", UINT64_MAX};
    CHECK(sluicei_wire_encode_records(&buf, &m, NULL, 0) == SLUICE_OK);
    sluice_batch *b = NULL;
    CHECK(sluice_wire_decode(buf.data, buf.len, MAX_BYTES, &b) == SLUICE_OK);
    if (b) {
        sluice_batch_id id = sluice_batch_get_id(b);
        CHECK(id.epoch == UINT32_MAX && id.task == UINT64_MAX && id.seq == UINT32_MAX);
        CHECK(sluice_batch_created_us(b) == UINT64_MAX);
    }
    sluice_batch_free(b);
    sluice_batch_id id = {0, 0, 0};
    CHECK(sluicei_wire_peek_id(buf.data, buf.len, &id) == SLUICE_OK);
    CHECK(id.epoch == UINT32_MAX && id.task == UINT64_MAX && id.seq == UINT32_MAX);
    sluicei_buf_free(&buf);

    /* epoch and seq are 32-bit. */
    struct fb f;
    msgpack_packer *pk = fb_init(&f);
    msgpack_pack_map(pk, 4);
    str(pk, "v");
    msgpack_pack_uint64(pk, 1);
    str(pk, "id");
    pack_id(pk, (uint64_t)1 << 32, 0, 0);
    str(pk, "n");
    msgpack_pack_uint64(pk, 0);
    str(pk, "r");
    msgpack_pack_array(pk, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "epoch 4294967296"));
    CHECK(sluicei_wire_peek_id(f.sb.data, f.sb.size, &id) == SLUICE_ERR_PROTOCOL);
    fb_free(&f);
}

/* peek_id finds "id" wherever it is, and only reads what it needs. */
static void test_peek_id(void)
{
    struct fb f;
    msgpack_packer *pk = fb_init(&f);
    msgpack_pack_map(pk, 4);
    str(pk, "v");
    msgpack_pack_uint64(pk, 1);
    str(pk, "r");
    msgpack_pack_array(pk, 1);
    bin(pk, "abc", 3);
    str(pk, "n");
    msgpack_pack_uint64(pk, 1);
    str(pk, "id");
    pack_id(pk, 9, 8, 7);
    sluice_batch_id id = {0, 0, 0};
    CHECK(sluicei_wire_peek_id(f.sb.data, f.sb.size, &id) == SLUICE_OK);
    CHECK(id.epoch == 9 && id.task == 8 && id.seq == 7);
    CHECK(accepts(f.sb.data, f.sb.size));
    /* Every prefix: never a crash, and no id before the id is complete. */
    for (size_t k = 0; k < f.sb.size; k++) {
        uint8_t *q = malloc(k ? k : 1);
        memcpy(q, f.sb.data, k);
        CHECK(sluicei_wire_peek_id(q, k, &id) == SLUICE_ERR_PROTOCOL);
        free(q);
    }
    static const uint8_t junk[] = {0xdf, 0x20, 0, 0, 0};
    CHECK(sluicei_wire_peek_id(junk, sizeof junk, &id) == SLUICE_ERR_PROTOCOL);
    fb_free(&f);
}

static void test_dtypes(void)
{
    static const struct {
        sluice_dtype dt;
        const char *name;
        size_t size;
    } want[] = {
        {SLUICE_DTYPE_BOOL, "bool", 1},       {SLUICE_DTYPE_UINT8, "uint8", 1},
        {SLUICE_DTYPE_INT8, "int8", 1},       {SLUICE_DTYPE_UINT16, "uint16", 2},
        {SLUICE_DTYPE_INT16, "int16", 2},     {SLUICE_DTYPE_UINT32, "uint32", 4},
        {SLUICE_DTYPE_INT32, "int32", 4},     {SLUICE_DTYPE_UINT64, "uint64", 8},
        {SLUICE_DTYPE_INT64, "int64", 8},     {SLUICE_DTYPE_FLOAT16, "float16", 2},
        {SLUICE_DTYPE_BFLOAT16, "bfloat16", 2}, {SLUICE_DTYPE_FLOAT32, "float32", 4},
        {SLUICE_DTYPE_FLOAT64, "float64", 8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *n = sluice_dtype_name(want[i].dt);
        CHECK(n && strcmp(n, want[i].name) == 0);
        CHECK(sluice_dtype_size(want[i].dt) == want[i].size);
        CHECK(sluice_dtype_from_name(n, strlen(n)) == want[i].dt);
    }
    CHECK(sluice_dtype_name(SLUICE_DTYPE_INVALID) == NULL);
    CHECK(sluice_dtype_name((sluice_dtype)99) == NULL);
    CHECK(sluice_dtype_size(SLUICE_DTYPE_INVALID) == 0);
    CHECK(sluice_dtype_size((sluice_dtype)99) == 0);
    CHECK(sluice_dtype_from_name("float", 5) == SLUICE_DTYPE_INVALID);
    CHECK(sluice_dtype_from_name("uint8x", 6) == SLUICE_DTYPE_INVALID);
    CHECK(sluice_dtype_from_name("uint8x", 5) == SLUICE_DTYPE_UINT8); /* length-bounded */
    CHECK(sluice_dtype_from_name(NULL, 0) == SLUICE_DTYPE_INVALID);
    CHECK(sluice_dtype_from_name("", 0) == SLUICE_DTYPE_INVALID);
}

static int freed;
static void count_free(void *owner)
{
    freed += *(int *)owner;
}

static void test_frame_owner(void)
{
    sluicei_buf buf = {0};
    sluicei_batch_meta m = meta();
    CHECK(sluicei_wire_encode_records(&buf, &m, NULL, 0) == SLUICE_OK);
    int one = 1;
    freed = 0;
    sluice_batch *b = NULL;
    char err[64];
    CHECK(sluicei_wire_decode(buf.data, buf.len, MAX_BYTES, count_free, &one, &b, err,
                              sizeof err) == SLUICE_OK);
    CHECK(freed == 0);
    sluice_batch_free(b);
    CHECK(freed == 1);
    /* On failure the caller keeps the frame. */
    CHECK(sluicei_wire_decode(buf.data, buf.len - 1, MAX_BYTES, count_free, &one, &b, err,
                              sizeof err) == SLUICE_ERR_PROTOCOL);
    CHECK(b == NULL && freed == 1);
    sluice_batch_free(NULL);
    sluicei_buf_free(&buf);
}

/* ---- hostile input ------------------------------------------------------ */

static void test_allocation_bombs(void)
{
    static const uint8_t arr[] = {0xdd, 0x20, 0x00, 0x00, 0x00};
    static const uint8_t map[] = {0xdf, 0x20, 0x00, 0x00, 0x00};
    sluice_batch *b = NULL;
    CHECK(sluice_wire_decode(arr, sizeof arr, 1 << 20, &b) == SLUICE_ERR_PROTOCOL);
    CHECK(b == NULL);
    CHECK(rejects(arr, sizeof arr, SLUICE_ERR_PROTOCOL,
                  "offset 5: array of 536870912 elements but only 0 bytes remain"));
    CHECK(sluice_wire_decode(map, sizeof map, 1 << 20, &b) == SLUICE_ERR_PROTOCOL);
    CHECK(b == NULL);
    CHECK(rejects(map, sizeof map, SLUICE_ERR_PROTOCOL,
                  "map of 536870912 entries but only 0 bytes remain"));

    /* The same bombs nested inside an otherwise fine frame, and each kind
     * of length field. */
    static const uint8_t bombs[][6] = {
        {0xdd, 0x20, 0x00, 0x00, 0x00}, {0xdf, 0x20, 0x00, 0x00, 0x00},
        {0xdc, 0xff, 0xff},             {0xde, 0xff, 0xff},
        {0xc6, 0xff, 0xff, 0xff, 0xff}, {0xdb, 0xff, 0xff, 0xff, 0xff},
        {0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}, {0xd8, 0x01},
        {0x91, 0xdd, 0x7f, 0xff, 0xff, 0xff}, {0x81, 0xa0, 0xdf, 0x10, 0x00, 0x00},
    };
    static const size_t sizes[] = {5, 5, 3, 3, 5, 5, 6, 2, 6, 6};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        struct fb f;
        msgpack_packer *pk = frame_head(&f, 5);
        str(pk, "n");
        msgpack_pack_uint64(pk, 0);
        str(pk, "r");
        msgpack_pack_array(pk, 0);
        str(pk, "bomb");
        msgpack_sbuffer_write(&f.sb, (const char *)bombs[i], sizes[i]);
        CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "remain"));
        /* Alone, they are refused before anything is read past them. */
        CHECK(rejects(bombs[i], sizes[i], SLUICE_ERR_PROTOCOL, "offset"));
        fb_free(&f);
    }

    /* A million nested arrays in a frame: refused at the depth limit, with
     * no recursion. */
    static const uint8_t head[] = {0x82, 0xa1, 'v', 0x01, 0xa4, 'd', 'e', 'e', 'p'};
    size_t deep = 1000000;
    uint8_t *d = malloc(deep);
    memset(d, 0x91, deep);
    memcpy(d, head, sizeof head);
    d[deep - 1] = 0xc0;
    CHECK(rejects(d, deep, SLUICE_ERR_PROTOCOL, "nested deeper than"));
    free(d);
}

/* Every proper prefix of a valid frame is refused, cleanly. */
static void test_truncations(void)
{
    struct fb f1, f2;
    record_frame(&f1, NFIELD, NVAL);
    tensor_frame(&f2, NTFIELD, NVAL);
    const struct fb *frames[] = {&f1, &f2};
    for (size_t i = 0; i < 2; i++) {
        const msgpack_sbuffer *sb = &frames[i]->sb;
        CHECK(accepts(sb->data, sb->size));
        for (size_t k = 0; k < sb->size; k++) {
            char err[128];
            if (decode_copy(sb->data, k, MAX_BYTES, err, sizeof err) != SLUICE_ERR_PROTOCOL) {
                CHECK(!"a truncated frame was not refused");
                break;
            }
        }
    }
    fb_free(&f1);
    fb_free(&f2);
}

/* Every byte of a valid frame replaced by a few values: accepted or
 * refused, never a crash or a leak (ASan decides). */
static void test_corruptions(void)
{
    static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0x9f, 0xc1, 0xc4, 0xc6, 0xcf,
                                   0xd3, 0xd9, 0xdb, 0xdd, 0xdf, 0xff};
    struct fb f1, f2;
    record_frame(&f1, NFIELD, NVAL);
    tensor_frame(&f2, NTFIELD, NVAL);
    const struct fb *frames[] = {&f1, &f2};
    for (size_t i = 0; i < 2; i++) {
        const msgpack_sbuffer *sb = &frames[i]->sb;
        uint8_t *q = malloc(sb->size);
        for (size_t k = 0; k < sb->size; k++) {
            for (size_t v = 0; v < sizeof vals; v++) {
                memcpy(q, sb->data, sb->size);
                q[k] = vals[v];
                char err[128];
                sluice_err e = decode_copy(q, sb->size, MAX_BYTES, err, sizeof err);
                CHECK(e == SLUICE_OK || e == SLUICE_ERR_PROTOCOL);
                sluice_batch_id id;
                (void)sluicei_wire_peek_id(q, sb->size, &id);
            }
        }
        free(q);
    }
    fb_free(&f1);
    fb_free(&f2);
}

static void test_wrong_types(void)
{
    static const enum val ok_kind[NFIELD] = {V_UINT, NVAL, V_STR, V_UINT, V_UINT, V_ARR};
    for (int fl = 0; fl < NFIELD; fl++) {
        for (int v = 0; v < NVAL; v++) {
            if ((int)ok_kind[fl] == v)
                continue;
            struct fb f;
            char want[32];
            record_frame(&f, fl, (enum val)v);
            snprintf(want, sizeof want, "field \"%s\"", field_names[fl]);
            if (!rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, want))
                fprintf(stderr, "    (field %s, value kind %d)\n", field_names[fl], v);
            fb_free(&f);
        }
    }
    for (int fl = 0; fl < NTFIELD; fl++) {
        for (int v = 0; v < NVAL; v++) {
            struct fb f;
            tensor_frame(&f, fl, (enum val)v);
            if (!rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "tensor \"img\""))
                fprintf(stderr, "    (tensor field %d, value kind %d)\n", fl, v);
            fb_free(&f);
        }
    }
    /* "x" itself, and a tensor that is not a map. */
    for (int v = 0; v < NVAL; v++) {
        struct fb f;
        msgpack_packer *pk = frame_head(&f, 4);
        str(pk, "n");
        msgpack_pack_uint64(pk, 0);
        str(pk, "x");
        if (v == V_MAP) {
            msgpack_pack_map(pk, 1);
            str(pk, "img");
            pack_val(pk, V_ARR);
            CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL,
                          "tensor \"img\": expected a map"));
        } else {
            pack_val(pk, (enum val)v);
            CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "field \"x\""));
        }
        fb_free(&f);
    }
    /* A record that is neither bin nor str. */
    struct fb f;
    msgpack_packer *pk = frame_head(&f, 4);
    str(pk, "n");
    msgpack_pack_uint64(pk, 2);
    str(pk, "r");
    msgpack_pack_array(pk, 2);
    bin(pk, "a", 1);
    msgpack_pack_uint64(pk, 7);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "record 1 is a uint"));
    fb_free(&f);
}

static void test_version(void)
{
    static const uint8_t v2[] = {0x84, 0xa1, 'v', 0x02, 0xa2, 'i', 'd', 0x93, 0, 0, 0,
                                 0xa1, 'n', 0x00, 0xa1, 'r', 0x90};
    CHECK(rejects(v2, sizeof v2, SLUICE_ERR_PROTOCOL,
                  "unsupported wire version 2 (this library reads 1)"));
    static const uint8_t v0[] = {0x81, 0xa1, 'v', 0x00};
    CHECK(rejects(v0, sizeof v0, SLUICE_ERR_PROTOCOL, "field \"v\": expected a positive integer"));
    static const uint8_t idfirst[] = {0x84, 0xa2, 'i', 'd', 0x93, 0, 0, 0, 0xa1, 'v', 0x01,
                                      0xa1, 'n', 0x00, 0xa1, 'r', 0x90};
    CHECK(rejects(idfirst, sizeof idfirst, SLUICE_ERR_PROTOCOL, "first key is not \"v\""));
    static const uint8_t intfirst[] = {0x81, 0x01, 0x01};
    CHECK(rejects(intfirst, sizeof intfirst, SLUICE_ERR_PROTOCOL, "first key is not \"v\""));
    static const uint8_t empty_map[] = {0x80};
    CHECK(rejects(empty_map, sizeof empty_map, SLUICE_ERR_PROTOCOL, "first key is not \"v\""));
    static const uint8_t array[] = {0x92, 0xa1, 'v', 0x01};
    CHECK(rejects(array, sizeof array, SLUICE_ERR_PROTOCOL, "frame is not a map (got array)"));
    CHECK(rejects("", 0, SLUICE_ERR_PROTOCOL, "empty frame"));
    /* A second "v" later in the map is a duplicate, not a new version. */
    static const uint8_t twice[] = {0x85, 0xa1, 'v', 0x01, 0xa2, 'i', 'd', 0x93, 0, 0, 0,
                                    0xa1, 'n', 0x00, 0xa1, 'r', 0x90, 0xa1, 'v', 0x02};
    CHECK(rejects(twice, sizeof twice, SLUICE_ERR_PROTOCOL, "field \"v\" appears twice"));
}

static void test_frame_limits(void)
{
    struct fb f;
    record_frame(&f, NFIELD, NVAL);
    /* Trailing bytes. */
    uint8_t *q = malloc(f.sb.size + 3);
    memcpy(q, f.sb.data, f.sb.size);
    memset(q + f.sb.size, 0xc0, 3);
    CHECK(rejects(q, f.sb.size + 3, SLUICE_ERR_PROTOCOL, "3 trailing bytes after the frame"));
    free(q);
    /* Too big: one byte over the maximum. */
    char err[128] = "";
    CHECK(decode_copy(f.sb.data, f.sb.size, f.sb.size - 1, err, sizeof err) == SLUICE_ERR_TOOBIG);
    char want[128];
    snprintf(want, sizeof want, "frame of %zu bytes exceeds the maximum of %zu", f.sb.size,
             f.sb.size - 1);
    CHECK(strcmp(err, want) == 0);
    CHECK(decode_copy(f.sb.data, f.sb.size, f.sb.size, err, sizeof err) == SLUICE_OK);
    /* Error text is truncated safely, and optional. */
    char small[8];
    CHECK(sluicei_wire_validate(f.sb.data, f.sb.size, 1, small, sizeof small) == SLUICE_ERR_TOOBIG);
    CHECK(strlen(small) == sizeof small - 1);
    CHECK(sluicei_wire_validate(f.sb.data, f.sb.size, 1, NULL, 0) == SLUICE_ERR_TOOBIG);
    fb_free(&f);

    /* The reserved type byte 0xc1, hidden in an unknown key. */
    msgpack_packer *pk = frame_head(&f, 5);
    str(pk, "n");
    msgpack_pack_uint64(pk, 0);
    str(pk, "r");
    msgpack_pack_array(pk, 0);
    str(pk, "z");
    msgpack_sbuffer_write(&f.sb, "\xc1", 1);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "invalid type byte 0xc1"));
    fb_free(&f);
    /* A float cut short at the end of the frame. */
    static const uint8_t cut[] = {0x82, 0xa1, 'v', 0x01, 0xa1, 'z', 0xcb, 0, 0};
    CHECK(rejects(cut, sizeof cut, SLUICE_ERR_PROTOCOL, "offset 7: float needs 8 bytes"));
}

/* An unknown key holding arrays nested `levels` deep (plus the frame map). */
static void nested_frame(struct fb *f, int levels)
{
    msgpack_packer *pk = frame_head(f, 5);
    str(pk, "n");
    msgpack_pack_uint64(pk, 0);
    str(pk, "r");
    msgpack_pack_array(pk, 0);
    str(pk, "deep");
    for (int i = 0; i < levels; i++)
        msgpack_pack_array(pk, i + 1 < levels ? 1 : 0);
}

static void test_depth(void)
{
    struct fb f;
    nested_frame(&f, SLUICE_MAX_DEPTH - 1);
    CHECK(accepts(f.sb.data, f.sb.size));
    fb_free(&f);
    nested_frame(&f, SLUICE_MAX_DEPTH);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "nested deeper than 6 levels"));
    fb_free(&f);
}

static void test_tensor_checks(void)
{
    struct fb f;
    uint64_t s[SLUICE_MAX_DIMS + 1] = {1, 28, 28, 1, 1, 1, 1, 1, 1};
    shaped_frame(&f, 1, "", s, 3, 784);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "unknown dtype \"\""));
    fb_free(&f);
    shaped_frame(&f, 1, "uint8", s, 3, 100);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL,
                  "tensor \"a\": data is 100 bytes, shape and dtype need 784"));
    fb_free(&f);
    shaped_frame(&f, 1, "float64", s, 3, 784);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "need 6272"));
    fb_free(&f);
    shaped_frame(&f, 2, "uint8", s, 3, 784);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "shape[0] is 1 but \"n\" is 2"));
    fb_free(&f);
    shaped_frame(&f, 1, "uint8", s, SLUICE_MAX_DIMS, 784);
    CHECK(accepts(f.sb.data, f.sb.size));
    fb_free(&f);
    shaped_frame(&f, 1, "uint8", s, SLUICE_MAX_DIMS + 1, 784);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "array of 1 to 8"));
    fb_free(&f);
    shaped_frame(&f, 1, "uint8", s, 0, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "array of 1 to 8"));
    fb_free(&f);
    /* A dimension of 0 carries any number of rows in no bytes: "n" is held
     * to SLUICE_MAX_RECORDS like a record count, so that a reader looping
     * over the rows does not loop 2^63 times. */
    uint64_t rows[2] = {(uint64_t)1 << 63, 0};
    shaped_frame(&f, rows[0], "uint8", rows, 2, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "more than the limit"));
    fb_free(&f);
    rows[0] = SLUICE_MAX_RECORDS;
    shaped_frame(&f, rows[0], "uint8", rows, 2, 0);
    CHECK(accepts(f.sb.data, f.sb.size));
    fb_free(&f);
    {
        sluicei_buf buf = {0};
        sluicei_batch_meta m = meta();
        CHECK(sluicei_wire_encode_tensors(&buf, &m, (uint64_t)SLUICE_MAX_RECORDS + 1, NULL, 0) ==
              SLUICE_ERR_TOOBIG);
        CHECK(sluicei_wire_encode_tensors(&buf, &m, SLUICE_MAX_RECORDS, NULL, 0) == SLUICE_OK);
        sluicei_buf_free(&buf);
    }
    /* A shape whose product overflows, and one that wraps to a small size. */
    uint64_t huge[3] = {1, UINT64_MAX, 2};
    shaped_frame(&f, 1, "uint8", huge, 3, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "overflow"));
    fb_free(&f);
    uint64_t wrap[3] = {1, (uint64_t)1 << 62, 4};
    shaped_frame(&f, 1, "uint8", wrap, 3, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "overflow"));
    fb_free(&f);
    /* Zero rows is fine. */
    uint64_t zero[2] = {0, 5};
    shaped_frame(&f, 0, "int32", zero, 2, 0);
    CHECK(accepts(f.sb.data, f.sb.size));
    fb_free(&f);

    /* Names: empty, too long, duplicated, with NUL; too many tensors. */
    static const char *const bad_names[] = {
        "", "0123456789012345678901234567890123456789012345678901234567890123X"};
    for (int i = 0; i < 2; i++) {
        msgpack_packer *pk = frame_head(&f, 4);
        str(pk, "n");
        msgpack_pack_uint64(pk, 0);
        str(pk, "x");
        msgpack_pack_map(pk, 1);
        str(pk, bad_names[i]);
        msgpack_pack_map(pk, 0);
        CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "tensor name must be a str"));
        fb_free(&f);
    }
    for (int dup = 0; dup < 2; dup++) {
        msgpack_packer *pk = frame_head(&f, 4);
        str(pk, "n");
        msgpack_pack_uint64(pk, 0);
        str(pk, "x");
        msgpack_pack_map(pk, 2);
        for (int i = 0; i < 2; i++) {
            msgpack_pack_str_with_body(pk, dup ? "ab" : "a\0b", 3 - dup);
            msgpack_pack_map(pk, 3);
            str(pk, "dtype");
            str(pk, "bool");
            str(pk, "shape");
            msgpack_pack_array(pk, 1);
            msgpack_pack_uint64(pk, 0);
            str(pk, "data");
            bin(pk, "", 0);
        }
        CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL,
                      dup ? "tensor \"ab\" appears twice" : "name contains a NUL byte"));
        fb_free(&f);
    }
    {
        msgpack_packer *pk = frame_head(&f, 4);
        str(pk, "n");
        msgpack_pack_uint64(pk, 0);
        str(pk, "x");
        msgpack_pack_map(pk, SLUICE_MAX_TENSORS + 1);
        for (int i = 0; i <= SLUICE_MAX_TENSORS; i++) {
            char name[16];
            snprintf(name, sizeof name, "t%d", i);
            str(pk, name);
            msgpack_pack_nil(pk);
        }
        CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "65 tensors, at most 64"));
        fb_free(&f);
    }
    /* Missing and duplicated tensor fields. */
    {
        msgpack_packer *pk = frame_head(&f, 4);
        str(pk, "n");
        msgpack_pack_uint64(pk, 0);
        str(pk, "x");
        msgpack_pack_map(pk, 1);
        str(pk, "a");
        msgpack_pack_map(pk, 2);
        str(pk, "dtype");
        str(pk, "bool");
        str(pk, "data");
        bin(pk, "", 0);
        CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "missing \"shape\""));
        fb_free(&f);
    }
    {
        msgpack_packer *pk = frame_head(&f, 4);
        str(pk, "n");
        msgpack_pack_uint64(pk, 0);
        str(pk, "x");
        msgpack_pack_map(pk, 1);
        str(pk, "a");
        msgpack_pack_map(pk, 2);
        str(pk, "dtype");
        str(pk, "bool");
        str(pk, "dtype");
        str(pk, "bool");
        CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "\"dtype\" appears twice"));
        fb_free(&f);
    }
    {
        msgpack_packer *pk = frame_head(&f, 4);
        str(pk, "n");
        msgpack_pack_uint64(pk, 0);
        str(pk, "x");
        msgpack_pack_map(pk, 1);
        str(pk, "a");
        msgpack_pack_map(pk, 1);
        msgpack_pack_uint64(pk, 1);
        str(pk, "bool");
        CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "tensor \"a\": key is a uint"));
        fb_free(&f);
    }
}

static void test_record_checks(void)
{
    struct fb f;
    msgpack_packer *pk = frame_head(&f, 4);
    str(pk, "n");
    msgpack_pack_uint64(pk, 3);
    str(pk, "r");
    msgpack_pack_array(pk, 2);
    bin(pk, "a", 1);
    bin(pk, "b", 1);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "2 records but \"n\" is 3"));
    fb_free(&f);

    /* Missing fields, and both payloads at once. */
    pk = fb_init(&f);
    msgpack_pack_map(pk, 3);
    str(pk, "v");
    msgpack_pack_uint64(pk, 1);
    str(pk, "n");
    msgpack_pack_uint64(pk, 0);
    str(pk, "r");
    msgpack_pack_array(pk, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "missing field \"id\""));
    fb_free(&f);
    pk = frame_head(&f, 3);
    str(pk, "r");
    msgpack_pack_array(pk, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "missing field \"n\""));
    fb_free(&f);
    pk = frame_head(&f, 3);
    str(pk, "n");
    msgpack_pack_uint64(pk, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "missing field \"r\" or \"x\""));
    fb_free(&f);
    pk = frame_head(&f, 5);
    str(pk, "n");
    msgpack_pack_uint64(pk, 0);
    str(pk, "r");
    msgpack_pack_array(pk, 0);
    str(pk, "x");
    msgpack_pack_map(pk, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "\"r\" and \"x\" both present"));
    fb_free(&f);

    /* Producer id: too long, or with a NUL. */
    pk = frame_head(&f, 5);
    str(pk, "p");
    str(pk, "0123456789012345678901234567890123456789012345678901234567890123X");
    str(pk, "n");
    msgpack_pack_uint64(pk, 0);
    str(pk, "r");
    msgpack_pack_array(pk, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "field \"p\""));
    fb_free(&f);
    pk = frame_head(&f, 5);
    str(pk, "p");
    msgpack_pack_str_with_body(pk, "a\0b", 3);
    str(pk, "n");
    msgpack_pack_uint64(pk, 0);
    str(pk, "r");
    msgpack_pack_array(pk, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "contains a NUL byte"));
    fb_free(&f);
    /* A top-level key that is not a str. */
    pk = frame_head(&f, 5);
    msgpack_pack_uint64(pk, 7);
    msgpack_pack_nil(pk);
    str(pk, "n");
    msgpack_pack_uint64(pk, 0);
    str(pk, "r");
    msgpack_pack_array(pk, 0);
    CHECK(rejects(f.sb.data, f.sb.size, SLUICE_ERR_PROTOCOL, "top-level key is a uint"));
    fb_free(&f);
}

/* Unknown keys are skipped wherever they are, with any content; integers
 * in signed encodings are read by value. */
static void test_unknown_keys(void)
{
    struct fb f;
    msgpack_packer *pk = fb_init(&f);
    msgpack_pack_map(pk, 7);
    str(pk, "v");
    msgpack_pack_uint64(pk, 1);
    str(pk, "zz");
    msgpack_pack_map(pk, 3);
    str(pk, "a");
    msgpack_pack_array(pk, 3);
    msgpack_pack_int64(pk, -5);
    msgpack_pack_float(pk, 1.5f);
    msgpack_pack_map(pk, 1);
    msgpack_pack_nil(pk);
    msgpack_pack_true(pk);
    msgpack_pack_ext_with_body(pk, "1234", 4, 1);
    bin(pk, "xx", 2);
    msgpack_pack_double(pk, 2.5);
    msgpack_pack_ext_with_body(pk, "123", 3, -1);
    str(pk, "id");
    pack_id(pk, 1, 2, 3);
    str(pk, "n");
    /* int8 0x02: a non-negative value in a signed encoding. */
    msgpack_sbuffer_write(&f.sb, "\xd0\x02", 2);
    str(pk, "x");
    msgpack_pack_map(pk, 1);
    str(pk, "a");
    msgpack_pack_map(pk, 4);
    str(pk, "order");
    str(pk, "C");
    str(pk, "data");
    bin(pk, "\x01\x00", 2);
    str(pk, "shape");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, 2);
    str(pk, "dtype");
    str(pk, "bool");
    msgpack_pack_str_with_body(pk, "t\0x", 3); /* unknown, not "t" */
    msgpack_pack_nil(pk);
    str(pk, "future");
    msgpack_pack_array(pk, 0);
    sluice_batch *b = NULL;
    CHECK(sluice_wire_decode(f.sb.data, f.sb.size, MAX_BYTES, &b) == SLUICE_OK);
    if (b) {
        CHECK(sluice_batch_num_records(b) == 2);
        const sluice_tensor *t = sluice_batch_find_tensor(b, "a");
        CHECK(t && t->dtype == SLUICE_DTYPE_BOOL && t->nbytes == 2 && t->ndim == 1);
        CHECK(sluice_batch_created_us(b) == 0);
    }
    sluice_batch_free(b);
    fb_free(&f);
}

/* ---- encoder and buffer ------------------------------------------------- */

static void test_encoder_rejects(void)
{
    sluicei_buf buf = {0};
    sluicei_batch_meta m = meta();
    m.producer = "0123456789012345678901234567890123456789012345678901234567890123X";
    CHECK(sluicei_wire_encode_records(&buf, &m, NULL, 0) == SLUICE_ERR_INVALID);
    m.producer = NULL; /* means "" */
    CHECK(sluicei_wire_encode_records(&buf, &m, NULL, 0) == SLUICE_OK);
    CHECK(sluicei_wire_encode_records(&buf, NULL, NULL, 0) == SLUICE_ERR_INVALID);
    CHECK(sluicei_wire_encode_records(&buf, &m, NULL, 1) == SLUICE_ERR_INVALID);
    sluice_record nodata = {NULL, 3};
    CHECK(sluicei_wire_encode_records(&buf, &m, &nodata, 1) == SLUICE_ERR_INVALID);

    uint8_t d[6] = {0};
    sluice_tensor ok = {"a", SLUICE_DTYPE_UINT16, 2, {1, 3}, d, 6};
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, &ok, 1) == SLUICE_OK);
    sluice_tensor t = ok;
    t.shape[0] = 2; /* != n */
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, &t, 1) == SLUICE_ERR_INVALID);
    t = ok;
    t.nbytes = 5;
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, &t, 1) == SLUICE_ERR_INVALID);
    t = ok;
    t.dtype = SLUICE_DTYPE_INVALID;
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, &t, 1) == SLUICE_ERR_INVALID);
    t = ok;
    t.ndim = 0;
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, &t, 1) == SLUICE_ERR_INVALID);
    t = ok;
    t.ndim = SLUICE_MAX_DIMS + 1;
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, &t, 1) == SLUICE_ERR_INVALID);
    t = ok;
    t.name = "";
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, &t, 1) == SLUICE_ERR_INVALID);
    t = ok;
    t.shape[1] = UINT64_MAX;
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, &t, 1) == SLUICE_ERR_INVALID);
    /* Lengths msgpack cannot carry (bin 32 and arrays stop at 2^32-1);
     * refused before a byte is read. */
    sluice_record huge = {"x", (size_t)UINT32_MAX + 1};
    CHECK(sluicei_wire_encode_records(&buf, &m, &huge, 1) == SLUICE_ERR_TOOBIG);
    t = ok;
    t.dtype = SLUICE_DTYPE_UINT8;
    t.shape[1] = (uint64_t)UINT32_MAX + 1;
    t.nbytes = (size_t)UINT32_MAX + 1;
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, &t, 1) == SLUICE_ERR_TOOBIG);
    sluice_tensor two[2] = {ok, ok};
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, two, 2) == SLUICE_ERR_INVALID);
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, NULL, 1) == SLUICE_ERR_INVALID);
    CHECK(sluicei_wire_encode_tensors(&buf, &m, 1, two, SLUICE_MAX_TENSORS + 1) ==
          SLUICE_ERR_INVALID);
    sluicei_buf_free(&buf);
}

static void test_buffer_reuse(void)
{
    sluicei_buf buf = {0};
    CHECK(sluicei_buf_append(&buf, "abc", 3) == SLUICE_OK);
    CHECK(buf.len == 3 && buf.cap >= 3 && memcmp(buf.data, "abc", 3) == 0);
    CHECK(sluicei_buf_append(&buf, NULL, 0) == SLUICE_OK);
    CHECK(sluicei_buf_reserve(&buf, SIZE_MAX) == SLUICE_ERR_NOMEM);
    CHECK(buf.len == 3);
    sluicei_batch_meta m = meta();
    uint8_t big[5000] = {0};
    sluice_record r1 = {big, sizeof big}, r2 = {"x", 1};
    CHECK(sluicei_wire_encode_records(&buf, &m, &r1, 1) == SLUICE_OK);
    uint8_t *data = buf.data;
    size_t cap = buf.cap;
    /* A smaller frame reuses the buffer: len reset, no reallocation. */
    CHECK(sluicei_wire_encode_records(&buf, &m, &r2, 1) == SLUICE_OK);
    CHECK(buf.data == data && buf.cap == cap && buf.len < 64);
    CHECK(accepts(buf.data, buf.len));
    sluicei_buf_free(&buf);
    CHECK(buf.data == NULL && buf.len == 0 && buf.cap == 0);
    sluicei_buf_free(&buf);
    sluicei_buf_free(NULL);
}

/* The record table a decode allocates is bounded by SLUICE_MAX_RECORDS,
 * on both sides: the encoder refuses more, the validator too. */
static void test_record_limit(void)
{
    size_t n = (size_t)SLUICE_MAX_RECORDS + 1;
    sluice_record *recs = calloc(n, sizeof *recs);
    CHECK(recs != NULL);
    if (!recs)
        return;
    sluicei_buf buf = {0};
    sluicei_batch_meta m = meta();
    CHECK(sluicei_wire_encode_records(&buf, &m, recs, n) == SLUICE_ERR_TOOBIG);
    CHECK(sluicei_wire_encode_records(&buf, &m, recs, n - 1) == SLUICE_OK);
    /* The encoder's frame, turned into one record more by hand: "n" and the
     * array32 header both say n, and one more empty bin goes at the end. */
    sluice_batch *b = NULL;
    CHECK(sluice_wire_decode(buf.data, buf.len, buf.len, &b) == SLUICE_OK);
    sluice_batch_free(b);
    uint8_t *big = malloc(buf.len + 2);
    CHECK(big != NULL);
    if (big) {
        memcpy(big, buf.data, buf.len);
        size_t len = buf.len;
        /* Patch every big-endian 32-bit copy of n - 1 (the "n" value and
         * the array header) to n. */
        uint8_t was[4] = {(uint8_t)((n - 1) >> 24), (uint8_t)((n - 1) >> 16),
                          (uint8_t)((n - 1) >> 8), (uint8_t)(n - 1)};
        uint8_t now[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
        int patched = 0;
        for (size_t i = 0; i + 4 <= 64 && i + 4 <= len; i++)
            if (memcmp(big + i, was, 4) == 0) {
                memcpy(big + i, now, 4);
                patched++;
            }
        CHECK(patched == 2);
        big[len++] = 0xc4;
        big[len++] = 0x00;
        char err[256] = "";
        b = NULL;
        CHECK(sluicei_wire_decode(big, len, len, NULL, NULL, &b, err, sizeof err) ==
              SLUICE_ERR_PROTOCOL);
        CHECK(b == NULL);
        CHECK(strstr(err, "more than the limit") != NULL);
        free(big);
    }
    sluicei_buf_free(&buf);
    free(recs);
}

const struct test wire_tests[] = {
    {"wire/record limit", test_record_limit},
    {"wire/records round trip", test_records_roundtrip},
    {"wire/canonical encoding", test_encoding_is_canonical},
    {"wire/1 MiB record", test_big_record},
    {"wire/zero records", test_zero_records},
    {"wire/70000 records", test_many_records},
    {"wire/tensors round trip", test_tensors_roundtrip},
    {"wire/python frames", test_python_frames},
    {"wire/batch ids", test_ids},
    {"wire/peek id", test_peek_id},
    {"wire/dtypes", test_dtypes},
    {"wire/frame owner", test_frame_owner},
    {"wire/allocation bombs", test_allocation_bombs},
    {"wire/truncations", test_truncations},
    {"wire/corruptions", test_corruptions},
    {"wire/wrong types", test_wrong_types},
    {"wire/version and first key", test_version},
    {"wire/trailing bytes and size limit", test_frame_limits},
    {"wire/nesting depth", test_depth},
    {"wire/tensor checks", test_tensor_checks},
    {"wire/record checks", test_record_checks},
    {"wire/unknown keys", test_unknown_keys},
    {"wire/encoder rejects", test_encoder_rejects},
    {"wire/buffer reuse", test_buffer_reuse},
    {NULL, NULL},
};
