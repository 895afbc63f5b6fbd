/*
 * Unit tests for the host reductions (lib/reduce_cpu.c).
 *
 * Every result is checked against a reference written independently here: integers in 128-bit
 * modular arithmetic, floats in double with the 16-bit types decoded and rounded through
 * ldexp/frexp/rint rather than bit tricks. A sum or product computed in double and then rounded
 * to the element type is the correctly rounded one (double has at least 2p+2 bits for each
 * type's p bits), and so is the library's float32 arithmetic for fp16/bf16 (24 >= 2*11+2), so
 * the two must agree bit for bit. AVG follows the documented float32 recipe instead.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check_main.h"

#include "reduce.h"

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

#define GUARD 16     /* elements after the end of dst that must not change */
#define PAIR_N 67    /* elements in the special-value runs: vector body plus a tail */
#define CANARY 0xa5u /* byte pattern of the guard elements */

static const char *const dt_names[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                       "uint64", "float16", "float32", "float64", "bfloat16"};
static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};

static size_t dt_size(rcc_datatype_t dt)
{
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return sizes[dt];
}

static int dt_is_int(rcc_datatype_t dt)
{
    return dt <= RCC_UINT64;
}

/* ---------------------------------------------------------------------------
 * Random numbers (splitmix64: small, fixed seed, the same on every run)
 * ------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---------------------------------------------------------------------------
 * Reference 16-bit float formats, by value
 * ------------------------------------------------------------------------- */

static int half_is_nan(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
}

static int bf16_is_nan(uint16_t h)
{
    return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0;
}

/* Value of a binary16: 5-bit exponent (bias 15), 10-bit fraction. */
static double ref_half_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -24);
    else
        v = ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Value of a bfloat16: 8-bit exponent (bias 127), 7-bit fraction. */
static double ref_bf16_value(uint16_t h)
{
    int e = (h >> 7) & 0xff, m = h & 0x7f;
    double v;
    if (e == 0xff)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -133);
    else
        v = ldexp(m + 128, e - 134);
    return (h & 0x8000) ? -v : v;
}

/* Rounds x to `prec` significant bits, nearest-even (rint in the default mode), with gradual
 * underflow below 2^emin. No overflow handling: the caller compares against its limit. */
static double ref_round_prec(double x, int prec, int emin)
{
    if (x == 0 || isinf(x) || isnan(x))
        return x;
    int e;
    frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
    int q = e - prec;
    if (q < emin - prec + 1)
        q = emin - prec + 1;
    return ldexp(rint(ldexp(x, -q)), q);
}

static uint16_t ref_round_half(double x)
{
    if (isnan(x))
        return 0x7e00;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double r = fabs(ref_round_prec(x, 11, -14));
    if (r >= 65536.0)
        return sign | 0x7c00;
    if (r < ldexp(1, -14))
        return sign | (uint16_t)ldexp(r, 24);
    int e = ilogb(r);
    return sign | (uint16_t)((e + 15) << 10) | (uint16_t)(ldexp(r, 10 - e) - 1024);
}

