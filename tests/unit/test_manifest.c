/* Manifests and task definitions (producer/src/manifest.h). */
#include "test.h"

#include "manifest.h"
#include "reader.h"
#include "taskdef.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A scratch folder with data files and a manifest in it. */
static char dir[64];

static void put(const char *name, const void *p, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(n == 0 || fwrite(p, 1, n, f) == n);
        fclose(f);
    }
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/sluice-manifest-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    put("a.txt", "1\n2\n3\n4\n5\n6\n7\n", 14);
    put("b.txt", "x\ny\n", 4);
    char fixed[100];
    memset(fixed, 'f', sizeof fixed);
    put("f.bin", fixed, sizeof fixed);    /* 10 records of 10 bytes */
    /* IDX pair of 5 images 2x2 and 5 labels. */
    uint8_t img[16 + 20] = {0, 0, 8, 3, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 2};
    uint8_t lab[8 + 5] = {0, 0, 8, 1, 0, 0, 0, 5};
    put("img.idx", img, sizeof img);
    put("lab.idx", lab, sizeof lab);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/jpegs", dir);
    CHECK(mkdir(sub, 0700) == 0);
    put("jpegs/1.jpg", "J1", 2);
    put("jpegs/2.jpg", "J2", 2);
    put("jpegs/3.jpg", "J3", 2);
}

static void teardown(void)
{
    const char *names[] = {"a.txt", "b.txt", "f.bin", "img.idx", "lab.idx", "jpegs/1.jpg",
                           "jpegs/2.jpg", "jpegs/3.jpg", "jpegs", "m.txt"};
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (unlink(path) != 0)
            rmdir(path);
    }
    rmdir(dir);
}

/* Writes text as dir/m.txt and parses it. */
static sluice_err parse(const char *text, sluicei_shard **s, size_t *n, char *err,
                        size_t errlen)
{
    char path[256];
    put("m.txt", text, strlen(text));
    snprintf(path, sizeof path, "%s/m.txt", dir);
    return sluicei_manifest_parse(path, s, n, err, errlen);
}

/* The absolute path of name in dir (realpath: /tmp may be a link). */
static const char *abs_of(const char *name)
{
    static char out[PATH_MAX];
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (!realpath(p, out))
        snprintf(out, sizeof out, "%s", p);
    return out;
}

