/* Commands in process groups of their own, ended with the process that
 * started them (child.h). */
#include "child.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* The list that signal handlers read: a slot holds a group's id (the
 * command's pid), 0 when free, -1 while a start reserves it. Atomics
 * rather than a lock, because a handler must never wait. */
static volatile sig_atomic_t groups[SLUICEI_CHILD_MAX];
static volatile sig_atomic_t stopping;
/* The wake pipe: written once by sluicei_child_stop(), never drained. */
static volatile sig_atomic_t wake_r = -1, wake_w = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void signal_all(int sig)
{
    for (int i = 0; i < SLUICEI_CHILD_MAX; i++) {
        pid_t g = __atomic_load_n(&groups[i], __ATOMIC_SEQ_CST);
        /* Never kill(0) or kill(1): 0 is our own group, -1 every process. */
        if (g > 1)
            kill(-g, sig);
    }
}

void sluicei_child_kill_all(void)
{
    int saved = errno;
    signal_all(SIGKILL);
    errno = saved;
}

void sluicei_child_stop(void)
{
    int saved = errno;
    __atomic_store_n(&stopping, 1, __ATOMIC_SEQ_CST);
    int w = __atomic_load_n(&wake_w, __ATOMIC_SEQ_CST);
    if (w >= 0) {
        char c = 1;
        ssize_t n = write(w, &c, 1);   /* a full pipe is readable already */
        (void)n;
    }
    signal_all(SIGTERM);
    errno = saved;
}

int sluicei_child_stopping(void)
{
    return __atomic_load_n(&stopping, __ATOMIC_SEQ_CST) != 0;
}

int sluicei_child_wake_fd(void)
{
    return __atomic_load_n(&wake_r, __ATOMIC_SEQ_CST);
}

static void init(void)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
        __atomic_store_n(&wake_w, p[1], __ATOMIC_SEQ_CST);
        __atomic_store_n(&wake_r, p[0], __ATOMIC_SEQ_CST);
    }
    /* An exit() on an error path leaves no command behind. */
    atexit(sluicei_child_kill_all);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* fd onto to in the child, without close-on-exec. */
static int move_fd(int fd, int to)
{
    if (fd == to)
        return fcntl(fd, F_SETFD, 0);
    return dup2(fd, to) < 0 ? -1 : 0;
}

/* In the child, between fork and exec: async-signal-safe calls only (the
 * parent has other threads). Every signal is blocked on entry. */
