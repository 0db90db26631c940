/* sluice-ctl: create, inspect and delete queues; submit jobs and watch
 * them; dead letters; reaping; a live view (stat) and a Prometheus
 * endpoint (metrics). Every command reaches Redis through a router
 * (cluster.h): one server, a list of servers or a Redis Cluster; a
 * partitioned queue Q is the queues Q#0..Q#P-1, each on its own node. */
#include "cluster.h"
#include "conn.h"
#include "metrics.h"
#include "proto.h"
/* The manifest parser lives with the readers it checks paths against. */
#include "manifest.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

#define MAX_EPOCHS 1000000
#define MAX_BATCH_SIZE 1000000
#define MAX_ATTEMPTS 1000
/* Most tasks (shards x epochs) one submit may queue. */
#define MAX_TASKS 10000000ULL

static const char usage_text[] =
    "usage: sluice-ctl [--redis URL] COMMAND [ARGS]\n"
    "\n"
    "Create, inspect and delete sluice queues; submit jobs to them.\n"
    "\n"
    "commands:\n"
    "  create Q --max-batches N --max-bytes B [--consumers N --coordinated\n"
    "         [--remainder drop|pad]] [--lease-ms MS] [--max-deliveries K]\n"
    "         [--max-frame-bytes F] [--partitions P]\n"
    "                       create queue Q with its budgets: at most N batches and\n"
    "                       B bytes held in Redis (queued + not yet acknowledged);\n"
    "                       B takes a K, M or G suffix (powers of 1024).\n"
    "                       --coordinated: N ranks get the same number of batches per\n"
    "                       epoch; the last incomplete round is dropped or padded.\n"
    "                       --lease-ms: a consumer silent this long on the Redis\n"
    "                       server's clock (default 10000, at least 1000) loses its\n"
    "                       unacknowledged batches to the others;\n"
    "                       --max-deliveries: deliveries to an application that\n"
    "                       ended without an ack before a batch is dead-lettered\n"
    "                       (default 3); --max-frame-bytes: the largest batch frame\n"
    "                       the queue admits, refused at the producer (default\n"
    "                       64M, or B if smaller).\n"
    "                       --partitions P (1..1024): P partitions Q#0..Q#P-1, each\n"
    "                       a complete queue with all these settings, spread over\n"
    "                       the servers or the cluster's nodes. The budgets are PER\n"
    "                       PARTITION: the queue holds up to P x N batches and\n"
    "                       P x B bytes. Q may not contain '#'\n"
    "  delete Q             remove queue Q (every partition) and everything it holds,\n"
    "                       in steps of about 1000 keys; an interrupted delete is\n"
    "                       finished by running it again\n"
    "  info Q [--json]      show budgets, what the queue holds, its counters, the job\n"
    "                       (if any), and the producers and consumers alive; for a\n"
    "                       partitioned queue the sums over its partitions, then\n"
    "                       one line per partition (its node, what it holds\n"
    "                       against its budgets)\n"
    "  stat Q [--watch [--interval-ms MS]] [--json]\n"
    "                       a live view: depth and bytes against the budgets as\n"
    "                       bars, push and ack rates, the producers and consumers\n"
    "                       (when last seen; their counters, with the time blocked\n"
    "                       by backpressure and in next()), epoch progress,\n"
    "                       failed tasks, dead letters; a partitioned queue: the\n"
    "                       sums and a line per partition. --watch: refresh every\n"
    "                       MS (default 1000) in place on a terminal, else one\n"
    "                       snapshot after another; Ctrl-C quits. --json: one JSON\n"
    "                       object per snapshot\n"
    "  metrics Q --addr HOST:PORT [--interval-ms MS]\n"
    "                       serve the queue's figures (depth, budgets, counters,\n"
    "                       epochs, tasks, every producer and consumer) in\n"
    "                       Prometheus text on http://HOST:PORT/metrics, and 200\n"
    "                       \"ok\" on /healthz; read from Redis every MS (default\n"
    "                       1000). A partitioned queue: the sums, and the\n"
    "                       sluice_partition_* gauges per partition. Runs until\n"
    "                       SIGINT or SIGTERM (exit 0)\n"
    "  submit Q --manifest FILE --epochs E --batch-size N [--shuffle-seed S]\n"
    "         [--max-attempts K] [--max-crashes C]\n"
    "                       turn the manifest into a job: one task per shard and\n"
    "                       epoch, E epochs, N records per batch. With a seed each\n"
    "                       epoch's task order is a shuffle (the same seed gives the\n"
    "                       same orders; epochs differ); without one, manifest order.\n"
    "                       A task whose producers report K failures (default 3), or\n"
    "                       whose lease runs out C times (its producers died holding\n"
    "                       it; default 20), is recorded as failed. Refused while the\n"
    "                       queue runs a job; replaces a finished one. Sent in steps\n"
    "                       of a few ms each, so that no job is too big for Redis;\n"
    "                       all or nothing: the job appears at once at the end, and\n"
    "                       on any error no trace of it is left. A queue of P\n"
    "                       partitions:\n"
    "                       shard s goes to partition s mod P (the job needs P\n"
    "                       shards at least); every partition is checked before\n"
    "                       any is written (should one fail after all, the error\n"
    "                       names the partitions that have their part)\n"
    "  jobs Q [--json]      the job part of info: epochs, tasks waiting / claimed /\n"
    "                       done / failed (with their errors), batches per epoch,\n"
    "                       the producers working on it (a partitioned queue: the\n"
    "                       sums, then each partition's tasks)\n"
    "  dead Q [--requeue | --purge]\n"
    "                       list the dead letters (id, size, time, reason) of every\n"
    "                       partition; --requeue puts them back in their epoch's\n"
    "                       list, --purge deletes them\n"
    "  reap Q               hand back now the batches of consumers and the tasks of\n"
    "                       producers whose lease expired on the Redis server's\n"
    "                       clock, in every partition (producers and consumers reap\n"
    "                       too; anybody may)\n"
    "  script NAME          print the Lua source of a protocol script\n"
    "                       (create delete push take claim ack requeue reap beat\n"
    "                       dead deadadmin restore submit task_claim task_renew\n"
    "                       task_done task_fail task_check)\n"
    "\n"
    "manifest (one shard per line; '#' starts a comment line):\n"
    "  READER PATH [PATH...] [records=START:END] [split=N]\n"
    "  READER: tfrecord, lines, idx (pairs: images labels), fixed:SIZE, files.\n"
    "  Relative paths are relative to the manifest's folder. records= selects a\n"
    "  range of the paths' records; split=N cuts the line into N shards.\n"
    "  e.g.   idx train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz split=12\n"
    "\n"
    "options:\n"
    "  --redis URL          redis://[user[:password]@]host[:port][/db] or\n"
    "                       unix:///path/to/socket[?db=N] (one server);\n"
    "                       redis://h1:p1,redis://h2:p2,... (independent servers:\n"
    "                       partition p on server p mod n, a plain queue on the\n"
    "                       first); redis+cluster://[user[:password]@]h:p[,h:p...]/\n"
    "                       (a Redis Cluster: any nodes as seeds; MOVED and ASK\n"
    "                       are followed). Default $SLUICE_REDIS_URL, else\n"
    "                       redis://127.0.0.1:6379. The password may come from\n"
    "                       $SLUICE_REDIS_PASSWORD instead of the URL.\n"
    "  -h, --help           show this help\n"
    "  --version            show the version\n"
    "\n"
    "examples:\n"
    "  sluice-ctl --redis redis://127.0.0.1:6379 create train --max-batches 64 --max-bytes 256M\n"
    "  sluice-ctl submit train --manifest train.manifest --epochs 10 --batch-size 64 \\\n"
    "      --shuffle-seed 7\n"
    "  sluice-ctl info train --json\n"
    "  sluice-ctl --redis redis+cluster://10.0.0.1:7000,10.0.0.2:7000/ create big \\\n"
    "      --max-batches 64 --max-bytes 256M --partitions 6\n"
    "\n"
    "exit status: 0 success, 1 runtime error (Redis, missing queue, a job already\n"
    "running, a malformed or unreadable manifest: FILE:LINE says where), 2 usage\n"
    "error\n";

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

/* ---- where the commands go ------------------------------------------------ */

/* Longest partition name: SLUICE_MAX_QUEUE_NAME and "#1023". */
#define PART_NAME_MAX (SLUICE_MAX_QUEUE_NAME + 8)

/* The queue a command works on, and the router that reaches its nodes. */
typedef struct ctl {
    sluicei_router *r;
    const char *q;                 /* the queue named on the command line */
    int partitions;                /* 0: a plain queue; else Q#0..Q#partitions-1 */
    char (*names)[PART_NAME_MAX];  /* partitions ? "Q#p" : [0] = "Q"; owned */
    int retry_ms;                  /* how long a command is sent again after a lost
                                      connection or a cluster redirect */
} ctl;

static int nparts(const ctl *x)
{
    return x->partitions ? x->partitions : 1;
}

/* The queue name of partition p ("Q#p"), or of the plain queue (p 0). */
static const char *pname(const ctl *x, int p)
{
    return x->names[p];
}

/* Makes x a plain queue (partitions 0) or one of that many partitions.
 * Returns 0, or -1 when out of memory (printed). */
static int ctl_set_partitions(ctl *x, int partitions)
{
    int n = partitions ? partitions : 1;
    char (*names)[PART_NAME_MAX] = calloc((size_t)n, sizeof *names);
    if (!names) {
        fprintf(stderr, "sluice-ctl: out of memory for %d partition names\n", n);
        return -1;
    }
    for (int p = 0; p < n; p++) {
        if (partitions)
            sluicei_partition_name(names[p], x->q, p);
        else
            snprintf(names[p], sizeof names[p], "%s", x->q);
    }
    free(x->names);
    x->names = names;
    x->partitions = partitions;
    return 0;
}

static int64_t deadline(const ctl *x)
{
    return sluicei_now_ms() + x->retry_ms;
}

/* Why the last command on queue q failed without an error reply: the
 * router's account of it, else the connection to q's node (opened again
 * now, so that a node that is down says "connect: ..."). */
static void why(ctl *x, const char *q, char *out, size_t n)
{
    sluicei_conn *c = NULL;
    char err[512];
    const char *last = sluicei_router_errstr(x->r);
    if (last && *last)
        snprintf(out, n, "%s", last);
    else if (sluicei_router_conn(x->r, q, &c, err, sizeof err) != SLUICE_OK)
        snprintf(out, n, "%s", err);
    else
        snprintf(out, n, "%s", c->errstr[0] ? c->errstr : "no reply");
}

/* sluicei_router_script() runs scripts of up to this many arguments (as
 * sluicei_script_run(), proto.c); submit passes one per shard and epoch. */
#define ROUTER_SCRIPT_ARGS 32

/* Runs script id on queue q (the node serving it) with any number of
 * arguments: through the router's loaded copy, or, for many arguments,
 * EVAL of the source. A script's error reply is mapped to its code
 * (sluicei_reply_error_code) with *out still set. */
static sluice_err script_call(ctl *x, sluicei_script_id id, const char *q, size_t argc,
                              const char **argv, redisReply **out)
{
    char key[SLUICE_MAX_KEY];
    size_t n = 4 + argc;
    const char **av = malloc(n * sizeof *av);
    size_t *al = malloc(n * sizeof *al);
    sluice_err e;
    *out = NULL;
    if (!av || !al || n > INT32_MAX) {
        free(av);
        free(al);
        return SLUICE_ERR_NOMEM;
    }
    sluicei_key(key, q, "meta");
    av[0] = "EVAL";
    av[1] = sluicei_script_source(id);
    av[2] = "1";
    av[3] = key;
    for (size_t i = 0; i < argc; i++)
        av[4 + i] = argv[i];
    for (size_t i = 0; i < n; i++)
        al[i] = strlen(av[i]);
    if (argc <= ROUTER_SCRIPT_ARGS)
        e = sluicei_router_script(x->r, q, deadline(x), id, (int)argc, av + 4, al + 4, out);
    else
        e = sluicei_router_command(x->r, q, deadline(x), out, (int)n, av, al);
    if (*out && (*out)->type == REDIS_REPLY_ERROR)
        e = sluicei_reply_error_code(*out);
    free(av);
    free(al);
    return e;
}

/* The message of a script's error reply without its code word
 * ("JOBEXISTS the queue runs..." -> "the queue runs..."). */
static const char *error_text(const redisReply *r, const char *code)
{
    const char *s = r && r->type == REDIS_REPLY_ERROR ? strstr(r->str, code) : NULL;
    if (!s)
        return r && r->str ? r->str : "";
    s += strlen(code);
    return *s == ' ' ? s + 1 : s;
}

/* "queue 'Q' does not exist ...", or for a missing partition of a
 * partitioned queue, what that means. */
static void print_noqueue(const ctl *x, const char *q)
{
    /* Without partition 0 the queue is gone (deleted since it was found). */
    if (x->partitions && strcmp(q, pname(x, 0)) == 0)
        q = x->q;
    if (x->partitions && strcmp(q, x->q) != 0)
        fprintf(stderr, "sluice-ctl: partition '%s' of queue '%s' does not exist: the queue is "
                "incomplete (sluice-ctl delete %s, then create it again)\n", q, x->q, x->q);
    else
        fprintf(stderr, "sluice-ctl: queue '%s' does not exist (create it with: sluice-ctl create "
                "%s)\n", q, q);
}

/* Prints one line naming the queue and what failed for a script that
 * returned e (*out: its error reply, or NULL; freed and set to NULL).
 * Returns EXIT_RUNTIME. */
static int script_failed(ctl *x, const char *q, sluice_err e, redisReply **out, size_t argc)
{
    char what[PART_NAME_MAX + 32], detail[1024];
    snprintf(what, sizeof what, "queue '%s'", q);
    if (e == SLUICE_ERR_NOQUEUE) {
        print_noqueue(x, q);
    } else if (e == SLUICE_ERR_EXISTS && *out && strstr((*out)->str, "JOBEXISTS")) {
        fprintf(stderr, "sluice-ctl: queue '%s': %s\n", q, error_text(*out, "JOBEXISTS"));
    } else if (e == SLUICE_ERR_EXISTS) {
        fprintf(stderr, "sluice-ctl: queue '%s' exists already (sluice-ctl delete %s removes it)\n", q,
                q);
    } else if (e == SLUICE_ERR_NOMEM) {
        fprintf(stderr, "sluice-ctl: out of memory for %zu script arguments\n", argc);
    } else {
        if (*out)
            snprintf(detail, sizeof detail, "%s", (*out)->str);
        else
            why(x, q, detail, sizeof detail);
        runtime_error(what, e, detail);
    }
    if (*out)
        freeReplyObject(*out);
    *out = NULL;
    return EXIT_RUNTIME;
}

/* Runs a script; on failure prints one line naming the queue and returns
 * non-zero. On success *out holds the reply. */
static int run_script(ctl *x, sluicei_script_id id, const char *q, size_t argc,
                      const char **argv, redisReply **out)
{
    sluice_err e = script_call(x, id, q, argc, argv, out);
    return e == SLUICE_OK ? 0 : script_failed(x, q, e, out, argc);
}

