/*
 * The NCCL shim at work: 1 to 5 real ranks (tests/mp/mp.h) call NCCL's API on host buffers with
 * a NULL stream (ringcc's host path) and check every result against the naive reference of
 * tests/mp/testdata.c: every collective in every dtype and op, odd sizes, in place, groups with
 * fused allreduces and send/recv, PreMulSum, split, nonblocking configs, inits deferred in a
 * group, ncclCommInitAll, a lost peer, and the error paths (each failing call's NCCL code and
 * ncclGetLastError text).
 *
 * Compiled against the real nccl.h where meson found one (SHIM_REAL_NCCL_H), which proves the
 * calls' ABI too; else against the shim's own declarations.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shimtest.h"
#include "testdata.h"

#define TIMEOUT_S 120

/* ---- helpers --------------------------------------------------------------------- */

static size_t esize(ncclDataType_t dt) { return rcc_datatype_size((rcc_datatype_t)dt); }

/* The reference of `op` over all ranks' inputs of operation `seed`. */
static char *reference(size_t start, size_t count, int nranks, unsigned seed, ncclDataType_t dt,
                       ncclRedOp_t op)
{
    char *want = td_galloc(count * esize(dt));
    td_reference(want, start, count, NULL, nranks, seed, (rcc_datatype_t)dt, (rcc_redop_t)op);
    return want;
}

static char *input(size_t start, size_t count, unsigned seed, int rank, ncclDataType_t dt,
                   ncclRedOp_t op)
{
    char *buf = td_galloc(count * esize(dt));
    td_fill(buf, start, count, seed, rank, (rcc_datatype_t)dt, (rcc_redop_t)op);
    return buf;
}

static int verdict(const char *what, char *got, char *want, size_t count, ncclDataType_t dt)
{
    int bad = td_compare(what, got, want, count, (rcc_datatype_t)dt) ||
              !td_guards_intact(got, count * esize(dt));
    td_gfree(got);
    td_gfree(want);
    return bad;
}

/* ---- collectives ----------------------------------------------------------------- */

static int check_allreduce(ncclComm_t comm, int rank, int nranks)
{
    size_t count = 37 + (size_t)nranks * 2; /* odd, and not a multiple of the rank count */
    for (int dt = 0; dt < 10; dt++) {
        for (int op = 0; op < 5; op++) {
            unsigned seed = (unsigned)(dt * 5 + op + 1);
            char *send = input(0, count, seed, rank, dt, op);
            int in_place = (dt + op) % 2;
            char *recv = in_place ? send : td_galloc(count * esize(dt));
            CHECK_NCCL(ncclAllReduce(send, recv, count, dt, op, comm, NULL));
            char what[64];
            snprintf(what, sizeof what, "allreduce dt %d op %d%s", dt, op,
                     in_place ? " in place" : "");
            if (verdict(what, recv, reference(0, count, nranks, seed, dt, op), count, dt))
                return 1;
            if (!in_place)
                td_gfree(send);
        }
    }
    return 0;
}

static int check_reduce_scatter_reduce(ncclComm_t comm, int rank, int nranks)
{
    size_t rc = 13;
    for (int dt = 0; dt < 10; dt++) {
        for (int op = 0; op < 5; op++) {
            unsigned seed = (unsigned)(100 + dt * 5 + op);
            char *send = input(0, rc * (size_t)nranks, seed, rank, dt, op);
            char *recv = td_galloc(rc * esize(dt));
            CHECK_NCCL(ncclReduceScatter(send, recv, rc, dt, op, comm, NULL));
            if (verdict("reduce_scatter", recv,
                        reference(rc * (size_t)rank, rc, nranks, seed, dt, op), rc, dt))
                return 1;
            /* reduce to a root that moves with the case, in place on it */
            int root = (dt + op) % nranks;
            size_t count = rc * (size_t)nranks;
            CHECK_NCCL(
                ncclReduce(send, rank == root ? send : NULL, count, dt, op, root, comm, NULL));
            if (rank == root &&
                verdict("reduce", send, reference(0, count, nranks, seed, dt, op), count, dt))
                return 1;
            if (rank != root)
                td_gfree(send);
        }
    }
    return 0;
}

