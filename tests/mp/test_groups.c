/*
 * Point-to-point (rcc_send/rcc_recv and their nonblocking forms), alltoall,
 * groups (fusion of allreduces, merged point-to-point calls, nesting,
 * requests of a group) and rcc_comm_split, across real processes on
 * loopback, for 1 to 5 ranks (6 for the split grid), checked bit for bit
 * against data and reductions from testdata.c; plus refused arguments and a
 * send/receive size mismatch that must fail fast instead of hanging.
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
#include "params.h" /* to see that RCC_FUSION_BYTES was read */

#define BIG_COUNT ((size_t)3 << 20 | 1) /* several chunks, odd */

/* ---- one buffer pair: a message, or one rank's part of a collective ------- */

/* What a rank gives and gets in one call: `send` holds its input (checked
 * unchanged afterwards), `recv` starts TD_UNWRITTEN and must end equal to
 * `want`. Either side may be absent (bytes 0 and no allocation). */
typedef struct {
    char what[160];
    rcc_datatype_t dt;
    size_t scount, rcount; /* elements */
    char *send, *snap;     /* input and a copy of it */
    char *recv, *want;     /* output and the expected output */
    rcc_request_t req;
} bufs_t;

static void bufs_init(bufs_t *b, rcc_datatype_t dt, size_t scount, size_t rcount)
{
    size_t es = rcc_datatype_size(dt);
    memset(b, 0, sizeof *b);
    b->dt = dt;
    b->scount = scount;
    b->rcount = rcount;
    b->send = td_galloc(scount * es);
    b->recv = td_galloc(rcount * es);
    memset(b->recv, TD_UNWRITTEN, rcount * es);
    b->want = malloc((scount > rcount ? scount : rcount) * es + 1); /* in-place: scount */
}

/* Call after the input is in place. */
static void bufs_snap(bufs_t *b)
{
    b->snap = td_dup_bytes(b->send, b->scount * rcc_datatype_size(b->dt));
}

/* 0 when recv == want, the input is unchanged and no guard was touched. */
static int bufs_check(const bufs_t *b)
{
    size_t es = rcc_datatype_size(b->dt);
    char what[200];
    snprintf(what, sizeof what, "%s: recvbuf", b->what);
    int bad = td_compare(what, b->recv, b->want, b->rcount, b->dt);
    if (b->snap && !bad) {
        snprintf(what, sizeof what, "%s: sendbuf (must stay unchanged)", b->what);
        bad |= td_compare(what, b->send, b->snap, b->scount, b->dt);
    }
    if (!td_guards_intact(b->send, b->scount * es) || !td_guards_intact(b->recv, b->rcount * es)) {
        fprintf(stderr, "%s: wrote outside its buffers\n", b->what);
        bad = 1;
    }
    return bad;
}

static void bufs_free(bufs_t *b)
{
    td_gfree(b->send), td_gfree(b->recv);
    free(b->snap), free(b->want);
    b->send = b->recv = b->snap = b->want = NULL;
}

/* Fails the rank when `call` does not return RCC_SUCCESS. */
#define EXPECT_OK(call, comm)                                                                      \
    do {                                                                                           \
        rcc_result_t res_ = (call);                                                                \
        if (res_ != RCC_SUCCESS)                                                                   \
            MP_FAIL("rank %d of %d: %s: %s: %s", rank, n, #call, rcc_result_name(res_),            \
                    rcc_last_error(comm));                                                         \
    } while (0)

/* The call must fail with `want` and a message that contains `needle`. */
#define EXPECT_RESULT(call, want, needle, comm)                                                    \
    do {                                                                                           \
        rcc_result_t res_ = (call);                                                                \
        const char *needle_ = (needle);                                                            \
        if (res_ != (want) || !strstr(rcc_last_error(comm), needle_))                              \
            MP_FAIL("rank %d of %d: %s: %s / '%s' (expected %s / '%s')", rank, n, #call,           \
                    rcc_result_name(res_), rcc_last_error(comm), rcc_result_name(want), needle_);  \
    } while (0)

/* =========================================================================
 * Point to point
 * ========================================================================= */

/* Message number k from rank `src` to rank `dst`: its generator seed. */
static unsigned msg_seed(unsigned base, int src, int dst, int k)
{
    return base + (unsigned)src * 100003u + (unsigned)dst * 1009u + (unsigned)k;
}

enum { MSG_AUTO, MSG_OUT, MSG_IN }; /* which sides this rank prepares */

/* A message from src to dst: buffers with send filled (when this rank is
 * src) and want computed (when it is dst). MSG_OUT or MSG_IN prepare one
 * side only, for a message to itself that is one of several. */
static void msg_init(bufs_t *b, const char *label, rcc_datatype_t dt, size_t count, unsigned seed,
                     int src, int dst, int rank, int n, int side)
{
    int give = side == MSG_OUT || (side == MSG_AUTO && rank == src);
    int take = side == MSG_IN || (side == MSG_AUTO && rank == dst);
    bufs_init(b, dt, give ? count : 0, take ? count : 0);
    snprintf(b->what, sizeof b->what, "rank %d of %d: %s: message %d -> %d (%zu %s)", rank, n,
             label, src, dst, count, rcc_datatype_name(dt));
    if (give) {
        td_fill(b->send, 0, count, seed, src, dt, RCC_SUM);
        bufs_snap(b);
    }
    if (take)
        td_fill(b->want, 0, count, seed, src, dt, RCC_SUM);
}

/* ---- ring exchange in a group, both call orders --------------------------- */

static int rank_p2p_ring(int rank, int n, void *arg)
{
    (void)arg;
    static const rcc_datatype_t dts[] = {RCC_INT32, RCC_UINT8, RCC_FLOAT64, RCC_BFLOAT16};
    const size_t big = mp_scaled(BIG_COUNT), counts[] = {0, 1, 1021, big};
    rcc_comm_t comm = mp_comm(60000);
    int right = (rank + 1) % n, left = (rank + n - 1) % n, bad = 0;
    unsigned base = 1;
    for (int order = 0; order < 2; order++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++, base += 7) {
                if (counts[c] == big && dts[d] != RCC_INT32)
                    continue;
                /* One buffer pair for the message out, one for the one in. */
                bufs_t out, in;
                const char *label = order ? "ring, send first" : "ring, recv first";
                msg_init(&out, label, dts[d], counts[c], msg_seed(base, rank, right, 0), rank,
                         right, rank, n, MSG_OUT);
                msg_init(&in, label, dts[d], counts[c], msg_seed(base, left, rank, 0), left, rank,
                         rank, n, MSG_IN);
                EXPECT_OK(rcc_group_start(), NULL);
                if (order == 0) {
                    EXPECT_OK(rcc_recv(in.recv, counts[c], dts[d], left, comm), comm);
                    EXPECT_OK(rcc_send(out.send, counts[c], dts[d], right, comm), comm);
                } else {
                    EXPECT_OK(rcc_send(out.send, counts[c], dts[d], right, comm), comm);
                    EXPECT_OK(rcc_recv(in.recv, counts[c], dts[d], left, comm), comm);
                }
                EXPECT_OK(rcc_group_end(), NULL);
                bad |= bufs_check(&out) | bufs_check(&in);
                bufs_free(&out), bufs_free(&in);
            }
    return td_finish(comm, bad);
}

START_TEST(p2p_ring) { ck_assert_int_eq(mp_run(_i, rank_p2p_ring, NULL, 120), 0); }
END_TEST

/* ---- every rank to every rank (itself included) in one group -------------- */

static size_t pair_count(int src, int dst, int round)
{
    if ((src + 2 * dst + round) % 7 == 3)
        return 0;
    return 1 + (size_t)(src * 131 + dst * 17 + round * 4099) % 5000;
}

static rcc_datatype_t pair_dtype(int src, int dst)
{
    static const rcc_datatype_t dts[] = {RCC_FLOAT32, RCC_INT64, RCC_FLOAT16, RCC_INT8};
    return dts[(src + 2 * dst) % 4];
}

