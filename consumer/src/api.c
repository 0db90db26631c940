/* The API thread's side: next() (of one consumer and of a group), which
 * marks each batch on the hand connection before it hands it out, and
 * release/ack, close, stats, epoch, errstr, the epoch report and the wait
 * status. It never touches a hiredis context or the event base: it moves
 * pointers under the mutex and wakes the loop (loop_wake). */
#include "consumer_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Moves the head of the FIFO to the caller; mu is held. Sets *wake when
 * the loop waits for room: once the FIFO is down to its low-water mark
 * (about half its slots, and half the window of bytes), so
 * that one refill fetches several batches and most calls make no system
 * call at all. */
static sluice_batch *pop_batch(sluice_consumer *c, int *wake)
{
    slot *s = &c->fifo[c->fifo_head];
    sluice_batch *b = s->b;
    if (c->ack_mode == SLUICE_ACK_EXPLICIT)
        c->out[c->nout++] = *s;
    c->fifo_head = (c->fifo_head + 1) % c->prefetch;
    c->fifo_len--;
    c->fifo_bytes -= b->frame_bytes;
    c->st.batches++;
    c->st.records += b->nrecords;
    c->st.bytes += b->frame_bytes;
    const delivery *d = delivery_of(b);
    if (d->deliveries > 1)
        c->st.redelivered++;
    if (d->padding)
        c->st.padding++;
    if (c->want_room && c->fifo_len <= c->low_water && c->fifo_bytes <= c->win / 2) {
        c->want_room = 0;
        *wake = loop_wake_needed(c);
    }
    return b;
}

/* Writes the n bytes of buf to the hand socket, corked (MSG_MORE). While
 * the socket is full it waits for room, until deadline_ms (monotonic) at
 * most: a TCP socket to Redis is full only when Redis stopped reading.
 * (Over TLS next() writes through the tunnel instead: hand_out.) Returns
 * 0, or -1 (the stream may be cut). */
static int hand_write(int fd, const char *buf, size_t n, int64_t deadline_ms)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT | MSG_MORE);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        int64_t left = deadline_ms - sluicei_now_ms();
        if (w == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || left <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, left > 100 ? 100 : (int)left) < 0 && errno != EINTR)
            return -1;
    }
    return 0;
}

/* Appends the n bytes at src to *p. */
static void put(char **p, const char *src, size_t n)
{
    memcpy(*p, src, n);
    *p += n;
}

/* Writes into buf (sizeof hand_cmd) the mark of batch rid, "PEXPIREAT
 * <frame prefix><rid> SLUICEI_HANDED_AT" in the protocol of Redis; returns
 * its length. Built by hand, not with snprintf: next() builds one per
 * batch. */
static size_t mark_cmd(char *buf, const char *frame_prefix, const char *rid)
{
    static const char head[] = "*3\r\n$9\r\nPEXPIREAT\r\n$";
    static const char tail[] = "\r\n$15\r\n" SLUICEI_HANDED_AT "\r\n";
    _Static_assert(sizeof SLUICEI_HANDED_AT - 1 == 15, "the length in tail");
    /* A key of up to SLUICE_MAX_KEY - 1 bytes has up to 3 digits. */
    _Static_assert(sizeof ((sluice_consumer *)0)->hand_cmd >=
                       sizeof head + 3 + 2 + SLUICE_MAX_KEY + RID_MAX + sizeof tail,
                   "hand_cmd holds any mark");
    size_t plen = strlen(frame_prefix), rlen = strlen(rid);
    char digits[24], *d = digits + sizeof digits;
    size_t klen = plen + rlen;
    do
        *--d = (char)('0' + klen % 10);
    while ((klen /= 10) > 0);
    char *p = buf;
    put(&p, head, sizeof head - 1);
    put(&p, d, (size_t)(digits + sizeof digits - d));
    put(&p, "\r\n", 2);
    put(&p, frame_prefix, plen);
    put(&p, rid, rlen);
    put(&p, tail, sizeof tail - 1);
    return (size_t)(p - buf);
}

