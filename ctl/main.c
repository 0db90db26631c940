/* sluice-ctl: create, inspect and delete queues; submit jobs and watch
 * them; dead letters; reaping; a live view (stat) and a Prometheus
 * endpoint (metrics). This file: the help text, the global flags, and
 * which command runs; every command's flags are checked before anything
 * connects. The commands live in create.c, submit.c, info.c, stat.c and
 * export.c; ctl.c reaches the queue's nodes; qstate.c reads its state. */
#include "ctl.h"
#include "num.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: sluice-ctl [--redis URL] COMMAND [ARGS]\n"
    "\n"
    "Create, inspect and delete sluice queues; submit jobs to them.\n"
    "\n"
    "commands:\n"
    "  create Q --max-batches N --max-bytes B [--consumers N --coordinated\n"
    "         [--remainder drop|pad]] [--lease-ms MS] [--max-deliveries K]\n"
    "         [--max-frame-bytes F] [--partitions P] [--compress C]\n"
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
    "                       (default 3; never for a consumer with checkpoints,\n"
    "                       which redoes them on resume: it sees them again,\n"
    "                       flagged); --max-frame-bytes: the largest batch frame\n"
    "                       the queue admits, refused at the producer (default\n"
    "                       64M, or B if smaller, counted before compression).\n"
    "                       --compress none|lz4|zstd[:LEVEL]: producers compress\n"
    "                       each frame (zstd LEVEL 1..19, default 3) and store it\n"
    "                       compressed when that is smaller; consumers read both\n"
    "                       (default none).\n"
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
    "  stat Q [--watch [--follow] [--interval-ms MS]] [--json]\n"
    "                       a live view: depth and bytes against the budgets as\n"
    "                       bars, push and ack rates, the producers and consumers\n"
    "                       (when last seen; their counters, with the time blocked\n"
    "                       by backpressure and in next()), epoch progress,\n"
    "                       failed tasks, dead letters; a partitioned queue: the\n"
    "                       sums and a line per partition. --watch: refresh every\n"
    "                       MS (default 1000) in place on a terminal; else a\n"
    "                       snapshot after a blank line only when its figures\n"
    "                       changed (--json: an object every MS). Ends after the\n"
    "                       snapshot showing the job finished (exit 0), or when\n"
    "                       the queue is deleted (exit 1); --follow: go on until\n"
    "                       Ctrl-C, also across a delete. --json: one JSON object\n"
    "                       per snapshot\n"
    "  metrics Q --addr HOST:PORT [--interval-ms MS]\n"
    "                       serve the queue's figures (depth, budgets, counters,\n"
    "                       epochs, tasks, every producer and consumer) in\n"
    "                       Prometheus text on http://HOST:PORT/metrics, 200 \"ok\"\n"
    "                       on /healthz, and on /readyz 200 while the last read\n"
    "                       worked (within 2 x MS + 2 s), else 503 with the\n"
    "                       reason; read from Redis every MS (default\n"
    "                       1000). A partitioned queue: the sums, and the\n"
    "                       sluice_partition_* gauges per partition. HOST:PORT as\n"
    "                       for sluice-producer --metrics-addr (:PORT is\n"
    "                       loopback). Runs until SIGINT or SIGTERM (exit 0)\n"
    "  submit Q --manifest FILE --epochs E --batch-size N [--shuffle-seed S]\n"
    "         [--shuffle-buffer R] [--drop-remainder] [--max-attempts K]\n"
    "         [--max-crashes C]\n"
    "                       turn the manifest into a job: one task per shard and\n"
    "                       epoch, E epochs, N records per batch. With a seed each\n"
    "                       epoch's task order is a shuffle (the same seed gives the\n"
    "                       same orders; epochs differ); without one, manifest order.\n"
    "                       --shuffle-buffer R (0..1048576, default 0: file order):\n"
    "                       producers shuffle each task's records within windows of\n"
    "                       R records (each held in the producer's memory), by the\n"
    "                       seed (0 without one), epoch, shard and window: the same\n"
    "                       batches whoever produces a task, another order each\n"
    "                       epoch. --drop-remainder: a task's short last batch is not\n"
    "                       pushed; its records are counted per epoch (jobs:\n"
    "                       dropped_records).\n"
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
    "  checkpoints Q [--json]\n"
    "                       the checkpoints consumers took (per coordinated rank or\n"
    "                       free consumer): their numbers, epochs, times and tokens,\n"
    "                       and what Redis keeps to resume them\n"
    "  resume Q TOKEN       give back what the checkpoint's rank (or consumer)\n"
    "                       acknowledged after it, as a consumer opened with the\n"
    "                       token would; refused while a consumer of it is alive\n"
    "  acl Q --role producer|consumer|admin [--user NAME] [--partitions P]\n"
    "         [--aclfile]\n"
    "                       print the ACL SETUSER line of a least-privilege Redis\n"
    "                       user for that role on queue Q (every partition):\n"
    "                       admin creates, submits, deletes, resumes; producer\n"
    "                       claims and renews tasks, pushes; consumer takes,\n"
    "                       acknowledges, checkpoints. NAME defaults to\n"
    "                       sluice-Q-ROLE; no password is set (add one: ACL\n"
    "                       SETUSER NAME >password). Reads Q's partitions from\n"
    "                       Redis, or takes them from --partitions (1: a plain\n"
    "                       queue; then no Redis is needed). --aclfile: the\n"
    "                       line for an ACL file (user NAME ...)\n"
    "  script NAME          print the Lua source of a protocol script\n"
    "                       (create delete push take claim ack requeue reap beat\n"
    "                       dead deadadmin restore submit task_claim task_renew\n"
    "                       task_done task_fail task_check checkpoint)\n"
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
    "                       $SLUICE_REDIS_PASSWORD instead of the URL, or from the\n"
    "                       file $SLUICE_REDIS_PASSWORD_FILE names (its first\n"
    "                       line). TLS: rediss:// for redis://, rediss+cluster://\n"
    "                       for redis+cluster://; the server's certificate is\n"
    "                       checked against $SLUICE_TLS_CA_FILE (else the\n"
    "                       system's CAs) and the host (or $SLUICE_TLS_SERVER_NAME);\n"
    "                       a client certificate: $SLUICE_TLS_CERT_FILE and\n"
    "                       $SLUICE_TLS_KEY_FILE.\n"
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

