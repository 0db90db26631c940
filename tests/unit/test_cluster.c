/* Cluster routing without a cluster (common/src/cluster*.c): key slots,
 * addresses and what they parse into (cluster_internal.h), the node table,
 * retryable errors, partitions on a list of servers, and the "?wait=N" of a
 * redis:// URL (common/src/conn.c). No Redis needed: the only connections
 * tried go to 127.0.0.1:1, which refuses them. */
#include "test.h"

#include "cluster.h"
#include "cluster_internal.h"

#include <stdlib.h>
#include <string.h>

static unsigned slot_of(const char *k)
{
    return sluicei_key_slot(k, strlen(k));
}

static unsigned crc_of(const char *s)
{
    return sluicei_crc16(s, strlen(s));
}

static void test_slots(void)
{
    /* The reference values of the Redis Cluster specification. */
    CHECK(crc_of("123456789") == 0x31C3);
    CHECK(slot_of("foo") == 12182);
    CHECK(slot_of("bar") == 5061);
    CHECK(slot_of("123456789") == (0x31C3 & 16383));
    CHECK(slot_of("") == 0);
    CHECK(slot_of("{user1000}.following") == slot_of("{user1000}.followers"));
    CHECK(slot_of("{user1000}.following") == slot_of("user1000"));
    /* Only the first '{' and the first '}' after it count. */
    CHECK(slot_of("foo{bar}{zap}") == slot_of("bar"));
    CHECK(slot_of("foo{{bar}}zap") == slot_of("{bar"));
    /* An empty tag, or no '}', hashes the whole key. */
    CHECK(slot_of("foo{}{bar}") == (crc_of("foo{}{bar}") & 16383));
    CHECK(slot_of("{}") == (crc_of("{}") & 16383));
    CHECK(slot_of("{") == (crc_of("{") & 16383));
    CHECK(slot_of("}{") == (crc_of("}{") & 16383));
    CHECK(slot_of("a{b") == (crc_of("a{b") & 16383));
    CHECK(slot_of("{}x}") == (crc_of("{}x}") & 16383));
    CHECK(slot_of("x}{a}") == slot_of("a"));
    /* A length, not a C string: bytes after len do not count. */
    CHECK(sluicei_key_slot("{ab}", 3) == (crc_of("{ab") & 16383));
    CHECK(sluicei_key_slot("foo\0bar", 7) == (sluicei_crc16("foo\0bar", 7) & 16383));
    /* Every key of a queue is in the slot of its name. */
    CHECK(slot_of("sluice:{jobs}:meta") == slot_of("jobs"));
    CHECK(slot_of("sluice:{jobs#3}:dlv") == slot_of("jobs#3"));
    for (int i = 0; i < 1000; i++) {
        char k[32];
        snprintf(k, sizeof k, "k%d", i);
        CHECK(slot_of(k) < SLUICEI_CLUSTER_SLOTS);
    }
}

