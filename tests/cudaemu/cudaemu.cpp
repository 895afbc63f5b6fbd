/*
 * The host model of the CUDA runtime (cuda_runtime_api.h, cuda.h; tests/cudaemu/README.md).
 *
 * One device. Device memory is host memory: cudaMalloc maps a memfd (so that another process
 * can map it from an IPC handle), cudaMallocAsync takes the heap; both come filled with a
 * pattern, not zeroes, as cudaMalloc's memory is not cleared. Pinned host memory is host memory
 * the model knows about; memory it does not know is pageable, and an asynchronous copy that
 * touches it waits for its stream, as CUDA's does.
 *
 * Streams are asynchronous: work goes to one of CUDA_DEVICE_MAX_CONNECTIONS hardware queues
 * (default 8, streams dealt round-robin), each a thread that runs its work in the order it was
 * queued, so streams sharing a queue wait for each other as on a GPU. The legacy default
 * stream waits for, and is waited for by, blocking streams. A launch runs the grid's threads
 * one after another, blocks in reverse order (a kernel must not depend on the order);
 * cuStreamWaitValue32 polls the flag, cuStreamWriteValue32 stores it. cudaFree and
 * cudaFreeHost wait for the whole device, as CUDA's do.
 *
 * What CUDA refuses, the model refuses: a process using the runtime after a fork from one
 * that had used it, an IPC handle opened in its own process, host memory registered twice, a
 * device pointer asked of pageable memory, a copy running past the end of an allocation. No
 * wait of the host is endless: one over CUDAEMU_SYNC_LIMIT_S (default 60) seconds is reported
 * as a deadlock and fails with cudaErrorLaunchTimeout.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cuda.h"
#include "cuda_runtime.h"

thread_local uint3 threadIdx, blockIdx;
thread_local dim3 blockDim, gridDim;

/* Beside the kernels (reduce_cuda_host.cpp): a launch's arguments kept until it runs, and one
 * thread of it. */
void *cudaemu_args_save(const void *func, void **args);
void cudaemu_args_free(const void *func, void *saved);
void cudaemu_thread(const void *func, void *saved);

namespace
{

thread_local cudaError_t last_error = cudaSuccess;
thread_local cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;

cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

int sms()
{
    const char *v = getenv("CUDAEMU_SMS");
    int n = v ? atoi(v) : 4;
    return n > 0 ? n : 4;
}

double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

std::chrono::milliseconds sync_limit()
{
    const char *v = getenv("CUDAEMU_SYNC_LIMIT_S");
    int s = v ? atoi(v) : 60;
    return std::chrono::milliseconds(1000LL * (s > 0 ? s : 60));
}

const unsigned char FRESH_BYTE = 0xcb; /* what new device memory holds */

/* ---- memory the model knows ------------------------------------------------ */

enum Kind { DEV, DEV_POOL, DEV_OPENED, HOST_PINNED, HOST_REGISTERED };

struct Region {
    size_t bytes;     /* as asked */
    size_t map_bytes; /* mapped (DEV, DEV_OPENED, HOST_PINNED) */
    Kind kind;
    int fd;     /* DEV: the memfd an importer opens */
    ino_t ino;  /* DEV: its inode; DEV_OPENED: the exporter's */
    pid_t from; /* DEV_OPENED: the exporter */
    int refs;   /* DEV_OPENED: opens not yet closed */
};

bool is_device(Kind k) { return k == DEV || k == DEV_POOL || k == DEV_OPENED; }

using Stream = CUstream_st;

/* A hardware queue: a thread running the work of its streams in the order it was queued. */
struct Item {
    enum Op {
        COPY,
        MEMSET,
        KERNEL,
        HOST_FN,
        EVENT,
        WAIT_VALUE,
        WRITE_VALUE,
        FREE_POOL,
        WAIT_STREAM
    };
    Op op;
    Stream *stream;
    void *dst;
    const void *src;
    size_t n;
    int value;
    const void *func;
    void *args;
    cudaHostFn_t fn;
    struct CUevent_st *event;
    uint64_t seq;
    volatile uint32_t *flag;
    uint32_t v32;
    unsigned flags;
    Stream *other;
};

struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Item> items;
};

} // namespace

struct CUstream_st {
    std::mutex mu; /* guards completed's waiters */
    std::condition_variable cv;
    std::atomic<uint64_t> queued{0}, completed{0};
    Queue *queue = nullptr;
    bool blocking = false;
    bool capturing = false;
    unsigned number = 0; /* in creation order, for reports */
};