static void test_forms(void)
{
    sluicei_shard *s;
    size_t n;
    char err[512];
    char text[1024];
    setup();
    snprintf(text, sizeof text,
             "# a comment\n"
             "\n"
             "   lines a.txt\n"
             "lines\ta.txt  b.txt records=2:5\n"
             "lines %s/a.txt records=3:\n"
             "fixed:10 f.bin records=:4   # trailing words are paths, so no comments here\n",
             dir);
    CHECK(parse(text, &s, &n, err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strstr(err, "m.txt:6: #: No such file") != NULL);

    snprintf(text, sizeof text,
             "# a comment\n"
             "\n"
             "   lines a.txt\n"
             "lines\ta.txt  b.txt records=2:5\r\n"
             "lines %s/a.txt records=3:\n"
             "fixed:10 f.bin records=:4\n"
             "idx img.idx lab.idx\n"
             "files jpegs b.txt\n",
             dir);
    sluice_err e = parse(text, &s, &n, err, sizeof err);
    CHECK(e == SLUICE_OK);
    if (e != SLUICE_OK) {
        fprintf(stderr, "    %s\n", err);
        teardown();
        return;
    }
    CHECK(n == 6);
    CHECK(strcmp(s[0].reader, "lines") == 0 && s[0].npaths == 1 && s[0].start == 0 &&
          s[0].end == UINT64_MAX && strcmp(s[0].paths[0], abs_of("a.txt")) == 0);
    CHECK(s[1].npaths == 2 && s[1].start == 2 && s[1].end == 5 &&
          strcmp(s[1].paths[1], abs_of("b.txt")) == 0);
    CHECK(strcmp(s[2].reader, "lines") == 0 && s[2].start == 3 && s[2].end == UINT64_MAX);
    CHECK(strcmp(s[3].reader, "fixed:10") == 0 && s[3].start == 0 && s[3].end == 4);
    CHECK(strcmp(s[4].reader, "idx") == 0 && s[4].npaths == 2 &&
          strcmp(s[4].paths[1], abs_of("lab.idx")) == 0);
    CHECK(strcmp(s[5].reader, "files") == 0 && strcmp(s[5].paths[0], abs_of("jpegs")) == 0);
    sluicei_shards_free(s, n);
    sluicei_shards_free(NULL, 0);
    teardown();
}

/* A range past the data fails at submit, also for formats that must be
 * scanned to be counted. */
static void test_range_past_end(void)
{
    sluicei_shard *s;
    size_t n;
    char err[512];
    setup();
    CHECK(parse("lines a.txt\nlines a.txt records=0:1000\n", &s, &n, err, sizeof err) ==
          SLUICE_ERR_INVALID);
    CHECK(strstr(err, "m.txt:2: bad range 0:1000: the paths hold 7") != NULL);
    CHECK(parse("lines a.txt records=20:30\n", &s, &n, err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strstr(err, "m.txt:1: bad range 20:30") != NULL);
    CHECK(parse("lines a.txt records=0:7\n", &s, &n, err, sizeof err) == SLUICE_OK);
    if (n == 1)
        sluicei_shards_free(s, n);
    teardown();
}

static void test_split(void)
{
    sluicei_shard *s;
    size_t n;
    char err[512];
    setup();
    /* 7 lines in 3: 3, 2, 2. */
    CHECK(parse("lines a.txt split=3\n", &s, &n, err, sizeof err) == SLUICE_OK);
    CHECK(n == 3);
    if (n == 3)
        CHECK(s[0].start == 0 && s[0].end == 3 && s[1].start == 3 && s[1].end == 5 &&
              s[2].start == 5 && s[2].end == 7);
    sluicei_shards_free(s, n);
    /* A range, then split; the paths are counted together. */
    CHECK(parse("lines a.txt b.txt records=4: split=5\nfixed:10 f.bin split=10\n"
                "idx img.idx lab.idx split=2\nfiles jpegs split=3\n",
                &s, &n, err, sizeof err) == SLUICE_OK);
    CHECK(n == 20);
    if (n == 20) {
        CHECK(s[0].start == 4 && s[0].end == 5 && s[4].start == 8 && s[4].end == 9);
        CHECK(s[5].start == 0 && s[5].end == 1 && s[14].start == 9 && s[14].end == 10);
        CHECK(s[15].start == 0 && s[15].end == 3 && s[16].start == 3 && s[16].end == 5);
        CHECK(s[17].end == 1 && s[19].start == 2 && s[19].end == 3);
    }
    sluicei_shards_free(s, n);
    teardown();
}

/* Each malformed line gives "FILE:LINE: what". */
static void test_errors(void)
{
    static const struct {
        const char *text;
        int line;
        const char *what;
    } cases[] = {
        {"lines a.txt\ncsv a.txt\n", 2, "unknown format 'csv'"},
        {"\n\nlines\n", 3, "no path"},
        {"lines records=1:2\n", 1, "no path"},
        {"lines missing.txt\n", 1, "missing.txt: No such file or directory"},
        {"lines a.txt records=5:2\n", 1, "bad range"},
        {"lines a.txt records=x:2\n", 1, "bad range"},
        {"lines a.txt records=12\n", 1, "bad range"},
        {"lines a.txt records=1:2 records=1:2\n", 1, "records= given twice"},
        {"lines a.txt split=0\n", 1, "bad split"},
        {"lines a.txt split=2000000\n", 1, "bad split"},
        {"lines a.txt split=8\n", 1, "split=8 but the line selects only 7"},
        {"lines a.txt records=6: split=2\n", 1, "split=2 but the line selects only 1"},
        {"lines a.txt records=3:9 split=2\n", 1, "bad range 3:9: the paths hold 7"},
        {"fixed:10 f.bin records=0:11\n", 1, "bad range 0:11: the paths hold 10"},
        {"fixed:3 f.bin split=2\n", 1, "not a multiple of 3"},
        {"fixed:0 f.bin\n", 1, "fixed:SIZE needs SIZE"},
        {"idx img.idx\n", 1, "idx takes groups of 2 paths (images labels), got 1"},
        {"idx img.idx lab.idx records=0:6\n", 1, "bad range 0:6: the paths hold 5 images"},
        {"tfrecord:1 a.txt\n", 1, "takes no ':' argument"},
        {"# nothing\n\n", 0, "no shard"},
    };
    setup();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sluicei_shard *s = (sluicei_shard *)1;
        size_t n = 99;
        char err[512], want[256];
        sluice_err e = parse(cases[i].text, &s, &n, err, sizeof err);
        CHECK(e == SLUICE_ERR_INVALID && s == NULL && n == 0);
        if (cases[i].line)
            snprintf(want, sizeof want, "m.txt:%d: ", cases[i].line);
        else
            snprintf(want, sizeof want, "m.txt: ");
        int ok = strstr(err, want) && strstr(err, cases[i].what);
        CHECK(ok);
        if (!ok || e != SLUICE_ERR_INVALID)
            fprintf(stderr, "    case %zu: want '%s...%s', got %d '%s'\n", i, want,
                    cases[i].what, (int)e, err);
        if (e == SLUICE_OK)
            sluicei_shards_free(s, n);
    }
    sluicei_shard *s;
    size_t n;
    char err[512];
    CHECK(sluicei_manifest_parse("/nonexistent/m.txt", &s, &n, err, sizeof err) ==
          SLUICE_ERR_SYS);
    CHECK(strstr(err, "/nonexistent/m.txt: No such file") == err);
    teardown();
}

/* A relative manifest path: its paths are relative to its own folder,
 * not to the working directory. */
static void test_relative_manifest(void)
{
    sluicei_shard *s;
    size_t n;
    char err[512], cwd[PATH_MAX];
    setup();
    put("m.txt", "lines a.txt\n", 12);
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir("/tmp") == 0);
    const char *rel = dir + strlen("/tmp/");
    char mpath[128];
    snprintf(mpath, sizeof mpath, "%s/m.txt", rel);
    CHECK(sluicei_manifest_parse(mpath, &s, &n, err, sizeof err) == SLUICE_OK);
    CHECK(n == 1 && s && strcmp(s[0].paths[0], abs_of("a.txt")) == 0);
    sluicei_shards_free(s, n);
    CHECK(chdir(cwd) == 0);
    teardown();
}

