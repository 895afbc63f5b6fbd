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
#include <unistd.h>

#include "cuda/reduce_cuda.h"
#include "devapi.h"
#include "err.h"
#include "ipcmem.h"

typedef CUresult (*stream_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*address_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef CUresult (*range_handle_fn)(void *, CUdeviceptr, size_t, CUmemRangeHandleType,
                                    unsigned long long);

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static stream_value_fn write_value32, wait_value32;
static address_range_fn address_range; /* cuMemGetAddressRange: ipc_export */
static range_handle_fn range_handle;   /* cuMemGetHandleForAddressRange: dmabuf_export */
static char driver_why[160];

/* Why a driver entry point was not found: the call's error, or what the
 * lookup itself said. */
static void driver_found_how(cudaError_t e, enum cudaDriverEntryPointQueryResult found, char *how,
                             size_t size)
{
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(how, size, "%s", cudaGetErrorString(e));
    } else {
        snprintf(how, size, "%s",
                 found == cudaDriverEntryPointVersionNotSufficent
                     ? "the driver is older than CUDA 12"
                     : "the driver does not have it");
    }
}

static void driver_lookup(void)
{
    enum cudaDriverEntryPointQueryResult found;
    void *fn = NULL;
    const char *missing = NULL; /* the first lookup that failed, and how */
    char how[96] = "";
    /* 12000: the signature as of CUDA 12 (the _v2 entry points). */
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000,
                                                     cudaEnableDefault, &found);
    if (e == cudaSuccess && found == cudaDriverEntryPointSuccess)
        write_value32 = (stream_value_fn)fn;
    else {
        missing = "cuStreamWriteValue32";
        driver_found_how(e, found, how, sizeof how);
    }
    fn = NULL;
    e = cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault,
                                         &found);
    if (e == cudaSuccess && found == cudaDriverEntryPointSuccess)
        wait_value32 = (stream_value_fn)fn;
    else if (!missing) {
        missing = "cuStreamWaitValue32";
        driver_found_how(e, found, how, sizeof how);
    }
    void *range = NULL;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &range, 12000, cudaEnableDefault,
                                        &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
        address_range = (address_range_fn)range;
    void *handle = NULL;
    /* 11070: CUDA 11.7, where dma-buf export appeared. */
    if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &handle, 11070,
                                         cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
        range_handle = (range_handle_fn)handle;
    if (missing)
        snprintf(driver_why, sizeof driver_why, "the driver has no usable %s (%s)", missing, how);
}

static rcc_result_t cuda_fail(cudaError_t e, const char *what)
{
    /* Reported here: left as the thread's last CUDA error, it would be
     * taken for a later kernel launch's (ours or the application's). */
    (void)cudaGetLastError();
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
    cudaError_t e =
        cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable);
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
    /* Every stream of ours may come to wait on the progress thread's flags: the kernels must be
     * loaded before (rcci_cuda_preload). */
    rcc_result_t res = rcci_cuda_preload();
    if (res != RCC_SUCCESS)
        return res;
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
    CUresult r =
        wait ? wait_value32((CUstream)stream, (CUdeviceptr)dev, value, CU_STREAM_WAIT_VALUE_GEQ)
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

/* ---- IPC (the cudaipc transport) ------------------------------------------ */

/* The handle: what it is, then CUDA's handle (device memory) or a shared
 * memory handle (host memory, registered with CUDA on both sides). */
typedef struct {
    uint32_t host;
    int32_t device; /* the exporter's */
    int32_t pid;    /* the exporter's: device memory dies with it */
    uint32_t reserved;
    uint64_t bytes;
    union {
        cudaIpcMemHandle_t cuda;
        rcci_ipcmem_handle_t shm;
    } u;
} ipc_handle_t;
_Static_assert(sizeof(ipc_handle_t) <= RCCI_IPC_HANDLE_BYTES, "IPC handle too large");

/* Host-kind mappings, to unregister and unmap them by pointer. */
#define IPC_MAX_HOST 256
static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    int exported;
    rcci_ipcmem_handle_t shm;
} ipc_host[IPC_MAX_HOST];

