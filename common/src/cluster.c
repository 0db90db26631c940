/* Many Redis servers under one address: Redis Cluster and lists of
 * independent servers (cluster.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nanosleep under -std=c11 */
#endif

#include "cluster.h"
#include "num.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLUSTER_SCHEME "redis+cluster"
/* Most seeds in a cluster address, servers in a list. */
#define MAX_ADDRS 1024
/* Most nodes remembered (seeds, masters and replicas ever seen). */
#define MAX_NODES 4096
/* Pause after a retryable error: 100 ms doubling up to 1 s (retry.h). */
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 1000
/* router_command/script without a deadline. */
#define DEFAULT_DEADLINE_MS 30000
/* Longest piece of the input quoted back in an error message. */
#define QUOTE_MAX SLUICEI_QUOTE_MAX

typedef struct node {
    char *host;
    int port;
    int has_replica; /* a master with at least one replica not failed (last map) */
} node;

/* sluicei_router_bind(): what a connection's resolver follows. */
typedef struct binding {
    sluicei_router *r;
    char q[SLUICE_MAX_QUEUE_NAME + 8];
    struct binding *next;
} binding;

/* A connection of the router: pool ones (router_command/script, and
 * router_conn of a single server or a list) serve a node; in a cluster,
 * router_conn gives each queue one of its own (q set), which its resolver
 * moves with the queue. */
typedef struct rconn {
    sluicei_conn *c;
    char q[SLUICE_MAX_QUEUE_NAME + 8]; /* "" for a pool connection */
} rconn;

struct sluicei_router {
    sluicei_router_kind kind;
    int connect_timeout_ms;
    int cmd_timeout_ms;
    /* SINGLE: the server; LIST: the servers; CLUSTER: one per seed. */
    sluicei_url *servers;
    int nservers;
    int wait_explicit; /* CLUSTER: ?wait=N given: servers[0].wait_replicas */
    char *desc;

    /* CLUSTER: every node seen; slot_node[s] indexes it (-1: no master). */
    node *nodes;
    int nnodes, capnodes;
    int16_t slot_node[SLUICEI_CLUSTER_SLOTS];
    int map_ok;
    int last_good; /* node that answered CLUSTER SLOTS last (-1: none) */

    rconn *conns;
    int nconns, capconns;
    binding *bindings;

    sluicei_router_stats stats;
    char errstr[512];
};

/* ---- small helpers ---------------------------------------------------- */

#define seterr sluicei_seterr
#define quote sluicei_quote

static int prefix_nocase(const char *s, const char *prefix)
{
    for (; *prefix; s++, prefix++) {
        char x = *s;
        if (x >= 'A' && x <= 'Z')
            x = (char)(x - 'A' + 'a');
        if (x != *prefix)
            return 0;
    }
    return 1;
}

static int is_scheme_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '+' || ch == '-' || ch == '.';
}

/* 1 when s starts with "scheme://". */
static int starts_with_scheme(const char *s)
{
    size_t n = 0;
    while (is_scheme_char(s[n]))
        n++;
    return n > 0 && strncmp(s + n, "://", 3) == 0;
}

static void sleep_ms(int ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Overwrites and frees a string that held a secret. */
static void free_secret(char *s)
{
    if (!s)
        return;
    volatile char *p = s;
    while (*p)
        *p++ = '\0';
    free(s);
}

/* ---- slots ------------------------------------------------------------ */

/* CRC16-CCITT as Redis Cluster uses it (XMODEM: polynomial 0x1021, initial
 * value 0, no reflection, no final xor). */
static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

unsigned sluicei_crc16(const char *buf, size_t len)
{
    return crc16(buf, len);
}

unsigned sluicei_key_slot(const char *key, size_t len)
{
    /* Redis's rule (keyHashSlot): the first '{', then the first '}' after
     * it; only a non-empty tag counts, else the whole key is hashed. */
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        if (close && close > key + from)
            return crc16(key + from, (size_t)(close - (key + from))) & (SLUICEI_CLUSTER_SLOTS - 1);
    }
    return crc16(key, len) & (SLUICEI_CLUSTER_SLOTS - 1);
}

/* The slot of queue q's keys ("sluice:{q}:..."). */
static unsigned queue_slot(const char *q)
{
    char key[SLUICE_MAX_KEY];
    sluicei_key(key, q, "meta");
    return sluicei_key_slot(key, strlen(key));
}

/* Partition number of "Q#p", or -1 for a plain name. */
static int partition_of(const char *q)
{
    const char *h = strrchr(q, '#');
    if (!h || !h[1] || strspn(h + 1, "0123456789") != strlen(h + 1) || strlen(h + 1) > 6)
        return -1;
    return atoi(h + 1);
}

/* ---- errors ----------------------------------------------------------- */

static int has_prefix(const char *msg, size_t len, const char *p)
{
    size_t n = strlen(p);
    return len >= n && memcmp(msg, p, n) == 0 && (len == n || msg[n] == ' ');
}

static int contains(const char *msg, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(msg + i, needle, n) == 0)
            return 1;
    return 0;
}

