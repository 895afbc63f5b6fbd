/*
 * Receive memory of closed cudaipc connections, kept until it may be freed.
 *
 * CUDA: freeing device memory that another process still has open by IPC
 * (cudaIpcOpenMemHandle without its cudaIpcCloseMemHandle) is undefined
 * behaviour; the freed memory may be handed out again while the peer's
 * copies still land in it. A connection's receive slots are the peer's to
 * write until the peer closes its side, which may come later than this
 * side's close (ranks destroy their communicators when they get there).
 * So a closing side hands its slots here: they are freed once the peer
 * says it has unmapped them (the `unmapped` word it stores in the shared
 * page when it closes) or once the peer's process is gone (the driver
 * unmaps a dead process's mappings), never before.
 *
 * Retiring never frees, even memory the peer has unmapped already: the
 * progress thread retires a failed ring's connections, and cudaFree and
 * cudaHostUnregister wait for the whole device, where a stream may be
 * parked on a flag that only that thread stores (tests/mp/fakedev.c
 * models the wait). The frees run in rcci_cipc_reap, which the transport
 * calls from the application's thread (communicator creation and end).
 *
 * One list for the process, under its own lock: the memory can outlive
 * the communicator that made it. Plain C over the device table.
 */
#ifndef RINGCC_CIPC_RETIRED_H
#define RINGCC_CIPC_RETIRED_H

#include <stdint.h>

#include "devapi.h"
#include "slots.h"

/* Hands over a closed connection's receive slots and page (either may be
 * NULL), exported to the process `peer_pid` (<= 0: unknown, then only its
 * `unmapped` word frees them). `owner` is the transport context, for
 * rcci_cipc_reap. Any thread; makes no GPU call. */
void rcci_cipc_retire(const rcci_devapi_t *dev, int device, const void *owner, void *slots,
                      rcci_cipc_page_t *page, int32_t peer_pid);
/* Frees the retired memory that may go now; for `owner` (non-NULL), waits
 * for its own until `deadline_ns` and then leaves what is left to later
 * calls. Returns how many of owner's are left. Not from the progress
 * thread: the frees wait for the device. */
int rcci_cipc_reap(const void *owner, int64_t deadline_ns);

#endif /* RINGCC_CIPC_RETIRED_H */
