/* sluice-trainer: an example trainer that reads its batches from sluice.
 *
 * Each process is one rank of a coordinated queue. It trains a classifier
 * of 28x28 images into 10 classes (a one-hidden-layer ReLU network, or
 * softmax regression with --hidden 0) by minibatch SGD on the batches its
 * consumer returns, and at every end of epoch (SLUICE_EOF)
 * the ranks average their weights through Redis, the stand-in this example
 * uses for an allreduce. After the job's last epoch a rank given the test
 * set scores the averaged model on it.
 *
 * One file on purpose, though longer than the library's files: it is the
 * example a user copies, built alone against an installed libsluice
 * (examples/trainer/Makefile), and reads from top to bottom.
 *
 *     sluice-trainer --redis URL --queue Q --rank R --world N \
 *         [--test-images FILE --test-labels FILE] [--ids-out FILE]
 *
 * Batches carry the tensors "image" uint8 [B,28,28] and "label" uint8 [B]
 * (the idx reader of sluice-producer). Pixels are scaled to [0, 1].
 *
 * Weight averaging (not fault tolerant: a demo of where an allreduce goes).
 * For the end of epoch e of job J (J = the job's submitted_us, so that a
 * new job on the same queue never meets an old job's keys), rank r:
 *   SET   sluice-demo:{Q}:w:J:e:r  <weights, float32, host byte order> EX 3600
 *   SADD  sluice-demo:{Q}:w:J:e:in r, then SCARD it (one MULTI)
 *   the rank whose SADD made the set N strong pushes one token onto every
 *         rank's list sluice-demo:{Q}:w:J:e:go:<rank>
 *   BLPOP its own go list (a barrier without polling), then GET all N
 *         weight blobs and averages them.
 * Every rank ends the epoch with the same weights. A rank restarted after
 * a crash that arrives again at an epoch end the others passed already
 * (its SADD adds nothing and the set is full) does not wait. The epoch is
 * the consumer's (sluice_consumer_epoch()), so a restarted rank meets the
 * others at the right keys.
 *
 * Image ids (--ids-out). The manifest's shards are record ranges of the
 * training file (shard s = records [start_s, end_s)); a batch (epoch, task
 * = shard, seq) holds the consecutive records start_s + seq * batch_size
 * + row, row = 0..B-1, because a task numbers its batches from 0 and only
 * its last batch may be short. start_s comes from the job's task
 * definitions in Redis (hash sluice:{Q}:taskdef, see docs/PROTOCOL.md) and
 * batch_size from the job (hash sluice:{Q}:job). Each line of the file is
 * "epoch index label crc32" for one image (crc32 of its 784 pixel bytes,
 * zlib's), so that a checker can prove both that every image came exactly
 * once per epoch and that it came intact. Padding batches are left out. */
#define _POSIX_C_SOURCE 200809L

#include <sluice/consumer.h>

