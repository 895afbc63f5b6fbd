/*
 * The NCCL shim on a real GPU, without PyTorch: 2 and 4 ranks (processes sharing device 0, which
 * NCCL refuses) call NCCL's API on cudaMalloc'd buffers and their own cudaStream_t, as a program
 * built against NCCL would, and check the results after one cudaStreamSynchronize: allreduce
 * (several dtypes and ops, in place and not), reduce-scatter, allgather, broadcast, reduce,
 * alltoall, gather and scatter, and a group of fused allreduces with a ring shift by send/recv.
 * The shim and ringcc are linked in statically; tests/shim/run-torch.sh covers the preloaded
 * library under PyTorch.
 *
 * Plain C, no Check. Exit status 0, 1 (a failure) or 77 (no CUDA device: skipped, the reason
 * printed). CUDA is touched only in the ranks, which are forked before it is.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mp/testdata.h"
#include "../shim/shimtest.h"
#include "cucheck.h"

#define SKIP 77

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, n;
} gctx_t;

/* One operation: the input (host) copied to the device, the call, the
 * output copied back, the stream synchronised, the output compared. */
typedef ncclResult_t (*call_fn)(const gctx_t *g, const void *send, void *recv, size_t count,
                                ncclDataType_t dt, ncclRedOp_t op);

static ncclResult_t do_allreduce(const gctx_t *g, const void *s, void *r, size_t count,
                                 ncclDataType_t dt, ncclRedOp_t op)
{
    return ncclAllReduce(s, r, count, dt, op, g->comm, g->stream);
}

static ncclResult_t do_reduce_scatter(const gctx_t *g, const void *s, void *r, size_t count,
                                      ncclDataType_t dt, ncclRedOp_t op)
{
    return ncclReduceScatter(s, r, count, dt, op, g->comm, g->stream);
}

static ncclResult_t do_reduce(const gctx_t *g, const void *s, void *r, size_t count,
                              ncclDataType_t dt, ncclRedOp_t op)
{
    return ncclReduce(s, r, count, dt, op, g->n - 1, g->comm, g->stream);
}

static ncclResult_t do_allgather(const gctx_t *g, const void *s, void *r, size_t count,
                                 ncclDataType_t dt, ncclRedOp_t op)
{
    (void)op;
    return ncclAllGather(s, r, count, dt, g->comm, g->stream);
}

/* Runs `fn` with `in_elems` of input and `out_elems` of output; `want` is
 * the expected output (host), or NULL when this rank has none to check. */
static int run_op(const gctx_t *g, const char *what, call_fn fn, const char *in, size_t in_elems,
                  size_t out_elems, const char *want, size_t count, ncclDataType_t dt,
                  ncclRedOp_t op, int in_place)
{
    size_t es = rcc_datatype_size((rcc_datatype_t)dt);
    size_t big = (in_elems > out_elems ? in_elems : out_elems) * es + 1;
    void *dsend = NULL, *drecv = NULL;
    CU(cudaMalloc(&dsend, big));
    drecv = dsend;
    if (!in_place)
        CU(cudaMalloc(&drecv, big));
    char *got = malloc(out_elems * es + 1);
    CU(cudaMemcpyAsync(dsend, in, in_elems * es, cudaMemcpyHostToDevice, g->stream));
    CHECK_NCCL(fn(g, dsend, drecv, count, dt, op));
    CU(cudaMemcpyAsync(got, drecv, out_elems * es, cudaMemcpyDeviceToHost, g->stream));
    CU(cudaStreamSynchronize(g->stream));
    int bad = want && td_compare(what, got, want, out_elems, (rcc_datatype_t)dt);
    free(got);
    cudaFree(dsend);
    if (!in_place)
        cudaFree(drecv);
    return bad;
}