static int check_data_movement(ncclComm_t comm, int rank, int nranks)
{
    size_t n = (size_t)nranks;
    for (int dt = 0; dt < 10; dt++) {
        unsigned seed = (unsigned)(300 + dt);
        size_t count = 11;
        /* allgather: block r is rank r's input */
        char *send = input(0, count, seed, rank, dt, ncclSum);
        char *recv = td_galloc(count * n * esize(dt));
        CHECK_NCCL(ncclAllGather(send, recv, count, dt, comm, NULL));
        char *want = td_galloc(count * n * esize(dt));
        for (int r = 0; r < nranks; r++)
            td_fill(want + (size_t)r * count * esize(dt), 0, count, seed, r, (rcc_datatype_t)dt,
                    RCC_SUM);
        if (verdict("allgather", recv, want, count * n, dt))
            return 1;
        /* broadcast from the last rank, out of place; ncclBcast from rank 0 */
        int root = nranks - 1;
        recv = td_galloc(count * esize(dt));
        CHECK_NCCL(ncclBroadcast(send, recv, count, dt, root, comm, NULL));
        if (verdict("broadcast", recv, input(0, count, seed, root, dt, ncclSum), count, dt))
            return 1;
        CHECK_NCCL(ncclBcast(send, count, dt, 0, comm, NULL));
        if (verdict("bcast", send, input(0, count, seed, 0, dt, ncclSum), count, dt))
            return 1;
    }
    /* alltoall: block p of rank r's input goes to rank p as block r */
    size_t count = 5;
    ncclDataType_t dt = ncclInt32;
    char *send = input(0, count * n, 400, rank, dt, ncclSum);
    char *recv = td_galloc(count * n * esize(dt));
    CHECK_NCCL(ncclAlltoAll(send, recv, count, dt, comm, NULL));
    char *want = td_galloc(count * n * esize(dt));
    for (int r = 0; r < nranks; r++)
        td_fill(want + (size_t)r * count * esize(dt), (size_t)rank * count, count, 400, r,
                (rcc_datatype_t)dt, RCC_SUM);
    td_gfree(send);
    return verdict("alltoall", recv, want, count * n, dt);
}

/* Gather then scatter back, at a middle root, out of place and in place. */
static int check_gather_scatter(ncclComm_t comm, int rank, int nranks)
{
    size_t n = (size_t)nranks, count = 7;
    int root = nranks / 2;
    ncclDataType_t dt = ncclFloat64;
    for (int in_place = 0; in_place < 2; in_place++) {
        char *all = td_galloc(count * n * esize(dt));
        char *mine = in_place && rank == root ? all + (size_t)root * count * esize(dt)
                                              : td_galloc(count * esize(dt));
        td_fill(mine, 0, count, 500, rank, (rcc_datatype_t)dt, RCC_SUM);
        CHECK_NCCL(ncclGather(mine, all, count, dt, root, comm, NULL));
        if (rank == root) {
            char *want = td_galloc(count * n * esize(dt));
            for (int r = 0; r < nranks; r++)
                td_fill(want + (size_t)r * count * esize(dt), 0, count, 500, r, (rcc_datatype_t)dt,
                        RCC_SUM);
            if (td_compare("gather", all, want, count * n, (rcc_datatype_t)dt))
                return 1;
            td_gfree(want);
            /* scatter back block r + 1 to rank r (a visible permutation) */
            memmove(all, all + count * esize(dt), (n - 1) * count * esize(dt));
            td_fill(all + (n - 1) * count * esize(dt), 0, count, 500, 0, (rcc_datatype_t)dt,
                    RCC_SUM);
        }
        CHECK_NCCL(ncclScatter(all, mine, count, dt, root, comm, NULL));
        char *want = input(0, count, 500, (rank + 1) % nranks, dt, ncclSum);
        if (td_compare("scatter", mine, want, count, (rcc_datatype_t)dt))
            return 1;
        td_gfree(want);
        if (!(in_place && rank == root))
            td_gfree(mine);
        td_gfree(all);
    }
    return 0;
}

