/* An --exec command's process group (child.h) as readers/exec.c uses it:
 * what the command leaves running, and what runs when the reader closes
 * early, ends with it. sluicei_child_stop() is for good in a process, so
 * the signal path is left to tests/integration/exec_signals.sh. */
#include "test.h"

#include "reader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether pid is a process that is not a zombie (one killed after its
 * parent waits for init, which may be slow to reap it). */
static int alive(long pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *q = strrchr(buf, ')');
    return q && q[1] == ' ' && q[2] != 'Z' && q[2] != 'X';
}

/* The pid a command wrote as its first record: 8 digits, space-padded. */
static long first_pid(sluicei_reader *r)
{
    char err[1024], txt[9];
    sluice_record rec;
    if (!r || sluicei_reader_next(r, &rec, err, sizeof err) != SLUICE_OK || rec.len != 8)
        return 0;
    memcpy(txt, rec.data, 8);
    txt[8] = '\0';
    return strtol(txt, NULL, 10);
}

static sluicei_reader *run(const char *cmd)
{
    char err[1024];
    sluicei_reader *r = NULL;
    const char *paths[] = {"x"};
    CHECK(sluicei_exec_open(&r, cmd, paths, 1, 0, UINT64_MAX, SLUICEI_EXEC_FRAMED, NULL, err,
                            sizeof err) == SLUICE_OK);
    return r;
}

static void test_leftover_ends(void)
{
    char err[1024];
    sluice_record rec;
    sluicei_reader *r = run("sleep 100 >/dev/null 2>&1 & printf '\\010\\0\\0\\0%8d' $!");
    long bg = first_pid(r);
    CHECK(bg > 1);
    /* The end of stdout, the exit: the background sleep is gone by then. */
    CHECK(r && sluicei_reader_next(r, &rec, err, sizeof err) == SLUICE_EOF);
    CHECK(bg > 1 && !alive(bg));
    sluicei_reader_close(r);
}

static void test_close_ends_group(void)
{
    sluicei_reader *r = run("sleep 100 & printf '\\010\\0\\0\\0%8d' $!; sleep 100");
    long bg = first_pid(r);
    CHECK(bg > 1 && alive(bg));
    sluicei_reader_close(r);   /* SIGTERM to the group: no grace period needed */
    CHECK(bg > 1 && !alive(bg));
}

const struct test child_tests[] = {
    {"child/what a command leaves running ends at its exit", test_leftover_ends},
    {"child/closing the reader ends the whole group", test_close_ends_group},
    {NULL, NULL},
};
