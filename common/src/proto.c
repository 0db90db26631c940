/* Redis key schema and Lua scripts of a sluice queue (docs/PROTOCOL.md). */
#include "proto.h"
#include "lua_scripts.h"
#include "num.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sources live in common/lua/NAME.lua; scripts/embed-lua.sh turns them
 * into these arrays (build/common/lua_scripts.c), in enum order. Every
 * script gets KEYS[1] = "sluice:{Q}:<anchor>", a key its caller's role
 * writes (sluicei_script_anchor()), and derives the other keys from its
 * prefix, so all of them hash to the slot of {Q}.
 *
 * Only push, create and submit may be refused when Redis is out of memory:
 * they grow the queue, and a refused push is backpressure. Everything that
 * drains or bookkeeps carries allow-oom, or a full Redis could never be
 * emptied. */
#define script_src sluicei_lua_sources

const char *sluicei_script_source(sluicei_script_id id)
{
    return (unsigned)id < SLUICEI_SCRIPT_COUNT ? script_src[id] : NULL;
}

const char *sluicei_script_sha(sluicei_script_id id)
{
    return (unsigned)id < SLUICEI_SCRIPT_COUNT ? sluicei_lua_shas[id] : NULL;
}

const char *sluicei_script_name(sluicei_script_id id)
{
    return (unsigned)id < SLUICEI_SCRIPT_COUNT ? sluicei_lua_names[id] : NULL;
}

sluicei_script_id sluicei_script_by_name(const char *name)
{
    int i;
    for (i = 0; i < SLUICEI_SCRIPT_COUNT; i++)
        if (strcmp(name, sluicei_lua_names[i]) == 0)
            break;
    return (sluicei_script_id)i;
}

