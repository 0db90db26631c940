/* Requests written by hand to a connection's socket, with large arguments
 * sent from the caller's memory (conn_send.h); replies read without
 * waiting. The one place outside conn.c that touches hiredis's context. */
#include "conn_send.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

void sluicei_req_reset(sluicei_req *r)
{
    r->text.len = 0;
    r->nrefs = 0;
    r->err = SLUICE_OK;
}

void sluicei_req_free(sluicei_req *r)
{
    sluicei_buf_free(&r->text);
    free(r->refs);
    free(r->iov);
    memset(r, 0, sizeof *r);
}

/* Appends s[0..len) to the text, remembering the first failure. */
static void put(sluicei_req *r, const void *s, size_t len)
{
    if (r->err == SLUICE_OK)
        r->err = sluicei_buf_append(&r->text, s, len);
}

/* Appends a RESP header: kind ('*' or '$') and n, then CRLF. */
static void header(sluicei_req *r, char kind, uint64_t n)
{
    char h[32];
    int len = snprintf(h, sizeof h, "%c%" PRIu64 "\r\n", kind, n);
    put(r, h, (size_t)len);
}

void sluicei_req_command(sluicei_req *r, int argc)
{
    header(r, '*', (uint64_t)argc);
}

void sluicei_req_arg(sluicei_req *r, const void *s, size_t len)
{
    header(r, '$', len);
    put(r, s, len);
    put(r, "\r\n", 2);
}

void sluicei_req_str(sluicei_req *r, const char *s)
{
    sluicei_req_arg(r, s, strlen(s));
}

void sluicei_req_str2(sluicei_req *r, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    header(r, '$', la + lb);
    put(r, a, la);
    put(r, b, lb);
    put(r, "\r\n", 2);
}

void sluicei_req_u64(sluicei_req *r, uint64_t v)
{
    char num[24];
    int len = snprintf(num, sizeof num, "%" PRIu64, v);
    sluicei_req_arg(r, num, (size_t)len);
}

void sluicei_req_ref_arg(sluicei_req *r, const void *data, size_t len)
{
    header(r, '$', len);
    /* The pieces sluicei_conn_send() needs are allocated here, so that
     * sending cannot fail for lack of memory once r is built. */
    if (r->err == SLUICE_OK && r->nrefs == r->refcap) {
        size_t ncap = r->refcap ? r->refcap * 2 : 16;
        sluicei_req_ref *n = realloc(r->refs, ncap * sizeof *n);
        struct iovec *v = n ? realloc(r->iov, (2 * ncap + 1) * sizeof *v) : NULL;
        if (n)
            r->refs = n;
        if (v) {
            r->iov = v;
            r->refcap = ncap;
        } else {
            r->err = SLUICE_ERR_NOMEM;
        }
    }
    if (r->err == SLUICE_OK)
        r->refs[r->nrefs++] = (sluicei_req_ref){r->text.len, data, len};
    put(r, "\r\n", 2);
}

/* Records a socket error as conn.c does and drops the context, so that
 * the caller reconnects. */
static sluice_err send_failed(sluicei_conn *c, int err)
{
    char addr[256];
    sluicei_url_describe(&c->url, addr, sizeof addr);
    snprintf(c->errstr, sizeof c->errstr, "redis %s: send: %s%s", addr, strerror(err),
             err == EAGAIN ? " (no progress within the timeout)" : "");
    redisFree(c->ctx);
    c->ctx = NULL;
    return SLUICE_ERR_IO;
}

/* Writes iov[0..n) to the socket, whatever partial writes it takes. */
static sluice_err write_all(sluicei_conn *c, struct iovec *iov, size_t n)
{
    while (n > 0) {
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = iov;
        mh.msg_iovlen = n < IOV_MAX ? n : IOV_MAX;
        /* MSG_NOSIGNAL: a closed socket is an error, not a SIGPIPE for the
         * application linking us. */
        ssize_t w = sendmsg(c->ctx->fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return send_failed(c, errno);
        }
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return SLUICE_OK;
}

sluice_err sluicei_conn_send(sluicei_conn *c, sluicei_req *r)
{
    if (r->err != SLUICE_OK) {
        snprintf(c->errstr, sizeof c->errstr, "building a request: %s", sluice_strerror(r->err));
        return r->err;
    }
    if (!c->ctx)
        return SLUICE_ERR_IO;   /* errstr tells how it was lost */
    /* Pointers into the text only now that it is complete: it may have
     * moved while it grew. */
    struct iovec one;
    struct iovec *iov = r->nrefs ? r->iov : &one;
    size_t k = 0, from = 0;
    for (size_t i = 0; i < r->nrefs; i++) {
        iov[k++] = (struct iovec){r->text.data + from, r->refs[i].at - from};
        iov[k++] = (struct iovec){(void *)r->refs[i].data, r->refs[i].len};
        from = r->refs[i].at;
    }
    iov[k++] = (struct iovec){r->text.data + from, r->text.len - from};
    /* Nothing of hiredis's may follow ours; its buffer is empty in
     * practice (plain commands run only with nothing in flight). */
    if (sdslen(c->ctx->obuf) > 0) {
        sluice_err e = sluicei_conn_flush(c);
        if (e != SLUICE_OK)
            return e;
    }
    return write_all(c, iov, k);
}

/* Records ctx's error (a socket error, a malformed reply, a limit broken)
 * in c->errstr with the address, and drops the context. */
static sluice_err read_failed(sluicei_conn *c)
{
    char addr[256];
    sluicei_url_describe(&c->url, addr, sizeof addr);
    snprintf(c->errstr, sizeof c->errstr, "redis %s: %s", addr,
             c->ctx->errstr[0] ? c->ctx->errstr : "connection closed");
    redisFree(c->ctx);
    c->ctx = NULL;
    return sluicei_reply_guard_tripped(&c->guard) ? SLUICE_ERR_PROTOCOL : SLUICE_ERR_IO;
}

sluice_err sluicei_conn_read_ready(sluicei_conn *c, redisReply **out)
{
    *out = NULL;
    for (;;) {
        redisContext *ctx = c->ctx;
        redisReply *r = NULL;
        if (!ctx)
            return SLUICE_ERR_IO;   /* errstr tells how it was lost */
        if (sluicei_redis_reply_ready(ctx, &r) != REDIS_OK)
            return read_failed(c);
        if (r) {
            *out = r;
            return SLUICE_OK;
        }
        struct pollfd pf = {.fd = ctx->fd, .events = POLLIN};
        if (poll(&pf, 1, 0) <= 0)
            return SLUICE_OK;
        /* What the reader holds stays within the limits (reply.h). */
        if (sluicei_reply_guard_check(&c->guard, ctx) != 0) {
            sluicei_reply_guard_fail(&c->guard, ctx);
            return read_failed(c);
        }
        if (redisBufferRead(ctx) != REDIS_OK)
            return read_failed(c);
    }
}

void sluicei_conn_drop(sluicei_conn *c, const char *why)
{
    if (c->ctx) {
        redisFree(c->ctx);
        c->ctx = NULL;
    }
    if (why)
        snprintf(c->errstr, sizeof c->errstr, "%s", why);
}