static int check_reductions(const gctx_t *g)
{
    static const struct {
        ncclDataType_t dt;
        ncclRedOp_t op;
        size_t count;
    } cases[] = {{ncclFloat32, ncclSum, 1000003}, {ncclFloat16, ncclSum, 4097},
                 {ncclBfloat16, ncclAvg, 333},    {ncclInt64, ncclMax, 1001},
                 {ncclFloat64, ncclProd, 17},     {ncclUint8, ncclMin, 65537}};
    size_t n = (size_t)g->n;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ncclDataType_t dt = cases[k].dt;
        ncclRedOp_t op = cases[k].op;
        size_t count = cases[k].count, es = rcc_datatype_size((rcc_datatype_t)dt);
        unsigned seed = 100 + (unsigned)k;
        char *in = malloc(count * n * es), *want = malloc(count * n * es);
        td_fill(in, 0, count * n, seed, g->rank, (rcc_datatype_t)dt, (rcc_redop_t)op);
        td_reference(want, 0, count * n, NULL, g->n, seed, (rcc_datatype_t)dt, (rcc_redop_t)op);
        char what[80];
        snprintf(what, sizeof what, "allreduce case %zu", k);
        if (run_op(g, what, do_allreduce, in, count, count, want, count, dt, op, (int)(k % 2)))
            return 1;
        snprintf(what, sizeof what, "reduce_scatter case %zu", k);
        if (run_op(g, what, do_reduce_scatter, in, count * n, count,
                   want + (size_t)g->rank * count * es, count, dt, op, 0))
            return 1;
        snprintf(what, sizeof what, "reduce case %zu", k);
        if (run_op(g, what, do_reduce, in, count, count, g->rank == g->n - 1 ? want : NULL, count,
                   dt, op, 0))
            return 1;
        free(in);
        free(want);
    }
    return 0;
}

/* allgather; the rest as one group per rank: gather and scatter at rank 0,
 * broadcast from the last rank, alltoall, and fused allreduces with a ring
 * shift by send/recv, all on device memory. */
