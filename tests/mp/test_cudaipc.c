/*
 * The device ring over cudaipc (lib/devring.c, transports/cudaipc/) on the
 * stand-in GPU (fakedev.c, whose IPC the forked ranks share as processes
 * sharing a GPU would): large ring collectives of device buffers, several
 * slots' worth of fragments per chunk, against the naive reference; the
 * choice of transport per edge (and RCC_TRANSPORT turning it off); and a
 * rank killed while its peers map its memory, which they must report as
 * PEER_LOST naming it, within the timeout, with their streams released;
 * and a rank that cannot map its neighbour's memory, with which every rank
 * goes without the device ring; and a peer whose window reaches past its
 * allocation, which is refused.
 * tests/gpu/test_cudaipc_gpu.c runs the collectives on a real GPU.
 */
#include <check.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check_main.h"
#include "comm.h" /* the device ring's links, to see that it is used */
#include "fakedev.h"
#include "mp.h"
#include "ringdeath.h"
#include "testdata.h"

typedef enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_NKINDS } kind_t;

static const char *const kind_names[] = {"allreduce", "reduce_scatter", "allgather"};

/* One collective of `count` (per rank for reduce-scatter's output and
 * allgather's input) on device buffers; 0 when right. */
static int run_case(rcc_comm_t comm, void *stream, int rank, int n, kind_t kind, size_t count,
                    rcc_datatype_t dt, rcc_redop_t op, unsigned seed)
{
    size_t es = rcc_datatype_size(dt), nn = (size_t)n;
    size_t in_elems = kind == K_REDUCE_SCATTER ? count * nn : count;
    size_t out_elems = kind == K_ALLGATHER ? count * nn : count;
    char *in = malloc(in_elems * es), *want = malloc(out_elems * es), *got = malloc(out_elems * es);
    char *din = fakedev_malloc(in_elems * es), *dout = fakedev_malloc(out_elems * es);
    td_fill(in, 0, in_elems, seed, rank, dt, op);
    if (kind == K_ALLREDUCE)
        td_reference(want, 0, count, NULL, n, seed, dt, op);
    else if (kind == K_REDUCE_SCATTER)
        td_reference(want, (size_t)rank * count, count, NULL, n, seed, dt, op);
    else
        for (int r = 0; r < n; r++)
            td_fill(want + (size_t)r * count * es, 0, count, seed, r, dt, op);
    memcpy(din, in, in_elems * es);
    memset(dout, TD_UNWRITTEN, out_elems * es);
    rcc_result_t res;
    if (kind == K_ALLREDUCE)
        res = rcc_allreduce_stream(din, dout, count, dt, op, comm, stream);
    else if (kind == K_REDUCE_SCATTER)
        res = rcc_reduce_scatter_stream(din, dout, count, dt, op, comm, stream);
    else
        res = rcc_allgather_stream(din, dout, count, dt, comm, stream);
    int bad = 0;
    if (res != RCC_SUCCESS || fakedev_stream_sync(stream, 60)) {
        fprintf(stderr, "rank %d: %s: %s: %s\n", rank, kind_names[kind], rcc_result_name(res),
                rcc_last_error(comm));
        bad = 1;
    } else {
        memcpy(got, dout, out_elems * es);
        char what[160];
        snprintf(what, sizeof what, "rank %d of %d: %s of %zu %s %s", rank, n, kind_names[kind],
                 count, rcc_datatype_name(dt), rcc_redop_name(op));
        bad = td_compare(what, got, want, out_elems, dt);
    }
    fakedev_free(din);
    fakedev_free(dout);
    free(in), free(want), free(got);
    return bad;
}

static const rcc_datatype_t dtypes[] = {RCC_FLOAT32, RCC_BFLOAT16, RCC_INT64, RCC_FLOAT16,
                                        RCC_UINT8,   RCC_FLOAT64,  RCC_INT32};

