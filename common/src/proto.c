/* Redis key schema and Lua scripts of a sluice queue (docs/PROTOCOL.md). */
#include "proto.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every script gets KEYS[1] = "sluice:{Q}:meta" and derives the other keys
 * from its prefix, so all of them hash to the slot of {Q}.
 *
 * Only the push script may be refused when Redis is out of memory: it is the
 * one that grows the queue, and a refused push is backpressure. Everything
 * that drains or bookkeeps (take, claim, ack, requeue) carries allow-oom, or
 * a full Redis could never be emptied. */
#define PRELUDE                                                          \
    "local meta = KEYS[1]\n"                                             \
    "local pre = string.sub(meta, 1, -5)\n"

static const char *const script_src[SLUICEI_SCRIPT_COUNT] = {
    /* create: ARGV max_batches, max_bytes, now_us */
    [SLUICEI_SCRIPT_CREATE] =
        "#!lua\n" PRELUDE
        "if redis.call('EXISTS', meta) == 1 then\n"
        "  return redis.error_reply('EXISTS queue exists already')\n"
        "end\n"
        "redis.call('HSET', meta, 'version', 1, 'max_batches', ARGV[1],\n"
        "           'max_bytes', ARGV[2], 'created_us', ARGV[3])\n"
        "redis.call('SET', pre .. 'bytes', 0)\n"
        "return 1\n",

    /* delete: no ARGV. Returns the number of keys removed. */
    [SLUICEI_SCRIPT_DELETE] =
        "#!lua flags=allow-oom\n" PRELUDE
        "if redis.call('EXISTS', meta) == 0 then\n"
        "  return redis.error_reply('NOQUEUE no such queue')\n"
        "end\n"
        "local n = 0\n"
        "for _, cid in ipairs(redis.call('HKEYS', pre .. 'consumers')) do\n"
        "  n = n + redis.call('DEL', pre .. 'pending:' .. cid)\n"
        "end\n"
        "for _, k in ipairs(redis.call('SMEMBERS', pre .. 'bitmaps')) do\n"
        "  n = n + redis.call('DEL', k)\n"
        "end\n"
        "for _, s in ipairs({'ready', 'data', 'dlv', 'bytes', 'room', 'stats',\n"
        "                    'consumers', 'bitmaps'}) do\n"
        "  n = n + redis.call('DEL', pre .. s)\n"
        "end\n"
        "return n + redis.call('DEL', meta)\n",

    /* push: ARGV id, frame, epoch, task, seq.
     * Returns 1 stored, 2 duplicate (dropped), 0 full. */
    [SLUICEI_SCRIPT_PUSH] =
        "#!lua\n" PRELUDE
        "local m = redis.call('HMGET', meta, 'max_batches', 'max_bytes')\n"
        "if not m[1] then return redis.error_reply('NOQUEUE no such queue') end\n"
        "local data = pre .. 'data'\n"
        "if redis.call('HEXISTS', data, ARGV[1]) == 1 or\n"
        "   redis.call('GETBIT', pre .. 'acked:' .. ARGV[3] .. ':' .. ARGV[4], ARGV[5]) == 1 then\n"
        "  redis.call('HINCRBY', pre .. 'stats', 'dup_dropped', 1)\n"
        "  return 2\n"
        "end\n"
        "local size = string.len(ARGV[2])\n"
        "local maxb = tonumber(m[2])\n"
        "if size > maxb then\n"
        "  return redis.error_reply('TOOBIG batch of ' .. size ..\n"
        "         ' bytes exceeds the queue byte budget of ' .. maxb)\n"
        "end\n"
        "local used = tonumber(redis.call('GET', pre .. 'bytes') or '0')\n"
        "if redis.call('HLEN', data) + 1 > tonumber(m[1]) or used + size > maxb then\n"
        "  return 0\n"
        "end\n"
        "redis.call('HSET', data, ARGV[1], ARGV[2])\n"
        "redis.call('LPUSH', pre .. 'ready', ARGV[1])\n"
        "redis.call('INCRBY', pre .. 'bytes', size)\n"
        "redis.call('HINCRBY', pre .. 'stats', 'pushed', 1)\n"
        "redis.call('HINCRBY', pre .. 'stats', 'pushed_bytes', size)\n"
        "return 1\n",

    /* take: ARGV cid, n, now_ms. Moves up to n ids from ready to the
     * consumer's pending list. Returns {id1, deliveries1, id2, ...}. */
    [SLUICEI_SCRIPT_TAKE] =
        "#!lua flags=allow-oom\n" PRELUDE
        "if redis.call('EXISTS', meta) == 0 then\n"
        "  return redis.error_reply('NOQUEUE no such queue')\n"
        "end\n"
        "redis.call('HSET', pre .. 'consumers', ARGV[1], ARGV[3])\n"
        "local pending = pre .. 'pending:' .. ARGV[1]\n"
        "local out = {}\n"
        "for i = 1, tonumber(ARGV[2]) do\n"
        "  local id = redis.call('LMOVE', pre .. 'ready', pending, 'RIGHT', 'LEFT')\n"
        "  if not id then break end\n"
        "  out[#out + 1] = id\n"
        "  out[#out + 1] = redis.call('HINCRBY', pre .. 'dlv', id, 1)\n"
        "end\n"
        "return out\n",

    /* claim: ARGV cid, id, now_ms. Counts a delivery of an id that BLMOVE
     * already moved into the consumer's pending list. Returns the count. */
    [SLUICEI_SCRIPT_CLAIM] =
        "#!lua flags=allow-oom\n" PRELUDE
        "redis.call('HSET', pre .. 'consumers', ARGV[1], ARGV[3])\n"
        "return redis.call('HINCRBY', pre .. 'dlv', ARGV[2], 1)\n",

    /* ack: ARGV cid, id, epoch, task, seq. Returns 1, or 0 when the
     * consumer no longer held the id (it was requeued meanwhile). */
    [SLUICEI_SCRIPT_ACK] =
        "#!lua flags=allow-oom\n" PRELUDE
        "if redis.call('LREM', pre .. 'pending:' .. ARGV[1], -1, ARGV[2]) == 0 then\n"
        "  return 0\n"
        "end\n"
        "local data = pre .. 'data'\n"
        "local size = redis.call('HSTRLEN', data, ARGV[2])\n"
        "redis.call('HDEL', data, ARGV[2])\n"
        "redis.call('HDEL', pre .. 'dlv', ARGV[2])\n"
        "redis.call('DECRBY', pre .. 'bytes', size)\n"
        "local bm = pre .. 'acked:' .. ARGV[3] .. ':' .. ARGV[4]\n"
        "redis.call('SETBIT', bm, ARGV[5], 1)\n"
        "redis.call('SADD', pre .. 'bitmaps', bm)\n"
        "redis.call('HINCRBY', pre .. 'stats', 'acked', 1)\n"
        "redis.call('HINCRBY', pre .. 'stats', 'acked_bytes', size)\n"
        "local room = pre .. 'room'\n"
        "redis.call('LPUSH', room, 1)\n"
        "redis.call('LTRIM', room, 0, 15)\n"
        "return 1\n",

    /* requeue: ARGV cid. Hands every id the consumer holds back to the
     * front of the queue, in the order they were taken (pending has the
     * newest on its left, so pop there and push each to ready's head).
     * Returns how many. */
    [SLUICEI_SCRIPT_REQUEUE] =
        "#!lua flags=allow-oom\n" PRELUDE
        "local pending = pre .. 'pending:' .. ARGV[1]\n"
        "local n = 0\n"
        "while redis.call('LMOVE', pending, pre .. 'ready', 'LEFT', 'RIGHT') do\n"
        "  n = n + 1\n"
        "end\n"
        "redis.call('HDEL', pre .. 'consumers', ARGV[1])\n"
        "if n > 0 then redis.call('HINCRBY', pre .. 'stats', 'requeued', n) end\n"
        "return n\n",
};