static void test_url_wait(void)
{
    static const struct {
        const char *url;
        int wait, db;
        const char *describe;
    } ok[] = {
        {"redis://h:1?wait=1", 1, 0, "redis://h:1/0?wait=1"},
        {"redis://h?wait=2", 2, 0, "redis://h:6379/0?wait=2"},
        {"redis://h/3?wait=16", 16, 3, "redis://h:6379/3?wait=16"},
        {"redis://h/?wait=0", 0, 0, "redis://h:6379/0"},
        {"redis://h:7/?&wait=4&", 4, 0, "redis://h:7/0?wait=4"},
        {"redis://h:7/5?", 0, 5, "redis://h:7/5"},
        {"unix:///r.sock?wait=1", 1, 0, "unix:///r.sock?wait=1"},
        {"unix:///r.sock?db=2&wait=3", 3, 2, "unix:///r.sock?db=2&wait=3"},
        {"unix:///r.sock?wait=3&db=2", 3, 2, "unix:///r.sock?db=2&wait=3"},
    };
    static const struct {
        const char *url, *expect;
    } bad[] = {
        {"redis://h?wait=17", "redis URL: wait 17 out of range 0..16"},
        {"redis://h?wait=", "wait '' is not a number of replicas"},
        {"redis://h?wait=x", "wait 'x' is not a number"},
        {"redis://h?wait=-1", "wait '-1' is not a number"},
        {"redis://h?wait=99999999999999999999", "out of range 0..16"},
        {"redis://h?wait", "unexpected '?wait' after the host"},
        {"redis://h/1?wait=1&db=2", "unexpected '?wait=1&db=2' after the db"},
        {"redis://:s3cr3t@h:5?foo", "unexpected '?foo' after the port"},
        {"unix:///r.sock?wait=17", "unix URL: wait 17 out of range"},
        {"unix:///r.sock?wait", "parameter 'wait' needs a value"},
    };
    test_env_password(NULL);
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sluicei_url u;
        char err[256] = "", desc[256] = "";
        sluice_err e = sluicei_url_parse(ok[i].url, &u, err, sizeof err);
        CHECK(e == SLUICE_OK);
        if (e != SLUICE_OK) {
            fprintf(stderr, "    %s: %s\n", ok[i].url, err);
            continue;
        }
        sluicei_url_describe(&u, desc, sizeof desc);
        if (u.wait_replicas != ok[i].wait || u.db != ok[i].db ||
            strcmp(desc, ok[i].describe) != 0)
            fprintf(stderr, "    %s: wait=%d db=%d describe=%s\n", ok[i].url, u.wait_replicas,
                    u.db, desc);
        CHECK(u.wait_replicas == ok[i].wait);
        CHECK(u.db == ok[i].db);
        CHECK(strcmp(desc, ok[i].describe) == 0);

        sluicei_url c;
        CHECK(sluicei_url_copy(&c, &u) == SLUICE_OK);
        CHECK(c.wait_replicas == u.wait_replicas && c.port == u.port && c.db == u.db);
        CHECK(c.host != u.host || !c.host);
        sluicei_url_free(&c);
        sluicei_url_free(&u);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sluicei_url u;
        char err[256] = "";
        CHECK(sluicei_url_parse(bad[i].url, &u, err, sizeof err) == SLUICE_ERR_INVALID);
        if (!strstr(err, bad[i].expect)) {
            fprintf(stderr, "    %s: got \"%s\", want \"%s\"\n", bad[i].url, err, bad[i].expect);
            CHECK(strstr(err, bad[i].expect) != NULL);
        }
        CHECK(strstr(err, "s3cr") == NULL);
    }
    test_env_restore();
}

