/* Many Redis servers under one address: Redis Cluster and lists of
 * independent servers (cluster.h). This file is the router itself: the
 * object and its lifetime, its pool of connections (one per node, and in a
 * cluster one per queue that follows its queue), and the loop that runs a
 * command or a script where its queue lives, following MOVED and ASK and
 * sending again after passing errors. Addresses are parsed in
 * cluster_addr.c, the slot map kept in cluster_slots.c
 * (cluster_internal.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nanosleep under -std=c11 */
#endif

#include "cluster_internal.h"
#include "num.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Pause after a retryable error: 100 ms doubling up to 1 s (retry.h). */
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 1000
/* router_command/script without a deadline. */
#define DEFAULT_DEADLINE_MS 30000

/* ---- small helpers ---------------------------------------------------- */

#define seterr sluicei_seterr
#define quote sluicei_quote

static void sleep_ms(int ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
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

    sluice_err e = cluster_addr_parse(r, addr, err, errlen);
    if (e == SLUICE_OK && r->kind == SLUICEI_ROUTER_CLUSTER) {
        for (int i = 0; i < r->nservers; i++)
            if (cluster_slots_node_index(r, r->servers[i].host, strlen(r->servers[i].host),
                                         r->servers[i].port) < 0) {
                seterr(err, errlen, "cluster address: out of memory");
                e = SLUICE_ERR_NOMEM;
                break;
            }
        if (e == SLUICE_OK && read_map) {
            char why[400];
            e = cluster_slots_refresh(r, why, sizeof why);
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
    cluster_slots_free(r);
    cluster_addr_free(r);
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

/* ---- the pool of connections ----------------------------------------- */

static int same_server(const sluicei_url *a, const sluicei_url *b)
{
    if (a->unix_path || b->unix_path)
        return a->unix_path && b->unix_path && strcmp(a->unix_path, b->unix_path) == 0 &&
               a->db == b->db;
    return a->host && b->host && strcmp(a->host, b->host) == 0 && a->port == b->port &&
           a->db == b->db && a->tls == b->tls;
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
                    if (cluster_slots_refresh(r, why2, sizeof why2) == SLUICE_OK)
                        refresh = 0;
                    int ni = cluster_slots_node_index(r, h, strlen(h), port);
                    if (ni >= 0)
                        r->slot_node[cluster_slots_queue_slot(q)] = (int16_t)ni;
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
