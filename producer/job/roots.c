/* Data roots and the opening of input files (roots.h). */
#include "roots.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

typedef struct root {
    char *given;   /* as given, made absolute lexically: what manifests name */
    char *real;    /* resolved: what realpath() of a path under it starts with */
    int fd;        /* the folder, O_PATH */
} root;

struct sluicei_roots {
    root *v;
    size_t n;
};

/* Kernel file systems: their files are views of the system, never data. */
static const struct {
    unsigned long magic;
    const char *name;
} kernel_fs[] = {
    {PROC_SUPER_MAGIC, "proc"},       {SYSFS_MAGIC, "sysfs"},
    {DEBUGFS_MAGIC, "debugfs"},       {TRACEFS_MAGIC, "tracefs"},
    {SECURITYFS_MAGIC, "securityfs"}, {CGROUP_SUPER_MAGIC, "cgroup"},
    {CGROUP2_SUPER_MAGIC, "cgroup2"}, {DEVPTS_SUPER_MAGIC, "devpts"},
    {BPF_FS_MAGIC, "bpf"},            {EFIVARFS_MAGIC, "efivarfs"},
    {PSTOREFS_MAGIC, "pstore"},       {SELINUX_MAGIC, "selinuxfs"},
    {SMACK_MAGIC, "smackfs"},         {BINFMTFS_MAGIC, "binfmt_misc"},
    {NSFS_MAGIC, "nsfs"},
};

/* The kernel file system fd lies on, or NULL for any other. */
static const char *kernel_fs_of(int fd)
{
    struct statfs sf;
    if (fstatfs(fd, &sf) != 0)
        return NULL;
    for (size_t i = 0; i < sizeof kernel_fs / sizeof kernel_fs[0]; i++)
        if ((unsigned long)sf.f_type == kernel_fs[i].magic)
            return kernel_fs[i].name;
    return NULL;
}

static const char *type_name(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISLNK(m))
        return "a symbolic link";
    return "of an unknown type";
}

/* path made absolute against the working folder, with "//", "." and ".."
 * folded, as text only. NULL when out of memory or without a working
 * folder (errno says which). */
static char *lexical(const char *path)
{
    char cwd[PATH_MAX] = "";
    if (path[0] != '/' && !getcwd(cwd, sizeof cwd))
        return NULL;
    size_t len = strlen(cwd) + 1 + strlen(path) + 1;
    char *in = malloc(len), *out = malloc(len + 1);
    if (!in || !out) {
        free(in);
        free(out);
        errno = ENOMEM;
        return NULL;
    }
    snprintf(in, len, "%s/%s", cwd, path);
    size_t o = 0;
    for (char *c = in; *c;) {
        while (*c == '/')
            c++;
        char *end = c + strcspn(c, "/");
        size_t n = (size_t)(end - c);
        if (n == 0 || (n == 1 && c[0] == '.')) {
            /* nothing */
        } else if (n == 2 && c[0] == '.' && c[1] == '.') {
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--;
        } else {
            out[o++] = '/';
            memcpy(out + o, c, n);
            o += n;
        }
        c = end;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    free(in);
    return out;
}

/* p (absolute, folded) is dir or lies below it. */
static int under(const char *dir, const char *p)
{
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/')
        return p[0] == '/';
    return strncmp(p, dir, n) == 0 && (p[n] == '/' || p[n] == '\0');
}

sluice_err sluicei_roots_new(sluicei_roots **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? SLUICE_OK : SLUICE_ERR_NOMEM;
}

size_t sluicei_roots_count(const sluicei_roots *r)
{
    return r ? r->n : 0;
}

void sluicei_roots_free(sluicei_roots *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].given);
        free(r->v[i].real);
        close(r->v[i].fd);
    }
    free(r->v);
    free(r);
}