static int rank_p2p_all_peers(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    int bad = 0;
    bufs_t *out = calloc((size_t)n, sizeof *out), *in = calloc((size_t)n, sizeof *in);
    for (int round = 0; round < 4; round++) {
        unsigned base = 1000u * (unsigned)(round + 1);
        for (int p = 0; p < n; p++) {
            msg_init(&out[p], "all peers", pair_dtype(rank, p), pair_count(rank, p, round),
                     msg_seed(base, rank, p, 0), rank, p, rank, n, MSG_OUT);
            msg_init(&in[p], "all peers", pair_dtype(p, rank), pair_count(p, rank, round),
                     msg_seed(base, p, rank, 0), p, rank, rank, n, MSG_IN);
        }
        /* Call orders differ between ranks and rounds: sends and receives
         * alternated, or all receives (in reverse) before all sends. */
        EXPECT_OK(rcc_group_start(), NULL);
        if ((rank + round) % 2 == 0) {
            for (int k = 0; k < n; k++) {
                int p = (rank + k) % n;
                EXPECT_OK(rcc_send(out[p].send, out[p].scount, out[p].dt, p, comm), comm);
                EXPECT_OK(rcc_recv(in[p].recv, in[p].rcount, in[p].dt, p, comm), comm);
            }
        } else {
            for (int p = n - 1; p >= 0; p--)
                EXPECT_OK(rcc_recv(in[p].recv, in[p].rcount, in[p].dt, p, comm), comm);
            for (int p = 0; p < n; p++)
                EXPECT_OK(rcc_send(out[p].send, out[p].scount, out[p].dt, p, comm), comm);
        }
        EXPECT_OK(rcc_group_end(), NULL);
        for (int p = 0; p < n; p++) {
            bad |= bufs_check(&out[p]) | bufs_check(&in[p]);
            bufs_free(&out[p]), bufs_free(&in[p]);
        }
    }
    free(out), free(in);
    return td_finish(comm, bad);
}

START_TEST(p2p_all_peers) { ck_assert_int_eq(mp_run(_i, rank_p2p_all_peers, NULL, 120), 0); }
END_TEST

/* ---- messages to oneself in a group ---------------------------------------- */

static int rank_p2p_self(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    int bad = 0;
    /* Three messages to itself, matched in call order, with the receives
     * placed before, between and after the sends; a ring exchange in the
     * same group when there are other ranks. */
    static const size_t counts[] = {1000, 0, 70001};
    static const rcc_datatype_t dts[] = {RCC_FLOAT32, RCC_FLOAT32, RCC_UINT64};
    bufs_t self[3], out, in;
    for (int k = 0; k < 3; k++)
        msg_init(&self[k], "self", dts[k], counts[k], msg_seed(7, rank, rank, k), rank, rank, rank,
                 n, MSG_AUTO);
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    msg_init(&out, "self + ring", RCC_INT32, 5003, msg_seed(8, rank, right, 0), rank, right, rank,
             n, MSG_OUT);
    msg_init(&in, "self + ring", RCC_INT32, 5003, msg_seed(8, left, rank, 0), left, rank, rank, n,
             MSG_IN);
    EXPECT_OK(rcc_group_start(), NULL);
    EXPECT_OK(rcc_recv(self[0].recv, counts[0], dts[0], rank, comm), comm);
    EXPECT_OK(rcc_send(self[0].send, counts[0], dts[0], rank, comm), comm);
    EXPECT_OK(rcc_send(self[1].send, counts[1], dts[1], rank, comm), comm);
    if (n > 1)
        EXPECT_OK(rcc_recv(in.recv, in.rcount, in.dt, left, comm), comm);
    EXPECT_OK(rcc_recv(self[1].recv, counts[1], dts[1], rank, comm), comm);
    EXPECT_OK(rcc_send(self[2].send, counts[2], dts[2], rank, comm), comm);
    if (n > 1)
        EXPECT_OK(rcc_send(out.send, out.scount, out.dt, right, comm), comm);
    EXPECT_OK(rcc_recv(self[2].recv, counts[2], dts[2], rank, comm), comm);
    EXPECT_OK(rcc_group_end(), NULL);
    for (int k = 0; k < 3; k++) {
        bad |= bufs_check(&self[k]);
        bufs_free(&self[k]);
    }
    if (n > 1)
        bad |= bufs_check(&out) | bufs_check(&in);
    bufs_free(&out), bufs_free(&in);

    /* A nonblocking pair to itself in a group completes through its requests. */
    bufs_t b;
    msg_init(&b, "self, nonblocking", RCC_UINT32, 333, msg_seed(9, rank, rank, 0), rank, rank, rank,
             n, MSG_AUTO);
    rcc_request_t reqs[2];
    EXPECT_OK(rcc_group_start(), NULL);
    EXPECT_OK(rcc_isend(b.send, 333, b.dt, rank, comm, &reqs[0]), comm);
    EXPECT_OK(rcc_irecv(b.recv, 333, b.dt, rank, comm, &reqs[1]), comm);
    EXPECT_OK(rcc_group_end(), NULL);
    EXPECT_OK(rcc_wait_all(2, reqs), NULL);
    bad |= bufs_check(&b);
    bufs_free(&b);
    return td_finish(comm, bad);
}

START_TEST(p2p_self) { ck_assert_int_eq(mp_run(_i, rank_p2p_self, NULL, 60), 0); }
END_TEST

/* ---- nonblocking pairs outside a group, receives posted first -------------- */

static int rank_p2p_nonblocking(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(10000);
    int right = (rank + 1) % n, left = (rank + n - 1) % n, bad = 0;
    if (n == 1) /* nothing to exchange without a group; refusals: p2p_errors */
        return td_finish(comm, 0);
    /* Each rank sends a big message to the right and a small one to the
     * left, and receives the matching two, having posted both receives
     * before either send. With two ranks left == right: the messages
     * between them then match in call order (big, then small). */
    for (int round = 0; round < 6; round++) {
        size_t big = mp_scaled(((size_t)1 << 20) + 3) + (size_t)round, small = 1000 + (size_t)round;
        unsigned base = 100u * (unsigned)(round + 1);
        bufs_t big_out, small_out, big_in, small_in;
        msg_init(&big_out, "isend/irecv", RCC_FLOAT32, big, msg_seed(base, rank, right, 0), rank,
                 right, rank, n, MSG_OUT);
        msg_init(&small_out, "isend/irecv", RCC_INT32, small, msg_seed(base, rank, left, 1), rank,
                 left, rank, n, MSG_OUT);
        msg_init(&big_in, "isend/irecv", RCC_FLOAT32, big, msg_seed(base, left, rank, 0), left,
                 rank, rank, n, MSG_IN);
        msg_init(&small_in, "isend/irecv", RCC_INT32, small, msg_seed(base, right, rank, 1), right,
                 rank, rank, n, MSG_IN);
        rcc_request_t reqs[4];
        EXPECT_OK(rcc_irecv(big_in.recv, big, RCC_FLOAT32, left, comm, &reqs[0]), comm);
        EXPECT_OK(rcc_irecv(small_in.recv, small, RCC_INT32, right, comm, &reqs[1]), comm);
        if (round % 2) /* let the receives reach the progress thread first */
            usleep(2000);
        EXPECT_OK(rcc_isend(big_out.send, big, RCC_FLOAT32, right, comm, &reqs[2]), comm);
        EXPECT_OK(rcc_isend(small_out.send, small, RCC_INT32, left, comm, &reqs[3]), comm);
        double t0 = td_now_s();
        if (round % 3 == 2) {
            for (int k = 3; k >= 0; k--)
                EXPECT_OK(rcc_wait(&reqs[k]), NULL);
        } else {
            EXPECT_OK(rcc_wait_all(4, reqs), NULL);
        }
        for (int k = 0; k < 4; k++)
            if (reqs[k])
                MP_FAIL("rank %d: request %d still set after it was waited for", rank, k);
        if (td_now_s() - t0 > 10)
            MP_FAIL("rank %d: round %d took %.1f s", rank, round, td_now_s() - t0);
        bad |= bufs_check(&big_out) | bufs_check(&small_out) | bufs_check(&big_in) |
               bufs_check(&small_in);
        bufs_free(&big_out), bufs_free(&small_out), bufs_free(&big_in), bufs_free(&small_in);
    }
    return td_finish(comm, bad);
}

START_TEST(p2p_nonblocking) { ck_assert_int_eq(mp_run(_i, rank_p2p_nonblocking, NULL, 120), 0); }
END_TEST

/* ---- 100 messages between two ranks, matched in order ---------------------- */

#define NMSGS 100

/* Message k of a sequence: sizes from 0 to ~240 KB, rotating dtypes. */
static size_t seq_count(int k) { return k % 10 == 0 ? 0 : (size_t)(k * 7919) % 30000 + 1; }
static rcc_datatype_t seq_dtype(int k)
{
    static const rcc_datatype_t dts[] = {RCC_INT32, RCC_FLOAT64, RCC_UINT8, RCC_BFLOAT16};
    return dts[k % 4];
}

