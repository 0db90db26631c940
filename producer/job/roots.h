/* Data roots: the folders sluice-producer may read input from, and the one
 * way the readers open an input file. Internal; knows nothing of Redis.
 *
 * The paths of a job come from Redis, and whoever may write there may name
 * any path: the producer is the trust boundary. A roots set says where an
 * input may be (under one of its folders, or anywhere when it has none) and
 * what it may be (a regular file on a real file system). Opening a path
 * through a set with folders goes:
 *
 *   1. The path is placed lexically: made absolute against the working
 *      folder, "." and ".." folded, without looking at the file system. A
 *      path outside every root is refused there, so a refusal tells nothing
 *      about what exists outside.
 *   2. It is resolved (realpath()): when a symbolic link takes it out of
 *      every root, it is refused.
 *   3. It is opened component by component from the root's folder, which
 *      the set holds open since it was made, each with O_NOFOLLOW: a link
 *      put in place between 2 and 3 is refused, not followed.
 *
 * With or without folders, the last component is opened O_NONBLOCK (a FIFO
 * cannot hold the open), and the descriptor itself is checked (fstat,
 * fstatfs): a regular file only, or a folder where the caller allows one,
 * and nothing on proc, sysfs or another kernel file system. O_NONBLOCK is
 * then cleared. What the checks saw is what the caller reads: no second
 * open by name.
 *
 * A NULL set is no policy at all: sluicei_input_open() opens as open(2)
 * does, blocking, any type but a folder (sluice-ctl submit, which runs
 * with its user's rights, and the tools and tests).
 *
 * A set does not change once made: threads may open through it at once. */
#ifndef SLUICE_ROOTS_H
#define SLUICE_ROOTS_H

#include <sluice/common.h>

#include <stddef.h>
#include <sys/stat.h>

typedef struct sluicei_roots sluicei_roots;

/* A new set without folders: inputs may be anywhere, but only regular
 * files off kernel file systems. On SLUICE_OK *out is owned by the caller
 * (sluicei_roots_free()); SLUICE_ERR_NOMEM otherwise. */
sluice_err sluicei_roots_new(sluicei_roots **out);

/* Adds folder dir (relative: to the working folder) to r: resolved and
 * opened now, so that a later rename or link of dir itself changes
 * nothing. SLUICE_ERR_SYS with "DIR: <strerror>" when it does not exist or
 * cannot be opened, SLUICE_ERR_INVALID with "DIR: not a directory", or
 * "DIR: on proc, a kernel file system" for /proc, /sys and their kind. */
sluice_err sluicei_roots_add(sluicei_roots *r, const char *dir, char *err, size_t errlen);

/* The number of folders of r (0: anywhere). */
size_t sluicei_roots_count(const sluicei_roots *r);

/* Frees r and closes its folders. NULL is a no-op. */
void sluicei_roots_free(sluicei_roots *r);

/* Flags of sluicei_input_open(). */
#define SLUICEI_INPUT_FOLDER 1   /* a folder is allowed too (the files reader) */

/* Opens path for reading through r, as the head comment says. On SLUICE_OK
 * *fd is a new descriptor owned by the caller (close-on-exec, blocking)
 * and *st its fstat. Otherwise *fd is -1 and err says why, naming path:
 *   SLUICE_ERR_SYS      "PATH: open: <strerror>" (missing, no permission)
 *   SLUICE_ERR_INVALID  "PATH: refused: <why>": not under a data root, a
 *                       symbolic link leads out of the data roots, a FIFO
 *                       (a character device, a socket...), not a regular
 *                       file, on proc (a kernel file system), the path
 *                       changed while it was opened.
 * r NULL: open(path, O_RDONLY), a folder refused with "PATH: open: Is a
 * directory" unless SLUICEI_INPUT_FOLDER. */
sluice_err sluicei_input_open(const sluicei_roots *r, const char *path, int flags, int *fd,
                              struct stat *st, char *err, size_t errlen);

/* For a path another program will open (--exec): checks it as
 * sluicei_input_open() would (a regular file or a folder), without
 * opening it for reading. On SLUICE_OK *resolved (if not NULL) is the
 * path resolved (absolute, without links; r without folders: path as
 * given), owned by the caller (free()). Errors as for sluicei_input_open(). */
sluice_err sluicei_input_check(const sluicei_roots *r, const char *path, char **resolved,
                               char *err, size_t errlen);

#endif
