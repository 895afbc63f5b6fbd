/*
 * The CUDA reduction kernels (lib/cuda/reduce_cuda.h) against the host reductions (lib/reduce.h),
 * bit for bit: every dtype x op, odd sizes, aligned and misaligned buffers, in place, the fused
 * reduce-and-copy, divide, and the two-destination copy. Inputs are random with special values
 * mixed in (NaN of both signs and several payloads, signalling NaN, +-Inf, +-0, subnormals, the
 * largest finite values).
 *
 * Every build also runs this file, unchanged, against the kernels' source on a host model of CUDA
 * (tests/cudaemu/README.md); a GPU is the proof.
 *
 * Plain C, no Check (the GPU machine has none, and Check forks: no CUDA context may exist in a
 * process that forks). One line per case, a summary, exit status 0 (all passed), 1 (a failure),
 * or 77 (skipped: no CUDA device, the reason printed) for meson.
 *
 * The only results allowed to differ from the host's bits: float32/float64/bfloat16 SUM, PROD
 * and AVG where both operands are NaN. The host returns whichever NaN its compiler put first (it
 * varies with the compiler), the GPU a's; either NaN, made quiet, passes. On a host other than
 * x86-64 an invalid operation's NaN (Inf - Inf) has another sign there: any NaN passes then.
 */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/reduce_cuda.h"
#include "reduce.h"

#define NDTYPES 10
#define NOPS 5

static int g_fail, g_pass;

/* xorshift64*: reproducible inputs (the seed is printed). */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545f4914f6cdd1dull;
}

static const uint16_t special16[] = {0x7e00, 0xfe00, 0x7c01, 0x7d55, 0xfc00, 0x7c00, 0x0000,
                                     0x8000, 0x0001, 0x03ff, 0x8201, 0x7bff, 0xfbff, 0x0400};
static const uint16_t special_bf16[] = {0x7fc0, 0xffc0, 0x7f81, 0x7fa5, 0xff80, 0x7f80, 0x0000,
                                        0x8000, 0x0001, 0x007f, 0x8041, 0x7f7f, 0xff7f, 0x0080};
static const uint32_t special32[] = {0x7fc00000, 0xffc00000, 0x7f800001, 0x7fa5a5a5, 0xff800000,
                                     0x7f800000, 0x00000000, 0x80000000, 0x00000001, 0x007fffff,
                                     0x80400001, 0x7f7fffff, 0xff7fffff, 0x00800000};
static const uint64_t special64[] = {
    0x7ff8000000000000ull, 0xfff8000000000000ull, 0x7ff0000000000001ull, 0x7ff5a5a5a5a5a5a5ull,
    0xfff0000000000000ull, 0x7ff0000000000000ull, 0x0000000000000000ull, 0x8000000000000000ull,
    0x0000000000000001ull, 0x000fffffffffffffull, 0x8008000000000001ull, 0x7fefffffffffffffull,
    0xffefffffffffffffull, 0x0010000000000000ull};
#define NSPECIAL 14

/* Fills n elements: integers with random bits; floats with small values (sums and products
 * stay finite and exercise rounding), random bits (every exponent), and special values. */