static rcc_result_t ipc_host_add(void *p, int exported, const rcci_ipcmem_handle_t *shm)
{
    pthread_mutex_lock(&ipc_lock);
    int i = 0;
    while (i < IPC_MAX_HOST && ipc_host[i].p)
        i++;
    if (i < IPC_MAX_HOST)
        ipc_host[i].p = p, ipc_host[i].exported = exported, ipc_host[i].shm = *shm;
    pthread_mutex_unlock(&ipc_lock);
    return i < IPC_MAX_HOST
               ? RCC_SUCCESS
               : rcci_error(RCC_ERR_NO_MEMORY, "more than %d shared flag pages", IPC_MAX_HOST);
}

/* Maps shared host memory for the device (flags the streams store). */
static rcc_result_t ipc_host_register(void *p, size_t bytes)
{
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    return e == cudaSuccess ? RCC_SUCCESS : cuda_fail(e, "cudaHostRegister of a shared flag page");
}

static rcc_result_t cuda_ipc_alloc(void **p, size_t bytes, int kind, void *handle)
{
    ipc_handle_t h;
    memset(&h, 0, sizeof h);
    *p = NULL;
    int host = kind == RCCI_IPC_HOST;
    h.host = (uint32_t)host;
    h.device = cuda_current_device();
    h.pid = (int32_t)getpid();
    h.bytes = bytes ? bytes : 1;
    rcc_result_t res;
    if (host) {
        res = rcci_ipcmem_create((size_t)h.bytes, p, &h.u.shm);
        if (res == RCC_SUCCESS && (res = ipc_host_register(*p, (size_t)h.bytes)) == RCC_SUCCESS &&
            (res = ipc_host_add(*p, 1, &h.u.shm)) != RCC_SUCCESS)
            cudaHostUnregister(*p);
        if (res != RCC_SUCCESS && *p) {
            rcci_ipcmem_free(*p, &h.u.shm);
            *p = NULL; /* the caller frees what it got */
        }
    } else {
        /* cudaMalloc, not the stream-ordered pool: only its memory exports. */
        cudaError_t e = cudaMalloc(p, (size_t)h.bytes);
        if (e != cudaSuccess)
            return cuda_fail(e, "cudaMalloc of IPC receive slots");
        e = cudaIpcGetMemHandle(&h.u.cuda, *p);
        res = e == cudaSuccess ? RCC_SUCCESS : cuda_fail(e, "cudaIpcGetMemHandle");
        if (res != RCC_SUCCESS) {
            cudaFree(*p);
            *p = NULL;
        }
    }
    if (res == RCC_SUCCESS) {
        memset(handle, 0, RCCI_IPC_HANDLE_BYTES);
        memcpy(handle, &h, sizeof h);
    }
    return res;
}

/* Whether p is a host-kind mapping; forgets it (and says how it came). */
static int ipc_host_take(void *p, int *exported, rcci_ipcmem_handle_t *shm)
{
    int found = 0;
    pthread_mutex_lock(&ipc_lock);
    for (int i = 0; i < IPC_MAX_HOST && !found; i++)
        if (ipc_host[i].p == p) {
            found = 1;
            *exported = ipc_host[i].exported;
            *shm = ipc_host[i].shm;
            ipc_host[i].p = NULL;
        }
    pthread_mutex_unlock(&ipc_lock);
    return found;
}

/* A host-kind mapping is found by pointer; the rest is device memory:
 * ours (free: cudaFree) or a peer's (close: cudaIpcCloseMemHandle). */
static int ipc_host_release(void *p)
{
    int exported;
    rcci_ipcmem_handle_t shm;
    if (!ipc_host_take(p, &exported, &shm))
        return 0;
    cudaHostUnregister(p);
    if (exported)
        rcci_ipcmem_free(p, &shm);
    else
        rcci_ipcmem_close(p, (size_t)shm.bytes);
    return 1;
}

