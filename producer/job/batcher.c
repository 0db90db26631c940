/* The batcher (batcher.h): records copied out of a reader until a batch is
 * full, then handed over as records, as tensors gathered from rows, or
 * through a transform plugin; with a job's order, the records shuffled
 * within windows first, and a short last batch dropped. */
#include "batcher.h"
#include "rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* First size of the record bytes buffer; it doubles as needed. */
#define DATA_BYTES_INITIAL ((size_t)64 << 10)

struct sluicei_batcher {
    unsigned char *data;    /* the records' bytes, back to back */
    size_t len, cap;
    size_t *end;            /* end[i]: end offset of record i in data */
    sluice_record *recs;    /* filled in by take, pointing into data */
    size_t n, max;          /* records held; the batch size */
    size_t slots;           /* records end and recs have room for */
    /* Tensor readers: the rows' columns gathered, one buffer per column. */
    unsigned char *col[SLUICEI_READER_MAX_COLUMNS];
    size_t colcap[SLUICEI_READER_MAX_COLUMNS];
    sluice_tensor tens[SLUICEI_READER_MAX_COLUMNS];
    /* The order of the runs, and the shuffle window being filled: its
     * records' bytes back to back (wend[i]: end of record i), and the
     * permutation. Grown as records come, up to the window. */
    sluicei_batch_order order;
    unsigned char *wdata;
    size_t wlen, wcap;
    size_t *wend;
    uint32_t *perm;
    size_t wn, wslots;
    uint64_t dropped;       /* by the last run (drop_remainder) */
};

sluice_err sluicei_batcher_new(sluicei_batcher **out, size_t batch_size)
{
    *out = NULL;
    sluicei_batcher *b = calloc(1, sizeof *b);
    if (!b)
        return SLUICE_ERR_NOMEM;
    sluice_err e = sluicei_batcher_resize(b, batch_size);
    if (e != SLUICE_OK) {
        sluicei_batcher_free(b);
        return e;
    }
    *out = b;
    return SLUICE_OK;
}

void sluicei_batcher_free(sluicei_batcher *b)
{
    if (!b)
        return;
    free(b->data);
    free(b->end);
    free(b->recs);
    for (int i = 0; i < SLUICEI_READER_MAX_COLUMNS; i++)
        free(b->col[i]);
    free(b->wdata);
    free(b->wend);
    free(b->perm);
    free(b);
}

sluice_err sluicei_batcher_set_order(sluicei_batcher *b, const sluicei_batch_order *o)
{
    if (o->window > SLUICE_SHUFFLE_BUFFER_MAX)
        return SLUICE_ERR_INVALID;
    b->order = *o;
    return SLUICE_OK;
}

uint64_t sluicei_batcher_dropped(const sluicei_batcher *b)
{
    return b->dropped;
}

