/* Sessions: the three connections to Redis set up together (AUTH,
 * SELECT, CLIENT ID, SCRIPT LOAD, the hand connection's probe), dropped
 * together when any fails, and started again after a backoff with jitter;
 * finding the queue's node again through a router; handing the hand
 * connection's socket to next() and pushing its corked marks. */
#include "consumer_internal.h"
#include "tls.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>

void session_drop_conns(sluice_consumer *c)
{
    /* Replies still due belong to no one now. */
    c->gen++;
    /* next() stops writing to the hand socket before it is closed. */
    mu_lock(c);
    c->hand_fd = -1;
    sluicei_tunnel *hand_tunnel = c->hand_tunnel;
    c->hand_tunnel = NULL;
    mu_unlock(c);
    for (int i = 0; i < NCONN; i++) {
        redisAsyncContext *ac = c->ac[i];
        c->ac[i] = NULL;
        c->pend[i] = 0;
        if (ac)
            redisAsyncFree(ac);
    }
    sluicei_tunnel_release(hand_tunnel);
}

/* Ends the current session: both connections are dropped, replies still
 * due are forgotten (their ids stay in pending:<cid>, the next session
 * finds them), and a new session is scheduled. Safe inside any callback:
 * hiredis defers freeing a context whose callback is running. */
void session_fail(sluice_consumer *c, const char *fmt, ...)
{
    if (c->state == ST_DOWN)
        return;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);

    c->state = ST_DOWN;
    session_drop_conns(c);
    c->blocking = 0;
    c->op = OP_NONE;
    c->op_left = 0;
    c->fetch_next = c->fetch_end = c->fetch_ack_n = 0;
    c->fetch_out = 0;
    c->rtt_min_us = 0;
    c->restored = 0;
    c->ckpt_inflight = 0;   /* asked again in the next session */
    c->unblock_sent = c->requeue_sent = 0;
    c->beat_inflight = c->reap_inflight = c->role_inflight = 0;
    c->oom_wait = 0;
    evtimer_del(c->oom_ev);
    /* A marker seen but not yet announced is seen again by the next take. */
    if (!c->marker_published)
        c->stopped_at_marker = 0;
    c->nrecover = 0;
    /* The node may have changed (failover, migrated slot, MOVED). */
    c->resolve = c->route_addr != NULL;

    mu_lock(c);
    if (c->down_since_ms == 0)
        c->down_since_ms = sluicei_now_ms();
    snprintf(c->down_why, sizeof c->down_why, "%s", why);
    int closing = c->closing, fatal = c->fatal != SLUICE_OK;
    cv_broadcast(c);
    mu_unlock(c);

    if (fatal) {
        if (closing)
            event_base_loopbreak(c->base);
        return;
    }
    loop_arm(c->retry_ev, closing ? SLUICEI_BACKOFF_MIN_MS : sluicei_backoff_next(&c->backoff));
}

/* ---- hiredis on the loop's event_base ---------------------------------
 *
 * What hiredis's libevent adapter does, with one difference: before
 * hiredis reads more from a connection, the connection's guard looks at
 * what its reader holds unparsed (reply.h), and a limit broken ends the
 * connection (its disconnect callback gets the limit as the error) instead
 * of letting the peer fill memory. A limit broken while hiredis parses
 * ends it the same way, from inside the parse; so does a reply that no
 * request awaits, on which hiredis would abort the process. */
typedef struct glue {
    redisAsyncContext *ac;
    sluicei_reply_guard *guard;
    struct event *rev, *wev;
    char *rbuf;                /* GLUE_READ bytes, once a read filled the first 16 KiB */
} glue;

/* hiredis reads 16 KiB per readable event, so a reply of 1 MiB of frames
 * took 64 wake-ups and reads. Before hiredis reads, what the socket holds
 * goes to the reader in reads of up to GLUE_READ; hiredis's own read then
 * finds the rest, or nothing (EAGAIN), or the end of the connection. The
 * reader keeps a buffer of up to GLUE_KEEP between replies instead of
 * growing one anew for each. */
#define GLUE_READ ((size_t)256 << 10)
#define GLUE_KEEP ((size_t)4 << 20)

static void glue_prefill(glue *e, evutil_socket_t fd)
{
    char small[16384];
    ssize_t n = recv(fd, small, sizeof small, MSG_DONTWAIT);
    if (n <= 0 || redisReaderFeed(e->ac->c.reader, small, (size_t)n) != REDIS_OK ||
        (size_t)n < sizeof small)
        return;
    if (!e->rbuf && !(e->rbuf = malloc(GLUE_READ)))
        return;
    n = recv(fd, e->rbuf, GLUE_READ, MSG_DONTWAIT);
    if (n > 0)
        redisReaderFeed(e->ac->c.reader, e->rbuf, (size_t)n);
}

