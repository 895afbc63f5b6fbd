/*
 * The pipeline: executes any schedule (schedule.h) chunk by chunk on the
 * progress thread.
 *
 * Steps flow in order on both ring edges. A send leaves as soon as the
 * receive it forwards is finished; up to `slots` receives and `slots` sends
 * are in flight, so while chunk k is being reduced chunk k+1 is arriving and
 * the finished chunk k-1 is leaving. Receives that reduce land in receive
 * slots and are combined with the local operand straight into their
 * destination; copy receives land in the output directly; sends go straight
 * from the caller's buffers (or from scratch, for partial results the caller
 * has no room for). Each segment is reduced once, by one rank, so every rank
 * ends with the same bits.
 *
 * Device buffers (rcci_coll_start_device; stream operations here only with
 * RCC_DEVICE_PIPELINE=4, the rest go queued at the call, devqueue.c) take
 * the device ring's edges
 * where it has them (devring.c: cudaipc moves device memory itself), in
 * chunks of RCC_DEVICE_CHUNK_BYTES: a receive is reduced (or copied out)
 * where the transport received it, in the receiver's slot, and the result
 * that the next send forwards is written straight into the next rank's
 * slot by the same kernel (in place: transport.h), so a reduced chunk
 * crosses device memory once per step; sends that cannot go so leave from
 * the device buffers. Elsewhere chunks are staged through pinned host
 * slots for the host transports.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "comm.h"
#include "devapi.h"
#include "log.h"
#include "memreg.h"
#include "params.h"
#include "reduce.h"
#include "schedule.h"
#include "window.h"

struct rcci_exec {
    rcci_op_t *op;
    rcci_schedule_t sched;
    size_t send_posted, send_done, recv_posted, recv_done;
    rcci_request_t **sreq, **rreq; /* ring buffers indexed by item % slots */
    int64_t last_progress_ns;
    int local_done;
    size_t nconns;              /* connections per edge it deals its messages over */
    const rcci_link_t *sl, *rl; /* the edges it runs on: the host ring's or the device ring's */
    size_t snconns, rnconns;    /* connections it deals over on each */
    rcci_tag_t tag;             /* every message of the operation carries it */
    rcci_memreg_held_t held;    /* registered memory its sends go from (memreg.h) */
    /* Device buffers (rcci_coll_start_device): every chunk goes through a
     * pinned slot; the copies and reductions run on `dstream`, and a step
     * counts as done when its event has completed. Receives are posted,
     * then land (the transport is done, the device work queued), then are
     * done; sends are staged (copy to the slot queued), then posted, then
     * done. */
    const rcci_devapi_t *dev;
    void *dstream;
    char *pin_recv, *pin_send; /* `slots` chunks each */
    void **rev, **sev;         /* an event per slot */
    /* Per send slot: where the staged send goes from (its pinned slot, or
     * the device buffer itself over GPUDirect RDMA or the device ring) and
     * the registration it goes with (NULL: none, copied by the transport). */
    const char **sfrom;
    rcci_mr_t **smr;
    size_t recv_landed, send_staged;
    /* Edges of the device ring: no staging. Receives that reduce land in
     * `dslots` (device memory), the others in the output, and both wait
     * for `start_ev` (the device scratch exists in stream order); sends
     * leave from the device buffers once the stream's work before them is
     * done (their event). */
    int rdirect, sdirect;
    char *dslots;
    size_t chunk_bytes;  /* device: the chunk (and slot) size it runs with */
    const void **rview;  /* per slot: where an in-place receive lies (NULL: not in place) */
    unsigned char *rinplace; /* per slot: the receive was posted in place (its slot is released) */
    /* Windows (window.h): on a whole device ring, each rank tells the
     * previous one where its output is (over the reverse direction of their
     * connection), and sends whose receive lands in the next rank's output
     * are written there (RCCI_SEND_DIRECT). */
    rcci_window_t win;
    void *start_ev;
    int started;
    int ended; /* advance reported it done: nothing of it is left on the GPU */
};

static char *pipe_slot(struct rcc_comm *comm, size_t item)
{
    return comm->slot_mem + (item % (size_t)comm->slots) * comm->chunk_bytes;
}

rcc_result_t rcci_coll_step_fail(struct rcc_comm *comm, const rcci_op_t *op,
                                 const rcci_schedule_t *sched, int peer, rcc_result_t res,
                                 size_t item, int is_send)
{
    char name[128];
    rcci_bootstrap_peer_name(comm->bootstrap, peer, name, sizeof name);
    size_t nchunks = sched->ring.nchunks ? sched->ring.nchunks : sched->nchunks;
    nchunks = nchunks ? nchunks : 1;
    size_t step = item / nchunks;
    char pass[48] = "";
    if (sched->ring.npasses > 1) {
        size_t whole = item + (size_t)sched->ring_first;
        step = (size_t)rcci_ring_step(&sched->ring, whole);
        snprintf(pass, sizeof pass, " pass %zu of %zu,", rcci_ring_pass(&sched->ring, whole),
                 sched->ring.npasses);
    }
    rcci_error_prefix("%s #%u (%s %s, count %zu, root %d)%s step %zu chunk %zu, %s %s: ",
                      rcci_coll_name(op->coll), op->seq, rcc_datatype_name(op->dtype),
                      rcc_redop_name(op->redop), op->count, op->root, pass, step, item % nchunks,
                      is_send ? "sending to" : "receiving from", name);
    return res;
}

