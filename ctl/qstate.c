/* A queue's state as info, jobs, stat and metrics show it: read from Redis
 * into plain structs (qinfo: budgets, counts, the job, its epochs and
 * failed tasks, the producers and consumers with their published
 * counters), and for a partitioned queue the sums over its partitions,
 * merged struct by struct (qview). */
#include "ctl.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- fields of a hash --------------------------------------------------- */

const char *ctl_fields_get(const ctl_fields *h, const char *name)
{
    for (size_t i = 0; i < h->n; i++)
        if (strcmp(h->f[i].name, name) == 0)
            return h->f[i].value;
    return NULL;
}

const char *ctl_fields_or(const ctl_fields *h, const char *name, const char *dflt)
{
    const char *v = ctl_fields_get(h, name);
    return v ? v : dflt;
}

long long ctl_fields_num(const ctl_fields *h, const char *name)
{
    return ctl_num(ctl_fields_get(h, name));
}

static void fields_free(ctl_fields *h)
{
    for (size_t i = 0; i < h->n; i++) {
        free(h->f[i].name);
        free(h->f[i].value);
    }
    free(h->f);
    h->f = NULL;
    h->n = 0;
}

/* Appends name = value (copies). Returns 0, or -1 when out of memory. */
static int fields_add(ctl_fields *h, const char *name, const char *value)
{
    ctl_field *f = realloc(h->f, (h->n + 1) * sizeof *f);
    if (!f)
        return -1;
    h->f = f;
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        return -1;
    }
    h->f[h->n].name = n;
    h->f[h->n].value = v;
    h->n++;
    return 0;
}

/* Sets field name to value: in its place when it is there, else at the
 * end. Returns 0 or -1 (out of memory). */
static int fields_put(ctl_fields *h, const char *name, const char *value)
{
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->f[i].name, name) == 0) {
            char *v = strdup(value);
            if (!v)
                return -1;
            free(h->f[i].value);
            h->f[i].value = v;
            return 0;
        }
    }
    return fields_add(h, name, value);
}

static int fields_put_num(ctl_fields *h, const char *name, long long v)
{
    char s[24];
    snprintf(s, sizeof s, "%lld", v);
    return fields_put(h, name, s);
}

static void fields_del(ctl_fields *h, const char *name)
{
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->f[i].name, name) == 0) {
            free(h->f[i].name);
            free(h->f[i].value);
            memmove(h->f + i, h->f + i + 1, (h->n - i - 1) * sizeof *h->f);
            h->n--;
            return;
        }
    }
}

/* The fields of an HGETALL reply. Returns 0 or -1 (out of memory). */
static int fields_of_reply(ctl_fields *h, const redisReply *r)
{
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (fields_add(h, r->element[i]->str, r->element[i + 1]->str))
            return -1;
    return 0;
}

/* A decimal integer, as Redis writes counters. */
static int is_int(const char *s)
{
    size_t i = s[0] == '-';
    if (!s[i] || strlen(s + i) > 18)
        return 0;
    return strspn(s + i, "0123456789") == strlen(s + i);
}

/* Adds the fields of h to m: a new field at the end; one m has already
 * keeps its value, or with sum, when both are integers, becomes their
 * sum. Returns 0 or -1 (out of memory). */
static int fields_merge(ctl_fields *m, const ctl_fields *h, int sum)
{
    for (size_t i = 0; i < h->n; i++) {
        const char *f = h->f[i].name, *v = h->f[i].value, *have = ctl_fields_get(m, f);
        int rc = 0;
        if (!have)
            rc = fields_add(m, f, v);
        else if (sum && is_int(v) && is_int(have))
            rc = fields_put_num(m, f, ctl_num(have) + ctl_num(v));
        if (rc)
            return -1;
    }
    return 0;
}

/* ---- one queue ---------------------------------------------------------- */

static void peers_free(peer *ps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(ps[i].id);
        free(ps[i].extra);
        fields_free(&ps[i].stats);
    }
    free(ps);
}

