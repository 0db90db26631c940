/* The loop thread: what wakes it (the API thread's eventfd, the
 * housekeeping tick, the retry and OOM timers, the batch notification),
 * pump(), which decides the next step after anything happened, and the
 * thread's start, end and stop. Also the two ways the loop tells the API
 * thread something is over: a fatal error, and the wake-up it gets back. */
#include "consumer_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Records an error that ends the consumer's work (the queue is gone, the
 * credentials were refused, Redis answers nonsense). */
void loop_fatal(sluice_consumer *c, sluice_err e, const char *fmt, ...)
{
    mu_lock(c);
    if (c->fatal == SLUICE_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->fatal_msg, sizeof c->fatal_msg, fmt, ap);
        va_end(ap);
        c->fatal = e;
    }
    cv_broadcast(c);
    mu_unlock(c);
}

/* Whether the loop must be woken (the caller holds mu): at most one
 * wake-up is in flight. The caller writes with loop_wake() after
 * unlocking, so that the woken loop does not wait for mu. */
int loop_wake_needed(sluice_consumer *c)
{
    if (c->wake_pending)
        return 0;
    c->wake_pending = 1;
    return 1;
}

void loop_wake(sluice_consumer *c)
{
    uint64_t one = 1;
    /* Cannot fail short of a bug: the counter is far from overflowing. */
    ssize_t n = write(c->wake_fd, &one, sizeof one);
    (void)n;
}

