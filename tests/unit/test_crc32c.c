/*
 * Unit tests for CRC32C (lib/crc32c.c): published check values, a bit-at-a-time reference
 * written here from the definition, the hardware and portable paths against each other at every
 * length and start alignment that reaches each of the hardware path's loops, and checksums fed
 * in random pieces against the one-call value.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check_main.h"

#include "crc32c.h"

/* ---------------------------------------------------------------------------
 * Reference and random data
 * ------------------------------------------------------------------------- */

/* CRC32C by the definition: reflected, polynomial 0x1EDC6F41 (bit-reversed 0x82F63B78), the
 * register preset to all ones and inverted at the end; crc is a previous result. */
static uint32_t ref_crc32c(uint32_t crc, const unsigned char *p, size_t len)
{
    uint32_t r = ~crc;
    for (size_t i = 0; i < len; i++) {
        r ^= p[i];
        for (int bit = 0; bit < 8; bit++)
            r = (r >> 1) ^ (0x82F63B78u & (0u - (r & 1)));
    }
    return ~r;
}

static uint64_t rng_state;

static uint64_t rng_next(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static unsigned char *random_bytes(size_t len)
{
    unsigned char *p = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)rng_next();
    return p;
}

/* The implementations under test: the dispatcher, the portable path and, where the CPU has
 * one, the hardware path. */
typedef struct {
    const char *name;
    rcci_crc32c_fn fn;
} impl_t;

static int impls(impl_t out[3])
{
    int n = 0;
    out[n++] = (impl_t){"rcci_crc32c_update", rcci_crc32c_update};
    out[n++] = (impl_t){"portable", rcci_crc32c_update_portable};
    if (rcci_crc32c_hw())
        out[n++] = (impl_t){"sse4.2", rcci_crc32c_hw()};
    return n;
}

/* ---------------------------------------------------------------------------
 * Tests
 * ------------------------------------------------------------------------- */

/* "123456789" is the usual check string; the four 32-byte buffers are RFC 3720's (iSCSI)
 * appendix B.4. */
START_TEST(published_vectors)
{
    unsigned char zeros[32], ones[32], up[32], down[32];
    for (int i = 0; i < 32; i++) {
        zeros[i] = 0;
        ones[i] = 0xFF;
        up[i] = (unsigned char)i;
        down[i] = (unsigned char)(31 - i);
    }
    const struct {
        const char *what;
        const void *buf;
        size_t len;
        uint32_t want;
    } vectors[] = {
        {"\"123456789\"", "123456789", 9, 0xE3069283u},
        {"32 bytes of 0x00", zeros, 32, 0x8A9136AAu},
        {"32 bytes of 0xFF", ones, 32, 0x62A8AB43u},
        {"32 ascending bytes 0..31", up, 32, 0x46DD794Eu},
        {"32 descending bytes 31..0", down, 32, 0x113FDB5Cu},
        {"no bytes", "", 0, 0},
    };
    impl_t im[3];
    int n = impls(im);
    for (int k = 0; k < n; k++)
        for (size_t v = 0; v < sizeof vectors / sizeof vectors[0]; v++) {
            uint32_t got = im[k].fn(RCCI_CRC32C_INIT, vectors[v].buf, vectors[v].len);
            ck_assert_msg(got == vectors[v].want, "%s of %s: 0x%08X, expected 0x%08X", im[k].name,
                          vectors[v].what, got, vectors[v].want);
        }
    for (size_t v = 0; v < sizeof vectors / sizeof vectors[0]; v++)
        ck_assert_uint_eq(ref_crc32c(0, vectors[v].buf, vectors[v].len), vectors[v].want);
}
END_TEST

START_TEST(empty_keeps_the_value)
{
    impl_t im[3];
    int n = impls(im);
    for (int k = 0; k < n; k++) {
        ck_assert_uint_eq(im[k].fn(0x12345678u, NULL, 0), 0x12345678u);
        ck_assert_uint_eq(im[k].fn(0, NULL, 0), 0);
    }
}
END_TEST

/* Every length 0..1100 at every start alignment 0..15 (the hardware path aligns to 8 bytes,
 * then runs three-way blocks of 768 bytes, 8-byte words and single bytes), plus lengths around
 * multiples of its 24 KiB blocks: every implementation agrees with the reference. */
