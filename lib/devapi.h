/*
 * What the stream path (stream.c) asks of a GPU, as a table of functions:
 * CUDA's in a build with CUDA (lib/cuda/devapi_cuda.c), or a test's stand-in
 * (tests/mp/fakedev.c runs the whole stream path on a machine without a GPU,
 * with streams as threads). No CUDA type appears here: a stream or an event
 * is a void *.
 *
 * Every function returns RCC_SUCCESS or an error with its text set
 * (rcci_error). "Enqueue" functions only queue work on the stream and return.
 */
#ifndef RINGCC_DEVAPI_H
#define RINGCC_DEVAPI_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

typedef struct rcci_devapi {
    const char *name;
    /* Number of usable devices; 0 with the reason in why[size] when none. */
    int (*device_count)(char *why, size_t size);
    /* 1 when p is device memory (staged through host memory to go over a
     * host transport), 0 for host memory of any kind. */
    int (*is_device)(const void *p);
    /* The calling thread's current device, and making it another thread's
     * (stream calls and the progress thread work on the communicator's
     * device: the one current when it was made). */
    int (*current_device)(void);
    rcc_result_t (*use_device)(int device);
    /* Host memory the device can read and write (pinned, mapped), zeroed. */
    rcc_result_t (*host_alloc)(void **p, size_t bytes);
    void (*host_free)(void *p);
    /* Enqueue: device memory (stream-ordered: usable by work queued on
     * `stream` after the call; freed after the work queued before the free),
     * so that no call synchronises the device. */
    rcc_result_t (*dev_alloc)(void **p, size_t bytes, void *stream);
    void (*dev_free)(void *p, void *stream);
    /* A stream of the library's own (non-blocking with respect to the
     * legacy default stream), and an event. */
    rcc_result_t (*stream_create)(void **stream);
    void (*stream_destroy)(void *stream);
    rcc_result_t (*event_create)(void **event);
    void (*event_destroy)(void *event);
    /* Enqueue: copy of n bytes in any direction. */
    rcc_result_t (*copy)(void *dst, const void *src, size_t n, void *stream);
    /* Enqueue: dst[i] = a[i] op b[i], i < n, with rcci_reduce's semantics
     * (lib/reduce.h; AVG divides by `divisor` when it is above 1). Any of
     * the pointers may be host_alloc memory. */
    rcc_result_t (*reduce)(void *dst, const void *a, const void *b, size_t n, rcc_datatype_t dtype,
                           rcc_redop_t op, int divisor, void *stream);
    /* Enqueue: `event` completes when the stream's work so far is done. */
    rcc_result_t (*event_record)(void *event, void *stream);
    /* Never blocks: 1 done, 0 not yet; an error when the device failed. */
    rcc_result_t (*event_query)(void *event, int *done);
    /* Enqueue: *flag = value once the stream's earlier work is done (flag in
     * host_alloc memory). */
    rcc_result_t (*write_flag)(void *stream, volatile uint32_t *flag, uint32_t value);
    /* Enqueue: later work on the stream waits until (int32_t)(*flag - value)
     * >= 0 (the host stores the flag). */
    rcc_result_t (*wait_flag)(void *stream, volatile uint32_t *flag, uint32_t value);
    /* Enqueue: as reduce, storing each result to dst and to dst2 in one
     * pass (a reduced chunk into the output and into the outgoing staging
     * slot); dst2 overlaps none of the others. */
    rcc_result_t (*reduce_copy)(void *dst, void *dst2, const void *a, const void *b, size_t n,
                                rcc_datatype_t dtype, rcc_redop_t op, int divisor, void *stream);

    /* -- appended for the cudaipc transport (transports/cudaipc/); a table
     * without them (NULL) has no IPC, and the transport says so. -- */
    /* Memory another process of this host can map: device memory
     * (RCCI_IPC_DEVICE; cudaMalloc + cudaIpcGetMemHandle), as it comes, not
     * cleared: clearing is GPU work, which would run behind whatever shares
     * its stream's hardware queue (a caller's open group included) and so
     * could wait for the caller; every user writes before it reads. Or host
     * memory the device can read and write and the stream functions above
     * can store flags in (RCCI_IPC_HOST), zeroed. Queues no GPU work and
     * never waits for the GPU. Writes its handle (RCCI_IPC_HANDLE_BYTES).
     * On failure *p is NULL: nothing for the caller to free. */
    rcc_result_t (*ipc_alloc)(void **p, size_t bytes, int kind, void *handle);
    void (*ipc_free)(void *p);
    /* Maps a peer process's ipc_alloc memory from its handle (device memory:
     * with peer access where the devices differ and allow it). Fails with
     * the reason (RCC_ERR_PEER_LOST when the exporter is gone). */
    rcc_result_t (*ipc_open)(const void *handle, void **p);
    void (*ipc_close)(void *p);

    /* -- appended for the in-place device ring; NULL: two copies do. -- */
    /* Enqueue: `bytes` of src copied to dst and to dst2 in one pass (src
     * read once); bit for bit; none of them overlap. */
    rcc_result_t (*copy2)(void *dst, void *dst2, const void *src, size_t bytes, void *stream);
    /* A handle (for ipc_open, in another process of this host) of the
     * allocation that holds device memory p, a user's buffer, and p's
     * offset in it. RCC_ERR_UNSUPPORTED where that memory cannot be
     * exported (CUDA: stream-ordered pools, VMM allocations). NULL: none can. */
    rcc_result_t (*ipc_export)(const void *p, void *handle, size_t *offset);
    /* The bytes mapped at p by ipc_open, as the mapping itself (not the
     * exporter's handle) says: how far a peer's window may reach. NULL:
     * unknown, and no window is used. */
    rcc_result_t (*ipc_size)(void *p, size_t *bytes);

    /* -- appended for GPUDirect RDMA (transports/ibverbs/); NULL: none. -- */
    /* A dma-buf descriptor (*fd, the caller closes it) through which an RDMA
     * device reads and writes device memory [p, p + bytes) directly
     * (ibv_reg_dmabuf_mr); p lies *offset bytes into it. p and bytes are
     * multiples of the host page size. RCC_ERR_UNSUPPORTED with the reason
     * where the device, its driver or the allocation cannot. */
    rcc_result_t (*dmabuf_export)(const void *p, size_t bytes, int *fd, uint64_t *offset);
    /* Blocks until the RDMA writes into this device's memory whose
     * completions have been seen are visible to work the GPU runs later
     * (they may still be in flight inside the GPU when the adapter reports
     * them); called before telling the GPU that such data has landed.
     * NULL: nothing to do (the stand-in GPU). */
    rcc_result_t (*flush_remote_writes)(void);
    /* -- appended for windows queued at the call (coll/devqueue.c); NULL:
     * none, and queued operations keep the slots. -- */
    /* Enqueue: as copy2 and reduce_copy, but the second destination is
     * decided when the work runs: *at + off where the pointer *at is not
     * NULL, else dst2. `at` lies in memory the work reads as it runs:
     * device memory written by earlier work on the stream, or host_alloc
     * memory the host stored before the stream got here (behind a
     * wait_flag); *at + off lies at the same offset modulo 16 as off.
     * Both take dst NULL: only the second destination. */
    rcc_result_t (*copy2_at)(void *dst, void *dst2, void *const *at, size_t off, const void *src,
                             size_t bytes, void *stream);
    rcc_result_t (*reduce_copy_at)(void *dst, void *dst2, void *const *at, size_t off,
                                   const void *a, const void *b, size_t n, rcc_datatype_t dtype,
                                   rcc_redop_t op, int divisor, void *stream);
    /* 1 in *capturing when the stream is capturing a graph (CUDA graphs):
     * work queued on it then runs only when the graph is launched, maybe
     * many times, while each stream operation's flags carry one call's
     * ticket. NULL in a table means never. */
    rcc_result_t (*stream_capturing)(void *stream, int *capturing);
    /* -- appended for graph capture elsewhere; NULL: nothing to do. -- */
    /* Lets the calling thread (the progress thread, which only ever runs
     * the library's own work) keep querying events and allocating while
     * another thread captures a graph: CUDA forbids those calls in every
     * thread during a capture in the global mode unless the thread says
     * it is relaxed. For this thread, from now on; idempotent. */
    void (*relax_capture)(void);
} rcci_devapi_t;

