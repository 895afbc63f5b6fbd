/*
 * Windows: writing into the next rank's output (window.h says what).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "log.h"
#include "params.h"
#include "window.h"

/* cudaIpcOpenMemHandle is not cheap, so small operations go through the
 * slots (RCC_CUDAIPC_WINDOW_BYTES); a mapping is not kept for later
 * operations, since the buffer's owner may free it once its operation
 * has ended. */
#define WINDOW_MAGIC 0x574e4457u   /* "WDNW" */
#define UNMAPPED_MAGIC 0x504d4e55u /* "UNMP" */

struct rcci_window_msg {
    uint32_t magic, ok; /* ok 0: no window (this rank's output cannot be exported) */
    uint64_t offset;
    uint64_t bytes; /* the operation's output, which the window must be */
    uint8_t handle[RCCI_IPC_HANDLE_BYTES];
};

/* The operation's output, which a window must be. */
static size_t window_bytes(const struct rcc_comm *comm, const rcci_op_t *op, size_t esize)
{
    return op->count * esize * (op->coll == RCCI_COLL_ALLGATHER ? (size_t)comm->nranks : 1);
}

int rcci_window_wanted(const struct rcc_comm *comm, const rcci_op_t *op, size_t esize)
{
    int ring = op->coll == RCCI_COLL_ALLGATHER || (op->coll == RCCI_COLL_ALLREDUCE && !op->rounds);
    size_t min_bytes = (size_t)rcci_param_int(RCCI_PARAM_CUDAIPC_WINDOW_BYTES);
    return comm->devring_ipc && ring && comm->nranks >= 2 &&
           window_bytes(comm, op, esize) >= min_bytes;
}

rcc_result_t rcci_window_begin(struct rcc_comm *comm, const rcci_op_t *op,
                               const rcci_schedule_t *sched, const rcci_devapi_t *dev,
                               int can_offer, const rcci_link_t *to_next,
                               const rcci_link_t *from_prev, rcci_window_t *w)
{
    memset(w, 0, sizeof *w);
    if (!rcci_window_wanted(comm, op, sched->esize))
        return RCC_SUCCESS;
    size_t bytes = window_bytes(comm, op, sched->esize);
    w->on = 1;
    w->dev = dev, w->op = op;
    w->to_next = to_next, w->from_prev = from_prev;
    w->mine = calloc(1, sizeof *w->mine);
    w->theirs = calloc(1, sizeof *w->theirs);
    w->ack = calloc(2, sizeof *w->ack);
    if (!w->mine || !w->theirs || !w->ack)
        return rcci_error(RCC_ERR_NO_MEMORY, "window messages");
    w->mine->magic = WINDOW_MAGIC;
    w->mine->bytes = bytes;
    size_t offset = 0;
    char saved[RCCI_ERR_TEXT_BYTES];
    snprintf(saved, sizeof saved, "%s", rcci_tls_error());
    /* A window the previous rank cannot bound (no ipc_size) is not offered:
     * both ends must agree on whether it is used. */
    if (can_offer && dev->ipc_export && dev->ipc_size && (uintptr_t)op->recvbuf % 16 == 0 &&
        dev->ipc_export(op->recvbuf, w->mine->handle, &offset) == RCC_SUCCESS) {
        w->mine->ok = w->offered = 1;
        w->mine->offset = offset;
    } else {
        RCC_TRACE("%s: no window for rank %d: %s", rcci_coll_name(op->coll), from_prev->peer,
                  !can_offer                         ? "its receives copy out of their slots"
                  : (uintptr_t)op->recvbuf % 16 != 0 ? "the output is not 16-byte aligned"
                                                     : rcci_tls_error());
        rcci_tls_error_set(saved);
    }
    w->nsched = *sched;
    w->nsched.rank = (comm->rank + 1) % comm->nranks;
    rcci_schedule_init(&w->nsched);
    return RCC_SUCCESS;
}

/* A failure of the window exchange with `rank`, named as the steps' are. */
static rcc_result_t window_fail(struct rcc_comm *comm, const rcci_window_t *w, int rank,
                                rcc_result_t res)
{
    char peer[128];
    rcci_bootstrap_peer_name(comm->bootstrap, rank, peer, sizeof peer);
    rcci_error_prefix("%s #%u, exchanging output windows with %s: ", rcci_coll_name(w->op->coll),
                      w->op->seq, peer);
    return res;
}

