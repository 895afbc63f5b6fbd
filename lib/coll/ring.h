/*
 * Ring schedules as plain data: which part of the buffer goes to the next
 * rank and which arrives from the previous one, at each step and chunk.
 *
 * Allreduce = reduce-scatter (steps 0..n-2) + allgather (steps n-1..2n-3).
 * The buffer runs in one or more passes (near-equal parts, one after
 * another, each a whole allreduce of its own); a pass is cut into n
 * segments (the first count % n get one element more) and every segment
 * into the same number of chunks, so item k = (pass * nsteps + step) *
 * nchunks + chunk names one message on each ring edge, and the stream of
 * items a rank sends is exactly the stream its successor receives.
 */
#ifndef RINGCC_RING_H
#define RINGCC_RING_H

#include <stddef.h>

typedef struct {
    size_t offset, count; /* in elements */
} rcci_span_t;

typedef struct {
    int rank, nranks;
    size_t count;   /* elements in the whole buffer */
    size_t npasses; /* >= 1 */
    size_t nchunks; /* chunks per segment of a pass, >= 1 */
    int nsteps;     /* 2 * (nranks - 1) */
} rcci_ring_plan_t;

/* What one item does on this rank. */
typedef struct {
    int step;
    int segment;
    rcci_span_t span;
    /* send: read from the caller's input (step 0) rather than the output.
     * recv: reduce into the output (reduce-scatter) rather than land there
     * directly (allgather); `last_reduce` marks the step that completes a
     * segment (where AVG divides). */
    int from_input;
    int reduce;
    int last_reduce;
} rcci_ring_item_t;

rcci_span_t rcci_ring_segment(size_t count, int nranks, int segment);
/* Chunk `chunk` of a span cut into `nchunks` near-equal parts. */
rcci_span_t rcci_ring_chunk(rcci_span_t span, size_t nchunks, size_t chunk);

/* chunk_elems >= 1: the largest chunk, in elements. pass_elems: the
 * smallest pass, in elements: count / pass_elems passes, at least one (0:
 * the whole buffer in one). */
void rcci_ring_allreduce_plan(rcci_ring_plan_t *plan, size_t count, int nranks, int rank,
                              size_t chunk_elems, size_t pass_elems);
size_t rcci_ring_items(const rcci_ring_plan_t *plan);
/* The step (0 .. nsteps-1, within its pass) of an item. */
int rcci_ring_step(const rcci_ring_plan_t *plan, size_t item);
/* The pass (0 .. npasses-1) of an item. */
size_t rcci_ring_pass(const rcci_ring_plan_t *plan, size_t item);
void rcci_ring_allreduce_send(const rcci_ring_plan_t *plan, size_t item, rcci_ring_item_t *out);
void rcci_ring_allreduce_recv(const rcci_ring_plan_t *plan, size_t item, rcci_ring_item_t *out);
/* The receive whose result a send forwards (its data dependency), or -1
 * when the send reads the caller's input. */
long rcci_ring_allreduce_send_dep(const rcci_ring_plan_t *plan, size_t item);

#endif /* RINGCC_RING_H */
