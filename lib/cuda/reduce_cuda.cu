/*
 * CUDA reductions for every dtype x op (see reduce_cuda.h).
 *
 * One kernel template, instantiated per (dtype, op): a grid-stride loop over 16-byte vectors
 * (uint4 loads and stores, several in flight per thread) for the aligned body, and a scalar
 * grid-stride loop for the elements before and after it. The body is vectorised when every
 * pointer has the same offset modulo 16 (a whole number of elements) and n is large enough; the
 * elements up to the first 16-byte boundary are then the scalar head. Otherwise the whole range
 * is scalar. The grid is what the occupancy calculator says fits on the device at once (blocks
 * per SM x SMs), computed once per kernel and device and cached; a small n gets fewer blocks.
 *
 * Element arithmetic repeats lib/reduce_cpu.c's bit for bit. The GPU's own float arithmetic
 * differs from the host's in three places, and the code here puts the host's answer back:
 *  - a NaN result is the canonical NaN (0x7fffffff) on the GPU, whatever the operands; x86-64
 *    gives a NaN operand made quiet (the first, when both are), or its default NaN (0xffc00000,
 *    negative) for an invalid operation. The results are fixed up to x86's (red_nan);
 *  - the device rounds the same way but may contract a * b + c into an FMA: every operation
 *    is an explicit _rn intrinsic, which is never contracted;
 *  - the host's float16 conversions (halfbits.h) are integer work around one float operation,
 *    written for host vectors; here the hardware conversions give the same values, and a NaN
 *    takes a path of its own that keeps its payload (red_h2f_dev, red_f2h_dev).
 * Subnormals are kept (no -ftz), as on the host.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <atomic>

extern "C" {
#include "err.h"
}
#include "halfbits.h"
#include "reduce_cuda.h"

/* Vectors each thread keeps in flight per step of the body loop: enough loads outstanding to
 * cover the memory latency at full occupancy. */
#define RED_UNROLL 4
/* Below this many bytes the body is not worth a vector loop (and the head and tail dominate). */
#define RED_VEC_MIN_BYTES 256
/* Devices whose grid sizes are cached; a device beyond asks the occupancy calculator each time. */
#define RED_MAX_DEVICES 64

/* ---------------------------------------------------------------------------
 * Conversions (device): float16 in hardware, NaN aside; bfloat16 as in lib/halfbits.h
 * ------------------------------------------------------------------------- */

/* The hardware float16 conversions, one PTX instruction each. The host model of CUDA that runs
 * this file in CI (tests/cudaemu/) defines its own. */
#ifndef RED_CVT_F16_TO_F32
#define RED_CVT_F16_TO_F32(f, h)                                                                   \
    asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h))
#define RED_CVT_F32_TO_F16(h, f) asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f))
#endif

/* binary16 -> binary32, exact, as halfbits.h's red_h2f (whose float subtraction would turn a NaN
 * into the GPU's canonical NaN here). The hardware conversion is exact for every finite value and
 * infinity; a NaN keeps its sign and payload as bits instead (the host's widening makes a
 * signalling NaN quiet, which red_nan does to every NaN that reaches a result). */
static __device__ __forceinline__ float red_h2f_dev(uint16_t h)
{
    float f;
    if ((h & 0x7fffu) > 0x7c00u)
        return red_u2f(((uint32_t)h & 0x8000u) << 16 | 0x7f800000u | ((uint32_t)h & 0x3ffu) << 13);
    RED_CVT_F16_TO_F32(f, h);
    return f;
}

/* binary32 -> binary16 as halfbits.h's red_f2h: the hardware conversion rounds to nearest-even
 * and overflows to infinity as it does, subnormals included; a NaN (canonical on the GPU) goes
 * through red_f2h, which keeps its sign and payload. Integer work for every element would make
 * the float16 kernels compute-bound. */
static __device__ __forceinline__ uint16_t red_f2h_dev(float f)
{
    uint16_t h;
    if (f != f)
        return red_f2h(f);
    RED_CVT_F32_TO_F16(h, f);
    return h;
}

/* bfloat16 uses halfbits.h's red_b2f and red_f2b as they are (integer operations only). */

/* ---------------------------------------------------------------------------
 * Element types
 *
 * Each is a struct with the stored type S and the operations the kernel needs: sum, prod, avg
 * (d > 1), div (d > 1), and gt/lt for MAX/MIN, which pick one stored operand as it is.
 * ------------------------------------------------------------------------- */