/* Every kind, dtype and op at sizes that cut into several chunks and into
 * ragged ends. Queued at the call (arg NULL, the default): device chunks of
 * 1 MiB fit the 8 MiB receive slots; every receive is reduced in its slot
 * and the sends that forward reductions written by them, all queued on the
 * library's stream at the call (coll/devqueue.c); allreduces and allgathers
 * of 3 MiB write the chunks that land in the next rank's output straight
 * there (windows, window.h), at an address the GPU reads when it runs;
 * no_export (queued too): outputs that cannot be exported keep the slots.
 * The rest run the device ring driven by the progress thread
 * (RCC_DEVICE_PIPELINE=4, pipeline.c): "progress", in place, with windows
 * as well; fragmented: 1 MiB chunks over 64 KiB
 * slots, each large message cut into 16 fragments copied out of the slots,
 * while the small ones still go in place: both kinds on one connection;
 * copied: RCC_CUDAIPC_INPLACE=0, nothing in place. */
static int rank_collectives(int rank, int n, void *arg)
{
    int fragmented = arg && !strcmp(arg, "fragmented"), copied = arg && !strcmp(arg, "copied");
    int no_export = arg && !strcmp(arg, "no_export"), queued = !arg || no_export;
    setenv("RCC_ALGO", "ring", 1); /* the pipelined ring: the path the device ring serves */
    if (!queued)
        setenv("RCC_DEVICE_PIPELINE", "4", 1);
    /* Quick (the instrumented runs): a quarter of the bytes, cut alike. */
    size_t scale = mp_quick() ? 4 : 1;
    setenv("RCC_DEVICE_CHUNK_BYTES", mp_quick() ? "262147" : "1048579", 1);
    /* The large operations (3 MiB, quick 768 KiB) exchange windows. */
    setenv("RCC_CUDAIPC_WINDOW_BYTES", mp_quick() ? "256K" : "1M", 1);
    if (fragmented)
        setenv("RCC_CUDAIPC_SLOT_BYTES", "65536", 1);
    if (copied)
        setenv("RCC_CUDAIPC_INPLACE", "0", 1);
    if (no_export)
        setenv("FAKEDEV_NO_EXPORT", "1", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(60000);
    struct rcc_comm *c = comm;
    if (c->dsend_link.nconns != 1 || c->drecv_link.nconns != 1 ||
        strcmp(c->dsend_link.tr->name, "cudaipc") != 0)
        MP_FAIL("rank %d: no device ring over cudaipc", rank);
    void *stream = fakedev_stream_create();
    int bad = 0;
    unsigned seed = 7;
    for (int kind = 0; kind < K_NKINDS; kind++)
        for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
            rcc_redop_t op = (rcc_redop_t)((d + (size_t)kind) % RCC_NUM_OPS);
            size_t count = (size_t)(3u << 20) / scale / rcc_datatype_size(dtypes[d]) + 3;
            bad |= run_case(comm, stream, rank, n, (kind_t)kind, count, dtypes[d], op, seed++);
            bad |= run_case(comm, stream, rank, n, (kind_t)kind, 5, dtypes[d], op, seed++);
        }
    fakedev_stream_destroy(stream);
    size_t reads = fakedev_slot_reads(), fused = fakedev_fused_sends();
    if (copied ? reads || fused : !fragmented && (!reads || !fused))
        MP_FAIL("rank %d: %zu reductions read their slot, %zu wrote the next rank's: expected %s",
                rank, reads, fused, copied ? "none (RCC_CUDAIPC_INPLACE=0)" : "some of each");
    /* Allreduces and allgathers of 3 MiB exchange windows: in place, chunks
     * go straight into the next rank's output, unless it cannot be exported.
     * Queued, every rank's are (the work is decided at the call); driven by
     * the progress thread, whether a given chunk can go so depends on timing
     * (its send must be the next on the connection), so the ranks' counts
     * are summed. */
    uint64_t direct = c->direct_sends;
    _Atomic uint64_t *total = mp_shared(NULL);
    atomic_fetch_add(total, direct);
    if ((copied || no_export) && direct != 0)
        MP_FAIL("rank %d: %llu chunks written into the next rank's output (expected none)", rank,
                (unsigned long long)direct);
    if (queued && !no_export && direct == 0)
        MP_FAIL("rank %d: no chunk written straight into the next rank's output", rank);
    if (rcc_barrier(comm) != RCC_SUCCESS)
        MP_FAIL("rank %d: barrier: %s", rank, rcc_last_error(comm));
    if (rank == 0 && !queued && !copied && !fragmented && atomic_load(total) == 0)
        MP_FAIL("%d ranks: no chunk was written straight into the next rank's output", n);
    return td_finish(comm, bad);
}

