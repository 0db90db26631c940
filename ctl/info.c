/* What info, jobs, dead and reap print: the queue's state as text or as
 * JSON (the JSON parts that stat --json shares: info_json_job,
 * info_json_peers, info_json_partitions), the dead letters, and what a
 * reap handed back. */
#include "ctl.h"
#include "json.h"

#include <stdio.h>
#include <string.h>

/* ---- text output ---------------------------------------------------------- */

/* Counters of the stats hash that info prints, in this order. */
static const char *const info_stats[] = {"pushed", "pushed_bytes", "acked", "acked_bytes",
                                         "dup_dropped", "requeued", "dead", "tasks_done",
                                         "tasks_reaped", "rolled_back"};

static void print_stats_inline(const ctl_fields *h)
{
    for (size_t i = 0; i < h->n; i++)
        printf(" %s=%s", h->f[i].name, h->f[i].value);
}

static void print_peers(const char *kind, const peer *ps, size_t n, long long lease_ms)
{
    for (size_t i = 0; i < n; i++) {
        const peer *p = &ps[i];
        printf("%s %s: seen %lld ms ago%s", kind, p->id, p->seen_ago_ms,
               p->seen_ago_ms > lease_ms ? " (silent: lease expired)" : "");
        if (kind[0] == 'p')
            printf(", task %s", p->extra ? p->extra : "none");
        else
            printf(", rank %s, pending %lld", p->extra ? p->extra : "none", p->pending);
        printf(";");
        print_stats_inline(&p->stats);
        printf("\n");
    }
}

/* The producers or consumers that left the registry, their counters added
 * up when each left (pstats_gone, cstats_gone): nothing when none did. */
static void print_left(const char *kind, const ctl_fields *gone)
{
    long long n = ctl_fields_num(gone, "left");
    if (n <= 0)
        return;
    printf("%ss left: %lld;", kind, n);
    for (size_t i = 0; i < gone->n; i++)
        if (strcmp(gone->f[i].name, "left") != 0)
            printf(" %s=%s", gone->f[i].name, gone->f[i].value);
    printf("\n");
}

static void print_job(const qinfo *in)
{
    const job_info *j = &in->job;
    if (!j->present) {
        printf("job: none\n");
        return;
    }
    const char *seed = j->seed;
    const char *state = j->state ? j->state : "?";
    if (strcmp(state, "finished") == 0 && in->nfailed)
        printf("job: finished with %zu failed task%s\n", in->nfailed,
               in->nfailed == 1 ? "" : "s");
    else
        printf("job: %s\n", state);
    printf("epochs: %lld\n", in->epochs);
    printf("epoch_open: %lld\n", j->epoch_open);
    printf("batch_size: %lld\n", j->batch_size);
    printf("shuffle_seed: %s\n", seed && *seed ? seed : "none");
    printf("shuffle_buffer: %lld\n", j->shuffle_buffer);
    printf("drop_remainder: %s\n", j->drop_remainder ? "yes" : "no");
    printf("max_attempts: %lld\n", j->max_attempts);
    printf("max_crashes: %lld\n", j->max_crashes);
    printf("shards: %lld\n", j->ntasks);
    printf("tasks: %lld\n", j->ntasks * in->epochs);
    printf("tasks_waiting: %lld\n", in->waiting);
    printf("tasks_claimed: %lld\n", in->claimed);
    printf("tasks_done: %lld\n", in->done);
    printf("tasks_failed: %zu\n", in->nfailed);
    for (size_t i = 0; i < in->nfailed; i++) {
        const char *t = in->failed[i].task;
        const char *err = in->failed[i].error;
        printf("failed %s: attempts %lld: %s\n", t, in->failed[i].attempts, err ? err : "");
    }
    for (long long e = 0; e < in->epochs; e++) {
        const epoch_info *x = &in->ep[e];
        printf("epoch %lld: ready=%lld pushed=%lld acked=%lld dropped=%lld padded=%lld "
               "dropped_records=%lld tasks_finished=%lld/%lld failed_tasks=%lld end=%s\n",
               e, x->ready, x->pushed, x->acked, x->dropped, x->padded, x->dropped_records,
               x->finished, j->ntasks, x->failed_tasks, x->ended ? "posted" : "open");
    }
    printf("producers: %zu\n", qstate_alive(in->prod, in->nprod, in->lease_ms));
    print_peers("producer", in->prod, in->nprod, in->lease_ms);
    print_left("producer", &in->pgone);
}