/* One group: four allreduces that ringcc fuses, and a ring shift by
 * send/recv that would deadlock outside a group on blocking transports. */
static int check_group(ncclComm_t comm, int rank, int nranks)
{
    enum { K = 4 };
    size_t counts[K] = {1, 17, 255, 3};
    char *bufs[K];
    size_t p2p = 301;
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    char *out = input(0, p2p, 600, rank, ncclUint8, ncclSum);
    char *in = td_galloc(p2p);
    CHECK_NCCL(ncclGroupStart());
    for (int k = 0; k < K; k++) {
        bufs[k] = input(0, counts[k], 610 + (unsigned)k, rank, ncclFloat32, ncclSum);
        CHECK_NCCL(ncclAllReduce(bufs[k], bufs[k], counts[k], ncclFloat32, ncclSum, comm, NULL));
    }
    CHECK_NCCL(ncclSend(out, p2p, ncclUint8, next, comm, NULL));
    CHECK_NCCL(ncclRecv(in, p2p, ncclUint8, prev, comm, NULL));
    CHECK_NCCL(ncclGroupEnd());
    for (int k = 0; k < K; k++)
        if (verdict("grouped allreduce", bufs[k],
                    reference(0, counts[k], nranks, 610 + (unsigned)k, ncclFloat32, ncclSum),
                    counts[k], ncclFloat32))
            return 1;
    td_gfree(out);
    return verdict("grouped send/recv", in, input(0, p2p, 600, prev, ncclUint8, ncclSum), p2p,
                   ncclUint8);
}

/* Sum over ranks r of (r + 1) * x_r, x_r[i] = i % 7 + r, in every dtype
 * (small integers: exact in floats, and integer wrap-around is the same
 * done before or after the truncation). One operator takes its scalar at
 * creation, one (ncclScalarDevice, here host memory) reads it at use. */
static int check_premulsum(ncclComm_t comm, int rank, int nranks)
{
    size_t count = 29;
    if (rcc_cuda_available()) { /* the data could be on a GPU: refused, see premul.c */
        ncclRedOp_t op;
        double s = 2;
        CHECK_NCCL(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat64, ncclScalarHostImmediate, comm));
        EXPECT_FAIL(ncclAllReduce(&s, &s, 1, ncclFloat64, op, comm, NULL), ncclInvalidUsage,
                    "host buffers");
        return 0;
    }
    for (int dt = 0; dt < 10; dt++) {
        for (int residence = 0; residence < 2; residence++) {
            /* HostImmediate: read now, so changing it after must not matter;
             * Device: read at use, so the value set after creation counts. */
            int immediate = residence == ncclScalarHostImmediate;
            char scalar[8];
            td_store(scalar, 0, (rcc_datatype_t)dt, immediate ? rank + 1 : 99);
            ncclRedOp_t op;
            CHECK_NCCL(
                ncclRedOpCreatePreMulSum(&op, scalar, dt, (ncclScalarResidence_t)residence, comm));
            td_store(scalar, 0, (rcc_datatype_t)dt, immediate ? 77 : rank + 1);
            char *send = td_galloc(count * esize(dt)), *recv = td_galloc(count * esize(dt));
            char *want = td_galloc(count * esize(dt));
            for (size_t i = 0; i < count; i++) {
                td_store(send, i, (rcc_datatype_t)dt, (int64_t)(i % 7) + rank);
                int64_t sum = 0;
                for (int r = 0; r < nranks; r++)
                    sum += (r + 1) * ((int64_t)(i % 7) + r);
                td_store(want, i, (rcc_datatype_t)dt, sum);
            }
            /* in a group, so the staging copy must outlive the call */
            CHECK_NCCL(ncclGroupStart());
            CHECK_NCCL(ncclAllReduce(send, recv, count, dt, op, comm, NULL));
            CHECK_NCCL(ncclGroupEnd());
            CHECK_NCCL(ncclRedOpDestroy(op, comm));
            td_gfree(send);
            char what[64];
            snprintf(what, sizeof what, "premulsum allreduce dt %d residence %d", dt, residence);
            if (verdict(what, recv, want, count, dt))
                return 1;
        }
    }
    return 0;
}

