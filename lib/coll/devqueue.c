/*
 * The chunked device path, queued at the call (devqueue.h says why). The
 * same schedules and the same messages as pipeline.c's device mode, so a
 * rank running this and a neighbour running that meet on the wire; what
 * differs is who queues the GPU work and when.
 *
 * Each direction goes one of two ways: over the host ring, through pinned
 * slots whose bytes the progress thread moves (the flags below); or over
 * an edge of the device ring whose transport queues messages itself
 * (transport.h, version 7: cudaipc), the GPU writing straight into the next
 * rank's slot and reducing where a chunk landed, the progress thread only
 * watching.
 *
 * Queue order (one stream): for each receive r in turn, first the sends
 * whose receive has been dealt with (dep < r), then r's landing: wait for
 * "landed > r", reduce (or copy) out of its slot, writing the send that
 * forwards it into that send's slot in the same pass where that send is
 * the next one. Every wait is for the network, which depends only on GPU
 * work queued before it, on this rank and (through earlier messages) on
 * the others.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "devqueue.h"
#include "log.h"
#include "memreg.h"
#include "window.h"

enum { F_LANDED, F_FREED, F_CONSUMED, F_STAGED, F_WINDOW, F_WROTE, F_UNMAPPED, F_COUNT };
#define DEVQ_FLAG_STRIDE 64 /* a cache line each: the host and the GPU write different ones */
/* The flags, then the next rank's window as the GPU reads it (a pointer). */
#define DEVQ_FLAGS_BYTES ((F_COUNT + 1) * DEVQ_FLAG_STRIDE)
/* Stored by rcci_devq_release: past every value a wait of the operation
 * asks for (items are far fewer), as the waits compare cyclically. */
#define DEVQ_RUN_THROUGH 0x40000000u

struct rcci_devq {
    rcci_op_t *op; /* not a reference: the operation owns this */
    rcci_schedule_t sched;
    const rcci_devapi_t *dev;
    const rcci_link_t *sl, *rl;
    /* Queued on the device ring's transport (else: the host ring's pinned
     * slots), per direction; then each message's ticket, by item. */
    int sq, rq;
    uint32_t *sticket, *rticket;
    rcci_tag_t qtag; /* at the call: the sequence number is not known yet */
    size_t nconns, slots, chunk_bytes;
    char *pin_recv, *pin_send;
    volatile uint32_t *flag[F_COUNT];
    /* Per send item, decided at the call: where it goes from (its pinned
     * slot, or the device memory itself over GPUDirect RDMA; NULL: not yet
     * decided, or nothing to send) and with which registration (NULL: the
     * transport copies). */
    const char **sfrom;
    rcci_mr_t **smr;
    rcci_memreg_held_t held;
    rcci_request_t **sreq, **rreq; /* by item % slots */
    size_t send_posted, send_done, recv_posted, recv_done;
    rcci_tag_t tag;
    int tagged;
    int64_t last_progress_ns;
    void *end_event; /* recorded after all its GPU work */
    int end_recorded;
    int requests_settled; /* rcci_devq_settle_requests: none may be tested again */
    /* Windows (window.h), over the host ring's connections: the sends whose
     * receive lands in the next rank's output are written there, at the
     * address the progress thread stores in *wptr (NULL: into their slots)
     * before "window"; this rank's operation ends only after "unmapped". */
    rcci_window_t win;
    void **wptr;
    void **dword; /* in device scratch: *wptr copied there behind "window", for the kernels */
    int gated, wstored, ustored;
    size_t ndirect; /* sends queued toward the next rank's output */
};

/* Which of this rank's edges the device ring carries (then the transport's
 * slots hold that direction's chunks, and the pinned area has none). */
static void devq_edges(const struct rcc_comm *comm, int *sq, int *rq)
{
    *sq = comm->dev_pipeline == RCCI_DEVPIPE_RING && comm->dsend_link.nconns > 0;
    *rq = comm->dev_pipeline == RCCI_DEVPIPE_RING && comm->drecv_link.nconns > 0;
}

/* The pinned area: receive slots (unless rq), send slots (unless sq), then the flags. */
static size_t devq_slots_bytes(int queued, size_t slots, size_t chunk)
{
    return queued ? 0 : slots * chunk;
}

static size_t devq_flags_offset(size_t slot_bytes)
{
    return (slot_bytes + DEVQ_FLAG_STRIDE - 1) / DEVQ_FLAG_STRIDE * DEVQ_FLAG_STRIDE;
}