static int rank_p2p_in_order(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(10000);
    int right = (rank + 1) % n, left = (rank + n - 1) % n, bad = 0;
    bufs_t *out = calloc(NMSGS, sizeof *out), *in = calloc(NMSGS, sizeof *in);

    /* Blocking, rank 0 to rank 1 (the others wait): each message checked
     * as it arrives. */
    if (rank <= 1) {
        for (int k = 0; k < NMSGS; k++) {
            bufs_t b;
            size_t c = seq_count(k);
            msg_init(&b, "blocking sequence", seq_dtype(k), c, msg_seed(11, 0, 1, k), 0, 1, rank, n,
                     MSG_AUTO);
            snprintf(b.what + strlen(b.what), sizeof b.what - strlen(b.what), ", #%d", k);
            if (rank == 0)
                EXPECT_OK(rcc_send(b.send, c, b.dt, 1, comm), comm);
            else
                EXPECT_OK(rcc_recv(b.recv, c, b.dt, 0, comm), comm);
            bad |= bufs_check(&b);
            bufs_free(&b);
        }
    }

    /* In one group around the ring: send k and receive k alternated. */
    for (int k = 0; k < NMSGS; k++) {
        size_t c = seq_count(k);
        msg_init(&out[k], "grouped sequence", seq_dtype(k), c, msg_seed(12, rank, right, k), rank,
                 right, rank, n, MSG_OUT);
        msg_init(&in[k], "grouped sequence", seq_dtype(k), c, msg_seed(12, left, rank, k), left,
                 rank, rank, n, MSG_IN);
    }
    EXPECT_OK(rcc_group_start(), NULL);
    for (int k = 0; k < NMSGS; k++) {
        EXPECT_OK(rcc_send(out[k].send, out[k].scount, out[k].dt, right, comm), comm);
        EXPECT_OK(rcc_recv(in[k].recv, in[k].rcount, in[k].dt, left, comm), comm);
    }
    EXPECT_OK(rcc_group_end(), NULL);
    for (int k = 0; k < NMSGS; k++) {
        bad |= bufs_check(&out[k]) | bufs_check(&in[k]);
        bufs_free(&out[k]), bufs_free(&in[k]);
    }

    /* Nonblocking around the ring, each receive posted before its send.
     * (All receives before any send is what a group is for: outside one,
     * the header promises no order-independence, and a long run of
     * receives can fill the progress thread's window; see p2p_nonblocking
     * for a pair of receives posted first.) */
    rcc_request_t *reqs = calloc(2 * NMSGS, sizeof *reqs);
    for (int k = 0; k < NMSGS; k++) {
        size_t c = seq_count(NMSGS - 1 - k);
        rcc_datatype_t dt = seq_dtype(k);
        msg_init(&out[k], "nonblocking sequence", dt, c, msg_seed(13, rank, right, k), rank, right,
                 rank, n, MSG_OUT);
        msg_init(&in[k], "nonblocking sequence", dt, c, msg_seed(13, left, rank, k), left, rank,
                 rank, n, MSG_IN);
    }
    if (n > 1) {
        for (int k = 0; k < NMSGS; k++) {
            EXPECT_OK(rcc_irecv(in[k].recv, in[k].rcount, in[k].dt, left, comm, &reqs[2 * k]),
                      comm);
            EXPECT_OK(
                rcc_isend(out[k].send, out[k].scount, out[k].dt, right, comm, &reqs[2 * k + 1]),
                comm);
        }
        EXPECT_OK(rcc_wait_all(2 * NMSGS, reqs), NULL);
        for (int k = 0; k < NMSGS; k++)
            bad |= bufs_check(&out[k]) | bufs_check(&in[k]);
    }
    for (int k = 0; k < NMSGS; k++)
        bufs_free(&out[k]), bufs_free(&in[k]);
    free(reqs), free(out), free(in);
    return td_finish(comm, bad);
}

START_TEST(p2p_in_order) { ck_assert_int_eq(mp_run(_i, rank_p2p_in_order, NULL, 120), 0); }
END_TEST

/* ---- refused calls ------------------------------------------------------------ */

static int rank_p2p_errors(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(30000);
    int32_t buf[64] = {0};
    int dummy;
    rcc_request_t req;
    /* To oneself outside a group: it would wait for itself. */
    EXPECT_RESULT(rcc_send(buf, 4, RCC_INT32, rank, comm), RCC_ERR_INVALID_USAGE, "itself", comm);
    EXPECT_RESULT(rcc_recv(buf, 4, RCC_INT32, rank, comm), RCC_ERR_INVALID_USAGE, "itself", comm);
    req = (rcc_request_t)(void *)&dummy;
    EXPECT_RESULT(rcc_isend(buf, 4, RCC_INT32, rank, comm, &req), RCC_ERR_INVALID_USAGE, "itself",
                  comm);
    if (req)
        MP_FAIL("a refused rcc_isend left *req set");
    req = (rcc_request_t)(void *)&dummy;
    EXPECT_RESULT(rcc_irecv(buf, 4, RCC_INT32, rank, comm, &req), RCC_ERR_INVALID_USAGE, "itself",
                  comm);
    if (req)
        MP_FAIL("a refused rcc_irecv left *req set");
    /* Peers that are not ranks. */
    EXPECT_RESULT(rcc_send(buf, 4, RCC_INT32, -1, comm), RCC_ERR_INVALID_ARGUMENT, "peer -1", comm);
    EXPECT_RESULT(rcc_send(buf, 4, RCC_INT32, n, comm), RCC_ERR_INVALID_ARGUMENT, "peer", comm);
    EXPECT_RESULT(rcc_recv(buf, 4, RCC_INT32, n + 5, comm), RCC_ERR_INVALID_ARGUMENT, "peer", comm);
    EXPECT_RESULT(rcc_isend(buf, 4, RCC_INT32, -3, comm, &req), RCC_ERR_INVALID_ARGUMENT, "peer",
                  comm);
    EXPECT_RESULT(rcc_irecv(buf, 4, RCC_INT32, n, comm, &req), RCC_ERR_INVALID_ARGUMENT, "peer",
                  comm);
    /* Other bad arguments. */
    int right = (rank + 1) % n;
    EXPECT_RESULT(rcc_send(NULL, 4, RCC_INT32, right, comm), RCC_ERR_INVALID_ARGUMENT, "sendbuf",
                  comm);
    EXPECT_RESULT(rcc_recv(NULL, 4, RCC_INT32, right, comm), RCC_ERR_INVALID_ARGUMENT, "recvbuf",
                  comm);
    EXPECT_RESULT(rcc_send(buf, 4, 42, right, comm), RCC_ERR_INVALID_ARGUMENT, "42", comm);
    EXPECT_RESULT(rcc_isend(buf, 4, RCC_INT32, right, comm, NULL), RCC_ERR_INVALID_ARGUMENT, "req",
                  comm);
    EXPECT_RESULT(rcc_irecv(buf, 4, RCC_INT32, right, comm, NULL), RCC_ERR_INVALID_ARGUMENT, "req",
                  comm);
    if (rcc_send(buf, 4, RCC_INT32, 0, NULL) != RCC_ERR_INVALID_ARGUMENT ||
        rcc_recv(buf, 4, RCC_INT32, 0, NULL) != RCC_ERR_INVALID_ARGUMENT)
        MP_FAIL("point-to-point with a NULL comm accepted");
    /* Inside a group the checks happen at the call, and the group then
     * holds nothing. */
    EXPECT_OK(rcc_group_start(), NULL);
    EXPECT_RESULT(rcc_send(buf, 4, RCC_INT32, n, comm), RCC_ERR_INVALID_ARGUMENT, "peer", comm);
    EXPECT_RESULT(rcc_recv(NULL, 4, RCC_INT32, right, comm), RCC_ERR_INVALID_ARGUMENT, "recvbuf",
                  comm);
    EXPECT_OK(rcc_group_end(), NULL);

    /* The communicator still works. */
    int left = (rank + n - 1) % n, bad = 0;
    bufs_t out, in;
    msg_init(&out, "after refusals", RCC_INT32, 777, msg_seed(5, rank, right, 0), rank, right, rank,
             n, MSG_OUT);
    msg_init(&in, "after refusals", RCC_INT32, 777, msg_seed(5, left, rank, 0), left, rank, rank, n,
             MSG_IN);
    EXPECT_OK(rcc_group_start(), NULL);
    EXPECT_OK(rcc_send(out.send, 777, RCC_INT32, right, comm), comm);
    EXPECT_OK(rcc_recv(in.recv, 777, RCC_INT32, left, comm), comm);
    EXPECT_OK(rcc_group_end(), NULL);
    bad |= bufs_check(&out) | bufs_check(&in);
    bufs_free(&out), bufs_free(&in);
    return td_finish(comm, bad);
}

START_TEST(p2p_errors) { ck_assert_int_eq(mp_run(_i, rank_p2p_errors, NULL, 60), 0); }
END_TEST

/* ---- a receive that names another size than the send ------------------------ */

typedef struct {
    atomic_int recv_done;
} mismatch_area_t;

/* Variant 0: the receive expects fewer elements than were sent; 1: more;
 * 2: fewer, of a message too big for the socket buffers (the sender cannot
 * finish either). The receiver must fail with RCC_ERR_MISMATCH naming both
 * sizes within a few seconds; nobody may hang. */
