/*
 * The collective calls: argument checks, then the operation is queued on the
 * communicator; the blocking forms wait for it, the nonblocking ones hand
 * back a request.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

struct rcc_request {
    rcci_op_t *op;
};

/* How a call runs: blocking, nonblocking (a request), or ordered on a CUDA
 * stream (lib/stream.c). */
typedef struct {
    int nonblocking;
    int on_stream;
    void *stream;
} coll_how_t;
#define HOW_BLOCKING ((coll_how_t){0, 0, NULL})
#define HOW_NONBLOCKING ((coll_how_t){1, 0, NULL})

static rcc_result_t coll_check_type(const char *name, rcc_datatype_t dtype, size_t count,
                                    size_t blocks)
{
    size_t esize = rcc_datatype_size(dtype);
    if (esize == 0)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: datatype %d is not an rcc_datatype_t",
                          name, (int)dtype);
    if (count > SIZE_MAX / esize / blocks)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: count %zu of %s overflows size_t", name,
                          count, rcc_datatype_name(dtype));
    return RCC_SUCCESS;
}

static rcc_result_t coll_check_op(const char *name, rcc_redop_t op)
{
    if ((unsigned)op >= RCC_NUM_OPS)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: op %d is not an rcc_redop_t", name,
                          (int)op);
    return RCC_SUCCESS;
}

/* `what` (root, peer) must name a rank of the communicator. */
static rcc_result_t coll_check_rank(const char *name, const char *what, int rank,
                                    const struct rcc_comm *comm)
{
    if (rank < 0 || rank >= comm->nranks)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "%s: %s %d is not a rank of this %d-rank communicator", name, what, rank,
                          comm->nranks);
    return RCC_SUCCESS;
}

/* Two buffers may be the same (`same_ok` points at where the second may
 * start inside the first for in-place use) but must not otherwise overlap. */
static rcc_result_t coll_check_overlap(const char *name, const void *a, size_t abytes,
                                       const void *b, size_t bbytes, const void *same_ok)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    if (!a || !b || abytes == 0 || bbytes == 0 || b == same_ok)
        return RCC_SUCCESS;
    if (x < y + bbytes && y < x + abytes)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "%s: sendbuf and recvbuf overlap without being the in-place layout",
                          name);
    return RCC_SUCCESS;
}

static rcc_result_t coll_check_ptr(const char *name, const void *p, const char *what)
{
    if (!p)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: %s is NULL with count > 0", name, what);
    return RCC_SUCCESS;
}

/* A new operation record copied from `tmpl` (NULL when out of memory). */
static rcci_op_t *coll_op_new(const struct rcc_comm *comm, const rcci_op_t *tmpl, size_t extra)
{
    rcci_op_t *op = rcci_op_new(extra);
    if (!op)
        return NULL;
    op->coll = tmpl->coll;
    op->sendbuf = tmpl->sendbuf;
    op->recvbuf = tmpl->recvbuf;
    op->count = tmpl->count;
    op->dtype = tmpl->dtype;
    op->redop = tmpl->redop;
    op->root = tmpl->root;
    op->alltoalls = tmpl->alltoalls;
    if (tmpl->nmsgs) {
        op->msgs = (rcci_p2p_msg_t *)op->inline_data;
        op->nmsgs = tmpl->nmsgs;
        memcpy(op->msgs, tmpl->msgs, sizeof *op->msgs * (size_t)tmpl->nmsgs);
    }
    if (op->coll == RCCI_COLL_BARRIER) { /* an allreduce of one byte per rank */
        op->sendbuf = op->inline_data;
        op->recvbuf = op->inline_data + comm->nranks;
    }
    return op;
}

/* Queues `tmpl` as a new operation; *req gets its request (NULL when there
 * is nothing to do). */
