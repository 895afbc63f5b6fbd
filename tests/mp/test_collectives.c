/*
 * Reduce-scatter, allgather, broadcast, reduce, barrier and the nonblocking
 * forms across real processes on loopback, for 1 to 5 ranks, checked bit for
 * bit against a naive reference (testdata.c); plus several communicators
 * driven from several threads, and refused arguments.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check_main.h"
#include "mp.h"
#include "testdata.h"

static const size_t rs_counts[] = {0, 1, 2, 7, 13, 1021, 65537}; /* reduce-scatter, allgather */
#define RS_NCOUNTS (sizeof rs_counts / sizeof rs_counts[0])
#define BIG_COUNT ((size_t)3 << 20 | 1)                                /* several chunks, odd */
static const size_t root_counts[] = {0, 1, 3, 1021, 65537, BIG_COUNT}; /* broadcast, reduce */
#define ROOT_NCOUNTS (sizeof root_counts / sizeof root_counts[0])

/* ---- one collective, described as data ------------------------------------- */

enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST, K_REDUCE, K_BARRIER, K_NKINDS };
static const char *const kind_name[] = {"allreduce", "reduce_scatter", "allgather",
                                        "broadcast", "reduce",         "barrier"};

/* Rooted collectives, out-of-place: what non-roots pass. broadcast: a junk
 * sendbuf that must stay unread and unchanged (0), or NULL (1); reduce: NULL
 * recvbuf (0), or a recvbuf that must stay untouched (1). In-place
 * (`inplace`) means sendbuf == recvbuf on every rank. */
typedef struct {
    int kind;
    rcc_datatype_t dt;
    rcc_redop_t op;
    size_t count; /* elements per rank: recvcount, sendcount, or count */
    int root, inplace, variant;
    unsigned seed;
    /* Set by xop_prepare. */
    char *smem, *rmem; /* our allocations, or NULL */
    size_t sbytes, rbytes;
    char *ssnap, *rsnap; /* what smem / rmem must still hold afterwards, or NULL */
    const void *sendbuf;
    void *recvbuf;
    rcc_request_t req;
} xop_t;

static const char *xop_text(char *s, size_t len, const xop_t *x, int rank, int n)
{
    int rooted = x->kind == K_BROADCAST || x->kind == K_REDUCE;
    int reducing = x->kind == K_ALLREDUCE || x->kind == K_REDUCE_SCATTER || x->kind == K_REDUCE;
    char extra[64] = "";
    if (rooted && !x->inplace)
        snprintf(extra, sizeof extra, ", root %d, non-roots pass %s", x->root,
                 x->variant ? (x->kind == K_BROADCAST ? "NULL sendbuf" : "a recvbuf")
                            : (x->kind == K_BROADCAST ? "a sendbuf" : "NULL recvbuf"));
    else if (rooted)
        snprintf(extra, sizeof extra, ", root %d", x->root);
    snprintf(s, len, "rank %d of %d: %s #%u (%zu %s%s%s%s%s)", rank, n, kind_name[x->kind], x->seed,
             x->count, rcc_datatype_name(x->dt), reducing ? " " : "",
             reducing ? rcc_redop_name(x->op) : "", x->inplace ? ", in-place" : "", extra);
    return s;
}

static void xop_prepare(xop_t *x, int rank, int n)
{
    size_t es = rcc_datatype_size(x->dt), c = x->count, bytes = c * es;
    int root = rank == x->root;
    x->smem = x->rmem = x->ssnap = x->rsnap = NULL;
    x->sbytes = x->rbytes = 0;
    x->sendbuf = x->recvbuf = NULL;
    x->req = NULL;
    switch (x->kind) {
    case K_ALLREDUCE:
    case K_REDUCE_SCATTER: {
        size_t elems = x->kind == K_ALLREDUCE ? c : (size_t)n * c;
        x->sbytes = elems * es;
        x->smem = td_galloc(x->sbytes);
        td_fill(x->smem, 0, elems, x->seed, rank, x->dt, x->op);
        x->sendbuf = x->smem;
        if (x->inplace) {
            x->recvbuf = x->kind == K_ALLREDUCE ? x->smem : x->smem + (size_t)rank * bytes;
        } else {
            x->ssnap = td_dup_bytes(x->smem, x->sbytes);
            x->rbytes = bytes;
            x->rmem = td_galloc(bytes);
            memset(x->rmem, TD_UNWRITTEN, bytes);
            x->recvbuf = x->rmem;
        }
        break;
    }
    case K_ALLGATHER:
        x->rbytes = (size_t)n * bytes;
        x->rmem = td_galloc(x->rbytes);
        memset(x->rmem, TD_UNWRITTEN, x->rbytes);
        x->recvbuf = x->rmem;
        if (x->inplace) {
            td_fill(x->rmem + (size_t)rank * bytes, 0, c, x->seed, rank, x->dt, RCC_SUM);
            x->sendbuf = x->rmem + (size_t)rank * bytes;
        } else {
            x->sbytes = bytes;
            x->smem = td_galloc(bytes);
            td_fill(x->smem, 0, c, x->seed, rank, x->dt, RCC_SUM);
            x->ssnap = td_dup_bytes(x->smem, bytes);
            x->sendbuf = x->smem;
        }
        break;
    case K_BROADCAST:
        x->rbytes = bytes;
        x->rmem = td_galloc(bytes);
        memset(x->rmem, TD_UNWRITTEN, bytes);
        x->recvbuf = x->rmem;
        if (x->inplace) {
            if (root)
                td_fill(x->rmem, 0, c, x->seed, rank, x->dt, RCC_SUM);
            x->sendbuf = x->rmem;
        } else if (root || x->variant == 0) {
            /* Non-roots' junk: another operation's data. */
            x->sbytes = bytes;
            x->smem = td_galloc(bytes);
            td_fill(x->smem, 0, c, root ? x->seed : x->seed + 77777u, rank, x->dt, RCC_SUM);
            x->ssnap = td_dup_bytes(x->smem, bytes);
            x->sendbuf = x->smem;
        }
        break;
    case K_REDUCE:
        x->sbytes = bytes;
        x->smem = td_galloc(bytes);
        td_fill(x->smem, 0, c, x->seed, rank, x->dt, x->op);
        x->sendbuf = x->smem;
        if (x->inplace) {
            x->recvbuf = x->smem;
            if (!root) /* recvbuf is written on root only */
                x->ssnap = td_dup_bytes(x->smem, bytes);
        } else {
            x->ssnap = td_dup_bytes(x->smem, bytes);
            if (root || x->variant == 1) {
                x->rbytes = bytes;
                x->rmem = td_galloc(bytes);
                memset(x->rmem, TD_UNWRITTEN, bytes);
                x->recvbuf = x->rmem;
                if (!root)
                    x->rsnap = td_dup_bytes(x->rmem, bytes);
            }
        }
        break;
    case K_BARRIER: break;
    }
}

