/*
 * The NCCL shim on CUDA streams, the way PyTorch calls it, without a GPU: ringcc's stand-in
 * device (tests/mp/fakedev.c) gives "device memory" and streams that are threads, and the ranks
 * call NCCL's API with those buffers and streams, wait for the stream, and check the results
 * against tests/mp/testdata.c's reference. Covers every collective, gather and scatter (a group
 * of stream sends and receives in the shim), a group of fused allreduces with a ring shift,
 * mixed host and device buffers, and PreMulSum's refusal on a stream. The shim and ringcc are
 * linked in statically here (the stand-in plugs into ringcc's internals).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakedev.h"
#include "shimtest.h"
#include "testdata.h"

#define TIMEOUT_S 120

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, nranks;
} ctx_t;

static size_t esize(ncclDataType_t dt) { return rcc_datatype_size((rcc_datatype_t)dt); }

/* "Device memory" holding rank r's input of operation `seed`. */
static char *dev_input(size_t count, unsigned seed, int r, ncclDataType_t dt, ncclRedOp_t op)
{
    char *p = fakedev_malloc(count * esize(dt) + 1);
    td_fill(p, 0, count, seed, r, (rcc_datatype_t)dt, (rcc_redop_t)op);
    return p;
}

/* Waits for the stream, then compares; frees got (device) and want (host). */
static int settle(const ctx_t *c, const char *what, char *got, char *want, size_t count,
                  ncclDataType_t dt)
{
    if (fakedev_stream_sync(c->stream, 60))
        MP_FAIL("%s: the stream did not get past the operation in 60 s", what);
    int bad = td_compare(what, got, want, count, (rcc_datatype_t)dt);
    fakedev_free(got);
    free(want);
    return bad;
}

static char *reference(size_t start, size_t count, const ctx_t *c, unsigned seed, ncclDataType_t dt,
                       ncclRedOp_t op)
{
    char *want = malloc(count * esize(dt) + 1);
    td_reference(want, start, count, NULL, c->nranks, seed, (rcc_datatype_t)dt, (rcc_redop_t)op);
    return want;
}

/* Rank r's inputs one after another, as allgather or gather deliver them. */
static char *blocks_of_all(size_t count, const ctx_t *c, unsigned seed, ncclDataType_t dt)
{
    char *want = malloc(count * (size_t)c->nranks * esize(dt) + 1);
    for (int r = 0; r < c->nranks; r++)
        td_fill(want + (size_t)r * count * esize(dt), 0, count, seed, r, (rcc_datatype_t)dt,
                RCC_SUM);
    return want;
}

