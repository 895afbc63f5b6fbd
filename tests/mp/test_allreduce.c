/*
 * Allreduce across real processes on loopback, checked element by element
 * against a naive reduction (testdata.c), for 1 to 5 ranks, every dtype and
 * op, odd and prime sizes, in-place and out-of-place; plus failure cases.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "../check_main.h"
#include "mp.h"
#include "testdata.h"

static const size_t test_counts[] = {0, 1, 2, 3, 5, 7, 13, 97, 1021, 65537, 262147};
#define NCOUNTS (sizeof test_counts / sizeof test_counts[0])

/* Input element i of rank r: td_gen with seed 0 (the seed term vanishes,
 * so these are the values this file has always used), checked against
 * td_reference. */
#define AR_SEED 0u

/* One allreduce checked against the reference: `given`, or else computed
 * here; 0 when right. */
static int check_against(rcc_comm_t comm, int rank, int n, size_t count, rcc_datatype_t dt,
                         rcc_redop_t op, int inplace, const char *given)
{
    size_t es = rcc_datatype_size(dt), bytes = count * es;
    char *in = malloc(bytes + 1), *out = malloc(bytes + 1), *ref = given ? NULL : malloc(bytes + 1);
    td_fill(in, 0, count, AR_SEED, rank, dt, op);
    char *orig = malloc(bytes + 1);
    memcpy(orig, in, bytes);
    memset(out, 0xA5, bytes);
    rcc_result_t res = rcc_allreduce(in, inplace ? in : out, count, dt, op, comm);
    if (res != RCC_SUCCESS) {
        fprintf(stderr, "rank %d: allreduce(%zu %s %s%s) failed: %s: %s\n", rank, count,
                rcc_datatype_name(dt), rcc_redop_name(op), inplace ? " in-place" : "",
                rcc_strerror(res), rcc_last_error(comm));
        return 1;
    }
    if (ref)
        td_reference(ref, 0, count, NULL, n, AR_SEED, dt, op);
    const char *got = inplace ? in : out, *want = given ? given : ref;
    int bad = 0;
    for (size_t i = 0; i < count && !bad; i++) {
        if (memcmp(got + i * es, want + i * es, es) != 0) {
            fprintf(stderr, "rank %d of %d: allreduce(%zu %s %s%s): element %zu wrong\n", rank, n,
                    count, rcc_datatype_name(dt), rcc_redop_name(op), inplace ? " in-place" : "",
                    i);
            bad = 1;
        }
    }
    if (!inplace && memcmp(in, orig, bytes) != 0) {
        fprintf(stderr, "rank %d: out-of-place allreduce wrote into sendbuf\n", rank);
        bad = 1;
    }
    free(in), free(out), free(ref), free(orig);
    return bad;
}

static int check_one(rcc_comm_t comm, int rank, int n, size_t count, rcc_datatype_t dt,
                     rcc_redop_t op, int inplace)
{
    return check_against(comm, rank, n, count, dt, op, inplace, NULL);
}

/* ---- every dtype x op x size, in-place and not ----------------------------- */

static int rank_all_types(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    int size;
    rcc_comm_size(comm, &size);
    if (size != n)
        MP_FAIL("rcc_comm_size %d, expected %d", size, n);
    int bad = 0;
    size_t ncounts = NCOUNTS - (mp_quick() ? 1 : 0); /* quick: up to 65537 */
    for (int dt = 0; dt < RCC_NUM_DATATYPES; dt++)
        for (int op = 0; op < RCC_NUM_OPS; op++)
            for (size_t c = 0; c < ncounts; c++)
                for (int inplace = 0; inplace < 2; inplace++)
                    bad |= check_one(comm, rank, n, test_counts[c], dt, op, inplace);
    rcc_comm_destroy(comm);
    return bad;
}

START_TEST(all_types_ops_sizes)
{
    int n = _i; /* 1..5 ranks */
    ck_assert_int_eq(mp_run(n, rank_all_types, NULL, 600), 0);
}
END_TEST

/* ---- 64 MiB, several chunk sizes ------------------------------------------- */

/* check_against at 64 MiB, with the reference computed once for all ranks: each
 * rank computes its 1/n of it into memory the ranks share (the naive
 * reference costs n passes over the inputs, five times the allreduce at 5
 * ranks on this machine's 2 cores), and every rank then checks its whole
 * output against all of it. The barriers keep a slice from being read
 * before it is written or overwritten before all have read it. */
static int check_large(rcc_comm_t comm, int rank, int n, size_t count, rcc_datatype_t dt,
                       rcc_redop_t op, int inplace, char *shared_ref)
{
    size_t es = rcc_datatype_size(dt);
    size_t start = count * (size_t)rank / (size_t)n, end = count * (size_t)(rank + 1) / (size_t)n;
    td_reference(shared_ref + start * es, start, end - start, NULL, n, AR_SEED, dt, op);
    if (rcc_barrier(comm) != RCC_SUCCESS)
        MP_FAIL("barrier: %s", rcc_last_error(comm));
    int bad = check_against(comm, rank, n, count, dt, op, inplace, shared_ref);
    if (rcc_barrier(comm) != RCC_SUCCESS)
        MP_FAIL("barrier: %s", rcc_last_error(comm));
    return bad;
}