/* Settings of a new queue (sluice-ctl create). */
typedef struct create_opts {
    uint64_t max_batches, max_bytes;
    uint64_t ranks;           /* --consumers N with --coordinated; 0: free */
    int coordinated;
    const char *remainder;    /* "drop" or "pad" */
    uint64_t lease_ms;        /* consumer lease */
    uint64_t max_deliveries;  /* deliveries before a batch is dead-lettered */
    uint64_t max_frame;       /* largest batch frame; 0: min(64 MiB, max_bytes) */
    uint64_t partitions;      /* --partitions P; 0: a plain queue */
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
        else if (strcmp(opt, "--max-frame-bytes") == 0)
            num = &o->max_frame, suffix = 1;
        else if (strcmp(opt, "--consumers") == 0)
            num = &o->ranks;
        else if (strcmp(opt, "--lease-ms") == 0)
            num = &o->lease_ms;
        else if (strcmp(opt, "--max-deliveries") == 0)
            num = &o->max_deliveries;
        else if (strcmp(opt, "--partitions") == 0)
            num = &o->partitions;
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
    if (o->lease_ms < SLUICEI_MIN_LEASE_MS)
        return usage_error("create: --lease-ms %s is below the minimum of 1000 (a consumer's "
                           "blocking read, a quarter of its lease, must end well inside it)",
                           val_or(argv, argc, "--lease-ms"));
    if (!o->max_frame)
        o->max_frame = o->max_bytes < SLUICEI_MAX_FRAME_DEFAULT ? o->max_bytes
                                                                : SLUICEI_MAX_FRAME_DEFAULT;
    if (o->max_frame > o->max_bytes)
        return usage_error("create: --max-frame-bytes %s is larger than --max-bytes (no batch "
                           "could be that large)", val_or(argv, argc, "--max-frame-bytes"));
    if (o->coordinated && !o->ranks)
        return usage_error("create: %s", "--coordinated needs --consumers N (the number of ranks)");
    if (!o->coordinated && o->ranks)
        return usage_error("create: %s", "--consumers N needs --coordinated (a free queue serves "
                                         "any number of consumers)");
    if (!o->coordinated && strcmp(val_or(argv, argc, "--remainder"), "?") != 0)
        return usage_error("create: %s", "--remainder needs --coordinated");
    if (o->ranks > 4096)
        return usage_error("create: --consumers %s is more than 4096 ranks",
                           val_or(argv, argc, "--consumers"));
    if (o->partitions > SLUICE_MAX_PARTITIONS)
        return usage_error("create: --partitions %s is more than 1024 partitions",
                           val_or(argv, argc, "--partitions"));
    return 0;
}

/* The name of a new queue: '#' is kept for partitions ("Q#3"), and with
 * --partitions P every "Q#<P-1>" must be a valid name. Returns 0 or
 * EXIT_USAGE (printed). */
static int check_create_name(const char *q, const create_opts *o)
{
    if (strchr(q, '#'))
        return usage_error("create: queue name '%s' contains '#', which only the names of "
                           "partitions have (Q#0, Q#1, ...)", q);
    char last[24];
    int n = snprintf(last, sizeof last, "#%" PRIu64, o->partitions ? o->partitions - 1 : 0);
    if (o->partitions && strlen(q) + (size_t)n > SLUICE_MAX_QUEUE_NAME) {
        fprintf(stderr, "sluice-ctl: create: queue name '%s' is too long for %" PRIu64
                " partitions: the name of the last one, '%s%s', has %zu bytes, more than %d\n"
                "try 'sluice-ctl --help'\n", q, o->partitions, q, last, strlen(q) + (size_t)n,
                SLUICE_MAX_QUEUE_NAME);
        return EXIT_USAGE;
    }
    return 0;
}

/* Deletes partitions lo..hi-1 of x (a create being undone). Returns how
 * many could not be deleted (each printed). */
static int delete_partitions(ctl *x, int lo, int hi)
{
    int left = 0;
    for (int p = lo; p < hi; p++) {
        redisReply *r;
        if (run_script(x, SLUICEI_SCRIPT_DELETE, pname(x, p), 0, NULL, &r))
            left++;
        else
            freeReplyObject(r);
    }
    return left;
}

/* Creates the queue, or its partitions from the last to the first: the
 * queue is found (sluicei_queue_partitions reads partition 0) only once
 * all exist. If one fails, those made are deleted again. */
static int cmd_create(ctl *x, const create_opts *o)
{
    char nb[24], nB[24], now[24], ranks[24], lease[24], maxd[24], mf[24], np[24], pp[24];
    snprintf(nb, sizeof nb, "%" PRIu64, o->max_batches);
    snprintf(nB, sizeof nB, "%" PRIu64, o->max_bytes);
    snprintf(now, sizeof now, "%" PRIu64, sluicei_wall_us());
    snprintf(ranks, sizeof ranks, "%" PRIu64, o->ranks);
    snprintf(lease, sizeof lease, "%" PRIu64, o->lease_ms);
    snprintf(maxd, sizeof maxd, "%" PRIu64, o->max_deliveries);
    snprintf(mf, sizeof mf, "%" PRIu64, o->max_frame);
    snprintf(np, sizeof np, "%" PRIu64, o->partitions);
    const char *args[] = {nb, nB, now, ranks, o->ranks ? o->remainder : "", lease, maxd, mf, np,
                          pp};
    /* Q may exist in the other form (plain / partitioned), which the
     * script, looking at one name, would not see. */
    int have;
    char err[1024];
    sluice_err e = sluicei_queue_partitions(x->r, x->q, &have, err, sizeof err);
    if (e == SLUICE_OK) {
        if (have)
            fprintf(stderr, "sluice-ctl: queue '%s' exists already, with %d partition%s "
                    "(sluice-ctl delete %s removes it)\n", x->q, have, have == 1 ? "" : "s", x->q);
        else
            fprintf(stderr, "sluice-ctl: queue '%s' exists already (sluice-ctl delete %s removes "
                    "it)\n", x->q, x->q);
        return EXIT_RUNTIME;
    }
    if (e != SLUICE_ERR_NOQUEUE) {
        fprintf(stderr, "sluice-ctl: %s\n", err);
        return EXIT_RUNTIME;
    }
    for (int p = nparts(x) - 1; p >= 0; p--) {
        redisReply *r;
        snprintf(pp, sizeof pp, "%d", p);
        if (run_script(x, SLUICEI_SCRIPT_CREATE, pname(x, p), x->partitions ? 10 : 8, args, &r)) {
            if (p + 1 < nparts(x)) {
                int left = delete_partitions(x, p + 1, nparts(x));
                if (left)
                    fprintf(stderr, "sluice-ctl: queue '%s' is left incomplete: %d partition%s "
                            "could not be deleted again (sluice-ctl delete %s#N removes one)\n",
                            x->q, left, left == 1 ? "" : "s", x->q);
                else
                    fprintf(stderr, "sluice-ctl: queue '%s' not created: the %d partition%s "
                            "made before were deleted again\n", x->q, nparts(x) - 1 - p,
                            nparts(x) - 1 - p == 1 ? "" : "s");
            }
            return EXIT_RUNTIME;
        }
        freeReplyObject(r);
    }
    if (x->partitions)
        printf("created queue '%s' of %d partitions (%s#0..%s#%d): at most %s batches, %s bytes "
               "per partition", x->q, x->partitions, x->q, x->q, x->partitions - 1, nb, nB);
    else
        printf("created queue '%s': at most %s batches, %s bytes", x->q, nb, nB);
    if (o->ranks)
        printf("; coordinated over %s ranks, remainder %s", ranks, o->remainder);
    printf("\n");
    return 0;
}

static redisReply *must(ctl *x, const char *q, int argc, const char **argv);

/* The value of an integer-like reply (integer, decimal string; else 0). */
static long long num_of(const redisReply *r)
{
    if (!r)
        return 0;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return 0;
}

/* Deletes the queue; a partitioned one from its last partition to the
 * first, so that a delete that stops half-way can be run again (it finds
 * the queue through partition 0, or its 'deleting' key). Each partition
 * goes in steps of about 1000 keys (delete.lua), so that Redis never
 * stops for it. */
static int cmd_delete(ctl *x)
{
    long long keys = 0;
    int missing = 0;
    for (int p = nparts(x) - 1; p >= 0; p--) {
        for (int more = 1; more;) {
            redisReply *r;
            sluice_err e = script_call(x, SLUICEI_SCRIPT_DELETE, pname(x, p), 0, NULL, &r);
            if (e == SLUICE_ERR_NOQUEUE && x->partitions && p > 0) {
                /* A partition lost earlier: delete the others. */
                freeReplyObject(r);
                missing++;
                break;
            }
            if (e != SLUICE_OK) {
                script_failed(x, pname(x, p), e, &r, 0);
                fprintf(stderr, "sluice-ctl: queue '%s' is deleted only in part: run the delete "
                        "again to finish it\n", x->q);
                return EXIT_RUNTIME;
            }
            more = 0;
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
                keys += num_of(r->element[0]);
                more = num_of(r->element[1]) != 0;
            }
            freeReplyObject(r);
        }
    }
    if (x->partitions)
        printf("deleted queue '%s' (%d partitions, %lld keys)\n", x->q, x->partitions, keys);
    else
        printf("deleted queue '%s' (%lld keys)\n", x->q, keys);
    if (missing)
        fprintf(stderr, "sluice-ctl: queue '%s': %d of its partitions did not exist\n", x->q,
                missing);
    return 0;
}

/* The queue a delete works on: as ctl_discover(), or one whose delete
 * stopped half-way (its meta renamed 'deleting', delete.lua). */
static int delete_discover(ctl *x)
{
    int partitions = 0;
    char err[1024], k_plain[SLUICE_MAX_KEY], k_p0[SLUICE_MAX_KEY], p0[PART_NAME_MAX];
    sluice_err e = sluicei_queue_partitions(x->r, x->q, &partitions, err, sizeof err);
    if (e == SLUICE_OK)
        return ctl_set_partitions(x, partitions) ? EXIT_RUNTIME : 0;
    if (e != SLUICE_ERR_NOQUEUE) {
        fprintf(stderr, "sluice-ctl: %s\n", err);
        return EXIT_RUNTIME;
    }
    sluicei_key(k_plain, x->q, "deleting");
    sluicei_partition_name(p0, x->q, 0);
    sluicei_key(k_p0, p0, "deleting");
    const char *ex[2] = {"EXISTS", k_plain}, *hg[3] = {"HGET", k_p0, "partitions"};
    redisReply *a = must(x, x->q, 2, ex), *b = a ? must(x, p0, 3, hg) : NULL;
    int rc = EXIT_RUNTIME;
    if (a && b) {
        if (a->type == REDIS_REPLY_INTEGER && a->integer == 1)
            rc = ctl_set_partitions(x, 0) ? EXIT_RUNTIME : 0;
        else if (b->type == REDIS_REPLY_STRING)
            rc = ctl_set_partitions(x, atoi(b->str)) ? EXIT_RUNTIME : 0;
        else
            fprintf(stderr, "sluice-ctl: queue '%s' does not exist (create it with: sluice-ctl "
                    "create %s)\n", x->q, x->q);
    }
    if (a)
        freeReplyObject(a);
    if (b)
        freeReplyObject(b);
    return rc;
}

/* ---- submit --------------------------------------------------------------- */

typedef struct submit_opts {
    const char *manifest;
    uint64_t epochs, batch_size, max_attempts, max_crashes, seed;
    int has_seed;
} submit_opts;

/* Parses a decimal uint64 (0 allowed). Returns -1 when malformed. */
static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* Reads submit's flags. Returns 0 or EXIT_USAGE (message printed). */
static int parse_submit(int argc, char **argv, submit_opts *o)
{
    *o = (submit_opts){.max_attempts = 3, .max_crashes = 20};
    for (int i = 0; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t *num = NULL, max = 0;
        if (strcmp(opt, "--manifest") == 0)
            ;
        else if (strcmp(opt, "--epochs") == 0)
            num = &o->epochs, max = MAX_EPOCHS;
        else if (strcmp(opt, "--batch-size") == 0)
            num = &o->batch_size, max = MAX_BATCH_SIZE;
        else if (strcmp(opt, "--max-attempts") == 0)
            num = &o->max_attempts, max = MAX_ATTEMPTS;
        else if (strcmp(opt, "--max-crashes") == 0)
            num = &o->max_crashes, max = MAX_ATTEMPTS;
        else if (strcmp(opt, "--shuffle-seed") != 0)
            return usage_error("submit: unknown argument '%s'", opt);
        if (!val)
            return usage_error("%s needs a value", opt);
        i++;
        if (strcmp(opt, "--manifest") == 0) {
            o->manifest = val;
        } else if (!num) {
            if (parse_u64(val, &o->seed) != 0)
                return usage_error("--shuffle-seed '%s' is not an integer in 0..2^64-1", val);
            o->has_seed = 1;
        } else if (parse_amount(val, 0, num) != 0 || *num > max) {
            char msg[96];
            snprintf(msg, sizeof msg, "%s '%%s' is not an integer in 1..%" PRIu64, opt, max);
            return usage_error(msg, val);
        }
    }
    if (!o->manifest)
        return usage_error("submit: %s is required", "--manifest FILE");
    if (!o->epochs)
        return usage_error("submit: %s is required", "--epochs E");
    if (!o->batch_size)
        return usage_error("submit: %s is required", "--batch-size N");
    return 0;
}

/* splitmix64: a small, well-mixed generator; one state per epoch. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A uniform value in [0, bound), bound >= 1 (rejection, no modulo bias). */
static uint64_t uniform(uint64_t *state, uint64_t bound)
{
    uint64_t threshold = (0 - bound) % bound;   /* 2^64 mod bound */
    for (;;) {
        uint64_t x = splitmix64(state);
        if (x >= threshold)
            return x % bound;
    }
}

/* Writes epoch's task order into perm (n shards): manifest order without
 * a seed; else a Fisher-Yates shuffle driven by splitmix64 seeded with
 * seed ^ epoch, so that the same seed always gives the same orders and
 * each epoch its own. */
static void epoch_perm(uint32_t *perm, size_t n, const submit_opts *o, uint64_t epoch)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    if (o->has_seed) {
        uint64_t st = o->seed ^ epoch;
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)uniform(&st, i + 1);
            uint32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
}

/* Items one step of the submit script sends at most (submit.lua): a few
 * milliseconds of Redis's time each. */
#define SUBMIT_CHUNK 1000

/* Runs submit.lua's step op on partition p with the arguments args, and
 * on success stores its integer reply in *result (when not NULL). Returns
 * 0, or EXIT_RUNTIME (printed). */
static int submit_step(ctl *x, int p, const char *op, const char *token, size_t n,
                       const char **args, long long *result)
{
    const char **argv = malloc((2 + n) * sizeof *argv);
    if (!argv) {
        fprintf(stderr, "sluice-ctl: out of memory building the job\n");
        return EXIT_RUNTIME;
    }
    argv[0] = op;
    argv[1] = token;
    for (size_t i = 0; i < n; i++)
        argv[2 + i] = args[i];
    redisReply *r;
    sluice_err e = script_call(x, SLUICEI_SCRIPT_SUBMIT, pname(x, p), 2 + n, argv, &r);
    free(argv);
    if (e == SLUICE_ERR_EXISTS && x->partitions && r && strstr(r->str, "JOBEXISTS")) {
        /* "... (epoch 0 of 2); wait ..." -> "... (epoch 0 of 2 in partition p); wait ..." */
        const char *t = error_text(r, "JOBEXISTS"), *paren = strstr(t, ");");
        if (paren)
            fprintf(stderr, "sluice-ctl: queue '%s': %.*s in partition %d%s\n", x->q,
                    (int)(paren - t), t, p, paren);
        else
            fprintf(stderr, "sluice-ctl: queue '%s': %s (partition %d)\n", x->q, t, p);
        freeReplyObject(r);
        return EXIT_RUNTIME;
    }
    if (e != SLUICE_OK)
        return script_failed(x, pname(x, p), e, &r, 2 + n);
    if (result)
        *result = num_of(r);
    freeReplyObject(r);
    return 0;
}

/* Gives up what the submit staged in partition p, in steps. */
static void submit_abort(ctl *x, int p, const char *token)
{
    for (long long left = 1; left > 0;)
        if (submit_step(x, p, "abort", token, 0, NULL, &left))
            break;
}

/* Sends pending[0..*n) as one 'tasks' step of epoch e and empties it. */
static int flush_tasks(ctl *x, int p, const char *token, const char *e, char (*pending)[48],
                       size_t *n)
{
    if (*n == 0)
        return 0;
    const char *args[1 + SUBMIT_CHUNK];
    args[0] = e;
    for (size_t i = 0; i < *n; i++)
        args[1 + i] = pending[i];
    int rc = submit_step(x, p, "tasks", token, 1 + *n, args, NULL);
    *n = 0;
    return rc;
}

/* Submits the job in steps (submit.lua): every partition (a plain queue:
 * the one) begins, clears what the previous job left, and stages its
 * definitions and its tasks, epoch by epoch; then each commits, which
 * makes its part visible at once. A failure before the commits leaves
 * nothing visible (the staging is given up); the commits are one call
 * each, and only a partition lost between them leaves a job in part
 * (the error says which). */