/* ipc_alloc's kinds of memory. */
enum { RCCI_IPC_DEVICE = 0, RCCI_IPC_HOST = 1 };

/* Size of an ipc_alloc handle (CUDA's cudaIpcMemHandle_t is 64 bytes). */
#define RCCI_IPC_HANDLE_BYTES 96

/* The table in use: one set by rcci_devapi_set, else CUDA's in a build with
 * CUDA, else NULL. */
const rcci_devapi_t *rcci_devapi(void);
/* For tests: use `api` from now on (before the first stream call). */
void rcci_devapi_set(const rcci_devapi_t *api);

/* Makes `device` current on the calling thread (nothing when it is) and
 * stores the one that was in *previous, for rcci_device_back. Its error is
 * use_device's. */
rcc_result_t rcci_device_enter(const rcci_devapi_t *dev, int device, int *previous);
/* Makes `previous` current again where it was not `device` (a negative
 * `previous`: none known, nothing done), keeping the thread's error text:
 * the failure being reported stays the one told (devswitch.c). */
void rcci_device_back(const rcci_devapi_t *dev, int previous, int device);
/* Whether the work queued on `stream` so far has run, waiting for it (by an
 * event, polled) until `deadline_ns`; 0 when it has not by then, or when
 * that cannot be known. An event still pending is left, not destroyed: the
 * stream may still record it. */
int rcci_stream_drain(const rcci_devapi_t *dev, void *stream, int64_t deadline_ns);

#endif /* RINGCC_DEVAPI_H */
