/* Replies from Redis read within bounds (reply.h): reply-object functions
 * that count what a reply takes before hiredis allocates it, a look at
 * what the reader holds unparsed, and a blocking read of our own in place
 * of redisGetReply(). */
#include "reply.h"

#include "bufcache.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What malloc spends on an allocation beyond its size. */
#define ALLOC_OVERHEAD 16
/* One reply object. */
#define OBJ_COST (sizeof(redisReply) + ALLOC_OVERHEAD)
/* What one frame costs in memory beyond its bytes (object, NUL, element
 * pointer, allocations), rounded up. */
#define FRAME_OVERHEAD 256
/* The bytes of a string's header that the reader keeps unparsed with it:
 * up to 20 digits of length and two CRLF. */
#define HEADER_BYTES 32
/* Digits of a declared length shown in a message. */
#define SHOWN_DIGITS 20

static size_t add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static size_t mul_sat(size_t a, size_t b)
{
    return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

void sluicei_reply_guard_init(sluicei_reply_guard *g, size_t max_string, size_t max_reply)
{
    memset(g, 0, sizeof *g);
    g->max_string = max_string ? max_string : SLUICEI_REPLY_STRING_MAX;
    g->max_reply = max_reply ? max_reply : SLUICEI_REPLY_MAX;
}

void sluicei_reply_limits_for(size_t frame_max, size_t frames, size_t *max_string,
                              size_t *max_reply)
{
    size_t s = add_sat(frame_max, SLUICEI_REPLY_SLACK);
    size_t r = add_sat(mul_sat(frames ? frames : 1, add_sat(frame_max, FRAME_OVERHEAD)),
                       SLUICEI_REPLY_SLACK);
    *max_string = s > SLUICEI_REPLY_STRING_MAX ? s : SLUICEI_REPLY_STRING_MAX;
    *max_reply = r > SLUICEI_REPLY_MAX ? r : SLUICEI_REPLY_MAX;
}

/* ---- counting the objects of a reply ---------------------------------- */

/* Whether t starts a reply that no request of an
 * async context awaits. hiredis parses one reply at a time and hands it
 * to its request before it parses the next, so when a reply starts, the
 * first request waiting is its own. */
static int unasked(sluicei_reply_guard *g, const redisReadTask *t)
{
    if (t->parent || !g->expect || g->expect->head || t->type == REDIS_REPLY_ERROR)
        return 0;
    snprintf(g->why, sizeof g->why, "reply malformed: a reply to no request");
    return 1;
}

/* Charges cost to the reply task t belongs to (a task without a parent
 * starts a new reply). Returns 0, or -1 with g->why set (first failure). */
static int charge(sluicei_reply_guard *g, const redisReadTask *t, size_t cost)
{
    if (!t->parent)
        g->used = 0;
    if (cost > g->max_reply - g->used) {
        if (!g->why[0])
            snprintf(g->why, sizeof g->why, "reply too large: over %zu bytes in memory",
                     g->max_reply);
        return -1;
    }
    g->used += cost;
    return 0;
}

/* The string object hiredis would build (createStringObject), its bytes
 * in memory from alloc; freeReplyObject frees it as one of hiredis's. */
static void *big_string(const redisReadTask *t, const char *s, size_t len,
                        void *(*alloc)(size_t))
{
    redisReply *r = calloc(1, sizeof *r);
    char *buf = r ? alloc(len + 1) : NULL;
    if (!buf) {
        free(r);
        return NULL;
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    r->type = t->type;
    r->str = buf;
    r->len = len;
    if (t->parent) {
        redisReply *parent = t->parent->obj;
        parent->element[t->idx] = r;
    }
    return r;
}

static void *guarded_string(const redisReadTask *t, char *s, size_t len)
{
    sluicei_reply_guard *g = t->privdata;
    if (unasked(g, t))
        return NULL;
    if (len > g->max_string) {
        snprintf(g->why, sizeof g->why, "reply too large: a string of %zu bytes (at most %zu)",
                 len, g->max_string);
        return NULL;
    }
    if (charge(g, t, OBJ_COST + len + 1 + ALLOC_OVERHEAD) != 0)
        return NULL;
    if (g->big_alloc && len >= SLUICEI_BUFCACHE_MIN)
        return big_string(t, s, len, g->big_alloc);
    return g->base->createString(t, s, len);
}

static void *guarded_array(const redisReadTask *t, int n)
{
    sluicei_reply_guard *g = t->privdata;
    size_t cost = OBJ_COST;
    if (unasked(g, t))
        return NULL;
    if (n > 0)
        cost += (size_t)n * sizeof(redisReply *) + ALLOC_OVERHEAD;
    if (charge(g, t, cost) != 0) {
        /* The array, not the total, says best what happened. */
        snprintf(g->why, sizeof g->why,
                 "reply too large: an array of %d elements (a reply takes at most %zu bytes)", n,
                 g->max_reply);
        return NULL;
    }
    return g->base->createArray(t, n);
}

static void *guarded_integer(const redisReadTask *t, long long v)
{
    sluicei_reply_guard *g = t->privdata;
    return !unasked(g, t) && charge(g, t, OBJ_COST) == 0 ? g->base->createInteger(t, v) : NULL;
}

static void *guarded_nil(const redisReadTask *t)
{
    sluicei_reply_guard *g = t->privdata;
    return !unasked(g, t) && charge(g, t, OBJ_COST) == 0 ? g->base->createNil(t) : NULL;
}

/* Never written: the functions find their guard in the task. freeObject
 * is hiredis's own (its default functions free with it too). */
static redisReplyObjectFunctions guarded_fns = {
    guarded_string, guarded_array, guarded_integer, guarded_nil, freeReplyObject,
};

void sluicei_reply_guard_attach(sluicei_reply_guard *g, redisContext *ctx)
{
    redisReader *r = ctx->reader;
    /* Attached again: the functions to build with are the first guard's. */
    const redisReplyObjectFunctions *base =
        r->fn == &guarded_fns ? ((const sluicei_reply_guard *)r->privdata)->base : r->fn;
    g->base = base;
    g->used = 0;
    g->why[0] = '\0';
    g->expect = NULL;
    r->privdata = g;
    r->fn = &guarded_fns;
}

void sluicei_reply_guard_attach_async(sluicei_reply_guard *g, redisAsyncContext *ac)
{
    sluicei_reply_guard_attach(g, &ac->c);
    g->expect = &ac->replies;
}

/* ---- what the reader holds unparsed ----------------------------------- */

/* The digits of the length of the bulk string the reader is in the middle
 * of, as far as they arrived: their number. */
static size_t declared_digits(const redisReader *r, const char **digits)
{
    const char *p = r->buf + r->pos, *end = r->buf + r->len;
    *digits = p;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    return (size_t)(p - *digits);
}

/* Whether the reader holds the end (CRLF) of the line it is in. */
static int line_ended(const redisReader *r, size_t within)
{
    size_t n = r->len - r->pos < within ? r->len - r->pos : within;
    const char *p = r->buf + r->pos;
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return 1;
    return 0;
}

int sluicei_reply_guard_check(sluicei_reply_guard *g, const redisContext *ctx)
{
    const redisReader *r = ctx->reader;
    if (g->why[0])
        return -1;
    size_t pending = r->len - r->pos;
    /* The item being read (its type byte read, the rest incomplete). hiredis
     * looks for the end of a line from its start again after every read, so
     * lines are kept short, not just the memory they take. */
    int type = r->ridx >= 0 ? r->rstack[r->ridx].type : -1;
    if (type == REDIS_REPLY_STRING) {
        const char *d = NULL;
        size_t nd = declared_digits(r, &d);
        /* The digits only grow: as soon as those that arrived are too
         * many, the string is too large. */
        unsigned long long v = 0;
        int over = 0;
        for (size_t i = 0; i < nd && !over; i++) {
            over = v > (ULLONG_MAX - 9) / 10;
            v = v * 10 + (unsigned)(d[i] - '0');
            over = over || v > g->max_string;
        }
        if (over) {
            int shown = nd > SHOWN_DIGITS ? SHOWN_DIGITS : (int)nd;
            snprintf(g->why, sizeof g->why,
                     "reply too large: a string of %.*s%s bytes (at most %zu)", shown, d,
                     nd > SHOWN_DIGITS ? "..." : "", g->max_string);
            return -1;
        }
    }
    if ((type == REDIS_REPLY_STRING || type == REDIS_REPLY_ARRAY) && pending > HEADER_BYTES &&
        !line_ended(r, HEADER_BYTES)) {
        snprintf(g->why, sizeof g->why, "reply malformed: a length line of over %d bytes",
                 HEADER_BYTES);
        return -1;
    }
    if ((type == REDIS_REPLY_STATUS || type == REDIS_REPLY_ERROR ||
         type == REDIS_REPLY_INTEGER) &&
        pending > SLUICEI_REPLY_LINE_MAX) {
        snprintf(g->why, sizeof g->why,
                 "reply too large: a status, error or integer line of over %zu bytes",
                 (size_t)SLUICEI_REPLY_LINE_MAX);
        return -1;
    }
    /* What is unparsed after a parse is one incomplete string or line. */
    if (pending > add_sat(g->max_string, HEADER_BYTES)) {
        snprintf(g->why, sizeof g->why,
                 "reply too large: over %zu bytes in one string (at most %zu)", pending,
                 g->max_string);
        return -1;
    }
    return 0;
}

int sluicei_reply_guard_fail(const sluicei_reply_guard *g, redisContext *ctx)
{
    ctx->err = REDIS_ERR_PROTOCOL;
    snprintf(ctx->errstr, sizeof ctx->errstr, "%s",
             g->why[0] ? g->why : "reply too large");
    return REDIS_ERR;
}

int sluicei_reply_guard_tripped(const sluicei_reply_guard *g)
{
    return g->why[0] != '\0';
}

/* ---- blocking reads --------------------------------------------------- */

static sluicei_reply_guard *guard_of(const redisContext *ctx)
{
    return ctx->reader->fn == &guarded_fns ? ctx->reader->privdata : NULL;
}

/* The next complete reply in what was read, or NULL; a limit broken while
 * parsing replaces hiredis's "Out of memory" by what it was. */
static int from_reader(redisContext *ctx, sluicei_reply_guard *g, void **out)
{
    if (redisGetReplyFromReader(ctx, out) == REDIS_OK)
        return REDIS_OK;
    if (g && g->why[0])
        sluicei_reply_guard_fail(g, ctx);
    return REDIS_ERR;
}

int sluicei_redis_reply_ready(redisContext *ctx, redisReply **out)
{
    void *r = NULL;
    *out = NULL;
    if (from_reader(ctx, guard_of(ctx), &r) != REDIS_OK)
        return REDIS_ERR;
    *out = r;
    return REDIS_OK;
}

int sluicei_redis_get_reply(redisContext *ctx, redisReply **out)
{
    sluicei_reply_guard *g = guard_of(ctx);
    void *r = NULL;
    *out = NULL;
    if (from_reader(ctx, g, &r) != REDIS_OK)
        return REDIS_ERR;
    if (!r) {
        int done = 0;
        while (!done)
            if (redisBufferWrite(ctx, &done) != REDIS_OK)
                return REDIS_ERR;
    }
    while (!r) {
        /* Before every read: a read adds at most 16 KiB to what is held. */
        if (g && sluicei_reply_guard_check(g, ctx) != 0)
            return sluicei_reply_guard_fail(g, ctx);
        if (redisBufferRead(ctx) != REDIS_OK || from_reader(ctx, g, &r) != REDIS_OK)
            return REDIS_ERR;
    }
    *out = r;
    return REDIS_OK;
}

redisReply *sluicei_redis_vcommand(redisContext *ctx, const char *fmt, va_list ap)
{
    redisReply *r = NULL;
    if (redisvAppendCommand(ctx, fmt, ap) != REDIS_OK)
        return NULL;
    sluicei_redis_get_reply(ctx, &r);
    return r;
}

redisReply *sluicei_redis_command(redisContext *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = sluicei_redis_vcommand(ctx, fmt, ap);
    va_end(ap);
    return r;
}

redisReply *sluicei_redis_command_argv(redisContext *ctx, int argc, const char **argv,
                                       const size_t *argvlen)
{
    redisReply *r = NULL;
    if (redisAppendCommandArgv(ctx, argc, argv, argvlen) != REDIS_OK)
        return NULL;
    sluicei_redis_get_reply(ctx, &r);
    return r;
}
