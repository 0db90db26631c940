/* Addresses of many servers (cluster.h): a cluster address
 * redis+cluster://[user[:password]@]host:port[,host:port...][/][?wait=N],
 * parsed seed by seed as redis:// URLs (rediss+cluster://: as rediss://
 * URLs, over TLS), and lists of plain servers redis://a,redis://b (or
 * one server alone, any of them rediss://), parsed URL by URL (conn.h);
 * and the router's printable form of either, without the password.
 * No I/O. */
#include "cluster_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define seterr sluicei_seterr
#define quote sluicei_quote

/* ---- small helpers ---------------------------------------------------- */

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
 * SLUICE_REDIS_PASSWORD and ?wait=N mean what they mean in a redis:// URL;
 * with tls (rediss+cluster://) as rediss://[userinfo@]seed<tail>. */
static sluice_err parse_cluster(sluicei_router *r, const char *addr, int tls, char *err,
                                size_t errlen)
{
    char q[QUOTE_MAX + 8];
    const char *scheme = tls ? "rediss://" : "redis://";
    const char *rest = addr + strlen(tls ? CLUSTER_TLS_SCHEME "://" : CLUSTER_SCHEME "://");
    /* The last '@' ends the userinfo, as in a redis:// URL. */
    const char *at = strrchr(rest, '@');
    const char *hosts = at ? at + 1 : rest;
    size_t ul = at ? (size_t)(at - rest) : 0;
    size_t hl = strcspn(hosts, "/?");
    const char *tail = hosts + hl;

    if (hl == 0) {
        seterr(err, errlen, "cluster address: no host:port (use %s+cluster://host:port"
                            "[,host:port...])", tls ? "rediss" : "redis");
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
        size_t len = strlen(scheme) + ul + 1 + sl + strlen(tail) + 1;
        char *url = malloc(len);
        if (!url) {
            seterr(err, errlen, "cluster address: out of memory");
            return SLUICE_ERR_NOMEM;
        }
        snprintf(url, len, "%s%.*s%s%.*s%s", scheme, (int)ul, rest, at ? "@" : "", (int)sl, s,
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
        if (prefix_nocase(url, CLUSTER_SCHEME "://") ||
            prefix_nocase(url, CLUSTER_TLS_SCHEME "://")) {
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
        append(d, cap, &o, "%s://%s%s", t->tls ? CLUSTER_TLS_SCHEME : CLUSTER_SCHEME,
               t->user ? t->user : "",
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

sluice_err cluster_addr_parse(sluicei_router *r, const char *addr, char *err, size_t errlen)
{
    sluice_err e;
    if (prefix_nocase(addr, CLUSTER_SCHEME "://") ||
        prefix_nocase(addr, CLUSTER_TLS_SCHEME "://")) {
        r->kind = SLUICEI_ROUTER_CLUSTER;
        e = parse_cluster(r, addr, prefix_nocase(addr, CLUSTER_TLS_SCHEME "://"), err, errlen);
    } else {
        e = parse_list(r, addr, err, errlen);
        r->kind = r->nservers > 1 ? SLUICEI_ROUTER_LIST : SLUICEI_ROUTER_SINGLE;
    }
    if (e == SLUICE_OK && make_desc(r) != SLUICE_OK) {
        seterr(err, errlen, "redis address: out of memory");
        e = SLUICE_ERR_NOMEM;
    }
    return e;
}

void cluster_addr_free(sluicei_router *r)
{
    free_servers(r);
    free(r->desc);
    r->desc = NULL;
}