static rcc_result_t coll_submit(struct rcc_comm *comm, const rcci_op_t *tmpl, size_t extra,
                                int blocking, rcc_request_t *req)
{
    *req = NULL;
    if (tmpl->count == 0 && tmpl->coll != RCCI_COLL_BARRIER)
        return RCC_SUCCESS; /* nothing moves, as in NCCL */
    rcci_op_t *op = coll_op_new(comm, tmpl, extra);
    struct rcc_request *r = malloc(sizeof *r);
    if (!op || !r) {
        free(r);
        if (op)
            rcci_op_release(op);
        return rcci_error(RCC_ERR_NO_MEMORY, "%s: operation record", rcci_coll_name(tmpl->coll));
    }
    r->op = op;
    if (rcci_group_active()) { /* launched by rcc_group_end */
        *req = r;
        return RCC_SUCCESS;
    }
    if (blocking && rcci_progress_run_inline(comm, op)) {
        *req = r;
        return RCC_SUCCESS;
    }
    rcc_result_t res = rcci_progress_enqueue(comm, op);
    if (res != RCC_SUCCESS) {
        rcci_op_release(op);
        free(r);
        return res;
    }
    *req = r;
    return RCC_SUCCESS;
}

/* The shared body of every collective call: checks (done by the caller into
 * `res`), submit, and for blocking calls (req == NULL) the wait. */
static rcc_result_t coll_call(struct rcc_comm *comm, rcc_result_t res, const rcci_op_t *tmpl,
                              rcc_request_t *req, coll_how_t how)
{
    rcc_request_t local = NULL;
    size_t extra = tmpl->coll == RCCI_COLL_BARRIER ? 2 * (size_t)comm->nranks
                                                   : sizeof *tmpl->msgs * (size_t)tmpl->nmsgs;
    if (how.on_stream) { /* queued behind the stream's work; nothing to wait for here */
        if (res == RCC_SUCCESS && (tmpl->count > 0 || tmpl->coll == RCCI_COLL_BARRIER)) {
            rcci_op_t *op = coll_op_new(comm, tmpl, extra);
            res = op ? rcci_stream_submit(comm, op, how.stream)
                     : rcci_error(RCC_ERR_NO_MEMORY, "%s: operation record",
                                  rcci_coll_name(tmpl->coll));
        }
        return rcci_comm_leave(comm, res);
    }
    if (res == RCC_SUCCESS)
        res = coll_submit(comm, tmpl, extra, !req, req ? req : &local);
    rcc_request_t mine = req ? *req : local;
    if (res == RCC_SUCCESS && mine && rcci_group_active()) {
        /* The group launches it; a blocking call's request is the group's
         * to wait for at its end. */
        res = rcci_group_add(comm, mine->op, req ? NULL : local);
        if (res != RCC_SUCCESS) {
            rcci_op_release(mine->op);
            free(mine);
            if (req)
                *req = NULL;
        }
        return rcci_comm_leave(comm, res);
    }
    if (res == RCC_SUCCESS && !req)
        res = rcc_wait(&local);
    return rcci_comm_leave(comm, res);
}

/* Common entry: clears the thread's error, checks comm and req. */
static rcc_result_t coll_enter(const char *name, struct rcc_comm *comm, rcc_request_t *req,
                               int nonblocking)
{
    rcci_tls_error_clear();
    if (req)
        *req = NULL;
    rcc_result_t live = rcci_live_check(comm, name);
    if (live != RCC_SUCCESS)
        return live;
    if (nonblocking && !req) {
        rcci_comm_enter(comm); /* so that rcc_last_error(comm) tells it too */
        return rcci_comm_leave(comm, rcci_error(RCC_ERR_INVALID_ARGUMENT,
                                                "%s: req (the request pointer) is NULL", name));
    }
    if (req)
        *req = NULL;
    rcci_comm_enter(comm);
    return RCC_SUCCESS;
}

/* ---- allreduce --------------------------------------------------------------- */

static rcc_result_t coll_allreduce(const char *name, const void *sendbuf, void *recvbuf,
                                   size_t count, rcc_datatype_t dtype, rcc_redop_t redop,
                                   rcc_comm_t comm, rcc_request_t *req, coll_how_t how)
{
    rcc_result_t res = coll_enter(name, comm, req, how.nonblocking);
    if (res != RCC_SUCCESS)
        return res;
    res = coll_check_type(name, dtype, count, 1);
    if (res == RCC_SUCCESS)
        res = coll_check_op(name, redop);
    if (res == RCC_SUCCESS && count > 0)
        res = coll_check_ptr(name, sendbuf, "sendbuf");
    if (res == RCC_SUCCESS && count > 0)
        res = coll_check_ptr(name, recvbuf, "recvbuf");
    size_t bytes = count * rcc_datatype_size(dtype);
    if (res == RCC_SUCCESS)
        res = coll_check_overlap(name, sendbuf, bytes, recvbuf, bytes, sendbuf);
    rcci_op_t tmpl = {.coll = RCCI_COLL_ALLREDUCE,
                      .sendbuf = sendbuf,
                      .recvbuf = recvbuf,
                      .count = count,
                      .dtype = dtype,
                      .redop = redop};
    return coll_call(comm, res, &tmpl, req, how);
}