static void qinfo_free(qinfo *in)
{
    fields_free(&in->meta);
    fields_free(&in->stats);
    fields_free(&in->towner);
    fields_free(&in->crank);
    fields_free(&in->pgone);
    fields_free(&in->cgone);
    free(in->job.state);
    free(in->job.seed);
    for (size_t i = 0; i < in->nfailed; i++) {
        free(in->failed[i].task);
        free(in->failed[i].error);
    }
    free(in->failed);
    peers_free(in->prod, in->nprod);
    peers_free(in->cons, in->ncons);
    free(in->ep);
    memset(in, 0, sizeof *in);
}

/* A copy of s, or NULL for NULL; *oom set when out of memory. */
static char *dup_or_null(const char *s, int *oom)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *oom = 1;
    return d;
}

static int out_of_memory(void)
{
    fprintf(stderr, "sluice-ctl: out of memory\n");
    return SLUICEI_EXIT_RUNTIME;
}

/* field's value in an HGETALL reply, or NULL. */
static const char *hget(const redisReply *h, const char *field)
{
    if (!h || h->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < h->elements; i += 2)
        if (strcmp(h->element[i]->str, field) == 0)
            return h->element[i + 1]->str;
    return NULL;
}

static long long hnum(const redisReply *h, const char *field)
{
    return ctl_num(hget(h, field));
}

/* Runs "CMD key [arg]" and stores its integer value in *out (a nil reply,
 * LPOS finding nothing: -1). Returns 0, or -1 after printing the error. */
static int count_cmd(ctl *x, const char *q, const char *cmd, const char *key, const char *arg,
                     long long *out)
{
    const char *argv[3] = {cmd, key, arg};
    redisReply *r = ctl_must(x, q, arg ? 3 : 2, argv);
    if (!r)
        return -1;
    *out = r->type == REDIS_REPLY_NIL ? -1 : ctl_reply_num(r);
    freeReplyObject(r);
    return 0;
}

static redisReply *hgetall(ctl *x, const char *q, const char *key)
{
    const char *argv[2] = {"HGETALL", key};
    return ctl_must(x, q, 2, argv);
}

/* Stores in *n the batches waiting in list key, not counting an end
 * marker eof:<e>. Returns 0 or -1 (printed). */
static int list_batches(ctl *x, const char *q, const char *key, long long e, int ended,
                        long long *n)
{
    if (count_cmd(x, q, "LLEN", key, NULL, n))
        return -1;
    if (*n > 0 && ended) {
        char marker[32];
        long long pos;
        snprintf(marker, sizeof marker, "eof:%lld", e);
        if (count_cmd(x, q, "LPOS", key, marker, &pos))
            return -1;
        if (pos >= 0)
            (*n)--;
    }
    return 0;
}

/* The task producer id holds in towner (the last one listed), or NULL. */
static const char *task_of(const ctl_fields *towner, const char *id)
{
    const char *t = NULL;
    for (size_t k = 0; k < towner->n; k++)
        if (strcmp(towner->f[k].value, id) == 0)
            t = towner->f[k].name;
    return t;
}

/* Fills the peers of kind (producers or consumers) from hash h. Returns 0
 * or -1 (printed). */
