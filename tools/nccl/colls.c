/*
 * NCCL's collectives and point-to-point calls on ringcc's stream-ordered forms
 * (rcc_<name>_stream): the cudaStream_t is passed through. The data types, operators and
 * argument conventions are NCCL's already; the shim checks the communicator, maps PreMulSum
 * operators (premul.c) and builds Gather and Scatter, which ringcc lacks, from a group of
 * sends and receives.
 */
#include <string.h>

#include "shim.h"

/* ringcc's data types and operators are NCCL's numbers (ringcc.h), so the
 * shim passes them on as they are. */
SHIM_SAME_VALUE(RCC_INT8, ncclInt8);
SHIM_SAME_VALUE(RCC_UINT8, ncclUint8);
SHIM_SAME_VALUE(RCC_INT32, ncclInt32);
SHIM_SAME_VALUE(RCC_UINT32, ncclUint32);
SHIM_SAME_VALUE(RCC_INT64, ncclInt64);
SHIM_SAME_VALUE(RCC_UINT64, ncclUint64);
SHIM_SAME_VALUE(RCC_FLOAT16, ncclFloat16);
SHIM_SAME_VALUE(RCC_FLOAT32, ncclFloat32);
SHIM_SAME_VALUE(RCC_FLOAT64, ncclFloat64);
SHIM_SAME_VALUE(RCC_BFLOAT16, ncclBfloat16);
SHIM_SAME_VALUE(RCC_NUM_DATATYPES, ncclFloat8e4m3); /* the float8 types come after ringcc's */
SHIM_SAME_VALUE(RCC_SUM, ncclSum);
SHIM_SAME_VALUE(RCC_PROD, ncclProd);
SHIM_SAME_VALUE(RCC_MAX, ncclMax);
SHIM_SAME_VALUE(RCC_MIN, ncclMin);
SHIM_SAME_VALUE(RCC_AVG, ncclAvg);
SHIM_SAME_VALUE(RCC_NUM_OPS, ncclNumOps);

/* The communicator of an operation, with what NCCL has and ringcc has not
 * refused before ringcc checks the rest. */
static struct ncclComm *op_comm(ncclComm_t comm, ncclDataType_t dtype, const char *func,
                                ncclResult_t *err)
{
    struct ncclComm *c = shim_comm(comm, func, 1, err);
    if (!c)
        return NULL;
    if (dtype == ncclFloat8e4m3 || dtype == ncclFloat8e5m2) {
        *err = shim_fail(ncclInvalidUsage, func,
                         "the float8 types (ncclFloat8e4m3, ncclFloat8e5m2) are not supported "
                         "by ringcc");
        return NULL;
    }
    shim_group_count_op();
    return c;
}

#define OP_COMM(c, comm, dtype, func)                                                              \
    ncclResult_t err_ = ncclSuccess;                                                               \
    struct ncclComm *c = op_comm(comm, dtype, func, &err_);                                        \
    if (!c)                                                                                        \
    return err_

/* A call that ringcc's stream form takes as it is (c names the wrapper). */
/* The NCCL datatype argument as ringcc's (the same numbers). */
#define DT ((rcc_datatype_t)datatype)
#define FORWARD(comm, dtype, func, call)                                                           \
    do {                                                                                           \
        OP_COMM(c, comm, dtype, func);                                                             \
        return shim_check((call), func, NULL);                                                     \
    } while (0)

/* A reduction: PreMulSum operators send a scaled copy, freed once the
 * operation has run: at once, or at the end of the caller's group. (Only
 * the host path stages, where a call outside a group returns when done.) */
#define REDUCING_CALL(c, func, op, dtype, sendbuff, nelems, stream, call)                          \
    do {                                                                                           \
        rcc_redop_t rop;                                                                           \
        void *staged = NULL;                                                                       \
        ncclResult_t perr =                                                                        \
            shim_premul_prepare(c, op, dtype, sendbuff, nelems, stream, &rop, &staged, func);      \
        if (perr != ncclSuccess)                                                                   \
            return perr;                                                                           \
        const void *src = staged ? staged : sendbuff;                                              \
        rcc_result_t res = (call);                                                                 \
        shim_group_free_later(staged);                                                             \
        return shim_check(res, func, NULL);                                                        \
    } while (0)

SHIM_API ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream)
{
    OP_COMM(c, comm, datatype, "ncclAllReduce");
    REDUCING_CALL(c, "ncclAllReduce", op, datatype, sendbuff, count, stream,
                  rcc_allreduce_stream(src, recvbuff, count, DT, rop, c->rcc, stream));
}
SHIM_ALIAS(ncclAllReduce);

SHIM_API ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, int root,
                                  ncclComm_t comm, cudaStream_t stream)
{
    OP_COMM(c, comm, datatype, "ncclReduce");
    /* In place on the root stays in place only without staging; a staged
     * send is a copy, so the result still lands in recvbuff. */
    REDUCING_CALL(c, "ncclReduce", op, datatype, sendbuff, count, stream,
                  rcc_reduce_stream(src, recvbuff, count, DT, rop, root, c->rcc, stream));
}
SHIM_ALIAS(ncclReduce);

