/*
 * Test data for the multi-process tests: see testdata.h.
 */
#include "testdata.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reduce.h" /* half/bfloat16 conversions, tested exhaustively in unit/ */

static int is_float_type(rcc_datatype_t dt)
{
    return dt == RCC_FLOAT16 || dt == RCC_FLOAT32 || dt == RCC_FLOAT64 || dt == RCC_BFLOAT16;
}

static int td_nranks = 8;

void td_set_nranks(int n) { td_nranks = n > 8 ? n : 8; }

/* The largest magnitude of a float input: every partial sum of td_nranks
 * inputs stays an integer the type holds exactly (bfloat16: 256, half:
 * 2048), whatever order the library adds them in. 30 up to 8 ranks. */
static int64_t td_float_bound(rcc_datatype_t dt)
{
    int64_t exact = dt == RCC_BFLOAT16 ? 256 : dt == RCC_FLOAT16 ? 2048 : (int64_t)1 << 24;
    int64_t b = exact / td_nranks;
    return b > 30 ? 30 : b > 1 ? b : 1;
}

int64_t td_gen(unsigned seed, int r, size_t i, rcc_datatype_t dt, rcc_redop_t op)
{
    size_t h = (i + (size_t)seed * 1000003u) * 2654435761u + (size_t)r * 40503u + (size_t)dt * 7u;
    if (op == RCC_PROD)
        return is_float_type(dt) ? ((h % 7 == 0)    ? 2
                                    : (h % 11 == 0) ? -1
                                                    : 1)
                                 : (int64_t)(h % 251) - 125;
    if (is_float_type(dt)) {
        int64_t b = td_float_bound(dt);
        return (int64_t)(h % (size_t)(2 * b + 1)) - b;
    }
    return (int64_t)(h % 100003) - 50001; /* wraps int8/uint8/int32 sums */
}

void td_store(void *buf, size_t i, rcc_datatype_t dt, int64_t v)
{
    switch (dt) {
    case RCC_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case RCC_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case RCC_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case RCC_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case RCC_INT64: ((int64_t *)buf)[i] = v; break;
    case RCC_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case RCC_FLOAT16: ((uint16_t *)buf)[i] = rcci_float_to_half((float)v); break;
    case RCC_BFLOAT16: ((uint16_t *)buf)[i] = rcci_float_to_bf16((float)v); break;
    case RCC_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case RCC_FLOAT64: ((double *)buf)[i] = (double)v; break;
    default: abort();
    }
}

/* td_store for every element, with the type's case taken once (the
 * multi-process suites spend much of their time making inputs). */
#define FILL_AS(T)                                                                                 \
    for (size_t j = 0; j < count; j++)                                                             \
        ((T *)buf)[j] = (T)td_gen(seed, r, start + j, dt, op);                                     \
    return;

void td_fill(void *buf, size_t start, size_t count, unsigned seed, int r, rcc_datatype_t dt,
             rcc_redop_t op)
{
    switch (dt) {
    case RCC_INT8: FILL_AS(int8_t)
    case RCC_UINT8: FILL_AS(uint8_t)
    case RCC_INT32: FILL_AS(int32_t)
    case RCC_UINT32: FILL_AS(uint32_t)
    case RCC_INT64: FILL_AS(int64_t)
    case RCC_UINT64: FILL_AS(uint64_t)
    case RCC_FLOAT32: FILL_AS(float)
    case RCC_FLOAT64: FILL_AS(double)
    default: break;
    }
    /* 16-bit floats: the generator's values are small integers, each
     * converted once into a table */
    uint16_t small[256];
    for (int v = -128; v < 128; v++)
        small[v + 128] =
            dt == RCC_FLOAT16 ? rcci_float_to_half((float)v) : rcci_float_to_bf16((float)v);
    for (size_t j = 0; j < count; j++) {
        int64_t v = td_gen(seed, r, start + j, dt, op);
        if (v >= -128 && v < 128)
            ((uint16_t *)buf)[j] = small[v + 128];
        else
            td_store(buf, j, dt, v);
    }
}
#undef FILL_AS

/* The k-th rank folded in. */
#define WHO(k) (who ? who[k] : (k))
#define REF_INT(T, UT)                                                                             \
    for (size_t j = 0; j < count; j++) {                                                           \
        size_t i = start + j;                                                                      \
        UT acc = (UT)(T)td_gen(seed, WHO(0), i, dt, op);                                           \
        for (int k = 1; k < n; k++) {                                                              \
            T v = (T)td_gen(seed, WHO(k), i, dt, op);                                              \
            if (op == RCC_SUM || op == RCC_AVG)                                                    \
                acc = (UT)(acc + (UT)v);                                                           \
            else if (op == RCC_PROD)                                                               \
                acc = (UT)(acc * (UT)v);                                                           \
            else if (op == RCC_MAX)                                                                \
                acc = (T)acc > v ? acc : (UT)v;                                                    \
            else                                                                                   \
                acc = (T)acc < v ? acc : (UT)v;                                                    \
        }                                                                                          \
        T res = (T)acc;                                                                            \
        if (op == RCC_AVG) /* by n itself: n in T would wrap in the 8-bit types */                 \
            res = (T)(res / n);                                                                    \
        ((T *)out)[j] = res;                                                                       \
    }                                                                                              \
    break;

