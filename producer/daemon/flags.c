/* sluice-producer's command line: the --help text and the parsing of the
 * flags into a config (daemon.h), every value checked before anything
 * connects. */
#include "daemon.h"

#include "child.h"
#include "cli.h"
#include "metrics.h"
#include "num.h"
#include "proto.h"
#include "wire.h"

#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " --queue Q --batch-size N [options] FILE...     (files mode)\n"
            "       " PROG " --queue Q [options]                            (job mode)\n"
            "\n"
            "Files mode: reads every FILE in order, groups its records into batches of N\n"
            "records (a file's last batch may be shorter; a batch never spans two files)\n"
            "and pushes them into queue Q, waiting while the queue is at its budget.\n"
            "\n"
            "Job mode (no FILE): works on the job submitted to Q (sluice-ctl submit). It\n"
            "claims a task (one manifest shard of one epoch) under a lease, reads the\n"
            "task's records with the manifest's reader, pushes them in batches of the\n"
            "job's batch size (a task's last batch may be shorter), marks the task done\n"
            "and claims the next, until the job is finished. Any number of producers may\n"
            "work on one job and may be started and stopped at any time: a producer that\n"
            "dies loses its task to another once its lease expires (no failure of the\n"
            "task), and batch ids (epoch, task, seq) are deterministic, so the redone task\n"
            "adds no duplicate. A task whose reader or --exec command fails is retried\n"
            "(by any producer) up to the job's --max-attempts, then recorded as failed\n"
            "(sluice-ctl info); the consumers are told at the end of its epoch. Tasks are\n"
            "claimed lowest epoch first; a producer blocked on a full queue with a later\n"
            "epoch's task while a task of an earlier epoch waits hands its task back with\n"
            "its resume point and takes that one.\n"
            "\n"
            "Partitioned queues (sluice-ctl create Q --partitions P): every batch of a task\n"
            "goes to the task's partition. A claim prefers partitions below their budget.\n"
            "When the task's partition is at its budget while another partition has room\n"
            "and waiting tasks, the producer hands the task back with its resume point\n"
            "(whoever claims it again skips the batches stored already) and claims the\n"
            "next. Files mode: each FILE goes to the next partition in turn.\n"
            "\n"
            "  --redis URL        redis://[user[:password]@]host[:port][/db] or\n"
            "                     unix:///path/to/redis.sock[?db=N]; a Redis Cluster:\n"
            "                     redis+cluster://[user[:password]@]host:port[,host:port...];\n"
            "                     independent servers: redis://a:1,redis://b:2 (partition p\n"
            "                     on server p mod n); ?wait=N: every push waits for N\n"
            "                     replicas.\n"
            "                     Default: $SLUICE_REDIS_URL, else " DEFAULT_URL ".\n"
            "                     A password may come from $SLUICE_REDIS_PASSWORD instead of\n"
            "                     the URL, or from the file $SLUICE_REDIS_PASSWORD_FILE\n"
            "                     names (its first line).\n"
            "                     TLS: rediss://, rediss+cluster:// (the server's\n"
            "                     certificate checked against $SLUICE_TLS_CA_FILE, else\n"
            "                     the system's CAs; $SLUICE_TLS_SERVER_NAME,\n"
            "                     $SLUICE_TLS_CERT_FILE, $SLUICE_TLS_KEY_FILE: see\n"
            "                     sluice-ctl --help).\n"
            "  --queue Q          the queue to push into (create it with: sluice-ctl create Q)\n"
            "  --data-root DIR    a folder input may be read from; once per folder. Default:\n"
            "                     $SLUICE_DATA_ROOTS (folders separated by ':'). Job mode\n"
            "                     needs one: the paths of a job come from Redis, and one\n"
            "                     that is not under a data root (symbolic links followed)\n"
            "                     is refused and fails its task. Files mode without one:\n"
            "                     the FILEs may be anywhere. Either way only regular files\n"
            "                     are read (and folders, by the files format): never a\n"
            "                     FIFO, a device, a socket or a file of /proc or /sys.\n"
            "  --format F         files mode: input format (default tfrecord):\n");
    const sluicei_reader_format *fmt;
    for (size_t i = 0; (fmt = sluicei_reader_format_at(i)) != NULL; i++)
        fprintf(f, "                       %-9s %s\n", fmt->name, fmt->summary);
    fprintf(f,
            "                     (job mode: the manifest names the reader of each shard)\n"
            "  --batch-size N     files mode: records per batch, 1..%d (job mode: the\n"
            "                     job's batch size, set by sluice-ctl submit)\n"
            "  --exec 'CMD'       read records from the stdout of a command instead of a\n"
            "                     reader: /bin/sh -c CMD, run once per file (files mode) or\n"
            "                     per task (job mode), with {path} replaced by the paths\n"
            "                     (shell-quoted), {start} and {end} by the record range\n"
            "                     ({end} empty: to the end); the command applies the range.\n"
            "                     A non-zero exit fails the file or task, with the tail of\n"
            "                     its stderr as the error. The paths are checked against\n"
            "                     the data roots first (job mode; files mode with\n"
            "                     --data-root) and given resolved. The command's\n"
            "                     environment lacks every SLUICE_* variable and\n"
            "                     REDISCLI_AUTH. It runs in a process group of its own,\n"
            "                     which a stop ends: SIGTERM, then SIGKILL after %d s.\n"
            "  --exec-format F    what CMD writes: records (default: each record a 4-byte\n"
            "                     little-endian length, then its bytes) or msgpack (whole\n"
            "                     batch frames, docs/PROTOCOL.md; their rows are rebatched)\n"
            "  --transform LIB[:ARG]\n"
            "                     pass every batch through a C plugin (sluice/transform.h)\n"
            "                     loaded from LIB (give a path with a '/', e.g. ./libx.so);\n"
            "                     ARG goes to its init. A plugin error fails the task.\n"
            "  --lease-ms MS      job mode: a task's lease, %d..%d (default %d), on the\n"
            "                     Redis server's clock. The producer renews it every MS/3,\n"
            "                     also while it waits for room; a producer that stops\n"
            "                     renewing (killed, frozen) loses the task to another\n"
            "                     producer once MS have passed.\n"
            "  --follow           job mode: when the job is finished (or there is none),\n"
            "                     wait for the next one instead of exiting\n"
            "  --id ID            producer id shown by sluice-ctl info (default:\n"
            "                     <hostname>-<pid>-<random>)\n"
            "  --inflight K       pushes pipelined before waiting for replies, 1..%d\n"
            "                     (default: as many as fit a window of bytes that grows\n"
            "                     from 1 MiB to 32 MiB to cover the round trips to Redis)\n"
            "  --summary          at the end print one line to stdout:\n"
            "                     records=R batches=B bytes=N checksum=<16 hex digits>\n"
            "                     (job mode adds tasks=T: the tasks this producer completed;\n"
            "                     the totals count those tasks only. bytes: payload bytes\n"
            "                     pushed; checksum: sum mod 2^64 of the FNV-1a 64 hash of\n"
            "                     every record pushed, or of every tensor's data buffer)\n"
            "  --quiet            no progress, no per-task lines, no final report, no notes\n"
            "                     of long waits (room, a task) on stderr\n"
            "  --metrics-addr HOST:PORT\n"
            "                     serve Prometheus metrics on http://HOST:PORT/metrics\n"
            "                     (batches and bytes pushed, seconds blocked by\n"
            "                     backpressure, tasks done and failed, reconnects, the\n"
            "                     queue's depth), 200 \"ok\" on /healthz while it serves,\n"
            "                     and on /readyz 200 while Redis answers and the queue\n"
            "                     exists, else 503 with the reason; e.g.\n"
            "                     :9100 or 127.0.0.1:9100 (loopback), 0.0.0.0:9100 (every\n"
            "                     address), [::1]:9100. At most 32 clients at once, 10 s\n"
            "                     each. docs/OBSERVE.md lists the metrics.\n"
            "  --help             this text\n"
            "  --version          show the version\n"
            "\n"
            "Files mode: a corrupt or truncated file stops the run: the batches before the\n"
            "damage stay pushed, the partly filled batch is not, and the error names the\n"
            "file and byte offset. Job mode: it fails the task instead, and the producer\n"
            "goes on with the next one. A path the data roots refuse is handled the same\n"
            "way. A lost Redis connection is regained and nothing is lost.\n"
            "\n"
            "Signals: on SIGINT or SIGTERM the producer stops reading and waits for the\n"
            "pushes in flight (not for room in a full queue). Files mode: one line says\n"
            "how many batches are stored (confirmed by Redis), not stored (not sent, or\n"
            "refused) and sent without an answer (stored or not: unknown); exits 130\n"
            "(SIGINT) or 143 (SIGTERM), or 0 if all input had been pushed already. Job\n"
            "mode: hands its task back untried (another producer does it; the attempt is\n"
            "not counted) and exits 0. Reconnecting then, it tries once more at once;\n"
            "with Redis still out of reach it exits 1 (the task comes back through its\n"
            "lease). An --exec command's process group gets SIGTERM at the signal and\n"
            "SIGKILL %d s later if it still runs (job mode: its task is handed back\n"
            "first). A second signal sends SIGKILL to the group and exits at once\n"
            "(128 + signal).\n"
            "\n"
            "Exit status: 0 success (job mode: the job is finished or the queue has none,\n"
            "or a clean shutdown on a signal), 1 runtime error, 2 usage error, 130/143\n"
            "interrupted (files mode).\n"
            "\n"
            "examples:\n"
            "  sluice-ctl create train --max-batches 64 --max-bytes 256M\n"
            "  " PROG " --redis redis://127.0.0.1:6379 --queue train --format tfrecord \\\n"
            "      --batch-size 64 --summary data/train-*.tfrecord\n"
            "\n"
            "  sluice-ctl submit train --manifest train.manifest --epochs 10 --batch-size 64\n"
            "  " PROG " --queue train --data-root /data &    # as many as it takes\n"
            "  " PROG " --queue train --data-root /data \\\n"
            "      --exec 'python3 decode.py {path} {start} {end}'\n",
            MAX_BATCH_SIZE, SLUICEI_CHILD_GRACE_MS / 1000, SLUICEI_MIN_LEASE_MS, LEASE_MS_MAX,
            SLUICE_LEASE_MS_DEFAULT, MAX_INFLIGHT, SLUICEI_CHILD_GRACE_MS / 1000);
}

