/* The consumer library (consumer.h): a background thread per consumer runs
 * its own libevent loop with two hiredis async connections to Redis and
 * keeps up to `prefetch` decoded batches ready; the caller's thread only
 * moves pointers in and out of a mutex-protected FIFO.
 *
 * Threads. The API thread (next, release, stats...) never touches a hiredis
 * context or the event base; it wakes the loop through an eventfd (an ack
 * to send, room in the FIFO, an epoch to start, close). The loop thread
 * hands batches, end-of-epoch marks and errors back under the mutex and
 * signals a condition variable.
 *
 * Three connections, so that a blocking read never delays an ack:
 *   data  take, BLMOVE, claim, GET, dead, requeue, restore: one operation
 *         at a time, pipelined within it (take, then the GETs of what it
 *         moved, and at most once their acks right behind).
 *   ctl   acks, heartbeats (beat), reaping (reap), CLIENT UNBLOCK at close.
 *   hand  written by next() itself, never read: CLIENT REPLY OFF, then one
 *         PEXPIREAT b:<id> per batch handed to the application (the mark
 *         of lib.lua: handed), so that Redis learns what the application
 *         received, at the cost of one write and no round trip. The write
 *         is corked (MSG_MORE): it stays in the kernel, which sends it
 *         with the next ones when the loop pushes them (every pump and
 *         tick: session_hand_flush), after about 200 ms on its own (the
 *         process frozen), and at once when the socket is closed (a kill -9 too).
 *         So next() makes no round trip and wakes nobody, and the mark is
 *         in Redis well before the lease can run out (lease_until). (A
 *         restart of Redis can lose marks on their way: the next session's
 *         restore puts them back, and lib.lua's notice_restart covers a
 *         consumer that dies first.) The
 *         socket is the loop's (it connects and closes it); next() writes
 *         to it only under the mutex, while hand_fd says it is up. Over
 *         TLS next() writes through the hand connection's tunnel itself
 *         (tls.h: sluicei_tunnel_write), into its TCP socket, corked with
 *         TCP_CORK: the same, without waiting for the relay thread.
 * Acks go in batches: one ack script call for every batch released since
 * the last (up to ACK_BATCH_MAX).
 * All three are set up together (AUTH, SELECT, SCRIPT LOAD) and dropped
 * together: a failure of any ends the "session", and the next one starts
 * after an exponential backoff with jitter. Every session first restores
 * (restore script) what the application holds and what it acknowledged in
 * the last seconds, in case Redis lost its last writes, then reads its
 * pending list again. After a restart of Redis, takes are answered
 * RECOVERING until the consumers Redis knew have restored (restore.lua):
 * the loop polls every RECOVER_POLL_MS meanwhile.
 *
 * Leases run on the server's clock: every take, claim and beat renews
 * this consumer's registration (lib.lua: enter), and the loop notes when
 * it sent the last renewal that Redis confirmed. The lease then runs at
 * least until that moment plus the lease (the server renewed it later),
 * whatever the clocks of this host say; lease_until is that minus
 * max(lease/4, HAND_MARGIN_MS), the point up to which next() hands out
 * prefetched batches (their marks reach Redis before a reaper can act)
 * and the loop starts a BLMOVE (which may block block_ms <= lease/4). A
 * consumer that was silent for longer (frozen, starved) learns from Redis
 * that it lost the lease (LEASELOST): it drops its prefetched batches,
 * which went back to the queue (and forgets them: they are no duplicates
 * when they come again), and starts a new session.
 *
 * Where a batch is, from the consumer's point of view:
 *   ready (Redis) -> pending:<cid> (Redis) and then, locally, one of
 *     fifo     decoded, not yet returned by next()       (at most prefetch)
 *     out      returned by next(), not yet released
 *     acks     released; the loop has not picked the ack up yet
 *     unconf   ack sent (or to be sent), not yet confirmed by Redis
 *     recover  in pending:<cid> but in none of the above: the reply that
 *              moved it there was lost with the connection; fetched next.
 * A lost connection never loses a batch: whatever a lost reply moved is
 * still in pending:<cid>, and the LRANGE at the start of every session
 * finds it by elimination. Acks are idempotent, so unconfirmed ones are
 * simply sent again.
 *
 * Epochs: the loop takes from ready:<e>[:<rank>] until the take script (or
 * BLMOVE) shows the marker eof:<e>; it then stops fetching, reads the job's
 * number of epochs, and publishes "at marker". next() returns SLUICE_EOF
 * once the batches before the marker are gone and tells the loop to start
 * e+1, so no batch of e+1 is ever fetched before the EOF of e.
 *
 * Partitioned queues. A queue Q of P partitions is P complete queues
 * "Q#0".."Q#P-1" (cluster.h), possibly on different Redis nodes. open()
 * then returns a group: a sluice_consumer without a loop of its own that
 * holds one child consumer per partition, each exactly the consumer
 * described above (own thread, connections, prefetch, epochs). The
 * children use the group's mutex and condition variable (`top`), so every
 * signal a child sends wakes the group's next(), which takes from the home
 * partition first and then from the others in turn. A child that returned
 * the end of the group's epoch is not asked again until every child has:
 * then the group returns one SLUICE_EOF. A batch points to its child, so
 * release() does not know about groups.
 *
 * Redis Cluster and lists of servers. A consumer whose address is not a
 * single server keeps it (route_addr): after a failed session its loop
 * asks a router of its own (cluster.h) which node serves its queue now,
 * so a failover or a migrated slot is followed by reconnecting. A reply
 * that says the data is elsewhere or about to be (MOVED, ASK, TRYAGAIN,
 * ...: sluicei_cluster_retryable) ends the session like a lost
 * connection; nothing is fatal about it, and no batch goes to the dead
 * letters for it. When the node has replicas to wait for
 * (url.wait_replicas), a WAIT follows every write of the data operation
 * that moves batches to this consumer, before their GETs; a periodic ROLE
 * keeps it from waiting for replicas that are not connected.
 *
 * The files of consumer/src, by responsibility (consumer_internal.h holds
 * what they share):
 *   consumer.c  this: opening (option checks, reading the queue's settings,
 *               registration, groups) and freeing
 *   api.c       the API thread: next(), release/ack, close, stats...
 *   loop.c      the loop thread: wake-ups, timers, pump(), start and stop
 *   session.c   connections, setup, backoff, the hand connection
 *   send.c      requests and commands (scripts, acks, dead letters...)
 *   handlers.c  the replies (take, claim, frames, end of epoch, beat...)
 *   fetch.c     the data operations: take, BLMOVE, GET/MGET
 *   recover.c   restore, resync and recovery of pending:<cid>, close steps
 *   dups.c      the duplicate filter, over idset.c (its hash set) */