static void test_addresses(void)
{
    static const struct {
        const char *addr;
        sluicei_router_kind kind;
        const char *describe;
    } ok[] = {
        {"redis://h:1", SLUICEI_ROUTER_SINGLE, "redis://h:1/0"},
        {"unix:///tmp/r.sock?db=2", SLUICEI_ROUTER_SINGLE, "unix:///tmp/r.sock?db=2"},
        {"redis://a:1,redis://b:2", SLUICEI_ROUTER_LIST, "redis://a:1/0,redis://b:2/0"},
        {"redis://a:1/1?wait=1,unix:///r.sock,REDIS://c", SLUICEI_ROUTER_LIST,
         "redis://a:1/1?wait=1,unix:///r.sock,redis://c:6379/0"},
        /* A ',' not followed by a scheme belongs to the URL (a password). */
        {"redis://:pa,s3cr@h:1", SLUICEI_ROUTER_SINGLE, "redis://h:1/0"},
        {"redis://bob:s3,cr@h:1,redis://bob:s3,cr@h:2", SLUICEI_ROUTER_LIST,
         "redis://bob@h:1/0,redis://bob@h:2/0"},
    };
    static const struct {
        const char *addr, *expect;
        sluice_err code;
    } bad[] = {
        {"", "redis address: empty", SLUICE_ERR_INVALID},
        {"http://h", "unknown scheme 'http'", SLUICE_ERR_INVALID},
        {"redis://a:1,b:2", "a list of servers is redis://a:1,redis://b:2", SLUICE_ERR_INVALID},
        {"redis://:s3cr3t@a:1,b:2", "port '1,b:2' is not a number", SLUICE_ERR_INVALID},
        {"redis://a:1,redis://b:x", "server list, server 2: redis URL: port 'x' is not a number",
         SLUICE_ERR_INVALID},
        {"redis://a:1,redis://b:1/x", "server 2: redis URL: db 'x'", SLUICE_ERR_INVALID},
        {"redis://a:1,redis+cluster://b:2", "server 2 is a cluster address",
         SLUICE_ERR_INVALID},
        {"redis+cluster://", "cluster address: no host:port", SLUICE_ERR_INVALID},
        {"redis+cluster://:s3cr3t@", "cluster address: no host:port", SLUICE_ERR_INVALID},
        {"redis+cluster:///?wait=1", "cluster address: no host:port", SLUICE_ERR_INVALID},
        {"REDIS+CLUSTER://h:1,,h:2", "cluster address: seed 2 is empty in 'h:1,,h:2'",
         SLUICE_ERR_INVALID},
        {"redis+cluster://h:1,", "seed 2 is empty", SLUICE_ERR_INVALID},
        {",redis+cluster://h:1", "server list, server 1: redis URL: empty", SLUICE_ERR_INVALID},
        {"redis+cluster://:s3cr3t@h:1,h:x/", "cluster address: seed 2 'h:x': port 'x' is not a "
                                              "number", SLUICE_ERR_INVALID},
        {"redis+cluster://h:70000", "seed 1 'h:70000': port 70000 out of range",
         SLUICE_ERR_INVALID},
        {"redis+cluster://h x:1", "seed 1 'h x:1': host 'h x' contains ' '", SLUICE_ERR_INVALID},
        {"redis+cluster://[::1]x:1", "seed 1 '[::1]x:1': unexpected 'x:1' after the host",
         SLUICE_ERR_INVALID},
        {"redis+cluster://h:1/3", "cluster address: a Redis Cluster has only db 0",
         SLUICE_ERR_INVALID},
        {"redis+cluster://h:1/x", "cluster address: db 'x'", SLUICE_ERR_INVALID},
        {"redis+cluster://h:1/?wait=99", "cluster address: wait 99 out of range 0..16",
         SLUICE_ERR_INVALID},
        {"redis+cluster://h:1?x=1", "cluster address: unexpected '?x=1' after the host",
         SLUICE_ERR_INVALID},
        {"redis+cluster://redis://h:1", "the seeds are host:port, not URLs", SLUICE_ERR_INVALID},
        {"redis+cluster://bob@h:1", "cluster address: user 'bob' has no password",
         SLUICE_ERR_INVALID},
        {"redis+cluster://bob:s3cr%zzt@h:1", "cluster address: bad %-escape in the password",
         SLUICE_ERR_INVALID},
        /* Well formed, but nothing listens on port 1. */
        {"redis+cluster://127.0.0.1:1", "redis+cluster://127.0.0.1:1/: cluster: no node gave the "
                                        "slot map (1 tried; 127.0.0.1:1: connect: ",
         SLUICE_ERR_IO},
        {"redis+cluster://bob:s3cr3t@127.0.0.1:1,[::1]:1/?wait=2",
         "redis+cluster://bob@127.0.0.1:1,[::1]:1/?wait=2: cluster: no node gave the slot map "
         "(2 tried; ",
         SLUICE_ERR_IO},
    };
    test_env_password(NULL);
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sluicei_router *r = NULL;
        char err[256] = "";
        sluice_err e = sluicei_router_open(&r, ok[i].addr, 200, 200, err, sizeof err);
        CHECK(e == SLUICE_OK);
        if (e != SLUICE_OK) {
            fprintf(stderr, "    %s: %s\n", ok[i].addr, err);
            continue;
        }
        CHECK(sluicei_router_kind_of(r) == ok[i].kind);
        if (strcmp(sluicei_router_describe(r), ok[i].describe) != 0) {
            fprintf(stderr, "    %s: describe %s\n", ok[i].addr, sluicei_router_describe(r));
            CHECK(0);
        }
        CHECK(strstr(sluicei_router_describe(r), "s3cr") == NULL);
        sluicei_router_close(r);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sluicei_router *r = (sluicei_router *)&r;
        char err[300] = "";
        sluice_err e = sluicei_router_open(&r, bad[i].addr, 200, 200, err, sizeof err);
        CHECK(e == bad[i].code);
        CHECK(r == NULL);
        if (!strstr(err, bad[i].expect)) {
            fprintf(stderr, "    %s: got \"%s\", want \"%s\"\n", bad[i].addr, err, bad[i].expect);
            CHECK(strstr(err, bad[i].expect) != NULL);
        }
        CHECK(strstr(err, "s3cr") == NULL);
        CHECK(strchr(err, '\n') == NULL);
    }
    CHECK(sluicei_router_open(&(sluicei_router *){NULL}, NULL, 0, 0, NULL, 0) ==
          SLUICE_ERR_INVALID);
    sluicei_router_close(NULL);
    test_env_restore();
}

