/*
 * A stand-in GPU for testing the stream path without one (lib/devapi.h):
 * "device memory" is host memory this module hands out and recognises;
 * each stream is a thread that runs its queue in order (copies, flag writes,
 * flag waits, events, and test "kernels"), each item after a random delay
 * of up to FAKEDEV_JITTER_US so that work that is not ordered shows up as
 * wrong results. Its IPC (the cudaipc transport's) is a memfd the peer
 * maps through /proc; with FAKEDEV_IPC_OPEN_FAILS set in the environment,
 * opening a peer's memory fails as it does between GPUs without peer access.
 * FAKEDEV_QUEUES=N: the streams share N hardware queues in turn, each
 * running its work in the order it was queued whatever the stream, as a GPU
 * does under CUDA_DEVICE_MAX_CONNECTIONS=N (a blocked wait blocks all work
 * queued after it on that queue). FAKEDEV_WAIT_LATE_US=N: what follows
 * each satisfied wait runs N microseconds late (below a second), as on a
 * GPU busy with other work. Freeing exported or pinned memory waits for
 * every stream of the process, as CUDA's cudaFree and cudaFreeHost do, and
 * aborts the process with the reason where that would hang on a GPU (after
 * FAKEDEV_SYNC_S seconds, default 10); so does a copy with pageable host
 * memory on one side (cudaMemcpyAsync is synchronous then). A kernel or a
 * stream memory operation on pageable memory (not this module's) aborts.
 * FAKEDEV_IPC_CLOSE_SYNCS=1: closing a peer's memory waits so too (CUDA
 * does not say whether cudaIpcCloseMemHandle does; docs/cuda.md).
 */
#ifndef RINGCC_TEST_FAKEDEV_H
#define RINGCC_TEST_FAKEDEV_H

#include <stddef.h>

#define FAKEDEV_JITTER_US 100

/* Makes the library use the fake device (before the first stream call). */
void fakedev_install(void);
void *fakedev_malloc(size_t bytes); /* zeroed "device memory"; aborts if out of memory */
void fakedev_free(void *p);
void *fakedev_stream_create(void);
void fakedev_stream_destroy(void *stream);
/* Enqueue: fn(arg) runs on the stream in order (a kernel). */
void fakedev_launch(void *stream, void (*fn)(void *), void *arg);
/* Waits until everything queued on the stream so far has run; 0, or -1
 * when that took longer than timeout_s (the stream is stuck). */
int fakedev_stream_sync(void *stream, double timeout_s);
/* How many fused reduce-and-copy calls (devapi reduce_copy) this process
 * has queued: tests check that the pipeline forwards reduced chunks so. */
size_t fakedev_reduce_copies(void);
/* From now on every stream reports (1) or stops reporting (0) that it is
 * capturing a CUDA graph. */
void fakedev_set_capturing(int on);
/* Of the reductions queued: those whose received operand was read in the
 * receive slot it landed in (exported memory: the cudaipc transport's,
 * in place); and of the reductions and copy2s, those that wrote their
 * result into a peer's mapped memory (the next rank's slot: the send fused
 * with the work that lands the receive). */
size_t fakedev_slot_reads(void);
size_t fakedev_fused_sends(void);

#endif /* RINGCC_TEST_FAKEDEV_H */
