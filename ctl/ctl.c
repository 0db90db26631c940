/* Where sluice-ctl's commands go: the queue named on the command line (a
 * plain queue Q, or the partitions Q#0..Q#P-1, each on its own node), the
 * router that reaches its nodes (cluster.h: one server, a list of servers
 * or a Redis Cluster), running a protocol script or a command there, and
 * the one-line errors when that fails. */
#include "ctl.h"
#include "num.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int ctl_nparts(const ctl *x)
{
    return x->partitions ? x->partitions : 1;
}

const char *ctl_pname(const ctl *x, int p)
{
    return x->names[p];
}

int ctl_set_partitions(ctl *x, int partitions)
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

int ctl_discover(ctl *x)
{
    int partitions = 0;
    char err[1024];
    sluice_err e = sluicei_queue_partitions(x->r, x->q, &partitions, err, sizeof err);
    x->missing = e == SLUICE_ERR_NOQUEUE;
    if (e == SLUICE_ERR_NOQUEUE) {
        fprintf(stderr, "sluice-ctl: queue '%s' does not exist (create it with: sluice-ctl create "
                "%s)\n", x->q, x->q);
        return SLUICEI_EXIT_RUNTIME;
    }
    if (e != SLUICE_OK) {
        fprintf(stderr, "sluice-ctl: %s\n", err);
        return SLUICEI_EXIT_RUNTIME;
    }
    if (x->names && partitions == x->partitions)
        return 0;
    return ctl_set_partitions(x, partitions) ? SLUICEI_EXIT_RUNTIME : 0;
}

int ctl_runtime_error(const char *what, sluice_err e, const char *detail)
{
    fprintf(stderr, "sluice-ctl: %s: %s%s%s\n", what, sluice_strerror(e), detail && *detail ? ": " : "",
            detail ? detail : "");
    return SLUICEI_EXIT_RUNTIME;
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

/* Through the router's loaded copy, or, for many arguments, EVAL of the
 * source. */
sluice_err ctl_script_call(ctl *x, sluicei_script_id id, const char *q, size_t argc,
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
    sluicei_key(key, q, sluicei_script_anchor(id, (int)argc, argv));
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

const char *ctl_error_text(const redisReply *r, const char *code)
{
    const char *s = r && r->type == REDIS_REPLY_ERROR ? strstr(r->str, code) : NULL;
    if (!s)
        return r && r->str ? r->str : "";
    s += strlen(code);
    return *s == ' ' ? s + 1 : s;
}

void ctl_print_noqueue(const ctl *x, const char *q)
{
    /* Without partition 0 the queue is gone (deleted since it was found). */
    if (x->partitions && strcmp(q, ctl_pname(x, 0)) == 0)
        q = x->q;
    if (x->partitions && strcmp(q, x->q) != 0)
        fprintf(stderr, "sluice-ctl: partition '%s' of queue '%s' does not exist: the queue is "
                "incomplete (sluice-ctl delete %s, then create it again)\n", q, x->q, x->q);
    else
        fprintf(stderr, "sluice-ctl: queue '%s' does not exist (create it with: sluice-ctl create "
                "%s)\n", q, q);
}

int ctl_script_failed(ctl *x, sluicei_script_id id, const char *q, sluice_err e,
                      redisReply **out, size_t argc)
{
    char what[PART_NAME_MAX + 32], detail[1024];
    snprintf(what, sizeof what, "queue '%s'", q);
    if (e == SLUICE_ERR_AUTH && *out) {
        sluicei_script_denied(detail, sizeof detail, id, 0, NULL, x->q, (*out)->str);
        fprintf(stderr, "sluice-ctl: %s: %s\n", what, detail);
    } else if (e == SLUICE_ERR_NOQUEUE) {
        ctl_print_noqueue(x, q);
    } else if (e == SLUICE_ERR_EXISTS && *out && strstr((*out)->str, "JOBEXISTS")) {
        fprintf(stderr, "sluice-ctl: queue '%s': %s\n", q, ctl_error_text(*out, "JOBEXISTS"));
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
        ctl_runtime_error(what, e, detail);
    }
    if (*out)
        freeReplyObject(*out);
    *out = NULL;
    return SLUICEI_EXIT_RUNTIME;
}

int ctl_run_script(ctl *x, sluicei_script_id id, const char *q, size_t argc, const char **argv,
                   redisReply **out)
{
    sluice_err e = ctl_script_call(x, id, q, argc, argv, out);
    return e == SLUICE_OK ? 0 : ctl_script_failed(x, id, q, e, out, argc);
}

redisReply *ctl_must(ctl *x, const char *q, int argc, const char **argv)
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

long long ctl_num(const char *s)
{
    int64_t v;
    return s && sluicei_parse_i64(s, INT64_MIN, INT64_MAX, &v) == 0 ? (long long)v : 0;
}

long long ctl_reply_num(const redisReply *r)
{
    if (!r)
        return 0;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return ctl_num(r->str);
    return 0;
}

void ctl_iso_time(long long ms, char *out, size_t n)
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