static uint16_t ref_round_bf16(double x)
{
    if (isnan(x))
        return 0x7fc0;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double r = fabs(ref_round_prec(x, 8, -126));
    if (r >= ldexp(1, 128))
        return sign | 0x7f80;
    if (r < ldexp(1, -126))
        return sign | (uint16_t)ldexp(r, 133);
    int e = ilogb(r);
    return sign | (uint16_t)((e + 127) << 7) | (uint16_t)(ldexp(r, 7 - e) - 128);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---------------------------------------------------------------------------
 * Element access
 * ------------------------------------------------------------------------- */

static i128 ld_int(const void *p, size_t i, rcc_datatype_t dt)
{
    switch (dt) {
    case RCC_INT8: return ((const int8_t *)p)[i];
    case RCC_UINT8: return ((const uint8_t *)p)[i];
    case RCC_INT32: return ((const int32_t *)p)[i];
    case RCC_UINT32: return ((const uint32_t *)p)[i];
    case RCC_INT64: return ((const int64_t *)p)[i];
    default: return ((const uint64_t *)p)[i];
    }
}

static double ld_float(const void *p, size_t i, rcc_datatype_t dt)
{
    switch (dt) {
    case RCC_FLOAT16: return ref_half_value(((const uint16_t *)p)[i]);
    case RCC_BFLOAT16: return ref_bf16_value(((const uint16_t *)p)[i]);
    case RCC_FLOAT32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

/* Raw bits of element i, for messages and exact comparison. */
static uint64_t ld_bits(const void *p, size_t i, rcc_datatype_t dt)
{
    uint64_t v = 0;
    memcpy(&v, (const char *)p + i * dt_size(dt), dt_size(dt));
    return v;
}

static int int_bits(rcc_datatype_t dt)
{
    return (int)dt_size(dt) * 8;
}

static int int_signed(rcc_datatype_t dt)
{
    return dt == RCC_INT8 || dt == RCC_INT32 || dt == RCC_INT64;
}

/* Reduces v modulo 2^bits into the type's range. */
static i128 ref_wrap(u128 v, rcc_datatype_t dt)
{
    int bits = int_bits(dt);
    v &= ((u128)1 << bits) - 1;
    if (int_signed(dt) && ((v >> (bits - 1)) & 1))
        return (i128)v - ((i128)1 << bits);
    return (i128)v;
}

/* Division truncating toward zero, spelled out on magnitudes. */
static i128 ref_trunc_div(i128 s, int d)
{
    i128 mag = s < 0 ? -s : s;
    i128 q = mag / d;
    return s < 0 ? -q : q;
}

/* ---------------------------------------------------------------------------
 * Reference reductions
 * ------------------------------------------------------------------------- */

static i128 ref_int(rcc_redop_t op, i128 x, i128 y, int d, rcc_datatype_t dt)
{
    switch (op) {
    case RCC_SUM: return ref_wrap((u128)x + (u128)y, dt);
    case RCC_PROD: return ref_wrap((u128)x * (u128)y, dt);
    case RCC_MAX: return x < y ? y : x;
    case RCC_MIN: return y < x ? y : x;
    default: {
        i128 s = ref_wrap((u128)x + (u128)y, dt);
        return d > 1 ? ref_trunc_div(s, d) : s;
    }
    }
}

/* The combined value before the final rounding to the element type. AVG follows the documented
 * recipe for the narrower types: sum rounded to float, quotient rounded to float. */
static double ref_float(rcc_redop_t op, double x, double y, int d, rcc_datatype_t dt)
{
    switch (op) {
    case RCC_SUM: return x + y;
    case RCC_PROD: return x * y;
    case RCC_MAX:
        if (isnan(x) || isnan(y))
            return NAN;
        return x < y ? y : x;
    case RCC_MIN:
        if (isnan(x) || isnan(y))
            return NAN;
        return y < x ? y : x;
    default:
        if (d <= 1)
            return x + y;
        if (dt == RCC_FLOAT64)
            return (x + y) / d;
        return (float)((double)(float)(x + y) / d);
    }
}

/* Bits of v rounded to dt. */
static uint64_t ref_store_float(double v, rcc_datatype_t dt)
{
    switch (dt) {
    case RCC_FLOAT16: return ref_round_half(v);
    case RCC_BFLOAT16: return ref_round_bf16(v);
    case RCC_FLOAT32: return f32_bits((float)v);
    default: {
        uint64_t u;
        memcpy(&u, &v, sizeof u);
        return u;
    }
    }
}

static int bits_is_nan(uint64_t b, rcc_datatype_t dt)
{
    switch (dt) {
    case RCC_FLOAT16: return half_is_nan((uint16_t)b);
    case RCC_BFLOAT16: return bf16_is_nan((uint16_t)b);
    case RCC_FLOAT32: return isnan(f32_from_bits((uint32_t)b));
    default: {
        double v;
        memcpy(&v, &b, sizeof v);
        return isnan(v);
    }
    }
}

/* Exact bits, except that any NaN matches any NaN, and MAX/MIN of +0 and -0 may give either. */
static int float_matches(uint64_t got, uint64_t want, rcc_datatype_t dt, rcc_redop_t op)
{
    if (got == want)
        return 1;
    if (bits_is_nan(got, dt) && bits_is_nan(want, dt))
        return 1;
    if (op == RCC_MAX || op == RCC_MIN) {
        uint64_t sign = 1ull << (dt_size(dt) * 8 - 1);
        return ((got | want) & ~sign) == 0;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Test data
 * ------------------------------------------------------------------------- */

/* Random elements: half of them arbitrary bit patterns (wrapping, NaN, inf, subnormals, huge
 * and tiny floats), half of them moderate values where sums and averages round in interesting
 * ways and equal values meet. */
static void fill_random(void *p, size_t n, rcc_datatype_t dt)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng();
        int moderate = (int)(r & 1);
        r >>= 1;
        switch (dt) {
        case RCC_FLOAT16: {
            uint16_t h = (uint16_t)r;
            if (moderate) /* exponent 12..19: values 2^-3 .. 2^5 */
                h = (uint16_t)((h & 0x83ff) | ((12 + ((r >> 16) & 7)) << 10));
            ((uint16_t *)p)[i] = h;
            break;
        }
        case RCC_BFLOAT16: {
            uint16_t h = (uint16_t)r;
            if (moderate) /* exponent 124..131 */
                h = (uint16_t)((h & 0x807f) | ((124 + ((r >> 16) & 7)) << 7));
            ((uint16_t *)p)[i] = h;
            break;
        }
        case RCC_FLOAT32:
            ((float *)p)[i] =
                moderate ? (float)((int)(r % 20001) - 10000) / 64.0f : f32_from_bits((uint32_t)r);
            break;
        case RCC_FLOAT64: {
            double v = (double)((int64_t)(r % 2000001) - 1000000) / 1024.0;
            if (!moderate) {
                uint64_t bits = rng();
                memcpy(&v, &bits, sizeof v);
            }
            ((double *)p)[i] = v;
            break;
        }
        default: {
            uint64_t v = moderate ? (uint64_t)((int64_t)(r % 41) - 20) : rng();
            memcpy((char *)p + i * dt_size(dt), &v, dt_size(dt)); /* little-endian low bytes */
            break;
        }
        }
    }
}

/* ---------------------------------------------------------------------------
 * Every dtype x op, odd lengths, misaligned starts and aliasing
 * ------------------------------------------------------------------------- */

static const size_t lengths[] = {0, 1, 7, 1023, 4097};
static const int divisors[] = {0, 1, 2, 3, 7, 129};

enum { ALIAS_NONE, ALIAS_A, ALIAS_B, ALIAS_COUNT };

static void check_reduce_case(rcc_datatype_t dt, rcc_redop_t op, size_t n, int divisor, int alias,
                              size_t offset)
{
    size_t es = dt_size(dt);
    size_t cap = n + GUARD + offset;
    char *abuf = malloc(cap * es), *bbuf = malloc(cap * es), *dbuf = malloc(cap * es);
    char *ca = malloc((n + 1) * es), *cb = malloc((n + 1) * es);
    ck_assert(abuf && bbuf && dbuf && ca && cb);
    memset(abuf, CANARY, cap * es);
    memset(bbuf, CANARY, cap * es);
    memset(dbuf, CANARY, cap * es);
    char *a = abuf + offset * es, *b = bbuf + offset * es;
    fill_random(a, n, dt);
    fill_random(b, n, dt);
    memcpy(ca, a, n * es);
    memcpy(cb, b, n * es);
    char *dst = alias == ALIAS_A ? a : alias == ALIAS_B ? b : dbuf + offset * es;

    rcci_reduce(dst, a, b, n, dt, op, divisor);

    for (size_t i = 0; i < n; i++) {
        uint64_t got = ld_bits(dst, i, dt);
        if (dt_is_int(dt)) {
            i128 want = ref_int(op, ld_int(ca, i, dt), ld_int(cb, i, dt), divisor, dt);
            if (ld_int(dst, i, dt) != want)
                ck_abort_msg("%s %s n=%zu d=%d alias=%d off=%zu: [%zu] a=%#llx b=%#llx got %#llx "
                             "want %lld",
                             dt_names[dt], op_names[op], n, divisor, alias, offset, i,
                             (unsigned long long)ld_bits(ca, i, dt),
                             (unsigned long long)ld_bits(cb, i, dt), (unsigned long long)got,
                             (long long)want);
        } else {
            double v = ref_float(op, ld_float(ca, i, dt), ld_float(cb, i, dt), divisor, dt);
            uint64_t want = ref_store_float(v, dt);
            if (!float_matches(got, want, dt, op))
                ck_abort_msg("%s %s n=%zu d=%d alias=%d off=%zu: [%zu] a=%#llx b=%#llx got %#llx "
                             "want %#llx",
                             dt_names[dt], op_names[op], n, divisor, alias, offset, i,
                             (unsigned long long)ld_bits(ca, i, dt),
                             (unsigned long long)ld_bits(cb, i, dt), (unsigned long long)got,
                             (unsigned long long)want);
        }
    }
    /* The input that is not dst is left alone; nothing past n is written. */
    if (alias != ALIAS_A)
        ck_assert_msg(memcmp(a, ca, n * es) == 0, "%s %s: a modified", dt_names[dt], op_names[op]);
    if (alias != ALIAS_B)
        ck_assert_msg(memcmp(b, cb, n * es) == 0, "%s %s: b modified", dt_names[dt], op_names[op]);
    for (size_t i = 0; i < GUARD * es; i++)
        ck_assert_msg((unsigned char)dst[n * es + i] == CANARY, "%s %s n=%zu: wrote past the end",
                      dt_names[dt], op_names[op], n);
    free(abuf);
    free(bbuf);
    free(dbuf);
    free(ca);
    free(cb);
}

/* One dtype per loop iteration (_i is the dtype), so that a failure names it. */
START_TEST(test_every_op)
{
    rcc_datatype_t dt = (rcc_datatype_t)_i;
    rng_state = 0x1234u + (uint64_t)_i;
    for (int op = 0; op < RCC_NUM_OPS; op++)
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
            for (int alias = 0; alias < ALIAS_COUNT; alias++)
                for (size_t off = 0; off < 2; off++) {
                    if (op != RCC_AVG) {
                        /* The divisor means nothing to other ops. */
                        check_reduce_case(dt, op, lengths[li], 1 + (int)(li % 3), alias, off);
                        continue;
                    }
                    for (size_t di = 0; di < sizeof divisors / sizeof divisors[0]; di++)
                        check_reduce_case(dt, op, lengths[li], divisors[di], alias, off);
                }
}
END_TEST

START_TEST(test_null_empty)
{
    /* n == 0 touches nothing, so NULL buffers are fine. */
    for (int dt = 0; dt < RCC_NUM_DATATYPES; dt++) {
        for (int op = 0; op < RCC_NUM_OPS; op++)
            rcci_reduce(NULL, NULL, NULL, 0, dt, op, 4);
        rcci_divide(NULL, NULL, 0, dt, 4);
    }
}
END_TEST

/* ---------------------------------------------------------------------------
 * rcci_divide
 * ------------------------------------------------------------------------- */

START_TEST(test_divide)
{
    rcc_datatype_t dt = (rcc_datatype_t)_i;
    rng_state = 0x5678u + (uint64_t)_i;
    static const int divs[] = {-3, 0, 1, 2, 3, 7, 129, 1000003};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (size_t di = 0; di < sizeof divs / sizeof divs[0]; di++)
            for (int inplace = 0; inplace < 2; inplace++) {
                size_t n = lengths[li], es = dt_size(dt);
                int d = divs[di];
                char *src = malloc((n + GUARD) * es), *dbuf = malloc((n + GUARD) * es);
                char *copy = malloc((n + 1) * es);
                ck_assert(src && dbuf && copy);
                memset(src, CANARY, (n + GUARD) * es);
                memset(dbuf, CANARY, (n + GUARD) * es);
                fill_random(src, n, dt);
                memcpy(copy, src, n * es);
                char *dst = inplace ? src : dbuf;
                rcci_divide(dst, src, n, dt, d);
                for (size_t i = 0; i < n; i++) {
                    uint64_t got = ld_bits(dst, i, dt), want;
                    int ok;
                    if (d <= 1) {
                        /* Nothing to divide by: a copy. */
                        want = ld_bits(copy, i, dt);
                        ok = got == want;
                    } else if (dt_is_int(dt)) {
                        i128 w = ref_trunc_div(ld_int(copy, i, dt), d);
                        want = (uint64_t)w;
                        ok = ld_int(dst, i, dt) == w;
                    } else {
                        double x = ld_float(copy, i, dt);
                        double q = dt == RCC_FLOAT64 ? x / d : (float)(x / (float)d);
                        want = ref_store_float(q, dt);
                        ok = float_matches(got, want, dt, RCC_SUM);
                    }
                    if (!ok)
                        ck_abort_msg("divide %s n=%zu d=%d inplace=%d: [%zu] x=%#llx got %#llx "
                                     "want %#llx",
                                     dt_names[dt], n, d, inplace, i,
                                     (unsigned long long)ld_bits(copy, i, dt),
                                     (unsigned long long)got, (unsigned long long)want);
                }
                for (size_t i = 0; i < GUARD * es; i++)
                    ck_assert((unsigned char)dst[n * es + i] == CANARY);
                free(src);
                free(dbuf);
                free(copy);
            }
}
END_TEST

/* ---------------------------------------------------------------------------
 * Special values: one pair of operands repeated over PAIR_N elements, so that the vector body
 * and the scalar tail both see it
 * ------------------------------------------------------------------------- */

static void run_pair(rcc_datatype_t dt, rcc_redop_t op, int d, const void *x, const void *y,
                     void *out)
{
    size_t es = dt_size(dt);
    char a[PAIR_N * 8], b[PAIR_N * 8];
    for (size_t i = 0; i < PAIR_N; i++) {
        memcpy(a + i * es, x, es);
        memcpy(b + i * es, y, es);
    }
    rcci_reduce(out, a, b, PAIR_N, dt, op, d);
}

/* Runs x op y and checks every element's bits with `pred`. */
#define CHECK_PAIR(dt, T, op, d, x, y, pred)                                                       \
    do {                                                                                           \
        T x_ = (x), y_ = (y), out_[PAIR_N];                                                        \
        run_pair(dt, op, d, &x_, &y_, out_);                                                       \
        for (size_t i_ = 0; i_ < PAIR_N; i_++) {                                                   \
            T r = out_[i_];                                                                        \
            ck_assert_msg(pred, "%s %s(%s, %s) d=%d [%zu]: failed %s", dt_names[dt], op_names[op], \
                          #x, #y, d, i_, #pred);                                                   \
        }                                                                                          \
    } while (0)

START_TEST(test_float_specials)
{
    static const rcc_redop_t minmax[] = {RCC_MAX, RCC_MIN};
    for (int k = 0; k < 2; k++) {
        rcc_redop_t op = minmax[k];
        CHECK_PAIR(RCC_FLOAT32, float, op, 1, NAN, 1.0f, isnan(r));
        CHECK_PAIR(RCC_FLOAT32, float, op, 1, 1.0f, NAN, isnan(r));
        CHECK_PAIR(RCC_FLOAT32, float, op, 1, -INFINITY, NAN, isnan(r));
        CHECK_PAIR(RCC_FLOAT32, float, op, 1, NAN, INFINITY, isnan(r));
        CHECK_PAIR(RCC_FLOAT32, float, op, 1, NAN, NAN, isnan(r));
        CHECK_PAIR(RCC_FLOAT64, double, op, 1, NAN, 1.0, isnan(r));
        CHECK_PAIR(RCC_FLOAT64, double, op, 1, 1.0, NAN, isnan(r));
        CHECK_PAIR(RCC_FLOAT64, double, op, 1, -INFINITY, NAN, isnan(r));
        CHECK_PAIR(RCC_FLOAT16, uint16_t, op, 1, 0x7e00, 0x3c00, half_is_nan(r));
        CHECK_PAIR(RCC_FLOAT16, uint16_t, op, 1, 0x3c00, 0x7e00, half_is_nan(r));
        CHECK_PAIR(RCC_FLOAT16, uint16_t, op, 1, 0xfc00, 0x7d00, half_is_nan(r)); /* sNaN */
        CHECK_PAIR(RCC_BFLOAT16, uint16_t, op, 1, 0x7fc0, 0x3f80, bf16_is_nan(r));
        CHECK_PAIR(RCC_BFLOAT16, uint16_t, op, 1, 0x3f80, 0xffc0, bf16_is_nan(r));
    }
    /* Infinities win MAX/MIN when there is no NaN. */
    CHECK_PAIR(RCC_FLOAT32, float, RCC_MAX, 1, INFINITY, 1.0f, r == INFINITY);
    CHECK_PAIR(RCC_FLOAT32, float, RCC_MIN, 1, 1.0f, -INFINITY, r == -INFINITY);
    CHECK_PAIR(RCC_FLOAT64, double, RCC_MIN, 1, -INFINITY, 1.0, r == -INFINITY);
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_MAX, 1, 0xfc00, 0x7c00, r == 0x7c00);
    CHECK_PAIR(RCC_BFLOAT16, uint16_t, RCC_MIN, 1, 0xff80, 0x7f80, r == 0xff80);

    /* inf + -inf, inf * 0, and NaN through arithmetic. */
    CHECK_PAIR(RCC_FLOAT32, float, RCC_SUM, 1, INFINITY, -INFINITY, isnan(r));
    CHECK_PAIR(RCC_FLOAT32, float, RCC_PROD, 1, INFINITY, 0.0f, isnan(r));
    CHECK_PAIR(RCC_FLOAT32, float, RCC_AVG, 2, INFINITY, -INFINITY, isnan(r));
    CHECK_PAIR(RCC_FLOAT32, float, RCC_SUM, 1, NAN, 1.0f, isnan(r));
    CHECK_PAIR(RCC_FLOAT64, double, RCC_SUM, 1, INFINITY, -INFINITY, isnan(r));
    CHECK_PAIR(RCC_FLOAT64, double, RCC_PROD, 1, 0.0, -INFINITY, isnan(r));
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0x7c00, 0xfc00, half_is_nan(r));
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_PROD, 1, 0x7c00, 0x0000, half_is_nan(r));
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0x7e00, 0x3c00, half_is_nan(r));
    CHECK_PAIR(RCC_BFLOAT16, uint16_t, RCC_SUM, 1, 0x7f80, 0xff80, bf16_is_nan(r));
    CHECK_PAIR(RCC_BFLOAT16, uint16_t, RCC_AVG, 3, 0x7f80, 0xff80, bf16_is_nan(r));

    /* float16 keeps a NaN operand's sign and payload, made quiet; a's when both are NaN, so that
     * the portable and F16C paths agree whatever order the compiler gave the operands. */
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0x3c00, 0x7c05, r == 0x7e05);
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0x7e11, 0xfe22, r == 0x7e11);
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0xfc01, 0x7e22, r == 0xfe01); /* sNaN a */
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_PROD, 1, 0x7e11, 0x7c01, r == 0x7e11);
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_AVG, 3, 0xfe33, 0x7e22, r == 0xfe33);
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_MAX, 1, 0x7c01, 0x7e22, r == 0x7c01); /* as stored */

    /* Overflow to infinity. */
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0x7bff, 0x7bff, r == 0x7c00); /* 65504*2 */
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0xfbff, 0xfbff, r == 0xfc00);
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_PROD, 1, 0x5c00, 0x5c00, r == 0x7c00); /* 256^2 */
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0x7bff, 0x4b00, r == 0x7bff);  /* +14 */
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0x7bff, 0x4c00, r == 0x7c00);  /* +16: tie */
    CHECK_PAIR(RCC_BFLOAT16, uint16_t, RCC_SUM, 1, 0x7f7f, 0x7f7f, r == 0x7f80);
    CHECK_PAIR(RCC_FLOAT32, float, RCC_SUM, 1, FLT_MAX, FLT_MAX, r == INFINITY);
    CHECK_PAIR(RCC_FLOAT64, double, RCC_PROD, 1, DBL_MAX, -2.0, r == -INFINITY);

    /* Subnormal fp16 arithmetic stays exact. */
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0x0001, 0x0001, r == 0x0002);
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_SUM, 1, 0x03ff, 0x0001, r == 0x0400);
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_AVG, 2, 0x0003, 0x0000, r == 0x0002); /* 1.5 ulp */
}
END_TEST