void loop_arm(struct event *ev, int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

/* How many batches the next take may ask for: the free slots, cut to
 * what fits in the window's free bytes at the size of the last batch
 * (its frame decompressed)
 * (*cut says whether the window cut it). One batch always fits when the
 * FIFO is empty, however big. mu is held. */
static int window_room(sluice_consumer *c, int *cut)
{
    int room = c->prefetch - c->fifo_len;
    size_t est = c->mem_est ? c->mem_est : FRAME_GUESS;
    size_t fit = c->fifo_bytes < c->win ? (c->win - c->fifo_bytes) / est : 0;
    if (fit == 0 && c->fifo_len == 0)
        fit = 1;
    *cut = fit < (size_t)room;
    return *cut ? (int)fit : room;
}

/* Decides the next step after anything happened: sends released acks,
 * starts the next epoch when asked to, and starts a data operation when
 * none runs and the FIFO has room. Returns whether the loop is now parked
 * (see loop_pump()), or -1 when there is no session. */
static int pump_once(sluice_consumer *c)
{
    if (c->state != ST_READY)
        return -1;
    mu_lock(c);
    size_t first = c->nunconf;
    /* Acks wait up to ACK_DELAY_MS for those that follow (see there);
     * not while next() waits, or is about to (the FIFO is empty): the
     * room they make may be what a producer needs to push its batch. */
    int64_t now = sluicei_now_ms();
    int hold = c->nacks > 0 && c->nacks < ACK_WAKE_MAX && now - c->acks_since_ms < ACK_DELAY_MS &&
               c->fifo_len > 0 && !c->top->waiting && !c->closing && !c->advance_req &&
               c->ckpt_state != CK_WANTED;
    c->acks_held = hold;
    if (c->nacks && !hold && !grow((void **)&c->unconf, &c->unconf_cap, c->nunconf + c->nacks,
                          sizeof *c->unconf)) {
        memcpy(c->unconf + c->nunconf, c->acks, c->nacks * sizeof *c->acks);
        c->nunconf += c->nacks;
        c->nacks = 0;
    }
    int adv = c->advance_req;
    c->advance_req = 0;
    uint32_t ep = c->epoch;
    int closing = c->closing, finished = c->finished, fatal = c->fatal != SLUICE_OK;
    int cut;
    int room = window_room(c, &cut);
    /* Above the low-water mark next() wakes the loop once the FIFO is
     * down to it (pop_batch): a take now, the loop woken for something
     * else (held acks, the tick), would fetch a few batches a round trip. */
    if (room > 0 && c->fifo_len > 0 &&
        !(c->fifo_len <= c->low_water && c->fifo_bytes <= c->win / 2))
        room = 0;
    if (room <= 0)
        c->want_room = 1;
    int want_lease = c->want_lease, hand_broken = c->hand_broken;
    int64_t ack_wait = hold ? c->acks_since_ms + ACK_DELAY_MS - now : 0;
    mu_unlock(c);
    if (hold && !evtimer_pending(c->ack_ev, NULL))
        loop_arm(c->ack_ev, ack_wait);

    if (hand_broken) {
        mu_lock(c);
        c->hand_broken = 0;
        mu_unlock(c);
        session_fail(c, "redis %s: the hand connection stopped taking writes", c->addr);
        return -1;
    }
    uint64_t gen = c->gen;
    if (first < c->nunconf && send_acks(c, CONN_CTL, R_ACK, 0, c->unconf[first].s,
                                        sizeof *c->unconf, c->nunconf - first) != 0)
        return -1;
    ckpt_pump(c);
    if (gen != c->gen)
        return -1;
    /* next() waits for a batch it may not hand out before a renewal. */
    if (want_lease && !c->beat_inflight && !closing)
        send_beat(c);
    if (gen != c->gen)
        return -1;
    if (adv) {
        c->loop_epoch = ep;
        dups_reset(c);
        c->stopped_at_marker = c->marker_published = 0;
        c->list_empty = 0;
    }
    if (closing) {
        recover_close_step(c);
        return 1;
    }
    if (c->op == OP_NONE && !fatal && !finished && c->need_restore)
        recover_restore(c);
    if (c->op == OP_NONE && !fatal && !finished && gen == c->gen) {
        if (c->need_resync) {
            c->need_resync = 0;
            const char *av[4] = {"LRANGE", c->k_pending, "0", "-1"};
            c->op = OP_RESYNC;
            send_argv(c, CONN_DATA, send_req_new(c, R_RESYNC, -1), 1, 4, av, NULL);
        } else if (!c->stopped_at_marker && room > 0) {
            if (c->nrecover)
                recover_fetch(c, room);
            else if (c->oom_wait)
                ;   /* on_oom_timer pumps again */
            else if (c->list_empty && fetch_blmove_safe(c))
                fetch_blmove(c);
            else {
                c->take_cut = cut;
                fetch_take(c, room);
            }
        }
    }
    if (gen != c->gen)
        return -1;
    /* Busy with a round trip: it pumps again when done. Idle with a full
     * FIFO: next() wakes it at the low-water mark. Otherwise (BLMOVE, at
     * a marker, finished) only a wake-up makes it send acks promptly. */
    if (c->op != OP_NONE)
        return c->op == OP_BLMOVE;
    return room > 0 || c->stopped_at_marker || finished || fatal;
}

/* pump_once(), then publishes whether the loop is parked: release() wakes
 * a parked loop for the first ack (which pump_once() holds up to
 * ACK_DELAY_MS for those that follow) and leaves a busy one alone (it
 * drains the acks when its round trip ends), so that a trainer's
 * release() costs no system call while batches flow. */
void loop_pump(sluice_consumer *c)
{
    session_hand_flush(c);
    for (int round = 0; round < 4; round++) {
        int parked = pump_once(c);
        if (parked < 0)
            return;
        mu_lock(c);
        /* An ack released since the drain above would wait for the tick
         * (unless it is held on purpose: ack_ev sends it). */
        int again = parked && c->nacks > 0 && !c->acks_held && round < 3;
        if (!again)
            c->parked = parked;
        mu_unlock(c);
        if (!again)
            return;
    }
}

static void on_ack_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    loop_pump(arg);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    sluice_consumer *c = arg;
    uint64_t v;
    (void)what;
    ssize_t n = read(fd, &v, sizeof v);
    (void)n;
    mu_lock(c);
    c->wake_pending = 0;
    int closing = c->closing, fatal = c->fatal != SLUICE_OK;
    mu_unlock(c);
    if (closing && c->close_deadline_ms == 0) {
        c->close_deadline_ms = sluicei_now_ms() + CLOSE_TIMEOUT_MS;
        if (c->state != ST_READY && fatal) {
            event_base_loopbreak(c->base);
            return;
        }
        if (c->state == ST_DOWN) {
            evtimer_del(c->retry_ev);
            loop_arm(c->retry_ev, 0);
        }
    }
    loop_pump(c);
}

static void on_oom_timer(evutil_socket_t fd, short what, void *arg)
{
    sluice_consumer *c = arg;
    (void)fd;
    (void)what;
    c->oom_wait = 0;
    loop_pump(c);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    sluice_consumer *c = arg;
    (void)fd;
    (void)what;
    if (c->state == ST_DOWN)
        session_start(c);
}

static void on_notify(evutil_socket_t fd, short what, void *arg)
{
    sluice_consumer *c = arg;
    (void)fd;
    (void)what;
    c->notify_armed = 0;
    mu_lock(c);
    cv_broadcast(c);
    mu_unlock(c);
}

