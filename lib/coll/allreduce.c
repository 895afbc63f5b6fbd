/*
 * Pipelined ring allreduce, executed chunk by chunk on the progress thread.
 *
 * Items (step, chunk) flow in order on both ring edges. A send may leave as
 * soon as the receive it forwards has been reduced; up to `slots` receives
 * and `slots` sends are in flight, so while chunk k is being reduced chunk
 * k+1 is arriving and the reduced chunk k-1 is leaving. Reduce-scatter
 * receives land in staging slots and are reduced with the caller's input
 * into the output; allgather receives land in the output directly; sends go
 * straight from the input or the output. All ranks finish with the same
 * bits: every segment is reduced once, by one rank, then copied around.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "comm.h"
#include "log.h"
#include "reduce.h"
#include "ring.h"

struct rcci_exec {
    rcci_op_t *op;
    rcci_ring_plan_t plan;
    size_t esize, nitems;
    size_t send_posted, send_done, recv_posted, recv_done;
    rcci_request_t **sreq, **rreq; /* ring buffers indexed by item % slots */
    int64_t last_progress_ns;
};

static char *ar_slot(struct rcc_comm *comm, size_t item)
{
    return comm->slot_mem + (item % (size_t)comm->slots) * comm->chunk_bytes;
}

/* Names the item in an error: "allreduce #7 (float32 sum, 1000 elements)
 * step 2 chunk 0, receiving from rank 1 (127.0.0.1:4000): " + detail. */
static rcc_result_t ar_fail(struct rcc_comm *comm, rcci_exec_t *x, rcc_result_t res, size_t item,
                            int is_send)
{
    char peer[128];
    int rank = is_send ? comm->send_link.peer : comm->recv_link.peer;
    rcci_bootstrap_peer_name(comm->bootstrap, rank, peer, sizeof peer);
    rcci_error_prefix("allreduce #%u (%s %s, %zu elements) step %zu chunk %zu, %s %s: ", x->op->seq,
                      rcc_datatype_name(x->op->dtype), rcc_redop_name(x->op->redop), x->op->count,
                      item / x->plan.nchunks, item % x->plan.nchunks,
                      is_send ? "sending to" : "receiving from", peer);
    return res;
}

rcc_result_t rcci_allreduce_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **out)
{
    rcci_exec_t *x = calloc(1, sizeof *x);
    if (!x)
        return rcci_error(RCC_ERR_NO_MEMORY, "allreduce state");
    x->op = op;
    x->esize = rcc_datatype_size(op->dtype);
    size_t chunk_elems = comm->chunk_bytes / x->esize;
    rcci_ring_allreduce_plan(&x->plan, op->count, comm->nranks, comm->rank, chunk_elems);
    x->nitems = rcci_ring_items(&x->plan);
    x->sreq = calloc((size_t)comm->slots, sizeof *x->sreq);
    x->rreq = calloc((size_t)comm->slots, sizeof *x->rreq);
    x->last_progress_ns = rcci_now_ns();
    *out = x;
    if (!x->sreq || !x->rreq)
        return rcci_error(RCC_ERR_NO_MEMORY, "allreduce request table");
    return RCC_SUCCESS;
}

/* One rank: the result is the input, divided by 1 for AVG. */
static void ar_single_rank(rcci_op_t *op, size_t esize)
{
    if (op->recvbuf != op->sendbuf)
        memcpy(op->recvbuf, op->sendbuf, op->count * esize);
}

static void ar_complete_recv(struct rcc_comm *comm, rcci_exec_t *x, size_t item)
{
    rcci_ring_item_t it;
    rcci_ring_allreduce_recv(&x->plan, item, &it);
    if (!it.reduce || it.span.count == 0)
        return;
    rcci_op_t *op = x->op;
    size_t off = it.span.offset * x->esize;
    int divisor = it.last_reduce && op->redop == RCC_AVG ? comm->nranks : 1;
    rcci_reduce((char *)op->recvbuf + off, (const char *)op->sendbuf + off, ar_slot(comm, item),
                it.span.count, op->dtype, op->redop, divisor);
}

/* Retires the requests of one direction in order, up to the first that is
 * still moving; a finished receive is reduced on the spot. */