/* The average is rounded to fp16 once, after the float32 division, never in between. */
START_TEST(test_half_avg_rounds_once)
{
    /* (65504 + 65504) / 2: the sum would overflow fp16, but not float32. */
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_AVG, 2, 0x7bff, 0x7bff, r == 0x7bff);
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_AVG, 4, 0x7bff, 0x7bff, r == ref_round_half(32752.0));
    /* (2048 + 1) / 3 = 683 exactly; rounding 2049 to fp16 first (2048) would give 682.5. */
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_AVG, 3, 0x6800, 0x3c00, r == ref_round_half(683.0));
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_AVG, 3, 0x6800, 0x3c00, r != ref_round_half(682.5));
    /* (1 + 2^-10) / 3 is rounded once from the float quotient. */
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_AVG, 3, 0x3c00, 0x1400,
               r == ref_round_half((float)(1.0009765625f / 3.0f)));
    /* bf16: (256 + 1) / 3 = 85.67 -> 85.5. */
    CHECK_PAIR(RCC_BFLOAT16, uint16_t, RCC_AVG, 3, 0x4380, 0x3f80, r == ref_round_bf16(85.5));
    /* Division, not multiplication by 1/d, so representable averages are exact: in float
     * 21 * (1/7) is 3.0000002, and in double 49 * (1/49) is 0.99999999999999989. */
    CHECK_PAIR(RCC_FLOAT32, float, RCC_AVG, 7, 20.0f, 1.0f, r == 3.0f);
    CHECK_PAIR(RCC_FLOAT64, double, RCC_AVG, 49, 48.0, 1.0, r == 1.0);
    CHECK_PAIR(RCC_FLOAT16, uint16_t, RCC_AVG, 7, 0x4d00, 0x3c00, r == 0x4200); /* 21/7 = 3 */
    CHECK_PAIR(RCC_BFLOAT16, uint16_t, RCC_AVG, 7, 0x41a0, 0x3f80, r == 0x4040);
}
END_TEST