static rcc_result_t pipe_fail(struct rcc_comm *comm, rcci_exec_t *x, rcc_result_t res, size_t item,
                              int is_send)
{
    return rcci_coll_step_fail(comm, x->op, &x->sched, is_send ? x->sl->peer : x->rl->peer, res,
                               item, is_send);
}

/* Grows the communicator's scratch to `bytes` (kept for later operations). */
static rcc_result_t pipe_scratch(struct rcc_comm *comm, size_t bytes)
{
    if (bytes <= comm->scratch_bytes)
        return RCC_SUCCESS;
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes) != 0)
        return rcci_error(RCC_ERR_NO_MEMORY, "%zu bytes of scratch for partial results", bytes);
    rcci_memreg_forget(comm, comm->scratch);
    free(comm->scratch);
    comm->scratch = p;
    comm->scratch_bytes = bytes;
    /* Partial results are sent from it (stage_mem's note, comm.c). */
    return rcci_memreg_add(comm, p, bytes, 1, NULL);
}

/* Chunks of RCC_CHUNK_BYTES, but at least PIPE_MIN_CHUNKS per segment (down
 * to PIPE_FLOOR_BYTES): a mid-sized buffer cut into two chunks per segment
 * leaves the pipeline mostly empty (4 ranks, 4 MiB: 9.8 ms with 512K chunks,
 * 8.2 ms with 128K). On the device ring (RCC_DEVICE_CHUNK_BYTES) at least
 * PIPE_DEVICE_MIN_CHUNKS: there each chunk costs a launch, a counter poll
 * and, with ranks sharing a GPU, a switch between their contexts, so the
 * chunk size is left to the parameter, and two chunks still overlap one's
 * move with the other's reduction. Depends only on the operation, the rank
 * count and whether the device ring is whole, so every rank cuts alike. */
#define PIPE_MIN_CHUNKS 8
#define PIPE_DEVICE_MIN_CHUNKS 2
#define PIPE_FLOOR_BYTES (64 * 1024)

static size_t pipe_chunk_elems(const struct rcc_comm *comm, const rcci_op_t *op, size_t esize,
                               size_t chunk_bytes, size_t min_chunks)
{
    int blocks = op->coll == RCCI_COLL_REDUCE_SCATTER || op->coll == RCCI_COLL_ALLGATHER;
    int chain = op->coll == RCCI_COLL_BROADCAST || op->coll == RCCI_COLL_REDUCE;
    size_t segment = (blocks || chain ? op->count : op->count / (size_t)comm->nranks) * esize;
    size_t bytes = segment / min_chunks;
    if (bytes < PIPE_FLOOR_BYTES)
        bytes = PIPE_FLOOR_BYTES;
    if (bytes > chunk_bytes)
        bytes = chunk_bytes;
    return bytes / esize ? bytes / esize : 1;
}

/* An allreduce on the ring runs in passes of RCC_RING_PASS_BYTES to twice
 * that (ring.h), in chunks of its own: `min_chunks` per segment of a pass
 * (down to PIPE_FLOOR_BYTES, up to the operation's chunk), so the pipeline
 * stays as full across a step's turn as a whole operation's does. A pass's
 * allgather then overwrites what its reduce-scatter wrote a moment before,
 * still in cache, where one pass over a large buffer comes back to it after
 * the whole buffer went by. 4 ranks on the 2-CPU lab, unshaped, in place:
 * 2 MiB passes of 64 KiB chunks ran 1.19x-1.37x the busbw of one pass of
 * 256 KiB chunks from 4 to 128 MiB; 4 MiB passes, or 32 KiB chunks, less
 * (bench/results/README.md). Sets *pass_elems (0: one pass) and, where the
 * operation runs in passes, *chunk_elems. */
static void pipe_passes(const struct rcc_comm *comm, const rcci_op_t *op, size_t esize,
                        size_t min_chunks, size_t pass_bytes, size_t *chunk_elems,
                        size_t *pass_elems)
{
    *pass_elems = 0;
    if (pass_bytes == 0 || op->coll != RCCI_COLL_ALLREDUCE)
        return;
    size_t per_pass = (size_t)comm->nranks * min_chunks;
    size_t chunk = pass_bytes / per_pass;
    if (chunk < PIPE_FLOOR_BYTES)
        chunk = PIPE_FLOOR_BYTES;
    chunk /= esize;
    if (chunk > *chunk_elems)
        chunk = *chunk_elems;
    size_t pass = pass_bytes / esize > per_pass * chunk ? pass_bytes / esize : per_pass * chunk;
    if (op->count / pass < 2)
        return; /* one pass: the operation's own chunks */
    *pass_elems = pass;
    *chunk_elems = chunk;
}

/* The schedule of `op` in chunks of at most `chunk_bytes` (an allreduce on
 * the ring in passes of `pass_bytes` or more, 0: one); where partial results
 * go (reduce-scatter's two segments, or reduce's `slots` chunks): on the
 * device, `scratch`, the operation's (NULL where it needs none); on the host
 * (scratch NULL), the communicator's host areas, which only the progress
 * thread may read (it grows them), while device schedules are also made at
 * the call. */