struct CUevent_st {
    std::mutex mu;
    CUstream_st *stream = nullptr; /* of the last record; none: complete */
    uint64_t seq = 0;
    bool timing = true;
    double time = -1; /* when the last record ran */
    int refs = 1;     /* the application's, and one per record not run yet */
};

struct CUgraph_st {
    size_t nodes;
};

namespace
{

struct State {
    std::mutex mu; /* regions, streams */
    std::map<uintptr_t, Region> regions;
    std::set<Stream *> streams;
    Stream *legacy = nullptr;
    std::vector<Queue *> queues;
    std::vector<Stream *> retired; /* destroyed streams, kept: events may name them */
    unsigned next_queue = 0;
};

/* Never destroyed: queue threads may still run while the process exits. */
State &state()
{
    static State *s = new State;
    return *s;
}

/* The region holding [p, p + n), under state().mu; NULL when none holds p. *past: p is in one
 * but p + n runs past its end. */
const Region *region_of(const void *p, size_t n, uintptr_t *base, bool *past)
{
    State &s = state();
    *past = false;
    auto it = s.regions.upper_bound((uintptr_t)p);
    if (it == s.regions.begin())
        return nullptr;
    --it;
    uintptr_t a = (uintptr_t)p;
    if (a >= it->first + it->second.bytes)
        return nullptr;
    *base = it->first;
    *past = n > it->first + it->second.bytes - a;
    return &it->second;
}

/* The process that first used the runtime owns it: a child forked after that gets
 * cudaErrorInitializationError from every call, as from CUDA. */
std::atomic<pid_t> owner{0};

cudaError_t enter()
{
    pid_t me = getpid(), o = 0;
    owner.compare_exchange_strong(o, me);
    return owner.load() == me ? cudaSuccess : cudaErrorInitializationError;
}

#define ENTER()                                                                                    \
    do {                                                                                           \
        cudaError_t e_ = enter();                                                                  \
        if (e_ != cudaSuccess)                                                                     \
            return fail(e_);                                                                       \
    } while (0)

/* ---- running work ------------------------------------------------------------ */

void finish(Stream *s)
{
    {
        std::lock_guard<std::mutex> l(s->mu);
        s->completed.fetch_add(1);
    }
    s->cv.notify_all();
}

void wait_stream(Stream *s, uint64_t seq)
{
    std::unique_lock<std::mutex> l(s->mu);
    s->cv.wait(l, [&] { return s->completed.load() >= seq; });
}

bool value_reached(const Item &it)
{
    uint32_t v = __atomic_load_n(it.flag, __ATOMIC_ACQUIRE);
    switch (it.flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH) {
    case CU_STREAM_WAIT_VALUE_GEQ: return (int32_t)(v - it.v32) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return v == it.v32;
    case CU_STREAM_WAIT_VALUE_AND: return (v & it.v32) != 0;
    default: return ~(v | it.v32) != 0; /* NOR */
    }
}

void run_kernel(const Item &it)
{
    const dim3 &grid = *static_cast<const dim3 *>(it.dst),
               &block = *static_cast<const dim3 *>(it.src);
    gridDim = grid;
    blockDim = block;
    for (unsigned b = grid.x; b-- > 0;) {
        blockIdx = uint3{b, 0, 0};
        for (unsigned t = 0; t < block.x; t++) {
            threadIdx = uint3{t, 0, 0};
            cudaemu_thread(it.func, it.args);
        }
    }
}

void release(const Item &it)
{
    if (it.op == Item::KERNEL) {
        cudaemu_args_free(it.func, it.args);
        delete static_cast<const dim3 *>(it.dst);
        delete static_cast<const dim3 *>(it.src);
    }
}

void run(const Item &it)
{
    switch (it.op) {
    case Item::COPY: memmove(it.dst, it.src, it.n); break;
    case Item::MEMSET: memset(it.dst, it.value, it.n); break;
    case Item::KERNEL: run_kernel(it); break;
    case Item::HOST_FN: it.fn(it.dst); break;
    case Item::EVENT: {
        bool last;
        {
            std::lock_guard<std::mutex> l(it.event->mu);
            if (it.event->stream == it.stream && it.event->seq == it.seq)
                it.event->time = now_s();
            last = --it.event->refs == 0;
        }
        if (last)
            delete it.event;
        break;
    }
    case Item::WAIT_VALUE:
        /* As a GPU's front end: it looks again and again, here with a growing pause. */
        for (unsigned i = 0; !value_reached(it); i++) {
            if (i < 64)
                sched_yield();
            else {
                struct timespec pause = {0, i < 2000 ? 20000 : 200000};
                nanosleep(&pause, nullptr);
            }
        }
        break;
    case Item::WRITE_VALUE: __atomic_store_n(it.flag, it.v32, __ATOMIC_SEQ_CST); break;
    case Item::FREE_POOL: {
        std::lock_guard<std::mutex> l(state().mu);
        state().regions.erase((uintptr_t)it.dst);
        free(it.dst);
        break;
    }
    case Item::WAIT_STREAM: wait_stream(it.other, it.seq); break;
    }
    release(it);
}

void queue_main(Queue *q)
{
    for (;;) {
        Item it;
        {
            std::unique_lock<std::mutex> l(q->mu);
            q->cv.wait(l, [&] { return !q->items.empty(); });
            it = q->items.front();
        }
        run(it);
        {
            std::lock_guard<std::mutex> l(q->mu);
            q->items.pop_front();
        }
        finish(it.stream);
    }
}

/* A stream's queue, dealt in turn; under state().mu. */
Queue *next_queue()
{
    State &s = state();
    if (s.queues.empty()) {
        const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
        int n = v ? atoi(v) : 8;
        n = n < 1 ? 1 : n > 32 ? 32 : n;
        for (int i = 0; i < n; i++) {
            Queue *q = new Queue;
            s.queues.push_back(q);
            std::thread(queue_main, q).detach();
        }
    }
    return s.queues[s.next_queue++ % s.queues.size()];
}

Stream *new_stream(bool blocking)
{
    Stream *st = new Stream;
    st->blocking = blocking;
    std::lock_guard<std::mutex> l(state().mu);
    st->number = state().next_queue;
    st->queue = next_queue();
    state().streams.insert(st);
    return st;
}

/* The stream a handle names (the legacy default stream for 0), or NULL. */
Stream *stream_of(cudaStream_t h)
{
    State &s = state();
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        std::unique_lock<std::mutex> l(s.mu);
        if (!s.legacy) {
            l.unlock();
            Stream *st = new_stream(true);
            l.lock();
            if (!s.legacy)
                s.legacy = st;
        }
        return s.legacy;
    }
    std::lock_guard<std::mutex> l(s.mu);
    Stream *st = h;
    return s.streams.count(st) ? st : nullptr;
}

