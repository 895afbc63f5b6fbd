/*
 * A host model of the part of the CUDA runtime API that lib/cuda/reduce_cuda.cu and
 * tests/gpu/test_kernels.c use (tests/cudaemu/README.md): device memory is host memory, a
 * stream is nothing, a launch runs every thread of the grid on the calling thread before it
 * returns. Names, types and signatures are CUDA's; only what those two files call is here.
 */
#ifndef RINGCC_CUDAEMU_RUNTIME_API_H
#define RINGCC_CUDAEMU_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };

typedef struct CUstream_st *cudaStream_t;

struct cudaDeviceProp {
    char name[256];
    int major, minor;
    int multiProcessorCount;
};

struct cudaFuncAttributes {
    int maxThreadsPerBlock;
};

typedef struct dim3 {
    unsigned int x, y, z;
#ifdef __cplusplus
    dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
#endif
} dim3;

const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                             size_t shared_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* RINGCC_CUDAEMU_RUNTIME_API_H */
