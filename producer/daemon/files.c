/* Files mode: the files given on the command line, in order, as epoch 0
 * of an ad-hoc task; batches never span files (a file's last batch may be
 * short). On a partitioned queue each file goes to the next partition. */
#include "daemon.h"

#include "cli.h"
#include "producer_internal.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>

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
    int failed = 0, push_failed = 0;
    size_t done_groups = 0, ngroups = (size_t)cf->nfiles / group;
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
            push_failed = 1;
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
    if (push_failed)
        produce_say(r, PROG ": %s\n", sluice_producer_errstr(r->p));
    int interrupted = daemon_stop_flag && (done_groups < ngroups || !flushed);
    if (interrupted)
        produce_say(r, PROG ": interrupted by %s: %zu of %d files pushed completely\n",
                    daemon_stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", done_groups * group,
                    cf->nfiles);
    if (cf->summary && flushed)
        printf("records=%" PRIu64 " batches=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64
               "\n", r->total.records, r->total.batches, r->total.bytes, r->total.sum);
    if (interrupted)
        return 128 + (daemon_stop_signal ? daemon_stop_signal : SIGINT);
    return failed || push_failed ? SLUICEI_EXIT_RUNTIME : 0;
}