uint64_t push(Stream *s, Item it)
{
    it.stream = s;
    Queue *q = s->queue;
    uint64_t seq;
    {
        std::lock_guard<std::mutex> l(q->mu);
        seq = s->queued.fetch_add(1) + 1;
        if (it.op == Item::EVENT)
            it.seq = seq;
        q->items.push_back(it);
    }
    q->cv.notify_one();
    return seq;
}

/* Queues `it` on stream h, after what the legacy default stream's rules make it wait for; its
 * number on the stream in *seq (0: captured into a graph, not run). */
cudaError_t enqueue(cudaStream_t h, Item it, uint64_t *seq = nullptr)
{
    if (seq)
        *seq = 0;
    Stream *s = stream_of(h);
    if (!s) {
        release(it);
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (s->capturing) {
        release(it);
        return cudaSuccess;
    }
    State &g = state();
    std::vector<std::pair<Stream *, uint64_t>> after;
    {
        std::lock_guard<std::mutex> l(g.mu);
        for (Stream *b : g.streams) {
            bool depends = s == g.legacy ? b != s && b->blocking : s->blocking && b == g.legacy;
            uint64_t q = b->queued.load();
            if (depends && b->completed.load() < q)
                after.push_back({b, q});
        }
    }
    for (auto &a : after) {
        Item w = {};
        w.op = Item::WAIT_STREAM;
        w.other = a.first;
        w.seq = a.second;
        push(s, w);
    }
    uint64_t n = push(s, it);
    if (seq)
        *seq = n;
    return cudaSuccess;
}

/* What each hardware queue is doing, for a deadlock's report. */
void dump_queues()
{
    static const char *const names[] = {"copy",
                                        "memset",
                                        "kernel",
                                        "host function",
                                        "event record",
                                        "wait on a value",
                                        "write of a value",
                                        "pool free",
                                        "wait for another stream"};
    std::lock_guard<std::mutex> g(state().mu);
    for (size_t i = 0; i < state().queues.size(); i++) {
        Queue *q = state().queues[i];
        std::lock_guard<std::mutex> l(q->mu);
        if (q->items.empty())
            continue;
        fprintf(stderr, "cudaemu:   queue %zu: %zu items\n", i, q->items.size());
        size_t k = 0;
        for (const Item &it : q->items) {
            if (k++ == 40) {
                fprintf(stderr, "cudaemu:     ...\n");
                break;
            }
            fprintf(stderr, "cudaemu:     %s on stream %u", names[it.op], it.stream->number);
            if (it.op == Item::WAIT_VALUE || it.op == Item::WRITE_VALUE)
                fprintf(stderr, " (flag %p holds %u; %u, mode %u)", (void *)it.flag,
                        (unsigned)*it.flag, (unsigned)it.v32, it.flags);
            if (it.op == Item::WAIT_STREAM)
                fprintf(stderr, " (stream %u: %llu of %llu run)", it.other->number,
                        (unsigned long long)it.other->completed.load(), (unsigned long long)it.seq);
            fprintf(stderr, "\n");
        }
    }
}

/* Waits until stream s has run its work up to number seq. */
cudaError_t host_wait(Stream *s, uint64_t seq, const char *what)
{
    std::unique_lock<std::mutex> l(s->mu);
    if (!s->cv.wait_for(l, sync_limit(), [&] { return s->completed.load() >= seq; })) {
        fprintf(stderr,
                "cudaemu: %s waited %lld s for a stream (%llu of %llu items run): a deadlock on "
                "the device\n",
                what, (long long)(sync_limit().count() / 1000),
                (unsigned long long)s->completed.load(), (unsigned long long)seq);
        l.unlock();
        dump_queues();
        return fail(cudaErrorLaunchTimeout);
    }
    return cudaSuccess;
}

cudaError_t device_wait(const char *what)
{
    std::vector<std::pair<Stream *, uint64_t>> all;
    {
        std::lock_guard<std::mutex> l(state().mu);
        for (Stream *s : state().streams)
            all.push_back({s, s->queued.load()});
    }
    for (auto &a : all) {
        cudaError_t e = host_wait(a.first, a.second, what);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

/* Forgets the allocation based at p, of kind k1 or k2, into *r, once the whole device has
 * run what was queued (CUDA's frees synchronise the device). */
cudaError_t take_region(void *p, Kind k1, Kind k2, const char *what, Region *r)
{
    {
        std::lock_guard<std::mutex> l(state().mu);
        auto it = state().regions.find((uintptr_t)p);
        if (it == state().regions.end() || (it->second.kind != k1 && it->second.kind != k2))
            return fail(cudaErrorInvalidValue);
    }
    cudaError_t e = device_wait(what);
    if (e != cudaSuccess)
        return e;
    std::lock_guard<std::mutex> l(state().mu);
    auto it = state().regions.find((uintptr_t)p);
    if (it == state().regions.end()) /* freed meanwhile by another thread */
        return fail(cudaErrorInvalidValue);
    *r = it->second;
    state().regions.erase(it);
    return cudaSuccess;
}

/* A copy queued on `stream`; the call returns once it has run where `sync` (cudaMemcpy) or
 * where either side is pageable host memory (the copy runs, or to the device the data is
 * taken, after the stream's earlier work). */
cudaError_t copy_on(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                    cudaStream_t stream, bool sync)
{
    ENTER();
    if ((unsigned)kind > cudaMemcpyDefault)
        return fail(cudaErrorInvalidValue);
    if (bytes == 0)
        return cudaSuccess;
    bool pageable = false;
    {
        std::lock_guard<std::mutex> l(state().mu);
        uintptr_t base;
        bool past;
        const void *ends[2] = {dst, src};
        for (const void *p : ends) {
            const Region *r = region_of(p, bytes, &base, &past);
            if (r && past)
                return fail(cudaErrorInvalidValue);
            pageable |= !r;
        }
    }
    Item it = {};
    it.op = Item::COPY;
    it.dst = dst;
    it.src = src;
    it.n = bytes;
    uint64_t seq;
    cudaError_t e = enqueue(stream, it, &seq);
    if (e == cudaSuccess && (sync || pageable) && seq)
        e = host_wait(stream_of(stream), seq,
                      sync ? "cudaMemcpy" : "cudaMemcpyAsync with pageable host memory");
    return e;
}

/* ---- the IPC handle: the exporter, its memfd, and which file that is --------- */

struct IpcHandle {
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    uint32_t pad;
    uint64_t ino;
    uint64_t bytes;
};
static_assert(sizeof(IpcHandle) <= sizeof(cudaIpcMemHandle_t), "IPC handle too large");
const uint32_t IPC_MAGIC = 0x554d4543; /* "CEMU" */

/* ---- the driver calls devapi_cuda.c looks up -------------------------------- */

CUresult wait_or_write(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned flags,
                       bool wait)
{
    if (enter() != cudaSuccess)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = (void *)(uintptr_t)addr;
    uintptr_t base;
    bool past;
    {
        std::lock_guard<std::mutex> l(state().mu);
        if (addr % 4 || !region_of(p, 4, &base, &past) || past)
            return CUDA_ERROR_INVALID_VALUE; /* not memory the device can reach */
    }
    if (wait && (flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH) > CU_STREAM_WAIT_VALUE_NOR)
        return CUDA_ERROR_INVALID_VALUE;
    Item it = {};
    it.op = wait ? Item::WAIT_VALUE : Item::WRITE_VALUE;
    it.flag = static_cast<volatile uint32_t *>(p);
    it.v32 = value;
    it.flags = flags;
    return enqueue((cudaStream_t)stream, it) == cudaSuccess ? CUDA_SUCCESS
                                                            : CUDA_ERROR_INVALID_VALUE;
}

CUresult emu_cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                 unsigned int flags)
{
    return wait_or_write(stream, addr, value, flags, true);
}

CUresult emu_cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                  unsigned int flags)
{
    return wait_or_write(stream, addr, value, flags, false);
}

CUresult emu_cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    std::lock_guard<std::mutex> l(state().mu);
    uintptr_t b;
    bool past;
    const Region *r = region_of((void *)(uintptr_t)p, 1, &b, &past);
    if (!r || !is_device(r->kind))
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = b;
    if (size)
        *size = r->bytes;
    return CUDA_SUCCESS;
}