/* The same through the other reducing calls: reduce-scatter (int32) and
 * reduce to the last rank (float64), rank r scaling by r + 1. */
static int check_premulsum_rooted(ncclComm_t comm, int rank, int nranks)
{
    if (rcc_cuda_available())
        return 0; /* refused there, as check_premulsum found */
    size_t rc = 9, n = (size_t)nranks * rc;
    int32_t s32 = rank + 1, *in32 = malloc(n * sizeof *in32), out32[9];
    double s64 = rank + 1, *in64 = malloc(n * sizeof *in64), *out64 = malloc(n * sizeof *out64);
    for (size_t i = 0; i < n; i++) {
        in32[i] = (int32_t)(i % 7) + rank;
        in64[i] = (double)(i % 7) + rank;
    }
    ncclRedOp_t op32, op64;
    CHECK_NCCL(ncclRedOpCreatePreMulSum(&op32, &s32, ncclInt32, ncclScalarHostImmediate, comm));
    CHECK_NCCL(ncclRedOpCreatePreMulSum(&op64, &s64, ncclFloat64, ncclScalarHostImmediate, comm));
    CHECK_NCCL(ncclReduceScatter(in32, out32, rc, ncclInt32, op32, comm, NULL));
    int root = nranks - 1;
    CHECK_NCCL(ncclReduce(in64, out64, n, ncclFloat64, op64, root, comm, NULL));
    EXPECT_FAIL(ncclReduce(in64, out64, n, ncclInt64, op64, root, comm, NULL), ncclInvalidArgument,
                "made for datatype");
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t want = 0;
        for (int r = 0; r < nranks; r++)
            want += (r + 1) * ((int64_t)(i % 7) + r);
        size_t mine = i - (size_t)rank * rc;
        if (i / rc == (size_t)rank && out32[mine] != want)
            bad = fprintf(stderr, "premul reduce_scatter [%zu]: %d, want %lld\n", mine, out32[mine],
                          (long long)want);
        if (rank == root && out64[i] != (double)want)
            bad = fprintf(stderr, "premul reduce [%zu]: %g, want %lld\n", i, out64[i],
                          (long long)want);
    }
    CHECK_NCCL(ncclRedOpDestroy(op32, comm));
    CHECK_NCCL(ncclRedOpDestroy(op64, comm));
    EXPECT_FAIL(ncclRedOpDestroy(op64, comm), ncclInvalidArgument, "destroyed");
    free(in32);
    free(in64);
    free(out64);
    return bad != 0;
}

/* Even and odd ranks form two communicators ranked in reverse; rank 4
 * (of 5) takes part with NCCL_SPLIT_NOCOLOR and gets none. */
static int check_split(ncclComm_t comm, int rank, int nranks)
{
    int color = rank == 4 ? NCCL_SPLIT_NOCOLOR : rank % 2;
    ncclComm_t sub = (ncclComm_t)(uintptr_t)1;
    CHECK_NCCL(ncclCommSplit(comm, color, -rank, &sub, NULL));
    if (color == NCCL_SPLIT_NOCOLOR) {
        if (sub != NULL)
            MP_FAIL("NOCOLOR got a communicator");
        return 0;
    }
    int members = 0, above = 0;
    for (int r = 0; r < nranks; r++) {
        if (r == 4 || r % 2 != color)
            continue;
        members++;
        above += r > rank;
    }
    int count = -1, me = -1;
    CHECK_NCCL(ncclCommCount(sub, &count));
    CHECK_NCCL(ncclCommUserRank(sub, &me));
    if (count != members || me != above)
        MP_FAIL("split: size %d rank %d, want %d and %d", count, me, members, above);
    int64_t v = rank, sum = 0;
    CHECK_NCCL(ncclAllReduce(&v, &sum, 1, ncclInt64, ncclSum, sub, NULL));
    int64_t want = 0;
    for (int r = color; r < nranks; r += 2)
        want += r == 4 ? 0 : r;
    if (sum != want)
        MP_FAIL("split allreduce: %lld, want %lld", (long long)sum, (long long)want);
    CHECK_NCCL(ncclCommDestroy(sub));
    return 0;
}

