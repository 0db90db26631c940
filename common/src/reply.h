/* Replies from Redis read within bounds. Internal.
 *
 * hiredis 0.14 lets the peer choose its allocations: a bulk string's
 * declared length is buffered until that many bytes came (`$9999999999`
 * followed by endless bytes grows the reader's buffer without end), and
 * an array's element count is allocated at once (`*2147483647`: 16 GiB).
 * A sluicei_reply_guard installed on a context's reader bounds both:
 *
 *   - one bulk string holds at most max_string bytes: a larger declared
 *     length is an error as soon as its digits arrive, before the bytes
 *     are buffered; a status, error or integer line at most
 *     SLUICEI_REPLY_LINE_MAX, a length line at most 32 bytes;
 *   - one reply takes at most max_reply bytes of memory, every object of
 *     it counted (element arrays as declared, before they are allocated).
 *
 * The largest legitimate string is a batch frame: the queue's frame limit,
 * SLUICEI_MAX_FRAME_DEFAULT (64 MiB) unless the queue was created with
 * --max-frame-bytes. The largest legitimate reply is a consumer's MGET of
 * up to `prefetch` frames (fetch.c); everything else is small (the take
 * script returns at most 2 * prefetch + 2 short strings) except the lists
 * sluice-ctl reads whole (dead letters, failed tasks: about 100 bytes per
 * entry). So a connection that carries no frames keeps the defaults below,
 * and a consumer's connections raise them to its frame limit and prefetch
 * (sluicei_reply_limits_for()). docs/DEPLOY.md, "Limits against hostile
 * peers", gives the numbers.
 *
 * A limit broken ends the connection: the context gets err
 * REDIS_ERR_PROTOCOL and an errstr that says which limit and the size
 * ("reply too large: a string of 9999999999 bytes (at most 68157440)"),
 * and the guard keeps that text in why. (An async context broken while
 * hiredis parses reports "Out of memory", hiredis's name for any failure
 * of the reply functions: its owner reads the guard's why instead.)
 * A guard is the caller's: it must outlive the parsing of its context (in
 * practice, the context); freeing the context leaves the guard alone.
 * Not thread-safe: a guard belongs to its context's thread. */
#ifndef SLUICE_REPLY_H
#define SLUICE_REPLY_H

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stddef.h>

/* The longest status, error or integer line (Redis's and the scripts'
 * errors are one short sentence). */
#define SLUICEI_REPLY_LINE_MAX ((size_t)64 << 10)
/* Room above a frame for what travels with it (lengths, ids, headers). */
#define SLUICEI_REPLY_SLACK ((size_t)1 << 20)
/* The longest string of a reply on a connection that carries no frames
 * larger than the default frame limit: 64 MiB + 1 MiB. */
#define SLUICEI_REPLY_STRING_MAX (((size_t)64 << 20) + SLUICEI_REPLY_SLACK)
/* The most memory one such reply may take, every object counted: twice
 * the longest string, 130 MiB (a list of a million dead letters fits). */
#define SLUICEI_REPLY_MAX (2 * SLUICEI_REPLY_STRING_MAX)

typedef struct sluicei_reply_guard {
    const redisReplyObjectFunctions *base;   /* hiredis's own, which build the objects */
    size_t max_string;   /* bytes of one bulk string */
    size_t max_reply;    /* bytes the objects of one reply may take */
    size_t used;         /* by the reply being read */
    const redisCallbackList *expect; /* an async context's requests awaiting a
                                        reply; NULL for a blocking context */
    void *(*big_alloc)(size_t); /* NULL, or where strings of SLUICEI_BUFCACHE_MIN
                                   bytes and more get their memory (freed with
                                   free() all the same) */
    char why[120];       /* the limit broken; empty while none was */
} sluicei_reply_guard;

/* Sets g's limits (0: the defaults above) and clears its state. */
void sluicei_reply_guard_init(sluicei_reply_guard *g, size_t max_string, size_t max_reply);

/* The limits of a connection that carries frames of up to frame_max bytes,
 * up to `frames` of them in one reply (a consumer: its max_batch_bytes and
 * prefetch); never below the defaults. */
void sluicei_reply_limits_for(size_t frame_max, size_t frames, size_t *max_string,
                              size_t *max_reply);

/* Installs g on ctx's reader, with its state cleared (for a new context). */
void sluicei_reply_guard_attach(sluicei_reply_guard *g, redisContext *ctx);

/* The same for an async context, where g also refuses a reply that no
 * request awaits (hiredis 0.14 asserts on one, i.e. aborts the process),
 * unless it is an error reply (hiredis ends the connection with it: "max
 * number of clients reached"). */
void sluicei_reply_guard_attach_async(sluicei_reply_guard *g, redisAsyncContext *ac);

/* Checks what ctx's reader holds unparsed against g, after a parse: a
 * string declared larger than max_string, or more unparsed bytes than one
 * string may have. Returns 0, or -1 with g->why set (also when a limit was
 * broken during the parse). The caller then calls
 * sluicei_reply_guard_fail() before reading more. */
int sluicei_reply_guard_check(sluicei_reply_guard *g, const redisContext *ctx);

/* Puts g->why into ctx as its error (REDIS_ERR_PROTOCOL), so that hiredis
 * reads nothing more from it and reports it as a failed connection.
 * Returns REDIS_ERR. */
int sluicei_reply_guard_fail(const sluicei_reply_guard *g, redisContext *ctx);

/* Whether ctx's last error was a broken limit of g (its errstr says which). */
int sluicei_reply_guard_tripped(const sluicei_reply_guard *g);

/* redisGetReply() within the bounds of the guard installed on the blocking
 * context ctx: writes what is queued, then reads until a reply is complete.
 * REDIS_OK with *out the reply (the caller's: freeReplyObject), or
 * REDIS_ERR with *out NULL and ctx->err/errstr set (a socket error, a
 * malformed reply, a broken limit). */
int sluicei_redis_get_reply(redisContext *ctx, redisReply **out);

/* The same as the next reply found in what was read already, without
 * reading: REDIS_OK with *out NULL when none is complete yet. */
int sluicei_redis_reply_ready(redisContext *ctx, redisReply **out);

/* redisCommand() and redisCommandArgv() through sluicei_redis_get_reply():
 * the reply (the caller's), or NULL with ctx->err/errstr set. */
redisReply *sluicei_redis_command(redisContext *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
redisReply *sluicei_redis_vcommand(redisContext *ctx, const char *fmt, va_list ap);
redisReply *sluicei_redis_command_argv(redisContext *ctx, int argc, const char **argv,
                                       const size_t *argvlen);

#endif