/* Where the device word lies in the operation's device scratch. */
static size_t devq_word_offset(const struct rcc_comm *comm, const rcci_op_t *op)
{
    return (rcci_coll_device_scratch_bytes(comm, op) + DEVQ_FLAG_STRIDE - 1) / DEVQ_FLAG_STRIDE *
           DEVQ_FLAG_STRIDE;
}

size_t rcci_devq_scratch_bytes(const struct rcc_comm *comm, const rcci_op_t *op)
{
    size_t bytes = rcci_coll_device_scratch_bytes(comm, op);
    if (rcci_window_wanted(comm, op, rcc_datatype_size(op->dtype)))
        bytes = devq_word_offset(comm, op) + DEVQ_FLAG_STRIDE;
    return bytes;
}

size_t rcci_devq_pinned_bytes(const struct rcc_comm *comm, const rcci_op_t *op)
{
    int sq, rq;
    devq_edges(comm, &sq, &rq);
    size_t slots = (size_t)comm->slots, chunk = rcci_coll_device_chunk(comm, op);
    return devq_flags_offset(devq_slots_bytes(rq, slots, chunk) +
                             devq_slots_bytes(sq, slots, chunk)) +
           DEVQ_FLAGS_BYTES;
}

static uint32_t flag_load(const rcci_devq_t *q, int f)
{
    return __atomic_load_n(q->flag[f], __ATOMIC_ACQUIRE);
}

static void flag_store(rcci_devq_t *q, int f, size_t value)
{
    __atomic_store_n(q->flag[f], (uint32_t)value, __ATOMIC_RELEASE);
}

/* ---- at the call: the GPU work -------------------------------------------- */

static rcc_result_t q_wait(rcci_devq_t *q, void *stream, int f, size_t value)
{
    return q->dev->wait_flag(stream, q->flag[f], (uint32_t)value);
}

static rcc_result_t q_write(rcci_devq_t *q, void *stream, int f, size_t value)
{
    return q->dev->write_flag(stream, q->flag[f], (uint32_t)value);
}

static char *q_send_slot(const rcci_devq_t *q, size_t s)
{
    return q->pin_send + (s % q->slots) * q->chunk_bytes;
}

/* Send s goes from its pinned slot, or from the device memory itself where
 * that is registered for GPUDirect RDMA with the send edge's transport. */
static void q_route(struct rcc_comm *comm, rcci_devq_t *q, size_t s, const rcci_send_step_t *ss)
{
    if (q->sfrom[s])
        return;
    size_t bytes = ss->count * q->sched.esize;
    rcci_mr_t *gdr = rcci_memreg_send_mr(comm, &q->held, q->sl->tr, ss->src, bytes);
    if (gdr) {
        q->sfrom[s] = ss->src, q->smr[s] = gdr;
        __atomic_fetch_add(&comm->gdr_sends, 1, __ATOMIC_RELAXED); /* tests read it */
        return;
    }
    q->sfrom[s] = q_send_slot(q, s);
    q->smr[s] = rcci_memreg_send_mr(comm, &q->held, q->sl->tr, q->sfrom[s], bytes);
}

static int q_from_slot(const rcci_devq_t *q, size_t s)
{
    return q->sfrom[s] == q_send_slot(q, s);
}

/* Where send s of `count` elements lands in the next rank's output, as an
 * offset there, when it may be written there (SIZE_MAX: into its slot). */
static size_t q_window_offset(rcci_devq_t *q, size_t s, size_t count)
{
    return q->win.on ? rcci_window_offset(&q->win, s, count) : SIZE_MAX;
}

/* Before the first work that writes through the window: the progress
 * thread has stored *wptr (once the next rank's window is mapped, or it
 * has none), which is then copied into device memory, where the kernels
 * read it (pinned memory would cost each of their threads a PCIe read). */
static rcc_result_t q_window_gate(rcci_devq_t *q, void *stream)
{
    if (q->gated)
        return RCC_SUCCESS;
    q->gated = 1;
    rcc_result_t res = q_wait(q, stream, F_WINDOW, 1);
    return res == RCC_SUCCESS ? q->dev->copy(q->dword, q->wptr, sizeof *q->wptr, stream) : res;
}

/* Send slot s % slots is written only once send s - slots has left. */
static rcc_result_t q_slot_free(rcci_devq_t *q, void *stream, size_t s)
{
    return s >= q->slots ? q_wait(q, stream, F_FREED, s - q->slots + 1) : RCC_SUCCESS;
}

