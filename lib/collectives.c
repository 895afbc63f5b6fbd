/*
 * The collective calls: argument checks, then the operation is queued on the
 * communicator and (for the blocking forms) awaited.
 */
#include <stdint.h>
#include <stdlib.h>

#include "comm.h"

static rcc_result_t coll_check_buffers(const char *name, const void *sendbuf, void *recvbuf,
                                       size_t count, rcc_datatype_t dtype)
{
    size_t esize = rcc_datatype_size(dtype);
    if (esize == 0)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: datatype %d is not an rcc_datatype_t",
                          name, (int)dtype);
    if (count > SIZE_MAX / esize)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: count %zu of %s overflows size_t", name,
                          count, rcc_datatype_name(dtype));
    if (count == 0)
        return RCC_SUCCESS;
    if (!sendbuf || !recvbuf)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: %s is NULL with count %zu", name,
                          sendbuf ? "recvbuf" : "sendbuf", count);
    uintptr_t s = (uintptr_t)sendbuf, r = (uintptr_t)recvbuf, bytes = count * esize;
    if (s != r && s < r + bytes && r < s + bytes)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "%s: sendbuf and recvbuf overlap without being equal (in-place needs "
                          "sendbuf == recvbuf)",
                          name);
    return RCC_SUCCESS;
}

/* Queues `op` and waits for it; frees it. */
static rcc_result_t coll_run(struct rcc_comm *comm, rcci_op_t *op)
{
    rcc_result_t res = rcci_progress_enqueue(comm, op);
    if (res != RCC_SUCCESS) {
        free(op);
        return res;
    }
    res = rcci_progress_wait(comm, op);
    rcci_op_release(comm, op);
    return res;
}

rcc_result_t rcc_allreduce(const void *sendbuf, void *recvbuf, size_t count, rcc_datatype_t dtype,
                           rcc_redop_t redop, rcc_comm_t comm)
{
    rcci_tls_error_clear();
    if (!comm)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_allreduce: comm is NULL");
    rcci_comm_enter(comm);
    rcc_result_t res = coll_check_buffers("rcc_allreduce", sendbuf, recvbuf, count, dtype);
    if (res == RCC_SUCCESS && (unsigned)redop >= RCC_NUM_OPS)
        res = rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_allreduce: op %d is not an rcc_redop_t",
                         (int)redop);
    if (res == RCC_SUCCESS && count > 0) {
        rcci_op_t *op = calloc(1, sizeof *op);
        if (!op) {
            res = rcci_error(RCC_ERR_NO_MEMORY, "rcc_allreduce: operation record");
        } else {
            *op = (rcci_op_t){.kind = RCCI_OP_ALLREDUCE,
                              .sendbuf = sendbuf,
                              .recvbuf = recvbuf,
                              .count = count,
                              .dtype = dtype,
                              .redop = redop};
            res = coll_run(comm, op);
        }
    }
    return rcci_comm_leave(comm, res);
}