/* The password from the environment reaches every server of a list, and
 * no message shows it. */
static void test_list_env_password(void)
{
    sluicei_router *r;
    char err[300] = "";
    test_env_password("envs3cr3t");
    CHECK(sluicei_router_open(&r, "redis://alice@a:1,redis://b:2", 0, 0, err, sizeof err) ==
          SLUICE_OK);
    for (int p = 0; p < 2; p++) {
        sluicei_url u;
        char q[16];
        snprintf(q, sizeof q, "Q#%d", p);
        CHECK(sluicei_router_url(r, q, 0, &u, err, sizeof err) == SLUICE_OK);
        CHECK(u.password && strcmp(u.password, "envs3cr3t") == 0);
        sluicei_url_free(&u);
    }
    CHECK(strstr(sluicei_router_describe(r), "s3cr") == NULL);
    sluicei_router_close(r);
    CHECK(sluicei_router_open(&r, "redis+cluster://alice@127.0.0.1:1", 200, 200, err,
                              sizeof err) == SLUICE_ERR_IO);
    CHECK(strstr(err, "s3cr") == NULL);
    CHECK(strstr(err, "redis+cluster://alice@127.0.0.1:1/") != NULL);
    test_env_restore();
}

static void test_retryable(void)
{
    static const char *const yes[] = {
        "MOVED 3999 127.0.0.1:6381",
        "ASK 3999 127.0.0.1:6381",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "CLUSTERDOWN Hash slot not served",
        "READONLY You can't write against a read only replica.",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "LOADING Redis is loading the dataset in memory",
        "EXECABORT Transaction discarded because of previous errors.",
        "ERR Error running script (call to f_3c6a): @user_script:8: Script attempted to access "
        "a non local key in a cluster node",
        "ERR Script attempted to access a non local key in a cluster node script: f_1",
        "ERR Script attempted to execute a command while the cluster is down",
        "ASK",
        /* The server's passing states are retryable everywhere (retry.h). */
        "BUSY Redis is busy running a script.",
        "ERR max number of clients reached",
    };
    static const char *const no[] = {
        "",
        "ERR unknown command 'FOO'",
        "NOQUEUE no such queue",
        "MOVEDX 1 h:1",
        "ASKING",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "NOSCRIPT No matching script. Please use EVAL.",
        "ERR CROSSSLOT Keys in request don't hash to the same slot",
        "BUSYKEY Target key name already exists.",
        "ERR moved",
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (!sluicei_cluster_retryable(yes[i], strlen(yes[i]))) {
            fprintf(stderr, "    not retryable: %s\n", yes[i]);
            CHECK(0);
        }
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        if (sluicei_cluster_retryable(no[i], strlen(no[i]))) {
            fprintf(stderr, "    retryable: %s\n", no[i]);
            CHECK(0);
        }
    }
    CHECK(!sluicei_cluster_retryable(NULL, 0));
    /* Only len bytes count. */
    CHECK(!sluicei_cluster_retryable("MOVED 1 h:1", 3));
    CHECK(sluicei_cluster_retryable("ASKXYZ", 3));
}