/* Tells Redis, on the hand connection, that the batch at the head of c's
 * FIFO goes to the application (lib.lua: handed), before next() hands it
 * out: one corked write (see the top), no reply (CLIENT REPLY OFF). mu is
 * held. Returns 0, or
 * -1 when it cannot be told now: the connection is down, or the lease may
 * have run out (a renewal is asked for); *wake is set when the loop must
 * be woken, and next() waits. Explicit acks only: an at-most-once batch
 * is acknowledged already. */
static int hand_out(sluice_consumer *c, int *wake)
{
    if (c->ack_mode != SLUICE_ACK_EXPLICIT)
        return 0;
    if (c->hand_fd < 0 || sluicei_now_ms() >= c->lease_until) {
        if (!c->want_lease) {
            c->want_lease = 1;
            *wake |= loop_wake_needed(c);
        }
        return -1;
    }
    size_t n = mark_cmd(c->hand_cmd, c->k_frame, c->fifo[c->fifo_head].rid);
    /* Written within HAND_WAIT_MS and before the lease may run out, or
     * the session starts anew (below). */
    int64_t until = sluicei_now_ms() + HAND_WAIT_MS;
    if (until > c->lease_until)
        until = c->lease_until;
    /* Over TLS the mark goes through the tunnel's TLS session, into the
     * kernel before next() returns, as a plain one does: written to the
     * local socket it would wait for the relay thread, and die with it. */
    int r = c->hand_tunnel ? sluicei_tunnel_write(c->hand_tunnel, c->hand_cmd, n, until)
                           : hand_write(c->hand_fd, c->hand_cmd, n, until);
    c->hand_dirty = 1;
    if (r != 0) {
        /* A socket Redis stopped reading (full until the lease's end) or
         * closed; a partial write cut the stream. The loop starts a new
         * session, whose restore marks again what the application holds. */
        c->hand_fd = -1;
        c->hand_broken = 1;
        *wake |= loop_wake_needed(c);
        return -1;
    }
    return 0;
}

/* release() must find room in out and acks without allocating; mu is held. */
static int reserve_out(sluice_consumer *c)
{
    return grow((void **)&c->out, &c->out_cap, c->nout + 1, sizeof *c->out) ||
           grow((void **)&c->acks, &c->ack_cap, c->nacks + c->nout + 1, sizeof *c->acks);
}

/* next() reached the end of c's epoch: the loop starts the next one; mu
 * is held. Sets *wake when the loop must be woken. */
static void end_epoch(sluice_consumer *c, int *wake)
{
    c->at_marker = 0;
    if (c->top == c) {
        c->st.epochs_ended++;   /* a group counts its own (see group_next) */
        c->report.epoch = c->epoch;
        c->report.failed_tasks = c->mk_failed;
        snprintf(c->report.failed, sizeof c->report.failed, "%s", c->mk_desc);
    }
    c->epoch++;
    if (c->marker_last)
        c->finished = 1;
    c->advance_req = 1;
    if (loop_wake_needed(c))
        *wake = 1;
}

/* The result of next() at the end of an epoch whose report is in
 * t->report (mu held): SLUICE_ERR_PARTIAL (errstr says why) when tasks of
 * it failed and the consumer does not accept partial epochs. */
static sluice_err epoch_result(sluice_consumer *t)
{
    if (t->report.failed_tasks == 0 || t->accept_partial)
        return SLUICE_EOF;
    snprintf(t->errstr, sizeof t->errstr, "epoch %" PRIu32 " ended without the records of %" PRIu32
             " failed task%s: %.420s", t->report.epoch, t->report.failed_tasks,
             t->report.failed_tasks == 1 ? "" : "s", t->report.failed);
    return SLUICE_ERR_PARTIAL;
}

/* Copies the last dead-letter note into errstr, unless errstr says
 * something already; mu is held. */
static void take_note(sluice_consumer *c)
{
    if (c->note_seq != c->note_seen) {
        c->note_seen = c->note_seq;
        if (!c->errstr[0])
            snprintf(c->errstr, sizeof c->errstr, "%s", c->note);
    }
}

/* One look at a group (mu held): SLUICE_OK with *out set, SLUICE_EOF, a
 * child's error, or -1 when nothing is ready yet (*limit: when to look
 * again at the latest, beyond the caller's deadline; *down: a child that
 * is reconnecting). Children to wake go to g->wakes. */