static void glue_read(evutil_socket_t fd, short what, void *arg)
{
    glue *e = arg;
    redisAsyncContext *ac = e->ac;
    (void)what;
    /* With the error set, hiredis reads nothing and drops the connection.
     * The guard looks before every read: a read adds at most GLUE_READ +
     * 16 KiB (twice, with hiredis's own) to what it saw. */
    if ((ac->c.flags & REDIS_CONNECTED) && sluicei_reply_guard_check(e->guard, &ac->c) != 0)
        sluicei_reply_guard_fail(e->guard, &ac->c);
    else if ((ac->c.flags & REDIS_CONNECTED) && !ac->c.err)
        glue_prefill(e, fd);
    redisAsyncHandleRead(ac);
}

static void glue_write(evutil_socket_t fd, short what, void *arg)
{
    glue *e = arg;
    (void)fd;
    (void)what;
    redisAsyncHandleWrite(e->ac);
}

static void glue_add_read(void *arg)
{
    event_add(((glue *)arg)->rev, NULL);
}

static void glue_del_read(void *arg)
{
    event_del(((glue *)arg)->rev);
}

static void glue_add_write(void *arg)
{
    event_add(((glue *)arg)->wev, NULL);
}

static void glue_del_write(void *arg)
{
    event_del(((glue *)arg)->wev);
}

/* hiredis calls it when it frees the context. */
static void glue_cleanup(void *arg)
{
    glue *e = arg;
    if (e->rev)
        event_free(e->rev);
    if (e->wev)
        event_free(e->wev);
    free(e->rbuf);
    free(e);
}

/* Attaches ac to base with its replies bounded by g (installed here).
 * REDIS_ERR when out of memory (ac stays the caller's to free). */
static int glue_attach(redisAsyncContext *ac, struct event_base *base, sluicei_reply_guard *g)
{
    glue *e = calloc(1, sizeof *e);
    if (!e)
        return REDIS_ERR;
    e->ac = ac;
    e->guard = g;
    e->rev = event_new(base, ac->c.fd, EV_READ, glue_read, e);
    e->wev = event_new(base, ac->c.fd, EV_WRITE, glue_write, e);
    if (!e->rev || !e->wev) {
        glue_cleanup(e);
        return REDIS_ERR;
    }
    sluicei_reply_guard_attach_async(g, ac);
    ac->c.reader->maxbuf = GLUE_KEEP;
    ac->ev.addRead = glue_add_read;
    ac->ev.delRead = glue_del_read;
    ac->ev.addWrite = glue_add_write;
    ac->ev.delWrite = glue_del_write;
    ac->ev.cleanup = glue_cleanup;
    ac->ev.data = e;
    event_add(e->rev, NULL);
    event_add(e->wev, NULL);
    return REDIS_OK;
}

static redisAsyncContext *conn_of(sluice_consumer *c, const redisAsyncContext *ac, int *which)
{
    for (int i = 0; i < NCONN; i++)
        if (c->ac[i] == ac) {
            *which = i;
            return c->ac[i];
        }
    return NULL;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    sluice_consumer *c = ac->data;
    int which;
    if (status == REDIS_OK || !conn_of(c, ac, &which))
        return;
    /* hiredis frees a context whose connect failed. */
    c->ac[which] = NULL;
    session_fail(c, "redis %s: connect: %s", c->addr, ac->errstr);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    sluice_consumer *c = ac->data;
    int which;
    (void)status;
    if (!conn_of(c, ac, &which))
        return;   /* one we dropped ourselves */
    c->ac[which] = NULL;
    session_lost(c, which, ac, "closed by the server");
}

void session_lost(sluice_consumer *c, int conn, const redisAsyncContext *ac, const char *why)
{
    /* The same request would get the same reply again: final. */
    if (sluicei_reply_guard_tripped(&c->guard[conn]))
        loop_fatal(c, SLUICE_ERR_PROTOCOL, "redis %s: %s", c->addr, c->guard[conn].why);
    session_fail(c, "redis %s: connection lost: %s", c->addr, ac->err ? ac->errstr : why);
}

/* A setup command; script is the script a SCRIPT LOAD loads (else -1). */
static void send_setup(sluice_consumer *c, int conn, int argc, const char **argv, const char *step,
                       int script)
{
    req *q = send_req_new(c, strcmp(step, "CLIENT ID") == 0 ? R_CLIENT_ID : R_SETUP, -1);
    if (q) {
        snprintf(q->id, sizeof q->id, "%s", step);
        q->nitems = script;
    }
    if (send_argv(c, conn, q, 0, argc, argv, NULL) == 0)
        c->setup_left++;
}

