/* sluice-ctl: create, inspect and delete queues. */
#include "conn.h"
#include "proto.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: sluice-ctl [--redis URL] COMMAND [ARGS]\n"
    "\n"
    "Create, inspect and delete sluice queues.\n"
    "\n"
    "commands:\n"
    "  create Q --max-batches N --max-bytes B [--consumers N --coordinated\n"
    "         [--remainder drop|pad]] [--lease-ms MS] [--max-deliveries K]\n"
    "                       create queue Q with its budgets: at most N batches and\n"
    "                       B bytes held in Redis (queued + not yet acknowledged);\n"
    "                       B takes a K, M or G suffix (powers of 1024).\n"
    "                       --coordinated: N ranks get the same number of batches per\n"
    "                       epoch; the last incomplete round is dropped or padded.\n"
    "                       --lease-ms: a consumer silent this long (default 10000)\n"
    "                       loses its unacknowledged batches to the others;\n"
    "                       --max-deliveries: deliveries without an ack before a\n"
    "                       batch is dead-lettered (default 3)\n"
    "  delete Q             remove queue Q and everything it holds\n"
    "  info Q               show budgets, what the queue holds and its counters\n"
    "  script NAME          print the Lua source of a protocol script\n"
    "                       (create delete push take claim ack requeue reap beat\n"
    "                       dead deadadmin submit task_claim task_renew task_done\n"
    "                       task_fail)\n"
    "\n"
    "options:\n"
    "  --redis URL          redis://[user[:password]@]host[:port][/db] or\n"
    "                       unix:///path/to/socket[?db=N]; default $SLUICE_REDIS_URL,\n"
    "                       else redis://127.0.0.1:6379. The password may come from\n"
    "                       $SLUICE_REDIS_PASSWORD instead of the URL.\n"
    "  -h, --help           show this help\n"
    "  --version            show the version\n"
    "\n"
    "example:\n"
    "  sluice-ctl --redis redis://127.0.0.1:6379 create train --max-batches 64 --max-bytes 256M\n"
    "\n"
    "exit status: 0 success, 1 runtime error (Redis, missing queue), 2 usage error\n";


static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "sluice-ctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\ntry 'sluice-ctl --help'\n");
    return EXIT_USAGE;
}

/* Parses a positive count or size ("64", "256M", "1G"); binary suffixes
 * only when allow_suffix. Returns -1 on a malformed or zero value. */
static int parse_amount(const char *s, int allow_suffix, uint64_t *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || v == 0)
        return -1;
    unsigned shift = 0;
    if (allow_suffix && *end) {
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return -1;
        }
        end++;
        if (*end == 'i' && end[1] == 'B')
            end += 2;
        else if (*end == 'B')
            end++;
    }
    if (*end || v > (UINT64_MAX >> shift) || (v << shift) > (uint64_t)INT64_MAX)
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* The value given after flag, for messages. */
static const char *val_or(char **argv, int argc, const char *flag)
{
    for (int i = 0; i + 1 < argc; i++)
        if (strcmp(argv[i], flag) == 0)
            return argv[i + 1];
    return "?";
}

static int runtime_error(const char *what, sluice_err e, const char *detail)
{
    fprintf(stderr, "sluice-ctl: %s: %s%s%s\n", what, sluice_strerror(e), detail && *detail ? ": " : "",
            detail ? detail : "");
    return EXIT_RUNTIME;
}

/* Runs a script; on failure prints one line naming the queue and returns
 * non-zero. On success *out holds the reply. */
static int run_script(sluicei_conn *c, sluicei_script_id id, const char *q, int argc,
                      const char **argv, redisReply **out)
{
    sluice_err e = sluicei_script_run(c, id, q, argc, argv, NULL, out);
    if (e == SLUICE_OK)
        return 0;
    char what[SLUICE_MAX_QUEUE_NAME + 32];
    snprintf(what, sizeof what, "queue '%s'", q);
    if (e == SLUICE_ERR_NOQUEUE)
        fprintf(stderr, "sluice-ctl: queue '%s' does not exist (create it with: sluice-ctl create %s)\n",
                q, q);
    else if (e == SLUICE_ERR_EXISTS)
        fprintf(stderr, "sluice-ctl: queue '%s' exists already (sluice-ctl delete %s removes it)\n", q,
                q);
    else
        runtime_error(what, e, *out ? (*out)->str : c->errstr);
    if (*out)
        freeReplyObject(*out);
    *out = NULL;
    return EXIT_RUNTIME;
}

/* Settings of a new queue (sluice-ctl create). */
typedef struct create_opts {
    uint64_t max_batches, max_bytes;
    uint64_t ranks;           /* --consumers N with --coordinated; 0: free */
    int coordinated;
    const char *remainder;    /* "drop" or "pad" */
    uint64_t lease_ms;        /* consumer lease */
    uint64_t max_deliveries;  /* deliveries before a batch is dead-lettered */
} create_opts;

