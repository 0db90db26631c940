/* Key schema, batch ids, error mapping and script sources (common/src/proto.c).
 * No Redis needed. */
#include "test.h"

#include "lua_scripts.h"
#include "proto.h"

#include <string.h>

static void test_queue_names(void)
{
    static const char *const good[] = {"a", "train", "Train-set_1.v2", "0", "...", "-_-"};
    static const struct {
        const char *name;
        const char *expect;
    } bad[] = {
        {"", "1 to 128 characters, got 0"},
        {"a b", "character 2 (' ')"},
        {"q{x}", "character 2 ('{')"},
        {"a:b", "character 2 (':')"},
        {"a/b", "character 2 ('/')"},
        {"ab*", "character 3 ('*')"},
        {"tab\there", "character 4 ('?')"},
        {"caf\xc3\xa9", "character 4 ('?')"},
    };
    char err[256], name[SLUICE_MAX_QUEUE_NAME + 2];

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK(sluicei_queue_name_check(good[i], err, sizeof err) == SLUICE_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK(sluicei_queue_name_check(bad[i].name, err, sizeof err) == SLUICE_ERR_INVALID);
        if (!strstr(err, bad[i].expect)) {
            fprintf(stderr, "    '%s': got \"%s\", want \"%s\"\n", bad[i].name, err,
                    bad[i].expect);
            CHECK(strstr(err, bad[i].expect) != NULL);
        }
    }
    CHECK(sluicei_queue_name_check(NULL, err, sizeof err) == SLUICE_ERR_INVALID);

    memset(name, 'q', SLUICE_MAX_QUEUE_NAME);
    name[SLUICE_MAX_QUEUE_NAME] = '\0';
    CHECK(sluicei_queue_name_check(name, err, sizeof err) == SLUICE_OK);
    name[SLUICE_MAX_QUEUE_NAME] = 'q';
    name[SLUICE_MAX_QUEUE_NAME + 1] = '\0';
    CHECK(sluicei_queue_name_check(name, err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strstr(err, "got 129") != NULL);
}

static void test_keys(void)
{
    char key[SLUICE_MAX_KEY], name[SLUICE_MAX_QUEUE_NAME + 1];
    sluicei_key(key, "train", "meta");
    CHECK(strcmp(key, "sluice:{train}:meta") == 0);
    sluicei_key(key, "a.b-c_d", "pending:c1");
    CHECK(strcmp(key, "sluice:{a.b-c_d}:pending:c1") == 0);
    /* The longest queue name still fits with the longest fixed key name. */
    memset(name, 'q', SLUICE_MAX_QUEUE_NAME);
    name[SLUICE_MAX_QUEUE_NAME] = '\0';
    sluicei_key(key, name, "consumers");
    CHECK(strlen(key) == strlen("sluice:{}:consumers") + SLUICE_MAX_QUEUE_NAME);
    sluicei_keyf(key, "train", "pstats:%s", "p1");
    CHECK(strcmp(key, "sluice:{train}:pstats:p1") == 0);
    sluicei_key_ready(key, "train", 4294967295u, -1);
    CHECK(strcmp(key, "sluice:{train}:ready:4294967295") == 0);
    sluicei_key_ready(key, "t#3", 2, 7);
    CHECK(strcmp(key, "sluice:{t#3}:ready:2:7") == 0);
    /* Never past SLUICE_MAX_KEY, however long the formatted name. */
    char big[400];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    sluicei_keyf(key, name, "pending:%s", big);
    CHECK(strlen(key) == SLUICE_MAX_KEY - 1);
}

static void test_batch_id_roundtrip(void)
{
    static const sluice_batch_id ids[] = {
        {0, 0, 0},
        {1, 2, 3},
        {7, 1234567890123ull, 42},
        {UINT32_MAX, UINT64_MAX, UINT32_MAX},
        {0, UINT64_MAX, 0},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        char s[SLUICE_MAX_BATCH_ID];
        sluice_batch_id back = {9, 9, 9};
        sluicei_batch_id_str(s, ids[i]);
        CHECK(strlen(s) < SLUICE_MAX_BATCH_ID);
        CHECK(sluicei_batch_id_parse(s, strlen(s), &back) == 0);
        CHECK(back.epoch == ids[i].epoch && back.task == ids[i].task && back.seq == ids[i].seq);
    }
    char s[SLUICE_MAX_BATCH_ID];
    sluicei_batch_id_str(s, (sluice_batch_id){UINT32_MAX, UINT64_MAX, UINT32_MAX});
    CHECK(strcmp(s, "4294967295:18446744073709551615:4294967295") == 0);
    sluicei_batch_id_str(s, (sluice_batch_id){3, 17, 42});
    CHECK(strcmp(s, "3:17:42") == 0);
}

static void test_batch_id_rejects(void)
{
    static const char *const bad[] = {
        "",
        "1",
        "1:2",
        "1:2:",
        "1:2:3:4",
        "a:b:c",
        "1:2:3x",
        "1:2:3 ",
        " 1:2:3",
        ":1:2",
        "1::2",
        "-1:0:0",
        "+1:0:0",
        "4294967296:0:0",
        "0:18446744073709551616:0",
        "0:0:4294967296",
        "99999999999999999999999:0:0",
        "1:2:3\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sluice_batch_id id = {5, 6, 7};
        int r = sluicei_batch_id_parse(bad[i], strlen(bad[i]), &id);
        if (r != -1)
            fprintf(stderr, "    accepted '%s'\n", bad[i]);
        CHECK(r == -1);
        /* A rejected string leaves the id alone. */
        CHECK(id.epoch == 5 && id.task == 6 && id.seq == 7);
    }
}

/* The parser honours len: ids come from Redis replies, not C strings. */
static void test_batch_id_length(void)
{
    sluice_batch_id id;
    static const char buf[] = {'1', ':', '2', ':', '3', '4', '5'};
    CHECK(sluicei_batch_id_parse(buf, 5, &id) == 0);
    CHECK(id.epoch == 1 && id.task == 2 && id.seq == 3);
    CHECK(sluicei_batch_id_parse(buf, sizeof buf, &id) == 0);
    CHECK(id.seq == 345);
    CHECK(sluicei_batch_id_parse(buf, 4, &id) == -1);
    CHECK(sluicei_batch_id_parse("4294967295:0:4294967295", 23, &id) == 0);
    CHECK(id.epoch == UINT32_MAX && id.seq == UINT32_MAX);
}

static void test_reply_error_code(void)
{
    static const struct {
        const char *msg;
        sluice_err code;
    } cases[] = {
        {"NOQUEUE no such queue", SLUICE_ERR_NOQUEUE},
        {"EXISTS queue exists already", SLUICE_ERR_EXISTS},
        {"TOOBIG batch of 9 bytes exceeds the queue byte budget of 8", SLUICE_ERR_TOOBIG},
        {"OOM command not allowed when used memory > 'maxmemory'.", SLUICE_ERR_FULL},
        {"NOAUTH Authentication required.", SLUICE_ERR_AUTH},
        {"WRONGPASS invalid username-password pair or user is disabled.", SLUICE_ERR_AUTH},
        {"NOPERM this user has no permissions to run the 'evalsha' command", SLUICE_ERR_AUTH},
        {"ERR Error running script (call to f_x): @user_script:3: NOQUEUE no such queue",
         SLUICE_ERR_NOQUEUE},
        {"ERR unknown command 'FOO'", SLUICE_ERR_REDIS},
        {"ERR xNOQUEUE is no code", SLUICE_ERR_REDIS},
        {"NOSCRIPT No matching script.", SLUICE_ERR_REDIS},
        {"", SLUICE_ERR_REDIS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        redisReply r;
        memset(&r, 0, sizeof r);
        r.type = REDIS_REPLY_ERROR;
        r.str = (char *)cases[i].msg;
        r.len = strlen(cases[i].msg);
        sluice_err got = sluicei_reply_error_code(&r);
        if (got != cases[i].code)
            fprintf(stderr, "    '%s': got %s\n", cases[i].msg, sluice_strerror(got));
        CHECK(got == cases[i].code);
    }
    /* Anything but an error reply is no error. */
    redisReply ok;
    memset(&ok, 0, sizeof ok);
    ok.type = REDIS_REPLY_STATUS;
    ok.str = (char *)"NOQUEUE";
    ok.len = 7;
    CHECK(sluicei_reply_error_code(&ok) == SLUICE_OK);
    ok.type = REDIS_REPLY_INTEGER;
    ok.str = NULL;
    ok.len = 0;
    CHECK(sluicei_reply_error_code(&ok) == SLUICE_OK);
    CHECK(sluicei_reply_error_code(NULL) == SLUICE_OK);
}

/* Every script declares its flags in a shebang (Redis 7); only the two that
 * grow the data (create, push) may be refused under maxmemory. */
static void test_script_sources(void)
{
    for (int i = 0; i < SLUICEI_SCRIPT_COUNT; i++) {
        const char *src = sluicei_script_source((sluicei_script_id)i);
        CHECK(src != NULL);
        if (!src)
            continue;
        CHECK(strncmp(src, "#!lua", 5) == 0);
        const char *nl = strchr(src, '\n');
        CHECK(nl != NULL);
        if (!nl)
            continue;
        char shebang[128];
        size_t n = (size_t)(nl - src) < sizeof shebang - 1 ? (size_t)(nl - src) : sizeof shebang - 1;
        memcpy(shebang, src, n);
        shebang[n] = '\0';
        int grows = i == SLUICEI_SCRIPT_PUSH || i == SLUICEI_SCRIPT_CREATE ||
                    i == SLUICEI_SCRIPT_SUBMIT;
        if ((strstr(shebang, "allow-oom") != NULL) == grows)
            fprintf(stderr, "    script %d: shebang '%s'\n", i, shebang);
        CHECK((strstr(shebang, "allow-oom") != NULL) == !grows);
        /* All keys derive from KEYS[1]; a script touching another KEYS
         * entry would break cluster slot routing. */
        CHECK(strstr(src, "KEYS[2]") == NULL);
    }
    CHECK(sluicei_script_source(SLUICEI_SCRIPT_COUNT) == NULL);
    /* The embedded table and the enum agree (Makefile LUA_SCRIPTS). */
    CHECK(sluicei_lua_count == SLUICEI_SCRIPT_COUNT);
    /* Each script's SHA1 was computed at build time: 40 hex digits, and
     * no two alike (the live check against SCRIPT LOAD is in conn.c). */
    for (int i = 0; i < SLUICEI_SCRIPT_COUNT; i++) {
        const char *sha = sluicei_script_sha((sluicei_script_id)i);
        CHECK(sha && strlen(sha) == 40 && strspn(sha, "0123456789abcdef") == 40);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(sha, sluicei_script_sha((sluicei_script_id)j)) != 0);
    }
    CHECK(sluicei_script_sha(SLUICEI_SCRIPT_COUNT) == NULL);
    CHECK(sluicei_script_by_name("push") == SLUICEI_SCRIPT_PUSH);
    CHECK(sluicei_script_by_name("task_fail") == SLUICEI_SCRIPT_TASK_FAIL);
    CHECK(sluicei_script_by_name("nope") == SLUICEI_SCRIPT_COUNT);
    CHECK(sluicei_script_source((sluicei_script_id)-1) == NULL);
}

/* The ids a list may hold (lib.lua: valid_id): canonical decimal, seq at
 * most SLUICEI_MAX_SEQ, an optional ":pad<k>"; byte for byte. */
static void test_rid_check(void)
{
    static const struct {
        const char *s;
        size_t len;       /* 0: strlen */
        int ok, padding;
        size_t base;
    } cases[] = {
        {"0:0:0", 0, 1, 0, 5},
        {"4294967295:18446744073709551615:16777215", 0, 1, 0, 40},
        {"3:7:2:pad1", 0, 1, 1, 5},
        {"3:7:2:pad999999", 0, 1, 1, 5},
        {"0:0:16777216", 0, 0, 0, 0},         /* seq above the bitmap bound */
        {"0:0:4294967295", 0, 0, 0, 0},
        {"4294967296:0:0", 0, 0, 0, 0},       /* epoch >= 2^32 */
        {"0:18446744073709551616:0", 0, 0, 0, 0},
        {"01:0:0", 0, 0, 0, 0},               /* not canonical */
        {"0:00:0", 0, 0, 0, 0},
        {"0:0", 0, 0, 0, 0},
        {"0:0:0:", 0, 0, 0, 0},
        {"0:0:0:pad", 0, 0, 0, 0},
        {"0:0:0:pad0", 0, 0, 0, 0},
        {"0:0:0:pad1000000", 0, 0, 0, 0},
        {"0:0:0:pax1", 0, 0, 0, 0},
        {"eof:3", 0, 0, 0, 0},
        {"", 0, 0, 0, 0},
        {"0:1\0:2", 6, 0, 0, 0},              /* a NUL inside */
        {"0:1:2\0", 6, 0, 0, 0},              /* a NUL after it */
        {" 0:1:2", 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].s), base = 99;
        int pad = 99;
        int ok = sluicei_rid_check(cases[i].s, len, &base, &pad);
        if (ok != cases[i].ok)
            fprintf(stderr, "    '%s': got %d\n", cases[i].s, ok);
        CHECK(ok == cases[i].ok);
        if (ok && cases[i].ok)
            CHECK(pad == cases[i].padding && base == cases[i].base);
    }
}