/* Send s on its own: copied into its slot (nothing over GPUDirect RDMA),
 * then "staged" (the stream's earlier work, which produced it, is done). */
static rcc_result_t q_stage_send(struct rcc_comm *comm, rcci_devq_t *q, void *stream, size_t s)
{
    rcci_send_step_t ss;
    rcci_schedule_send(&q->sched, s, &ss);
    rcc_result_t res = RCC_SUCCESS;
    size_t bytes = ss.count * q->sched.esize;
    if (q->sq) { /* straight into the next rank's slot */
        void *slot = NULL;
        if (ss.count == 0)
            return RCC_SUCCESS;
        size_t off = q_window_offset(q, s, ss.count);
        res = q->sl->tr->queue_send(q->sl->conns[0], stream, bytes, &slot);
        if (res == RCC_SUCCESS && off != SIZE_MAX) { /* the next rank's output, or its slot */
            res = q_window_gate(q, stream);
            if (res == RCC_SUCCESS)
                res = q->dev->copy2_at(NULL, slot, q->dword, off, ss.src, bytes, stream);
            q->ndirect++;
        } else if (res == RCC_SUCCESS) {
            res = q->dev->copy(slot, ss.src, bytes, stream);
        }
        return res == RCC_SUCCESS ? q->sl->tr->queue_commit(q->sl->conns[0], stream, bytes,
                                                            &q->qtag, &q->sticket[s])
                                  : res;
    }
    if (ss.count > 0) {
        q_route(comm, q, s, &ss);
        if (q_from_slot(q, s)) {
            res = q_slot_free(q, stream, s);
            if (res == RCC_SUCCESS)
                res = q->dev->copy(q_send_slot(q, s), ss.src, bytes, stream);
        }
    }
    return res == RCC_SUCCESS ? q_write(q, stream, F_STAGED, s + 1) : res;
}

/* Receive r's landing: out of its slot into the result (or destination),
 * and into send `*next`'s slot in the same pass where that send forwards
 * exactly this (then staged here). */