#define LARGE_REF_BYTES ((64u << 20) + 16)

static int rank_large(int rank, int n, void *arg)
{
    char *shared_ref = arg;
    rcc_comm_t comm = mp_comm(120000);
    size_t count = mp_scaled((64u << 20) / 4);
    int bad = check_large(comm, rank, n, count, RCC_FLOAT32, RCC_SUM, 0, shared_ref);
    bad |= check_large(comm, rank, n, count, RCC_FLOAT32, RCC_MAX, 1, shared_ref);
    bad |= check_large(comm, rank, n, mp_scaled((64u << 20) / 2 + 7), RCC_BFLOAT16, RCC_AVG, 0,
                       shared_ref);
    rcc_comm_destroy(comm);
    return bad;
}

START_TEST(large_64mib)
{
    /* mapped before the ranks fork: they all share it */
    char *shared_ref =
        mmap(NULL, LARGE_REF_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(shared_ref, MAP_FAILED);
    ck_assert_int_eq(mp_run(_i, rank_large, shared_ref, 600), 0);
    munmap(shared_ref, LARGE_REF_BYTES);
}
END_TEST

/* A communicator of 64-byte chunks: many items per step, slot reuse, window limits. */
static int init_tiny_chunks(rcc_comm_t *comm)
{
    rcc_config_t config = RCC_CONFIG_INITIALIZER;
    config.chunk_bytes = 64;
    config.timeout_ms = 60000;
    if (rcc_comm_init_env(comm, &config) != RCC_SUCCESS)
        MP_FAIL("init: %s", rcc_last_error(NULL));
    return 0;
}

static int rank_small_chunks(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm;
    if (init_tiny_chunks(&comm))
        return 1;
    int bad = 0;
    for (size_t c = 0; c < NCOUNTS - 1; c++)
        bad |= check_one(comm, rank, n, test_counts[c], RCC_INT32, RCC_SUM, c & 1);
    bad |= check_one(comm, rank, n, 4099, RCC_FLOAT16, RCC_PROD, 0);
    bad |= check_one(comm, rank, n, 4099, RCC_FLOAT64, RCC_MIN, 1);
    rcc_comm_destroy(comm);
    return bad;
}

START_TEST(small_chunks) { ck_assert_int_eq(mp_run(_i, rank_small_chunks, NULL, 300), 0); }
END_TEST

/* ---- the ring in many passes ------------------------------------------------- */

static int rank_ring_passes(int rank, int n, void *arg)
{
    (void)arg;
    /* Parameters are read once per process: set before the communicator. The
     * smallest pass (1 byte) takes the floor, 8 chunks per rank: with 64-byte
     * chunks a 65537-element buffer on 3 ranks runs in over a hundred passes;
     * quick runs (verbsim, sanitizers) stop at 4099 elements, 3 to 32 passes:
     * the thousands of 64-byte messages of the largest took 30 s on verbsim. */
    setenv("RCC_ALGO", "ring", 1);
    setenv("RCC_RING_PASS_BYTES", "1", 1);
    rcc_comm_t comm;
    if (init_tiny_chunks(&comm))
        return 1;
    static const size_t counts[] = {1, 1021, 4099, 65537};
    static const rcc_datatype_t dts[] = {RCC_INT32, RCC_BFLOAT16, RCC_FLOAT64};
    size_t ncounts = sizeof counts / sizeof counts[0] - (mp_quick() ? 1 : 0);
    int bad = 0;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (int op = 0; op < RCC_NUM_OPS; op++)
            for (size_t c = 0; c < ncounts; c++)
                bad |= check_one(comm, rank, n, counts[c], dts[d], op, (int)(c + d) & 1);
    rcc_comm_destroy(comm);
    return bad;
}

START_TEST(ring_passes) { ck_assert_int_eq(mp_run(_i, rank_ring_passes, NULL, 300), 0); }
END_TEST

/* ---- 1,000 back-to-back small allreduces ------------------------------------ */

static int rank_back_to_back(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    for (int k = 0; k < 1000; k++) {
        int64_t v[7], expect = 0;
        size_t count = 1 + (size_t)k % 7;
        for (size_t i = 0; i < count; i++)
            v[i] = (int64_t)k * 1000 + rank * 10 + (int64_t)i;
        for (int r = 0; r < n; r++)
            expect += (int64_t)k * 1000 + r * 10;
        if (rcc_allreduce(v, v, count, RCC_INT64, RCC_SUM, comm) != RCC_SUCCESS)
            MP_FAIL("allreduce %d: %s", k, rcc_last_error(comm));
        for (size_t i = 0; i < count; i++)
            if (v[i] != expect + n * (int64_t)i)
                MP_FAIL("allreduce %d element %zu: %lld, expected %lld", k, i, (long long)v[i],
                        (long long)(expect + n * (int64_t)i));
    }
    rcc_comm_destroy(comm);
    return 0;
}

START_TEST(back_to_back_1000) { ck_assert_int_eq(mp_run(_i, rank_back_to_back, NULL, 300), 0); }
END_TEST

/* ---- two communicators used alternately ------------------------------------- */

static int rank_two_comms(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t a = mp_comm(60000), b;
    rcc_unique_id_t id;
    if (mp_bcast_unique_id(rank, 0, &id) != RCC_SUCCESS)
        MP_FAIL("unique id: %s", rcc_last_error(NULL));
    /* The second communicator numbers ranks in reverse. */
    if (rcc_comm_init_rank(&b, n, id, n - 1 - rank, NULL) != RCC_SUCCESS)
        MP_FAIL("init_rank: %s", rcc_last_error(NULL));
    int rb;
    rcc_comm_rank(b, &rb);
    if (rb != n - 1 - rank)
        MP_FAIL("rank in b is %d", rb);
    for (int k = 0; k < 100; k++) {
        int bad = check_one(a, rank, n, 1 + (size_t)k * 37, RCC_INT32, RCC_SUM, 0);
        bad |= check_one(b, rb, n, 1 + (size_t)k * 53, RCC_FLOAT32, RCC_MAX, k & 1);
        if (bad)
            MP_FAIL("iteration %d", k);
    }
    rcc_comm_destroy(a);
    rcc_comm_destroy(b);
    return 0;
}

START_TEST(two_communicators) { ck_assert_int_eq(mp_run(_i, rank_two_comms, NULL, 300), 0); }
END_TEST

/* ---- random floats: every rank ends with the same bits ---------------------- */

static uint64_t digest(const void *buf, size_t bytes)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = buf;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Whether every rank's digest equals this one's (ranks share `digests`). */
static int same_everywhere(rcc_comm_t comm, uint64_t *digests, int rank, int n, uint64_t h)
{
    digests[rank] = h;
    float one = 1;
    rcc_allreduce(&one, &one, 1, RCC_FLOAT32, RCC_SUM, comm); /* all digests written */
    int same = 1;
    for (int r = 0; r < n; r++)
        same &= digests[r] == h;
    rcc_allreduce(&one, &one, 1, RCC_FLOAT32, RCC_SUM, comm); /* all digests read */
    return same;
}

/* arg: the algorithm forced (RCC_ALGO), or NULL for auto at a size that
 * takes the ring. */
static int rank_identical_bits(int rank, int n, void *arg)
{
    if (arg)
        setenv("RCC_ALGO", arg, 1);
    rcc_comm_t comm = mp_comm(60000);
    size_t count = arg ? 5003 : 1000003;
    float *x = malloc(count * sizeof *x);
    double *exact = calloc(count, sizeof *exact);
    for (int r = 0; r < n; r++) {
        srand(1234 + (unsigned)r);
        for (size_t i = 0; i < count; i++) {
            float v = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
            exact[i] += v;
            if (r == rank)
                x[i] = v;
        }
    }
    if (rcc_allreduce(x, x, count, RCC_FLOAT32, RCC_SUM, comm) != RCC_SUCCESS)
        MP_FAIL("allreduce: %s", rcc_last_error(comm));
    for (size_t i = 0; i < count; i++)
        if (fabs(x[i] - exact[i]) > 1e-5 * n)
            MP_FAIL("element %zu: %g vs %g", i, x[i], exact[i]);
    uint64_t *digests = mp_shared(NULL);
    if (!same_everywhere(comm, digests, rank, n, digest(x, count * sizeof *x)))
        MP_FAIL("the ranks' float32 sums differ");
    /* NaNs with a different payload on every rank: which payload survives
     * depends on the order of the operands, which must not differ. */
    for (int op = 0; op < RCC_NUM_OPS; op++) {
        uint16_t h16[7];
        for (int i = 0; i < 7; i++)
            h16[i] = (uint16_t)(i % 2 ? 0x7e00 | (rank * 7 + i) : 0x3c00 + rank);
        if (rcc_allreduce(h16, h16, 7, RCC_FLOAT16, op, comm) != RCC_SUCCESS)
            MP_FAIL("float16 allreduce: %s", rcc_last_error(comm));
        if (!same_everywhere(comm, digests, rank, n, digest(h16, sizeof h16)))
            MP_FAIL("the ranks' float16 %s results with NaNs differ", rcc_redop_name(op));
    }
    rcc_comm_destroy(comm);
    free(x), free(exact);
    return 0;
}

START_TEST(identical_bits)
{
    ck_assert_int_eq(mp_run(_i, rank_identical_bits, NULL, 300), 0);
    ck_assert_int_eq(mp_run(_i, rank_identical_bits, "direct", 300), 0);
    ck_assert_int_eq(mp_run(_i, rank_identical_bits, "rd", 300), 0);
    ck_assert_int_eq(mp_run(_i, rank_identical_bits, "rabenseifner", 300), 0);
    ck_assert_int_eq(mp_run(_i, rank_identical_bits, "twostep", 300), 0);
    ck_assert_int_eq(mp_run(_i, rank_identical_bits, "star", 300), 0);
}
END_TEST

/* ---- each algorithm forced ---------------------------------------------------- */

static int rank_algorithms(int rank, int n, void *arg)
{
    /* Parameters are read once per process: set before the communicator. */
    setenv("RCC_ALGO", arg, 1);
    rcc_comm_t comm = mp_comm(60000);
    static const size_t counts[] = {1, 3, 1021, 65537};
    static const rcc_datatype_t dts[] = {RCC_INT8, RCC_FLOAT16, RCC_FLOAT32, RCC_BFLOAT16,
                                         RCC_UINT64};
    int bad = 0;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (int op = 0; op < RCC_NUM_OPS; op++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                bad |= check_one(comm, rank, n, counts[c], dts[d], op, (int)c & 1);
    rcc_comm_destroy(comm);
    return bad;
}

START_TEST(ring_algorithm_forced) { ck_assert_int_eq(mp_run(_i, rank_algorithms, "ring", 300), 0); }
END_TEST

START_TEST(rabenseifner_algorithm_forced)
{
    ck_assert_int_eq(mp_run(_i, rank_algorithms, "rabenseifner", 300), 0);
}
END_TEST

START_TEST(twostep_algorithm_forced)
{
    ck_assert_int_eq(mp_run(_i, rank_algorithms, "twostep", 300), 0);
}
END_TEST

START_TEST(rd_algorithm_forced) { ck_assert_int_eq(mp_run(_i, rank_algorithms, "rd", 300), 0); }
END_TEST

/* Recursive doubling among fewer leaders than ranks (arg: RCC_RD_LEADERS):
 * groups of 1 to 8 ranks fold into their last rank. */
static int rank_rd_leaders(int rank, int n, void *arg)
{
    setenv("RCC_RD_LEADERS", arg, 1);
    if (rank_algorithms(rank, n, "rd"))
        MP_FAIL("RCC_RD_LEADERS=%s: wrong results", (char *)arg);
    return rank_identical_bits(rank, n, "rd");
}

/* Leaders that follow the CPUs (RCC_RD_MOVE_LEADERS, on by default): the
 * ranks pin themselves to two CPUs, first so that recursive doubling's two
 * leaders share one, then in other placements, operation after operation.
 * Every result must be right, and a float32 sum of random values must have
 * the same bits whoever leads; the last rank, a leader from the start, must
 * log the move. */
#define MOVE_PLACEMENTS 12

/* Placement k: rank r on CPU 0 or 1 of the two (0: the two first leaders
 * on CPU 0, the rest on 1; then a mix from k and r). */
static int move_cpu(int k, int r, int n)
{
    if (k == 0)
        return r == (n + 1) / 2 - 1 || r == n - 1 ? 0 : 1; /* the leaders of 2 groups */
    return (int)(((unsigned)(k * 2654435761u) ^ (unsigned)(r * 40503u)) >> 7 & 1);
}

/* This rank's log: RCC_DEBUG at `level` for the coll subsystem, into
 * logdir/rankN.log, whose path goes to `path`. Before the communicator. */
static void log_coll_to(const char *logdir, int rank, const char *level, char *path, size_t size)
{
    snprintf(path, size, "%s/rank%d.log", logdir, rank);
    setenv("RCC_DEBUG", level, 1);
    setenv("RCC_DEBUG_SUBSYS", "coll", 1);
    setenv("RCC_DEBUG_FILE", path, 1);
}

static int rank_rd_moving(int rank, int n, void *arg)
{
    char path[256];
    log_coll_to(arg, rank, "TRACE", path, sizeof path);
    setenv("RCC_ALGO", "rd", 1);
    setenv("RCC_RD_LEADERS", "2", 1);
    cpu_set_t mask, one;
    int cpu[2], ncpus = 0;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0)
        for (int c = 0; c < CPU_SETSIZE && ncpus < 2; c++)
            if (CPU_ISSET(c, &mask))
                cpu[ncpus++] = c;
    rcc_comm_t comm = mp_comm(60000);
    size_t count = 257;
    float *x = malloc(count * sizeof *x), *first = malloc(count * sizeof *x);
    int bad = 0, pinned = ncpus == 2;
    for (int k = 0; k < MOVE_PLACEMENTS && !bad; k++) {
        if (pinned) {
            CPU_ZERO(&one);
            CPU_SET(cpu[move_cpu(k, rank, n)], &one);
            pinned = sched_setaffinity(0, sizeof one, &one) == 0;
        }
        for (int rep = 0; rep < 3; rep++) { /* the first reports the CPUs; moves show after */
            bad |= check_one(comm, rank, n, 1 + (size_t)(k * 37 + rep) % 300,
                             (rcc_datatype_t)((k + rep) % RCC_NUM_DATATYPES),
                             (rcc_redop_t)(k % RCC_NUM_OPS), rep & 1);
            srand(99 + (unsigned)rank);
            for (size_t i = 0; i < count; i++)
                x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
            if (rcc_allreduce(x, x, count, RCC_FLOAT32, RCC_SUM, comm) != RCC_SUCCESS)
                MP_FAIL("allreduce: %s", rcc_last_error(comm));
            if (k == 0 && rep == 0)
                memcpy(first, x, count * sizeof *x);
            else if (memcmp(first, x, count * sizeof *x) != 0)
                MP_FAIL("placement %d: a float32 sum's bits changed with the leaders", k);
        }
    }
    if (ncpus == 2)
        sched_setaffinity(0, sizeof mask, &mask);
    rcc_comm_destroy(comm);
    free(x), free(first);
    if (bad)
        MP_FAIL("wrong results while the leaders moved");
    if (!pinned) {
        if (rank == 0)
            printf("rd_leaders_move: %s: results checked, moves not forced\n",
                   ncpus < 2 ? "fewer than 2 CPUs" : "sched_setaffinity refused");
        return 0;
    }
    /* Placement 0 put both leaders on one CPU: both log the move. */
    if (rank == n - 1 && !mp_file_has(path, "moved off a shared CPU"))
        MP_FAIL("%s: no leader moved though two shared a CPU", path);
    return 0;
}

/* mp_run with a fresh log folder for the ranks (their arg), removed after. */
static int mp_run_logged(int n, mp_rank_fn fn)
{
    char logdir[] = "/tmp/rcc-testlog-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(logdir));
    int failed = mp_run(n, fn, logdir, 300);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", logdir);
    ck_assert_int_eq(system(cmd), 0);
    return failed;
}

START_TEST(rd_leaders_move) { ck_assert_int_eq(mp_run_logged(_i, rank_rd_moving), 0); }
END_TEST

/* Every count of leaders from 1 up to the ranks (a larger one means all). */
START_TEST(rd_leaders_forced)
{
    static char *const leaders[] = {"1", "2", "4", "8"};
    for (int p = 0; p < 4 && (p == 0 || 1 << (p - 1) < _i); p++)
        ck_assert_int_eq(mp_run(_i, rank_rd_leaders, leaders[p], 300), 0);
}
END_TEST

/* Long polls where the pace is slow (RCC_SLOW_POLL_US, lib/pace.h), forced
 * on by a threshold no operation reaches: every result stays right, and
 * each rank logs its first decision at INFO. */
static int rank_slow_polls(int rank, int n, void *arg)
{
    char path[256];
    log_coll_to(arg, rank, "INFO", path, sizeof path);
    setenv("RCC_SLOW_BUSBW", "1000000", 1);
    setenv("RCC_SLOW_POLL_US", "2000", 1);
    if (rank_algorithms(rank, n, "auto"))
        MP_FAIL("wrong results with long polls");
    if (rank_identical_bits(rank, n, NULL))
        MP_FAIL("the ranks' results differ with long polls");
    /* One rank has no pace: nothing moves between ranks. */
    if (n > 1 && !mp_file_has(path, "poll up to RCC_SLOW_POLL_US"))
        MP_FAIL("%s: no long polls logged", path);
    if (n == 1 && mp_file_has(path, "RCC_SLOW_BUSBW"))
        MP_FAIL("%s: a single rank logged a pace", path);
    return 0;
}

START_TEST(slow_link_polls) { ck_assert_int_eq(mp_run_logged(_i, rank_slow_polls), 0); }
END_TEST

/* The root moves with each operation: the checks in a row give every rank
 * that part. */
START_TEST(star_algorithm_forced) { ck_assert_int_eq(mp_run(_i, rank_algorithms, "star", 300), 0); }
END_TEST

START_TEST(direct_algorithm_forced)
{
    ck_assert_int_eq(mp_run(_i, rank_algorithms, "direct", 300), 0);
}
END_TEST

/* ---- fused groups over tensors that lie end to end ------------------------------ */

/* Tensor t, element i of rank r: small integers (exact sums). */
static int32_t adj_value(int r, int t, size_t i) { return (int32_t)((t * 7 + (int)i) % 11 + r); }

static int rank_adjacent_fusion(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    enum { T = 100, C = 37 };
    int32_t *in = malloc(sizeof *in * T * C * 2), *out = malloc(sizeof *out * T * C * 2);
    int32_t base = n * (n - 1) / 2;
    for (int mode = 0; mode < 3; mode++) {
        /* 0: in place end to end (fused over the caller's memory); 1: out of
         * place end to end; 2: each output is the next tensor's input
         * (end to end, but not one valid allreduce: must be packed, and every
         * tensor reduces its input as it was at rcc_group_end). */
        for (int t = 0; t < T + 1; t++)
            for (size_t i = 0; i < C; i++)
                in[(size_t)t * C + i] = adj_value(rank, t, i);
        if (rcc_group_start() != RCC_SUCCESS)
            MP_FAIL("group start");
        for (int t = 0; t < T; t++) {
            int32_t *src = in + (size_t)t * C;
            int32_t *dst = mode == 0 ? src : mode == 1 ? out + (size_t)t * C : src + C;
            if (rcc_allreduce(src, dst, C, RCC_INT32, RCC_SUM, comm) != RCC_SUCCESS)
                MP_FAIL("mode %d allreduce %d: %s", mode, t, rcc_last_error(comm));
        }
        if (rcc_group_end() != RCC_SUCCESS)
            MP_FAIL("mode %d group end: %s", mode, rcc_last_error(NULL));
        for (int t = 0; t < T; t++)
            for (size_t i = 0; i < C; i++) {
                int32_t want = n * adj_value(0, t, i) + base;
                int32_t got = mode == 0   ? in[(size_t)t * C + i]
                              : mode == 1 ? out[(size_t)t * C + i]
                                          : in[(size_t)(t + 1) * C + i];
                if (got != want)
                    MP_FAIL("mode %d tensor %d element %zu: %d, expected %d", mode, t, i, got,
                            want);
            }
    }
    free(in), free(out);
    rcc_comm_destroy(comm);
    return 0;
}

START_TEST(adjacent_fusion) { ck_assert_int_eq(mp_run(_i, rank_adjacent_fusion, NULL, 120), 0); }
END_TEST

/* ---- more than 2^31 elements ------------------------------------------------- */

/* Element i of rank r is (i mod 251 + r); the sum's is (n (i mod 251) + n(n-1)/2) mod 256.
 * Both repeat every 251 elements, so they are written and checked a block
 * of whole periods at a time (memcpy, memcmp): a loop per element took most
 * of this test's 16 s on 2 GiB. */
#define HUGE_BLOCK (251 * 64)

static int rank_huge(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(120000);
    size_t count = (1ull << 31) + 11;
    uint8_t *x = malloc(count);
    if (!x)
        MP_FAIL("no memory for %zu bytes", count);
    static uint8_t input[HUGE_BLOCK], expect[HUGE_BLOCK];
    for (size_t i = 0; i < HUGE_BLOCK; i++) {
        input[i] = (uint8_t)(i % 251 + (size_t)rank);
        expect[i] = (uint8_t)(n * (i % 251) + (size_t)(n * (n - 1) / 2));
    }
    for (size_t at = 0; at < count; at += HUGE_BLOCK)
        memcpy(x + at, input, count - at < HUGE_BLOCK ? count - at : HUGE_BLOCK);
    if (rcc_allreduce(x, x, count, RCC_UINT8, RCC_SUM, comm) != RCC_SUCCESS)
        MP_FAIL("allreduce: %s", rcc_last_error(comm));
    for (size_t at = 0; at < count; at += HUGE_BLOCK) {
        size_t len = count - at < HUGE_BLOCK ? count - at : HUGE_BLOCK;
        if (memcmp(x + at, expect, len) == 0)
            continue;
        for (size_t i = 0; i < len; i++)
            if (x[at + i] != expect[i])
                MP_FAIL("element %zu: %u, expected %u", at + i, x[at + i], expect[i]);
    }
    free(x);
    rcc_comm_destroy(comm);
    return 0;
}

START_TEST(more_than_2g_elements)
{
    if (mp_quick()) /* 2 GiB per rank: no smaller version tests the same */
        return;
    ck_assert_int_eq(mp_run(2, rank_huge, NULL, 600), 0);
}
END_TEST

/* ---- bad input ---------------------------------------------------------------- */

static int rank_bad_args(int rank, int n, void *arg)
{
    (void)arg, (void)n;
    rcc_comm_t comm = mp_comm(60000);
    float buf[16] = {0};
    struct {
        const void *s;
        void *r;
        size_t count;
        int dt, op;
        const char *needle;
    } cases[] = {
        {NULL, buf, 4, RCC_FLOAT32, RCC_SUM, "sendbuf is NULL"},
        {buf, NULL, 4, RCC_FLOAT32, RCC_SUM, "recvbuf is NULL"},
        {buf, buf, 4, 42, RCC_SUM, "datatype 42"},
        {buf, buf, 4, RCC_FLOAT32, 9, "op 9"},
        {buf, buf + 1, 4, RCC_FLOAT32, RCC_SUM, "overlap"},
        {buf, buf, SIZE_MAX / 2, RCC_FLOAT32, RCC_SUM, "overflows"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        rcc_result_t res =
            rcc_allreduce(cases[k].s, cases[k].r, cases[k].count, cases[k].dt, cases[k].op, comm);
        if (res != RCC_ERR_INVALID_ARGUMENT || !strstr(rcc_last_error(comm), cases[k].needle))
            MP_FAIL("case %zu: %s / '%s'", k, rcc_result_name(res), rcc_last_error(comm));
    }
    if (rcc_allreduce(buf, buf, 4, RCC_FLOAT32, RCC_SUM, NULL) != RCC_ERR_INVALID_ARGUMENT)
        MP_FAIL("NULL comm accepted");
    /* The communicator still works after refused calls. */
    int bad = check_one(comm, rank, n, 1001, RCC_INT32, RCC_SUM, 0);
    rcc_comm_destroy(comm);
    return bad;
}

START_TEST(bad_arguments) { ck_assert_int_eq(mp_run(3, rank_bad_args, NULL, 120), 0); }
END_TEST

static int rank_bad_env(int rank, int n, void *arg)
{
    (void)rank, (void)n, (void)arg;
    setenv("RCC_CHUNK_BYTES", "12 parsecs", 1);
    rcc_comm_t comm;
    rcc_result_t res = rcc_comm_init_env(&comm, NULL);
    if (res != RCC_ERR_INVALID_ARGUMENT || !strstr(rcc_last_error(NULL), "RCC_CHUNK_BYTES"))
        MP_FAIL("bad RCC_CHUNK_BYTES: %s '%s'", rcc_result_name(res), rcc_last_error(NULL));
    unsetenv("RCC_RANK");
    return 0;
}

static int rank_no_env(int rank, int n, void *arg)
{
    (void)rank, (void)n, (void)arg;
    unsetenv("RCC_RANK");
    unsetenv("RCC_NRANKS");
    rcc_comm_t comm;
    rcc_result_t res = rcc_comm_init_env(&comm, NULL);
    if (res != RCC_ERR_INVALID_USAGE || !strstr(rcc_last_error(NULL), "RCC_RANK"))
        MP_FAIL("no rank: %s '%s'", rcc_result_name(res), rcc_last_error(NULL));
    setenv("RCC_RANK", "3", 1);
    setenv("RCC_NRANKS", "2", 1);
    res = rcc_comm_init_env(&comm, NULL);
    if (res != RCC_ERR_INVALID_USAGE)
        MP_FAIL("rank 3 of 2: %s '%s'", rcc_result_name(res), rcc_last_error(NULL));
    return 0;
}

START_TEST(bad_environment)
{
    ck_assert_int_eq(mp_run(1, rank_bad_env, NULL, 60), 0);
    ck_assert_int_eq(mp_run(1, rank_no_env, NULL, 60), 0);
}
END_TEST

/* torchrun's variables work when RCC_* are absent. */
static int rank_torchrun_env(int rank, int n, void *arg)
{
    (void)arg;
    char v[16];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", n);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", mp_root_port());
    setenv("MASTER_PORT", v, 1);
    unsetenv("RCC_RANK"), unsetenv("RCC_NRANKS"), unsetenv("RCC_ROOT"), unsetenv("RCC_SECRET");
    rcc_comm_t comm = mp_comm(60000);
    int bad = check_one(comm, rank, n, 777, RCC_FLOAT64, RCC_SUM, 0);
    rcc_comm_destroy(comm);
    return bad;
}

START_TEST(torchrun_environment) { ck_assert_int_eq(mp_run(3, rank_torchrun_env, NULL, 120), 0); }
END_TEST

/* ---- strangers, dead peers, silent peers ------------------------------------- */

static void stranger_connect(int port, const void *bytes, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && len)
        if (write(fd, bytes, len) < 0)
            perror("stranger write");
    /* Left open on purpose: a silent stranger must not block the job. */
}

