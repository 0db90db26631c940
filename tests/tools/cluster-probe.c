/* Drives the cluster router (common/src/cluster.h) for
 * tests/integration/cluster_router.sh.
 *
 *   cluster-probe [--deadline MS] ADDR VERB ARGS...   one command
 *   cluster-probe [--deadline MS] ADDR -              commands from stdin, one
 *                                                     per line, one router
 * Verbs (each prints one line; errors "ERR <code>: <why>"):
 *   keyslot KEY...            slots of the keys (no connection)
 *   node Q                    "host:port wait=N" of the master serving Q
 *   set Q VALUE | get Q       SET / GET sluice:{Q}:probe through the router
 *   cmd Q ARG...              any command, on the node serving Q
 *   create Q [P p]            the create script (partitions P, partition p)
 *   partitions Q              sluicei_queue_partitions()
 *   follow Q SECONDS          INCR sluice:{Q}:follow every 50 ms on the
 *                             connection of sluicei_router_conn(), which
 *                             reconnects (resolver) after an error; prints
 *                             "node host:port" at each change, then
 *                             "follow ok=N failed=N node=host:port"
 *   stats                     "moved=N ask=N retries=N refreshes=N"
 * Exit status (one command): 0 done, 1 failed, 2 usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ARGS 64

static int64_t deadline_ms = -1; /* per command, from --deadline */

static int64_t deadline(void)
{
    return deadline_ms < 0 ? -1 : sluicei_now_ms() + deadline_ms;
}

static void print_reply(const redisReply *r, int top)
{
    switch (r->type) {
    case REDIS_REPLY_NIL:
        fputs("(nil)", stdout);
        break;
    case REDIS_REPLY_INTEGER:
        printf("%lld", r->integer);
        break;
    case REDIS_REPLY_ARRAY:
        for (size_t i = 0; i < r->elements; i++) {
            if (i)
                putchar(' ');
            print_reply(r->element[i], 0);
        }
        break;
    default:
        fwrite(r->str, 1, r->len, stdout);
    }
    if (top)
        putchar('\n');
}

static int fail(sluice_err e, const char *why)
{
    printf("ERR %s: %s\n", sluice_strerror(e), why);
    return 1;
}

/* Prints the reply of a router command, or its error. */
static int show(sluicei_router *r, sluice_err e, redisReply *rep)
{
    int rc = 0;
    if (e == SLUICE_OK)
        print_reply(rep, 1);
    else
        rc = fail(e, sluicei_router_errstr(r));
    if (rep)
        freeReplyObject(rep);
    return rc;
}