/* Reads create's flags before anything connects, so usage errors come
 * first. Returns 0 or EXIT_USAGE (message printed). */
static int parse_create(int argc, char **argv, create_opts *o)
{
    *o = (create_opts){.remainder = "drop", .lease_ms = 10000, .max_deliveries = 3};
    for (int i = 0; i < argc; i++) {
        const char *opt = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t *num = NULL;
        int suffix = 0;
        if (strcmp(opt, "--coordinated") == 0) {
            o->coordinated = 1;
            continue;
        }
        if (strcmp(opt, "--max-batches") == 0)
            num = &o->max_batches;
        else if (strcmp(opt, "--max-bytes") == 0)
            num = &o->max_bytes, suffix = 1;
        else if (strcmp(opt, "--consumers") == 0)
            num = &o->ranks;
        else if (strcmp(opt, "--lease-ms") == 0)
            num = &o->lease_ms;
        else if (strcmp(opt, "--max-deliveries") == 0)
            num = &o->max_deliveries;
        else if (strcmp(opt, "--remainder") != 0)
            return usage_error("create: unknown argument '%s'", opt);
        if (!val)
            return usage_error("%s needs a value", opt);
        i++;
        if (!num) {
            if (strcmp(val, "drop") != 0 && strcmp(val, "pad") != 0)
                return usage_error("--remainder '%s' is not 'drop' or 'pad'", val);
            o->remainder = val;
        } else if (parse_amount(val, suffix, num) != 0) {
            char msg[96];
            snprintf(msg, sizeof msg, "%s '%%s' is not a positive %s", opt,
                     suffix ? "size (e.g. 64M)" : "integer");
            return usage_error(msg, val);
        }
    }
    if (!o->max_batches)
        return usage_error("create: %s is required", "--max-batches");
    if (!o->max_bytes)
        return usage_error("create: %s is required", "--max-bytes");
    if (o->coordinated && !o->ranks)
        return usage_error("create: %s", "--coordinated needs --consumers N (the number of ranks)");
    if (!o->coordinated)
        o->ranks = 0; /* --consumers alone only documents the intent */
    if (o->ranks > 4096)
        return usage_error("create: --consumers %s is more than 4096 ranks", val_or(argv, argc, "--consumers"));
    return 0;
}

static int cmd_create(sluicei_conn *c, const char *q, const create_opts *o)
{
    char nb[24], nB[24], now[24], ranks[24], lease[24], maxd[24];
    snprintf(nb, sizeof nb, "%" PRIu64, o->max_batches);
    snprintf(nB, sizeof nB, "%" PRIu64, o->max_bytes);
    snprintf(now, sizeof now, "%" PRIu64, sluicei_wall_us());
    snprintf(ranks, sizeof ranks, "%" PRIu64, o->ranks);
    snprintf(lease, sizeof lease, "%" PRIu64, o->lease_ms);
    snprintf(maxd, sizeof maxd, "%" PRIu64, o->max_deliveries);
    const char *args[] = {nb, nB, now, ranks, o->ranks ? o->remainder : "", lease, maxd};
    redisReply *r;
    if (run_script(c, SLUICEI_SCRIPT_CREATE, q, 7, args, &r))
        return EXIT_RUNTIME;
    freeReplyObject(r);
    printf("created queue '%s': at most %s batches, %s bytes", q, nb, nB);
    if (o->ranks)
        printf("; coordinated over %s ranks, remainder %s", ranks, o->remainder);
    printf("\n");
    return 0;
}

static int cmd_delete(sluicei_conn *c, const char *q)
{
    redisReply *r;
    if (run_script(c, SLUICEI_SCRIPT_DELETE, q, 0, NULL, &r))
        return EXIT_RUNTIME;
    printf("deleted queue '%s' (%lld keys)\n", q, r->integer);
    freeReplyObject(r);
    return 0;
}

/* Counters of the stats hash that info prints, in this order. */
static const char *const info_stats[] = {"pushed", "pushed_bytes", "acked", "acked_bytes",
                                         "dup_dropped", "requeued"};