/* Bad calls fail locally with NCCL's code and a text naming the problem;
 * the communicator stays usable. Every rank makes the same calls. */
static int check_errors(ncclComm_t comm, int rank, int nranks)
{
    float x[4] = {1, 2, 3, 4};
    EXPECT_FAIL(ncclAllReduce(x, x, 4, (ncclDataType_t)42, ncclSum, comm, NULL),
                ncclInvalidArgument, "ncclAllReduce");
    EXPECT_FAIL(ncclAllReduce(x, x, 4, ncclFloat32, (ncclRedOp_t)99, comm, NULL),
                ncclInvalidArgument, "op 99");
    EXPECT_FAIL(ncclAllReduce(x, x, 4, ncclFloat8e4m3, ncclSum, comm, NULL), ncclInvalidUsage,
                "float8");
    EXPECT_FAIL(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument,
                "comm is NULL");
    EXPECT_FAIL(ncclBroadcast(x, x, 4, ncclFloat32, nranks, comm, NULL), ncclInvalidArgument,
                "ncclBroadcast");
    EXPECT_FAIL(ncclGather(x, x, 1, ncclFloat32, -1, comm, NULL), ncclInvalidArgument, "root");
    EXPECT_FAIL(ncclSend(x, 4, ncclFloat32, rank, comm, NULL), ncclInvalidUsage, "ncclSend");
    if (!rcc_cuda_available()) /* else ringcc would take it for a real stream */
        EXPECT_FAIL(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, (cudaStream_t)(uintptr_t)8),
                    ncclInvalidUsage, "stream");
    EXPECT_FAIL(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupStart");
    EXPECT_FAIL(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "ncclRedOpDestroy");
    ncclComm_t none = NULL;
    EXPECT_FAIL(ncclCommShrink(comm, &rank, 1, &none, NULL, 0), ncclInvalidUsage, "not supported");
    EXPECT_FAIL(ncclCommRevoke(comm, 0), ncclInvalidUsage, "ncclCommRevoke");
    EXPECT_FAIL(ncclDevCommCreate(comm, NULL, NULL), ncclInvalidUsage, "device");
    void *mem = NULL;
    EXPECT_FAIL(ncclMemAlloc(&mem, 64), ncclInvalidUsage, "CUDA runtime");
    EXPECT_FAIL(ncclCommWindowDeregister(comm, (ncclWindow_t)x), ncclInvalidArgument,
                "not registered");
    ncclWindow_t win = NULL;
    CHECK_NCCL(ncclCommWindowRegister(comm, x, sizeof x, &win, 0));
    CHECK_NCCL(ncclCommWindowDeregister(comm, win));
    void *reg = NULL; /* a ringcc registration underneath, which checks the range */
    EXPECT_FAIL(ncclCommRegister(comm, NULL, 64, &reg), ncclInvalidArgument, "cannot register");
    CHECK_NCCL(ncclCommRegister(comm, x, sizeof x, &reg));
    CHECK_NCCL(ncclCommDeregister(comm, reg));
    /* A simulation of a group with an operation in it is refused and the
     * group stays open; ncclGroupEnd then runs the operation. */
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclGroupSimulateEnd(&sim));
    if (sim.estimatedTime != 0.0f)
        MP_FAIL("an empty group's simulated time is %g", (double)sim.estimatedTime);
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclAllReduce(x, x, 4, ncclFloat32, ncclMax, comm, NULL));
    EXPECT_FAIL(ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "stays open");
    CHECK_NCCL(ncclGroupEnd());
    ncclSimInfo_t bad = sim;
    bad.magic = 1;
    EXPECT_FAIL(ncclGroupSimulateEnd(&bad), ncclInvalidArgument, "NCCL_SIM_INFO_INITIALIZER");
    /* still healthy (asked before the last collective: after it, a rank
     * that ran ahead may have destroyed its communicator, which a probe of
     * the connections sees as a peer gone) */
    ncclResult_t state;
    CHECK_NCCL(ncclCommGetAsyncError(comm, &state));
    if (state != ncclSuccess)
        MP_FAIL("the communicator reports %d after local errors", (int)state);
    int32_t one = 1, total = 0;
    CHECK_NCCL(ncclAllReduce(&one, &total, 1, ncclInt32, ncclSum, comm, NULL));
    if (total != nranks || x[3] != 4)
        MP_FAIL("after the errors: sum %d, max %g", total, (double)x[3]);
    return 0;
}

