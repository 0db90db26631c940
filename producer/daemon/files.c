/* Files mode: the files given on the command line, in order, as epoch 0
 * of an ad-hoc task; batches never span files (a file's last batch may be
 * short). On a partitioned queue each file goes to the next partition. */
#include "daemon.h"

#include "cli.h"
#include "producer_internal.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>

/* The line of an interrupted run: what became of everything read, each
 * part only when there is some. in_push: a batch was being pushed when the
 * push was cut short (it never went into the producer's ring). */
static void say_interrupted(run *r, size_t files_read, uint64_t nread, int in_push)
{
    const config *cf = r->cf;
    sluice_producer_stats st;
    sluicei_abandoned ab;
    sluice_producer_stats_get(r->p, &st);
    sluicei_producer_abandoned(r->p, &ab);
    uint64_t stored = st.batches + st.duplicates;
    uint64_t unsent = ab.unsent + (in_push ? 1 : 0);
    uint64_t refused = ab.refused_room + ab.refused_other;
    char line[1024];
    int n = snprintf(line, sizeof line, "interrupted by %s: %zu of %d files read to the end; ",
                     daemon_stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", files_read,
                     cf->nfiles);
    if (stored)
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "%" PRIu64 " batch%s stored in queue '%s' (confirmed by Redis)", stored,
                      stored == 1 ? "" : "es", cf->queue);
    else
        n += snprintf(line + n, sizeof line - (size_t)n, "no batch stored in queue '%s'",
                      cf->queue);
    if (unsent + refused) {
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "; %" PRIu64 " batch%s not stored:", unsent + refused,
                      unsent + refused == 1 ? "" : "es");
        const char *sep = " ";
        if (unsent) {
            n += snprintf(line + n, sizeof line - (size_t)n, "%s%" PRIu64 " not sent", sep,
                          unsent);
            sep = ", ";
        }
        if (ab.refused_room) {
            n += snprintf(line + n, sizeof line - (size_t)n,
                          "%s%" PRIu64 " refused for lack of room", sep, ab.refused_room);
            sep = ", ";
        }
        if (ab.refused_other)
            n += snprintf(line + n, sizeof line - (size_t)n, "%s%" PRIu64 " refused by Redis",
                          sep, ab.refused_other);
    }
    if (ab.unanswered)
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "; %" PRIu64 " sent without an answer (%s may or may not be stored)",
                      ab.unanswered, ab.unanswered == 1 ? "it" : "each");
    /* Records read after the last whole batch: dropped with it (a
     * transform makes its own rows of them: not counted then). */
    uint64_t loose = nread - r->total.records - (in_push ? r->last_rows : 0);
    if (!cf->transform && loose && n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n,
                 "; the last %" PRIu64 " record%s read, not yet a whole batch, not sent", loose,
                 loose == 1 ? "" : "s");
    produce_say(r, PROG ": %s\n", line);
}

int run_files(run *r)
{
    const config *cf = r->cf;
    size_t group = 1;
    if (!cf->exec_cmd) {
        const sluicei_reader_format *fmt;
        if (sluicei_reader_check(cf->format, (size_t)cf->nfiles, &fmt, r->err, sizeof r->err) ==
            SLUICE_OK)
            group = fmt->group;
    }
    int failed = 0, push_failed = 0, in_push = 0;
    size_t done_groups = 0, ngroups = (size_t)cf->nfiles / group;
    uint64_t read_total = 0;
    enum outcome o = OUT_DONE;
    for (size_t g = 0; g < ngroups && !daemon_stop_flag; g++) {
        const char *const *paths = (const char *const *)cf->files + g * group;
        sluicei_reader *rd;
        uint64_t nread = 0;
        /* A partitioned queue: each file to the next partition. */
        if (g > 0 && sluicei_producer_new_adhoc(r->p) != SLUICE_OK) {
            push_failed = 1;
            break;
        }
        if (produce_open_input(r, &rd, cf->format, paths, group, 0, UINT64_MAX) != SLUICE_OK) {
            produce_say(r, PROG ": %s\n", r->err);
            failed = 1;
            break;
        }
        o = produce(r, rd, &r->total, &nread);
        read_total += nread;
        sluicei_reader_close(rd);
        /* An --exec read cut short by the signal is no input error. */
        if (o == OUT_INPUT_ERROR && daemon_stop_flag)
            o = OUT_STOPPED;
        if (o == OUT_DONE) {
            done_groups++;
            continue;
        }
        if (o == OUT_INPUT_ERROR) {
            produce_say(r, PROG ": %s\n", r->err);
            failed = 1;
        } else if (o == OUT_PUSH_ERROR) {
            push_failed = in_push = 1;
        }
        break;
    }
    /* Everything handed over must be stored before we report; after a
     * failed push the producer has already given up on what it held. */
    int flushed = 0;
    if (!push_failed) {
        flushed = sluice_producer_flush(r->p) == SLUICE_OK;
        metrics_publish(r->pm, r->p);
        push_failed = !flushed;
    }
    int interrupted = daemon_stop_flag && (done_groups < ngroups || !flushed);
    /* Interrupted, the line below tells what became of every batch. */
    if (push_failed && !interrupted)
        produce_say(r, PROG ": %s\n", sluice_producer_errstr(r->p));
    if (interrupted)
        say_interrupted(r, done_groups * group, read_total, in_push);
    if (cf->summary && flushed)
        printf("records=%" PRIu64 " batches=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64
               "\n", r->total.records, r->total.batches, r->total.bytes, r->total.sum);
    if (interrupted)
        return 128 + (daemon_stop_signal ? daemon_stop_signal : SIGINT);
    return failed || push_failed ? SLUICEI_EXIT_RUNTIME : 0;
}
