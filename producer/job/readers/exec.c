/* --exec: records from a command's stdout (reader.h, sluicei_exec_open).
 *
 * The command runs as `/bin/sh -c CMD` in its own process group (child.h:
 * started, and ended on close or on a stop, there), stdin /dev/null,
 * stdout and stderr on two pipes. Both pipes are read through one poll(),
 * so a command that fills its stderr while we wait on its stdout (or the
 * other way round) never blocks: stderr is kept as a 512-byte tail for the
 * error message. The same poll() watches the stop fd of child.h, so that a
 * signal to the producer ends a wait on a silent command at once. Its
 * environment is the producer's without sluice's own variables
 * (child_env()): the command is code run on a job's behalf and has no
 * business with the Redis password. */
#include "../reader.h"
#include "../child.h"
#include "mpack.h"
#include "wire.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TAIL_BYTES 512
#define READ_CHUNK ((size_t)64 << 10)
/* After stdout ended and the command exited, stderr is still read for at
 * most this long (a background child of the command may hold it open). */
#define STDERR_GRACE_MS 200

static const sluicei_reader_format exec_format;

typedef struct exec_source {
    sluicei_source base;
    char *cmd;                /* as given, for messages */
    sluicei_exec_mode mode;
    pid_t pid;                /* 0 once reaped */
    int out_fd, err_fd;       /* -1 once closed */
    unsigned char *buf;       /* stdout bytes: [pos, len) unread */
    size_t pos, len, cap;
    int out_eof;
    char tail[TAIL_BYTES];    /* last bytes of stderr, a ring */
    size_t tail_len, tail_at;
    /* msgpack mode */
    sluice_batch *batch;      /* current frame, decoded */
    unsigned char *frame;     /* its bytes (the batch points into them) */
    size_t row;               /* next row or record of batch */
    int kind;                 /* 0 unknown, 1 records, 2 tensors */
    sluicei_column cols[SLUICEI_READER_MAX_COLUMNS];
    size_t ncols;
    unsigned char *rowbuf;
    size_t rowcap;
    uint64_t frames;
    sluicei_mp_scan scan;     /* how far the next frame was walked (mpack.h) */
} exec_source;

/* ---- the command line ---------------------------------------------------- */

static int append(char **s, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t ncap = *cap ? *cap : 256;
        while (ncap < *len + n + 1)
            ncap *= 2;
        char *ns = realloc(*s, ncap);
        if (!ns)
            return -1;
        *s = ns;
        *cap = ncap;
    }
    memcpy(*s + *len, p, n);
    *len += n;
    (*s)[*len] = '\0';
    return 0;
}

/* cmd with {path}, {start}, {end} replaced; NULL when out of memory. */
static char *expand(const char *cmd, const char *const *paths, size_t npaths, uint64_t start,
                    uint64_t end)
{
    char *s = NULL, num[24];
    size_t len = 0, cap = 0;
    int rc = append(&s, &len, &cap, "", 0);
    for (const char *p = cmd; rc == 0 && *p;) {
        if (strncmp(p, "{path}", 6) == 0) {
            for (size_t i = 0; rc == 0 && i < npaths; i++) {
                /* Single quotes keep everything but ' itself, written '\''. */
                rc |= append(&s, &len, &cap, i ? " '" : "'", i ? 2 : 1);
                for (const char *c = paths[i]; rc == 0 && *c; c++)
                    rc |= *c == '\'' ? append(&s, &len, &cap, "'\\''", 4)
                                     : append(&s, &len, &cap, c, 1);
                rc |= append(&s, &len, &cap, "'", 1);
            }
            p += 6;
        } else if (strncmp(p, "{start}", 7) == 0) {
            snprintf(num, sizeof num, "%" PRIu64, start);
            rc = append(&s, &len, &cap, num, strlen(num));
            p += 7;
        } else if (strncmp(p, "{end}", 5) == 0) {
            num[0] = '\0';
            if (end != UINT64_MAX)
                snprintf(num, sizeof num, "%" PRIu64, end);
            rc = append(&s, &len, &cap, num, strlen(num));
            p += 5;
        } else {
            rc = append(&s, &len, &cap, p, 1);
            p++;
        }
    }
    if (rc != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* ---- pipes ------------------------------------------------------------------ */

static void keep_tail(exec_source *s, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        s->tail[s->tail_at] = p[i];
        s->tail_at = (s->tail_at + 1) % TAIL_BYTES;
        if (s->tail_len < TAIL_BYTES)
            s->tail_len++;
    }
}

/* Reads what stderr has (it is ready); closes it at its end. */
static void read_stderr(exec_source *s)
{
    char chunk[4096];
    ssize_t n = read(s->err_fd, chunk, sizeof chunk);
    if (n > 0)
        keep_tail(s, chunk, (size_t)n);
    else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(s->err_fd);
        s->err_fd = -1;
    }
}