static void pipe_schedule(struct rcc_comm *comm, const rcci_op_t *op, int device, char *scratch,
                          size_t chunk_bytes, size_t min_chunks, size_t pass_bytes,
                          rcci_schedule_t *sched)
{
    size_t esize = rcc_datatype_size(op->dtype);
    size_t chunk_elems = pipe_chunk_elems(comm, op, esize, chunk_bytes, min_chunks), pass_elems;
    pipe_passes(comm, op, esize, min_chunks, pass_bytes, &chunk_elems, &pass_elems);
    *sched = (rcci_schedule_t){.coll = op->coll,
                               .rank = comm->rank,
                               .nranks = comm->nranks,
                               .root = op->root,
                               .count = op->count,
                               .esize = esize,
                               .redop = op->redop,
                               .sendbuf = op->sendbuf,
                               .recvbuf = op->recvbuf,
                               .scratch = device ? scratch : comm->scratch,
                               .stage = device ? scratch : comm->stage_mem,
                               .slots = (size_t)comm->slots,
                               .chunk_elems = chunk_elems,
                               .pass_elems = pass_elems};
    rcci_schedule_init(sched);
}

size_t rcci_coll_edge_conns(const struct rcc_comm *comm, const rcci_op_t *op)
{
    /* The operation's whole buffer, the same on every rank. */
    size_t nblocks = op->coll == RCCI_COLL_REDUCE_SCATTER || op->coll == RCCI_COLL_ALLGATHER
                         ? (size_t)comm->nranks
                         : 1;
    size_t bytes = op->count * rcc_datatype_size(op->dtype) * nblocks;
    size_t n = bytes >= comm->send_link.spread_min_bytes ? (size_t)comm->send_link.nconns : 1;
    return n < 1 ? 1 : n;
}

static rcc_result_t pipe_start(struct rcc_comm *comm, rcci_op_t *op, int device, char *scratch,
                               size_t chunk_bytes, size_t min_chunks, size_t pass_bytes,
                               rcci_exec_t **out)
{
    rcci_exec_t *x = calloc(1, sizeof *x);
    if (!x)
        return rcci_error(RCC_ERR_NO_MEMORY, "operation state");
    *out = x;
    x->op = op;
    rcci_op_tag(op, op->seq, &x->tag);
    size_t esize = rcc_datatype_size(op->dtype);
    rcc_result_t res =
        device ? RCC_SUCCESS
               : pipe_scratch(comm, rcci_schedule_scratch_bytes(op->coll, op->count, esize));
    if (res != RCC_SUCCESS)
        return res;
    pipe_schedule(comm, op, device, scratch, chunk_bytes, min_chunks, pass_bytes, &x->sched);
    x->nconns = rcci_coll_edge_conns(comm, op);
    x->sl = &comm->send_link;
    x->rl = &comm->recv_link;
    x->snconns = x->rnconns = x->nconns;
    x->sreq = calloc((size_t)comm->slots, sizeof *x->sreq);
    x->rreq = calloc((size_t)comm->slots, sizeof *x->rreq);
    x->last_progress_ns = rcci_now_ns();
    if (!x->sreq || !x->rreq)
        return rcci_error(RCC_ERR_NO_MEMORY, "request table");
    return RCC_SUCCESS;
}

rcc_result_t rcci_coll_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **out)
{
    return pipe_start(comm, op, 0, NULL, comm->chunk_bytes, PIPE_MIN_CHUNKS, comm->ring_pass_bytes,
                      out);
}

/* Device buffers go in chunks of up to RCC_DEVICE_CHUNK_BYTES, larger than host ones: each
 * chunk costs launches and copies on the GPU (and, with ranks sharing a GPU, switches between
 * their contexts). Cut as host chunks are, with the device ring's smaller minimum count where
 * the ring is whole: the same on every rank. */
static size_t pipe_device_min_chunks(const struct rcc_comm *comm)
{
    return comm->devring_whole ? PIPE_DEVICE_MIN_CHUNKS : PIPE_MIN_CHUNKS;
}

void rcci_coll_device_schedule(struct rcc_comm *comm, const rcci_op_t *op, char *dscratch,
                               rcci_schedule_t *sched)
{
    pipe_schedule(comm, op, 1, dscratch, comm->dev_chunk_bytes, pipe_device_min_chunks(comm), 0,
                  sched);
}

size_t rcci_coll_device_chunk(const struct rcc_comm *comm, const rcci_op_t *op)
{
    size_t esize = rcc_datatype_size(op->dtype);
    return pipe_chunk_elems(comm, op, esize, comm->dev_chunk_bytes, pipe_device_min_chunks(comm)) *
           esize;
}

int rcci_coll_device_inplace(const struct rcc_comm *comm, const rcci_op_t *op)
{
    const rcci_link_t *rl = &comm->drecv_link;
    return rl->nconns > 0 && rl->conns[0] &&
           rcci_coll_device_chunk(comm, op) <= rl->tr->inplace_bytes(rl->conns[0], 0);
}

size_t rcci_coll_device_scratch_bytes(const struct rcc_comm *comm, const rcci_op_t *op)
{
    if (op->coll == RCCI_COLL_REDUCE)
        return (size_t)comm->slots * rcci_coll_device_chunk(comm, op);
    return rcci_schedule_scratch_bytes(op->coll, op->count, rcc_datatype_size(op->dtype));
}

/* Retires the requests of one direction in order, up to the first that is
 * still moving; a finished receive is reduced on the spot. */