rcc_result_t rcc_allreduce(const void *sendbuf, void *recvbuf, size_t count, rcc_datatype_t dtype,
                           rcc_redop_t redop, rcc_comm_t comm)
{
    return coll_allreduce("rcc_allreduce", sendbuf, recvbuf, count, dtype, redop, comm, NULL, HOW_BLOCKING);
}

rcc_result_t rcc_iallreduce(const void *sendbuf, void *recvbuf, size_t count, rcc_datatype_t dtype,
                            rcc_redop_t redop, rcc_comm_t comm, rcc_request_t *req)
{
    return coll_allreduce("rcc_iallreduce", sendbuf, recvbuf, count, dtype, redop, comm, req, HOW_NONBLOCKING);
}

/* ---- reduce-scatter and allgather --------------------------------------------- */

static rcc_result_t coll_blocks(const char *name, rcci_coll_t coll, const void *sendbuf,
                                void *recvbuf, size_t count, rcc_datatype_t dtype,
                                rcc_redop_t redop, rcc_comm_t comm, rcc_request_t *req,
                                coll_how_t how)
{
    rcc_result_t res = coll_enter(name, comm, req, how.nonblocking);
    if (res != RCC_SUCCESS)
        return res;
    res = coll_check_type(name, dtype, count, (size_t)comm->nranks);
    if (res == RCC_SUCCESS && coll == RCCI_COLL_REDUCE_SCATTER)
        res = coll_check_op(name, redop);
    if (res == RCC_SUCCESS && count > 0)
        res = coll_check_ptr(name, sendbuf, "sendbuf");
    if (res == RCC_SUCCESS && count > 0)
        res = coll_check_ptr(name, recvbuf, "recvbuf");
    size_t block = count * rcc_datatype_size(dtype), all = block * (size_t)comm->nranks;
    if (res == RCC_SUCCESS && coll == RCCI_COLL_REDUCE_SCATTER)
        res = coll_check_overlap(name, sendbuf, all, recvbuf, block,
                                 (const char *)sendbuf + (size_t)comm->rank * block);
    if (res == RCC_SUCCESS && coll == RCCI_COLL_ALLGATHER)
        res = coll_check_overlap(name, recvbuf, all, sendbuf, block,
                                 (const char *)recvbuf + (size_t)comm->rank * block);
    rcci_op_t tmpl = {.coll = coll,
                      .sendbuf = sendbuf,
                      .recvbuf = recvbuf,
                      .count = count,
                      .dtype = dtype,
                      .redop = coll == RCCI_COLL_ALLGATHER ? RCC_SUM : redop};
    return coll_call(comm, res, &tmpl, req, how);
}

rcc_result_t rcc_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                rcc_datatype_t dtype, rcc_redop_t redop, rcc_comm_t comm)
{
    return coll_blocks("rcc_reduce_scatter", RCCI_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount,
                       dtype, redop, comm, NULL, HOW_BLOCKING);
}

rcc_result_t rcc_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                 rcc_datatype_t dtype, rcc_redop_t redop, rcc_comm_t comm,
                                 rcc_request_t *req)
{
    return coll_blocks("rcc_ireduce_scatter", RCCI_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount,
                       dtype, redop, comm, req, HOW_NONBLOCKING);
}

rcc_result_t rcc_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                           rcc_datatype_t dtype, rcc_comm_t comm)
{
    return coll_blocks("rcc_allgather", RCCI_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype,
                       RCC_SUM, comm, NULL, HOW_BLOCKING);
}

rcc_result_t rcc_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                            rcc_datatype_t dtype, rcc_comm_t comm, rcc_request_t *req)
{
    return coll_blocks("rcc_iallgather", RCCI_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype,
                       RCC_SUM, comm, req, HOW_NONBLOCKING);
}