static int rank_with_stranger(int rank, int n, void *arg)
{
    (void)arg, (void)n;
    if (rank == 2) { /* the stranger: garbage, a forged hello, silence */
        char garbage[200];
        memset(garbage, 'x', sizeof garbage);
        unsigned char forged[96] = {0x52, 0x43, 0x43, 0x48,
                                    1,    0,    1,    0}; /* right magic, no secret */
        for (int k = 0; k < 50; k++) {
            stranger_connect(mp_root_port(), garbage, sizeof garbage);
            stranger_connect(mp_root_port(), forged, sizeof forged);
            stranger_connect(mp_root_port(), NULL, 0);
            usleep(10000);
        }
        sleep(1);
        return 0;
    }
    setenv("RCC_NRANKS", "2", 1);
    usleep(100000);
    rcc_comm_t comm = mp_comm(60000);
    int bad = check_one(comm, rank, 2, 4097, RCC_INT32, RCC_SUM, 0);
    rcc_comm_destroy(comm);
    return bad;
}

START_TEST(strangers_are_dropped) { ck_assert_int_eq(mp_run(3, rank_with_stranger, NULL, 120), 0); }
END_TEST

static int rank_peer_dies(int rank, int n, void *arg)
{
    (void)arg, (void)n;
    rcc_comm_t comm = mp_comm(60000);
    int x[1000] = {0};
    if (rank == 1)
        _exit(0); /* dies without a word */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rcc_result_t res = rcc_allreduce(x, x, 1000, RCC_INT32, RCC_SUM, comm);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (res != RCC_ERR_PEER_LOST)
        MP_FAIL("expected RCC_ERR_PEER_LOST, got %s: %s", rcc_result_name(res),
                rcc_last_error(comm));
    if (!strstr(rcc_last_error(comm), "rank"))
        MP_FAIL("error does not name a rank: %s", rcc_last_error(comm));
    if (s > 10)
        MP_FAIL("took %.1f s to notice", s);
    /* Later calls fail at once with the same story. */
    if (rcc_allreduce(x, x, 10, RCC_INT32, RCC_SUM, comm) == RCC_SUCCESS)
        MP_FAIL("a broken communicator accepted more work");
    rcc_comm_destroy(comm);
    return 0;
}