/* Issues the operation, blocking or not (then x->req). */
/* The stream form with a NULL stream, where no CUDA device is usable: the
 * blocking host collective (barrier has no stream form). */
static rcc_result_t xop_issue_stream(xop_t *x, rcc_comm_t comm)
{
    switch (x->kind) {
    case K_ALLREDUCE:
        return rcc_allreduce_stream(x->sendbuf, x->recvbuf, x->count, x->dt, x->op, comm, NULL);
    case K_REDUCE_SCATTER:
        return rcc_reduce_scatter_stream(x->sendbuf, x->recvbuf, x->count, x->dt, x->op, comm,
                                         NULL);
    case K_ALLGATHER:
        return rcc_allgather_stream(x->sendbuf, x->recvbuf, x->count, x->dt, comm, NULL);
    case K_BROADCAST:
        return rcc_broadcast_stream(x->sendbuf, x->recvbuf, x->count, x->dt, x->root, comm, NULL);
    case K_REDUCE:
        return rcc_reduce_stream(x->sendbuf, x->recvbuf, x->count, x->dt, x->op, x->root, comm,
                                 NULL);
    default: return rcc_barrier(comm);
    }
}

static rcc_result_t xop_issue(xop_t *x, rcc_comm_t comm, int blocking)
{
    rcc_request_t *rq = blocking ? NULL : &x->req;
    if (blocking == 2)
        return xop_issue_stream(x, comm);
    switch (x->kind) {
    case K_ALLREDUCE:
        return blocking ? rcc_allreduce(x->sendbuf, x->recvbuf, x->count, x->dt, x->op, comm)
                        : rcc_iallreduce(x->sendbuf, x->recvbuf, x->count, x->dt, x->op, comm, rq);
    case K_REDUCE_SCATTER:
        return blocking
                   ? rcc_reduce_scatter(x->sendbuf, x->recvbuf, x->count, x->dt, x->op, comm)
                   : rcc_ireduce_scatter(x->sendbuf, x->recvbuf, x->count, x->dt, x->op, comm, rq);
    case K_ALLGATHER:
        return blocking ? rcc_allgather(x->sendbuf, x->recvbuf, x->count, x->dt, comm)
                        : rcc_iallgather(x->sendbuf, x->recvbuf, x->count, x->dt, comm, rq);
    case K_BROADCAST:
        return blocking
                   ? rcc_broadcast(x->sendbuf, x->recvbuf, x->count, x->dt, x->root, comm)
                   : rcc_ibroadcast(x->sendbuf, x->recvbuf, x->count, x->dt, x->root, comm, rq);
    case K_REDUCE:
        return blocking
                   ? rcc_reduce(x->sendbuf, x->recvbuf, x->count, x->dt, x->op, x->root, comm)
                   : rcc_ireduce(x->sendbuf, x->recvbuf, x->count, x->dt, x->op, x->root, comm, rq);
    default: return blocking ? rcc_barrier(comm) : rcc_ibarrier(comm, rq);
    }
}

/* Compares `count` elements of got with want; prints the first difference
 * under the operation's description and `what`. */
static int compare(const char *what, const char *got, const char *want, size_t count,
                   rcc_datatype_t dt, const xop_t *x, int rank, int n)
{
    char d[200], desc[320];
    snprintf(desc, sizeof desc, "%s: %s", xop_text(d, sizeof d, x, rank, n), what);
    return td_compare(desc, got, want, count, dt);
}

/* Checks the results of a completed operation; 0 when right. */
static int xop_check(const xop_t *x, int rank, int n)
{
    size_t es = rcc_datatype_size(x->dt), c = x->count, bytes = c * es;
    int bad = 0;
    char *want = NULL;
    char d[200];
    switch (x->kind) {
    case K_ALLREDUCE:
    case K_REDUCE_SCATTER:
        want = malloc(bytes + 1);
        td_reference(want, x->kind == K_ALLREDUCE ? 0 : (size_t)rank * c, c, NULL, n, x->seed,
                     x->dt, x->op);
        bad |= compare("recvbuf", x->recvbuf, want, c, x->dt, x, rank, n);
        break;
    case K_ALLGATHER:
        want = malloc(x->rbytes + 1);
        for (int r = 0; r < n; r++)
            td_fill(want + (size_t)r * bytes, 0, c, x->seed, r, x->dt, RCC_SUM);
        bad |= compare("recvbuf", x->recvbuf, want, (size_t)n * c, x->dt, x, rank, n);
        break;
    case K_BROADCAST:
        want = malloc(bytes + 1);
        td_fill(want, 0, c, x->seed, x->root, x->dt, RCC_SUM);
        bad |= compare("recvbuf", x->recvbuf, want, c, x->dt, x, rank, n);
        break;
    case K_REDUCE:
        if (rank == x->root) {
            want = malloc(bytes + 1);
            td_reference(want, 0, c, NULL, n, x->seed, x->dt, x->op);
            bad |= compare("recvbuf", x->recvbuf, want, c, x->dt, x, rank, n);
        }
        break;
    }
    if (x->ssnap && !bad)
        bad |= compare("sendbuf (must stay unchanged)", x->smem, x->ssnap, x->sbytes / es, x->dt, x,
                       rank, n);
    if (x->rsnap && !bad)
        bad |= compare("non-root recvbuf (must stay untouched)", x->rmem, x->rsnap, x->rbytes / es,
                       x->dt, x, rank, n);
    if ((x->smem && !td_guards_intact(x->smem, x->sbytes)) ||
        (x->rmem && !td_guards_intact(x->rmem, x->rbytes))) {
        fprintf(stderr, "%s: wrote outside its buffers\n", xop_text(d, sizeof d, x, rank, n));
        bad = 1;
    }
    free(want);
    return bad;
}

