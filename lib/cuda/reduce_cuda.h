/*
 * CUDA reductions for every dtype x op (lib/cuda/reduce_cuda.cu), callable from C.
 *
 * Built only with the meson feature `cuda` (RCC_HAVE_CUDA in rcc_config.h). No CUDA type
 * appears here: a stream is a `void *` holding a cudaStream_t (NULL: the legacy default stream).
 * Every call only enqueues work on the stream and returns; the caller synchronises. Pointers are
 * device memory (or memory the device can address: managed, host-mapped).
 */
#ifndef RINGCC_REDUCE_CUDA_H
#define RINGCC_REDUCE_CUDA_H

#include <stddef.h>

#include "ringcc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = a[i] op b[i] for i < n, with exactly the semantics of rcci_reduce (lib/reduce.h):
 * integer SUM/PROD wrap, AVG divides by `divisor` when it is above 1 and otherwise acts as SUM,
 * float16/bfloat16 are combined (and divided) in float32 and rounded to nearest-even once,
 * MAX/MIN return a NaN operand as stored. The results are the host's bits, also for NaN, Inf and
 * subnormals: a NaN operand comes out made quiet (a's when both are NaN), and an invalid
 * operation (Inf - Inf, 0 * Inf) gives x86's default NaN (negative, quiet), as the host does on
 * x86-64. dst may alias a or b exactly (not partially). Errors: RCC_ERR_INVALID_ARGUMENT (bad
 * dtype or op), RCC_ERR_CUDA (the launch failed; the detail names CUDA's error). n == 0 does
 * nothing and succeeds. */
rcc_result_t rcci_cuda_reduce(void *dst, const void *a, const void *b, size_t n,
                              rcc_datatype_t dtype, rcc_redop_t op, int divisor, void *stream);

/* The same, storing each result to dst and to dst2 in one pass (reduce into the output and into
 * the outgoing staging slot). dst2 may be NULL (then this is rcci_cuda_reduce); dst2 must not
 * overlap dst, a or b. */
rcc_result_t rcci_cuda_reduce_copy(void *dst, void *dst2, const void *a, const void *b, size_t n,
                                   rcc_datatype_t dtype, rcc_redop_t op, int divisor, void *stream);

/* Copies `bytes` from src to both dst and dst2 in one pass (a received chunk into the output and
 * into the next rank's slot), bit for bit. None of the three may overlap. */
rcc_result_t rcci_cuda_copy2(void *dst, void *dst2, const void *src, size_t bytes, void *stream);
/* As rcci_cuda_reduce_copy and rcci_cuda_copy2, the second destination read when the kernel runs
 * (devapi reduce_copy_at, copy2_at): *at + off where that pointer is not NULL, else dst2. */
rcc_result_t rcci_cuda_reduce_copy_at(void *dst, void *dst2, void *const *at, size_t off,
                                      const void *a, const void *b, size_t n, rcc_datatype_t dtype,
                                      rcc_redop_t op, int divisor, void *stream);
rcc_result_t rcci_cuda_copy2_at(void *dst, void *dst2, void *const *at, size_t off, const void *src,
                                size_t bytes, void *stream);

/* Loads every kernel above onto the current device, once per device per process (later calls
 * return at once). CUDA loads kernels lazily by default (Linux, since 12.2), and loading one may
 * wait for the whole context: the first launch of a kernel queued behind a wait on a flag that
 * only this process's progress thread stores (the device ring, queued at the call) would never
 * return. Called before any such wait can be queued (devapi stream_create). Errors:
 * RCC_ERR_CUDA naming the call. */
rcc_result_t rcci_cuda_preload(void);
/* dst[i] = src[i] / divisor, as rcci_divide: a divisor below 2 copies (dst may equal src). */
rcc_result_t rcci_cuda_divide(void *dst, const void *src, size_t n, rcc_datatype_t dtype,
                              int divisor, void *stream);

/* The number of CUDA devices this process can use. 0 when there is none, no driver, or the
 * driver is too old for the runtime; then `why` (of `size` bytes, may be NULL) gets CUDA's
 * reason. Never aborts; creates no context. */
int rcci_cuda_device_count(char *why, size_t size);

/* Threads per block of every kernel here (a multiple of the warp size; the grid comes from
 * the occupancy calculator, not from this). */
#define RCCI_CUDA_BLOCK 256

#ifdef __cplusplus
}
#endif

#endif /* RINGCC_REDUCE_CUDA_H */