rcc_result_t rcci_window_post(struct rcc_comm *comm, rcci_window_t *w, const rcci_tag_t *tag)
{
    if (!w->on || w->posted)
        return RCC_SUCCESS;
    w->posted = 1;
    const rcci_link_t *rl = w->from_prev, *sl = w->to_next;
    /* The reverse directions: to the previous rank, from the next one. */
    rcc_result_t res = rl->tr->isend(rl->conns[0], w->mine, sizeof *w->mine, tag, NULL, &w->sreq);
    if (res != RCC_SUCCESS)
        return window_fail(comm, w, rl->peer, res);
    res = sl->tr->irecv(sl->conns[0], w->theirs, sizeof *w->theirs, tag, NULL, &w->rreq);
    return res == RCC_SUCCESS ? RCC_SUCCESS : window_fail(comm, w, sl->peer, res);
}

int rcci_window_known(const rcci_window_t *w) { return !w->on || (w->posted && !w->rreq); }

/* Unmaps the next rank's output (nothing of this rank writes it any more). */
static void window_unmap(rcci_window_t *w)
{
    if (w->base)
        w->dev->ipc_close(w->base);
    w->base = w->next = NULL;
}

/* The next rank's window has come: maps it where it offers one. */
static rcc_result_t window_arrived(struct rcc_comm *comm, rcci_window_t *w, int must_map)
{
    const rcci_window_msg_t *t = w->theirs;
    int peer = w->to_next->peer;
    if (t->magic != WINDOW_MAGIC)
        return window_fail(comm, w, peer,
                           rcci_error(RCC_ERR_REMOTE, "no window of this version came"));
    if (t->bytes != w->mine->bytes) /* writes must stay inside it */
        return window_fail(
            comm, w, peer,
            rcci_error(RCC_ERR_REMOTE, "its window is %llu bytes, this operation's output %llu",
                       (unsigned long long)t->bytes, (unsigned long long)w->mine->bytes));
    if (!t->ok)
        return RCC_SUCCESS;
    void *p = NULL;
    size_t mapped = 0;
    char saved[RCCI_ERR_TEXT_BYTES];
    snprintf(saved, sizeof saved, "%s", rcci_tls_error());
    rcc_result_t res = w->dev->ipc_size
                           ? w->dev->ipc_open(t->handle, &p)
                           : rcci_error(RCC_ERR_UNSUPPORTED, "no way to bound a mapping here");
    if (res == RCC_SUCCESS && (res = w->dev->ipc_size(p, &mapped)) != RCC_SUCCESS)
        w->dev->ipc_close(p);
    if (res != RCC_SUCCESS && must_map) {
        rcci_error_prefix("mapping its output (set RCC_CUDAIPC_WINDOW_BYTES above the operation's "
                          "size to go without): ");
        return window_fail(comm, w, peer, res);
    }
    if (res != RCC_SUCCESS) {
        RCC_INFO("op #%u: rank %d's output cannot be mapped here (%s): its chunks go through "
                 "its slots",
                 w->op->seq, peer, rcci_tls_error());
        rcci_tls_error_set(saved);
        return RCC_SUCCESS;
    }
    w->base = p;
    if (t->offset > mapped || t->bytes > mapped - t->offset) /* writes must stay inside it */
        return window_fail(
            comm, w, peer,
            rcci_error(RCC_ERR_REMOTE,
                       "its window (%llu bytes at offset %llu) reaches past its allocation of %zu "
                       "bytes",
                       (unsigned long long)t->bytes, (unsigned long long)t->offset, mapped));
    w->next = w->base + t->offset;
    if ((uintptr_t)w->next % 16 != 0) /* the GPU's vector width is chosen at the launch */
        return window_fail(comm, w, peer,
                           rcci_error(RCC_ERR_REMOTE, "its window maps at %p: not 16-byte aligned",
                                      (void *)w->next));
    return RCC_SUCCESS;
}

/* Tests a window request of `link`; *req NULL once it has ended. */
static rcc_result_t window_test(struct rcc_comm *comm, const rcci_window_t *w,
                                const rcci_link_t *link, rcci_request_t **req, int *progressed)
{
    int done = 0;
    rcc_result_t res = *req ? link->tr->test(*req, &done) : RCC_SUCCESS;
    if (res != RCC_SUCCESS || done)
        *req = NULL, *progressed = 1;
    return res == RCC_SUCCESS ? RCC_SUCCESS : window_fail(comm, w, link->peer, res);
}

