/* sluice-ctl checkpoints and resume: the checkpoints consumers took
 * (docs/PROTOCOL.md, "Checkpoints"), and resuming one without a consumer. */
#include "ctl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_PREFIX "sluice-ckpt/1/"

/* Whose checkpoints an owner names, for people: "rank 3", "consumer c1". */
static void owner_name(const char *o, char *out, size_t n)
{
    if (o[0] == '#')
        snprintf(out, n, "rank %s", o + 1);
    else
        snprintf(out, n, "consumer %s", o);
}

/* One owner of partition q: its kept checkpoints, with their tokens. */
static int show_owner(ctl *x, const char *q, const char *o, const char *jobtok, json_writer *w)
{
    char k_ck[SLUICE_MAX_KEY], k_kept[SLUICE_MAX_KEY], k_log[SLUICE_MAX_KEY], who[96];
    sluicei_keyf(k_ck, q, "ckpt:%s", o);
    sluicei_keyf(k_kept, q, "ckpts:%s", o);
    sluicei_keyf(k_log, q, "clog:%s", o);
    owner_name(o, who, sizeof who);
    const char *hv[2] = {"HGETALL", k_ck}, *lv[4] = {"LRANGE", k_kept, "0", "-1"},
               *gv[2] = {"LLEN", k_log};
    redisReply *h = ctl_must(x, q, 2, hv), *l = h ? ctl_must(x, q, 4, lv) : NULL,
               *g = l ? ctl_must(x, q, 2, gv) : NULL;
    if (!g) {
        if (h)
            freeReplyObject(h);
        if (l)
            freeReplyObject(l);
        return SLUICEI_EXIT_RUNTIME;
    }
    const char *last = "0", *cid = "";
    for (size_t i = 0; h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2) {
        if (strcmp(h->element[i]->str, "last") == 0)
            last = h->element[i + 1]->str;
        else if (strcmp(h->element[i]->str, "cid") == 0)
            cid = h->element[i + 1]->str;
    }
    long long since = ctl_reply_num(g);
    if (w) {
        json_object_begin(w, NULL);
        json_str(w, "owner", o);
        json_str(w, "queue", q);
        json_int(w, "last", ctl_num(last));
        json_str(w, "consumer", cid);
        json_int(w, "acked_since_last", since);
        json_array_begin(w, "checkpoints");
    } else {
        printf("%s (owner %s) in %s: last checkpoint %s, by consumer %s; %lld batch%s "
               "acknowledged since\n", who, o, q, last, cid[0] ? cid : "-", since,
               since == 1 ? "" : "es");
    }
    for (size_t i = 0; l->type == REDIS_REPLY_ARRAY && i < l->elements; i++) {
        const char *n = l->element[i]->str, *rec = NULL;
        for (size_t j = 0; h->type == REDIS_REPLY_ARRAY && j + 1 < h->elements; j += 2)
            if (strcmp(h->element[j]->str, n) == 0)
                rec = h->element[j + 1]->str;
        long long ep = 0, ms = 0;
        if (rec)
            sscanf(rec, "%lld %lld", &ep, &ms);
        char when[40], tok[512];
        ctl_iso_time(ms, when, sizeof when);
        snprintf(tok, sizeof tok, TOKEN_PREFIX "%s/%s/%s/%s", x->q, o, n, jobtok);
        if (w) {
            json_object_begin(w, NULL);
            json_int(w, "n", ctl_num(n));
            json_int(w, "epoch", ep);
            json_int(w, "time_ms", ms);
            json_str(w, "token", tok);
            json_object_end(w);
        } else {
            printf("  checkpoint %s: epoch %lld, %s, token %s\n", n, ep, when, tok);
        }
    }
    if (w) {
        json_array_end(w);
        json_object_end(w);
    }
    freeReplyObject(h);
    freeReplyObject(l);
    freeReplyObject(g);
    return 0;
}