/* ---- broadcast and reduce ----------------------------------------------------- */

static rcc_result_t coll_rooted(const char *name, rcci_coll_t coll, const void *sendbuf,
                                void *recvbuf, size_t count, rcc_datatype_t dtype,
                                rcc_redop_t redop, int root, rcc_comm_t comm, rcc_request_t *req,
                                coll_how_t how)
{
    rcc_result_t res = coll_enter(name, comm, req, how.nonblocking);
    if (res != RCC_SUCCESS)
        return res;
    res = coll_check_type(name, dtype, count, 1);
    if (res == RCC_SUCCESS && coll == RCCI_COLL_REDUCE)
        res = coll_check_op(name, redop);
    if (res == RCC_SUCCESS)
        res = coll_check_rank(name, "root", root, comm);
    int is_root = comm->rank == root;
    /* broadcast reads sendbuf on root and writes recvbuf everywhere; reduce
     * reads sendbuf everywhere and writes recvbuf on root. */
    int need_send = coll == RCCI_COLL_REDUCE || is_root;
    int need_recv = coll == RCCI_COLL_BROADCAST || is_root;
    if (res == RCC_SUCCESS && count > 0 && need_send)
        res = coll_check_ptr(name, sendbuf, "sendbuf");
    if (res == RCC_SUCCESS && count > 0 && need_recv)
        res = coll_check_ptr(name, recvbuf, "recvbuf");
    size_t bytes = count * rcc_datatype_size(dtype);
    if (res == RCC_SUCCESS && need_send && need_recv)
        res = coll_check_overlap(name, sendbuf, bytes, recvbuf, bytes, sendbuf);
    rcci_op_t tmpl = {.coll = coll,
                      .sendbuf = need_send ? sendbuf : NULL,
                      .recvbuf = need_recv ? recvbuf : NULL,
                      .count = count,
                      .dtype = dtype,
                      .redop = coll == RCCI_COLL_REDUCE ? redop : RCC_SUM,
                      .root = root};
    return coll_call(comm, res, &tmpl, req, how);
}

rcc_result_t rcc_broadcast(const void *sendbuf, void *recvbuf, size_t count, rcc_datatype_t dtype,
                           int root, rcc_comm_t comm)
{
    return coll_rooted("rcc_broadcast", RCCI_COLL_BROADCAST, sendbuf, recvbuf, count, dtype,
                       RCC_SUM, root, comm, NULL, HOW_BLOCKING);
}

rcc_result_t rcc_ibroadcast(const void *sendbuf, void *recvbuf, size_t count, rcc_datatype_t dtype,
                            int root, rcc_comm_t comm, rcc_request_t *req)
{
    return coll_rooted("rcc_ibroadcast", RCCI_COLL_BROADCAST, sendbuf, recvbuf, count, dtype,
                       RCC_SUM, root, comm, req, HOW_NONBLOCKING);
}

rcc_result_t rcc_reduce(const void *sendbuf, void *recvbuf, size_t count, rcc_datatype_t dtype,
                        rcc_redop_t redop, int root, rcc_comm_t comm)
{
    return coll_rooted("rcc_reduce", RCCI_COLL_REDUCE, sendbuf, recvbuf, count, dtype, redop, root,
                       comm, NULL, HOW_BLOCKING);
}

rcc_result_t rcc_ireduce(const void *sendbuf, void *recvbuf, size_t count, rcc_datatype_t dtype,
                         rcc_redop_t redop, int root, rcc_comm_t comm, rcc_request_t *req)
{
    return coll_rooted("rcc_ireduce", RCCI_COLL_REDUCE, sendbuf, recvbuf, count, dtype, redop, root,
                       comm, req, HOW_NONBLOCKING);
}

/* ---- barrier ------------------------------------------------------------------ */

static rcc_result_t coll_barrier(const char *name, rcc_comm_t comm, rcc_request_t *req,
                                 coll_how_t how)
{
    rcc_result_t res = coll_enter(name, comm, req, how.nonblocking);
    if (res != RCC_SUCCESS)
        return res;
    rcci_op_t tmpl = {.coll = RCCI_COLL_BARRIER,
                      .count = (size_t)comm->nranks,
                      .dtype = RCC_INT8,
                      .redop = RCC_SUM};
    return coll_call(comm, RCC_SUCCESS, &tmpl, req, how);
}