/* Parses argv into cf (daemon.h). */
/* Splits $SLUICE_DATA_ROOTS into cf->roots (a new array). Returns 0 or
 * SLUICEI_EXIT_USAGE. */
static int env_roots_split(const char *env, config *cf)
{
    size_t n = 1;
    for (const char *p = env; *p; p++)
        n += *p == ':';
    const char **v = realloc(cf->roots, n * sizeof *v);
    if (!v || !(cf->roots_env = strdup(env))) {
        if (v)
            cf->roots = v;
        fprintf(stderr, PROG ": out of memory\n");
        return SLUICEI_EXIT_RUNTIME;
    }
    cf->roots = v;
    cf->roots_from_env = 1;
    for (char *p = cf->roots_env, *colon; p; p = colon ? colon + 1 : NULL) {
        if ((colon = strchr(p, ':')) != NULL)
            *colon = '\0';
        /* An empty entry means no folder, not the working one. */
        if (!*p)
            return sluicei_usage_error("SLUICE_DATA_ROOTS '%s' has an empty entry: give "
                                       "folders separated by ':'", env);
        cf->roots[cf->nroots++] = p;
    }
    return 0;
}

int flags_parse(int argc, char **argv, const char *env_roots, config *cf)
{
    int only_files = 0, format_given = 0;
    const char *exec_format = NULL;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_files || a[0] != '-' || a[1] == '\0') {
            cf->files[cf->nfiles++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_files = 1;
            continue;
        }
        if (sluicei_flag_is(a, "--help", "-h")) {
            usage(stdout);
            return -1;
        }
        if (sluicei_cli_version(a, stdout))
            return -1;
        if (sluicei_flag_is(a, "--summary", NULL)) {
            cf->summary = 1;
            continue;
        }
        if (sluicei_flag_is(a, "--quiet", "-q")) {
            cf->quiet = 1;
            continue;
        }
        if (sluicei_flag_is(a, "--follow", NULL)) {
            cf->follow = 1;
            continue;
        }
        /* Flags with a value: "--flag value" or "--flag=value". */
        static const char *const valued[] = {"--redis",     "--queue",     "--format",
                                             "--batch-size", "--inflight", "--lease-ms",
                                             "--exec",      "--exec-format", "--transform",
                                             "--id",        "--metrics-addr", "--data-root"};
        const char *val = NULL, *name = NULL;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0] && !name; k++) {
            int got = sluicei_flag_value(argc, argv, &i, valued[k], &val);
            if (got < 0)
                return SLUICEI_EXIT_USAGE;
            if (got)
                name = valued[k];
        }
        if (!name)
            return sluicei_usage_error("unknown flag '%.64s'", a);
        if (strcmp(name, "--redis") == 0) {
            cf->url = val;
        } else if (strcmp(name, "--queue") == 0) {
            cf->queue = val;
        } else if (strcmp(name, "--format") == 0) {
            cf->format = val;
            format_given = 1;
        } else if (strcmp(name, "--batch-size") == 0) {
            if (sluicei_parse_i64(val, 1, MAX_BATCH_SIZE, &cf->batch_size) != 0)
                return sluicei_usage_error("--batch-size '%s' is not a number in 1..%d", val,
                                           MAX_BATCH_SIZE);
        } else if (strcmp(name, "--inflight") == 0) {
            if (sluicei_parse_i64(val, 1, MAX_INFLIGHT, &cf->inflight) != 0)
                return sluicei_usage_error("--inflight '%s' is not a number in 1..%d", val,
                                           MAX_INFLIGHT);
        } else if (strcmp(name, "--lease-ms") == 0) {
            if (sluicei_parse_i64(val, SLUICEI_MIN_LEASE_MS, LEASE_MS_MAX, &cf->lease_ms) != 0)
                return sluicei_usage_error("--lease-ms '%s' is not a number in %d..%d", val,
                                           SLUICEI_MIN_LEASE_MS, LEASE_MS_MAX);
        } else if (strcmp(name, "--exec") == 0) {
            if (!*val)
                return sluicei_usage_error("--exec needs a command");
            cf->exec_cmd = val;
        } else if (strcmp(name, "--exec-format") == 0) {
            exec_format = val;
            if (strcmp(val, "records") == 0)
                cf->exec_mode = SLUICEI_EXEC_FRAMED;
            else if (strcmp(val, "msgpack") == 0)
                cf->exec_mode = SLUICEI_EXEC_MSGPACK;
            else
                return sluicei_usage_error("--exec-format '%s' is not 'records' or 'msgpack'",
                                           val);
        } else if (strcmp(name, "--transform") == 0) {
            if (!*val)
                return sluicei_usage_error("--transform needs a library path");
            cf->transform = val;
        } else if (strcmp(name, "--id") == 0) {
            if (!*val || strlen(val) > SLUICE_MAX_PRODUCER_ID)
                return sluicei_usage_error("--id must be 1 to %d bytes", SLUICE_MAX_PRODUCER_ID);
            cf->producer_id = val;
        } else if (strcmp(name, "--data-root") == 0) {
            if (!*val)
                return sluicei_usage_error("--data-root needs a folder");
            cf->roots[cf->nroots++] = val;
        } else if (strcmp(name, "--metrics-addr") == 0) {
            char err[512];
            if (sluicei_metrics_addr_check("--metrics-addr", val, err, sizeof err) != SLUICE_OK)
                return sluicei_usage_error("%s", err);
            cf->metrics_addr = val;
        }
    }

    int job = cf->nfiles == 0;
    if (!cf->queue)
        return sluicei_usage_error("--queue is required");
    if (cf->nroots == 0 && env_roots && *env_roots) {
        int rc = env_roots_split(env_roots, cf);
        if (rc != 0)
            return rc;
    }
    if (exec_format && !cf->exec_cmd)
        return sluicei_usage_error("--exec-format goes with --exec");
    if (job) {
        if (cf->batch_size)
            return sluicei_usage_error("--batch-size is for files mode; in job mode (no FILE) "
                                       "the job's batch size applies (sluice-ctl submit "
                                       "--batch-size)");
        if (format_given)
            return sluicei_usage_error("--format is for files mode; in job mode (no FILE) the "
                                       "manifest names each shard's reader");
        /* The paths of a job come from whoever can write to Redis. */
        if (cf->nroots == 0)
            return sluicei_usage_error("job mode (no FILE) needs --data-root DIR, or "
                                       "SLUICE_DATA_ROOTS=DIR[:DIR...]: the folders the job's "
                                       "paths may be in");
        if (!cf->lease_ms)
            cf->lease_ms = SLUICE_LEASE_MS_DEFAULT;
        return 0;
    }
    if (cf->lease_ms || cf->follow)
        return sluicei_usage_error("%s is for job mode (no FILE given)",
                                   cf->follow ? "--follow" : "--lease-ms");
    if (cf->batch_size == 0)
        return sluicei_usage_error("--batch-size is required with FILEs (or give no FILE for "
                                   "job mode)");
    if (cf->exec_cmd) {
        if (format_given)
            return sluicei_usage_error("--format and --exec exclude each other (the command "
                                       "writes the records)");
        return 0;
    }
    char err[256];
    if (sluicei_reader_check(cf->format, 0, NULL, err, sizeof err) != SLUICE_OK)
        return sluicei_usage_error("--format: %s", err);
    if (sluicei_reader_check(cf->format, (size_t)cf->nfiles, NULL, err, sizeof err) != SLUICE_OK)
        return sluicei_usage_error("%s", err);
    return 0;
}
