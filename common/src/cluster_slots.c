/* Where a queue lives (cluster.h): key slots (CRC16 of the hash tag), the
 * slot map of a cluster (CLUSTER SLOTS, and CLUSTER NODES for replicas,
 * read through short-lived probe connections of its own), the table of
 * nodes seen, and the URL of the node serving a queue now, on a cluster,
 * a list of servers or one server. */
#include "cluster_internal.h"
#include "num.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define seterr sluicei_seterr
#define quote sluicei_quote

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
unsigned cluster_slots_queue_slot(const char *q)
{
    char key[SLUICE_MAX_KEY];
    sluicei_key(key, q, "meta");
    return sluicei_key_slot(key, strlen(key));
}

/* Partition number of "Q#p", or -1 for a plain name (or more than 6
 * digits after the '#'). */
static int partition_of(const char *q)
{
    const char *h = strrchr(q, '#');
    uint64_t p;
    if (!h || strlen(h + 1) > 6 || sluicei_parse_u64(h + 1, strlen(h + 1), 999999, &p) != 0)
        return -1;
    return (int)p;
}

/* ---- nodes and the slot map ------------------------------------------- */

/* Index of host:port in r->nodes, added when new; -1 when the table is
 * full or out of memory. */
int cluster_slots_node_index(sluicei_router *r, const char *host, size_t hl, int port)
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

/* A short-lived connection to one node (connect, AUTH), its replies
 * bounded by g: the slot map is never read through a connection the
 * router hands out, which may be the very one being reconnected. */
static redisContext *probe_connect(sluicei_router *r, const node *n, sluicei_reply_guard *g,
                                   char *err, size_t errlen, sluice_err *code)
{
    redisContext *ctx = NULL;
    char why[400];
    *code = sluicei_redis_connect(&ctx, g, &r->servers[0], n->host, n->port,
                                  r->connect_timeout_ms, r->connect_timeout_ms, why, sizeof why);
    if (*code != SLUICE_OK)
        seterr(err, errlen, "%s:%d: %s", n->host, n->port, why);
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
        /* cluster_slots_node_index may grow r->nodes: asked may move; copy
         * first. */
        char h[256];
        snprintf(h, sizeof h, "%s", asked->host);
        return cluster_slots_node_index(r, h, strlen(h), (int)port);
    }
    return cluster_slots_node_index(r, ip, il, (int)port);
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
    sluicei_reply_guard g;
    sluicei_reply_guard_init(&g, 0, 0);
    redisContext *ctx = probe_connect(r, &asked, &g, err, errlen, &code);
    if (!ctx)
        return code;
    redisReply *rep = sluicei_redis_command(ctx, "CLUSTER SLOTS");
    if (!rep) {
        seterr(err, errlen, "%s:%d: CLUSTER SLOTS: %s", host, asked.port, ctx->errstr);
        redisFree(ctx);
        return sluicei_reply_guard_tripped(&g) ? SLUICE_ERR_PROTOCOL : SLUICE_ERR_IO;
    }
    /* Which masters have replicas (nodes_has_replica); without it (an ACL
     * that forbids it) only the replicas CLUSTER SLOTS shows count. */
    redisReply *nodes =
        rep->type == REDIS_REPLY_ARRAY ? sluicei_redis_command(ctx, "CLUSTER NODES") : NULL;
    if (!nodes && sluicei_reply_guard_tripped(&g)) {
        seterr(err, errlen, "%s:%d: CLUSTER NODES: %s", host, asked.port, ctx->errstr);
        redisFree(ctx);
        freeReplyObject(rep);
        return SLUICE_ERR_PROTOCOL;
    }
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
sluice_err cluster_slots_refresh(sluicei_router *r, char *err, size_t errlen)
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

/* ---- the node serving a queue ----------------------------------------- */

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
        sluice_err e = cluster_slots_refresh(r, why, sizeof why);
        if (e != SLUICE_OK) {
            seterr(err, errlen, "%s: %s", r->desc, why);
            return e;
        }
    }
    unsigned slot = cluster_slots_queue_slot(q);
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

/* ---- cleanup ---------------------------------------------------------- */

void cluster_slots_free(sluicei_router *r)
{
    for (int i = 0; i < r->nnodes; i++)
        free(r->nodes[i].host);
    free(r->nodes);
    r->nodes = NULL;
    r->nnodes = r->capnodes = 0;
}
