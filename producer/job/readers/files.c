/* Whole files as records (reader.h), format "files".
 *
 * A path that is a regular file is one record: its whole content. A path
 * that is a folder stands for the regular files directly in it (symbolic
 * links followed; subfolders and names starting with '.' skipped), sorted
 * by name in byte order, so that every producer sees the same order. A
 * file larger than SLUICEI_READER_MAX_RECORD is an error. Every file is
 * opened through the reader's roots (roots.h) when it is read, so a link
 * in a folder that leads out of the data roots fails the read. */
#include "../reader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct files_source {
    sluicei_source base;
    const sluicei_roots *roots;   /* borrowed */
    char **names;          /* full paths, sorted */
    size_t n, next;
    unsigned char *buf;
    size_t cap;
} files_source;

static void files_close(sluicei_source *base)
{
    files_source *s = (files_source *)base;
    for (size_t i = 0; i < s->n; i++)
        free(s->names[i]);
    free(s->names);
    free(s->buf);
    free(s);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static sluice_err add_name(files_source *s, size_t *cap, const char *dir, const char *name)
{
    if (s->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        char **nn = realloc(s->names, ncap * sizeof *nn);
        if (!nn)
            return SLUICE_ERR_NOMEM;
        s->names = nn;
        *cap = ncap;
    }
    size_t len = strlen(dir) + 1 + strlen(name) + 1;
    char *p = malloc(len);
    if (!p)
        return SLUICE_ERR_NOMEM;
    snprintf(p, len, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] != '/' ? "/" : "", name);
    s->names[s->n++] = p;
    return SLUICE_OK;
}

/* Lists the regular files of folder path, open as fd (which this takes
 * over), into s->names, sorted. */
static sluice_err list_folder(files_source *s, const char *path, int fd, char *err,
                              size_t errlen)
{
    size_t cap = 0;
    DIR *d = fdopendir(fd);
    if (!d) {
        snprintf(err, errlen, "%s: opendir: %s", path, strerror(errno));
        close(fd);
        return SLUICE_ERR_SYS;
    }
    struct dirent *de;
    sluice_err e = SLUICE_OK;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) {
            errno = 0;
            continue;
        }
        if ((e = add_name(s, &cap, path, de->d_name)) != SLUICE_OK) {
            snprintf(err, errlen, "%s: out of memory listing the folder", path);
            break;
        }
        errno = 0;
    }
    if (e == SLUICE_OK && errno != 0) {
        snprintf(err, errlen, "%s: readdir: %s", path, strerror(errno));
        e = SLUICE_ERR_SYS;
    }
    closedir(d);
    if (e == SLUICE_OK && s->n > 1)
        qsort(s->names, s->n, sizeof *s->names, by_name);
    return e;
}

static sluice_err files_open(sluicei_source **out, const sluicei_roots *roots,
                             const char *const *paths, const char *arg, char *err,
                             size_t errlen)
{
    const char *path = paths[0];
    struct stat st;
    size_t cap = 0;
    int fd;
    sluice_err e;
    (void)arg;
    *out = NULL;
    files_source *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "%s: out of memory", path);
        return SLUICE_ERR_NOMEM;
    }
    s->base.fmt = &sluicei_reader_files;
    s->roots = roots;
    e = sluicei_input_open(roots, path, SLUICEI_INPUT_FOLDER, &fd, &st, err, errlen);
    if (e == SLUICE_OK && S_ISDIR(st.st_mode)) {
        e = list_folder(s, path, fd, err, errlen);
    } else if (e == SLUICE_OK) {
        /* Opened again when read, and checked again then. */
        close(fd);
        if ((e = add_name(s, &cap, "", path)) != SLUICE_OK)
            snprintf(err, errlen, "%s: out of memory", path);
    }
    if (e != SLUICE_OK) {
        files_close(&s->base);
        return e;
    }
    *out = &s->base;
    return SLUICE_OK;
}

static sluice_err files_next(sluicei_source *base, sluice_record *rec, char *err, size_t errlen)
{
    files_source *s = (files_source *)base;
    if (s->next >= s->n)
        return SLUICE_EOF;
    const char *path = s->names[s->next];
    struct stat st;
    int fd;
    sluice_err e = sluicei_input_open(s->roots, path, 0, &fd, &st, err, errlen);
    if (e != SLUICE_OK)
        return e;
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return SLUICE_ERR_FORMAT;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size > SLUICEI_READER_MAX_RECORD) {
        snprintf(err, errlen, "%s: file of %" PRIu64 " bytes exceeds the record limit of %"
                 PRIu64 " bytes", path, size, SLUICEI_READER_MAX_RECORD);
        close(fd);
        return SLUICE_ERR_FORMAT;
    }
    if (size > s->cap || !s->buf) {
        unsigned char *nb = realloc(s->buf, size ? (size_t)size : 1);
        if (!nb) {
            snprintf(err, errlen, "%s: out of memory for a file of %" PRIu64 " bytes", path,
                     size);
            close(fd);
            return SLUICE_ERR_NOMEM;
        }
        s->buf = nb;
        s->cap = size ? (size_t)size : 1;
    }
    size_t have = 0;
    while (have < size) {
        ssize_t n = read(fd, s->buf + have, (size_t)size - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "%s: read: %s", path, strerror(errno));
            e = SLUICE_ERR_SYS;
            break;
        }
        if (n == 0) {
            snprintf(err, errlen, "%s: offset %zu: the file shrank while read (%" PRIu64
                     " bytes when opened)", path, have, size);
            e = SLUICE_ERR_FORMAT;
            break;
        }
        have += (size_t)n;
    }
    close(fd);
    if (e != SLUICE_OK)
        return e;
    s->next++;
    rec->data = s->buf;
    rec->len = (size_t)size;
    return SLUICE_OK;
}

static sluice_err files_skip(sluicei_source *base, uint64_t n, uint64_t *done, char *err,
                             size_t errlen)
{
    files_source *s = (files_source *)base;
    (void)err;
    (void)errlen;
    uint64_t left = s->n - s->next;
    *done = n < left ? n : left;
    s->next += (size_t)*done;
    return SLUICE_OK;
}

static sluice_err files_count(sluicei_source *base, uint64_t *n, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    *n = ((files_source *)base)->n;
    return SLUICE_OK;
}

const sluicei_reader_format sluicei_reader_files = {
    .name = "files",
    .summary = "each file one record; a folder: its files, sorted by name",
    .unit = "files",
    .group = 1,
    .open = files_open,
    .next = files_next,
    .skip = files_skip,
    .count = files_count,
    .close = files_close,
};
