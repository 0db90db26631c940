/* Synchronous connections to Redis with reconnect (conn.h); the addresses
 * they connect to are url.c's. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* clock_gettime, getrandom, nanosleep under -std=c11 */
#endif

#include "conn.h"
#include "retry.h"
#include "lua_scripts.h"
#include "tls.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Longest sleep before *stop is looked at again. */
#define STOP_POLL_MS 50
/* A connect never gets less than this, even right at the deadline. */
#define CONNECT_TIMEOUT_FLOOR_MS 10

#define seterr sluicei_seterr

/* ---- time and randomness ---------------------------------------------- */

int64_t sluicei_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sluicei_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

uint64_t sluicei_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* splitmix64 finaliser: spreads the few varying bits of the fallback seed. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

uint64_t sluicei_random64(void)
{
    uint64_t v;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
        return v;
    /* No entropy yet (early boot) or an old kernel: jitter only needs two
     * processes started together to differ. */
    struct timespec rt, mono;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    v = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec;
    v ^= (uint64_t)getpid() << 32;
    v ^= mix64((uint64_t)mono.tv_nsec ^ (uint64_t)(uintptr_t)&v);
    return mix64(v);
}


static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    /* An interrupted sleep just ends early; callers loop on the clock. */
    nanosleep(&ts, NULL);
}

/* ---- connections ------------------------------------------------------ */

static struct timeval ms_to_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

static void drop(sluicei_conn *c)
{
    if (c->ctx) {
        redisFree(c->ctx);
        c->ctx = NULL;
    }
}

/* Records the context's socket error in c->errstr ("redis <addr>: <what>:
 * <why>") and drops the context. SLUICE_ERR_PROTOCOL when the error was a
 * reply beyond the limits (its errstr says which), else SLUICE_ERR_IO. */