static int follow(sluicei_router *r, const char *q, int secs)
{
    char err[512], key[SLUICE_MAX_KEY], node[300] = "", now[300];
    sluicei_conn *c;
    sluice_err e = sluicei_router_conn(r, q, &c, err, sizeof err);
    if (e != SLUICE_OK)
        return fail(e, err);
    sluicei_key(key, q, "follow");
    long ok = 0, failed = 0;
    int64_t end = sluicei_now_ms() + (int64_t)secs * 1000;
    while (sluicei_now_ms() < end) {
        snprintf(now, sizeof now, "%s:%d", c->url.host ? c->url.host : c->url.unix_path,
                 c->url.port);
        if (strcmp(now, node) != 0) {
            printf("node %s\n", now);
            fflush(stdout);
            snprintf(node, sizeof node, "%s", now);
        }
        redisReply *rep = NULL;
        e = c->ctx ? sluicei_conn_command(c, &rep, "INCR %s", key) : SLUICE_ERR_IO;
        if (e == SLUICE_OK) {
            ok++;
        } else {
            failed++;
            /* Dropped, or told the queue is elsewhere: reconnect, which
             * asks the router where the queue lives now. */
            if (!rep || sluicei_cluster_retryable(rep->str, rep->len))
                sluicei_conn_reconnect(c, sluicei_now_ms() + 2000, NULL);
        }
        if (rep)
            freeReplyObject(rep);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("follow ok=%ld failed=%ld node=%s\n", ok, failed, node);
    return 0;
}

static int run(sluicei_router *r, int argc, char **argv)
{
    char err[512], key[SLUICE_MAX_KEY];
    redisReply *rep = NULL;
    sluice_err e;
    const char *verb = argv[0];
    const char *q = argc > 1 ? argv[1] : NULL;

    if (strcmp(verb, "keyslot") == 0 && argc >= 2) {
        for (int i = 1; i < argc; i++)
            printf("%s%u", i > 1 ? " " : "", sluicei_key_slot(argv[i], strlen(argv[i])));
        putchar('\n');
        return 0;
    }
    if (strcmp(verb, "stats") == 0 && argc == 1) {
        sluicei_router_stats st;
        sluicei_router_get_stats(r, &st);
        printf("moved=%llu ask=%llu retries=%llu refreshes=%llu\n", (unsigned long long)st.moved,
               (unsigned long long)st.ask, (unsigned long long)st.retries,
               (unsigned long long)st.refreshes);
        return 0;
    }
    if (strcmp(verb, "node") == 0 && argc == 2) {
        sluicei_url u;
        e = sluicei_router_url(r, q, 0, &u, err, sizeof err);
        if (e != SLUICE_OK)
            return fail(e, err);
        printf("%s:%d wait=%d\n", u.host ? u.host : u.unix_path, u.port, u.wait_replicas);
        sluicei_url_free(&u);
        return 0;
    }
    if ((strcmp(verb, "set") == 0 && argc == 3) || (strcmp(verb, "get") == 0 && argc == 2)) {
        sluicei_key(key, q, "probe");
        const char *av[3] = {verb, key, argc == 3 ? argv[2] : NULL};
        e = sluicei_router_command(r, q, deadline(), &rep, argc, av, NULL);
        return show(r, e, rep);
    }
    if (strcmp(verb, "cmd") == 0 && argc >= 3) {
        e = sluicei_router_command(r, q, deadline(), &rep, argc - 2, (const char **)argv + 2,
                                   NULL);
        return show(r, e, rep);
    }
    if (strcmp(verb, "create") == 0 && (argc == 2 || argc == 4)) {
        char now[32];
        snprintf(now, sizeof now, "%llu", (unsigned long long)sluicei_wall_us());
        const char *av[10] = {"0", "0", now, "0", "drop", "30000", "5", "67108864",
                              argc == 4 ? argv[2] : "", argc == 4 ? argv[3] : ""};
        e = sluicei_router_script(r, q, deadline(), SLUICEI_SCRIPT_CREATE, 10, av, NULL, &rep);
        return show(r, e, rep);
    }
    if (strcmp(verb, "partitions") == 0 && argc == 2) {
        int p;
        e = sluicei_queue_partitions(r, q, &p, err, sizeof err);
        if (e != SLUICE_OK)
            return fail(e, err);
        printf("%d\n", p);
        return 0;
    }
    if (strcmp(verb, "follow") == 0 && argc == 3)
        return follow(r, q, atoi(argv[2]));
    printf("ERR usage: unknown verb or wrong arguments: %s\n", verb);
    return 2;
}

int main(int argc, char **argv)
{
    int i = 1;
    if (i + 1 < argc && strcmp(argv[i], "--deadline") == 0) {
        deadline_ms = atoll(argv[i + 1]);
        i += 2;
    }
    if (argc - i < 2) {
        fprintf(stderr, "usage: cluster-probe [--deadline MS] ADDR VERB ARGS... | ADDR -\n");
        return 2;
    }
    const char *addr = argv[i++];
    if (strcmp(argv[i], "keyslot") == 0)
        return run(NULL, argc - i, argv + i);

    sluicei_router *r;
    char err[512];
    sluice_err e = sluicei_router_open(&r, addr, 2000, 5000, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, "cluster-probe: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (strcmp(argv[i], "-") == 0) {
        char line[4096];
        setvbuf(stdout, NULL, _IOLBF, 0);
        while (fgets(line, sizeof line, stdin)) {
            char *av[MAX_ARGS];
            int ac = 0;
            for (char *t = strtok(line, " \t\r\n"); t && ac < MAX_ARGS; t = strtok(NULL, " \t\r\n"))
                av[ac++] = t;
            if (ac == 0)
                continue;
            if (strcmp(av[0], "quit") == 0)
                break;
            run(r, ac, av);
            fflush(stdout);
        }
    } else {
        rc = run(r, argc - i, argv + i);
    }
    sluicei_router_close(r);
    return rc;
}
