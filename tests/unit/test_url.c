/* Redis URL parsing and description (common/src/url.c). No Redis needed. */
#include "test.h"

#include "conn.h"

#include <stdlib.h>
#include <string.h>

#define ENV "SLUICE_REDIS_PASSWORD"

static int same(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static int all_clear(const sluicei_url *u)
{
    return !u->host && !u->unix_path && !u->user && !u->password && u->port == 0 && u->db == 0;
}


static const struct valid_case {
    const char *url;
    const char *host;
    int port;
    const char *path;
    const char *user;
    const char *password;
    int db;
    const char *describe;
} valid[] = {
    {"redis://localhost", "localhost", 6379, NULL, NULL, NULL, 0, "redis://localhost:6379/0"},
    {"redis://127.0.0.1:6380", "127.0.0.1", 6380, NULL, NULL, NULL, 0, "redis://127.0.0.1:6380/0"},
    {"redis://h:1/0", "h", 1, NULL, NULL, NULL, 0, "redis://h:1/0"},
    {"redis://h:65535/3", "h", 65535, NULL, NULL, NULL, 3, "redis://h:65535/3"},
    {"redis://h/", "h", 6379, NULL, NULL, NULL, 0, "redis://h:6379/0"},
    {"redis://h/1000000", "h", 6379, NULL, NULL, NULL, 1000000, "redis://h:6379/1000000"},
    {"redis://h:007/007", "h", 7, NULL, NULL, NULL, 7, "redis://h:7/7"},
    {"REDIS://Cache-1.example.com_x", "Cache-1.example.com_x", 6379, NULL, NULL, NULL, 0,
     "redis://Cache-1.example.com_x:6379/0"},
    {"redis://[::1]:6379", "::1", 6379, NULL, NULL, NULL, 0, "redis://[::1]:6379/0"},
    {"redis://[::1]", "::1", 6379, NULL, NULL, NULL, 0, "redis://[::1]:6379/0"},
    {"redis://[fe80::1%eth0]:7000/2", "fe80::1%eth0", 7000, NULL, NULL, NULL, 2,
     "redis://[fe80::1%eth0]:7000/2"},
    {"redis://:s3cr3t@h", "h", 6379, NULL, NULL, "s3cr3t", 0, "redis://h:6379/0"},
    {"redis://bob:s3cr3t@h:6400/5", "h", 6400, NULL, "bob", "s3cr3t", 5, "redis://bob@h:6400/5"},
    {"redis://bob:p:a:ss@h", "h", 6379, NULL, "bob", "p:a:ss", 0, "redis://bob@h:6379/0"},
    /* A raw '@' or '/' in the password: the last '@' ends the userinfo. */
    {"redis://:p@ss/w0rd@h/4", "h", 6379, NULL, NULL, "p@ss/w0rd", 4, "redis://h:6379/4"},
    {"redis://b%40b:p%3As%25s@h", "h", 6379, NULL, "b@b", "p:s%s", 0, "redis://b@b@h:6379/0"},
    {"redis://:@h", "h", 6379, NULL, NULL, NULL, 0, "redis://h:6379/0"},
    {"redis://@h", "h", 6379, NULL, NULL, NULL, 0, "redis://h:6379/0"},
    {"redis://[::1]:6380/9", "::1", 6380, NULL, NULL, NULL, 9, "redis://[::1]:6380/9"},
    {"unix:///tmp/redis.sock", NULL, 0, "/tmp/redis.sock", NULL, NULL, 0,
     "unix:///tmp/redis.sock"},
    {"unix:///run/redis/r.sock?db=12", NULL, 0, "/run/redis/r.sock", NULL, NULL, 12,
     "unix:///run/redis/r.sock?db=12"},
    {"unix:///r.sock?db=0", NULL, 0, "/r.sock", NULL, NULL, 0, "unix:///r.sock"},
    {"unix:///r.sock?", NULL, 0, "/r.sock", NULL, NULL, 0, "unix:///r.sock"},
    {"unix:///r.sock?&db=3&", NULL, 0, "/r.sock", NULL, NULL, 3, "unix:///r.sock?db=3"},
    {"UNIX:///r.sock", NULL, 0, "/r.sock", NULL, NULL, 0, "unix:///r.sock"},
    /* TLS: the same form, another scheme. */
    {"rediss://localhost", "localhost", 6379, NULL, NULL, NULL, 0, "rediss://localhost:6379/0"},
    {"REDISS://bob:s3cr3t@[::1]:7000/3?wait=1", "::1", 7000, NULL, "bob", "s3cr3t", 3,
     "rediss://bob@[::1]:7000/3?wait=1"},
};

static void test_valid(void)
{
    test_env_password(NULL);
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        const struct valid_case *v = &valid[i];
        sluicei_url u;
        char err[256] = "", desc[256];
        sluice_err e = sluicei_url_parse(v->url, &u, err, sizeof err);
        if (e != SLUICE_OK) {
            fprintf(stderr, "    %s: %s\n", v->url, err);
            CHECK(e == SLUICE_OK);
            continue;
        }
        int ok = same(u.host, v->host) && u.port == v->port && same(u.unix_path, v->path) &&
                 same(u.user, v->user) && same(u.password, v->password) && u.db == v->db &&
                 u.tls == (strncmp(v->describe, "rediss:", 7) == 0);
        sluicei_url_describe(&u, desc, sizeof desc);
        if (!ok || strcmp(desc, v->describe) != 0)
            fprintf(stderr, "    %s: host=%s port=%d path=%s user=%s db=%d describe=%s\n", v->url,
                    u.host ? u.host : "(null)", u.port, u.unix_path ? u.unix_path : "(null)",
                    u.user ? u.user : "(null)", u.db, desc);
        CHECK(ok);
        CHECK(strcmp(desc, v->describe) == 0);
        if (u.password)
            CHECK(strstr(desc, u.password) == NULL);
        sluicei_url_free(&u);
        CHECK(all_clear(&u));
    }
    test_env_restore();
}