static int read_peers(ctl *x, qinfo *in, const redisReply *h, int producers)
{
    size_t n = h->elements / 2;
    peer *ps = calloc(n ? n : 1, sizeof *ps);
    if (!ps) {
        out_of_memory();
        return -1;
    }
    if (producers) {
        in->prod = ps;
        in->nprod = n;
    } else {
        in->cons = ps;
        in->ncons = n;
    }
    long long now = in->server_ms;
    for (size_t i = 0; i < n; i++) {
        peer *p = &ps[i];
        char key[SLUICE_MAX_KEY + 80];
        int oom = 0;
        p->id = dup_or_null(h->element[2 * i]->str, &oom);
        p->seen_ms = ctl_num(h->element[2 * i + 1]->str);
        p->seen_ago_ms = now - p->seen_ms;
        if (producers) {
            p->extra = dup_or_null(task_of(&in->towner, h->element[2 * i]->str), &oom);
            sluicei_keyf(key, in->q, "pstats:%s", h->element[2 * i]->str);
        } else {
            p->extra = dup_or_null(ctl_fields_get(&in->crank, h->element[2 * i]->str), &oom);
            sluicei_keyf(key, in->q, "pending:%s", h->element[2 * i]->str);
            if (count_cmd(x, in->q, "LLEN", key, NULL, &p->pending))
                return -1;
            in->pending += p->pending;
            sluicei_keyf(key, in->q, "cstats:%s", h->element[2 * i]->str);
        }
        if (oom) {
            out_of_memory();
            return -1;
        }
        redisReply *st = hgetall(x, in->q, key);
        if (!st)
            return -1;
        oom = fields_of_reply(&p->stats, st);
        freeReplyObject(st);
        if (oom) {
            out_of_memory();
            return -1;
        }
    }
    return 0;
}

/* The hashes read once and gone through (qinfo_read). */
enum { H_META, H_STATS, H_JOB, H_JRUN, H_ESTATS, H_EDONE, H_EOF, H_TERR, H_TATTEMPTS,
       H_TOWNER, H_PRODUCERS, H_CONSUMERS, H_CRANK, H_PGONE, H_CGONE, H_COUNT };

static const char *const hash_names[H_COUNT] = {
    "meta", "stats", "job", "jrun", "estats", "edone", "eof", "terr", "tattempts", "towner",
    "producers", "consumers", "crank", "pstats_gone", "cstats_gone",
};

/* The fields of the job hash h and of its progress, r (jrun). Returns 0 or
 * -1 (out of memory). */
static int read_job(job_info *j, const redisReply *h, const redisReply *r)
{
    int oom = 0;
    j->present = h->elements > 0;
    j->state = dup_or_null(hget(r, "state"), &oom);
    j->seed = dup_or_null(hget(h, "seed"), &oom);
    j->epoch_open = hnum(r, "epoch_open");
    j->batch_size = hnum(h, "batch_size");
    j->max_attempts = hnum(h, "max_attempts");
    j->ntasks = hnum(h, "ntasks");
    j->max_crashes = hget(h, "max_crashes") ? hnum(h, "max_crashes") : 20;
    j->shuffle_buffer = hnum(h, "shuffle_buffer");
    j->drop_remainder = hnum(h, "drop_remainder") != 0;
    return oom ? -1 : 0;
}

/* The epochs' figures from the estats, edone and eof hashes and the
 * ready lists. Returns 0 or -1 (printed). */
static int read_epochs(ctl *x, qinfo *in, redisReply *const *h)
{
    const char *q = in->q;
    char k[SLUICE_MAX_KEY];
    if (!(in->ep = calloc((size_t)in->epochs, sizeof *in->ep))) {
        out_of_memory();
        return -1;
    }
    for (long long e = 0; e < in->epochs; e++) {
        epoch_info *ep = &in->ep[e];
        char f[48];
#define EST(member, name)                                     \
        snprintf(f, sizeof f, "%lld:%s", e, name);            \
        ep->member = hnum(h[H_ESTATS], f)
        EST(pushed, "pushed");
        EST(acked, "acked");
        EST(dropped, "dropped");
        EST(padded, "padded");
        EST(failed_tasks, "failed_tasks");
        EST(dropped_records, "dropped_records");
#undef EST
        snprintf(f, sizeof f, "%lld", e);
        ep->finished = hnum(h[H_EDONE], f);
        ep->ended = hget(h[H_EOF], f) != NULL;
        long long n;
        if (in->ranks > 0) {
            for (long long r = 0; r < in->ranks; r++) {
                sluicei_keyf(k, q, "ready:%lld:%lld", e, r);
                if (list_batches(x, q, k, e, ep->ended, &n))
                    return -1;
                ep->ready += n;
            }
            sluicei_keyf(k, q, "stage:%lld", e);
            if (count_cmd(x, q, "LLEN", k, NULL, &n))
                return -1;
            ep->ready += n;
        } else {
            sluicei_keyf(k, q, "ready:%lld", e);
            if (list_batches(x, q, k, e, ep->ended, &n))
                return -1;
            ep->ready += n;
        }
        in->ready += ep->ready;
    }
    return 0;
}