static rcc_result_t q_land(struct rcc_comm *comm, rcci_devq_t *q, void *stream, size_t r,
                           size_t *next)
{
    const rcci_op_t *op = q->op;
    rcci_recv_step_t rs;
    rcci_schedule_recv(&q->sched, r, &rs);
    if (rs.count == 0)
        return q->rq ? RCC_SUCCESS : q_write(q, stream, F_CONSUMED, r + 1);
    size_t bytes = rs.count * q->sched.esize;
    const char *in = q->pin_recv + (r % q->slots) * q->chunk_bytes;
    const void *landed = NULL;
    rcc_result_t res =
        q->rq ? q->rl->tr->queue_recv(q->rl->conns[0], stream, bytes, &landed, &q->rticket[r])
              : q_wait(q, stream, F_LANDED, r + 1);
    if (q->rq)
        in = landed;
    if (res == RCC_SUCCESS && rs.guard >= 0) {
        /* The area is free once send `guard` has read it: a copy into its
         * slot queued before this, or over GPUDirect RDMA its leaving. */
        size_t g = (size_t)rs.guard;
        if (g >= *next)
            return rcci_error(RCC_ERR_INTERNAL,
                              "receive %zu must wait for send %zu, which is not queued yet", r, g);
        if (q->sfrom[g] && !q_from_slot(q, g))
            res = q_wait(q, stream, F_FREED, g + 1);
    }
    if (res != RCC_SUCCESS)
        return res;
    char *fwd = NULL;
    size_t off = SIZE_MAX; /* fwd's: where in the next rank's output it may go instead */
    if (*next < q->sched.nsend) {
        rcci_send_step_t ss;
        rcci_schedule_send(&q->sched, *next, &ss);
        int forwards =
            ss.dep == (long)r && ss.src == (rs.local ? rs.out : rs.dst) && ss.count == rs.count;
        if (forwards && q->sq) { /* straight into the next rank's slot (or output) */
            void *slot = NULL;
            res = q->sl->tr->queue_send(q->sl->conns[0], stream, bytes, &slot);
            fwd = slot;
            off = q_window_offset(q, *next, ss.count);
            if (res == RCC_SUCCESS && off != SIZE_MAX) {
                res = q_window_gate(q, stream);
                q->ndirect++;
            }
        } else if (forwards) {
            q_route(comm, q, *next, &ss);
            if (q_from_slot(q, *next)) {
                fwd = q_send_slot(q, *next);
                res = q_slot_free(q, stream, *next);
            }
        }
    }
    const rcci_devapi_t *dev = q->dev;
    void *const *at = off != SIZE_MAX ? q->dword : NULL;
    if (res != RCC_SUCCESS)
        return res;
    /* The previous rank wrote it into this rank's output itself (window):
     * nothing to copy, and a forwarding send goes from there. */
    if (!rs.local && q->win.offered) {
        if (fwd)
            res = dev->copy2_at(NULL, fwd, at, off, rs.dst, bytes, stream);
    } else if (at && !rs.local) {
        res = dev->copy2_at(rs.dst, fwd, at, off, in, bytes, stream);
    } else if (at) {
        res = dev->reduce_copy_at(rs.forward_only ? NULL : rs.out, fwd, at, off, rs.local, in,
                                  rs.count, op->dtype, op->redop, rs.divisor, stream);
    } else if (!rs.local) {
        if (fwd && dev->copy2) {
            res = dev->copy2(rs.dst, fwd, in, bytes, stream);
        } else {
            res = dev->copy(rs.dst, in, bytes, stream);
            if (res == RCC_SUCCESS && fwd)
                res = dev->copy(fwd, in, bytes, stream);
        }
    } else if (fwd && rs.forward_only) { /* only the next rank needs it */
        res = dev->reduce(fwd, rs.local, in, rs.count, op->dtype, op->redop, rs.divisor, stream);
    } else if (fwd) {
        res = dev->reduce_copy(rs.out, fwd, rs.local, in, rs.count, op->dtype, op->redop,
                               rs.divisor, stream);
    } else {
        res = dev->reduce(rs.out, rs.local, in, rs.count, op->dtype, op->redop, rs.divisor, stream);
    }
    if (res == RCC_SUCCESS)
        res = q->rq ? q->rl->tr->queue_release(q->rl->conns[0], stream)
                    : q_write(q, stream, F_CONSUMED, r + 1);
    if (res == RCC_SUCCESS && fwd) {
        res = q->sq ? q->sl->tr->queue_commit(q->sl->conns[0], stream, bytes, &q->qtag,
                                              &q->sticket[*next])
                    : q_write(q, stream, F_STAGED, *next + 1);
        (*next)++;
    }
    return res;
}

/* The sends that are ready before receive r lands (what they forward has
 * landed already, or they forward nothing), in order. */
static rcc_result_t q_stage_ready(struct rcc_comm *comm, rcci_devq_t *q, void *stream, size_t r,
                                  size_t *next)
{
    while (*next < q->sched.nsend) {
        rcci_send_step_t ss;
        rcci_schedule_send(&q->sched, *next, &ss);
        if (ss.dep >= 0 && (size_t)ss.dep >= r)
            return RCC_SUCCESS;
        rcc_result_t res = q_stage_send(comm, q, stream, *next);
        if (res != RCC_SUCCESS)
            return res;
        (*next)++;
    }
    return RCC_SUCCESS;
}