static int cmd_submit(ctl *x, const submit_opts *o, const sluicei_shard *shards, size_t n)
{
    if ((uint64_t)n * o->epochs > MAX_TASKS) {
        fprintf(stderr, "sluice-ctl: %zu shards x %" PRIu64 " epochs is more than %llu tasks\n",
                n, o->epochs, MAX_TASKS);
        return EXIT_RUNTIME;
    }
    int P = nparts(x);
    if (x->partitions && n < (size_t)P) {
        fprintf(stderr, "sluice-ctl: queue '%s' has %d partitions but the job only %zu shard%s: "
                "every partition needs one at least (split= in the manifest makes more)\n",
                x->q, P, n, n == 1 ? "" : "s");
        return EXIT_RUNTIME;
    }
    char token[40], ep[24], ns[24], bs[24], seed[24], ma[24], mc[24], num[24];
    snprintf(token, sizeof token, "%016" PRIx64 "-%" PRIu64, sluicei_random64(),
             sluicei_wall_us());
    snprintf(ep, sizeof ep, "%" PRIu64, o->epochs);
    snprintf(bs, sizeof bs, "%" PRIu64, o->batch_size);
    seed[0] = '\0';
    if (o->has_seed)
        snprintf(seed, sizeof seed, "%" PRIu64, o->seed);
    snprintf(ma, sizeof ma, "%" PRIu64, o->max_attempts);
    snprintf(mc, sizeof mc, "%" PRIu64, o->max_crashes);
    uint32_t *perm = malloc(n * sizeof *perm);
    char (*pending)[48] = malloc((size_t)P * SUBMIT_CHUNK * sizeof *pending);
    size_t *npend = calloc((size_t)P, sizeof *npend);
    char **defs = calloc(2 * SUBMIT_CHUNK, sizeof *defs);
    int rc = EXIT_RUNTIME, begun = 0;
    long long tasks = 0;
    if (!perm || !pending || !npend || !defs) {
        fprintf(stderr, "sluice-ctl: out of memory building the job\n");
        goto out;
    }
    /* Begin and clear every partition first: a refusal (a job running)
     * comes before anything is staged anywhere. */
    for (int p = 0; p < P; p++) {
        size_t mine = n / (size_t)P + ((size_t)p < n % (size_t)P);
        snprintf(ns, sizeof ns, "%zu", mine);
        const char *args[7] = {ep, ns, bs, seed, ma, mc, NULL};
        long long left = 0;
        if (submit_step(x, p, "begin", token, 6, args, &left))
            goto out;
        begun = p + 1;
        while (left > 0)
            if (submit_step(x, p, "clear", token, 0, NULL, &left))
                goto out;
    }
    /* Definitions: shard s goes to partition s mod P under its global number. */
    for (int p = 0; p < P; p++) {
        size_t k = 0;
        for (size_t sh = (size_t)p; sh < n; sh += (size_t)P) {
            char *d = sluicei_shard_encode(&shards[sh]);
            char *nb = malloc(24);
            if (!d || !nb) {
                free(d);
                free(nb);
                fprintf(stderr, "sluice-ctl: out of memory building the job\n");
                goto out_defs;
            }
            snprintf(nb, 24, "%zu", sh);
            defs[k++] = nb;
            defs[k++] = d;
            if (k == 2 * SUBMIT_CHUNK || sh + (size_t)P >= n) {
                int bad = submit_step(x, p, "defs", token, k, (const char **)defs, NULL);
                for (size_t i = 0; i < k; i++) {
                    free(defs[i]);
                    defs[i] = NULL;
                }
                k = 0;
                if (bad)
                    goto out;
            }
        }
    }
    /* Tasks, epoch by epoch in the job's order (a partition's: the job's
     * order without the other partitions' shards). */
    for (uint64_t e = 0; e < o->epochs; e++) {
        snprintf(num, sizeof num, "%" PRIu64, e);
        epoch_perm(perm, n, o, e);
        for (size_t i = 0; i < n; i++) {
            int p = (int)(perm[i] % (uint32_t)P);
            snprintf(pending[(size_t)p * SUBMIT_CHUNK + npend[p]++], 48, "%" PRIu64 ":%" PRIu32,
                     e, perm[i]);
            if (npend[p] == SUBMIT_CHUNK &&
                flush_tasks(x, p, token, num, pending + (size_t)p * SUBMIT_CHUNK, &npend[p]))
                goto out;
        }
        for (int p = 0; p < P; p++)
            if (flush_tasks(x, p, token, num, pending + (size_t)p * SUBMIT_CHUNK, &npend[p]))
                goto out;
    }
    for (int p = 0; p < P; p++) {
        long long got = 0;
        if (submit_step(x, p, "commit", token, 0, NULL, &got)) {
            if (p > 0) {
                char done[48];
                if (p == 1)
                    snprintf(done, sizeof done, "partition 0 has its part");
                else
                    snprintf(done, sizeof done, "partitions 0..%d have theirs", p - 1);
                fprintf(stderr, "sluice-ctl: queue '%s': the job is only partly submitted: %s "
                        "(%lld tasks), partition %d failed%s; delete the queue and create it "
                        "again (sluice-ctl delete %s)\n", x->q, done, tasks, p,
                        p + 1 < P ? " and those after it have nothing" : "", x->q);
                begun = 0;   /* the committed parts stay; the others are given up */
                for (int k = p; k < P; k++)
                    submit_abort(x, k, token);
            }
            goto out;
        }
        tasks += got;
    }
    begun = 0;
    if (x->partitions)
        printf("submitted %lld tasks (%zu shards \xc3\x97 %" PRIu64 " epochs) to queue '%s' over %d "
               "partitions\n", tasks, n, o->epochs, x->q, P);
    else
        printf("submitted %lld tasks (%zu shards \xc3\x97 %" PRIu64 " epochs) to queue '%s'\n",
               tasks, n, o->epochs, x->q);
    rc = 0;
    goto out;
out_defs:
    for (size_t i = 0; i < 2 * SUBMIT_CHUNK; i++)
        free(defs[i]);
out:
    /* Nothing of a failed submit is visible; what it staged goes. */
    for (int p = 0; p < begun; p++)
        submit_abort(x, p, token);
    free(perm);
    free(pending);
    free(npend);
    free(defs);
    return rc;
}

/* ---- reading the queue's state ------------------------------------------- */

/* A command (at most 8 arguments) on the node serving queue q that must
 * work; on failure prints one line and returns NULL. */
static redisReply *must(ctl *x, const char *q, int argc, const char **argv)
{
    redisReply *r = NULL;
    size_t len[8];
    for (int i = 0; i < argc && i < 8; i++)
        len[i] = strlen(argv[i]);
    sluice_err e = sluicei_router_command(x->r, q, deadline(x), &r, argc, argv, len);
    if (e == SLUICE_OK && r && r->type != REDIS_REPLY_ERROR)
        return r;
    char detail[1024];
    if (r && r->type == REDIS_REPLY_ERROR)
        snprintf(detail, sizeof detail, "%s", r->str);
    else
        why(x, q, detail, sizeof detail);
    fprintf(stderr, "sluice-ctl: %s %s: %s\n", argv[0], argc > 1 ? argv[1] : "", detail);
    if (r)
        freeReplyObject(r);
    return NULL;
}