static sluice_err fail_io(sluicei_conn *c, const char *what)
{
    sluice_err e = sluicei_reply_guard_tripped(&c->guard) ? SLUICE_ERR_PROTOCOL : SLUICE_ERR_IO;
    char addr[256];
    const char *why = c->ctx && c->ctx->err ? c->ctx->errstr : "no reply";
    /* A blocking socket that hits SO_RCVTIMEO reports EAGAIN. */
    const char *hint = strcmp(why, strerror(EAGAIN)) == 0 ? " (no reply within the timeout)" : "";
    sluicei_url_describe(&c->url, addr, sizeof addr);
    if (what)
        snprintf(c->errstr, sizeof c->errstr, "redis %s: %s: %s%s", addr, what, why, hint);
    else
        snprintf(c->errstr, sizeof c->errstr, "redis %s: %s%s", addr, why, hint);
    drop(c);
    return e;
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Maps the server's answer msg to a setup step (AUTH, SELECT, SCRIPT LOAD)
 * into a result and c->errstr, then drops the context. */
static sluice_err fail_setup(sluicei_conn *c, const char *step, const char *msg)
{
    char addr[256];
    sluice_err e;
    sluicei_url_describe(&c->url, addr, sizeof addr);
    if (sluicei_error_transient(msg, strlen(msg))) {
        snprintf(c->errstr, sizeof c->errstr, "redis %s: %s: %s", addr, step, msg);
        e = SLUICE_ERR_IO;
    } else if (strcmp(step, "AUTH") == 0 || starts_with(msg, "NOAUTH") ||
               starts_with(msg, "WRONGPASS")) {
        snprintf(c->errstr, sizeof c->errstr, "redis %s: authentication failed: %s", addr, msg);
        e = SLUICE_ERR_AUTH;
    } else if (starts_with(msg, "NOPERM")) {
        snprintf(c->errstr, sizeof c->errstr, "redis %s: %s not permitted: %s", addr, step, msg);
        e = SLUICE_ERR_AUTH;
    } else {
        snprintf(c->errstr, sizeof c->errstr, "redis %s: %s: %s", addr, step, msg);
        /* SELECT of a db the server does not have: no retry will help. */
        e = strcmp(step, "SELECT") == 0 ? SLUICE_ERR_INVALID : SLUICE_ERR_REDIS;
    }
    drop(c);
    return e;
}

/* Checks the reply r of setup step `step` and frees it. */
static sluice_err setup_reply(sluicei_conn *c, redisReply *r, const char *step)
{
    if (!r)
        return fail_io(c, step);
    sluice_err e = SLUICE_OK;
    if (r->type == REDIS_REPLY_ERROR)
        e = fail_setup(c, step, r->str);
    freeReplyObject(r);
    return e;
}

sluice_err sluicei_conn_load_scripts(sluicei_conn *c)
{
    for (unsigned i = 0; i < sluicei_lua_count; i++) {
        redisReply *r = NULL;
        sluice_err e = sluicei_conn_command(c, &r, "SCRIPT LOAD %s", sluicei_lua_sources[i]);
        if (e != SLUICE_OK) {
            if (r) {
                snprintf(c->errstr, sizeof c->errstr, "SCRIPT LOAD: %s", r->str);
                freeReplyObject(r);
            }
            return e;
        }
        /* The server names a script by the SHA1 of its text, which the
         * build computed: a different answer is not a Redis. */
        int same = r->type == REDIS_REPLY_STRING && r->len == 40 &&
                   memcmp(r->str, sluicei_lua_shas[i], 40) == 0;
        freeReplyObject(r);
        if (!same) {
            snprintf(c->errstr, sizeof c->errstr,
                     "SCRIPT LOAD %s: the server's SHA1 is not the script's", sluicei_lua_names[i]);
            return SLUICE_ERR_PROTOCOL;
        }
    }
    return SLUICE_OK;
}

sluice_err sluicei_redis_connect(redisContext **out, sluicei_reply_guard *g, const sluicei_url *u,
                                 const char *host, int port, int connect_ms, int io_ms, char *err,
                                 size_t errlen)
{
    *out = NULL;
    struct timeval tv = ms_to_tv(connect_ms);
    redisContext *ctx;
    if (u->tls) {
        /* hiredis gets a local socket whose bytes the relay carries in TLS. */
        int fd;
        sluice_err e = sluicei_tls_open_fd(host ? host : u->host, host ? port : u->port,
                                           connect_ms, &fd, err, errlen);
        if (e != SLUICE_OK)
            return e;
        ctx = redisConnectFd(fd);
        if (!ctx)
            close(fd);
    } else {
        ctx = host ? redisConnectWithTimeout(host, port, tv)
              : u->unix_path ? redisConnectUnixWithTimeout(u->unix_path, tv)
                             : redisConnectWithTimeout(u->host, u->port, tv);
    }
    if (!ctx) {
        seterr(err, errlen, "connect: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    const char *step = NULL;
    if (ctx->err)
        step = "connect";
    else if (redisSetTimeout(ctx, ms_to_tv(io_ms)) != REDIS_OK)
        step = "setting the socket timeout";
    sluicei_reply_guard_attach(g, ctx);
    redisReply *r = NULL;
    if (!step && u->password) {
        r = u->user ? sluicei_redis_command(ctx, "AUTH %s %s", u->user, u->password)
                    : sluicei_redis_command(ctx, "AUTH %s", u->password);
        if (!r)
            step = "AUTH";
    }
    if (step) {
        const char *why = ctx->err ? ctx->errstr : "no reply";
        /* A blocking socket that hits SO_RCVTIMEO reports EAGAIN. */
        const char *hint =
            strcmp(why, strerror(EAGAIN)) == 0 ? " (no reply within the timeout)" : "";
        seterr(err, errlen, "%s: %s%s", step, why, hint);
        redisFree(ctx);
        return sluicei_reply_guard_tripped(g) ? SLUICE_ERR_PROTOCOL : SLUICE_ERR_IO;
    }
    if (r && r->type == REDIS_REPLY_ERROR) {
        /* A server that loads its data or runs a script answers again
         * soon; anything else is about the credentials. */
        sluice_err e = SLUICE_ERR_AUTH;
        if (sluicei_error_transient(r->str, r->len)) {
            seterr(err, errlen, "AUTH: %s", r->str);
            e = SLUICE_ERR_IO;
        } else {
            seterr(err, errlen, "authentication failed: %s", r->str);
        }
        freeReplyObject(r);
        redisFree(ctx);
        return e;
    }
    if (r)
        freeReplyObject(r);
    *out = ctx;
    return SLUICE_OK;
}

/* Adds to c->errstr, after a plain TCP connection failed in its first
 * commands, that the port may be a TLS one: a TLS port drops a plain
 * request (or answers with a TLS alert, which starts with byte 0x15). */
static void tls_port_hint(sluicei_conn *c)
{
    const char *m = c->errstr;
    if (c->url.tls || c->url.unix_path ||
        !(strstr(m, "Connection reset by peer") || strstr(m, "Server closed the connection") ||
          strstr(m, "got \"\\x15\"")))
        return;
    size_t n = strlen(m);
    snprintf(c->errstr + n, sizeof c->errstr - n,
             " (if this port is Redis's tls-port, use rediss://)");
}

/* One attempt: connect, AUTH, SELECT, SCRIPT LOAD. On failure c->ctx is
 * NULL and c->errstr says why; only SLUICE_ERR_IO is worth retrying. */
static sluice_err connect_once(sluicei_conn *c, int connect_ms)
{
    const sluicei_url *u = &c->url;
    sluice_err e;
    drop(c);

    char why[sizeof c->errstr - 64];
    e = sluicei_redis_connect(&c->ctx, &c->guard, u, NULL, 0, connect_ms, c->cmd_timeout_ms, why,
                              sizeof why);
    if (e != SLUICE_OK) {
        char addr[256];
        sluicei_url_describe(u, addr, sizeof addr);
        snprintf(c->errstr, sizeof c->errstr, "redis %.200s: %.290s", addr, why);
        if (e == SLUICE_ERR_IO && strncmp(why, "connect: ", 9) != 0)
            tls_port_hint(c);
        return e;
    }
    if (u->db != 0) {
        redisReply *r = sluicei_redis_command(c->ctx, "SELECT %d", u->db);
        if ((e = setup_reply(c, r, "SELECT")) != SLUICE_OK) {
            if (e == SLUICE_ERR_IO)
                tls_port_hint(c);
            return e;
        }
    }

    /* A new server (or a restarted one) has none of our scripts. */
    e = sluicei_conn_load_scripts(c);
    if (e == SLUICE_ERR_REDIS) {
        /* c->errstr is "SCRIPT LOAD: <server message>"; NOAUTH lands here
         * when the URL has no password but the server wants one. */
        char msg[sizeof c->errstr];
        const char *m = c->errstr;
        if (starts_with(m, "SCRIPT LOAD: "))
            m += strlen("SCRIPT LOAD: ");
        snprintf(msg, sizeof msg, "%s", m);
        return fail_setup(c, "SCRIPT LOAD", msg);
    }
    if (e != SLUICE_OK) {
        if (c->ctx) {
            char addr[256], msg[sizeof c->errstr];
            sluicei_url_describe(u, addr, sizeof addr);
            snprintf(msg, sizeof msg, "%s", c->errstr);
            snprintf(c->errstr, sizeof c->errstr, "redis %.200s: %.290s", addr, msg);
            drop(c);
        }
        if (e == SLUICE_ERR_IO)
            tls_port_hint(c);
        return e;
    }
    return SLUICE_OK;
}

/* Connects c, whose url is set, for the first time. On failure closes c. */
static sluice_err open_parsed(sluicei_conn **out, sluicei_conn *c, int connect_timeout_ms,
                              int cmd_timeout_ms, char *err, size_t errlen)
{
    sluice_err e;
    sluicei_reply_guard_init(&c->guard, 0, 0);
    c->connect_timeout_ms =
        connect_timeout_ms > 0 ? connect_timeout_ms : SLUICE_CONNECT_TIMEOUT_MS_DEFAULT;
    c->cmd_timeout_ms = cmd_timeout_ms > 0 ? cmd_timeout_ms : SLUICE_COMMAND_TIMEOUT_MS_DEFAULT;
    sluicei_backoff_init(&c->backoff, SLUICEI_BACKOFF_MIN_MS, SLUICEI_BACKOFF_MAX_MS,
                         sluicei_random64() | 1);
    e = connect_once(c, c->connect_timeout_ms);
    if (e != SLUICE_OK) {
        seterr(err, errlen, "%s", c->errstr);
        sluicei_conn_close(c);
        return e;
    }
    *out = c;
    return SLUICE_OK;
}

sluice_err sluicei_conn_open(sluicei_conn **out, const char *url, int connect_timeout_ms,
                             int cmd_timeout_ms, char *err, size_t errlen)
{
    *out = NULL;
    sluicei_conn *c = calloc(1, sizeof *c);
    if (!c) {
        seterr(err, errlen, "redis: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    sluice_err e = sluicei_url_parse(url, &c->url, err, errlen);
    if (e != SLUICE_OK) {
        free(c);
        return e;
    }
    return open_parsed(out, c, connect_timeout_ms, cmd_timeout_ms, err, errlen);
}

sluice_err sluicei_conn_open_url(sluicei_conn **out, const sluicei_url *url,
                                 int connect_timeout_ms, int cmd_timeout_ms, char *err,
                                 size_t errlen)
{
    *out = NULL;
    sluicei_conn *c = calloc(1, sizeof *c);
    if (!c || sluicei_url_copy(&c->url, url) != SLUICE_OK) {
        free(c);
        seterr(err, errlen, "redis: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    return open_parsed(out, c, connect_timeout_ms, cmd_timeout_ms, err, errlen);
}

void sluicei_conn_close(sluicei_conn *c)
{
    if (!c)
        return;
    drop(c);
    sluicei_url_free(&c->url);
    free(c);
}

sluice_err sluicei_conn_reconnect(sluicei_conn *c, int64_t deadline_ms, volatile int *stop)
{
    int64_t start = sluicei_now_ms();
    unsigned tries = 0;
    int last_try = 0;   /* made since *stop was set */
    drop(c);
    for (;;) {
        const char *why = NULL;
        if (stop && *stop && last_try) {
            why = "stopped";
        } else {
            /* Told to stop: one more try at once, without the backoff, so
             * that a clean shutdown (a task handed back, the last pushes
             * confirmed) still reaches a Redis that is back by now. */
            if (stop && *stop)
                last_try = 1;
            int connect_ms = c->connect_timeout_ms;
            if (deadline_ms >= 0) {
                int64_t left = deadline_ms - sluicei_now_ms();
                if (left < connect_ms)
                    connect_ms = left > CONNECT_TIMEOUT_FLOOR_MS ? (int)left
                                                                 : CONNECT_TIMEOUT_FLOOR_MS;
            }
            sluice_err e = SLUICE_OK;
            if (c->resolve) {
                /* Where the queue lives now (a failover, a moved slot). */
                char rerr[sizeof c->errstr];
                rerr[0] = '\0';
                e = c->resolve(c->resolve_arg, &c->url, rerr, sizeof rerr);
                if (e != SLUICE_OK)
                    snprintf(c->errstr, sizeof c->errstr, "%s",
                             rerr[0] ? rerr : sluice_strerror(e));
                /* Only a refused password is final; anything else (no node
                 * answers, the slot has no master yet) may pass. */
                if (e == SLUICE_ERR_AUTH)
                    return e;
                if (e != SLUICE_OK)
                    e = SLUICE_ERR_IO;
            }
            if (e == SLUICE_OK)
                e = connect_once(c, connect_ms);
            tries++;
            if (e == SLUICE_OK) {
                sluicei_backoff_reset(&c->backoff);
                c->reconnects++;
                return SLUICE_OK;
            }
            if (e != SLUICE_ERR_IO)
                return e;   /* wrong password, missing db...: final */

            int64_t now = sluicei_now_ms();
            int64_t wake = now + sluicei_backoff_next(&c->backoff);
            if (deadline_ms >= 0 && wake > deadline_ms)
                wake = deadline_ms;
            while (!(stop && *stop) && (now = sluicei_now_ms()) < wake)
                sleep_ms(wake - now > STOP_POLL_MS ? STOP_POLL_MS : (int)(wake - now));
            if (stop && *stop && last_try)
                why = "stopped";
            else if (!(stop && *stop) && deadline_ms >= 0 && sluicei_now_ms() >= deadline_ms)
                why = "gave up";
        }
        if (why) {
            char last[sizeof c->errstr];
            if (tries == 0) {
                char addr[256];
                sluicei_url_describe(&c->url, addr, sizeof addr);
                snprintf(c->errstr, sizeof c->errstr, "redis %s: reconnect stopped", addr);
                return SLUICE_ERR_IO;
            }
            snprintf(last, sizeof last, "%s", c->errstr);
            snprintf(c->errstr, sizeof c->errstr, "%.400s (%s reconnecting after %u attempt%s in %lld ms)",
                     last, why, tries, tries == 1 ? "" : "s", (long long)(sluicei_now_ms() - start));
            return SLUICE_ERR_IO;
        }
    }
}

/* Hands reply r (possibly NULL after a socket error) to the caller. */
static sluice_err finish(sluicei_conn *c, redisReply *r, redisReply **out)
{
    if (!r)
        return fail_io(c, NULL);
    *out = r;
    if (r->type == REDIS_REPLY_ERROR) {
        char addr[256];
        sluicei_url_describe(&c->url, addr, sizeof addr);
        snprintf(c->errstr, sizeof c->errstr, "redis %s: %s", addr, r->str);
        return SLUICE_ERR_REDIS;
    }
    return SLUICE_OK;
}

static sluice_err not_connected(sluicei_conn *c)
{
    char addr[256];
    sluicei_url_describe(&c->url, addr, sizeof addr);
    snprintf(c->errstr, sizeof c->errstr, "redis %s: not connected", addr);
    return SLUICE_ERR_IO;
}

sluice_err sluicei_conn_command(sluicei_conn *c, redisReply **out, const char *fmt, ...)
{
    *out = NULL;
    if (!c->ctx)
        return not_connected(c);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = sluicei_redis_vcommand(c->ctx, fmt, ap);
    va_end(ap);
    return finish(c, r, out);
}

sluice_err sluicei_conn_commandargv(sluicei_conn *c, redisReply **out, int argc,
                                    const char **argv, const size_t *argvlen)
{
    *out = NULL;
    if (!c->ctx)
        return not_connected(c);
    return finish(c, sluicei_redis_command_argv(c->ctx, argc, argv, argvlen), out);
}

sluice_err sluicei_conn_append_argv(sluicei_conn *c, int argc, const char **argv,
                                    const size_t *argvlen)
{
    if (!c->ctx)
        return not_connected(c);
    if (redisAppendCommandArgv(c->ctx, argc, argv, argvlen) != REDIS_OK)
        return fail_io(c, "append");
    return SLUICE_OK;
}

sluice_err sluicei_conn_flush(sluicei_conn *c)
{
    int done = 0;
    if (!c->ctx)
        return not_connected(c);
    while (!done)
        if (redisBufferWrite(c->ctx, &done) != REDIS_OK)
            return fail_io(c, "send");
    return SLUICE_OK;
}

sluice_err sluicei_conn_read_reply(sluicei_conn *c, redisReply **out)
{
    redisReply *r = NULL;
    *out = NULL;
    if (!c->ctx)
        return not_connected(c);
    if (sluicei_redis_get_reply(c->ctx, &r) != REDIS_OK)
        return fail_io(c, NULL);
    return finish(c, r, out);
}

void sluicei_conn_set_timeout(sluicei_conn *c, int timeout_ms)
{
    if (!c->ctx)
        return;
    if (redisSetTimeout(c->ctx, ms_to_tv(timeout_ms > 0 ? timeout_ms : c->cmd_timeout_ms)) !=
        REDIS_OK) {
        char addr[256];
        sluicei_url_describe(&c->url, addr, sizeof addr);
        /* The old timeout stays; the next command still works. */
        snprintf(c->errstr, sizeof c->errstr, "redis %s: setting the socket timeout: %s", addr,
                 strerror(errno));
    }
}