START_TEST(test_int_wrap)
{
    CHECK_PAIR(RCC_INT8, int8_t, RCC_SUM, 1, 127, 1, r == -128);
    CHECK_PAIR(RCC_INT8, int8_t, RCC_SUM, 1, -128, -1, r == 127);
    CHECK_PAIR(RCC_INT8, int8_t, RCC_PROD, 1, -128, -1, r == -128);
    CHECK_PAIR(RCC_INT8, int8_t, RCC_PROD, 1, 16, 16, r == 0);
    CHECK_PAIR(RCC_INT8, int8_t, RCC_PROD, 1, 100, 3, r == 44);
    CHECK_PAIR(RCC_UINT8, uint8_t, RCC_SUM, 1, 255, 1, r == 0);
    CHECK_PAIR(RCC_UINT8, uint8_t, RCC_PROD, 1, 255, 2, r == 254);
    CHECK_PAIR(RCC_UINT8, uint8_t, RCC_PROD, 1, 255, 255, r == 1);
    CHECK_PAIR(RCC_INT32, int32_t, RCC_SUM, 1, INT32_MAX, 1, r == INT32_MIN);
    CHECK_PAIR(RCC_INT32, int32_t, RCC_PROD, 1, INT32_MIN, -1, r == INT32_MIN);
    CHECK_PAIR(RCC_INT32, int32_t, RCC_PROD, 1, 65536, 65536, r == 0);
    CHECK_PAIR(RCC_UINT32, uint32_t, RCC_SUM, 1, UINT32_MAX, 2, r == 1);
    CHECK_PAIR(RCC_UINT32, uint32_t, RCC_PROD, 1, UINT32_MAX, UINT32_MAX, r == 1);
    CHECK_PAIR(RCC_INT64, int64_t, RCC_SUM, 1, INT64_MAX, 1, r == INT64_MIN);
    CHECK_PAIR(RCC_INT64, int64_t, RCC_PROD, 1, INT64_MIN, -1, r == INT64_MIN);
    CHECK_PAIR(RCC_INT64, int64_t, RCC_PROD, 1, INT64_MAX, 2, r == -2);
    CHECK_PAIR(RCC_UINT64, uint64_t, RCC_SUM, 1, UINT64_MAX, 1, r == 0);
    CHECK_PAIR(RCC_UINT64, uint64_t, RCC_PROD, 1, UINT64_MAX, UINT64_MAX, r == 1);
    /* Signedness of MAX/MIN. */
    CHECK_PAIR(RCC_INT8, int8_t, RCC_MAX, 1, -1, 1, r == 1);
    CHECK_PAIR(RCC_UINT8, uint8_t, RCC_MAX, 1, 255, 1, r == 255);
    CHECK_PAIR(RCC_INT64, int64_t, RCC_MIN, 1, INT64_MIN, 0, r == INT64_MIN);
    CHECK_PAIR(RCC_UINT64, uint64_t, RCC_MIN, 1, UINT64_MAX, 0, r == 0);
    CHECK_PAIR(RCC_UINT32, uint32_t, RCC_MAX, 1, 0x80000000u, 1, r == 0x80000000u);
}
END_TEST