START_TEST(device_ring_collectives)
{
    ck_assert_int_eq(mp_run(_i, rank_collectives, NULL, 300), 0);
}
END_TEST

START_TEST(device_ring_progress_driven)
{
    ck_assert_int_eq(mp_run(3, rank_collectives, "progress", 300), 0);
}
END_TEST

/* Queued, a chunk is one message in one slot: a chunk size larger than
 * the slots fails the init on every rank, naming both settings. */
static int rank_chunk_too_large(int rank, int n, void *arg)
{
    (void)n, (void)arg;
    setenv("RCC_DEVICE_CHUNK_BYTES", "1M", 1);
    setenv("RCC_CUDAIPC_SLOT_BYTES", "65536", 1);
    fakedev_install();
    rcc_config_t config = RCC_CONFIG_INITIALIZER;
    config.timeout_ms = 20000;
    rcc_comm_t comm = NULL;
    rcc_result_t res = rcc_comm_init_env(&comm, &config);
    const char *text = rcc_last_error(NULL);
    if (res != RCC_ERR_INVALID_ARGUMENT || !strstr(text, "RCC_DEVICE_CHUNK_BYTES") ||
        !strstr(text, "RCC_CUDAIPC_SLOT_BYTES"))
        MP_FAIL("rank %d: init gave %s: %s", rank, rcc_result_name(res), text);
    return 0;
}

START_TEST(chunk_larger_than_slot_refused)
{
    ck_assert_int_eq(mp_run(3, rank_chunk_too_large, NULL, 120), 0);
}
END_TEST

START_TEST(device_ring_fragmented)
{
    ck_assert_int_eq(mp_run(3, rank_collectives, "fragmented", 300), 0);
}
END_TEST

START_TEST(device_ring_copied)
{
    ck_assert_int_eq(mp_run(3, rank_collectives, "copied", 300), 0);
}
END_TEST

START_TEST(device_ring_outputs_not_exported)
{
    ck_assert_int_eq(mp_run(3, rank_collectives, "no_export", 300), 0);
}
END_TEST

/* A ring across two "hosts": rank 2 of 4 has a host name of its own (a UTS
 * namespace), so the edges 1->2 and 2->3 are staged through host memory
 * over TCP while 3->0 and 0->1 move GPU to GPU. Chunks must be cut alike
 * on every rank, whichever edges it has, and every kind of collective
 * comes out right. */
static int other_host(void)
{
    return unshare(CLONE_NEWUTS) == 0 && sethostname("ringcc-other-host", 17) == 0 ? 0 : -1;
}