rcc_result_t rcci_window_advance(struct rcc_comm *comm, rcci_window_t *w, const rcci_tag_t *tag,
                                 int writes_done, int acks_after, int must_map, int *progressed)
{
    const rcci_link_t *rl = w->from_prev, *sl = w->to_next;
    if (!w->on || !w->posted)
        return RCC_SUCCESS;
    int waiting = w->rreq != NULL;
    rcc_result_t res = window_test(comm, w, rl, &w->sreq, progressed);
    if (res == RCC_SUCCESS)
        res = window_test(comm, w, sl, &w->rreq, progressed);
    if (res == RCC_SUCCESS && waiting && !w->rreq)
        res = window_arrived(comm, w, must_map);
    if (res == RCC_SUCCESS && !w->ack_sent && !w->rreq && writes_done) {
        window_unmap(w);
        w->ack[0] = UNMAPPED_MAGIC;
        w->ack_sent = *progressed = 1;
        res = sl->tr->isend(sl->conns[0], &w->ack[0], sizeof w->ack[0], tag, NULL, &w->asreq);
        if (res != RCC_SUCCESS)
            return window_fail(comm, w, sl->peer, res);
    }
    if (res == RCC_SUCCESS && !w->ack_posted && acks_after) {
        w->ack_posted = *progressed = 1;
        res = rl->tr->irecv(rl->conns[0], &w->ack[1], sizeof w->ack[1], tag, NULL, &w->areq);
        if (res != RCC_SUCCESS)
            return window_fail(comm, w, rl->peer, res);
    }
    waiting = w->areq != NULL;
    if (res == RCC_SUCCESS)
        res = window_test(comm, w, sl, &w->asreq, progressed);
    if (res == RCC_SUCCESS)
        res = window_test(comm, w, rl, &w->areq, progressed);
    if (res == RCC_SUCCESS && waiting && !w->areq && w->ack[1] != UNMAPPED_MAGIC)
        res = window_fail(comm, w, rl->peer,
                          rcci_error(RCC_ERR_REMOTE, "no end of its window of this version came"));
    return res;
}

size_t rcci_window_offset(const rcci_window_t *w, size_t item, size_t count)
{
    if (!w->on)
        return SIZE_MAX;
    rcci_recv_step_t nrs;
    rcci_schedule_recv(&w->nsched, item, &nrs);
    if (nrs.local || !nrs.dst || nrs.count != count)
        return SIZE_MAX;
    return (size_t)(nrs.dst - (char *)w->op->recvbuf);
}

char *rcci_window_dst(const rcci_window_t *w, size_t item, size_t count)
{
    size_t off = w->next ? rcci_window_offset(w, item, count) : SIZE_MAX;
    return off == SIZE_MAX ? NULL : w->next + off;
}

int rcci_window_over(const rcci_window_t *w)
{
    return !w->on ||
           (w->ack_sent && w->ack_posted && !w->sreq && !w->rreq && !w->asreq && !w->areq);
}

int rcci_window_released(const rcci_window_t *w) { return !w->on || (w->ack_posted && !w->areq); }

/* One test of a window request still out, which frees it when it fails or
 * has completed (*req NULL). */
static void window_settle(const rcci_link_t *link, rcci_request_t **req)
{
    int complete;
    if (link)
        rcci_coll_test_req(link, req, &complete);
}

void rcci_window_settle(rcci_window_t *w)
{
    char error[RCCI_ERR_TEXT_BYTES]; /* the failure being reported stays the story */
    snprintf(error, sizeof error, "%s", rcci_tls_error());
    window_settle(w->from_prev, &w->sreq);
    window_settle(w->to_next, &w->rreq);
    window_settle(w->to_next, &w->asreq);
    window_settle(w->from_prev, &w->areq);
    rcci_tls_error_set(error);
}

void rcci_window_end(rcci_window_t *w, int writes_ended)
{
    if (writes_ended) /* else the GPU may still write into it: left mapped */
        window_unmap(w);
    /* A window message still queued is freed with its connection, which a
     * failure closes; its buffer must outlive it. */
    if (writes_ended || (!w->sreq && !w->rreq && !w->asreq && !w->areq)) {
        free(w->mine);
        free(w->theirs);
        free(w->ack);
        w->mine = w->theirs = NULL, w->ack = NULL;
    }
}