static void fill(void *buf, size_t n, rcc_datatype_t dt)
{
    size_t es = rcc_datatype_size(dt);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd(), kind = r % 16, v = rnd();
        unsigned char *p = (unsigned char *)buf + i * es;
        if (dt == RCC_FLOAT16 || dt == RCC_BFLOAT16) {
            uint16_t h = (uint16_t)v;
            if (kind < 2)
                h = (dt == RCC_FLOAT16 ? special16 : special_bf16)[v % NSPECIAL];
            else if (kind < 12) /* within +-8: exponent bits near the bias */
                h = dt == RCC_FLOAT16 ? (uint16_t)((h & 0x83ff) | (0x3000 + (v >> 16) % 0x1400))
                                      : (uint16_t)((h & 0x807f) | (0x3c00 + (v >> 16) % 0x0500));
            memcpy(p, &h, 2);
        } else if (dt == RCC_FLOAT32 || dt == RCC_FLOAT64) {
            uint64_t u = v; /* little-endian: the low bytes are the float32 */
            double f = (double)((int64_t)(v >> 11) % 2000001 - 1000000) / 65536.0;
            float g = (float)f;
            if (kind < 2) {
                u = dt == RCC_FLOAT32 ? special32[v % NSPECIAL] : special64[v % NSPECIAL];
            } else if (kind < 12 && dt == RCC_FLOAT32) {
                uint32_t w;
                memcpy(&w, &g, 4);
                u = w;
            } else if (kind < 12) {
                memcpy(&u, &f, 8);
            }
            memcpy(p, &u, es);
        } else {
            memcpy(p, &v, es);
        }
    }
}

static int is_float(rcc_datatype_t dt)
{
    return dt == RCC_FLOAT16 || dt == RCC_FLOAT32 || dt == RCC_FLOAT64 || dt == RCC_BFLOAT16;
}

static uint64_t load_bits(const void *buf, size_t i, size_t es)
{
    uint64_t v = 0;
    memcpy(&v, (const unsigned char *)buf + i * es, es); /* little-endian */
    return v;
}

static int nan_bits(uint64_t v, rcc_datatype_t dt)
{
    switch (dt) {
    case RCC_FLOAT16: return (v & 0x7fff) > 0x7c00;
    case RCC_BFLOAT16: return (v & 0x7fff) > 0x7f80;
    case RCC_FLOAT32: return (v & 0x7fffffff) > 0x7f800000;
    case RCC_FLOAT64: return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default: return 0;
    }
}

static uint64_t quiet_bits(uint64_t v, rcc_datatype_t dt)
{
    switch (dt) {
    case RCC_FLOAT16: return v | 0x0200;
    case RCC_BFLOAT16: return v | 0x0040;
    case RCC_FLOAT32: return v | 0x00400000;
    default: return v | 0x0008000000000000ull;
    }
}

/* The documented exceptions (top of file). */
static int allowed(uint64_t got, uint64_t want, uint64_t x, uint64_t y, rcc_datatype_t dt, int op)
{
    if (!nan_bits(got, dt) || !nan_bits(want, dt) || op == RCC_MAX || op == RCC_MIN)
        return 0;
    if (dt != RCC_FLOAT16 && nan_bits(x, dt) && nan_bits(y, dt))
        return got == quiet_bits(x, dt) || got == quiet_bits(y, dt);
#if !defined(__x86_64__)
    if (!nan_bits(x, dt) && !nan_bits(y, dt))
        return 1;
#endif
    return 0;
}

/* Compares n results; a and b are the inputs (b NULL for divide). Returns 0 when they match. */
static int compare(const char *name, const void *got, const void *want, const void *a,
                   const void *b, size_t n, rcc_datatype_t dt, int op)
{
    size_t es = rcc_datatype_size(dt);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t g = load_bits(got, i, es), w = load_bits(want, i, es);
        uint64_t x = load_bits(a, i, es), y = b ? load_bits(b, i, es) : x;
        if (g != w && !(is_float(dt) && allowed(g, w, x, y, dt, op))) {
            if (!bad++)
                first = i;
        }
    }
    if (!bad) {
        g_pass++;
        printf("ok   %s\n", name);
        return 0;
    }
    g_fail++;
    printf("FAIL %s: %zu of %zu differ; first at %zu: a=%#" PRIx64 " b=%#" PRIx64 " gpu=%#" PRIx64
           " host=%#" PRIx64 "\n",
           name, bad, n, first, load_bits(a, first, es), b ? load_bits(b, first, es) : 0,
           load_bits(got, first, es), load_bits(want, first, es));
    return 1;
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_));                                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Device buffers: each of the four pointers (a, b, dst, dst2) at its own element offset from a
 * 256-byte aligned allocation; and a device word where the _at forms read their second
 * destination's base when the kernel runs. */
