/* libFuzzer target: the manifest parser and the task definitions stored in
 * Redis (the codec of common/src/taskdef.c). A manifest that parses must
 * survive encode → decode unchanged; a task definition read back from
 * Redis (any bytes) must decode or fail cleanly, and what decodes must
 * survive encode → decode unchanged too. The manifest
 * may name the files "a" (4 lines) and "b" beside it. */
#include "manifest.h"
#include "taskdef.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static void cleanup(void)
{
    const char *names[] = {"a", "b", "m"};
    char p[128];
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static void setup(void)
{
    char p[128];
    snprintf(dir, sizeof dir, "/tmp/sluice-fuzz-manifest-XXXXXX");
    if (!mkdtemp(dir))
        abort();
    atexit(cleanup);
    snprintf(p, sizeof p, "%s/a", dir);
    FILE *f = fopen(p, "w");
    if (!f)
        abort();
    fputs("1\n2\n3\n4\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/b", dir);
    if (!(f = fopen(p, "w")))
        abort();
    fputs("xxxxxx", f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/m", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    sluicei_shard *s;
    size_t n;
    if (sluicei_manifest_parse(path, &s, &n, err, sizeof err) == SLUICE_OK) {
        for (size_t i = 0; i < n; i++) {
            char *d = sluicei_shard_encode(&s[i]);
            sluicei_taskdef *o;
            if (!d || sluicei_taskdef_decode(d, strlen(d), &o, err, sizeof err) != SLUICE_OK)
                abort();
            if (o->start != s[i].start || o->end != s[i].end || o->npaths != s[i].npaths ||
                strcmp(o->reader, s[i].reader) != 0)
                abort();
            for (size_t k = 0; k < o->npaths; k++)
                if (strcmp(o->paths[k], s[i].paths[k]) != 0)
                    abort();
            free(o);
            free(d);
        }
        sluicei_shards_free(s, n);
    } else if (err[0] == '\0') {
        abort();
    }
    sluicei_taskdef *o;
    if (sluicei_taskdef_decode((const char *)data, size, &o, err, sizeof err) == SLUICE_OK) {
        char *d = sluicei_taskdef_encode(o->reader, o->paths, o->npaths, o->start, o->end);
        sluicei_taskdef *o2;
        if (!d || sluicei_taskdef_decode(d, strlen(d), &o2, err, sizeof err) != SLUICE_OK)
            abort();
        if (o2->start != o->start || o2->end != o->end || o2->npaths != o->npaths ||
            strcmp(o2->reader, o->reader) != 0)
            abort();
        for (size_t k = 0; k < o->npaths; k++)
            if (strcmp(o2->paths[k], o->paths[k]) != 0)
                abort();
        free(o2);
        free(d);
        free(o);
    } else if (o != NULL || err[0] == '\0') {
        abort();
    }
    return 0;
}