static rcc_result_t pipe_reap(struct rcc_comm *comm, rcci_exec_t *x, int sends, int *progressed)
{
    const rcci_link_t *link = sends ? x->sl : x->rl;
    rcci_request_t **reqs = sends ? x->sreq : x->rreq;
    size_t *done = sends ? &x->send_done : &x->recv_done;
    size_t posted = sends ? x->send_posted : x->recv_posted;
    const rcci_op_t *op = x->op;
    while (*done < posted) {
        rcci_recv_step_t step;
        if (!sends) {
            rcci_schedule_recv(&x->sched, *done, &step);
            if (step.guard >= 0 && (size_t)step.guard >= x->send_done)
                break; /* the output area is still being sent from */
        }
        rcci_request_t **req = &reqs[*done % (size_t)comm->slots];
        int was_posted = *req != NULL, complete;
        rcc_result_t res = rcci_coll_test_req(link, req, &complete);
        if (res != RCC_SUCCESS)
            return pipe_fail(comm, x, res, *done, sends);
        if (!complete)
            break;
        if (was_posted)
            RCCI_TL(comm,
                    rcci_tl_done(comm->tl, sends ? RCCI_TL_SEND : RCCI_TL_RECV, *done, op->seq));
        if (!sends && step.local && step.count > 0) {
            int64_t t0 = rcci_tl_now(comm->tl);
            rcci_reduce(step.out, step.local, pipe_slot(comm, *done), step.count, op->dtype,
                        op->redop, step.divisor);
            RCCI_TL(comm, rcci_tl_work(comm->tl, "reduce", t0, step.count * x->sched.esize));
        }
        (*done)++;
        *progressed = 1;
    }
    return RCC_SUCCESS;
}

/* ---- device buffers ------------------------------------------------------ */

rcc_result_t rcci_coll_start_device(struct rcc_comm *comm, rcci_op_t *op, const rcci_devapi_t *dev,
                                    void *dstream, char *pinned, char *dscratch, char *dslots,
                                    rcci_exec_t **out)
{
    rcc_result_t res = pipe_start(comm, op, 1, dscratch, comm->dev_chunk_bytes,
                                  pipe_device_min_chunks(comm), 0, out);
    rcci_exec_t *x = *out;
    if (res != RCC_SUCCESS)
        return res;
    size_t slots = (size_t)comm->slots;
    x->dev = dev;
    x->dstream = dstream;
    x->chunk_bytes = x->sched.chunk_elems * x->sched.esize; /* rcci_coll_device_chunk */
    if (comm->dsend_link.nconns > 0) {
        x->sl = &comm->dsend_link;
        x->sdirect = 1;
        x->snconns = 1;
    }
    if (comm->drecv_link.nconns > 0 && (dslots || rcci_coll_device_inplace(comm, op))) {
        x->rl = &comm->drecv_link;
        x->rdirect = 1;
        x->rnconns = 1;
        x->dslots = dslots;
    }
    res = dev->event_create(&x->start_ev);
    if (res == RCC_SUCCESS)
        res = dev->event_record(x->start_ev, dstream);
    if (res != RCC_SUCCESS)
        return res;
    x->pin_recv = pinned;
    x->pin_send = pinned + slots * x->chunk_bytes;
    x->rev = calloc(slots, sizeof *x->rev);
    x->sev = calloc(slots, sizeof *x->sev);
    x->rview = calloc(slots, sizeof *x->rview);
    x->rinplace = calloc(slots, 1);
    x->sfrom = calloc(slots, sizeof *x->sfrom);
    x->smr = calloc(slots, sizeof *x->smr);
    if (!x->rev || !x->sev || !x->rview || !x->rinplace || !x->sfrom || !x->smr)
        return rcci_error(RCC_ERR_NO_MEMORY, "event table");
    for (size_t i = 0; i < slots && res == RCC_SUCCESS; i++) {
        res = dev->event_create(&x->rev[i]);
        if (res == RCC_SUCCESS)
            res = dev->event_create(&x->sev[i]);
    }
    if (res != RCC_SUCCESS || !x->sdirect || !x->rdirect)
        return res;
    /* In place only: a receive that copies out of its slot would not look
     * for it elsewhere. */
    int can_offer = x->rl->tr->inplace_bytes(x->rl->conns[0], 0) > 0;
    res = rcci_window_begin(comm, op, &x->sched, dev, can_offer, x->sl, x->rl, &x->win);
    return res == RCC_SUCCESS ? rcci_window_post(comm, &x->win, &x->tag) : res;
}

/* An event of a step with data: ready (1) or not yet (0). */
static rcc_result_t dev_ready(rcci_exec_t *x, void *event, size_t count, int *ready)
{
    *ready = 1;
    return count > 0 ? x->dev->event_query(event, ready) : RCC_SUCCESS;
}

/* Where the send that forwards receive `item`'s result goes, when that
 * send is the next and may go now, so that the work that lands the receive
 * writes it there in the same pass: on the device ring, the next rank's
 * receive slot (*fused: the send is committed after that work, in place);
 * staged, its pinned slot (staged with it: no copy, and no wait for the
 * reduction's event). *fwd NULL: the send goes later, the usual way. */
static rcc_result_t pipe_forward_to(struct rcc_comm *comm, rcci_exec_t *x, size_t item,
                                    const rcci_recv_step_t *rs, char **fwd, int *fused,
                                    int *direct)
{
    size_t slots = (size_t)comm->slots;
    *fwd = NULL;
    *fused = *direct = 0;
    if (x->send_staged >= x->sched.nsend || x->send_staged >= x->send_done + slots)
        return RCC_SUCCESS;
    rcci_send_step_t ss;
    rcci_schedule_send(&x->sched, x->send_staged, &ss);
    if (ss.dep != (long)item || ss.src != (rs->local ? rs->out : rs->dst) || ss.count != rs->count)
        return RCC_SUCCESS;
    if (!x->sdirect) {
        if (rs->local)
            *fwd = x->pin_send + (x->send_staged % slots) * x->chunk_bytes;
        return RCC_SUCCESS;
    }
    rcci_conn_t *conn = x->sl->conns[x->send_staged % x->snconns];
    size_t bytes = rs->count * x->sched.esize;
    if (x->send_posted != x->send_staged || bytes > x->sl->tr->inplace_bytes(conn, 1))
        return RCC_SUCCESS;
    void *at;
    rcc_result_t res = x->sl->tr->reserve_send(conn, bytes, &at);
    if (res == RCC_SUCCESS && at) {
        /* Into the next rank's output where it lands there, else its slot. */
        char *dst = rcci_window_dst(&x->win, x->send_staged, rs->count);
        *fwd = dst ? dst : at;
        *direct = dst != NULL;
        *fused = 1;
    }
    return res;
}