static int rank_two_hosts(int rank, int n, void *arg)
{
    (void)arg;
    if (rank == 2 && other_host())
        MP_FAIL("rank 2: a host name of its own: %s", strerror(errno));
    setenv("RCC_ALGO", "ring", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(60000);
    struct rcc_comm *c = comm;
    int want_send = rank == 3 || rank == 0, want_recv = rank == 0 || rank == 1;
    if ((c->dsend_link.nconns > 0) != want_send || (c->drecv_link.nconns > 0) != want_recv ||
        c->devring_whole)
        MP_FAIL("rank %d: device edges send %d, receive %d, whole %d; expected %d, %d, 0", rank,
                c->dsend_link.nconns, c->drecv_link.nconns, c->devring_whole, want_send,
                want_recv);
    void *stream = fakedev_stream_create();
    int bad = 0;
    unsigned seed = 11;
    for (int kind = 0; kind < K_NKINDS; kind++)
        for (size_t d = 0; d < 3; d++) {
            rcc_redop_t op = (rcc_redop_t)((d + (size_t)kind) % RCC_NUM_OPS);
            /* Segments of 3 MiB, cut alike on every rank (8 chunks of 384 KiB: the ring is
             * not whole), whichever edges a rank has. */
            size_t count = (size_t)(12u << 20) / rcc_datatype_size(dtypes[d]) + 5;
            bad |= run_case(comm, stream, rank, n, (kind_t)kind, count, dtypes[d], op, seed++);
        }
    fakedev_stream_destroy(stream);
    return td_finish(comm, bad);
}

START_TEST(device_ring_across_hosts)
{
    pid_t pid = fork(); /* whether a UTS namespace can be made here at all */
    if (pid == 0)
        _exit(other_host() ? 1 : 0);
    int status = 1;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("SKIP: device_ring_across_hosts: cannot make a UTS namespace (needs "
               "CAP_SYS_ADMIN) to give a rank a host of its own\n");
        return;
    }
    ck_assert_int_eq(mp_run(4, rank_two_hosts, NULL, 300), 0);
}
END_TEST

/* RCC_TRANSPORT=tcp: no device ring; device buffers are staged, with the
 * same results. */
