/* Redis addresses and synchronous connections with reconnect. Internal.
 *
 * Accepted addresses:
 *   redis://[user[:password]@]host[:port][/db][?wait=N]   (port 6379, db 0 by default)
 *   unix:///path/to/redis.sock[?db=N][&wait=N]
 * wait=N (0..16) sets wait_replicas.
 * A password in the URL wins; otherwise SLUICE_REDIS_PASSWORD is used when
 * set, so that the secret need not appear on a command line. user without
 * password is an error only if the environment gives no password either. */
#ifndef SLUICE_CONN_H
#define SLUICE_CONN_H

#include <hiredis/hiredis.h>
#include <sluice/common.h>

#include "retry.h"

typedef struct sluicei_url {
    char *host;        /* NULL for unix sockets */
    int port;
    char *unix_path;   /* NULL for TCP */
    char *user;        /* NULL: no ACL user (AUTH password) */
    char *password;    /* NULL: no AUTH */
    int db;
    int wait_replicas; /* > 0: writes are followed by WAIT wait_replicas (see
                          SLUICEI_WAIT_MS); from "?wait=N", or set by the
                          cluster router when the node has replicas */
} sluicei_url;

/* Timeout of the WAIT that follows a write when url.wait_replicas > 0. A
 * WAIT that times out is not an error: the write stands, it is only not
 * known to be on a replica yet. */
#define SLUICEI_WAIT_MS 1000

/* Parses s into *u (zeroed first). On failure returns SLUICE_ERR_INVALID and
 * writes to err which part is wrong, e.g. "redis URL: port '70000' out of
 * range 1..65535 in 'redis://h:70000'". Never echoes the password. */
sluice_err sluicei_url_parse(const char *s, sluicei_url *u, char *err, size_t errlen);
void sluicei_url_free(sluicei_url *u);
/* Deep copy of src into *dst (zeroed first); SLUICE_ERR_NOMEM leaves *dst
 * zeroed. */
sluice_err sluicei_url_copy(sluicei_url *dst, const sluicei_url *src);
/* Writes a printable form of u without its password ("redis://h:6379/0"). */
void sluicei_url_describe(const sluicei_url *u, char *out, size_t outlen);

typedef struct sluicei_conn {
    redisContext *ctx;        /* NULL while disconnected */
    sluicei_url url;
    int connect_timeout_ms;
    int cmd_timeout_ms;       /* socket timeout; must exceed any blocking-read timeout */
    uint64_t reconnects;      /* successful reconnections after the first connect */
    sluicei_backoff backoff;  /* between reconnect attempts (retry.h) */
    char errstr[512];         /* last failure, one line */
    /* Optional: called before every reconnect attempt to point url at the
     * node that serves the queue now (cluster.h, sluicei_router_bind());
     * it may change host, port and wait_replicas. A non-OK result counts
     * as a failed attempt (its err goes to errstr). */
    sluice_err (*resolve)(void *arg, sluicei_url *url, char *err, size_t errlen);
    void *resolve_arg;
} sluicei_conn;

/* The one way this library opens a Redis connection: a blocking hiredis
 * context to u (or to host:port with u's credentials, when host is not
 * NULL), connect_ms to connect, io_ms the socket timeout after, then AUTH
 * when u has a password. Nothing more (no SELECT, no scripts): what a
 * probe of a cluster node needs, and the first steps of a sluicei_conn.
 * On SLUICE_OK *out is the caller's (redisFree). Else *out is NULL and err
 * says "<step>: <why>", without the address and never the password:
 * SLUICE_ERR_NOMEM, SLUICE_ERR_IO (connect, timeout, no reply, or a
 * passing state of the server, retry.h), SLUICE_ERR_AUTH (AUTH refused). */
sluice_err sluicei_redis_connect(redisContext **out, const sluicei_url *u, const char *host,
                                 int port, int connect_ms, int io_ms, char *err, size_t errlen);

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
 * dropped (c->ctx NULL): the caller decides whether to reconnect. */
sluice_err sluicei_conn_command(sluicei_conn *c, redisReply **out, const char *fmt, ...);
sluice_err sluicei_conn_commandargv(sluicei_conn *c, redisReply **out, int argc,
                                    const char **argv, const size_t *argvlen);

/* Pipelining: append commands, then read their replies in order. A failed
 * append or read drops the context as above. */
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

/* Error-message helpers shared by the address parsers (conn.c, cluster_addr.c):
 * printf into err (nothing when err is NULL), and a printable one-line
 * quote of s[0..n) (control bytes as '?', cut with "..." after
 * SLUICEI_QUOTE_MAX bytes) for dst of at least SLUICEI_QUOTE_MAX + 8. */
#define SLUICEI_QUOTE_MAX 48
void sluicei_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *sluicei_quote(char *dst, size_t dstlen, const char *s, size_t n);

/* Monotonic milliseconds and wall-clock microseconds. */
int64_t sluicei_now_ms(void);
uint64_t sluicei_wall_us(void);
/* A random 64-bit value from getrandom(), falling back to time and pid. */
uint64_t sluicei_random64(void);

#endif