static int rank_p2p_mismatch(int rank, int n, void *arg)
{
    int variant = *(const int *)arg;
    mismatch_area_t *area = mp_shared(NULL);
    rcc_comm_t comm = mp_comm(5000);
    size_t sent =
        variant == 2 ? (size_t)6 << 20 : 1000; /* not scaled: more than the sockets hold */
    size_t expected = variant == 1 ? sent + 1 : sent - 1;
    double t0 = td_now_s();
    if (rank == 0) {
        bufs_t b;
        msg_init(&b, "mismatch", RCC_INT32, sent, 77, 0, 1, rank, n, MSG_AUTO);
        rcc_result_t res = rcc_send(b.send, sent, RCC_INT32, 1, comm);
        double took = td_now_s() - t0;
        if (res != RCC_SUCCESS)
            fprintf(stderr, "(expected) rank 0: send of %zu int32 took %.2f s: %s: %s\n", sent,
                    took, rcc_result_name(res), rcc_last_error(comm));
        if (took > 12)
            MP_FAIL("the sender's rcc_send took %.1f s (%s)", took, rcc_result_name(res));
        /* Stay until the receiver has its answer. */
        while (!atomic_load(&area->recv_done) && td_now_s() - t0 < 30)
            usleep(1000);
        bufs_free(&b);
    } else if (rank == 1) {
        bufs_t b;
        bufs_init(&b, RCC_INT32, 0, expected);
        rcc_result_t res = rcc_recv(b.recv, expected, RCC_INT32, 0, comm);
        double took = td_now_s() - t0;
        atomic_store(&area->recv_done, 1);
        fprintf(stderr, "(expected) rank 1: receive of %zu int32 for %zu sent: %.2f s: %s: %s\n",
                expected, sent, took, rcc_result_name(res), rcc_last_error(comm));
        if (res != RCC_ERR_MISMATCH)
            MP_FAIL("receive of %zu int32 where %zu were sent: %s (expected RCC_ERR_MISMATCH): %s",
                    expected, sent, rcc_result_name(res), rcc_last_error(comm));
        char want[2][128];
        snprintf(want[0], sizeof want[0], "rank 0 (");
        snprintf(want[1], sizeof want[1],
                 "called a %zu-byte send/recv message while rank 1 "
                 "called a %zu-byte",
                 sent * 4, expected * 4);
        for (int i = 0; i < 2; i++)
            if (!strstr(rcc_last_error(comm), want[i]))
                MP_FAIL("the mismatch's message lacks \"%s\": %s", want[i], rcc_last_error(comm));
        if (took > 4)
            MP_FAIL("the mismatch took %.1f s to report", took);
        if (!td_guards_intact(b.recv, expected * 4))
            MP_FAIL("the failed receive wrote outside its buffer");
        bufs_free(&b);
    }
    /* The communicator may be broken now; destroying it must not hang. */
    rcc_result_t res = rcc_comm_destroy(comm);
    double took = td_now_s() - t0;
    if (res != RCC_SUCCESS)
        fprintf(stderr, "(expected) rank %d: rcc_comm_destroy: %s\n", rank, rcc_result_name(res));
    if (took > 20)
        MP_FAIL("rank %d took %.1f s to get through the mismatch and destroy", rank, took);
    return 0;
}

START_TEST(p2p_count_mismatch)
{
    int variant = _i;
    ck_assert_int_eq(mp_run(2, rank_p2p_mismatch, &variant, 60), 0);
}
END_TEST

/* =========================================================================
 * Alltoall
 * ========================================================================= */

/* Block `dst` of rank src's sendbuf for the alltoall numbered `seed`. */
static unsigned a2a_seed(unsigned seed, int dst) { return seed * 64u + (unsigned)dst; }

/* One rank's buffers for an alltoall: send block p for rank p; want block
 * q is what rank q sends to this one. */
static void a2a_init(bufs_t *b, rcc_datatype_t dt, size_t count, unsigned seed, int rank, int n)
{
    size_t block = count * rcc_datatype_size(dt);
    bufs_init(b, dt, (size_t)n * count, (size_t)n * count);
    snprintf(b->what, sizeof b->what, "rank %d of %d: alltoall #%u (%zu %s per block)", rank, n,
             seed, count, rcc_datatype_name(dt));
    for (int p = 0; p < n; p++) {
        td_fill(b->send + (size_t)p * block, 0, count, a2a_seed(seed, p), rank, dt, RCC_SUM);
        td_fill(b->want + (size_t)p * block, 0, count, a2a_seed(seed, rank), p, dt, RCC_SUM);
    }
    bufs_snap(b);
}

/* Checks block by block, so that a misplaced block is named. */
static int a2a_check(const bufs_t *b, size_t count, int n)
{
    size_t block = count * rcc_datatype_size(b->dt);
    for (int q = 0; q < n; q++) {
        char what[240];
        snprintf(what, sizeof what, "%s: block %d (from rank %d)", b->what, q, q);
        if (td_compare(what, b->recv + (size_t)q * block, b->want + (size_t)q * block, count,
                       b->dt))
            return 1;
    }
    return bufs_check(b);
}

static int rank_alltoall(int rank, int n, void *arg)
{
    (void)arg;
    static const rcc_datatype_t dts[] = {RCC_INT8, RCC_INT32, RCC_FLOAT16, RCC_FLOAT64, RCC_UINT64};
    static const size_t counts[] = {0, 1, 7, 65537};
    rcc_comm_t comm = mp_comm(60000);
    int bad = 0;
    unsigned seed = 1;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (int blocking = 0; blocking < 2; blocking++, seed++) {
                bufs_t b;
                a2a_init(&b, dts[d], counts[c], seed, rank, n);
                if (blocking) {
                    EXPECT_OK(rcc_alltoall(b.send, b.recv, counts[c], dts[d], comm), comm);
                } else {
                    EXPECT_OK(rcc_ialltoall(b.send, b.recv, counts[c], dts[d], comm, &b.req), comm);
                    EXPECT_OK(rcc_wait(&b.req), NULL);
                }
                bad |= a2a_check(&b, counts[c], n);
                bufs_free(&b);
            }

    /* Several in flight at once, completed in reverse order. */
    bufs_t many[6];
    for (int k = 0; k < 6; k++) {
        a2a_init(&many[k], dts[k % 5], 100 + (size_t)k * 1000, seed + (unsigned)k, rank, n);
        EXPECT_OK(rcc_ialltoall(many[k].send, many[k].recv, many[k].scount / (size_t)n, many[k].dt,
                                comm, &many[k].req),
                  comm);
    }
    for (int k = 5; k >= 0; k--) {
        EXPECT_OK(rcc_wait(&many[k].req), NULL);
        bad |= a2a_check(&many[k], many[k].scount / (size_t)n, n);
        bufs_free(&many[k]);
    }

    /* In place and overlapping buffers are refused. */
    float buf[64] = {0};
    EXPECT_RESULT(rcc_alltoall(buf, buf, 4, RCC_FLOAT32, comm), RCC_ERR_INVALID_ARGUMENT, "place",
                  comm);
    int dummy;
    rcc_request_t req = (rcc_request_t)(void *)&dummy;
    EXPECT_RESULT(rcc_ialltoall(buf, buf, 4, RCC_FLOAT32, comm, &req), RCC_ERR_INVALID_ARGUMENT,
                  "place", comm);
    if (req)
        MP_FAIL("a refused rcc_ialltoall left *req set");
    EXPECT_RESULT(rcc_alltoall(buf, buf + 1, 2, RCC_FLOAT32, comm), RCC_ERR_INVALID_ARGUMENT,
                  "overlap", comm);
    EXPECT_RESULT(rcc_alltoall(NULL, buf, 2, RCC_FLOAT32, comm), RCC_ERR_INVALID_ARGUMENT,
                  "sendbuf", comm);
    EXPECT_RESULT(rcc_alltoall(buf, buf + 32, 2, 42, comm), RCC_ERR_INVALID_ARGUMENT, "42", comm);

    /* And the communicator still works. */
    bufs_t b;
    a2a_init(&b, RCC_INT32, 33, 999, rank, n);
    EXPECT_OK(rcc_alltoall(b.send, b.recv, 33, RCC_INT32, comm), comm);
    bad |= a2a_check(&b, 33, n);
    bufs_free(&b);
    return td_finish(comm, bad);
}

START_TEST(alltoall) { ck_assert_int_eq(mp_run(_i, rank_alltoall, NULL, 120), 0); }
END_TEST

/* =========================================================================
 * Groups
 * ========================================================================= */

/* One rank's buffers for an allreduce over the ranks who[0..n) (0..n-1
 * when NULL), in place or not. */
static void ar_init(bufs_t *b, rcc_datatype_t dt, rcc_redop_t op, size_t count, int inplace,
                    unsigned seed, const int *who, int rank, int n)
{
    int me = who ? who[rank] : rank;
    bufs_init(b, dt, count, inplace ? 0 : count);
    snprintf(b->what, sizeof b->what, "rank %d of %d: allreduce #%u (%zu %s %s%s)", rank, n, seed,
             count, rcc_datatype_name(dt), rcc_redop_name(op), inplace ? ", in-place" : "");
    td_fill(b->send, 0, count, seed, me, dt, op);
    if (!inplace)
        bufs_snap(b);
    td_reference(b->want, 0, count, who, n, seed, dt, op);
}