const char *sluicei_script_source(sluicei_script_id id)
{
    return (unsigned)id < SLUICEI_SCRIPT_COUNT ? script_src[id] : NULL;
}

sluice_err sluicei_queue_name_check(const char *q, char *err, size_t errlen)
{
    size_t n = q ? strlen(q) : 0;
    if (n == 0 || n > SLUICE_MAX_QUEUE_NAME) {
        snprintf(err, errlen, "queue name must be 1 to %d characters, got %zu",
                 SLUICE_MAX_QUEUE_NAME, n);
        return SLUICE_ERR_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)q[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-')) {
            snprintf(err, errlen,
                     "queue name '%s': character %zu ('%c') is not one of A-Z a-z 0-9 _ . -", q,
                     i + 1, ch >= 32 && ch < 127 ? ch : '?');
            return SLUICE_ERR_INVALID;
        }
    }
    return SLUICE_OK;
}

void sluicei_key(char *out, const char *q, const char *name)
{
    snprintf(out, SLUICE_MAX_KEY, "sluice:{%s}:%s", q, name);
}

void sluicei_batch_id_str(char *out, sluice_batch_id id)
{
    snprintf(out, SLUICE_MAX_BATCH_ID, "%" PRIu32 ":%" PRIu64 ":%" PRIu32, id.epoch, id.task,
             id.seq);
}

