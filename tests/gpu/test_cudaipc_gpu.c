/*
 * The device ring over cudaipc on a real GPU: 2, 3 and 4 ranks as
 * processes sharing device 0 (CUDA IPC handles opened by other processes),
 * ring allreduce, reduce-scatter and allgather of device buffers on a
 * stream, every dtype, ops in turn, a small and a multi-fragment count,
 * against the naive reference (tests/mp/testdata.c), and the same on 4
 * ranks with the 3 MiB allreduces and allgathers written into the next
 * rank's output (windows, RCC_CUDAIPC_WINDOW_BYTES=1M); then 3 ranks where the
 * last is killed (SIGKILL) in the middle of a 256 MiB allreduce while its
 * neighbours map its slots: they must report RCC_ERR_PEER_LOST naming it,
 * within the timeout, and their streams must be released (no hang, no
 * crash). The same on the stand-in GPU runs in every build
 * (tests/mp/test_cudaipc.c).
 *
 * Plain C, no Check. Exit status 0, 1 (a failure), or 77 (no CUDA device:
 * skipped, the reason printed). CUDA is touched only in the forked ranks.
 */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../mp/mp.h"
#include "../mp/testdata.h"
#include "comm.h" /* the device ring's links, to see that it is used */
#include "cucheck.h"

static const rcc_datatype_t dtypes[] = {RCC_INT8,    RCC_UINT8,   RCC_INT32,   RCC_UINT32,
                                        RCC_INT64,   RCC_UINT64,  RCC_FLOAT16, RCC_FLOAT32,
                                        RCC_FLOAT64, RCC_BFLOAT16};

/* kind 0 allreduce, 1 reduce-scatter, 2 allgather; 0 when right. */
static int one_case(rcc_comm_t comm, cudaStream_t st, int rank, int n, int kind, size_t count,
                    rcc_datatype_t dt, rcc_redop_t op, unsigned seed)
{
    size_t es = rcc_datatype_size(dt), nn = (size_t)n;
    size_t in_elems = kind == 1 ? count * nn : count, out_elems = kind == 2 ? count * nn : count;
    char *in = malloc(in_elems * es), *want = malloc(out_elems * es), *got = malloc(out_elems * es);
    char *din, *dout;
    td_fill(in, 0, in_elems, seed, rank, dt, op);
    if (kind == 0)
        td_reference(want, 0, count, NULL, n, seed, dt, op);
    else if (kind == 1)
        td_reference(want, (size_t)rank * count, count, NULL, n, seed, dt, op);
    else
        for (int r = 0; r < n; r++)
            td_fill(want + (size_t)r * count * es, 0, count, seed, r, dt, op);
    CU(cudaMalloc((void **)&din, in_elems * es));
    CU(cudaMalloc((void **)&dout, out_elems * es));
    CU(cudaMemcpy(din, in, in_elems * es, cudaMemcpyHostToDevice));
    CU(cudaMemset(dout, TD_UNWRITTEN, out_elems * es));
    /* Both ran on the legacy stream, which `st` (non-blocking) does not
     * wait for: a memset may still be running when it returns. */
    CU(cudaDeviceSynchronize());
    rcc_result_t res = kind == 0   ? rcc_allreduce_stream(din, dout, count, dt, op, comm, st)
                       : kind == 1 ? rcc_reduce_scatter_stream(din, dout, count, dt, op, comm, st)
                                   : rcc_allgather_stream(din, dout, count, dt, comm, st);
    CU(cudaStreamSynchronize(st));
    CU(cudaMemcpy(got, dout, out_elems * es, cudaMemcpyDeviceToHost));
    char what[160];
    snprintf(what, sizeof what, "rank %d of %d: %s of %zu %s %s", rank, n,
             kind == 0   ? "allreduce"
             : kind == 1 ? "reduce_scatter"
                         : "allgather",
             count, rcc_datatype_name(dt), rcc_redop_name(op));
    rcc_result_t async = RCC_SUCCESS;
    rcc_comm_get_async_error(comm, &async);
    int bad = res != RCC_SUCCESS || async != RCC_SUCCESS;
    if (bad)
        fprintf(stderr, "%s: %s: %s\n", what, rcc_result_name(res != RCC_SUCCESS ? res : async),
                rcc_last_error(comm));
    else
        bad = td_compare(what, got, want, out_elems, dt);
    cudaFree(din);
    cudaFree(dout);
    free(in), free(want), free(got);
    return bad;
}

