/*
 * The chunked device path, queued at the call.
 *
 * A stream collective on device buffers moves chunk by chunk, as
 * coll/pipeline.c's device mode does, but all of its GPU work (the copies
 * into send slots, the reductions and copies out of receive slots) is
 * queued on the library's stream by the calling thread, at the call, each
 * piece behind a wait: over the host transports, through pinned slots, for
 * a flag that the progress thread stores when the network has done its
 * part (the progress thread only moves bytes and stores flags); over an
 * edge of the device ring, on the transport's own counters (transport.h,
 * version 7), the chunks written straight into the next rank's slots and
 * reduced where they land (the progress thread only watches, but for the
 * windows of coll/window.h: their messages, mappings and flags).
 *
 * Why: streams share the GPU's hardware queues, and a queue runs its work
 * in the order it was queued (docs/cuda.md, "Hardware queues"). GPU work
 * queued later by the progress thread could land behind a wait the caller
 * (or anyone) queued after the call for this operation's result, and wait
 * for it: a deadlock. Work queued at the call comes before every such wait,
 * and its own waits are for the network, which depends only on GPU work
 * queued before them (earlier steps, on every rank).
 *
 * Flags (in the operation's pinned area, counted in schedule items):
 *   landed   host -> GPU   receives 0..landed-1 are in their slots
 *   freed    host -> GPU   sends 0..freed-1 have left (their slots are free)
 *   consumed GPU -> host   receive slots 0..consumed-1 have been read
 *   staged   GPU -> host   sends 0..staged-1 are ready to go
 * and, where the operation exchanges windows (coll/window.h):
 *   window   host -> GPU   the next rank's output is mapped (or it has none):
 *                          the address the GPU reads is stored
 *   wrote    GPU -> host   every write into the next rank's output has run
 *   unmapped host -> GPU   the previous rank has unmapped this rank's output
 */
#ifndef RINGCC_DEVQUEUE_H
#define RINGCC_DEVQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "devapi.h"

typedef struct rcci_devq rcci_devq_t;

/* Pinned bytes the operation needs: 2 * slots chunks and its flags. */
size_t rcci_devq_pinned_bytes(const struct rcc_comm *comm, const rcci_op_t *op);

/* Device bytes the operation needs: its schedule's scratch
 * (rcci_coll_device_scratch_bytes), and where it has windows a word the
 * GPU reads the next rank's output address from. */
size_t rcci_devq_scratch_bytes(const struct rcc_comm *comm, const rcci_op_t *op);

/* Queues all of `op`'s GPU work on `stream` (the library's), starting once
 * the caller's stream has stored *start >= ticket: `pinned` (of
 * rcci_devq_pinned_bytes) and `dscratch` (rcci_devq_scratch_bytes) must
 * stay until that work is done (rcci_devq_gpu_done), `pinned` also
 * until rcci_devq_free (its flags are written until then). Calling thread;
 * never blocks on the GPU. On failure part of the work may be queued:
 * rcci_devq_release lets it run through, and rcci_devq_gpu_done tells when
 * it has (where the end event could still be recorded). *out is set
 * whenever something was allocated (free it with rcci_devq_free). */
rcc_result_t rcci_devq_queue(struct rcc_comm *comm, rcci_op_t *op, const rcci_devapi_t *dev,
                             void *stream, volatile uint32_t *start, uint32_t ticket,
                             char *pinned, char *dscratch, rcci_devq_t **out);

/* Whether the operation uses an edge of the device ring: queued on it in
 * part (a failure of rcci_devq_queue), the edge's numbering has moved on
 * and the communicator cannot go on. */
int rcci_devq_on_device_ring(const rcci_devq_t *q);

/* Whether the GPU work queued has all run (never blocks). */
rcc_result_t rcci_devq_gpu_done(rcci_devq_t *q, int *done);

/* Progress thread: moves what the GPU has staged, receives into free
 * slots, stores the flags. *done once every message has gone both ways
 * (the GPU may still be reducing the last chunk: rcci_devq_gpu_done). Fails
 * after the communicator's timeout without progress. */
rcc_result_t rcci_devq_advance(struct rcc_comm *comm, rcci_devq_t *q, int *progressed, int *done);

/* After a failure: stores every flag the queued work may wait for, so
 * that it runs through (on whatever the slots hold) rather than hold its
 * stream forever. Any thread; idempotent. */
void rcci_devq_release(rcci_devq_t *q);

/* At the operation's end, before anything closes the connections (which
 * frees what is still out on them): requests still out are tested once,
 * those that have ended dropped; the rest go with their connection. Any
 * time later, once its GPU work has run, rcci_devq_free. Idempotent. */
void rcci_devq_settle_requests(rcci_devq_t *q);

/* rcci_devq_settle_requests where that has not been done; then the
 * registrations it held go, and its window unless the GPU may still write
 * into it. The GPU's end event stays where the GPU may still record it. */
void rcci_devq_free(struct rcc_comm *comm, rcci_devq_t *q);

/* "rank 1 (receive 3 of 12), the GPU (send 4 of 12)" for stall reports. */
void rcci_devq_waiting_for(struct rcc_comm *comm, const rcci_devq_t *q, char *buf, size_t size);

#endif /* RINGCC_DEVQUEUE_H */