static void qkey(char *out, const char *q, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes the key "sluice:{q}:<name>" with name formatted from fmt. */
static void qkey(char *out, const char *q, const char *fmt, ...)
{
    char name[SLUICE_MAX_KEY];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    sluicei_key(out, q, name);
}


/* field's value in an HGETALL reply, or NULL. */
static const char *hget(const redisReply *h, const char *field)
{
    if (!h || h->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < h->elements; i += 2)
        if (strcmp(h->element[i]->str, field) == 0)
            return h->element[i + 1]->str;
    return NULL;
}

static long long hnum(const redisReply *h, const char *field)
{
    const char *v = hget(h, field);
    return v ? strtoll(v, NULL, 10) : 0;
}

/* Runs "CMD key [arg]" and stores its integer value in *out (a nil reply,
 * LPOS finding nothing: -1). Returns 0, or -1 after printing the error. */
static int count_cmd(ctl *x, const char *q, const char *cmd, const char *key, const char *arg,
                     long long *out)
{
    const char *argv[3] = {cmd, key, arg};
    redisReply *r = must(x, q, arg ? 3 : 2, argv);
    if (!r)
        return -1;
    *out = r->type == REDIS_REPLY_NIL ? -1 : num_of(r);
    freeReplyObject(r);
    return 0;
}

static redisReply *hgetall(ctl *x, const char *q, const char *key)
{
    const char *argv[2] = {"HGETALL", key};
    return must(x, q, 2, argv);
}

typedef struct epoch_info {
    long long ready, pushed, acked, dropped, padded, failed_tasks, finished;
    int ended;
} epoch_info;

typedef struct peer {
    const char *id;
    long long seen_ago_ms;
    const char *extra;          /* producer: the task it holds; consumer: its rank */
    long long pending;          /* consumer: batches it holds */
    redisReply *stats;          /* pstats:/cstats: hash */
} peer;

/* Everything info and jobs show, read from Redis (not atomically: a
 * snapshot of a moving queue, good enough for a human or a dashboard). */
typedef struct qinfo {
    const char *q;
    redisReply *meta, *stats, *job, *estats, *edone, *eof, *failed, *terr, *tattempts, *towner;
    redisReply *producers, *consumers, *crank;
    long long held, bytes, ready, pending, dead;
    long long waiting, claimed, done, ranks, epochs, lease_ms;
    long long server_ms;       /* the server's clock when read: what "seen" is against */
    epoch_info *ep;
    peer *prod, *cons;
    size_t nprod, ncons;
} qinfo;

static void qinfo_free(qinfo *in)
{
    redisReply *all[] = {in->meta,   in->stats, in->job,      in->estats,    in->edone,
                         in->eof,    in->failed, in->terr,    in->tattempts, in->towner,
                         in->producers, in->consumers, in->crank};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            freeReplyObject(all[i]);
    for (size_t i = 0; i < in->nprod; i++)
        if (in->prod[i].stats)
            freeReplyObject(in->prod[i].stats);
    for (size_t i = 0; i < in->ncons; i++)
        if (in->cons[i].stats)
            freeReplyObject(in->cons[i].stats);
    free(in->prod);
    free(in->cons);
    free(in->ep);
}

/* Stores in *n the batches waiting in list key, not counting an end
 * marker eof:<e>. Returns 0 or -1 (printed). */
static int list_batches(ctl *x, const char *q, const char *key, long long e, int ended,
                        long long *n)
{
    if (count_cmd(x, q, "LLEN", key, NULL, n))
        return -1;
    if (*n > 0 && ended) {
        char marker[32];
        long long pos;
        snprintf(marker, sizeof marker, "eof:%lld", e);
        if (count_cmd(x, q, "LPOS", key, marker, &pos))
            return -1;
        if (pos >= 0)
            (*n)--;
    }
    return 0;
}

/* Fills the peers of kind (producers or consumers) from hash h. */
static int read_peers(ctl *x, qinfo *in, const redisReply *h, int producers)
{
    size_t n = h->elements / 2;
    peer *ps = calloc(n ? n : 1, sizeof *ps);
    if (!ps) {
        fprintf(stderr, "sluice-ctl: out of memory\n");
        return -1;
    }
    long long now = in->server_ms;
    for (size_t i = 0; i < n; i++) {
        peer *p = &ps[i];
        char key[SLUICE_MAX_KEY + 80];
        p->id = h->element[2 * i]->str;
        p->seen_ago_ms = now - strtoll(h->element[2 * i + 1]->str, NULL, 10);
        if (producers) {
            for (size_t k = 0; in->towner && k + 1 < in->towner->elements; k += 2)
                if (strcmp(in->towner->element[k + 1]->str, p->id) == 0)
                    p->extra = in->towner->element[k]->str;
            qkey(key, in->q, "pstats:%s", p->id);
        } else {
            p->extra = hget(in->crank, p->id);
            qkey(key, in->q, "pending:%s", p->id);
            if (count_cmd(x, in->q, "LLEN", key, NULL, &p->pending))
                goto fail;
            in->pending += p->pending;
            qkey(key, in->q, "cstats:%s", p->id);
        }
        if (!(p->stats = hgetall(x, in->q, key)))
            goto fail;
    }
    if (producers) {
        in->prod = ps;
        in->nprod = n;
    } else {
        in->cons = ps;
        in->ncons = n;
    }
    return 0;
fail:
    for (size_t i = 0; i < n; i++)
        if (ps[i].stats)
            freeReplyObject(ps[i].stats);
    free(ps);
    return -1;
}

/* Reads the queue's state. Returns 0, or EXIT_RUNTIME (printed). */
static int qinfo_read(ctl *x, const char *q, qinfo *in)
{
    char k[SLUICE_MAX_KEY];
    memset(in, 0, sizeof *in);
    in->q = q;
#define HALL(field, name)                                     \
    do {                                                      \
        qkey(k, q, "%s", name);                               \
        if (!(in->field = hgetall(x, q, k)))                  \
            return EXIT_RUNTIME;                              \
    } while (0)
#define COUNT(field, cmd, name)                               \
    do {                                                      \
        qkey(k, q, "%s", name);                               \
        if (count_cmd(x, q, cmd, k, NULL, &in->field))        \
            return EXIT_RUNTIME;                              \
    } while (0)
    HALL(meta, "meta");
    if (in->meta->elements == 0) {
        print_noqueue(x, q);
        return EXIT_RUNTIME;
    }
    /* Heartbeats are the server's times: "seen ... ago" is against its
     * clock, whatever this host's says. */
    const char *tv[1] = {"TIME"};
    redisReply *t = must(x, q, 1, tv);
    if (!t)
        return EXIT_RUNTIME;
    in->server_ms = t->type == REDIS_REPLY_ARRAY && t->elements == 2
                        ? num_of(t->element[0]) * 1000 + num_of(t->element[1]) / 1000
                        : (long long)(sluicei_wall_us() / 1000u);
    freeReplyObject(t);
    in->ranks = hnum(in->meta, "ranks");
    in->lease_ms = hget(in->meta, "lease_ms") ? hnum(in->meta, "lease_ms") : 10000;
    HALL(stats, "stats");
    HALL(job, "job");
    in->waiting = hnum(in->job, "twaiting");
    HALL(estats, "estats");
    HALL(edone, "edone");
    HALL(eof, "eof");
    HALL(terr, "terr");
    HALL(tattempts, "tattempts");
    HALL(towner, "towner");
    HALL(producers, "producers");
    HALL(consumers, "consumers");
    HALL(crank, "crank");
    COUNT(held, "HLEN", "dlv");
    COUNT(bytes, "GET", "bytes");
    COUNT(dead, "LLEN", "dead");

    COUNT(claimed, "ZCARD", "tlease");
    COUNT(done, "HLEN", "tbatches");
    qkey(k, q, "failed");
    const char *lr[4] = {"LRANGE", k, "0", "-1"};
    if (!(in->failed = must(x, q, 4, lr)))
        return EXIT_RUNTIME;
#undef HALL
#undef COUNT

    /* Without a job the queue has one epoch, 0, that never ends. */
    in->epochs = in->job->elements ? hnum(in->job, "epochs") : 1;
    if (in->epochs < 1)
        in->epochs = 1;
    if (!(in->ep = calloc((size_t)in->epochs, sizeof *in->ep))) {
        fprintf(stderr, "sluice-ctl: out of memory\n");
        return EXIT_RUNTIME;
    }
    for (long long e = 0; e < in->epochs; e++) {
        epoch_info *ep = &in->ep[e];
        char f[48];
#define EST(member, name)                                     \
        snprintf(f, sizeof f, "%lld:%s", e, name);            \
        ep->member = hnum(in->estats, f)
        EST(pushed, "pushed");
        EST(acked, "acked");
        EST(dropped, "dropped");
        EST(padded, "padded");
        EST(failed_tasks, "failed_tasks");
#undef EST
        snprintf(f, sizeof f, "%lld", e);
        ep->finished = hnum(in->edone, f);
        ep->ended = hget(in->eof, f) != NULL;
        long long n;
        if (in->ranks > 0) {
            for (long long r = 0; r < in->ranks; r++) {
                qkey(k, q, "ready:%lld:%lld", e, r);
                if (list_batches(x, q, k, e, ep->ended, &n))
                    return EXIT_RUNTIME;
                ep->ready += n;
            }
            qkey(k, q, "stage:%lld", e);
            if (count_cmd(x, q, "LLEN", k, NULL, &n))
                return EXIT_RUNTIME;
            ep->ready += n;
        } else {
            qkey(k, q, "ready:%lld", e);
            if (list_batches(x, q, k, e, ep->ended, &n))
                return EXIT_RUNTIME;
            ep->ready += n;
        }
        in->ready += ep->ready;
    }
    if (read_peers(x, in, in->producers, 1) || read_peers(x, in, in->consumers, 0))
        return EXIT_RUNTIME;
    return 0;
}

/* ---- a partitioned queue as a whole ------------------------------------- */

/* The figures of a partitioned queue are the sums of its partitions'. They
 * go into replies built here, of the shape of hiredis' own, so that the
 * code that prints a plain queue prints them too; freeReplyObject() frees
 * them (hiredis frees with free()). */
static redisReply *mk_reply(int type)
{
    redisReply *r = calloc(1, sizeof *r);
    if (r)
        r->type = type;
    return r;
}

static redisReply *mk_str(const char *s)
{
    redisReply *r = mk_reply(REDIS_REPLY_STRING);
    if (r && !(r->str = strdup(s))) {
        free(r);
        return NULL;
    }
    if (r)
        r->len = strlen(s);
    return r;
}

/* Appends el to array a (el then belongs to a). Returns 0, or -1 when
 * out of memory (el freed). */
static int arr_add(redisReply *a, redisReply *el)
{
    if (!el)
        return -1;
    redisReply **e = realloc(a->element, (a->elements + 1) * sizeof *e);
    if (!e) {
        freeReplyObject(el);
        return -1;
    }
    a->element = e;
    a->element[a->elements++] = el;
    return 0;
}

/* The index of field's name in hash h, or -1. */
static long hfind(const redisReply *h, const char *field)
{
    for (size_t i = 0; i + 1 < h->elements; i += 2)
        if (strcmp(h->element[i]->str, field) == 0)
            return (long)i;
    return -1;
}

/* Sets field to value in built hash h. Returns 0 or -1 (out of memory). */
static int hash_put(redisReply *h, const char *field, const char *value)
{
    long i = hfind(h, field);
    if (i < 0)
        return arr_add(h, mk_str(field)) || arr_add(h, mk_str(value)) ? -1 : 0;
    redisReply *v = mk_str(value);
    if (!v)
        return -1;
    freeReplyObject(h->element[i + 1]);
    h->element[i + 1] = v;
    return 0;
}

static int hash_put_num(redisReply *h, const char *field, long long v)
{
    char s[24];
    snprintf(s, sizeof s, "%lld", v);
    return hash_put(h, field, s);
}

static void hash_del(redisReply *h, const char *field)
{
    long i = hfind(h, field);
    if (i < 0)
        return;
    freeReplyObject(h->element[i]);
    freeReplyObject(h->element[i + 1]);
    memmove(h->element + i, h->element + i + 2, (h->elements - (size_t)i - 2) * sizeof *h->element);
    h->elements -= 2;
}

/* A decimal integer, as Redis writes counters. */
static int is_int(const char *s)
{
    size_t i = s[0] == '-';
    if (!s[i] || strlen(s + i) > 18)
        return 0;
    return strspn(s + i, "0123456789") == strlen(s + i);
}

typedef enum merge_how {
    MERGE_FIRST,    /* a field's first value */
    MERGE_SUM,      /* integers added up (else the first value) */
    MERGE_MAX,      /* the largest integer */
    MERGE_CONCAT,   /* every pair as it comes: the fields are known to differ */
} merge_how;

/* One hash of the fields of hashes hs[0..n) (NULL entries skipped).
 * Returns NULL when out of memory. */
static redisReply *hash_merge(redisReply *const *hs, size_t n, merge_how how)
{
    redisReply *m = mk_reply(REDIS_REPLY_ARRAY);
    if (!m)
        return NULL;
    for (size_t k = 0; k < n; k++) {
        const redisReply *h = hs[k];
        for (size_t i = 0; h && h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2) {
            const char *f = h->element[i]->str, *v = h->element[i + 1]->str;
            long at = how == MERGE_CONCAT ? -1 : hfind(m, f);
            int rc = 0;
            if (at < 0) {
                rc = arr_add(m, mk_str(f)) || arr_add(m, mk_str(v));
            } else if (how != MERGE_FIRST && is_int(v) && is_int(m->element[at + 1]->str)) {
                long long a = strtoll(m->element[at + 1]->str, NULL, 10);
                long long b = strtoll(v, NULL, 10);
                rc = hash_put_num(m, f, how == MERGE_SUM ? a + b : a > b ? a : b);
            }
            if (rc) {
                freeReplyObject(m);
                return NULL;
            }
        }
    }
    return m;
}

/* The peer called id in partition info in, or NULL. */
static const peer *peer_in(const qinfo *in, const char *id, int producers)
{
    const peer *ps = producers ? in->prod : in->cons;
    size_t n = producers ? in->nprod : in->ncons;
    for (size_t i = 0; i < n; i++)
        if (strcmp(ps[i].id, id) == 0)
            return &ps[i];
    return NULL;
}

/* The peers of the whole queue from the merged producers/consumers hash:
 * a producer or consumer works in several partitions under one id (one
 * child per partition); its published counters are added up, its last
 * sign of life is the latest, its epoch the highest. Returns 0 or -1. */
static int merge_peers(qinfo *all, const qinfo *parts, int P, int producers)
{
    const redisReply *h = producers ? all->producers : all->consumers;
    size_t n = h->elements / 2;
    peer *ps = calloc(n ? n : 1, sizeof *ps);
    redisReply **st = calloc((size_t)P, sizeof *st);
    if (!ps || !st) {
        free(ps);
        free(st);
        return -1;
    }
    long long now = all->server_ms;
    size_t i = 0;
    for (; i < n; i++) {
        peer *p = &ps[i];
        p->id = h->element[2 * i]->str;
        p->seen_ago_ms = now - strtoll(h->element[2 * i + 1]->str, NULL, 10);
        long long epoch = -1;
        for (int k = 0; k < P; k++) {
            const peer *x = peer_in(&parts[k], p->id, producers);
            st[k] = x ? x->stats : NULL;
            if (x && !producers) {
                p->pending += x->pending;
                if (hget(x->stats, "epoch") && hnum(x->stats, "epoch") > epoch)
                    epoch = hnum(x->stats, "epoch");
            }
        }
        if (producers) {
            for (size_t k = 0; all->towner && k + 1 < all->towner->elements; k += 2)
                if (strcmp(all->towner->element[k + 1]->str, p->id) == 0)
                    p->extra = all->towner->element[k]->str;
        } else {
            p->extra = hget(all->crank, p->id);
            all->pending += p->pending;
        }
        if (!(p->stats = hash_merge(st, (size_t)P, MERGE_SUM)) ||
            (epoch >= 0 && hash_put_num(p->stats, "epoch", epoch)))
            break;
    }
    free(st);
    if (producers) {
        all->prod = ps;
        all->nprod = i;
    } else {
        all->cons = ps;
        all->ncons = i;
    }
    return i == n ? 0 : -1;
}

/* Fills all (its q: q) with the sums over parts[0..P). Returns 0, or
 * EXIT_RUNTIME when out of memory (printed; qinfo_free(all) still due). */
static int qinfo_merge(qinfo *all, const qinfo *parts, int P, const char *q)
{
    memset(all, 0, sizeof *all);
    all->q = q;
    redisReply **hs = calloc((size_t)P, sizeof *hs);
    if (!hs)
        goto oom;
#define MERGE(field, how)                                     \
    do {                                                      \
        for (int p_ = 0; p_ < P; p_++)                        \
            hs[p_] = parts[p_].field;                         \
        if (!(all->field = hash_merge(hs, (size_t)P, how)))   \
            goto oom;                                         \
    } while (0)
    MERGE(meta, MERGE_FIRST);
    MERGE(stats, MERGE_SUM);
    MERGE(job, MERGE_FIRST);
    MERGE(terr, MERGE_CONCAT);
    MERGE(tattempts, MERGE_CONCAT);
    MERGE(towner, MERGE_CONCAT);
    MERGE(producers, MERGE_MAX);
    MERGE(consumers, MERGE_MAX);
    MERGE(crank, MERGE_FIRST);
#undef MERGE
    if (!(all->failed = mk_reply(REDIS_REPLY_ARRAY)))
        goto oom;
    long long max_batches = 0, max_bytes = 0, ntasks = 0, open = -1;
    const char *state = NULL;
    for (int p = 0; p < P; p++) {
        const qinfo *in = &parts[p];
        for (size_t i = 0; i < in->failed->elements; i++)
            if (arr_add(all->failed, mk_str(in->failed->element[i]->str)))
                goto oom;
        max_batches += hnum(in->meta, "max_batches");
        max_bytes += hnum(in->meta, "max_bytes");
        all->held += in->held;
        all->bytes += in->bytes;
        all->ready += in->ready;
        all->dead += in->dead;
        all->waiting += in->waiting;
        all->claimed += in->claimed;
        all->done += in->done;
        if (in->epochs > all->epochs)
            all->epochs = in->epochs;
        if (in->job->elements) {
            const char *st = hget(in->job, "state");
            ntasks += hnum(in->job, "ntasks");
            if (open < 0 || hnum(in->job, "epoch_open") < open)
                open = hnum(in->job, "epoch_open");
            /* The job runs while it runs in any partition. */
            if (st && (!state || strcmp(st, "finished") != 0))
                state = st;
        }
    }
    all->ranks = parts[0].ranks;
    all->lease_ms = parts[0].lease_ms;
    hash_del(all->meta, "partition");
    if (hash_put_num(all->meta, "max_batches", max_batches) ||
        hash_put_num(all->meta, "max_bytes", max_bytes))
        goto oom;
    if (all->job->elements && (hash_put_num(all->job, "ntasks", ntasks) ||
                               hash_put_num(all->job, "epoch_open", open) ||
                               (state && hash_put(all->job, "state", state))))
        goto oom;
    if (!(all->ep = calloc((size_t)all->epochs, sizeof *all->ep)))
        goto oom;
    /* An epoch of the queue ends when it ended in every partition. */
    for (long long e = 0; e < all->epochs; e++) {
        epoch_info *x = &all->ep[e];
        x->ended = 1;
        for (int p = 0; p < P; p++) {
            if (e >= parts[p].epochs) {
                x->ended = 0;
                continue;
            }
            const epoch_info *y = &parts[p].ep[e];
            x->ready += y->ready;
            x->pushed += y->pushed;
            x->acked += y->acked;
            x->dropped += y->dropped;
            x->padded += y->padded;
            x->failed_tasks += y->failed_tasks;
            x->finished += y->finished;
            x->ended &= y->ended;
        }
    }
    for (int p = 0; p < P; p++)
        if (parts[p].server_ms > all->server_ms)
            all->server_ms = parts[p].server_ms;
    if (merge_peers(all, parts, P, 1) || merge_peers(all, parts, P, 0))
        goto oom;
    free(hs);
    return 0;
oom:
    free(hs);
    fprintf(stderr, "sluice-ctl: out of memory adding up the partitions of queue '%s'\n", q);
    return EXIT_RUNTIME;
}

/* What info, jobs, stat and metrics show: the queue, and for a partitioned
 * one also each partition. */
typedef struct qview {
    qinfo all;                /* a plain queue, or the sums over the partitions */
    int partitions;           /* 0: a plain queue */
    qinfo *part;              /* [partitions] */
    char (*node)[256];        /* [partitions]: the node serving each ("redis://h:p/0") */
} qview;

static void qview_free(qview *v)
{
    qinfo_free(&v->all);
    for (int p = 0; p < v->partitions && v->part; p++)
        qinfo_free(&v->part[p]);
    free(v->part);
    free(v->node);
}

static int ctl_discover(ctl *x);

/* Reads the queue (every partition). A partitioned queue created anew
 * with another number of partitions is found again. Returns 0, or
 * EXIT_RUNTIME (printed); qview_free(v) is due either way. */
static int view_read(ctl *x, qview *v)
{
    memset(v, 0, sizeof *v);
    if (!x->partitions)
        return qinfo_read(x, x->q, &v->all);
    int P = x->partitions;
    v->part = calloc((size_t)P, sizeof *v->part);
    v->node = calloc((size_t)P, sizeof *v->node);
    if (!v->part || !v->node) {
        fprintf(stderr, "sluice-ctl: out of memory\n");
        return EXIT_RUNTIME;
    }
    v->partitions = P;
    for (int p = 0; p < P; p++) {
        int rc = qinfo_read(x, pname(x, p), &v->part[p]);
        if (rc)
            return rc;
        if (p == 0 && hnum(v->part[0].meta, "partitions") != P) {
            qview_free(v);
            memset(v, 0, sizeof *v);
            return ctl_discover(x) ? EXIT_RUNTIME : view_read(x, v);
        }
        sluicei_url u;
        char err[256];
        if (sluicei_router_url(x->r, pname(x, p), 0, &u, err, sizeof err) == SLUICE_OK) {
            sluicei_url_describe(&u, v->node[p], sizeof v->node[p]);
            sluicei_url_free(&u);
        } else {
            snprintf(v->node[p], sizeof v->node[p], "?");
        }
    }
    return qinfo_merge(&v->all, v->part, P, x->q);
}

/* Finds out whether x->q is plain or partitioned (again, after a failed
 * read: stat and metrics follow a queue deleted and created anew).
 * Returns 0, or EXIT_RUNTIME (printed: missing queue, Redis error). */
static int ctl_discover(ctl *x)
{
    int partitions = 0;
    char err[1024];
    sluice_err e = sluicei_queue_partitions(x->r, x->q, &partitions, err, sizeof err);
    if (e == SLUICE_ERR_NOQUEUE) {
        fprintf(stderr, "sluice-ctl: queue '%s' does not exist (create it with: sluice-ctl create "
                "%s)\n", x->q, x->q);
        return EXIT_RUNTIME;
    }
    if (e != SLUICE_OK) {
        fprintf(stderr, "sluice-ctl: %s\n", err);
        return EXIT_RUNTIME;
    }
    if (x->names && partitions == x->partitions)
        return 0;
    return ctl_set_partitions(x, partitions) ? EXIT_RUNTIME : 0;
}

/* ---- text output ---------------------------------------------------------- */

/* Counters of the stats hash that info prints, in this order. */
static const char *const info_stats[] = {"pushed", "pushed_bytes", "acked", "acked_bytes",
                                         "dup_dropped", "requeued", "dead", "tasks_done",
                                         "tasks_reaped"};

static void print_stats_inline(const redisReply *h)
{
    for (size_t i = 0; h && i + 1 < h->elements; i += 2)
        printf(" %s=%s", h->element[i]->str, h->element[i + 1]->str);
}

static void print_peers(const char *kind, const peer *ps, size_t n, long long lease_ms)
{
    for (size_t i = 0; i < n; i++) {
        const peer *p = &ps[i];
        printf("%s %s: seen %lld ms ago%s", kind, p->id, p->seen_ago_ms,
               p->seen_ago_ms > lease_ms ? " (silent: lease expired)" : "");
        if (kind[0] == 'p')
            printf(", task %s", p->extra ? p->extra : "none");
        else
            printf(", rank %s, pending %lld", p->extra ? p->extra : "none", p->pending);
        printf(";");
        print_stats_inline(p->stats);
        printf("\n");
    }
}

static size_t alive(const peer *ps, size_t n, long long lease_ms)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ps[i].seen_ago_ms <= lease_ms;
    return k;
}