/* The result of an in-place allreduce is in send. */
static char *ar_out(bufs_t *b) { return b->rcount ? b->recv : b->send; }

static int ar_check(bufs_t *b)
{
    if (b->rcount || !b->scount)
        return bufs_check(b);
    /* In place: the result replaced the input. */
    char what[200];
    snprintf(what, sizeof what, "%s: buffer", b->what);
    int bad = td_compare(what, b->send, b->want, b->scount, b->dt);
    if (!td_guards_intact(b->send, b->scount * rcc_datatype_size(b->dt))) {
        fprintf(stderr, "%s: wrote outside its buffer\n", b->what);
        bad = 1;
    }
    return bad;
}

/* ---- 500 small allreduces in one group ----------------------------------------- */

static int rank_group_500(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(60000);
    enum { NOPS_500 = 500 };
    bufs_t *ops = calloc(NOPS_500, sizeof *ops);
    int bad = 0;
    for (int k = 0; k < NOPS_500; k++)
        ar_init(&ops[k], RCC_FLOAT32, RCC_SUM, 1 + (size_t)(k * 37 + k / 7) % 300, k % 5 == 4,
                (unsigned)k + 1, NULL, rank, n);
    EXPECT_OK(rcc_group_start(), NULL);
    for (int k = 0; k < NOPS_500; k++)
        EXPECT_OK(
            rcc_allreduce(ops[k].send, ar_out(&ops[k]), ops[k].scount, RCC_FLOAT32, RCC_SUM, comm),
            comm);
    EXPECT_OK(rcc_group_end(), NULL);
    for (int k = 0; k < NOPS_500; k++) {
        bad |= ar_check(&ops[k]);
        bufs_free(&ops[k]);
    }
    free(ops);
    return td_finish(comm, bad);
}

START_TEST(group_500_allreduces) { ck_assert_int_eq(mp_run(_i, rank_group_500, NULL, 120), 0); }
END_TEST

/* ---- a group mixing dtypes and ops: fusion must split ------------------------ */

typedef struct {
    rcc_datatype_t dt;
    rcc_redop_t op;
} dtop_t;

static const dtop_t mixed_pattern[] = {
    {RCC_INT32, RCC_SUM},    {RCC_FLOAT32, RCC_MAX}, {RCC_FLOAT32, RCC_SUM},
    {RCC_INT32, RCC_SUM},    {RCC_INT32, RCC_SUM},   {RCC_FLOAT32, RCC_SUM},
    {RCC_FLOAT32, RCC_SUM},  {RCC_FLOAT32, RCC_SUM}, {RCC_INT8, RCC_PROD},
    {RCC_INT8, RCC_PROD},    {RCC_FLOAT64, RCC_MIN}, {RCC_BFLOAT16, RCC_SUM},
    {RCC_BFLOAT16, RCC_SUM}, {RCC_FLOAT16, RCC_AVG}, {RCC_FLOAT16, RCC_AVG},
    {RCC_UINT64, RCC_MAX},   {RCC_INT32, RCC_MIN},   {RCC_INT32, RCC_SUM},
    {RCC_FLOAT32, RCC_SUM},  {RCC_FLOAT32, RCC_MAX}, {RCC_FLOAT32, RCC_MAX},
    {RCC_UINT32, RCC_AVG},   {RCC_UINT32, RCC_AVG},  {RCC_UINT32, RCC_AVG},
    {RCC_INT64, RCC_PROD},   {RCC_FLOAT32, RCC_SUM},
};
#define MIXED_PATTERN_LEN (int)(sizeof mixed_pattern / sizeof mixed_pattern[0])

static int rank_group_mixed_types(int rank, int n, void *arg)
{
    (void)arg;
    static const size_t counts[] = {0, 1, 3, 17, 100, 1021, 4099};
    rcc_comm_t comm = mp_comm(60000);
    enum { NOPS_MIXED = 3 * MIXED_PATTERN_LEN };
    bufs_t ops[NOPS_MIXED];
    int bad = 0;
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < NOPS_MIXED; k++) {
            const dtop_t *p = &mixed_pattern[k % MIXED_PATTERN_LEN];
            ar_init(&ops[k], p->dt, p->op, counts[(size_t)(k * 5 + round) % 7],
                    (k + round) % 3 == 0, (unsigned)(round * 1000 + k + 1), NULL, rank, n);
        }
        /* Every fourth one nonblocking, waited for after the group. */
        EXPECT_OK(rcc_group_start(), NULL);
        for (int k = 0; k < NOPS_MIXED; k++) {
            bufs_t *b = &ops[k];
            const dtop_t *p = &mixed_pattern[k % MIXED_PATTERN_LEN];
            if (k % 4 == round)
                EXPECT_OK(
                    rcc_iallreduce(b->send, ar_out(b), b->scount, p->dt, p->op, comm, &b->req),
                    comm);
            else
                EXPECT_OK(rcc_allreduce(b->send, ar_out(b), b->scount, p->dt, p->op, comm), comm);
        }
        EXPECT_OK(rcc_group_end(), NULL);
        for (int k = 0; k < NOPS_MIXED; k++) {
            EXPECT_OK(rcc_wait(&ops[k].req), NULL);
            bad |= ar_check(&ops[k]);
            bufs_free(&ops[k]);
        }
    }
    return td_finish(comm, bad);
}

START_TEST(group_mixed_types)
{
    ck_assert_int_eq(mp_run(_i, rank_group_mixed_types, NULL, 120), 0);
}
END_TEST

/* ---- 1000 allreduces with a small fusion limit -------------------------------- */

static int rank_group_small_fusion(int rank, int n, void *arg)
{
    (void)arg;
    /* Parameters are read once per process, at the first init. */
    setenv("RCC_FUSION_BYTES", "4K", 1);
    rcc_comm_t comm = mp_comm(60000);
    if (rcci_param_int(RCCI_PARAM_FUSION_BYTES) != 4096)
        MP_FAIL("RCC_FUSION_BYTES=4K read as %lld",
                (long long)rcci_param_int(RCCI_PARAM_FUSION_BYTES));
    enum { NOPS_1000 = 1000 };
    bufs_t *ops = calloc(NOPS_1000, sizeof *ops);
    int bad = 0;
    for (int k = 0; k < NOPS_1000; k++) {
        /* 4 to 1200 bytes, and now and then one alone bigger than the limit
         * (2000 floats) or exactly at it (1024). */
        size_t count = k % 97 == 13 ? 2000 : k % 89 == 7 ? 1024 : 1 + (size_t)(k * 53) % 300;
        ar_init(&ops[k], RCC_FLOAT32, RCC_SUM, count, k % 7 == 3, (unsigned)k + 1, NULL, rank, n);
    }
    EXPECT_OK(rcc_group_start(), NULL);
    for (int k = 0; k < NOPS_1000; k++)
        EXPECT_OK(
            rcc_allreduce(ops[k].send, ar_out(&ops[k]), ops[k].scount, RCC_FLOAT32, RCC_SUM, comm),
            comm);
    EXPECT_OK(rcc_group_end(), NULL);
    for (int k = 0; k < NOPS_1000; k++) {
        bad |= ar_check(&ops[k]);
        bufs_free(&ops[k]);
    }
    free(ops);
    return td_finish(comm, bad);
}

START_TEST(group_small_fusion)
{
    ck_assert_int_eq(mp_run(_i, rank_group_small_fusion, NULL, 120), 0);
}
END_TEST

/* ---- nonblocking calls in a group ---------------------------------------------- */

/* Checks that a request of a group that has not ended is neither waited
 * for nor reported done. */
static int still_pending(rcc_request_t *req, int rank, const char *when)
{
    rcc_request_t before = *req;
    rcc_result_t res = rcc_wait(req);
    if (res != RCC_ERR_INVALID_USAGE || *req != before)
        MP_FAIL("rank %d: rcc_wait %s: %s (expected RCC_ERR_INVALID_USAGE), request %s", rank, when,
                rcc_result_name(res), *req == before ? "kept" : "changed");
    int done = -1;
    res = rcc_test(req, &done);
    if (*req != before || (res == RCC_SUCCESS && done != 0) ||
        (res != RCC_SUCCESS && res != RCC_ERR_INVALID_USAGE))
        MP_FAIL("rank %d: rcc_test %s: %s, done %d, request %s", rank, when, rcc_result_name(res),
                done, *req == before ? "kept" : "changed");
    return 0;
}