int checkpoints_run(ctl *x, int json)
{
    json_writer jw, *w = NULL;
    if (json) {
        w = &jw;
        json_init(w, stdout);
        json_object_begin(w, NULL);
        json_str(w, "queue", x->q);
        json_array_begin(w, "owners");
    }
    long long kept = 0, bytes = 0, owners = 0;
    int rc = 0;
    for (int p = 0; p < ctl_nparts(x) && rc == 0; p++) {
        const char *q = ctl_pname(x, p);
        char k_own[SLUICE_MAX_KEY], k_ret[SLUICE_MAX_KEY], k_rb[SLUICE_MAX_KEY],
            k_job[SLUICE_MAX_KEY];
        sluicei_key(k_own, q, "cowners");
        sluicei_key(k_ret, q, "retained");
        sluicei_key(k_rb, q, "retained_bytes");
        sluicei_key(k_job, q, "job");
        const char *sv[2] = {"SMEMBERS", k_own}, *rv[2] = {"HLEN", k_ret}, *bv[2] = {"GET", k_rb},
                   *jv[3] = {"HGET", k_job, "token"};
        redisReply *s = ctl_must(x, q, 2, sv), *r = s ? ctl_must(x, q, 2, rv) : NULL,
                   *b = r ? ctl_must(x, q, 2, bv) : NULL, *j = b ? ctl_must(x, q, 3, jv) : NULL;
        if (!j) {
            rc = SLUICEI_EXIT_RUNTIME;
        } else {
            kept += ctl_reply_num(r);
            bytes += ctl_reply_num(b);
            const char *jt = j->type == REDIS_REPLY_STRING ? j->str : "-";
            /* Owners in a stable order: sort the set's members. */
            size_t n = s->type == REDIS_REPLY_ARRAY ? s->elements : 0;
            for (size_t a = 1; a < n; a++)
                for (size_t c = a; c > 0 && strcmp(s->element[c - 1]->str, s->element[c]->str) > 0;
                     c--) {
                    redisReply *t = s->element[c];
                    s->element[c] = s->element[c - 1];
                    s->element[c - 1] = t;
                }
            for (size_t i = 0; i < n && rc == 0; i++, owners++)
                rc = show_owner(x, q, s->element[i]->str, jt, w);
        }
        if (s)
            freeReplyObject(s);
        if (r)
            freeReplyObject(r);
        if (b)
            freeReplyObject(b);
        if (j)
            freeReplyObject(j);
    }
    if (rc)
        return rc;
    if (w) {
        json_array_end(w);
        json_int(w, "retained_batches", kept);
        json_int(w, "retained_bytes", bytes);
        json_object_end(w);
        fputc('\n', stdout);
    } else {
        if (owners == 0)
            printf("no checkpoints in queue '%s'\n", x->q);
        printf("kept for resuming: %lld batch%s, %lld bytes (outside the budgets)\n", kept,
               kept == 1 ? "" : "es", bytes);
    }
    return 0;
}

int resume_run(ctl *x, const char *token)
{
    /* sluice-ckpt/1/<queue>/<owner>/<n>/<job> */
    char buf[512];
    snprintf(buf, sizeof buf, "%s", token);
    size_t pl = strlen(TOKEN_PREFIX);
    char *f[4] = {NULL}, *save = NULL;
    int nf = 0;
    if (strncmp(buf, TOKEN_PREFIX, pl) == 0) {
        for (char *t = strtok_r(buf + pl, "/", &save); t && nf < 5;
             t = strtok_r(NULL, "/", &save)) {
            if (nf < 4)
                f[nf++] = t;
            else
                nf = 5;
        }
    }
    long long n = nf == 4 ? ctl_num(f[2]) : 0;
    if (nf != 4 || n <= 0) {
        fprintf(stderr, "sluice-ctl: resume: '%s' is not a checkpoint token (sluice-ckpt/1/"
                "QUEUE/OWNER/N/JOB; sluice-ctl checkpoints %s lists them)\n", token, x->q);
        return SLUICEI_EXIT_USAGE;
    }
    if (strcmp(f[0], x->q) != 0) {
        fprintf(stderr, "sluice-ctl: resume: the checkpoint is of queue '%s', not '%s'\n", f[0],
                x->q);
        return SLUICEI_EXIT_USAGE;
    }
    char rank[16] = "", who[96];
    if (f[1][0] == '#')
        snprintf(rank, sizeof rank, "%s", f[1] + 1);
    owner_name(f[1], who, sizeof who);
    long long epoch = 0;
    for (int p = 0; p < ctl_nparts(x); p++) {
        for (int more = 1; more;) {
            const char *argv[7] = {"resume", "", "", rank, f[1], f[2], f[3]};
            redisReply *r = NULL;
            if (ctl_run_script(x, SLUICEI_SCRIPT_CHECKPOINT, ctl_pname(x, p), 7, argv, &r))
                return SLUICEI_EXIT_RUNTIME;
            more = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                   ctl_reply_num(r->element[1]) == 1;
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 3)
                epoch = ctl_reply_num(r->element[0]);
            freeReplyObject(r);
        }
    }
    printf("%s resumed at checkpoint %lld (epoch %lld): what it acknowledged after it is back "
           "in the lists\n", who, n, epoch);
    return 0;
}
