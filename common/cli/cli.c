/* Command-line helpers of the programs (cli.h). */
#include "cli.h"

#include <stdarg.h>
#include <string.h>

#include <sluice/common.h>


static const char *prog_name = "sluice";

void sluicei_cli_init(const char *prog)
{
    prog_name = prog;
}

int sluicei_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\ntry '%s --help'\n", prog_name);
    va_end(ap);
    return SLUICEI_EXIT_USAGE;
}

int sluicei_flag_value(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        sluicei_usage_error("%s needs a value", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

int sluicei_flag_is(const char *arg, const char *name, const char *alias)
{
    return strcmp(arg, name) == 0 || (alias && strcmp(arg, alias) == 0);
}

int sluicei_cli_version(const char *arg, FILE *out)
{
    if (strcmp(arg, "--version") != 0 && strcmp(arg, "-V") != 0)
        return 0;
    fprintf(out, "%s %s (libsluice %s, wire format %d)\n", prog_name, SLUICE_VERSION,
            sluice_version(), SLUICE_WIRE_VERSION);
    return 1;
}
