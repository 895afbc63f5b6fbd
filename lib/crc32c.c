/*
 * CRC32C: see crc32c.h.
 *
 * Inside, the CRC register runs "raw" (no inversions; the public functions invert on the way
 * in and out), because the raw register is linear: processing bytes B from state s gives
 * shift_|B|(s) ^ raw(0, B), where shift_n is what n zero bytes do to a state. That lets the
 * hardware path cut a block into three equal parts, run three independent crc32 streams over
 * them (the instruction has a latency of 3 cycles but issues one per cycle, so a single stream
 * uses a third of it), and join them with two shifts done by table lookup.
 */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC_POLY 0x82F63B78u /* 0x1EDC6F41 bit-reversed */

/* Bytes per stream in the hardware path's three-way blocks: long ones for the bulk, short ones
 * for what is left (long enough that the join, 8 lookups, stays a small part of the block). */
#define CRC_LONG 8192
#define CRC_SHORT 256

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
/* Written once, under crc_once. */
static uint32_t crc_table[8][256]; /* [k][b]: byte b followed by k zero bytes */
static uint32_t crc_shift_long[4][256], crc_shift_short[4][256]; /* see crc_make_shift */
static rcci_crc32c_fn crc_hw_fn, crc_best_fn;

/* ---------------------------------------------------------------------------------------------
 * Portable: slice-by-8
 * ------------------------------------------------------------------------------------------- */

/* Little-endian 32-bit load from any address; compilers turn it into one load on x86/arm. */
static inline uint32_t crc_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t crc_sb8_raw(uint32_t s, const unsigned char *p, size_t len)
{
    const uint32_t(*t)[256] = (const uint32_t(*)[256])crc_table;
    for (; len >= 8; p += 8, len -= 8) {
        uint32_t lo = s ^ crc_le32(p), hi = crc_le32(p + 4);
        s = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
            t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    }
    while (len--)
        s = (s >> 8) ^ t[0][(s ^ *p++) & 0xff];
    return s;
}

static uint32_t crc_update_portable(uint32_t crc, const void *buf, size_t len)
{
    return ~crc_sb8_raw(~crc, buf, len);
}

/* ---------------------------------------------------------------------------------------------
 * Shifting a raw state by n zero bytes: a linear map on 32 bits
 * ------------------------------------------------------------------------------------------- */

/* A linear map given by the images of the 32 unit vectors. */
typedef struct {
    uint32_t col[32];
} crc_map_t;

static uint32_t crc_map_apply(const crc_map_t *m, uint32_t v)
{
    uint32_t r = 0;
    for (int i = 0; v; i++, v >>= 1)
        if (v & 1)
            r ^= m->col[i];
    return r;
}

/* a after b. */
static crc_map_t crc_map_compose(const crc_map_t *a, const crc_map_t *b)
{
    crc_map_t r;
    for (int i = 0; i < 32; i++)
        r.col[i] = crc_map_apply(a, b->col[i]);
    return r;
}

/* The map of n zero bytes, by squaring the one-byte map. */
static crc_map_t crc_zeros_map(size_t n)
{
    crc_map_t sq, r;
    for (int i = 0; i < 32; i++) {
        uint32_t s = (uint32_t)1 << i;
        sq.col[i] = (s >> 8) ^ crc_table[0][s & 0xff];
        r.col[i] = (uint32_t)1 << i; /* identity */
    }
    for (; n; n >>= 1) {
        if (n & 1)
            r = crc_map_compose(&sq, &r);
        sq = crc_map_compose(&sq, &sq);
    }
    return r;
}

/* tab[k][b] = the state v = b << 8k shifted by n zero bytes: a whole shift is four lookups. */
static void crc_make_shift(uint32_t tab[4][256], size_t n)
{
    crc_map_t m = crc_zeros_map(n);
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            tab[k][b] = crc_map_apply(&m, b << (8 * k));
}

static inline uint32_t crc_shift(const uint32_t tab[4][256], uint32_t s)
{
    return tab[0][s & 0xff] ^ tab[1][(s >> 8) & 0xff] ^ tab[2][(s >> 16) & 0xff] ^ tab[3][s >> 24];
}

/* ---------------------------------------------------------------------------------------------
 * SSE4.2: the crc32 instruction computes exactly the raw CRC32C register update
 * ------------------------------------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#define CRC_HAVE_SSE42 1
#include <nmmintrin.h>

static inline uint64_t crc_load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* s over 3 * block bytes at p, as three streams joined by shifts of `block` bytes. */
__attribute__((target("sse4.2"))) static inline uint32_t
crc_hw_three(uint32_t s, const unsigned char *p, size_t block, const uint32_t tab[4][256])
{
    uint64_t a = s, b = 0, c = 0;
    for (size_t i = 0; i < block; i += 8) {
        a = _mm_crc32_u64(a, crc_load64(p + i));
        b = _mm_crc32_u64(b, crc_load64(p + block + i));
        c = _mm_crc32_u64(c, crc_load64(p + 2 * block + i));
    }
    return crc_shift(tab, crc_shift(tab, (uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw_raw(uint32_t s, const unsigned char *p,
                                                             size_t len)
{
    for (; len > 0 && ((uintptr_t)p & 7) != 0; len--) /* to 8-byte alignment */
        s = _mm_crc32_u8(s, *p++);
    for (; len >= 3 * CRC_LONG; p += 3 * CRC_LONG, len -= 3 * CRC_LONG)
        s = crc_hw_three(s, p, CRC_LONG, (const uint32_t(*)[256])crc_shift_long);
    for (; len >= 3 * CRC_SHORT; p += 3 * CRC_SHORT, len -= 3 * CRC_SHORT)
        s = crc_hw_three(s, p, CRC_SHORT, (const uint32_t(*)[256])crc_shift_short);
    uint64_t s64 = s;
    for (; len >= 8; p += 8, len -= 8)
        s64 = _mm_crc32_u64(s64, crc_load64(p));
    s = (uint32_t)s64;
    for (; len > 0; len--)
        s = _mm_crc32_u8(s, *p++);
    return s;
}

static uint32_t crc_update_hw(uint32_t crc, const void *buf, size_t len)
{
    return ~crc_hw_raw(~crc, buf, len);
}
#endif /* x86-64 */

/* ---------------------------------------------------------------------------------------------
 * Set-up and entry points
 * ------------------------------------------------------------------------------------------- */

static void crc_init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC_POLY : c >> 1;
        crc_table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            crc_table[k][b] = (crc_table[k - 1][b] >> 8) ^ crc_table[0][crc_table[k - 1][b] & 0xff];
    crc_make_shift(crc_shift_long, CRC_LONG);
    crc_make_shift(crc_shift_short, CRC_SHORT);
    crc_best_fn = crc_update_portable;
#ifdef CRC_HAVE_SSE42
    __builtin_cpu_init(); /* in case the first call comes from a constructor */
    if (__builtin_cpu_supports("sse4.2"))
        crc_hw_fn = crc_best_fn = crc_update_hw;
#endif
}

uint32_t rcci_crc32c_update(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return len ? crc_best_fn(crc, buf, len) : crc;
}

uint32_t rcci_crc32c_update_portable(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return len ? crc_update_portable(crc, buf, len) : crc;
}

rcci_crc32c_fn rcci_crc32c_hw(void)
{
    pthread_once(&crc_once, crc_init);
    return crc_hw_fn;
}

const char *rcci_crc32c_impl(void) { return rcci_crc32c_hw() ? "sse4.2" : "slice-by-8"; }