CUresult emu_cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t bytes,
                                           CUmemRangeHandleType type, unsigned long long flags)
{
    (void)handle, (void)p, (void)bytes, (void)type, (void)flags;
    return CUDA_ERROR_NOT_SUPPORTED; /* no dma-buf from host memory */
}

} // namespace

extern "C" {

const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorLaunchTimeout: return "the launch timed out and was terminated";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidContext: return "invalid device context";
    case cudaErrorMapBufferObjectFailed: return "mapping of buffer object failed";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered:
        return "pointer does not correspond to a registered memory region";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    }
    return "unknown error";
}

const char *cudaGetErrorName(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorLaunchTimeout: return "cudaErrorLaunchTimeout";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidContext: return "cudaErrorInvalidContext";
    case cudaErrorMapBufferObjectFailed: return "cudaErrorMapBufferObjectFailed";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
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
    ENTER();
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    ENTER();
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    ENTER();
    return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    ENTER();
    if (device != 0)
        return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "host model of CUDA (tests/cudaemu)");
    prop->major = 9;
    prop->multiProcessorCount = sms();
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    ENTER();
    if (device != 0 || attr != cudaDevAttrMultiProcessorCount)
        return fail(cudaErrorInvalidValue);
    *value = sms();
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    ENTER();
    return device_wait("cudaDeviceSynchronize");
}