static int group_look(sluice_consumer *g, sluice_batch **out, int *nwake, int64_t *limit,
                      sluice_consumer **down)
{
    int n = g->nparts;
    if (g->finished)
        return SLUICE_EOF;
    uint32_t ep = g->epoch;
    int left = 0;
    /* The home partition first, then the others in turn from rr. */
    for (int k = -1; k < n; k++) {
        int p = k < 0 ? g->home : (g->rr + k) % n;
        if (k >= 0 && p == g->home)
            continue;
        sluice_consumer *ch = g->part[p];
        if (ch->finished || ch->epoch > ep)
            continue;   /* done with ep: its next batches belong to a later epoch */
        if (ch->fifo_len > 0) {
            if (reserve_out(ch)) {
                snprintf(g->errstr, sizeof g->errstr, "out of memory");
                return SLUICE_ERR_NOMEM;
            }
            int wake = 0;
            if (hand_out(ch, &wake) != 0) {
                if (wake)
                    g->wakes[(*nwake)++] = p;
                left++;
                continue;
            }
            *out = pop_batch(ch, &wake);
            if (wake)
                g->wakes[(*nwake)++] = p;
            if (p != g->home)
                g->rr = (p + 1) % n;
            return SLUICE_OK;
        }
        if (ch->at_marker)
            continue;   /* at the end of ep: it waits (fetching nothing) for the others */
        left++;
    }
    if (left == 0) {
        /* Every partition ended epoch ep: each one at its marker goes on
         * to the next epoch only now, so none fetches a batch of ep + 1
         * before the queue's end of ep. The report adds theirs up. */
        sluice_epoch_report *rep = &g->report;
        size_t dl = 0;
        memset(rep, 0, sizeof *rep);
        rep->epoch = ep;
        for (int p = 0; p < n; p++) {
            sluice_consumer *ch = g->part[p];
            if (ch->finished || ch->epoch != ep || !ch->at_marker)
                continue;
            rep->failed_tasks += ch->mk_failed;
            if (ch->mk_failed && dl + 4 < sizeof rep->failed) {
                int k = snprintf(rep->failed + dl, sizeof rep->failed - dl, "%s%s", dl ? "; " : "",
                                 ch->mk_desc);
                dl = k < 0 || (size_t)k >= sizeof rep->failed - dl ? sizeof rep->failed - 1
                                                                  : dl + (size_t)k;
            }
            int wake = 0;
            end_epoch(ch, &wake);
            if (wake)
                g->wakes[(*nwake)++] = p;
        }
        g->epoch++;
        /* Published by the home partition's heartbeat, so that sluice-ctl,
         * which sums the partitions, counts it once. */
        g->part[g->home]->st.epochs_ended++;
        int fin = 1;
        for (int p = 0; p < n && fin; p++)
            fin = g->part[p]->finished && g->part[p]->epoch <= g->epoch;
        g->finished = fin;
        return epoch_result(g);
    }
    for (int p = 0; p < n; p++)
        if (g->part[p]->fatal != SLUICE_OK) {
            snprintf(g->errstr, sizeof g->errstr, "%s", g->part[p]->fatal_msg);
            return g->part[p]->fatal;
        }
    int64_t now = sluicei_now_ms();
    for (int p = 0; p < n; p++) {
        sluice_consumer *ch = g->part[p];
        if (ch->finished || !ch->down_since_ms)
            continue;
        if (!*down)
            *down = ch;
        if (ch->reconnect_timeout_ms > 0) {
            int64_t give_up = ch->down_since_ms + ch->reconnect_timeout_ms;
            if (now >= give_up) {
                snprintf(g->errstr, sizeof g->errstr,
                         "connection lost and not regained within %d ms: %.400s",
                         ch->reconnect_timeout_ms, ch->down_why);
                return SLUICE_ERR_IO;
            }
            if (*limit < 0 || give_up < *limit)
                *limit = give_up;
        }
    }
    return -1;
}

/* Wakes the loops of the children in g->wakes; mu is not held. */
static void group_wake(sluice_consumer *g, int nwake)
{
    for (int i = 0; i < nwake; i++)
        loop_wake(g->part[g->wakes[i]]);
}