struct bufs {
    unsigned char *dev[4];
    size_t cap;
    void **at;
};

/* Stores `base` in bf->at, where the next _at kernel reads it. */
static void at_store(struct bufs *bf, void *base)
{
    CU(cudaMemcpy(bf->at, &base, sizeof base, cudaMemcpyHostToDevice));
}

static void bufs_grow(struct bufs *bf, size_t bytes)
{
    if (bytes <= bf->cap)
        return;
    for (int k = 0; k < 4; k++) {
        if (bf->dev[k])
            CU(cudaFree(bf->dev[k]));
        CU(cudaMalloc((void **)&bf->dev[k], bytes));
    }
    bf->cap = bytes;
}

/* K_COPY_AT: the second destination at a base read when the kernel runs (plus an offset);
 * K_COPY_AT_NONE: that base is NULL, so the second destination given is used. */
enum { K_REDUCE, K_COPY, K_INPLACE, K_DIVIDE, K_COPY_AT, K_COPY_AT_NONE };

/* One case: inputs on the host, the host's answer, the GPU's answer, compared. */
static void run_case(struct bufs *bf, rcc_datatype_t dt, int op, int kind, size_t n,
                     const size_t offs[4], int divisor)
{
    size_t es = rcc_datatype_size(dt), bytes = n * es;
    unsigned char *ha = malloc(bytes), *hb = malloc(bytes), *want = malloc(bytes),
                  *got = malloc(bytes), *got2 = malloc(bytes);
    if (!ha || !hb || !want || !got || !got2) {
        printf("FAIL out of host memory\n");
        exit(1);
    }
    fill(ha, n, dt);
    fill(hb, n, dt);
    bufs_grow(bf, bytes + 16 * es);
    unsigned char *da = bf->dev[0] + offs[0] * es, *db = bf->dev[1] + offs[1] * es;
    unsigned char *dd = bf->dev[2] + offs[2] * es, *dd2 = bf->dev[3] + offs[3] * es;
    CU(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
    CU(cudaMemset(dd, 0xa5, bytes));
    CU(cudaMemset(dd2, 0x5a, bytes));

    rcc_result_t res;
    char name[160];
    const char *kname[] = {"reduce", "reduce_copy",    "reduce in place",
                           "divide", "reduce_copy_at", "reduce_copy_at (NULL base)"};
    if (kind == K_DIVIDE)
        snprintf(name, sizeof name, "%s %s /%d n=%zu offsets=%zu,%zu", kname[kind],
                 rcc_datatype_name(dt), divisor, n, offs[0], offs[2]);
    else
        snprintf(name, sizeof name, "%s %s %s%s n=%zu offsets=%zu,%zu,%zu,%zu", kname[kind],
                 rcc_datatype_name(dt), rcc_redop_name(op),
                 op == RCC_AVG ? (divisor > 1 ? " /3" : " /1") : "", n, offs[0], offs[1], offs[2],
                 offs[3]);

    if (kind == K_DIVIDE) {
        rcci_divide(want, ha, n, dt, divisor);
        res = rcci_cuda_divide(dd, da, n, dt, divisor, NULL);
    } else {
        rcci_reduce(want, ha, hb, n, dt, op, divisor);
        if (kind == K_INPLACE)
            res = rcci_cuda_reduce(da, da, db, n, dt, op, divisor, NULL);
        else if (kind == K_COPY)
            res = rcci_cuda_reduce_copy(dd, dd2, da, db, n, dt, op, divisor, NULL);
        else if (kind == K_COPY_AT || kind == K_COPY_AT_NONE) {
            at_store(bf, kind == K_COPY_AT ? bf->dev[3] : NULL);
            res = rcci_cuda_reduce_copy_at(
                dd, kind == K_COPY_AT ? NULL : dd2, (void *const *)bf->at,
                kind == K_COPY_AT ? offs[3] * es : 0, da, db, n, dt, op, divisor, NULL);
        } else
            res = rcci_cuda_reduce(dd, da, db, n, dt, op, divisor, NULL);
    }
    cudaError_t err = cudaDeviceSynchronize();
    if (res != RCC_SUCCESS || err != cudaSuccess) {
        g_fail++;
        printf("FAIL %s: %s %s\n", name, rcc_result_name(res), cudaGetErrorString(err));
    } else {
        CU(cudaMemcpy(got, kind == K_INPLACE ? da : dd, bytes, cudaMemcpyDeviceToHost));
        int bad = compare(name, got, want, ha, kind == K_DIVIDE ? NULL : hb, n, dt, op);
        if ((kind == K_COPY || kind == K_COPY_AT || kind == K_COPY_AT_NONE) && !bad) {
            CU(cudaMemcpy(got2, dd2, bytes, cudaMemcpyDeviceToHost));
            g_pass--; /* one case, two outputs */
            strncat(name, " (second output)", sizeof name - strlen(name) - 1);
            compare(name, got2, want, ha, hb, n, dt, op);
        }
    }
    free(ha);
    free(hb);
    free(want);
    free(got);
    free(got2);
}

/* rcci_cuda_copy2: random bytes to two destinations, bit for bit, at byte offsets that give
 * every word width (8, 4, 1) with and without the vector body. `at`: 0 plain, 1 rcci_cuda_copy2_at
 * with the second destination's base read when the kernel runs, 2 the same with that base NULL
 * (the second destination given is used). */
static void run_copy2(struct bufs *bf, size_t bytes, const size_t offs[3], int at)
{
    unsigned char *h = malloc(bytes + 1), *got = malloc(bytes + 1), *got2 = malloc(bytes + 1);
    if (!h || !got || !got2) {
        printf("FAIL out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < bytes; i++)
        h[i] = (unsigned char)rnd();
    bufs_grow(bf, bytes + 64);
    unsigned char *src = bf->dev[0] + offs[0], *dst = bf->dev[2] + offs[1],
                  *dst2 = bf->dev[3] + offs[2];
    CU(cudaMemcpy(src, h, bytes, cudaMemcpyHostToDevice));
    CU(cudaMemset(dst, 0xa5, bytes + 1));
    CU(cudaMemset(dst2, 0x5a, bytes + 1));
    rcc_result_t res;
    if (at) {
        at_store(bf, at == 1 ? bf->dev[3] : NULL);
        res = rcci_cuda_copy2_at(dst, at == 1 ? NULL : dst2, (void *const *)bf->at,
                                 at == 1 ? offs[2] : 0, src, bytes, NULL);
    } else {
        res = rcci_cuda_copy2(dst, dst2, src, bytes, NULL);
    }
    cudaError_t err = cudaDeviceSynchronize();
    int ok = res == RCC_SUCCESS && err == cudaSuccess;
    if (ok) {
        CU(cudaMemcpy(got, dst, bytes + 1, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(got2, dst2, bytes + 1, cudaMemcpyDeviceToHost));
        ok = !memcmp(got, h, bytes) && !memcmp(got2, h, bytes) && got[bytes] == 0xa5 &&
             got2[bytes] == 0x5a; /* and not a byte past the end */
    }
    if (ok) {
        g_pass++;
    } else {
        g_fail++;
        printf("FAIL copy2%s of %zu bytes, offsets %zu,%zu,%zu: %s %s\n",
               at ? (at == 1 ? "_at" : "_at (NULL base)") : "", bytes, offs[0], offs[1], offs[2],
               rcc_result_name(res), cudaGetErrorString(err));
    }
    free(h);
    free(got);
    free(got2);
}

int main(int argc, char **argv)
{
    char why[256];
    setvbuf(stdout, NULL, _IOLBF, 0); /* what ran shows even when a time limit cuts it */
    if (rcci_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIP: no CUDA device: %s\n", why);
        return 77;
    }
    if (argc > 1)
        g_rng = strtoull(argv[1], NULL, 0) | 1;
    printf("seed %#" PRIx64 " (pass it as the argument to repeat)\n", g_rng);
    struct cudaDeviceProp prop;
    int dev = 0;
    CU(cudaGetDevice(&dev));
    CU(cudaGetDeviceProperties(&prop, dev));
    printf("device %d: %s, sm_%d%d, %d SMs\n", dev, prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);

    struct bufs bf = {{NULL, NULL, NULL, NULL}, 0, NULL};
    CU(cudaMalloc((void **)&bf.at, sizeof(void *)));
    const size_t sizes[] = {1, 7, 1000, (1u << 20) + 3};
    /* All aligned; all one element past alignment (vector body after a scalar head); all
     * different (scalar throughout). */
    const size_t offsets[3][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {0, 1, 2, 3}};
    for (int dt = 0; dt < NDTYPES; dt++) {
        for (int op = 0; op < NOPS; op++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                for (int o = 0; o < 3; o++) {
                    run_case(&bf, dt, op, K_REDUCE, sizes[s], offsets[o], 3);
                    if (op == RCC_AVG && o == 0) /* divisor 1: AVG is SUM */
                        run_case(&bf, dt, op, K_REDUCE, sizes[s], offsets[o], 1);
                }
        for (int op = 0; op < NOPS; op++)
            for (int o = 0; o < 3; o++) {
                run_case(&bf, dt, op, K_COPY, sizes[3], offsets[o], 3);
                run_case(&bf, dt, op, K_COPY, sizes[1], offsets[o], 3);
                for (int k = K_COPY_AT; k <= K_COPY_AT_NONE; k++)
                    for (size_t s = 1; s <= 2; s++) /* 7 and 1000 elements */
                        run_case(&bf, dt, op, k, sizes[s], offsets[o], 3);
            }
        for (int op = 0; op < NOPS; op++)
            run_case(&bf, dt, op, K_INPLACE, sizes[3], offsets[1], 3);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int o = 0; o < 3; o++) {
                run_case(&bf, dt, 0, K_DIVIDE, sizes[s], offsets[o], 3);
                run_case(&bf, dt, 0, K_DIVIDE, sizes[s], offsets[o], 1);
            }
    }

    const size_t copy_sizes[] = {1, 3, 4, 8, 1000, 4096, (1u << 20) + 5, 8u << 20};
    const size_t copy_offs[5][3] = {{0, 0, 0}, {8, 8, 8}, {4, 4, 4}, {1, 1, 1}, {0, 4, 3}};
    for (size_t s = 0; s < sizeof copy_sizes / sizeof *copy_sizes; s++)
        for (int o = 0; o < 5; o++)
            for (int at = 0; at < 3; at++)
                if (at == 0 || copy_sizes[s] <= 4096)
                    run_copy2(&bf, copy_sizes[s], copy_offs[o], at);

    /* Invalid arguments are refused before anything is launched. */
    if (rcci_cuda_reduce(bf.dev[2], bf.dev[0], bf.dev[1], 1, (rcc_datatype_t)NDTYPES, RCC_SUM, 1,
                         NULL) == RCC_ERR_INVALID_ARGUMENT &&
        rcci_cuda_reduce(bf.dev[2], bf.dev[0], bf.dev[1], 1, RCC_FLOAT32, (rcc_redop_t)NOPS, 1,
                         NULL) == RCC_ERR_INVALID_ARGUMENT) {
        g_pass++;
        printf("ok   invalid dtype and op refused\n");
    } else {
        g_fail++;
        printf("FAIL invalid dtype or op not refused\n");
    }

    for (int k = 0; k < 4; k++)
        cudaFree(bf.dev[k]);
    cudaFree(bf.at);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