cudaError_t cudaDeviceFlushGPUDirectRDMAWrites(enum cudaFlushGPUDirectRDMAWritesTarget target,
                                               enum cudaFlushGPUDirectRDMAWritesScope scope)
{
    (void)target, (void)scope;
    ENTER();
    return fail(cudaErrorNotSupported);
}

/* ---- memory ------------------------------------------------------------------ */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    ENTER();
    *p = nullptr;
    if (bytes == 0)
        return cudaSuccess;
    size_t map = page_round(bytes);
    int fd = memfd_create("cudaemu-device", MFD_CLOEXEC);
    struct stat sb;
    if (fd < 0 || ftruncate(fd, (off_t)map) != 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0)
            close(fd);
        return fail(cudaErrorMemoryAllocation);
    }
    void *m = mmap(nullptr, map, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        return fail(cudaErrorMemoryAllocation);
    }
    memset(m, FRESH_BYTE, bytes);
    std::lock_guard<std::mutex> l(state().mu);
    state().regions[(uintptr_t)m] = Region{bytes, map, DEV, fd, sb.st_ino, 0, 0};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    ENTER();
    Region r;
    cudaError_t e = p ? take_region(p, DEV, DEV_POOL, "cudaFree", &r) : cudaSuccess;
    if (!p || e != cudaSuccess)
        return e;
    if (r.kind == DEV_POOL) {
        free(p);
    } else {
        munmap(p, r.map_bytes);
        close(r.fd);
    }
    return cudaSuccess;
}

cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t stream)
{
    ENTER();
    *p = nullptr;
    if (!stream_of(stream))
        return fail(cudaErrorInvalidResourceHandle);
    if (bytes == 0)
        return cudaSuccess;
    if (posix_memalign(p, 256, bytes))
        return fail(cudaErrorMemoryAllocation);
    memset(*p, FRESH_BYTE, bytes);
    std::lock_guard<std::mutex> l(state().mu);
    state().regions[(uintptr_t)*p] = Region{bytes, 0, DEV_POOL, -1, 0, 0, 0};
    return cudaSuccess;
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t stream)
{
    ENTER();
    if (!p)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> l(state().mu);
        auto it = state().regions.find((uintptr_t)p);
        if (it == state().regions.end() || it->second.kind != DEV_POOL)
            return fail(cudaErrorInvalidValue);
    }
    Item it = {};
    it.op = Item::FREE_POOL;
    it.dst = p;
    return enqueue(stream, it);
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    ENTER();
    *p = nullptr;
    if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | 0x4 /* write-combined */))
        return fail(cudaErrorInvalidValue);
    size_t map = page_round(bytes ? bytes : 1);
    void *m = mmap(nullptr, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> l(state().mu);
    state().regions[(uintptr_t)m] = Region{bytes ? bytes : 1, map, HOST_PINNED, -1, 0, 0, 0};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }

cudaError_t cudaFreeHost(void *p)
{
    ENTER();
    Region r;
    cudaError_t e = p ? take_region(p, HOST_PINNED, HOST_PINNED, "cudaFreeHost", &r) : cudaSuccess;
    if (p && e == cudaSuccess)
        munmap(p, r.map_bytes);
    return e;
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned int flags)
{
    ENTER();
    if (!p || bytes == 0 ||
        (flags & ~(unsigned)(cudaHostRegisterPortable | cudaHostRegisterMapped)))
        return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> l(state().mu);
    auto &regions = state().regions;
    uintptr_t a = (uintptr_t)p;
    auto it = regions.lower_bound(a);
    if (it != regions.end() && it->first < a + bytes)
        return fail(cudaErrorHostMemoryAlreadyRegistered);
    if (it != regions.begin() && (--it, it->first + it->second.bytes > a))
        return fail(is_device(it->second.kind) ? cudaErrorInvalidValue
                                               : cudaErrorHostMemoryAlreadyRegistered);
    regions[a] = Region{bytes, 0, HOST_REGISTERED, -1, 0, 0, 0};
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
    ENTER();
    std::lock_guard<std::mutex> l(state().mu);
    auto it = state().regions.find((uintptr_t)p);
    if (it == state().regions.end() || it->second.kind != HOST_REGISTERED)
        return fail(cudaErrorHostMemoryNotRegistered);
    state().regions.erase(it);
    return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **device, void *host, unsigned int flags)
{
    ENTER();
    *device = nullptr;
    std::lock_guard<std::mutex> l(state().mu);
    uintptr_t base;
    bool past;
    const Region *r = region_of(host, 1, &base, &past);
    if (flags != 0 || !r || (r->kind != HOST_PINNED && r->kind != HOST_REGISTERED))
        return fail(cudaErrorInvalidValue);
    *device = host; /* unified addressing: the same address */
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *p)
{
    ENTER();
    memset(attr, 0, sizeof *attr);
    attr->device = -2;
    std::lock_guard<std::mutex> l(state().mu);
    uintptr_t base;
    bool past;
    const Region *r = region_of(p, 1, &base, &past);
    if (!r)
        return cudaSuccess; /* cudaMemoryTypeUnregistered */
    attr->device = 0;
    attr->type = is_device(r->kind) ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    attr->devicePointer = const_cast<void *>(p);
    attr->hostPointer = is_device(r->kind) ? nullptr : const_cast<void *>(p);
    return cudaSuccess;
}

