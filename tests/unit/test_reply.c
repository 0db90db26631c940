/* Bounded replies (common/src/reply.c): a blocking context on one end of a
 * socket pair, the test writing the server's side on the other. */
#include "reply.h"
#include "test.h"

#include "bufcache.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct side {
    redisContext *ctx;
    int peer;   /* the server's end */
    sluicei_reply_guard g;
} side;

/* A context whose replies are bounded by max_string and max_reply (0: the
 * defaults), and the socket its "server" writes to. */
static int open_side(side *s, size_t max_string, size_t max_reply)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    s->ctx = redisConnectFd(sv[0]);
    s->peer = sv[1];
    /* Room for everything a case writes before it reads. */
    int big = 1 << 20;
    setsockopt(s->peer, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    if (!s->ctx || s->ctx->err)
        return -1;
    /* A bug waits 2 s, not forever. */
    struct timeval tv = {2, 0};
    redisSetTimeout(s->ctx, tv);
    sluicei_reply_guard_init(&s->g, max_string, max_reply);
    sluicei_reply_guard_attach(&s->g, s->ctx);
    return 0;
}

static void close_side(side *s)
{
    if (s->ctx)
        redisFree(s->ctx);
    close(s->peer);
}

static void put(side *s, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(s->peer, c, n);
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

static void puts_(side *s, const char *text)
{
    put(s, text, strlen(text));
}

/* n bytes of ch. */
static void fill(side *s, char ch, size_t n)
{
    char buf[16384];
    memset(buf, ch, sizeof buf);
    while (n > 0) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        put(s, buf, k);
        n -= k;
    }
}

static redisReply *get(side *s)
{
    redisReply *r = NULL;
    if (sluicei_redis_get_reply(s->ctx, &r) != REDIS_OK)
        CHECK(r == NULL);
    return r;
}

/* The context failed on a limit, with msg in its error. */
static int failed_with(side *s, const char *msg)
{
    return s->ctx->err == REDIS_ERR_PROTOCOL && sluicei_reply_guard_tripped(&s->g) &&
           strstr(s->ctx->errstr, msg) != NULL;
}

static void test_within(void)
{
    side s;
    CHECK(open_side(&s, 1000, 100000) == 0);
    puts_(&s, "*3\r\n$3\r\nabc\r\n:42\r\n$-1\r\n$1000\r\n");
    fill(&s, 'x', 1000);
    puts_(&s, "\r\n+OK\r\n");
    redisReply *r = get(&s);
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    CHECK(r && r->element[0]->len == 3 && r->element[1]->integer == 42 &&
          r->element[2]->type == REDIS_REPLY_NIL);
    if (r)
        freeReplyObject(r);
    /* Exactly the longest string. */
    r = get(&s);
    CHECK(r && r->type == REDIS_REPLY_STRING && r->len == 1000);
    if (r)
        freeReplyObject(r);
    r = get(&s);
    CHECK(r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0);
    if (r)
        freeReplyObject(r);
    CHECK(s.ctx->err == 0 && !sluicei_reply_guard_tripped(&s.g));
    close_side(&s);
}

static size_t big_allocs;
static void *count_alloc(size_t n)
{
    big_allocs++;
    return malloc(n);
}

/* Strings of SLUICEI_BUFCACHE_MIN bytes and more get their memory from
 * big_alloc, inside arrays too; smaller ones, and other types, from
 * hiredis; freeReplyObject frees both. */
static void test_big_alloc(void)
{
    side s;
    CHECK(open_side(&s, 0, 0) == 0);
    s.g.big_alloc = count_alloc;
    big_allocs = 0;
    size_t big = SLUICEI_BUFCACHE_MIN;
    char head[64];
    snprintf(head, sizeof head, "*3\r\n$%zu\r\n", big);
    puts_(&s, head);
    fill(&s, 'a', big);
    puts_(&s, "\r\n$5\r\nsmall\r\n:7\r\n");
    snprintf(head, sizeof head, "$%zu\r\n", big + 1);
    puts_(&s, head);
    fill(&s, 'b', big + 1);
    puts_(&s, "\r\n");
    redisReply *r = get(&s);
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    if (r && r->elements == 3) {
        redisReply *a = r->element[0];
        CHECK(a->type == REDIS_REPLY_STRING && a->len == big && a->str[0] == 'a' &&
              a->str[big - 1] == 'a' && a->str[big] == '\0');
        CHECK(strcmp(r->element[1]->str, "small") == 0 && r->element[2]->integer == 7);
    }
    CHECK(big_allocs == 1);
    if (r)
        freeReplyObject(r);
    r = get(&s);
    CHECK(r && r->type == REDIS_REPLY_STRING && r->len == big + 1 && r->str[big] == 'b');
    CHECK(big_allocs == 2);
    if (r)
        freeReplyObject(r);
    close_side(&s);
}