static int rank_group_nonblocking(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(30000);
    int bad = 0;
    for (int round = 0; round < 5; round++) {
        unsigned s = 100u * (unsigned)round;
        bufs_t a, b, c, g;
        ar_init(&a, RCC_INT32, RCC_SUM, 1000, 0, s + 1, NULL, rank, n);
        ar_init(&b, RCC_FLOAT32, RCC_SUM, 10, round % 2, s + 2, NULL, rank, n);
        ar_init(&c, RCC_FLOAT32, RCC_SUM, 77, 0, s + 3, NULL, rank, n);
        bufs_init(&g, RCC_FLOAT64, 301, (size_t)n * 301);
        snprintf(g.what, sizeof g.what, "rank %d of %d: iallgather in a group", rank, n);
        td_fill(g.send, 0, 301, s + 4, rank, RCC_FLOAT64, RCC_SUM);
        bufs_snap(&g);
        for (int r = 0; r < n; r++)
            td_fill(g.want + (size_t)r * 301 * 8, 0, 301, s + 4, r, RCC_FLOAT64, RCC_SUM);

        EXPECT_OK(rcc_group_start(), NULL);
        EXPECT_OK(rcc_iallreduce(a.send, a.recv, 1000, RCC_INT32, RCC_SUM, comm, &a.req), comm);
        if (!a.req)
            MP_FAIL("rank %d: rcc_iallreduce in a group gave no request", rank);
        /* b (blocking) and c fuse */
        EXPECT_OK(rcc_allreduce(b.send, ar_out(&b), 10, RCC_FLOAT32, RCC_SUM, comm), comm);
        EXPECT_OK(rcc_iallreduce(c.send, c.recv, 77, RCC_FLOAT32, RCC_SUM, comm, &c.req), comm);
        EXPECT_OK(rcc_iallgather(g.send, g.recv, 301, RCC_FLOAT64, comm, &g.req), comm);
        if (still_pending(&a.req, rank, "before rcc_group_end") ||
            still_pending(&c.req, rank, "before rcc_group_end"))
            return 1;
        EXPECT_OK(rcc_group_end(), NULL);
        /* The blocking member is done when the group ends. */
        bad |= ar_check(&b);
        if (round % 2) {
            EXPECT_OK(rcc_wait(&g.req), NULL);
            EXPECT_OK(rcc_wait(&c.req), NULL);
            EXPECT_OK(rcc_wait(&a.req), NULL);
        } else {
            rcc_request_t reqs[3] = {a.req, c.req, g.req};
            EXPECT_OK(rcc_wait_all(3, reqs), NULL);
            a.req = c.req = g.req = NULL;
        }
        bad |= ar_check(&a) | ar_check(&c) | bufs_check(&g);
        bufs_free(&a), bufs_free(&b), bufs_free(&c), bufs_free(&g);
    }
    return td_finish(comm, bad);
}

START_TEST(group_nonblocking) { ck_assert_int_eq(mp_run(_i, rank_group_nonblocking, NULL, 60), 0); }
END_TEST

/* ---- nested groups launch at the outermost end ------------------------------- */

static int all_bytes(const char *p, size_t bytes, int v)
{
    for (size_t i = 0; i < bytes; i++)
        if ((unsigned char)p[i] != (unsigned char)v)
            return 0;
    return 1;
}

static void *other_thread_group_end(void *arg)
{
    *(rcc_result_t *)arg = rcc_group_end();
    return NULL;
}

static int rank_group_nested(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(30000);
    int bad = 0;
    bufs_t x, y, z;
    ar_init(&x, RCC_INT32, RCC_SUM, 500, 0, 1, NULL, rank, n);
    ar_init(&y, RCC_FLOAT64, RCC_MAX, 333, 0, 2, NULL, rank, n);
    /* z: a broadcast from the last rank */
    bufs_init(&z, RCC_UINT8, 0, 4097);
    snprintf(z.what, sizeof z.what, "rank %d of %d: broadcast in a nested group", rank, n);
    td_fill(z.want, 0, 4097, 3, n - 1, RCC_UINT8, RCC_SUM);
    if (rank == n - 1)
        memcpy(z.recv, z.want, 4097);

    EXPECT_OK(rcc_group_start(), NULL);
    EXPECT_OK(rcc_group_start(), NULL);
    EXPECT_OK(rcc_allreduce(x.send, x.recv, 500, RCC_INT32, RCC_SUM, comm), comm);
    EXPECT_OK(rcc_iallreduce(y.send, y.recv, 333, RCC_FLOAT64, RCC_MAX, comm, &y.req), comm);
    EXPECT_OK(rcc_group_end(), NULL); /* inner: launches nothing */
    usleep(50000);                    /* time enough to finish, had it launched */
    if (!all_bytes(x.recv, 500 * 4, TD_UNWRITTEN))
        MP_FAIL("rank %d: the inner rcc_group_end launched the group's allreduce", rank);
    if (still_pending(&y.req, rank, "after the inner rcc_group_end"))
        return 1;
    /* Groups are per thread: another thread has none open. */
    pthread_t t;
    rcc_result_t other = RCC_SUCCESS;
    pthread_create(&t, NULL, other_thread_group_end, &other);
    pthread_join(t, NULL);
    if (other != RCC_ERR_INVALID_USAGE)
        MP_FAIL("rank %d: rcc_group_end in a thread without a group: %s", rank,
                rcc_result_name(other));
    EXPECT_OK(rcc_group_start(), NULL);
    EXPECT_OK(rcc_broadcast(z.recv, z.recv, 4097, RCC_UINT8, n - 1, comm), comm);
    EXPECT_OK(rcc_group_end(), NULL);
    if (!all_bytes(x.recv, 500 * 4, TD_UNWRITTEN))
        MP_FAIL("rank %d: a nested rcc_group_end launched the group", rank);
    EXPECT_OK(rcc_group_end(), NULL); /* outer: launches all three */
    bad |= ar_check(&x) | bufs_check(&z);
    EXPECT_OK(rcc_wait(&y.req), NULL);
    bad |= ar_check(&y);
    bufs_free(&x), bufs_free(&y), bufs_free(&z);

    /* One end too many, and an empty group. */
    EXPECT_RESULT(rcc_group_end(), RCC_ERR_INVALID_USAGE, "rcc_group_start", NULL);
    EXPECT_OK(rcc_group_start(), NULL);
    EXPECT_OK(rcc_group_end(), NULL);
    return td_finish(comm, bad);
}

START_TEST(group_nested) { ck_assert_int_eq(mp_run(_i, rank_group_nested, NULL, 60), 0); }
END_TEST

static int rank_group_end_alone(int rank, int n, void *arg)
{
    (void)arg;
    EXPECT_RESULT(rcc_group_end(), RCC_ERR_INVALID_USAGE, "rcc_group_start", NULL);
    EXPECT_OK(rcc_group_start(), NULL);
    EXPECT_OK(rcc_group_end(), NULL);
    EXPECT_RESULT(rcc_group_end(), RCC_ERR_INVALID_USAGE, "rcc_group_start", NULL);
    return 0;
}

START_TEST(group_end_without_start)
{
    ck_assert_int_eq(mp_run(1, rank_group_end_alone, NULL, 30), 0);
}
END_TEST

/* ---- one group of several kinds of operation -------------------------------- */

