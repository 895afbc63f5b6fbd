/*
 * The device table (devapi.h) over the CUDA runtime. The stream memory
 * operations (cuStreamWriteValue32, cuStreamWaitValue32) are driver calls:
 * they are looked up through the runtime at first use, so libringcc links
 * no libcuda and loads on machines without a driver.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda/reduce_cuda.h"
#include "devapi.h"
#include "err.h"

typedef CUresult (*stream_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static stream_value_fn write_value32, wait_value32;
static char driver_why[160];

static void driver_lookup(void)
{
    enum cudaDriverEntryPointQueryResult found;
    void *fn = NULL;
    /* 12000: the signature as of CUDA 12 (the _v2 entry points). */
    cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault,
                                         &found);
    if (e == cudaSuccess && found == cudaDriverEntryPointSuccess)
        write_value32 = (stream_value_fn)fn;
    fn = NULL;
    e = cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault,
                                         &found);
    if (e == cudaSuccess && found == cudaDriverEntryPointSuccess)
        wait_value32 = (stream_value_fn)fn;
    if (!write_value32 || !wait_value32)
        snprintf(driver_why, sizeof driver_why,
                 "the driver has no cuStreamWriteValue32/cuStreamWaitValue32 (%s)",
                 cudaGetErrorString(e));
}

static rcc_result_t cuda_fail(cudaError_t e, const char *what)
{
    return rcci_error(RCC_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

static int cuda_is_device(const void *p)
{
    struct cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* not CUDA's memory: plain host memory */
        return 0;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

static int cuda_current_device(void)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        (void)cudaGetLastError();
    return dev;
}

static rcc_result_t cuda_use_device(int device)
{
    cudaError_t e = cudaSetDevice(device);
    return e == cudaSuccess ? RCC_SUCCESS : cuda_fail(e, "cudaSetDevice");
}

static rcc_result_t cuda_host_alloc(void **p, size_t bytes)
{
    cudaError_t e = cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaHostAlloc of pinned staging memory");
    memset(*p, 0, bytes);
    return RCC_SUCCESS;
}

static void cuda_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

static rcc_result_t cuda_dev_alloc(void **p, size_t bytes, void *stream)
{
    cudaError_t e = cudaMallocAsync(p, bytes ? bytes : 1, (cudaStream_t)stream);
    return e == cudaSuccess ? RCC_SUCCESS : cuda_fail(e, "cudaMallocAsync of device scratch");
}

static void cuda_dev_free(void *p, void *stream)
{
    if (p)
        cudaFreeAsync(p, (cudaStream_t)stream);
}

static rcc_result_t cuda_stream_create(void **stream)
{
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaStreamCreateWithFlags");
    *stream = s;
    return RCC_SUCCESS;
}

static void cuda_stream_destroy(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

static rcc_result_t cuda_event_create(void **event)
{
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaEventCreateWithFlags");
    *event = ev;
    return RCC_SUCCESS;
}

static void cuda_event_destroy(void *event)
{
    if (event)
        cudaEventDestroy((cudaEvent_t)event);
}

static rcc_result_t cuda_copy(void *dst, const void *src, size_t n, void *stream)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)stream);
    return e == cudaSuccess ? RCC_SUCCESS : cuda_fail(e, "cudaMemcpyAsync");
}

static rcc_result_t cuda_event_record(void *event, void *stream)
{
    cudaError_t e = cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
    return e == cudaSuccess ? RCC_SUCCESS : cuda_fail(e, "cudaEventRecord");
}

static rcc_result_t cuda_event_query(void *event, int *done)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    *done = e == cudaSuccess;
    if (e == cudaSuccess || e == cudaErrorNotReady) {
        if (e == cudaErrorNotReady)
            (void)cudaGetLastError();
        return RCC_SUCCESS;
    }
    return cuda_fail(e, "cudaEventQuery");
}

static rcc_result_t stream_value(int wait, void *stream, volatile uint32_t *flag, uint32_t value)
{
    pthread_once(&driver_once, driver_lookup);
    if (!write_value32 || !wait_value32)
        return rcci_error(RCC_ERR_CUDA, "%s", driver_why);
    void *dev = NULL;
    cudaError_t e = cudaHostGetDevicePointer(&dev, (void *)flag, 0);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaHostGetDevicePointer of a stream flag");
    CUresult r = wait ? wait_value32((CUstream)stream, (CUdeviceptr)dev, value,
                                     CU_STREAM_WAIT_VALUE_GEQ)
                      : write_value32((CUstream)stream, (CUdeviceptr)dev, value,
                                      CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS)
        return rcci_error(RCC_ERR_CUDA, "%s on a host-mapped flag: CUresult %d",
                          wait ? "cuStreamWaitValue32" : "cuStreamWriteValue32", (int)r);
    return RCC_SUCCESS;
}

static rcc_result_t cuda_write_flag(void *stream, volatile uint32_t *flag, uint32_t value)
{
    return stream_value(0, stream, flag, value);
}

static rcc_result_t cuda_wait_flag(void *stream, volatile uint32_t *flag, uint32_t value)
{
    return stream_value(1, stream, flag, value);
}

const rcci_devapi_t rcci_devapi_cuda = {
    .name = "cuda",
    .device_count = rcci_cuda_device_count,
    .is_device = cuda_is_device,
    .current_device = cuda_current_device,
    .use_device = cuda_use_device,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .dev_alloc = cuda_dev_alloc,
    .dev_free = cuda_dev_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .copy = cuda_copy,
    .reduce = rcci_cuda_reduce,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .write_flag = cuda_write_flag,
    .wait_flag = cuda_wait_flag,
    .reduce_copy = rcci_cuda_reduce_copy,
};