/* ---- copies, kernels, host functions ------------------------------------------- */

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream)
{
    ENTER();
    if (bytes == 0)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> l(state().mu);
        uintptr_t base;
        bool past;
        const Region *r = region_of(p, bytes, &base, &past);
        if (!r || past)
            return fail(cudaErrorInvalidValue);
    }
    Item it = {};
    it.op = Item::MEMSET;
    it.dst = p;
    it.value = value;
    it.n = bytes;
    return enqueue(stream, it);
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    return cudaMemsetAsync(p, value, bytes, nullptr);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    return copy_on(dst, src, bytes, kind, stream, false);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    return copy_on(dst, src, bytes, kind, nullptr, true);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                             size_t shared_bytes, cudaStream_t stream)
{
    ENTER();
    (void)shared_bytes;
    if (!func || grid.x == 0 || grid.y != 1 || grid.z != 1 || block.x == 0 || block.x > 1024 ||
        block.y != 1 || block.z != 1 || grid.x > 65535u * 32768u)
        return fail(cudaErrorInvalidConfiguration);
    Item it = {};
    it.op = Item::KERNEL;
    it.func = func;
    it.args = cudaemu_args_save(func, args);
    it.dst = new dim3(grid);
    it.src = new dim3(block);
    return enqueue(stream, it);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data)
{
    ENTER();
    if (!fn)
        return fail(cudaErrorInvalidValue);
    Item it = {};
    it.op = Item::HOST_FN;
    it.fn = fn;
    it.dst = user_data;
    return enqueue(stream, it);
}

/* ---- streams, graphs, events ------------------------------------------------------ */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    ENTER();
    if (flags & ~(unsigned)cudaStreamNonBlocking)
        return fail(cudaErrorInvalidValue);
    *stream = new_stream(!(flags & cudaStreamNonBlocking));
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) { return cudaStreamCreateWithFlags(stream, 0); }