/* Integers: SUM and PROD in the unsigned U (wraps); AVG and divide in Q, a type that holds every
 * value of S and the divisor, with C's truncating division (the host's double division gives
 * the same quotient, see reduce_cpu.c). */
template <typename T, typename U, typename Q> struct RedInt {
    typedef T S;
    static __device__ __forceinline__ T sum(T x, T y) { return (T)(U)((U)x + (U)y); }
    static __device__ __forceinline__ T prod(T x, T y) { return (T)(U)((U)x * (U)y); }
    static __device__ __forceinline__ T div(T x, int d) { return (T)((Q)x / (Q)d); }
    static __device__ __forceinline__ T avg(T x, T y, int d) { return div(sum(x, y), d); }
    static __device__ __forceinline__ bool gt(T x, T y) { return x > y; }
    static __device__ __forceinline__ bool lt(T x, T y) { return x < y; }
};

/* The float arithmetic types: round-to-nearest operations that are never contracted, and
 * x86-64's NaN results (see the top of the file). */
struct RedW32 {
    typedef float W;
    static __device__ __forceinline__ W add(W x, W y) { return __fadd_rn(x, y); }
    static __device__ __forceinline__ W mul(W x, W y) { return __fmul_rn(x, y); }
    static __device__ __forceinline__ W div(W x, W y) { return __fdiv_rn(x, y); }
    static __device__ __forceinline__ W quiet(W x) { return red_u2f(red_f2u(x) | 0x00400000u); }
    static __device__ __forceinline__ W dflt() { return red_u2f(0xffc00000u); }
};

struct RedW64 {
    typedef double W;
    static __device__ __forceinline__ W add(W x, W y) { return __dadd_rn(x, y); }
    static __device__ __forceinline__ W mul(W x, W y) { return __dmul_rn(x, y); }
    static __device__ __forceinline__ W div(W x, W y) { return __ddiv_rn(x, y); }
    static __device__ __forceinline__ W quiet(W x)
    {
        return __longlong_as_double(__double_as_longlong(x) | 0x0008000000000000ll);
    }
    static __device__ __forceinline__ W dflt()
    {
        return __longlong_as_double((long long)0xfff8000000000000ull);
    }
};

/* r = x op y came out NaN: the host gives x made quiet when x is NaN, else y made quiet when y
 * is, else its default NaN (Inf - Inf, 0 * Inf, 0 / 0). */
template <class A>
static __device__ __forceinline__ typename A::W red_nan(typename A::W r, typename A::W x,
                                                        typename A::W y)
{
    if (r == r)
        return r;
    return x != x ? A::quiet(x) : y != y ? A::quiet(y) : A::dflt();
}

/* Floats stored as T, computed in A::W, loaded by L and stored (rounded once) by St. */
template <typename T, class A, typename A::W (*L)(T), T (*St)(typename A::W)> struct RedFloat {
    typedef T S;
    typedef typename A::W W;
    static __device__ __forceinline__ T sum(T p, T q)
    {
        W x = L(p), y = L(q);
        return St(red_nan<A>(A::add(x, y), x, y));
    }
    static __device__ __forceinline__ T prod(T p, T q)
    {
        W x = L(p), y = L(q);
        return St(red_nan<A>(A::mul(x, y), x, y));
    }
    /* Divides rather than multiplying by 1/d, as the host does. */
    static __device__ __forceinline__ T avg(T p, T q, int d)
    {
        W x = L(p), y = L(q);
        return St(red_nan<A>(A::div(A::add(x, y), (W)d), x, y));
    }
    static __device__ __forceinline__ T div(T p, int d)
    {
        W x = L(p);
        return St(red_nan<A>(A::div(x, (W)d), x, x));
    }
    /* MAX/MIN take p when it is NaN or wins, else q: a NaN on either side comes out. */
    static __device__ __forceinline__ bool gt(T p, T q)
    {
        W x = L(p), y = L(q);
        return x > y || x != x;
    }
    static __device__ __forceinline__ bool lt(T p, T q)
    {
        W x = L(p), y = L(q);
        return x < y || x != x;
    }
};

static __device__ __forceinline__ float red_id32(float x) { return x; }
static __device__ __forceinline__ double red_id64(double x) { return x; }