/* next() starts waiting (mu held): the wait status counts from here. */
static void wait_begin(sluice_consumer *t, uint64_t *t0)
{
    if (!*t0)
        *t0 = mono_us();
    if (!t->wait_since)
        t->wait_since = sluicei_now_ms();
}

static sluice_err group_next(sluice_consumer *g, sluice_batch **out, int timeout_ms)
{
    g->errstr[0] = '\0';
    int64_t deadline = timeout_ms < 0 ? -1 : sluicei_now_ms() + timeout_ms;
    uint64_t t0 = 0;
    sluice_err e;
    int nwake = 0;
    mu_lock(g);
    for (;;) {
        int64_t limit = deadline;
        sluice_consumer *down = NULL;
        int r = group_look(g, out, &nwake, &limit, &down);
        if (r >= 0) {
            e = (sluice_err)r;
            if (e == SLUICE_OK || e == SLUICE_EOF || e == SLUICE_ERR_PARTIAL)
                g->wait_since = 0;
            break;
        }
        if (deadline >= 0 && sluicei_now_ms() >= deadline) {
            if (down)
                snprintf(g->errstr, sizeof g->errstr, "reconnecting: %.480s", down->down_why);
            e = SLUICE_ERR_TIMEOUT;
            break;
        }
        wait_begin(g, &t0);
        /* The acks may be what a producer waits for to push more. */
        for (int p = 0; p < g->nparts; p++)
            if (g->part[p]->nacks && loop_wake_needed(g->part[p]))
                g->wakes[nwake++] = p;
        if (nwake) {
            /* Each child is in wakes at most once: loop_wake_needed() says yes
             * once until its loop ran. */
            mu_unlock(g);
            group_wake(g, nwake);
            nwake = 0;
            mu_lock(g);
            continue;
        }
        g->waiting++;
        if (limit < 0) {
            pthread_cond_wait(&g->cv, &g->mu);
        } else {
            struct timespec ts = {(time_t)(limit / 1000), (long)(limit % 1000) * 1000000L};
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        }
        g->waiting--;
    }
    if (t0)
        g->part[g->home]->st.blocked_us += mono_us() - t0;   /* as epochs_ended */
    take_note(g);
    mu_unlock(g);
    group_wake(g, nwake);
    return e;
}

sluice_err sluice_consumer_next(sluice_consumer *c, sluice_batch **out, int timeout_ms)
{
    if (!out)
        return SLUICE_ERR_INVALID;
    *out = NULL;
    if (!c)
        return SLUICE_ERR_INVALID;
    if (c->nparts)
        return group_next(c, out, timeout_ms);
    c->errstr[0] = '\0';
    int64_t deadline = timeout_ms < 0 ? -1 : sluicei_now_ms() + timeout_ms;
    uint64_t t0 = 0;
    sluice_err e;
    int wake = 0;
    mu_lock(c);
    if (reserve_out(c)) {
        mu_unlock(c);
        snprintf(c->errstr, sizeof c->errstr, "out of memory");
        return SLUICE_ERR_NOMEM;
    }
    for (;;) {
        if (c->fifo_len > 0 && hand_out(c, &wake) == 0) {
            *out = pop_batch(c, &wake);
            c->wait_since = 0;
            e = SLUICE_OK;
            break;
        }
        if (c->fifo_len == 0 && c->finished) {
            e = SLUICE_EOF;
            break;
        }
        if (c->fifo_len == 0 && c->at_marker) {
            end_epoch(c, &wake);
            c->wait_since = 0;
            e = epoch_result(c);
            break;
        }
        if (c->fatal != SLUICE_OK) {
            snprintf(c->errstr, sizeof c->errstr, "%s", c->fatal_msg);
            e = c->fatal;
            break;
        }
        int64_t now = sluicei_now_ms(), limit = deadline;
        if (c->down_since_ms && c->reconnect_timeout_ms > 0) {
            int64_t give_up = c->down_since_ms + c->reconnect_timeout_ms;
            if (now >= give_up) {
                snprintf(c->errstr, sizeof c->errstr,
                         "connection lost and not regained within %d ms: %.400s",
                         c->reconnect_timeout_ms, c->down_why);
                e = SLUICE_ERR_IO;
                break;
            }
            if (limit < 0 || give_up < limit)
                limit = give_up;
        }
        if (deadline >= 0 && now >= deadline) {
            if (c->down_since_ms)
                snprintf(c->errstr, sizeof c->errstr, "reconnecting: %.480s", c->down_why);
            e = SLUICE_ERR_TIMEOUT;
            break;
        }
        wait_begin(c, &t0);
        if ((c->nacks && loop_wake_needed(c)) || wake) {
            /* The acks may be what a producer waits for to push more; a
             * renewal may be what next() waits for. */
            wake = 0;
            mu_unlock(c);
            loop_wake(c);
            mu_lock(c);
            continue;
        }
        c->waiting++;
        if (limit < 0) {
            pthread_cond_wait(&c->cv, &c->mu);
        } else {
            struct timespec ts = {(time_t)(limit / 1000), (long)(limit % 1000) * 1000000L};
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        }
        c->waiting--;
    }
    if (t0)
        c->st.blocked_us += mono_us() - t0;
    take_note(c);
    mu_unlock(c);
    if (wake)
        loop_wake(c);
    return e;
}