static int parse_u64(const char **p, const char *end, uint64_t max, uint64_t *v)
{
    const char *s = *p;
    uint64_t x = 0;
    if (s == end || *s < '0' || *s > '9')
        return -1;
    while (s < end && *s >= '0' && *s <= '9') {
        unsigned d = (unsigned)(*s - '0');
        if (x > (max - d) / 10)
            return -1;
        x = x * 10 + d;
        s++;
    }
    *p = s;
    *v = x;
    return 0;
}

int sluicei_batch_id_parse(const char *s, size_t len, sluice_batch_id *id)
{
    const char *p = s, *end = s + len;
    uint64_t e, t, q;
    if (parse_u64(&p, end, UINT32_MAX, &e) || p == end || *p++ != ':' ||
        parse_u64(&p, end, UINT64_MAX, &t) || p == end || *p++ != ':' ||
        parse_u64(&p, end, UINT32_MAX, &q) || p != end)
        return -1;
    id->epoch = (uint32_t)e;
    id->task = t;
    id->seq = (uint32_t)q;
    return 0;
}

sluice_err sluicei_script_load(sluicei_conn *c)
{
    for (int i = 0; i < SLUICEI_SCRIPT_COUNT; i++) {
        redisReply *r = NULL;
        sluice_err e = sluicei_conn_command(c, &r, "SCRIPT LOAD %s", script_src[i]);
        if (e != SLUICE_OK) {
            if (r) {
                snprintf(c->errstr, sizeof c->errstr, "SCRIPT LOAD: %s", r->str);
                freeReplyObject(r);
            }
            return e;
        }
        if (r->type != REDIS_REPLY_STRING || r->len != 40) {
            freeReplyObject(r);
            snprintf(c->errstr, sizeof c->errstr, "SCRIPT LOAD: unexpected reply");
            return SLUICE_ERR_PROTOCOL;
        }
        memcpy(c->script_sha[i], r->str, 41);
        freeReplyObject(r);
    }
    return SLUICE_OK;
}

#define MAX_SCRIPT_ARGS 16