START_TEST(test_int_avg)
{
    /* C division truncates toward zero: -7 / 2 == -3, not -4. */
    CHECK_PAIR(RCC_INT32, int32_t, RCC_AVG, 2, -7, 0, r == -3);
    CHECK_PAIR(RCC_INT32, int32_t, RCC_AVG, 2, 7, 0, r == 3);
    CHECK_PAIR(RCC_INT32, int32_t, RCC_AVG, 2, -7, -8, r == -7);
    CHECK_PAIR(RCC_INT32, int32_t, RCC_AVG, 3, -1, -1, r == 0);
    CHECK_PAIR(RCC_INT32, int32_t, RCC_AVG, 2, INT32_MIN, 0, r == INT32_MIN / 2);
    CHECK_PAIR(RCC_INT32, int32_t, RCC_AVG, 3, INT32_MAX, 0, r == INT32_MAX / 3);
    CHECK_PAIR(RCC_INT8, int8_t, RCC_AVG, 2, -7, 0, r == -3);
    CHECK_PAIR(RCC_INT64, int64_t, RCC_AVG, 2, -7, 0, r == -3);
    CHECK_PAIR(RCC_INT64, int64_t, RCC_AVG, 3, INT64_MIN, 0, r == INT64_MIN / 3);
    /* The wrapped sum is what gets divided. */
    CHECK_PAIR(RCC_INT8, int8_t, RCC_AVG, 2, 100, 100, r == -28);  /* 200 wraps to -56 */
    CHECK_PAIR(RCC_UINT8, uint8_t, RCC_AVG, 2, 200, 100, r == 22); /* 300 wraps to 44 */
    CHECK_PAIR(RCC_INT32, int32_t, RCC_AVG, 2, INT32_MAX, 1, r == INT32_MIN / 2);
    CHECK_PAIR(RCC_UINT64, uint64_t, RCC_AVG, 2, UINT64_MAX, 1, r == 0);
    /* Large unsigned and divisors beyond the type's range. */
    CHECK_PAIR(RCC_UINT32, uint32_t, RCC_AVG, 2, UINT32_MAX, 0, r == 0x7fffffffu);
    CHECK_PAIR(RCC_UINT64, uint64_t, RCC_AVG, 3, UINT64_MAX, 0, r == UINT64_MAX / 3);
    CHECK_PAIR(RCC_INT8, int8_t, RCC_AVG, 300, 100, 27, r == 0);
    CHECK_PAIR(RCC_INT8, int8_t, RCC_AVG, 3, -100, -28, r == -42);
    CHECK_PAIR(RCC_UINT8, uint8_t, RCC_AVG, 200, 250, 5, r == 1);
    /* AVG without a divisor above 1 is SUM. */
    CHECK_PAIR(RCC_INT32, int32_t, RCC_AVG, 1, -7, 2, r == -5);
    CHECK_PAIR(RCC_INT32, int32_t, RCC_AVG, 0, -7, 2, r == -5);
    CHECK_PAIR(RCC_INT32, int32_t, RCC_AVG, -2, -7, 2, r == -5);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Conversions
 * ------------------------------------------------------------------------- */

START_TEST(test_half_roundtrip_exhaustive)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = rcci_half_to_float((uint16_t)h);
        uint16_t back = rcci_float_to_half(f);
        if (half_is_nan((uint16_t)h)) {
            /* NaN stays NaN, same sign and payload, made quiet. */
            ck_assert_msg(isnan(f), "half %#x -> %a is not NaN", h, f);
            ck_assert_msg(back == (h | 0x0200), "half NaN %#x -> %#x", h, back);
            continue;
        }
        double want = ref_half_value((uint16_t)h);
        ck_assert_msg((double)f == want && !signbit(f) == !(h & 0x8000), "half %#x -> %a, want %a",
                      h, f, want);
        ck_assert_msg(back == h, "half %#x -> %a -> %#x", h, f, back);
    }
}
END_TEST