/* The failed tasks (list 'failed') with their attempts and last errors.
 * Returns 0 or -1 (out of memory). */
static int read_failed(qinfo *in, const redisReply *list, redisReply *const *h)
{
    if (!(in->failed = calloc(list->elements ? list->elements : 1, sizeof *in->failed)))
        return -1;
    int oom = 0;
    for (size_t i = 0; i < list->elements; i++, in->nfailed++) {
        const char *t = list->element[i]->str;
        in->failed[i].task = dup_or_null(t, &oom);
        in->failed[i].attempts = hnum(h[H_TATTEMPTS], t);
        in->failed[i].error = dup_or_null(hget(h[H_TERR], t), &oom);
    }
    return oom ? -1 : 0;
}

/* Reads the state of queue q into in (zeroed first). Returns 0, or
 * SLUICEI_EXIT_RUNTIME (printed); qinfo_free(in) is due either way. */
static int qinfo_read(ctl *x, const char *q, qinfo *in)
{
    char k[SLUICE_MAX_KEY];
    redisReply *h[H_COUNT] = {0}, *failed = NULL;
    int rc = SLUICEI_EXIT_RUNTIME;
    memset(in, 0, sizeof *in);
    in->q = q;
    sluicei_keyf(k, q, "meta");
    if (!(h[H_META] = hgetall(x, q, k)))
        goto out;
    if (h[H_META]->elements == 0) {
        x->missing = 1;
        ctl_print_noqueue(x, q);
        goto out;
    }
    /* Heartbeats are the server's times: "seen ... ago" is against its
     * clock, whatever this host's says. */
    const char *tv[1] = {"TIME"};
    redisReply *t = ctl_must(x, q, 1, tv);
    if (!t)
        goto out;
    in->server_ms = t->type == REDIS_REPLY_ARRAY && t->elements == 2
                        ? ctl_reply_num(t->element[0]) * 1000 + ctl_reply_num(t->element[1]) / 1000
                        : (long long)(sluicei_wall_us() / 1000u);
    freeReplyObject(t);
    for (int i = H_STATS; i < H_COUNT; i++) {
        sluicei_keyf(k, q, "%s", hash_names[i]);
        if (!(h[i] = hgetall(x, q, k)))
            goto out;
    }
#define COUNT(field, cmd, name)                               \
    do {                                                      \
        sluicei_keyf(k, q, "%s", name);                               \
        if (count_cmd(x, q, cmd, k, NULL, &in->field))        \
            goto out;                                         \
    } while (0)
    COUNT(held, "HLEN", "dlv");
    {
        long long pin;
        if (count_cmd(x, q, "HEXISTS", k, SLUICEI_DLV_PIN, &pin))
            goto out;
        in->held -= pin;
    }
    COUNT(bytes, "GET", "bytes");
    COUNT(dead, "LLEN", "dead");
    COUNT(retained, "HLEN", "retained");
    COUNT(retained_bytes, "GET", "retained_bytes");
    if (in->retained_bytes < 0)   /* no key: nothing kept */
        in->retained_bytes = 0;
    COUNT(claimed, "ZCARD", "tlease");
    COUNT(done, "HLEN", "tbatches");
#undef COUNT
    sluicei_keyf(k, q, "failed");
    const char *lr[4] = {"LRANGE", k, "0", "-1"};
    if (!(failed = ctl_must(x, q, 4, lr)))
        goto out;

    in->ranks = hnum(h[H_META], "ranks");
    in->lease_ms = hget(h[H_META], "lease_ms") ? hnum(h[H_META], "lease_ms")
                                                : SLUICE_LEASE_MS_DEFAULT;
    in->max_batches = hnum(h[H_META], "max_batches");
    in->max_bytes = hnum(h[H_META], "max_bytes");
    in->waiting = hnum(h[H_JRUN], "twaiting");
    /* Without a job the queue has one epoch, 0, that never ends. */
    in->epochs = h[H_JOB]->elements ? hnum(h[H_JOB], "epochs") : 1;
    if (in->epochs < 1)
        in->epochs = 1;
    if (in->epochs > CTL_MAX_EPOCHS) {
        /* Each epoch costs an allocation and reads: a value no submit
         * writes is not believed. */
        fprintf(stderr, "sluice-ctl: queue '%s': its job says %lld epochs, more than %d\n", q,
                in->epochs, CTL_MAX_EPOCHS);
        goto out;
    }
    if (fields_of_reply(&in->meta, h[H_META]) || fields_of_reply(&in->stats, h[H_STATS]) ||
        fields_of_reply(&in->towner, h[H_TOWNER]) || fields_of_reply(&in->crank, h[H_CRANK]) ||
        fields_of_reply(&in->pgone, h[H_PGONE]) || fields_of_reply(&in->cgone, h[H_CGONE]) ||
        read_job(&in->job, h[H_JOB], h[H_JRUN]) || read_failed(in, failed, h)) {
        out_of_memory();
        goto out;
    }
    if (read_epochs(x, in, h) || read_peers(x, in, h[H_PRODUCERS], 1) ||
        read_peers(x, in, h[H_CONSUMERS], 0))
        goto out;
    rc = 0;
out:
    for (int i = 0; i < H_COUNT; i++)
        if (h[i])
            freeReplyObject(h[i]);
    if (failed)
        freeReplyObject(failed);
    return rc;
}

