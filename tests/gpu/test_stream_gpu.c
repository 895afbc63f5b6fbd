/*
 * The stream forms (rcc_<name>_stream) on a real GPU, with 1-4 ranks as
 * processes sharing device 0 (which NCCL refuses): device buffers from
 * cudaMalloc, and on each rank's own stream a host function that holds the
 * stream until the call has returned, then the input copied in, the call,
 * the output copied out, and a single cudaStreamSynchronize at the end.
 * Right results prove the ordering both ways; a call that waited for the
 * stream would hold it past the gate's 10 s and is reported. Every
 * collective, several dtypes and ops, odd counts, in place and not, and
 * send/recv in a group. Then a failure (the peers leave while rank 0's
 * call waits behind a gate) must release the stream, over the device ring
 * and over TCP. The same test on a stand-in GPU runs in every build
 * (tests/mp/test_stream.c).
 *
 * Plain C, no Check. Exit status 0, 1 (a failure), or 77 (no CUDA device:
 * skipped, the reason printed). CUDA is touched only in the ranks (forked
 * first: a process must not fork with a CUDA context), and the device probe
 * runs in a child for the same reason.
 */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../mp/mp.h"
#include "../mp/streamcase.h"
#include "../mp/testdata.h"
#include "cucheck.h"

/* Holds the stream until the test opens the gate (at most 10 s). */
typedef struct {
    atomic_int open, gave_up;
} gate_t;