START_TEST(peer_death_is_reported) { ck_assert_int_eq(mp_run(3, rank_peer_dies, NULL, 120), 0); }
END_TEST

static int rank_silent_peer(int rank, int n, void *arg)
{
    (void)arg, (void)n;
    rcc_comm_t comm = mp_comm(2000);
    int x[100] = {0};
    if (rank == 1) {
        sleep(5); /* never calls the allreduce in time */
        rcc_comm_destroy(comm);
        return 0;
    }
    rcc_result_t res = rcc_allreduce(x, x, 100, RCC_INT32, RCC_SUM, comm);
    if (res != RCC_ERR_TIMEOUT)
        MP_FAIL("expected RCC_ERR_TIMEOUT, got %s: %s", rcc_result_name(res), rcc_last_error(comm));
    if (!strstr(rcc_last_error(comm), "rank 1"))
        MP_FAIL("timeout does not name rank 1: %s", rcc_last_error(comm));
    rcc_comm_destroy(comm);
    return 0;
}

START_TEST(silent_peer_times_out) { ck_assert_int_eq(mp_run(2, rank_silent_peer, NULL, 60), 0); }
END_TEST

/* rcc_comm_abort from another thread frees a caller stuck waiting for a
 * peer that never comes, at once and with RCC_ERR_ABORTED. */