/* The result of every read once the producer stops (child.h): the command
 * is ended by close. */
static sluice_err stopped(const exec_source *s, char *err, size_t errlen)
{
    snprintf(err, errlen, "exec: %s: stopped: the producer is shutting down", s->cmd);
    return SLUICE_ERR_SYS;
}

/* Waits until stdout has more bytes (appended to buf) or ends, reading
 * stderr meanwhile. Never grows buf beyond what arrives plus one chunk. */
static sluice_err read_more(exec_source *s, char *err, size_t errlen)
{
    if (s->pos > 0 && s->pos == s->len)
        s->pos = s->len = 0;
    if (s->cap - s->len < READ_CHUNK) {
        if (s->pos > 0) {   /* drop what was consumed before growing */
            memmove(s->buf, s->buf + s->pos, s->len - s->pos);
            s->len -= s->pos;
            s->pos = 0;
        }
        if (s->cap - s->len < READ_CHUNK) {
            size_t ncap = s->cap ? s->cap * 2 : 2 * READ_CHUNK;
            while (ncap - s->len < READ_CHUNK)
                ncap *= 2;
            unsigned char *nb = realloc(s->buf, ncap);
            if (!nb) {
                snprintf(err, errlen, "exec: %s: out of memory", s->cmd);
                return SLUICE_ERR_NOMEM;
            }
            s->buf = nb;
            s->cap = ncap;
        }
    }
    for (;;) {
        if (sluicei_child_stopping())
            return stopped(s, err, errlen);
        /* The stop fd first: pf[2] (stderr) is left out once it closed. */
        struct pollfd pf[3] = {{.fd = sluicei_child_wake_fd(), .events = POLLIN},
                               {.fd = s->out_fd, .events = POLLIN},
                               {.fd = s->err_fd, .events = POLLIN}};
        if (poll(pf, s->err_fd >= 0 ? 3 : 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            snprintf(err, errlen, "exec: poll: %s", strerror(errno));
            return SLUICE_ERR_SYS;
        }
        if (pf[0].revents)
            continue;   /* a stop: said at the top */
        if (s->err_fd >= 0 && pf[2].revents)
            read_stderr(s);
        if (!pf[1].revents)
            continue;
        ssize_t n = read(s->out_fd, s->buf + s->len, s->cap - s->len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0) {
            snprintf(err, errlen, "exec: %s: read: %s", s->cmd, strerror(errno));
            return SLUICE_ERR_SYS;
        }
        if (n == 0)
            s->out_eof = 1;
        s->len += (size_t)n;
        return SLUICE_OK;
    }
}

/* Makes at least need unread bytes available; fewer only at the end of
 * stdout. */
static sluice_err fill(exec_source *s, size_t need, char *err, size_t errlen)
{
    while (s->len - s->pos < need && !s->out_eof) {
        sluice_err e = read_more(s, err, errlen);
        if (e != SLUICE_OK)
            return e;
    }
    return SLUICE_OK;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The stderr tail as one line: control characters become spaces, runs of
 * spaces one, no leading or trailing space. */
static void tail_line(const exec_source *s, char *out, size_t outlen)
{
    size_t o = 0;
    size_t first = (s->tail_at + TAIL_BYTES - s->tail_len) % TAIL_BYTES;
    for (size_t i = 0; i < s->tail_len && o + 1 < outlen; i++) {
        unsigned char c = (unsigned char)s->tail[(first + i) % TAIL_BYTES];
        if (c < 0x20 || c == 0x7f)
            c = ' ';
        if (c == ' ' && (o == 0 || out[o - 1] == ' '))
            continue;
        out[o++] = (char)c;
    }
    while (o > 0 && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
}

/* Stdout ended: reap the command and turn its exit into a result. */
static sluice_err finish(exec_source *s, char *err, size_t errlen)
{
    int status = 0;
    long exited_at = -1;
    while (s->pid > 0) {
        pid_t w = waitpid(s->pid, &status, WNOHANG);
        if (w == s->pid) {
            /* What it left running in its group goes with it. */
            sluicei_child_end(s->pid, 1);
            s->pid = 0;
            exited_at = now_ms();
        } else if (sluicei_child_stopping()) {
            return stopped(s, err, errlen);   /* close ends it */
        } else if (w < 0 && errno != EINTR) {
            snprintf(err, errlen, "exec: %s: waitpid: %s", s->cmd, strerror(errno));
            return SLUICE_ERR_SYS;
        }
        if (s->pid > 0 && s->err_fd < 0) {
            struct timespec ts = {0, 10 * 1000000};
            nanosleep(&ts, NULL);
        }
        if (s->err_fd >= 0) {
            struct pollfd pf = {.fd = s->err_fd, .events = POLLIN};
            if (poll(&pf, 1, s->pid > 0 ? 10 : 0) > 0)
                read_stderr(s);
        }
    }
    if (exited_at < 0)
        exited_at = now_ms();
    while (s->err_fd >= 0 && now_ms() - exited_at < STDERR_GRACE_MS) {
        struct pollfd pf = {.fd = s->err_fd, .events = POLLIN};
        int left = (int)(STDERR_GRACE_MS - (now_ms() - exited_at));
        if (poll(&pf, 1, left > 0 ? left : 0) <= 0)
            break;
        read_stderr(s);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return SLUICE_EOF;
    char tail[TAIL_BYTES + 1];
    tail_line(s, tail, sizeof tail);
    if (WIFEXITED(status))
        snprintf(err, errlen, "exec: %s exited with status %d: %s", s->cmd, WEXITSTATUS(status),
                 tail[0] ? tail : "(no stderr)");
    else
        snprintf(err, errlen, "exec: %s killed by signal %d: %s", s->cmd, WTERMSIG(status),
                 tail[0] ? tail : "(no stderr)");
    return SLUICE_ERR_FORMAT;
}

static void exec_close(sluicei_source *base)
{
    exec_source *s = (exec_source *)base;
    if (s->out_fd >= 0)
        close(s->out_fd);
    if (s->err_fd >= 0)
        close(s->err_fd);
    /* Closed stdout first: a command still writing gets SIGPIPE, another
     * SIGTERM, then SIGKILL after the grace period (child.h). */
    if (s->pid > 0)
        sluicei_child_end(s->pid, 0);
    sluice_batch_free(s->batch);
    free(s->frame);
    free(s->rowbuf);
    free(s->buf);
    free(s->cmd);
    free(s);
}

/* ---- framed records --------------------------------------------------------- */

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static sluice_err next_framed(exec_source *s, sluice_record *rec, char *err, size_t errlen)
{
    sluice_err e = fill(s, 4, err, errlen);
    if (e != SLUICE_OK)
        return e;
    size_t have = s->len - s->pos;
    if (have == 0)
        return finish(s, err, errlen);
    if (have < 4) {
        e = finish(s, err, errlen);
        if (e != SLUICE_EOF)
            return e;
        snprintf(err, errlen, "exec: %s: stdout ended inside a record length (%zu of 4 bytes)",
                 s->cmd, have);
        return SLUICE_ERR_FORMAT;
    }
    uint32_t len = le32(s->buf + s->pos);
    if (len > SLUICEI_READER_MAX_RECORD) {
        snprintf(err, errlen, "exec: %s: record length %" PRIu32 " exceeds the limit of %"
                 PRIu64 " bytes", s->cmd, len, SLUICEI_READER_MAX_RECORD);
        return SLUICE_ERR_FORMAT;
    }
    if ((e = fill(s, 4 + (size_t)len, err, errlen)) != SLUICE_OK)
        return e;
    if (s->len - s->pos < 4 + (size_t)len) {
        have = s->len - s->pos - 4;
        e = finish(s, err, errlen);
        if (e != SLUICE_EOF)
            return e;
        snprintf(err, errlen, "exec: %s: stdout ended inside a record (%zu of %" PRIu32
                 " bytes)", s->cmd, have, len);
        return SLUICE_ERR_FORMAT;
    }
    rec->data = s->buf + s->pos + 4;
    rec->len = len;
    s->pos += 4 + (size_t)len;
    return SLUICE_OK;
}

/* ---- msgpack frames ----------------------------------------------------------- */

/* Reads and decodes the next frame into s->batch; SLUICE_EOF at the end. */
static sluice_err next_frame(exec_source *s, char *err, size_t errlen)
{
    const size_t max = SLUICE_MAX_BATCH_BYTES_DEFAULT;
    size_t flen;
    sluice_err e;
    for (;;) {
        int r = sluicei_mp_skip(s->buf + s->pos, s->len - s->pos, &s->scan, &flen);
        if (r == SLUICEI_MP_BAD) {
            snprintf(err, errlen, "exec: %s: frame %" PRIu64 " is not msgpack", s->cmd,
                     s->frames);
            return SLUICE_ERR_FORMAT;
        }
        if (r == SLUICEI_MP_OK)
            break;
        if (s->len - s->pos > max) {
            snprintf(err, errlen, "exec: %s: frame %" PRIu64 " exceeds %zu bytes", s->cmd,
                     s->frames, max);
            return SLUICE_ERR_FORMAT;
        }
        if (s->out_eof) {
            size_t have = s->len - s->pos;
            e = finish(s, err, errlen);
            if (e != SLUICE_EOF || have == 0)
                return e;
            snprintf(err, errlen, "exec: %s: stdout ended inside frame %" PRIu64 " (%zu bytes)",
                     s->cmd, s->frames, have);
            return SLUICE_ERR_FORMAT;
        }
        if ((e = read_more(s, err, errlen)) != SLUICE_OK)
            return e;
    }
    sluice_batch_free(s->batch);
    s->batch = NULL;
    free(s->frame);
    s->frame = NULL;
    if (flen > max) {
        snprintf(err, errlen, "exec: %s: frame %" PRIu64 " of %zu bytes exceeds %zu", s->cmd,
                 s->frames, flen, max);
        return SLUICE_ERR_FORMAT;
    }
    /* A copy, so that the stdout buffer can move on while the batch's
     * records point into the frame. */
    if (!(s->frame = malloc(flen))) {
        snprintf(err, errlen, "exec: %s: out of memory", s->cmd);
        return SLUICE_ERR_NOMEM;
    }
    memcpy(s->frame, s->buf + s->pos, flen);
    s->pos += flen;
    char why[256];
    e = sluicei_wire_decode(s->frame, flen, max, NULL, NULL, &s->batch, why, sizeof why);
    if (e != SLUICE_OK) {
        snprintf(err, errlen, "exec: %s: frame %" PRIu64 ": %s", s->cmd, s->frames, why);
        return SLUICE_ERR_FORMAT;
    }
    s->frames++;
    s->row = 0;
    const sluice_batch *b = s->batch;
    int kind = b->ntensors > 0 ? 2 : 1;
    if (s->kind == 0 && kind == 2) {
        if (b->ntensors > SLUICEI_READER_MAX_COLUMNS) {
            snprintf(err, errlen, "exec: %s: frame 0 has %zu tensors (at most %d)", s->cmd,
                     b->ntensors, SLUICEI_READER_MAX_COLUMNS);
            return SLUICE_ERR_FORMAT;
        }
        size_t row = 0;
        for (size_t i = 0; i < b->ntensors; i++) {
            const sluice_tensor *t = &b->tensors[i];
            sluicei_column *c = &s->cols[i];
            snprintf(c->name, sizeof c->name, "%s", t->name);
            c->dtype = t->dtype;
            c->ndim = t->ndim - 1;
            c->row_bytes = sluice_dtype_size(t->dtype);
            for (int d = 1; d < t->ndim; d++) {
                c->shape[d - 1] = t->shape[d];
                c->row_bytes *= (size_t)t->shape[d];   /* bounded: the frame holds it */
            }
            row += c->row_bytes;
        }
        s->ncols = b->ntensors;
        if (row > s->rowcap) {
            unsigned char *nr = realloc(s->rowbuf, row);
            if (!nr) {
                snprintf(err, errlen, "exec: %s: out of memory", s->cmd);
                return SLUICE_ERR_NOMEM;
            }
            s->rowbuf = nr;
            s->rowcap = row;
        }
    }
    if (s->kind == 0)
        s->kind = kind;
    if (kind != s->kind) {
        snprintf(err, errlen, "exec: %s: frame %" PRIu64 " carries %s, the first one %s",
                 s->cmd, s->frames - 1, kind == 2 ? "tensors" : "records",
                 s->kind == 2 ? "tensors" : "records");
        return SLUICE_ERR_FORMAT;
    }
    if (kind == 2) {
        int same = b->ntensors == s->ncols;
        for (size_t i = 0; same && i < b->ntensors; i++) {
            const sluice_tensor *t = &b->tensors[i];
            const sluicei_column *c = &s->cols[i];
            same = strcmp(t->name, c->name) == 0 && t->dtype == c->dtype &&
                   t->ndim == c->ndim + 1;
            for (int d = 1; same && d < t->ndim; d++)
                same = t->shape[d] == c->shape[d - 1];
        }
        if (!same) {
            snprintf(err, errlen, "exec: %s: frame %" PRIu64 ": tensors differ from those of "
                     "frame 0 (names, dtypes and row shapes must match)", s->cmd, s->frames - 1);
            return SLUICE_ERR_FORMAT;
        }
    }
    return SLUICE_OK;
}

static sluice_err next_msgpack(exec_source *s, sluice_record *rec, char *err, size_t errlen)
{
    for (;;) {
        const sluice_batch *b = s->batch;
        if (b && s->row < b->nrecords) {
            if (s->kind == 1) {
                *rec = b->records[s->row++];
                return SLUICE_OK;
            }
            unsigned char *p = s->rowbuf;
            for (size_t i = 0; i < s->ncols; i++) {
                size_t rb = s->cols[i].row_bytes;
                if (rb)
                    memcpy(p, (const unsigned char *)b->tensors[i].data + s->row * rb, rb);
                p += rb;
            }
            s->row++;
            rec->data = s->rowbuf;
            rec->len = (size_t)(p - s->rowbuf);
            return SLUICE_OK;
        }
        sluice_err e = next_frame(s, err, errlen);
        if (e != SLUICE_OK)
            return e;
    }
}

static sluice_err exec_next(sluicei_source *base, sluice_record *rec, char *err, size_t errlen)
{
    exec_source *s = (exec_source *)base;
    if (s->pid == 0 && s->out_eof && s->pos == s->len && !s->batch)
        return SLUICE_EOF;
    return s->mode == SLUICEI_EXEC_MSGPACK ? next_msgpack(s, rec, err, errlen)
                                           : next_framed(s, rec, err, errlen);
}

static const sluicei_column *exec_columns(sluicei_source *base, size_t *n)
{
    exec_source *s = (exec_source *)base;
    *n = s->ncols;
    return s->cols;
}

static const sluicei_reader_format exec_format = {
    .name = "exec",
    .summary = "records from a command's stdout",
    .group = 1,
    .next = exec_next,
    .columns = exec_columns,
    .close = exec_close,
};

/* A variable the command must not see: every SLUICE_* one (the Redis
 * password and URL, TLS keys, and whatever sluice reads in the future)
 * and redis-cli's password. */
static int secret(const char *kv)
{
    return strncmp(kv, "SLUICE_", 7) == 0 || strncmp(kv, "REDISCLI_AUTH=", 14) == 0;
}

/* The command's environment: the pointers of environ that are no secret,
 * in a new array (the strings stay environ's); NULL when out of memory. */
static char **child_env(void)
{
    size_t n = 0, k = 0;
    while (environ[n])
        n++;
    char **env = malloc((n + 1) * sizeof *env);
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!secret(environ[i]))
            env[k++] = environ[i];
    env[k] = NULL;
    return env;
}

/* Starts the command; on failure err says why. */
static sluice_err spawn(exec_source *s, const char *line, char *err, size_t errlen)
{
    char **env = child_env();
    if (!env) {
        snprintf(err, errlen, "exec: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    char why[256];
    sluice_err e = sluicei_child_start(&s->pid, &s->out_fd, &s->err_fd, line, env, why,
                                       sizeof why);
    free(env);
    if (e != SLUICE_OK)
        snprintf(err, errlen, "exec: %s: %s", s->cmd, why);
    return e;
}

/* Checks paths through roots into *out, the paths as resolved (an array
 * of npaths strings, freed with free_paths()). */
static sluice_err resolve_paths(char ***out, const sluicei_roots *roots,
                                const char *const *paths, size_t npaths, char *err,
                                size_t errlen)
{
    char **v = calloc(npaths ? npaths : 1, sizeof *v);
    *out = v;
    if (!v) {
        snprintf(err, errlen, "exec: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    for (size_t i = 0; i < npaths; i++) {
        sluice_err e = sluicei_input_check(roots, paths[i], &v[i], err, errlen);
        if (e != SLUICE_OK)
            return e;
    }
    return SLUICE_OK;
}

static void free_paths(char **v, size_t n)
{
    if (v)
        for (size_t i = 0; i < n; i++)
            free(v[i]);
    free(v);
}

sluice_err sluicei_exec_open(sluicei_reader **out, const char *cmd, const char *const *paths,
                             size_t npaths, uint64_t start, uint64_t end,
                             sluicei_exec_mode mode, const sluicei_roots *roots, char *err,
                             size_t errlen)
{
    *out = NULL;
    if (start > end) {
        snprintf(err, errlen, "exec: bad range %" PRIu64 ":%" PRIu64, start, end);
        return SLUICE_ERR_INVALID;
    }
    char **checked = NULL;
    if (roots) {
        sluice_err e = resolve_paths(&checked, roots, paths, npaths, err, errlen);
        if (e != SLUICE_OK) {
            free_paths(checked, npaths);
            return e;
        }
        paths = (const char *const *)checked;
    }
    exec_source *s = calloc(1, sizeof *s);
    char *line = NULL;
    if (!s || !(s->cmd = strdup(cmd)) || !(line = expand(cmd, paths, npaths, start, end))) {
        if (s)
            free(s->cmd);
        free(s);
        free_paths(checked, npaths);
        snprintf(err, errlen, "exec: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    free_paths(checked, npaths);
    s->base.fmt = &exec_format;
    s->mode = mode;
    s->out_fd = s->err_fd = -1;
    sluice_err e = spawn(s, line, err, errlen);
    free(line);
    /* msgpack: the first frame tells the columns, which must be known
     * once open returns. */
    if (e == SLUICE_OK && mode == SLUICEI_EXEC_MSGPACK) {
        e = next_frame(s, err, errlen);
        if (e == SLUICE_EOF)
            e = SLUICE_OK;   /* no frame at all: next() says EOF */
    }
    if (e != SLUICE_OK) {
        exec_close(&s->base);
        return e;
    }
    return sluicei_reader_adopt(out, &s->base, err, errlen);
}