static int check_reductions(const ctx_t *c)
{
    static const struct {
        ncclDataType_t dt;
        ncclRedOp_t op;
        size_t count;
    } cases[] = {{ncclFloat32, ncclSum, 1001},   {ncclBfloat16, ncclAvg, 257},
                 {ncclInt64, ncclMax, 99},       {ncclUint8, ncclProd, 333},
                 {ncclFloat64, ncclMin, 5},      {ncclFloat16, ncclSum, 4097},
                 {ncclFloat32, ncclSum, 300001}, {ncclInt32, ncclSum, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ncclDataType_t dt = cases[k].dt;
        ncclRedOp_t op = cases[k].op;
        size_t count = cases[k].count;
        unsigned seed = 10 + (unsigned)k;
        char *send = dev_input(count, seed, c->rank, dt, op);
        char *recv = k % 2 ? send : fakedev_malloc(count * esize(dt) + 1); /* odd: in place */
        CHECK_NCCL(ncclAllReduce(send, recv, count, dt, op, c->comm, c->stream));
        char what[80];
        snprintf(what, sizeof what, "allreduce case %zu on a stream", k);
        if (settle(c, what, recv, reference(0, count, c, seed, dt, op), count, dt))
            return 1;
        if (recv != send)
            fakedev_free(send);
    }
    size_t rc = 1000, n = (size_t)c->nranks;
    char *send = dev_input(rc * n, 40, c->rank, ncclFloat32, ncclSum);
    char *recv = fakedev_malloc(rc * 4);
    CHECK_NCCL(ncclReduceScatter(send, recv, rc, ncclFloat32, ncclSum, c->comm, c->stream));
    if (settle(c, "reduce_scatter on a stream", recv,
               reference(rc * (size_t)c->rank, rc, c, 40, ncclFloat32, ncclSum), rc, ncclFloat32))
        return 1;
    fakedev_free(send);
    int root = c->nranks - 1;
    send = dev_input(777, 41, c->rank, ncclInt32, ncclSum);
    recv = fakedev_malloc(777 * 4);
    CHECK_NCCL(ncclReduce(send, recv, 777, ncclInt32, ncclSum, root, c->comm, c->stream));
    if (c->rank == root) {
        if (settle(c, "reduce on a stream", recv, reference(0, 777, c, 41, ncclInt32, ncclSum), 777,
                   ncclInt32))
            return 1;
    } else if (fakedev_stream_sync(c->stream, 60) == 0) {
        fakedev_free(recv);
    }
    fakedev_free(send);
    return 0;
}

static int check_movement(const ctx_t *c)
{
    size_t n = (size_t)c->nranks, count = 777;
    char *send = dev_input(count, 50, c->rank, ncclInt32, ncclSum);
    char *recv = fakedev_malloc(count * n * 4);
    CHECK_NCCL(ncclAllGather(send, recv, count, ncclInt32, c->comm, c->stream));
    if (settle(c, "allgather on a stream", recv, blocks_of_all(count, c, 50, ncclInt32), count * n,
               ncclInt32))
        return 1;
    recv = fakedev_malloc(count * 4);
    CHECK_NCCL(ncclBroadcast(send, recv, count, ncclInt32, c->nranks - 1, c->comm, c->stream));
    char *want = malloc(count * 4);
    td_fill(want, 0, count, 50, c->nranks - 1, RCC_INT32, RCC_SUM);
    if (settle(c, "broadcast on a stream", recv, want, count, ncclInt32))
        return 1;
    CHECK_NCCL(ncclBcast(send, count, ncclInt32, 0, c->comm, c->stream));
    want = malloc(count * 4);
    td_fill(want, 0, count, 50, 0, RCC_INT32, RCC_SUM);
    if (settle(c, "bcast on a stream", send, want, count, ncclInt32))
        return 1;
    /* alltoall: block p of rank r's input goes to rank p as block r */
    count = 100;
    send = dev_input(count * n, 51, c->rank, ncclFloat32, ncclSum);
    recv = fakedev_malloc(count * n * 4);
    CHECK_NCCL(ncclAlltoAll(send, recv, count, ncclFloat32, c->comm, c->stream));
    want = malloc(count * n * 4);
    for (int r = 0; r < c->nranks; r++)
        td_fill(want + (size_t)r * count * 4, (size_t)c->rank * count, count, 51, r, RCC_FLOAT32,
                RCC_SUM);
    if (settle(c, "alltoall on a stream", recv, want, count * n, ncclFloat32))
        return 1;
    fakedev_free(send);
    return 0;
}

/* Gather to a middle root, then scatter block r + 1 back to rank r. */
static int check_gather_scatter(const ctx_t *c)
{
    size_t n = (size_t)c->nranks, count = 65;
    int root = c->nranks / 2;
    char *mine = dev_input(count, 60, c->rank, ncclFloat64, ncclSum);
    char *all = fakedev_malloc(count * n * 8);
    CHECK_NCCL(ncclGather(mine, all, count, ncclFloat64, root, c->comm, c->stream));
    if (fakedev_stream_sync(c->stream, 60))
        MP_FAIL("gather: the stream is stuck");
    char *want = blocks_of_all(count, c, 60, ncclFloat64);
    if (c->rank == root && td_compare("gather on a stream", all, want, count * n, RCC_FLOAT64))
        return 1;
    if (c->rank == root) {
        memcpy(all, want + count * 8, (n - 1) * count * 8);
        memcpy(all + (n - 1) * count * 8, want, count * 8);
    }
    free(want);
    CHECK_NCCL(ncclScatter(all, mine, count, ncclFloat64, root, c->comm, c->stream));
    want = malloc(count * 8);
    td_fill(want, 0, count, 60, (c->rank + 1) % c->nranks, RCC_FLOAT64, RCC_SUM);
    if (settle(c, "scatter on a stream", mine, want, count, ncclFloat64))
        return 1;
    fakedev_free(all);
    return 0;
}

/* One group: three allreduces (fused) and a ring shift by send/recv, one of
 * them from a host buffer into device memory. */
static int check_group(const ctx_t *c)
{
    enum { K = 3 };
    size_t counts[K] = {17, 1, 2049};
    char *bufs[K];
    int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
    size_t p2p = 301;
    char *out = malloc(p2p * 8); /* host */
    td_fill(out, 0, p2p, 70, c->rank, RCC_FLOAT64, RCC_SUM);
    char *in = fakedev_malloc(p2p * 8);
    CHECK_NCCL(ncclGroupStart());
    for (int k = 0; k < K; k++) {
        bufs[k] = dev_input(counts[k], 71 + (unsigned)k, c->rank, ncclFloat32, ncclSum);
        CHECK_NCCL(
            ncclAllReduce(bufs[k], bufs[k], counts[k], ncclFloat32, ncclSum, c->comm, c->stream));
    }
    CHECK_NCCL(ncclSend(out, p2p, ncclFloat64, next, c->comm, c->stream));
    CHECK_NCCL(ncclRecv(in, p2p, ncclFloat64, prev, c->comm, c->stream));
    CHECK_NCCL(ncclGroupEnd());
    for (int k = 0; k < K; k++)
        if (settle(c, "grouped allreduce on a stream", bufs[k],
                   reference(0, counts[k], c, 71 + (unsigned)k, ncclFloat32, ncclSum), counts[k],
                   ncclFloat32))
            return 1;
    char *want = malloc(p2p * 8);
    td_fill(want, 0, p2p, 70, prev, RCC_FLOAT64, RCC_SUM);
    free(out);
    return settle(c, "grouped send/recv on a stream", in, want, p2p, ncclFloat64);
}

static int rank_stream(int rank, int nranks, void *arg)
{
    (void)arg;
    fakedev_install();
    if (!rcc_cuda_available()) /* else the calls would take the host path */
        MP_FAIL("the stand-in GPU is not in use: %s", rcc_last_error(NULL));
    ctx_t c = {.rank = rank, .nranks = nranks};
    if (make_comm(rank, nranks, 0, &c.comm))
        return 1;
    c.stream = (cudaStream_t)fakedev_stream_create();
    if (check_reductions(&c) || check_movement(&c) || check_gather_scatter(&c) || check_group(&c))
        return 1;
    /* PreMulSum cannot scale device data: refused, and nothing is queued */
    double scalar = 2, *x = fakedev_malloc(8 * sizeof *x);
    ncclRedOp_t op;
    CHECK_NCCL(
        ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat64, ncclScalarHostImmediate, c.comm));
    EXPECT_FAIL(ncclAllReduce(x, x, 8, ncclFloat64, op, c.comm, c.stream), ncclInvalidUsage,
                "host buffers");
    CHECK_NCCL(ncclRedOpDestroy(op, c.comm));
    fakedev_free(x);
    /* Healthy, asked before the last collective (after it, a rank that ran
     * ahead may have destroyed its communicator, which a probe sees as a
     * peer gone). */
    if (fakedev_stream_sync(c.stream, 60))
        MP_FAIL("the stream is stuck at the end");
    ncclResult_t state = ncclInternalError;
    CHECK_NCCL(ncclCommGetAsyncError(c.comm, &state));
    if (state != ncclSuccess)
        MP_FAIL("after the stream operations the communicator reports %d", (int)state);
    int32_t *one = fakedev_malloc(sizeof *one);
    *one = 1;
    CHECK_NCCL(ncclAllReduce(one, one, 1, ncclInt32, ncclSum, c.comm, c.stream));
    if (fakedev_stream_sync(c.stream, 60) || *one != nranks)
        MP_FAIL("the last allreduce: %d", (int)*one);
    fakedev_free(one);
    CHECK_NCCL(ncclCommFinalize(c.comm));
    CHECK_NCCL(ncclCommDestroy(c.comm));
    fakedev_stream_destroy(c.stream);
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    setenv("RCC_TIMEOUT", "30", 0);
    int failed = 0;
    for (int n = 2; n <= 3; n++) {
        int bad = mp_run(n, rank_stream, NULL, TIMEOUT_S) != 0;
        printf("%s: the shim on streams of the stand-in GPU, %d ranks\n", bad ? "FAIL" : "ok", n);
        failed |= bad;
    }
    return failed ? 1 : 0;
}