static int cmd_info(sluicei_conn *c, const char *q)
{
    char k_meta[SLUICE_MAX_KEY], k_data[SLUICE_MAX_KEY], k_bytes[SLUICE_MAX_KEY],
        k_ready[SLUICE_MAX_KEY], k_cons[SLUICE_MAX_KEY], k_stats[SLUICE_MAX_KEY];
    sluicei_key(k_meta, q, "meta");
    sluicei_key(k_data, q, "data");
    sluicei_key(k_bytes, q, "bytes");
    sluicei_key(k_ready, q, "ready:0");
    sluicei_key(k_cons, q, "consumers");
    sluicei_key(k_stats, q, "stats");

    redisReply *meta = NULL, *r = NULL;
    sluice_err e = sluicei_conn_command(c, &meta, "HMGET %s max_batches max_bytes created_us", k_meta);
    if (e != SLUICE_OK)
        return runtime_error("info", e, meta ? meta->str : c->errstr);
    if (meta->type != REDIS_REPLY_ARRAY || meta->elements != 3 ||
        meta->element[0]->type != REDIS_REPLY_STRING) {
        freeReplyObject(meta);
        fprintf(stderr, "sluice-ctl: queue '%s' does not exist (create it with: sluice-ctl create %s)\n",
                q, q);
        return EXIT_RUNTIME;
    }
    printf("queue: %s\n", q);
    printf("max_batches: %s\n", meta->element[0]->str);
    printf("max_bytes: %s\n", meta->element[1]->type == REDIS_REPLY_STRING ? meta->element[1]->str : "0");
    freeReplyObject(meta);

    long long held = 0, bytes = 0, ready = 0, pending = 0, consumers = 0;
#define INT_CMD(var, ...)                                                         \
    do {                                                                          \
        e = sluicei_conn_command(c, &r, __VA_ARGS__);                             \
        if (e != SLUICE_OK)                                                       \
            return runtime_error("info", e, r ? r->str : c->errstr);              \
        var = r->type == REDIS_REPLY_INTEGER ? r->integer                         \
              : r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;    \
        freeReplyObject(r);                                                       \
    } while (0)
    INT_CMD(held, "HLEN %s", k_data);
    INT_CMD(bytes, "GET %s", k_bytes);
    INT_CMD(ready, "LLEN %s", k_ready);
    e = sluicei_conn_command(c, &r, "HKEYS %s", k_cons);
    if (e != SLUICE_OK)
        return runtime_error("info", e, r ? r->str : c->errstr);
    redisReply *cids = r;
    consumers = (long long)cids->elements;
    for (size_t i = 0; i < cids->elements; i++) {
        char k_pend[SLUICE_MAX_KEY + 32];
        long long n;
        snprintf(k_pend, sizeof k_pend, "sluice:{%s}:pending:%s", q, cids->element[i]->str);
        INT_CMD(n, "LLEN %s", k_pend);
        pending += n;
    }
    freeReplyObject(cids);
    printf("batches: %lld\n", held);
    printf("bytes: %lld\n", bytes);
    printf("ready: %lld\n", ready);
    printf("pending: %lld\n", pending);
    printf("consumers: %lld\n", consumers);
    for (size_t i = 0; i < sizeof info_stats / sizeof info_stats[0]; i++) {
        long long v;
        INT_CMD(v, "HGET %s %s", k_stats, info_stats[i]);
        printf("%s: %lld\n", info_stats[i], v);
    }
#undef INT_CMD
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = getenv("SLUICE_REDIS_URL");
    if (!url || !*url)
        url = "redis://127.0.0.1:6379";
    static const struct option opts[] = {
        {"redis", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    opterr = 0;
    /* '+': stop at the command, so that its own flags are left alone. */
    while ((ch = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (ch) {
        case 'r': url = optarg; break;
        case 'h': fputs(usage_text, stdout); return 0;
        case 'V': printf("sluice-ctl %s\n", SLUICE_VERSION); return 0;
        default:
            if (optopt)
                return usage_error("option '-%c' needs a value or is unknown", (char[]){(char)optopt, 0});
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error("%s", "no command given (create, delete, info, script)");
    const char *cmd = argv[optind++];

    if (strcmp(cmd, "script") == 0) {
        if (optind >= argc)
            return usage_error("%s", "script: which one? (see sluice-ctl --help)");
        sluicei_script_id id = sluicei_script_by_name(argv[optind]);
        if (id == SLUICEI_SCRIPT_COUNT)
            return usage_error("script: unknown script '%s'", argv[optind]);
        fputs(sluicei_script_source(id), stdout);
        return 0;
    }

    int known = !strcmp(cmd, "create") || !strcmp(cmd, "delete") || !strcmp(cmd, "info");
    if (!known)
        return usage_error("unknown command '%s' (create, delete, info, script)", cmd);
    if (optind >= argc)
        return usage_error("%s: which queue?", cmd);
    const char *q = argv[optind++];
    char err[512];
    if (sluicei_queue_name_check(q, err, sizeof err) != SLUICE_OK)
        return usage_error("%s", err);
    create_opts co;
    if (strcmp(cmd, "create") == 0) {
        if (parse_create(argc - optind, argv + optind, &co))
            return EXIT_USAGE;
    } else if (optind < argc) {
        return usage_error("unexpected argument '%s'", argv[optind]);
    }

    sluicei_conn *c = NULL;
    sluice_err e = sluicei_conn_open(&c, url, 0, 0, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, "sluice-ctl: %s\n", err);
        return e == SLUICE_ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
    }
    int rc;
    if (strcmp(cmd, "create") == 0)
        rc = cmd_create(c, q, &co);
    else if (strcmp(cmd, "delete") == 0)
        rc = cmd_delete(c, q);
    else
        rc = cmd_info(c, q);
    sluicei_conn_close(c);
    return rc;
}