static void test_list_partitions(void)
{
    sluicei_router *r;
    char err[300] = "";
    test_env_password(NULL);
    CHECK(sluicei_router_open(&r, "redis://127.0.0.1:1,redis://a:2,unix:///tmp/c.sock", 100,
                              100, err, sizeof err) == SLUICE_OK);
    CHECK(sluicei_router_kind_of(r) == SLUICEI_ROUTER_LIST);
    static const struct {
        const char *q;
        const char *host;
        int port;
    } want[] = {
        {"Q", "127.0.0.1", 1},   {"Q#0", "127.0.0.1", 1}, {"Q#1", "a", 2},
        {"Q#2", NULL, 0},        {"Q#3", "127.0.0.1", 1}, {"Q#1024", "a", 2},
        {"other#5", NULL, 0},    {"x.y-z", "127.0.0.1", 1},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        sluicei_url u;
        CHECK(sluicei_router_url(r, want[i].q, 1, &u, err, sizeof err) == SLUICE_OK);
        if (want[i].host) {
            CHECK(u.host && strcmp(u.host, want[i].host) == 0);
            CHECK(u.port == want[i].port);
        } else {
            CHECK(u.host == NULL && u.unix_path && strcmp(u.unix_path, "/tmp/c.sock") == 0);
        }
        sluicei_url_free(&u);
    }
    /* Binding does nothing: a queue never leaves its server. */
    sluicei_conn c;
    memset(&c, 0, sizeof c);
    sluicei_router_bind(r, "Q#1", &c);
    CHECK(c.resolve == NULL);

    /* A command to a server that is down: retried, then the I/O error. */
    redisReply *rep = (redisReply *)&rep;
    const char *av[] = {"PING"};
    int64_t t0 = sluicei_now_ms();
    CHECK(sluicei_router_command(r, "Q#3", t0 + 300, &rep, 1, av, NULL) == SLUICE_ERR_IO);
    int64_t took = sluicei_now_ms() - t0;
    CHECK(rep == NULL);
    CHECK(took >= 250 && took < 2000);
    CHECK(strstr(sluicei_router_errstr(r), "127.0.0.1:1") != NULL);
    CHECK(strstr(sluicei_router_errstr(r), "gave up after") != NULL);
    sluicei_router_stats st;
    sluicei_router_get_stats(r, &st);
    CHECK(st.retries >= 1 && st.moved == 0 && st.ask == 0 && st.refreshes == 0);

    int parts = -1;
    CHECK(sluicei_queue_partitions(r, "Q", &parts, err, sizeof err) == SLUICE_ERR_IO);
    CHECK(strstr(err, "queue 'Q': ") != NULL);
    sluicei_router_close(r);

    /* A single server: everything there. */
    CHECK(sluicei_router_open(&r, "redis://h:9/4", 0, 0, err, sizeof err) == SLUICE_OK);
    CHECK(sluicei_router_kind_of(r) == SLUICEI_ROUTER_SINGLE);
    for (int p = 0; p < 5; p++) {
        sluicei_url u;
        char q[16];
        snprintf(q, sizeof q, p ? "Q#%d" : "Q", p);
        CHECK(sluicei_router_url(r, q, 1, &u, err, sizeof err) == SLUICE_OK);
        CHECK(u.host && strcmp(u.host, "h") == 0 && u.port == 9 && u.db == 4);
        sluicei_url_free(&u);
    }
    sluicei_router_close(r);
    test_env_restore();
}

/* What an address parses into, seed by seed and server by server. */
struct want_server {
    const char *host; /* NULL: unix_path */
    int port, db, wait;
    const char *user, *password, *unix_path;
};

/* rediss+cluster:// and rediss:// in a list: every seed or that server
 * over TLS, and the printable form says so. */