typedef struct {
    rcc_comm_t comm;
    rcc_result_t res;
    double seconds;
} abort_call_t;

static void *abort_blocked_call(void *arg)
{
    abort_call_t *c = arg;
    int x[64] = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    c->res = rcc_allreduce(x, x, 64, RCC_INT32, RCC_SUM, c->comm);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c->seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    return NULL;
}

static int rank_abort(int rank, int n, void *arg)
{
    (void)arg, (void)n;
    rcc_comm_t comm = mp_comm(60000);
    if (rank == 1) { /* never joins the allreduce; leaves when rank 0 is done */
        sleep(3);
        rcc_comm_destroy(comm);
        return 0;
    }
    abort_call_t call = {.comm = comm};
    pthread_t t;
    pthread_create(&t, NULL, abort_blocked_call, &call);
    usleep(500000);
    rcc_comm_abort(comm);
    pthread_join(t, NULL);
    if (call.res != RCC_ERR_ABORTED)
        MP_FAIL("blocked call returned %s", rcc_result_name(call.res));
    if (call.seconds > 2.5)
        MP_FAIL("abort took %.2f s to free the caller", call.seconds);
    return 0;
}

START_TEST(abort_frees_blocked_callers) { ck_assert_int_eq(mp_run(2, rank_abort, NULL, 60), 0); }
END_TEST

