/* sluice-producer: reads records and pushes them, in batches, into a sluice
 * queue. Built on the producer API (producer.h), the readers (reader.h) and
 * the transform host (transform.h), the batcher (batcher.h); this file is
 * start-up, signals and shutdown; daemon.h lists the other files.
 *
 * Two modes:
 *   files given:    the files, in order, as epoch 0 of an ad-hoc task;
 *                   batches never span files (a file's last batch may be
 *                   short).
 *   no files given: job mode. Claims the tasks of the queue's job (sluice-ctl
 *                   submit) one after another under a lease, produces each
 *                   (reader, paths and record range from the manifest,
 *                   batch size from the job; a task's last batch may be
 *                   short), and exits when the job is finished (--follow:
 *                   waits for the next job). */
#include "daemon.h"

#include "child.h"
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile sig_atomic_t daemon_stop_flag;
volatile sig_atomic_t daemon_stop_signal;

/* First signal: stop at the next record and shut down cleanly; an --exec
 * command gets SIGTERM now (child.h), and a wait on its output ends. Second:
 * leave at once (the task, if any, is then left to the lease reaper), but
 * not before every command's group got SIGKILL. */
static void on_signal(int sig)
{
    if (daemon_stop_flag) {
        sluicei_child_kill_all();
        _exit(128 + sig);
    }
    daemon_stop_signal = sig;
    daemon_stop_flag = 1;
    sluicei_child_stop();
}

static void config_free(config *cf)
{
    free(cf->files);
    free(cf->roots);
    free(cf->roots_env);
}

/* The data roots of cf as a set (no folder in files mode without one:
 * anywhere). Returns 0, or the exit status after printing why. */
static int roots_open(const config *cf, sluicei_roots **out)
{
    char err[1024];
    if (sluicei_roots_new(out) != SLUICE_OK) {
        fprintf(stderr, PROG ": out of memory\n");
        return SLUICEI_EXIT_RUNTIME;
    }
    for (int i = 0; i < cf->nroots; i++) {
        sluice_err e = sluicei_roots_add(*out, cf->roots[i], err, sizeof err);
        if (e != SLUICE_OK) {
            fprintf(stderr, PROG ": %s%s\n", cf->roots_from_env ? "SLUICE_DATA_ROOTS: "
                                                                 : "--data-root ", err);
            return e == SLUICE_ERR_NOMEM ? SLUICEI_EXIT_RUNTIME : SLUICEI_EXIT_USAGE;
        }
    }
    return 0;
}

/* Files mode: fails before pushing anything when an input is plainly
 * missing or refused. Returns 0 or the exit status (message printed). */