#define COMMANDS "create, delete, info, jobs, stat, metrics, submit, dead, reap, checkpoints, " \
                 "resume, acl, script"

/* How long a command is sent again after a lost connection or a redirect
 * (a list of servers, a cluster): long enough for a failover. A live view
 * and the metrics thread rather show the failure and try again at the
 * next refresh. */
#define RETRY_MS 30000
#define RETRY_MS_LIVE 2000

int main(int argc, char **argv)
{
    sluicei_cli_init("sluice-ctl");
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
    while ((ch = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
        switch (ch) {
        case 'r': url = optarg; break;
        case 'h': fputs(usage_text, stdout); return 0;
        case 'V': sluicei_cli_version("--version", stdout); return 0;
        default:
            if (optopt)
                return sluicei_usage_error("option '-%c' needs a value or is unknown", optopt);
            return sluicei_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return sluicei_usage_error("%s", "no command given (" COMMANDS ")");
    const char *cmd = argv[optind++];

    if (strcmp(cmd, "script") == 0) {
        if (optind >= argc)
            return sluicei_usage_error("%s", "script: which one? (see sluice-ctl --help)");
        sluicei_script_id id = sluicei_script_by_name(argv[optind]);
        if (id == SLUICEI_SCRIPT_COUNT)
            return sluicei_usage_error("script: unknown script '%s'", argv[optind]);
        if (optind + 1 < argc)
            return sluicei_usage_error("script: unexpected argument '%s' (one script at a "
                                       "time)", argv[optind + 1]);
        fputs(sluicei_script_source(id), stdout);
        return 0;
    }

    static const char *const known[] = {"create", "delete", "info", "jobs", "stat",
                                        "metrics", "submit", "dead", "reap",
                                        "checkpoints", "resume", "acl"};
    size_t ki = 0;
    while (ki < sizeof known / sizeof known[0] && strcmp(cmd, known[ki]) != 0)
        ki++;
    if (ki == sizeof known / sizeof known[0])
        return sluicei_usage_error("unknown command '%s' (" COMMANDS ")", cmd);
    if (optind >= argc)
        return sluicei_usage_error("%s: which queue?", cmd);
    const char *q = argv[optind++];
    char err[1024];
    if (sluicei_queue_name_check(q, err, sizeof err) != SLUICE_OK)
        return sluicei_usage_error("%s", err);

    /* Every flag is checked before anything connects. */
    create_opts co;
    submit_opts so;
    int json = 0;
    const char *dead_action = NULL;
    const char *resume_token = NULL;
    const char *acl_role = NULL, *acl_user = NULL;
    int64_t acl_parts = -1;
    int acl_file = 0;
    stat_opts sto;
    const char *metrics_addr = NULL;
    long long metrics_interval = 0;
    if (strcmp(cmd, "create") == 0) {
        if (create_parse(q, argc - optind, argv + optind, &co))
            return SLUICEI_EXIT_USAGE;
    } else if (strcmp(cmd, "stat") == 0) {
        if (stat_parse(argc - optind, argv + optind, &sto))
            return SLUICEI_EXIT_USAGE;
    } else if (strcmp(cmd, "metrics") == 0) {
        if (export_parse(argc - optind, argv + optind, &metrics_addr, &metrics_interval))
            return SLUICEI_EXIT_USAGE;
    } else if (strcmp(cmd, "submit") == 0) {
        if (submit_parse(argc - optind, argv + optind, &so))
            return SLUICEI_EXIT_USAGE;
        /* A job of one partition alone would leave the others without. */
        if (strchr(q, '#'))
            return sluicei_usage_error("submit: '%s' is a partition; submit to its queue (the "
                                       "name before '#')", q);
    } else {
        for (; optind < argc; optind++) {
            const char *a = argv[optind];
            int info_like = !strcmp(cmd, "info") || !strcmp(cmd, "jobs") ||
                            !strcmp(cmd, "checkpoints");
            if (info_like && strcmp(a, "--json") == 0) {
                json = 1;
            } else if (!strcmp(cmd, "resume") && !resume_token && a[0] != '-') {
                resume_token = a;
            } else if (!strcmp(cmd, "acl") && (!strcmp(a, "--role") || !strcmp(a, "--user") ||
                                                !strcmp(a, "--partitions"))) {
                if (optind + 1 >= argc)
                    return sluicei_usage_error("acl: %s needs a value", a);
                const char *v = argv[++optind];
                if (!strcmp(a, "--role")) {
                    if (strcmp(v, "producer") && strcmp(v, "consumer") && strcmp(v, "admin"))
                        return sluicei_usage_error("acl: --role '%s': one of producer, consumer, "
                                                   "admin", v);
                    acl_role = v;
                } else if (!strcmp(a, "--user")) {
                    if (!v[0] || strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789_.-@#:") != strlen(v) || strlen(v) > 128)
                        return sluicei_usage_error("acl: --user '%s': 1-128 characters of A-Z "
                                                   "a-z 0-9 _ . - @ # :", v);
                    acl_user = v;
                } else if (sluicei_parse_i64(v, 1, 1024, &acl_parts) != 0) {
                    return sluicei_usage_error("acl: --partitions '%s': a number from 1 (a plain "
                                               "queue) to 1024", v);
                }
            } else if (!strcmp(cmd, "acl") && !strcmp(a, "--aclfile")) {
                acl_file = 1;
            } else if (!strcmp(cmd, "dead") && (!strcmp(a, "--requeue") || !strcmp(a, "--purge"))) {
                if (dead_action)
                    return sluicei_usage_error("%s", "dead: --requeue and --purge exclude each "
                                               "other");
                dead_action = a + 2;
            } else {
                return sluicei_usage_error("unexpected argument '%s'", a);
            }
        }
    }

    if (strcmp(cmd, "acl") == 0 && !acl_role)
        return sluicei_usage_error("%s", "acl: which role? (--role producer, consumer or admin)");
    /* Given the partitions, acl needs no Redis. */
    if (strcmp(cmd, "acl") == 0 && acl_parts > 0) {
        ctl x = {.q = q};
        int rc = ctl_set_partitions(&x, acl_parts > 1 ? (int)acl_parts : 0)
                     ? SLUICEI_EXIT_RUNTIME
                     : acl_run(&x, acl_role, acl_user, acl_file);
        free(x.names);
        return rc;
    }
    if (strcmp(cmd, "resume") == 0 && !resume_token)
        return sluicei_usage_error("%s", "resume: which checkpoint? (its token: sluice-ctl "
                                   "checkpoints Q lists them)");

    /* A manifest is read (and checked) before connecting: a bad line costs
     * no round trip and leaves nothing behind. */
    sluicei_shard *shards = NULL;
    size_t nshards = 0;
    if (strcmp(cmd, "submit") == 0) {
        sluice_err e = sluicei_manifest_parse(so.manifest, &shards, &nshards, err, sizeof err);
        if (e != SLUICE_OK) {
            fprintf(stderr, "sluice-ctl: %s\n", err);
            return SLUICEI_EXIT_RUNTIME;
        }
    }

    sluicei_router *r = NULL;
    sluice_err e = sluicei_router_open(&r, url, 0, 0, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, "sluice-ctl: %s\n", err);
        sluicei_shards_free(shards, nshards);
        return e == SLUICE_ERR_INVALID ? SLUICEI_EXIT_USAGE : SLUICEI_EXIT_RUNTIME;
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
    int rc = SLUICEI_EXIT_RUNTIME;
    if (e != SLUICE_OK)
        fprintf(stderr, "sluice-ctl: %s\n", err);
    else if (strcmp(cmd, "create") == 0)
        rc = ctl_set_partitions(&x, (int)co.partitions) ? SLUICEI_EXIT_RUNTIME
                                                        : create_run(&x, &co);
    else if (strcmp(cmd, "delete") == 0)
        rc = delete_run(&x);
    else if ((rc = ctl_discover(&x)) != 0)
        ;
    else if (strcmp(cmd, "submit") == 0)
        rc = submit_run(&x, &so, shards, nshards);
    else if (strcmp(cmd, "dead") == 0)
        rc = dead_run(&x, dead_action);
    else if (strcmp(cmd, "reap") == 0)
        rc = reap_run(&x);
    else if (strcmp(cmd, "checkpoints") == 0)
        rc = checkpoints_run(&x, json);
    else if (strcmp(cmd, "resume") == 0)
        rc = resume_run(&x, resume_token);
    else if (strcmp(cmd, "acl") == 0)
        rc = acl_run(&x, acl_role, acl_user, acl_file);
    else if (strcmp(cmd, "stat") == 0)
        rc = stat_run(&x, &sto);
    else if (strcmp(cmd, "metrics") == 0)
        rc = export_run(&x, metrics_addr, metrics_interval);
    else
        rc = info_run(&x, json, strcmp(cmd, "jobs") == 0);
    free(x.names);
    sluicei_router_close(r);
    sluicei_shards_free(shards, nshards);
    return rc;
}