static int rank_collectives(int rank, int nranks, void *arg)
{
    (void)arg;
    ncclComm_t comm = NULL;
    if (make_comm(rank, nranks, 0, &comm))
        return 1;
    int count = 0, me = -1;
    CHECK_NCCL(ncclCommCount(comm, &count));
    CHECK_NCCL(ncclCommUserRank(comm, &me));
    if (count != nranks || me != rank)
        MP_FAIL("count %d rank %d", count, me);
    if (check_allreduce(comm, rank, nranks) || check_reduce_scatter_reduce(comm, rank, nranks) ||
        check_data_movement(comm, rank, nranks) || check_gather_scatter(comm, rank, nranks) ||
        check_group(comm, rank, nranks) || check_premulsum(comm, rank, nranks) ||
        check_premulsum_rooted(comm, rank, nranks) || check_split(comm, rank, nranks) ||
        check_errors(comm, rank, nranks))
        return 1;
    CHECK_NCCL(ncclCommFinalize(comm));
    ncclResult_t state = ncclInternalError;
    CHECK_NCCL(ncclCommGetAsyncError(comm, &state)); /* others may be gone: still quiescent */
    if (state != ncclSuccess)
        MP_FAIL("a finalized communicator reports %d", (int)state);
    float x = 1;
    EXPECT_FAIL(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidUsage,
                "finalized");
    CHECK_NCCL(ncclCommDestroy(comm));
    EXPECT_FAIL(ncclCommCount(comm, &count), ncclInvalidArgument, "not a live communicator");
    return 0;
}

/* ---- one process, several ranks ---------------------------------------------------- */

/* ncclCommInitAll's ranks, driven from this one thread through groups. */
static int check_init_all(void)
{
    enum { N = 3 };
    ncclComm_t comms[N];
    int devs[N] = {5, 6, 7};
    CHECK_NCCL(ncclCommInitAll(comms, N, devs));
    int64_t v[N], sum[N];
    int32_t ring_out[N], ring_in[N];
    CHECK_NCCL(ncclGroupStart());
    for (int i = 0; i < N; i++) {
        int dev = -1, rank = -1;
        CHECK_NCCL(ncclCommCuDevice(comms[i], &dev));
        CHECK_NCCL(ncclCommUserRank(comms[i], &rank));
        if (dev != devs[i] || rank != i)
            MP_FAIL("InitAll comm %d: device %d rank %d", i, dev, rank);
        v[i] = 10 + i;
        ring_out[i] = 100 + i;
        CHECK_NCCL(ncclAllReduce(&v[i], &sum[i], 1, ncclInt64, ncclSum, comms[i], NULL));
        CHECK_NCCL(ncclSend(&ring_out[i], 1, ncclInt32, (i + 1) % N, comms[i], NULL));
        CHECK_NCCL(ncclRecv(&ring_in[i], 1, ncclInt32, (i + N - 1) % N, comms[i], NULL));
    }
    CHECK_NCCL(ncclGroupEnd());
    for (int i = 0; i < N; i++) {
        if (sum[i] != 33 || ring_in[i] != 100 + (i + N - 1) % N)
            MP_FAIL("InitAll rank %d: sum %lld, received %d", i, (long long)sum[i], ring_in[i]);
        CHECK_NCCL(ncclCommDestroy(comms[i]));
    }
    return 0;
}

/* Inits inside a group wait for ncclGroupEnd (one thread makes two ranks);
 * configs of an older NCCL (a shorter struct) and broken ones. */