typedef RedInt<int8_t, uint8_t, int32_t> RedI8;
typedef RedInt<uint8_t, uint8_t, int32_t> RedU8;
typedef RedInt<int32_t, uint32_t, int32_t> RedI32;
typedef RedInt<uint32_t, uint32_t, uint32_t> RedU32;
typedef RedInt<int64_t, uint64_t, int64_t> RedI64;
typedef RedInt<uint64_t, uint64_t, uint64_t> RedU64;
typedef RedFloat<uint16_t, RedW32, red_h2f_dev, red_f2h_dev> RedF16;
typedef RedFloat<float, RedW32, red_id32, red_id32> RedF32;
typedef RedFloat<double, RedW64, red_id64, red_id64> RedF64;
typedef RedFloat<uint16_t, RedW32, red_b2f, red_f2b> RedBF16;

/* ---------------------------------------------------------------------------
 * The kernel
 * ------------------------------------------------------------------------- */

/* RED_DIV is rcci_divide's operation: one input. RED_COPY copies its one input (bits, no
 * arithmetic: rcci_cuda_copy2). RCC_AVG here always has d > 1. */
enum { RED_DIV = RCC_AVG + 1, RED_COPY };

template <class K, int OP>
static __device__ __forceinline__ typename K::S red_apply(typename K::S p, typename K::S q, int d)
{
    switch (OP) {
    case RCC_SUM: return K::sum(p, q);
    case RCC_PROD: return K::prod(p, q);
    case RCC_MAX: return K::gt(p, q) ? p : q;
    case RCC_MIN: return K::lt(p, q) ? p : q;
    case RCC_AVG: return K::avg(p, q, d);
    case RED_COPY: return p;
    default: return K::div(p, d);
    }
}

/* What one launch works on: elements [0, head) and [head + nvec * lanes, n) one at a time, the
 * nvec 16-byte vectors in between as vectors. dst, dst2 and (for RED_DIV) b may be NULL (not dst
 * and dst2 both). dst2_at: where dst2 is read when the kernel runs (*dst2_at + dst2_off where
 * that pointer is not NULL; devapi copy2_at, reduce_copy_at). */
struct RedArgs {
    void *dst, *dst2;
    const void *a, *b;
    size_t n, head, nvec;
    int d;
    void *const *dst2_at;
    size_t dst2_off;
};

template <class K, int OP> __global__ void __launch_bounds__(RCCI_CUDA_BLOCK) red_kernel(RedArgs g)
{
    typedef typename K::S S;
    enum { LANES = 16 / sizeof(S) };
    union Vec {
        uint4 u;
        S s[LANES];
    };
    const bool unary = OP == RED_DIV || OP == RED_COPY;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;

    void *dst2v = g.dst2;
    if (g.dst2_at) { /* written by earlier work on the stream (device memory: an L2 hit) */
        char *at = *(char *const volatile *)g.dst2_at;
        if (at)
            dst2v = at + g.dst2_off;
    }
    const uint4 *va = (const uint4 *)((const S *)g.a + g.head);
    const uint4 *vb = unary ? va : (const uint4 *)((const S *)g.b + g.head);
    uint4 *vd = g.dst ? (uint4 *)((S *)g.dst + g.head) : NULL;
    uint4 *vd2 = dst2v ? (uint4 *)((S *)dst2v + g.head) : NULL;
    size_t i = tid;
    /* All loads of a step are issued before any store (dst may be a or b: the same elements). */
    for (; i + (RED_UNROLL - 1) * stride < g.nvec; i += RED_UNROLL * stride) {
        Vec x[RED_UNROLL], y[RED_UNROLL];
#pragma unroll
        for (int u = 0; u < RED_UNROLL; u++) {
            x[u].u = va[i + u * stride];
            y[u].u = unary ? x[u].u : vb[i + u * stride];
        }
#pragma unroll
        for (int u = 0; u < RED_UNROLL; u++) {
#pragma unroll
            for (int l = 0; l < LANES; l++)
                x[u].s[l] = red_apply<K, OP>(x[u].s[l], y[u].s[l], g.d);
            if (vd)
                vd[i + u * stride] = x[u].u;
            if (vd2)
                vd2[i + u * stride] = x[u].u;
        }
    }
    for (; i < g.nvec; i += stride) {
        Vec x, y;
        x.u = va[i];
        y.u = unary ? x.u : vb[i];
#pragma unroll
        for (int l = 0; l < LANES; l++)
            x.s[l] = red_apply<K, OP>(x.s[l], y.s[l], g.d);
        if (vd)
            vd[i] = x.u;
        if (vd2)
            vd2[i] = x.u;
    }

    const S *a = (const S *)g.a, *b = unary ? a : (const S *)g.b;
    S *dst = (S *)g.dst, *dst2 = (S *)dst2v;
    const size_t tail = g.head + g.nvec * LANES;
    const size_t nscalar = g.head + (g.n - tail);
    for (size_t j = tid; j < nscalar; j += stride) {
        size_t k = j < g.head ? j : tail + (j - g.head);
        S r = red_apply<K, OP>(a[k], b[k], g.d);
        if (dst)
            dst[k] = r;
        if (dst2)
            dst2[k] = r;
    }
}