static void child_exec(const int *out, const int *errp, char *const *argv, char *const *env,
                       pid_t parent)
{
    setpgid(0, 0);
#ifdef __linux__
    /* The last resort for a producer killed by SIGKILL; checked after, in
     * case the parent died before the call. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
#else
    (void)parent;
#endif
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGPIPE, &dfl, NULL);
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0 || move_fd(null, 0) != 0 || move_fd(out[1], 1) != 0 ||
        move_fd(errp[1], 2) != 0) {
        static const char msg[] = "sluice: cannot set up stdin, stdout or stderr\n";
        ssize_t n = write(errp[1], msg, sizeof msg - 1);
        (void)n;
        _exit(127);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve("/bin/sh", argv, env);
    static const char msg[] = "sluice: cannot run /bin/sh\n";
    ssize_t n = write(2, msg, sizeof msg - 1);
    (void)n;
    _exit(127);
}

sluice_err sluicei_child_start(pid_t *pid, int *out_fd, int *err_fd, const char *line,
                               char *const *env, char *err, size_t errlen)
{
    *pid = 0;
    *out_fd = *err_fd = -1;
    pthread_once(&once, init);
    if (sluicei_child_wake_fd() < 0) {
        snprintf(err, errlen, "pipe: could not make the stop pipe");
        return SLUICE_ERR_SYS;
    }
    if (sluicei_child_stopping()) {
        snprintf(err, errlen, "stopped: the producer is shutting down");
        return SLUICE_ERR_SYS;
    }
    int slot = -1;
    for (int i = 0; i < SLUICEI_CHILD_MAX && slot < 0; i++) {
        sig_atomic_t expect = 0;
        if (__atomic_compare_exchange_n(&groups[i], &expect, -1, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            slot = i;
    }
    if (slot < 0) {
        snprintf(err, errlen, "more than %d commands at once", SLUICEI_CHILD_MAX);
        return SLUICE_ERR_SYS;
    }
    int out[2] = {-1, -1}, errp[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (out[i] >= 0)
                close(out[i]);
            if (errp[i] >= 0)
                close(errp[i]);
        }
        __atomic_store_n(&groups[slot], 0, __ATOMIC_SEQ_CST);
        return SLUICE_ERR_SYS;
    }
    char *argv[] = {"sh", "-c", (char *)line, NULL};
    /* Blocked across fork: no handler of ours runs in the child, and in
     * this thread none runs before the group is on the list. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pid_t parent = getpid();
    pid_t p = fork();
    if (p == 0)
        child_exec(out, errp, argv, env, parent);
    int fork_errno = errno;
    if (p > 0) {
        /* The child does the same; whichever runs first makes the group,
         * so that it exists for a signal from now on (EACCES: the child
         * has exec'd, after its own setpgid). */
        setpgid(p, p);
        __atomic_store_n(&groups[slot], p, __ATOMIC_SEQ_CST);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(out[1]);
    close(errp[1]);
    if (p < 0) {
        close(out[0]);
        close(errp[0]);
        __atomic_store_n(&groups[slot], 0, __ATOMIC_SEQ_CST);
        snprintf(err, errlen, "fork: %s", strerror(fork_errno));
        return SLUICE_ERR_SYS;
    }
    /* A stop handled by another thread between the check above and the
     * listing did not see this group. */
    if (sluicei_child_stopping())
        kill(-p, SIGTERM);
    *pid = p;
    *out_fd = out[0];
    *err_fd = errp[0];
    return SLUICE_OK;
}

#ifdef __linux__
/* Whether /proc shows a live process (not a zombie) in group g. A member
 * killed after its parent died is a zombie until init reaps it, which an
 * init in a container may do late or never: it is gone for our purpose. */
static int group_has_live(pid_t g)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 1;
    int live = 0;
    struct dirent *e;
    while (!live && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        /* "pid (comm) state ppid pgrp ...": comm may hold anything, so
         * parse from its last ')'. */
        const char *q = strrchr(buf, ')');
        char state;
        int ppid, pgrp;
        if (q && sscanf(q + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 && pgrp == g)
            live = state != 'Z' && state != 'X';
    }
    closedir(d);
    return live;
}
#endif

/* Whether no live process of group g remains. */
static int group_gone(pid_t g)
{
    if (kill(-g, 0) != 0)
        return errno == ESRCH;
#ifdef __linux__
    return !group_has_live(g);
#else
    return 0;
#endif
}

void sluicei_child_end(pid_t pid, int reaped)
{
    if (pid <= 1)
        return;
    int termed = 0;
    long deadline = 0;
    for (;;) {
        if (!reaped) {
            pid_t w = waitpid(pid, NULL, WNOHANG);
            reaped = w == pid || (w < 0 && errno == ECHILD);
        }
        if (reaped && group_gone(pid))
            break;
        if (!termed) {
            kill(-pid, SIGTERM);
            termed = 1;
            deadline = now_ms() + SLUICEI_CHILD_GRACE_MS;
            continue;
        }
        if (now_ms() >= deadline) {
            kill(-pid, SIGKILL);
            while (!reaped && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
            break;
        }
        /* Seldom enough that the /proc scan of group_gone() costs little. */
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < SLUICEI_CHILD_MAX; i++) {
        sig_atomic_t expect = pid;
        if (__atomic_compare_exchange_n(&groups[i], &expect, 0, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            break;
    }
}