static int rank_group_mixed_kinds(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(10000);
    int right = (rank + 1) % n, left = (rank + n - 1) % n, root = n - 1, bad = 0;
    for (int round = 0; round < 3; round++) {
        unsigned s = 1000u * (unsigned)round;
        bufs_t a, d, e, h, i, bc, ag, out, in, at;
        ar_init(&a, RCC_INT32, RCC_SUM, 1000, 0, s + 1, NULL, rank, n);
        ar_init(&d, RCC_FLOAT32, RCC_SUM, 100, 0, s + 2, NULL, rank, n);
        ar_init(&e, RCC_FLOAT32, RCC_SUM, 200, 1, s + 3, NULL, rank, n);
        ar_init(&h, RCC_FLOAT32, RCC_MAX, 50, 0, s + 4, NULL, rank, n);
        ar_init(&i, RCC_FLOAT32, RCC_SUM, 300, 0, s + 5, NULL, rank, n);
        /* broadcast of 3001 float64 from the last rank, out of place */
        bufs_init(&bc, RCC_FLOAT64, rank == root ? 3001 : 0, 3001);
        snprintf(bc.what, sizeof bc.what, "rank %d of %d: broadcast in a mixed group", rank, n);
        td_fill(bc.want, 0, 3001, s + 6, root, RCC_FLOAT64, RCC_SUM);
        if (rank == root) {
            td_fill(bc.send, 0, 3001, s + 6, root, RCC_FLOAT64, RCC_SUM);
            bufs_snap(&bc);
        }
        /* allgather of 777 bfloat16 */
        bufs_init(&ag, RCC_BFLOAT16, 777, (size_t)n * 777);
        snprintf(ag.what, sizeof ag.what, "rank %d of %d: allgather in a mixed group", rank, n);
        td_fill(ag.send, 0, 777, s + 7, rank, RCC_BFLOAT16, RCC_SUM);
        bufs_snap(&ag);
        for (int r = 0; r < n; r++)
            td_fill(ag.want + (size_t)r * 777 * 2, 0, 777, s + 7, r, RCC_BFLOAT16, RCC_SUM);
        msg_init(&out, "mixed group", RCC_UINT8, 5000, msg_seed(s + 8, rank, right, 0), rank, right,
                 rank, n, MSG_OUT);
        msg_init(&in, "mixed group", RCC_UINT8, 5000, msg_seed(s + 8, left, rank, 0), left, rank,
                 rank, n, MSG_IN);
        a2a_init(&at, RCC_INT32, 33, s + 9, rank, n);

        EXPECT_OK(rcc_group_start(), NULL);
        EXPECT_OK(rcc_allreduce(a.send, a.recv, 1000, RCC_INT32, RCC_SUM, comm), comm);
        EXPECT_OK(rcc_broadcast(bc.send, bc.recv, 3001, RCC_FLOAT64, root, comm), comm);
        if (round != 1)
            EXPECT_OK(rcc_send(out.send, 5000, RCC_UINT8, right, comm), comm);
        else
            EXPECT_OK(rcc_recv(in.recv, 5000, RCC_UINT8, left, comm), comm);
        EXPECT_OK(rcc_allreduce(d.send, d.recv, 100, RCC_FLOAT32, RCC_SUM, comm), comm);
        EXPECT_OK(rcc_allreduce(e.send, e.send, 200, RCC_FLOAT32, RCC_SUM, comm), comm);
        if (round != 1)
            EXPECT_OK(rcc_recv(in.recv, 5000, RCC_UINT8, left, comm), comm);
        else
            EXPECT_OK(rcc_send(out.send, 5000, RCC_UINT8, right, comm), comm);
        EXPECT_OK(rcc_allgather(ag.send, ag.recv, 777, RCC_BFLOAT16, comm), comm);
        EXPECT_OK(rcc_alltoall(at.send, at.recv, 33, RCC_INT32, comm), comm);
        EXPECT_OK(rcc_iallreduce(h.send, h.recv, 50, RCC_FLOAT32, RCC_MAX, comm, &h.req), comm);
        EXPECT_OK(rcc_allreduce(i.send, i.recv, 300, RCC_FLOAT32, RCC_SUM, comm), comm);
        EXPECT_OK(rcc_group_end(), NULL);
        EXPECT_OK(rcc_wait(&h.req), NULL);
        bad |= ar_check(&a) | ar_check(&d) | ar_check(&e) | ar_check(&h) | ar_check(&i);
        bad |= bufs_check(&bc) | bufs_check(&ag) | bufs_check(&out) | bufs_check(&in);
        bad |= a2a_check(&at, 33, n);
        bufs_free(&a), bufs_free(&d), bufs_free(&e), bufs_free(&h), bufs_free(&i);
        bufs_free(&bc), bufs_free(&ag), bufs_free(&out), bufs_free(&in), bufs_free(&at);
    }
    return td_finish(comm, bad);
}

START_TEST(group_mixed_kinds) { ck_assert_int_eq(mp_run(_i, rank_group_mixed_kinds, NULL, 60), 0); }
END_TEST

/* Point-to-point calls before the collectives of a group on some ranks and
 * after them on others, with messages too big for the socket buffers (a
 * send cannot finish before its receive is posted): the group must not
 * make either side wait for the other. */
static int rank_group_p2p_placement(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t comm = mp_comm(10000);
    int right = (rank + 1) % n, left = (rank + n - 1) % n, bad = 0;
    const size_t big = (size_t)6 << 20;
    bufs_t a, out, in;
    ar_init(&a, RCC_FLOAT32, RCC_SUM, (size_t)1 << 20, 0, 11, NULL, rank, n);
    msg_init(&out, "placement", RCC_UINT8, big, msg_seed(12, rank, right, 0), rank, right, rank, n,
             MSG_OUT);
    msg_init(&in, "placement", RCC_UINT8, big, msg_seed(12, left, rank, 0), left, rank, rank, n,
             MSG_IN);
    EXPECT_OK(rcc_group_start(), NULL);
    if (rank % 2 == 0 && n > 1) {
        EXPECT_OK(rcc_send(out.send, big, RCC_UINT8, right, comm), comm);
        EXPECT_OK(rcc_recv(in.recv, big, RCC_UINT8, left, comm), comm);
    }
    EXPECT_OK(rcc_allreduce(a.send, a.recv, (size_t)1 << 20, RCC_FLOAT32, RCC_SUM, comm), comm);
    EXPECT_OK(rcc_barrier(comm), comm);
    if (rank % 2 == 1 || n == 1) {
        EXPECT_OK(rcc_recv(in.recv, big, RCC_UINT8, left, comm), comm);
        EXPECT_OK(rcc_send(out.send, big, RCC_UINT8, right, comm), comm);
    }
    EXPECT_OK(rcc_group_end(), NULL);
    bad |= ar_check(&a) | bufs_check(&out) | bufs_check(&in);
    bufs_free(&a), bufs_free(&out), bufs_free(&in);
    return td_finish(comm, bad);
}

START_TEST(group_p2p_placement)
{
    ck_assert_int_eq(mp_run(_i, rank_group_p2p_placement, NULL, 60), 0);
}
END_TEST

/* =========================================================================
 * Splitting communicators
 * ========================================================================= */

/* Checks rank and size of a communicator from a split. */
static int check_shape(rcc_comm_t c, int want_rank, int want_size, const char *what, int world)
{
    int r = -1, s = -1;
    rcc_comm_rank(c, &r);
    rcc_comm_size(c, &s);
    if (r != want_rank || s != want_size)
        MP_FAIL("world rank %d: %s: rank %d of %d, expected %d of %d", world, what, r, s, want_rank,
                want_size);
    return 0;
}

/* An allreduce and an allgather on `c`, whose rank j is world rank who[j]:
 * the allgather's blocks show that the ranks are in the expected order. */
static int exercise(rcc_comm_t c, const int *who, int rank, int n, unsigned seed, size_t count,
                    int k)
{
    static const dtop_t kinds[] = {{RCC_INT32, RCC_SUM},
                                   {RCC_FLOAT32, RCC_MAX},
                                   {RCC_FLOAT64, RCC_SUM},
                                   {RCC_INT64, RCC_MIN},
                                   {RCC_BFLOAT16, RCC_SUM}};
    const dtop_t *p = &kinds[k % 5];
    int bad = 0;
    bufs_t a;
    ar_init(&a, p->dt, p->op, count, k % 3 == 1, seed, who, rank, n);
    rcc_result_t res = rcc_allreduce(a.send, ar_out(&a), count, p->dt, p->op, c);
    if (res != RCC_SUCCESS) {
        fprintf(stderr, "%s: %s: %s\n", a.what, rcc_result_name(res), rcc_last_error(c));
        bufs_free(&a);
        return 1;
    }
    bad |= ar_check(&a);
    bufs_free(&a);

    size_t es = rcc_datatype_size(p->dt);
    bufs_t g;
    bufs_init(&g, p->dt, count, (size_t)n * count);
    snprintf(g.what, sizeof g.what, "rank %d of %d (world %d): allgather #%u (%zu %s)", rank, n,
             who[rank], seed, count, rcc_datatype_name(p->dt));
    td_fill(g.send, 0, count, seed + 1, who[rank], p->dt, RCC_SUM);
    bufs_snap(&g);
    for (int j = 0; j < n; j++)
        td_fill(g.want + (size_t)j * count * es, 0, count, seed + 1, who[j], p->dt, RCC_SUM);
    res = rcc_allgather(g.send, g.recv, count, p->dt, c);
    if (res != RCC_SUCCESS) {
        fprintf(stderr, "%s: %s: %s\n", g.what, rcc_result_name(res), rcc_last_error(c));
        bad = 1;
    } else {
        bad |= bufs_check(&g);
    }
    bufs_free(&g);
    return bad;
}

typedef struct {
    rcc_comm_t comm;
    const int *who;
    int rank, n, iters;
    unsigned seed;
    int bad;
} split_job_t;

static void *split_thread(void *arg)
{
    static const size_t counts[] = {1, 33, 1000, 20011, 0, 4096};
    split_job_t *job = arg;
    for (int k = 0; k < job->iters && !job->bad; k++)
        job->bad |= exercise(job->comm, job->who, job->rank, job->n, job->seed + 2u * (unsigned)k,
                             counts[k % 6], k);
    return NULL;
}

/* 6 ranks as a 2 x 3 grid: rows and columns, used from two threads at once;
 * then a split leaving some ranks out, and a split of a split. */