/* ---------------------------------------------------------------------------
 * Launching
 * ------------------------------------------------------------------------- */

static rcc_result_t red_cuda_error(cudaError_t err, const char *what)
{
    return rcci_error(RCC_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorName(err),
                      cudaGetErrorString(err));
}

/* The most blocks of `kern` the current device runs at once: occupancy x SMs, asked once per
 * kernel and device (the cache is per instantiation of this function, i.e. per kernel). */
template <class K, int OP> static rcc_result_t red_grid_max(int *grid)
{
    static std::atomic<int> cache[RED_MAX_DEVICES];
    int dev, per_sm, sms;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess)
        return red_cuda_error(err, "cudaGetDevice");
    if (dev < RED_MAX_DEVICES && (*grid = cache[dev].load(std::memory_order_relaxed)) > 0)
        return RCC_SUCCESS;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, red_kernel<K, OP>, RCCI_CUDA_BLOCK,
                                                        0);
    if (err != cudaSuccess)
        return red_cuda_error(err, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess)
        return red_cuda_error(err, "cudaDeviceGetAttribute(MultiProcessorCount)");
    *grid = (per_sm > 0 ? per_sm : 1) * (sms > 0 ? sms : 1);
    if (dev < RED_MAX_DEVICES)
        cache[dev].store(*grid, std::memory_order_relaxed);
    return RCC_SUCCESS;
}

/* Loads red_kernel<K, OP> now (cudaFuncGetAttributes does, whatever CUDA_MODULE_LOADING says)
 * and fills its grid size cache. */
template <class K, int OP> static rcc_result_t red_preload_one()
{
    cudaFuncAttributes attr;
    cudaError_t err = cudaFuncGetAttributes(&attr, red_kernel<K, OP>);
    if (err != cudaSuccess)
        return red_cuda_error(err, "cudaFuncGetAttributes (loading the reduction kernels)");
    int grid;
    return red_grid_max<K, OP>(&grid);
}

/* Every op red_dispatch_op instantiates for K. */
template <class K> static rcc_result_t red_preload_type()
{
    rcc_result_t (*const ops[])() = {red_preload_one<K, RCC_SUM>, red_preload_one<K, RCC_PROD>,
                                     red_preload_one<K, RCC_MAX>, red_preload_one<K, RCC_MIN>,
                                     red_preload_one<K, RCC_AVG>, red_preload_one<K, RED_DIV>,
                                     red_preload_one<K, RED_COPY>};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        rcc_result_t res = ops[i]();
        if (res != RCC_SUCCESS)
            return res;
    }
    return RCC_SUCCESS;
}

/* A second destination read when the kernel runs (RedArgs::dst2_at), none by default. */
struct RedAt {
    void *const *at;
    size_t off;
};

template <class K, int OP>
static rcc_result_t red_launch(void *dst, void *dst2, const void *a, const void *b, size_t n, int d,
                               cudaStream_t stream, RedAt at = RedAt{NULL, 0})
{
    typedef typename K::S S;
    const size_t lanes = 16 / sizeof(S);
    RedArgs g = {dst, dst2, a, b, n, 0, 0, d, at.at, at.off};

    /* Vectors when every pointer (either second destination) sits at the same offset in its 16
     * bytes, that offset is a whole number of elements, and there is enough to do. */
    uintptr_t off = (uintptr_t)(dst ? dst : dst2) % 16;
    bool vec = n * sizeof(S) >= RED_VEC_MIN_BYTES && off % sizeof(S) == 0 &&
               (uintptr_t)a % 16 == off && (!b || (uintptr_t)b % 16 == off) &&
               (!dst2 || (uintptr_t)dst2 % 16 == off) && (!at.at || at.off % 16 == off);
    if (vec) {
        g.head = (16 - off) % 16 / sizeof(S);
        g.nvec = (n - g.head) / lanes;
    }
    /* Threads with work: one per vector or per scalar element, whichever is more. */
    size_t scalar = n - g.nvec * lanes;
    size_t want = g.nvec > scalar ? g.nvec : scalar;
    size_t blocks = (want + RCCI_CUDA_BLOCK - 1) / RCCI_CUDA_BLOCK;
    int grid = 0;
    rcc_result_t res = red_grid_max<K, OP>(&grid);
    if (res != RCC_SUCCESS)
        return res;
    if (blocks < (size_t)grid)
        grid = (int)blocks;
    /* cudaLaunchKernel returns the launch's own error: the calling thread's last error (maybe
     * the application's, from an earlier call) is left alone unless this launch failed. */
    void *args[] = {&g};
    cudaError_t err = cudaLaunchKernel((const void *)red_kernel<K, OP>, dim3((unsigned)grid),
                                       dim3(RCCI_CUDA_BLOCK), args, 0, stream);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* reported here, not left for a later launch */
        return red_cuda_error(err, "reduction kernel launch");
    }
    return RCC_SUCCESS;
}