/* Where receive `item` lands: a pinned slot, or on the device ring a
 * device slot (a reduction's operand) or its destination. */
static char *dev_recv_dst(struct rcc_comm *comm, rcci_exec_t *x, size_t item,
                          const rcci_recv_step_t *step)
{
    size_t off = (item % (size_t)comm->slots) * x->chunk_bytes;
    if (!x->rdirect)
        return x->pin_recv + off;
    return step->local ? x->dslots + off : step->dst;
}

/* The copy step's device work: the received chunk `in` to its destination
 * `dst` (nothing when it lies there already: direct, or received there),
 * and to `fwd` (NULL: no forwarding send goes now), reading `in` once
 * where the device table can (copy2). */
static rcc_result_t pipe_land_copy(rcci_exec_t *x, char *dst, char *fwd, const char *in,
                                   size_t bytes)
{
    if (in == dst)
        return fwd ? x->dev->copy(fwd, in, bytes, x->dstream) : RCC_SUCCESS;
    if (fwd && x->dev->copy2)
        return x->dev->copy2(dst, fwd, in, bytes, x->dstream);
    rcc_result_t res = x->dev->copy(dst, in, bytes, x->dstream);
    if (res == RCC_SUCCESS && fwd)
        res = x->dev->copy(fwd, in, bytes, x->dstream);
    return res;
}

/* Send slot k goes from its pinned slot: `src`, when given, is copied
 * there on the stream (else the work that lands a receive writes it). */
static rcc_result_t pipe_send_from_pin(struct rcc_comm *comm, rcci_exec_t *x, size_t k,
                                       const char *src, size_t bytes)
{
    char *pin = x->pin_send + k * x->chunk_bytes;
    x->sfrom[k] = pin;
    x->smr[k] = rcci_memreg_send_mr(comm, &x->held, x->sl->tr, pin, bytes);
    return src ? x->dev->copy(pin, src, bytes, x->dstream) : RCC_SUCCESS;
}

/* Queues the device work of receive recv_landed, which has arrived: the
 * reduction into its result (or the copy to its destination), writing the
 * send that forwards it in the same pass where that can go now; then the
 * return of an in-place receive's slot, and the step's event. */
static rcc_result_t pipe_land_device(struct rcc_comm *comm, rcci_exec_t *x,
                                     const rcci_recv_step_t *step)
{
    const rcci_op_t *op = x->op;
    size_t slots = (size_t)comm->slots, k = x->recv_landed % slots;
    size_t bytes = step->count * x->sched.esize;
    const char *in = x->rview[k] ? x->rview[k] : dev_recv_dst(comm, x, x->recv_landed, step);
    if (x->rinplace[k] && !x->rview[k] && step->local) /* direct, yet not a copy into the output */
        return rcci_error(RCC_ERR_REMOTE, "rank %d wrote a reduction's operand into this rank's "
                                          "output",
                          x->rl->peer);
    char *fwd;
    int fused, direct;
    rcc_result_t res = pipe_forward_to(comm, x, x->recv_landed, step, &fwd, &fused, &direct);
    if (res != RCC_SUCCESS)
        return res;
    if (!step->local)
        res = pipe_land_copy(x, step->dst, fwd, in, bytes);
    else if (fused && step->forward_only) /* only the next rank needs it */
        res = x->dev->reduce(fwd, step->local, in, step->count, op->dtype, op->redop,
                             step->divisor, x->dstream);
    else if (fwd)
        res = x->dev->reduce_copy(step->out, fwd, step->local, in, step->count, op->dtype, op->redop,
                                  step->divisor, x->dstream);
    else
        res = x->dev->reduce(step->out, step->local, in, step->count, op->dtype, op->redop,
                             step->divisor, x->dstream);
    if (res == RCC_SUCCESS && x->rinplace[k])
        res = x->rl->tr->release(x->rl->conns[x->recv_landed % x->rnconns], x->dstream);
    if (res == RCC_SUCCESS)
        res = x->dev->event_record(x->rev[k], x->dstream);
    if (res != RCC_SUCCESS || !fwd)
        return res;
    size_t sk = x->send_staged % slots;
    if (!fused) { /* staged with it */
        pipe_send_from_pin(comm, x, sk, NULL, bytes);
        x->send_staged++;
        return x->dev->event_record(x->sev[sk], x->dstream);
    }
    res = x->sl->tr->commit_send(x->sl->conns[x->send_staged % x->snconns], bytes, &x->tag,
                                 x->dstream, direct ? RCCI_SEND_DIRECT : 0, &x->sreq[sk]);
    if (res != RCC_SUCCESS)
        return res;
    x->send_staged++;
    x->send_posted++;
    comm->direct_sends += (uint64_t)direct;
    return RCC_SUCCESS;
}