#include "consumer_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int consumer_id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MAX_CONSUMER_ID)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-' || ch == ':'))
            return 0;
    }
    return 1;
}

/* Frees what open() built; no loop thread of c (or of its children) is
 * running. A group frees its children first: they use its mutex. */
void consumer_free(sluice_consumer *c)
{
    for (int p = 0; c->part && p < c->nparts; p++)
        if (c->part[p])
            consumer_free(c->part[p]);
    free(c->part);
    free(c->wakes);
    while (c->fifo && c->fifo_len > 0) {
        sluice_batch_free(c->fifo[c->fifo_head].b);
        c->fifo_head = (c->fifo_head + 1) % c->prefetch;
        c->fifo_len--;
    }
    if (c->wake_ev)
        event_free(c->wake_ev);
    if (c->tick_ev)
        event_free(c->tick_ev);
    if (c->retry_ev)
        event_free(c->retry_ev);
    if (c->oom_ev)
        event_free(c->oom_ev);
    if (c->notify_ev)
        event_free(c->notify_ev);
    if (c->ack_ev)
        event_free(c->ack_ev);
    if (c->base)
        event_base_free(c->base);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    sluicei_url_free(&c->url);
    sluicei_router_close(c->router);
    free(c->route_addr);
    dups_reset(c);
    if (c->top == c) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
    }
    free(c->fifo);
    free(c->out);
    free(c->acks);
    free(c->items);
    free(c->unconf);
    free(c->recover);
    free(c->ring);
    while (c->req_pool) {
        req *q = c->req_pool;
        c->req_pool = q->next_free;
        free(q->ids);
        free(q);
    }
    free(c->script_av);
    free(c->script_al);
    free(c->ack_num);
    free(c->ack_argv);
    free(c->fetch_keys);
    free(c->fetch_av);
    sluicei_zpool_close(c->zpool);   /* batches the application holds keep theirs */
    free(c);
}

/* Where open() reads a queue's settings: over a connection of its own to
 * the one server, or through a router (a cluster, a list of servers),
 * which follows redirections and finds the queue's node. */
typedef struct setup_link {
    sluicei_conn *sc;
    sluicei_router *r;
    int64_t deadline_ms;   /* router: when to give up a node that does not answer */
} setup_link;

static sluice_err link_command(setup_link *l, const char *q, redisReply **out, int argc,
                               const char **argv)
{
    if (l->r)
        return sluicei_router_command(l->r, q, l->deadline_ms, out, argc, argv, NULL);
    return sluicei_conn_commandargv(l->sc, out, argc, argv, NULL);
}

/* Why a call of link_command() (result e, reply r) failed. */
static void link_why(setup_link *l, const char *q, sluice_err e, const redisReply *r, char *errbuf,
                     size_t errlen)
{
    if (r && r->type == REDIS_REPLY_ERROR && l->sc &&
        (starts_with(r->str, r->len, "MOVED ") || starts_with(r->str, r->len, "ASK ")))
        snprintf(errbuf, errlen, "%s (the server is a Redis Cluster node: use a "
                 "redis+cluster:// address)", r->str);
    else if (r && r->type == REDIS_REPLY_ERROR)
        snprintf(errbuf, errlen, "%s", r->str);
    else if (l->sc)
        snprintf(errbuf, errlen, "%s", l->sc->errstr);
    else if (sluicei_router_errstr(l->r)[0])
        snprintf(errbuf, errlen, "%s", sluicei_router_errstr(l->r));
    else
        snprintf(errbuf, errlen, "redis %s: reading queue '%s': %s", sluicei_router_describe(l->r),
                 q, sluice_strerror(e));
}