static const struct invalid_case {
    const char *url;
    const char *expect;   /* substring of the error */
} invalid[] = {
    {"", "empty"},
    {"localhost:6379", "no scheme"},
    {"bob:s3cr3t@h://x", "no scheme"},
    {"://h", "no scheme"},
    {"http://h:80", "unknown scheme 'http' (use redis://, rediss:// or unix://)"},
    {"redis+s://:s3cr3t@h", "unknown scheme 'redis+s'"},
    {"rediss://:s3cr3t@", "redis URL: empty host"},
    {"rediss://h:x", "redis URL: port 'x' is not a number"},
    {"rediss://h/1?db=2", "unexpected '?db=2' after the db"},
    {"redis://", "redis URL: empty host"},
    {"redis://:6379", "redis URL: empty host"},
    {"redis://:s3cr3t@", "redis URL: empty host"},
    {"redis://:s3cr3t@:6379/0", "redis URL: empty host"},
    {"redis://[]:6379", "redis URL: empty host"},
    {"redis://[::1", "without its closing ']'"},
    {"redis://[::1]x", "unexpected 'x' after the host"},
    {"redis://[1.2.3.4]", "is not an IPv6 address"},
    {"redis://[::1 ]", "bad IPv6 address"},
    {"redis://::1:6379", "IPv6 host goes in brackets"},
    {"redis://ho st", "host 'ho st' contains ' '"},
    {"redis://h:1:2", "port '1:2' is not a number"},
    {"redis://fe80::1", "IPv6 host goes in brackets"},
    {"redis://h:abc", "redis URL: port 'abc' is not a number"},
    {"redis://h:-1", "redis URL: port '-1' is not a number"},
    {"redis://h:+5", "port '+5' is not a number"},
    {"redis://h: 5", "port ' 5' is not a number"},
    {"redis://h:", "empty port"},
    {"redis://h:/0", "empty port"},
    {"redis://h:0", "redis URL: port 0 out of range 1..65535"},
    {"redis://h:70000", "redis URL: port 70000 out of range 1..65535"},
    {"redis://:s3cr3t@h:65536", "port 65536 out of range"},
    {"redis://h:99999999999999999999999", "out of range 1..65535"},
    {"redis://h/-1", "redis URL: db '-1' is not a non-negative integer"},
    {"redis://h/abc", "db 'abc' is not a non-negative integer"},
    {"redis://h/1000001", "db 1000001 out of range 0..1000000"},
    {"redis://h/99999999999999999999", "out of range 0..1000000"},
    {"redis://h/0?x", "redis URL: unexpected '?x' after the db"},
    {"redis://h:6379/0/1", "unexpected '/1' after the db"},
    {"redis://:s3cr3t@h/1 ", "unexpected ' ' after the db"},
    {"redis://h?db=1", "unexpected '?db=1' after the host"},
    {"redis://h:6379?db=1", "unexpected '?db=1' after the port"},
    {"redis://:s3cr%zzt@h", "bad %-escape in the password"},
    {"redis://:s3cr3t%4@h", "bad %-escape in the password"},
    {"redis://:s3cr3t%00@h", "bad %-escape in the password"},
    {"redis://b%g0b:s3cr3t@h", "bad %-escape in the user name"},
    {"redis://bob@h", "user 'bob' has no password"},
    {"redis://bob:@h", "user 'bob' has no password"},
    {"unix://", "unix URL: empty socket path"},
    {"unix://?db=1", "unix URL: empty socket path"},
    {"unix://tmp/r.sock", "socket path 'tmp/r.sock' is not absolute"},
    {"unix://bob:s3cr3t@/tmp/r.sock", "no user or password in a unix URL"},
    {"unix:///r.sock?foo=1", "unix URL: unknown parameter 'foo'"},
    {"unix:///r.sock?db=1&password=s3cr3t", "unix URL: unknown parameter 'password'"},
    {"unix:///r.sock?db", "parameter 'db' needs a value"},
    {"unix:///r.sock?db=", "unix URL: db '' is not a non-negative integer"},
    {"unix:///r.sock?db=x1", "unix URL: db 'x1' is not a non-negative integer"},
    {"unix:///r.sock?db=1x", "unix URL: db '1x' is not a non-negative integer"},
    {"unix:///r.sock?db=2000000", "unix URL: db 2000000 out of range"},
    {"unix:///aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sock",
     "longer than the 107"},
};