static rcc_result_t pipe_recvs_device(struct rcc_comm *comm, rcci_exec_t *x, int *progressed)
{
    const rcci_link_t *rl = x->rl;
    size_t slots = (size_t)comm->slots, esize = x->sched.esize;
    rcc_result_t res;
    while (x->recv_done < x->recv_landed) { /* device work finished */
        rcci_recv_step_t step;
        int ready;
        rcci_schedule_recv(&x->sched, x->recv_done, &step);
        res = dev_ready(x, x->rev[x->recv_done % slots], step.count, &ready);
        if (res != RCC_SUCCESS)
            return pipe_fail(comm, x, res, x->recv_done, 0);
        if (!ready)
            break;
        x->recv_done++;
        *progressed = 1;
    }
    /* The next rank's window first (a message's latency from the start):
     * the work that lands a receive decides where its forwarding send goes. */
    while (x->recv_landed < x->recv_posted &&
           rcci_window_known(&x->win)) { /* arrived: queue the device work */
        rcci_recv_step_t step;
        rcci_schedule_recv(&x->sched, x->recv_landed, &step);
        if (step.guard >= 0 && (size_t)step.guard >= x->send_done)
            break; /* the output area is still being sent from */
        int complete;
        res = rcci_coll_test_req(rl, &x->rreq[x->recv_landed % slots], &complete);
        if (res != RCC_SUCCESS)
            return pipe_fail(comm, x, res, x->recv_landed, 0);
        if (!complete)
            break;
        if (step.count > 0) {
            res = pipe_land_device(comm, x, &step);
            if (res != RCC_SUCCESS)
                return pipe_fail(comm, x, res, x->recv_landed, 0);
        }
        x->recv_landed++;
        *progressed = 1;
    }
    while (x->recv_posted < x->sched.nrecv && x->recv_posted < x->recv_done + slots) {
        rcci_recv_step_t step;
        rcci_schedule_recv(&x->sched, x->recv_posted, &step);
        /* Direct receives write where they land at once: not before the
         * device memory exists in stream order, nor into an output area
         * still being sent from. */
        if (x->rdirect && step.count > 0 &&
            (!x->started || (!step.local && step.guard >= 0 && (size_t)step.guard >= x->send_done)))
            break;
        if (step.count > 0) {
            /* On the device ring, in place where it fits a slot: read where
             * it lands, no copy out. */
            rcci_conn_t *conn = rl->conns[x->recv_posted % x->rnconns];
            size_t k = x->recv_posted % slots, bytes = step.count * esize;
            x->rview[k] = NULL;
            x->rinplace[k] = x->rdirect && bytes <= rl->tr->inplace_bytes(conn, 0);
            if (x->rinplace[k])
                res = rl->tr->irecv_inplace(conn, bytes, &x->tag, &x->rview[k], &x->rreq[k]);
            else
                res = rl->tr->irecv(conn, dev_recv_dst(comm, x, x->recv_posted, &step), bytes,
                                    &x->tag, NULL, &x->rreq[k]);
            if (res != RCC_SUCCESS)
                return pipe_fail(comm, x, res, x->recv_posted, 0);
        }
        x->recv_posted++;
        *progressed = 1;
    }
    return RCC_SUCCESS;
}

static rcc_result_t pipe_sends_device(struct rcc_comm *comm, rcci_exec_t *x, int *progressed)
{
    const rcci_link_t *sl = x->sl;
    size_t slots = (size_t)comm->slots, esize = x->sched.esize;
    rcc_result_t res;
    while (x->send_posted < x->send_staged) { /* in its slot: onto the wire */
        rcci_send_step_t step;
        int ready;
        rcci_schedule_send(&x->sched, x->send_posted, &step);
        size_t k = x->send_posted % slots;
        res = dev_ready(x, x->sev[k], step.count, &ready);
        if (res == RCC_SUCCESS && ready && step.count > 0)
            res = sl->tr->isend(sl->conns[x->send_posted % x->snconns], x->sfrom[k],
                                step.count * esize, &x->tag, x->smr[k], &x->sreq[k]);
        if (res != RCC_SUCCESS)
            return pipe_fail(comm, x, res, x->send_posted, 1);
        if (!ready)
            break;
        x->send_posted++;
        *progressed = 1;
    }
    while (x->send_staged < x->sched.nsend && x->send_staged < x->send_done + slots) {
        rcci_send_step_t step;
        rcci_schedule_send(&x->sched, x->send_staged, &step);
        if (step.dep >= 0 && (size_t)step.dep >= x->recv_done)
            break; /* what it forwards has not been reduced yet */
        if (step.count > 0) {
            /* Direct (the device ring, or device memory registered for
             * GPUDirect RDMA): no copy, only the event that says the
             * stream's work before it (the local copy, the reduction it
             * forwards) is done. */
            size_t k = x->send_staged % slots, bytes = step.count * esize;
            rcci_mr_t *gdr =
                x->sdirect ? NULL : rcci_memreg_send_mr(comm, &x->held, sl->tr, step.src, bytes);
            res = RCC_SUCCESS;
            if (gdr) /* tests read it */
                __atomic_fetch_add(&comm->gdr_sends, 1, __ATOMIC_RELAXED);
            if (x->sdirect || gdr)
                x->sfrom[k] = step.src, x->smr[k] = gdr;
            else
                res = pipe_send_from_pin(comm, x, k, step.src, bytes);
            if (res == RCC_SUCCESS)
                res = x->dev->event_record(x->sev[k], x->dstream);
            if (res != RCC_SUCCESS)
                return pipe_fail(comm, x, res, x->send_staged, 1);
        }
        x->send_staged++;
        *progressed = 1;
    }
    return RCC_SUCCESS;
}