void sluice_batch_ack(sluice_batch *b)
{
    if (!b)
        return;
    delivery *d = delivery_of(b);
    sluice_consumer *c = d ? d->consumer : NULL;
    if (c && !d->acked) {
        int wake = 0;
        mu_lock(c);
        for (size_t i = 0; i < c->nout; i++)
            if (c->out[i].b == b) {
                if (c->nacks == 0)
                    c->acks_since_ms = sluicei_now_ms();
                memcpy(c->acks[c->nacks++].s, c->out[i].rid, RID_MAX);
                c->out[i] = c->out[--c->nout];
                /* A parked loop is woken by the first ack, to send it
                 * ACK_DELAY_MS later with those that follow meanwhile. */
                if ((c->parked && c->nacks == 1) || c->nacks >= ACK_WAKE_MAX)
                    wake = loop_wake_needed(c);
                break;
            }
        mu_unlock(c);
        if (wake)
            loop_wake(c);
        d->acked = 1;
    }
}

/* How a batch was delivered (batch.h); a batch the consumer did not
 * decode (sluice_wire_decode()) counts as a first delivery, no padding. */
uint32_t sluice_batch_deliveries(const sluice_batch *b)
{
    const delivery *d = delivery_of(b);
    return d ? d->deliveries : 1;
}

int sluice_batch_is_padding(const sluice_batch *b)
{
    const delivery *d = delivery_of(b);
    return d ? d->padding : 0;
}

void sluice_batch_release(sluice_batch *b)
{
    sluice_batch_ack(b);
    sluice_batch_free(b);
}

void sluice_consumer_close(sluice_consumer *c)
{
    if (!c)
        return;
    sluice_consumer **cs = c->nparts ? c->part : &c;
    int n = c->nparts ? c->nparts : 1;
    loop_stop(cs, n);
    /* Handed back by requeue (or, if Redis was out of reach, by the next
     * reap): acknowledging them later would be wrong. */
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < cs[k]->nout; i++) {
            delivery *d = delivery_of(cs[k]->out[i].b);
            d->consumer = NULL;
            d->acked = 1;
        }
    consumer_free(c);
    /* The frames kept for reuse go back to malloc (another consumer of
     * the process fills the cache again). */
    sluicei_bufcache_drain();
}

void sluice_consumer_stats_get(const sluice_consumer *c, sluice_consumer_stats *st)
{
    if (!c || !st)
        return;
    sluice_consumer *m = (sluice_consumer *)c;   /* the mutex is not part of the value */
    mu_lock(m);
    *st = c->st;
    /* A group: the sums of its partitions (its waiting and its epochs are
     * counted in the home partition's). */
    for (int p = 0; p < c->nparts; p++) {
        const sluice_consumer_stats *s = &c->part[p]->st;
        st->blocked_us += s->blocked_us;
        st->epochs_ended += s->epochs_ended;
        st->batches += s->batches;
        st->records += s->records;
        st->bytes += s->bytes;
        st->redelivered += s->redelivered;
        st->duplicates += s->duplicates;
        st->padding += s->padding;
        st->invalid += s->invalid;
        st->reconnects += s->reconnects;
    }
    mu_unlock(m);
}