static rcc_result_t q_alloc(struct rcc_comm *comm, rcci_op_t *op, const rcci_devapi_t *dev,
                            char *pinned, char *dscratch, rcci_devq_t **out)
{
    rcci_devq_t *q = calloc(1, sizeof *q);
    *out = q;
    if (!q)
        return rcci_error(RCC_ERR_NO_MEMORY, "device operation state");
    q->op = op;
    q->dev = dev;
    rcci_coll_device_schedule(comm, op, dscratch, &q->sched);
    q->sl = &comm->send_link;
    q->rl = &comm->recv_link;
    /* Where this rank has edges of the device ring (devring.c), they carry
     * the operation; the peer at their other end does the same. */
    devq_edges(comm, &q->sq, &q->rq);
    if (q->sq)
        q->sl = &comm->dsend_link;
    if (q->rq)
        q->rl = &comm->drecv_link;
    rcci_op_tag(op, op->seq, &q->qtag);
    q->nconns = rcci_coll_edge_conns(comm, op);
    q->slots = (size_t)comm->slots;
    q->chunk_bytes = q->sched.chunk_elems * q->sched.esize; /* rcci_coll_device_chunk */
    size_t recv_bytes = devq_slots_bytes(q->rq, q->slots, q->chunk_bytes);
    size_t send_bytes = devq_slots_bytes(q->sq, q->slots, q->chunk_bytes);
    q->pin_recv = q->rq ? NULL : pinned;
    q->pin_send = q->sq ? NULL : pinned + recv_bytes;
    char *flags = pinned + devq_flags_offset(recv_bytes + send_bytes);
    memset(flags, 0, DEVQ_FLAGS_BYTES); /* the area's last user is done with it (stream.c) */
    for (int f = 0; f < F_COUNT; f++)
        q->flag[f] = (volatile uint32_t *)(flags + (size_t)f * DEVQ_FLAG_STRIDE);
    q->wptr = (void **)(flags + (size_t)F_COUNT * DEVQ_FLAG_STRIDE);
    size_t nsend = q->sched.nsend ? q->sched.nsend : 1;
    q->sfrom = calloc(nsend, sizeof *q->sfrom);
    q->smr = calloc(nsend, sizeof *q->smr);
    q->sreq = calloc(q->slots, sizeof *q->sreq);
    q->rreq = calloc(q->slots, sizeof *q->rreq);
    q->sticket = calloc(nsend, sizeof *q->sticket);
    q->rticket = calloc(q->sched.nrecv ? q->sched.nrecv : 1, sizeof *q->rticket);
    if (!q->sfrom || !q->smr || !q->sreq || !q->rreq || !q->sticket || !q->rticket)
        return rcci_error(RCC_ERR_NO_MEMORY, "device operation state");
    /* Windows where the whole device ring maps its peers' memory (then
     * every rank's edges are queued on it) and the GPU reads a destination
     * when it runs; the messages go over the host ring, idle meanwhile. */
    if (q->sq && q->rq && dev->copy2_at && dev->reduce_copy_at &&
        rcci_window_wanted(comm, op, q->sched.esize)) {
        q->dword = (void **)(dscratch + devq_word_offset(comm, op)); /* rcci_devq_scratch_bytes */
        return rcci_window_begin(comm, op, &q->sched, dev, 1, &comm->send_link, &comm->recv_link,
                                 &q->win);
    }
    return RCC_SUCCESS;
}

rcc_result_t rcci_devq_queue(struct rcc_comm *comm, rcci_op_t *op, const rcci_devapi_t *dev,
                             void *stream, volatile uint32_t *start, uint32_t ticket,
                             char *pinned, char *dscratch, rcci_devq_t **out)
{
    rcc_result_t res = q_alloc(comm, op, dev, pinned, dscratch, out);
    rcci_devq_t *q = *out;
    if (res == RCC_SUCCESS)
        res = dev->event_create(&q->end_event);
    if (res != RCC_SUCCESS)
        return res;
    /* Not before the caller's stream has reached the call. */
    res = dev->wait_flag(stream, start, ticket);
    char *dst;
    const char *src;
    size_t bytes, next = 0;
    if (res == RCC_SUCCESS && rcci_schedule_local_copy(&q->sched, &dst, &src, &bytes))
        res = dev->copy(dst, src, bytes, stream);
    for (size_t r = 0; r < q->sched.nrecv && res == RCC_SUCCESS; r++) {
        res = q_stage_ready(comm, q, stream, r, &next);
        if (res == RCC_SUCCESS)
            res = q_land(comm, q, stream, r, &next);
    }
    if (res == RCC_SUCCESS)
        res = q_stage_ready(comm, q, stream, q->sched.nrecv, &next);
    /* Its slots are done with once every send has left. */
    if (res == RCC_SUCCESS && q->sched.nsend > 0 && !q->sq)
        res = q_wait(q, stream, F_FREED, q->sched.nsend);
    /* Its writes into the next rank's output have run (not the peer's
     * counters: after a failure its stores run through), then its own
     * output, once the previous rank has unmapped it (window.h). In this
     * order on every rank, so no rank's wait holds up its own "wrote". */
    if (res == RCC_SUCCESS && q->win.on)
        res = q_write(q, stream, F_WROTE, 1);
    if (res == RCC_SUCCESS && q->win.offered)
        res = q_wait(q, stream, F_UNMAPPED, 1);
    /* After a failure too: the part queued still reads the caller's buffers
     * and the pinned slots once released, and the event says when it has run. */
    rcc_result_t ended = dev->event_record(q->end_event, stream);
    q->end_recorded = ended == RCC_SUCCESS;
    return res == RCC_SUCCESS ? ended : res;
}