static int rank_collectives(int rank, int n, void *arg)
{
    setenv("RCC_ALGO", "ring", 1);
    /* arg "windows": the 3 MiB allreduces and allgathers write into the next
     * rank's output (mapped and unmapped per operation by the progress
     * thread, the kernels reading the address when they run), as those of
     * 16 MiB and more do by default; with a shorter timeout, so that a stall
     * (an IPC call that waits for the device while a stream waits for the
     * progress thread) fails fast. */
    int windows = arg && !strcmp(arg, "windows");
    if (windows)
        setenv("RCC_CUDAIPC_WINDOW_BYTES", "1M", 1);
    CU(cudaSetDevice(0));
    rcc_comm_t comm = mp_comm(windows ? 20000 : 60000);
    struct rcc_comm *c = comm;
    if (c->dsend_link.nconns != 1 || strcmp(c->dsend_link.tr->name, "cudaipc") != 0)
        MP_FAIL("rank %d: no device ring over cudaipc (RCC_DEBUG=INFO says why)", rank);
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int bad = 0;
    unsigned seed = 11;
    for (int kind = 0; kind < 3; kind++)
        for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
            rcc_redop_t op = (rcc_redop_t)((d + (size_t)kind) % RCC_NUM_OPS);
            bad |= one_case(comm, st, rank, n, kind, 1001, dtypes[d], op, seed++);
            bad |= one_case(comm, st, rank, n, kind, (3u << 20) / rcc_datatype_size(dtypes[d]) + 3,
                            dtypes[d], op, seed++);
        }
    cudaStreamDestroy(st);
    /* The 3 MiB ones wrote into the next rank's output (cudaMalloc'd: exported). */
    if (windows && c->direct_sends == 0)
        MP_FAIL("rank %d: no chunk was written straight into the next rank's output", rank);
    return td_finish(comm, bad);
}

static int rank_death(int rank, int n, void *arg)
{
    (void)arg;
    setenv("RCC_ALGO", "ring", 1);
    CU(cudaSetDevice(0));
    rcc_comm_t comm = mp_comm(30000);
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    size_t count = 64u << 20; /* 256 MiB of float32 */
    float *d;
    CU(cudaMalloc((void **)&d, count * sizeof *d));
    CU(cudaMemset(d, 0, count * sizeof *d));
    CU(cudaDeviceSynchronize()); /* the legacy stream; `st` does not wait for it */
    rcc_result_t res = rcc_allreduce_stream(d, d, 1000, RCC_FLOAT32, RCC_SUM, comm, st);
    CU(cudaStreamSynchronize(st));
    if (res != RCC_SUCCESS)
        MP_FAIL("rank %d: the first allreduce: %s", rank, rcc_last_error(comm));
    res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, st);
    if (rank == n - 1) {
        usleep(300);
        kill(getpid(), SIGKILL);
    }
    double t0 = td_now_s();
    cudaError_t e = cudaStreamSynchronize(st); /* released by the failure */
    rcc_result_t async = RCC_SUCCESS;
    rcc_comm_get_async_error(comm, &async);
    char dead[32];
    snprintf(dead, sizeof dead, "rank %d", n - 1);
    printf("rank %d: %.2f s after the call: stream %s; %s: %s\n", rank, td_now_s() - t0,
           cudaGetErrorString(e), rcc_result_name(async), rcc_last_error(comm));
    if (res != RCC_SUCCESS || async != RCC_ERR_PEER_LOST || !strstr(rcc_last_error(comm), dead))
        MP_FAIL("rank %d: rank %d's death was not reported as PEER_LOST naming it", rank, n - 1);
    rcc_comm_abort(comm);
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!cu_probe_device())
        return 77;
    int failed = 0;
    for (int n = 2; n <= 4; n++) {
        int rc = mp_run(n, rank_collectives, NULL, 300);
        printf("%s %d ranks on one GPU over cudaipc\n", rc == 0 ? "PASS" : "FAIL", n);
        failed |= rc != 0;
    }
    int rc = mp_run(4, rank_collectives, "windows", 300);
    printf("%s 4 ranks on one GPU over cudaipc, windows from 1 MiB\n", rc == 0 ? "PASS" : "FAIL");
    failed |= rc != 0;
    int st[3];
    mp_run_status(3, rank_death, NULL, 120, st);
    int ok = st[0] == 0 && st[1] == 0 && st[2] == 128 + SIGKILL;
    printf("%s a rank killed while mapped (statuses %d %d %d)\n", ok ? "PASS" : "FAIL", st[0],
           st[1], st[2]);
    return failed || !ok;
}