static void xop_free(xop_t *x)
{
    td_gfree(x->smem), td_gfree(x->rmem);
    free(x->ssnap), free(x->rsnap);
    x->smem = x->rmem = x->ssnap = x->rsnap = NULL;
}

/* Prepares, runs (blocking), checks and frees one operation. Returns 0 when
 * right, 1 for a wrong result, -1 when the call failed (the communicator
 * may be unusable: callers stop). */
/* mode: 1 the blocking call, 2 its stream form with a NULL stream. */
static int run_one_as(rcc_comm_t comm, xop_t *x, int rank, int n, int mode)
{
    xop_prepare(x, rank, n);
    rcc_result_t res = xop_issue(x, comm, mode);
    int bad;
    if (res != RCC_SUCCESS) {
        char d[200];
        fprintf(stderr, "%s failed: %s: %s\n", xop_text(d, sizeof d, x, rank, n),
                rcc_result_name(res), rcc_last_error(comm));
        bad = -1;
    } else {
        bad = xop_check(x, rank, n);
    }
    xop_free(x);
    return bad;
}

static int run_one(rcc_comm_t comm, xop_t *x, int rank, int n)
{
    return run_one_as(comm, x, rank, n, 1);
}

/* ---- reduce-scatter: every dtype x op x size, in-place and not ---------------- */

static int rank_reduce_scatter(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    int bad = 0;
    unsigned seed = 1;
    for (int dt = 0; dt < RCC_NUM_DATATYPES; dt++)
        for (int op = 0; op < RCC_NUM_OPS; op++)
            for (size_t c = 0; c < RS_NCOUNTS; c++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    xop_t x = {.kind = K_REDUCE_SCATTER,
                               .dt = dt,
                               .op = op,
                               .count = rs_counts[c],
                               .inplace = inplace,
                               .seed = seed++};
                    int r = run_one(comm, &x, rank, n);
                    if (r < 0)
                        return 1;
                    bad |= r;
                }
    return td_finish(comm, bad);
}

START_TEST(reduce_scatter) { ck_assert_int_eq(mp_run(_i, rank_reduce_scatter, NULL, 300), 0); }
END_TEST

/* ---- allgather: every dtype x size, in-place and not -------------------------- */

static int rank_allgather(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    int bad = 0;
    unsigned seed = 1;
    for (int dt = 0; dt < RCC_NUM_DATATYPES; dt++)
        for (size_t c = 0; c < RS_NCOUNTS; c++)
            for (int inplace = 0; inplace < 2; inplace++) {
                xop_t x = {.kind = K_ALLGATHER,
                           .dt = dt,
                           .count = rs_counts[c],
                           .inplace = inplace,
                           .seed = seed++};
                int r = run_one(comm, &x, rank, n);
                if (r < 0)
                    return 1;
                bad |= r;
            }
    return td_finish(comm, bad);
}

START_TEST(allgather) { ck_assert_int_eq(mp_run(_i, rank_allgather, NULL, 300), 0); }
END_TEST

/* ---- broadcast: every root, a few dtypes and sizes, three argument shapes ----- */