static void print_job(const qinfo *in)
{
    const redisReply *j = in->job;
    if (!j->elements) {
        printf("job: none\n");
        return;
    }
    const char *seed = hget(j, "seed");
    const char *state = hget(j, "state") ? hget(j, "state") : "?";
    if (strcmp(state, "finished") == 0 && in->failed->elements)
        printf("job: finished with %zu failed task%s\n", in->failed->elements,
               in->failed->elements == 1 ? "" : "s");
    else
        printf("job: %s\n", state);
    printf("epochs: %lld\n", in->epochs);
    printf("epoch_open: %lld\n", hnum(j, "epoch_open"));
    printf("batch_size: %lld\n", hnum(j, "batch_size"));
    printf("shuffle_seed: %s\n", seed && *seed ? seed : "none");
    printf("max_attempts: %lld\n", hnum(j, "max_attempts"));
    printf("max_crashes: %lld\n", hget(j, "max_crashes") ? hnum(j, "max_crashes") : 20);
    printf("shards: %lld\n", hnum(j, "ntasks"));
    printf("tasks: %lld\n", hnum(j, "ntasks") * in->epochs);
    printf("tasks_waiting: %lld\n", in->waiting);
    printf("tasks_claimed: %lld\n", in->claimed);
    printf("tasks_done: %lld\n", in->done);
    printf("tasks_failed: %zu\n", in->failed->elements);
    for (size_t i = 0; i < in->failed->elements; i++) {
        const char *t = in->failed->element[i]->str;
        const char *err = hget(in->terr, t);
        printf("failed %s: attempts %lld: %s\n", t, hnum(in->tattempts, t), err ? err : "");
    }
    for (long long e = 0; e < in->epochs; e++) {
        const epoch_info *x = &in->ep[e];
        printf("epoch %lld: ready=%lld pushed=%lld acked=%lld dropped=%lld padded=%lld "
               "tasks_finished=%lld/%lld failed_tasks=%lld end=%s\n",
               e, x->ready, x->pushed, x->acked, x->dropped, x->padded, x->finished,
               hnum(j, "ntasks"), x->failed_tasks, x->ended ? "posted" : "open");
    }
    printf("producers: %zu\n", alive(in->prod, in->nprod, in->lease_ms));
    print_peers("producer", in->prod, in->nprod, in->lease_ms);
}

/* One line per partition: where it is and what it holds against its
 * budgets (info), or its part of the job (jobs). */
static void print_partitions(const qview *v, int job_only)
{
    for (int p = 0; p < v->partitions; p++) {
        const qinfo *in = &v->part[p];
        if (job_only) {
            const char *st = hget(in->job, "state");
            printf("partition %d: %s, job %s, epoch_open %lld, shards %lld, tasks_waiting %lld, "
                   "tasks_claimed %lld, tasks_done %lld, tasks_failed %zu\n",
                   p, in->q, in->job->elements ? (st ? st : "?") : "none",
                   hnum(in->job, "epoch_open"), hnum(in->job, "ntasks"), in->waiting, in->claimed,
                   in->done, in->failed->elements);
        } else {
            printf("partition %d: %s on %s, batches %lld/%lld, bytes %lld/%lld, ready %lld, "
                   "pending %lld, dead_letters %lld\n",
                   p, in->q, v->node[p], in->held, hnum(in->meta, "max_batches"), in->bytes,
                   hnum(in->meta, "max_bytes"), in->ready, in->pending, in->dead);
        }
    }
}

static void print_info(const qview *v)
{
    const qinfo *in = &v->all;
    printf("queue: %s\n", in->q);
    if (v->partitions)
        printf("partitions: %d\n", v->partitions);
    printf("max_batches: %s\n", hget(in->meta, "max_batches") ? hget(in->meta, "max_batches") : "0");
    printf("max_bytes: %s\n", hget(in->meta, "max_bytes") ? hget(in->meta, "max_bytes") : "0");
    if (in->ranks > 0)
        printf("coordinated: %lld ranks, remainder %s\n", in->ranks,
               hget(in->meta, "remainder") ? hget(in->meta, "remainder") : "drop");
    printf("lease_ms: %lld\n", in->lease_ms);
    printf("max_deliveries: %lld\n", hnum(in->meta, "max_deliveries"));
    printf("batches: %lld\n", in->held);
    printf("bytes: %lld\n", in->bytes);
    printf("ready: %lld\n", in->ready);
    printf("pending: %lld\n", in->pending);
    printf("consumers: %zu\n", alive(in->cons, in->ncons, in->lease_ms));
    for (size_t i = 0; i < sizeof info_stats / sizeof info_stats[0]; i++)
        printf("%s: %lld\n", info_stats[i], hnum(in->stats, info_stats[i]));
    printf("dead_letters: %lld\n", in->dead);
    print_partitions(v, 0);
    print_job(in);
    print_peers("consumer", in->cons, in->ncons, in->lease_ms);
}

/* ---- JSON output ---------------------------------------------------------- */

/* A minimal JSON writer to stdout: nesting, commas, string escapes. */
typedef struct jw {
    int depth;
    unsigned char first[32];   /* per level: nothing written yet */
} jw;

/* Writes s[0..n) as a JSON string: escapes quotes, backslashes and
 * control characters, and replaces bytes that are not valid UTF-8 with
 * U+FFFD, so that the output always parses. */
static void jw_quote(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    putchar('"');
    for (size_t i = 0; i < n;) {
        unsigned char ch = u[i];
        if (ch == '"' || ch == '\\') {
            printf("\\%c", ch);
            i++;
        } else if (ch == '\n') {
            fputs("\\n", stdout);
            i++;
        } else if (ch == '\t') {
            fputs("\\t", stdout);
            i++;
        } else if (ch < 0x20 || ch == 0x7f) {
            printf("\\u%04x", ch);
            i++;
        } else if (ch < 0x80) {
            putchar(ch);
            i++;
        } else {
            /* Length of the sequence from its lead byte; then check the
             * continuation bytes, overlongs, surrogates, > U+10FFFF. */
            size_t len = ch >= 0xf0 && ch <= 0xf4 ? 4 : ch >= 0xe0 ? 3 : ch >= 0xc2 && ch < 0xe0 ? 2 : 0;
            int ok = len > 0 && i + len <= n;
            for (size_t k = 1; ok && k < len; k++)
                ok = (u[i + k] & 0xc0) == 0x80;
            if (ok && len == 3)
                ok = !(ch == 0xe0 && u[i + 1] < 0xa0) && !(ch == 0xed && u[i + 1] >= 0xa0);
            if (ok && len == 4)
                ok = !(ch == 0xf0 && u[i + 1] < 0x90) && !(ch == 0xf4 && u[i + 1] >= 0x90);
            if (ok) {
                fwrite(u + i, 1, len, stdout);
                i += len;
            } else {
                fputs("\\ufffd", stdout);
                i++;
            }
        }
    }
    putchar('"');
}

/* Before a value: the comma, and the key inside an object. */
static void jw_pre(jw *w, const char *key)
{
    if (w->depth > 0) {
        if (!w->first[w->depth])
            putchar(',');
        w->first[w->depth] = 0;
    }
    if (key) {
        jw_quote(key, strlen(key));
        putchar(':');
    }
}

static void jw_open(jw *w, const char *key, char ch)
{
    jw_pre(w, key);
    putchar(ch);
    w->depth++;
    w->first[w->depth] = 1;
}

static void jw_close(jw *w, char ch)
{
    w->depth--;
    putchar(ch);
}

static void jw_int(jw *w, const char *key, long long v)
{
    jw_pre(w, key);
    printf("%lld", v);
}

static void jw_str(jw *w, const char *key, const char *s)
{
    jw_pre(w, key);
    if (s)
        jw_quote(s, strlen(s));
    else
        fputs("null", stdout);
}

static void jw_bool(jw *w, const char *key, int v)
{
    jw_pre(w, key);
    fputs(v ? "true" : "false", stdout);
}

/* A value from Redis: a JSON number when it is a plain integer, else a
 * string. */
static void jw_value(jw *w, const char *key, const char *s)
{
    size_t i = s[0] == '-', n = strlen(s);
    int number = n > i && n - i <= 18 && !(s[i] == '0' && n - i > 1);
    for (size_t k = i; number && k < n; k++)
        number = s[k] >= '0' && s[k] <= '9';
    jw_pre(w, key);
    if (number)
        fputs(s, stdout);
    else
        jw_quote(s, n);
}

/* Every field of an HGETALL reply as an object member key. */
static void jw_hash(jw *w, const char *key, const redisReply *h)
{
    jw_open(w, key, '{');
    for (size_t i = 0; h && i + 1 < h->elements; i += 2)
        jw_value(w, h->element[i]->str, h->element[i + 1]->str);
    jw_close(w, '}');
}

static void jw_peers(jw *w, const char *key, const peer *ps, size_t n, int producers,
                     long long lease_ms)
{
    jw_open(w, key, '[');
    for (size_t i = 0; i < n; i++) {
        jw_open(w, NULL, '{');
        jw_str(w, "id", ps[i].id);
        jw_int(w, "last_seen_ms_ago", ps[i].seen_ago_ms);
        jw_bool(w, "alive", ps[i].seen_ago_ms <= lease_ms);
        if (producers) {
            jw_str(w, "task", ps[i].extra);
        } else {
            if (ps[i].extra)
                jw_value(w, "rank", ps[i].extra);
            else
                jw_str(w, "rank", NULL);
            jw_int(w, "pending", ps[i].pending);
        }
        jw_hash(w, "stats", ps[i].stats);
        jw_close(w, '}');
    }
    jw_close(w, ']');
}

static void jw_job(jw *w, const qinfo *in)
{
    const redisReply *j = in->job;
    if (!j->elements) {
        jw_str(w, "job", NULL);
        return;
    }
    const char *seed = hget(j, "seed");
    jw_open(w, "job", '{');
    jw_str(w, "state", hget(j, "state"));
    jw_int(w, "epochs", in->epochs);
    jw_int(w, "epoch_open", hnum(j, "epoch_open"));
    jw_int(w, "batch_size", hnum(j, "batch_size"));
    if (seed && *seed)
        jw_value(w, "shuffle_seed", seed);
    else
        jw_str(w, "shuffle_seed", NULL);
    jw_int(w, "max_attempts", hnum(j, "max_attempts"));
    jw_int(w, "shards", hnum(j, "ntasks"));
    jw_open(w, "tasks", '{');
    jw_int(w, "total", hnum(j, "ntasks") * in->epochs);
    jw_int(w, "waiting", in->waiting);
    jw_int(w, "claimed", in->claimed);
    jw_int(w, "done", in->done);
    jw_int(w, "failed", (long long)in->failed->elements);
    jw_close(w, '}');
    jw_open(w, "failed", '[');
    for (size_t i = 0; i < in->failed->elements; i++) {
        const char *t = in->failed->element[i]->str;
        jw_open(w, NULL, '{');
        jw_str(w, "task", t);
        jw_int(w, "attempts", hnum(in->tattempts, t));
        jw_str(w, "error", hget(in->terr, t));
        jw_close(w, '}');
    }
    jw_close(w, ']');
    jw_open(w, "per_epoch", '[');
    for (long long e = 0; e < in->epochs; e++) {
        const epoch_info *x = &in->ep[e];
        jw_open(w, NULL, '{');
        jw_int(w, "epoch", e);
        jw_int(w, "ready", x->ready);
        jw_int(w, "pushed", x->pushed);
        jw_int(w, "acked", x->acked);
        jw_int(w, "dropped", x->dropped);
        jw_int(w, "padded", x->padded);
        jw_int(w, "tasks_finished", x->finished);
        jw_int(w, "failed_tasks", x->failed_tasks);
        jw_bool(w, "end_posted", x->ended);
        jw_close(w, '}');
    }
    jw_close(w, ']');
    jw_close(w, '}');
}

/* "partitions": one object per partition (a partitioned queue only). */
static void jw_partitions(jw *w, const qview *v)
{
    if (!v->partitions)
        return;
    jw_open(w, "partitions", '[');
    for (int p = 0; p < v->partitions; p++) {
        const qinfo *in = &v->part[p];
        jw_open(w, NULL, '{');
        jw_int(w, "partition", p);
        jw_str(w, "queue", in->q);
        jw_str(w, "node", v->node[p]);
        jw_int(w, "batches", in->held);
        jw_int(w, "max_batches", hnum(in->meta, "max_batches"));
        jw_int(w, "bytes", in->bytes);
        jw_int(w, "max_bytes", hnum(in->meta, "max_bytes"));
        jw_int(w, "ready", in->ready);
        jw_int(w, "pending", in->pending);
        jw_int(w, "dead_letters", in->dead);
        if (in->job->elements) {
            jw_open(w, "job", '{');
            jw_str(w, "state", hget(in->job, "state"));
            jw_int(w, "epoch_open", hnum(in->job, "epoch_open"));
            jw_int(w, "shards", hnum(in->job, "ntasks"));
            jw_int(w, "waiting", in->waiting);
            jw_int(w, "claimed", in->claimed);
            jw_int(w, "done", in->done);
            jw_int(w, "failed", (long long)in->failed->elements);
            jw_close(w, '}');
        } else {
            jw_str(w, "job", NULL);
        }
        jw_close(w, '}');
    }
    jw_close(w, ']');
}

static void print_json(const qview *v, int job_only)
{
    const qinfo *in = &v->all;
    jw w = {0};
    jw_open(&w, NULL, '{');
    jw_str(&w, "queue", in->q);
    if (!job_only) {
        jw_hash(&w, "meta", in->meta);
        jw_int(&w, "batches", in->held);
        jw_int(&w, "bytes", in->bytes);
        jw_int(&w, "ready", in->ready);
        jw_int(&w, "pending", in->pending);
        jw_int(&w, "dead_letters", in->dead);
        jw_hash(&w, "stats", in->stats);
    }
    jw_job(&w, in);
    jw_peers(&w, "producers", in->prod, in->nprod, 1, in->lease_ms);
    if (!job_only)
        jw_peers(&w, "consumers", in->cons, in->ncons, 0, in->lease_ms);
    jw_partitions(&w, v);
    jw_close(&w, '}');
    putchar('\n');
}

static int cmd_info(ctl *x, int json, int job_only)
{
    qview v;
    int rc = view_read(x, &v);
    if (rc == 0) {
        if (json) {
            print_json(&v, job_only);
        } else if (job_only) {
            print_job(&v.all);
            print_partitions(&v, 1);
        } else {
            print_info(&v);
        }
    }
    qview_free(&v);
    return rc;
}

/* ---- dead letters, reaping ------------------------------------------------ */

/* "2024-05-01T12:00:00.123Z" for a time in ms since the Unix epoch. */
static void iso_time(long long ms, char *out, size_t n)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    if (ms < 0 || !gmtime_r(&s, &tm)) {
        snprintf(out, n, "?");
        return;
    }
    size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, n - k, ".%03lldZ", ms % 1000);
}

/* Lists the dead letters of every partition (ids are unique in the queue:
 * they carry the global shard number), then requeues or purges them. */
static int cmd_dead(ctl *x, const char *action)
{
    size_t total = 0;
    for (int p = 0; p < nparts(x); p++) {
        const char *q = pname(x, p);
        char k_dead[SLUICE_MAX_KEY], k_info[SLUICE_MAX_KEY];
        sluicei_key(k_dead, q, "dead");
        sluicei_key(k_info, q, "deadinfo");
        const char *lr[4] = {"LRANGE", k_dead, "0", "-1"};
        redisReply *ids = must(x, q, 4, lr);
        if (!ids)
            return EXIT_RUNTIME;
        for (size_t i = 0; i < ids->elements; i++) {
            const char *hg[3] = {"HGET", k_info, ids->element[i]->str};
            redisReply *r = must(x, q, 3, hg);
            if (!r) {
                freeReplyObject(ids);
                return EXIT_RUNTIME;
            }
            /* deadinfo: "size now_ms reason" */
            long long size = 0, ms = -1;
            int off = 0;
            const char *reason = "";
            if (r->type == REDIS_REPLY_STRING && sscanf(r->str, "%lld %lld %n", &size, &ms, &off) == 2)
                reason = r->str + off;
            char when[40];
            iso_time(ms, when, sizeof when);
            if (x->partitions)
                printf("%s  %lld bytes  %s  partition %d  %s\n", ids->element[i]->str, size, when,
                       p, reason);
            else
                printf("%s  %lld bytes  %s  %s\n", ids->element[i]->str, size, when, reason);
            freeReplyObject(r);
        }
        total += ids->elements;
        freeReplyObject(ids);
    }
    printf("%zu dead letter%s\n", total, total == 1 ? "" : "s");
    if (!action)
        return 0;
    long long n = 0;
    for (int p = 0; p < nparts(x); p++) {
        /* A share per call (deadadmin.lua), until none is left. */
        for (long long left = 1; left > 0;) {
            redisReply *r;
            if (run_script(x, SLUICEI_SCRIPT_DEADADMIN, pname(x, p), 1, &action, &r)) {
                fprintf(stderr, "sluice-ctl: queue '%s': %s %lld dead letter%s before that\n",
                        x->q, strcmp(action, "requeue") == 0 ? "requeued" : "purged", n,
                        n == 1 ? "" : "s");
                return EXIT_RUNTIME;
            }
            left = 0;
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
                n += num_of(r->element[0]);
                left = num_of(r->element[1]);
            }
            freeReplyObject(r);
        }
    }
    printf("%s %lld dead letter%s\n", strcmp(action, "requeue") == 0 ? "requeued" : "purged", n,
           n == 1 ? "" : "s");
    return 0;
}

