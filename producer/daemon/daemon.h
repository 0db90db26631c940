/* What the files of sluice-producer share: its limits and defaults, the
 * parsed flags, the state of a run, and the functions one file calls in
 * another. Internal to producer/daemon.
 *
 *   main.c     signals, start-up and shutdown, the final report line
 *   flags.c    --help and the parsing of the command line
 *   produce.c  reading an input into batches and pushing them; progress
 *   files.c    files mode          job.c      job mode
 *   metrics.c  the --metrics-addr endpoint */
#ifndef SLUICE_DAEMON_H
#define SLUICE_DAEMON_H

#include <sluice/producer.h>

#include "batcher.h"
#include "reader.h"
#include "roots.h"
#include "transform.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#define PROG "sluice-producer"
#define DEFAULT_URL "redis://127.0.0.1:6379"
#define MAX_BATCH_SIZE 1000000
#define MAX_INFLIGHT 1024
#define LEASE_MS_MAX 86400000
/* While reading between pushes takes this long, flush to keep the task's
 * lease and the heartbeat going (the API does both inside a flush). */
#define KEEPALIVE_MS 1000
/* --follow: pause between claims while the queue has no job to work on. */
#define FOLLOW_POLL_MS 1000
/* --metrics-addr: how often the queue's depth is read from Redis, and the
 * timeouts of that connection (short: closing waits for a read under way). */
#define METRICS_REFRESH_MS 1000
#define METRICS_REDIS_TIMEOUT_MS 2000
/* /readyz: 503 once no refresh has read the queue for this long (two
 * refreshes, and the time one may take). */
#define METRICS_READY_MAX_AGE_MS (2 * METRICS_REFRESH_MS + METRICS_REDIS_TIMEOUT_MS)

/* Set by the first SIGINT or SIGTERM (main.c): stop at the next record
 * and shut down cleanly. daemon_stop_signal says which. */
extern volatile sig_atomic_t daemon_stop_flag;
extern volatile sig_atomic_t daemon_stop_signal;

typedef struct config {
    const char *url, *queue, *format, *exec_cmd, *transform, *producer_id, *metrics_addr;
    sluicei_exec_mode exec_mode;
    int64_t batch_size, inflight, lease_ms;
    int summary, quiet, follow;
    char **files;
    int nfiles;
    /* The data roots: the --data-root values, else $SLUICE_DATA_ROOTS
     * split at ':' (roots_env is that copy, and roots_from_env says so).
     * roots is allocated, and so is roots_env. */
    const char **roots;
    int nroots;
    char *roots_env;
    int roots_from_env;
} config;

/* What was pushed: of a file, of a task, of the whole run. sum (the
 * checksum of --summary) is only computed with --summary. */
typedef struct counts {
    uint64_t batches, records, bytes, sum;
} counts;

typedef struct pmetrics pmetrics;   /* metrics.c */

typedef struct run {
    const config *cf;
    sluice_producer *p;
    pmetrics *pm;              /* NULL without --metrics-addr */
    sluicei_transform *tf;
    sluicei_batcher *b;
    sluicei_roots *roots;              /* what the readers may open (no folder: anywhere) */
    const sluicei_roots *exec_roots;   /* --exec: NULL leaves the paths unchecked */
    int tty;
    double t0, last_progress;
    double last_push;          /* for the lease keepalive */
    uint64_t last_rows;        /* rows of the batch handed to the last push */
    counts total;              /* files mode: everything; job mode: tasks completed */
    counts live;               /* pushed so far, for the progress line */
    uint64_t tasks_done, tasks_failed, tasks_lost;
    uint64_t tasks_handed_back;  /* partition at its budget: handed back to resume later */
    sluice_err push_err;       /* the code of the last failed push or flush */
    int progress_shown;
    char err[1024];            /* the last reader or transform error */
} run;

enum outcome {
    OUT_DONE,         /* the input ended and every batch was handed over */
    OUT_STOPPED,      /* a signal: the partly filled batch was dropped */
    OUT_INPUT_ERROR,  /* reader, command or transform failed: r->err */
    OUT_PUSH_ERROR,   /* the producer refused: sluice_producer_errstr() */
};

/* ---- flags.c ---- */

/* Parses argv into cf (whose defaults are set, cf->roots with room for
 * argc entries); env_roots is $SLUICE_DATA_ROOTS (NULL: unset), used when
 * no --data-root is given. Returns 0, -1 after --help or --version
 * (printed), or SLUICEI_EXIT_USAGE (message printed). Everything is
 * checked before any connection. */
int flags_parse(int argc, char **argv, const char *env_roots, config *cf);

/* ---- produce.c ---- */

double produce_now(void);   /* monotonic seconds */
void counts_add(counts *to, const counts *c);

/* A line on stderr that must not mix with the \r progress line. */
void produce_say(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The producer API's notes of long waits (producer.h: opts.log); arg is
 * the run. */
void produce_log_line(void *arg, const char *msg);

/* Opens the input: the reader of format over paths, records [start, end),
 * or the --exec command, the paths checked against r->roots
 * (r->exec_roots). Errors in r->err. */
sluice_err produce_open_input(run *r, sluicei_reader **rd, const char *format,
                              const char *const *paths, size_t npaths, uint64_t start,
                              uint64_t end);

/* Reads rd to its end in batches of r->b's size and pushes them; *c counts
 * what was handed over, *nread the records read. */
enum outcome produce(run *r, sluicei_reader *rd, counts *c, uint64_t *nread);

/* ---- files.c, job.c ---- */

/* Files mode. Returns the exit status. */
int run_files(run *r);
/* Job mode. Returns the exit status. */
int run_job(run *r);

/* ---- metrics.c ---- */

/* Binds --metrics-addr and starts serving (the port is bound before
 * anything else: a port in use fails the start). On SLUICE_OK *out is
 * owned by the caller (metrics_close()); else err says why. */
sluice_err metrics_open(pmetrics **out, const config *cf, char *err, size_t errlen);

/* Tells the endpoint the producer's id (once the producer is open). */
void metrics_set_id(pmetrics *pm, const char *id);

/* Stores the producer's counters for the endpoint. pm NULL: nothing. */
void metrics_publish(pmetrics *pm, sluice_producer *p);

/* Stops the endpoint's threads, then frees pm. NULL is a no-op. */
void metrics_close(pmetrics *pm);

#endif
