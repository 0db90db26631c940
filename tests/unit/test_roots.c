/* Data roots and the opening of input files (producer/job/roots.h). Each
 * case builds its own tree in a fresh temporary folder:
 *     D/root/{a.txt, sub/b.txt, in -> a.txt, out -> ../secret, fifo, dir/}
 *     D/secret */
#include "test.h"

#include "reader.h"
#include "roots.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct tree {
    char dir[64];
    char root[96];
    sluicei_roots *roots;   /* with the one folder D/root */
} tree;

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* p = D/rel, in a buffer of the caller's. */
static const char *at(const tree *t, char *p, size_t n, const char *rel)
{
    snprintf(p, n, "%s/%s", t->dir, rel);
    return p;
}

static int make_tree(tree *t)
{
    char p[160], err[256];
    snprintf(t->dir, sizeof t->dir, "/tmp/sluice-roots-XXXXXX");
    if (!mkdtemp(t->dir)) {
        CHECK(!"mkdtemp");
        return -1;
    }
    snprintf(t->root, sizeof t->root, "%s/root", t->dir);
    CHECK(mkdir(t->root, 0700) == 0);
    CHECK(mkdir(at(t, p, sizeof p, "root/sub"), 0700) == 0);
    CHECK(mkdir(at(t, p, sizeof p, "root/dir"), 0700) == 0);
    put(at(t, p, sizeof p, "root/a.txt"), "alpha\n");
    put(at(t, p, sizeof p, "root/sub/b.txt"), "beta\n");
    put(at(t, p, sizeof p, "secret"), "SLUICE_REDIS_PASSWORD=hunter2\n");
    CHECK(symlink("a.txt", at(t, p, sizeof p, "root/in")) == 0);
    CHECK(symlink("../secret", at(t, p, sizeof p, "root/out")) == 0);
    CHECK(mkfifo(at(t, p, sizeof p, "root/fifo"), 0600) == 0);
    t->roots = NULL;
    CHECK(sluicei_roots_new(&t->roots) == SLUICE_OK);
    CHECK(t->roots && sluicei_roots_add(t->roots, t->root, err, sizeof err) == SLUICE_OK);
    CHECK(sluicei_roots_count(t->roots) == 1);
    return 0;
}

static void free_tree(tree *t)
{
    static const char *const files[] = {"root/a.txt", "root/sub/b.txt", "root/in", "root/out",
                                        "root/fifo", "secret"};
    char p[160];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        unlink(at(t, p, sizeof p, files[i]));
    rmdir(at(t, p, sizeof p, "root/sub"));
    rmdir(at(t, p, sizeof p, "root/dir"));
    rmdir(t->root);
    rmdir(t->dir);
    sluicei_roots_free(t->roots);
}

/* Opens rel (under D) through r: the result, err filled. */
static sluice_err try_open(const sluicei_roots *r, const tree *t, const char *rel, int flags,
                           char *err, size_t errlen)
{
    char p[192];
    struct stat st;
    int fd = 99;
    sluice_err e = sluicei_input_open(r, at(t, p, sizeof p, rel), flags, &fd, &st, err, errlen);
    if (e == SLUICE_OK) {
        CHECK(fd >= 0);
        CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
        CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
        close(fd);
    } else {
        CHECK(fd == -1);
        CHECK(strstr(err, p) == err);   /* the message names the path */
    }
    return e;
}

static int refused(sluice_err e, const char *err, const char *why)
{
    if (e == SLUICE_ERR_INVALID && strstr(err, ": refused: ") && strstr(err, why))
        return 1;
    fprintf(stderr, "    want refused '%s', got %d '%s'\n", why, (int)e, err);
    return 0;
}

static void test_inside(void)
{
    tree t;
    char err[512];
    if (make_tree(&t) != 0)
        return;
    CHECK(try_open(t.roots, &t, "root/a.txt", 0, err, sizeof err) == SLUICE_OK);
    CHECK(try_open(t.roots, &t, "root/sub/b.txt", 0, err, sizeof err) == SLUICE_OK);
    CHECK(try_open(t.roots, &t, "root/in", 0, err, sizeof err) == SLUICE_OK);
    CHECK(try_open(t.roots, &t, "root/sub/../a.txt", 0, err, sizeof err) == SLUICE_OK);
    CHECK(try_open(t.roots, &t, "root//./sub/b.txt", 0, err, sizeof err) == SLUICE_OK);
    CHECK(try_open(t.roots, &t, "root/dir", SLUICEI_INPUT_FOLDER, err, sizeof err) ==
          SLUICE_OK);
    CHECK(try_open(t.roots, &t, "root", SLUICEI_INPUT_FOLDER, err, sizeof err) == SLUICE_OK);
    /* A relative path: against the working folder. */
    int cwd = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(cwd >= 0 && chdir(t.root) == 0);
    struct stat st;
    int fd = -1;
    CHECK(sluicei_input_open(t.roots, "sub/b.txt", 0, &fd, &st, err, sizeof err) == SLUICE_OK);
    if (fd >= 0)
        close(fd);
    CHECK(sluicei_input_open(t.roots, "../secret", 0, &fd, &st, err, sizeof err) ==
          SLUICE_ERR_INVALID);
    CHECK(cwd >= 0 && fchdir(cwd) == 0);
    if (cwd >= 0)
        close(cwd);
    free_tree(&t);
}