static void test_address_tls(void)
{
    static const struct {
        const char *addr, *describe;
        sluicei_router_kind kind;
        int tls[2];
    } ok[] = {
        {"rediss+cluster://bob:pw@h1:1,h2:2/?wait=1", "rediss+cluster://bob@h1:1,h2:2/?wait=1",
         SLUICEI_ROUTER_CLUSTER, {1, 1}},
        {"REDISS+CLUSTER://h:7", "rediss+cluster://h:7/", SLUICEI_ROUTER_CLUSTER, {1, -1}},
        {"rediss://a:1,redis://b:2", "rediss://a:1/0,redis://b:2/0", SLUICEI_ROUTER_LIST, {1, 0}},
        {"rediss://:p,x@a:1", "rediss://a:1/0", SLUICEI_ROUTER_SINGLE, {1, -1}},
    };
    static const struct {
        const char *addr, *expect;
    } bad[] = {
        {"rediss+cluster://", "no host:port (use rediss+cluster://host:port"},
        {"rediss+cluster://rediss://h:1", "the seeds are host:port, not URLs"},
        {"rediss://a:1,rediss+cluster://b:2", "server 2 is a cluster address"},
        {"rediss+cluster://h:1/2", "a Redis Cluster has only db 0"},
    };
    test_env_password(NULL);
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sluicei_router *r = NULL;
        char err[256] = "";
        CHECK(sluicei_router_parse(&r, ok[i].addr, err, sizeof err) == SLUICE_OK);
        if (!r) {
            fprintf(stderr, "    %s: %s\n", ok[i].addr, err);
            continue;
        }
        CHECK(r->kind == ok[i].kind);
        for (int k = 0; k < 2; k++)
            CHECK(ok[i].tls[k] < 0 ? r->nservers == k : r->servers[k].tls == ok[i].tls[k]);
        if (strcmp(r->desc, ok[i].describe) != 0) {
            fprintf(stderr, "    %s: describe %s\n", ok[i].addr, r->desc);
            CHECK(0);
        }
        sluicei_router_close(r);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sluicei_router *r = NULL;
        char err[256] = "";
        CHECK(sluicei_router_parse(&r, bad[i].addr, err, sizeof err) == SLUICE_ERR_INVALID);
        CHECK(r == NULL);
        if (!strstr(err, bad[i].expect)) {
            fprintf(stderr, "    %s: got \"%s\", want \"%s\"\n", bad[i].addr, err, bad[i].expect);
            CHECK(0);
        }
    }
    test_env_restore();
}

static void test_address_servers(void)
{
    static const struct {
        const char *addr;
        sluicei_router_kind kind;
        int wait_explicit;
        int n;
        struct want_server s[3];
    } cases[] = {
        {"redis+cluster://bob:pw@h1:1,[::1]:2,h3/?wait=2", SLUICEI_ROUTER_CLUSTER, 1, 3,
         {{"h1", 1, 0, 2, "bob", "pw", NULL},
          {"::1", 2, 0, 2, "bob", "pw", NULL},
          {"h3", 6379, 0, 2, "bob", "pw", NULL}}},
        /* No ?wait=N: the replicas of the slot map decide, later. */
        {"REDIS+CLUSTER://:pw@h:7", SLUICEI_ROUTER_CLUSTER, 0, 1,
         {{"h", 7, 0, 0, NULL, "pw", NULL}}},
        /* An explicit 0 still wins over the map. */
        {"redis+cluster://h:7?wait=0", SLUICEI_ROUTER_CLUSTER, 1, 1,
         {{"h", 7, 0, 0, NULL, NULL, NULL}}},
        /* The last '@' ends the userinfo; a ',' before it is the password's. */
        {"redis+cluster://u:p@,s@a:1,b:2", SLUICEI_ROUTER_CLUSTER, 0, 2,
         {{"a", 1, 0, 0, "u", "p@,s", NULL}, {"b", 2, 0, 0, "u", "p@,s", NULL}}},
        /* A ',' before "scheme://" separates; any other belongs to the URL. */
        {"redis://:p,x@h:1/2,unix:///s?db=3", SLUICEI_ROUTER_LIST, 0, 2,
         {{"h", 1, 2, 0, NULL, "p,x", NULL}, {NULL, 0, 3, 0, NULL, NULL, "/s"}}},
        {"redis://a:1?wait=1,Redis://b", SLUICEI_ROUTER_LIST, 0, 2,
         {{"a", 1, 0, 1, NULL, NULL, NULL}, {"b", 6379, 0, 0, NULL, NULL, NULL}}},
    };
    test_env_password(NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sluicei_router *r = NULL;
        char err[256] = "";
        CHECK(sluicei_router_parse(&r, cases[i].addr, err, sizeof err) == SLUICE_OK);
        if (!r) {
            fprintf(stderr, "    %s: %s\n", cases[i].addr, err);
            continue;
        }
        CHECK(r->kind == cases[i].kind);
        CHECK(r->wait_explicit == cases[i].wait_explicit);
        CHECK(r->nservers == cases[i].n);
        for (int k = 0; k < r->nservers && k < cases[i].n; k++) {
            const sluicei_url *u = &r->servers[k];
            const struct want_server *w = &cases[i].s[k];
            int ok = w->host ? u->host && strcmp(u->host, w->host) == 0 && u->port == w->port
                             : !u->host && u->unix_path && strcmp(u->unix_path, w->unix_path) == 0;
            ok = ok && u->db == w->db && u->wait_replicas == w->wait;
            ok = ok && (w->user ? u->user && strcmp(u->user, w->user) == 0 : !u->user);
            ok = ok && (w->password ? u->password && strcmp(u->password, w->password) == 0
                                    : !u->password);
            if (!ok)
                fprintf(stderr, "    %s: server %d is %s:%d db %d wait %d\n", cases[i].addr, k,
                        u->host ? u->host : u->unix_path, u->port, u->db, u->wait_replicas);
            CHECK(ok);
        }
        /* The seeds are the first nodes known (no I/O yet). */
        if (r->kind == SLUICEI_ROUTER_CLUSTER)
            CHECK(r->nnodes == r->nservers && r->map_ok == 0);
        else
            CHECK(r->nnodes == 0);
        CHECK(r->desc && !strstr(r->desc, "pw") && !strstr(r->desc, "p,x"));
        sluicei_router_close(r);
    }

    /* SLUICE_REDIS_PASSWORD reaches every seed that has none. */
    sluicei_router *r = NULL;
    char err[256] = "";
    test_env_password("envs3cr3t");
    CHECK(sluicei_router_parse(&r, "redis+cluster://a:1,b:2,c:3", err, sizeof err) == SLUICE_OK);
    for (int k = 0; r && k < r->nservers; k++)
        CHECK(r->servers[k].password && strcmp(r->servers[k].password, "envs3cr3t") == 0);
    sluicei_router_close(r);
    test_env_restore();
}