static int rank_forced_tcp(int rank, int n, void *arg)
{
    (void)arg;
    setenv("RCC_TRANSPORT", "tcp", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(60000);
    struct rcc_comm *c = comm;
    if (c->dsend_link.nconns != 0 || c->drecv_link.nconns != 0)
        MP_FAIL("rank %d: a device ring despite RCC_TRANSPORT=tcp", rank);
    void *stream = fakedev_stream_create();
    int bad = run_case(comm, stream, rank, n, K_ALLREDUCE, 300001, RCC_FLOAT32, RCC_SUM, 3);
    fakedev_stream_destroy(stream);
    return td_finish(comm, bad);
}

START_TEST(transport_forced_to_tcp) { ck_assert_int_eq(mp_run(3, rank_forced_tcp, NULL, 120), 0); }
END_TEST

/* The last rank dies while its neighbours map its slots and write into
 * them (ringdeath.h). */
START_TEST(peer_death_while_mapped) { ck_assert_int_eq(ringdeath_run(_i, "cudaipc"), 0); }
END_TEST

/* Rank 1's device cannot map its neighbour's memory: every rank finds out
 * at init, before any connection, and goes without the device ring (a
 * warning on every rank names rank 1 and the reason); device collectives
 * are staged over TCP with the same results. */
static int rank_no_peer_access(int rank, int n, void *arg)
{
    (void)arg;
    if (rank == 1)
        setenv("FAKEDEV_IPC_OPEN_FAILS", "1", 1);
    char log_path[64];
    snprintf(log_path, sizeof log_path, "/tmp/ringcc-nopeer-%d.log", (int)getpid());
    setenv("RCC_DEBUG_FILE", log_path, 1);
    fakedev_install();
    double t0 = td_now_s();
    rcc_comm_t comm = mp_comm(20000);
    struct rcc_comm *c = comm;
    if (c->dsend_link.nconns != 0 || c->drecv_link.nconns != 0)
        MP_FAIL("rank %d: a device ring although rank 1 cannot map its peer's memory", rank);
    if (td_now_s() - t0 > 15)
        MP_FAIL("rank %d: init took %.1f s", rank, td_now_s() - t0);
    void *stream = fakedev_stream_create();
    int bad = run_case(comm, stream, rank, n, K_ALLREDUCE, 300001, RCC_FLOAT32, RCC_SUM, 5);
    fakedev_stream_destroy(stream);
    char text[4096];
    td_take_file(log_path, text, sizeof text);
    if (!strstr(text, "device ring: not made, rank 1 cannot map rank 2's") ||
        !strstr(text, "no peer access"))
        MP_FAIL("rank %d: no warning naming rank 1 and the reason: %s", rank, text);
    return td_finish(comm, bad);
}

START_TEST(no_peer_access_goes_without)
{
    ck_assert_int_eq(mp_run(3, rank_no_peer_access, NULL, 120), 0);
}
END_TEST

/* Rank 1 offers a window that reaches 1 MiB past its allocation (a broken
 * peer): rank 0, which would write into it, refuses with RCC_ERR_REMOTE
 * naming rank 1 and the sizes, before writing anything; the failure
 * reaches every rank, within the timeout, and no stream is left waiting.
 * Queued at the call (arg NULL) and driven by the progress thread; 4 ranks,
 * so that ranks 2 and 3 hops down the ring from rank 0 must fail the
 * operation too, not complete it on what rank 0's queued work ran through
 * with (cudaipc's `aborted` and `open`). */
static int rank_window_too_far(int rank, int n, void *arg)
{
    if (rank == 1)
        setenv("FAKEDEV_EXPORT_OFFSET", "1048576", 1);
    setenv("RCC_ALGO", "ring", 1);
    setenv("RCC_CUDAIPC_WINDOW_BYTES", "1M", 1);
    if (arg)
        setenv("RCC_DEVICE_PIPELINE", "4", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(20000);
    void *stream = fakedev_stream_create();
    size_t count = (3u << 20) / sizeof(float) + 3;
    float *d = fakedev_malloc(count * sizeof *d);
    rcc_result_t res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    if (res == RCC_SUCCESS && fakedev_stream_sync(stream, 25))
        MP_FAIL("rank %d: the stream was left waiting", rank);
    rcc_result_t async = res;
    if (res == RCC_SUCCESS)
        rcc_comm_get_async_error(comm, &async);
    const char *text = rcc_last_error(comm);
    if (async == RCC_SUCCESS)
        MP_FAIL("rank %d: an allreduce into a window past its allocation succeeded", rank);
    if (rank == 0 && (async != RCC_ERR_REMOTE || !strstr(text, "rank 1") ||
                      !strstr(text, "reaches past its allocation")))
        MP_FAIL("rank 0: %s: %s", rcc_result_name(async), text);
    printf("rank %d: %s: %s\n", rank, rcc_result_name(async), text);
    /* After a failure a peer may still map this rank's buffer until its own
     * communicator has ended (it learns of the failure in its own time):
     * the buffer is freed only once every rank has aborted. */
    fakedev_stream_destroy(stream);
    mp_abort_and_wait(comm, n);
    fakedev_free(d);
    return 0;
}

START_TEST(window_past_allocation_refused)
{
    ck_assert_int_eq(mp_run(4, rank_window_too_far, _i % 2 ? "progress" : NULL, 120), 0);
}
END_TEST

static Suite *cudaipc_suite(void)
{
    Suite *s = suite_create("mp_cudaipc");
    TCase *tc = tcase_create("fake_device");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, device_ring_collectives, 2, 6);
    tcase_add_test(tc, device_ring_progress_driven);
    tcase_add_test(tc, chunk_larger_than_slot_refused);
    tcase_add_test(tc, device_ring_fragmented);
    tcase_add_test(tc, device_ring_copied);
    tcase_add_test(tc, device_ring_outputs_not_exported);
    tcase_add_test(tc, device_ring_across_hosts);
    tcase_add_test(tc, transport_forced_to_tcp);
    tcase_add_loop_test(tc, peer_death_while_mapped, 2, 4);
    tcase_add_test(tc, no_peer_access_goes_without);
    tcase_add_loop_test(tc, window_past_allocation_refused, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(cudaipc_suite)
