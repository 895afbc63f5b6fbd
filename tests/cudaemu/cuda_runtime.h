/*
 * The host model of CUDA (tests/cudaemu/README.md): the runtime API (cuda_runtime_api.h), and
 * for C++ device code the execution-space keywords as nothing, the built-in index variables as
 * thread-local variables that the model's launch sets for each thread (two streams may run
 * kernels at once), and the device intrinsics that lib/cuda/reduce_cuda.cu uses, as the GPU
 * computes them. From C it is the runtime API alone, as CUDA's own header is.
 */
#ifndef RINGCC_CUDAEMU_RUNTIME_H
#define RINGCC_CUDAEMU_RUNTIME_H

#include <stdint.h>
#include <string.h>

#include "cuda_runtime_api.h"

#ifdef __cplusplus

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(threads)

struct uint3 {
    unsigned int x, y, z;
};
/* 16-byte aligned, as CUDA declares it: a vector access off that alignment, which faults on a
 * GPU, is undefined here too (UBSan names it; the compiler's aligned moves may fault). */
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};

/* Set by the model's launch for the thread it runs. */
extern thread_local uint3 threadIdx, blockIdx;
extern thread_local dim3 blockDim, gridDim;

/* The runtime's templates over a kernel (CUDA declares these in cuda_runtime.h). */
cudaError_t cudaemu_occupancy(int *blocks_per_sm, int block_threads);
template <class T>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks_per_sm, T,
                                                                        int block_threads,
                                                                        size_t shared_bytes)
{
    (void)shared_bytes;
    return cudaemu_occupancy(blocks_per_sm, block_threads);
}
template <class T> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, T)
{
    attr->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}

/* Float arithmetic as the GPU does it: IEEE round-to-nearest, never contracted (the file is
 * built with -ffp-contract=off), and a NaN result is always the canonical NaN, whatever the
 * operands: the kernels must put the host's NaN back themselves. */
template <class F, class U> static inline F cudaemu_nan(F r, U canonical)
{
    static_assert(sizeof(F) == sizeof(U), "a NaN's bits are as wide as its float");
    if (r != r)
        memcpy(&r, &canonical, sizeof r);
    return r;
}
static inline float __fadd_rn(float x, float y) { return cudaemu_nan(x + y, 0x7fffffffu); }
static inline float __fmul_rn(float x, float y) { return cudaemu_nan(x * y, 0x7fffffffu); }
static inline float __fdiv_rn(float x, float y) { return cudaemu_nan(x / y, 0x7fffffffu); }
static inline double __dadd_rn(double x, double y)
{
    return cudaemu_nan(x + y, 0x7fffffffffffffffull);
}
static inline double __dmul_rn(double x, double y)
{
    return cudaemu_nan(x * y, 0x7fffffffffffffffull);
}
static inline double __ddiv_rn(double x, double y)
{
    return cudaemu_nan(x / y, 0x7fffffffffffffffull);
}
static inline double __longlong_as_double(long long v)
{
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}
static inline long long __double_as_longlong(double d)
{
    long long v;
    memcpy(&v, &d, sizeof v);
    return v;
}

/* The hardware float16 conversions (PTX cvt.f32.f16, cvt.rn.f16.f32), for the values the
 * kernels give them (never a NaN): exact widening; narrowing rounds to nearest-even,
 * subnormals kept, overflow to infinity. Written out here, not taken from lib/halfbits.h, so
 * that the kernels' float16 results are checked against the host's conversions. */
static inline float cudaemu_h2f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | man << 13;
    } else if (exp) {
        u = sign | (exp + 112) << 23 | man << 13;
    } else if (!man) {
        u = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        u = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ffu) << 13;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint16_t cudaemu_f2h(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* infinity (a NaN never comes here) */
        return sign | 0x7c00u;
    int exp = (int)(a >> 23) - 127 + 15;
    uint32_t man = (a & 0x7fffffu) | 0x800000u; /* 24 bits */
    if (exp >= 0x1f)
        return sign | 0x7c00u;
    int shift = exp > 0 ? 13 : 14 - exp; /* subnormal results lose more bits */
    if (a < 0x800000u)                   /* float32 subnormal or zero: far below float16's */
        return sign;
    if (shift > 24)
        return sign;
    uint32_t kept = man >> shift, rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1)))
        kept++;
    /* A carry out of the mantissa moves into the exponent (up to infinity), as the encoding
     * is continuous. */
    return sign | (uint16_t)(exp > 0 ? ((uint32_t)exp << 10) + (kept - 0x400u) : kept);
}
#define RED_CVT_F16_TO_F32(f, h) ((f) = cudaemu_h2f(h))
#define RED_CVT_F32_TO_F16(h, f) ((h) = cudaemu_f2h(f))

#endif /* __cplusplus */

#endif /* RINGCC_CUDAEMU_RUNTIME_H */