static void test_invalid(void)
{
    test_env_password(NULL);
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        const struct invalid_case *v = &invalid[i];
        sluicei_url u;
        char err[256] = "";
        sluice_err e = sluicei_url_parse(v->url, &u, err, sizeof err);
        CHECK(e == SLUICE_ERR_INVALID);
        CHECK(all_clear(&u));
        if (!strstr(err, v->expect)) {
            fprintf(stderr, "    %s: got \"%s\", want \"%s\"\n", v->url, err, v->expect);
            CHECK(strstr(err, v->expect) != NULL);
        }
        /* Every secret in the table is spelt s3cr so that this catches any echo. */
        CHECK(strstr(err, "s3cr") == NULL);
        CHECK(strchr(err, '\n') == NULL);
        sluicei_url_free(&u);
    }
    test_env_restore();
}

/* NULL input and a NULL or tiny error buffer must not crash. */
static void test_error_buffer(void)
{
    sluicei_url u;
    char small[8];
    CHECK(sluicei_url_parse(NULL, &u, NULL, 0) == SLUICE_ERR_INVALID);
    CHECK(sluicei_url_parse("redis://h:x", &u, NULL, 0) == SLUICE_ERR_INVALID);
    CHECK(sluicei_url_parse("redis://h:x", &u, small, sizeof small) == SLUICE_ERR_INVALID);
    CHECK(strlen(small) == sizeof small - 1);
    CHECK(all_clear(&u));
    sluicei_url_free(&u);
    sluicei_url_free(NULL);
}