static void cuda_ipc_free(void *p)
{
    if (p && !ipc_host_release(p))
        cudaFree(p);
}

static void cuda_ipc_close(void *p)
{
    if (p && !ipc_host_release(p))
        cudaIpcCloseMemHandle(p);
}

static rcc_result_t cuda_ipc_open(const void *handle, void **p)
{
    ipc_handle_t h;
    memcpy(&h, handle, sizeof h);
    if (h.host > 1 || h.bytes == 0)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "not an IPC handle (kind %u, %llu bytes)",
                          h.host, (unsigned long long)h.bytes);
    if (h.host) {
        rcc_result_t res = rcci_ipcmem_open(&h.u.shm, p);
        if (res != RCC_SUCCESS)
            return res;
        if ((res = ipc_host_register(*p, (size_t)h.bytes)) == RCC_SUCCESS &&
            (res = ipc_host_add(*p, 0, &h.u.shm)) != RCC_SUCCESS)
            cudaHostUnregister(*p);
        if (res != RCC_SUCCESS)
            rcci_ipcmem_close(*p, (size_t)h.bytes);
        return res;
    }
    /* No peer-access check first: the exporter's device number names
     * another device here where CUDA_VISIBLE_DEVICES differ, and the open
     * itself says whether this device reaches that memory. Lazy peer
     * access: enabled by the driver for the exporter's device. */
    cudaError_t e = cudaIpcOpenMemHandle(p, h.u.cuda, cudaIpcMemLazyEnablePeerAccess);
    if (e == cudaSuccess)
        return RCC_SUCCESS;
    (void)cudaGetLastError();
    if (h.pid > 0 && !rcci_process_running(h.pid))
        return rcci_error(RCC_ERR_PEER_LOST,
                          "cannot map a peer's device memory: its process (pid %d) has exited "
                          "(cudaIpcOpenMemHandle: %s)",
                          (int)h.pid, cudaGetErrorString(e));
    return rcci_error(RCC_ERR_UNSUPPORTED,
                      "device %d cannot map a peer's memory (its device %d there): "
                      "cudaIpcOpenMemHandle: %s (no peer access, or the same process)",
                      cuda_current_device(), (int)h.device, cudaGetErrorString(e));
}

/* The driver's calls (looked up, not linked) act on the thread's current
 * context, which the runtime makes current only in its own calls: a thread
 * that has made none (a caller's, the progress thread) would get
 * CUDA_ERROR_INVALID_CONTEXT. Setting the current device makes its primary
 * context current (CUDA 12 on). */
static rcc_result_t driver_context(void)
{
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess)
        e = cudaSetDevice(device);
    return e == cudaSuccess ? RCC_SUCCESS : cuda_fail(e, "cudaSetDevice (for a driver call)");
}

/* The allocation that holds p: its base and size. */
static rcc_result_t cuda_allocation(const void *p, CUdeviceptr *base, size_t *size)
{
    pthread_once(&driver_once, driver_lookup);
    if (!address_range)
        return rcci_error(RCC_ERR_UNSUPPORTED, "the driver has no cuMemGetAddressRange");
    rcc_result_t res = driver_context();
    if (res != RCC_SUCCESS)
        return res;
    *base = 0, *size = 0;
    CUresult r = address_range(base, size, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS)
        return rcci_error(RCC_ERR_UNSUPPORTED, "cuMemGetAddressRange of %p: CUresult %d", p, (int)r);
    return RCC_SUCCESS;
}

/* The allocation around a user's buffer, exported as ipc_alloc's device
 * memory is (the importer maps the whole allocation and adds the offset). */
