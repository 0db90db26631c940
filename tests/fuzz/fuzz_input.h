/* Shared by the reader fuzz targets: fuzz input as files the readers can
 * open by path, without touching the disk (memfd + /proc/self/fd). */
#ifndef SLUICE_FUZZ_INPUT_H
#define SLUICE_FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Writes p[0..n) to a new memory file; path receives its name. Returns the
 * descriptor (close it when done), -1 on failure. */
static inline int fuzz_file(char *path, size_t pathlen, const uint8_t *p, size_t n)
{
    int fd = memfd_create("fuzz", 0);
    if (fd < 0)
        return -1;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    snprintf(path, pathlen, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