/* One line per partition: where it is and what it holds against its
 * budgets (info), or its part of the job (jobs). */
static void print_partitions(const qview *v, int job_only)
{
    for (int p = 0; p < v->partitions; p++) {
        const qinfo *in = &v->part[p];
        if (job_only) {
            const char *st = in->job.state;
            printf("partition %d: %s, job %s, epoch_open %lld, shards %lld, tasks_waiting %lld, "
                   "tasks_claimed %lld, tasks_done %lld, tasks_failed %zu\n",
                   p, in->q, in->job.present ? (st ? st : "?") : "none",
                   in->job.epoch_open, in->job.ntasks, in->waiting, in->claimed,
                   in->done, in->nfailed);
        } else {
            printf("partition %d: %s on %s, batches %lld/%lld, bytes %lld/%lld, ready %lld, "
                   "pending %lld, dead_letters %lld\n",
                   p, in->q, v->node[p], in->held, in->max_batches, in->bytes,
                   in->max_bytes, in->ready, in->pending, in->dead);
        }
    }
}

static void print_info(const qview *v)
{
    const qinfo *in = &v->all;
    printf("queue: %s\n", in->q);
    if (v->partitions)
        printf("partitions: %d\n", v->partitions);
    printf("max_batches: %s\n", ctl_fields_or(&in->meta, "max_batches", "0"));
    printf("max_bytes: %s\n", ctl_fields_or(&in->meta, "max_bytes", "0"));
    if (in->ranks > 0)
        printf("coordinated: %lld ranks, remainder %s\n", in->ranks,
               ctl_fields_or(&in->meta, "remainder", "drop"));
    printf("lease_ms: %lld\n", in->lease_ms);
    printf("max_deliveries: %lld\n", ctl_fields_num(&in->meta, "max_deliveries"));
    printf("compress: %s\n", ctl_fields_or(&in->meta, "compress", "none"));
    printf("batches: %lld\n", in->held);
    printf("bytes: %lld\n", in->bytes);
    printf("ready: %lld\n", in->ready);
    printf("pending: %lld\n", in->pending);
    printf("consumers: %zu\n", qstate_alive(in->cons, in->ncons, in->lease_ms));
    for (size_t i = 0; i < sizeof info_stats / sizeof info_stats[0]; i++)
        printf("%s: %lld\n", info_stats[i], ctl_fields_num(&in->stats, info_stats[i]));
    printf("dead_letters: %lld\n", in->dead);
    printf("retained: %lld batches, %lld bytes (kept for checkpoints, outside the budgets)\n",
           in->retained, in->retained_bytes);
    print_partitions(v, 0);
    print_job(in);
    print_peers("consumer", in->cons, in->ncons, in->lease_ms);
    print_left("consumer", &in->cgone);
}

/* ---- JSON output ---------------------------------------------------------- */

/* Every field of a hash as an object member. */
void info_json_hash(json_writer *w, const char *key, const ctl_fields *h)
{
    json_object_begin(w, key);
    for (size_t i = 0; i < h->n; i++)
        json_value(w, h->f[i].name, h->f[i].value);
    json_object_end(w);
}

void info_json_peers(json_writer *w, const char *key, const peer *ps, size_t n, int producers,
                     long long lease_ms)
{
    json_array_begin(w, key);
    for (size_t i = 0; i < n; i++) {
        json_object_begin(w, NULL);
        json_str(w, "id", ps[i].id);
        json_int(w, "last_seen_ms_ago", ps[i].seen_ago_ms);
        json_bool(w, "alive", ps[i].seen_ago_ms <= lease_ms);
        if (producers) {
            json_str(w, "task", ps[i].extra);
        } else {
            if (ps[i].extra)
                json_value(w, "rank", ps[i].extra);
            else
                json_str(w, "rank", NULL);
            json_int(w, "pending", ps[i].pending);
        }
        info_json_hash(w, "stats", &ps[i].stats);
        json_object_end(w);
    }
    json_array_end(w);
}