int rcci_devq_on_device_ring(const rcci_devq_t *q) { return q && (q->sq || q->rq); }

rcc_result_t rcci_devq_gpu_done(rcci_devq_t *q, int *done)
{
    *done = 0;
    if (!q->end_recorded)
        return rcci_error(RCC_ERR_INTERNAL, "the device operation's work was not all queued");
    return q->dev->event_query(q->end_event, done);
}

/* ---- the progress thread: bytes and flags ----------------------------------- */

static rcc_result_t devq_fail(struct rcc_comm *comm, rcci_devq_t *q, rcc_result_t res,
                              size_t item, int is_send)
{
    return rcci_coll_step_fail(comm, q->op, &q->sched, is_send ? q->sl->peer : q->rl->peer, res,
                               item, is_send);
}

/* Finished requests of one direction, in order, each storing its flag. */
static rcc_result_t devq_reap(struct rcc_comm *comm, rcci_devq_t *q, int sends, int *progressed)
{
    const rcci_link_t *link = sends ? q->sl : q->rl;
    rcci_request_t **reqs = sends ? q->sreq : q->rreq;
    size_t *done = sends ? &q->send_done : &q->recv_done;
    size_t posted = sends ? q->send_posted : q->recv_posted;
    while (*done < posted) {
        int complete;
        rcc_result_t res = rcci_coll_test_req(link, &reqs[*done % q->slots], &complete);
        if (res != RCC_SUCCESS)
            return devq_fail(comm, q, res, *done, sends);
        if (!complete)
            return RCC_SUCCESS;
        (*done)++;
        flag_store(q, sends ? F_FREED : F_LANDED, *done);
        *progressed = 1;
    }
    return RCC_SUCCESS;
}

/* The window messages (window.h): this rank's at once, since this runs only
 * once the caller's stream has reached the call (stream.c, PH_START: the
 * previous rank may write into its output from then on); then the flags
 * the GPU waits for: the next rank's window stored, and the previous
 * rank's "unmapped". */
static rcc_result_t devq_window(struct rcc_comm *comm, rcci_devq_t *q, int *progressed)
{
    rcci_window_t *w = &q->win;
    rcc_result_t res = RCC_SUCCESS;
    if (!w->on)
        return RCC_SUCCESS;
    if (!w->posted) {
        res = rcci_window_post(comm, w, &q->tag);
        *progressed = 1;
    }
    if (res == RCC_SUCCESS)
        res = rcci_window_advance(comm, w, &q->tag, flag_load(q, F_WROTE) != 0, 1, 1, progressed);
    if (res != RCC_SUCCESS)
        return res;
    if (!q->wstored && rcci_window_known(w)) {
        __atomic_store_n(q->wptr, (void *)w->next, __ATOMIC_RELEASE);
        flag_store(q, F_WINDOW, 1);
        q->wstored = *progressed = 1;
        if (w->next) {
            comm->direct_sends += q->ndirect; /* tests read it */
            RCC_TRACE("op #%u: %zu chunks go straight into rank %d's output", q->op->seq,
                      q->ndirect, q->sl->peer);
        }
    }
    if (!q->ustored && rcci_window_released(w)) {
        flag_store(q, F_UNMAPPED, 1);
        q->ustored = *progressed = 1;
    }
    return RCC_SUCCESS;
}

/* A direction queued on the device ring's transport: its messages, tested
 * in order (the GPU moves them; this only watches, and checks what lands). */
static rcc_result_t devq_test_queued(struct rcc_comm *comm, rcci_devq_t *q, int sends,
                                     int *progressed)
{
    const rcci_link_t *link = sends ? q->sl : q->rl;
    size_t *done = sends ? &q->send_done : &q->recv_done;
    size_t n = sends ? q->sched.nsend : q->sched.nrecv;
    while (*done < n) {
        size_t count;
        if (sends) {
            rcci_send_step_t ss;
            rcci_schedule_send(&q->sched, *done, &ss);
            count = ss.count;
        } else {
            rcci_recv_step_t rs;
            rcci_schedule_recv(&q->sched, *done, &rs);
            count = rs.count;
        }
        int ok = 1;
        rcc_result_t res = count == 0
                               ? RCC_SUCCESS
                               : link->tr->queue_test(link->conns[0], sends,
                                                      (sends ? q->sticket : q->rticket)[*done],
                                                      count * q->sched.esize, &q->qtag, &ok);
        if (res != RCC_SUCCESS)
            return devq_fail(comm, q, res, *done, sends);
        if (!ok)
            return RCC_SUCCESS;
        (*done)++;
        *progressed = 1;
    }
    return RCC_SUCCESS;
}