SHIM_API ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream)
{
    OP_COMM(c, comm, datatype, "ncclReduceScatter");
    REDUCING_CALL(c, "ncclReduceScatter", op, datatype, sendbuff, recvcount * (size_t)c->nranks,
                  stream,
                  rcc_reduce_scatter_stream(src, recvbuff, recvcount, DT, rop, c->rcc, stream));
}
SHIM_ALIAS(ncclReduceScatter);

SHIM_API ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream)
{
    FORWARD(comm, datatype, "ncclBroadcast",
            rcc_broadcast_stream(sendbuff, recvbuff, count, DT, root, c->rcc, stream));
}
SHIM_ALIAS(ncclBroadcast);

/* The old in-place broadcast. */
SHIM_API ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(comm, datatype, "ncclBcast",
            rcc_broadcast_stream(buff, buff, count, DT, root, c->rcc, stream));
}
SHIM_ALIAS(ncclBcast);

SHIM_API ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                     ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(comm, datatype, "ncclAllGather",
            rcc_allgather_stream(sendbuff, recvbuff, sendcount, DT, c->rcc, stream));
}
SHIM_ALIAS(ncclAllGather);

SHIM_API ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(comm, datatype, "ncclAlltoAll",
            rcc_alltoall_stream(sendbuff, recvbuff, count, DT, c->rcc, stream));
}
SHIM_ALIAS(ncclAlltoAll);

SHIM_API ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                int peer, ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(comm, datatype, "ncclSend", rcc_send_stream(sendbuff, count, DT, peer, c->rcc, stream));
}
SHIM_ALIAS(ncclSend);

SHIM_API ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(comm, datatype, "ncclRecv", rcc_recv_stream(recvbuff, count, DT, peer, c->rcc, stream));
}
SHIM_ALIAS(ncclRecv);

/* ---- gather and scatter, as one group of point-to-point calls -------------------- */

/* Root exchanges block r of `blocks` with rank r, every other rank its one
 * block with root: gather receives the blocks (to_root = 1), scatter sends
 * them. Root's own block is a message to itself, left out when in place. */
static ncclResult_t rooted_p2p(struct ncclComm *c, int to_root, const void *sendbuff,
                               void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                               cudaStream_t stream, const char *func)
{
    rcc_datatype_t dt = (rcc_datatype_t)datatype;
    size_t block = count * rcc_datatype_size(dt);
    if (root < 0 || root >= c->nranks)
        return shim_fail(ncclInvalidArgument, func, "root %d is not in [0, %d)", root, c->nranks);
    if (block == 0 && count > 0)
        return shim_fail(ncclInvalidArgument, func, "datatype %d is not valid", (int)datatype);
    if (count == 0)
        return ncclSuccess;
    if ((to_root && !sendbuff) || (!to_root && !recvbuff) ||
        (c->rank == root && (to_root ? !recvbuff : !sendbuff)))
        return shim_fail(ncclInvalidArgument, func, "a buffer is NULL");
    rcc_group_start();
    rcc_result_t first = RCC_SUCCESS, res;
    if (c->rank != root) {
        res = to_root ? rcc_send_stream(sendbuff, count, dt, root, c->rcc, stream)
                      : rcc_recv_stream(recvbuff, count, dt, root, c->rcc, stream);
        first = res;
    } else {
        for (int r = 0; r < c->nranks; r++) {
            char *blocks = to_root ? (char *)recvbuff : (char *)(uintptr_t)sendbuff;
            char *mine = blocks + (size_t)r * block;
            const void *own = to_root ? sendbuff : recvbuff;
            if (r == root && own == mine)
                continue; /* in place */
            if (r == root) {
                res = rcc_send_stream(to_root ? sendbuff : mine, count, dt, r, c->rcc, stream);
                if (res == RCC_SUCCESS)
                    res = rcc_recv_stream(to_root ? mine : recvbuff, count, dt, r, c->rcc, stream);
            } else {
                res = to_root ? rcc_recv_stream(mine, count, dt, r, c->rcc, stream)
                              : rcc_send_stream(mine, count, dt, r, c->rcc, stream);
            }
            if (res != RCC_SUCCESS) {
                first = res;
                break;
            }
        }
    }
    /* A failed call leaves the group's earlier calls issued: the end
     * launches them, and reports the first failure either way. */
    char detail[512] = "";
    if (first != RCC_SUCCESS)
        strncpy(detail, rcc_last_error(NULL), sizeof detail - 1);
    res = rcc_group_end();
    if (first != RCC_SUCCESS)
        return shim_fail(shim_result(first), func, "%s", detail);
    return shim_check(res, func, NULL);
}

SHIM_API ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream)
{
    OP_COMM(c, comm, datatype, "ncclGather");
    return rooted_p2p(c, 1, sendbuff, recvbuff, count, datatype, root, stream, "ncclGather");
}
SHIM_ALIAS(ncclGather);

SHIM_API ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                   ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream)
{
    OP_COMM(c, comm, datatype, "ncclScatter");
    return rooted_p2p(c, 0, sendbuff, recvbuff, count, datatype, root, stream, "ncclScatter");
}
SHIM_ALIAS(ncclScatter);