/* Housekeeping: dead-connection watchdog, heartbeat, reaping, close deadline. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    sluice_consumer *c = arg;
    (void)fd;
    (void)what;
    session_hand_flush(c);
    int64_t now = sluicei_now_ms();
    if (c->close_deadline_ms && now >= c->close_deadline_ms) {
        event_base_loopbreak(c->base);
        return;
    }
    if (c->state == ST_CONNECTING && now - c->conn_started_ms > c->connect_timeout_ms) {
        session_fail(c, "redis %s: connect: no answer within %d ms", c->addr,
                     c->connect_timeout_ms);
        return;
    }
    if (c->state != ST_READY)
        return;
    for (int i = 0; i < NCONN; i++) {
        int64_t allow = REPLY_SLACK_MS + (i == CONN_DATA && c->blocking ? c->block_ms : 0);
        if (c->pend[i] > 0 && now - c->prog_ms[i] > allow) {
            session_fail(c, "redis %s: no reply within %" PRId64 " ms", c->addr, allow);
            return;
        }
    }
    if (now >= c->next_beat_ms && !c->beat_inflight) {
        c->next_beat_ms = now + (c->lease_ms / 3 > 1 ? c->lease_ms / 3 : 1);
        send_beat(c);
    }
    if (c->state == ST_READY && now >= c->next_reap_ms && !c->reap_inflight) {
        c->next_reap_ms = now + session_reap_period(c);
        send_reap(c);
    }
    if (c->state == ST_READY && c->url.wait_replicas > 0 && now >= c->next_role_ms &&
        !c->role_inflight) {
        /* As often as the heartbeat, and at once after a WAIT fell short. */
        c->next_role_ms = now + (c->lease_ms / 3 > 1 ? c->lease_ms / 3 : 1);
        const char *av[1] = {"ROLE"};
        if (send_argv(c, CONN_CTL, send_req_new(c, R_ROLE, -1), 0, 1, av, NULL) == 0)
            c->role_inflight = 1;
    }
    if (c->ack_mode == SLUICE_ACK_EXPLICIT)
        session_publish_hand(c);   /* if hiredis had not written all of its setup yet */
    /* Acks released while the loop was busy, if nothing else sent them. */
    loop_pump(c);
}

static void *loop_main(void *arg)
{
    sluice_consumer *c = arg;
    session_start(c);
    event_base_dispatch(c->base);
    session_drop_conns(c);
    /* The router belongs to this thread (cluster.h: not thread-safe). */
    sluicei_router_close(c->router);
    c->router = NULL;
    return NULL;
}

/* Sets up c's event loop: the eventfd the API thread wakes it with, the
 * event base, its events and the housekeeping tick. What it made is freed
 * by consumer_free(), also on failure. */
sluice_err loop_init(sluice_consumer *c, char *errbuf, size_t errlen)
{
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->base = event_base_new();
    if (c->wake_fd < 0 || !c->base) {
        snprintf(errbuf, errlen, "setting up the event loop: %s",
                 c->wake_fd < 0 ? strerror(errno) : "event_base_new failed");
        return SLUICE_ERR_SYS;
    }
    c->wake_ev = event_new(c->base, c->wake_fd, EV_READ | EV_PERSIST, on_wake, c);
    c->tick_ev = event_new(c->base, -1, EV_PERSIST, on_tick, c);
    c->retry_ev = evtimer_new(c->base, on_retry, c);
    c->oom_ev = evtimer_new(c->base, on_oom_timer, c);
    c->notify_ev = event_new(c->base, -1, 0, on_notify, c);
    c->ack_ev = evtimer_new(c->base, on_ack_timer, c);
    struct timeval tick = {0, TICK_MS * 1000};
    if (!c->wake_ev || !c->tick_ev || !c->retry_ev || !c->oom_ev || !c->notify_ev || !c->ack_ev ||
        event_add(c->wake_ev, NULL) != 0 || event_add(c->tick_ev, &tick) != 0) {
        snprintf(errbuf, errlen, "setting up the event loop failed");
        return SLUICE_ERR_SYS;
    }
    return SLUICE_OK;
}

/* Starts c's loop thread. */
sluice_err loop_start(sluice_consumer *c, char *errbuf, size_t errlen)
{
    /* The loop thread takes no signals: the application's handlers run on
     * its own threads, and a write to a socket Redis closed gives EPIPE
     * there instead of killing the process with SIGPIPE. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->thread, NULL, loop_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(errbuf, errlen, "starting the consumer thread: %s", strerror(rc));
        return SLUICE_ERR_SYS;
    }
    c->thread_started = 1;
    return SLUICE_OK;
}

/* Stops the loop threads of cs[0..n): all are told first, then joined, so
 * that they hand their batches back at the same time. */
void loop_stop(sluice_consumer **cs, int n)
{
    for (int i = 0; i < n; i++) {
        sluice_consumer *c = cs[i];
        if (!c || !c->thread_started)
            continue;
        mu_lock(c);
        c->closing = 1;
        int wake = loop_wake_needed(c);
        mu_unlock(c);
        if (wake)
            loop_wake(c);
    }
    for (int i = 0; i < n; i++)
        if (cs[i] && cs[i]->thread_started) {
            pthread_join(cs[i]->thread, NULL);
            cs[i]->thread_started = 0;
        }
}