rcc_result_t rcc_barrier(rcc_comm_t comm) { return coll_barrier("rcc_barrier", comm, NULL, HOW_BLOCKING); }

rcc_result_t rcc_ibarrier(rcc_comm_t comm, rcc_request_t *req)
{
    return coll_barrier("rcc_ibarrier", comm, req, HOW_NONBLOCKING);
}

/* ---- point to point ----------------------------------------------------------- */

static rcc_result_t coll_p2p(const char *name, int is_send, const void *buf, size_t count,
                             rcc_datatype_t dtype, int peer, rcc_comm_t comm, rcc_request_t *req,
                             coll_how_t how)
{
    rcc_result_t res = coll_enter(name, comm, req, how.nonblocking);
    if (res != RCC_SUCCESS)
        return res;
    res = coll_check_type(name, dtype, count, 1);
    if (res == RCC_SUCCESS)
        res = coll_check_rank(name, "peer", peer, comm);
    if (res == RCC_SUCCESS && count > 0)
        res = coll_check_ptr(name, buf, is_send ? "sendbuf" : "recvbuf");
    if (res == RCC_SUCCESS && peer == comm->rank && !rcci_group_active())
        res =
            rcci_error(RCC_ERR_INVALID_USAGE,
                       "%s: to this rank itself outside a group (it would wait for itself)", name);
    rcci_p2p_msg_t msg = {.peer = peer,
                          .is_send = is_send,
                          .buf = (char *)buf,
                          .bytes = count * rcc_datatype_size(dtype)};
    rcci_op_t tmpl = {.coll = RCCI_COLL_P2P,
                      .count = count,
                      .dtype = dtype,
                      .redop = RCC_SUM,
                      .root = peer,
                      .msgs = &msg,
                      .nmsgs = 1};
    return coll_call(comm, res, &tmpl, req, how);
}

rcc_result_t rcc_send(const void *sendbuf, size_t count, rcc_datatype_t dtype, int peer,
                      rcc_comm_t comm)
{
    return coll_p2p("rcc_send", 1, sendbuf, count, dtype, peer, comm, NULL, HOW_BLOCKING);
}

rcc_result_t rcc_recv(void *recvbuf, size_t count, rcc_datatype_t dtype, int peer, rcc_comm_t comm)
{
    return coll_p2p("rcc_recv", 0, recvbuf, count, dtype, peer, comm, NULL, HOW_BLOCKING);
}

rcc_result_t rcc_isend(const void *sendbuf, size_t count, rcc_datatype_t dtype, int peer,
                       rcc_comm_t comm, rcc_request_t *req)
{
    return coll_p2p("rcc_isend", 1, sendbuf, count, dtype, peer, comm, req, HOW_NONBLOCKING);
}

rcc_result_t rcc_irecv(void *recvbuf, size_t count, rcc_datatype_t dtype, int peer, rcc_comm_t comm,
                       rcc_request_t *req)
{
    return coll_p2p("rcc_irecv", 0, recvbuf, count, dtype, peer, comm, req, HOW_NONBLOCKING);
}

/* Alltoall: block p of sendbuf goes to rank p, which stores it at block
 * `rank` of its recvbuf; one point-to-point operation of 2n messages. */
