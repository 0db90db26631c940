/* What the files of sluice-ctl share: the queue a command works on and the
 * router that reaches its nodes (ctl.c), a queue's state read into plain
 * structs and the sums over a partitioned queue's partitions (qstate.c),
 * and each command's options and entry point (main.c dispatches). Not
 * installed; every name here is local to sluice-ctl. */
#ifndef SLUICE_CTL_H
#define SLUICE_CTL_H

#include "cli.h"
#include "cluster.h"
#include "conn.h"
#include "proto.h"
#include "zframe.h"
#include "json.h"
/* The manifest parser lives with the readers it checks paths against. */
#include "manifest.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The most epochs a job may have (submit --epochs). */
#define CTL_MAX_EPOCHS 1000000

/* Longest partition name: SLUICE_MAX_QUEUE_NAME and "#1023". */
#define PART_NAME_MAX (SLUICE_MAX_QUEUE_NAME + 8)

/* ---- the queue and its nodes (ctl.c) ------------------------------------ */

/* The queue a command works on, and the router that reaches its nodes. */
typedef struct ctl {
    sluicei_router *r;
    const char *q;                 /* the queue named on the command line */
    int partitions;                /* 0: a plain queue; else Q#0..Q#partitions-1 */
    char (*names)[PART_NAME_MAX];  /* partitions ? "Q#p" : [0] = "Q"; owned */
    int retry_ms;                  /* how long a command is sent again after a lost
                                      connection or a cluster redirect */
    int missing;                   /* set when the last qview_read() or ctl_discover()
                                      failed because the queue (or a partition of it)
                                      does not exist; cleared when one works */
} ctl;

/* The partitions of x (1 for a plain queue), and the queue name of
 * partition p ("Q#p"), or of the plain queue (p 0). */
int ctl_nparts(const ctl *x);
const char *ctl_pname(const ctl *x, int p);

/* Makes x a plain queue (partitions 0) or one of that many partitions.
 * Returns 0, or -1 when out of memory (printed). */
int ctl_set_partitions(ctl *x, int partitions);

/* Finds out whether x->q is plain or partitioned (again, after a failed
 * read: stat and metrics follow a queue deleted and created anew).
 * Returns 0, or SLUICEI_EXIT_RUNTIME (printed: missing queue, which sets
 * x->missing, Redis error). */
int ctl_discover(ctl *x);

/* Prints "sluice-ctl: WHAT: <error>[: DETAIL]"; returns SLUICEI_EXIT_RUNTIME. */
int ctl_runtime_error(const char *what, sluice_err e, const char *detail);

/* "queue 'Q' does not exist ...", or for a missing partition of a
 * partitioned queue, what that means. */
void ctl_print_noqueue(const ctl *x, const char *q);

/* The message of a script's error reply without its code word
 * ("JOBEXISTS the queue runs..." -> "the queue runs..."). */
const char *ctl_error_text(const redisReply *r, const char *code);

/* Runs script id on queue q (the node serving it) with any number of
 * arguments. A script's error reply is mapped to its code
 * (sluicei_reply_error_code) with *out still set; on SLUICE_OK *out is the
 * reply. *out, when set, belongs to the caller (freeReplyObject). */
sluice_err ctl_script_call(ctl *x, sluicei_script_id id, const char *q, size_t argc,
                           const char **argv, redisReply **out);

/* Prints one line naming the queue and what failed for a script that
 * returned e (*out: its error reply, or NULL; freed and set to NULL).
 * Returns SLUICEI_EXIT_RUNTIME. */
int ctl_script_failed(ctl *x, sluicei_script_id id, const char *q, sluice_err e,
                      redisReply **out, size_t argc);

/* Runs a script; on failure prints one line naming the queue and returns
 * non-zero. On success *out holds the reply (the caller frees it). */
int ctl_run_script(ctl *x, sluicei_script_id id, const char *q, size_t argc, const char **argv,
                   redisReply **out);