static rcc_result_t pipe_advance_device(struct rcc_comm *comm, rcci_exec_t *x, int *progressed)
{
    if (!x->local_done) {
        char *dst;
        const char *src;
        size_t bytes;
        if (rcci_schedule_local_copy(&x->sched, &dst, &src, &bytes)) {
            rcc_result_t res = x->dev->copy(dst, src, bytes, x->dstream);
            if (res != RCC_SUCCESS)
                return res;
        }
        x->local_done = *progressed = 1;
    }
    if (!x->started) {
        rcc_result_t res = x->dev->event_query(x->start_ev, &x->started);
        if (res != RCC_SUCCESS)
            return res;
    }
    /* This rank's writes into the next rank's output are done once all its
     * sends are (a direct send completes when its copy has run); the
     * previous rank's "unmapped" comes after all its data on the connection. */
    rcc_result_t res = rcci_window_advance(comm, &x->win, &x->tag, x->send_done == x->sched.nsend,
                                           x->recv_posted == x->sched.nrecv, 0, progressed);
    /* Finished sends first (send_done up to send_posted): their slots may
     * take a reduction that lands below, and their output areas receives. */
    if (res == RCC_SUCCESS)
        res = pipe_reap(comm, x, 1, progressed);
    if (res == RCC_SUCCESS)
        res = pipe_recvs_device(comm, x, progressed);
    if (res == RCC_SUCCESS)
        res = pipe_sends_device(comm, x, progressed);
    if (x->recv_landed > x->recv_done || x->send_staged > x->send_posted || x->rdirect ||
        x->sdirect || !x->started)
        rcci_poll_within(comm, RCCI_POLL_WATCH_US); /* the GPU's progress, the device ring's */
    return res;
}

/* ---- both ------------------------------------------------------------------ */

rcc_result_t rcci_coll_advance(struct rcc_comm *comm, rcci_exec_t *x, int *progressed, int *done)
{
    const rcci_link_t *sl = x->sl, *rl = x->rl;
    size_t slots = (size_t)comm->slots, esize = x->sched.esize;
    rcc_result_t res;
    *progressed = *done = 0;
    if (x->dev) {
        res = pipe_advance_device(comm, x, progressed);
        if (res != RCC_SUCCESS)
            return res;
        goto check;
    }
    if (!x->local_done) {
        int64_t t0 = rcci_tl_now(comm->tl);
        rcci_schedule_local(&x->sched);
        RCCI_TL(comm, rcci_tl_work(comm->tl, "copy", t0, 0));
        x->local_done = *progressed = 1;
    }
    res = pipe_reap(comm, x, 0, progressed);
    if (res != RCC_SUCCESS)
        return res;
    while (x->recv_posted < x->sched.nrecv && x->recv_posted < x->recv_done + slots) {
        rcci_recv_step_t step;
        rcci_schedule_recv(&x->sched, x->recv_posted, &step);
        if (step.count > 0) { /* empty steps are skipped on both sides */
            void *dst = step.local ? pipe_slot(comm, x->recv_posted) : step.dst;
            res = rl->tr->irecv(rl->conns[x->recv_posted % x->nconns], dst, step.count * esize,
                                &x->tag, NULL, &x->rreq[x->recv_posted % slots]);
            if (res != RCC_SUCCESS)
                return pipe_fail(comm, x, res, x->recv_posted, 0);
            RCCI_TL(comm, rcci_tl_post(comm->tl, RCCI_TL_RECV, x->recv_posted, rl->peer,
                                       step.count * esize));
        }
        x->recv_posted++;
        *progressed = 1;
    }
    res = pipe_reap(comm, x, 1, progressed);
    if (res != RCC_SUCCESS)
        return res;
    while (x->send_posted < x->sched.nsend && x->send_posted < x->send_done + slots) {
        rcci_send_step_t step;
        rcci_schedule_send(&x->sched, x->send_posted, &step);
        if (step.dep >= 0 && (size_t)step.dep >= x->recv_done)
            break; /* what it forwards has not arrived (or been reduced) yet */
        if (step.count > 0) {
            size_t bytes = step.count * esize;
            res = sl->tr->isend(sl->conns[x->send_posted % x->nconns], step.src, bytes, &x->tag,
                                rcci_memreg_send_mr(comm, &x->held, sl->tr, step.src, bytes),
                                &x->sreq[x->send_posted % slots]);
            if (res != RCC_SUCCESS)
                return pipe_fail(comm, x, res, x->send_posted, 1);
            RCCI_TL(comm, rcci_tl_post(comm->tl, RCCI_TL_SEND, x->send_posted, sl->peer,
                                       step.count * esize));
        }
        x->send_posted++;
        *progressed = 1;
    }
check:;
    int64_t now = rcci_now_ns();
    if (*progressed)
        x->last_progress_ns = now;
    /* A device operation also waits for its start event: an event must not
     * be destroyed while the stream may still store it. */
    *done = x->recv_done == x->sched.nrecv && x->send_done == x->sched.nsend &&
            (!x->dev || x->started) && rcci_window_over(&x->win);
    x->ended = *done;
    if (!*done && now - x->last_progress_ns > comm->timeout_ns) {
        int waiting_recv = x->recv_done < x->sched.nrecv;
        size_t item = waiting_recv ? x->recv_done : x->send_done;
        res = rcci_error(RCC_ERR_TIMEOUT,
                         "no progress for %.0f s (the peer stalled, or ranks called different "
                         "operations)",
                         comm->timeout_ns / 1e9);
        return pipe_fail(comm, x, res, item, !waiting_recv);
    }
    return RCC_SUCCESS;
}