static int cmd_reap(ctl *x)
{
    long long b = 0, t = 0;
    for (int p = 0; p < nparts(x); p++) {
        redisReply *r;
        /* Leases are judged on the server's clock, never this host's. */
        if (run_script(x, SLUICEI_SCRIPT_REAP, pname(x, p), 0, NULL, &r))
            return EXIT_RUNTIME;
        b += r->type == REDIS_REPLY_ARRAY && r->elements >= 2 ? num_of(r->element[0]) : 0;
        t += r->type == REDIS_REPLY_ARRAY && r->elements >= 2 ? num_of(r->element[1]) : 0;
        freeReplyObject(r);
    }
    printf("handed back %lld batch%s of consumers whose lease expired; returned %lld task%s "
           "of producers whose lease expired\n",
           b, b == 1 ? "" : "es", t, t == 1 ? "" : "s");
    return 0;
}

/* ---- stat: a live view of the queue --------------------------------------- */

/* Set by SIGINT and SIGTERM during stat --watch and metrics. */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

#define STAT_INTERVAL_MS_DEFAULT 1000
#define STAT_INTERVAL_MS_MIN 50
#define STAT_INTERVAL_MS_MAX 3600000
#define BAR_CELLS 30
/* Epoch lines shown by stat around the open epoch (a job may have many). */
#define STAT_EPOCHS_BEFORE 2
#define STAT_EPOCHS_AFTER 3
#define STAT_FAILED_SHOWN 5

typedef struct stat_opts {
    int watch, json;
    long long interval_ms;
} stat_opts;

/* The blocked share of a peer is estimated over a window of snapshots:
 * peers publish blocked_us only with their heartbeat (producers every
 * second, consumers every lease/3), and the time a heartbeat was sent is
 * not stored (the producers/consumers hashes are also updated by takes,
 * claims and task renewals). So the share is the growth of blocked_us
 * between an older snapshot and this one, over the time between them; a
 * span of several heartbeats keeps the error of the unknown beat times
 * small (at most one heartbeat's worth over the span). */
#define SHARE_WINDOW_MS_MIN 30000
#define SHARE_SAMPLES 32
/* Shortest span shown: 3 heartbeats (consumers: the lease). */
#define SHARE_SPAN_MS_PRODUCER 3000

/* A producer or consumer across snapshots. */
typedef struct peer_hist {
    char *id;                        /* owned */
    int producer;
    size_t n;                        /* samples, oldest first */
    int64_t t[SHARE_SAMPLES];        /* monotonic ms of the snapshot */
    long long b[SHARE_SAMPLES];      /* blocked_us it showed */
    double share;                    /* blocked / wall time; < 0: not known yet */
    long long span_ms;               /* the time the share is measured over */
} peer_hist;

/* What successive snapshots are compared with. */
typedef struct stat_hist {
    int have;                 /* a previous snapshot exists */
    int64_t t_ms;             /* its monotonic time */
    long long pushed, acked, pushed_bytes, acked_bytes;
    double push_rate, ack_rate, push_bps, ack_bps;   /* per second; < 0: n/a */
    peer_hist *peers;         /* owned */
    size_t npeers;
} stat_hist;

static void hist_free_peers(peer_hist *ps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ps[i].id);
    free(ps);
}

static const peer_hist *hist_find(const stat_hist *h, const char *id, int producer)
{
    for (size_t i = 0; i < h->npeers; i++)
        if (h->peers[i].producer == producer && strcmp(h->peers[i].id, id) == 0)
            return &h->peers[i];
    return NULL;
}

/* The blocked share of a peer in the last snapshot (< 0: n/a), and in
 * *span_ms (when not NULL) the time it was measured over. */
static double hist_share(const stat_hist *h, const char *id, int producer, long long *span_ms)
{
    const peer_hist *x = hist_find(h, id, producer);
    if (span_ms)
        *span_ms = x ? x->span_ms : 0;
    return x ? x->share : -1;
}

/* Adds the snapshot (t_ms, blocked_us) to x's samples (o: the same peer
 * in the previous snapshot, or NULL) and estimates its share over the
 * window: from the oldest sample kept to now. */
static void share_update(peer_hist *x, const peer_hist *o, int64_t t_ms, long long blocked_us,
                         long long lease_ms)
{
    long long window = lease_ms * 3 > SHARE_WINDOW_MS_MIN ? lease_ms * 3 : SHARE_WINDOW_MS_MIN;
    long long min_span = x->producer ? SHARE_SPAN_MS_PRODUCER : lease_ms;
    x->n = 0;
    x->share = -1;
    x->span_ms = 0;
    /* A counter that went back: the same id started again. */
    if (o && o->n && blocked_us >= o->b[o->n - 1]) {
        x->n = o->n;
        memcpy(x->t, o->t, sizeof x->t);
        memcpy(x->b, o->b, sizeof x->b);
    }
    size_t old = 0;
    while (old < x->n && t_ms - x->t[old] > window)
        old++;
    if (old) {
        x->n -= old;
        memmove(x->t, x->t + old, x->n * sizeof x->t[0]);
        memmove(x->b, x->b + old, x->n * sizeof x->b[0]);
    }
    /* Samples at least window/SHARE_SAMPLES apart: any refresh rate fits. */
    if (x->n == 0 || t_ms - x->t[x->n - 1] >= window / SHARE_SAMPLES) {
        if (x->n == SHARE_SAMPLES) {
            x->n--;
            memmove(x->t, x->t + 1, x->n * sizeof x->t[0]);
            memmove(x->b, x->b + 1, x->n * sizeof x->b[0]);
        }
        x->t[x->n] = t_ms;
        x->b[x->n] = blocked_us;
        x->n++;
    }
    long long span = t_ms - x->t[0];
    if (span >= min_span && span > 0) {
        double share = (double)(blocked_us - x->b[0]) / ((double)span * 1000.0);
        x->share = share > 1 ? 1 : share;
        x->span_ms = span;
    }
}

/* Per second between two readings of a counter; < 0 when unknown (first
 * snapshot, or a counter that went back: the queue was recreated). */
static double rate(long long now, long long before, int64_t dt_ms)
{
    if (dt_ms <= 0 || now < before)
        return -1;
    return (double)(now - before) * 1000.0 / (double)dt_ms;
}

/* Moves h on to snapshot in, read at monotonic time t_ms: the push and ack
 * rates since the previous snapshot, and for each peer the share of wall
 * time it was blocked (share_update). Returns 0, or -1 when out of memory
 * (h unchanged). */
static int hist_update(stat_hist *h, const qinfo *in, int64_t t_ms)
{
    size_t n = in->nprod + in->ncons, k = 0;
    peer_hist *np = calloc(n ? n : 1, sizeof *np);
    if (!np)
        return -1;
    for (int producer = 0; producer < 2; producer++) {
        const peer *ps = producer ? in->prod : in->cons;
        size_t cnt = producer ? in->nprod : in->ncons;
        for (size_t i = 0; i < cnt; i++, k++) {
            peer_hist *x = &np[k];
            if (!(x->id = strdup(ps[i].id))) {
                hist_free_peers(np, k);
                return -1;
            }
            x->producer = producer;
            share_update(x, hist_find(h, x->id, producer), t_ms,
                         hnum(ps[i].stats, "blocked_us"), in->lease_ms);
        }
    }
    long long pushed = hnum(in->stats, "pushed"), acked = hnum(in->stats, "acked");
    long long pb = hnum(in->stats, "pushed_bytes"), ab = hnum(in->stats, "acked_bytes");
    int64_t dt = h->have ? t_ms - h->t_ms : 0;
    h->push_rate = rate(pushed, h->pushed, dt);
    h->ack_rate = rate(acked, h->acked, dt);
    h->push_bps = rate(pb, h->pushed_bytes, dt);
    h->ack_bps = rate(ab, h->acked_bytes, dt);
    h->pushed = pushed;
    h->acked = acked;
    h->pushed_bytes = pb;
    h->acked_bytes = ab;
    h->t_ms = t_ms;
    h->have = 1;
    hist_free_peers(h->peers, h->npeers);
    h->peers = np;
    h->npeers = n;
    return 0;
}

/* "512 B", "3.1 MiB" (binary units, as --max-bytes takes them). */
static void fmt_bytes(char *out, size_t n, double v)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, n, "%.0f B", v);
    else
        snprintf(out, n, "%.1f %s", v, unit[u]);
}

/* "12.5 batches/s", "3.1 MiB/s", or "n/a". */
static void fmt_rate(char *out, size_t n, double r, int bytes)
{
    if (r < 0) {
        snprintf(out, n, "n/a");
    } else if (bytes) {
        fmt_bytes(out, n, r);
        size_t k = strlen(out);
        snprintf(out + k, n - k, "/s");
    } else {
        snprintf(out, n, "%.1f batches/s", r);
    }
}

/* " (35% of the last 30 s)", or "" while the share is not known. */
static void fmt_share(char *out, size_t n, double share, long long span_ms)
{
    if (share < 0)
        out[0] = '\0';
    else
        snprintf(out, n, " (%.0f%% of the last %.0f s)", share * 100, (double)span_ms / 1000.0);
}

/* "[#########.....................]" for v of max. */
static void put_bar(FILE *f, long long v, long long max)
{
    int fill = 0;
    if (max > 0) {
        double x = (double)v / (double)max * BAR_CELLS + 0.5;
        fill = x < 0 ? 0 : x > BAR_CELLS ? BAR_CELLS : (int)x;
    }
    fputc('[', f);
    for (int i = 0; i < BAR_CELLS; i++)
        fputc(i < fill ? '#' : '.', f);
    fputc(']', f);
}

static void stat_peers_text(FILE *f, const qinfo *in, const stat_hist *h, int producer)
{
    const peer *ps = producer ? in->prod : in->cons;
    size_t n = producer ? in->nprod : in->ncons;
    fprintf(f, "%s  %zu alive", producer ? "producers" : "consumers", alive(ps, n, in->lease_ms));
    if (n > alive(ps, n, in->lease_ms))
        fprintf(f, ", %zu silent", n - alive(ps, n, in->lease_ms));
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
        const peer *p = &ps[i];
        const redisReply *s = p->stats;
        char bytes[32], share[48];
        long long span = 0;
        double sh = hist_share(h, p->id, producer, &span);
        fmt_bytes(bytes, sizeof bytes, (double)hnum(s, "bytes"));
        fmt_share(share, sizeof share, sh, span);
        double blocked = (double)hnum(s, "blocked_us") / 1e6;
        fprintf(f, "  %s", p->id);
        if (!producer)
            fprintf(f, "  rank %s", p->extra ? p->extra : "-");
        fprintf(f, "  seen %.1f s ago%s", (double)p->seen_ago_ms / 1000.0,
                p->seen_ago_ms > in->lease_ms ? " (silent: lease expired)" : "");
        if (producer) {
            fprintf(f, "  task %s", p->extra ? p->extra : "-");
            fprintf(f, "  batches %lld  %s  backpressure %.1f s%s  tasks %lld done, %lld failed",
                    hnum(s, "batches"), bytes, blocked, share, hnum(s, "tasks_done"),
                    hnum(s, "tasks_failed"));
            if (hnum(s, "duplicates"))
                fprintf(f, "  duplicates %lld", hnum(s, "duplicates"));
        } else {
            fprintf(f, "  epoch %lld  batches %lld  %s  blocked in next() %.1f s%s  pending %lld"
                    "  redelivered %lld  duplicates %lld  invalid %lld",
                    hnum(s, "epoch"), hnum(s, "batches"), bytes, blocked, share, p->pending,
                    hnum(s, "redelivered"), hnum(s, "duplicates"), hnum(s, "invalid"));
        }
        fputc('\n', f);
    }
}

static void stat_job_text(FILE *f, const qinfo *in)
{
    const redisReply *j = in->job;
    if (!j->elements) {
        fprintf(f, "job        none (epoch 0, no end)\n");
        return;
    }
    long long ntasks = hnum(j, "ntasks"), open = hnum(j, "epoch_open");
    const char *state = hget(j, "state");
    fprintf(f, "job        %s: ", state ? state : "?");
    if (state && strcmp(state, "finished") == 0)
        fprintf(f, "all %lld epochs ended", in->epochs);
    else
        fprintf(f, "epoch %lld of 0..%lld open", open, in->epochs - 1);
    fprintf(f, "; tasks %lld/%lld done (%lld claimed, %lld waiting, %zu failed)\n", in->done,
            ntasks * in->epochs, in->claimed, in->waiting, in->failed->elements);
    long long lo = open - STAT_EPOCHS_BEFORE, hi = open + STAT_EPOCHS_AFTER;
    if (lo < 0)
        lo = 0;
    if (hi > in->epochs)
        hi = in->epochs;
    if (lo > 0)
        fprintf(f, "  (epochs 0..%lld ended)\n", lo - 1);
    for (long long e = lo; e < hi; e++) {
        const epoch_info *x = &in->ep[e];
        fprintf(f, "  epoch %lld  tasks %lld/%lld  batches pushed %lld, acked %lld, ready %lld", e,
                x->finished, ntasks, x->pushed, x->acked, x->ready);
        if (x->dropped || x->padded)
            fprintf(f, ", dropped %lld, padded %lld", x->dropped, x->padded);
        fprintf(f, "  %s\n", x->ended ? "end posted" : "open");
    }
    if (hi < in->epochs)
        fprintf(f, "  (epochs %lld..%lld to come)\n", hi, in->epochs - 1);
}

/* One line per partition of a partitioned queue: its node, what it holds
 * against its budgets. */
static void stat_partitions_text(FILE *f, const qview *v)
{
    if (!v->partitions)
        return;
    fprintf(f, "partitions %d\n", v->partitions);
    for (int p = 0; p < v->partitions; p++) {
        const qinfo *in = &v->part[p];
        long long maxn = hnum(in->meta, "max_batches"), maxb = hnum(in->meta, "max_bytes");
        char b1[32], b2[32];
        fmt_bytes(b1, sizeof b1, (double)in->bytes);
        fmt_bytes(b2, sizeof b2, (double)maxb);
        fprintf(f, "  %d  %s  batches %lld/%lld (%.0f%%)  bytes %s/%s (%.0f%%)  ready %lld"
                "  delivered %lld  dead %lld\n", p, v->node[p], in->held, maxn,
                maxn > 0 ? 100.0 * (double)in->held / (double)maxn : 0.0, b1, b2,
                maxb > 0 ? 100.0 * (double)in->bytes / (double)maxb : 0.0, in->ready,
                in->pending, in->dead);
    }
}

/* One snapshot as text. */
static void stat_text(FILE *f, const qview *v, const stat_hist *h, const stat_opts *o)
{
    const qinfo *in = &v->all;
    char when[40], b1[32], b2[32], r1[32], r2[32], r3[32], r4[32];
    iso_time((long long)(sluicei_wall_us() / 1000u), when, sizeof when);
    fprintf(f, "queue '%s'  %s", in->q, when);
    if (o->watch)
        fprintf(f, "  (every %.1f s; Ctrl-C quits)", (double)o->interval_ms / 1000.0);
    fputc('\n', f);
    long long maxn = hnum(in->meta, "max_batches"), maxb = hnum(in->meta, "max_bytes");
    fprintf(f, "batches    ");
    put_bar(f, in->held, maxn);
    fprintf(f, " %lld/%lld batches  (ready %lld, delivered %lld)\n", in->held, maxn, in->ready,
            in->pending);
    fmt_bytes(b1, sizeof b1, (double)in->bytes);
    fmt_bytes(b2, sizeof b2, (double)maxb);
    fprintf(f, "bytes      ");
    put_bar(f, in->bytes, maxb);
    fprintf(f, " %s/%s\n", b1, b2);
    stat_partitions_text(f, v);
    fmt_rate(r1, sizeof r1, h->push_rate, 0);
    fmt_rate(r2, sizeof r2, h->push_bps, 1);
    fmt_rate(r3, sizeof r3, h->ack_rate, 0);
    fmt_rate(r4, sizeof r4, h->ack_bps, 1);
    if (h->push_rate < 0 && h->ack_rate < 0)
        fprintf(f, "rates      n/a (first snapshot)\n");
    else
        fprintf(f, "rates      push %s (%s)  ack %s (%s)\n", r1, r2, r3, r4);
    fprintf(f, "totals     pushed %lld  acked %lld  requeued %lld  dead %lld  dup_dropped %lld\n",
            hnum(in->stats, "pushed"), hnum(in->stats, "acked"), hnum(in->stats, "requeued"),
            hnum(in->stats, "dead"), hnum(in->stats, "dup_dropped"));
    if (in->ranks > 0)
        fprintf(f, "coordinated over %lld ranks, remainder %s\n", in->ranks,
                hget(in->meta, "remainder") ? hget(in->meta, "remainder") : "drop");
    stat_job_text(f, in);
    stat_peers_text(f, in, h, 1);
    stat_peers_text(f, in, h, 0);
    size_t nf = in->failed->elements;
    fprintf(f, "failed tasks  %zu\n", nf);
    for (size_t i = 0; i < nf && i < STAT_FAILED_SHOWN; i++) {
        const char *t = in->failed->element[i]->str, *err = hget(in->terr, t);
        fprintf(f, "  %s  attempts %lld: %s\n", t, hnum(in->tattempts, t), err ? err : "");
    }
    if (nf > STAT_FAILED_SHOWN)
        fprintf(f, "  (%zu more: sluice-ctl jobs %s)\n", nf - STAT_FAILED_SHOWN, in->q);
    fprintf(f, "dead letters  %lld%s\n", in->dead, in->dead ? "  (sluice-ctl dead lists them)" : "");
}