static int rank_broadcast(int rank, int n, void *arg)
{
    (void)arg;
    static const rcc_datatype_t dts[] = {RCC_UINT8, RCC_BFLOAT16, RCC_INT32, RCC_FLOAT64};
    rcc_comm_t comm = mp_comm(60000);
    int bad = 0;
    unsigned seed = 1;
    for (int root = 0; root < n; root++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (size_t c = 0; c < ROOT_NCOUNTS; c++)
                for (int shape = 0; shape < 3; shape++) {
                    /* The largest size once per (root, dtype), rotating the
                     * shape, to keep the run short. */
                    if (root_counts[c] == BIG_COUNT && shape != (int)(root + d) % 3)
                        continue;
                    xop_t x = {.kind = K_BROADCAST,
                               .dt = dts[d],
                               .count = mp_scaled(root_counts[c]),
                               .root = root,
                               .inplace = shape == 2,
                               .variant = shape & 1,
                               .seed = seed++};
                    int r = run_one(comm, &x, rank, n);
                    if (r < 0)
                        return 1;
                    bad |= r;
                }
    return td_finish(comm, bad);
}

START_TEST(broadcast) { ck_assert_int_eq(mp_run(_i, rank_broadcast, NULL, 300), 0); }
END_TEST

/* ---- reduce: every root and op, a few dtypes and sizes, three shapes ---------- */

static int rank_reduce(int rank, int n, void *arg)
{
    (void)arg;
    static const rcc_datatype_t dts[] = {RCC_INT32, RCC_FLOAT32, RCC_BFLOAT16, RCC_UINT8};
    rcc_comm_t comm = mp_comm(60000);
    int bad = 0;
    unsigned seed = 1;
    for (int root = 0; root < n; root++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (int op = 0; op < RCC_NUM_OPS; op++)
                for (size_t c = 0; c < ROOT_NCOUNTS; c++)
                    for (int shape = 0; shape < 3; shape++) {
                        /* The largest size once per (root, dtype), rotating
                         * the op and the shape. */
                        if (root_counts[c] == BIG_COUNT &&
                            (op != (int)(root + d) % RCC_NUM_OPS || shape != (int)(root + d) % 3))
                            continue;
                        xop_t x = {.kind = K_REDUCE,
                                   .dt = dts[d],
                                   .op = op,
                                   .count = mp_scaled(root_counts[c]),
                                   .root = root,
                                   .inplace = shape == 2,
                                   .variant = shape & 1,
                                   .seed = seed++};
                        int r = run_one(comm, &x, rank, n);
                        if (r < 0)
                            return 1;
                        bad |= r;
                    }
    return td_finish(comm, bad);
}

START_TEST(reduce) { ck_assert_int_eq(mp_run(_i, rank_reduce, NULL, 300), 0); }
END_TEST

/* ---- barrier: nobody leaves before everybody entered -------------------------- */

#define NBARRIERS 100

typedef struct {
    _Atomic double entered[64]; /* seconds on CLOCK_MONOTONIC, shared by the ranks */
    atomic_int arrived[NBARRIERS];
} barrier_area_t;

static int rank_barrier(int rank, int n, void *arg)
{
    (void)arg;
    barrier_area_t *area = mp_shared(NULL);
    rcc_comm_t comm = mp_comm(60000);
    usleep((useconds_t)rank * 50000);
    atomic_store(&area->entered[rank], td_now_s());
    rcc_result_t res = rcc_barrier(comm);
    double left = td_now_s();
    if (res != RCC_SUCCESS)
        MP_FAIL("barrier: %s: %s", rcc_result_name(res), rcc_last_error(comm));
    for (int r = 0; r < n; r++) {
        double e = atomic_load(&area->entered[r]);
        if (e == 0 || e > left)
            MP_FAIL("rank %d left the barrier at %.6f, before rank %d entered (%.6f)", rank, left,
                    r, e);
    }
    /* Back to back: each barrier's arrivals are all counted when it returns. */
    for (int k = 0; k < NBARRIERS; k++) {
        atomic_fetch_add(&area->arrived[k], 1);
        res = rcc_barrier(comm);
        if (res != RCC_SUCCESS)
            MP_FAIL("barrier %d: %s: %s", k, rcc_result_name(res), rcc_last_error(comm));
        int a = atomic_load(&area->arrived[k]);
        if (a != n)
            MP_FAIL("barrier %d returned with %d of %d ranks arrived", k, a, n);
    }
    return td_finish(comm, 0);
}

START_TEST(barrier) { ck_assert_int_eq(mp_run(_i, rank_barrier, NULL, 120), 0); }
END_TEST

/* ---- nonblocking: many operations in flight, completed in any order ----------- */

/* Operation k of a mixed sequence: every kind, dtype and op, small to medium
 * sizes (and 0), rotating roots and argument shapes. */
static void mixed_spec(xop_t *x, int k, int n, unsigned seed_base)
{
    static const size_t counts[] = {0, 1, 3, 64, 1021, 4099, 20011};
    memset(x, 0, sizeof *x);
    x->kind = k % K_NKINDS;
    x->dt = (rcc_datatype_t)((k * 3 + k / 6) % RCC_NUM_DATATYPES);
    x->op = (rcc_redop_t)((k * 7 + k / 5) % RCC_NUM_OPS);
    x->count = counts[(size_t)(k * 11 + k / 7) % (sizeof counts / sizeof counts[0])];
    x->root = (k + k / 6) % n;
    int shape = (k / 6 + k / 2) % 3;
    x->inplace = shape == 2;
    x->variant = shape & 1;
    x->seed = seed_base + (unsigned)k;
}

static unsigned lcg(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xFFFFFF;
}

#define NOPS 64

static int rank_nonblocking(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    char d[200];

    /* A NULL request is complete. */
    rcc_request_t none = NULL;
    int done = 0;
    rcc_result_t res = rcc_test(&none, &done);
    if (res != RCC_SUCCESS || !done || none)
        MP_FAIL("rcc_test(NULL request): %s, done %d", rcc_result_name(res), done);
    if ((res = rcc_wait(&none)) != RCC_SUCCESS)
        MP_FAIL("rcc_wait(NULL request): %s", rcc_result_name(res));

    /* 64 operations back to back, each with its own buffers. */
    xop_t *ops = calloc(NOPS, sizeof *ops);
    for (int k = 0; k < NOPS; k++) {
        mixed_spec(&ops[k], k, n, 100);
        xop_prepare(&ops[k], rank, n);
        res = xop_issue(&ops[k], comm, 0);
        if (res != RCC_SUCCESS)
            MP_FAIL("%s: issue: %s: %s", xop_text(d, sizeof d, &ops[k], rank, n),
                    rcc_result_name(res), rcc_last_error(comm));
    }

    /* Completed in an order of this rank's own. */
    int perm[NOPS];
    unsigned s = 12345u + (unsigned)rank * 7919u;
    for (int k = 0; k < NOPS; k++)
        perm[k] = k;
    for (int k = NOPS - 1; k > 0; k--) {
        int j = (int)(lcg(&s) % (unsigned)(k + 1)), t = perm[k];
        perm[k] = perm[j], perm[j] = t;
    }
    /* Half with rcc_wait. */
    for (int j = 0; j < NOPS / 2; j++) {
        xop_t *x = &ops[perm[j]];
        res = rcc_wait(&x->req);
        if (res != RCC_SUCCESS)
            MP_FAIL("%s: rcc_wait: %s: %s", xop_text(d, sizeof d, x, rank, n), rcc_result_name(res),
                    rcc_last_error(comm));
        if (x->req)
            MP_FAIL("%s: rcc_wait left the request set", xop_text(d, sizeof d, x, rank, n));
    }
    /* A quarter by polling rcc_test. */
    double deadline = td_now_s() + 60;
    for (int pending = NOPS / 4; pending > 0;) {
        pending = 0;
        for (int j = NOPS / 2; j < NOPS * 3 / 4; j++) {
            xop_t *x = &ops[perm[j]];
            if (!x->req)
                continue;
            done = -1;
            res = rcc_test(&x->req, &done);
            if (res != RCC_SUCCESS)
                MP_FAIL("%s: rcc_test: %s: %s", xop_text(d, sizeof d, x, rank, n),
                        rcc_result_name(res), rcc_last_error(comm));
            if (done != 0 && done != 1)
                MP_FAIL("rcc_test set done to %d", done);
            if (done && x->req)
                MP_FAIL("%s: rcc_test reported done but left the request set",
                        xop_text(d, sizeof d, x, rank, n));
            if (!done && !x->req)
                MP_FAIL("%s: rcc_test cleared the request but reported not done",
                        xop_text(d, sizeof d, x, rank, n));
            pending += !done;
        }
        if (pending && td_now_s() > deadline)
            MP_FAIL("%d operations still not done after 60 s of rcc_test", pending);
        if (pending)
            usleep(200);
    }
    /* The rest with one rcc_wait_all, an already-complete NULL among them. */
    rcc_request_t batch[NOPS / 4 + 1];
    for (int j = 0; j < NOPS / 4; j++)
        batch[j] = ops[perm[NOPS * 3 / 4 + j]].req;
    batch[NOPS / 4] = NULL;
    res = rcc_wait_all(NOPS / 4 + 1, batch);
    if (res != RCC_SUCCESS)
        MP_FAIL("rcc_wait_all: %s: %s", rcc_result_name(res), rcc_last_error(comm));
    for (int j = 0; j <= NOPS / 4; j++)
        if (batch[j])
            MP_FAIL("rcc_wait_all left request %d set", j);
    for (int j = 0; j < NOPS / 4; j++)
        ops[perm[NOPS * 3 / 4 + j]].req = NULL;

    int bad = 0;
    for (int k = 0; k < NOPS; k++) {
        bad |= xop_check(&ops[k], rank, n);
        xop_free(&ops[k]);
    }
    free(ops);
    return td_finish(comm, bad);
}

START_TEST(nonblocking_mixed) { ck_assert_int_eq(mp_run(_i, rank_nonblocking, NULL, 300), 0); }
END_TEST

/* ---- two communicators, two threads at once ------------------------------------ */

typedef struct {
    rcc_comm_t comm;
    int rank, n; /* in this communicator */
    int mp_rank;
    unsigned seed_base;
    int first; /* communicator a: the first operation, held back on rank 0 */
    atomic_int *a_first_issued, *b_phase1_done;
    int bad;
} thread_job_t;

/* Issues ops [k0, k0 + count) of the mixed sequence, waits for them (in
 * reverse order, or all at once), checks them. */
static int run_batch(thread_job_t *job, int k0, int count, int wait_all)
{
    xop_t ops[16];
    rcc_request_t reqs[16];
    char d[200];
    int bad = 0;
    for (int j = 0; j < count; j++) {
        mixed_spec(&ops[j], k0 + j, job->n, job->seed_base);
        xop_prepare(&ops[j], job->rank, job->n);
        rcc_result_t res = xop_issue(&ops[j], job->comm, 0);
        if (res != RCC_SUCCESS) {
            fprintf(stderr, "%s: issue: %s: %s\n",
                    xop_text(d, sizeof d, &ops[j], job->rank, job->n), rcc_result_name(res),
                    rcc_last_error(job->comm));
            return 1;
        }
    }
    if (wait_all) {
        for (int j = 0; j < count; j++)
            reqs[j] = ops[j].req;
        rcc_result_t res = rcc_wait_all(count, reqs);
        if (res != RCC_SUCCESS) {
            fprintf(stderr, "rank %d: rcc_wait_all: %s: %s\n", job->rank, rcc_result_name(res),
                    rcc_last_error(job->comm));
            return 1;
        }
        for (int j = 0; j < count; j++)
            ops[j].req = NULL;
    } else {
        for (int j = count - 1; j >= 0; j--) {
            rcc_result_t res = rcc_wait(&ops[j].req);
            if (res != RCC_SUCCESS) {
                fprintf(stderr, "%s: rcc_wait: %s: %s\n",
                        xop_text(d, sizeof d, &ops[j], job->rank, job->n), rcc_result_name(res),
                        rcc_last_error(job->comm));
                return 1;
            }
        }
    }
    for (int j = 0; j < count; j++) {
        bad |= xop_check(&ops[j], job->rank, job->n);
        xop_free(&ops[j]);
    }
    return bad;
}

static void *thread_main(void *arg)
{
    thread_job_t *job = arg;
    if (job->first) {
        /* On communicator a, rank 0 joins the first operation only after its
         * other thread has finished a batch on communicator b, which needs
         * every rank's b: the other ranks' pending operation on a must not
         * hold up their b. */
        if (job->mp_rank == 0) {
            double deadline = td_now_s() + 30;
            while (!atomic_load(job->b_phase1_done)) {
                if (td_now_s() > deadline) {
                    fprintf(stderr, "rank 0: communicator b made no progress while "
                                    "communicator a had an operation pending\n");
                    job->bad = 1;
                    return NULL;
                }
                usleep(1000);
            }
        }
        xop_t x = {.kind = K_ALLREDUCE, .dt = RCC_INT32, .op = RCC_SUM, .count = 1000, .seed = 9};
        xop_prepare(&x, job->rank, job->n);
        rcc_result_t res = xop_issue(&x, job->comm, 0);
        atomic_store(job->a_first_issued, 1);
        if (res == RCC_SUCCESS)
            res = rcc_wait(&x.req);
        if (res != RCC_SUCCESS) {
            fprintf(stderr, "rank %d: first allreduce on a: %s: %s\n", job->rank,
                    rcc_result_name(res), rcc_last_error(job->comm));
            job->bad = 1;
            return NULL;
        }
        job->bad |= xop_check(&x, job->rank, job->n);
        xop_free(&x);
    } else {
        /* Elsewhere b's batch starts once a's operation is queued (and has
         * had a moment to reach the progress thread). */
        if (job->mp_rank != 0) {
            while (!atomic_load(job->a_first_issued))
                usleep(1000);
            usleep(20000);
        }
        job->bad |= run_batch(job, 0, 12, 1);
        atomic_store(job->b_phase1_done, 1);
    }
    /* Then both threads at full speed. */
    for (int round = 0; round < 4 && !job->bad; round++)
        job->bad |= run_batch(job, 12 + round * 12, 12, round & 1);
    return NULL;
}

static int rank_two_threads(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t a = mp_comm(20000), b;
    rcc_unique_id_t id;
    if (mp_bcast_unique_id(rank, 0, &id) != RCC_SUCCESS)
        MP_FAIL("unique id: %s", rcc_last_error(NULL));
    rcc_config_t config = RCC_CONFIG_INITIALIZER;
    config.timeout_ms = 20000;
    int rb = (rank + 1) % n; /* b numbers the ranks differently */
    if (rcc_comm_init_rank(&b, n, id, rb, &config) != RCC_SUCCESS)
        MP_FAIL("init_rank: %s", rcc_last_error(NULL));
    atomic_int a_first_issued = 0, b_phase1_done = 0;
    thread_job_t ja = {.comm = a,
                       .rank = rank,
                       .n = n,
                       .mp_rank = rank,
                       .seed_base = 2000,
                       .first = 1,
                       .a_first_issued = &a_first_issued,
                       .b_phase1_done = &b_phase1_done};
    thread_job_t jb = {.comm = b,
                       .rank = rb,
                       .n = n,
                       .mp_rank = rank,
                       .seed_base = 3000,
                       .a_first_issued = &a_first_issued,
                       .b_phase1_done = &b_phase1_done};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, thread_main, &ja);
    pthread_create(&tb, NULL, thread_main, &jb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    int bad = td_finish(a, ja.bad);
    bad |= td_finish(b, jb.bad);
    return bad;
}

START_TEST(two_comms_two_threads) { ck_assert_int_eq(mp_run(_i, rank_two_threads, NULL, 180), 0); }
END_TEST

/* ---- two threads on one communicator: a blocking send and a blocking
 * receive, each larger than the sockets hold. Neither may wait for the
 * other (the first to start runs on its caller's thread, and must let the
 * second run beside it). ------------------------------------------------- */

typedef struct {
    rcc_comm_t comm;
    int peer, is_send;
    uint8_t *buf;
    size_t bytes;
    rcc_result_t res;
} one_way_t;

static void *one_way_main(void *arg)
{
    one_way_t *w = arg;
    w->res = w->is_send ? rcc_send(w->buf, w->bytes, RCC_UINT8, w->peer, w->comm)
                        : rcc_recv(w->buf, w->bytes, RCC_UINT8, w->peer, w->comm);
    return NULL;
}

static int rank_send_recv_threads(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(30000);
    size_t bytes = 16u << 20; /* more than the sockets hold: not scaled in quick mode */
    int peer = rank ^ 1;
    uint8_t *out = malloc(bytes), *in = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        out[i] = (uint8_t)(i * 7 + (size_t)rank);
    int bad = 0;
    if (peer < n) {
        one_way_t s = {comm, peer, 1, out, bytes, RCC_SUCCESS};
        one_way_t r = {comm, peer, 0, in, bytes, RCC_SUCCESS};
        pthread_t ts, tr;
        /* The send first, so that it is the one running inline. */
        pthread_create(&ts, NULL, one_way_main, &s);
        usleep(20000);
        pthread_create(&tr, NULL, one_way_main, &r);
        pthread_join(ts, NULL);
        pthread_join(tr, NULL);
        if (s.res != RCC_SUCCESS || r.res != RCC_SUCCESS)
            MP_FAIL("send %s, recv %s: %s", rcc_result_name(s.res), rcc_result_name(r.res),
                    rcc_last_error(comm));
        for (size_t i = 0; i < bytes && !bad; i++)
            if (in[i] != (uint8_t)(i * 7 + (size_t)peer))
                bad = 1;
        if (bad)
            MP_FAIL("the received bytes are wrong");
    }
    free(out), free(in);
    rcc_comm_destroy(comm);
    return bad;
}

START_TEST(send_recv_two_threads)
{
    ck_assert_int_eq(mp_run(_i, rank_send_recv_threads, NULL, 120), 0);
}
END_TEST

/* ---- refused arguments ------------------------------------------------------------ */

/* The call must fail with RCC_ERR_INVALID_ARGUMENT and a message that
 * contains `needle`. */
#define EXPECT_INVALID(call, needle)                                                               \
    do {                                                                                           \
        rcc_result_t res_ = (call);                                                                \
        const char *want_ = (needle);                                                              \
        if (res_ != RCC_ERR_INVALID_ARGUMENT || !strstr(rcc_last_error(comm), want_))              \
            MP_FAIL("rank %d: %s: %s / '%s' (expected RCC_ERR_INVALID_ARGUMENT / '%s')", rank,     \
                    #call, rcc_result_name(res_), rcc_last_error(comm), want_);                    \
    } while (0)

static int rank_bad_args(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    float buf[256] = {0}, *mine = buf + rank * 4; /* 4 elements per rank */
    int root = n - 1, is_root = rank == root;
    size_t huge = SIZE_MAX / sizeof(float) / (size_t)n + 1; /* n * huge floats overflow */

    /* reduce-scatter */
    EXPECT_INVALID(rcc_reduce_scatter(NULL, buf, 4, RCC_FLOAT32, RCC_SUM, comm), "sendbuf is NULL");
    EXPECT_INVALID(rcc_reduce_scatter(buf, NULL, 4, RCC_FLOAT32, RCC_SUM, comm), "recvbuf is NULL");
    EXPECT_INVALID(rcc_reduce_scatter(buf, buf + 128, 4, 42, RCC_SUM, comm), "datatype 42");
    EXPECT_INVALID(rcc_reduce_scatter(buf, buf + 128, 4, RCC_FLOAT32, 9, comm), "op 9");
    EXPECT_INVALID(rcc_reduce_scatter(buf, mine + 1, 4, RCC_FLOAT32, RCC_SUM, comm), "overlap");
    EXPECT_INVALID(rcc_reduce_scatter(buf, buf + 128, huge, RCC_FLOAT32, RCC_SUM, comm),
                   "overflow");
    /* allgather */
    EXPECT_INVALID(rcc_allgather(NULL, buf + 128, 4, RCC_FLOAT32, comm), "sendbuf is NULL");
    EXPECT_INVALID(rcc_allgather(buf, NULL, 4, RCC_FLOAT32, comm), "recvbuf is NULL");
    EXPECT_INVALID(rcc_allgather(buf + 128, buf, 4, 42, comm), "datatype 42");
    EXPECT_INVALID(rcc_allgather(mine + 1, buf, 4, RCC_FLOAT32, comm), "overlap");
    EXPECT_INVALID(rcc_allgather(buf + 128, buf, huge, RCC_FLOAT32, comm), "overflow");
    /* broadcast; where only root's arguments are wrong, the others pass a
     * NULL recvbuf so that every rank refuses the call */
    EXPECT_INVALID(rcc_broadcast(buf, buf + 128, 4, RCC_FLOAT32, -1, comm), "root");
    EXPECT_INVALID(rcc_broadcast(buf, buf + 128, 4, RCC_FLOAT32, n, comm), "root");
    EXPECT_INVALID(rcc_broadcast(buf, buf + 128, 4, 42, 0, comm), "datatype 42");
    EXPECT_INVALID(rcc_broadcast(buf, NULL, 4, RCC_FLOAT32, root, comm), "recvbuf is NULL");
    EXPECT_INVALID(rcc_broadcast(NULL, is_root ? buf : NULL, 4, RCC_FLOAT32, root, comm),
                   is_root ? "sendbuf is NULL" : "recvbuf is NULL");
    EXPECT_INVALID(rcc_broadcast(buf + 1, is_root ? buf : NULL, 4, RCC_FLOAT32, root, comm),
                   is_root ? "overlap" : "recvbuf is NULL");
    /* reduce; where only root's arguments are wrong, the others pass a NULL
     * sendbuf */
    EXPECT_INVALID(rcc_reduce(buf, buf + 128, 4, RCC_FLOAT32, RCC_SUM, -1, comm), "root");
    EXPECT_INVALID(rcc_reduce(buf, buf + 128, 4, RCC_FLOAT32, RCC_SUM, n, comm), "root");
    EXPECT_INVALID(rcc_reduce(buf, buf + 128, 4, 42, RCC_SUM, 0, comm), "datatype 42");
    EXPECT_INVALID(rcc_reduce(buf, buf + 128, 4, RCC_FLOAT32, 9, 0, comm), "op 9");
    EXPECT_INVALID(rcc_reduce(NULL, buf + 128, 4, RCC_FLOAT32, RCC_SUM, root, comm),
                   "sendbuf is NULL");
    EXPECT_INVALID(rcc_reduce(is_root ? buf : NULL, NULL, 4, RCC_FLOAT32, RCC_SUM, root, comm),
                   is_root ? "recvbuf is NULL" : "sendbuf is NULL");
    EXPECT_INVALID(rcc_reduce(is_root ? buf : NULL, buf + 1, 4, RCC_FLOAT32, RCC_SUM, root, comm),
                   is_root ? "overlap" : "sendbuf is NULL");
    /* nonblocking forms: no request pointer; a refused call sets *req NULL */
    EXPECT_INVALID(rcc_iallreduce(buf, buf, 4, RCC_FLOAT32, RCC_SUM, comm, NULL), "req");
    EXPECT_INVALID(rcc_ireduce_scatter(buf, buf + 128, 4, RCC_FLOAT32, RCC_SUM, comm, NULL), "req");
    EXPECT_INVALID(rcc_iallgather(buf + 128, buf, 4, RCC_FLOAT32, comm, NULL), "req");
    EXPECT_INVALID(rcc_ibroadcast(buf, buf, 4, RCC_FLOAT32, 0, comm, NULL), "req");
    EXPECT_INVALID(rcc_ireduce(buf, buf, 4, RCC_FLOAT32, RCC_SUM, 0, comm, NULL), "req");
    EXPECT_INVALID(rcc_ibarrier(comm, NULL), "req");
    int dummy;
    rcc_request_t req = (rcc_request_t)(void *)&dummy;
    EXPECT_INVALID(rcc_ireduce(buf, buf, 4, RCC_FLOAT32, RCC_SUM, n, comm, &req), "root");
    if (req)
        MP_FAIL("a refused rcc_ireduce left *req set");
    req = (rcc_request_t)(void *)&dummy;
    EXPECT_INVALID(rcc_ireduce_scatter(NULL, buf, 4, RCC_FLOAT32, RCC_SUM, comm, &req),
                   "sendbuf is NULL");
    if (req)
        MP_FAIL("a refused rcc_ireduce_scatter left *req set");
    /* no communicator */
    if (rcc_barrier(NULL) != RCC_ERR_INVALID_ARGUMENT || !strstr(rcc_last_error(NULL), "comm"))
        MP_FAIL("rcc_barrier(NULL): '%s'", rcc_last_error(NULL));
    if (rcc_broadcast(buf, buf, 4, RCC_FLOAT32, 0, NULL) != RCC_ERR_INVALID_ARGUMENT)
        MP_FAIL("rcc_broadcast with a NULL comm accepted");
    if (rcc_reduce_scatter(buf, buf, 4, RCC_FLOAT32, RCC_SUM, NULL) != RCC_ERR_INVALID_ARGUMENT)
        MP_FAIL("rcc_reduce_scatter with a NULL comm accepted");
    /* count 0 needs no buffers */
    rcc_result_t res;
    if ((res = rcc_reduce_scatter(NULL, NULL, 0, RCC_FLOAT32, RCC_SUM, comm)) != RCC_SUCCESS ||
        (res = rcc_allgather(NULL, NULL, 0, RCC_FLOAT32, comm)) != RCC_SUCCESS ||
        (res = rcc_broadcast(NULL, NULL, 0, RCC_FLOAT32, 0, comm)) != RCC_SUCCESS ||
        (res = rcc_reduce(NULL, NULL, 0, RCC_FLOAT32, RCC_SUM, 0, comm)) != RCC_SUCCESS)
        MP_FAIL("count 0 with NULL buffers: %s: %s", rcc_result_name(res), rcc_last_error(comm));

    /* The communicator still works after refused calls. */
    int bad = 0;
    for (int kind = 0; kind < K_NKINDS; kind++) {
        xop_t x = {.kind = kind,
                   .dt = RCC_INT32,
                   .op = RCC_SUM,
                   .count = 1001,
                   .root = n - 1,
                   .seed = 5u + (unsigned)kind};
        int r = run_one(comm, &x, rank, n);
        if (r < 0)
            return 1;
        bad |= r;
    }
    if (td_finish(comm, bad))
        return 1;

    /* A destroyed communicator is refused, by every kind of call, without
     * touching its freed memory (ASan and memcheck runs would report it). */
    rcc_comm_t dead = comm;
    int dsize = 0;
    rcc_result_t async = RCC_SUCCESS;
    rcc_comm_t child = NULL;
    rcc_request_t dreq = NULL;
    EXPECT_INVALID(rcc_allreduce(buf, buf, 4, RCC_FLOAT32, RCC_SUM, dead), "not a live");
    EXPECT_INVALID(rcc_iallgather(buf, buf + 128, 4, RCC_FLOAT32, dead, &dreq), "not a live");
    EXPECT_INVALID(rcc_send(buf, 4, RCC_FLOAT32, 0, dead), "not a live");
    EXPECT_INVALID(rcc_comm_size(dead, &dsize), "not a live");
    EXPECT_INVALID(rcc_comm_get_async_error(dead, &async), "not a live");
    EXPECT_INVALID(rcc_comm_split(dead, 0, 0, &child), "not a live");
    EXPECT_INVALID(rcc_comm_destroy(dead), "rcc_comm_destroy");
    EXPECT_INVALID(rcc_comm_abort(dead), "rcc_comm_abort");
    if (dreq || child)
        MP_FAIL("rank %d: a refused call on a destroyed communicator set its output", rank);
    return 0;
}

START_TEST(bad_arguments) { ck_assert_int_eq(mp_run(_i, rank_bad_args, NULL, 120), 0); }
END_TEST

/* ---- a rank that leaves cleanly ------------------------------------------------ */

/* The last rank destroys its communicator after a barrier. The others'
 * idle communicators stay healthy (rcc_comm_get_async_error: success), and
 * their next allreduce fails at once with RCC_ERR_PEER_LOST saying that it
 * left (its ring neighbours got its goodbye; a rank that only finds its
 * listener closed says it left or died), rather than hanging. */
static int rank_goodbye(int rank, int n, void *arg)
{
    (void)arg;
    atomic_int *left = mp_shared(NULL), *checked = left + 1;
    rcc_comm_t comm = mp_comm(20000);
    rcc_result_t res = rcc_barrier(comm);
    if (res != RCC_SUCCESS)
        MP_FAIL("rank %d: barrier: %s", rank, rcc_last_error(comm));
    if (rank == n - 1) {
        if (rcc_comm_destroy(comm) != RCC_SUCCESS)
            MP_FAIL("rank %d: destroy: %s", rank, rcc_last_error(NULL));
        atomic_store(left, 1);
        return 0;
    }
    while (!atomic_load(left))
        usleep(1000);
    usleep(100000); /* its goodbye and close reach us */
    rcc_result_t async = RCC_SUCCESS;
    if (rcc_comm_get_async_error(comm, &async) != RCC_SUCCESS || async != RCC_SUCCESS)
        MP_FAIL("rank %d: a peer that left cleanly broke the idle communicator: %s: %s", rank,
                rcc_result_name(async), rcc_last_error(comm));
    atomic_fetch_add(checked, 1); /* before anyone's allreduce fails and tells its peers */
    while (atomic_load(checked) < n - 1)
        usleep(1000);
    float x = 1;
    double t0 = td_now_s();
    res = rcc_allreduce(&x, &x, 1, RCC_FLOAT32, RCC_SUM, comm);
    double took = td_now_s() - t0;
    const char *why = rcc_last_error(comm);
    if (res != RCC_ERR_PEER_LOST ||
        (!strstr(why, "destroyed its communicator") && !strstr(why, "left or died")))
        MP_FAIL("rank %d: allreduce without the rank that left: %s: '%s'", rank,
                rcc_result_name(res), rcc_last_error(comm));
    if (took > 10)
        MP_FAIL("rank %d: the allreduce took %.1f s to fail", rank, took);
    rcc_comm_destroy(comm);
    return 0;
}

START_TEST(peer_left_cleanly) { ck_assert_int_eq(mp_run(_i, rank_goodbye, NULL, 120), 0); }
END_TEST

/* ---- the stream forms where no CUDA device is usable ------------------------- */

/* A NULL stream runs the host collective (checked like the blocking call,
 * every kind and an odd count); any other stream is refused with the reason,
 * and the communicator is unharmed. On a machine with a device the stream
 * forms are asynchronous and tests/gpu covers them. */
static int rank_stream_host(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    if (rcc_cuda_available()) {
        printf("rank %d: a CUDA device is usable; the stream forms are tested in tests/gpu\n",
               rank);
        return td_finish(comm, 0);
    }
    int bad = 0;
    float buf[8] = {0};
    int fake_stream;
    rcc_result_t res = rcc_allreduce_stream(buf, buf, 8, RCC_FLOAT32, RCC_SUM, comm, &fake_stream);
    if (res != RCC_ERR_UNSUPPORTED || !strstr(rcc_last_error(NULL), "stream"))
        MP_FAIL("a non-NULL stream without CUDA: %s: '%s'", rcc_result_name(res),
                rcc_last_error(NULL));
    res = rcc_send_stream(buf, 8, RCC_FLOAT32, 0, comm, &fake_stream);
    if (res != RCC_ERR_UNSUPPORTED)
        MP_FAIL("rcc_send_stream with a stream without CUDA: %s", rcc_result_name(res));
    res = rcc_allreduce_stream(buf, buf, 8, (rcc_datatype_t)99, RCC_SUM, comm, NULL);
    if (res != RCC_ERR_INVALID_ARGUMENT || !strstr(rcc_last_error(comm), "rcc_allreduce_stream"))
        MP_FAIL("a bad dtype on the stream form: %s: '%s'", rcc_result_name(res),
                rcc_last_error(comm));
    for (int kind = 0; kind < K_NKINDS; kind++)
        for (int dt = 0; dt < RCC_NUM_DATATYPES; dt += 3) {
            xop_t x = {.kind = kind,
                       .dt = dt,
                       .op = (rcc_redop_t)(kind % RCC_NUM_OPS),
                       .count = 1001,
                       .root = n - 1,
                       .seed = 40u + (unsigned)(kind * 16 + dt)};
            int r = run_one_as(comm, &x, rank, n, 2);
            if (r < 0)
                return 1;
            bad |= r;
        }
    /* send/recv forms around the ring, in a group so that no order deadlocks. */
    if (n > 1) {
        int out[3] = {rank, rank * 7, -rank}, in[3] = {0};
        rcc_group_start();
        rcc_send_stream(out, 3, RCC_INT32, (rank + 1) % n, comm, NULL);
        rcc_recv_stream(in, 3, RCC_INT32, (rank + n - 1) % n, comm, NULL);
        res = rcc_group_end();
        int from = (rank + n - 1) % n;
        if (res != RCC_SUCCESS || in[0] != from || in[1] != from * 7 || in[2] != -from)
            MP_FAIL("send/recv stream forms: %s: got %d %d %d from rank %d", rcc_result_name(res),
                    in[0], in[1], in[2], from);
    }
    return td_finish(comm, bad);
}

START_TEST(stream_forms_host) { ck_assert_int_eq(mp_run(_i, rank_stream_host, NULL, 120), 0); }
END_TEST

static Suite *collectives_suite(void)
{
    Suite *s = suite_create("mp_collectives");
    TCase *tc = tcase_create("correctness");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, reduce_scatter, 1, 6);
    tcase_add_loop_test(tc, allgather, 1, 6);
    tcase_add_loop_test(tc, broadcast, 1, 6);
    tcase_add_loop_test(tc, reduce, 1, 6);
    tcase_add_loop_test(tc, barrier, 1, 6);
    tcase_add_loop_test(tc, nonblocking_mixed, 1, 6);
    tcase_add_loop_test(tc, two_comms_two_threads, 1, 6);
    tcase_add_loop_test(tc, send_recv_two_threads, 2, 5);
    suite_add_tcase(s, tc);
    TCase *errors = tcase_create("errors");
    tcase_set_timeout(errors, 300);
    tcase_add_loop_test(errors, bad_arguments, 1, 6);
    tcase_add_loop_test(errors, stream_forms_host, 1, 6);
    tcase_add_loop_test(errors, peer_left_cleanly, 2, 6);
    suite_add_tcase(s, errors);
    return s;
}

RCC_TEST_MAIN(collectives_suite)