static void test_declared_string(void)
{
    side s;
    CHECK(open_side(&s, 1000, 0) == 0);
    puts_(&s, "$1001\r\n");
    CHECK(get(&s) == NULL);
    CHECK(failed_with(&s, "a string of 1001 bytes (at most 1000)"));
    close_side(&s);

    /* The reported case: the declared length, then endless bytes. The
     * error comes at once, with no more than one read buffered. */
    CHECK(open_side(&s, 0, 0) == 0);
    puts_(&s, "$9999999999\r\n");
    fill(&s, 'x', 100000);
    CHECK(get(&s) == NULL);
    CHECK(failed_with(&s, "a string of 9999999999 bytes (at most 68157440)"));
    CHECK(s.ctx->reader->len < 64 * 1024);
    close_side(&s);

    /* More digits than any number, still coming. */
    CHECK(open_side(&s, 0, 0) == 0);
    puts_(&s, "$99999999999999999999999999999");
    CHECK(get(&s) == NULL);
    CHECK(failed_with(&s, "a string of 99999999999999999999... bytes"));
    close_side(&s);
}

static void test_declared_array(void)
{
    side s;
    CHECK(open_side(&s, 0, 0) == 0);
    puts_(&s, "*2147483647\r\n");
    fill(&s, ':', 1000);
    CHECK(get(&s) == NULL);
    CHECK(failed_with(&s, "an array of 2147483647 elements"));
    close_side(&s);

    /* Nested: each array fits, together they do not. */
    CHECK(open_side(&s, 0, 1 << 20) == 0);
    puts_(&s, "*2\r\n*100000\r\n*100000\r\n");
    CHECK(get(&s) == NULL);
    CHECK(failed_with(&s, "an array of 100000 elements (a reply takes at most 1048576 bytes)"));
    close_side(&s);
}

/* A reply of n strings of 50 bytes. */
static void put_list(side *s, int n)
{
    char head[32];
    snprintf(head, sizeof head, "*%d\r\n", n);
    puts_(s, head);
    for (int i = 0; i < n; i++) {
        puts_(s, "$50\r\n");
        fill(s, 'a' + i % 26, 50);
        puts_(s, "\r\n");
    }
}

static void test_total(void)
{
    side s;
    /* A string of 50 bytes takes about 130 in memory. */
    CHECK(open_side(&s, 1000, 10000) == 0);
    put_list(&s, 50);
    put_list(&s, 50);
    put_list(&s, 100);
    for (int i = 0; i < 2; i++) {
        /* Each reply is counted on its own. */
        redisReply *r = get(&s);
        CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 50);
        if (r)
            freeReplyObject(r);
    }
    CHECK(get(&s) == NULL);
    CHECK(failed_with(&s, "reply too large: over 10000 bytes in memory"));
    close_side(&s);
}

static void test_lines(void)
{
    side s;
    CHECK(open_side(&s, 0, 0) == 0);
    puts_(&s, "+");
    fill(&s, 'y', SLUICEI_REPLY_LINE_MAX + 20000);
    CHECK(get(&s) == NULL);
    CHECK(failed_with(&s, "a status, error or integer line of over 65536 bytes"));
    close_side(&s);

    /* A length line that does not end (hiredis would wait for its end). */
    const char *starts[] = {"$", "*"};
    for (int i = 0; i < 2; i++) {
        CHECK(open_side(&s, 0, 0) == 0);
        puts_(&s, starts[i]);
        fill(&s, '-', 40);
        CHECK(get(&s) == NULL);
        CHECK(failed_with(&s, "a length line of over 32 bytes"));
        close_side(&s);
    }
}