/* The same seed twice is one node; the seeds' own order is kept. */
static void test_address_seed_nodes(void)
{
    sluicei_router *r = NULL;
    char err[256] = "";
    test_env_password(NULL);
    CHECK(sluicei_router_parse(&r, "redis+cluster://h:1,h:2,h:1,H:1", err, sizeof err) ==
          SLUICE_OK);
    if (r) {
        CHECK(r->nservers == 4);
        CHECK(r->nnodes == 3);
        CHECK(cluster_slots_node_index(r, "h", 1, 2) == 1);
        CHECK(cluster_slots_node_index(r, "H", 1, 1) == 2);
        CHECK(cluster_slots_node_index(r, "hx", 1, 1) == 0); /* a length, not a C string */
        CHECK(r->nnodes == 3);
        CHECK(cluster_slots_node_index(r, "x", 1, 1) == 3);
        CHECK(r->nnodes == 4 && strcmp(r->nodes[3].host, "x") == 0);
        /* The table is bounded: a peer cannot make it grow without end. */
        int last = 0;
        for (int port = 1; port <= MAX_NODES + 1 && last >= 0; port++)
            last = cluster_slots_node_index(r, "many", 4, port);
        CHECK(last == -1);
        CHECK(r->nnodes == MAX_NODES);
        sluicei_router_close(r);
    }
    test_env_restore();
}

