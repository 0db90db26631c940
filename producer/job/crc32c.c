/* CRC-32C: slice-by-8 tables, or the SSE4.2 crc32 instruction (crc32c.h). */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SSE42_PATH 1
#include <nmmintrin.h>
#endif

/* Reflected Castagnoli polynomial. */
#define POLY 0x82f63b78u

/* table[k][b] is the CRC of byte b followed by k zero bytes, which lets
 * the loop fold 8 input bytes per step. Immutable once built. */
static uint32_t table[8][256];
static uint32_t (*impl)(uint32_t, const unsigned char *, size_t);
static pthread_once_t once = PTHREAD_ONCE_INIT;

static uint32_t crc_sw(uint32_t crc, const unsigned char *s, size_t n)
{
    while (n && ((uintptr_t)s & 7)) {
        crc = table[0][(crc ^ *s++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        /* The tables assume little-endian word order. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
              table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        s += 8;
        n -= 8;
    }
    while (n--)
        crc = table[0][(crc ^ *s++) & 0xff] ^ (crc >> 8);
    return crc;
}

#ifdef HAVE_SSE42_PATH
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *s,
                                                          size_t n)
{
    uint64_t c = crc;
    while (n && ((uintptr_t)s & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *s++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        c = _mm_crc32_u64(c, w);
        s += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *s++);
    return (uint32_t)c;
}
#endif

static void init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (POLY & (0u - (c & 1)));
        table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            table[k][b] = (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xff];
    impl = crc_sw;
#ifdef HAVE_SSE42_PATH
    if (__builtin_cpu_supports("sse4.2"))
        impl = crc_hw;
#endif
}

uint32_t sluicei_crc32c_sw(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&once, init);
    return ~crc_sw(~crc, p, n);
}

uint32_t sluicei_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&once, init);
    return ~impl(~crc, p, n);
}
