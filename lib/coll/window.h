/*
 * Windows: on a whole device ring, a rank writes the chunks whose receive
 * lands in the next rank's output straight into that output, mapped by
 * IPC for one operation (docs/cuda.md, "Windows"). Both device paths use
 * them: coll/pipeline.c (the progress thread queues each chunk's GPU work
 * as it goes) and coll/devqueue.c (all of it queued at the call, the
 * destination read by the GPU when the work runs).
 *
 * Per operation, two messages each way, over links the caller names:
 *   window    to the previous rank: where this rank's output is (an IPC
 *             handle, its offset and length), or "none";
 *   unmapped  to the next rank, once this rank's writes into its output
 *             have all run and it has unmapped it: the owner's operation
 *             may not end before (CUDA forbids freeing memory that another
 *             process still has open, and a caller may free its output as
 *             soon as its operation has ended).
 * Whether an operation exchanges windows depends only on the call and on
 * settings every rank shares, so every message has its receiver.
 */
#ifndef RINGCC_WINDOW_H
#define RINGCC_WINDOW_H
#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "devapi.h"
#include "schedule.h"

typedef struct rcci_window_msg rcci_window_msg_t;

typedef struct {
    int on;      /* this operation exchanges windows */
    int offered; /* this rank offered its output: the previous rank writes into it */
    const rcci_devapi_t *dev;
    const rcci_op_t *op;
    const rcci_link_t *to_next, *from_prev; /* the links the messages go over */
    rcci_window_msg_t *mine, *theirs;       /* heap: a failed operation may leave them queued */
    uint32_t *ack;                          /* "unmapped": [0] sent, [1] received */
    rcci_request_t *sreq, *rreq, *asreq, *areq;
    int posted, ack_sent, ack_posted;
    char *base;             /* the next rank's allocation, mapped for this operation only */
    char *next;             /* the next rank's output in it; NULL: not mapped (none, or not yet) */
    rcci_schedule_t nsched; /* the next rank's schedule, on this rank's buffers: offsets */
} rcci_window_t;

/* Whether `op` exchanges windows (the part of rcci_window_begin's decision
 * known before its schedule is made): esize is its dtype's size. */
int rcci_window_wanted(const struct rcc_comm *comm, const rcci_op_t *op, size_t esize);

/* Decides whether `op` (schedule `sched`) exchanges windows: ring
 * allreduces and allgathers of RCC_CUDAIPC_WINDOW_BYTES or more on a whole
 * device ring. `can_offer`: this rank can take writes into its output (it
 * receives in place). Makes this rank's window message (exported now, so
 * on the caller's thread where that is the one that knows the buffer) but
 * sends nothing. Fails only for lack of memory. */
rcc_result_t rcci_window_begin(struct rcc_comm *comm, const rcci_op_t *op,
                               const rcci_schedule_t *sched, const rcci_devapi_t *dev,
                               int can_offer, const rcci_link_t *to_next,
                               const rcci_link_t *from_prev, rcci_window_t *w);

/* Sends this rank's window and posts the receive of the next rank's
 * (once, when the operation's memory may be written: its stream has
 * reached it). */
rcc_result_t rcci_window_post(struct rcc_comm *comm, rcci_window_t *w, const rcci_tag_t *tag);

/* Whether the next rank's window has come (and is mapped where offered). */
int rcci_window_known(const rcci_window_t *w);

/* Progress thread: tests the messages, maps the next rank's window when it
 * comes, and once `writes_done` (every write of this rank into it has
 * run) unmaps it and says so; the previous rank's "unmapped" is received
 * once `acks_after` (all data on from_prev's connection has been posted,
 * where it shares the connection). `must_map`: the next rank's offer must
 * be taken (its receives will not look in their slots), so failing to map
 * it fails the operation; else those chunks go through the slots. */
rcc_result_t rcci_window_advance(struct rcc_comm *comm, rcci_window_t *w, const rcci_tag_t *tag,
                                 int writes_done, int acks_after, int must_map, int *progressed);

/* Where in the next rank's mapped output send `item` of `count` elements
 * lands, when its receive there is a copy into the output; NULL: not. */
char *rcci_window_dst(const rcci_window_t *w, size_t item, size_t count);

/* The same, as an offset from the next rank's output, known before the
 * window is (SIZE_MAX: that send does not land in the output). */
size_t rcci_window_offset(const rcci_window_t *w, size_t item, size_t count);

/* Every window message has gone both ways (or the operation has none). */
int rcci_window_over(const rcci_window_t *w);

/* The "unmapped" of the previous rank has come (or none is expected). */
int rcci_window_released(const rcci_window_t *w);

/* At the end, whatever happened, before anything closes the connections
 * (which frees what is still out on them): requests still out are tested
 * once, those that have ended dropped. */
void rcci_window_settle(rcci_window_t *w);

/* Then the mapping goes where `writes_ended` (nothing of this rank can
 * still write into it: else it stays mapped, as a write into unmapped
 * memory would break the context). The messages' memory goes unless a
 * request may still use it (it then goes with the connection's close,
 * leaked here). */
void rcci_window_end(rcci_window_t *w, int writes_ended);

#endif /* RINGCC_WINDOW_H */