static void test_refused(void)
{
    tree t;
    char err[512];
    if (make_tree(&t) != 0)
        return;
    sluice_err e = try_open(t.roots, &t, "secret", 0, err, sizeof err);
    CHECK(refused(e, err, "not under a data root"));
    e = try_open(t.roots, &t, "root/../secret", 0, err, sizeof err);
    CHECK(refused(e, err, "not under a data root"));
    e = try_open(t.roots, &t, "root/sub/../../secret", 0, err, sizeof err);
    CHECK(refused(e, err, "not under a data root"));
    e = try_open(t.roots, &t, "root/out", 0, err, sizeof err);
    CHECK(refused(e, err, "a symbolic link leads out of the data roots"));
    e = try_open(t.roots, &t, "root/dir", 0, err, sizeof err);
    CHECK(refused(e, err, "a directory, not a regular file"));
    /* No writer: the open must not wait for one. */
    time_t t0 = time(NULL);
    e = try_open(t.roots, &t, "root/fifo", 0, err, sizeof err);
    CHECK(refused(e, err, "a FIFO, not a regular file"));
    CHECK(time(NULL) - t0 < 2);
    /* Outside: refused without a look, so a missing file tells nothing. */
    e = try_open(t.roots, &t, "no-such-file", 0, err, sizeof err);
    CHECK(refused(e, err, "not under a data root"));
    e = try_open(t.roots, &t, "root/no-such-file", 0, err, sizeof err);
    CHECK(e == SLUICE_ERR_SYS && strstr(err, ": open: No such file or directory"));
    struct stat st;
    int fd = -1;
    e = sluicei_input_open(t.roots, "/proc/self/environ", 0, &fd, &st, err, sizeof err);
    CHECK(refused(e, err, "not under a data root") && fd == -1);
    e = sluicei_input_open(t.roots, "/dev/zero", 0, &fd, &st, err, sizeof err);
    CHECK(refused(e, err, "not under a data root") && fd == -1);
    free_tree(&t);
}

/* Without folders: anywhere, but regular files off kernel file systems. */
static void test_anywhere(void)
{
    tree t;
    char err[512];
    sluicei_roots *any = NULL;
    struct stat st;
    int fd = -1;
    if (make_tree(&t) != 0)
        return;
    CHECK(sluicei_roots_new(&any) == SLUICE_OK && sluicei_roots_count(any) == 0);
    CHECK(try_open(any, &t, "secret", 0, err, sizeof err) == SLUICE_OK);
    CHECK(try_open(any, &t, "root/out", 0, err, sizeof err) == SLUICE_OK);
    sluice_err e = try_open(any, &t, "root/fifo", 0, err, sizeof err);
    CHECK(refused(e, err, "a FIFO, not a regular file"));
    e = sluicei_input_open(any, "/dev/zero", 0, &fd, &st, err, sizeof err);
    CHECK(refused(e, err, "a character device, not a regular file"));
    e = sluicei_input_open(any, "/proc/self/environ", 0, &fd, &st, err, sizeof err);
    CHECK(refused(e, err, "on proc, a kernel file system"));
    e = sluicei_input_open(any, "/sys/kernel/uevent_seqnum", 0, &fd, &st, err, sizeof err);
    CHECK(e == SLUICE_ERR_SYS || refused(e, err, "on sysfs, a kernel file system"));
    CHECK(fd == -1);
    /* No policy (NULL): as open(2); only a folder is refused. */
    CHECK(try_open(NULL, &t, "secret", 0, err, sizeof err) == SLUICE_OK);
    e = try_open(NULL, &t, "root/dir", 0, err, sizeof err);
    CHECK(e == SLUICE_ERR_SYS && strstr(err, ": open: Is a directory"));
    sluicei_roots_free(any);
    free_tree(&t);
}