/* A command (at most 8 arguments) on the node serving queue q that must
 * work; on failure prints one line and returns NULL. The reply belongs to
 * the caller. */
redisReply *ctl_must(ctl *x, const char *q, int argc, const char **argv);

/* The value of a decimal string (0 when it is not one: the fields Redis
 * holds for sluice are written as integers). */
long long ctl_num(const char *s);

/* The value of an integer-like reply (integer, decimal string; else 0). */
long long ctl_reply_num(const redisReply *r);

/* "2024-05-01T12:00:00.123Z" for a time in ms since the Unix epoch. */
void ctl_iso_time(long long ms, char *out, size_t n);

/* ---- a queue's state (qstate.c) ----------------------------------------- */

/* The fields of a Redis hash, in the order HGETALL gave them (a merged
 * hash: in the order of first appearance). Names and values are owned. */
typedef struct ctl_field {
    char *name, *value;
} ctl_field;

typedef struct ctl_fields {
    ctl_field *f;
    size_t n;
} ctl_fields;

/* field's value, or NULL; its value as a number (0 when absent). */
const char *ctl_fields_get(const ctl_fields *h, const char *name);
long long ctl_fields_num(const ctl_fields *h, const char *name);
/* field's value, or dflt when absent. */
const char *ctl_fields_or(const ctl_fields *h, const char *name, const char *dflt);

typedef struct epoch_info {
    long long ready, pushed, acked, dropped, padded, failed_tasks, finished;
    long long dropped_records;  /* records of short last batches not pushed (drop_remainder) */
    int ended;
} epoch_info;

/* A producer or consumer of the queue. */
typedef struct peer {
    char *id;                   /* owned */
    long long seen_ms;          /* its last sign of life, on the server's clock */
    long long seen_ago_ms;
    char *extra;                /* producer: the task it holds; consumer: its rank;
                                   NULL: none; owned */
    long long pending;          /* consumer: batches it holds */
    ctl_fields stats;           /* its pstats:/cstats: hash */
} peer;

/* A failed task of the job. */
typedef struct failed_task {
    char *task;                 /* "epoch:shard"; owned */
    long long attempts;
    char *error;                /* its last error, or NULL; owned */
} failed_task;

/* The job hash's fields that ctl shows. */
typedef struct job_info {
    int present;                /* the queue has (had) a job */
    char *state, *seed;         /* NULL when absent; owned */
    long long epoch_open, batch_size, max_attempts, ntasks;
    long long max_crashes;      /* 20 when absent (a job older than the field) */
    long long shuffle_buffer;   /* 0 when absent */
    int drop_remainder;
} job_info;

/* Everything info, jobs, stat and metrics show, read from Redis (not
 * atomically: a snapshot of a moving queue, good enough for a human or a
 * dashboard). All of it owned; qinfo_free() frees it. */
typedef struct qinfo {
    const char *q;
    ctl_fields meta, stats;     /* the meta and stats hashes, every field */
    long long max_batches, max_bytes;
    job_info job;
    long long held, bytes, ready, pending, dead;
    long long retained, retained_bytes;   /* frames kept for checkpoints */
    long long waiting, claimed, done, ranks, epochs, lease_ms;
    long long server_ms;        /* the server's clock when read: what "seen" is against */
    epoch_info *ep;             /* [epochs] */
    failed_task *failed;
    size_t nfailed;
    ctl_fields towner, crank;   /* task -> producer; consumer -> rank */
    ctl_fields pgone, cgone;    /* pstats_gone, cstats_gone: the counters of the producers
                                   and consumers that left, added up; 'left': how many */
    peer *prod, *cons;
    size_t nprod, ncons;
} qinfo;

/* What info, jobs, stat and metrics show: the queue, and for a partitioned
 * one also each partition. */