static rcc_result_t ar_reap(struct rcc_comm *comm, rcci_exec_t *x, int sends, int *progressed)
{
    const rcci_link_t *link = sends ? &comm->send_link : &comm->recv_link;
    rcci_request_t **reqs = sends ? x->sreq : x->rreq;
    size_t *done = sends ? &x->send_done : &x->recv_done;
    size_t posted = sends ? x->send_posted : x->recv_posted;
    while (*done < posted) {
        rcci_request_t **req = &reqs[*done % (size_t)comm->slots];
        int complete = 1; /* empty chunks were never posted */
        if (*req) {
            rcc_result_t res = link->tr->test(*req, &complete);
            if (res != RCC_SUCCESS) {
                *req = NULL;
                return ar_fail(comm, x, res, *done, sends);
            }
            if (!complete)
                break;
            *req = NULL;
        }
        if (!sends)
            ar_complete_recv(comm, x, *done);
        (*done)++;
        *progressed = 1;
    }
    return RCC_SUCCESS;
}

rcc_result_t rcci_allreduce_advance(struct rcc_comm *comm, rcci_exec_t *x, int *progressed,
                                    int *done)
{
    rcci_op_t *op = x->op;
    const rcci_link_t *sl = &comm->send_link, *rl = &comm->recv_link;
    size_t slots = (size_t)comm->slots;
    rcc_result_t res;
    *progressed = *done = 0;
    if (comm->nranks == 1) {
        ar_single_rank(op, x->esize);
        *done = *progressed = 1;
        return RCC_SUCCESS;
    }
    /* Finish receives in order; each is reduced as soon as it lands. */
    res = ar_reap(comm, x, 0, progressed);
    if (res != RCC_SUCCESS)
        return res;
    while (x->recv_posted < x->nitems && x->recv_posted < x->recv_done + slots) {
        rcci_ring_item_t it;
        rcci_ring_allreduce_recv(&x->plan, x->recv_posted, &it);
        if (it.span.count > 0) { /* empty chunks are skipped on both sides */
            void *dst = it.reduce ? ar_slot(comm, x->recv_posted)
                                  : (char *)op->recvbuf + it.span.offset * x->esize;
            res = rl->tr->irecv(rl->conn, dst, it.span.count * x->esize, op->seq, NULL,
                                &x->rreq[x->recv_posted % slots]);
            if (res != RCC_SUCCESS)
                return ar_fail(comm, x, res, x->recv_posted, 0);
        }
        x->recv_posted++;
        *progressed = 1;
    }
    res = ar_reap(comm, x, 1, progressed);
    if (res != RCC_SUCCESS)
        return res;
    while (x->send_posted < x->nitems && x->send_posted < x->send_done + slots) {
        long dep = rcci_ring_allreduce_send_dep(&x->plan, x->send_posted);
        if (dep >= 0 && (size_t)dep >= x->recv_done)
            break; /* the data to forward has not been reduced yet */
        rcci_ring_item_t it;
        rcci_ring_allreduce_send(&x->plan, x->send_posted, &it);
        if (it.span.count > 0) {
            const char *base = it.from_input ? op->sendbuf : op->recvbuf;
            res =
                sl->tr->isend(sl->conn, base + it.span.offset * x->esize, it.span.count * x->esize,
                              op->seq, NULL, &x->sreq[x->send_posted % slots]);
            if (res != RCC_SUCCESS)
                return ar_fail(comm, x, res, x->send_posted, 1);
        }
        x->send_posted++;
        *progressed = 1;
    }
    int64_t now = rcci_now_ns();
    if (*progressed)
        x->last_progress_ns = now;
    *done = x->recv_done == x->nitems && x->send_done == x->nitems;
    if (!*done && now - x->last_progress_ns > comm->timeout_ns) {
        int waiting_recv = x->recv_done < x->nitems;
        size_t item = waiting_recv ? x->recv_done : x->send_done;
        res = rcci_error(RCC_ERR_TIMEOUT,
                         "no progress for %.0f s (the peer stalled, or ranks "
                         "called different operations)",
                         comm->timeout_ns / 1e9);
        return ar_fail(comm, x, res, item, !waiting_recv);
    }
    return RCC_SUCCESS;
}

void rcci_allreduce_finish(struct rcc_comm *comm, rcci_exec_t *x)
{
    if (!x)
        return;
    /* Requests still out after a failure: one test frees those that ended;
     * the rest stay queued on their connection, which the progress thread
     * closes after a failure (freeing them). */
    char error[RCCI_ERR_TEXT_BYTES]; /* the failure being reported stays the story */
    snprintf(error, sizeof error, "%s", rcci_tls_error());
    for (int i = 0; i < comm->slots && x->sreq && x->rreq; i++) {
        int complete;
        if (x->sreq[i])
            comm->send_link.tr->test(x->sreq[i], &complete);
        if (x->rreq[i])
            comm->recv_link.tr->test(x->rreq[i], &complete);
    }
    rcci_tls_error_set(error);
    free(x->sreq);
    free(x->rreq);
    free(x);
}
