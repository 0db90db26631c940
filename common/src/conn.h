/* Synchronous connections to Redis with reconnect, and the one function
 * that opens a Redis connection (sluicei_redis_connect). Addresses are
 * url.h's. Internal. */
#ifndef SLUICE_CONN_H
#define SLUICE_CONN_H

#include <hiredis/hiredis.h>
#include <sluice/common.h>

#include "reply.h"
#include "retry.h"
#include "url.h"

typedef struct sluicei_conn {
    redisContext *ctx;        /* NULL while disconnected */
    sluicei_url url;
    int connect_timeout_ms;
    int cmd_timeout_ms;       /* socket timeout; must exceed any blocking-read timeout */
    uint64_t reconnects;      /* successful reconnections after the first connect */
    sluicei_backoff backoff;  /* between reconnect attempts (retry.h) */
    char errstr[512];         /* last failure, one line */
    sluicei_reply_guard guard; /* the limits of ctx's replies (reply.h): the defaults */
    /* Optional: called before every reconnect attempt to point url at the
     * node that serves the queue now (cluster.h, sluicei_router_bind());
     * it may change host, port and wait_replicas. A non-OK result counts
     * as a failed attempt (its err goes to errstr). */
    sluice_err (*resolve)(void *arg, sluicei_url *url, char *err, size_t errlen);
    void *resolve_arg;
} sluicei_conn;

/* The one way this library opens a Redis connection: a blocking hiredis
 * context to u (or to host:port with u's credentials, when host is not
 * NULL), connect_ms to connect, io_ms the socket timeout after, its replies
 * bounded by guard g (reply.h; the caller's, attached here, and it must
 * outlive the context), then AUTH when u has a password. When u is a
 * rediss:// address the connection, to host:port too, goes through a TLS
 * tunnel (tls.h) made within connect_ms. Nothing more (no SELECT, no
 * scripts): what a probe of a cluster node needs, and the first steps of a
 * sluicei_conn. Read its replies with sluicei_redis_command() and the like
 * (reply.h), never with hiredis's own, which know no bounds.
 * On SLUICE_OK *out is the caller's (redisFree). Else *out is NULL and err
 * says "<step>: <why>", without the address and never the password:
 * SLUICE_ERR_NOMEM, SLUICE_ERR_IO (connect, timeout, no reply, or a
 * passing state of the server, retry.h), SLUICE_ERR_AUTH (AUTH refused,
 * or TLS: a certificate refused), SLUICE_ERR_PROTOCOL (a reply beyond g's
 * limits; TLS: no TLS on that port), and for TLS SLUICE_ERR_INVALID (a
 * SLUICE_TLS_* setting), SLUICE_ERR_SYS. */
sluice_err sluicei_redis_connect(redisContext **out, sluicei_reply_guard *g, const sluicei_url *u,
                                 const char *host, int port, int connect_ms, int io_ms, char *err,
                                 size_t errlen);

/* Parses url and connects (TCP connect with timeout, AUTH, SELECT). On
 * failure *out is NULL and err explains (bad URL part, refused, wrong
 * password...). cmd_timeout_ms 0 means 10 s. */
sluice_err sluicei_conn_open(sluicei_conn **out, const char *url, int connect_timeout_ms,
                             int cmd_timeout_ms, char *err, size_t errlen);
/* The same with a parsed address (copied; url stays the caller's). */
sluice_err sluicei_conn_open_url(sluicei_conn **out, const sluicei_url *url,
                                 int connect_timeout_ms, int cmd_timeout_ms, char *err,
                                 size_t errlen);
void sluicei_conn_close(sluicei_conn *c);   /* NULL is a no-op */

/* Drops the current socket (if any) and connects again, sleeping with
 * exponential backoff (50 ms doubling to 2 s, +-25% jitter) between
 * attempts, until it succeeds or deadline_ms (CLOCK_MONOTONIC, see
 * sluicei_now_ms()) passes; deadline_ms < 0 waits forever, but *stop != 0
 * (when stop is not NULL) ends the wait with SLUICE_ERR_IO after one more
 * attempt at once (a clean shutdown may still find Redis back). Auth failures
 * are final: returns SLUICE_ERR_AUTH at once. When c->resolve is set it is
 * called before every attempt; its failure counts as a failed attempt
 * (its message in c->errstr), except SLUICE_ERR_AUTH, which is final. */
sluice_err sluicei_conn_reconnect(sluicei_conn *c, int64_t deadline_ms, volatile int *stop);

/* Runs a command (printf-style, as redisCommand). On success *out is the
 * reply, owned by the caller (freeReplyObject). A reply of type
 * REDIS_REPLY_ERROR is returned as SLUICE_ERR_REDIS with *out still set.
 * On a socket error returns SLUICE_ERR_IO, *out NULL, and the context is
 * dropped (c->ctx NULL): the caller decides whether to reconnect. A reply
 * beyond the limits of c->guard (reply.h) is SLUICE_ERR_PROTOCOL, *out
 * NULL, the context dropped too, and errstr says which limit: final, since
 * the same request would get the same reply again. */
sluice_err sluicei_conn_command(sluicei_conn *c, redisReply **out, const char *fmt, ...);
sluice_err sluicei_conn_commandargv(sluicei_conn *c, redisReply **out, int argc,
                                    const char **argv, const size_t *argvlen);

/* Pipelining: append commands, then read their replies in order. A failed
 * append or read drops the context as above (SLUICE_ERR_IO, or
 * SLUICE_ERR_PROTOCOL for a reply beyond the limits). */
sluice_err sluicei_conn_append_argv(sluicei_conn *c, int argc, const char **argv, const size_t *argvlen);
sluice_err sluicei_conn_read_reply(sluicei_conn *c, redisReply **out);
/* Sends everything appended so far without waiting for replies (hiredis
 * otherwise sends only when a reply is read), so that Redis works on one
 * command while the caller prepares the next. */
sluice_err sluicei_conn_flush(sluicei_conn *c);

/* SCRIPT LOAD of every script the library embeds (lua_scripts.h): what a
 * connect and a reconnect do before anything else, and what a NOSCRIPT
 * (the server's script cache flushed) calls for. */
sluice_err sluicei_conn_load_scripts(sluicei_conn *c);

/* Sets the socket timeout for the following commands (0: c->cmd_timeout_ms). */
void sluicei_conn_set_timeout(sluicei_conn *c, int timeout_ms);

/* Monotonic milliseconds and microseconds (the same clock), and
 * wall-clock microseconds. */
int64_t sluicei_now_ms(void);
int64_t sluicei_now_us(void);
uint64_t sluicei_wall_us(void);
/* A random 64-bit value from getrandom(), falling back to time and pid. */
uint64_t sluicei_random64(void);

#endif