static rcc_result_t coll_alltoall(const char *name, const void *sendbuf, void *recvbuf,
                                  size_t count, rcc_datatype_t dtype, rcc_comm_t comm,
                                  rcc_request_t *req, coll_how_t how)
{
    rcc_result_t res = coll_enter(name, comm, req, how.nonblocking);
    if (res != RCC_SUCCESS)
        return res;
    int n = comm->nranks;
    res = coll_check_type(name, dtype, count, (size_t)n);
    if (res == RCC_SUCCESS && count > 0)
        res = coll_check_ptr(name, sendbuf, "sendbuf");
    if (res == RCC_SUCCESS && count > 0)
        res = coll_check_ptr(name, recvbuf, "recvbuf");
    size_t block = count * rcc_datatype_size(dtype), all = block * (size_t)n;
    if (res == RCC_SUCCESS && sendbuf == recvbuf && count > 0)
        res = rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: in-place alltoall is not supported", name);
    if (res == RCC_SUCCESS)
        res = coll_check_overlap(name, sendbuf, all, recvbuf, all, NULL);
    rcci_p2p_msg_t *msgs = res == RCC_SUCCESS ? malloc(sizeof *msgs * 2 * (size_t)n) : NULL;
    if (res == RCC_SUCCESS && !msgs)
        res = rcci_error(RCC_ERR_NO_MEMORY, "%s: %d messages", name, 2 * n);
    for (int p = 0; msgs && p < n; p++) {
        /* Start with the next rank so that rank p's first sends spread out. */
        int q = (comm->rank + p) % n;
        msgs[2 * p] = (rcci_p2p_msg_t){.peer = q,
                                       .is_send = 1,
                                       .buf = (char *)sendbuf + (size_t)q * block,
                                       .bytes = block,
                                       .lane = RCCI_LANE_USER,
                                       .alltoall = 1};
        msgs[2 * p + 1] = (rcci_p2p_msg_t){.peer = q,
                                           .is_send = 0,
                                           .buf = (char *)recvbuf + (size_t)q * block,
                                           .bytes = block,
                                           .lane = RCCI_LANE_USER,
                                           .alltoall = 1};
    }
    rcci_op_t tmpl = {.coll = RCCI_COLL_P2P,
                      .count = count,
                      .dtype = dtype,
                      .redop = RCC_SUM,
                      .msgs = msgs,
                      .nmsgs = 2 * n,
                      .alltoalls = 1};
    res = coll_call(comm, res, &tmpl, req, how);
    free(msgs);
    return res;
}

rcc_result_t rcc_alltoall(const void *sendbuf, void *recvbuf, size_t count, rcc_datatype_t dtype,
                          rcc_comm_t comm)
{
    return coll_alltoall("rcc_alltoall", sendbuf, recvbuf, count, dtype, comm, NULL, HOW_BLOCKING);
}

rcc_result_t rcc_ialltoall(const void *sendbuf, void *recvbuf, size_t count, rcc_datatype_t dtype,
                           rcc_comm_t comm, rcc_request_t *req)
{
    return coll_alltoall("rcc_ialltoall", sendbuf, recvbuf, count, dtype, comm, req, HOW_NONBLOCKING);
}

/* ---- requests ----------------------------------------------------------------- */

static rcc_result_t req_finish(rcc_request_t *req)
{
    rcci_op_t *op = (*req)->op;
    rcc_result_t res = rcci_op_wait(op); /* done already: returns at once */
    rcci_op_release(op);
    free(*req);
    *req = NULL;
    return res;
}

rcc_result_t rcc_test(rcc_request_t *req, int *done)
{
    rcci_tls_error_clear();
    if (!req || !done)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_test: NULL %s", req ? "done" : "req");
    *done = !*req || rcci_op_done((*req)->op);
    return *done && *req ? req_finish(req) : RCC_SUCCESS;
}

rcc_result_t rcc_wait(rcc_request_t *req)
{
    rcci_tls_error_clear();
    if (!req)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_wait: req is NULL");
    if (*req && !atomic_load(&(*req)->op->launched) && !rcci_op_done((*req)->op))
        return rcci_error(RCC_ERR_INVALID_USAGE, "rcc_wait on an operation of a group that has "
                                                 "not ended: call rcc_group_end first");
    return *req ? req_finish(req) : RCC_SUCCESS;
}

rcc_result_t rcc_wait_all(int n, rcc_request_t *reqs)
{
    if (n < 0 || (n > 0 && !reqs))
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_wait_all: %d requests at %p", n,
                          (void *)reqs);
    rcc_result_t first = RCC_SUCCESS;
    char error[RCCI_ERR_TEXT_BYTES] = "";
    for (int i = 0; i < n; i++) {
        rcc_result_t res = rcc_wait(&reqs[i]);
        if (res != RCC_SUCCESS && first == RCC_SUCCESS) {
            first = res;
            strncpy(error, rcci_tls_error(), sizeof error - 1);
        }
    }
    if (first != RCC_SUCCESS)
        rcci_tls_error_set(error);
    return first;
}

/* ---- ordered on a CUDA stream -------------------------------------------------- */

