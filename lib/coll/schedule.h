/*
 * Schedules: every collective as two ordered streams of steps on the ring,
 * what this rank sends to rank+1 and what it receives from rank-1. The
 * pipeline (pipeline.c) executes any schedule; a schedule is plain data and
 * pointer arithmetic, with no I/O.
 *
 *  allreduce       ring reduce-scatter + ring allgather (ring.h), step-major
 *  reduce-scatter  the ring's first half, partial sums in two scratch
 *                  segments used alternately by step (no copy of the input)
 *  allgather       the ring's second half, straight into the output
 *  broadcast       a pipelined chain root -> root+1 -> ... -> root-1
 *  reduce          a pipelined chain root+1 -> ... -> root, reducing on the way
 *  barrier         an allreduce of one byte per rank
 */
#ifndef RINGCC_SCHEDULE_H
#define RINGCC_SCHEDULE_H

#include <stddef.h>

#include "ring.h"
#include "ringcc.h"

typedef enum {
    RCCI_COLL_ALLREDUCE = 0,
    RCCI_COLL_REDUCE_SCATTER,
    RCCI_COLL_ALLGATHER,
    RCCI_COLL_BROADCAST,
    RCCI_COLL_REDUCE,
    RCCI_COLL_BARRIER,
    RCCI_COLL_P2P, /* send, recv, alltoall: not a ring schedule (p2p.c) */
} rcci_coll_t;

const char *rcci_coll_name(rcci_coll_t coll);

/* One message this rank sends. count 0: nothing moves (the receiver skips
 * the same item). The send may leave once receive `dep` is finished. */
typedef struct {
    size_t count;
    const char *src;
    long dep; /* -1: none */
} rcci_send_step_t;

/* One message this rank receives: either copied straight to `dst`, or
 * received into a slot and then out = local op slot (divided by `divisor`
 * for AVG on the step that completes the reduction). A reduction may run
 * only once send `guard` is finished (its output area is free again). */
typedef struct {
    size_t count;
    char *dst;         /* copy: destination (reduce: NULL) */
    const char *local; /* reduce: the local operand */
    char *out;         /* reduce: the result */
    int divisor;
    long guard;       /* -1: none */
    int forward_only; /* reduce: `out` is read by nothing but the send that forwards it */
} rcci_recv_step_t;

typedef struct {
    rcci_coll_t coll;
    int rank, nranks, root;
    size_t count; /* elements: allreduce/broadcast/reduce count; reduce-scatter recvcount;
                     allgather sendcount */
    size_t esize;
    rcc_redop_t redop;
    const char *sendbuf;
    char *recvbuf;
    char *scratch; /* reduce-scatter: 2 segments (rcci_schedule_scratch_bytes) */
    char *stage;   /* reduce: `slots` chunks of chunk_elems */
    size_t slots;
    size_t chunk_elems;
    size_t pass_elems; /* allreduce: the ring's smallest pass (0: one pass; ring.h) */
    /* Derived by rcci_schedule_init. */
    rcci_ring_plan_t ring; /* ring collectives */
    long ring_first;       /* first allreduce item this collective uses */
    size_t nchunks;        /* chain collectives */
    int chain_pos;         /* chain: 0 = first sender ... nranks-1 = last receiver */
    size_t nsend, nrecv;
} rcci_schedule_t;

/* Scratch that reduce-scatter needs (0 for the others). */
size_t rcci_schedule_scratch_bytes(rcci_coll_t coll, size_t count, size_t esize);

/* Fills the derived fields. Buffers and slot areas must be set before. */
void rcci_schedule_init(rcci_schedule_t *s);
/* Work done before any message: copying this rank's own part where the
 * collective is out of place, and the whole job on one rank. */
void rcci_schedule_local(const rcci_schedule_t *s);
/* That work as one copy: non-zero when `bytes` must go from src to dst. */
int rcci_schedule_local_copy(const rcci_schedule_t *s, char **dst, const char **src,
                             size_t *bytes);
void rcci_schedule_send(const rcci_schedule_t *s, size_t item, rcci_send_step_t *out);
void rcci_schedule_recv(const rcci_schedule_t *s, size_t item, rcci_recv_step_t *out);

#endif /* RINGCC_SCHEDULE_H */