static int rank_split_grid(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t world = mp_comm(30000), row = NULL, col = NULL;
    int bad = 0, r = rank / 3, c = rank % 3;
    EXPECT_OK(rcc_comm_split(world, r, c, &row), world);
    EXPECT_OK(rcc_comm_split(world, c, -r, &col), world);
    if (!row || !col)
        MP_FAIL("rank %d: a split with a color gave no communicator", rank);
    if (check_shape(row, c, 3, "row", rank) || check_shape(col, 1 - r, 2, "column", rank))
        return 1;
    int row_who[3] = {r * 3, r * 3 + 1, r * 3 + 2};
    int col_who[2] = {3 + c, c}; /* key -(rank/3): the second row first */

    split_job_t jr = {row, row_who, c, 3, 60, 10000u + 100000u * (unsigned)r, 0};
    split_job_t jc = {col, col_who, 1 - r, 2, 60, 20000u + 100000u * (unsigned)c, 0};
    pthread_t tr, tc;
    pthread_create(&tr, NULL, split_thread, &jr);
    pthread_create(&tc, NULL, split_thread, &jc);
    pthread_join(tr, NULL);
    pthread_join(tc, NULL);
    bad |= jr.bad | jc.bad;
    /* The parent still works. */
    bad |= exercise(world, (int[]){0, 1, 2, 3, 4, 5}, rank, n, 30000, 1001, 0);

    /* Odd ranks take part without joining; the even ones in reverse order. */
    int dummy;
    rcc_comm_t even = (rcc_comm_t)(void *)&dummy;
    EXPECT_OK(rcc_comm_split(world, rank % 2 ? RCC_SPLIT_NOCOLOR : 5, -rank, &even), world);
    if (rank % 2 && even)
        MP_FAIL("rank %d: RCC_SPLIT_NOCOLOR gave a communicator", rank);
    if (!(rank % 2)) {
        if (!even)
            MP_FAIL("rank %d: no communicator from a split with a color", rank);
        if (check_shape(even, (4 - rank) / 2, 3, "even ranks, reversed", rank))
            return 1;
        bad |= exercise(even, (int[]){4, 2, 0}, (4 - rank) / 2, 3, 40000, 5003, 1);
        bad |= exercise(even, (int[]){4, 2, 0}, (4 - rank) / 2, 3, 40010, 1, 2);
    }

    /* A split of the row: its ranks 0 and 2 together, 1 alone; order kept
     * (equal keys: by rank in the row). */
    rcc_comm_t sub = NULL;
    EXPECT_OK(rcc_comm_split(row, c % 2, 0, &sub), row);
    if (!sub)
        MP_FAIL("rank %d: the split of the row gave no communicator", rank);
    if (c % 2 == 0) {
        if (check_shape(sub, c / 2, 2, "row ranks 0 and 2", rank))
            return 1;
        bad |=
            exercise(sub, (int[]){r * 3, r * 3 + 2}, c / 2, 2, 50000u + (unsigned)r * 100, 999, 3);
    } else {
        if (check_shape(sub, 0, 1, "row rank 1 alone", rank))
            return 1;
        bad |= exercise(sub, (int[]){rank}, 0, 1, 51000u + (unsigned)r * 100, 999, 4);
    }
    /* Nobody joins: NULL everywhere. */
    rcc_comm_t none = (rcc_comm_t)(void *)&dummy;
    EXPECT_OK(rcc_comm_split(col, RCC_SPLIT_NOCOLOR, 0, &none), col);
    if (none)
        MP_FAIL("rank %d: a split with RCC_SPLIT_NOCOLOR everywhere gave a communicator", rank);

    /* The rows and columns once more, after the other splits. */
    bad |= exercise(row, row_who, c, 3, 60000u + 100u * (unsigned)r, 777, 0);
    bad |= exercise(col, col_who, 1 - r, 2, 61000u + 100u * (unsigned)c, 777, 2);

    EXPECT_OK(rcc_comm_destroy(sub), NULL);
    if (!(rank % 2))
        EXPECT_OK(rcc_comm_destroy(even), NULL);
    EXPECT_OK(rcc_comm_destroy(row), NULL);
    EXPECT_OK(rcc_comm_destroy(col), NULL);
    return td_finish(world, bad);
}

START_TEST(split_grid) { ck_assert_int_eq(mp_run(6, rank_split_grid, NULL, 120), 0); }
END_TEST

/* All ranks one color: the parent's ranks, ordered by key (ties by rank). */
static int rank_split_one_color(int rank, int n, void *arg)
{
    (void)arg;
    rcc_comm_t world = mp_comm(30000);
    int bad = 0, who[8];

    /* Equal keys: the parent's order. */
    rcc_comm_t same = NULL;
    EXPECT_OK(rcc_comm_split(world, 3, 0, &same), world);
    if (check_shape(same, rank, n, "one color, equal keys", rank))
        return 1;
    for (int j = 0; j < n; j++)
        who[j] = j;
    bad |= exercise(same, who, rank, n, 100, 1021, 0);

    /* Keys reversing the order. */
    rcc_comm_t rev = NULL;
    EXPECT_OK(rcc_comm_split(world, 0, n - 1 - rank, &rev), world);
    if (check_shape(rev, n - 1 - rank, n, "one color, reversing keys", rank))
        return 1;
    for (int j = 0; j < n; j++)
        who[j] = n - 1 - j;
    bad |= exercise(rev, who, n - 1 - rank, n, 200, 1021, 1);

    /* Keys with ties: (n-1-rank)/2, ties broken by the parent rank. */
    rcc_comm_t ties = NULL;
    EXPECT_OK(rcc_comm_split(world, 1, (n - 1 - rank) / 2, &ties), world);
    int m = 0, mine = -1;
    for (int key = 0; key <= (n - 1) / 2; key++)
        for (int q = 0; q < n; q++)
            if ((n - 1 - q) / 2 == key) {
                if (q == rank)
                    mine = m;
                who[m++] = q;
            }
    if (check_shape(ties, mine, n, "one color, tied keys", rank))
        return 1;
    bad |= exercise(ties, who, mine, n, 300, 4099, 2);

    /* Refused: a color below RCC_SPLIT_NOCOLOR, no output pointer. */
    rcc_comm_t junk = NULL;
    EXPECT_RESULT(rcc_comm_split(world, -2, 0, &junk), RCC_ERR_INVALID_ARGUMENT, "color", NULL);
    EXPECT_RESULT(rcc_comm_split(world, 0, 0, NULL), RCC_ERR_INVALID_ARGUMENT, "newcomm", NULL);
    EXPECT_RESULT(rcc_comm_split(NULL, 0, 0, &junk), RCC_ERR_INVALID_ARGUMENT, "comm", NULL);
    if (junk)
        MP_FAIL("a refused split set *newcomm");

    /* A child works on after its parent is gone. */
    EXPECT_OK(rcc_comm_destroy(same), NULL);
    EXPECT_OK(rcc_comm_destroy(rev), NULL);
    EXPECT_OK(rcc_comm_destroy(world), NULL);
    bad |= exercise(ties, who, mine, n, 400, 333, 3);
    return td_finish(ties, bad);
}

START_TEST(split_one_color) { ck_assert_int_eq(mp_run(_i, rank_split_one_color, NULL, 60), 0); }
END_TEST

/* ---------------------------------------------------------------------------- */

static Suite *groups_suite(void)
{
    Suite *s = suite_create("mp_groups");
    TCase *p2p = tcase_create("p2p");
    tcase_set_timeout(p2p, 300);
    tcase_add_loop_test(p2p, p2p_ring, 1, 6);
    tcase_add_loop_test(p2p, p2p_all_peers, 1, 6);
    tcase_add_loop_test(p2p, p2p_self, 1, 4);
    tcase_add_loop_test(p2p, p2p_nonblocking, 1, 6);
    tcase_add_loop_test(p2p, p2p_in_order, 2, 6);
    tcase_add_loop_test(p2p, p2p_errors, 1, 6);
    suite_add_tcase(s, p2p);
    TCase *mismatch = tcase_create("p2p_mismatch");
    tcase_set_timeout(mismatch, 120);
    tcase_add_loop_test(mismatch, p2p_count_mismatch, 0, 3);
    suite_add_tcase(s, mismatch);
    TCase *a2a = tcase_create("alltoall");
    tcase_set_timeout(a2a, 300);
    tcase_add_loop_test(a2a, alltoall, 1, 6);
    suite_add_tcase(s, a2a);
    TCase *groups = tcase_create("groups");
    tcase_set_timeout(groups, 300);
    tcase_add_loop_test(groups, group_500_allreduces, 1, 6);
    tcase_add_loop_test(groups, group_mixed_types, 1, 6);
    tcase_add_loop_test(groups, group_small_fusion, 1, 6);
    tcase_add_loop_test(groups, group_nonblocking, 1, 6);
    tcase_add_loop_test(groups, group_nested, 1, 6);
    tcase_add_test(groups, group_end_without_start);
    tcase_add_loop_test(groups, group_mixed_kinds, 1, 6);
    tcase_add_loop_test(groups, group_p2p_placement, 1, 6);
    suite_add_tcase(s, groups);
    TCase *split = tcase_create("split");
    tcase_set_timeout(split, 300);
    tcase_add_test(split, split_grid);
    tcase_add_loop_test(split, split_one_color, 1, 6);
    suite_add_tcase(s, split);
    return s;
}

RCC_TEST_MAIN(groups_suite)