/* Address lists at their limits, and malformed ones without I/O. */
static void test_address_limits(void)
{
    size_t cap = 16 * (MAX_ADDRS + 2) + 64;
    char *a = malloc(cap), *b = malloc(cap);
    CHECK(a && b);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    test_env_password(NULL);
    /* MAX_ADDRS seeds / servers, then one more. */
    size_t oa = (size_t)snprintf(a, cap, "redis+cluster://");
    size_t ob = 0;
    for (int i = 0; i < MAX_ADDRS; i++) {
        oa += (size_t)snprintf(a + oa, cap - oa, "%sh:%d", i ? "," : "", i + 1);
        ob += (size_t)snprintf(b + ob, cap - ob, "%sredis://h:%d", i ? "," : "", i + 1);
    }
    sluicei_router *r = NULL;
    char err[256] = "";
    CHECK(sluicei_router_parse(&r, a, err, sizeof err) == SLUICE_OK);
    CHECK(r && r->nservers == MAX_ADDRS && r->nnodes == MAX_ADDRS);
    sluicei_router_close(r);
    CHECK(sluicei_router_parse(&r, b, err, sizeof err) == SLUICE_OK);
    CHECK(r && r->nservers == MAX_ADDRS && r->kind == SLUICEI_ROUTER_LIST);
    sluicei_router_close(r);
    snprintf(a + oa, cap - oa, ",h:9");
    snprintf(b + ob, cap - ob, ",redis://h:9");
    r = (sluicei_router *)&r;
    CHECK(sluicei_router_parse(&r, a, err, sizeof err) == SLUICE_ERR_INVALID && r == NULL);
    CHECK(strstr(err, "cluster address: more than 1024 seeds") != NULL);
    r = (sluicei_router *)&r;
    CHECK(sluicei_router_parse(&r, b, err, sizeof err) == SLUICE_ERR_INVALID && r == NULL);
    CHECK(strstr(err, "server list: more than 1024 servers") != NULL);
    free(a);
    free(b);

    static const struct {
        const char *addr, *expect;
    } bad[] = {
        {"redis://a:1,", "port '1,' is not a number"},
        {"redis://a:1,,redis://b:2", "server list, server 1: redis URL: port '1,'"},
        {"redis://a:1,redis://", "server list, server 2: "},
        {"unix://,redis://a:1", "server list, server 1: "},
        {"redis://a:1,Redis+Cluster://b:2", "server 2 is a cluster address"},
        {"redis+cluster://h:1,unix:///s", "the seeds are host:port, not URLs"},
        {"redis+cluster://h:1,,", "seed 2 is empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = NULL;
        err[0] = '\0';
        sluice_err e = sluicei_router_parse(&r, bad[i].addr, err, sizeof err);
        CHECK(e == SLUICE_ERR_INVALID && r == NULL);
        if (!strstr(err, bad[i].expect)) {
            fprintf(stderr, "    %s: got \"%s\", want \"%s\"\n", bad[i].addr, err, bad[i].expect);
            CHECK(0);
        }
        sluicei_router_close(r);
    }
    test_env_restore();
}

/* Which server of a list serves a name: "Q#p" is partition p (at most 6
 * digits), anything else the first server. */
static void test_list_partition_names(void)
{
    static const struct {
        const char *q;
        int server;
    } want[] = {
        {"Q#01", 1},   {"Q#0000001", 0}, {"Q#999999", 0}, {"Q#999998", 2},
        {"Q#", 0},     {"Q#1a", 0},      {"Q#-1", 0},     {"Q# 1", 0},
        {"a#b#4", 1},  {"#5", 2},        {"Q#+1", 0},     {"Q#100000", 1},
    };
    sluicei_router *r = NULL;
    char err[256] = "";
    test_env_password(NULL);
    CHECK(sluicei_router_parse(&r, "redis://s:1,redis://s:2,redis://s:3", err, sizeof err) ==
          SLUICE_OK);
    for (size_t i = 0; r && i < sizeof want / sizeof want[0]; i++) {
        sluicei_url u;
        CHECK(sluicei_router_url(r, want[i].q, 0, &u, err, sizeof err) == SLUICE_OK);
        if (u.port != want[i].server + 1) {
            fprintf(stderr, "    %s: server %d, want %d\n", want[i].q, u.port - 1,
                    want[i].server);
            CHECK(0);
        }
        sluicei_url_free(&u);
    }
    sluicei_router_close(r);
    /* Every key of a queue is in the slot of its name. */
    CHECK(cluster_slots_queue_slot("jobs") == sluicei_key_slot("jobs", 4));
    CHECK(cluster_slots_queue_slot("jobs#7") == sluicei_key_slot("jobs#7", 6));
    test_env_restore();
}

const struct test cluster_tests[] = {
    {"cluster/key slots", test_slots},
    {"cluster/url ?wait=N", test_url_wait},
    {"cluster/addresses", test_addresses},
    {"cluster/address: servers and seeds", test_address_servers},
    {"cluster/address: TLS", test_address_tls},
    {"cluster/address: seeds are nodes", test_address_seed_nodes},
    {"cluster/address: limits and malformed lists", test_address_limits},
    {"cluster/partition names on a list", test_list_partition_names},
    {"cluster/SLUICE_REDIS_PASSWORD", test_list_env_password},
    {"cluster/retryable errors", test_retryable},
    {"cluster/partitions on a list of servers", test_list_partitions},
    {NULL, NULL},
};