START_TEST(test_bf16_roundtrip_exhaustive)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = rcci_bf16_to_float((uint16_t)h);
        uint16_t back = rcci_float_to_bf16(f);
        if (bf16_is_nan((uint16_t)h)) {
            ck_assert_msg(isnan(f), "bf16 %#x -> %a is not NaN", h, f);
            ck_assert_msg(back == (h | 0x0040), "bf16 NaN %#x -> %#x", h, back);
            continue;
        }
        double want = ref_bf16_value((uint16_t)h);
        ck_assert_msg((double)f == want && !signbit(f) == !(h & 0x8000), "bf16 %#x -> %a, want %a",
                      h, f, want);
        ck_assert_msg(back == h, "bf16 %#x -> %a -> %#x", h, f, back);
    }
}
END_TEST

/* Every midpoint between two neighbouring positive halves (and the one between the largest
 * finite half and 2^16, which must go to inf) rounds to the even one; a hair either side goes
 * to the nearer one. The same with the signs flipped. */
START_TEST(test_half_ties)
{
    for (uint16_t h = 0; h <= 0x7bff; h++) {
        double lo = ref_half_value(h);
        double hi = h == 0x7bff ? 65536.0 : ref_half_value((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2);
        ck_assert((double)mid == (lo + hi) / 2); /* exact in float */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
        uint16_t got = rcci_float_to_half(mid);
        ck_assert_msg(got == even, "tie %a -> %#x, want %#x", mid, got, even);
        ck_assert_msg(rcci_float_to_half(-mid) == (even | 0x8000), "tie %a", -mid);
        ck_assert_msg(rcci_float_to_half(nextafterf(mid, 0)) == h, "below tie %a", mid);
        ck_assert_msg(rcci_float_to_half(nextafterf(mid, INFINITY)) == h + 1, "above tie %a", mid);
        ck_assert_msg(rcci_float_to_half(-nextafterf(mid, INFINITY)) == ((h + 1) | 0x8000),
                      "above tie %a", -mid);
    }
}
END_TEST

START_TEST(test_bf16_ties)
{
    for (uint16_t h = 0; h <= 0x7f7f; h++) {
        double lo = ref_bf16_value(h);
        double hi = h == 0x7f7f ? ldexp(1, 128) : ref_bf16_value((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2);
        ck_assert((double)mid == (lo + hi) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
        uint16_t got = rcci_float_to_bf16(mid);
        ck_assert_msg(got == even, "tie %a -> %#x, want %#x", mid, got, even);
        ck_assert_msg(rcci_float_to_bf16(-mid) == (even | 0x8000), "tie %a", -mid);
        ck_assert_msg(rcci_float_to_bf16(nextafterf(mid, 0)) == h, "below tie %a", mid);
        ck_assert_msg(rcci_float_to_bf16(nextafterf(mid, INFINITY)) == h + 1, "above tie %a", mid);
    }
}
END_TEST

START_TEST(test_half_edges)
{
    /* Overflow: 65520 is the midpoint between 65504 and 2^16 and rounds (to even) to inf. */
    ck_assert_uint_eq(rcci_float_to_half(65520.0f), 0x7c00);
    ck_assert_uint_eq(rcci_float_to_half(65519.0f), 0x7bff);
    ck_assert_uint_eq(rcci_float_to_half(65504.0f), 0x7bff);
    ck_assert_uint_eq(rcci_float_to_half(-65520.0f), 0xfc00);
    ck_assert_uint_eq(rcci_float_to_half(1e6f), 0x7c00);
    ck_assert_uint_eq(rcci_float_to_half(FLT_MAX), 0x7c00);
    ck_assert_uint_eq(rcci_float_to_half(-FLT_MAX), 0xfc00);
    ck_assert_uint_eq(rcci_float_to_half(INFINITY), 0x7c00);
    ck_assert_uint_eq(rcci_float_to_half(-INFINITY), 0xfc00);
    /* Zeros and subnormals. */
    ck_assert_uint_eq(rcci_float_to_half(0.0f), 0x0000);
    ck_assert_uint_eq(rcci_float_to_half(-0.0f), 0x8000);
    ck_assert_uint_eq(rcci_float_to_half(0x1p-24f), 0x0001);
    ck_assert_uint_eq(rcci_float_to_half(-0x1p-24f), 0x8001);
    ck_assert_uint_eq(rcci_float_to_half(0x1p-25f), 0x0000); /* tie to even: 0 */
    ck_assert_uint_eq(rcci_float_to_half(-0x1p-25f), 0x8000);
    ck_assert_uint_eq(rcci_float_to_half(nextafterf(0x1p-25f, 1)), 0x0001);
    ck_assert_uint_eq(rcci_float_to_half(0x3p-25f), 0x0002);            /* tie between 1 and 2 */
    ck_assert_uint_eq(rcci_float_to_half(0x5p-25f), 0x0002);            /* tie between 2 and 3 */
    ck_assert_uint_eq(rcci_float_to_half(0x1p-14f), 0x0400);            /* smallest normal */
    ck_assert_uint_eq(rcci_float_to_half(0x1p-14f - 0x1p-25f), 0x0400); /* tie 0x3ff/0x400 */
    ck_assert_uint_eq(rcci_float_to_half(0x3ffp-24f), 0x03ff);
    ck_assert_uint_eq(rcci_float_to_half(0x1p-149f), 0x0000); /* float subnormal */
    ck_assert_uint_eq(rcci_float_to_half(-0x1p-130f), 0x8000);
    ck_assert(rcci_half_to_float(0x0001) == 0x1p-24f);
    ck_assert(rcci_half_to_float(0x03ff) == 0x3ffp-24f);
    ck_assert(rcci_half_to_float(0x8200) == -0x1p-15f);
    ck_assert(rcci_half_to_float(0x7bff) == 65504.0f);
    ck_assert(rcci_half_to_float(0xfc00) == -INFINITY);
    /* NaN never becomes inf, even when its payload is all in the dropped bits. */
    ck_assert(half_is_nan(rcci_float_to_half(f32_from_bits(0x7f800001u))));
    ck_assert(half_is_nan(rcci_float_to_half(f32_from_bits(0xff800001u))));
    ck_assert_uint_eq(rcci_float_to_half(f32_from_bits(0xff800001u)) & 0x8000, 0x8000);
    ck_assert_uint_eq(rcci_float_to_half(f32_from_bits(0x7fc00000u)), 0x7e00);
    ck_assert_uint_eq(rcci_float_to_half(f32_from_bits(0x7fa00000u)), 0x7f00); /* quieted */
    ck_assert_uint_eq(rcci_float_to_half(NAN) & 0x7e00, 0x7e00);
}
END_TEST

START_TEST(test_bf16_edges)
{
    ck_assert_uint_eq(rcci_float_to_bf16(FLT_MAX), 0x7f80);
    ck_assert_uint_eq(rcci_float_to_bf16(-FLT_MAX), 0xff80);
    ck_assert_uint_eq(rcci_float_to_bf16(INFINITY), 0x7f80);
    ck_assert_uint_eq(rcci_float_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(rcci_float_to_bf16(1.00390625f), 0x3f80); /* 1 + 2^-8: tie to even */
    ck_assert_uint_eq(rcci_float_to_bf16(1.01171875f), 0x3f82); /* 1 + 3*2^-8: tie to even */
    ck_assert_uint_eq(rcci_float_to_bf16(-0.0f), 0x8000);
    ck_assert_uint_eq(rcci_float_to_bf16(0x1p-133f), 0x0001); /* smallest subnormal */
    ck_assert_uint_eq(rcci_float_to_bf16(0x1p-134f), 0x0000); /* tie to even */
    ck_assert_uint_eq(rcci_float_to_bf16(0x3p-134f), 0x0002);
    ck_assert_uint_eq(rcci_float_to_bf16(0x1p-149f), 0x0000);
    ck_assert(rcci_bf16_to_float(0x0001) == 0x1p-133f);
    ck_assert(bf16_is_nan(rcci_float_to_bf16(f32_from_bits(0x7f800001u))));
    ck_assert_uint_eq(rcci_float_to_bf16(f32_from_bits(0xff800001u)), 0xffc0);
    ck_assert_uint_eq(rcci_float_to_bf16(f32_from_bits(0x7fc00000u)), 0x7fc0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * float16: the F16C fast path against the portable one, bit for bit
 * ------------------------------------------------------------------------- */

#define F16_ALL 65536

/* Runs op over all n elements in pieces of varying length, so that both paths' wide loops, their
 * 8-lane loops and their scalar tails all meet every kind of value. op < 0 is rcci_divide. */
static void f16_run_pieces(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n, int op,
                           int d)
{
    static const size_t pieces[] = {1, 5, 8, 9, 16, 23, 64, 127, 1000, 4099};
    for (size_t i = 0, k = 0; i < n; k++) {
        size_t len = pieces[k % (sizeof pieces / sizeof pieces[0])];
        len = len < n - i ? len : n - i;
        if (op < 0)
            rcci_divide(dst + i, a + i, len, RCC_FLOAT16, d);
        else
            rcci_reduce(dst + i, a + i, b + i, len, RCC_FLOAT16, (rcc_redop_t)op, d);
        i += len;
    }
}

/* x86 flush-to-zero and denormals-are-zero: the results must not depend on them. */
#if defined(__x86_64__) && defined(__SSE__)
#include <xmmintrin.h>
#define F16_HAVE_MXCSR 1
static unsigned f16_set_ftz_daz(int on)
{
    unsigned old = _mm_getcsr();
    _mm_setcsr(on ? old | 0x8040u : old & ~0x8040u);
    return old;
}
#endif

/* Every one of the 65536 halves as a, against a sweep of b values: the specials (zeros, the
 * subnormal range's ends, the normal range's ends, infinities, quiet and signalling NaNs of both
 * signs with small and large payloads, values whose sum or quotient rounds to a tie) and random
 * ones. b is rotated by one per round, so each a meets each b once, in every lane position. Both
 * paths run in the default floating-point mode and under FTZ/DAZ; all four must agree. */
START_TEST(test_f16_fast_matches_portable)
{
    if (!rcci_reduce_force_portable(0)) {
        printf("float16: no F16C fast path (CPU or build); nothing to compare\n");
        return;
    }
    static const uint16_t specials[] = {
        0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x0003, 0x0200, 0x03ff, 0x83ff, 0x0400,
        0x8400, 0x0401, 0x07ff, 0x1400, 0x2000, 0x3555, 0x3800, 0x3bff, 0x3c00, 0xbc00,
        0x3c01, 0x4200, 0x4248, 0x6800, 0x7800, 0x7bfe, 0x7bff, 0xfbff, 0x7c00, 0xfc00,
        0x7c01, 0xfc01, 0x7d00, 0x7dff, 0x7e00, 0xfe00, 0x7e01, 0x7f55, 0x7fff, 0xffff};
    enum { NB = 320 };
    uint16_t bv[NB];
    rng_state = 0xf16c;
    for (size_t i = 0; i < NB; i++)
        bv[i] = i < sizeof specials / sizeof specials[0] ? specials[i] : (uint16_t)rng();

    uint16_t *a = malloc(F16_ALL * 2), *b = malloc(F16_ALL * 2), *want = malloc(F16_ALL * 2);
    uint16_t *got = malloc(F16_ALL * 2);
    ck_assert(a && b && want && got);
    for (size_t i = 0; i < F16_ALL; i++)
        a[i] = (uint16_t)i;
    /* op, divisor: the four reductions, AVG by 3 (a quotient that rounds), and rcci_divide by 3
     * and by a divisor that float cannot hold exactly. */
    static const int cases[][2] = {{RCC_SUM, 1}, {RCC_PROD, 1}, {RCC_MAX, 1}, {RCC_MIN, 1},
                                   {RCC_AVG, 3}, {-1, 3},       {-1, 1000003}};
    for (size_t r = 0; r < NB; r++) {
        for (size_t i = 0; i < F16_ALL; i++)
            b[i] = bv[(i + r) % NB];
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int op = cases[c][0], d = cases[c][1];
            if (op < 0 && r > 0)
                continue; /* divide has no b */
            rcci_reduce_force_portable(1);
            f16_run_pieces(want, a, b, F16_ALL, op, d);
            int nmodes = 1;
#ifdef F16_HAVE_MXCSR
            nmodes = 2;
#endif
            for (int mode = 0; mode < nmodes * 2; mode++) {
                int fast = mode & 1, ftz = mode >> 1;
                if (!fast && !ftz)
                    continue; /* that is `want` */
#ifdef F16_HAVE_MXCSR
                unsigned csr = f16_set_ftz_daz(ftz);
#endif
                rcci_reduce_force_portable(!fast);
                f16_run_pieces(got, a, b, F16_ALL, op, d);
#ifdef F16_HAVE_MXCSR
                _mm_setcsr(csr);
#endif
                for (size_t i = 0; i < F16_ALL; i++)
                    if (got[i] != want[i])
                        ck_abort_msg("float16 %s d=%d (%s%s): [%zu] a=0x%04x b=0x%04x got 0x%04x, "
                                     "portable 0x%04x",
                                     op < 0 ? "divide" : op_names[op], d,
                                     fast ? "F16C" : "portable", ftz ? ", FTZ/DAZ" : "", i, a[i],
                                     op < 0 ? 0 : b[i], got[i], want[i]);
            }
        }
    }
    rcci_reduce_force_portable(0);
    free(a);
    free(b);
    free(want);
    free(got);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Suite
 *
 * The reduction tests run twice: on the float16 F16C fast path (where the CPU has it) and on the
 * portable path. The fixtures are checked ones, run in each test's own process. The conversion
 * tests call the scalar conversions, which have one path.
 * ------------------------------------------------------------------------- */

static void path_fast(void)
{
    rcci_reduce_force_portable(0);
}

static void path_portable(void)
{
    rcci_reduce_force_portable(1);
}

static Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");

    TCase *tc = tcase_create("conversions");
    tcase_add_test(tc, test_half_roundtrip_exhaustive);
    tcase_add_test(tc, test_bf16_roundtrip_exhaustive);
    tcase_add_test(tc, test_half_ties);
    tcase_add_test(tc, test_bf16_ties);
    tcase_add_test(tc, test_half_edges);
    tcase_add_test(tc, test_bf16_edges);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    int fast = rcci_reduce_force_portable(0);
    printf("float16 reductions: %s\n",
           fast ? "F16C fast path, then the portable path" : "portable path only (no F16C)");
    for (int pass = 0; pass < 2; pass++) {
        void (*setup)(void) = pass ? path_portable : path_fast;
        tc = tcase_create(pass ? "reduce (portable)" : "reduce (fast path)");
        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_loop_test(tc, test_every_op, 0, RCC_NUM_DATATYPES);
        tcase_add_loop_test(tc, test_divide, 0, RCC_NUM_DATATYPES);
        tcase_add_test(tc, test_null_empty);
        tcase_set_timeout(tc, 120);
        suite_add_tcase(s, tc);

        tc = tcase_create(pass ? "specials (portable)" : "specials (fast path)");
        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_test(tc, test_float_specials);
        tcase_add_test(tc, test_half_avg_rounds_once);
        tcase_add_test(tc, test_int_wrap);
        tcase_add_test(tc, test_int_avg);
        suite_add_tcase(s, tc);
    }

    tc = tcase_create("float16 paths");
    tcase_add_test(tc, test_f16_fast_matches_portable);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(reduce_suite)