static int check_movement(const gctx_t *g)
{
    size_t n = (size_t)g->n, count = 12345;
    float *in = malloc(count * n * sizeof *in), *want = malloc(count * n * sizeof *want);
    td_fill(in, 0, count, 200, g->rank, RCC_FLOAT32, RCC_SUM);
    for (int r = 0; r < g->n; r++)
        td_fill(want + (size_t)r * count, 0, count, 200, r, RCC_FLOAT32, RCC_SUM);
    if (run_op(g, "allgather", do_allgather, (char *)in, count, count * n, (char *)want, count,
               ncclFloat32, ncclSum, 0))
        return 1;
    float *d_all, *d_mine, *d_ring_in, *d_sum, *d_a2a_in, *d_a2a_out;
    CU(cudaMalloc((void **)&d_all, count * n * sizeof(float)));
    CU(cudaMalloc((void **)&d_mine, count * sizeof(float)));
    CU(cudaMalloc((void **)&d_ring_in, count * sizeof(float)));
    CU(cudaMalloc((void **)&d_sum, count * sizeof(float)));
    CU(cudaMalloc((void **)&d_a2a_in, count * n * sizeof(float)));
    CU(cudaMalloc((void **)&d_a2a_out, count * n * sizeof(float)));
    CU(cudaMemcpyAsync(d_mine, in, count * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    CU(cudaMemcpyAsync(d_sum, in, count * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    CU(cudaMemcpyAsync(d_a2a_in, want, count * n * sizeof(float), cudaMemcpyHostToDevice,
                       g->stream));
    int next = (g->rank + 1) % g->n, prev = (g->rank + g->n - 1) % g->n;
    CHECK_NCCL(ncclGather(d_mine, d_all, count, ncclFloat32, 0, g->comm, g->stream));
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclAllReduce(d_sum, d_sum, count, ncclFloat32, ncclMax, g->comm, g->stream));
    CHECK_NCCL(ncclSend(d_mine, count, ncclFloat32, next, g->comm, g->stream));
    CHECK_NCCL(ncclRecv(d_ring_in, count, ncclFloat32, prev, g->comm, g->stream));
    CHECK_NCCL(ncclAlltoAll(d_a2a_in, d_a2a_out, count, ncclFloat32, g->comm, g->stream));
    CHECK_NCCL(ncclGroupEnd());
    float *got = malloc(count * n * sizeof *got);
    CU(cudaStreamSynchronize(g->stream));
    CU(cudaMemcpy(got, d_sum, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++) {
        float max = want[i];
        for (size_t r = 1; r < n; r++)
            max = want[r * count + i] > max ? want[r * count + i] : max;
        if (got[i] != max)
            MP_FAIL("grouped allreduce max [%zu]: %g, want %g", i, (double)got[i], (double)max);
    }
    CU(cudaMemcpy(got, d_ring_in, count * sizeof(float), cudaMemcpyDeviceToHost));
    if (td_compare("grouped recv", (char *)got, (char *)(want + (size_t)prev * count), count,
                   RCC_FLOAT32))
        return 1;
    /* every rank sent the same blocks (want), so block r of the output is
     * block `rank` of want */
    CU(cudaMemcpy(got, d_a2a_out, count * n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < g->n; r++)
        if (td_compare("grouped alltoall", (char *)(got + (size_t)r * count),
                       (char *)(want + (size_t)g->rank * count), count, RCC_FLOAT32))
            return 1;
    if (g->rank == 0) {
        CU(cudaMemcpy(got, d_all, count * n * sizeof(float), cudaMemcpyDeviceToHost));
        if (td_compare("gather", (char *)got, (char *)want, count * n, RCC_FLOAT32))
            return 1;
    }
    /* scatter back from rank 0 (d_all holds every rank's block there) and
     * broadcast from the last rank, in place */
    CHECK_NCCL(ncclScatter(d_all, d_ring_in, count, ncclFloat32, 0, g->comm, g->stream));
    CHECK_NCCL(ncclBcast(d_mine, count, ncclFloat32, g->n - 1, g->comm, g->stream));
    CU(cudaStreamSynchronize(g->stream));
    CU(cudaMemcpy(got, d_ring_in, count * sizeof(float), cudaMemcpyDeviceToHost));
    if (td_compare("scatter", (char *)got, (char *)(want + (size_t)g->rank * count), count,
                   RCC_FLOAT32))
        return 1;
    CU(cudaMemcpy(got, d_mine, count * sizeof(float), cudaMemcpyDeviceToHost));
    if (td_compare("bcast", (char *)got, (char *)(want + (n - 1) * count), count, RCC_FLOAT32))
        return 1;
    cudaFree(d_all), cudaFree(d_mine), cudaFree(d_ring_in), cudaFree(d_sum);
    cudaFree(d_a2a_in), cudaFree(d_a2a_out);
    free(in), free(want), free(got);
    return 0;
}

static int rank_main(int rank, int nranks, void *arg)
{
    (void)arg;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        if (rank == 0)
            printf("SKIP: no CUDA device (%s)\n", cudaGetErrorString(cudaGetLastError()));
        return SKIP;
    }
    CU(cudaSetDevice(0));
    gctx_t g = {.rank = rank, .n = nranks};
    CU(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    if (make_comm(rank, nranks, 0, &g.comm) || check_reductions(&g) || check_movement(&g))
        return 1;
    ncclResult_t state = ncclInternalError;
    CHECK_NCCL(ncclCommGetAsyncError(g.comm, &state));
    if (state != ncclSuccess)
        MP_FAIL("the communicator reports %d", (int)state);
    CHECK_NCCL(ncclCommFinalize(g.comm));
    CHECK_NCCL(ncclCommDestroy(g.comm));
    cudaStreamDestroy(g.stream);
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    setenv("RCC_TIMEOUT", "60", 0);
    int failed = 0;
    for (int n = 2; n <= 4; n += 2) {
        int status[4];
        mp_run_status(n, rank_main, NULL, 300, status);
        int skipped = 1, bad = 0;
        for (int r = 0; r < n; r++) {
            skipped &= status[r] == SKIP;
            bad |= status[r] != 0;
        }
        if (skipped)
            return SKIP;
        printf("%s: the shim on GPU 0 with %d ranks\n", bad ? "FAIL" : "ok", n);
        failed |= bad;
    }
    return failed ? 1 : 0;
}