sluice_err sluicei_roots_add(sluicei_roots *r, const char *dir, char *err, size_t errlen)
{
    root nr = {.fd = -1};
    struct stat st;
    const char *kfs;
    if (!(nr.given = lexical(dir)) || !(nr.real = realpath(dir, NULL)) ||
        (nr.fd = open(nr.real, O_PATH | O_CLOEXEC)) < 0 || fstat(nr.fd, &st) != 0) {
        int en = errno;
        free(nr.given);
        free(nr.real);
        if (nr.fd >= 0)
            close(nr.fd);
        snprintf(err, errlen, "%s: %s", dir, strerror(en));
        return en == ENOMEM ? SLUICE_ERR_NOMEM : SLUICE_ERR_SYS;
    }
    sluice_err e = SLUICE_OK;
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: not a directory", dir);
        e = SLUICE_ERR_INVALID;
    } else if ((kfs = kernel_fs_of(nr.fd)) != NULL) {
        snprintf(err, errlen, "%s: on %s, a kernel file system", dir, kfs);
        e = SLUICE_ERR_INVALID;
    } else {
        root *nv = realloc(r->v, (r->n + 1) * sizeof *nv);
        if (!nv) {
            snprintf(err, errlen, "%s: out of memory", dir);
            e = SLUICE_ERR_NOMEM;
        } else {
            r->v = nv;
            r->v[r->n++] = nr;
            return SLUICE_OK;
        }
    }
    free(nr.given);
    free(nr.real);
    close(nr.fd);
    return e;
}

static sluice_err refuse(const char *path, char *err, size_t errlen, const char *why)
{
    snprintf(err, errlen, "%s: refused: %s", path, why);
    return SLUICE_ERR_INVALID;
}

static sluice_err sys_fail(const char *path, int en, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: open: %s", path, strerror(en));
    return en == ENOMEM ? SLUICE_ERR_NOMEM : SLUICE_ERR_SYS;
}

/* Opens real (resolved, below root ro) from ro's folder, one component at
 * a time, none of them a symbolic link; the last with last_flags. Returns
 * the descriptor, or -1 with err set. */
static int walk(const root *ro, const char *path, const char *real, int last_flags,
                sluice_err *e, char *err, size_t errlen)
{
    const char *rel = real + strlen(ro->real);
    while (*rel == '/')
        rel++;
    char *buf = strdup(*rel ? rel : ".");
    if (!buf) {
        *e = sys_fail(path, ENOMEM, err, errlen);
        return -1;
    }
    int dfd = ro->fd, fd = -1;
    char *comp = buf;
    for (;;) {
        char *slash = strchr(comp, '/');
        if (slash)
            *slash = '\0';
        int flags = slash ? O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC : last_flags;
        fd = openat(dfd, comp, flags);
        int en = errno;
        if (dfd != ro->fd)
            close(dfd);
        if (fd < 0) {
            /* realpath() saw no link here: one was put in place since. */
            if (en == ELOOP || en == ENOTDIR)
                *e = refuse(path, err, errlen, "the path changed while it was opened "
                            "(a symbolic link appeared)");
            else
                *e = sys_fail(path, en, err, errlen);
            break;
        }
        if (!slash)
            break;
        dfd = fd;
        fd = -1;
        comp = slash + 1;
    }
    free(buf);
    return fd;
}

/* The descriptor of path under r (with folders): steps 1-3 of roots.h.
 * *resolved gets the resolved path when not NULL. */
static int open_under(const sluicei_roots *r, const char *path, int last_flags, char **resolved,
                      sluice_err *e, char *err, size_t errlen)
{
    char *lex = lexical(path);
    if (!lex) {
        *e = sys_fail(path, errno, err, errlen);
        return -1;
    }
    int inside = 0;
    for (size_t i = 0; i < r->n && !inside; i++)
        inside = under(r->v[i].given, lex) || under(r->v[i].real, lex);
    free(lex);
    if (!inside) {
        *e = refuse(path, err, errlen, "not under a data root (--data-root, "
                    "SLUICE_DATA_ROOTS)");
        return -1;
    }
    char *real = realpath(path, NULL);
    if (!real) {
        *e = sys_fail(path, errno, err, errlen);
        return -1;
    }
    const root *ro = NULL;
    for (size_t i = 0; i < r->n && !ro; i++)
        if (under(r->v[i].real, real))
            ro = &r->v[i];
    int fd = -1;
    if (!ro)
        *e = refuse(path, err, errlen, "a symbolic link leads out of the data roots");
    else
        fd = walk(ro, path, real, last_flags, e, err, errlen);
    if (fd >= 0 && resolved)
        *resolved = real;
    else
        free(real);
    return fd;
}