void td_reference(void *out, size_t start, size_t count, const int *who, int n, unsigned seed,
                  rcc_datatype_t dt, rcc_redop_t op)
{
    switch (dt) {
    case RCC_INT8: REF_INT(int8_t, uint8_t)
    case RCC_UINT8: REF_INT(uint8_t, uint8_t)
    case RCC_INT32: REF_INT(int32_t, uint32_t)
    case RCC_UINT32: REF_INT(uint32_t, uint32_t)
    case RCC_INT64: REF_INT(int64_t, uint64_t)
    case RCC_UINT64: REF_INT(uint64_t, uint64_t)
    default:
        for (size_t j = 0; j < count; j++) {
            size_t i = start + j;
            double acc = (double)td_gen(seed, WHO(0), i, dt, op);
            for (int k = 1; k < n; k++) {
                double v = (double)td_gen(seed, WHO(k), i, dt, op);
                acc = op == RCC_SUM || op == RCC_AVG ? acc + v
                      : op == RCC_PROD               ? acc * v
                      : op == RCC_MAX                ? fmax(acc, v)
                                                     : fmin(acc, v);
            }
            /* Sums and products are exact integers; AVG divides once in the
             * accumulation type (float32 for the 16-bit types). */
            if (dt == RCC_FLOAT64) {
                ((double *)out)[j] = op == RCC_AVG ? acc / n : acc;
            } else {
                float f = op == RCC_AVG ? (float)acc / (float)n : (float)acc;
                if (dt == RCC_FLOAT32)
                    ((float *)out)[j] = f;
                else if (dt == RCC_FLOAT16)
                    ((uint16_t *)out)[j] = rcci_float_to_half(f);
                else
                    ((uint16_t *)out)[j] = rcci_float_to_bf16(f);
            }
        }
    }
}
#undef REF_INT
#undef WHO

const char *td_elem_text(char *s, size_t len, const void *p, rcc_datatype_t dt)
{
    union {
        int8_t i8;
        uint8_t u8;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        uint16_t h;
        float f;
        double d;
    } v;
    memcpy(&v, p, rcc_datatype_size(dt));
    switch (dt) {
    case RCC_INT8: snprintf(s, len, "%d", v.i8); break;
    case RCC_UINT8: snprintf(s, len, "%u", v.u8); break;
    case RCC_INT32: snprintf(s, len, "%d", (int)v.i32); break;
    case RCC_UINT32: snprintf(s, len, "%u", (unsigned)v.u32); break;
    case RCC_INT64: snprintf(s, len, "%lld", (long long)v.i64); break;
    case RCC_UINT64: snprintf(s, len, "%llu", (unsigned long long)v.u64); break;
    case RCC_FLOAT16: snprintf(s, len, "%g (0x%04x)", rcci_half_to_float(v.h), v.h); break;
    case RCC_BFLOAT16: snprintf(s, len, "%g (0x%04x)", rcci_bf16_to_float(v.h), v.h); break;
    case RCC_FLOAT32: snprintf(s, len, "%g", v.f); break;
    case RCC_FLOAT64: snprintf(s, len, "%g", v.d); break;
    default: snprintf(s, len, "?");
    }
    return s;
}

size_t td_count_differing(const char *got, const char *want, size_t count, rcc_datatype_t dt)
{
    size_t es = rcc_datatype_size(dt), wrong = 0;
    if (memcmp(got, want, count * es) == 0)
        return 0;
    for (size_t k = 0; k < count; k++)
        wrong += memcmp(got + k * es, want + k * es, es) != 0;
    return wrong;
}

int td_compare(const char *what, const char *got, const char *want, size_t count, rcc_datatype_t dt)
{
    size_t es = rcc_datatype_size(dt);
    size_t wrong = td_count_differing(got, want, count, dt);
    if (wrong == 0)
        return 0;
    size_t i = 0;
    while (i < count && memcmp(got + i * es, want + i * es, es) == 0)
        i++;
    char g[64], w[64];
    fprintf(stderr, "%s: element %zu of %zu: got %s, expected %s (%zu elements wrong)\n", what, i,
            count, td_elem_text(g, sizeof g, got + i * es, dt),
            td_elem_text(w, sizeof w, want + i * es, dt), wrong);
    return 1;
}

/* ---- buffers with guard bytes on both sides ------------------------------- */

#define GUARD TD_GUARD
#define GUARD_BYTE 0x5A

char *td_galloc(size_t bytes)
{
    char *p = malloc(bytes + 2 * GUARD);
    if (!p) {
        fprintf(stderr, "no memory for %zu bytes\n", bytes);
        abort();
    }
    memset(p, GUARD_BYTE, GUARD);
    memset(p + GUARD + bytes, GUARD_BYTE, GUARD);
    return p + GUARD;
}

int td_guards_intact(const char *p, size_t bytes)
{
    for (size_t k = 0; k < GUARD; k++)
        if ((unsigned char)p[-1 - (ptrdiff_t)k] != GUARD_BYTE ||
            (unsigned char)p[bytes + k] != GUARD_BYTE)
            return 0;
    return 1;
}

void td_gfree(char *p)
{
    if (p)
        free(p - GUARD);
}

char *td_dup_bytes(const char *p, size_t bytes)
{
    char *d = malloc(bytes + 1);
    if (!d)
        abort();
    memcpy(d, p, bytes);
    return d;
}

/* ---- the rest --------------------------------------------------------------- */

int td_finish(rcc_comm_t comm, int bad)
{
    rcc_result_t res = rcc_comm_destroy(comm);
    if (res != RCC_SUCCESS) {
        fprintf(stderr, "rcc_comm_destroy: %s: %s\n", rcc_result_name(res), rcc_last_error(NULL));
        return 1;
    }
    return bad != 0;
}

double td_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void td_take_file(const char *path, char *buf, size_t size)
{
    FILE *in = fopen(path, "r");
    size_t got = in ? fread(buf, 1, size - 1, in) : 0;
    buf[got] = '\0';
    if (in)
        fclose(in);
    remove(path);
}