void sluicei_shuffle_perm(uint32_t *perm, size_t n, uint64_t seed, uint32_t epoch,
                          uint64_t shard, uint64_t window)
{
    uint64_t st = sluicei_mix64(seed) ^ epoch;
    st = sluicei_mix64(sluicei_mix64(sluicei_mix64(st) ^ shard) ^ window);
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)sluicei_uniform(&st, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

sluice_err sluicei_batcher_resize(sluicei_batcher *b, size_t max)
{
    b->n = b->len = 0;
    if (max == 0)
        return SLUICE_ERR_INVALID;
    if (max > b->slots) {
        /* Checked before multiplying: a size from a job must not wrap. */
        if (max > SIZE_MAX / sizeof(sluice_record))
            return SLUICE_ERR_NOMEM;
        size_t *ne = realloc(b->end, max * sizeof *ne);
        if (ne)
            b->end = ne;
        sluice_record *nr = realloc(b->recs, max * sizeof *nr);
        if (nr)
            b->recs = nr;
        if (!ne || !nr)
            return SLUICE_ERR_NOMEM;
        b->slots = max;
    }
    b->max = max;
    return SLUICE_OK;
}

size_t sluicei_batcher_size(const sluicei_batcher *b)
{
    return b->max;
}

size_t sluicei_batcher_count(const sluicei_batcher *b)
{
    return b->n;
}

void sluicei_batcher_clear(sluicei_batcher *b)
{
    b->n = b->len = 0;
}

sluice_err sluicei_batcher_add(sluicei_batcher *b, const sluice_record *r)
{
    if (b->n >= b->max)
        return SLUICE_ERR_INVALID;
    if (r->len > b->cap - b->len) {
        size_t ncap = b->cap ? b->cap : DATA_BYTES_INITIAL;
        while (ncap - b->len < r->len) {
            if (ncap > SIZE_MAX / 2)
                return SLUICE_ERR_NOMEM;
            ncap *= 2;
        }
        unsigned char *nd = realloc(b->data, ncap);
        if (!nd)
            return SLUICE_ERR_NOMEM;
        b->data = nd;
        b->cap = ncap;
    }
    if (r->len)
        memcpy(b->data + b->len, r->data, r->len);
    b->len += r->len;
    b->end[b->n++] = b->len;
    return SLUICE_OK;
}

/* Gathers the packed rows of b into one tensor per column (b->tens). */
static sluice_err rows_to_tensors(sluicei_batcher *b, const sluicei_column *cols, size_t ncols,
                                  char *err, size_t errlen)
{
    size_t row = 0;
    for (size_t c = 0; c < ncols; c++)
        row += cols[c].row_bytes;
    for (size_t i = 0; i < b->n; i++)
        if (b->recs[i].len != row) {
            snprintf(err, errlen, "row of %zu bytes, expected %zu", b->recs[i].len, row);
            return SLUICE_ERR_FORMAT;
        }
    size_t off = 0;
    for (size_t c = 0; c < ncols; c++) {
        size_t need = b->n * cols[c].row_bytes;
        if (need > b->colcap[c]) {
            unsigned char *nc = realloc(b->col[c], need);
            if (!nc) {
                snprintf(err, errlen, "out of memory for a batch");
                return SLUICE_ERR_NOMEM;
            }
            b->col[c] = nc;
            b->colcap[c] = need;
        }
        for (size_t i = 0; i < b->n; i++)
            memcpy(b->col[c] + i * cols[c].row_bytes,
                   (const unsigned char *)b->recs[i].data + off, cols[c].row_bytes);
        off += cols[c].row_bytes;
        sluice_tensor *t = &b->tens[c];
        memset(t, 0, sizeof *t);
        t->name = cols[c].name;
        t->dtype = cols[c].dtype;
        t->ndim = cols[c].ndim + 1;
        t->shape[0] = b->n;
        for (int d = 0; d < cols[c].ndim; d++)
            t->shape[d + 1] = cols[c].shape[d];
        t->data = b->col[c];
        t->nbytes = need;
    }
    return SLUICE_OK;
}

sluice_err sluicei_batcher_take(sluicei_batcher *b, sluicei_transform *tf,
                                const sluicei_column *cols, size_t ncols, sluicei_batch_out *out,
                                char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    /* The records point into data only now: data moves as it grows. */
    size_t start = 0;
    for (size_t i = 0; i < b->n; i++) {
        b->recs[i].data = b->data + start;
        b->recs[i].len = b->end[i] - start;
        start = b->end[i];
    }
    sluice_err e = SLUICE_OK;
    if (tf) {
        sluicei_transform_result res;
        e = sluicei_transform_apply(tf, b->recs, b->n, &res, err, errlen);
        if (e == SLUICE_OK) {
            out->records = res.records;
            out->nrecords = res.nrecords;
            out->tensors = res.tensors;
            out->ntensors = res.ntensors;
            out->rows = res.ntensors ? res.rows : res.nrecords;
        }
    } else if (ncols > 0) {
        if (ncols > SLUICEI_READER_MAX_COLUMNS) {
            snprintf(err, errlen, "%zu columns, at most %d", ncols, SLUICEI_READER_MAX_COLUMNS);
            e = SLUICE_ERR_INVALID;
        } else {
            e = rows_to_tensors(b, cols, ncols, err, errlen);
        }
        if (e == SLUICE_OK) {
            out->tensors = b->tens;
            out->ntensors = ncols;
            out->rows = b->n;
        }
    } else {
        out->records = b->recs;
        out->nrecords = b->n;
        out->rows = b->n;
    }
    /* The bytes stay where they are until the next add. */
    b->n = b->len = 0;
    return e;
}

/* What a run needs besides the batcher. */
typedef struct run_ctx {
    sluicei_transform *tf;
    const sluicei_column *cols;
    size_t ncols;
    const sluicei_batcher_hooks *h;
    char *err;
    size_t errlen;
} run_ctx;

/* Hands the batch being filled over (a full one, or the last). Returns 0
 * or what the run returns. */
static int emit(sluicei_batcher *b, const run_ctx *x)
{
    sluicei_batch_out out;
    if (sluicei_batcher_take(b, x->tf, x->cols, x->ncols, &out, x->err, x->errlen) != SLUICE_OK)
        return SLUICEI_BATCHER_INPUT_ERROR;
    if (out.nrecords == 0 && out.ntensors == 0)
        return 0;   /* the transform dropped it */
    return x->h->batch(x->h->arg, &out);
}

/* Copies rec into the shuffle window being filled (not full yet). */
static sluice_err window_add(sluicei_batcher *b, const sluice_record *r)
{
    if (b->wn == b->wslots) {
        /* Grown by doubling up to the window: a short task holds little. */
        size_t n = b->wslots ? 2 * b->wslots : 1024;
        if (n > b->order.window)
            n = b->order.window;
        size_t *ne = realloc(b->wend, n * sizeof *ne);
        if (!ne)
            return SLUICE_ERR_NOMEM;
        b->wend = ne;
        b->wslots = n;
    }
    if (r->len > b->wcap - b->wlen) {
        size_t ncap = b->wcap ? b->wcap : DATA_BYTES_INITIAL;
        while (ncap - b->wlen < r->len) {
            if (ncap > SIZE_MAX / 2)
                return SLUICE_ERR_NOMEM;
            ncap *= 2;
        }
        unsigned char *nd = realloc(b->wdata, ncap);
        if (!nd)
            return SLUICE_ERR_NOMEM;
        b->wdata = nd;
        b->wcap = ncap;
    }
    if (r->len)
        memcpy(b->wdata + b->wlen, r->data, r->len);
    b->wlen += r->len;
    b->wend[b->wn++] = b->wlen;
    return SLUICE_OK;
}

/* Feeds shuffle window w (b->wn records) into batches in its permuted
 * order, handing over each batch that fills, and empties the window.
 * Returns 0 or what the run returns. */
static int window_flush(sluicei_batcher *b, uint64_t w, const run_ctx *x)
{
    size_t n = b->wn;
    b->wn = b->wlen = 0;
    uint32_t *perm = realloc(b->perm, (n ? n : 1) * sizeof *perm);
    if (!perm) {
        snprintf(x->err, x->errlen, "out of memory for a shuffle window of %zu records", n);
        return SLUICEI_BATCHER_INPUT_ERROR;
    }
    b->perm = perm;
    const sluicei_batch_order *o = &b->order;
    sluicei_shuffle_perm(perm, n, o->seed, o->epoch, o->shard, w);
    for (size_t i = 0; i < n; i++) {
        size_t at = perm[i], from = at ? b->wend[at - 1] : 0;
        sluice_record r = {b->wdata + from, b->wend[at] - from};
        if (sluicei_batcher_add(b, &r) != SLUICE_OK) {
            snprintf(x->err, x->errlen, "out of memory for a batch");
            return SLUICEI_BATCHER_INPUT_ERROR;
        }
        if (b->n == b->max) {
            int k = emit(b, x);
            if (k != 0)
                return k;
        }
    }
    return 0;
}

/* The end of a run: every count back to empty; returns k. */
static int run_end(sluicei_batcher *b, int k)
{
    b->n = b->len = 0;
    b->wn = b->wlen = 0;
    return k;
}

int sluicei_batcher_run(sluicei_batcher *b, sluicei_reader *rd, sluicei_transform *tf,
                        const sluicei_batcher_hooks *h, uint64_t *nread, char *err,
                        size_t errlen)
{
    run_ctx x = {.tf = tf, .h = h, .err = err, .errlen = errlen};
    x.cols = sluicei_reader_columns(rd, &x.ncols);
    size_t window = b->order.window > 1 ? b->order.window : 0;
    uint64_t w = 0;   /* the shuffle window being filled */
    sluice_record rec;
    b->n = b->len = 0;
    b->wn = b->wlen = 0;
    b->dropped = 0;
    for (;;) {
        if (h->poll) {
            /* (What the window holds is pending too.) */
            int k = h->poll(h->arg, b->n + b->wn);
            if (k != 0)
                return run_end(b, k);   /* a partly filled batch is not handed over */
        }
        sluice_err e = sluicei_reader_next(rd, &rec, err, errlen);
        if (e != SLUICE_OK && e != SLUICE_EOF)
            return run_end(b, SLUICEI_BATCHER_INPUT_ERROR);
        if (e == SLUICE_OK) {
            (*nread)++;
            int k = 0;
            if (window) {
                if (window_add(b, &rec) != SLUICE_OK) {
                    snprintf(err, errlen, "out of memory for a shuffle window of %zu records",
                             window);
                    return run_end(b, SLUICEI_BATCHER_INPUT_ERROR);
                }
                if (b->wn == window)
                    k = window_flush(b, w++, &x);
            } else {
                if (sluicei_batcher_add(b, &rec) != SLUICE_OK) {
                    snprintf(err, errlen, "out of memory for a batch");
                    return run_end(b, SLUICEI_BATCHER_INPUT_ERROR);
                }
                if (b->n == b->max)
                    k = emit(b, &x);
            }
            if (k != 0)
                return run_end(b, k);
            continue;
        }
        /* The end: the last window, then the last batch if any. */
        if (b->wn > 0) {
            int k = window_flush(b, w++, &x);
            if (k != 0)
                return run_end(b, k);
        }
        if (b->n > 0 && b->order.drop_remainder) {
            b->dropped = b->n;
            return run_end(b, 0);
        }
        return run_end(b, b->n > 0 ? emit(b, &x) : 0);
    }
}