int sluicei_cluster_retryable(const char *msg, size_t len)
{
    if (!msg)
        return 0;
    /* The data is elsewhere or about to be; or the server is in a passing
     * state (retry.h). */
    static const char *const prefixes[] = {"MOVED", "ASK", "CLUSTERDOWN", "READONLY", "EXECABORT"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (has_prefix(msg, len, prefixes[i]))
            return 1;
    if (sluicei_error_transient(msg, len))
        return 1;
    /* A script touching a key whose slot is being migrated, or run while
     * the cluster is down: the script engine wraps these in "ERR ...". */
    return contains(msg, len, "non local key") ||
           contains(msg, len, "while the cluster is down");
}

/* ---- nodes and the slot map ------------------------------------------- */

/* Index of host:port in r->nodes, added when new; -1 when the table is
 * full or out of memory. */
static int node_index(sluicei_router *r, const char *host, size_t hl, int port)
{
    for (int i = 0; i < r->nnodes; i++)
        if (r->nodes[i].port == port && strlen(r->nodes[i].host) == hl &&
            memcmp(r->nodes[i].host, host, hl) == 0)
            return i;
    if (r->nnodes >= MAX_NODES)
        return -1;
    if (r->nnodes == r->capnodes) {
        int cap = r->capnodes ? r->capnodes * 2 : 16;
        node *n = realloc(r->nodes, (size_t)cap * sizeof *n);
        if (!n)
            return -1;
        r->nodes = n;
        r->capnodes = cap;
    }
    char *h = malloc(hl + 1);
    if (!h)
        return -1;
    memcpy(h, host, hl);
    h[hl] = '\0';
    r->nodes[r->nnodes] = (node){h, port, 0};
    return r->nnodes++;
}

/* A short-lived connection to one node (connect, AUTH): the slot map is
 * never read through a connection the router hands out, which may be the
 * very one being reconnected. */
static redisContext *probe_connect(sluicei_router *r, const node *n, char *err, size_t errlen,
                                   sluice_err *code)
{
    const sluicei_url *t = &r->servers[0];
    int ms = r->connect_timeout_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    redisContext *ctx = redisConnectWithTimeout(n->host, n->port, tv);
    *code = SLUICE_ERR_IO;
    if (!ctx) {
        seterr(err, errlen, "%s:%d: out of memory", n->host, n->port);
        *code = SLUICE_ERR_NOMEM;
        return NULL;
    }
    if (ctx->err || redisSetTimeout(ctx, tv) != REDIS_OK) {
        seterr(err, errlen, "%s:%d: connect: %s", n->host, n->port, ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    if (t->password) {
        redisReply *a = t->user ? redisCommand(ctx, "AUTH %s %s", t->user, t->password)
                                : redisCommand(ctx, "AUTH %s", t->password);
        if (!a || a->type == REDIS_REPLY_ERROR) {
            if (a)
                *code = SLUICE_ERR_AUTH;
            seterr(err, errlen, "%s:%d: authentication failed: %s", n->host, n->port,
                   a ? a->str : ctx->errstr);
            if (a)
                freeReplyObject(a);
            redisFree(ctx);
            return NULL;
        }
        freeReplyObject(a);
    }
    return ctx;
}

static int reply_int(const redisReply *e, long long *v)
{
    if (!e || e->type != REDIS_REPLY_INTEGER)
        return -1;
    *v = e->integer;
    return 0;
}

/* Reads [ip, port, ...] of a CLUSTER SLOTS entry into a node index.
 * An empty ip means "the node you asked"; "?" an unknown address. */
static int entry_node(sluicei_router *r, const redisReply *e, const node *asked)
{
    long long port;
    if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || reply_int(e->element[1], &port) ||
        port < 1 || port > 65535)
        return -2; /* malformed */
    const char *ip = e->element[0]->str;
    size_t il = e->element[0]->len;
    if (il == 1 && ip[0] == '?')
        return -1;
    if (il == 0) {
        /* node_index may grow r->nodes: asked may move; copy first. */
        char h[256];
        snprintf(h, sizeof h, "%s", asked->host);
        return node_index(r, h, strlen(h), (int)port);
    }
    return node_index(r, ip, il, (int)port);
}

/* 1 when the CLUSTER NODES text lists a replica of master id (id[0..il))
 * that is not failed, suspected, nor still shaking hands. CLUSTER SLOTS
 * alone will not do: Redis 7.0 leaves out replicas whose replication
 * offset is still 0, i.e. every replica of a master never written to. */
static int nodes_has_replica(const redisReply *nodes, const char *id, size_t il)
{
    if (!nodes || nodes->type != REDIS_REPLY_STRING || il == 0)
        return 0;
    const char *p = nodes->str, *end = nodes->str + nodes->len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        /* <id> <ip:port@cport> <flags> <master-id> ... */
        const char *f[4];
        size_t fl[4];
        const char *s = p;
        int n = 0;
        while (n < 4 && s < eol) {
            const char *sp = memchr(s, ' ', (size_t)(eol - s));
            f[n] = s;
            fl[n] = (size_t)((sp ? sp : eol) - s);
            n++;
            s = sp ? sp + 1 : eol;
        }
        if (n == 4 && fl[3] == il && memcmp(f[3], id, il) == 0) {
            char flags[128];
            snprintf(flags, sizeof flags, "%.*s", (int)fl[2], f[2]);
            if (strstr(flags, "slave") && !strstr(flags, "fail") && !strstr(flags, "handshake") &&
                !strstr(flags, "noaddr"))
                return 1;
        }
        p = eol + 1;
    }
    return 0;
}

/* Reads the slot map from node n. */
static sluice_err slots_from(sluicei_router *r, int ni, char *err, size_t errlen)
{
    sluice_err code;
    node asked = r->nodes[ni];
    char host[256];
    snprintf(host, sizeof host, "%s", asked.host);
    asked.host = host;
    redisContext *ctx = probe_connect(r, &asked, err, errlen, &code);
    if (!ctx)
        return code;
    redisReply *rep = redisCommand(ctx, "CLUSTER SLOTS");
    if (!rep) {
        seterr(err, errlen, "%s:%d: CLUSTER SLOTS: %s", host, asked.port, ctx->errstr);
        redisFree(ctx);
        return SLUICE_ERR_IO;
    }
    /* Which masters have replicas (nodes_has_replica); without it (an ACL
     * that forbids it) only the replicas CLUSTER SLOTS shows count. */
    redisReply *nodes = rep->type == REDIS_REPLY_ARRAY ? redisCommand(ctx, "CLUSTER NODES") : NULL;
    redisFree(ctx);
    if (rep->type == REDIS_REPLY_ERROR) {
        seterr(err, errlen, "%s:%d: CLUSTER SLOTS: %s", host, asked.port, rep->str);
        code = strstr(rep->str, "cluster support disabled") ? SLUICE_ERR_INVALID
               : strncmp(rep->str, "NOAUTH", 6) == 0 || strncmp(rep->str, "NOPERM", 6) == 0
                   ? SLUICE_ERR_AUTH
                   : SLUICE_ERR_IO;
        freeReplyObject(rep);
        return code;
    }
    int16_t *map = malloc(sizeof r->slot_node);
    char *repl = calloc((size_t)MAX_NODES, 1);
    if (!map || !repl) {
        free(map);
        free(repl);
        freeReplyObject(rep);
        if (nodes)
            freeReplyObject(nodes);
        seterr(err, errlen, "cluster: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    for (int s = 0; s < SLUICEI_CLUSTER_SLOTS; s++)
        map[s] = -1;
    size_t covered = 0;
    sluice_err e = SLUICE_OK;
    if (rep->type != REDIS_REPLY_ARRAY)
        e = SLUICE_ERR_PROTOCOL;
    for (size_t i = 0; e == SLUICE_OK && i < rep->elements; i++) {
        const redisReply *ent = rep->element[i];
        long long lo, hi;
        if (ent->type != REDIS_REPLY_ARRAY || ent->elements < 3 ||
            reply_int(ent->element[0], &lo) || reply_int(ent->element[1], &hi) || lo < 0 ||
            hi < lo || hi >= SLUICEI_CLUSTER_SLOTS) {
            e = SLUICE_ERR_PROTOCOL;
            break;
        }
        int m = entry_node(r, ent->element[2], &asked);
        if (m == -2) {
            e = SLUICE_ERR_PROTOCOL;
            break;
        }
        int replicas = 0;
        for (size_t j = 3; j < ent->elements; j++) {
            /* Replicas are nodes worth asking for the map later. */
            if (entry_node(r, ent->element[j], &asked) >= -1)
                replicas++;
        }
        if (m < 0)
            continue; /* master of unknown address: as if uncovered */
        const redisReply *me = ent->element[2];
        if (replicas > 0 || (me->elements >= 3 && me->element[2]->type == REDIS_REPLY_STRING &&
                             nodes_has_replica(nodes, me->element[2]->str, me->element[2]->len)))
            repl[m] = 1;
        for (long long s = lo; s <= hi; s++) {
            covered += map[s] < 0;
            map[s] = (int16_t)m;
        }
    }
    freeReplyObject(rep);
    if (nodes)
        freeReplyObject(nodes);
    if (e == SLUICE_OK && covered == 0) {
        seterr(err, errlen, "%s:%d: CLUSTER SLOTS: no slot is assigned (cluster not set up?)",
               host, asked.port);
        e = SLUICE_ERR_IO;
    } else if (e != SLUICE_OK) {
        seterr(err, errlen, "%s:%d: CLUSTER SLOTS: malformed reply", host, asked.port);
    }
    if (e == SLUICE_OK) {
        memcpy(r->slot_node, map, sizeof r->slot_node);
        for (int i = 0; i < r->nnodes; i++)
            r->nodes[i].has_replica = repl[i];
        r->map_ok = 1;
        r->last_good = ni;
        r->stats.refreshes++;
    }
    free(map);
    free(repl);
    return e;
}

/* Reads the slot map from the first known node that answers: the one that
 * answered last time, then the others (seeds first, then every master and
 * replica seen since). */
static sluice_err refresh_map(sluicei_router *r, char *err, size_t errlen)
{
    char last[256] = "";
    sluice_err worst = SLUICE_ERR_IO;
    int tried = 0, best_rank = -1;
    int first = r->last_good >= 0 ? r->last_good : 0;
    /* The table may grow while we walk it (replicas learnt from a reply
     * that was then refused): walk the count at the start. */
    int n = r->nnodes;
    for (int k = 0; k < n; k++) {
        int i = k == 0 ? first : (k <= first ? k - 1 : k);
        char why[256];
        sluice_err e = slots_from(r, i, why, sizeof why);
        tried++;
        if (e == SLUICE_OK)
            return SLUICE_OK;
        if (e == SLUICE_ERR_NOMEM) {
            seterr(err, errlen, "%s", why);
            return e;
        }
        /* Keep the most telling failure: a wrong password, then a server
         * that is not a cluster node, beat "connection refused". */
        int rank = e == SLUICE_ERR_AUTH ? 2 : e == SLUICE_ERR_INVALID ? 1 : 0;
        if (rank >= best_rank) {
            best_rank = rank;
            snprintf(last, sizeof last, "%s", why);
            worst = rank == 2 ? SLUICE_ERR_AUTH : rank == 1 ? SLUICE_ERR_INVALID : SLUICE_ERR_IO;
        }
    }
    seterr(err, errlen, "cluster: no node gave the slot map (%d tried; %s)", tried, last);
    return worst;
}

/* ---- addresses -------------------------------------------------------- */

static void free_servers(sluicei_router *r)
{
    for (int i = 0; i < r->nservers; i++)
        sluicei_url_free(&r->servers[i]);
    free(r->servers);
    r->servers = NULL;
    r->nservers = 0;
}

static sluice_err add_server(sluicei_router *r, sluicei_url *u, char *err, size_t errlen)
{
    sluicei_url *s = realloc(r->servers, (size_t)(r->nservers + 1) * sizeof *s);
    if (!s) {
        sluicei_url_free(u);
        seterr(err, errlen, "redis address: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    r->servers = s;
    r->servers[r->nservers++] = *u;
    return SLUICE_OK;
}

/* Strips a leading "redis URL: " from a parse error. */
static const char *bare(const char *msg)
{
    return strncmp(msg, "redis URL: ", 11) == 0 ? msg + 11 : msg;
}

/* redis+cluster://[user[:password]@]host:port[,host:port...][/][?wait=N]:
 * each seed is parsed as redis://[userinfo@]seed<tail>, so credentials,
 * SLUICE_REDIS_PASSWORD and ?wait=N mean what they mean in a redis:// URL. */
static sluice_err parse_cluster(sluicei_router *r, const char *addr, char *err, size_t errlen)
{
    char q[QUOTE_MAX + 8];
    const char *rest = addr + strlen(CLUSTER_SCHEME "://");
    /* The last '@' ends the userinfo, as in a redis:// URL. */
    const char *at = strrchr(rest, '@');
    const char *hosts = at ? at + 1 : rest;
    size_t ul = at ? (size_t)(at - rest) : 0;
    size_t hl = strcspn(hosts, "/?");
    const char *tail = hosts + hl;

    if (hl == 0) {
        seterr(err, errlen, "cluster address: no host:port (use redis+cluster://host:port"
                            "[,host:port...])");
        return SLUICE_ERR_INVALID;
    }
    if (strstr(hosts, "://")) {
        seterr(err, errlen, "cluster address: the seeds are host:port, not URLs, as in "
                            "redis+cluster://10.0.0.1:7000,10.0.0.2:7000");
        return SLUICE_ERR_INVALID;
    }
    /* What follows the seeds ("/", "?wait=N") once, on its own, so that a
     * seed's error is about the seed. */
    {
        size_t len = strlen("redis://x") + strlen(tail) + 1;
        char *url = malloc(len);
        sluicei_url u;
        char why[256];
        if (!url) {
            seterr(err, errlen, "cluster address: out of memory");
            return SLUICE_ERR_NOMEM;
        }
        snprintf(url, len, "redis://x%s", tail);
        sluice_err e = sluicei_url_parse(url, &u, why, sizeof why);
        free(url);
        if (e != SLUICE_OK) {
            seterr(err, errlen, "cluster address: %s", bare(why));
            return e;
        }
        int db = u.db;
        sluicei_url_free(&u);
        if (db != 0) {
            seterr(err, errlen, "cluster address: a Redis Cluster has only db 0 (drop the "
                                "'/%d')", db);
            return SLUICE_ERR_INVALID;
        }
    }
    const char *s = hosts;
    for (int n = 1; s <= hosts + hl; n++) {
        size_t sl = strcspn(s, ",/?");
        if (sl == 0) {
            seterr(err, errlen, "cluster address: seed %d is empty in '%s'", n,
                   quote(q, sizeof q, hosts, hl));
            return SLUICE_ERR_INVALID;
        }
        if (n > MAX_ADDRS) {
            seterr(err, errlen, "cluster address: more than %d seeds", MAX_ADDRS);
            return SLUICE_ERR_INVALID;
        }
        size_t len = strlen("redis://") + ul + 1 + sl + strlen(tail) + 1;
        char *url = malloc(len);
        if (!url) {
            seterr(err, errlen, "cluster address: out of memory");
            return SLUICE_ERR_NOMEM;
        }
        snprintf(url, len, "redis://%.*s%s%.*s%s", (int)ul, rest, at ? "@" : "", (int)sl, s,
                 tail);
        sluicei_url u;
        char why[256];
        sluice_err e = sluicei_url_parse(url, &u, why, sizeof why);
        free_secret(url);
        if (e != SLUICE_OK) {
            /* A user or password error is not the seed's. */
            const char *b = bare(why);
            if (strncmp(b, "bad %-escape", 12) == 0 || strncmp(b, "user '", 6) == 0)
                seterr(err, errlen, "cluster address: %s", b);
            else
                seterr(err, errlen, "cluster address: seed %d '%s': %s", n,
                       quote(q, sizeof q, s, sl), bare(why));
            return e;
        }
        e = add_server(r, &u, err, errlen);
        if (e != SLUICE_OK)
            return e;
        s += sl;
        if (*s != ',')
            break;
        s++;
    }
    /* ?wait=N given: it wins over "1 when the master has a replica". */
    const char *qm = strchr(tail, '?');
    if (qm) {
        for (const char *p = qm + 1; *p; p += strcspn(p, "&"), p += *p == '&')
            if (strncmp(p, "wait=", 5) == 0)
                r->wait_explicit = 1;
    }
    return SLUICE_OK;
}

/* One redis:// or unix:// URL, or several separated by ',' (a ',' counts
 * as a separator only before "scheme://", so a password may hold one). */
static sluice_err parse_list(sluicei_router *r, const char *addr, char *err, size_t errlen)
{
    const char *s = addr;
    int n = 0;
    for (;;) {
        const char *end = s;
        for (;;) {
            end = strchr(end, ',');
            if (!end || starts_with_scheme(end + 1))
                break;
            end++;
        }
        size_t sl = end ? (size_t)(end - s) : strlen(s);
        n++;
        if (n > MAX_ADDRS) {
            seterr(err, errlen, "server list: more than %d servers", MAX_ADDRS);
            return SLUICE_ERR_INVALID;
        }
        char *url = malloc(sl + 1);
        if (!url) {
            seterr(err, errlen, "redis address: out of memory");
            return SLUICE_ERR_NOMEM;
        }
        memcpy(url, s, sl);
        url[sl] = '\0';
        if (prefix_nocase(url, CLUSTER_SCHEME "://")) {
            free_secret(url);
            seterr(err, errlen, "server list: server %d is a cluster address; a cluster "
                                "address stands alone (redis+cluster://h:p,h:p)", n);
            return SLUICE_ERR_INVALID;
        }
        sluicei_url u;
        char why[256];
        sluice_err e = sluicei_url_parse(url, &u, why, sizeof why);
        if (e != SLUICE_OK) {
            /* "redis://a:1,b:2" reads as one URL with a strange port. */
            const char *at = strrchr(url, '@');
            int comma = strchr(at ? at : url, ',') != NULL;
            if (n == 1 && !end)
                seterr(err, errlen, "%s%s", why,
                       comma ? " (a list of servers is redis://a:1,redis://b:2; a cluster is "
                               "redis+cluster://a:1,b:2)" : "");
            else
                seterr(err, errlen, "server list, server %d: %s", n, why);
            free_secret(url);
            return e;
        }
        free_secret(url);
        e = add_server(r, &u, err, errlen);
        if (e != SLUICE_OK)
            return e;
        if (!end)
            break;
        s = end + 1;
    }
    return SLUICE_OK;
}

/* Appends to d[*o..cap), never past its end. */
static void append(char *d, size_t cap, size_t *o, const char *fmt, ...)
{
    if (*o + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(d + *o, cap - *o, fmt, ap);
    va_end(ap);
    if (n > 0)
        *o = *o + (size_t)n < cap ? *o + (size_t)n : cap - 1;
}

static sluice_err make_desc(sluicei_router *r)
{
    size_t cap = 64, o = 0;
    for (int i = 0; i < r->nservers; i++) {
        const sluicei_url *u = &r->servers[i];
        cap += 300 + (u->host ? strlen(u->host) : 0) + (u->user ? strlen(u->user) : 0) +
               (u->unix_path ? strlen(u->unix_path) : 0);
    }
    char *d = malloc(cap);
    if (!d)
        return SLUICE_ERR_NOMEM;
    d[0] = '\0';
    if (r->kind == SLUICEI_ROUTER_CLUSTER) {
        const sluicei_url *t = &r->servers[0];
        append(d, cap, &o, "%s://%s%s", CLUSTER_SCHEME, t->user ? t->user : "",
               t->user ? "@" : "");
        for (int i = 0; i < r->nservers; i++) {
            const sluicei_url *u = &r->servers[i];
            int v6 = strchr(u->host, ':') != NULL;
            append(d, cap, &o, "%s%s%s%s:%d", i ? "," : "", v6 ? "[" : "", u->host,
                   v6 ? "]" : "", u->port);
        }
        if (r->wait_explicit)
            append(d, cap, &o, "/?wait=%d", t->wait_replicas);
        else
            append(d, cap, &o, "/");
    } else {
        for (int i = 0; i < r->nservers; i++) {
            const sluicei_url *u = &r->servers[i];
            size_t n = 300 + (u->host ? strlen(u->host) : 0) + (u->user ? strlen(u->user) : 0) +
                       (u->unix_path ? strlen(u->unix_path) : 0);
            char *one = malloc(n);
            if (!one) {
                free(d);
                return SLUICE_ERR_NOMEM;
            }
            sluicei_url_describe(u, one, n);
            append(d, cap, &o, "%s%s", i ? "," : "", one);
            free(one);
        }
    }
    r->desc = d;
    return SLUICE_OK;
}

/* ---- the router ------------------------------------------------------- */

static sluice_err router_new(sluicei_router **out, const char *addr, int connect_timeout_ms,
                             int cmd_timeout_ms, int read_map, char *err, size_t errlen)
{
    *out = NULL;
    if (!addr || !*addr) {
        seterr(err, errlen, "redis address: empty (use redis://host:port, a list "
                            "redis://a:1,redis://b:2 or redis+cluster://host:port,...)");
        return SLUICE_ERR_INVALID;
    }
    sluicei_router *r = calloc(1, sizeof *r);
    if (!r) {
        seterr(err, errlen, "redis address: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    r->connect_timeout_ms =
        connect_timeout_ms > 0 ? connect_timeout_ms : SLUICE_CONNECT_TIMEOUT_MS_DEFAULT;
    r->cmd_timeout_ms = cmd_timeout_ms > 0 ? cmd_timeout_ms : SLUICE_COMMAND_TIMEOUT_MS_DEFAULT;
    r->last_good = -1;
    for (int s = 0; s < SLUICEI_CLUSTER_SLOTS; s++)
        r->slot_node[s] = -1;

    sluice_err e;
    if (prefix_nocase(addr, CLUSTER_SCHEME "://")) {
        r->kind = SLUICEI_ROUTER_CLUSTER;
        e = parse_cluster(r, addr, err, errlen);
    } else {
        e = parse_list(r, addr, err, errlen);
        r->kind = r->nservers > 1 ? SLUICEI_ROUTER_LIST : SLUICEI_ROUTER_SINGLE;
    }
    if (e == SLUICE_OK && make_desc(r) != SLUICE_OK) {
        seterr(err, errlen, "redis address: out of memory");
        e = SLUICE_ERR_NOMEM;
    }
    if (e == SLUICE_OK && r->kind == SLUICEI_ROUTER_CLUSTER) {
        for (int i = 0; i < r->nservers; i++)
            if (node_index(r, r->servers[i].host, strlen(r->servers[i].host),
                           r->servers[i].port) < 0) {
                seterr(err, errlen, "cluster address: out of memory");
                e = SLUICE_ERR_NOMEM;
                break;
            }
        if (e == SLUICE_OK && read_map) {
            char why[400];
            e = refresh_map(r, why, sizeof why);
            if (e != SLUICE_OK)
                seterr(err, errlen, "%s: %s", r->desc, why);
            if (e == SLUICE_ERR_INVALID)
                seterr(err, errlen, "%s: %s (a single server is redis://host:port)", r->desc,
                       why);
        }
    }
    if (e != SLUICE_OK) {
        sluicei_router_close(r);
        return e;
    }
    *out = r;
    return SLUICE_OK;
}

sluice_err sluicei_router_open(sluicei_router **out, const char *addr, int connect_timeout_ms,
                               int cmd_timeout_ms, char *err, size_t errlen)
{
    return router_new(out, addr, connect_timeout_ms, cmd_timeout_ms, 1, err, errlen);
}

sluice_err sluicei_router_parse(sluicei_router **out, const char *addr, char *err, size_t errlen)
{
    return router_new(out, addr, 0, 0, 0, err, errlen);
}

void sluicei_router_close(sluicei_router *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->nconns; i++)
        sluicei_conn_close(r->conns[i].c);
    free(r->conns);
    for (binding *b = r->bindings, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    for (int i = 0; i < r->nnodes; i++)
        free(r->nodes[i].host);
    free(r->nodes);
    free_servers(r);
    free(r->desc);
    free(r);
}

sluicei_router_kind sluicei_router_kind_of(const sluicei_router *r)
{
    return r->kind;
}

const char *sluicei_router_describe(const sluicei_router *r)
{
    return r->desc;
}

const char *sluicei_router_errstr(const sluicei_router *r)
{
    return r->errstr;
}

void sluicei_router_get_stats(const sluicei_router *r, sluicei_router_stats *out)
{
    *out = r->stats;
}

/* The URL of node ni of the cluster: the address's credentials, the node's
 * host and port, and its wait_replicas. */
static sluice_err node_url(sluicei_router *r, int ni, sluicei_url *u)
{
    const sluicei_url *t = &r->servers[0];
    sluicei_url tmp = *t;
    tmp.host = r->nodes[ni].host;
    tmp.port = r->nodes[ni].port;
    tmp.wait_replicas = r->wait_explicit ? t->wait_replicas : r->nodes[ni].has_replica ? 1 : 0;
    return sluicei_url_copy(u, &tmp);
}

sluice_err sluicei_router_url(sluicei_router *r, const char *q, int refresh, sluicei_url *u,
                              char *err, size_t errlen)
{
    char nq[QUOTE_MAX + 8];
    memset(u, 0, sizeof *u);
    if (r->kind != SLUICEI_ROUTER_CLUSTER) {
        int p = partition_of(q);
        int i = r->kind == SLUICEI_ROUTER_LIST && p > 0 ? p % r->nservers : 0;
        if (sluicei_url_copy(u, &r->servers[i]) != SLUICE_OK) {
            seterr(err, errlen, "redis address: out of memory");
            return SLUICE_ERR_NOMEM;
        }
        return SLUICE_OK;
    }
    if (refresh || !r->map_ok) {
        char why[400];
        sluice_err e = refresh_map(r, why, sizeof why);
        if (e != SLUICE_OK) {
            seterr(err, errlen, "%s: %s", r->desc, why);
            return e;
        }
    }
    unsigned slot = queue_slot(q);
    int ni = r->slot_node[slot];
    if (ni < 0) {
        seterr(err, errlen, "%s: slot %u of queue '%s' has no master (cluster state not ok?)",
               r->desc, slot, quote(nq, sizeof nq, q, strlen(q)));
        return SLUICE_ERR_IO;
    }
    if (node_url(r, ni, u) != SLUICE_OK) {
        seterr(err, errlen, "redis address: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    return SLUICE_OK;
}

static int same_server(const sluicei_url *a, const sluicei_url *b)
{
    if (a->unix_path || b->unix_path)
        return a->unix_path && b->unix_path && strcmp(a->unix_path, b->unix_path) == 0 &&
               a->db == b->db;
    return a->host && b->host && strcmp(a->host, b->host) == 0 && a->port == b->port &&
           a->db == b->db;
}

static sluice_err add_conn(sluicei_router *r, sluicei_conn *c, const char *q)
{
    if (r->nconns == r->capconns) {
        int cap = r->capconns ? r->capconns * 2 : 8;
        rconn *n = realloc(r->conns, (size_t)cap * sizeof *n);
        if (!n)
            return SLUICE_ERR_NOMEM;
        r->conns = n;
        r->capconns = cap;
    }
    r->conns[r->nconns].c = c;
    snprintf(r->conns[r->nconns].q, sizeof r->conns[r->nconns].q, "%s", q);
    r->nconns++;
    return SLUICE_OK;
}

/* The pool connection to the server at u (opened, or reconnected once,
 * when needed, until deadline_ms). */
static sluice_err pool_conn(sluicei_router *r, const sluicei_url *u, int64_t deadline_ms,
                            sluicei_conn **out, char *err, size_t errlen)
{
    *out = NULL;
    for (int i = 0; i < r->nconns; i++) {
        sluicei_conn *c = r->conns[i].c;
        if (r->conns[i].q[0] || !same_server(&c->url, u))
            continue;
        if (!c->ctx) {
            int64_t until = sluicei_now_ms() + r->connect_timeout_ms;
            if (deadline_ms >= 0 && deadline_ms < until)
                until = deadline_ms;
            sluice_err e = sluicei_conn_reconnect(c, until, NULL);
            if (e != SLUICE_OK) {
                seterr(err, errlen, "%s", c->errstr);
                return e;
            }
        }
        /* A node's replica count changes with failovers. */
        c->url.wait_replicas = u->wait_replicas;
        *out = c;
        return SLUICE_OK;
    }
    sluicei_conn *c;
    sluice_err e =
        sluicei_conn_open_url(&c, u, r->connect_timeout_ms, r->cmd_timeout_ms, err, errlen);
    if (e != SLUICE_OK)
        return e;
    if (add_conn(r, c, "") != SLUICE_OK) {
        sluicei_conn_close(c);
        seterr(err, errlen, "redis: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    *out = c;
    return SLUICE_OK;
}

static binding *binding_of(sluicei_router *r, const char *q)
{
    for (binding *b = r->bindings; b; b = b->next)
        if (strcmp(b->q, q) == 0)
            return b;
    binding *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->r = r;
    snprintf(b->q, sizeof b->q, "%s", q);
    b->next = r->bindings;
    r->bindings = b;
    return b;
}

/* The resolver of a bound connection: the slot map read again, url moved
 * to the master serving the queue now. */
static sluice_err resolve_queue(void *arg, sluicei_url *url, char *err, size_t errlen)
{
    binding *b = arg;
    sluicei_url nu;
    sluice_err e = sluicei_router_url(b->r, b->q, 1, &nu, err, errlen);
    if (e != SLUICE_OK)
        return e;
    free(url->host);
    url->host = nu.host;
    nu.host = NULL;
    url->port = nu.port;
    url->wait_replicas = nu.wait_replicas;
    sluicei_url_free(&nu);
    return SLUICE_OK;
}

void sluicei_router_bind(sluicei_router *r, const char *q, sluicei_conn *c)
{
    if (r->kind != SLUICEI_ROUTER_CLUSTER)
        return; /* a queue never moves between independent servers */
    binding *b = binding_of(r, q);
    if (!b)
        return; /* out of memory: c keeps reconnecting where it is */
    c->resolve = resolve_queue;
    c->resolve_arg = b;
}

sluice_err sluicei_router_conn(sluicei_router *r, const char *q, sluicei_conn **out, char *err,
                               size_t errlen)
{
    *out = NULL;
    sluicei_url u;
    sluice_err e;
    if (r->kind != SLUICEI_ROUTER_CLUSTER) {
        e = sluicei_router_url(r, q, 0, &u, err, errlen);
        if (e == SLUICE_OK)
            e = pool_conn(r, &u, -1, out, err, errlen);
        sluicei_url_free(&u);
        return e;
    }
    for (int i = 0; i < r->nconns; i++) {
        if (strcmp(r->conns[i].q, q) != 0)
            continue;
        sluicei_conn *c = r->conns[i].c;
        if (!c->ctx) {
            /* Bound: the reconnect finds where q lives now. */
            e = sluicei_conn_reconnect(c, sluicei_now_ms() + r->connect_timeout_ms, NULL);
            if (e != SLUICE_OK) {
                seterr(err, errlen, "%s", c->errstr);
                return e;
            }
        }
        *out = c;
        return SLUICE_OK;
    }
    e = sluicei_router_url(r, q, 0, &u, err, errlen);
    if (e != SLUICE_OK)
        return e;
    sluicei_conn *c;
    e = sluicei_conn_open_url(&c, &u, r->connect_timeout_ms, r->cmd_timeout_ms, err, errlen);
    sluicei_url_free(&u);
    if (e == SLUICE_ERR_IO) {
        /* The map may be stale (a failover since): once more, freshly. */
        char why[400];
        e = sluicei_router_url(r, q, 1, &u, why, sizeof why);
        if (e == SLUICE_OK) {
            e = sluicei_conn_open_url(&c, &u, r->connect_timeout_ms, r->cmd_timeout_ms, err,
                                      errlen);
            sluicei_url_free(&u);
        } else {
            seterr(err, errlen, "%s", why);
        }
    }
    if (e != SLUICE_OK)
        return e;
    if (add_conn(r, c, q) != SLUICE_OK) {
        sluicei_conn_close(c);
        seterr(err, errlen, "redis: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    sluicei_router_bind(r, q, c);
    *out = c;
    return SLUICE_OK;
}

/* ---- commands with redirects ------------------------------------------ */

/* Parses "MOVED slot host:port" / "ASK slot host:port": the host (empty:
 * the node that replied) and port. Returns 0 on success. */
static int parse_redirect(const char *msg, char *host, size_t hostlen, int *port)
{
    const char *sp = strchr(msg, ' ');
    if (!sp)
        return -1;
    sp = strchr(sp + 1, ' ');
    if (!sp)
        return -1;
    const char *hp = sp + 1;
    const char *colon = strrchr(hp, ':');
    if (!colon)
        return -1;
    size_t hl = (size_t)(colon - hp);
    uint64_t p = 0;
    /* "MOVED 3999 127.0.0.1:6381": the port ends the message. */
    if (sluicei_parse_u64(colon + 1, strlen(colon + 1), 65535, &p) != 0)
        return -1;
    if (hl >= hostlen || p < 1)
        return -1;
    memcpy(host, hp, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

static sluice_err run(sluicei_router *r, const char *q, int64_t deadline_ms, int script,
                      sluicei_script_id id, int argc, const char **argv, const size_t *argvlen,
                      redisReply **out)
{
    *out = NULL;
    int64_t start = sluicei_now_ms();
    if (deadline_ms < 0)
        deadline_ms = start + DEFAULT_DEADLINE_MS;
    int refresh = 0, redirects = 0;
    sluicei_backoff pause;
    sluicei_backoff_init(&pause, RETRY_MIN_MS, RETRY_MAX_MS, sluicei_random64() | 1);
    char ask_host[256] = "";
    int ask_port = 0;
    unsigned attempts = 0;
    char last[sizeof r->errstr] = "";
    char other[sizeof r->errstr] = ""; /* the last error that was not a redirect */
    int was_redirect = 0;
    sluice_err e;
    r->errstr[0] = '\0';
    for (;;) {
        sluicei_url u;
        sluicei_conn *c = NULL;
        char why[sizeof r->errstr];
        int quick = 0; /* send again at once (first redirect) */
        attempts++;
        was_redirect = 0;
        if (ask_host[0]) {
            e = sluicei_router_url(r, q, 0, &u, why, sizeof why);
            if (e == SLUICE_OK) {
                free(u.host);
                u.host = strdup(ask_host);
                u.port = ask_port;
                if (!u.host)
                    e = SLUICE_ERR_NOMEM;
            }
        } else {
            e = sluicei_router_url(r, q, refresh, &u, why, sizeof why);
        }
        refresh = 0;
        if (e == SLUICE_OK) {
            e = pool_conn(r, &u, deadline_ms, &c, why, sizeof why);
            sluicei_url_free(&u);
        }
        if (e == SLUICE_OK && ask_host[0]) {
            /* ASKING holds for the next command on this connection only. */
            redisReply *a = NULL;
            e = sluicei_conn_command(c, &a, "ASKING");
            if (a)
                freeReplyObject(a);
            if (e != SLUICE_OK) {
                snprintf(why, sizeof why, "%s", c->errstr);
                e = SLUICE_ERR_IO; /* try the whole way again */
            }
        }
        ask_host[0] = '\0';
        if (e == SLUICE_OK) {
            e = script ? sluicei_script_run(c, id, q, argc, argv, argvlen, out)
                       : sluicei_conn_commandargv(c, out, argc, argv, argvlen);
            if (e == SLUICE_OK)
                return SLUICE_OK;
            const redisReply *er = *out && (*out)->type == REDIS_REPLY_ERROR ? *out : NULL;
            if (er && !sluicei_cluster_retryable(er->str, er->len)) {
                snprintf(r->errstr, sizeof r->errstr, "%s", c->errstr);
                return e;
            }
            if (!er && e != SLUICE_ERR_IO) {
                /* Too many arguments, out of memory, a protocol error. */
                snprintf(r->errstr, sizeof r->errstr, "%s", c->errstr);
                return e;
            }
            snprintf(why, sizeof why, "%s", c->errstr);
            if (er && r->kind != SLUICEI_ROUTER_CLUSTER &&
                (strncmp(er->str, "MOVED ", 6) == 0 || strncmp(er->str, "ASK ", 4) == 0)) {
                snprintf(r->errstr, sizeof r->errstr, "%.400s (the server is a cluster node: "
                                                      "use a redis+cluster:// address)", why);
                return e;
            }
            was_redirect = er && (strncmp(er->str, "MOVED ", 6) == 0 ||
                                  strncmp(er->str, "ASK ", 4) == 0);
            if (er && strncmp(er->str, "MOVED ", 6) == 0) {
                r->stats.moved++;
                refresh = 1;
                quick = redirects++ == 0;
                /* Where the node says the slot went, in case the node that
                 * gives the map has not heard yet. */
                char h[256];
                int port;
                if (parse_redirect(er->str, h, sizeof h, &port) == 0) {
                    char why2[400];
                    if (!h[0])
                        snprintf(h, sizeof h, "%s", c->url.host ? c->url.host : "");
                    if (refresh_map(r, why2, sizeof why2) == SLUICE_OK)
                        refresh = 0;
                    int ni = node_index(r, h, strlen(h), port);
                    if (ni >= 0)
                        r->slot_node[queue_slot(q)] = (int16_t)ni;
                }
            } else if (er && strncmp(er->str, "ASK ", 4) == 0) {
                r->stats.ask++;
                quick = redirects++ == 0;
                if (parse_redirect(er->str, ask_host, sizeof ask_host, &ask_port) == 0) {
                    if (!ask_host[0])
                        snprintf(ask_host, sizeof ask_host, "%s", c->url.host ? c->url.host : "");
                } else {
                    ask_host[0] = '\0';
                }
            } else {
                refresh = 1;
                redirects = 0;
            }
        } else if (e == SLUICE_ERR_IO) {
            refresh = 1;
        } else {
            /* Wrong password, bad address, out of memory: no retry helps. */
            snprintf(r->errstr, sizeof r->errstr, "%s", why);
            return e;
        }
        snprintf(last, sizeof last, "%s", why);
        if (!was_redirect)
            snprintf(other, sizeof other, "%s", why);

        int64_t now = sluicei_now_ms();
        if (now >= deadline_ms) {
            /* A redirect to a node that then refuses (ASK, then "non
             * local key" during a migration) says less than the refusal. */
            if (was_redirect && other[0])
                snprintf(r->errstr, sizeof r->errstr, "%.300s; then %.120s (gave up after %u "
                         "attempts in %lld ms)", other, last, attempts, (long long)(now - start));
            else
                snprintf(r->errstr, sizeof r->errstr, "%.420s (gave up after %u attempts in "
                         "%lld ms)", last, attempts, (long long)(now - start));
            /* *out keeps the last error reply (SLUICE_ERR_REDIS), if any. */
            return e;
        }
        if (*out) {
            freeReplyObject(*out);
            *out = NULL;
        }
        if (!quick) {
            r->stats.retries++;
            int64_t ms = sluicei_backoff_next(&pause);
            if (now + ms > deadline_ms)
                ms = deadline_ms - now;
            sleep_ms((int)ms);
        }
    }
}

sluice_err sluicei_router_command(sluicei_router *r, const char *q, int64_t deadline_ms,
                                  redisReply **out, int argc, const char **argv,
                                  const size_t *argvlen)
{
    return run(r, q, deadline_ms, 0, SLUICEI_SCRIPT_COUNT, argc, argv, argvlen, out);
}

sluice_err sluicei_router_script(sluicei_router *r, const char *q, int64_t deadline_ms,
                                 sluicei_script_id id, int argc, const char **argv,
                                 const size_t *argvlen, redisReply **out)
{
    return run(r, q, deadline_ms, 1, id, argc, argv, argvlen, out);
}

sluice_err sluicei_queue_partitions(sluicei_router *r, const char *q, int *partitions,
                                    char *err, size_t errlen)
{
    char key[SLUICE_MAX_KEY], nq[QUOTE_MAX + 8];
    redisReply *rep = NULL;
    int64_t deadline = sluicei_now_ms() + r->cmd_timeout_ms;
    *partitions = 0;
    quote(nq, sizeof nq, q, strlen(q));

    sluicei_key(key, q, "meta");
    const char *av[3] = {"EXISTS", key, NULL};
    sluice_err e = sluicei_router_command(r, q, deadline, &rep, 2, av, NULL);
    if (e != SLUICE_OK) {
        seterr(err, errlen, "queue '%s': %s", nq, r->errstr);
        if (rep)
            freeReplyObject(rep);
        return e;
    }
    int exists = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    freeReplyObject(rep);
    rep = NULL;
    if (exists)
        return SLUICE_OK;
    if (strchr(q, '#')) {
        seterr(err, errlen, "queue '%s' does not exist", nq);
        return SLUICE_ERR_NOQUEUE;
    }

    char p0[SLUICE_MAX_QUEUE_NAME + 8];
    sluicei_partition_name(p0, q, 0);
    sluicei_key(key, p0, "meta");
    const char *hv[3] = {"HGET", key, "partitions"};
    e = sluicei_router_command(r, p0, deadline, &rep, 3, hv, NULL);
    if (e != SLUICE_OK) {
        seterr(err, errlen, "queue '%s': %s", nq, r->errstr);
        if (rep)
            freeReplyObject(rep);
        return e;
    }
    if (rep->type == REDIS_REPLY_NIL) {
        freeReplyObject(rep);
        seterr(err, errlen, "queue '%s' does not exist", nq);
        return SLUICE_ERR_NOQUEUE;
    }
    uint64_t v = 0;
    if (rep->type != REDIS_REPLY_STRING ||
        sluicei_parse_u64(rep->str, rep->len, SLUICE_MAX_PARTITIONS, &v) != 0 || v < 1) {
        char got[QUOTE_MAX + 8] = "?";
        if (rep->type == REDIS_REPLY_STRING)
            quote(got, sizeof got, rep->str, rep->len);
        freeReplyObject(rep);
        seterr(err, errlen, "queue '%s': %s has partitions '%s', not a number 1..%d", nq, key,
               got, SLUICE_MAX_PARTITIONS);
        return SLUICE_ERR_PROTOCOL;
    }
    freeReplyObject(rep);
    *partitions = (int)v;
    return SLUICE_OK;
}
