/* Job mode (no FILE given): claims the tasks of the queue's job
 * (sluice-ctl submit) one after another under a lease, produces each
 * (reader, paths and record range from the manifest, batch size, record
 * shuffle and remainder from the job; a task's last batch may be short,
 * or dropped with drop_remainder) and ends it as done, failed or handed
 * back; exits when the job is finished (--follow: waits for the next
 * job). */
#include "daemon.h"

#include "cli.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s && s[1] ? s + 1 : p;
}

/* "tfrecord shard-7.tfrecord records 0:5000" for progress and errors: the
 * task's range, its end as read when the task runs to the end of its
 * paths (nread records read; none read: an open end). */
static void describe_task(const sluice_task *t, uint64_t nread, int exec, char *out, size_t n)
{
    char end[24] = "";
    if (t->end != UINT64_MAX)
        snprintf(end, sizeof end, "%" PRIu64, t->end);
    else if (nread)
        snprintf(end, sizeof end, "%" PRIu64, t->start + nread);
    int k = snprintf(out, n, "%s %s", exec ? "exec" : t->reader, base_name(t->paths[0]));
    if (t->npaths > 1 && k > 0 && (size_t)k < n)
        k += snprintf(out + k, n - (size_t)k, " +%zu more", t->npaths - 1);
    if (k > 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, " records %" PRIu64 ":%s", t->start, end);
}

/* The API reports a task lease lost to a reaper as SLUICE_ERR_IO with an
 * errstr starting "lease lost" (producer.h). */
static int lease_lost(sluice_producer *p)
{
    return strncmp(sluice_producer_errstr(p), "lease lost", 10) == 0;
}

/* Push errors after which this producer cannot go on with any task. */
static int fatal_push_error(sluice_producer *p, sluice_err e)
{
    return e == SLUICE_ERR_NOQUEUE || e == SLUICE_ERR_AUTH ||
           (e == SLUICE_ERR_IO && !lease_lost(p));
}

/* Produces one claimed task and finishes it (done, failed, handed back).
 * Returns 0 to go on, SLUICEI_EXIT_RUNTIME when the producer cannot go on,
 * or -1 after a signal. After a signal the input is left open in *rd for
 * the caller to close once the task is handed back: an --exec command may
 * take its grace period (child.h) to exit, longer than a lease can wait. */
static int task_body(run *r, sluice_task *t, sluicei_reader **rd)
{
    char what[512], key[64];
    double t0 = produce_now();
    counts c = {0};
    uint64_t nread = 0, dropped;
    snprintf(key, sizeof key, "%" PRIu32 ":%" PRIu64, t->epoch, t->shard);
    if (sluicei_batcher_resize(r->b, t->batch_size) != SLUICE_OK) {
        snprintf(r->err, sizeof r->err, "out of memory for batches of %" PRIu32 " records",
                 t->batch_size);
        sluice_producer_task_release(r->p, t);
        produce_say(r, PROG ": task %s: %s\n", key, r->err);
        return SLUICEI_EXIT_RUNTIME;
    }
    /* The job's order: the same batches whoever produces the task. */
    const sluicei_batch_order order = {.window = t->shuffle_buffer, .seed = t->shuffle_seed,
                                       .epoch = t->epoch, .shard = t->shard,
                                       .drop_remainder = t->drop_remainder};
    enum outcome o = OUT_INPUT_ERROR;
    if (sluicei_batcher_set_order(r->b, &order) != SLUICE_OK)
        snprintf(r->err, sizeof r->err, "shuffle_buffer %" PRIu32 " is over %d records",
                 t->shuffle_buffer, SLUICE_SHUFFLE_BUFFER_MAX);
    else if (produce_open_input(r, rd, t->reader, t->paths, t->npaths, t->start, t->end) ==
             SLUICE_OK) {
        o = produce(r, *rd, &c, &nread);
        if (!daemon_stop_flag) {
            sluicei_reader_close(*rd);   /* ends an --exec command still running */
            *rd = NULL;
        }
    }
    describe_task(t, nread, r->cf->exec_cmd != NULL, what, sizeof what);
    /* A push cut short by the signal (a wait for room ends at once), or a
     * read of an --exec command's output (it ends at once too). */
    if ((o == OUT_PUSH_ERROR || o == OUT_INPUT_ERROR) && daemon_stop_flag)
        o = OUT_STOPPED;

    sluice_err e;
    switch (o) {
    case OUT_DONE:
        dropped = t->dropped_records = sluicei_batcher_dropped(r->b);
        e = sluice_producer_task_done(r->p, t);   /* frees t */
        if (e == SLUICE_OK) {
            r->tasks_done++;
            counts_add(&r->total, &c);
            if (!r->cf->quiet && dropped)
                produce_say(r, "task %s (%s) done: %" PRIu64 " batches in %.1f s (%" PRIu64
                            " records dropped: drop_remainder)\n", key, what, c.batches,
                            produce_now() - t0, dropped);
            else if (!r->cf->quiet)
                produce_say(r, "task %s (%s) done: %" PRIu64 " batches in %.1f s\n", key,
                            what, c.batches, produce_now() - t0);
            return 0;
        }
        if (e == SLUICE_ERR_FULL) {
            /* Its last batches found the queue (its partition) at its
             * budget while the producer is wanted elsewhere, or the signal
             * came while they waited: handed back with its resume point;
             * errstr says why. */
            if (!daemon_stop_flag)
                r->tasks_handed_back++;
            if (!r->cf->quiet)
                produce_say(r, "task %s (%s): %s\n", key, what, sluice_producer_errstr(r->p));
            return daemon_stop_flag ? -1 : 0;
        }
        if (lease_lost(r->p)) {
            r->tasks_lost++;
            if (!r->cf->quiet)
                produce_say(r, "task %s (%s): %s\n", key, what, sluice_producer_errstr(r->p));
            return 0;
        }
        produce_say(r, PROG ": task %s (%s): %s\n", key, what, sluice_producer_errstr(r->p));
        return fatal_push_error(r->p, e) ? SLUICEI_EXIT_RUNTIME : 0;
    case OUT_STOPPED:
        e = sluice_producer_task_release(r->p, t);
        if (!r->cf->quiet)
            produce_say(r, "task %s (%s): %s\n", key, what,
                        e == SLUICE_OK ? "handed back (shutting down)"
                                       : sluice_producer_errstr(r->p));
        return -1;
    case OUT_INPUT_ERROR:
        produce_say(r, PROG ": task %s (%s) attempt %d failed: %s\n", key, what, t->attempt,
                    r->err);
        e = sluice_producer_task_fail(r->p, t, r->err);   /* frees t */
        if (e == SLUICE_OK)
            r->tasks_failed++;
        return e == SLUICE_OK || lease_lost(r->p) ? 0 : SLUICEI_EXIT_RUNTIME;
    case OUT_PUSH_ERROR:
        break;
    }
    /* A push failed (r->push_err). */
    char why[1024];
    snprintf(why, sizeof why, "%s", sluice_producer_errstr(r->p));
    if (r->push_err == SLUICE_ERR_FULL) {
        /* The queue is at its budget and a task of an earlier epoch waits,
         * or its partition is while another has room and waiting tasks:
         * hand it back (with its resume point) and claim the next, which
         * is that task, or prefers a partition with room. */
        e = sluice_producer_task_release(r->p, t);
        if (e == SLUICE_OK)
            r->tasks_handed_back++;
        if (e == SLUICE_OK && !r->cf->quiet)
            produce_say(r, "task %s (%s): %s\n", key, what, sluice_producer_errstr(r->p));
        else if (e != SLUICE_OK)
            produce_say(r, PROG ": task %s (%s): %s\n", key, what, sluice_producer_errstr(r->p));
        return e == SLUICE_OK || lease_lost(r->p) ? 0 : SLUICEI_EXIT_RUNTIME;
    }
    if (lease_lost(r->p)) {
        sluice_producer_task_release(r->p, t);   /* only frees it: it is not ours */
        r->tasks_lost++;
        if (!r->cf->quiet)
            produce_say(r, "task %s (%s): %s\n", key, what, why);
        return 0;
    }
    int fatal = fatal_push_error(r->p, r->push_err);
    if (fatal)
        sluice_producer_task_release(r->p, t);
    else if (sluice_producer_task_fail(r->p, t, why) == SLUICE_OK)
        r->tasks_failed++;
    produce_say(r, PROG ": task %s (%s): %s\n", key, what, why);
    return fatal ? SLUICEI_EXIT_RUNTIME : 0;
}