static const sluicei_script_id used_scripts[] = {
    SLUICEI_SCRIPT_TAKE, SLUICEI_SCRIPT_CLAIM, SLUICEI_SCRIPT_ACK,  SLUICEI_SCRIPT_REQUEUE,
    SLUICEI_SCRIPT_REAP, SLUICEI_SCRIPT_BEAT,  SLUICEI_SCRIPT_DEAD, SLUICEI_SCRIPT_RESTORE,
    SLUICEI_SCRIPT_CHECKPOINT,
};

/* Points url at the node that serves the queue now, from a slot map read
 * again (a router of this thread's own, opened the first time). This is a
 * synchronous call in the loop, bounded by the connect timeout per seed;
 * it only happens while the session is down, when the loop has nothing
 * else to send. Returns -1 when the session failed. */
static int resolve_node(sluice_consumer *c)
{
    char err[256] = "";
    sluice_err e = SLUICE_OK;
    int fresh = 0;
    if (!c->router) {
        e = sluicei_router_open(&c->router, c->route_addr, c->connect_timeout_ms,
                                c->connect_timeout_ms, err, sizeof err);
        if (e != SLUICE_OK)
            c->router = NULL;
        fresh = 1;
    }
    sluicei_url u;
    memset(&u, 0, sizeof u);
    if (e == SLUICE_OK)
        e = sluicei_router_url(c->router, c->queue, !fresh, &u, err, sizeof err);
    if (e != SLUICE_OK) {
        if (e == SLUICE_ERR_AUTH)
            loop_fatal(c, SLUICE_ERR_AUTH, "redis %s: authentication failed: %s", c->addr, err);
        session_fail(c, "redis %s: finding the node of queue '%s': %s", c->addr, c->queue,
                     err[0] ? err : sluice_strerror(e));
        return -1;
    }
    sluicei_url_free(&c->url);
    c->url = u;
    sluicei_url_describe(&c->url, c->addr, sizeof c->addr);
    c->resolve = 0;
    return 0;
}

/* For a rediss:// address: the TLS side of a connection, made before
 * hiredis connects to its local end. The handshake blocks the loop (up to
 * the connect timeout), as resolve_node() does: only while the session is
 * down, when the loop has nothing else to send. A refused certificate or a
 * wrong setting ends the consumer; anything else is tried again. Returns
 * -1 when the session failed. */
static int tls_tunnel(sluice_consumer *c, sluicei_tls_pending **out)
{
    char why[400];
    sluice_err e = sluicei_tls_open_path(c->url.host, c->url.port, c->connect_timeout_ms, out,
                                         why, sizeof why);
    if (e == SLUICE_OK)
        return 0;
    if (e == SLUICE_ERR_AUTH || e == SLUICE_ERR_INVALID || e == SLUICE_ERR_PROTOCOL)
        loop_fatal(c, e, "redis %s: %s", c->addr, why);
    session_fail(c, "redis %s: %s", c->addr, why);
    return -1;
}

/* Starts a session: three non-blocking connects, and the setup commands
 * queued behind them (hiredis sends them once connected). Scripts are
 * loaded again every time: a restarted server has none. The hand
 * connection proves it may set the mark (a PEXPIREAT of a key that does
 * not exist) and then turns its replies off: from then on next() writes
 * to it and nobody reads. */