size_t qstate_alive(const peer *ps, size_t n, long long lease_ms)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ps[i].seen_ago_ms <= lease_ms;
    return k;
}

/* ---- a partitioned queue as a whole ------------------------------------- */

/* The peer called id in partition info in, or NULL. */
static const peer *peer_in(const qinfo *in, const char *id, int producers)
{
    const peer *ps = producers ? in->prod : in->cons;
    size_t n = producers ? in->nprod : in->ncons;
    for (size_t i = 0; i < n; i++)
        if (strcmp(ps[i].id, id) == 0)
            return &ps[i];
    return NULL;
}

/* The peers of the whole queue: a producer or consumer works in several
 * partitions under one id (one child per partition), listed in the order
 * the partitions show them first; its published counters are added up,
 * its last sign of life is the latest, its epoch the highest; a
 * producer's task is the last one the partitions list for it, a
 * consumer's rank the first. Returns 0 or -1 (out of memory). */
static int merge_peers(qinfo *all, const qinfo *parts, int P, int producers)
{
    size_t cap = 0;
    for (int k = 0; k < P; k++)
        cap += producers ? parts[k].nprod : parts[k].ncons;
    peer *ps = calloc(cap ? cap : 1, sizeof *ps);
    if (!ps)
        return -1;
    size_t n = 0;
    if (producers)
        all->prod = ps;
    else
        all->cons = ps;
    for (int k = 0; k < P; k++) {
        const peer *kp = producers ? parts[k].prod : parts[k].cons;
        size_t kn = producers ? parts[k].nprod : parts[k].ncons;
        for (size_t i = 0; i < kn; i++) {
            size_t at = 0;
            while (at < n && strcmp(ps[at].id, kp[i].id) != 0)
                at++;
            if (at < n) {
                if (kp[i].seen_ms > ps[at].seen_ms)
                    ps[at].seen_ms = kp[i].seen_ms;
                continue;
            }
            peer *p = &ps[n++];
            if (producers)
                all->nprod = n;
            else
                all->ncons = n;
            if (!(p->id = strdup(kp[i].id)))
                return -1;
            p->seen_ms = kp[i].seen_ms;
        }
    }
    for (size_t i = 0; i < n; i++) {
        peer *p = &ps[i];
        const char *extra = NULL;
        long long epoch = -1;
        p->seen_ago_ms = all->server_ms - p->seen_ms;
        for (int k = 0; k < P; k++) {
            const peer *x = peer_in(&parts[k], p->id, producers);
            if (producers) {
                const char *t = task_of(&parts[k].towner, p->id);
                if (t)
                    extra = t;
            } else if (!extra) {
                extra = ctl_fields_get(&parts[k].crank, p->id);
            }
            if (!x)
                continue;
            if (fields_merge(&p->stats, &x->stats, 1))
                return -1;
            if (!producers) {
                p->pending += x->pending;
                const char *ep = ctl_fields_get(&x->stats, "epoch");
                if (ep && ctl_num(ep) > epoch)
                    epoch = ctl_num(ep);
            }
        }
        if (!producers)
            all->pending += p->pending;
        if (epoch >= 0 && fields_put_num(&p->stats, "epoch", epoch))
            return -1;
        if (extra && !(p->extra = strdup(extra)))
            return -1;
    }
    return 0;
}

