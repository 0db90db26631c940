/* Runs a fuzz target's LLVMFuzzerTestOneInput over files, without
 * libFuzzer: the seed corpus and the inputs of fixed crashes are replayed
 * this way in `make test`, with any compiler. Usage: replay FILE... */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 1;
        }
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0, n;
        do {
            if (len == cap) {
                uint8_t *nb = realloc(buf, cap ? cap * 2 : 4096);
                if (!nb) {
                    fprintf(stderr, "%s: out of memory\n", argv[i]);
                    return 1;
                }
                buf = nb;
                cap = cap ? cap * 2 : 4096;
            }
            n = fread(buf + len, 1, cap - len, f);
            len += n;
        } while (n > 0);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
    }
    printf("replayed %d inputs\n", argc - 1);
    return 0;
}
