/* Producing one input, the part both modes share: the input opened (a
 * reader or the --exec command), its records batched (batcher.h) and each
 * batch pushed through the producer API, with the counts, the progress
 * line and the lease keepalive that go with it. */
#include "daemon.h"

#include "checksum.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

double produce_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void counts_add(counts *to, const counts *c)
{
    to->batches += c->batches;
    to->records += c->records;
    to->bytes += c->bytes;
    to->sum += c->sum;
}

static void progress(run *r, int force)
{
    double now = produce_now();
    if (r->cf->quiet || !r->tty || (!force && now - r->last_progress < 1.0))
        return;
    r->last_progress = now;
    double el = now - r->t0;
    fprintf(stderr, "\r%" PRIu64 " batches, %" PRIu64 " records, %.1f MB, %.1f MB/s\033[K",
            r->live.batches, r->live.records, (double)r->live.bytes / 1e6,
            el > 0 ? (double)r->live.bytes / 1e6 / el : 0.0);
    r->progress_shown = 1;
}

void produce_say(run *r, const char *fmt, ...)
{
    va_list ap;
    if (r->progress_shown) {
        fputs("\r\033[K", stderr);
        r->progress_shown = 0;
    }
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

void produce_log_line(void *arg, const char *msg)
{
    produce_say(arg, PROG ": %s\n", msg);
}

/* What a run of the batcher pushes into. */
typedef struct sink {
    run *r;
    counts *c;
} sink;

/* Batcher hook: pushes one batch (records or tensors) and counts it. */
static int push_batch(void *arg, const sluicei_batch_out *out)
{
    sink *s = arg;
    run *r = s->r;
    r->last_rows = out->rows;
    sluice_err e = out->ntensors
                       ? sluice_producer_push_tensors(r->p, out->rows, out->tensors, out->ntensors)
                       : sluice_producer_push_records(r->p, out->records, out->nrecords);
    if (e != SLUICE_OK) {
        r->push_err = e;
        return OUT_PUSH_ERROR;
    }
    counts one = {1, out->rows, 0, 0};
    for (size_t i = 0; i < out->nrecords; i++)
        one.bytes += out->records[i].len;
    for (size_t i = 0; i < out->ntensors; i++)
        one.bytes += out->tensors[i].nbytes;
    /* The checksum reads every byte again: only for --summary, which
     * prints it. */
    if (r->cf->summary) {
        for (size_t i = 0; i < out->nrecords; i++)
            one.sum += sluicei_record_hash(out->records[i].data, out->records[i].len);
        for (size_t i = 0; i < out->ntensors; i++)
            one.sum += sluicei_record_hash(out->tensors[i].data, out->tensors[i].nbytes);
    }
    counts_add(s->c, &one);
    counts_add(&r->live, &one);
    r->last_push = produce_now();
    metrics_publish(r->pm, r->p);
    progress(r, 0);
    return OUT_DONE;
}

/* Batcher hook, before each record: the stop signal, and while a batch
 * fills slowly, a flush that keeps the task's lease and the heartbeat. */
static int between_records(void *arg, size_t pending)
{
    run *r = ((sink *)arg)->r;
    if (daemon_stop_flag)
        return OUT_STOPPED;
    if (pending > 0 && produce_now() - r->last_push >= KEEPALIVE_MS / 1000.0) {
        sluice_err e = sluice_producer_flush(r->p);
        if (e != SLUICE_OK) {
            r->push_err = e;
            return OUT_PUSH_ERROR;
        }
        r->last_push = produce_now();
    }
    return OUT_DONE;
}

enum outcome produce(run *r, sluicei_reader *rd, counts *c, uint64_t *nread)
{
    sink s = {r, c};
    const sluicei_batcher_hooks h = {.batch = push_batch, .poll = between_records, .arg = &s};
    r->last_push = produce_now();
    int k = sluicei_batcher_run(r->b, rd, r->tf, &h, nread, r->err, sizeof r->err);
    return k == SLUICEI_BATCHER_INPUT_ERROR ? OUT_INPUT_ERROR : (enum outcome)k;
}

sluice_err produce_open_input(run *r, sluicei_reader **rd, const char *format,
                              const char *const *paths, size_t npaths, uint64_t start,
                              uint64_t end)
{
    if (r->cf->exec_cmd)
        return sluicei_exec_open(rd, r->cf->exec_cmd, paths, npaths, start, end,
                                 r->cf->exec_mode, r->exec_roots, r->err, sizeof r->err);
    return sluicei_reader_open_in(rd, r->roots, format, paths, npaths, start, end, r->err,
                                  sizeof r->err);
}