void session_start(sluice_consumer *c)
{
    c->gen++;
    c->state = ST_CONNECTING;
    c->conn_started_ms = sluicei_now_ms();
    c->setup_left = 0;
    c->data_client_id = 0;
    /* Not while closing: reading the slot map blocks the loop for up to a
     * connect timeout per seed, past close()'s own deadline; the last
     * known node is tried instead. */
    if (c->resolve && !c->close_deadline_ms && resolve_node(c) != 0)
        return;
    /* The data connection brings frames in MGETs of about FETCH_BYTES
     * (estimated from the last frame): a reply may hold the window's
     * worth, or four frames of the largest size, whichever is more. */
    size_t max_string, max_reply;
    size_t frames = c->win_max / (c->max_batch_bytes ? c->max_batch_bytes : 1);
    if (frames < 4)
        frames = 4;
    if (frames > (size_t)c->prefetch)
        frames = (size_t)c->prefetch;
    sluicei_reply_limits_for(c->max_batch_bytes, frames, &max_string, &max_reply);
    for (int i = 0; i < NCONN; i++) {
        sluicei_tls_pending *tunnel = NULL;
        if (c->url.tls && tls_tunnel(c, &tunnel) != 0)
            return;
        redisAsyncContext *ac = tunnel ? redisAsyncConnectUnix(sluicei_tls_path(tunnel))
                                : c->url.unix_path ? redisAsyncConnectUnix(c->url.unix_path)
                                                   : redisAsyncConnect(c->url.host, c->url.port);
        if (!ac || ac->err) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", ac ? ac->errstr : "out of memory");
            if (ac)
                redisAsyncFree(ac);
            sluicei_tls_cancel(tunnel);
            session_fail(c, "redis %s: connect: %s", c->addr, msg);
            return;
        }
        if (tunnel) {
            /* The hand connection's tunnel: next() writes its marks
             * through it (api.c: hand_out). */
            char why[400];
            sluicei_tunnel *ref = NULL;
            sluice_err e =
                sluicei_tls_accept(tunnel, i == CONN_HAND ? &ref : NULL, why, sizeof why);
            if (e != SLUICE_OK) {
                redisAsyncFree(ac);
                session_fail(c, "redis %s: %s", c->addr, why);
                return;
            }
            if (ref) {
                mu_lock(c);
                c->hand_tunnel = ref;
                mu_unlock(c);
            }
        }
        ac->data = c;
        c->ac[i] = ac;
        sluicei_reply_guard_init(&c->guard[i], max_string, max_reply);
        c->guard[i].big_alloc = sluicei_bufcache_get;   /* frames (bufcache.h) */
        if (glue_attach(ac, c->base, &c->guard[i]) != REDIS_OK) {
            session_fail(c, "redis %s: attaching to the event loop: out of memory", c->addr);
            return;
        }
        redisAsyncSetConnectCallback(ac, on_connect);
        redisAsyncSetDisconnectCallback(ac, on_disconnect);
    }
    uint64_t gen = c->gen;
    for (int i = 0; i < NCONN && gen == c->gen; i++) {
        if (c->url.password) {
            const char *a3[3] = {"AUTH", c->url.user, c->url.password};
            const char *a2[2] = {"AUTH", c->url.password};
            send_setup(c, i, c->url.user ? 3 : 2, c->url.user ? a3 : a2, "AUTH", -1);
        }
        if (c->url.db && gen == c->gen) {
            char db[16];
            snprintf(db, sizeof db, "%d", c->url.db);
            const char *av[2] = {"SELECT", db};
            send_setup(c, i, 2, av, "SELECT", -1);
        }
    }
    if (gen == c->gen) {
        const char *av[2] = {"CLIENT", "ID"};
        send_setup(c, CONN_DATA, 2, av, "CLIENT ID", -1);
    }
    for (size_t i = 0; i < sizeof used_scripts / sizeof used_scripts[0] && gen == c->gen; i++) {
        const char *av[3] = {"SCRIPT", "LOAD", sluicei_script_source(used_scripts[i])};
        send_setup(c, CONN_CTL, 3, av, "SCRIPT LOAD", (int)used_scripts[i]);
    }
    if (gen == c->gen && c->ack_mode == SLUICE_ACK_EXPLICIT) {
        char probe[SLUICE_MAX_KEY + 2];
        snprintf(probe, sizeof probe, "%s-", c->k_frame);   /* never a batch's */
        const char *av[3] = {"PEXPIREAT", probe, SLUICEI_HANDED_AT};
        send_setup(c, CONN_HAND, 3, av, "PEXPIREAT", -1);
        if (gen == c->gen &&
            redisAsyncCommand(c->ac[CONN_HAND], NULL, NULL, "CLIENT REPLY OFF") != REDIS_OK)
            session_fail(c, "redis %s: CLIENT REPLY OFF: out of memory", c->addr);
    }
}

int64_t session_reap_period(sluice_consumer *c)
{
    int64_t half = c->lease_ms / 2 > 1 ? c->lease_ms / 2 : 1;
    return half * 3 / 4 + (int64_t)(sluicei_xorshift64(&c->rng) % (uint64_t)(half / 2 + 1));
}

/* Publishes the hand connection's socket to next(), once hiredis has
 * written everything it queued there (CLIENT REPLY OFF the last): from
 * then on only next() writes to it. */