START_TEST(paths_agree_short)
{
    rng_state = 1;
    unsigned char *data = random_bytes(1100 + 16);
    impl_t im[3];
    int n = impls(im);
    for (size_t len = 0; len <= 1100; len++)
        for (size_t align = 0; align < 16; align++) {
            uint32_t want = ref_crc32c(0, data + align, len);
            for (int k = 0; k < n; k++) {
                uint32_t got = im[k].fn(0, data + align, len);
                ck_assert_msg(got == want, "%s, %zu bytes at offset %zu: 0x%08X, expected 0x%08X",
                              im[k].name, len, align, got, want);
            }
        }
    free(data);
}
END_TEST

START_TEST(paths_agree_long)
{
    rng_state = 2;
    const size_t max = 4 * 3 * 8192 + 3 * 256 + 64;
    unsigned char *data = random_bytes(max + 16);
    impl_t im[3];
    int n = impls(im);
    size_t lens[64];
    int nlens = 0;
    for (size_t m = 1; m <= 4; m++) { /* around k long blocks, with and without short ones */
        lens[nlens++] = m * 3 * 8192 - 1;
        lens[nlens++] = m * 3 * 8192;
        lens[nlens++] = m * 3 * 8192 + 1;
        lens[nlens++] = m * 3 * 8192 + 3 * 256 + 7;
    }
    while (nlens < 64)
        lens[nlens++] = (size_t)(rng_next() % max);
    for (int i = 0; i < nlens; i++)
        for (size_t align = 0; align < 16; align += 3) {
            uint32_t want = ref_crc32c(0, data + align, lens[i]);
            for (int k = 0; k < n; k++) {
                uint32_t got = im[k].fn(0, data + align, lens[i]);
                ck_assert_msg(got == want, "%s, %zu bytes at offset %zu: 0x%08X, expected 0x%08X",
                              im[k].name, lens[i], align, got, want);
            }
        }
    free(data);
}
END_TEST

/* A buffer fed in random pieces (empty ones too, and pieces that straddle block boundaries)
 * gives the one-call value, in every implementation. */
START_TEST(pieces_equal_whole)
{
    rng_state = 3;
    const size_t len = 200000;
    unsigned char *data = random_bytes(len);
    uint32_t whole = ref_crc32c(0, data, len);
    impl_t im[3];
    int n = impls(im);
    for (int k = 0; k < n; k++) {
        ck_assert_uint_eq(im[k].fn(0, data, len), whole);
        for (int split = 0; split < 300; split++) {
            /* Piece sizes from a random scale: many tiny pieces, or a few large ones. */
            size_t scale = (size_t)1 << (rng_next() % 18), at = 0;
            uint32_t crc = RCCI_CRC32C_INIT;
            int pieces = 0;
            while (at < len) {
                size_t piece = (size_t)(rng_next() % (scale + 1));
                if (piece > len - at)
                    piece = len - at;
                crc = im[k].fn(crc, data + at, piece);
                at += piece;
                pieces++;
            }
            ck_assert_msg(crc == whole, "%s in %d pieces (scale %zu): 0x%08X, expected 0x%08X",
                          im[k].name, pieces, scale, crc, whole);
        }
    }
    /* Pieces may also go through different implementations. */
    if (n == 3) {
        uint32_t crc = rcci_crc32c_update_portable(0, data, 1000);
        crc = rcci_crc32c_hw()(crc, data + 1000, 100000);
        crc = rcci_crc32c_update_portable(crc, data + 101000, len - 101000);
        ck_assert_uint_eq(crc, whole);
    }
    free(data);
}
END_TEST

static Suite *crc32c_suite(void)
{
    Suite *s = suite_create("crc32c");
    TCase *tc = tcase_create("crc32c");
    printf("crc32c: rcci_crc32c_update takes the %s path%s\n", rcci_crc32c_impl(),
           rcci_crc32c_hw() ? "" : " (no SSE4.2 here: the hardware path is not tested)");
    tcase_add_test(tc, published_vectors);
    tcase_add_test(tc, empty_keeps_the_value);
    tcase_add_test(tc, paths_agree_short);
    tcase_add_test(tc, paths_agree_long);
    tcase_add_test(tc, pieces_equal_whole);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(crc32c_suite)
