/*
 * Bit casts and float16/bfloat16 conversions shared by the host reductions (lib/reduce_cpu.c)
 * and the CUDA kernels (lib/cuda/reduce_cuda.cu), which must give the same bits. Under nvcc
 * every function here is __host__ __device__.
 */
#ifndef RINGCC_HALFBITS_H
#define RINGCC_HALFBITS_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define RED_HD __host__ __device__
#else
#define RED_HD
#endif

/* ---------------------------------------------------------------------------
 * Bit casts and 16-bit float conversions
 *
 * The conversions are written to vectorise inside the loops: every lane computes every case and
 * integer selects pick the answer. Each has at most one float operation, and it always runs on
 * every lane: GCC moves a float operation that feeds only one arm of a select under a branch,
 * and as it might trap (-ftrapping-math) the loop then no longer vectorises. No float32
 * subnormal is ever an operand or a result (those cost ~40x on x86 and are flushed under
 * FTZ/DAZ), so the conversions are fast and exact in any mode but need round-to-nearest, the
 * default, for RNE.
 * ------------------------------------------------------------------------- */

/* memcpy is the defined way to reinterpret bits; compilers turn it into a register move. */
RED_HD static inline uint32_t red_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

RED_HD static inline float red_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* binary16 -> binary32, exact. Normals only need the exponent rebiased (+112); inf/NaN get it
 * rebiased twice, which lands on the all-ones exponent with the payload kept (a signalling NaN
 * comes out quiet). A subnormal m * 2^-24 is built as the normal 2^-14 * (1 + m/1024) and 2^-14
 * is subtracted, leaving m * 2^-24 exactly; the other cases subtract -0, which changes nothing
 * (and, unlike 0, cannot be folded away, which would bring the branch back). */
RED_HD static inline float red_h2f(uint16_t h)
{
    int32_t x = (int16_t)h; /* sign-extended: the sign lands in bit 31 */
    int32_t em = (int32_t)(((uint32_t)x << 13) & 0x0fffe000u); /* exponent, mantissa */
    int sub = em < 0x00800000;
    uint32_t bits = (uint32_t)em + (em >= 0x0f800000 ? 224u << 23 : 112u << 23);
    bits += sub ? 1u << 23 : 0;
    float f = red_u2f(bits) - red_u2f(sub ? 0x38800000u : 0x80000000u); /* 2^-14 or -0 */
    return red_u2f(red_f2u(f) | ((uint32_t)x & 0x80000000u));
}

/* binary32 -> binary16, round to nearest-even, overflow to inf, NaN kept (quiet, with the top of
 * its payload). The FPU does the rounding: with e the exponent of |f| (at least -14, the smallest
 * normal half's), adding C = 2^(e+13) gives a sum whose float ulp is 2^(e-10), the half's step at
 * exponent e (2^-24 for subnormals). The sum's bits minus C's are then the rounded significand
 * m, and ((e + 14) << 10) + m is the half: a carry in m bumps the exponent, and e = -14 with no
 * implicit bit gives the subnormals. Inputs are clamped to 2^16 first, which comes out as inf. */
RED_HD static inline uint16_t red_f2h(float f)
{
    uint32_t x = red_f2u(f);
    uint32_t ax = x & 0x7fffffffu;
    uint32_t clamped = ax < 0x47800000u ? ax : 0x47800000u;
    uint32_t e = clamped & 0x7f800000u;
    e = e > 0x38800000u ? e : 0x38800000u;
    uint32_t c = e + (13u << 23);
    uint32_t m = red_f2u(red_u2f(clamped) + red_u2f(c)) - c;
    uint32_t bits = ((e - (113u << 23)) >> 13) + m;
    bits |= (int32_t)ax > 0x7f800000 ? 0x0200u | ((ax >> 13) & 0x03ffu) : 0; /* NaN: inf -> qNaN */
    return (uint16_t)(bits | ((x >> 16) & 0x8000u));
}

/* bfloat16 is the top half of a binary32: widening is a shift. */
RED_HD static inline float red_b2f(uint16_t h) { return red_u2f((uint32_t)h << 16); }

/* binary32 -> bfloat16: round the low 16 bits to nearest-even; a carry may run into the exponent
 * and up to inf, which is the right answer. NaN is kept and made quiet (bit 6 of the result),
 * so that dropping the low payload bits cannot turn it into inf, and is kept away from the
 * rounding add, which could carry a NaN into the sign bit. */
RED_HD static inline uint16_t red_f2b(float f)
{
    uint32_t x = red_f2u(f);
    uint32_t t =
        (int32_t)(x & 0x7fffffffu) > 0x7f800000 ? x | 0x00400000u : x + 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(t >> 16);
}

#endif /* RINGCC_HALFBITS_H */