/* How long a failed device operation waits for its stream (pipe_quiesce). */
#define PIPE_QUIESCE_NS (5ll * 1000000000)

/* A device operation that failed may still have copies in flight, the
 * device ring's into its slots and outputs, and work on its stream that
 * stores its events or writes into the next rank's slot (in place): the
 * stream is drained, then the device ring's connections it used are closed
 * (the transport waits for its own copies; the failure closes every link
 * anyway, progress.c, but after the operation's memory is gone), before
 * its memory and events go. The peers are told why first, as progress.c
 * tells the others (the communicator is marked broken before its
 * operations finish). 0 when the stream did not drain: its events and
 * connections are then left as they are. */
static int pipe_device_quiesce(struct rcc_comm *comm, rcci_exec_t *x)
{
    rcci_link_t *links[2] = {x->sdirect ? &comm->dsend_link : NULL,
                             x->rdirect ? &comm->drecv_link : NULL};
    rcc_result_t res = comm->broken != RCC_SUCCESS ? comm->broken : RCC_ERR_PEER_LOST;
    char text[RCCI_ERR_TEXT_BYTES + 32];
    if (!strncmp(comm->broken_text, "rank ", 5))
        snprintf(text, sizeof text, "%s", comm->broken_text);
    else
        snprintf(text, sizeof text, "rank %d: %s", comm->rank, comm->broken_text);
    if (res == RCC_ERR_ABORTED) /* as progress.c words it */
        res = RCC_ERR_PEER_LOST;
    /* The stream drains before the connections close: its reductions may
     * be writing into the next rank's memory (in place), which close unmaps. */
    for (int i = 0; i < 2; i++)
        if (links[i] && links[i]->conns[0])
            links[i]->tr->notify(links[i]->conns[0], res, text);
    int drained = rcci_stream_drain(x->dev, x->dstream, rcci_now_ns() + PIPE_QUIESCE_NS);
    for (int i = 0; i < 2 && drained; i++)
        if (links[i] && links[i]->conns[0]) {
            links[i]->tr->close(links[i]->conns[0]);
            links[i]->conns[0] = NULL;
        }
    return drained;
}

rcc_result_t rcci_coll_test_req(const rcci_link_t *link, rcci_request_t **req, int *complete)
{
    *complete = 1; /* empty steps were never posted */
    if (!*req)
        return RCC_SUCCESS;
    rcc_result_t res = link->tr->test(*req, complete);
    if (res != RCC_SUCCESS || *complete)
        *req = NULL;
    return res;
}

void rcci_coll_test_once(const rcci_link_t *sl, const rcci_link_t *rl, rcci_request_t **sreq,
                         rcci_request_t **rreq, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int complete;
        if (sreq[i])
            sl->tr->test(sreq[i], &complete);
        if (rreq[i])
            rl->tr->test(rreq[i], &complete);
    }
}

void rcci_coll_finish(struct rcc_comm *comm, rcci_exec_t *x)
{
    if (!x)
        return;
    /* Requests still out after a failure: one test frees those that ended;
     * the rest stay queued on their connection, which the progress thread
     * closes after a failure (freeing them). */
    char error[RCCI_ERR_TEXT_BYTES]; /* the failure being reported stays the story */
    snprintf(error, sizeof error, "%s", rcci_tls_error());
    if (x->sreq && x->rreq)
        rcci_coll_test_once(x->sl, x->rl, x->sreq, x->rreq, (size_t)comm->slots);
    rcci_window_settle(&x->win); /* before pipe_device_quiesce closes the connections */
    int drained = !x->dev || x->ended || pipe_device_quiesce(comm, x);
    rcci_window_end(&x->win, drained);
    rcci_tls_error_set(error);
    for (int i = 0; x->dev && drained && i < comm->slots; i++) {
        if (x->rev && x->rev[i])
            x->dev->event_destroy(x->rev[i]);
        if (x->sev && x->sev[i])
            x->dev->event_destroy(x->sev[i]);
    }
    if (x->start_ev && drained)
        x->dev->event_destroy(x->start_ev);
    free(x->rev);
    free(x->sev);
    free(x->rview);
    free(x->rinplace);
    free(x->sfrom);
    free(x->smr);
    rcci_memreg_drop(comm, &x->held);
    free(x->sreq);
    free(x->rreq);
    free(x);
}

void rcci_coll_waiting_for(struct rcc_comm *comm, rcci_exec_t *x, char *buf, size_t size)
{
    char peer[128];
    size_t n = 0;
    buf[0] = '\0';
    if (x->recv_done < x->sched.nrecv) {
        rcci_bootstrap_peer_name(comm->bootstrap, comm->recv_link.peer, peer, sizeof peer);
        n += (size_t)snprintf(buf, size, "%s (receive %zu of %zu)", peer, x->recv_done + 1,
                              x->sched.nrecv);
    }
    if (x->send_done < x->sched.nsend && n < size) {
        rcci_bootstrap_peer_name(comm->bootstrap, comm->send_link.peer, peer, sizeof peer);
        snprintf(buf + n, size - n, "%s%s (send %zu of %zu)", n ? ", " : "", peer, x->send_done + 1,
                 x->sched.nsend);
    }
}