#include <hiredis/hiredis.h>
#include <zlib.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROWS 28
#define COLS 28
#define PIXELS (ROWS * COLS)
#define CLASSES 10
/* Weights left in Redis expire after this long (seconds). */
#define WEIGHTS_TTL_S 3600
/* next() returns at least this often, so that a signal is noticed. */
#define POLL_MS 500
/* Hidden units unless --hidden says otherwise. */
#define DEFAULT_HIDDEN 32

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    stop_flag = sig;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("sluice-trainer: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* ---- the model ----------------------------------------------------------- */

/* Softmax regression (hidden == 0) or a one-hidden-layer ReLU network.
 * Every parameter lives in one float array p, which is what ranks average:
 *   hidden > 0:  W1 [hidden][PIXELS], b1 [hidden], W2 [CLASSES][hidden], b2 [CLASSES]
 *   hidden == 0:                                    W2 [CLASSES][PIXELS], b2 [CLASSES] */
typedef struct model {
    int hidden;
    size_t n;   /* number of parameters */
    float *p;   /* n floats, owned by the model */
    float *w1, *b1, *w2, *b2; /* views into p (w1, b1 NULL without a hidden layer) */
} model;

/* Allocates the parameters: zeros for softmax regression; for the hidden
 * layer, uniform Glorot weights from a fixed seed, so that every rank
 * starts from the same point (averaging then stays meaningful). */
static void model_init(model *m, int hidden)
{
    size_t in = hidden ? (size_t)hidden : PIXELS;
    m->hidden = hidden;
    m->n = (hidden ? (size_t)hidden * PIXELS + (size_t)hidden : 0) + CLASSES * in + CLASSES;
    m->p = calloc(m->n, sizeof *m->p);
    if (!m->p) {
        fputs("sluice-trainer: out of memory\n", stderr);
        exit(1);
    }
    m->w1 = hidden ? m->p : NULL;
    m->b1 = hidden ? m->p + (size_t)hidden * PIXELS : NULL;
    m->w2 = hidden ? m->b1 + hidden : m->p;
    m->b2 = m->w2 + CLASSES * in;
    uint64_t s = 0x9e3779b97f4a7c15u; /* xorshift64: the same numbers everywhere */
    for (size_t i = 0; hidden && i < (size_t)(m->b2 - m->p); i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        double fan = m->p + i < m->b1 ? PIXELS + hidden : hidden + CLASSES;
        double u = (double)(s >> 11) / (double)(1ull << 53) * 2 - 1;
        m->p[i] = (float)(u * sqrt(6.0 / fan));
    }
    if (hidden)
        memset(m->b1, 0, (size_t)hidden * sizeof *m->b1);
}

static float dot(const float *a, const float *b, size_t n)
{
    float s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* Class probabilities for one image x (PIXELS floats in [0, 1]) into
 * prob[CLASSES]; h[hidden] receives the hidden activations. Returns the
 * most likely class. */
static int forward(const model *m, const float *x, float *h, float *prob)
{
    const float *in = x;
    size_t din = PIXELS;
    if (m->hidden) {
        for (int j = 0; j < m->hidden; j++) {
            float a = m->b1[j] + dot(m->w1 + (size_t)j * PIXELS, x, PIXELS);
            h[j] = a > 0 ? a : 0;
        }
        in = h;
        din = (size_t)m->hidden;
    }
    float z[CLASSES], zmax = -INFINITY;
    int best = 0;
    for (int c = 0; c < CLASSES; c++) {
        z[c] = m->b2[c] + dot(m->w2 + c * din, in, din);
        if (z[c] > zmax) {
            zmax = z[c];
            best = c;
        }
    }
    /* Subtracting the largest logit keeps expf() from overflowing. */
    float sum = 0;
    for (int c = 0; c < CLASSES; c++)
        sum += prob[c] = expf(z[c] - zmax);
    for (int c = 0; c < CLASSES; c++)
        prob[c] /= sum;
    return best;
}

/* Most hidden units --hidden accepts. */
#define MAX_HIDDEN 1024

/* One SGD step on n images (uint8 pixels, row after row) and their labels:
 * the mean cross-entropy gradient over the batch, scaled by lr. grad is
 * scratch space of m->n floats. Adds the batch's summed loss to *loss and
 * its correct predictions (before the step) to *correct. */
static void sgd_step(model *m, const uint8_t *pix, const uint8_t *labels, size_t n, float lr,
                     float *grad, double *loss, uint64_t *correct)
{
    float x[PIXELS], h[MAX_HIDDEN], gh[MAX_HIDDEN], prob[CLASSES];
    size_t H = (size_t)m->hidden, din = H ? H : PIXELS;
    /* The gradient has the parameters' layout: offsets as in the model. */
    float *gw1 = grad, *gb1 = grad + H * PIXELS;
    float *gw2 = grad + (m->w2 - m->p), *gb2 = grad + (m->b2 - m->p);
    memset(grad, 0, m->n * sizeof *grad);
    for (size_t k = 0; k < n; k++) {
        for (int i = 0; i < PIXELS; i++)
            x[i] = pix[k * PIXELS + i] * (1.0f / 255.0f);
        const float *in = H ? h : x;
        int y = labels[k];
        if (forward(m, x, h, prob) == y)
            (*correct)++;
        *loss -= log(prob[y] > 1e-12f ? prob[y] : 1e-12f);
        if (H)
            memset(gh, 0, H * sizeof *gh);
        /* d(cross-entropy)/d(logit c) = prob[c] - [c == y]. */
        for (int c = 0; c < CLASSES; c++) {
            float g = prob[c] - (c == y ? 1.0f : 0.0f);
            float *gw = gw2 + c * din;
            const float *w = m->w2 + c * din;
            for (size_t i = 0; i < din; i++)
                gw[i] += g * in[i];
            gb2[c] += g;
            for (size_t j = 0; j < H; j++)
                gh[j] += g * w[j];
        }
        for (size_t j = 0; j < H; j++) {
            if (h[j] <= 0)
                continue; /* ReLU passes no gradient where it was off */
            float g = gh[j], *gw = gw1 + j * PIXELS;
            for (int i = 0; i < PIXELS; i++)
                gw[i] += g * x[i];
            gb1[j] += g;
        }
    }
    float scale = lr / (float)n;
    for (size_t j = 0; j < m->n; j++)
        m->p[j] -= scale * grad[j];
}

/* ---- IDX files (the test set), read straight from the .gz ---------------- */

/* Reads an IDX file: magic 0x0000 08 <ndims>, ndims big-endian uint32
 * sizes, then the uint8 data. want_dims is 3 for images (count, rows, cols)
 * and 1 for labels. On success returns the data (malloc'd, owned by the
 * caller) and sets *count; on failure prints why and exits. */
static uint8_t *read_idx(const char *path, int want_dims, uint32_t *count)
{
    gzFile f = gzopen(path, "rb");
    if (!f)
        die("%s: %s", path, errno ? strerror(errno) : "cannot open");
    uint8_t head[4 + 4 * 3];
    size_t head_len = 4 + 4 * (size_t)want_dims;
    if (gzread(f, head, (unsigned)head_len) != (int)head_len)
        die("%s: truncated IDX header", path);
    if (head[0] != 0 || head[1] != 0 || head[2] != 0x08 || head[3] != want_dims)
        die("%s: not an IDX file of %d-dimensional uint8 data", path, want_dims);
    uint32_t dims[3];
    for (int d = 0; d < want_dims; d++) {
        const uint8_t *q = head + 4 + 4 * d;
        dims[d] = (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3];
    }
    if (want_dims == 3 && (dims[1] != ROWS || dims[2] != COLS))
        die("%s: images are %" PRIu32 "x%" PRIu32 ", this model takes %dx%d", path, dims[1],
            dims[2], ROWS, COLS);
    /* The test set is small; refuse a header that asks for absurd sizes. */
    if (dims[0] == 0 || dims[0] > 1000000)
        die("%s: %" PRIu32 " items is out of range (1..1000000)", path, dims[0]);
    size_t item = want_dims == 3 ? PIXELS : 1;
    size_t len = (size_t)dims[0] * item;
    uint8_t *data = malloc(len);
    if (!data)
        die("out of memory reading %s", path);
    size_t got = 0;
    while (got < len) {
        size_t chunk = len - got > (1u << 30) ? (1u << 30) : len - got;
        int r = gzread(f, data + got, (unsigned)chunk);
        if (r <= 0)
            die("%s: truncated at item %zu of %" PRIu32, path, got / item, dims[0]);
        got += (size_t)r;
    }
    gzclose(f);
    *count = dims[0];
    return data;
}

/* Accuracy of m on n images and labels. */
static double score(const model *m, const uint8_t *pix, const uint8_t *labels, uint32_t n)
{
    float x[PIXELS], h[MAX_HIDDEN], prob[CLASSES];
    uint32_t right = 0;
    for (uint32_t k = 0; k < n; k++) {
        for (int i = 0; i < PIXELS; i++)
            x[i] = pix[(size_t)k * PIXELS + i] * (1.0f / 255.0f);
        if (forward(m, x, h, prob) == labels[k])
            right++;
    }
    return (double)right / n;
}

/* ---- a plain hiredis connection, for the averaging and the job's keys ---- */

/* Seconds a lost connection is tried again before the trainer gives up
 * (the consumer, for its part, waits forever). */
#define RECONNECT_S 60

/* Connects to a sluice URL: redis://[user[:pass]@]host[:port][/db] or
 * unix:///path[?db=N] (the forms libsluice accepts, without percent
 * escapes), then AUTH and SELECT as the URL says. Returns the connection,
 * or NULL with the reason in err. Exits on a malformed URL or a refused
 * password. */
static redisContext *redis_open(const char *url, char *err, size_t errlen)
{
    char buf[1024], *user = NULL, *pass = NULL, *host, *path = NULL;
    int port = 6379, db = 0;
    if (strlen(url) >= sizeof buf)
        die("--redis: URL too long");
    if (strncmp(url, "unix://", 7) == 0) {
        snprintf(buf, sizeof buf, "%s", url + 7);
        path = buf;
        char *q = strchr(buf, '?');
        if (q) {
            *q++ = '\0';
            if (strncmp(q, "db=", 3) == 0)
                db = atoi(q + 3);
        }
        host = NULL;
    } else if (strncmp(url, "redis://", 8) == 0) {
        snprintf(buf, sizeof buf, "%s", url + 8);
        host = buf;
        char *at = strrchr(buf, '@');
        if (at) {
            *at = '\0';
            host = at + 1;
            char *colon = strchr(buf, ':');
            if (colon) {
                *colon = '\0';
                pass = colon + 1;
                user = buf[0] ? buf : NULL;
            } else {
                pass = buf; /* redis://password@host, as redis-cli reads it */
            }
        }
        char *slash = strchr(host, '/');
        if (slash) {
            *slash = '\0';
            if (slash[1])
                db = atoi(slash + 1);
        }
        char *portp = NULL;
        if (host[0] == '[') { /* [IPv6]:port */
            char *end = strchr(host, ']');
            if (!end)
                die("--redis: bad address '%s'", url);
            *end = '\0';
            host++;
            if (end[1] == ':')
                portp = end + 2;
        } else if ((portp = strchr(host, ':'))) {
            *portp++ = '\0';
        }
        if (portp && *portp)
            port = atoi(portp);
        if (!*host)
            host = "127.0.0.1";
    } else {
        die("--redis: '%s' is not redis://... or unix://...%s", url,
            strncmp(url, "rediss", 6) == 0
                ? " (this example averages its weights over a plain hiredis connection of its "
                  "own: it has no TLS)"
                : "");
    }
    if (!pass && getenv("SLUICE_REDIS_PASSWORD") && *getenv("SLUICE_REDIS_PASSWORD"))
        pass = getenv("SLUICE_REDIS_PASSWORD");
    /* Or the first line of SLUICE_REDIS_PASSWORD_FILE, as libsluice reads
     * it (a Docker or Kubernetes secret). */
    static char file_pass[4097];
    const char *pf = getenv("SLUICE_REDIS_PASSWORD_FILE");
    if (!pass && pf && *pf) {
        FILE *f = fopen(pf, "r");
        if (!f || !fgets(file_pass, sizeof file_pass, f))
            die("SLUICE_REDIS_PASSWORD_FILE '%s': %s", pf, f ? "empty" : strerror(errno));
        fclose(f);
        file_pass[strcspn(file_pass, "\r\n")] = '\0';
        pass = file_pass;
    }

    struct timeval tv = {5, 0};
    redisContext *rc = path ? redisConnectUnixWithTimeout(path, tv)
                            : redisConnectWithTimeout(host, port, tv);
    if (!rc || rc->err) {
        snprintf(err, errlen, "%s", rc ? rc->errstr : "out of memory");
        redisFree(rc);
        return NULL;
    }
    /* Longer than any BLPOP below, so that a wait never breaks the socket. */
    struct timeval cmd_tv = {30, 0};
    redisSetTimeout(rc, cmd_tv);
    redisReply *r = NULL;
    if (pass)
        r = user ? redisCommand(rc, "AUTH %s %s", user, pass) : redisCommand(rc, "AUTH %s", pass);
    if (pass && r && r->type == REDIS_REPLY_ERROR)
        die("AUTH at %s failed: %s", url, r->str); /* trying again will not help */
    if (pass && !r) {
        snprintf(err, errlen, "AUTH: %s", rc->errstr);
        redisFree(rc);
        return NULL;
    }
    freeReplyObject(r);
    if (db) {
        r = redisCommand(rc, "SELECT %d", db);
        if (r && r->type == REDIS_REPLY_ERROR)
            die("SELECT %d at %s failed: %s", db, url, r->str);
        if (!r) {
            snprintf(err, errlen, "SELECT: %s", rc->errstr);
            redisFree(rc);
            return NULL;
        }
        freeReplyObject(r);
    }
    return rc;
}

/* The trainer's own connection: reopened when lost. */
typedef struct rlink {
    const char *url;
    redisContext *c; /* NULL while disconnected */
} rlink;

/* Makes sure l is connected: tries once a second for RECONNECT_S seconds
 * (or until a signal), then exits. */
static void relink(rlink *l)
{
    char err[256] = "";
    double t0 = now_s();
    while (!l->c) {
        if ((l->c = redis_open(l->url, err, sizeof err)))
            return;
        if (stop_flag || now_s() - t0 > RECONNECT_S)
            die("cannot connect to %s: %s", l->url, err);
        nanosleep(&(struct timespec){1, 0}, NULL);
    }
}

/* Drops a broken connection (the next command reconnects). */
static void unlink_redis(rlink *l)
{
    fprintf(stderr, "sluice-trainer: lost the connection to Redis (%s); reconnecting\n",
            l->c->errstr);
    redisFree(l->c);
    l->c = NULL;
}

/* Runs a command and checks the reply is not an error; exits otherwise. A
 * lost connection is reopened and the command sent again (so every
 * command sent here must be harmless to run twice). The reply belongs to
 * the caller (freeReplyObject). */
static redisReply *cmd(rlink *l, const char *fmt, ...)
{
    redisReply *r = NULL;
    while (!r) {
        relink(l);
        va_list ap;
        va_start(ap, fmt);
        r = redisvCommand(l->c, fmt, ap);
        va_end(ap);
        if (!r)
            unlink_redis(l);
    }
    if (r->type == REDIS_REPLY_ERROR)
        die("Redis: %s", r->str);
    return r;
}

/* ---- what the trainer knows of the job ----------------------------------- */

typedef struct job_info {
    char id[32];          /* the job's submitted_us */
    uint64_t batch_size;
    uint64_t *start;      /* start record of each shard, read on first use */
    unsigned char *known; /* start[s] is valid */
    size_t nshards;
} job_info;

static void job_load(job_info *j, rlink *rc, const char *q)
{
    redisReply *r = cmd(rc, "HMGET sluice:{%s}:job submitted_us batch_size ntasks", q);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_STRING)
        die("queue '%s' has no job (sluice-ctl submit)", q);
    snprintf(j->id, sizeof j->id, "%s", r->element[0]->str);
    j->batch_size = r->element[1]->str ? strtoull(r->element[1]->str, NULL, 10) : 0;
    j->nshards = r->element[2]->str ? strtoull(r->element[2]->str, NULL, 10) : 0;
    freeReplyObject(r);
    if (j->batch_size == 0 || j->nshards == 0)
        die("queue '%s': the job has no batch_size or no tasks", q);
    j->start = calloc(j->nshards, sizeof *j->start);
    j->known = calloc(j->nshards, 1);
    if (!j->start || !j->known)
        die("out of memory");
}

/* Global index of the first record of shard s: field 2 of its task
 * definition "<reader>\t<start>\t<end>\t<path>...". */
static uint64_t shard_start(job_info *j, rlink *rc, const char *q, uint64_t s)
{
    if (s >= j->nshards)
        die("batch of shard %" PRIu64 " but the job has %zu shards", s, j->nshards);
    if (!j->known[s]) {
        redisReply *r = cmd(rc, "HGET sluice:{%s}:taskdef %" PRIu64, q, s);
        const char *tab = r->type == REDIS_REPLY_STRING ? strchr(r->str, '\t') : NULL;
        if (!tab)
            die("queue '%s': no task definition for shard %" PRIu64, q, s);
        j->start[s] = strtoull(tab + 1, NULL, 10);
        j->known[s] = 1;
        freeReplyObject(r);
    }
    return j->start[s];
}

/* ---- weight averaging: the stand-in for an allreduce -------------------- */

/* Averages m over the world ranks for the end of epoch e (see the top of
 * the file). Waits at most timeout_s for the others (0: forever), giving
 * up on a signal. Returns 0, or -1 when it gave up. */
static int average(model *m, rlink *rc, const char *q, const job_info *j, uint32_t e,
                   int rank, int world, int timeout_s)
{
    char pre[512];
    snprintf(pre, sizeof pre, "sluice-demo:{%s}:w:%s:%" PRIu32, q, j->id, e);
    size_t bytes = m->n * sizeof *m->p;
    freeReplyObject(cmd(rc, "SET %s:%d %b EX %d", pre, rank, (const char *)m->p, bytes,
                        WEIGHTS_TTL_S));
    /* SADD and SCARD in one transaction: exactly one rank sees the set
     * become full by its own SADD. */
    redisReply *r = NULL;
    while (!r) {
        relink(rc);
        redisAppendCommand(rc->c, "MULTI");
        redisAppendCommand(rc->c, "SADD %s:in %d", pre, rank);
        redisAppendCommand(rc->c, "SCARD %s:in", pre);
        redisAppendCommand(rc->c, "EXPIRE %s:in %d", pre, WEIGHTS_TTL_S);
        redisAppendCommand(rc->c, "EXEC");
        for (int i = 0; i < 5; i++) {
            freeReplyObject(r);
            r = NULL;
            if (redisGetReply(rc->c, (void **)&r) != REDIS_OK) {
                unlink_redis(rc); /* the transaction again is harmless */
                break;
            }
            if (r->type == REDIS_REPLY_ERROR)
                die("Redis: %s", r->str);
        }
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        die("Redis: unexpected reply to EXEC");
    long long added = r->element[0]->integer, arrived = r->element[1]->integer;
    freeReplyObject(r);
    int wait = arrived < world;
    if (added && arrived == world) {
        for (int k = 0; k < world; k++) {
            freeReplyObject(cmd(rc, "RPUSH %s:go:%d 1", pre, k));
            freeReplyObject(cmd(rc, "EXPIRE %s:go:%d %d", pre, k, WEIGHTS_TTL_S));
        }
        wait = 1;
    }
    double t0 = now_s();
    while (wait) {
        r = cmd(rc, "BLPOP %s:go:%d 1", pre, rank);
        wait = r->type != REDIS_REPLY_ARRAY;
        freeReplyObject(r);
        if (!wait)
            break;
        if (stop_flag || (timeout_s > 0 && now_s() - t0 > timeout_s))
            return -1;
    }
    /* Summed into m itself: its own copy is in Redis like everyone's. */
    memset(m->p, 0, bytes);
    for (int k = 0; k < world; k++) {
        r = cmd(rc, "GET %s:%d", pre, k);
        if (r->type != REDIS_REPLY_STRING || (size_t)r->len != bytes)
            die("weights of rank %d for epoch %" PRIu32 " are missing or of another size "
                "(the same --hidden on every rank?)", k, e);
        const float *w = (const float *)(const void *)r->str;
        for (size_t i = 0; i < m->n; i++)
            m->p[i] += w[i];
        freeReplyObject(r);
    }
    for (size_t i = 0; i < m->n; i++)
        m->p[i] /= (float)world;
    return 0;
}

/* ---- main ---------------------------------------------------------------- */

static const char usage_text[] =
    "usage: sluice-trainer --queue Q [--redis URL] [--rank R --world N] [options]\n"
    "\n"
    "An example trainer: one rank of a coordinated sluice queue fed by a job of\n"
    "28x28 uint8 images (tensors \"image\" [B,28,28] and \"label\" [B]). Trains a\n"
    "small classifier by SGD, averages the weights of the N ranks through Redis at\n"
    "every end of epoch, and scores the final model on a test set.\n"
    "\n"
    "options:\n"
    "  --redis URL          as for sluice-ctl, but without TLS (rediss://) (default\n"
    "                       $SLUICE_REDIS_URL, else redis://127.0.0.1:6379)\n"
    "  --queue Q            the queue (created --coordinated --consumers N)\n"
    "  --rank R             this trainer's rank, 0..N-1 (default 0)\n"
    "  --world N            the number of ranks (default 1); 0: a free queue (not\n"
    "                       coordinated), one trainer, no averaging\n"
    "  --lr F               SGD learning rate (default 0.2)\n"
    "  --hidden H           hidden ReLU units; 0: softmax regression (default 32;\n"
    "                       every rank must use the same)\n"
    "  --test-images FILE   IDX test images (.gz or not); with --test-labels the\n"
    "  --test-labels FILE   final model is scored on them\n"
    "  --ids-out FILE       write \"epoch index label crc32\" per training image\n"
    "  --timeout S          give up when no batch arrives for S seconds, or the\n"
    "                       other ranks do not reach the end of an epoch within S\n"
    "                       seconds (default 0: wait forever)\n"
    "  --quiet              print only the final summary line\n"
    "  -h, --help           show this help\n"
    "\n"
    "Prints one line per epoch and a last line of key=value pairs. Exit status:\n"
    "0 done, 1 error, 2 usage error, 130/143 interrupted (SIGINT/SIGTERM).\n";

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "sluice-trainer: %s%s\ntry 'sluice-trainer --help'\n", msg, arg ? arg : "");
    return 2;
}