/* A JSON number with 4 decimals (no exponent: rates of bytes are large),
 * or null when v < 0 (not known). */
static void jw_num_or_null(jw *w, const char *key, double v)
{
    jw_pre(w, key);
    if (v < 0)
        fputs("null", stdout);
    else
        printf("%.4f", v);
}

/* One snapshot as one JSON object on one line. */
static void stat_json(const qview *v, const stat_hist *h)
{
    const qinfo *in = &v->all;
    jw w = {0};
    jw_open(&w, NULL, '{');
    jw_str(&w, "queue", in->q);
    jw_int(&w, "time_ms", (long long)(sluicei_wall_us() / 1000u));
    jw_int(&w, "batches", in->held);
    jw_int(&w, "max_batches", hnum(in->meta, "max_batches"));
    jw_int(&w, "bytes", in->bytes);
    jw_int(&w, "max_bytes", hnum(in->meta, "max_bytes"));
    jw_int(&w, "ready", in->ready);
    jw_int(&w, "pending", in->pending);
    jw_int(&w, "dead_letters", in->dead);
    jw_hash(&w, "meta", in->meta);
    jw_hash(&w, "stats", in->stats);
    jw_open(&w, "rates", '{');
    jw_num_or_null(&w, "push_batches_per_s", h->push_rate);
    jw_num_or_null(&w, "push_bytes_per_s", h->push_bps);
    jw_num_or_null(&w, "ack_batches_per_s", h->ack_rate);
    jw_num_or_null(&w, "ack_bytes_per_s", h->ack_bps);
    jw_close(&w, '}');
    jw_job(&w, in);
    jw_peers(&w, "producers", in->prod, in->nprod, 1, in->lease_ms);
    jw_peers(&w, "consumers", in->cons, in->ncons, 0, in->lease_ms);
    /* Per peer: blocked time / wall time over the window (share_update). */
    jw_open(&w, "blocked_share", '{');
    for (int producer = 1; producer >= 0; producer--) {
        const peer *ps = producer ? in->prod : in->cons;
        size_t n = producer ? in->nprod : in->ncons;
        jw_open(&w, producer ? "producers" : "consumers", '{');
        for (size_t i = 0; i < n; i++)
            jw_num_or_null(&w, ps[i].id, hist_share(h, ps[i].id, producer, NULL));
        jw_close(&w, '}');
    }
    jw_close(&w, '}');
    jw_partitions(&w, v);
    jw_close(&w, '}');
    putchar('\n');
}

/* Writes a frame of text to the terminal in place: home, each line
 * cleared to its end, the rest of the screen cleared. */
static void put_frame(const char *text, size_t len, int first)
{
    fputs(first ? "\033[H\033[2J" : "\033[H", stdout);
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\n')
            fputs("\033[K", stdout);
        putchar(text[i]);
    }
    fputs("\033[J", stdout);
}

/* Sleeps ms, waking early on a signal. */
static void stat_sleep(long long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (!stop_requested && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* sluice-ctl stat: one snapshot, or with --watch one every interval until
 * SIGINT/SIGTERM (exit 0). On a terminal the view is redrawn in place;
 * otherwise snapshots follow each other, separated by a blank line (JSON:
 * one object a line). A failed read ends a single snapshot with an error;
 * while watching, the view keeps trying (reconnecting) after it worked
 * once. */
static int cmd_stat(ctl *x, const stat_opts *o)
{
    if (o->watch) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);   /* no SA_RESTART: the sleep ends at once */
        sigaction(SIGTERM, &sa, NULL);
    }
    int tty = o->watch && !o->json && isatty(STDOUT_FILENO);
    stat_hist h = {.push_rate = -1, .ack_rate = -1, .push_bps = -1, .ack_bps = -1};
    int rc = 0, shown = 0, failed = 0;
    while (!stop_requested) {
        qview v;
        memset(&v, 0, sizeof v);
        int r = failed ? ctl_discover(x) : 0;
        if (r == 0)
            r = view_read(x, &v);
        if (r == 0 && hist_update(&h, &v.all, sluicei_now_ms()) != 0) {
            fprintf(stderr, "sluice-ctl: out of memory\n");
            r = EXIT_RUNTIME;
        }
        if (r == 0 && o->json) {
            stat_json(&v, &h);
        } else if (r == 0) {
            char *text = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&text, &len);
            if (f) {
                stat_text(f, &v, &h, o);
                fclose(f);
            }
            if (!f || !text) {
                fprintf(stderr, "sluice-ctl: out of memory\n");
                r = EXIT_RUNTIME;
            } else if (tty) {
                put_frame(text, len, !shown);
            } else {
                if (shown)
                    putchar('\n');
                fwrite(text, 1, len, stdout);
            }
            free(text);
        }
        qview_free(&v);
        fflush(stdout);
        if (r == 0)
            shown++;
        failed = r != 0;
        if (r != 0 && (!o->watch || !shown)) {
            rc = r;
            break;
        }
        if (!o->watch)
            break;
        stat_sleep(o->interval_ms);
    }
    hist_free_peers(h.peers, h.npeers);
    return rc;
}

/* ---- metrics: the queue in Prometheus text ------------------------------ */

/* A counter or gauge of a peer's published stats (pstats:/cstats:). */
typedef struct peer_metric {
    const char *field;      /* in the stats hash */
    const char *name, *type, *help;
    double scale;           /* value = field * scale */
} peer_metric;

static const peer_metric consumer_metrics[] = {
    {"batches", "sluice_consumer_batches_total", "counter",
     "Batches next() returned to this consumer's application.", 1},
    {"records", "sluice_consumer_records_total", "counter", "Records in those batches.", 1},
    {"bytes", "sluice_consumer_bytes_total", "counter", "Frame bytes of those batches.", 1},
    {"blocked_us", "sluice_consumer_blocked_seconds_total", "counter",
     "Seconds the application waited inside next() for a batch (high: the input pipeline "
     "is the bottleneck).", 1e-6},
    {"redelivered", "sluice_consumer_redelivered_total", "counter",
     "Batches this consumer got that had been delivered before (a consumer's lease expired).",
     1},
    {"duplicates", "sluice_consumer_duplicates_total", "counter",
     "Batches this consumer dropped because it had them already.", 1},
    {"padding", "sluice_consumer_padding_total", "counter",
     "Padding batches returned (coordinated queue, remainder pad).", 1},
    {"invalid", "sluice_consumer_invalid_total", "counter",
     "Frames that failed validation and went to the dead letters.", 1},
    {"reconnects", "sluice_consumer_reconnects_total", "counter",
     "Times this consumer regained a lost Redis connection.", 1},
    {"epochs_ended", "sluice_consumer_epochs_ended_total", "counter",
     "Ends of epochs this consumer returned (SLUICE_EOF).", 1},
    {"epoch", "sluice_consumer_epoch", "gauge", "The epoch this consumer is reading.", 1},
};

static const peer_metric producer_metrics[] = {
    {"batches", "sluice_producer_batches_pushed_total", "counter",
     "Batches this producer stored in the queue (pushes dropped as duplicates not counted).", 1},
    {"bytes", "sluice_producer_bytes_pushed_total", "counter",
     "Frame bytes of the batches this producer stored in the queue.", 1},
    {"duplicates", "sluice_producer_duplicates_total", "counter",
     "Pushes Redis dropped because the batch id was queued or acknowledged already.", 1},
    {"blocked_us", "sluice_producer_backpressure_seconds_total", "counter",
     "Seconds this producer waited for room in the queue (backpressure: the consumers are "
     "slower).", 1e-6},
    {"tasks_done", "sluice_producer_tasks_done_total", "counter",
     "Tasks of the job this producer completed.", 1},
    {"tasks_failed", "sluice_producer_tasks_failed_total", "counter",
     "Task attempts of this producer that failed (reader, command or transform error).", 1},
};

/* The labels of a peer: queue, producer=<id> or consumer=<cid> and, for a
 * consumer of a coordinated queue, rank. */
static void peer_labels(const char **lab, const qinfo *in, const peer *p, int producer)
{
    lab[0] = "queue";
    lab[1] = in->q;
    lab[2] = producer ? "producer" : "consumer";
    lab[3] = p->id;
    lab[4] = "rank";
    lab[5] = producer ? NULL : p->extra;
    lab[6] = NULL;
}

static void peers_metrics(sluicei_mtext *t, const qinfo *in, int producer)
{
    const peer *ps = producer ? in->prod : in->cons;
    size_t n = producer ? in->nprod : in->ncons;
    const char *kind = producer ? "producer" : "consumer";
    const peer_metric *pm = producer ? producer_metrics : consumer_metrics;
    size_t npm = producer ? sizeof producer_metrics / sizeof producer_metrics[0]
                          : sizeof consumer_metrics / sizeof consumer_metrics[0];
    const char *lab[7];
    char name[64], help[160];
    snprintf(name, sizeof name, "sluice_%s_alive", kind);
    snprintf(help, sizeof help, "1 while this %s was seen within the queue's lease.", kind);
    sluicei_mtext_family(t, name, "gauge", help);
    for (size_t i = 0; i < n; i++) {
        peer_labels(lab, in, &ps[i], producer);
        sluicei_mtext_sample(t, name, lab, ps[i].seen_ago_ms <= in->lease_ms);
    }
    snprintf(name, sizeof name, "sluice_%s_last_seen_age_seconds", kind);
    snprintf(help, sizeof help,
             "Seconds since this %s last showed it is alive (heartbeat, take or claim).", kind);
    sluicei_mtext_family(t, name, "gauge", help);
    for (size_t i = 0; i < n; i++) {
        peer_labels(lab, in, &ps[i], producer);
        sluicei_mtext_sample(t, name, lab, (double)ps[i].seen_ago_ms / 1000.0);
    }
    if (!producer) {
        sluicei_mtext_family(t, "sluice_consumer_pending_batches", "gauge",
                             "Batches delivered to this consumer and not acknowledged yet.");
        for (size_t i = 0; i < n; i++) {
            peer_labels(lab, in, &ps[i], producer);
            sluicei_mtext_sample(t, "sluice_consumer_pending_batches", lab,
                                 (double)ps[i].pending);
        }
    }
    for (size_t m = 0; m < npm; m++) {
        sluicei_mtext_family(t, pm[m].name, pm[m].type, pm[m].help);
        for (size_t i = 0; i < n; i++) {
            const char *v = hget(ps[i].stats, pm[m].field);
            if (!v)
                continue;   /* not published (yet) */
            peer_labels(lab, in, &ps[i], producer);
            sluicei_mtext_sample(t, pm[m].name, lab, (double)strtoll(v, NULL, 10) * pm[m].scale);
        }
    }
}

/* Counters of the stats hash and their metrics. */
static const struct {
    const char *field, *name, *help;
} queue_counters[] = {
    {"pushed", "sluice_queue_pushed_total", "Batches stored in the queue by all producers."},
    {"pushed_bytes", "sluice_queue_pushed_bytes_total", "Frame bytes of those batches."},
    {"acked", "sluice_queue_acked_total", "Batches acknowledged by the consumers."},
    {"acked_bytes", "sluice_queue_acked_bytes_total", "Frame bytes of those batches."},
    {"requeued", "sluice_queue_requeued_total",
     "Batches handed back to the queue (a consumer closed or its lease expired)."},
    {"dead", "sluice_queue_dead_total", "Batches moved to the dead letters."},
    {"dup_dropped", "sluice_queue_dup_dropped_total",
     "Pushes dropped because the batch was queued or acknowledged already."},
    {"tasks_done", "sluice_queue_tasks_done_total", "Tasks of jobs completed."},
    {"tasks_reaped", "sluice_queue_tasks_reaped_total",
     "Tasks taken back from producers whose lease expired."},
};

/* Per partition of a partitioned queue: what it holds against its
 * budgets (families of their own, so that sums over the queue's series
 * do not count anything twice). */
static void partition_metrics(sluicei_mtext *t, const qview *v)
{
    const struct {
        const char *name, *help;
        size_t off;       /* in qinfo; -1: from meta */
        const char *meta;
    } gauges[] = {
        {"sluice_partition_depth_batches",
         "Batches the partition holds (queued or delivered, not yet acknowledged).",
         offsetof(qinfo, held), NULL},
        {"sluice_partition_max_batches", "The partition's batch budget.", (size_t)-1,
         "max_batches"},
        {"sluice_partition_bytes", "Frame bytes the partition holds.", offsetof(qinfo, bytes),
         NULL},
        {"sluice_partition_max_bytes", "The partition's byte budget.", (size_t)-1, "max_bytes"},
        {"sluice_partition_ready_batches", "Batches of the partition waiting to be taken.",
         offsetof(qinfo, ready), NULL},
        {"sluice_partition_delivered_batches",
         "Batches of the partition delivered to consumers and not acknowledged yet.",
         offsetof(qinfo, pending), NULL},
        {"sluice_partition_dead_letters", "Batches in the partition's dead-letter list now.",
         offsetof(qinfo, dead), NULL},
    };
    if (!v->partitions)
        return;
    sluicei_mtext_family(t, "sluice_queue_partitions", "gauge", "Partitions of the queue.");
    const char *const ql[] = {"queue", v->all.q, NULL};
    sluicei_mtext_sample(t, "sluice_queue_partitions", ql, v->partitions);
    for (size_t g = 0; g < sizeof gauges / sizeof gauges[0]; g++) {
        sluicei_mtext_family(t, gauges[g].name, "gauge", gauges[g].help);
        for (int p = 0; p < v->partitions; p++) {
            const qinfo *in = &v->part[p];
            char ps[16];
            long long val;
            snprintf(ps, sizeof ps, "%d", p);
            const char *const l[] = {"queue", v->all.q, "partition", ps, NULL};
            if (gauges[g].meta)
                val = hnum(in->meta, gauges[g].meta);
            else
                memcpy(&val, (const char *)in + gauges[g].off, sizeof val);
            sluicei_mtext_sample(t, gauges[g].name, l, (double)val);
        }
    }
}