static rcc_result_t cuda_ipc_export(const void *p, void *handle, size_t *offset)
{
    CUdeviceptr base;
    size_t size;
    rcc_result_t res = cuda_allocation(p, &base, &size);
    if (res != RCC_SUCCESS)
        return res;
    ipc_handle_t h;
    memset(&h, 0, sizeof h);
    h.host = 0;
    h.device = cuda_current_device();
    h.pid = (int32_t)getpid();
    h.bytes = size;
    cudaError_t e = cudaIpcGetMemHandle(&h.u.cuda, (void *)(uintptr_t)base);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it for the next call's check */
        return rcci_error(RCC_ERR_UNSUPPORTED,
                          "cudaIpcGetMemHandle of the buffer at %p: %s (memory from a "
                          "stream-ordered pool or a VMM allocation cannot be exported)",
                          p, cudaGetErrorString(e));
    }
    memset(handle, 0, RCCI_IPC_HANDLE_BYTES);
    memcpy(handle, &h, sizeof h);
    *offset = (size_t)((uintptr_t)p - (uintptr_t)base);
    return RCC_SUCCESS;
}

static rcc_result_t cuda_ipc_size(void *p, size_t *bytes)
{
    CUdeviceptr base;
    size_t size;
    rcc_result_t res = cuda_allocation(p, &base, &size);
    if (res == RCC_SUCCESS)
        *bytes = size - (size_t)((uintptr_t)p - (uintptr_t)base);
    return res;
}

/* The driver exports exactly the range asked for, so p is at offset 0. It
 * refuses where the kernel module or the allocation (a VMM range not fully
 * mapped, say) does not allow dma-buf. */
static rcc_result_t cuda_dmabuf_export(const void *p, size_t bytes, int *fd, uint64_t *offset)
{
    pthread_once(&driver_once, driver_lookup);
    if (!range_handle)
        return rcci_error(RCC_ERR_UNSUPPORTED,
                          "the driver has no cuMemGetHandleForAddressRange (CUDA 11.7+)");
    rcc_result_t res = driver_context();
    if (res != RCC_SUCCESS)
        return res;
    int out = -1;
    CUresult r = range_handle(&out, (CUdeviceptr)(uintptr_t)p, bytes,
                              CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS) /* the number: libcuda itself is not linked, for its names */
        return rcci_error(RCC_ERR_UNSUPPORTED,
                          "cuMemGetHandleForAddressRange (dma-buf) of %zu bytes at %p: CUresult "
                          "%d%s",
                          bytes, p, (int)r,
                          r == CUDA_ERROR_NOT_SUPPORTED ? " (not supported here)" : "");
    *fd = out;
    *offset = 0;
    return RCC_SUCCESS;
}

/* Where the device orders remote writes itself, or cannot flush them,
 * there is nothing to do: the call says so (cudaErrorNotSupported). */
static rcc_result_t cuda_flush_remote_writes(void)
{
    cudaError_t e = cudaDeviceFlushGPUDirectRDMAWrites(
        cudaFlushGPUDirectRDMAWritesTargetCurrentDevice, cudaFlushGPUDirectRDMAWritesToOwner);
    if (e == cudaSuccess || e == cudaErrorNotSupported) {
        (void)cudaGetLastError();
        return RCC_SUCCESS;
    }
    return cuda_fail(e, "cudaDeviceFlushGPUDirectRDMAWrites");
}

static rcc_result_t cuda_stream_capturing(void *stream, int *capturing)
{
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &status);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaStreamIsCapturing");
    *capturing = status != cudaStreamCaptureStatusNone;
    return RCC_SUCCESS;
}

static void cuda_relax_capture(void)
{
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&mode); /* the old mode is not restored */
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
    .ipc_alloc = cuda_ipc_alloc,
    .ipc_free = cuda_ipc_free,
    .ipc_open = cuda_ipc_open,
    .ipc_close = cuda_ipc_close,
    .copy2 = rcci_cuda_copy2,
    .ipc_export = cuda_ipc_export,
    .ipc_size = cuda_ipc_size,
    .dmabuf_export = cuda_dmabuf_export,
    .flush_remote_writes = cuda_flush_remote_writes,
    .copy2_at = rcci_cuda_copy2_at,
    .reduce_copy_at = rcci_cuda_reduce_copy_at,
    .stream_capturing = cuda_stream_capturing,
    .relax_capture = cuda_relax_capture,
};