static int files_precheck(const run *r)
{
    const config *cf = r->cf;
    char err[1024];
    /* --exec without data roots: the FILEs are the command's business. */
    const sluicei_roots *roots = cf->exec_cmd ? r->exec_roots : r->roots;
    for (int i = 0; i < cf->nfiles && roots; i++) {
        if (!cf->exec_cmd && access(cf->files[i], R_OK) != 0) {
            fprintf(stderr, PROG ": %s: %s\n", cf->files[i], strerror(errno));
            return SLUICEI_EXIT_RUNTIME;
        }
        if (sluicei_input_check(roots, cf->files[i], NULL, err, sizeof err) != SLUICE_OK) {
            fprintf(stderr, PROG ": %s\n", err);
            return SLUICEI_EXIT_RUNTIME;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    sluicei_cli_init(PROG);
    config cf = {.format = "tfrecord", .exec_mode = SLUICEI_EXEC_FRAMED};
    cf.url = getenv("SLUICE_REDIS_URL");
    if (!cf.url || !*cf.url)
        cf.url = DEFAULT_URL;
    cf.files = calloc((size_t)argc, sizeof *cf.files);
    cf.roots = calloc((size_t)argc, sizeof *cf.roots);
    if (!cf.files || !cf.roots) {
        fprintf(stderr, PROG ": out of memory\n");
        config_free(&cf);
        return SLUICEI_EXIT_RUNTIME;
    }
    int rc = flags_parse(argc, argv, getenv("SLUICE_DATA_ROOTS"), &cf);
    if (rc != 0) {
        config_free(&cf);
        return rc < 0 ? 0 : rc;
    }
    run r = {.cf = &cf};
    if ((rc = roots_open(&cf, &r.roots)) == 0) {
        /* Job mode, or files mode with data roots: the paths given to
         * --exec are checked too. */
        r.exec_roots = cf.nfiles == 0 || cf.nroots > 0 ? r.roots : NULL;
        rc = files_precheck(&r);
    }
    if (rc != 0) {
        sluicei_roots_free(r.roots);
        config_free(&cf);
        return rc;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* Restart reads and writes: the loop looks at daemon_stop_flag itself. */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[1024];
    r.tty = isatty(STDERR_FILENO);
    r.t0 = r.last_progress = produce_now();
    /* The metrics port is bound before anything else: a port in use fails
     * the start, before any connection or task. */
    if (cf.metrics_addr && metrics_open(&r.pm, &cf, err, sizeof err) != SLUICE_OK) {
        fprintf(stderr, PROG ": --metrics-addr: %s\n", err);
        sluicei_roots_free(r.roots);
        config_free(&cf);
        return SLUICEI_EXIT_RUNTIME;
    }
    if (cf.transform &&
        sluicei_transform_open(&r.tf, cf.transform, err, sizeof err) != SLUICE_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        metrics_close(r.pm);
        sluicei_roots_free(r.roots);
        config_free(&cf);
        return SLUICEI_EXIT_RUNTIME;
    }
    sluice_producer_opts o = {
        .redis_url = cf.url,
        .queue = cf.queue,
        .producer_id = cf.producer_id,
        .max_inflight = (int)cf.inflight,
        .stop = (volatile int *)&daemon_stop_flag,
        .log = cf.quiet ? NULL : produce_log_line,
        .log_arg = &r,
    };
    sluice_err e = sluice_producer_open(&r.p, &o, err, sizeof err);
    if (e != SLUICE_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        metrics_close(r.pm);
        sluicei_transform_close(r.tf);
        sluicei_roots_free(r.roots);
        config_free(&cf);
        /* A malformed --redis URL or queue name is a usage error. */
        return e == SLUICE_ERR_INVALID ? SLUICEI_EXIT_USAGE : SLUICEI_EXIT_RUNTIME;
    }
    metrics_set_id(r.pm, sluice_producer_id(r.p));
    /* Job mode sizes the batches per task (the job's batch size). */
    if (sluicei_batcher_new(&r.b, cf.nfiles ? (size_t)cf.batch_size : 1) != SLUICE_OK) {
        fprintf(stderr, PROG ": out of memory\n");
        rc = SLUICEI_EXIT_RUNTIME;
    } else {
        rc = cf.nfiles ? run_files(&r) : run_job(&r);
    }

    sluice_producer_stats st;
    sluice_producer_stats_get(r.p, &st);
    if (r.progress_shown)
        fputc('\n', stderr);
    if (!cf.quiet) {
        double el = produce_now() - r.t0;
        fprintf(stderr,
                "pushed %" PRIu64 " batches, %" PRIu64 " records, %.1f MB in %.1f s "
                "(%.1f MB/s), blocked %.1f s by backpressure",
                st.batches + st.duplicates, st.records, (double)st.bytes / 1e6, el,
                el > 0 ? (double)st.bytes / 1e6 / el : 0.0, (double)st.blocked_us / 1e6);
        if (st.duplicates)
            fprintf(stderr, ", %" PRIu64 " already present", st.duplicates);
        if (st.reconnects)
            fprintf(stderr, ", %" PRIu64 " reconnect%s", st.reconnects,
                    st.reconnects == 1 ? "" : "s");
        if (!cf.nfiles) {
            fprintf(stderr, "; tasks: %" PRIu64 " done, %" PRIu64 " failed", r.tasks_done,
                    r.tasks_failed);
            if (r.tasks_lost)
                fprintf(stderr, ", %" PRIu64 " lost to the reaper", r.tasks_lost);
            if (r.tasks_handed_back)
                fprintf(stderr, ", %" PRIu64 " handed back to make way", r.tasks_handed_back);
        }
        fputc('\n', stderr);
    }
    sluicei_batcher_free(r.b);
    /* The threads end before what they read goes. */
    metrics_close(r.pm);
    sluice_producer_close(r.p);
    sluicei_transform_close(r.tf);
    sluicei_roots_free(r.roots);
    config_free(&cf);
    return rc;
}