void session_publish_hand(sluice_consumer *c)
{
    redisAsyncContext *ac = c->ac[CONN_HAND];
    if (c->state != ST_READY || !ac || sdslen(ac->c.obuf) > 0)
        return;
    mu_lock(c);
    if (c->hand_fd < 0) {
        /* Over TLS next() writes into the tunnel's TCP socket, corked
         * from now on as a plain one's writes are (MSG_MORE): the setup
         * went out uncorked. */
        if (c->hand_tunnel) {
            int one = 1;
            setsockopt(sluicei_tunnel_tcp_fd(c->hand_tunnel), IPPROTO_TCP, TCP_CORK, &one,
                       sizeof one);
        }
        c->hand_fd = ac->c.fd;
        cv_broadcast(c);
    }
    mu_unlock(c);
}

/* Pushes the marks next() wrote corked to Redis now (setting TCP_NODELAY
 * sends what a socket holds back, corked by MSG_MORE or TCP_CORK; on a
 * unix socket nothing is held back). The loop runs it at every pump and
 * tick, and before a close's requeue. The push (on loopback, Redis's side
 * of the delivery too) runs outside the mutex, so next() does not wait
 * for it: only this thread closes the socket, or gives back the tunnel
 * whose TCP socket it is over TLS. */
void session_hand_flush(sluice_consumer *c)
{
    mu_lock(c);
    int fd = !c->hand_dirty || c->hand_fd < 0 ? -1
             : c->hand_tunnel                 ? sluicei_tunnel_tcp_fd(c->hand_tunnel)
                                              : c->hand_fd;
    c->hand_dirty = 0;
    mu_unlock(c);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
}

static void session_ready(sluice_consumer *c)
{
    c->state = ST_READY;
    sluicei_backoff_reset(&c->backoff);
    mu_lock(c);
    if (c->ever_ready)
        c->st.reconnects++;
    c->down_since_ms = 0;
    c->down_why[0] = '\0';
    int closing = c->closing;
    cv_broadcast(c);
    mu_unlock(c);
    c->ever_ready = 1;
    c->need_restore = !closing;
    c->need_resync = !closing;
    c->list_empty = 0;
    if (c->ack_mode == SLUICE_ACK_EXPLICIT)
        session_publish_hand(c);
    /* Acks whose confirmation was lost are sent again (they are idempotent). */
    if (c->nunconf &&
        send_acks(c, CONN_CTL, R_ACK, 0, c->unconf[0].s, sizeof *c->unconf, c->nunconf) != 0)
        return;
    int64_t now = sluicei_now_ms();
    c->next_beat_ms = now;
    c->next_reap_ms = now + session_reap_period(c);
    c->wait_now = c->url.wait_replicas;
    c->next_role_ms = now;
    loop_pump(c);
}

void session_setup_reply(sluice_consumer *c, req *q, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        const char *m = r->str;
        if (sluicei_cluster_retryable(m, r->len)) {
            ;   /* a node in a passing state (LOADING, CLUSTERDOWN...) */
        } else if (starts_with(m, r->len, "NOPERM")) {
            loop_fatal(c, SLUICE_ERR_AUTH, "redis %s: permission refused: %s: %s", c->addr, q->id,
                       m);
        } else if (strcmp(q->id, "AUTH") == 0 || starts_with(m, r->len, "NOAUTH") ||
                   starts_with(m, r->len, "WRONGPASS")) {
            loop_fatal(c, SLUICE_ERR_AUTH, "redis %s: authentication failed: %s", c->addr, m);
        } else if (strcmp(q->id, "SELECT") == 0 && !starts_with(m, r->len, "LOADING")) {
            loop_fatal(c, SLUICE_ERR_INVALID, "redis %s: SELECT: %s", c->addr, m);
        }
        /* Anything else (LOADING after a restart...) is tried again. */
        session_fail(c, "redis %s: %s: %s", c->addr, q->id, m);
        return;
    }
    if (q->kind == R_CLIENT_ID && r->type == REDIS_REPLY_INTEGER)
        c->data_client_id = r->integer;
    /* A script is called by the SHA1 of its text, which the build knows:
     * a node that names it otherwise is not a Redis. */
    if (q->nitems >= 0 && q->nitems < SLUICEI_SCRIPT_COUNT &&
        (r->type != REDIS_REPLY_STRING || r->len != 40 ||
         memcmp(r->str, sluicei_script_sha((sluicei_script_id)q->nitems), 40) != 0)) {
        loop_fatal(c, SLUICE_ERR_PROTOCOL, "redis %s: SCRIPT LOAD %s: the server's SHA1 is not "
                   "the script's", c->addr, sluicei_script_name((sluicei_script_id)q->nitems));
        return;
    }
    if (--c->setup_left == 0 && c->state == ST_CONNECTING)
        session_ready(c);
}