/* A shard's definition as submit stores it, read back by the codec that
 * producers use (common/src/taskdef.c, tested on its own in
 * test_taskdef.c); the reader check is the job logic's. */
static void test_taskdef(void)
{
    char *paths[] = {"/data/a b.tfrecord", "/data/c"};
    sluicei_shard in = {.reader = "tfrecord", .paths = paths, .npaths = 2, .start = 5,
                        .end = UINT64_MAX};
    sluicei_taskdef *out;
    char err[256];
    char *def = sluicei_shard_encode(&in);
    CHECK(def && strcmp(def, "tfrecord\t5\t\t/data/a b.tfrecord\t/data/c") == 0);
    CHECK(sluicei_taskdef_decode(def, strlen(def), &out, err, sizeof err) == SLUICE_OK);
    CHECK(out && strcmp(out->reader, "tfrecord") == 0 && out->start == 5 &&
          out->end == UINT64_MAX && out->npaths == 2 && strcmp(out->paths[0], paths[0]) == 0 &&
          strcmp(out->paths[1], paths[1]) == 0);
    CHECK(out && sluicei_reader_check(out->reader, out->npaths, NULL, err, sizeof err) ==
                     SLUICE_OK);
    free(out);
    free(def);

    in.reader = "fixed:16";
    in.end = 18446744073709551614u;
    in.npaths = 1;
    def = sluicei_shard_encode(&in);
    CHECK(def && strcmp(def, "fixed:16\t5\t18446744073709551614\t/data/a b.tfrecord") == 0);
    CHECK(sluicei_taskdef_decode(def, strlen(def), &out, err, sizeof err) == SLUICE_OK);
    CHECK(out && out->end == 18446744073709551614u && out->npaths == 1);
    free(out);
    free(def);

    paths[0] = "/tab\there";
    CHECK(sluicei_shard_encode(&in) == NULL);

    /* Well formed, but no reader of this name, or of this path count. */
    static const char *bad[] = {"csv\t0\t\t/a", "idx\t0\t\t/a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(sluicei_taskdef_decode(bad[i], strlen(bad[i]), &out, err, sizeof err) ==
              SLUICE_OK);
        CHECK(out && sluicei_reader_check(out->reader, out->npaths, NULL, err, sizeof err) ==
                         SLUICE_ERR_INVALID);
        free(out);
    }
}

const struct test manifest_tests[] = {
    {"manifest/every form of a line", test_forms},
    {"manifest/range past the end", test_range_past_end},
    {"manifest/split=N", test_split},
    {"manifest/errors name the line", test_errors},
    {"manifest/paths relative to the manifest", test_relative_manifest},
    {"manifest/task definition round trip", test_taskdef},
    {NULL, NULL},
};