/* With a usable device the call goes to the stream path; without one only a
 * NULL stream is accepted and the call is the blocking host collective. */
static rcc_result_t stream_how(const char *name, void *stream, coll_how_t *how)
{
    rcci_tls_error_clear();
    if (rcci_stream_usable()) {
        *how = (coll_how_t){.on_stream = 1, .stream = stream};
        return RCC_SUCCESS;
    }
    *how = HOW_BLOCKING;
    if (!stream)
        return RCC_SUCCESS;
    return rcci_error(RCC_ERR_UNSUPPORTED,
                      "%s: a CUDA stream was given but %s; only a NULL stream with host "
                      "buffers works here",
                      name, rcci_stream_why());
}

#define STREAM_CALL(name, stream, call)                                                            \
    do {                                                                                           \
        coll_how_t how;                                                                            \
        rcc_result_t res = stream_how(name, stream, &how);                                         \
        return res != RCC_SUCCESS ? res : (call);                                                  \
    } while (0)

rcc_result_t rcc_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                  rcc_datatype_t dtype, rcc_redop_t redop, rcc_comm_t comm,
                                  void *stream)
{
    STREAM_CALL("rcc_allreduce_stream", stream,
                coll_allreduce("rcc_allreduce_stream", sendbuf, recvbuf, count, dtype, redop,
                               comm, NULL, how));
}

rcc_result_t rcc_reduce_scatter_stream(const void *sendbuf, void *recvbuf, size_t recvcount,
                                       rcc_datatype_t dtype, rcc_redop_t redop, rcc_comm_t comm,
                                       void *stream)
{
    STREAM_CALL("rcc_reduce_scatter_stream", stream,
                coll_blocks("rcc_reduce_scatter_stream", RCCI_COLL_REDUCE_SCATTER, sendbuf,
                            recvbuf, recvcount, dtype, redop, comm, NULL, how));
}

rcc_result_t rcc_allgather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  rcc_datatype_t dtype, rcc_comm_t comm, void *stream)
{
    STREAM_CALL("rcc_allgather_stream", stream,
                coll_blocks("rcc_allgather_stream", RCCI_COLL_ALLGATHER, sendbuf, recvbuf,
                            sendcount, dtype, RCC_SUM, comm, NULL, how));
}

rcc_result_t rcc_broadcast_stream(const void *sendbuf, void *recvbuf, size_t count,
                                  rcc_datatype_t dtype, int root, rcc_comm_t comm, void *stream)
{
    STREAM_CALL("rcc_broadcast_stream", stream,
                coll_rooted("rcc_broadcast_stream", RCCI_COLL_BROADCAST, sendbuf, recvbuf, count,
                            dtype, RCC_SUM, root, comm, NULL, how));
}

rcc_result_t rcc_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                               rcc_datatype_t dtype, rcc_redop_t redop, int root, rcc_comm_t comm,
                               void *stream)
{
    STREAM_CALL("rcc_reduce_stream", stream,
                coll_rooted("rcc_reduce_stream", RCCI_COLL_REDUCE, sendbuf, recvbuf, count, dtype,
                            redop, root, comm, NULL, how));
}

rcc_result_t rcc_send_stream(const void *sendbuf, size_t count, rcc_datatype_t dtype, int peer,
                             rcc_comm_t comm, void *stream)
{
    STREAM_CALL("rcc_send_stream", stream,
                coll_p2p("rcc_send_stream", 1, sendbuf, count, dtype, peer, comm, NULL, how));
}

rcc_result_t rcc_recv_stream(void *recvbuf, size_t count, rcc_datatype_t dtype, int peer,
                             rcc_comm_t comm, void *stream)
{
    STREAM_CALL("rcc_recv_stream", stream,
                coll_p2p("rcc_recv_stream", 0, recvbuf, count, dtype, peer, comm, NULL, how));
}

rcc_result_t rcc_alltoall_stream(const void *sendbuf, void *recvbuf, size_t count,
                                 rcc_datatype_t dtype, rcc_comm_t comm, void *stream)
{
    STREAM_CALL("rcc_alltoall_stream", stream,
                coll_alltoall("rcc_alltoall_stream", sendbuf, recvbuf, count, dtype, comm, NULL,
                              how));
}
