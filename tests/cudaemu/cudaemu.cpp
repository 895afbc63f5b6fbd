/*
 * The host model of the CUDA runtime (cuda_runtime_api.h; tests/cudaemu/README.md). One device,
 * "device memory" from the host's allocator (256-byte aligned, as cudaMalloc's), streams that
 * are nothing: every call completes before it returns. A launch runs the grid's threads one
 * after another on the calling thread, blocks in reverse order (a kernel must not depend on
 * the order). The device's size is CUDAEMU_SMS multiprocessors (default 4) of 2048 threads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_runtime.h"

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

/* Runs one thread of a kernel launched with these arguments (beside the kernels). */
void cudaemu_thread(const void *func, void **args);

static cudaError_t last_error = cudaSuccess;

static cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

static int sms(void)
{
    const char *v = getenv("CUDAEMU_SMS");
    int n = v ? atoi(v) : 4;
    return n > 0 ? n : 4;
}

extern "C" {

const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    }
    return "unknown error";
}

const char *cudaGetErrorName(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    }
    return "cudaErrorUnknown";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (device != 0)
        return fail(cudaErrorInvalidValue);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "host model of CUDA (tests/cudaemu)");
    prop->major = 9;
    prop->multiProcessorCount = sms();
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (device != 0 || attr != cudaDevAttrMultiProcessorCount)
        return fail(cudaErrorInvalidValue);
    *value = sms();
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = NULL;
    if (posix_memalign(p, 256, bytes ? bytes : 1))
        return fail(cudaErrorMemoryAllocation);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    (void)kind;
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)stream;
    return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                             size_t shared_bytes, cudaStream_t stream)
{
    (void)shared_bytes, (void)stream;
    if (!func || grid.x == 0 || grid.y != 1 || grid.z != 1 || block.x == 0 || block.x > 1024 ||
        block.y != 1 || block.z != 1 || grid.x > 65535u * 32768u)
        return fail(cudaErrorInvalidConfiguration);
    gridDim = grid;
    blockDim = block;
    for (unsigned b = grid.x; b-- > 0;) {
        blockIdx = uint3{b, 0, 0};
        for (unsigned t = 0; t < block.x; t++) {
            threadIdx = uint3{t, 0, 0};
            cudaemu_thread(func, args);
        }
    }
    return cudaSuccess;
}

} /* extern "C" */

cudaError_t cudaemu_occupancy(int *blocks_per_sm, int block_threads)
{
    if (block_threads <= 0 || block_threads > 1024)
        return fail(cudaErrorInvalidValue);
    *blocks_per_sm = 2048 / block_threads;
    return cudaSuccess;
}