template <class K>
static rcc_result_t red_dispatch_op(void *dst, void *dst2, const void *a, const void *b, size_t n,
                                    int op, int d, cudaStream_t s, RedAt at)
{
    switch (op) {
    case RCC_SUM: return red_launch<K, RCC_SUM>(dst, dst2, a, b, n, d, s, at);
    case RCC_PROD: return red_launch<K, RCC_PROD>(dst, dst2, a, b, n, d, s, at);
    case RCC_MAX: return red_launch<K, RCC_MAX>(dst, dst2, a, b, n, d, s, at);
    case RCC_MIN: return red_launch<K, RCC_MIN>(dst, dst2, a, b, n, d, s, at);
    case RCC_AVG:
        if (d > 1)
            return red_launch<K, RCC_AVG>(dst, dst2, a, b, n, d, s, at);
        return red_launch<K, RCC_SUM>(dst, dst2, a, b, n, d, s, at);
    case RED_DIV: return red_launch<K, RED_DIV>(dst, dst2, a, NULL, n, d, s, at);
    case RED_COPY: return red_launch<K, RED_COPY>(dst, dst2, a, NULL, n, d, s, at);
    default: return rcci_error(RCC_ERR_INVALID_ARGUMENT, "CUDA reduction: invalid op %d", op);
    }
}

static rcc_result_t red_dispatch(void *dst, void *dst2, const void *a, const void *b, size_t n,
                                 rcc_datatype_t dtype, int op, int d, void *stream,
                                 RedAt at = RedAt{NULL, 0})
{
    cudaStream_t s = (cudaStream_t)stream;
    switch (dtype) {
    case RCC_INT8: return red_dispatch_op<RedI8>(dst, dst2, a, b, n, op, d, s, at);
    case RCC_UINT8: return red_dispatch_op<RedU8>(dst, dst2, a, b, n, op, d, s, at);
    case RCC_INT32: return red_dispatch_op<RedI32>(dst, dst2, a, b, n, op, d, s, at);
    case RCC_UINT32: return red_dispatch_op<RedU32>(dst, dst2, a, b, n, op, d, s, at);
    case RCC_INT64: return red_dispatch_op<RedI64>(dst, dst2, a, b, n, op, d, s, at);
    case RCC_UINT64: return red_dispatch_op<RedU64>(dst, dst2, a, b, n, op, d, s, at);
    case RCC_FLOAT16: return red_dispatch_op<RedF16>(dst, dst2, a, b, n, op, d, s, at);
    case RCC_FLOAT32: return red_dispatch_op<RedF32>(dst, dst2, a, b, n, op, d, s, at);
    case RCC_FLOAT64: return red_dispatch_op<RedF64>(dst, dst2, a, b, n, op, d, s, at);
    case RCC_BFLOAT16: return red_dispatch_op<RedBF16>(dst, dst2, a, b, n, op, d, s, at);
    default:
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "CUDA reduction: invalid dtype %d", (int)dtype);
    }
}

/* ---------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------- */

extern "C" rcc_result_t rcci_cuda_reduce_copy_at(void *dst, void *dst2, void *const *at, size_t off,
                                                 const void *a, const void *b, size_t n,
                                                 rcc_datatype_t dtype, rcc_redop_t op, int divisor,
                                                 void *stream)
{
    if ((unsigned)op > RCC_AVG)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "CUDA reduction: invalid op %d", (int)op);
    if (n == 0)
        return rcc_datatype_size(dtype)
                   ? RCC_SUCCESS
                   : rcci_error(RCC_ERR_INVALID_ARGUMENT, "CUDA reduction: invalid dtype %d",
                                (int)dtype);
    return red_dispatch(dst, dst2, a, b, n, dtype, op, divisor, stream, RedAt{at, off});
}