rcc_result_t rcci_devq_advance(struct rcc_comm *comm, rcci_devq_t *q, int *progressed, int *done)
{
    size_t esize = q->sched.esize;
    rcc_result_t res;
    *progressed = *done = 0;
    if (!q->tagged) { /* the sequence number is known once it runs */
        rcci_op_tag(q->op, q->op->seq, &q->tag);
        q->tagged = 1;
        q->last_progress_ns = rcci_now_ns();
    }
    if (q->rq && (res = devq_test_queued(comm, q, 0, progressed)) != RCC_SUCCESS)
        return res;
    if (q->sq && (res = devq_test_queued(comm, q, 1, progressed)) != RCC_SUCCESS)
        return res;
    if ((res = devq_window(comm, q, progressed)) != RCC_SUCCESS)
        return res;
    if (!q->rq && (res = devq_reap(comm, q, 0, progressed)) != RCC_SUCCESS)
        return res;
    /* Into slots the GPU has read. */
    size_t consumed = flag_load(q, F_CONSUMED);
    while (!q->rq && q->recv_posted < q->sched.nrecv && q->recv_posted < consumed + q->slots) {
        rcci_recv_step_t step;
        rcci_schedule_recv(&q->sched, q->recv_posted, &step);
        if (step.count > 0) {
            size_t k = q->recv_posted % q->slots;
            res = q->rl->tr->irecv(q->rl->conns[q->recv_posted % q->nconns],
                                   q->pin_recv + k * q->chunk_bytes, step.count * esize, &q->tag,
                                   NULL, &q->rreq[k]);
            if (res != RCC_SUCCESS)
                return devq_fail(comm, q, res, q->recv_posted, 0);
        }
        q->recv_posted++;
        *progressed = 1;
    }
    if (!q->sq && (res = devq_reap(comm, q, 1, progressed)) != RCC_SUCCESS)
        return res;
    /* What the GPU has staged, at most `slots` in flight. */
    size_t staged = flag_load(q, F_STAGED);
    while (!q->sq && q->send_posted < staged && q->send_posted < q->send_done + q->slots) {
        rcci_send_step_t step;
        rcci_schedule_send(&q->sched, q->send_posted, &step);
        if (step.count > 0) {
            size_t s = q->send_posted;
            res = q->sl->tr->isend(q->sl->conns[s % q->nconns], q->sfrom[s], step.count * esize,
                                   &q->tag, q->smr[s], &q->sreq[s % q->slots]);
            if (res != RCC_SUCCESS)
                return devq_fail(comm, q, res, s, 1);
        }
        q->send_posted++;
        *progressed = 1;
    }
    int64_t now = rcci_now_ns();
    if (*progressed)
        q->last_progress_ns = now;
    *done = q->recv_done == q->sched.nrecv && q->send_done == q->sched.nsend &&
            rcci_window_over(&q->win);
    if (*done)
        return RCC_SUCCESS;
    /* Waiting for the GPU's flags, which epoll cannot see: soon where this
     * thread must act on them (pinned slots; a transport whose queued
     * messages the host moves), else now and then (cudaipc's counters,
     * which the GPUs move: this thread only watches). */
    int host_moves = (q->sq && (q->sl->tr->caps & RCCI_CAP_QUEUED_DEVICE)) ||
                     (q->rq && (q->rl->tr->caps & RCCI_CAP_QUEUED_DEVICE));
    /* The GPU may wait for the next rank's window: soon as well. */
    int window_pending = q->win.on && !q->wstored;
    if ((q->send_posted < q->sched.nsend && q->send_posted == staged) ||
        (q->recv_posted < q->sched.nrecv && q->recv_posted == consumed + q->slots) || host_moves ||
        window_pending)
        rcci_poll_within(comm, RCCI_POLL_GPU_ACT_US);
    else if (q->sq || q->rq)
        rcci_poll_within(comm, RCCI_POLL_WATCH_US);
    if (now - q->last_progress_ns > comm->timeout_ns) {
        int waiting_recv = q->recv_done < q->sched.nrecv;
        res = rcci_error(RCC_ERR_TIMEOUT,
                         "no progress for %.0f s (the peer stalled, the GPU did not get to this "
                         "operation's work, or ranks called different operations)",
                         comm->timeout_ns / 1e9);
        return devq_fail(comm, q, res, waiting_recv ? q->recv_done : q->send_done, !waiting_recv);
    }
    return RCC_SUCCESS;
}