void info_json_job(json_writer *w, const qinfo *in)
{
    const job_info *j = &in->job;
    if (!j->present) {
        json_str(w, "job", NULL);
        return;
    }
    const char *seed = j->seed;
    json_object_begin(w, "job");
    json_str(w, "state", j->state);
    json_int(w, "epochs", in->epochs);
    json_int(w, "epoch_open", j->epoch_open);
    json_int(w, "batch_size", j->batch_size);
    if (seed && *seed)
        json_value(w, "shuffle_seed", seed);
    else
        json_str(w, "shuffle_seed", NULL);
    json_int(w, "shuffle_buffer", j->shuffle_buffer);
    json_bool(w, "drop_remainder", j->drop_remainder);
    json_int(w, "max_attempts", j->max_attempts);
    json_int(w, "shards", j->ntasks);
    json_object_begin(w, "tasks");
    json_int(w, "total", j->ntasks * in->epochs);
    json_int(w, "waiting", in->waiting);
    json_int(w, "claimed", in->claimed);
    json_int(w, "done", in->done);
    json_int(w, "failed", (long long)in->nfailed);
    json_object_end(w);
    json_array_begin(w, "failed");
    for (size_t i = 0; i < in->nfailed; i++) {
        const char *t = in->failed[i].task;
        json_object_begin(w, NULL);
        json_str(w, "task", t);
        json_int(w, "attempts", in->failed[i].attempts);
        json_str(w, "error", in->failed[i].error);
        json_object_end(w);
    }
    json_array_end(w);
    json_array_begin(w, "per_epoch");
    for (long long e = 0; e < in->epochs; e++) {
        const epoch_info *x = &in->ep[e];
        json_object_begin(w, NULL);
        json_int(w, "epoch", e);
        json_int(w, "ready", x->ready);
        json_int(w, "pushed", x->pushed);
        json_int(w, "acked", x->acked);
        json_int(w, "dropped", x->dropped);
        json_int(w, "padded", x->padded);
        json_int(w, "dropped_records", x->dropped_records);
        json_int(w, "tasks_finished", x->finished);
        json_int(w, "failed_tasks", x->failed_tasks);
        json_bool(w, "end_posted", x->ended);
        json_object_end(w);
    }
    json_array_end(w);
    json_object_end(w);
}

/* "partitions": one object per partition (a partitioned queue only). */
void info_json_partitions(json_writer *w, const qview *v)
{
    if (!v->partitions)
        return;
    json_array_begin(w, "partitions");
    for (int p = 0; p < v->partitions; p++) {
        const qinfo *in = &v->part[p];
        json_object_begin(w, NULL);
        json_int(w, "partition", p);
        json_str(w, "queue", in->q);
        json_str(w, "node", v->node[p]);
        json_int(w, "batches", in->held);
        json_int(w, "max_batches", in->max_batches);
        json_int(w, "bytes", in->bytes);
        json_int(w, "max_bytes", in->max_bytes);
        json_int(w, "ready", in->ready);
        json_int(w, "pending", in->pending);
        json_int(w, "dead_letters", in->dead);
        if (in->job.present) {
            json_object_begin(w, "job");
            json_str(w, "state", in->job.state);
            json_int(w, "epoch_open", in->job.epoch_open);
            json_int(w, "shards", in->job.ntasks);
            json_int(w, "waiting", in->waiting);
            json_int(w, "claimed", in->claimed);
            json_int(w, "done", in->done);
            json_int(w, "failed", (long long)in->nfailed);
            json_object_end(w);
        } else {
            json_str(w, "job", NULL);
        }
        json_object_end(w);
    }
    json_array_end(w);
}

static void print_json(const qview *v, int job_only)
{
    const qinfo *in = &v->all;
    json_writer w;
    json_init(&w, stdout);
    json_object_begin(&w, NULL);
    json_str(&w, "queue", in->q);
    if (!job_only) {
        info_json_hash(&w, "meta", &in->meta);
        json_int(&w, "batches", in->held);
        json_int(&w, "bytes", in->bytes);
        json_int(&w, "ready", in->ready);
        json_int(&w, "pending", in->pending);
        json_int(&w, "dead_letters", in->dead);
        json_int(&w, "retained", in->retained);
        json_int(&w, "retained_bytes", in->retained_bytes);
        info_json_hash(&w, "stats", &in->stats);
    }
    info_json_job(&w, in);
    info_json_peers(&w, "producers", in->prod, in->nprod, 1, in->lease_ms);
    /* Those that left the registries, their counters added up (as stat). */
    info_json_hash(&w, "producers_left", &in->pgone);
    if (!job_only) {
        info_json_peers(&w, "consumers", in->cons, in->ncons, 0, in->lease_ms);
        info_json_hash(&w, "consumers_left", &in->cgone);
    }
    info_json_partitions(&w, v);
    json_object_end(&w);
    putchar('\n');
}