/* Checks a batch's tensors; on success sets the image and label pointers.
 * Returns NULL or why the batch does not fit. */
static const char *batch_tensors(const sluice_batch *b, const uint8_t **pix, const uint8_t **labels,
                                 size_t *n)
{
    const sluice_tensor *im = sluice_batch_find_tensor(b, "image");
    const sluice_tensor *lb = sluice_batch_find_tensor(b, "label");
    if (!im || !lb)
        return "no tensors \"image\" and \"label\"";
    if (im->dtype != SLUICE_DTYPE_UINT8 || im->ndim != 3 || im->shape[1] != ROWS ||
        im->shape[2] != COLS)
        return "\"image\" is not uint8 [B,28,28]";
    if (lb->dtype != SLUICE_DTYPE_UINT8 || lb->ndim != 1 || lb->shape[0] != im->shape[0])
        return "\"label\" is not uint8 [B]";
    *pix = im->data;
    *labels = lb->data;
    *n = (size_t)im->shape[0];
    for (size_t k = 0; k < *n; k++)
        if ((*labels)[k] >= CLASSES)
            return "a label is not 0..9";
    return NULL;
}

int main(int argc, char **argv)
{
    const char *url = getenv("SLUICE_REDIS_URL"), *queue = NULL, *test_images = NULL,
               *test_labels = NULL, *ids_path = NULL;
    int rank = 0, world = 1, quiet = 0, timeout_s = 0, hidden = DEFAULT_HIDDEN;
    float lr = 0.2f;
    enum { O_REDIS = 256, O_QUEUE, O_RANK, O_WORLD, O_LR, O_HIDDEN, O_TI, O_TL, O_IDS, O_TIMEOUT,
           O_QUIET };
    static const struct option longopts[] = {
        {"redis", required_argument, NULL, O_REDIS},
        {"queue", required_argument, NULL, O_QUEUE},
        {"rank", required_argument, NULL, O_RANK},
        {"world", required_argument, NULL, O_WORLD},
        {"lr", required_argument, NULL, O_LR},
        {"hidden", required_argument, NULL, O_HIDDEN},
        {"test-images", required_argument, NULL, O_TI},
        {"test-labels", required_argument, NULL, O_TL},
        {"ids-out", required_argument, NULL, O_IDS},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"quiet", no_argument, NULL, O_QUIET},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    char *end;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case O_REDIS: url = optarg; break;
        case O_QUEUE: queue = optarg; break;
        case O_RANK:
        case O_WORLD:
        case O_HIDDEN:
        case O_TIMEOUT: {
            long v = strtol(optarg, &end, 10);
            long max = opt == O_TIMEOUT ? 1000000 : opt == O_HIDDEN ? MAX_HIDDEN : 4096;
            if (*end || end == optarg || v < 0 || v > max)
                return usage_error("bad number: ", optarg);
            *(opt == O_RANK     ? &rank
              : opt == O_WORLD  ? &world
              : opt == O_HIDDEN ? &hidden
                                : &timeout_s) = (int)v;
            break;
        }
        case O_LR:
            lr = strtof(optarg, &end);
            if (*end || end == optarg || !(lr > 0 && lr < 100))
                return usage_error("--lr must be a number in (0, 100): ", optarg);
            break;
        case O_TI: test_images = optarg; break;
        case O_TL: test_labels = optarg; break;
        case O_IDS: ids_path = optarg; break;
        case O_QUIET: quiet = 1; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return usage_error("unknown option or missing value", NULL);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument ", argv[optind]);
    if (!queue)
        return usage_error("--queue is required", NULL);
    if (rank >= (world ? world : 1))
        return usage_error("need --rank 0..N-1 (--rank 0 with --world 0)", NULL);
    if (!test_images != !test_labels)
        return usage_error("--test-images and --test-labels go together", NULL);
    if (!url)
        url = "redis://127.0.0.1:6379";

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    /* Load the test set first: a bad path fails before any batch is taken. */
    uint8_t *test_pix = NULL, *test_lab = NULL;
    uint32_t ntest = 0, nlab = 0;
    if (test_images) {
        test_pix = read_idx(test_images, 3, &ntest);
        test_lab = read_idx(test_labels, 1, &nlab);
        if (nlab != ntest)
            die("%s holds %" PRIu32 " images but %s %" PRIu32 " labels", test_images, ntest,
                test_labels, nlab);
    }
    FILE *ids = NULL;
    if (ids_path && !(ids = fopen(ids_path, "w")))
        die("%s: %s", ids_path, strerror(errno));

    /* A wrong address fails at once, before any batch is taken; later on a
     * lost connection is tried again (relink). */
    char err[512] = "";
    rlink rl = {.url = url, .c = redis_open(url, err, sizeof err)}, *rc = &rl;
    if (!rl.c)
        die("cannot connect to %s: %s", url, err);
    sluice_consumer_opts o = {.redis_url = url, .queue = queue, .world = world, .rank = rank};
    sluice_consumer *c;
    sluice_err e = sluice_consumer_open(&c, &o, err, sizeof err);
    if (e != SLUICE_OK)
        die("cannot open queue '%s' at %s: %s: %s", queue, url, sluice_strerror(e), err);

    model m;
    model_init(&m, hidden);
    float *grad = malloc(m.n * sizeof *grad);
    if (!grad)
        die("out of memory");
    job_info job = {.batch_size = 0};
    uint64_t batches = 0, images = 0, padding = 0, ep_batches = 0, ep_images = 0, correct = 0;
    double loss = 0, t_start = now_s(), t_epoch = t_start, t_last = t_start;
    uint64_t waited_epoch_us = 0;
    uint32_t epochs_done = 0;
    int rc_exit = 0;

    for (;;) {
        if (stop_flag) {
            fprintf(stderr, "sluice-trainer: rank %d interrupted\n", rank);
            rc_exit = 128 + stop_flag;
            break;
        }
        sluice_batch *b;
        /* The epoch in progress: on SLUICE_EOF, the one that just ended. */
        uint32_t epoch = sluice_consumer_epoch(c);
        e = sluice_consumer_next(c, &b, POLL_MS);
        if (e == SLUICE_ERR_TIMEOUT) {
            if (timeout_s > 0 && now_s() - t_last > timeout_s) {
                fprintf(stderr, "sluice-trainer: rank %d: no batch for %d s, giving up\n", rank,
                        timeout_s);
                rc_exit = 1;
                break;
            }
            continue;
        }
        if (e == SLUICE_EOF) {
            if (!job.nshards)
                job_load(&job, rc, queue);
            double t_avg = now_s();
            if (world > 0 && average(&m, rc, queue, &job, epoch, rank, world, timeout_s) != 0) {
                if (stop_flag) {
                    fprintf(stderr, "sluice-trainer: rank %d interrupted\n", rank);
                    rc_exit = 128 + stop_flag;
                } else {
                    fprintf(stderr, "sluice-trainer: rank %d: gave up waiting for the other "
                                    "ranks at the end of epoch %" PRIu32 "\n", rank, epoch);
                    rc_exit = 1;
                }
                break;
            }
            double t = now_s();
            sluice_consumer_stats st;
            sluice_consumer_stats_get(c, &st);
            if (!quiet) {
                double secs = t_avg - t_epoch > 1e-6 ? t_avg - t_epoch : 1e-6;
                printf("rank %d epoch %" PRIu32 ": %" PRIu64 " batches, %" PRIu64
                       " images in %.1f s (%.0f images/s), waited %.1f s in next(), "
                       "train loss %.3f accuracy %.3f",
                       rank, epoch, ep_batches, ep_images, secs, ep_images / secs,
                       (st.blocked_us - waited_epoch_us) / 1e6,
                       ep_images ? loss / ep_images : 0.0,
                       ep_images ? (double)correct / ep_images : 0.0);
                if (world > 0)
                    printf("; weights averaged over %d ranks in %.0f ms", world,
                           (t - t_avg) * 1e3);
                putchar('\n');
                fflush(stdout);
            }
            waited_epoch_us = st.blocked_us;
            ep_batches = ep_images = correct = 0;
            loss = 0;
            t_epoch = t_last = t;
            epochs_done++;
            if (sluice_consumer_finished(c))
                break;
            continue;
        }
        if (e != SLUICE_OK)
            die("rank %d: next(): %s: %s", rank, sluice_strerror(e), sluice_consumer_errstr(c));
        t_last = now_s();

        const uint8_t *pix, *labels;
        size_t n;
        const char *bad = batch_tensors(b, &pix, &labels, &n);
        sluice_batch_id id = sluice_batch_get_id(b);
        if (bad)
            die("batch %" PRIu32 ":%" PRIu64 ":%" PRIu32 ": %s", id.epoch, id.task, id.seq, bad);
        sgd_step(&m, pix, labels, n, lr, grad, &loss, &correct);
        if (sluice_batch_is_padding(b)) {
            padding++;
        } else if (ids) {
            if (!job.nshards)
                job_load(&job, rc, queue);
            uint64_t first = shard_start(&job, rc, queue, id.task) + (uint64_t)id.seq * job.batch_size;
            for (size_t k = 0; k < n; k++)
                fprintf(ids, "%" PRIu32 " %" PRIu64 " %u %08lx\n", id.epoch, first + k, labels[k],
                        crc32(0, pix + k * PIXELS, PIXELS));
        }
        batches++;
        images += n;
        ep_batches++;
        ep_images += n;
        sluice_batch_release(b);
    }

    sluice_consumer_stats st;
    sluice_consumer_stats_get(c, &st);
    sluice_consumer_close(c);
    redisFree(rl.c);
    if (ids && fclose(ids) != 0)
        die("%s: %s", ids_path, strerror(errno));
    double secs = now_s() - t_start;
    char acc[64] = "";
    if (test_pix && rc_exit == 0) {
        double a = score(&m, test_pix, test_lab, ntest);
        snprintf(acc, sizeof acc, " test_images=%" PRIu32 " test_accuracy=%.4f", ntest, a);
        if (!quiet)
            printf("rank %d: test accuracy %.4f on %" PRIu32 " images\n", rank, a, ntest);
    }
    printf("rank=%d epochs=%" PRIu32 " batches=%" PRIu64 " images=%" PRIu64 " padding=%" PRIu64
           " redelivered=%" PRIu64 " seconds=%.2f images_per_s=%.0f waited_s=%.2f%s\n",
           rank, epochs_done, batches, images, padding, st.redelivered, secs,
           images / (secs > 1e-6 ? secs : 1e-6), st.blocked_us / 1e6, acc);
    free(grad);
    free(m.p);
    free(test_pix);
    free(test_lab);
    free(job.start);
    free(job.known);
    return rc_exit;
}
