/*
 * Host reductions for every dtype x op (lib/reduce_cpu.c).
 */
#ifndef RINGCC_REDUCE_H
#define RINGCC_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

/* dst[i] = a[i] op b[i] for i < n; then, when op is RCC_AVG and divisor > 1,
 * the result is divided by `divisor` before it is stored (RCC_AVG otherwise
 * acts as RCC_SUM, so intermediate ring steps pass divisor 1).
 * float16/bfloat16 are widened to float32, combined (and divided) in float32
 * and rounded to nearest-even once. Integer SUM/PROD wrap (no UB); integer
 * AVG divides the wrapped sum with C's truncating division. MAX/MIN return
 * NaN when either operand is NaN. For float16, SUM/PROD/AVG give a NaN
 * operand's sign and payload, made quiet, and a's when both are NaN (the
 * portable and F16C paths agree bit for bit). dst may alias a or b exactly
 * (not partially). dtype and op must be valid (checked by the caller). */
void rcci_reduce(void *dst, const void *a, const void *b, size_t n, rcc_datatype_t dtype,
                 rcc_redop_t op, int divisor);

/* dst[i] = src[i] / divisor (RCC_AVG on one rank, or scaling in place);
 * same rounding rules as rcci_reduce. A divisor below 2 copies. dst may equal
 * src. */
void rcci_divide(void *dst, const void *src, size_t n, rcc_datatype_t dtype, int divisor);

/* For tests and benchmarks only: with `on` non-zero, float16 takes the portable path even where
 * the CPU has the F16C fast path (the two give identical bits); with 0, the fast path is used
 * where available. Returns 1 when float16 now takes the F16C path. Process-wide. */
int rcci_reduce_force_portable(int on);

/* IEEE binary16 and bfloat16 conversions, round to nearest-even, overflow to
 * infinity. Widening is exact. A NaN stays a NaN with its sign and the top of
 * its payload; narrowing makes it quiet. */
float rcci_half_to_float(uint16_t h);
uint16_t rcci_float_to_half(float f);
float rcci_bf16_to_float(uint16_t h);
uint16_t rcci_float_to_bf16(float f);

#endif /* RINGCC_REDUCE_H */