static int check_group_init_and_configs(void)
{
    ncclUniqueId id;
    CHECK_NCCL(ncclGetUniqueId(&id));
    ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
    old.size = offsetof(ncclConfig_t, splitShare); /* NCCL 2.14's: up to netName */
    old.blocking = 0;
    ncclComm_t a = NULL, b = NULL;
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclCommInitRankConfig(&a, 2, id, 0, &old));
    CHECK_NCCL(ncclCommInitRank(&b, 2, id, 1));
    ncclResult_t state = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(a, &state));
    if (state != ncclInProgress)
        MP_FAIL("a deferred init reports %d, not ncclInProgress", (int)state);
    float x = 1;
    EXPECT_FAIL(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, a, NULL), ncclInvalidUsage,
                "ncclGroupEnd");
    CHECK_NCCL(ncclGroupEnd());
    CHECK_NCCL(ncclCommGetAsyncError(b, &state));
    if (state != ncclSuccess)
        MP_FAIL("after ncclGroupEnd the init reports %d", (int)state);
    float xa = 2, xb = 5;
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclAllReduce(&xa, &xa, 1, ncclFloat32, ncclProd, a, NULL));
    CHECK_NCCL(ncclAllReduce(&xb, &xb, 1, ncclFloat32, ncclProd, b, NULL));
    CHECK_NCCL(ncclGroupEnd());
    if (xa != 10 || xb != 10)
        MP_FAIL("grouped init: %g %g", (double)xa, (double)xb);
    CHECK_NCCL(ncclCommDestroy(a));
    CHECK_NCCL(ncclCommAbort(b));

    /* ncclCommInitRankScalable (the first id is the rendezvous) with a
     * config from a newer NCCL (a longer struct, unknown fields after). */
    struct {
        ncclConfig_t config;
        int newer_fields[6];
    } newer = {.config = NCCL_CONFIG_INITIALIZER, .newer_fields = {1, 2, 3, 4, 5, 6}};
    newer.config.size = sizeof newer;
    ncclUniqueId ids[2];
    CHECK_NCCL(ncclGetUniqueId(&ids[0]));
    ids[1] = id; /* never used */
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclCommInitRankScalable(&a, 2, 0, 2, ids, &newer.config));
    CHECK_NCCL(ncclCommInitRankScalable(&b, 2, 1, 2, ids, NULL));
    CHECK_NCCL(ncclGroupEnd());
    int ra = -1, rb = -1;
    CHECK_NCCL(ncclCommUserRank(a, &ra));
    CHECK_NCCL(ncclCommUserRank(b, &rb));
    if (ra != 0 || rb != 1)
        MP_FAIL("scalable init: ranks %d and %d", ra, rb);
    CHECK_NCCL(ncclCommDestroy(a));
    CHECK_NCCL(ncclCommDestroy(b));
    EXPECT_FAIL(ncclCommInitRankScalable(&a, 2, 0, 0, ids, NULL), ncclInvalidArgument, "nId 0");

    ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
    ncclComm_t c = NULL;
    bad.magic = 0;
    EXPECT_FAIL(ncclCommInitRankConfig(&c, 1, id, 0, &bad), ncclInvalidArgument,
                "NCCL_CONFIG_INITIALIZER");
    bad = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    bad.blocking = 7;
    EXPECT_FAIL(ncclCommInitRankConfig(&c, 1, id, 0, &bad), ncclInvalidArgument, "blocking");
    EXPECT_FAIL(ncclCommInitRank(&c, 2, id, 2), ncclInvalidArgument, "rank 2");
    if (c != NULL)
        MP_FAIL("a failed init wrote the communicator");
    return 0;
}

static int rank_single_process(int rank, int nranks, void *arg)
{
    (void)rank, (void)nranks, (void)arg;
    return check_init_all() || check_group_init_and_configs();
}

/* ---- a peer lost ------------------------------------------------------------------- */

/* Rank 1 leaves without a word; rank 0's next allreduce fails with
 * ncclRemoteError naming it, and so does the communicator's state. */