/* The job of the whole queue: the first partition's settings; the shards
 * and tasks waiting added up; the lowest open epoch; running while it runs
 * in any partition. Returns 0 or -1 (out of memory). */
static int merge_job(job_info *j, const qinfo *parts, int P)
{
    const job_info *first = NULL;
    long long open = -1, ntasks = 0;
    const char *state = NULL;
    for (int p = 0; p < P; p++) {
        const job_info *pj = &parts[p].job;
        if (!pj->present)
            continue;
        if (!first)
            first = pj;
        ntasks += pj->ntasks;
        if (open < 0 || pj->epoch_open < open)
            open = pj->epoch_open;
        /* The job runs while it runs in any partition. */
        if (pj->state && (!state || strcmp(pj->state, "finished") != 0))
            state = pj->state;
    }
    if (!first)
        return 0;
    int oom = 0;
    *j = *first;
    j->state = dup_or_null(state, &oom);
    j->seed = dup_or_null(first->seed, &oom);
    j->ntasks = ntasks;
    j->epoch_open = open;
    return oom ? -1 : 0;
}

/* Fills all (its q: q) with the sums over parts[0..P). Returns 0, or
 * SLUICEI_EXIT_RUNTIME when out of memory (printed; qinfo_free(all)
 * still due). */
static int qinfo_merge(qinfo *all, const qinfo *parts, int P, const char *q)
{
    memset(all, 0, sizeof *all);
    all->q = q;
    size_t nfailed = 0;
    for (int p = 0; p < P; p++)
        nfailed += parts[p].nfailed;
    if (!(all->failed = calloc(nfailed ? nfailed : 1, sizeof *all->failed)))
        goto oom;
    for (int p = 0; p < P; p++) {
        const qinfo *in = &parts[p];
        if (fields_merge(&all->meta, &in->meta, 0) || fields_merge(&all->stats, &in->stats, 1) ||
            fields_merge(&all->pgone, &in->pgone, 1) || fields_merge(&all->cgone, &in->cgone, 1))
            goto oom;
        for (size_t i = 0; i < in->nfailed; i++) {
            failed_task *f = &all->failed[all->nfailed++];
            int oom = 0;
            f->task = dup_or_null(in->failed[i].task, &oom);
            f->error = dup_or_null(in->failed[i].error, &oom);
            f->attempts = in->failed[i].attempts;
            if (oom)
                goto oom;
        }
        all->max_batches += in->max_batches;
        all->max_bytes += in->max_bytes;
        all->held += in->held;
        all->bytes += in->bytes;
        all->ready += in->ready;
        all->dead += in->dead;
        all->retained += in->retained;
        all->retained_bytes += in->retained_bytes;
        all->waiting += in->waiting;
        all->claimed += in->claimed;
        all->done += in->done;
        if (in->epochs > all->epochs)
            all->epochs = in->epochs;
        if (in->server_ms > all->server_ms)
            all->server_ms = in->server_ms;
    }
    /* A peer works in every partition under one id and leaves each: the
     * peers that left are the most any partition counts, not the sum. */
    for (int kind = 0; kind < 2; kind++) {
        ctl_fields *g = kind ? &all->cgone : &all->pgone;
        long long most = 0;
        for (int p = 0; p < P; p++) {
            long long n = ctl_fields_num(kind ? &parts[p].cgone : &parts[p].pgone, "left");
            most = n > most ? n : most;
        }
        if (ctl_fields_get(g, "left") && fields_put_num(g, "left", most))
            goto oom;
    }
    all->ranks = parts[0].ranks;
    all->lease_ms = parts[0].lease_ms;
    fields_del(&all->meta, "partition");
    if (fields_put_num(&all->meta, "max_batches", all->max_batches) ||
        fields_put_num(&all->meta, "max_bytes", all->max_bytes) || merge_job(&all->job, parts, P))
        goto oom;
    if (!(all->ep = calloc((size_t)all->epochs, sizeof *all->ep)))
        goto oom;
    /* An epoch of the queue ends when it ended in every partition. */
    for (long long e = 0; e < all->epochs; e++) {
        epoch_info *x = &all->ep[e];
        x->ended = 1;
        for (int p = 0; p < P; p++) {
            if (e >= parts[p].epochs) {
                x->ended = 0;
                continue;
            }
            const epoch_info *y = &parts[p].ep[e];
            x->ready += y->ready;
            x->pushed += y->pushed;
            x->acked += y->acked;
            x->dropped += y->dropped;
            x->padded += y->padded;
            x->dropped_records += y->dropped_records;
            x->failed_tasks += y->failed_tasks;
            x->finished += y->finished;
            x->ended &= y->ended;
        }
    }
    if (merge_peers(all, parts, P, 1) || merge_peers(all, parts, P, 0))
        goto oom;
    return 0;
oom:
    fprintf(stderr, "sluice-ctl: out of memory adding up the partitions of queue '%s'\n", q);
    return SLUICEI_EXIT_RUNTIME;
}