/* Long hostile input: quoted pieces are cut and stay on one line. */
static void test_long_and_binary(void)
{
    char url[4096], err[256];
    sluicei_url u;
    memcpy(url, "redis://h:", 10);
    memset(url + 10, '9', sizeof url - 11);
    url[sizeof url - 1] = '\0';
    CHECK(sluicei_url_parse(url, &u, err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strstr(err, "...") != NULL);
    CHECK(strlen(err) < 200);
    CHECK(sluicei_url_parse("redis://h:1\n2", &u, err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strchr(err, '\n') == NULL);
    CHECK(strstr(err, "'1?2'") != NULL);
}

static void test_url_env_password(void)
{
    sluicei_url u;
    char err[256], desc[256];

    test_env_password("envs3cr3t");
    CHECK(sluicei_url_parse("redis://h", &u, err, sizeof err) == SLUICE_OK);
    CHECK(same(u.password, "envs3cr3t"));
    CHECK(u.user == NULL);
    sluicei_url_describe(&u, desc, sizeof desc);
    CHECK(strstr(desc, "s3cr3t") == NULL);
    sluicei_url_free(&u);

    /* The URL's password wins. */
    CHECK(sluicei_url_parse("redis://:urls3cr3t@h", &u, err, sizeof err) == SLUICE_OK);
    CHECK(same(u.password, "urls3cr3t"));
    sluicei_url_free(&u);

    /* A lone user takes its password from the environment. */
    CHECK(sluicei_url_parse("redis://alice@h:7000/2", &u, err, sizeof err) == SLUICE_OK);
    CHECK(same(u.user, "alice"));
    CHECK(same(u.password, "envs3cr3t"));
    sluicei_url_describe(&u, desc, sizeof desc);
    CHECK(strcmp(desc, "redis://alice@h:7000/2") == 0);
    sluicei_url_free(&u);

    /* unix:// URLs can only get a password this way. */
    CHECK(sluicei_url_parse("unix:///tmp/r.sock?db=1", &u, err, sizeof err) == SLUICE_OK);
    CHECK(same(u.password, "envs3cr3t"));
    CHECK(u.db == 1);
    sluicei_url_free(&u);

    /* Errors never show the environment's secret either. */
    CHECK(sluicei_url_parse("redis://h:x", &u, err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strstr(err, "s3cr3t") == NULL);

    /* Empty means unset. */
    setenv(ENV, "", 1);
    CHECK(sluicei_url_parse("redis://h", &u, err, sizeof err) == SLUICE_OK);
    CHECK(u.password == NULL);
    sluicei_url_free(&u);
    CHECK(sluicei_url_parse("redis://alice@h", &u, err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strstr(err, ENV) != NULL);

    unsetenv(ENV);
    CHECK(sluicei_url_parse("redis://h", &u, err, sizeof err) == SLUICE_OK);
    CHECK(u.password == NULL);
    sluicei_url_free(&u);
    test_env_restore();
}

static void test_describe(void)
{
    sluicei_url u;
    char out[64];
    memset(&u, 0, sizeof u);
    sluicei_url_describe(&u, out, sizeof out);
    CHECK(strcmp(out, "(no redis address)") == 0);

    test_env_password(NULL);
    CHECK(sluicei_url_parse("redis://bob:s3cr3t@[2001:db8::7]:6390/8", &u, NULL, 0) == SLUICE_OK);
    sluicei_url_describe(&u, out, sizeof out);
    CHECK(strcmp(out, "redis://bob@[2001:db8::7]:6390/8") == 0);
    CHECK(strstr(out, "s3cr3t") == NULL);
    /* A short buffer is cut, still terminated. */
    sluicei_url_describe(&u, out, 10);
    CHECK(strcmp(out, "redis://b") == 0);
    sluicei_url_free(&u);
    test_env_restore();
}

const struct test url_tests[] = {
    {"url/valid", test_valid},
    {"url/invalid names the wrong part", test_invalid},
    {"url/error buffer", test_error_buffer},
    {"url/long and binary input", test_long_and_binary},
    {"url/SLUICE_REDIS_PASSWORD", test_url_env_password},
    {"url/describe", test_describe},
    {NULL, NULL},
};