/* Everything sluice-ctl metrics serves, from one snapshot. */
static void queue_metrics(sluicei_mtext *t, const qview *v)
{
    const qinfo *in = &v->all;
    const char *const lab[] = {"queue", in->q, NULL};
    const struct {
        const char *name, *help;
        long long v;
    } gauges[] = {
        {"sluice_queue_depth_batches",
         "Batches the queue holds (queued or delivered, not yet acknowledged).", in->held},
        {"sluice_queue_max_batches", "The queue's batch budget.", hnum(in->meta, "max_batches")},
        {"sluice_queue_bytes", "Frame bytes the queue holds.", in->bytes},
        {"sluice_queue_max_bytes", "The queue's byte budget.", hnum(in->meta, "max_bytes")},
        {"sluice_queue_ready_batches", "Batches waiting to be taken by a consumer.", in->ready},
        {"sluice_queue_delivered_batches",
         "Batches delivered to consumers and not acknowledged yet.", in->pending},
        {"sluice_queue_dead_letters", "Batches in the dead-letter list now.", in->dead},
    };
    sluicei_mtext_family(t, "sluice_up", "gauge",
                         "1 when the last read of the queue from Redis succeeded, else 0.");
    sluicei_mtext_sample(t, "sluice_up", lab, 1);
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
        sluicei_mtext_family(t, gauges[i].name, "gauge", gauges[i].help);
        sluicei_mtext_sample(t, gauges[i].name, lab, (double)gauges[i].v);
    }
    for (size_t i = 0; i < sizeof queue_counters / sizeof queue_counters[0]; i++) {
        sluicei_mtext_family(t, queue_counters[i].name, "counter", queue_counters[i].help);
        sluicei_mtext_sample(t, queue_counters[i].name, lab,
                             (double)hnum(in->stats, queue_counters[i].field));
    }

    const redisReply *j = in->job;
    sluicei_mtext_family(t, "sluice_job_running", "gauge",
                         "1 while the queue runs a job, 0 when it is finished or there is none.");
    sluicei_mtext_sample(t, "sluice_job_running", lab,
                         j->elements && hget(j, "state") && !strcmp(hget(j, "state"), "running"));
    if (j->elements) {
        sluicei_mtext_family(t, "sluice_job_epochs", "gauge", "Epochs of the job.");
        sluicei_mtext_sample(t, "sluice_job_epochs", lab, (double)in->epochs);
        sluicei_mtext_family(t, "sluice_job_epoch_open", "gauge",
                             "The lowest epoch whose end is not posted yet.");
        sluicei_mtext_sample(t, "sluice_job_epoch_open", lab, (double)hnum(j, "epoch_open"));
        sluicei_mtext_family(t, "sluice_job_tasks", "gauge",
                             "Tasks of the job (shards x epochs) by state.");
        const struct {
            const char *state;
            long long v;
        } ts[] = {{"total", hnum(j, "ntasks") * in->epochs},
                  {"waiting", in->waiting},
                  {"claimed", in->claimed},
                  {"done", in->done},
                  {"failed", (long long)in->failed->elements}};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            const char *const l[] = {"queue", in->q, "state", ts[i].state, NULL};
            sluicei_mtext_sample(t, "sluice_job_tasks", l, (double)ts[i].v);
        }
    }

    /* Per epoch (a queue without a job: epoch 0 only). */
    const struct {
        const char *name, *type, *help;
        size_t off;
    } per_epoch[] = {
        {"sluice_epoch_pushed_total", "counter", "Batches of the epoch stored in the queue.",
         offsetof(epoch_info, pushed)},
        {"sluice_epoch_acked_total", "counter", "Batches of the epoch acknowledged.",
         offsetof(epoch_info, acked)},
        {"sluice_epoch_ready_batches", "gauge", "Batches of the epoch waiting to be taken.",
         offsetof(epoch_info, ready)},
        {"sluice_epoch_tasks_finished", "gauge", "Tasks of the epoch done or failed.",
         offsetof(epoch_info, finished)},
    };
    for (size_t m = 0; m < sizeof per_epoch / sizeof per_epoch[0]; m++) {
        sluicei_mtext_family(t, per_epoch[m].name, per_epoch[m].type, per_epoch[m].help);
        for (long long e = 0; e < in->epochs; e++) {
            char es[24];
            snprintf(es, sizeof es, "%lld", e);
            const char *const l[] = {"queue", in->q, "epoch", es, NULL};
            long long v;
            memcpy(&v, (const char *)&in->ep[e] + per_epoch[m].off, sizeof v);
            sluicei_mtext_sample(t, per_epoch[m].name, l, (double)v);
        }
    }
    sluicei_mtext_family(t, "sluice_epoch_end_posted", "gauge",
                         "1 once the end of the epoch is posted (every task done or failed).");
    for (long long e = 0; e < in->epochs; e++) {
        char es[24];
        snprintf(es, sizeof es, "%lld", e);
        const char *const l[] = {"queue", in->q, "epoch", es, NULL};
        sluicei_mtext_sample(t, "sluice_epoch_end_posted", l, in->ep[e].ended);
    }
    peers_metrics(t, in, 1);
    peers_metrics(t, in, 0);
    partition_metrics(t, v);
}

/* State of sluice-ctl metrics. The refresher thread alone uses x (and
 * its router); the server thread only copies text under lock. */
typedef struct ctl_metrics {
    ctl *x;
    const char *q;
    pthread_mutex_t lock;
    sluicei_mtext text;          /* the last snapshot's exposition; guarded by lock */
    int failing;                 /* refresher: the last read failed */
    int64_t next_try_ms;         /* refresher: after failures, back off until then */
    int backoff_ms;
} ctl_metrics;

#define METRICS_BACKOFF_MAX_MS 30000

/* Refresher thread: reads the queue and replaces the served text. After a
 * failure it serves sluice_up 0 and retries with a doubling pause (up to
 * 30 s), so that a lost Redis costs one error line per attempt. */
static void ctl_metrics_refresh(void *arg)
{
    ctl_metrics *m = arg;
    int64_t now = sluicei_now_ms();
    if (m->failing && now < m->next_try_ms)
        return;
    sluicei_mtext t = {0};
    qview v;
    memset(&v, 0, sizeof v);
    /* After a failed read, look at the queue again: it may have been
     * deleted and created anew. */
    int ok = (!m->failing || ctl_discover(m->x) == 0) && view_read(m->x, &v) == 0;
    if (ok)
        queue_metrics(&t, &v);
    qview_free(&v);
    if (!ok) {
        const char *const lab[] = {"queue", m->q, NULL};
        sluicei_mtext_free(&t);
        sluicei_mtext_family(&t, "sluice_up", "gauge",
                             "1 when the last read of the queue from Redis succeeded, else 0.");
        sluicei_mtext_sample(&t, "sluice_up", lab, 0);
        m->backoff_ms = m->failing ? m->backoff_ms * 2 : 1000;
        if (m->backoff_ms > METRICS_BACKOFF_MAX_MS)
            m->backoff_ms = METRICS_BACKOFF_MAX_MS;
        m->next_try_ms = sluicei_now_ms() + m->backoff_ms;
    } else if (m->failing) {
        fprintf(stderr, "sluice-ctl: metrics: reading queue '%s' works again\n", m->q);
    }
    m->failing = !ok;
    if (t.failed) {   /* out of memory: keep serving the previous text */
        sluicei_mtext_free(&t);
        return;
    }
    pthread_mutex_lock(&m->lock);
    sluicei_mtext old = m->text;
    m->text = t;
    pthread_mutex_unlock(&m->lock);
    sluicei_mtext_free(&old);
}

/* Server thread: the last snapshot. */
static void ctl_metrics_render(sluicei_mtext *out, void *arg)
{
    ctl_metrics *m = arg;
    pthread_mutex_lock(&m->lock);
    sluicei_mtext_raw(out, m->text.buf ? m->text.buf : "", m->text.len);
    pthread_mutex_unlock(&m->lock);
}

/* sluice-ctl metrics: reads the queue once (a missing queue is an error
 * before anything listens), then serves /metrics and /healthz on addr,
 * refreshed every interval_ms by a thread with this connection, until
 * SIGINT or SIGTERM. */
static int cmd_metrics(ctl *x, const char *addr, long long interval_ms)
{
    const char *q = x->q;
    ctl_metrics m = {.x = x, .q = q};
    pthread_mutex_init(&m.lock, NULL);
    int rc = EXIT_RUNTIME;
    sluicei_metrics *srv = NULL;
    /* SIGINT and SIGTERM wait for sigwait() below; blocked before the
     * threads start, so that they inherit the mask. */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &old);

    ctl_metrics_refresh(&m);
    if (m.failing)
        goto out;   /* the reason is printed */
    char err[512];
    sluicei_metrics_opts mo = {.addr = addr, .render = ctl_metrics_render,
                               .refresh = ctl_metrics_refresh, .refresh_ms = (int)interval_ms,
                               .arg = &m};
    sluice_err e = sluicei_metrics_open(&srv, &mo, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, "sluice-ctl: metrics: %s\n", err);
        rc = e == SLUICE_ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
        goto out;
    }
    fprintf(stderr, "sluice-ctl: serving metrics of queue '%s' on http://%s/metrics "
            "(Ctrl-C stops)\n", q, addr);
    int sig = 0;
    while (sigwait(&stop, &sig) != 0)
        ;
    sluicei_metrics_close(srv);
    rc = 0;
out:
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    sluicei_mtext_free(&m.text);
    pthread_mutex_destroy(&m.lock);
    return rc;
}

/* Reads "--interval-ms N" at argv[*i] (N in the stat bounds). Returns 0
 * or EXIT_USAGE (printed). */
static int parse_interval(int argc, char **argv, int *i, long long *out)
{
    const char *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    uint64_t v;
    if (!val)
        return usage_error("%s needs a value", "--interval-ms");
    ++*i;
    if (parse_amount(val, 0, &v) != 0 || v < STAT_INTERVAL_MS_MIN || v > STAT_INTERVAL_MS_MAX)
        return usage_error("--interval-ms '%s' is not an integer in 50..3600000", val);
    *out = (long long)v;
    return 0;
}

/* Reads stat's flags. Returns 0 or EXIT_USAGE (printed). */
static int parse_stat(int argc, char **argv, stat_opts *o)
{
    int interval_given = 0;
    *o = (stat_opts){.interval_ms = STAT_INTERVAL_MS_DEFAULT};
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--watch") == 0) {
            o->watch = 1;
        } else if (strcmp(argv[i], "--json") == 0) {
            o->json = 1;
        } else if (strcmp(argv[i], "--interval-ms") == 0) {
            if (parse_interval(argc, argv, &i, &o->interval_ms))
                return EXIT_USAGE;
            interval_given = 1;
        } else {
            return usage_error("stat: unexpected argument '%s'", argv[i]);
        }
    }
    if (interval_given && !o->watch)
        return usage_error("stat: %s", "--interval-ms goes with --watch");
    return 0;
}

/* Reads metrics' flags. Returns 0 or EXIT_USAGE (printed). */
static int parse_metrics(int argc, char **argv, const char **addr, long long *interval_ms)
{
    *addr = NULL;
    *interval_ms = STAT_INTERVAL_MS_DEFAULT;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--addr") == 0) {
            if (i + 1 >= argc)
                return usage_error("%s needs a value (HOST:PORT, e.g. 0.0.0.0:9101)", "--addr");
            *addr = argv[++i];
        } else if (strcmp(argv[i], "--interval-ms") == 0) {
            if (parse_interval(argc, argv, &i, interval_ms))
                return EXIT_USAGE;
        } else {
            return usage_error("metrics: unexpected argument '%s'", argv[i]);
        }
    }
    if (!*addr)
        return usage_error("metrics: %s is required", "--addr HOST:PORT");
    char err[512];
    if (sluicei_metrics_addr_check("--addr", *addr, err, sizeof err) != SLUICE_OK)
        return usage_error("%s", err);
    return 0;
}

/* ---- main ----------------------------------------------------------------- */

#define COMMANDS "create, delete, info, jobs, stat, metrics, submit, dead, reap, script"

/* How long a command is sent again after a lost connection or a redirect
 * (a list of servers, a cluster): long enough for a failover. A live view
 * and the metrics thread rather show the failure and try again at the
 * next refresh. */
#define RETRY_MS 30000
#define RETRY_MS_LIVE 2000

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
        return usage_error("%s", "no command given (" COMMANDS ")");
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

    static const char *const known[] = {"create", "delete", "info", "jobs", "stat",
                                        "metrics", "submit", "dead", "reap"};
    size_t ki = 0;
    while (ki < sizeof known / sizeof known[0] && strcmp(cmd, known[ki]) != 0)
        ki++;
    if (ki == sizeof known / sizeof known[0])
        return usage_error("unknown command '%s' (" COMMANDS ")", cmd);
    if (optind >= argc)
        return usage_error("%s: which queue?", cmd);
    const char *q = argv[optind++];
    char err[1024];
    if (sluicei_queue_name_check(q, err, sizeof err) != SLUICE_OK)
        return usage_error("%s", err);

    /* Every flag is checked before anything connects. */
    create_opts co;
    submit_opts so;
    int json = 0;
    const char *dead_action = NULL;
    stat_opts sto;
    const char *metrics_addr = NULL;
    long long metrics_interval = 0;
    if (strcmp(cmd, "create") == 0) {
        if (parse_create(argc - optind, argv + optind, &co) || check_create_name(q, &co))
            return EXIT_USAGE;
    } else if (strcmp(cmd, "stat") == 0) {
        if (parse_stat(argc - optind, argv + optind, &sto))
            return EXIT_USAGE;
    } else if (strcmp(cmd, "metrics") == 0) {
        if (parse_metrics(argc - optind, argv + optind, &metrics_addr, &metrics_interval))
            return EXIT_USAGE;
    } else if (strcmp(cmd, "submit") == 0) {
        if (parse_submit(argc - optind, argv + optind, &so))
            return EXIT_USAGE;
        /* A job of one partition alone would leave the others without. */
        if (strchr(q, '#'))
            return usage_error("submit: '%s' is a partition; submit to its queue (the name "
                               "before '#')", q);
    } else {
        for (; optind < argc; optind++) {
            const char *a = argv[optind];
            int info_like = !strcmp(cmd, "info") || !strcmp(cmd, "jobs");
            if (info_like && strcmp(a, "--json") == 0) {
                json = 1;
            } else if (!strcmp(cmd, "dead") && (!strcmp(a, "--requeue") || !strcmp(a, "--purge"))) {
                if (dead_action)
                    return usage_error("%s", "dead: --requeue and --purge exclude each other");
                dead_action = a + 2;
            } else {
                return usage_error("unexpected argument '%s'", a);
            }
        }
    }

    /* A manifest is read (and checked) before connecting: a bad line costs
     * no round trip and leaves nothing behind. */
    sluicei_shard *shards = NULL;
    size_t nshards = 0;
    if (strcmp(cmd, "submit") == 0) {
        sluice_err e = sluicei_manifest_parse(so.manifest, &shards, &nshards, err, sizeof err);
        if (e != SLUICE_OK) {
            fprintf(stderr, "sluice-ctl: %s\n", err);
            return EXIT_RUNTIME;
        }
    }

    sluicei_router *r = NULL;
    sluice_err e = sluicei_router_open(&r, url, 0, 0, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, "sluice-ctl: %s\n", err);
        sluicei_shards_free(shards, nshards);
        return e == SLUICE_ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
    }
    int live = (strcmp(cmd, "stat") == 0 && sto.watch) || strcmp(cmd, "metrics") == 0;
    ctl x = {.r = r, .q = q};
    /* One server: one attempt per command, as a plain connection; the
     * next command (the next refresh) connects again. Many: long enough
     * for a failover or a slot migration to finish. */
    x.retry_ms = sluicei_router_kind_of(r) == SLUICEI_ROUTER_SINGLE ? 0
                 : live ? RETRY_MS_LIVE : RETRY_MS;
    /* Connecting first makes a wrong address or password one clear line. */
    sluicei_conn *c = NULL;
    e = sluicei_router_conn(r, q, &c, err, sizeof err);
    int rc = EXIT_RUNTIME;
    if (e != SLUICE_OK)
        fprintf(stderr, "sluice-ctl: %s\n", err);
    else if (strcmp(cmd, "create") == 0)
        rc = ctl_set_partitions(&x, (int)co.partitions) ? EXIT_RUNTIME : cmd_create(&x, &co);
    else if (strcmp(cmd, "delete") == 0)
        rc = delete_discover(&x) ? EXIT_RUNTIME : cmd_delete(&x);
    else if ((rc = ctl_discover(&x)) != 0)
        ;
    else if (strcmp(cmd, "submit") == 0)
        rc = cmd_submit(&x, &so, shards, nshards);
    else if (strcmp(cmd, "dead") == 0)
        rc = cmd_dead(&x, dead_action);
    else if (strcmp(cmd, "reap") == 0)
        rc = cmd_reap(&x);
    else if (strcmp(cmd, "stat") == 0)
        rc = cmd_stat(&x, &sto);
    else if (strcmp(cmd, "metrics") == 0)
        rc = cmd_metrics(&x, metrics_addr, metrics_interval);
    else
        rc = cmd_info(&x, json, strcmp(cmd, "jobs") == 0);
    free(x.names);
    sluicei_router_close(r);
    sluicei_shards_free(shards, nshards);
    return rc;
}