/* Returns at once; the stream's work still runs (its object is kept: events may name it). */
cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    ENTER();
    std::lock_guard<std::mutex> l(state().mu);
    Stream *s = stream;
    if (!stream || s == state().legacy || !state().streams.erase(s))
        return fail(cudaErrorInvalidResourceHandle);
    state().retired.push_back(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    ENTER();
    Stream *s = stream_of(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    if (s->capturing)
        return fail(cudaErrorStreamCaptureUnsupported);
    return host_wait(s, s->queued.load(), "cudaStreamSynchronize");
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    ENTER();
    Stream *s = stream_of(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    return s->completed.load() >= s->queued.load() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    ENTER();
    Stream *s = stream_of(stream);
    if (!s || s == state().legacy || s->capturing || (unsigned)mode > cudaStreamCaptureModeRelaxed)
        return fail(s ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
    s->capturing = true;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph)
{
    ENTER();
    Stream *s = stream_of(stream);
    if (!s || !s->capturing)
        return fail(cudaErrorInvalidValue);
    s->capturing = false;
    *graph = new CUgraph_st{0};
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    ENTER();
    Stream *s = stream_of(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    *status = s->capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    ENTER();
    if ((unsigned)*mode > cudaStreamCaptureModeRelaxed)
        return fail(cudaErrorInvalidValue);
    enum cudaStreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    ENTER();
    if (!graph)
        return fail(cudaErrorInvalidValue);
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    ENTER();
    if (flags & ~(unsigned)cudaEventDisableTiming)
        return fail(cudaErrorInvalidValue);
    *event = new CUevent_st;
    (*event)->timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

/* Freed once no record of it is still queued (CUDA defers the release the same way). */
cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    ENTER();
    if (!event)
        return fail(cudaErrorInvalidResourceHandle);
    bool last;
    {
        std::lock_guard<std::mutex> l(event->mu);
        last = --event->refs == 0;
    }
    if (last)
        delete event;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    ENTER();
    if (!event)
        return fail(cudaErrorInvalidResourceHandle);
    Stream *s = stream_of(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    if (s->capturing)
        return cudaSuccess;
    std::lock_guard<std::mutex> l(event->mu); /* before the record can run */
    Item it = {};
    it.op = Item::EVENT;
    it.event = event;
    uint64_t seq;
    event->refs++; /* the record's, dropped when it runs (or now, when it is not queued) */
    cudaError_t e = enqueue(stream, it, &seq);
    if (e == cudaSuccess && seq) {
        event->stream = s;
        event->seq = seq;
        event->time = -1;
    } else {
        event->refs--;
    }
    return e;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    ENTER();
    if (!event)
        return fail(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> l(event->mu);
    return !event->stream || event->stream->completed.load() >= event->seq ? cudaSuccess
                                                                           : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    ENTER();
    if (!event)
        return fail(cudaErrorInvalidResourceHandle);
    Stream *s;
    uint64_t seq;
    {
        std::lock_guard<std::mutex> l(event->mu);
        s = event->stream, seq = event->seq;
    }
    return s ? host_wait(s, seq, "cudaEventSynchronize") : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    ENTER();
    if (!start || !end || !start->timing || !end->timing)
        return fail(cudaErrorInvalidResourceHandle);
    double t0, t1;
    {
        std::lock_guard<std::mutex> l(start->mu);
        t0 = start->time;
    }
    {
        std::lock_guard<std::mutex> l(end->mu);
        t1 = end->time;
    }
    if (t0 < 0 || t1 < 0)
        return fail(cudaErrorNotReady);
    *ms = (float)((t1 - t0) * 1e3);
    return cudaSuccess;
}

/* ---- IPC ------------------------------------------------------------------------- */

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *p)
{
    ENTER();
    std::lock_guard<std::mutex> l(state().mu);
    auto it = state().regions.find((uintptr_t)p);
    /* cudaMalloc's memory only, by its base (a pool's does not export) */
    if (it == state().regions.end() || it->second.kind != DEV)
        return fail(cudaErrorInvalidValue);
    IpcHandle h = {IPC_MAGIC, (int32_t)getpid(),        it->second.fd,
                   0,         (uint64_t)it->second.ino, (uint64_t)it->second.bytes};
    memset(handle, 0, sizeof *handle);
    memcpy(handle, &h, sizeof h);
    return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t handle, unsigned int flags)
{
    ENTER();
    *p = nullptr;
    IpcHandle h;
    memcpy(&h, &handle, sizeof h);
    if (h.magic != IPC_MAGIC || h.bytes == 0 || (flags & ~(unsigned)cudaIpcMemLazyEnablePeerAccess))
        return fail(cudaErrorInvalidValue);
    if (h.pid == (int32_t)getpid())
        return fail(cudaErrorInvalidContext); /* CUDA maps no handle in its own process */
    {
        /* A handle opened before gives the same mapping, counted. */
        std::lock_guard<std::mutex> l(state().mu);
        for (auto &kv : state().regions)
            if (kv.second.kind == DEV_OPENED && kv.second.from == h.pid &&
                kv.second.ino == (ino_t)h.ino) {
                kv.second.refs++;
                *p = (void *)kv.first;
                return cudaSuccess;
            }
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_ino != (ino_t)h.ino ||
        (uint64_t)sb.st_size < h.bytes) {
        if (fd >= 0)
            close(fd);
        return fail(cudaErrorMapBufferObjectFailed); /* the exporter or its memory is gone */
    }
    size_t map = page_round((size_t)h.bytes);
    void *m = mmap(nullptr, map, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return fail(cudaErrorMapBufferObjectFailed);
    std::lock_guard<std::mutex> l(state().mu);
    state().regions[(uintptr_t)m] =
        Region{(size_t)h.bytes, map, DEV_OPENED, -1, (ino_t)h.ino, (pid_t)h.pid, 1};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *p)
{
    ENTER();
    size_t map;
    {
        std::lock_guard<std::mutex> l(state().mu);
        auto it = state().regions.find((uintptr_t)p);
        if (it == state().regions.end() || it->second.kind != DEV_OPENED)
            return fail(cudaErrorInvalidValue);
        if (--it->second.refs > 0)
            return cudaSuccess;
        map = it->second.map_bytes;
        state().regions.erase(it);
    }
    munmap(p, map);
    return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status)
{
    ENTER();
    (void)version;
    if (!symbol || !fn || flags != cudaEnableDefault)
        return fail(cudaErrorInvalidValue);
    static const struct {
        const char *name;
        void *fn;
    } table[] = {
        {"cuStreamWaitValue32", (void *)emu_cuStreamWaitValue32},
        {"cuStreamWriteValue32", (void *)emu_cuStreamWriteValue32},
        {"cuMemGetAddressRange", (void *)emu_cuMemGetAddressRange},
        {"cuMemGetHandleForAddressRange", (void *)emu_cuMemGetHandleForAddressRange},
    };
    *fn = nullptr;
    if (status)
        *status = cudaDriverEntryPointSymbolNotFound;
    for (const auto &t : table)
        if (strcmp(t.name, symbol) == 0) {
            *fn = t.fn;
            if (status)
                *status = cudaDriverEntryPointSuccess;
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
