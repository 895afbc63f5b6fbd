/*
 * Memory registered with a communicator (memreg.c): the caller's buffers
 * (rcc_comm_register) and the library's own long-lived ones, registered
 * with each transport of the communicator that sends from registered
 * memory without copying it (RCCI_CAP_ZERO_COPY_SEND: ibverbs, whose
 * adapter reads it, device memory included where GPUDirect RDMA works).
 * Other transports are never asked, so registering costs nothing without
 * them.
 *
 * Lifetime: a registration is held by the table until deregistered and by
 * every executor that sends from it (rcci_memreg_send_mr) until that
 * executor ends (rcci_memreg_drop); the transports' registrations go with
 * the last holder. So deregistering while an operation still sends from
 * the memory is safe: the operation keeps what it uses.
 */
#ifndef RINGCC_MEMREG_H
#define RINGCC_MEMREG_H

#include <stddef.h>

#include "transport.h"

struct rcc_comm;
struct rcc_memreg;

/* The registrations an executor holds (a few: its buffers). */
#define RCCI_MEMREG_HELD 4
typedef struct {
    struct rcc_memreg *reg[RCCI_MEMREG_HELD];
    int n;
} rcci_memreg_held_t;

/* Registers [buf, buf + bytes) with the communicator's zero-copy
 * transports: the caller's memory, host or device as the device table says,
 * or (internal) the library's own host memory, which it drops with
 * rcci_memreg_forget. A transport that refuses is noted (INFO for the
 * caller's memory) and sends from that memory over it are copied as
 * before; internal memory that no transport took is not kept (*out NULL).
 * `out` may be NULL (the library's memory, dropped by address). */
rcc_result_t rcci_memreg_add(struct rcc_comm *comm, void *buf, size_t bytes, int internal,
                             struct rcc_memreg **out);
/* Ends a registration made by rcci_memreg_add (RCC_ERR_INVALID_ARGUMENT
 * when `reg` is not one of comm's live registrations). */
rcc_result_t rcci_memreg_remove(struct rcc_comm *comm, struct rcc_memreg *reg);
/* Ends the internal registration that starts at `buf`, if any: the library
 * is about to free it. */
void rcci_memreg_forget(struct rcc_comm *comm, const void *buf);
/* The registration with `tr` that covers [buf, buf + bytes) whole, for a
 * send over `tr`; NULL when none does (the send is copied). The executor
 * holds it in `held` until rcci_memreg_drop. Any thread driving the
 * engine. */
rcci_mr_t *rcci_memreg_send_mr(struct rcc_comm *comm, rcci_memreg_held_t *held,
                               const rcci_transport_t *tr, const void *buf, size_t bytes);
void rcci_memreg_drop(struct rcc_comm *comm, rcci_memreg_held_t *held);
/* Ends every registration (communicator teardown: nothing runs). */
void rcci_memreg_free_all(struct rcc_comm *comm);

#endif /* RINGCC_MEMREG_H */
