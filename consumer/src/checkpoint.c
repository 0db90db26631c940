/* Checkpoints (consumer.h: sluice_consumer_checkpoint; common/lua/
 * checkpoint.lua; docs/PROTOCOL.md, "Checkpoints").
 *
 * A consumer opened with checkpoints acknowledges as any other, but the
 * ack script keeps the frames, logged under the owner (ack.lua). Taking
 * a checkpoint: the API thread acknowledges what the application holds,
 * numbers the checkpoint one above the highest the owner has, and asks
 * the loop of every partition's consumer (ckpt_state); each loop sends
 * the script once every acknowledgement before it is confirmed, on the
 * connection the acknowledgements use, and hands the answer back under
 * the mutex. Resuming happens at open (consumer.c: ckpt_open). */
#include "consumer_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#define TOKEN_PREFIX "sluice-ckpt/1/"

void ckpt_pump(sluice_consumer *c)
{
    /* Every pump passes here: a consumer without checkpoints takes no lock. */
    if (!c->owner[0] || c->state != ST_READY || c->ckpt_inflight || !c->restored || c->nunconf)
        return;
    mu_lock(c);
    int want = c->ckpt_state == CK_WANTED && c->nacks == 0;
    char n[24], ep[16], keep[16], req[17];
    snprintf(n, sizeof n, "%" PRIu64, c->ckpt_n);
    snprintf(ep, sizeof ep, "%" PRIu32, c->ckpt_epoch);
    snprintf(req, sizeof req, "%s", c->ckpt_req);
    mu_unlock(c);
    if (!want)
        return;
    snprintf(keep, sizeof keep, "%d", c->ckpt_keep);
    const char *argv[9] = {"take", c->id, c->tok, c->rank_s, c->owner, n, ep, keep, req};
    if (send_script(c, CONN_CTL, send_req_new(c, R_CKPT, -1), 0, SLUICEI_SCRIPT_CHECKPOINT, 9,
                    argv) == 0)
        c->ckpt_inflight = 1;
}

void ckpt_reply(sluice_consumer *c, redisReply *r)
{
    c->ckpt_inflight = 0;
    mu_lock(c);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_STRING) {
        if ((uint64_t)r->element[0]->integer > c->ckpt_last)
            c->ckpt_last = (uint64_t)r->element[0]->integer;
        if (c->ckpt_state == CK_WANTED) {
            snprintf(c->ckpt_job, sizeof c->ckpt_job, "%s", r->element[1]->str);
            c->ckpt_state = CK_DONE;
        }
    } else if (c->ckpt_state == CK_WANTED) {
        snprintf(c->ckpt_err, sizeof c->ckpt_err, "queue '%s': checkpoint %" PRIu64 ": %s",
                 c->queue, c->ckpt_n,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        c->ckpt_state = CK_FAILED;
    }
    cv_broadcast(c);
    mu_unlock(c);
}

int ckpt_token_parse(const char *tok, char queue[SLUICE_MAX_QUEUE_NAME + 1],
                     char owner[MAX_CONSUMER_ID + 2], uint64_t *n, char job[48], char *err,
                     size_t errlen)
{
    size_t pl = strlen(TOKEN_PREFIX);
    const char *f[4];
    size_t fl[4];
    const char *p = tok + pl;
    if (strncmp(tok, TOKEN_PREFIX, pl) != 0)
        goto bad;
    for (int i = 0; i < 4; i++) {
        const char *slash = strchr(p, '/');
        if (!slash && i < 3)
            goto bad;
        f[i] = p;
        fl[i] = slash ? (size_t)(slash - p) : strlen(p);
        p = slash ? slash + 1 : p + fl[i];
    }
    if (*p || strchr(f[3], '/') || fl[0] == 0 || fl[0] > SLUICE_MAX_QUEUE_NAME || fl[1] == 0 ||
        fl[1] > MAX_CONSUMER_ID + 1 || fl[3] == 0 || fl[3] >= 48)
        goto bad;
    char num[24];
    if (fl[2] == 0 || fl[2] >= sizeof num)
        goto bad;
    memcpy(num, f[2], fl[2]);
    num[fl[2]] = '\0';
    int64_t v;
    if (sluicei_parse_i64(num, 1, INT64_MAX, &v) != 0)
        goto bad;
    *n = (uint64_t)v;
    memcpy(queue, f[0], fl[0]);
    queue[fl[0]] = '\0';
    memcpy(owner, f[1], fl[1]);
    owner[fl[1]] = '\0';
    memcpy(job, f[3], fl[3]);
    job[fl[3]] = '\0';
    return 0;
bad:
    snprintf(err, errlen, "resume: '%.200s' is not a checkpoint token (sluice-ckpt/1/QUEUE/"
             "OWNER/N/JOB, as sluice_consumer_checkpoint() writes)", tok);
    return -1;
}