static Suite *allreduce_suite(void)
{
    Suite *s = suite_create("mp_allreduce");
    TCase *tc = tcase_create("correctness");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, all_types_ops_sizes, 1, 6);
    tcase_add_loop_test(tc, large_64mib, 2, 6);
    tcase_add_loop_test(tc, small_chunks, 2, 6);
    tcase_add_loop_test(tc, ring_passes, 1, 6);
    tcase_add_loop_test(tc, back_to_back_1000, 1, 6);
    tcase_add_loop_test(tc, two_communicators, 1, 6);
    tcase_add_loop_test(tc, adjacent_fusion, 1, 6);
    tcase_add_test(tc, more_than_2g_elements);
    suite_add_tcase(s, tc);
    /* The algorithms above the transports (their messages are point-to-point
     * ones): tagged, so that the runs over other transports can leave them
     * out (CK_EXCLUDE_TAGS=algorithms, tests/meson.build). */
    TCase *algos = tcase_create("algorithms");
    tcase_set_tags(algos, "algorithms");
    tcase_set_timeout(algos, 900);
    tcase_add_loop_test(algos, identical_bits, 2, 7);
    tcase_add_loop_test(algos, ring_algorithm_forced, 1, 6);
    tcase_add_loop_test(algos, rd_algorithm_forced, 1, 9);
    tcase_add_loop_test(algos, rd_leaders_forced, 1, 9);
    tcase_add_loop_test(algos, rd_leaders_move, 4, 8);
    tcase_add_loop_test(algos, rabenseifner_algorithm_forced, 1, 9);
    tcase_add_loop_test(algos, twostep_algorithm_forced, 1, 9);
    tcase_add_loop_test(algos, direct_algorithm_forced, 1, 6);
    tcase_add_loop_test(algos, star_algorithm_forced, 1, 9);
    tcase_add_loop_test(algos, slow_link_polls, 1, 6);
    suite_add_tcase(s, algos);
    TCase *errors = tcase_create("errors");
    tcase_set_timeout(errors, 300);
    tcase_add_test(errors, bad_arguments);
    tcase_add_test(errors, bad_environment);
    tcase_add_test(errors, torchrun_environment);
    tcase_add_test(errors, strangers_are_dropped);
    tcase_add_test(errors, peer_death_is_reported);
    tcase_add_test(errors, silent_peer_times_out);
    tcase_add_test(errors, abort_frees_blocked_callers);
    suite_add_tcase(s, errors);
    return s;
}

RCC_TEST_MAIN(allreduce_suite)
