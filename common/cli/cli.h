/* What the three programs (sluice-producer, sluice-consume, sluice-ctl)
 * share on their command line: one way to read "--flag value" and
 * "--flag=value", to report a usage error, and --version (numbers:
 * common/src/num.h). Not part of libsluice.
 *
 * Exit statuses are the same in every program: 0 success, 1 a runtime
 * error, 2 a usage error. */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <stdint.h>
#include <stdio.h>

#define SLUICEI_EXIT_OK 0
#define SLUICEI_EXIT_RUNTIME 1
#define SLUICEI_EXIT_USAGE 2

/* The program's name in messages ("sluice-ctl"); main() sets it first. */
void sluicei_cli_init(const char *prog);

/* Prints "PROG: <message>" and "try 'PROG --help'" to stderr; returns
 * SLUICEI_EXIT_USAGE. */
int sluicei_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether argv[*i] is the flag name ("--queue") with a value, given as
 * "--queue Q" (then *i moves past Q) or "--queue=Q". Returns 1 with *val
 * set; 0 when argv[*i] is another flag; -1 when the flag has no value
 * (a usage error is printed). */
int sluicei_flag_value(int argc, char **argv, int *i, const char *name, const char **val);

/* Whether argv[*i] is a flag without value: exactly name, or alias (may be
 * NULL). */
int sluicei_flag_is(const char *arg, const char *name, const char *alias);

/* Handles --version and -V: prints "PROG VERSION" and the library's
 * version to out. Returns 1 when arg is one of them, else 0. */
int sluicei_cli_version(const char *arg, FILE *out);

#endif
