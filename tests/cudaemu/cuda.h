/*
 * The host model of the CUDA driver API (tests/cudaemu/README.md): the types and values of the
 * driver calls that lib/cuda/devapi_cuda.c looks up through cudaGetDriverEntryPointByVersion
 * (it links no libcuda, so nothing here is declared as a function).
 */
#ifndef RINGCC_CUDAEMU_CUDA_H
#define RINGCC_CUDAEMU_CUDA_H

#include <stdint.h>

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_SUPPORTED = 801,
} CUresult;

typedef uint32_t cuuint32_t;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;

typedef enum CUstreamWaitValue_flags_enum {
    CU_STREAM_WAIT_VALUE_GEQ = 0x0,
    CU_STREAM_WAIT_VALUE_EQ = 0x1,
    CU_STREAM_WAIT_VALUE_AND = 0x2,
    CU_STREAM_WAIT_VALUE_NOR = 0x3,
    CU_STREAM_WAIT_VALUE_FLUSH = 1 << 30,
} CUstreamWaitValue_flags;

typedef enum CUstreamWriteValue_flags_enum {
    CU_STREAM_WRITE_VALUE_DEFAULT = 0x0,
    CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER = 0x1,
} CUstreamWriteValue_flags;

typedef enum CUmemRangeHandleType_enum {
    CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 0x1,
} CUmemRangeHandleType;

#endif /* RINGCC_CUDAEMU_CUDA_H */