void rcci_devq_release(rcci_devq_t *q)
{
    if (!q || !q->flag[0])
        return;
    /* The device ring's first: it marks its connections given up before
     * any of the work runs through (its stores would look like messages). */
    if (q->sq && q->sl->conns[0])
        q->sl->tr->queue_abort(q->sl->conns[0]);
    if (q->rq && q->rl->conns[0])
        q->rl->tr->queue_abort(q->rl->conns[0]);
    flag_store(q, F_LANDED, DEVQ_RUN_THROUGH);
    flag_store(q, F_FREED, DEVQ_RUN_THROUGH);
    /* *wptr as it is: a window stays mapped until the work has run. */
    flag_store(q, F_WINDOW, DEVQ_RUN_THROUGH);
    flag_store(q, F_UNMAPPED, DEVQ_RUN_THROUGH);
}

void rcci_devq_settle_requests(rcci_devq_t *q)
{
    if (!q || q->requests_settled)
        return;
    q->requests_settled = 1;
    char error[RCCI_ERR_TEXT_BYTES]; /* the failure being reported stays the story */
    snprintf(error, sizeof error, "%s", rcci_tls_error());
    if (q->sreq && q->rreq) /* requests still out after a failure */
        rcci_coll_test_once(q->sl, q->rl, q->sreq, q->rreq, q->slots);
    rcci_window_settle(&q->win);
    rcci_tls_error_set(error);
}

void rcci_devq_free(struct rcc_comm *comm, rcci_devq_t *q)
{
    if (!q)
        return;
    rcci_devq_settle_requests(q);
    char error[RCCI_ERR_TEXT_BYTES]; /* the failure being reported stays the story */
    snprintf(error, sizeof error, "%s", rcci_tls_error());
    /* Never recorded: nothing will store it; recorded: only once stored. */
    int ended = !q->end_recorded;
    if (q->end_recorded && rcci_devq_gpu_done(q, &ended) != RCC_SUCCESS)
        ended = 0;
    if (q->end_event && ended)
        q->dev->event_destroy(q->end_event);
    rcci_window_end(&q->win, ended);
    rcci_tls_error_set(error);
    rcci_memreg_drop(comm, &q->held);
    free(q->sfrom);
    free(q->smr);
    free(q->sreq);
    free(q->rreq);
    free(q->sticket);
    free(q->rticket);
    free(q);
}

void rcci_devq_waiting_for(struct rcc_comm *comm, const rcci_devq_t *q, char *buf, size_t size)
{
    char peer[128];
    size_t n = 0;
    buf[0] = '\0';
    if (q->recv_done < q->sched.nrecv) {
        rcci_bootstrap_peer_name(comm->bootstrap, q->rl->peer, peer, sizeof peer);
        n += (size_t)snprintf(buf, size, "%s (receive %zu of %zu%s)", peer, q->recv_done + 1,
                              q->sched.nrecv, q->rq ? ", over the device ring" : "");
    }
    if (q->win.on && !q->wstored && n < size) {
        rcci_bootstrap_peer_name(comm->bootstrap, q->sl->peer, peer, sizeof peer);
        n += (size_t)snprintf(buf + n, size - n, "%s%s (where its output is: its window)",
                              n ? ", " : "", peer);
    }
    if (q->send_done < q->sched.nsend && n < size) {
        /* Device ring: this GPU writes the next rank's slot once that rank's
         * GPU has freed it (cudaipc), or its own staging slot, whose bytes
         * the host sends once the next rank's slot is free (ibverbs); its
         * own work comes first either way. */
        int gpu =
            q->sq || (q->send_posted == q->send_done && flag_load(q, F_STAGED) <= q->send_posted);
        if (!gpu)
            rcci_bootstrap_peer_name(comm->bootstrap, q->sl->peer, peer, sizeof peer);
        snprintf(buf + n, size - n, "%s%s (send %zu of %zu%s)", n ? ", " : "",
                 gpu ? "the GPU" : peer, q->send_done + 1, q->sched.nsend,
                 q->sq ? ": its write toward the next rank's slot, once that rank has freed it"
                 : gpu ? ": its copy into the send slot"
                       : "");
    }
}
