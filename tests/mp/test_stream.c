/*
 * The stream path (rcc_<name>_stream) end to end on a stand-in GPU
 * (fakedev.c): buffers in "device memory", a "kernel" before each call that
 * writes the input late, a "kernel" after it that snapshots the output, and
 * one synchronisation at the end. Right results prove that the operation
 * waited for the stream's earlier work and that later work waited for it;
 * the call must also return before the late input was written (it never
 * waits for the GPU). A run of the same test on a real GPU is
 * tests/gpu/test_stream_gpu (issue 6). Built with RCC_VERBSIM (verbsim
 * linked, RCC_TRANSPORT=ibverbs), the device ring is ibverbs' by GPUDirect
 * RDMA both ways, as between GPUs of different hosts.
 */
#include <check.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../check_main.h"
#include "comm.h" /* rcci_streams_set_next_ticket */
#include "fakedev.h"
#include "mp.h"
#include "ringdeath.h"
#include "streamcase.h"
#include "testdata.h"

/* A "kernel" that copies n bytes. With `gated`, it first waits until the
 * test opens its gate, which the test does once the collective call has
 * returned: a call that waited for the stream would make the kernel give
 * up waiting (after 10 s), which the test sees. */
typedef struct {
    void *dst;
    const void *src;
    size_t n;
    int gated;
    atomic_int gate, gave_up;
} kcopy_t;

