/* Commands that never outlive the process that started them: the --exec
 * commands of readers/exec.c. Internal.
 *
 * Each command runs as `/bin/sh -c LINE` and leads a process group of its
 * own (setpgid in the child, and in the parent too, so that the group
 * exists when sluicei_child_start() returns): what it starts in turn stays
 * in that group unless it leaves it on purpose (setsid, setpgid). The
 * process keeps a list of these groups, because signals and exit() are
 * process-wide: a signal handler reaches them through sluicei_child_stop()
 * (ask every group to end, and wake every wait on a command's output) and
 * sluicei_child_kill_all() (kill them), and an exit() kills them too (an
 * atexit handler). On Linux each command also gets PR_SET_PDEATHSIG
 * SIGKILL, so that the command itself (not what it started: the setting is
 * not inherited by its children) dies with a producer killed by SIGKILL.
 *
 * Ending a group (sluicei_child_end()): SIGTERM to the group, then up to
 * SLUICEI_CHILD_GRACE_MS for the command to exit and the group to empty,
 * then SIGKILL to the group; the command is reaped. A member that died
 * after its parent stays a zombie until init reaps it, which an init in a
 * container may do late: on Linux the group counts as empty when /proc
 * shows only zombies in it. */
#ifndef SLUICE_CHILD_H
#define SLUICE_CHILD_H

#include <sluice/common.h>

#include <stddef.h>
#include <sys/types.h>

/* How long a group has between SIGTERM and SIGKILL. */
#define SLUICEI_CHILD_GRACE_MS 5000
/* Most commands running at once in one process. */
#define SLUICEI_CHILD_MAX 64

/* Starts `/bin/sh -c line` with environment env, stdin /dev/null, stdout
 * and stderr on two new pipes whose read ends (close-on-exec) are *out_fd
 * and *err_fd, signals SIGINT, SIGTERM and SIGPIPE at their default and
 * none blocked. On SLUICE_OK *pid leads its own process group, which is on
 * the list until sluicei_child_end(); the caller owns the two fds. After a
 * stop (sluicei_child_stop()) nothing starts: SLUICE_ERR_SYS with err
 * "stopped: the producer is shutting down". Other failures: SLUICE_ERR_SYS
 * naming the call ("fork: ..."), or "more than N commands at once". A
 * failure to run /bin/sh itself shows as exit status 127. Thread-safe. */
sluice_err sluicei_child_start(pid_t *pid, int *out_fd, int *err_fd, const char *line,
                               char *const *env, char *err, size_t errlen);

/* Ends the group of pid (a pid from sluicei_child_start()) and takes it off
 * the list. reaped 0: the command may still run; it is sent SIGTERM with
 * its group, given SLUICEI_CHILD_GRACE_MS to exit with every process of
 * the group, then the group gets SIGKILL, and the command is reaped.
 * reaped 1: the caller has reaped the command already (it exited by
 * itself); whatever it left running in its group is ended the same way
 * (nothing is sent when the group is empty, the usual case). Blocks for
 * at most the grace period plus the time SIGKILL takes. */
void sluicei_child_end(pid_t pid, int reaped);

/* Async-signal-safe, for a signal handler, and for good: sends SIGTERM to
 * every group on the list, makes sluicei_child_stopping() true and the
 * fd of sluicei_child_wake_fd() readable, and keeps any command from
 * starting. */
void sluicei_child_stop(void);

/* Whether sluicei_child_stop() was called. */
int sluicei_child_stopping(void);

/* An fd that turns readable (and stays so) at sluicei_child_stop(), to
 * poll() together with a command's pipes; -1 before the first start. */
int sluicei_child_wake_fd(void);

/* Async-signal-safe: SIGKILL to every group on the list (they stay on it).
 * For a second signal before _exit(), and for exit() (atexit). */
void sluicei_child_kill_all(void);

#endif