void qview_free(qview *v)
{
    qinfo_free(&v->all);
    for (int p = 0; p < v->partitions && v->part; p++)
        qinfo_free(&v->part[p]);
    free(v->part);
    free(v->node);
}

int qview_read(ctl *x, qview *v)
{
    memset(v, 0, sizeof *v);
    x->missing = 0;
    if (!x->partitions)
        return qinfo_read(x, x->q, &v->all);
    int P = x->partitions;
    v->part = calloc((size_t)P, sizeof *v->part);
    v->node = calloc((size_t)P, sizeof *v->node);
    if (!v->part || !v->node)
        return out_of_memory();
    v->partitions = P;
    for (int p = 0; p < P; p++) {
        int rc = qinfo_read(x, ctl_pname(x, p), &v->part[p]);
        if (rc)
            return rc;
        if (p == 0 && ctl_fields_num(&v->part[0].meta, "partitions") != P) {
            qview_free(v);
            memset(v, 0, sizeof *v);
            return ctl_discover(x) ? SLUICEI_EXIT_RUNTIME : qview_read(x, v);
        }
        sluicei_url u;
        char err[256];
        if (sluicei_router_url(x->r, ctl_pname(x, p), 0, &u, err, sizeof err) == SLUICE_OK) {
            sluicei_url_describe(&u, v->node[p], sizeof v->node[p]);
            sluicei_url_free(&u);
        } else {
            snprintf(v->node[p], sizeof v->node[p], "?");
        }
    }
    return qinfo_merge(&v->all, v->part, P, x->q);
}