static int run_task(run *r, sluice_task *t)
{
    sluicei_reader *rd = NULL;
    int k = task_body(r, t, &rd);
    sluicei_reader_close(rd);
    return k;
}

/* Sleeps up to ms, waking early on a signal. */
static void nap(int ms)
{
    for (int i = 0; i < ms / 50 && !daemon_stop_flag; i++) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int run_job(run *r)
{
    const config *cf = r->cf;
    int rc = 0, said_waiting = 0;
    for (;;) {
        sluice_task *t = NULL;
        sluice_err e = sluice_producer_task_claim(r->p, &t, -1, (int)cf->lease_ms);
        metrics_publish(r->pm, r->p);
        if (e == SLUICE_OK) {
            said_waiting = 0;
            int k = run_task(r, t);
            metrics_publish(r->pm, r->p);
            if (k == -1)
                break;
            if (k != 0) {
                rc = k;
                break;
            }
            continue;
        }
        if (daemon_stop_flag)
            break;
        if (e == SLUICE_EOF) {
            if (!cf->follow) {
                if (!cf->quiet && r->tasks_done + r->tasks_failed + r->tasks_lost == 0)
                    produce_say(r, "%s\n", sluice_producer_errstr(r->p));
                break;
            }
            if (!cf->quiet && !said_waiting)
                produce_say(r, "%s; waiting for the next job (--follow)\n",
                            sluice_producer_errstr(r->p));
            said_waiting = 1;
            /* A claim that finds no job does not beat; a flush does (when
             * due), so that an idle producer stays alive in sluice-ctl
             * info/stat and its final counters reach pstats. */
            sluice_producer_flush(r->p);
            metrics_publish(r->pm, r->p);
            nap(FOLLOW_POLL_MS);
            continue;
        }
        produce_say(r, PROG ": %s\n", sluice_producer_errstr(r->p));
        rc = SLUICEI_EXIT_RUNTIME;
        break;
    }
    /* Every task ended through done/fail/release, each of which flushes. */
    if (daemon_stop_flag && !cf->quiet)
        produce_say(r, PROG ": %s: shut down cleanly\n",
                    daemon_stop_signal == SIGTERM ? "SIGTERM" : "SIGINT");
    if (cf->summary && rc == 0)
        printf("records=%" PRIu64 " batches=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64
               " tasks=%" PRIu64 "\n", r->total.records, r->total.batches, r->total.bytes,
               r->total.sum, r->tasks_done);
    return rc;
}