static void kern_copy(void *arg)
{
    kcopy_t *k = arg;
    for (int i = 0; k->gated && !atomic_load(&k->gate); i++) {
        if (i == 10000) {
            atomic_store(&k->gave_up, 1);
            break;
        }
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
    memcpy(k->dst, k->src, k->n);
}

/* Whether the device ring is what this build runs it over: cudaipc on the
 * stand-in, or, with verbsim, ibverbs (its queued messages, GPUDirect RDMA). */
static int device_ring_made(rcc_comm_t comm)
{
    struct rcc_comm *c = comm;
#ifdef RCC_VERBSIM
    const char *want = "ibverbs";
#else
    const char *want = "cudaipc";
#endif
    return c->drecv_link.nconns == 1 && c->dsend_link.nconns == 1 &&
           !strcmp(c->drecv_link.tr->name, want) && !strcmp(c->dsend_link.tr->name, want);
}

/* Runs one case; 0 when right, 1 when wrong (printed), -1 when the call or
 * the stream failed. */
static int scase_run(const scase_t *c, rcc_comm_t comm, void *stream, int rank, int n)
{
    size_t es = rcc_datatype_size(c->dt), send_elems, recv_elems, big;
    scase_sizes(c, n, &send_elems, &recv_elems, &big);
    char *in = malloc(send_elems * es), *want = malloc(recv_elems * es);
    char *got = malloc(recv_elems * es);
    scase_expect(c, rank, n, in, want);
    /* Buffers: one area when in place, else two. */
    char *area = c->device ? fakedev_malloc(big) : calloc(1, big);
    char *area2 = c->inplace ? NULL : c->device ? fakedev_malloc(big) : calloc(1, big);
    char *sendbuf, *recvbuf;
    scase_layout(c, rank, area, area2, &sendbuf, &recvbuf);
    memset(recvbuf, TD_UNWRITTEN, recv_elems * es);
    kcopy_t fill = {sendbuf, in, send_elems * es, 1, 0, 0};
    kcopy_t snap = {got, recvbuf, recv_elems * es, 0, 0, 0};
    fakedev_launch(stream, kern_copy, &fill);
    rcc_result_t res = scase_call(c, sendbuf, recvbuf, comm, stream);
    atomic_store(&fill.gate, 1);
    fakedev_launch(stream, kern_copy, &snap);
    int stuck = fakedev_stream_sync(stream, 60);
    int bad = 0;
    char what[200];
    scase_text(c, rank, n, what, sizeof what);
    if (res != RCC_SUCCESS) {
        fprintf(stderr, "%s: %s: %s\n", what, rcc_result_name(res), rcc_last_error(comm));
        bad = -1;
    } else if (stuck) {
        fprintf(stderr, "%s: the stream did not get past the operation in 60 s\n", what);
        bad = -1;
    } else if (atomic_load(&fill.gave_up)) {
        fprintf(stderr, "%s: the call returned only after the stream's earlier work ran\n", what);
        bad = 1;
    } else if (scase_has_result(c, rank)) {
        bad = td_compare(what, got, want, recv_elems, c->dt);
    }
    rcc_result_t async = RCC_SUCCESS;
    if (bad == 0 && (rcc_comm_get_async_error(comm, &async) != RCC_SUCCESS || async)) {
        fprintf(stderr, "%s: the communicator reports %s: %s\n", what, rcc_result_name(async),
                rcc_last_error(comm));
        bad = -1;
    }
    if (c->device) {
        fakedev_free(area);
        if (area2)
            fakedev_free(area2);
    } else {
        free(area);
        free(area2);
    }
    free(in), free(want), free(got);
    return bad;
}

static const rcc_datatype_t stream_dtypes[] = {RCC_FLOAT32, RCC_FLOAT16, RCC_INT64,
                                               RCC_BFLOAT16, RCC_UINT8, RCC_FLOAT64};
static const size_t stream_counts[] = {1, 1001, 65537};

/* arg: non-NULL: over TCP (RCC_TRANSPORT=tcp), device buffers staged
 * through pinned slots; otherwise over the device ring (cudaipc on the
 * stand-in) where the rank count makes one. */
static int rank_collectives(int rank, int n, void *arg)
{
    if (arg)
        setenv("RCC_TRANSPORT", "tcp", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(60000);
    if (!arg && n > 1 && !device_ring_made(comm))
        MP_FAIL("rank %d: no device ring", rank);
    void *stream = fakedev_stream_create();
    int bad = 0;
    unsigned seed = 1;
    for (int kind = 0; kind < K_NKINDS; kind++)
        for (size_t d = 0; d < sizeof stream_dtypes / sizeof *stream_dtypes; d++)
            for (size_t ci = 0; ci < sizeof stream_counts / sizeof *stream_counts; ci++) {
                scase_t c = {.kind = kind,
                             .dt = stream_dtypes[d],
                             .op = (rcc_redop_t)((d + ci) % RCC_NUM_OPS),
                             .count = stream_counts[ci],
                             .inplace = (int)((d + ci + (size_t)kind) % 2),
                             .root = (int)(seed % (unsigned)n),
                             .device = (d + ci) % 4 != 3, /* host memory on a stream too */
                             .seed = seed++};
                int r = scase_run(&c, comm, stream, rank, n);
                if (r < 0)
                    return 1;
                bad |= r;
            }
    /* Large enough for the ring on every rank count: chunk by chunk through
     * pinned slots, reduced on the device (coll/pipeline.c's device mode). */
    for (int kind = 0; kind < K_NKINDS; kind++)
        for (int v = 0; v < 4; v++) {
            int per_rank = kind == K_ALLGATHER || kind == K_REDUCE_SCATTER;
            scase_t c = {.kind = kind,
                         .dt = v < 2 ? RCC_FLOAT32 : RCC_BFLOAT16,
                         .op = v % 2 ? RCC_AVG : RCC_SUM,
                         .count = per_rank ? 150001 : 600001,
                         .inplace = v % 2,
                         .root = (int)(seed % (unsigned)n),
                         .device = 1,
                         .seed = seed++};
            int r = scase_run(&c, comm, stream, rank, n);
            if (r < 0)
                return 1;
            bad |= r;
        }
    /* Staged over TCP, the ring reduces a received chunk into the output
     * and into the slot that forwards it in one pass whenever that send is
     * the next to stage and its slot is free: on some rank, at least, once
     * the ring has steps that forward (3 ranks or more; when is a matter
     * of timing, and 2 ranks forward only in the allgather, often late). */
    size_t *fused = mp_shared(NULL);
    fused[rank] = fakedev_reduce_copies();
    fakedev_stream_destroy(stream);
    /* Nobody leaves (which its peers' health probes would see) before all
     * have looked at the communicator's health. */
    rcc_result_t res = rcc_barrier(comm);
    if (res != RCC_SUCCESS)
        MP_FAIL("rank %d: the closing barrier: %s: %s", rank, rcc_result_name(res),
                rcc_last_error(comm));
    size_t fused_all = 0;
    for (int r = 0; r < n; r++)
        fused_all += fused[r];
    if (arg && n > 2 && fused_all == 0 && rcci_stream_device_pipeline())
        MP_FAIL("rank %d: the device pipeline never fused a reduction with its forwarding copy",
                rank);
    return td_finish(comm, bad);
}

START_TEST(collectives_on_a_stream)
{
    ck_assert_int_eq(mp_run(_i, rank_collectives, NULL, 300), 0);
}
END_TEST

START_TEST(collectives_on_a_stream_tcp)
{
    static const int tcp = 1;
    ck_assert_int_eq(mp_run(_i, rank_collectives, (void *)&tcp, 300), 0);
}
END_TEST

/* ---- send/recv and alltoall on a stream -------------------------------------- */

static int rank_p2p(int rank, int n, void *arg)
{
    (void)arg;
    fakedev_install();
    rcc_comm_t comm = mp_comm(60000);
    void *stream = fakedev_stream_create();
    const size_t count = 4099;
    size_t bytes = count * sizeof(int32_t), all = bytes * (size_t)n;
    int32_t *in = malloc(all), *got = malloc(all), *want = malloc(all);
    char *dsend = fakedev_malloc(all), *drecv = fakedev_malloc(all);
    int bad = 0;
    /* A ring exchange in a group: to rank+1, from rank-1, both on the stream. */
    for (size_t i = 0; i < count; i++)
        in[i] = (int32_t)(rank * 100000 + (int)i);
    kcopy_t fill = {dsend, in, bytes, 1, 0, 0}, snap = {got, drecv, bytes, 0, 0, 0};
    fakedev_launch(stream, kern_copy, &fill);
    rcc_group_start();
    rcc_result_t r1 = rcc_send_stream(dsend, count, RCC_INT32, (rank + 1) % n, comm, stream);
    rcc_result_t r2 = rcc_recv_stream(drecv, count, RCC_INT32, (rank + n - 1) % n, comm, stream);
    rcc_result_t r3 = rcc_group_end();
    atomic_store(&fill.gate, 1);
    fakedev_launch(stream, kern_copy, &snap);
    if (r1 || r2 || r3 || fakedev_stream_sync(stream, 60))
        MP_FAIL("rank %d: send/recv on a stream: %s %s %s: %s", rank, rcc_result_name(r1),
                rcc_result_name(r2), rcc_result_name(r3), rcc_last_error(NULL));
    int from = (rank + n - 1) % n;
    for (size_t i = 0; i < count; i++)
        if (got[i] != from * 100000 + (int)i) {
            fprintf(stderr, "rank %d: element %zu from rank %d is %d\n", rank, i, from,
                    (int)got[i]);
            bad = 1;
            break;
        }
    if (atomic_load(&fill.gave_up))
        MP_FAIL("rank %d: rcc_group_end waited for the stream's earlier work", rank);
    /* Alltoall: block p of rank r's input is r * 1000 + p, repeated. */
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++) {
            in[(size_t)p * count + i] = rank * 1000 + p + (int32_t)i * 7;
            want[(size_t)p * count + i] = p * 1000 + rank + (int32_t)i * 7;
        }
    kcopy_t fill2 = {dsend, in, all, 0, 0, 0}, snap2 = {got, drecv, all, 0, 0, 0};
    fakedev_launch(stream, kern_copy, &fill2);
    rcc_result_t res = rcc_alltoall_stream(dsend, drecv, count, RCC_INT32, comm, stream);
    fakedev_launch(stream, kern_copy, &snap2);
    if (res != RCC_SUCCESS || fakedev_stream_sync(stream, 60))
        MP_FAIL("rank %d: alltoall on a stream: %s: %s", rank, rcc_result_name(res),
                rcc_last_error(comm));
    bad |= td_compare("alltoall on a stream", (char *)got, (char *)want, count * (size_t)n,
                      RCC_INT32);
    fakedev_free(dsend), fakedev_free(drecv);
    free(in), free(got), free(want);
    fakedev_stream_destroy(stream);
    return td_finish(comm, bad);
}

/* ---- a stream capturing a CUDA graph is refused --------------------------------- */

static int rank_capture(int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    fakedev_install();
    rcc_comm_t comm = mp_comm(60000);
    void *stream = fakedev_stream_create();
    const size_t count = 1001;
    float *d = fakedev_malloc(count * sizeof *d), got[1001], ones[1001];
    for (size_t i = 0; i < count; i++)
        ones[i] = 1;
    kcopy_t fill = {d, ones, sizeof ones, 0, 0, 0};
    fakedev_launch(stream, kern_copy, &fill);
    fakedev_set_capturing(1);
    rcc_result_t res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    fakedev_set_capturing(0);
    if (res != RCC_ERR_UNSUPPORTED || !strstr(rcc_last_error(NULL), "capturing a CUDA graph"))
        MP_FAIL("rank %d: an allreduce on a capturing stream gave %s: %s", rank,
                rcc_result_name(res), rcc_last_error(NULL));
    /* Nothing was queued or numbered: the next call runs as if there had been none. */
    res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    kcopy_t snap = {got, d, sizeof got, 0, 0, 0};
    fakedev_launch(stream, kern_copy, &snap);
    if (res != RCC_SUCCESS || fakedev_stream_sync(stream, 60))
        MP_FAIL("rank %d: the allreduce after: %s: %s", rank, rcc_result_name(res),
                rcc_last_error(comm));
    int bad = 0;
    for (size_t i = 0; i < count && !bad; i++)
        if (got[i] != (float)n) {
            fprintf(stderr, "rank %d: element %zu is %g, not %d\n", rank, i, got[i], n);
            bad = 1;
        }
    fakedev_free(d);
    fakedev_stream_destroy(stream);
    return td_finish(comm, bad);
}

START_TEST(capturing_stream_is_refused)
{
    ck_assert_int_eq(mp_run(_i, rank_capture, NULL, 120), 0);
}
END_TEST

/* ---- more stream calls in one group than a communicator has marks ------------------ */

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A group holds up to 4096 stream calls per communicator (stream.c's marks); the next is
 * refused at once, naming the limit, and the group's calls still run. */
static int rank_big_group(int rank, int n, void *arg)
{
    (void)arg;
    fakedev_install();
    rcc_comm_t comm = mp_comm(60000);
    void *stream = fakedev_stream_create();
    enum { CALLS = 4096 };
    int32_t *d = fakedev_malloc(CALLS * sizeof *d), *got = malloc(CALLS * sizeof *got);
    int32_t *in = malloc(CALLS * sizeof *in);
    for (int i = 0; i < CALLS; i++)
        in[i] = i + rank;
    kcopy_t fill = {d, in, CALLS * sizeof *d, 0, 0, 0};
    fakedev_launch(stream, kern_copy, &fill);
    rcc_group_start();
    rcc_result_t res = RCC_SUCCESS;
    for (int i = 0; i < CALLS && res == RCC_SUCCESS; i++)
        res = rcc_allreduce_stream(d + i, d + i, 1, RCC_INT32, RCC_SUM, comm, stream);
    int64_t t0 = now_ms();
    rcc_result_t over = rcc_allreduce_stream(d, d, 1, RCC_INT32, RCC_SUM, comm, stream);
    int64_t took = now_ms() - t0;
    char why[512];
    snprintf(why, sizeof why, "%s", rcc_last_error(NULL));
    rcc_result_t end = rcc_group_end();
    kcopy_t snap = {got, d, CALLS * sizeof *got, 0, 0, 0};
    fakedev_launch(stream, kern_copy, &snap);
    if (res != RCC_SUCCESS || end != RCC_SUCCESS || fakedev_stream_sync(stream, 120))
        MP_FAIL("rank %d: %d calls in a group: %s, group end %s: %s", rank, CALLS,
                rcc_result_name(res), rcc_result_name(end), rcc_last_error(comm));
    if (over != RCC_ERR_INVALID_USAGE || !strstr(why, "4096") || took > 1000)
        MP_FAIL("rank %d: call %d of a group gave %s after %lld ms: %s", rank, CALLS + 1,
                rcc_result_name(over), (long long)took, why);
    int bad = 0;
    for (int i = 0; i < CALLS && !bad; i++)
        if (got[i] != n * i + n * (n - 1) / 2) {
            fprintf(stderr, "rank %d: element %d is %d\n", rank, i, (int)got[i]);
            bad = 1;
        }
    fakedev_free(d);
    free(got), free(in);
    fakedev_stream_destroy(stream);
    return td_finish(comm, bad);
}

START_TEST(group_past_the_marks_is_refused)
{
    ck_assert_int_eq(mp_run(_i, rank_big_group, NULL, 300), 0);
}
END_TEST

START_TEST(p2p_on_a_stream) { ck_assert_int_eq(mp_run(_i, rank_p2p, NULL, 120), 0); }
END_TEST

/* ---- device collectives in a group ------------------------------------------------ */

/* Two chunked device allreduces in one group, on two streams, each held by
 * a gated fill that opens only after rcc_group_end has returned: their GPU
 * work is queued at the call (coll/devqueue.h), inside the group, and both
 * must come out right (as PyTorch's coalesced allreduces). arg non-NULL:
 * over TCP; else over the device ring. */
static int rank_group_device(int rank, int n, void *arg)
{
    if (arg)
        setenv("RCC_TRANSPORT", "tcp", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(60000);
    if (!arg && !device_ring_made(comm))
        MP_FAIL("rank %d: no device ring", rank);
    void *sa = fakedev_stream_create(), *sb = fakedev_stream_create();
    const size_t nx = 300001, ny = 200003;
    float *hx = malloc(nx * 4), *gx = malloc(nx * 4);
    int32_t *hy = malloc(ny * 4), *gy = malloc(ny * 4);
    float *dx = fakedev_malloc(nx * 4);
    int32_t *dy = fakedev_malloc(ny * 4);
    for (size_t i = 0; i < nx; i++)
        hx[i] = (float)(rank + (int)(i % 7));
    for (size_t i = 0; i < ny; i++)
        hy[i] = rank * 1000 + (int32_t)(i % 13);
    kcopy_t fx = {dx, hx, nx * 4, 1, 0, 0}, fy = {dy, hy, ny * 4, 1, 0, 0};
    kcopy_t sx = {gx, dx, nx * 4, 0, 0, 0}, sy = {gy, dy, ny * 4, 0, 0, 0};
    fakedev_launch(sa, kern_copy, &fx);
    fakedev_launch(sb, kern_copy, &fy);
    rcc_group_start();
    rcc_result_t r1 = rcc_allreduce_stream(dx, dx, nx, RCC_FLOAT32, RCC_SUM, comm, sa);
    rcc_result_t r2 = rcc_allreduce_stream(dy, dy, ny, RCC_INT32, RCC_MAX, comm, sb);
    rcc_result_t r3 = rcc_group_end();
    atomic_store(&fx.gate, 1);
    atomic_store(&fy.gate, 1);
    fakedev_launch(sa, kern_copy, &sx);
    fakedev_launch(sb, kern_copy, &sy);
    if (r1 || r2 || r3 || fakedev_stream_sync(sa, 60) || fakedev_stream_sync(sb, 60))
        MP_FAIL("rank %d: allreduces in a group: %s %s %s: %s", rank, rcc_result_name(r1),
                rcc_result_name(r2), rcc_result_name(r3), rcc_last_error(NULL));
    if (atomic_load(&fx.gave_up) || atomic_load(&fy.gave_up))
        MP_FAIL("rank %d: rcc_group_end waited for the streams' earlier work", rank);
    int bad = 0;
    float base = (float)(n * (n - 1) / 2);
    for (size_t i = 0; i < nx && !bad; i++)
        if (gx[i] != base + (float)(n * (int)(i % 7))) {
            fprintf(stderr, "rank %d: sum element %zu is %g\n", rank, i, (double)gx[i]);
            bad = 1;
        }
    for (size_t i = 0; i < ny && !bad; i++)
        if (gy[i] != (n - 1) * 1000 + (int32_t)(i % 13)) {
            fprintf(stderr, "rank %d: max element %zu is %d\n", rank, i, (int)gy[i]);
            bad = 1;
        }
    fakedev_free(dx), fakedev_free(dy);
    free(hx), free(gx), free(hy), free(gy);
    fakedev_stream_destroy(sa);
    fakedev_stream_destroy(sb);
    return td_finish(comm, bad);
}

START_TEST(device_collectives_in_a_group)
{
    ck_assert_int_eq(mp_run(_i, rank_group_device, NULL, 120), 0);
}
END_TEST

START_TEST(device_collectives_in_a_group_tcp)
{
    static const int tcp = 1;
    ck_assert_int_eq(mp_run(_i, rank_group_device, (void *)&tcp, 120), 0);
}
END_TEST

/* ---- a failure releases the stream --------------------------------------------- */

/* Rank 0 queues an allreduce the others never call (they leave); its
 * stream must still get past the operation, and the communicator must
 * report the failure. arg non-NULL: large enough to go chunk by chunk, so
 * that its GPU work is queued at the call, waiting for chunks that never
 * come: *arg 1 over TCP, 2 over the device ring (its waits are on the
 * cudaipc counters, which queue_abort must let pass). */
static int rank_failure(int rank, int n, void *arg)
{
    size_t count = arg ? 600001 : 1000;
    if (arg && *(const int *)arg == 1)
        setenv("RCC_TRANSPORT", "tcp", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(3000);
    if (arg && *(const int *)arg == 2 && !device_ring_made(comm))
        MP_FAIL("rank %d: no device ring", rank);
    if (rank != 0)
        return td_finish(comm, 0);
    void *stream = fakedev_stream_create();
    float *d = fakedev_malloc(count * sizeof(float));
    rcc_result_t res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    double t0 = td_now_s();
    if (res != RCC_SUCCESS)
        MP_FAIL("the call itself failed: %s: %s", rcc_result_name(res), rcc_last_error(comm));
    if (fakedev_stream_sync(stream, 20))
        MP_FAIL("the stream was left waiting for a failed operation");
    rcc_result_t async = RCC_SUCCESS;
    rcc_comm_get_async_error(comm, &async);
    if (async == RCC_SUCCESS)
        MP_FAIL("%d ranks: the failure is not reported by rcc_comm_get_async_error", n);
    printf("rank 0: stream released %.3f s after the call; async error %s: %s\n",
           td_now_s() - t0, rcc_result_name(async), rcc_last_error(comm));
    res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    if (res == RCC_SUCCESS && fakedev_stream_sync(stream, 20))
        MP_FAIL("a call on the broken communicator left its stream waiting");
    fakedev_free(d);
    fakedev_stream_destroy(stream);
    rcc_comm_destroy(comm);
    return 0;
}

START_TEST(failure_releases_the_stream)
{
    ck_assert_int_eq(mp_run(_i, rank_failure, NULL, 120), 0);
}
END_TEST

START_TEST(failure_releases_the_stream_chunked)
{
    static const int tcp = 1;
    ck_assert_int_eq(mp_run(_i, rank_failure, (void *)&tcp, 120), 0);
}
END_TEST

START_TEST(failure_releases_the_stream_device_ring)
{
    static const int device_ring = 2;
    ck_assert_int_eq(mp_run(_i, rank_failure, (void *)&device_ring, 120), 0);
}
END_TEST

/* The communicator's asynchronous error, polled until there is one or
 * `limit_s` seconds have passed since `t0`. */
static rcc_result_t await_async_error(rcc_comm_t comm, double t0, double limit_s)
{
    rcc_result_t async = RCC_SUCCESS;
    while (async == RCC_SUCCESS && td_now_s() - t0 < limit_s) {
        rcc_comm_get_async_error(comm, &async);
        usleep(10000);
    }
    return async;
}

/* Rank 0's device allreduce over the device ring fails half queued (a copy
 * refused, as on a broken context): its call returns the error; its
 * device-ring connections' numbering has moved on, so its communicator
 * must fail (later calls are refused at the call) and tell the peers, whose
 * streams are released and whose communicators report it well within their
 * timeout, not after it. The part it queued runs late (a slow GPU) and must
 * still end before the caller's stream goes on: it reads `d`. With `arg`
 * (gated), rank 0's stream is held by a kernel before the call until the
 * call has returned: the queued part cannot run before, and the call must
 * not wait for it (it used to, up to 5 s). */
static int rank_queue_fails(int rank, int n, void *arg)
{
    int gated = arg != NULL;
    if (rank == 0) {
        setenv("FAKEDEV_COPY_FAILS_AFTER", "1", 1);
        setenv("FAKEDEV_WAIT_LATE_US", "300000", 1);
    }
    fakedev_install();
    rcc_comm_t comm = mp_comm(60000);
    if (!device_ring_made(comm))
        MP_FAIL("rank %d: no device ring", rank);
    void *stream = fakedev_stream_create();
    size_t count = 600001;
    float *d = fakedev_malloc(count * sizeof(float));
    float *input = calloc(count, sizeof(float));
    kcopy_t fill = {d, input, count * sizeof(float), 1, 0, 0};
    if (gated && rank == 0)
        fakedev_launch(stream, kern_copy, &fill);
    double t0 = td_now_s();
    rcc_result_t res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    double call_s = td_now_s() - t0;
    atomic_store(&fill.gate, 1);
    if (rank == 0 && res != RCC_ERR_CUDA)
        MP_FAIL("rank 0: the half-queued call gave %s: %s", rcc_result_name(res),
                rcc_last_error(comm));
    /* The queued part waits for the held kernel; waiting for it in the
     * call took 5 s. A bound well under that, far above a call's time. */
    if (gated && rank == 0 && call_s > 2.5)
        MP_FAIL("rank 0: the failing call waited %.2f s for its stream's earlier work", call_s);
    if (gated && rank == 0)
        printf("rank 0 of %d: the failing call returned in %.3f s, its stream held\n", n, call_s);
    if (fakedev_stream_sync(stream, 20))
        MP_FAIL("rank %d: the stream was left waiting", rank);
    rcc_result_t async = await_async_error(comm, t0, 20);
    printf("rank %d of %d: %.2f s: %s: %s\n", rank, n, td_now_s() - t0, rcc_result_name(async),
           rcc_last_error(comm));
    if (async == RCC_SUCCESS)
        MP_FAIL("rank %d: no failure reported within 20 s", rank);
    /* Refused at the call: nothing is queued on a failed communicator. */
    res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    if (res != async || !strstr(rcc_last_error(comm), "failed earlier"))
        MP_FAIL("rank %d: a call on the failed communicator gave %s: %s", rank,
                rcc_result_name(res), rcc_last_error(comm));
    if (fakedev_stream_sync(stream, 20))
        MP_FAIL("rank %d: a call on the failed communicator left its stream waiting", rank);
    if (atomic_load(&fill.gave_up))
        MP_FAIL("rank %d: the held kernel gave up waiting: the call waited for it", rank);
    fakedev_stream_destroy(stream);
    mp_abort_and_wait(comm, n);
    fakedev_free(d);
    free(input);
    return 0;
}

START_TEST(half_queued_device_ring_fails_the_communicator)
{
    ck_assert_int_eq(mp_run(_i, rank_queue_fails, NULL, 120), 0);
}
END_TEST

START_TEST(half_queued_call_does_not_wait_for_its_stream)
{
    static const int gated = 1;
    ck_assert_int_eq(mp_run(_i, rank_queue_fails, (void *)&gated, 120), 0);
}
END_TEST

/* A GPU that never finishes (no event completes): every message of a
 * queued device allreduce has moved, and the wait for its last GPU work
 * must end with RCC_ERR_TIMEOUT after the communicator's timeout (2 s
 * here), saying so, rather than hold the operation forever. */
static int rank_gpu_hangs(int rank, int n, void *arg)
{
    (void)arg;
    setenv("FAKEDEV_EVENTS_HANG", "1", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(2000);
    void *stream = fakedev_stream_create();
    size_t count = 600001;
    float *d = fakedev_malloc(count * sizeof(float));
    double t0 = td_now_s();
    rcc_result_t res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    if (res != RCC_SUCCESS)
        MP_FAIL("rank %d: the call: %s: %s", rank, rcc_result_name(res), rcc_last_error(comm));
    rcc_result_t async = await_async_error(comm, t0, 30);
    const char *text = rcc_last_error(comm);
    printf("rank %d: %.2f s: %s: %s\n", rank, td_now_s() - t0, rcc_result_name(async), text);
    if (async != RCC_ERR_TIMEOUT || !strstr(text, "did not finish"))
        MP_FAIL("rank %d: expected the GPU's timeout, got %s: %s", rank, rcc_result_name(async),
                text);
    /* The GPU recovers: what was kept from it (pinned memory behind an
     * event) goes with the communicator. */
    unsetenv("FAKEDEV_EVENTS_HANG");
    fakedev_stream_destroy(stream);
    mp_abort_and_wait(comm, n);
    fakedev_free(d);
    return 0;
}

START_TEST(hung_gpu_times_out)
{
    ck_assert_int_eq(mp_run(2, rank_gpu_hangs, NULL, 120), 0);
}
END_TEST

/* ---- point-to-point on several streams ---------------------------------------- */

/* Messages between two ranks pair up in call order whatever the streams:
 * rank 0 sends twice to rank 1, the first send on a stream held by a
 * kernel until both calls have returned, the second on a stream that runs
 * at once; rank 1 receives both on streams of its own. The second send may
 * not take the first one's place (its stream reaches it first: the message
 * numbers are taken at the call, in call order). */
static int rank_p2p_order(int rank, int n, void *arg)
{
    (void)arg, (void)n;
    fakedev_install();
    rcc_comm_t comm = mp_comm(20000);
    void *sa = fakedev_stream_create(), *sb = fakedev_stream_create();
    size_t c1 = 1000, c2 = 3000;
    float *h1 = malloc(c1 * sizeof(float)), *h2 = malloc(c2 * sizeof(float));
    float *d1 = fakedev_malloc(c1 * sizeof(float)), *d2 = fakedev_malloc(c2 * sizeof(float));
    for (size_t i = 0; i < c1; i++)
        h1[i] = (float)i;
    for (size_t i = 0; i < c2; i++)
        h2[i] = (float)(100000 + i);
    kcopy_t fill1 = {d1, h1, c1 * sizeof(float), rank == 0, 0, 0};
    kcopy_t fill2 = {d2, h2, c2 * sizeof(float), 0, 0, 0};
    rcc_result_t r1, r2;
    if (rank == 0) {
        fakedev_launch(sa, kern_copy, &fill1);
        fakedev_launch(sb, kern_copy, &fill2);
        r1 = rcc_send_stream(d1, c1, RCC_FLOAT32, 1, comm, sa);
        r2 = rcc_send_stream(d2, c2, RCC_FLOAT32, 1, comm, sb);
        atomic_store(&fill1.gate, 1);
    } else {
        r1 = rcc_recv_stream(d1, c1, RCC_FLOAT32, 0, comm, sa);
        r2 = rcc_recv_stream(d2, c2, RCC_FLOAT32, 0, comm, sb);
    }
    if (r1 != RCC_SUCCESS || r2 != RCC_SUCCESS)
        MP_FAIL("rank %d: the calls gave %s, %s: %s", rank, rcc_result_name(r1),
                rcc_result_name(r2), rcc_last_error(comm));
    if (fakedev_stream_sync(sa, 30) || fakedev_stream_sync(sb, 30))
        MP_FAIL("rank %d: a stream did not get past its message", rank);
    rcc_result_t async = RCC_SUCCESS;
    rcc_comm_get_async_error(comm, &async);
    if (async != RCC_SUCCESS)
        MP_FAIL("rank %d: %s: %s", rank, rcc_result_name(async), rcc_last_error(comm));
    int bad = 0;
    if (rank == 1) {
        float *g1 = malloc(c1 * sizeof(float)), *g2 = malloc(c2 * sizeof(float));
        kcopy_t s1 = {g1, d1, c1 * sizeof(float), 0, 0, 0},
                s2 = {g2, d2, c2 * sizeof(float), 0, 0, 0};
        fakedev_launch(sa, kern_copy, &s1);
        fakedev_launch(sb, kern_copy, &s2);
        if (fakedev_stream_sync(sa, 30) || fakedev_stream_sync(sb, 30))
            MP_FAIL("rank 1: the copies back did not run");
        bad = memcmp(g1, h1, c1 * sizeof(float)) != 0 || memcmp(g2, h2, c2 * sizeof(float)) != 0;
        if (bad)
            fprintf(stderr, "rank 1: the messages landed in the wrong receives (%g, %g)\n",
                    (double)g1[0], (double)g2[0]);
        free(g1), free(g2);
    }
    fakedev_stream_destroy(sa);
    fakedev_stream_destroy(sb);
    fakedev_free(d1), fakedev_free(d2);
    free(h1), free(h2);
    return td_finish(comm, bad);
}

START_TEST(p2p_pairs_in_call_order_across_streams)
{
    ck_assert_int_eq(mp_run(2, rank_p2p_order, NULL, 120), 0);
}
END_TEST

/* ---- device buffers on one rank, host buffers on the other ------------------------ */

/* Device buffers go in larger chunks than host ones (RCC_DEVICE_CHUNK_BYTES)
 * and over the device ring, so an allreduce whose buffers are device memory
 * on one rank and host memory on the other cannot run: both ranks must fail
 * with RCC_ERR_MISMATCH naming the device buffers, well within the timeout
 * (20 s here), and their streams go on. Where device buffers are staged
 * whole (RCC_DEVICE_PIPELINE) they are cut as host ones: the allreduce runs,
 * and its sums are checked. */
static int rank_kinds_differ(int rank, int n, void *arg)
{
    (void)n, (void)arg;
    setenv("RCC_ALGO", "ring", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(20000);
    void *stream = fakedev_stream_create();
    size_t count = 4u << 20; /* 16 MiB: 1 MiB device chunks, 256 KiB host ones */
    float *buf = rank == 0 ? fakedev_malloc(count * sizeof *buf) : calloc(count, sizeof *buf);
    for (size_t i = 0; i < count; i++) /* the fake device's memory is the host's */
        buf[i] = (float)(rank + 1) * (float)(i % 1000);
    double t0 = td_now_s();
    rcc_result_t res = rcc_allreduce_stream(buf, buf, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    if (res == RCC_SUCCESS && fakedev_stream_sync(stream, 30))
        MP_FAIL("rank %d: the stream was left waiting", rank);
    rcc_result_t async = RCC_SUCCESS;
    rcc_comm_get_async_error(comm, &async);
    const char *text = rcc_last_error(comm);
    /* Nobody aborts (which the other's health probe would report) before
     * both have looked. */
    atomic_int *looked = mp_shared(NULL);
    atomic_fetch_add(looked, 1);
    while (atomic_load(looked) < 2 && td_now_s() - t0 < 60)
        usleep(1000);
    printf("rank %d (%s buffers): %.2f s: %s: %s\n", rank, rank == 0 ? "device" : "host",
           td_now_s() - t0, rcc_result_name(res != RCC_SUCCESS ? res : async), text);
    if (!rcci_stream_device_pipeline()) {
        size_t wrong = 0;
        for (size_t i = 0; i < count; i++)
            wrong += buf[i] != 3.0f * (float)(i % 1000);
        if (res != RCC_SUCCESS || async != RCC_SUCCESS || wrong)
            MP_FAIL("rank %d: staged whole, the mixed allreduce: %s, %zu elements wrong", rank,
                    rcc_result_name(res != RCC_SUCCESS ? res : async), wrong);
    } else if (res == RCC_SUCCESS && async == RCC_SUCCESS)
        MP_FAIL("rank %d: differently cut buffers went unnoticed", rank);
    else if (res != RCC_ERR_MISMATCH && async != RCC_ERR_MISMATCH)
        MP_FAIL("rank %d: not reported as a mismatch", rank);
    else if (!strstr(text, "device buffers") || td_now_s() - t0 > 10)
        MP_FAIL("rank %d: the error does not name the device buffers, or came late: %s", rank,
                text);
    if (rank == 0)
        fakedev_free(buf);
    else
        free(buf);
    fakedev_stream_destroy(stream);
    rcc_comm_abort(comm);
    return 0;
}

/* A reduce whose sendbufs are device memory while the root's recvbuf is host
 * memory: the other ranks' parts go chunk by chunk on the GPU (over the
 * device ring), the root's is staged whole, so they cannot meet; the
 * non-roots' parts end at once (their sends went) and they wait in the next
 * allreduce. Every rank must fail with RCC_ERR_MISMATCH naming the device
 * buffers well within the timeout (20 s), from the root's announcement of
 * the reduce it waits in, judged against the history of a rank that has
 * ended it (ringcc.h: the root's other buffer must be of its peers' kind). */
static int rank_root_kind_differs(int rank, int n, void *arg)
{
    fakedev_install();
    rcc_comm_t comm = mp_comm(20000);
    void *stream = fakedev_stream_create();
    size_t count = 600001;
    float *dev = fakedev_malloc(count * sizeof(float));
    float *host = calloc(count, sizeof(float));
    float *out = rank == 0 ? host : fakedev_malloc(count * sizeof(float));
    /* arg: not the first operation (the reduce is operation 1, else 0). */
    rcc_result_t res = arg ? rcc_barrier(comm) : RCC_SUCCESS;
    if (res != RCC_SUCCESS)
        MP_FAIL("rank %d: barrier: %s", rank, rcc_last_error(comm));
    double t0 = td_now_s();
    res = rcc_reduce_stream(dev, out, count, RCC_FLOAT32, RCC_SUM, 0, comm, stream);
    if (res == RCC_SUCCESS)
        res = rcc_allreduce_stream(dev, dev, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    if (res == RCC_SUCCESS && fakedev_stream_sync(stream, 60))
        MP_FAIL("rank %d: the stream was left waiting", rank);
    rcc_result_t async = RCC_SUCCESS;
    rcc_comm_get_async_error(comm, &async);
    const char *text = rcc_last_error(comm);
    double took = td_now_s() - t0;
    /* Nobody aborts (which the others' health probes would report) before
     * all have looked. */
    atomic_int *looked = mp_shared(NULL);
    atomic_fetch_add(looked, 1);
    while (atomic_load(looked) < n && td_now_s() - t0 < 60)
        usleep(1000);
    printf("rank %d of %d: %.2f s: %s: %s\n", rank, n, took,
           rcc_result_name(res != RCC_SUCCESS ? res : async), text);
    if (res != RCC_ERR_MISMATCH && async != RCC_ERR_MISMATCH)
        MP_FAIL("rank %d: not reported as a mismatch", rank);
    if (!strstr(text, "device buffers") || took > 10)
        MP_FAIL("rank %d: the error does not name the device buffers, or came late (%.1f s): %s",
                rank, took, text);
    fakedev_free(dev);
    if (out != host)
        fakedev_free(out);
    free(host);
    fakedev_stream_destroy(stream);
    rcc_comm_abort(comm);
    return 0;
}

START_TEST(root_buffer_kind_differs)
{
    ck_assert_int_eq(mp_run(_i, rank_root_kind_differs, NULL, 120), 0);
}
END_TEST

START_TEST(root_buffer_kind_differs_later)
{
    static const int later = 1;
    ck_assert_int_eq(mp_run(_i, rank_root_kind_differs, (void *)&later, 120), 0);
}
END_TEST

/* ---- a call that waits too long for its flag pair ---------------------------- */

/* 4097 allreduces on a stream held by a gated kernel: the last needs the
 * flag pair of the first, which cannot start, and must fail with
 * RCC_ERR_TIMEOUT after the communicator's timeout, leaving the pair to the
 * first. A copy queued right after the first must then still see the first's
 * sum once the gate opens (a failed call that marked the pair done would let
 * the stream run past the first before it had run). */
static int rank_pair_timeout(int rank, int n, void *arg)
{
    (void)arg;
    enum { CALLS = 4096 };
    fakedev_install();
    rcc_comm_t comm = mp_comm(1500);
    void *stream = fakedev_stream_create();
    int32_t *d = fakedev_malloc((CALLS + 1) * sizeof *d), *in = malloc((CALLS + 1) * sizeof *in);
    for (int i = 0; i <= CALLS; i++)
        in[i] = i + rank;
    int32_t first = -1;
    kcopy_t fill = {d, in, (CALLS + 1) * sizeof *d, 1, 0, 0},
            snap = {&first, d, sizeof first, 0, 0, 0};
    fakedev_launch(stream, kern_copy, &fill);
    rcc_result_t res = rcc_allreduce_stream(d, d, 1, RCC_INT32, RCC_SUM, comm, stream);
    fakedev_launch(stream, kern_copy, &snap);
    for (int i = 1; i < CALLS && res == RCC_SUCCESS; i++)
        res = rcc_allreduce_stream(d + i, d + i, 1, RCC_INT32, RCC_SUM, comm, stream);
    double t0 = td_now_s();
    rcc_result_t late =
        rcc_allreduce_stream(d + CALLS, d + CALLS, 1, RCC_INT32, RCC_SUM, comm, stream);
    double took = td_now_s() - t0;
    char why[512];
    snprintf(why, sizeof why, "%s", rcc_last_error(NULL));
    /* No rank's operations run before every rank has made its late call: a peer
     * that ran ahead would fail the first allreduce at its timeout, which
     * releases every pair (the late call could then succeed). */
    atomic_int *late_done = mp_shared(NULL);
    atomic_fetch_add(late_done, 1);
    for (int i = 0; atomic_load(late_done) < n && i < 30000; i++)
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    atomic_store(&fill.gate, 1);
    if (res != RCC_SUCCESS || fakedev_stream_sync(stream, 120) || atomic_load(&fill.gave_up))
        MP_FAIL("rank %d: the first %d calls: %s: %s", rank, CALLS, rcc_result_name(res),
                rcc_last_error(comm));
    if (late != RCC_ERR_TIMEOUT || !strstr(why, "pending") || took < 1.0 || took > 10)
        MP_FAIL("rank %d: call %d gave %s after %.2f s: %s", rank, CALLS + 1, rcc_result_name(late),
                took, why);
    int bad = first != n * (n - 1) / 2;
    if (bad)
        fprintf(stderr, "rank %d: the copy after the first allreduce saw %d, not %d\n", rank,
                (int)first, n * (n - 1) / 2);
    fakedev_free(d);
    free(in);
    fakedev_stream_destroy(stream);
    return td_finish(comm, bad);
}

START_TEST(pair_timeout_leaves_the_pair)
{
    ck_assert_int_eq(mp_run(2, rank_pair_timeout, NULL, 120), 0);
}
END_TEST

/* ---- the ticket counter wraps ----------------------------------------------- */

/* 700 allreduces queued on a stream without waiting, from ticket 2^32 - 301
 * on: the counter wraps (0 is never a ticket) while more operations are
 * pending than there are flag pairs, so pairs are reused across the wrap.
 * Each must wait for its pair's previous operation, and for no operation
 * that never was. */
static int rank_ticket_wrap(int rank, int n, void *arg)
{
    (void)arg;
    enum { OPS = 700 };
    fakedev_install();
    rcc_comm_t comm = mp_comm(20000);
    void *stream = fakedev_stream_create();
    if (rcci_streams_set_next_ticket(comm, UINT32_MAX - 300) != RCC_SUCCESS)
        MP_FAIL("rank %d: %s", rank, rcc_last_error(NULL));
    int32_t in[OPS], got[OPS];
    for (int i = 0; i < OPS; i++)
        in[i] = rank + 3 * i;
    int32_t *d = fakedev_malloc(sizeof in);
    kcopy_t fill = {d, in, sizeof in, 0, 0, 0}, snap = {got, d, sizeof got, 0, 0, 0};
    fakedev_launch(stream, kern_copy, &fill);
    for (int i = 0; i < OPS; i++) {
        rcc_result_t res = rcc_allreduce_stream(d + i, d + i, 1, RCC_INT32, RCC_SUM, comm, stream);
        if (res != RCC_SUCCESS)
            MP_FAIL("rank %d: allreduce %d on the stream: %s: %s", rank, i,
                    rcc_result_name(res), rcc_last_error(NULL));
    }
    fakedev_launch(stream, kern_copy, &snap);
    if (fakedev_stream_sync(stream, 60))
        MP_FAIL("rank %d: the stream did not finish: %s", rank, rcc_last_error(comm));
    int bad = 0;
    for (int i = 0; i < OPS && !bad; i++)
        if (got[i] != n * 3 * i + n * (n - 1) / 2) {
            fprintf(stderr, "rank %d: allreduce %d gave %d, not %d\n", rank, i, (int)got[i],
                    n * 3 * i + n * (n - 1) / 2);
            bad = 1;
        }
    fakedev_free(d);
    fakedev_stream_destroy(stream);
    return td_finish(comm, bad);
}

START_TEST(tickets_wrap)
{
    ck_assert_int_eq(mp_run(2, rank_ticket_wrap, NULL, 120), 0);
}
END_TEST

START_TEST(device_and_host_buffers_across_ranks)
{
    ck_assert_int_eq(mp_run(2, rank_kinds_differ, NULL, 120), 0);
}
END_TEST

#ifdef RCC_VERBSIM
/* The last rank dies mid-allreduce on the device ring over verbs, with
 * messages queued both ways (ringdeath.h). */
START_TEST(peer_death_on_the_device_ring) { ck_assert_int_eq(ringdeath_run(_i, "ibverbs"), 0); }
END_TEST
#endif

static Suite *stream_suite(void)
{
    Suite *s = suite_create("mp_stream");
#ifdef RCC_VERBSIM
    /* What runs over the device ring, now over verbs (meson runs this
     * case alone: CK_RUN_CASE). */
    TCase *verbs = tcase_create("device_ring_over_verbs");
    tcase_set_timeout(verbs, 600);
    tcase_add_loop_test(verbs, collectives_on_a_stream, 2, 5);
    tcase_add_loop_test(verbs, device_collectives_in_a_group, 2, 4);
    tcase_add_loop_test(verbs, failure_releases_the_stream_device_ring, 2, 4);
    tcase_add_loop_test(verbs, half_queued_device_ring_fails_the_communicator, 2, 4);
    tcase_add_loop_test(verbs, half_queued_call_does_not_wait_for_its_stream, 2, 3);
    tcase_add_loop_test(verbs, peer_death_on_the_device_ring, 2, 5);
    tcase_add_test(verbs, device_and_host_buffers_across_ranks);
    suite_add_tcase(s, verbs);
#endif
    TCase *tc = tcase_create("fake_device");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, collectives_on_a_stream, 1, 6);
    tcase_add_loop_test(tc, collectives_on_a_stream_tcp, 2, 5);
    tcase_add_loop_test(tc, p2p_on_a_stream, 1, 6);
    tcase_add_loop_test(tc, capturing_stream_is_refused, 1, 4);
    tcase_add_loop_test(tc, group_past_the_marks_is_refused, 2, 3);
    tcase_add_loop_test(tc, device_collectives_in_a_group, 2, 5);
    tcase_add_loop_test(tc, device_collectives_in_a_group_tcp, 2, 4);
    tcase_add_loop_test(tc, failure_releases_the_stream, 2, 5);
    tcase_add_loop_test(tc, failure_releases_the_stream_chunked, 2, 4);
    tcase_add_loop_test(tc, failure_releases_the_stream_device_ring, 2, 4);
    tcase_add_loop_test(tc, half_queued_device_ring_fails_the_communicator, 2, 4);
    tcase_add_loop_test(tc, half_queued_call_does_not_wait_for_its_stream, 2, 4);
    tcase_add_test(tc, hung_gpu_times_out);
    tcase_add_test(tc, device_and_host_buffers_across_ranks);
    tcase_add_test(tc, tickets_wrap);
    tcase_add_test(tc, p2p_pairs_in_call_order_across_streams);
    tcase_add_loop_test(tc, root_buffer_kind_differs, 2, 5);
    tcase_add_loop_test(tc, root_buffer_kind_differs_later, 3, 4);
    tcase_add_test(tc, pair_timeout_leaves_the_pair);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(stream_suite)