uint32_t sluice_consumer_epoch(const sluice_consumer *c)
{
    if (!c)
        return 0;
    sluice_consumer *m = (sluice_consumer *)c;
    mu_lock(m);
    uint32_t e = c->epoch;
    mu_unlock(m);
    return e;
}

int sluice_consumer_finished(const sluice_consumer *c)
{
    if (!c)
        return 0;
    sluice_consumer *m = (sluice_consumer *)c;
    mu_lock(m);
    int f = c->finished;
    mu_unlock(m);
    return f;
}

const char *sluice_consumer_errstr(const sluice_consumer *c)
{
    return c ? c->errstr : "";
}

void sluice_consumer_epoch_report(const sluice_consumer *c, sluice_epoch_report *r)
{
    if (!r)
        return;
    memset(r, 0, sizeof *r);
    if (!c)
        return;
    sluice_consumer *m = (sluice_consumer *)c;   /* the mutex is not part of the value */
    mu_lock(m);
    *r = c->report;
    mu_unlock(m);
}

int64_t sluice_consumer_wait_status(const sluice_consumer *c, char *buf, size_t len)
{
    if (buf && len)
        buf[0] = '\0';
    if (!c)
        return 0;
    sluice_consumer *m = (sluice_consumer *)c;
    sluice_consumer *const *cs = c->nparts ? c->part : &m;
    int n = c->nparts ? c->nparts : 1;
    char why[600] = "";
    mu_lock(m);
    int64_t since = c->wait_since;
    const sluice_consumer *fatal = NULL, *down = NULL;
    const char *state = NULL;
    int alive = -1, renewing = 0, recovering = 0;
    for (int k = 0; k < n; k++) {
        const sluice_consumer *ch = cs[k];
        recovering |= ch->recovering;
        if (ch->fatal != SLUICE_OK && !fatal)
            fatal = ch;
        if (ch->down_since_ms && !ch->finished && !down)
            down = ch;
        renewing |= ch->want_lease;
        if (ch->producers_alive > alive)
            alive = ch->producers_alive;
        if (!state || strcmp(ch->job_state, "running") == 0)
            state = ch->job_state;
    }
    if (!since)
        ;
    else if (fatal)
        snprintf(why, sizeof why, "%s", fatal->fatal_msg);
    else if (down)
        snprintf(why, sizeof why, "reconnecting: %.500s", down->down_why);
    else if (renewing)
        snprintf(why, sizeof why, "renewing the consumer's lease in queue '%s'", c->queue);
    else if (recovering)
        snprintf(why, sizeof why, "Redis restarted: queue '%s' waits for the consumers it knew to "
                 "restore what they did in its last seconds (at most the lease + 2.5 s)",
                 c->queue);
    else if (alive < 0)
        snprintf(why, sizeof why, "waiting for batches of queue '%s'", c->queue);
    else if (strcmp(state, "none") == 0 && alive == 0)
        snprintf(why, sizeof why, "queue '%s' has no job (sluice-ctl submit) and no producer is "
                 "alive", c->queue);
    else if (strcmp(state, "none") == 0)
        snprintf(why, sizeof why, "queue '%s' has no job; %d producer%s alive push into it",
                 c->queue, alive, alive == 1 ? " is" : "s are");
    else if (strcmp(state, "finished") == 0)
        snprintf(why, sizeof why, "the job of queue '%s' is finished; its end comes once every "
                 "batch is acknowledged (other consumers still hold some)", c->queue);
    else if (alive == 0)
        snprintf(why, sizeof why, "no producer of queue '%s' is alive (start sluice-producer "
                 "--queue %s)", c->queue, c->queue);
    else
        snprintf(why, sizeof why, "waiting for the producers of queue '%s' (%d alive)", c->queue,
                 alive);
    mu_unlock(m);
    if (buf && len)
        snprintf(buf, len, "%s", why);
    return since ? sluicei_now_ms() - since : 0;
}

const char *sluice_consumer_id(const sluice_consumer *c)
{
    return c ? c->id : "";
}