static void test_add(void)
{
    sluicei_roots *r = NULL;
    char err[512];
    CHECK(sluicei_roots_new(&r) == SLUICE_OK);
    CHECK(sluicei_roots_add(r, "/nonexistent/folder", err, sizeof err) == SLUICE_ERR_SYS);
    CHECK(strcmp(err, "/nonexistent/folder: No such file or directory") == 0);
    CHECK(sluicei_roots_add(r, "/dev/null", err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strcmp(err, "/dev/null: not a directory") == 0);
    CHECK(sluicei_roots_add(r, "/proc", err, sizeof err) == SLUICE_ERR_INVALID);
    CHECK(strstr(err, "/proc: on proc, a kernel file system") == err);
    CHECK(sluicei_roots_count(r) == 0);
    /* "/" holds everything, yet still no FIFO or kernel file. */
    CHECK(sluicei_roots_add(r, "/", err, sizeof err) == SLUICE_OK);
    struct stat st;
    int fd = -1;
    CHECK(sluicei_input_open(r, "/proc/self/environ", 0, &fd, &st, err, sizeof err) ==
          SLUICE_ERR_INVALID && strstr(err, "on proc"));
    CHECK(sluicei_input_open(r, "/dev/zero", 0, &fd, &st, err, sizeof err) ==
          SLUICE_ERR_INVALID && strstr(err, "a character device"));
    sluicei_roots_free(r);
    sluicei_roots_free(NULL);
}

/* --exec: the check, and the resolved path the command is given. */
static void test_check(void)
{
    tree t;
    char err[512], p[192], *res = NULL;
    if (make_tree(&t) != 0)
        return;
    char *root_real = realpath(t.root, NULL);
    CHECK(sluicei_input_check(t.roots, at(&t, p, sizeof p, "root/in"), &res, err, sizeof err) ==
          SLUICE_OK);
    CHECK(res && root_real && strncmp(res, root_real, strlen(root_real)) == 0 &&
          strcmp(res + strlen(root_real), "/a.txt") == 0);
    free(res);
    res = NULL;
    CHECK(sluicei_input_check(t.roots, at(&t, p, sizeof p, "root/dir"), NULL, err,
                              sizeof err) == SLUICE_OK);
    sluice_err e = sluicei_input_check(t.roots, at(&t, p, sizeof p, "root/fifo"), &res, err,
                                       sizeof err);
    CHECK(refused(e, err, "a FIFO") && res == NULL);
    e = sluicei_input_check(t.roots, at(&t, p, sizeof p, "root/out"), &res, err, sizeof err);
    CHECK(refused(e, err, "a symbolic link leads out") && res == NULL);
    e = sluicei_input_check(t.roots, "/proc/self/environ", &res, err, sizeof err);
    CHECK(refused(e, err, "not under a data root") && res == NULL);
    free(root_real);
    free_tree(&t);
}

/* The readers open through the roots: a refused path fails the open, a
 * refused file in a folder fails the read of that file. */
static void test_readers(void)
{
    tree t;
    char err[512], p[192], q[192];
    sluicei_reader *r = NULL;
    sluice_record rec;
    if (make_tree(&t) != 0)
        return;
    const char *ok[] = {at(&t, p, sizeof p, "root/a.txt")};
    CHECK(sluicei_reader_open_in(&r, t.roots, "lines", ok, 1, 0, UINT64_MAX, err, sizeof err) ==
          SLUICE_OK);
    CHECK(r && sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_OK && rec.len == 5 &&
          memcmp(rec.data, "alpha", 5) == 0);
    sluicei_reader_close(r);
    static const char *const formats[] = {"lines", "tfrecord", "fixed:4", "files"};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        const char *bad[] = {at(&t, q, sizeof q, "secret")};
        r = (sluicei_reader *)1;
        sluice_err e = sluicei_reader_open_in(&r, t.roots, formats[i], bad, 1, 0, UINT64_MAX,
                                              err, sizeof err);
        CHECK(r == NULL && refused(e, err, "not under a data root"));
    }
    const char *pair[] = {at(&t, p, sizeof p, "root/fifo"), at(&t, q, sizeof q, "root/a.txt")};
    sluice_err e = sluicei_reader_open_in(&r, t.roots, "idx", pair, 2, 0, UINT64_MAX, err,
                                          sizeof err);
    CHECK(r == NULL && refused(e, err, "a FIFO"));
    /* A folder of files: in -> a.txt is read, out -> ../secret refused. */
    const char *folder[] = {t.root};
    CHECK(sluicei_reader_open_in(&r, t.roots, "files", folder, 1, 0, UINT64_MAX, err,
                                 sizeof err) == SLUICE_OK);
    int got = 0;
    while (r && (e = sluicei_reader_next(r, &rec, err, sizeof err)) == SLUICE_OK)
        got++;
    CHECK(got == 2);   /* a.txt, in */
    CHECK(refused(e, err, "a symbolic link leads out"));
    sluicei_reader_close(r);
    free_tree(&t);
}

const struct test roots_tests[] = {
    {"roots/paths inside a root", test_inside},
    {"roots/refused: outside, links out, FIFO, folder", test_refused},
    {"roots/no folder: anywhere, regular files only", test_anywhere},
    {"roots/adding folders", test_add},
    {"roots/check for --exec", test_check},
    {"roots/readers open through the roots", test_readers},
    {NULL, NULL},
};