static sluice_err build_call(sluicei_conn *c, const char *verb, const char *body, const char *q,
                             int argc, const char **argv, const size_t *argvlen,
                             const char **av, size_t *al, char *key)
{
    if (argc > MAX_SCRIPT_ARGS) {
        snprintf(c->errstr, sizeof c->errstr, "script call with %d arguments", argc);
        return SLUICE_ERR_INVALID;
    }
    sluicei_key(key, q, "meta");
    av[0] = verb;
    al[0] = strlen(verb);
    av[1] = body;
    al[1] = strlen(body);
    av[2] = "1";
    al[2] = 1;
    av[3] = key;
    al[3] = strlen(key);
    for (int i = 0; i < argc; i++) {
        av[4 + i] = argv[i];
        al[4 + i] = argvlen ? argvlen[i] : strlen(argv[i]);
    }
    return SLUICE_OK;
}

sluice_err sluicei_script_append(sluicei_conn *c, sluicei_script_id id, const char *q, int argc,
                                 const char **argv, const size_t *argvlen)
{
    const char *av[4 + MAX_SCRIPT_ARGS];
    size_t al[4 + MAX_SCRIPT_ARGS];
    char key[SLUICE_MAX_KEY];
    const char *sha = c->script_sha[id];
    sluice_err e;
    if (sha[0] == '\0') {
        e = sluicei_script_load(c);
        if (e != SLUICE_OK)
            return e;
    }
    e = build_call(c, "EVALSHA", sha, q, argc, argv, argvlen, av, al, key);
    if (e != SLUICE_OK)
        return e;
    return sluicei_conn_append_argv(c, 4 + argc, av, al);
}

sluice_err sluicei_script_run(sluicei_conn *c, sluicei_script_id id, const char *q, int argc,
                              const char **argv, const size_t *argvlen, redisReply **out)
{
    const char *av[4 + MAX_SCRIPT_ARGS];
    size_t al[4 + MAX_SCRIPT_ARGS];
    char key[SLUICE_MAX_KEY];
    *out = NULL;
    int have_sha = c->script_sha[id][0] != '\0';
    sluice_err e = build_call(c, have_sha ? "EVALSHA" : "EVAL",
                              have_sha ? c->script_sha[id] : script_src[id], q, argc, argv,
                              argvlen, av, al, key);
    if (e != SLUICE_OK)
        return e;
    e = sluicei_conn_commandargv(c, out, 4 + argc, av, al);
    if (e == SLUICE_ERR_REDIS && *out && strncmp((*out)->str, "NOSCRIPT", 8) == 0) {
        /* The server lost its script cache (restart, SCRIPT FLUSH). */
        freeReplyObject(*out);
        *out = NULL;
        c->script_sha[id][0] = '\0';
        av[0] = "EVAL";
        al[0] = 4;
        av[1] = script_src[id];
        al[1] = strlen(script_src[id]);
        e = sluicei_conn_commandargv(c, out, 4 + argc, av, al);
    }
    if (e == SLUICE_ERR_REDIS && *out)
        e = sluicei_reply_error_code(*out);
    return e;
}

sluice_err sluicei_reply_error_code(const redisReply *r)
{
    static const struct {
        const char *prefix;
        sluice_err code;
    } map[] = {
        {"NOQUEUE", SLUICE_ERR_NOQUEUE}, {"EXISTS", SLUICE_ERR_EXISTS},
        {"TOOBIG", SLUICE_ERR_TOOBIG},   {"OOM", SLUICE_ERR_FULL},
        {"NOAUTH", SLUICE_ERR_AUTH},     {"WRONGPASS", SLUICE_ERR_AUTH},
        {"NOPERM", SLUICE_ERR_AUTH},
    };
    if (!r || r->type != REDIS_REPLY_ERROR)
        return SLUICE_OK;
    /* A script's error_reply arrives as "NOQUEUE ..." or, wrapped by the
     * script engine, "ERR ... NOQUEUE ..."; look for the code anywhere at a
     * word start. */
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t n = strlen(map[i].prefix);
        for (const char *s = r->str; (s = strstr(s, map[i].prefix)) != NULL; s += n)
            if (s == r->str || s[-1] == ' ')
                return map[i].code;
    }
    return SLUICE_ERR_REDIS;
}