static void test_ready(void)
{
    side s;
    redisReply *r = NULL;
    CHECK(open_side(&s, 1000, 0) == 0);
    puts_(&s, ":7\r\n$1001\r\n");
    /* Nothing read yet: nothing ready. */
    CHECK(sluicei_redis_reply_ready(s.ctx, &r) == REDIS_OK && r == NULL);
    CHECK(redisBufferRead(s.ctx) == REDIS_OK);
    CHECK(sluicei_redis_reply_ready(s.ctx, &r) == REDIS_OK && r && r->integer == 7);
    if (r)
        freeReplyObject(r);
    CHECK(sluicei_redis_reply_ready(s.ctx, &r) == REDIS_OK && r == NULL);
    CHECK(sluicei_reply_guard_check(&s.g, s.ctx) == -1);
    CHECK(strstr(s.g.why, "a string of 1001 bytes") != NULL);
    close_side(&s);
}

/* What the async test's callbacks saw. */
static int pings, disconnects, disconnect_status;
static char disconnect_err[128];

static void on_ping(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    (void)priv;
    redisReply *r = reply;
    pings += r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    disconnects++;
    disconnect_status = status;
    snprintf(disconnect_err, sizeof disconnect_err, "%s", ac->errstr ? ac->errstr : "");
}

/* An async context that gets two replies to one request: the second ends
 * the connection with an error, where hiredis alone aborts the process. */
static void test_unasked(void)
{
    char dir[] = "/tmp/sluice-unit-XXXXXX", path[64];
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int l = -1, s = -1;
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/sock", dir);
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    CHECK((l = socket(AF_UNIX, SOCK_STREAM, 0)) >= 0);
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 4) == 0);
    redisAsyncContext *ac = redisAsyncConnectUnix(path);
    CHECK(ac && !ac->err);
    if (ac && !ac->err && (s = accept(l, NULL, NULL)) >= 0) {
        sluicei_reply_guard g;
        sluicei_reply_guard_init(&g, 0, 0);
        sluicei_reply_guard_attach_async(&g, ac);
        redisAsyncSetDisconnectCallback(ac, on_disconnect);
        pings = disconnects = 0;
        CHECK(redisAsyncCommand(ac, on_ping, NULL, "PING") == REDIS_OK);
        const char twice[] = "+OK\r\n+OK\r\n";
        CHECK(write(s, twice, sizeof twice - 1) == (ssize_t)(sizeof twice - 1));
        /* Reads both, hands the first to PING, ends at the second (and
         * frees ac). */
        redisAsyncHandleRead(ac);
        CHECK(pings == 1);
        CHECK(disconnects == 1 && disconnect_status == REDIS_ERR);
        /* hiredis names any failure of the reply functions "Out of
         * memory"; the guard says what it was. */
        CHECK(disconnect_err[0] != '\0');
        CHECK(sluicei_reply_guard_tripped(&g));
        CHECK(strcmp(g.why, "reply malformed: a reply to no request") == 0);
    } else if (ac) {
        redisAsyncFree(ac);
    }
    if (s >= 0)
        close(s);
    if (l >= 0)
        close(l);
    unlink(path);
    rmdir(dir);
}

static void test_limits_for(void)
{
    size_t ms, mr;
    sluicei_reply_limits_for((size_t)1 << 20, 4, &ms, &mr);
    CHECK(ms == SLUICEI_REPLY_STRING_MAX && mr == SLUICEI_REPLY_MAX);
    sluicei_reply_limits_for((size_t)256 << 20, 8, &ms, &mr);
    CHECK(ms == ((size_t)256 << 20) + SLUICEI_REPLY_SLACK);
    CHECK(mr == 8 * (((size_t)256 << 20) + 256) + SLUICEI_REPLY_SLACK);
    sluicei_reply_limits_for(SIZE_MAX - 5, 1024, &ms, &mr);
    CHECK(ms == SIZE_MAX && mr == SIZE_MAX);
}

const struct test reply_tests[] = {
    {"reply/within the limits", test_within},
    {"reply/big strings from big_alloc", test_big_alloc},
    {"reply/declared string too long", test_declared_string},
    {"reply/declared array too long", test_declared_array},
    {"reply/whole reply too large", test_total},
    {"reply/endless lines", test_lines},
    {"reply/without waiting", test_ready},
    {"reply/a reply to no request", test_unasked},
    {"reply/limits of a consumer", test_limits_for},
    {NULL, NULL},
};