sluice_err sluice_consumer_checkpoint(sluice_consumer *c, char *token, size_t len,
                                      int timeout_ms)
{
    if (!c)
        return SLUICE_ERR_INVALID;
    sluice_consumer **cs = c->nparts ? c->part : &c;
    int np = c->nparts ? c->nparts : 1;
    if (!cs[0]->owner[0] || c->ack_mode == SLUICE_ACK_NONE) {
        snprintf(c->errstr, sizeof c->errstr, "checkpoint: the consumer was opened %s",
                 c->ack_mode == SLUICE_ACK_NONE
                     ? "to acknowledge at most once: nothing could be given back"
                     : "without checkpoints (opts.checkpoint_keep, or resume)");
        return SLUICE_ERR_INVALID;
    }
    if (!token || len < SLUICE_CHECKPOINT_TOKEN_MAX) {
        snprintf(c->errstr, sizeof c->errstr, "checkpoint: the token needs a buffer of "
                 "SLUICE_CHECKPOINT_TOKEN_MAX (%d) bytes", SLUICE_CHECKPOINT_TOKEN_MAX);
        return SLUICE_ERR_INVALID;
    }
    token[0] = '\0';
    /* What the application holds counts as trained. */
    sluice_batch **held = NULL;
    size_t nheld = 0, cap = 0;
    mu_lock(c);
    for (int k = 0; k < np; k++)
        if (grow((void **)&held, &cap, nheld + cs[k]->nout, sizeof *held) == 0)
            for (size_t i = 0; i < cs[k]->nout; i++)
                held[nheld++] = cs[k]->out[i].b;
    mu_unlock(c);
    for (size_t i = 0; i < nheld; i++)
        sluice_batch_ack(held[i]);
    free(held);

    mu_lock(c);
    uint64_t n = 0;
    for (int k = 0; k < np; k++)
        n = cs[k]->ckpt_last > n ? cs[k]->ckpt_last : n;
    n++;
    for (int k = 0; k < np; k++) {
        sluice_consumer *p = cs[k];
        p->ckpt_n = n;
        p->ckpt_epoch = p->epoch;
        snprintf(p->ckpt_req, sizeof p->ckpt_req, "%016" PRIx64, sluicei_random64());
        p->ckpt_state = CK_WANTED;
        p->ckpt_err[0] = '\0';
    }
    mu_unlock(c);
    for (int k = 0; k < np; k++)
        loop_wake(cs[k]);

    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    int64_t limit = timeout_ms < 0 ? -1 : now_ms + timeout_ms;
    sluice_err e = SLUICE_OK;
    mu_lock(c);
    for (;;) {
        int wanted = 0;
        for (int k = 0; k < np && e == SLUICE_OK; k++) {
            sluice_consumer *p = cs[k];
            if (p->fatal != SLUICE_OK) {
                e = p->fatal;
                snprintf(c->errstr, sizeof c->errstr, "%s", p->fatal_msg);
            } else if (p->ckpt_state == CK_FAILED) {
                e = SLUICE_ERR_INVALID;
                snprintf(c->errstr, sizeof c->errstr, "%s", p->ckpt_err);
            } else if (p->ckpt_state == CK_WANTED) {
                wanted = 1;
            }
        }
        if (e != SLUICE_OK || !wanted)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t t = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
        if (limit >= 0 && t >= limit) {
            e = SLUICE_ERR_TIMEOUT;
            snprintf(c->errstr, sizeof c->errstr, "checkpoint: Redis did not confirm it within "
                     "%d ms%s%.400s", timeout_ms, cs[0]->down_since_ms ? " (reconnecting: " : "",
                     cs[0]->down_since_ms ? cs[0]->down_why : "");
            if (cs[0]->down_since_ms)
                strncat(c->errstr, ")", sizeof c->errstr - strlen(c->errstr) - 1);
            break;
        }
        if (limit < 0) {
            pthread_cond_wait(&c->cv, &c->mu);
        } else {
            struct timespec ts = {(time_t)(limit / 1000), (long)(limit % 1000) * 1000000L};
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        }
    }
    for (int k = 0; k < np; k++)
        cs[k]->ckpt_state = CK_IDLE;
    if (e == SLUICE_OK) {
        int w = snprintf(token, len, TOKEN_PREFIX "%s/%s/%" PRIu64 "/%s", c->queue,
                         cs[0]->owner, n, cs[0]->ckpt_job);
        if (w < 0 || (size_t)w >= len) {
            token[0] = '\0';
            e = SLUICE_ERR_INVALID;
            snprintf(c->errstr, sizeof c->errstr, "checkpoint: token longer than %zu bytes", len);
        }
    }
    mu_unlock(c);
    return e;
}