typedef struct qview {
    qinfo all;                  /* a plain queue, or the sums over the partitions */
    int partitions;             /* 0: a plain queue */
    qinfo *part;                /* [partitions] */
    char (*node)[256];          /* [partitions]: the node serving each ("redis://h:p/0") */
} qview;

/* Reads the queue (every partition). A partitioned queue created anew
 * with another number of partitions is found again. Returns 0, or
 * SLUICEI_EXIT_RUNTIME (printed); qview_free(v) is due either way. */
int qview_read(ctl *x, qview *v);
void qview_free(qview *v);

/* Producers and consumers seen within the lease. */
size_t qstate_alive(const peer *ps, size_t n, long long lease_ms);

/* ---- the commands ------------------------------------------------------- */

/* Settings of a new queue (sluice-ctl create). */
typedef struct create_opts {
    uint64_t max_batches, max_bytes;
    uint64_t ranks;           /* --consumers N with --coordinated; 0: free */
    int coordinated;
    const char *remainder;    /* "drop" or "pad" */
    int remainder_given;      /* --remainder was on the command line */
    uint64_t lease_ms;        /* consumer lease */
    uint64_t max_deliveries;  /* deliveries before a batch is dead-lettered */
    uint64_t max_frame;       /* largest batch frame; 0: min(64 MiB, max_bytes) */
    uint64_t partitions;      /* --partitions P; 0: a plain queue */
    sluicei_zsetting compress; /* --compress; none by default */
} create_opts;

/* Reads create's flags (and checks the name q) before anything connects,
 * so usage errors come first. Returns 0 or SLUICEI_EXIT_USAGE (printed). */
int create_parse(const char *q, int argc, char **argv, create_opts *o);
int create_run(ctl *x, const create_opts *o);
/* Finds the queue (also one whose delete stopped half-way) and deletes it. */
int delete_run(ctl *x);

typedef struct submit_opts {
    const char *manifest;
    uint64_t epochs, batch_size, max_attempts, max_crashes, seed;
    int has_seed;
    uint64_t shuffle_buffer;  /* records per shuffle window; 0: none */
    int drop_remainder;
} submit_opts;

int submit_parse(int argc, char **argv, submit_opts *o);
int submit_run(ctl *x, const submit_opts *o, const sluicei_shard *shards, size_t n);

int info_run(ctl *x, int json, int job_only);
/* The parts of info --json that stat --json shows too. */
void info_json_hash(json_writer *w, const char *key, const ctl_fields *h);
void info_json_peers(json_writer *w, const char *key, const peer *ps, size_t n, int producers,
                     long long lease_ms);
void info_json_job(json_writer *w, const qinfo *in);
void info_json_partitions(json_writer *w, const qview *v);
int dead_run(ctl *x, const char *action);
/* checkpoints.c: the consumers' checkpoints; resuming one. */
int checkpoints_run(ctl *x, int json);

/* acl.c: the ACL SETUSER line (aclfile: the ACL file's "user" line) of a
 * least-privilege Redis user for role ("producer", "consumer", "admin") on
 * the queue; user NULL: "sluice-Q-ROLE". */
int acl_run(ctl *x, const char *role, const char *user, int aclfile);
int resume_run(ctl *x, const char *token);
int reap_run(ctl *x);

typedef struct stat_opts {
    int watch, json;
    int follow;               /* --watch goes on after the job finishes */
    long long interval_ms;
} stat_opts;

int stat_parse(int argc, char **argv, stat_opts *o);
int stat_run(ctl *x, const stat_opts *o);
/* Reads "--interval-ms N" or "--interval-ms=N" at argv[*i]: returns 1 with
 * *out set, 0 when argv[*i] is another flag, -1 on a usage error
 * (printed). Shared by stat and metrics. */
int stat_interval_flag(int argc, char **argv, int *i, long long *out);
#define STAT_INTERVAL_MS_DEFAULT 1000

int export_parse(int argc, char **argv, const char **addr, long long *interval_ms);
int export_run(ctl *x, const char *addr, long long interval_ms);

#endif