static sluice_err link_script(setup_link *l, const char *q, sluicei_script_id id, int argc,
                              const char **argv, redisReply **out)
{
    if (l->r)
        return sluicei_router_script(l->r, q, l->deadline_ms, id, argc, argv, NULL, out);
    return sluicei_script_run(l->sc, id, q, argc, argv, NULL, out);
}

/* Registers c with its queue (lib.lua: enter), which open() does so that
 * a consumer id or rank held by a live consumer is an error at once. The
 * holder may be a process that died: then its lease runs out, and the
 * registration succeeds. So while the holder does not renew its lease,
 * this waits (up to the lease); once it renews, it is alive:
 * SLUICE_ERR_BUSY, naming it. */
static sluice_err register_consumer(sluice_consumer *c, setup_link *l, char *errbuf,
                                    size_t errlen)
{
    int64_t give_up = sluicei_now_ms() + c->lease_ms + 2000;
    char first_seen[32] = "";
    for (;;) {
        int64_t t0 = sluicei_now_ms();
        const char *argv[5] = {"consumer", c->id, c->tok, "1", c->rank_s};
        redisReply *r = NULL;
        sluice_err e = link_script(l, c->queue, SLUICEI_SCRIPT_BEAT, 5, argv, &r);
        if (e == SLUICE_OK && r && r->type == REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            c->registered = 1;
            c->lease_until = t0 + c->lease_ms * 3 / 4;
            return SLUICE_OK;
        }
        if (!r || r->type != REDIS_REPLY_ERROR || strncmp(r->str, "HELD ", 5) != 0) {
            if (e == SLUICE_OK)
                e = SLUICE_ERR_PROTOCOL;
            if (e == SLUICE_ERR_AUTH)
                sluicei_script_denied(errbuf, errlen, SLUICEI_SCRIPT_BEAT, 5, argv, c->queue,
                                      r ? r->str : "no reply");
            else
                link_why(l, c->queue, e, r, errbuf, errlen);
            if (r)
                freeReplyObject(r);
            return e;
        }
        /* "HELD <holder> <seen_ms> <text>" */
        char holder[80] = "", seen[32] = "";
        const char *text = r->str;
        sscanf(r->str + 5, "%79s %31s", holder, seen);
        for (int k = 0; k < 3 && strchr(text, ' '); k++)
            text = strchr(text, ' ') + 1;
        int renewed = first_seen[0] && strcmp(first_seen, seen) != 0;
        if (!first_seen[0])
            snprintf(first_seen, sizeof first_seen, "%s", seen);
        if (renewed || sluicei_now_ms() >= give_up) {
            snprintf(errbuf, errlen, "queue '%s': %s%s", c->queue, text,
                     renewed ? ", and it renews its lease: one consumer per id and per rank "
                               "(is another process using them? RANK vs LOCAL_RANK?)"
                             : "");
            freeReplyObject(r);
            return SLUICE_ERR_BUSY;
        }
        freeReplyObject(r);
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Checkpoints at open, once c is registered: resumes o->resume's
 * checkpoint (the batches acknowledged after it go back to their lists,
 * in steps of the script's), and sets *start to its epoch; without a
 * token (fresh), an owner that never took a checkpoint gets back all it
 * acknowledged; one that did goes on as it is. */
static sluice_err ckpt_open(sluice_consumer *c, const sluice_consumer_opts *o, setup_link *l,
                            int64_t *start, char *errbuf, size_t errlen)
{
    char q[SLUICE_MAX_QUEUE_NAME + 1], owner[MAX_CONSUMER_ID + 2], job[48], n[24];
    uint64_t num = 0;
    c->ckpt_keep = o->checkpoint_keep > 0 ? o->checkpoint_keep : SLUICE_CHECKPOINT_KEEP_DEFAULT;
    if (o->resume && ckpt_token_parse(o->resume, q, owner, &num, job, errbuf, errlen) != 0)
        return SLUICE_ERR_INVALID;
    if (o->resume && strcmp(q, o->queue) != 0) {
        snprintf(errbuf, errlen, "resume: the checkpoint is of queue '%s', not '%s'", q, o->queue);
        return SLUICE_ERR_INVALID;
    }
    if (c->world > 0)
        snprintf(c->owner, sizeof c->owner, "#%d", c->rank);
    else
        snprintf(c->owner, sizeof c->owner, "%s", o->resume ? owner : c->id);
    snprintf(n, sizeof n, "%" PRIu64, num);
    for (;;) {
        const char *argv[7] = {o->resume ? "resume" : "fresh", c->id, c->tok, c->rank_s, c->owner,
                               n, job};
        redisReply *r = NULL;
        sluice_err e = link_script(l, c->queue, SLUICEI_SCRIPT_CHECKPOINT, o->resume ? 7 : 5,
                                   argv, &r);
        /* fresh: {last, more}; resume: {epoch, more, last}. */
        size_t want = o->resume ? 3 : 2;
        if (e == SLUICE_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == want) {
            long long more = r->element[1]->integer;
            c->ckpt_last = (uint64_t)r->element[want - 1]->integer;
            if (o->resume)
                *start = r->element[0]->integer;
            freeReplyObject(r);
            if (!more)
                return SLUICE_OK;
            continue;
        }
        if (e == SLUICE_OK)
            e = r && r->type == REDIS_REPLY_ERROR && sluicei_reply_error_code(r) != SLUICE_OK
                    ? sluicei_reply_error_code(r) : SLUICE_ERR_PROTOCOL;
        if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "INVALID ", 8) == 0)
            snprintf(errbuf, errlen, "queue '%s': resume: %s", c->queue, r->str + 8);
        else
            link_why(l, c->queue, e, r, errbuf, errlen);
        if (r)
            freeReplyObject(r);
        return e;
    }
}

/* Reads the queue's configuration and the job, which also proves the
 * address and credentials, and registers the consumer. o->queue is the
 * name the caller opened (c's queue, or the partitioned queue c is a
 * partition of). */
static sluice_err read_setup(sluice_consumer *c, const sluice_consumer_opts *o, setup_link *l,
                             char *errbuf, size_t errlen)
{
    const char *q = c->queue;
    int part = strcmp(q, o->queue) != 0;
    redisReply *m = NULL, *j = NULL;
    /* Batches held by consumers that died first go back to the lists now:
     * when the others have finished the job, no one else would reap them
     * for this consumer (which, seeing every list drained, would finish at
     * once). A failure here is left to the checks below. */
    sluice_err e = link_script(l, q, SLUICEI_SCRIPT_REAP, 0, NULL, &m);
    if (e == SLUICE_ERR_IO) {
        link_why(l, q, e, NULL, errbuf, errlen);
        goto out;
    }
    e = SLUICE_OK;
    if (m)
        freeReplyObject(m);
    m = NULL;
    const char *mv[6] = {"HMGET", c->k_meta, "version", "ranks", "lease_ms", "max_frame"};
    const char *jv[4] = {"HMGET", c->k_jrun, "epochs", "epoch_open"};
    e = link_command(l, q, &m, 6, mv);
    if (e == SLUICE_OK)
        e = link_command(l, q, &j, 4, jv);
    if (e != SLUICE_OK) {
        link_why(l, q, e, m && m->type == REDIS_REPLY_ERROR ? m : j, errbuf, errlen);
        goto out;
    }
    if (m->type != REDIS_REPLY_ARRAY || m->elements != 4 || j->type != REDIS_REPLY_ARRAY ||
        j->elements != 2) {
        snprintf(errbuf, errlen, "unexpected reply reading the queue's settings");
        e = SLUICE_ERR_PROTOCOL;
        goto out;
    }
    if (m->element[0]->type != REDIS_REPLY_STRING) {
        if (part)
            snprintf(errbuf, errlen, "queue '%s' has no partition '%s' (delete it and create it "
                     "again)", o->queue, q);
        else
            snprintf(errbuf, errlen, "queue '%s' does not exist (create it with: sluice-ctl "
                     "create %s)", q, q);
        e = SLUICE_ERR_NOQUEUE;
        goto out;
    }
    long long ranks = reply_num(m->element[1], 0);
    long long lease = reply_num(m->element[2], 0);
    if (ranks > 0 && o->world == 0) {
        snprintf(errbuf, errlen,
                 "queue '%s' is coordinated over %lld ranks: open it with world=%lld and this "
                 "consumer's rank (sluice-consume --world %lld --rank R)",
                 o->queue, ranks, ranks, ranks);
        e = SLUICE_ERR_INVALID;
        goto out;
    }
    if (o->world > 0 && ranks != o->world) {
        if (ranks == 0)
            snprintf(errbuf, errlen, "queue '%s' is not coordinated: open it without world/rank "
                     "(or create it with --consumers %d --coordinated)", o->queue, o->world);
        else
            snprintf(errbuf, errlen, "queue '%s' is coordinated over %lld ranks, not world=%d",
                     o->queue, ranks, o->world);
        e = SLUICE_ERR_INVALID;
        goto out;
    }
    c->lease_ms = lease > 0 ? lease : SLUICE_LEASE_MS_DEFAULT;
    c->block_ms = c->lease_ms / 4 < BLOCK_MS ? (int)(c->lease_ms / 4) : BLOCK_MS;
    if (c->block_ms < 10)
        c->block_ms = 10;
    snprintf(c->block_arg, sizeof c->block_arg, "%d.%03d", c->block_ms / 1000, c->block_ms % 1000);
    long long frame = reply_num(m->element[3], (long long)SLUICEI_MAX_FRAME_DEFAULT);
    if (o->max_batch_bytes == 0) {
        c->max_batch_bytes = frame > 0 ? (size_t)frame : SLUICEI_MAX_FRAME_DEFAULT;
    } else if ((long long)o->max_batch_bytes < frame) {
        snprintf(errbuf, errlen, "queue '%s' admits frames of up to %lld bytes, more than this "
                 "consumer's max_batch_bytes of %zu: leave it 0 (the queue's limit) or raise it",
                 o->queue, frame, o->max_batch_bytes);
        e = SLUICE_ERR_INVALID;
        goto out;
    }
    if ((e = register_consumer(c, l, errbuf, errlen)) != SLUICE_OK)
        goto out;
    int64_t resumed = -1;
    if ((o->checkpoint_keep > 0 || o->resume) &&
        (e = ckpt_open(c, o, l, &resumed, errbuf, errlen)) != SLUICE_OK)
        goto out;
    if (resumed >= 0) {
        /* Where the consumer was when it took the checkpoint. */
        long long epochs = j->element[0]->type == REDIS_REPLY_STRING
                               ? reply_num(j->element[0], 0) : 0;
        c->epoch = c->loop_epoch = (uint32_t)resumed;
        c->finished = epochs > 0 && resumed >= epochs;
    } else if (j->element[0]->type == REDIS_REPLY_STRING) {
        long long epochs = reply_num(j->element[0], 0);
        long long open = reply_num(j->element[1], 0);
        if (open < 0 || open > UINT32_MAX)
            open = 0;
        /* epoch_open only says which epochs have their end posted; their
         * lists may still hold batches nobody took yet. Start at the first
         * epoch whose list holds more than its end marker. */
        long long start = 0;
        for (; start < open && start < epochs; start++) {
            char list[SLUICE_MAX_KEY], marker[32];
            sluicei_key_ready(list, q, (uint64_t)start, o->world > 0 ? o->rank : -1);
            snprintf(marker, sizeof marker, "eof:%lld", start);
            redisReply *lr = NULL;
            const char *lv[4] = {"LRANGE", list, "-2", "-1"};
            sluice_err le = link_command(l, q, &lr, 4, lv);
            if (le != SLUICE_OK) {
                link_why(l, q, le, lr, errbuf, errlen);
                if (lr)
                    freeReplyObject(lr);
                e = SLUICE_ERR_IO;
                goto out;
            }
            /* The consumer end of a list is its right: "-2 -1" is what comes
             * next. Only the marker left means the epoch is drained. */
            int drained = lr->type == REDIS_REPLY_ARRAY &&
                          (lr->elements == 0 ||
                           (lr->elements == 1 && strcmp(lr->element[0]->str, marker) == 0));
            freeReplyObject(lr);
            if (!drained)
                break;
        }
        c->epoch = c->loop_epoch = (uint32_t)start;
        /* The job ended, and was drained, before this consumer came. */
        c->finished = epochs > 0 && start >= epochs;
    }
out:
    if (m)
        freeReplyObject(m);
    if (j)
        freeReplyObject(j);
    return e;
}

/* Builds a consumer of queue q (o->queue, or partition q of it) with its
 * event loop, and reads the queue's settings; the thread is not started.
 * top is the group of a partition's consumer (NULL: none). With a router,
 * the queue's node comes from it, and is found again after every failed
 * session unless the router is a single server; without, c connects to
 * the one server at url over a connection of its own first. */
static sluice_err consumer_new(sluice_consumer **out, const sluice_consumer_opts *o, const char *q,
                               const char *id, sluicei_router *r, const sluicei_url *url,
                               sluice_consumer *top, char *errbuf, size_t errlen)
{
    *out = NULL;
    sluice_consumer *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    c->wake_fd = -1;
    if (top) {
        c->top = top;
    } else {
        c->top = c;
        pthread_mutex_init(&c->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&c->cv, &ca);
        pthread_condattr_destroy(&ca);
    }

    snprintf(c->queue, sizeof c->queue, "%s", q);
    snprintf(c->id, sizeof c->id, "%s", id);
    sluicei_key(c->k_meta, c->queue, "meta");
    sluicei_key(c->k_anchor, c->queue, "consumers");
    sluicei_key(c->k_frame, c->queue, "b:");
    sluicei_key(c->k_jrun, c->queue, "jrun");
    sluicei_keyf(c->k_pending, c->queue, "pending:%s", c->id);
    c->world = o->world;
    c->rank = o->rank;
    if (o->world > 0)
        snprintf(c->rank_s, sizeof c->rank_s, "%d", o->rank);
    c->ack_mode = o->ack_mode;
    c->accept_partial = o->accept_partial != 0;
    c->max_batch_bytes = o->max_batch_bytes;
    c->prefetch = o->prefetch ? o->prefetch : PREFETCH_MAX;
    c->low_water = c->prefetch - (c->prefetch / 2 > 1 ? c->prefetch / 2 : 1);
    c->win_max = o->prefetch_bytes ? o->prefetch_bytes : WINDOW_MAX_DEFAULT;
    if (top && top->nparts > 1) {
        /* The partitions share the group's window. */
        c->win_max /= (size_t)top->nparts;
        if (c->win_max < WINDOW_MIN_PART && !o->prefetch_bytes)
            c->win_max = WINDOW_MIN_PART;
    }
    c->win = c->win_max < WINDOW_START ? c->win_max : WINDOW_START;
    c->connect_timeout_ms =
        o->connect_timeout_ms ? o->connect_timeout_ms : SLUICE_CONNECT_TIMEOUT_MS_DEFAULT;
    c->reconnect_timeout_ms = o->reconnect_timeout_ms;
    c->rng = sluicei_random64() | 1;
    sluicei_backoff_init(&c->backoff, SLUICEI_BACKOFF_MIN_MS, SLUICEI_BACKOFF_MAX_MS,
                         sluicei_random64() | 1);
    snprintf(c->tok, sizeof c->tok, "%016" PRIx64, sluicei_random64());
    c->hand_fd = -1;
    c->producers_alive = -1;
    c->fifo = calloc((size_t)c->prefetch, sizeof *c->fifo);
    c->items = calloc((size_t)c->prefetch, sizeof *c->items);
    c->ring_cap = ACKED_RING;
    c->ring = calloc(c->ring_cap, sizeof *c->ring);
    /* Keeps what the prefetched batches need, within the window. */
    c->zpool = sluicei_zpool_new(c->prefetch < ZPOOL_KEEP ? c->prefetch : ZPOOL_KEEP,
                                 c->win_max);
    if (!c->fifo || !c->items || !c->ring || !c->zpool) {
        snprintf(errbuf, errlen, "out of memory");
        consumer_free(c);
        return SLUICE_ERR_NOMEM;
    }

    sluice_err e;
    if (r) {
        e = sluicei_router_url(r, c->queue, 0, &c->url, errbuf, errlen);
        c->cluster = sluicei_router_kind_of(r) == SLUICEI_ROUTER_CLUSTER;
        if (e == SLUICE_OK && sluicei_router_kind_of(r) != SLUICEI_ROUTER_SINGLE &&
            !(c->route_addr = strdup(o->redis_url))) {
            snprintf(errbuf, errlen, "out of memory");
            e = SLUICE_ERR_NOMEM;
        }
        if (e == SLUICE_OK) {
            setup_link l = {NULL, r, sluicei_now_ms() + c->connect_timeout_ms + REPLY_SLACK_MS};
            e = read_setup(c, o, &l, errbuf, errlen);
        }
    } else {
        e = sluicei_url_copy(&c->url, url);
        if (e != SLUICE_OK)
            snprintf(errbuf, errlen, "out of memory");
        sluicei_conn *sc = NULL;
        if (e == SLUICE_OK)
            e = sluicei_conn_open_url(&sc, url, o->connect_timeout_ms, 0, errbuf, errlen);
        if (e == SLUICE_OK) {
            setup_link l = {sc, NULL, 0};
            e = read_setup(c, o, &l, errbuf, errlen);
        }
        sluicei_conn_close(sc);
    }
    if (e != SLUICE_OK) {
        consumer_free(c);
        return e;
    }
    sluicei_url_describe(&c->url, c->addr, sizeof c->addr);

    if ((e = loop_init(c, errbuf, errlen)) != SLUICE_OK) {
        consumer_free(c);
        return e;
    }
    *out = c;
    return SLUICE_OK;
}

/* The group of a partitioned queue of nparts partitions: one consumer per
 * partition, all with the same id and options, all started. */
static sluice_err open_group(sluice_consumer **out, const sluice_consumer_opts *o, const char *id,
                             sluicei_router *r, int nparts, char *errbuf, size_t errlen)
{
    *out = NULL;
    sluice_consumer *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    g->wake_fd = -1;
    g->hand_fd = -1;
    g->producers_alive = -1;
    g->accept_partial = o->accept_partial != 0;
    g->top = g;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(g->queue, sizeof g->queue, "%s", o->queue);
    snprintf(g->id, sizeof g->id, "%s", id);
    g->world = o->world;
    g->rank = o->rank;
    g->ack_mode = o->ack_mode;
    g->prefetch = o->prefetch ? o->prefetch : PREFETCH_MAX;
    g->part = calloc((size_t)nparts, sizeof *g->part);
    g->wakes = calloc((size_t)nparts, sizeof *g->wakes);
    if (!g->part || !g->wakes) {
        consumer_free(g);
        snprintf(errbuf, errlen, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    g->nparts = nparts;
    sluice_err e = SLUICE_OK;
    for (int p = 0; p < nparts && e == SLUICE_OK; p++) {
        char q[SLUICE_MAX_QUEUE_NAME + 8];
        sluicei_partition_name(q, o->queue, p);
        if (strlen(q) > SLUICE_MAX_QUEUE_NAME) {
            snprintf(errbuf, errlen, "queue '%s': the name of its partition %d is longer than %d "
                     "bytes", o->queue, p, SLUICE_MAX_QUEUE_NAME);
            e = SLUICE_ERR_INVALID;
        } else {
            e = consumer_new(&g->part[p], o, q, id, r, NULL, g, errbuf, errlen);
        }
    }
    if (e != SLUICE_OK) {
        consumer_free(g);
        return e;
    }
    /* Partitions may have drained different epochs before this consumer
     * came: the group starts at the earliest, and a partition ahead of it
     * counts as having ended the epochs it skipped. */
    uint32_t lo = UINT32_MAX, hi = 0;
    int fin = 1;
    for (int p = 0; p < nparts; p++) {
        sluice_consumer *ch = g->part[p];
        lo = ch->epoch < lo ? ch->epoch : lo;
        hi = ch->epoch > hi ? ch->epoch : hi;
        fin &= ch->finished;
    }
    g->epoch = lo;
    g->finished = fin && lo == hi;
    /* Consumers of one queue start at different partitions, so that they
     * do not all drain the same one first. */
    g->home = o->world > 0 ? o->rank % nparts : (int)(idset_hash(id) % (uint64_t)nparts);
    g->rr = (g->home + 1) % nparts;
    for (int p = 0; p < nparts && e == SLUICE_OK; p++)
        e = loop_start(g->part[p], errbuf, errlen);
    if (e != SLUICE_OK) {
        loop_stop(g->part, nparts);
        consumer_free(g);
        return e;
    }
    *out = g;
    return SLUICE_OK;
}

/* Whether an address names more than one server (a cluster, a list):
 * then the queue may live anywhere, and only a router can tell. */
sluice_err sluice_consumer_open(sluice_consumer **out, const sluice_consumer_opts *o,
                                char *errbuf, size_t errlen)
{
    char scratch[8];
    if (!errbuf) {
        errbuf = scratch;
        errlen = sizeof scratch;
    }
    if (errlen)
        errbuf[0] = '\0';
    if (!out || !o) {
        snprintf(errbuf, errlen, "sluice_consumer_open: out and opts must not be NULL");
        return SLUICE_ERR_INVALID;
    }
    *out = NULL;
    if (!o->redis_url) {
        snprintf(errbuf, errlen, "no Redis URL given (opts.redis_url is NULL)");
        return SLUICE_ERR_INVALID;
    }
    sluice_err e = sluicei_queue_name_check(o->queue, errbuf, errlen);
    if (e != SLUICE_OK)
        return e;
    if (o->prefetch < 0 || o->prefetch > PREFETCH_MAX) {
        snprintf(errbuf, errlen, "prefetch must be 0 to %d, got %d", PREFETCH_MAX, o->prefetch);
        return SLUICE_ERR_INVALID;
    }
    if (o->reconnect_timeout_ms < 0 || o->connect_timeout_ms < 0) {
        snprintf(errbuf, errlen, "timeouts must not be negative");
        return SLUICE_ERR_INVALID;
    }
    if (o->consumer_id && !consumer_id_ok(o->consumer_id)) {
        snprintf(errbuf, errlen,
                 "consumer id must be 1 to %d characters of A-Z a-z 0-9 _ . - :", MAX_CONSUMER_ID);
        return SLUICE_ERR_INVALID;
    }
    if (o->world < 0 || o->world > WORLD_MAX ||
        (o->world > 0 && (o->rank < 0 || o->rank >= o->world)) || (o->world == 0 && o->rank != 0)) {
        snprintf(errbuf, errlen, "rank %d of world %d: the rank must be 0 to world-1 (world 0: "
                 "a free consumer, rank 0)", o->rank, o->world);
        return SLUICE_ERR_INVALID;
    }
    if (o->checkpoint_keep < 0 || o->checkpoint_keep > SLUICE_CHECKPOINT_KEEP_MAX) {
        snprintf(errbuf, errlen, "checkpoint_keep must be 0 to %d, got %d",
                 SLUICE_CHECKPOINT_KEEP_MAX, o->checkpoint_keep);
        return SLUICE_ERR_INVALID;
    }
    if ((o->checkpoint_keep > 0 || o->resume) && o->ack_mode == SLUICE_ACK_NONE) {
        snprintf(errbuf, errlen, "checkpoints need acknowledgements: a consumer that "
                 "acknowledges at most once has nothing to give back");
        return SLUICE_ERR_INVALID;
    }
    if (o->ack_mode != SLUICE_ACK_EXPLICIT && o->ack_mode != SLUICE_ACK_NONE) {
        snprintf(errbuf, errlen, "ack_mode must be SLUICE_ACK_EXPLICIT or SLUICE_ACK_NONE");
        return SLUICE_ERR_INVALID;
    }
    char id[MAX_CONSUMER_ID + 1];
    if (o->consumer_id)
        snprintf(id, sizeof id, "%s", o->consumer_id);
    else
        snprintf(id, sizeof id, "%016" PRIx64, sluicei_random64());

    /* Messages are built here in full, whatever errlen is. The address is
     * parsed once, by the router, which tells what kind it is. */
    char msg[512] = "", noqueue[512] = "";
    sluice_consumer *c = NULL;
    sluicei_router *r = NULL;
    int ct = o->connect_timeout_ms ? o->connect_timeout_ms : SLUICE_CONNECT_TIMEOUT_MS_DEFAULT;
    e = sluicei_router_open(&r, o->redis_url, ct, 0, msg, sizeof msg);
    if (e == SLUICE_OK && sluicei_router_kind_of(r) == SLUICEI_ROUTER_SINGLE) {
        /* One server: a plain queue costs what it always did. */
        sluicei_url u;
        e = sluicei_router_url(r, o->queue, 0, &u, msg, sizeof msg);
        if (e == SLUICE_OK) {
            e = consumer_new(&c, o, o->queue, id, NULL, &u, NULL, msg, sizeof msg);
            sluicei_url_free(&u);
        }
        /* No such queue: it may be a partitioned one. */
        if (e == SLUICE_ERR_NOQUEUE) {
            snprintf(noqueue, sizeof noqueue, "%s", msg);
            e = SLUICE_OK;
        }
    }
    if (e == SLUICE_OK && !c) {
        int nparts = 0;
        e = sluicei_queue_partitions(r, o->queue, &nparts, msg, sizeof msg);
        if (e == SLUICE_ERR_NOQUEUE) {
            if (noqueue[0])
                snprintf(msg, sizeof msg, "%s", noqueue);
            else
                snprintf(msg, sizeof msg, "queue '%s' does not exist (create it with: sluice-ctl "
                         "create %s)", o->queue, o->queue);
        } else if (e == SLUICE_OK && nparts > SLUICE_MAX_PARTITIONS) {
            snprintf(msg, sizeof msg, "queue '%s' says it has %d partitions (at most %d)",
                     o->queue, nparts, SLUICE_MAX_PARTITIONS);
            e = SLUICE_ERR_PROTOCOL;
        } else if (e == SLUICE_OK && nparts > 0) {
            e = open_group(&c, o, id, r, nparts, msg, sizeof msg);
        } else if (e == SLUICE_OK) {
            e = consumer_new(&c, o, o->queue, id, r, NULL, NULL, msg, sizeof msg);
        }
    }
    sluicei_router_close(r);
    if (e != SLUICE_OK) {
        snprintf(errbuf, errlen, "%s", msg);
        return e;
    }
    if (!c->nparts && (e = loop_start(c, msg, sizeof msg)) != SLUICE_OK) {
        consumer_free(c);
        snprintf(errbuf, errlen, "%s", msg);
        return e;
    }
    *out = c;
    return SLUICE_OK;
}

sluice_err sluice_queue_ranks(const char *redis_url, const char *queue, int connect_timeout_ms,
                              int *ranks, char *errbuf, size_t errlen)
{
    char scratch[8];
    if (!errbuf) {
        errbuf = scratch;
        errlen = sizeof scratch;
    }
    if (errlen)
        errbuf[0] = '\0';
    if (!ranks) {
        snprintf(errbuf, errlen, "sluice_queue_ranks: ranks must not be NULL");
        return SLUICE_ERR_INVALID;
    }
    *ranks = 0;
    if (!redis_url) {
        snprintf(errbuf, errlen, "no Redis URL given (redis_url is NULL)");
        return SLUICE_ERR_INVALID;
    }
    sluice_err e = sluicei_queue_name_check(queue, errbuf, errlen);
    if (e != SLUICE_OK)
        return e;
    if (connect_timeout_ms < 0) {
        snprintf(errbuf, errlen, "timeouts must not be negative");
        return SLUICE_ERR_INVALID;
    }
    int ct = connect_timeout_ms ? connect_timeout_ms : SLUICE_CONNECT_TIMEOUT_MS_DEFAULT;
    char msg[512] = "";
    sluicei_router *r = NULL;
    int nparts = 0;
    e = sluicei_router_open(&r, redis_url, ct, 0, msg, sizeof msg);
    if (e == SLUICE_OK && sluicei_router_kind_of(r) == SLUICEI_ROUTER_SINGLE) {
        /* As open(): one server is connected to once, so that a wrong
         * address is an error at once, not a wait (the router would try
         * again for the command timeout). */
        sluicei_url u;
        e = sluicei_router_url(r, queue, 0, &u, msg, sizeof msg);
        if (e == SLUICE_OK) {
            redisContext *probe = NULL;
            sluicei_reply_guard g;
            char why[400];
            sluicei_reply_guard_init(&g, 0, 0);
            e = sluicei_redis_connect(&probe, &g, &u, NULL, 0, ct, ct, why, sizeof why);
            if (e != SLUICE_OK)
                snprintf(msg, sizeof msg, "queue '%s': redis %s: %s", queue,
                         sluicei_router_describe(r), why);
            if (probe)
                redisFree(probe);
            sluicei_url_free(&u);
        }
    }
    if (e == SLUICE_OK)
        e = sluicei_queue_partitions(r, queue, &nparts, msg, sizeof msg);
    if (e == SLUICE_ERR_NOQUEUE)
        snprintf(msg, sizeof msg, "queue '%s' does not exist (create it with: sluice-ctl "
                 "create %s)", queue, queue);
    /* Every partition of a partitioned queue has the queue's ranks: the
     * first one tells. */
    char q[SLUICE_MAX_QUEUE_NAME + 8];
    if (nparts > 0)
        sluicei_partition_name(q, queue, 0);
    else
        snprintf(q, sizeof q, "%s", queue);
    redisReply *rep = NULL;
    if (e == SLUICE_OK) {
        char key[SLUICE_MAX_KEY];
        sluicei_key(key, q, "meta");
        const char *av[3] = {"HGET", key, "ranks"};
        e = sluicei_router_command(r, q, sluicei_now_ms() + SLUICE_COMMAND_TIMEOUT_MS_DEFAULT,
                                   &rep, 3, av, NULL);
        if (e != SLUICE_OK)
            snprintf(msg, sizeof msg, "queue '%s': %s", queue, sluicei_router_errstr(r));
    }
    if (e == SLUICE_OK && rep->type != REDIS_REPLY_NIL) {
        uint64_t v = 0;
        if (rep->type != REDIS_REPLY_STRING ||
            sluicei_parse_u64(rep->str, rep->len, WORLD_MAX, &v) != 0) {
            snprintf(msg, sizeof msg, "queue '%s': its settings (sluice:{%s}:meta) have a ranks "
                     "field that is not a number 0..%d", queue, q, WORLD_MAX);
            e = SLUICE_ERR_PROTOCOL;
        } else {
            *ranks = (int)v;
        }
    }
    if (rep)
        freeReplyObject(rep);
    sluicei_router_close(r);
    if (e != SLUICE_OK)
        snprintf(errbuf, errlen, "%s", msg);
    return e;
}