static void CUDART_CB gate_hold(void *arg)
{
    gate_t *g = arg;
    for (int i = 0; !atomic_load(&g->open); i++) {
        if (i == 10000) {
            atomic_store(&g->gave_up, 1);
            return;
        }
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
}

static int gcase_run(const scase_t *c, rcc_comm_t comm, cudaStream_t st, int rank, int n)
{
    size_t es = rcc_datatype_size(c->dt), send_elems, recv_elems, big;
    scase_sizes(c, n, &send_elems, &recv_elems, &big);
    /* Pinned: an asynchronous copy from pageable memory would wait for the
     * gate on the calling thread. */
    char *in, *got, *want = malloc(recv_elems * es);
    CU(cudaMallocHost((void **)&in, send_elems * es));
    CU(cudaMallocHost((void **)&got, recv_elems * es));
    scase_expect(c, rank, n, in, want);
    char *area = NULL, *area2 = NULL, *sendbuf, *recvbuf;
    CU(cudaMalloc((void **)&area, big));
    if (!c->inplace)
        CU(cudaMalloc((void **)&area2, big));
    scase_layout(c, rank, area, area2, &sendbuf, &recvbuf);
    CU(cudaMemset(recvbuf, TD_UNWRITTEN, recv_elems * es));
    CU(cudaDeviceSynchronize()); /* set-up only; the case itself synchronises once */
    gate_t gate = {0, 0};
    CU(cudaLaunchHostFunc(st, gate_hold, &gate));
    CU(cudaMemcpyAsync(sendbuf, in, send_elems * es, cudaMemcpyHostToDevice, st));
    rcc_result_t res = scase_call(c, sendbuf, recvbuf, comm, st);
    atomic_store(&gate.open, 1);
    CU(cudaMemcpyAsync(got, recvbuf, recv_elems * es, cudaMemcpyDeviceToHost, st));
    CU(cudaStreamSynchronize(st));
    char what[200];
    scase_text(c, rank, n, what, sizeof what);
    int bad = 0;
    rcc_result_t async = RCC_SUCCESS;
    if (res != RCC_SUCCESS) {
        fprintf(stderr, "%s: %s: %s\n", what, rcc_result_name(res), rcc_last_error(comm));
        bad = 1;
    } else if (atomic_load(&gate.gave_up)) {
        fprintf(stderr, "%s: the call waited for the stream's earlier work\n", what);
        bad = 1;
    } else if (rcc_comm_get_async_error(comm, &async) != RCC_SUCCESS || async != RCC_SUCCESS) {
        fprintf(stderr, "%s: %s: %s\n", what, rcc_result_name(async), rcc_last_error(comm));
        bad = 1;
    } else if (scase_has_result(c, rank)) {
        bad = td_compare(what, got, want, recv_elems, c->dt);
    }
    cudaFree(area);
    cudaFree(area2);
    cudaFreeHost(in);
    cudaFreeHost(got);
    free(want);
    return bad;
}

static const rcc_datatype_t g_dtypes[] = {RCC_FLOAT32, RCC_FLOAT16, RCC_BFLOAT16, RCC_INT32,
                                          RCC_FLOAT64};
static const size_t g_counts[] = {1, 1001, (1u << 20) + 3};

static int rank_main(int rank, int n, void *arg)
{
    (void)arg;
    CU(cudaSetDevice(0));
    if (!rcc_cuda_available())
        MP_FAIL("rank %d: rcc_cuda_available says no: %s", rank, rcc_last_error(NULL));
    rcc_comm_t comm = mp_comm(60000);
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int bad = 0;
    unsigned seed = 1;
    for (int kind = 0; kind < K_NKINDS; kind++)
        for (size_t d = 0; d < sizeof g_dtypes / sizeof *g_dtypes; d++)
            for (size_t ci = 0; ci < sizeof g_counts / sizeof *g_counts; ci++) {
                scase_t c = {.kind = kind,
                             .device = 1,
                             .dt = g_dtypes[d],
                             .op = (rcc_redop_t)((d + ci) % RCC_NUM_OPS),
                             .count = g_counts[ci],
                             .inplace = (int)((d + ci + (size_t)kind) % 2),
                             .root = (int)(seed % (unsigned)n),
                             .seed = seed++};
                bad |= gcase_run(&c, comm, st, rank, n);
            }
    /* send/recv around the ring in a group, on the stream. */
    const size_t cnt = 12345;
    int32_t *hin, *hout, *dsend, *drecv;
    CU(cudaMallocHost((void **)&hin, cnt * 4));
    CU(cudaMallocHost((void **)&hout, cnt * 4));
    CU(cudaMalloc((void **)&dsend, cnt * 4));
    CU(cudaMalloc((void **)&drecv, cnt * 4));
    for (size_t i = 0; i < cnt; i++)
        hin[i] = rank * 1000000 + (int32_t)i;
    CU(cudaMemcpyAsync(dsend, hin, cnt * 4, cudaMemcpyHostToDevice, st));
    rcc_group_start();
    rcc_send_stream(dsend, cnt, RCC_INT32, (rank + 1) % n, comm, st);
    rcc_recv_stream(drecv, cnt, RCC_INT32, (rank + n - 1) % n, comm, st);
    rcc_result_t res = rcc_group_end();
    CU(cudaMemcpyAsync(hout, drecv, cnt * 4, cudaMemcpyDeviceToHost, st));
    CU(cudaStreamSynchronize(st));
    int from = (rank + n - 1) % n;
    for (size_t i = 0; i < cnt && res == RCC_SUCCESS; i++)
        if (hout[i] != from * 1000000 + (int32_t)i) {
            fprintf(stderr, "rank %d: send/recv element %zu is %d\n", rank, i, (int)hout[i]);
            bad = 1;
            break;
        }
    if (res != RCC_SUCCESS)
        MP_FAIL("rank %d: send/recv group: %s: %s", rank, rcc_result_name(res),
                rcc_last_error(NULL));
    /* A stream capturing a CUDA graph is refused at once (each call's flags carry its own
     * ticket, which a graph would replay), and nothing is left queued on it. */
    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    res = rcc_allreduce_stream(dsend, dsend, cnt, RCC_INT32, RCC_SUM, comm, st);
    cudaGraph_t graph = NULL;
    CU(cudaStreamEndCapture(st, &graph));
    if (res != RCC_ERR_UNSUPPORTED)
        MP_FAIL("rank %d: an allreduce on a capturing stream gave %s: %s", rank,
                rcc_result_name(res), rcc_last_error(NULL));
    if (graph)
        cudaGraphDestroy(graph);
    res = rcc_barrier(comm); /* nobody leaves before all have checked their health */
    if (res != RCC_SUCCESS)
        MP_FAIL("rank %d: barrier: %s", rank, rcc_result_name(res));
    cudaStreamDestroy(st);
    return td_finish(comm, bad);
}

/* Whether the stream's work has all run within `limit_s` seconds (polled:
 * cudaStreamSynchronize would wait forever for a wait nobody releases). */
static int stream_drains(cudaStream_t st, double limit_s)
{
    double t0 = td_now_s();
    cudaError_t e;
    while ((e = cudaStreamQuery(st)) == cudaErrorNotReady && td_now_s() - t0 < limit_s)
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    return e == cudaSuccess;
}

/* A failure releases the stream: rank 0 queues, behind a gate, a device
 * allreduce large enough to go chunk by chunk (its waits queued at the
 * call) that the other ranks never call: they destroy their communicators.
 * Its stream must get past the operation once the gate opens, the
 * communicator must report the failure, and a later call on it must not
 * hold the stream either; then the stream takes new work. Over the device
 * ring (cudaipc: the waits are on its counters, which a failure must let
 * pass) or, with arg, over TCP through pinned slots (flags the progress
 * thread stores). The real CUDA backend's failure path, which the
 * stand-in GPU's test (tests/mp/test_stream.c) does not reach. */
static int rank_failure(int rank, int n, void *arg)
{
    if (arg)
        setenv("RCC_TRANSPORT", "tcp", 1);
    CU(cudaSetDevice(0));
    rcc_comm_t comm = mp_comm(3000);
    if (rank != 0)
        return td_finish(comm, 0);
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const size_t count = 600001;
    float *d, *h;
    CU(cudaMalloc((void **)&d, count * sizeof(float)));
    CU(cudaMallocHost((void **)&h, count * sizeof(float)));
    gate_t gate = {0, 0};
    CU(cudaLaunchHostFunc(st, gate_hold, &gate));
    double t0 = td_now_s();
    rcc_result_t res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, st);
    double call_s = td_now_s() - t0;
    atomic_store(&gate.open, 1);
    if (res != RCC_SUCCESS)
        MP_FAIL("%d ranks: the call failed: %s: %s", n, rcc_result_name(res), rcc_last_error(comm));
    if (call_s > 2.0 || atomic_load(&gate.gave_up))
        MP_FAIL("%d ranks: the call took %.2f s: it waited for its stream", n, call_s);
    if (!stream_drains(st, 20))
        MP_FAIL("%d ranks: the stream was left waiting for a failed operation", n);
    rcc_result_t async = RCC_SUCCESS;
    while (async == RCC_SUCCESS && td_now_s() - t0 < 20) {
        rcc_comm_get_async_error(comm, &async);
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    if (async == RCC_SUCCESS)
        MP_FAIL("%d ranks: no failure reported within 20 s", n);
    printf("rank 0 of %d (%s): stream released, %.2f s: %s: %s\n", n, arg ? "tcp" : "default",
           td_now_s() - t0, rcc_result_name(async), rcc_last_error(comm));
    res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, st);
    if (res == RCC_SUCCESS)
        MP_FAIL("%d ranks: a call on the failed communicator was taken", n);
    if (!stream_drains(st, 20))
        MP_FAIL("%d ranks: a call on the failed communicator left its stream waiting", n);
    /* The stream goes on as before. */
    for (size_t i = 0; i < count; i++)
        h[i] = (float)(i % 1000);
    CU(cudaMemcpyAsync(d, h, count * sizeof(float), cudaMemcpyHostToDevice, st));
    CU(cudaMemsetAsync(h, 0, count * sizeof(float), st));
    CU(cudaMemcpyAsync(h, d, count * sizeof(float), cudaMemcpyDeviceToHost, st));
    if (!stream_drains(st, 20))
        MP_FAIL("%d ranks: the stream took no new work", n);
    for (size_t i = 0; i < count; i++)
        if (h[i] != (float)(i % 1000))
            MP_FAIL("%d ranks: after the failure, element %zu is %g", n, i, (double)h[i]);
    rcc_comm_destroy(comm); /* reports the failure again */
    cudaStreamDestroy(st);
    cudaFree(d);
    cudaFreeHost(h);
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!cu_probe_device())
        return 77;
    int failed = 0;
    for (int n = 1; n <= 4; n++) {
        int rc = mp_run(n, rank_main, NULL, 300);
        printf("%s %d rank%s on one GPU\n", rc == 0 ? "PASS" : "FAIL", n, n > 1 ? "s" : "");
        failed |= rc != 0;
    }
    static const int tcp = 1;
    for (int n = 2; n <= 4; n++)
        for (int t = 0; t < 2; t++) {
            int rc = mp_run(n, rank_failure, t ? (void *)&tcp : NULL, 120);
            printf("%s %d ranks, a failure %s releases the stream\n", rc == 0 ? "PASS" : "FAIL", n,
                   t ? "over TCP" : "over the device ring");
            failed |= rc != 0;
        }
    return failed;
}