int info_run(ctl *x, int json, int job_only)
{
    qview v;
    int rc = qview_read(x, &v);
    if (rc == 0) {
        if (json) {
            print_json(&v, job_only);
        } else if (job_only) {
            print_job(&v.all);
            print_partitions(&v, 1);
        } else {
            print_info(&v);
        }
    }
    qview_free(&v);
    return rc;
}

/* ---- dead letters, reaping ------------------------------------------------ */

/* Lists the dead letters of every partition (ids are unique in the queue:
 * they carry the global shard number), then requeues or purges them. */
int dead_run(ctl *x, const char *action)
{
    size_t total = 0;
    for (int p = 0; p < ctl_nparts(x); p++) {
        const char *q = ctl_pname(x, p);
        char k_dead[SLUICE_MAX_KEY], k_info[SLUICE_MAX_KEY];
        sluicei_key(k_dead, q, "dead");
        sluicei_key(k_info, q, "deadinfo");
        const char *lr[4] = {"LRANGE", k_dead, "0", "-1"};
        redisReply *ids = ctl_must(x, q, 4, lr);
        if (!ids)
            return SLUICEI_EXIT_RUNTIME;
        for (size_t i = 0; i < ids->elements; i++) {
            const char *hg[3] = {"HGET", k_info, ids->element[i]->str};
            redisReply *r = ctl_must(x, q, 3, hg);
            if (!r) {
                freeReplyObject(ids);
                return SLUICEI_EXIT_RUNTIME;
            }
            /* deadinfo: "size now_ms reason" */
            long long size = 0, ms = -1;
            int off = 0;
            const char *reason = "";
            if (r->type == REDIS_REPLY_STRING &&
                sscanf(r->str, "%lld %lld %n", &size, &ms, &off) == 2)
                reason = r->str + off;
            char when[40];
            ctl_iso_time(ms, when, sizeof when);
            if (x->partitions)
                printf("%s  %lld bytes  %s  partition %d  %s\n", ids->element[i]->str, size, when,
                       p, reason);
            else
                printf("%s  %lld bytes  %s  %s\n", ids->element[i]->str, size, when, reason);
            freeReplyObject(r);
        }
        total += ids->elements;
        freeReplyObject(ids);
    }
    printf("%zu dead letter%s\n", total, total == 1 ? "" : "s");
    if (!action)
        return 0;
    long long n = 0;
    for (int p = 0; p < ctl_nparts(x); p++) {
        /* A share per call (deadadmin.lua), until none is left. */
        for (long long left = 1; left > 0;) {
            redisReply *r;
            if (ctl_run_script(x, SLUICEI_SCRIPT_DEADADMIN, ctl_pname(x, p), 1, &action, &r)) {
                fprintf(stderr, "sluice-ctl: queue '%s': %s %lld dead letter%s before that\n",
                        x->q, strcmp(action, "requeue") == 0 ? "requeued" : "purged", n,
                        n == 1 ? "" : "s");
                return SLUICEI_EXIT_RUNTIME;
            }
            left = 0;
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
                n += ctl_reply_num(r->element[0]);
                left = ctl_reply_num(r->element[1]);
            }
            freeReplyObject(r);
        }
    }
    printf("%s %lld dead letter%s\n", strcmp(action, "requeue") == 0 ? "requeued" : "purged", n,
           n == 1 ? "" : "s");
    return 0;
}

int reap_run(ctl *x)
{
    long long b = 0, t = 0;
    for (int p = 0; p < ctl_nparts(x); p++) {
        redisReply *r;
        /* Leases are judged on the server's clock, never this host's. */
        if (ctl_run_script(x, SLUICEI_SCRIPT_REAP, ctl_pname(x, p), 0, NULL, &r))
            return SLUICEI_EXIT_RUNTIME;
        b += r->type == REDIS_REPLY_ARRAY && r->elements >= 2 ? ctl_reply_num(r->element[0]) : 0;
        t += r->type == REDIS_REPLY_ARRAY && r->elements >= 2 ? ctl_reply_num(r->element[1]) : 0;
        freeReplyObject(r);
    }
    printf("handed back %lld batch%s of consumers whose lease expired; returned %lld task%s "
           "of producers whose lease expired\n",
           b, b == 1 ? "" : "es", t, t == 1 ? "" : "s");
    return 0;
}