/* Checks the descriptor of path: its type and file system. */
static sluice_err check_fd(int fd, const char *path, int allow_dir, struct stat *st,
                           char *err, size_t errlen)
{
    const char *kfs;
    char why[128];
    if (fstat(fd, st) != 0)
        return sys_fail(path, errno, err, errlen);
    if (!S_ISREG(st->st_mode) && !(allow_dir && S_ISDIR(st->st_mode))) {
        snprintf(why, sizeof why, "%s, not a regular file", type_name(st->st_mode));
        return refuse(path, err, errlen, why);
    }
    if ((kfs = kernel_fs_of(fd)) != NULL) {
        snprintf(why, sizeof why, "on %s, a kernel file system, not data", kfs);
        return refuse(path, err, errlen, why);
    }
    return SLUICE_OK;
}

sluice_err sluicei_input_open(const sluicei_roots *r, const char *path, int flags, int *fd,
                              struct stat *st, char *err, size_t errlen)
{
    sluice_err e = SLUICE_OK;
    *fd = -1;
    if (!r) {
        int f = open(path, O_RDONLY | O_CLOEXEC);
        if (f < 0)
            return sys_fail(path, errno, err, errlen);
        int en = fstat(f, st) != 0 ? errno
                 : S_ISDIR(st->st_mode) && !(flags & SLUICEI_INPUT_FOLDER) ? EISDIR : 0;
        if (en) {
            close(f);
            return sys_fail(path, en, err, errlen);
        }
        *fd = f;
        return SLUICE_OK;
    }
    /* O_NONBLOCK: a FIFO without a writer cannot hold the open; O_NOCTTY:
     * a terminal never becomes ours. */
    const int rd = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    int f = r->n ? open_under(r, path, rd | O_NOFOLLOW, NULL, &e, err, errlen)
                 : open(path, rd);
    if (f < 0)
        return r->n ? e : sys_fail(path, errno, err, errlen);
    e = check_fd(f, path, flags & SLUICEI_INPUT_FOLDER, st, err, errlen);
    if (e == SLUICE_OK) {
        int fl = fcntl(f, F_GETFL);
        if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0)
            e = sys_fail(path, errno, err, errlen);
    }
    if (e != SLUICE_OK) {
        close(f);
        return e;
    }
    *fd = f;
    return SLUICE_OK;
}

sluice_err sluicei_input_check(const sluicei_roots *r, const char *path, char **resolved,
                               char *err, size_t errlen)
{
    sluice_err e = SLUICE_OK;
    struct stat st;
    char *res = NULL;
    if (resolved)
        *resolved = NULL;
    /* O_PATH: nothing is read, and nothing (a FIFO) can block. */
    const int flags = O_PATH | O_CLOEXEC;
    int f = r && r->n ? open_under(r, path, flags | O_NOFOLLOW, &res, &e, err, errlen)
                      : open(path, flags);
    if (f < 0)
        return r && r->n ? e : sys_fail(path, errno, err, errlen);
    e = r ? check_fd(f, path, 1, &st, err, errlen) : SLUICE_OK;
    close(f);
    if (e == SLUICE_OK && resolved && !res && !(res = strdup(path)))
        e = sys_fail(path, ENOMEM, err, errlen);
    if (e == SLUICE_OK && resolved)
        *resolved = res;
    else
        free(res);
    return e;
}