extern "C" rcc_result_t rcci_cuda_reduce_copy(void *dst, void *dst2, const void *a, const void *b,
                                              size_t n, rcc_datatype_t dtype, rcc_redop_t op,
                                              int divisor, void *stream)
{
    return rcci_cuda_reduce_copy_at(dst, dst2, NULL, 0, a, b, n, dtype, op, divisor, stream);
}

extern "C" rcc_result_t rcci_cuda_reduce(void *dst, const void *a, const void *b, size_t n,
                                         rcc_datatype_t dtype, rcc_redop_t op, int divisor,
                                         void *stream)
{
    return rcci_cuda_reduce_copy(dst, NULL, a, b, n, dtype, op, divisor, stream);
}

extern "C" rcc_result_t rcci_cuda_copy2_at(void *dst, void *dst2, void *const *at, size_t off,
                                           const void *src, size_t bytes, void *stream)
{
    /* The widest word every pointer and the length are aligned to: vectors need the same
     * offset modulo 16 besides (red_launch), and words beat bytes where they do not. */
    uintptr_t all = (uintptr_t)dst | (uintptr_t)dst2 | (uintptr_t)src | (uintptr_t)bytes |
                    (at ? (uintptr_t)off : 0);
    cudaStream_t s = (cudaStream_t)stream;
    RedAt a = {at, off};
    if (bytes == 0)
        return RCC_SUCCESS;
    if (all % 8 == 0)
        return red_launch<RedU64, RED_COPY>(dst, dst2, src, NULL, bytes / 8, 1, s, a);
    if (all % 4 == 0)
        return red_launch<RedU32, RED_COPY>(dst, dst2, src, NULL, bytes / 4, 1, s, a);
    return red_launch<RedU8, RED_COPY>(dst, dst2, src, NULL, bytes, 1, s, a);
}

extern "C" rcc_result_t rcci_cuda_copy2(void *dst, void *dst2, const void *src, size_t bytes,
                                        void *stream)
{
    return rcci_cuda_copy2_at(dst, dst2, NULL, 0, src, bytes, stream);
}

extern "C" rcc_result_t rcci_cuda_divide(void *dst, const void *src, size_t n, rcc_datatype_t dtype,
                                         int divisor, void *stream)
{
    size_t size = rcc_datatype_size(dtype);
    if (size == 0)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "CUDA divide: invalid dtype %d", (int)dtype);
    if (n == 0 || (divisor <= 1 && dst == src))
        return RCC_SUCCESS;
    if (divisor <= 1) {
        cudaError_t err =
            cudaMemcpyAsync(dst, src, n * size, cudaMemcpyDefault, (cudaStream_t)stream);
        return err == cudaSuccess ? RCC_SUCCESS : red_cuda_error(err, "cudaMemcpyAsync");
    }
    return red_dispatch(dst, NULL, src, NULL, n, dtype, RED_DIV, divisor, stream);
}

extern "C" rcc_result_t rcci_cuda_preload(void)
{
    static std::atomic<int> loaded[RED_MAX_DEVICES];
    int dev;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess)
        return red_cuda_error(err, "cudaGetDevice");
    if (dev < RED_MAX_DEVICES && loaded[dev].load(std::memory_order_acquire))
        return RCC_SUCCESS;
    rcc_result_t (*const types[])() = {
        red_preload_type<RedI8>,  red_preload_type<RedU8>,  red_preload_type<RedI32>,
        red_preload_type<RedU32>, red_preload_type<RedI64>, red_preload_type<RedU64>,
        red_preload_type<RedF16>, red_preload_type<RedF32>, red_preload_type<RedF64>,
        red_preload_type<RedBF16>};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        rcc_result_t res = types[i]();
        if (res != RCC_SUCCESS)
            return res;
    }
    if (dev < RED_MAX_DEVICES) /* two threads may both load: harmless */
        loaded[dev].store(1, std::memory_order_release);
    return RCC_SUCCESS;
}

extern "C" int rcci_cuda_device_count(char *why, size_t size)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        if (why && size)
            snprintf(why, size, "%s",
                     err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device found");
        return 0;
    }
    if (why && size)
        why[0] = '\0';
    return count;
}