static int rank_peer_lost(int rank, int nranks, void *arg)
{
    (void)arg;
    ncclComm_t comm = NULL;
    if (make_comm(rank, nranks, 1, &comm))
        return 1;
    int32_t v = 1;
    CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, NULL));
    if (rank == 1)
        _exit(0);
    usleep(100 * 1000);
    ncclResult_t res = ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, NULL);
    if (res != ncclRemoteError)
        MP_FAIL("allreduce after the peer left: %d (%s)", (int)res, ncclGetLastError(NULL));
    printf("rank 0 saw: %s\n", ncclGetLastError(NULL));
    ncclResult_t state = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(comm, &state));
    if (state != ncclRemoteError)
        MP_FAIL("async error %d, not ncclRemoteError", (int)state);
    ncclCommAbort(comm);
    return 0;
}

/* ---- abort from another thread ------------------------------------------------------ */

typedef struct {
    ncclComm_t comm;
    ncclResult_t res;
    char error[512];
} blocked_call_t;

static void *blocked_allreduce(void *arg)
{
    blocked_call_t *b = arg;
    float x = 1;
    b->res = ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, b->comm, NULL);
    snprintf(b->error, sizeof b->error, "%s", ncclGetLastError(NULL));
    return NULL;
}

/* Rank 0 blocks in an allreduce that rank 1 never joins; another thread
 * aborts the communicator (PyTorch's watchdog does this), and the blocked
 * call returns with the abort named. Rank 1 waits until then. */
static int rank_abort(int rank, int nranks, void *arg)
{
    (void)arg;
    size_t size;
    atomic_int *done = (atomic_int *)((id_area_t *)mp_shared(&size) + 1);
    ncclComm_t comm = NULL;
    if (make_comm(rank, nranks, 2, &comm))
        return 1;
    if (rank == 1) {
        for (int waited = 0; !atomic_load(done) && waited < 60000; waited++)
            usleep(1000);
        ncclCommDestroy(comm); /* its peer is gone: an error is fine */
        return 0;
    }
    blocked_call_t b = {.comm = comm, .res = ncclSuccess};
    pthread_t thread;
    if (pthread_create(&thread, NULL, blocked_allreduce, &b) != 0)
        MP_FAIL("pthread_create");
    usleep(200 * 1000);
    CHECK_NCCL(ncclCommAbort(comm));
    pthread_join(thread, NULL);
    atomic_store(done, 1);
    if (b.res != ncclInvalidUsage || !strstr(b.error, "abort"))
        MP_FAIL("the blocked allreduce returned %d (%s)", (int)b.res, b.error);
    printf("the blocked call saw: %s\n", b.error);
    EXPECT_FAIL(ncclCommAbort(comm), ncclInvalidArgument, "not a live communicator");
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    setenv("RCC_TIMEOUT", "30", 0);
    /* Host buffers with a NULL stream are the blocking host collective where
     * no GPU is usable; with one they would be queued on the GPU's default
     * stream, and the results read too early. (tests/shim/test_shim_stream.c
     * covers the stream path.) */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    int failed = 0;
#ifdef SHIM_REAL_NCCL_H
    printf("compiled against the real nccl.h (NCCL %d)\n", NCCL_VERSION_CODE);
#else
    printf("compiled against the shim's declarations (no nccl.h found)\n");
#endif
    for (int n = 1; n <= 5; n++) {
        int bad = mp_run(n, rank_collectives, NULL, TIMEOUT_S) != 0;
        printf("%s: collectives, groups, premulsum, split, errors on %d ranks\n",
               bad ? "FAIL" : "ok", n);
        failed |= bad;
    }
    int bad = mp_run(1, rank_single_process, NULL, TIMEOUT_S) != 0;
    printf("%s: ncclCommInitAll, inits in a group, configs\n", bad ? "FAIL" : "ok");
    failed |= bad;
    bad = mp_run(2, rank_peer_lost, NULL, TIMEOUT_S) != 0;
    printf("%s: a lost peer is ncclRemoteError\n", bad ? "FAIL" : "ok");
    failed |= bad;
    bad = mp_run(2, rank_abort, NULL, TIMEOUT_S) != 0;
    printf("%s: ncclCommAbort ends a call blocked on another thread\n", bad ? "FAIL" : "ok");
    failed |= bad;
    return failed ? 1 : 0;
}