static void test_marker_parse(void)
{
    uint32_t e = 7;
    CHECK(sluicei_marker_parse("eof:0", 5, &e) && e == 0);
    CHECK(sluicei_marker_parse("eof:4294967295", 14, &e) && e == UINT32_MAX);
    CHECK(!sluicei_marker_parse("eof:4294967296", 14, &e));
    CHECK(!sluicei_marker_parse("eof:", 4, &e));
    CHECK(!sluicei_marker_parse("eof:01", 6, &e));
    CHECK(!sluicei_marker_parse("eof:1x", 6, &e));
    CHECK(!sluicei_marker_parse("eof:1\0", 6, &e));
    CHECK(!sluicei_marker_parse("EOF:1", 5, &e));
    CHECK(!sluicei_marker_parse("0:0:0", 5, &e));
}

const struct test proto_tests[] = {
    {"proto/queue names", test_queue_names},
    {"proto/keys", test_keys},
    {"proto/batch id round trip", test_batch_id_roundtrip},
    {"proto/batch id rejects", test_batch_id_rejects},
    {"proto/batch id honours len", test_batch_id_length},
    {"proto/reply error codes", test_reply_error_code},
    {"proto/script sources", test_script_sources},
    {"proto/rid check", test_rid_check},
    {"proto/end marker", test_marker_parse},
    {NULL, NULL},
};