sluice_err sluicei_queue_name_check(const char *q, char *err, size_t errlen)
{
    size_t n = q ? strlen(q) : 0;
    if (n == 0 || n > SLUICE_MAX_QUEUE_NAME) {
        snprintf(err, errlen, "queue name must be 1 to %d characters, got %zu",
                 SLUICE_MAX_QUEUE_NAME, n);
        return SLUICE_ERR_INVALID;
    }
    /* A partition of queue Q is the queue "Q#p" (cluster.h). */
    const char *hash = strchr(q, '#');
    size_t base = hash ? (size_t)(hash - q) : n;
    if (hash && (base == 0 || n - base < 2 || n - base > 5 ||
                 strspn(hash + 1, "0123456789") != n - base - 1 ||
                 (hash[1] == '0' && n - base > 2))) {
        snprintf(err, errlen,
                 "queue name '%s': '#' may only come before a partition number at the end", q);
        return SLUICE_ERR_INVALID;
    }
    for (size_t i = 0; i < base; i++) {
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

void sluicei_partition_name(char *out, const char *q, int p)
{
    snprintf(out, SLUICE_MAX_QUEUE_NAME + 8, "%s#%d", q, p);
}

void sluicei_key(char *out, const char *q, const char *name)
{
    snprintf(out, SLUICE_MAX_KEY, "sluice:{%s}:%s", q, name);
}

void sluicei_keyf(char *out, const char *q, const char *fmt, ...)
{
    int n = snprintf(out, SLUICE_MAX_KEY, "sluice:{%s}:", q);
    if (n < 0 || n >= SLUICE_MAX_KEY)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + n, SLUICE_MAX_KEY - (size_t)n, fmt, ap);
    va_end(ap);
}

void sluicei_key_ready(char *out, const char *q, uint64_t e, int rank)
{
    if (rank >= 0)
        sluicei_keyf(out, q, "ready:%" PRIu64 ":%d", e, rank);
    else
        sluicei_keyf(out, q, "ready:%" PRIu64, e);
}

void sluicei_batch_id_str(char *out, sluice_batch_id id)
{
    snprintf(out, SLUICE_MAX_BATCH_ID, "%" PRIu32 ":%" PRIu64 ":%" PRIu32, id.epoch, id.task,
             id.seq);
}


int sluicei_batch_id_parse(const char *s, size_t len, sluice_batch_id *id)
{
    const char *p = s, *end = s + len;
    uint64_t e, t, q;
    if (sluicei_parse_u64_prefix(&p, end, UINT32_MAX, &e) || p == end || *p++ != ':' ||
        sluicei_parse_u64_prefix(&p, end, UINT64_MAX, &t) || p == end || *p++ != ':' ||
        sluicei_parse_u64_prefix(&p, end, UINT32_MAX, &q) || p != end)
        return -1;
    id->epoch = (uint32_t)e;
    id->task = t;
    id->seq = (uint32_t)q;
    return 0;
}

/* A canonical decimal number of at most maxd digits and value <= max, at
 * s[*i..len), ended by end (or the end of s when end is 0). */
static int canon_num(const char *s, size_t len, size_t *i, size_t maxd, uint64_t max, char end)
{
    size_t from = *i;
    uint64_t v = 0;
    while (*i < len && s[*i] >= '0' && s[*i] <= '9') {
        unsigned d = (unsigned)(s[*i] - '0');
        if (*i - from >= maxd || v > (max - d) / 10)
            return -1;
        v = v * 10 + d;
        (*i)++;
    }
    if (*i == from || (s[from] == '0' && *i - from > 1))
        return -1;
    return end ? (*i < len && s[*i] == end ? 0 : -1) : (*i == len ? 0 : -1);
}

int sluicei_rid_check(const char *s, size_t len, size_t *base, int *padding)
{
    size_t i = 0;
    if (len > 64 || canon_num(s, len, &i, 10, UINT32_MAX, ':'))
        return 0;
    i++;
    if (canon_num(s, len, &i, 20, UINT64_MAX, ':'))
        return 0;
    i++;
    size_t at = i;
    /* seq, then the end or ":pad<k>", k 1..999999 */
    if (canon_num(s, len, &i, 8, SLUICEI_MAX_SEQ, 0) == 0) {
        *base = len;
        *padding = 0;
        return 1;
    }
    i = at;
    if (canon_num(s, len, &i, 8, SLUICEI_MAX_SEQ, ':'))
        return 0;
    *base = i;
    i++;
    if (len - i < 4 || memcmp(s + i, "pad", 3) != 0)
        return 0;
    i += 3;
    if (s[i] == '0' || canon_num(s, len, &i, 6, 999999, 0))
        return 0;
    *padding = 1;
    return 1;
}

int sluicei_marker_parse(const char *s, size_t len, uint32_t *e)
{
    size_t i = 4;
    uint64_t v = 0;
    if (len < 5 || memcmp(s, "eof:", 4) != 0 || canon_num(s, len, &i, 10, UINT32_MAX, 0))
        return 0;
    for (i = 4; i < len; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    *e = (uint32_t)v;
    return 1;
}

const char *sluicei_script_anchor(sluicei_script_id id, int argc, const char **argv)
{
    switch (id) {
    case SLUICEI_SCRIPT_CREATE:
    case SLUICEI_SCRIPT_SUBMIT:
    case SLUICEI_SCRIPT_DELETE:
    case SLUICEI_SCRIPT_DEADADMIN:
        return "meta";
    case SLUICEI_SCRIPT_PUSH:
    case SLUICEI_SCRIPT_TASK_CLAIM:
    case SLUICEI_SCRIPT_TASK_RENEW:
    case SLUICEI_SCRIPT_TASK_DONE:
    case SLUICEI_SCRIPT_TASK_FAIL:
    case SLUICEI_SCRIPT_TASK_CHECK:
        return "producers";
    case SLUICEI_SCRIPT_BEAT:
        return argc > 0 && strcmp(argv[0], "producer") == 0 ? "producers" : "consumers";
    default:
        return "consumers";
    }
}

const char *sluicei_script_role(sluicei_script_id id, int argc, const char **argv)
{
    const char *a = sluicei_script_anchor(id, argc, argv);
    return strcmp(a, "meta") == 0        ? "admin"
           : strcmp(a, "producers") == 0 ? "producer"
                                         : "consumer";
}

void sluicei_script_denied(char *out, size_t n, sluicei_script_id id, int argc,
                           const char **argv, const char *q, const char *why)
{
    const char *role = sluicei_script_role(id, argc, argv);
    snprintf(out, n, "permission denied: Redis refused the %s script, which is the %s role's, "
             "to this Redis user (%s); 'sluice-ctl acl %s --role %s' prints the rights of that "
             "role", sluicei_script_name(id), role, why, q, role);
}

sluice_err sluicei_script_load(sluicei_conn *c)
{
    return sluicei_conn_load_scripts(c);
}

#define MAX_SCRIPT_ARGS 32

/* A script call: EVALSHA <sha> 1 sluice:{q}:<anchor> ARGV... */
typedef struct script_call {
    const char *av[4 + MAX_SCRIPT_ARGS];
    size_t al[4 + MAX_SCRIPT_ARGS];
    char key[SLUICE_MAX_KEY];
} script_call;

static sluice_err build_call(sluicei_conn *c, sluicei_script_id id, const char *q, int argc,
                             const char **argv, const size_t *argvlen, script_call *k)
{
    if (argc > MAX_SCRIPT_ARGS) {
        snprintf(c->errstr, sizeof c->errstr, "script call with %d arguments", argc);
        return SLUICE_ERR_INVALID;
    }
    sluicei_key(k->key, q, sluicei_script_anchor(id, argc, argv));
    k->av[0] = "EVALSHA";
    k->al[0] = strlen("EVALSHA");
    k->av[1] = sluicei_lua_shas[id];
    k->al[1] = strlen(sluicei_lua_shas[id]);
    k->av[2] = "1";
    k->al[2] = 1;
    k->av[3] = k->key;
    k->al[3] = strlen(k->key);
    for (int i = 0; i < argc; i++) {
        k->av[4 + i] = argv[i];
        k->al[4 + i] = argvlen ? argvlen[i] : strlen(argv[i]);
    }
    return SLUICE_OK;
}

sluice_err sluicei_script_append(sluicei_conn *c, sluicei_script_id id, const char *q, int argc,
                                 const char **argv, const size_t *argvlen)
{
    script_call k;
    sluice_err e = build_call(c, id, q, argc, argv, argvlen, &k);
    return e != SLUICE_OK ? e : sluicei_conn_append_argv(c, 4 + argc, k.av, k.al);
}

sluice_err sluicei_script_run(sluicei_conn *c, sluicei_script_id id, const char *q, int argc,
                              const char **argv, const size_t *argvlen, redisReply **out)
{
    script_call k;
    *out = NULL;
    sluice_err e = build_call(c, id, q, argc, argv, argvlen, &k);
    if (e != SLUICE_OK)
        return e;
    e = sluicei_conn_commandargv(c, out, 4 + argc, k.av, k.al);
    if (e == SLUICE_ERR_REDIS && *out && strncmp((*out)->str, "NOSCRIPT", 8) == 0) {
        /* The server lost its script cache (restart, SCRIPT FLUSH). */
        freeReplyObject(*out);
        *out = NULL;
        k.av[0] = "EVAL";
        k.al[0] = 4;
        k.av[1] = script_src[id];
        k.al[1] = strlen(script_src[id]);
        e = sluicei_conn_commandargv(c, out, 4 + argc, k.av, k.al);
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
        {"JOBEXISTS", SLUICE_ERR_EXISTS}, {"INVALID", SLUICE_ERR_INVALID},
        {"TOOBIG", SLUICE_ERR_TOOBIG},   {"OOM", SLUICE_ERR_FULL},
        {"NOAUTH", SLUICE_ERR_AUTH},     {"WRONGPASS", SLUICE_ERR_AUTH},
        {"NOPERM", SLUICE_ERR_AUTH},
    };
    if (!r || r->type != REDIS_REPLY_ERROR)
        return SLUICE_OK;
    /* A command of a script the user's ACL does not allow, or a key it
     * may not read or write. */
    if (strstr(r->str, "can't run this command") || strstr(r->str, "can't access"))
        return SLUICE_ERR_AUTH;
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
