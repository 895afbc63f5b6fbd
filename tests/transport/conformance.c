/*
 * The transport conformance suite: one set of tests, run over each transport
 * that was built (meson test transport_NAME runs `test_transport NAME`),
 * through the ops table of transports/transport.h alone. Two forked ranks
 * (tests/mp's harness) on loopback: rank 0 listens and publishes its handle
 * in shared memory, rank 1 connects. Every payload is compared byte for
 * byte, with guard bytes past its end; every wait has a deadline.
 *
 * A transport that cannot run here (no device) makes the program print
 * "SKIP: NAME: reason" and exit 77, meson's skip. `test_transport NAME fake`
 * runs it on the stand-in GPU (tests/mp/fakedev.c, whose "device memory"
 * the forked ranks share through its IPC): cudaipc in every build. The ranks use 127.0.0.1,
 * or with RCC_SOCKET_IFNAME set the address of that interface (an RDMA
 * device's, for ibverbs: RCC_SOCKET_IFNAME=eth0 meson test transport_ibverbs).
 * Built with tests/verbsim/ (-DRCC_VERBSIM, test_transport_verbsim), the
 * verbs transport runs on a model of an RDMA adapter, and each rank also
 * fails on any misuse of the verbs API the model saw.
 * Built without Check too (tests/minicheck.h), as the gpu suite's
 * gpu_transport_cudaipc, so that it runs for cudaipc on the GPU machine.
 */
#include <arpa/inet.h>
#ifdef RCC_MINICHECK
#include "../minicheck.h" /* the GPU machine has no Check */
#else
#include <check.h>
#endif
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "err.h"
#include "ipcmem.h"
#include "socket.h"
#include "fakedev.h"
#include "mp.h"
#include "comm.h" /* rcci_sig_describe */
#include "devapi.h"
#include "transport.h"
#ifdef RCC_VERBSIM
#include "verbsim.h"
#endif

#define CONF_TIMEOUT_S 60
#define CONF_WAIT_NS (20ll * 1000000000)
#define GUARD 16

static const rcci_transport_t *tr;

/* What rank 0 publishes for rank 1: a listener's handle, and which
 * connection (its tag + 1) it is for. */
typedef struct {
    uint32_t ready;
    uint8_t handle[RCCI_HANDLE_BYTES];
    pid_t pid;             /* connect_start_to_stopped_peer: rank 0's */
    uint32_t queued_phase; /* queued_messages: 1 rank 0 has checked, 2 rank 1 has queued */
} conf_shared_t;

static conf_shared_t *conf_shared(void)
{
    size_t size;
    return mp_shared(&size);
}

static rcci_transport_env_t conf_env(int rank)
{
    rcci_transport_env_t env = {.rank = rank, .nranks = 2, .comm_id = 0x5eed};
    memset(env.secret, 0xa5, sizeof env.secret);
    const char *ifname = getenv("RCC_SOCKET_IFNAME");
    rcci_addr_t a = {.len = sizeof(struct sockaddr_in)};
    char name[64];
    a.u.in = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (ifname && *ifname && rcci_addr_pick_local(ifname, NULL, &a, name, sizeof name))
        fprintf(stderr, "RCC_SOCKET_IFNAME=%s: %s; using 127.0.0.1\n", ifname, rcci_tls_error());
    memcpy(&env.local_addr, &a.u, a.len);
    env.local_addr_len = a.len;
    env.describe_sig = rcci_sig_describe;
    return env;
}

static rcci_tag_t conf_tag(uint32_t seq)
{
    rcci_tag_t t = {.seq = seq};
    memset(t.sig, 0, sizeof t.sig);
    return t;
}

static void conf_fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

/* A buffer with GUARD bytes of 0xee past its end. */
static uint8_t *conf_buf(size_t n)
{
    uint8_t *p = malloc(n + GUARD);
    memset(p, 0, n);
    memset(p + n, 0xee, GUARD);
    return p;
}

static int conf_check(const uint8_t *p, size_t n, uint32_t seed)
{
    uint8_t *want = malloc(n + 1);
    conf_fill(want, n, seed);
    int ok = memcmp(p, want, n) == 0;
    free(want);
    for (int i = 0; i < GUARD; i++)
        ok = ok && p[n + i] == 0xee;
    return ok;
}

/* Tests until done, sleeping on wait_fd between tries; the result, or
 * RCC_ERR_TIMEOUT at the deadline. */
static rcc_result_t conf_wait(rcci_conn_t *c, rcci_request_t *req, int64_t deadline)
{
    for (;;) {
        int done;
        rcc_result_t res = tr->test(req, &done);
        if (res != RCC_SUCCESS || done)
            return res;
        if (rcci_now_ns() > deadline)
            return RCC_ERR_TIMEOUT;
        int fd = tr->wait_fd(c);
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLOUT};
        if (fd >= 0)
            poll(&p, 1, 1);
    }
}

/* Both ends of one connection, set up per rank. */
typedef struct {
    void *ctx;
    rcci_listener_t *listener;
    rcci_conn_t *conn;
} conf_end_t;

static int conf_connect(int rank, uint32_t tag, conf_end_t *e)
{
    conf_shared_t *s = conf_shared();
    rcci_transport_env_t env = conf_env(rank);
    int64_t deadline = rcci_now_ns() + CONF_WAIT_NS;
    *e = (conf_end_t){0};
    if (tr->init(&env, &e->ctx) != RCC_SUCCESS)
        MP_FAIL("init: %s", rcci_tls_error());
    if (rank == 0) {
        uint8_t handle[RCCI_HANDLE_BYTES];
        if (tr->listen(e->ctx, handle, &e->listener) != RCC_SUCCESS)
            MP_FAIL("listen: %s", rcci_tls_error());
        memcpy(s->handle, handle, sizeof handle);
        __atomic_store_n(&s->ready, tag + 1, __ATOMIC_RELEASE);
        if (tr->accept(e->listener, 1, tag, deadline, &e->conn) != RCC_SUCCESS)
            MP_FAIL("accept: %s", rcci_tls_error());
    } else {
        while (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != tag + 1) {
            if (rcci_now_ns() > deadline)
                MP_FAIL("rank 0 never listened");
            usleep(1000);
        }
        if (tr->connect(e->ctx, s->handle, tag, deadline, &e->conn) != RCC_SUCCESS)
            MP_FAIL("connect: %s", rcci_tls_error());
    }
    return 0;
}

static void conf_close(conf_end_t *e)
{
    if (e->conn)
        tr->close(e->conn);
    if (e->listener)
        tr->close_listener(e->listener);
    if (e->ctx)
        tr->fini(e->ctx);
}

/* Sends (rank `from`) or receives one message of `n` bytes and checks it. */
static int conf_move(conf_end_t *e, int sending, size_t n, uint32_t seq)
{
    uint8_t *buf = conf_buf(n);
    rcci_tag_t tag = conf_tag(seq);
    rcci_request_t *req;
    if (sending)
        conf_fill(buf, n, seq);
    rcc_result_t res = sending ? tr->isend(e->conn, buf, n, &tag, NULL, &req)
                               : tr->irecv(e->conn, buf, n, &tag, NULL, &req);
    if (res == RCC_SUCCESS)
        res = conf_wait(e->conn, req, rcci_now_ns() + CONF_WAIT_NS);
    int ok = res == RCC_SUCCESS && conf_check(buf, n, seq);
    free(buf);
    if (!ok)
        MP_FAIL("%s of %zu bytes (#%u): %s: %s", sending ? "send" : "receive", n, seq,
                rcc_strerror(res), res == RCC_SUCCESS ? "the bytes differ" : rcci_tls_error());
    return 0;
}

/* Each rank runs `conf_body`; on the verbs model it must also have used
 * the verbs API rightly throughout (verbsim.h). */
static mp_rank_fn conf_body;

static int conf_rank(int rank, int nranks, void *arg)
{
    int rc = conf_body(rank, nranks, arg);
#ifdef RCC_VERBSIM
    if (rc == 0 && verbsim_violations())
        MP_FAIL("%d misuses of the verbs API (the \"verbsim:\" lines above)", verbsim_violations());
#endif
    return rc;
}

static int conf_run(mp_rank_fn fn)
{
    conf_body = fn; /* before the ranks fork */
    return mp_run(2, conf_rank, NULL, CONF_TIMEOUT_S);
}

/* ---- connect ---- */

static int connect_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 7, &e))
        return 1;
    /* One message each way proves both directions. */
    if (conf_move(&e, rank == 1, 100, 1) || conf_move(&e, rank == 0, 3, 2))
        return 1;
    if (rank == 0) { /* a tag nobody connects with: the deadline, not a hang */
        int64_t t0 = rcci_now_ns();
        rcci_conn_t *none;
        rcc_result_t res = tr->accept(e.listener, 1, 99, t0 + 300000000ll, &none);
        if (res != RCC_ERR_TIMEOUT || rcci_now_ns() - t0 > 5000000000ll)
            MP_FAIL("accept of a tag never sent gave %s", rcc_strerror(res));
    }
    conf_close(&e);
    return 0;
}

START_TEST(connect_both_ways) { ck_assert_int_eq(conf_run(connect_rank), 0); }
END_TEST

/* ibverbs only: ends whose slot geometries differ (RCC_IB_SLOTS) cannot
 * talk. The accepting end refuses with the reason, and both fail at once
 * naming the parameter, not by the deadline. Other transports have no
 * such parameter. */
static int geometry_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    if (strcmp(tr->name, "ibverbs") != 0)
        return 0;
    if (rank == 1)
        setenv("RCC_IB_SLOTS", "4", 1); /* before the parameters are first read */
    conf_shared_t *s = conf_shared();
    rcci_transport_env_t env = conf_env(rank);
    int64_t t0 = rcci_now_ns(), deadline = t0 + CONF_WAIT_NS;
    void *ctx;
    rcci_listener_t *l = NULL;
    rcci_conn_t *c = NULL;
    if (tr->init(&env, &ctx) != RCC_SUCCESS)
        MP_FAIL("init: %s", rcci_tls_error());
    rcc_result_t res;
    if (rank == 0) {
        uint8_t handle[RCCI_HANDLE_BYTES];
        if (tr->listen(ctx, handle, &l) != RCC_SUCCESS)
            MP_FAIL("listen: %s", rcci_tls_error());
        memcpy(s->handle, handle, sizeof handle);
        __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
        res = tr->accept(l, 1, 0, deadline, &c);
    } else {
        while (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != 1) {
            if (rcci_now_ns() > deadline)
                MP_FAIL("rank 0 never listened");
            usleep(1000);
        }
        res = tr->connect(ctx, s->handle, 0, deadline, &c);
    }
    double took = (rcci_now_ns() - t0) / 1e9;
    if (res == RCC_SUCCESS || !strstr(rcci_tls_error(), "RCC_IB_SLOTS") || took > 5)
        MP_FAIL("%s with 8 and 4 slots: %s after %.1f s: %s", rank ? "connect" : "accept",
                rcc_strerror(res), took, rcci_tls_error());
    if (c)
        tr->close(c);
    if (l)
        tr->close_listener(l);
    tr->fini(ctx);
    return 0;
}

START_TEST(refusal_says_why) { ck_assert_int_eq(conf_run(geometry_rank), 0); }
END_TEST

/* ---- sizes ---- */

static const size_t sizes[] = {0,       1,     2,      3,      7,       47,
                               48,      49,    4095,   4096,   4097,    65535,
                               65536,   65537, 100003, 262144, 1 << 20, (1 << 20) + 7,
                               3 << 20, 5,     0,      1};

/* Rank 1 sends every size, rank 0 receives and sends each back. */
static int sizes_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (conf_move(&e, rank == 1, sizes[i], (uint32_t)i) ||
            conf_move(&e, rank == 0, sizes[i], 1000 + (uint32_t)i))
            return 1;
    conf_close(&e);
    return 0;
}

START_TEST(many_sizes) { ck_assert_int_eq(conf_run(sizes_rank), 0); }
END_TEST

/* ---- out-of-order completion ---- */

#define OOO_N 24

/* All requests posted at once, then tested from the last to the first:
 * testing any request moves the connection. */
static int ooo_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    uint8_t *buf[OOO_N];
    rcci_request_t *req[OOO_N];
    int64_t deadline = rcci_now_ns() + CONF_WAIT_NS;
    for (int i = 0; i < OOO_N; i++) {
        size_t n = (size_t)(i * 7919) % 200000 + (size_t)i;
        buf[i] = conf_buf(n);
        rcci_tag_t tag = conf_tag((uint32_t)i);
        rcc_result_t res;
        if (rank == 1) {
            conf_fill(buf[i], n, (uint32_t)i);
            res = tr->isend(e.conn, buf[i], n, &tag, NULL, &req[i]);
        } else {
            res = tr->irecv(e.conn, buf[i], n, &tag, NULL, &req[i]);
        }
        if (res != RCC_SUCCESS)
            MP_FAIL("post #%d: %s", i, rcci_tls_error());
    }
    for (int i = OOO_N - 1; i >= 0; i--) {
        size_t n = (size_t)(i * 7919) % 200000 + (size_t)i;
        rcc_result_t res = conf_wait(e.conn, req[i], deadline);
        if (res != RCC_SUCCESS)
            MP_FAIL("request #%d: %s: %s", i, rcc_strerror(res), rcci_tls_error());
        if (!conf_check(buf[i], n, (uint32_t)i))
            MP_FAIL("message #%d (%zu bytes) differs", i, n);
        free(buf[i]);
    }
    conf_close(&e);
    return 0;
}

START_TEST(out_of_order_completion) { ck_assert_int_eq(conf_run(ooo_rank), 0); }
END_TEST

/* ---- flow control under pressure ---- */

#define PRESS_N 48
#define PRESS_BYTES (256 * 1024 + 3)

/* Both ranks post PRESS_N sends at once, far beyond any buffering, and the
 * receives only 0.2 s later, one at a time: nothing may be lost,
 * overwritten or deadlocked. */
static int pressure_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    uint8_t *out[PRESS_N];
    rcci_request_t *sreq[PRESS_N];
    int64_t deadline = rcci_now_ns() + CONF_WAIT_NS;
    for (int i = 0; i < PRESS_N; i++) {
        out[i] = conf_buf(PRESS_BYTES);
        conf_fill(out[i], PRESS_BYTES, (uint32_t)(rank * 1000 + i));
        rcci_tag_t tag = conf_tag((uint32_t)i);
        if (tr->isend(e.conn, out[i], PRESS_BYTES, &tag, NULL, &sreq[i]) != RCC_SUCCESS)
            MP_FAIL("isend #%d: %s", i, rcci_tls_error());
    }
    usleep(200000);
    uint8_t *in = conf_buf(PRESS_BYTES);
    for (int i = 0; i < PRESS_N; i++) {
        rcci_tag_t tag = conf_tag((uint32_t)i);
        rcci_request_t *r;
        memset(in, 0, PRESS_BYTES);
        if (tr->irecv(e.conn, in, PRESS_BYTES, &tag, NULL, &r) != RCC_SUCCESS ||
            conf_wait(e.conn, r, deadline) != RCC_SUCCESS)
            MP_FAIL("receive #%d: %s", i, rcci_tls_error());
        if (!conf_check(in, PRESS_BYTES, (uint32_t)((1 - rank) * 1000 + i)))
            MP_FAIL("message #%d differs", i);
    }
    for (int i = 0; i < PRESS_N; i++) {
        if (conf_wait(e.conn, sreq[i], deadline) != RCC_SUCCESS)
            MP_FAIL("send #%d: %s", i, rcci_tls_error());
        if (!conf_check(out[i], PRESS_BYTES, (uint32_t)(rank * 1000 + i)))
            MP_FAIL("send buffer #%d was changed", i);
        free(out[i]);
    }
    free(in);
    conf_close(&e);
    return 0;
}

START_TEST(flow_control_under_pressure) { ck_assert_int_eq(conf_run(pressure_rank), 0); }
END_TEST

/* ---- large transfers ---- */

static int large_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    size_t n = mp_scaled((64u << 20) + 13); /* 64 MiB and 13 bytes */
    if (conf_move(&e, rank == 1, n, 1) || conf_move(&e, rank == 0, 1, 2))
        return 1;
    conf_close(&e);
    return 0;
}

START_TEST(large_transfer) { ck_assert_int_eq(conf_run(large_rank), 0); }
END_TEST

/* ---- mismatches ---- */

/* A message of another sequence number, then one of another length: the
 * receiver fails with RCC_ERR_MISMATCH, then (new connection) REMOTE. */
static int mismatch_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    static const struct {
        uint32_t send_seq, recv_seq;
        size_t send_n, recv_n;
        rcc_result_t want;
    } cases[] = {{5, 6, 64, 64, RCC_ERR_MISMATCH}, {5, 5, 64, 65, RCC_ERR_REMOTE}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        conf_end_t e;
        if (conf_connect(rank, (uint32_t)k, &e))
            return 1;
        uint8_t *buf = conf_buf(cases[k].recv_n + cases[k].send_n);
        rcci_tag_t tag = conf_tag(rank == 1 ? cases[k].send_seq : cases[k].recv_seq);
        rcci_request_t *r;
        rcc_result_t res = rank == 1 ? tr->isend(e.conn, buf, cases[k].send_n, &tag, NULL, &r)
                                     : tr->irecv(e.conn, buf, cases[k].recv_n, &tag, NULL, &r);
        if (res == RCC_SUCCESS)
            res = conf_wait(e.conn, r, rcci_now_ns() + CONF_WAIT_NS);
        if (rank == 0 && res != cases[k].want)
            MP_FAIL("case %zu: receive gave %s (%s), not %s", k, rcc_strerror(res),
                    rcci_tls_error(), rcc_strerror(cases[k].want));
        if (rank == 1) /* the receiver's verdict first, then the next connection */
            usleep(100000);
        free(buf);
        conf_close(&e);
    }
    return 0;
}

START_TEST(mismatches_are_named) { ck_assert_int_eq(conf_run(mismatch_rank), 0); }
END_TEST

/* ---- a failure notice ---- */

static int notice_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    if (rank == 1) {
        tr->notify(e.conn, RCC_ERR_MISMATCH, "rank 1 failed: waited too long for rank 3");
        usleep(300000); /* the notice lands before the close */
    } else {
        uint8_t buf[8];
        rcci_tag_t tag = conf_tag(0), seen;
        int found = RCCI_PEEK_NONE;
        int64_t deadline = rcci_now_ns() + CONF_WAIT_NS;
        rcc_result_t res = RCC_SUCCESS;
        while (res == RCC_SUCCESS && rcci_now_ns() < deadline) {
            res = tr->peek(e.conn, &seen, &found);
            usleep(1000);
        }
        if (res != RCC_ERR_MISMATCH || found != RCCI_PEEK_NOTICE ||
            !strstr(rcci_tls_error(), "waited too long for rank 3"))
            MP_FAIL("peek gave %s, found %d: %s", rcc_strerror(res), found, rcci_tls_error());
        rcci_request_t *r;
        res = tr->irecv(e.conn, buf, sizeof buf, &tag, NULL, &r);
        if (res == RCC_SUCCESS)
            res = conf_wait(e.conn, r, deadline);
        if (res != RCC_ERR_MISMATCH)
            MP_FAIL("a receive after the notice gave %s", rcc_strerror(res));
    }
    conf_close(&e);
    return 0;
}

START_TEST(failure_notice) { ck_assert_int_eq(conf_run(notice_rank), 0); }
END_TEST

/* ---- peek and announce ---- */

/* Rank 1 announces the operation it waits in, then sends a message rank 0
 * has not posted a receive for: peek reports the announcement (once), then
 * the message's tag without taking it; probe says the peer is there; the
 * receive posted afterwards gets the message whole. */
static int peek_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    if (rank == 1) {
        rcci_tag_t waiting = conf_tag(41);
        tr->announce(e.conn, &waiting);
        if (conf_move(&e, 1, 777, 42))
            return 1;
        usleep(200000); /* rank 0's checks, before the close */
        conf_close(&e);
        return 0;
    }
    int64_t deadline = rcci_now_ns() + CONF_WAIT_NS;
    int want[] = {RCCI_PEEK_ANNOUNCE, RCCI_PEEK_DATA, RCCI_PEEK_DATA};
    uint32_t want_seq[] = {41, 42, 42};
    for (int k = 0; k < 3; k++) {
        rcci_tag_t seen;
        int found = RCCI_PEEK_NONE;
        while (found == RCCI_PEEK_NONE && rcci_now_ns() < deadline) {
            if (tr->peek(e.conn, &seen, &found) != RCC_SUCCESS)
                MP_FAIL("peek #%d: %s", k, rcci_tls_error());
            if (found == RCCI_PEEK_NONE)
                usleep(1000);
        }
        if (found != want[k] || seen.seq != want_seq[k])
            MP_FAIL("peek #%d found %d (seq %u), not %d (seq %u)", k, found, seen.seq, want[k],
                    want_seq[k]);
    }
    if (tr->probe(e.conn) != RCC_SUCCESS)
        MP_FAIL("probe with a message waiting: %s", rcci_tls_error());
    if (conf_move(&e, 0, 777, 42))
        return 1;
    conf_close(&e);
    return 0;
}

START_TEST(peek_and_announce) { ck_assert_int_eq(conf_run(peek_rank), 0); }
END_TEST

/* ---- peer loss ---- */

/* Rank 1 dies (SIGKILL) while rank 0 waits in a receive: the receive, and
 * probe, fail with RCC_ERR_PEER_LOST well before the deadline. */
static int loss_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    if (rank == 1) {
        if (conf_move(&e, 1, 1000, 1))
            return 1;
        usleep(100000);
        kill(getpid(), SIGKILL);
    }
    if (conf_move(&e, 0, 1000, 1))
        return 1;
    uint8_t buf[64];
    rcci_tag_t tag = conf_tag(2);
    rcci_request_t *r;
    int64_t t0 = rcci_now_ns();
    rcc_result_t res = tr->irecv(e.conn, buf, sizeof buf, &tag, NULL, &r);
    if (res == RCC_SUCCESS)
        res = conf_wait(e.conn, r, t0 + CONF_WAIT_NS);
    if (res != RCC_ERR_PEER_LOST || rcci_now_ns() - t0 > 10000000000ll)
        MP_FAIL("receive from a dead peer gave %s after %.1f s: %s", rcc_strerror(res),
                (double)(rcci_now_ns() - t0) / 1e9, rcci_tls_error());
    if (tr->probe(e.conn) != RCC_ERR_PEER_LOST)
        MP_FAIL("probe of a dead peer did not say so");
    conf_close(&e);
    return 0;
}

START_TEST(peer_loss)
{
    int st[2];
    mp_run_status(2, loss_rank, NULL, CONF_TIMEOUT_S, st);
    ck_assert_int_eq(st[0], 0);
    ck_assert_int_eq(st[1], 128 + SIGKILL);
}
END_TEST

/* ---- a stopped peer ---- */

/* Rank 0 listens and is then stopped (SIGSTOP: a debugger, a job
 * scheduler's suspend). Rank 1's connect_start returns at once and no test
 * call waits: the engine's progress thread makes this call, and must go on
 * watching its other work. A receive then fails by the set-up deadline
 * (ibverbs: a stopped rank never accepts) or stays pending (TCP, cudaipc:
 * the kernel's backlog completed the connection). */
static int stopped_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_shared_t *s = conf_shared();
    rcci_transport_env_t env = conf_env(rank);
    void *ctx;
    if (tr->init(&env, &ctx) != RCC_SUCCESS)
        MP_FAIL("init: %s", rcci_tls_error());
    if (rank == 0) {
        uint8_t handle[RCCI_HANDLE_BYTES];
        rcci_listener_t *l;
        if (tr->listen(ctx, handle, &l) != RCC_SUCCESS)
            MP_FAIL("listen: %s", rcci_tls_error());
        memcpy(s->handle, handle, sizeof handle);
        s->pid = getpid();
        __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
        raise(SIGSTOP);
        for (;;) /* rank 1 kills it */
            pause();
    }
    int64_t t0 = rcci_now_ns();
    while (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != 1 || rcci_process_state(s->pid) != 'T') {
        if (rcci_now_ns() - t0 > CONF_WAIT_NS)
            MP_FAIL("rank 0 never listened and stopped");
        usleep(1000);
    }
    const int64_t setup_ns = 1500000000ll;
    t0 = rcci_now_ns();
    rcci_conn_t *c = NULL;
    rcc_result_t res = tr->connect_start(ctx, s->handle, 0, t0 + setup_ns, &c);
    double started = (rcci_now_ns() - t0) / 1e9;
    if (res != RCC_SUCCESS || started > 0.5)
        MP_FAIL("connect_start to a stopped peer: %s after %.2f s: %s", rcc_strerror(res), started,
                res == RCC_SUCCESS ? "" : rcci_tls_error());
    uint8_t buf[64];
    rcci_tag_t tag = conf_tag(1);
    rcci_request_t *r;
    if (tr->irecv(c, buf, sizeof buf, &tag, NULL, &r) != RCC_SUCCESS)
        MP_FAIL("irecv on a connection being set up: %s", rcci_tls_error());
    double longest = 0;
    int done = 0;
    while (res == RCC_SUCCESS && !done && rcci_now_ns() - t0 < setup_ns + 1200000000ll) {
        int64_t t = rcci_now_ns();
        res = tr->test(r, &done);
        double call = (rcci_now_ns() - t) / 1e9;
        longest = call > longest ? call : longest;
        struct pollfd p = {.fd = tr->wait_fd(c), .events = POLLIN};
        poll(&p, p.fd >= 0, 10);
    }
    double took = (rcci_now_ns() - t0) / 1e9;
    if (longest > 0.2)
        MP_FAIL("a test call on the connection to a stopped peer took %.2f s", longest);
    /* A connect_start that is connect itself connected without the peer;
     * any other must have failed by the deadline. */
    int connected = tr->connect_start == tr->connect;
    if (done || (connected ? res != RCC_SUCCESS : res != RCC_ERR_TIMEOUT))
        MP_FAIL("receive from a stopped peer: %s, %s after %.2f s: %s", rcc_strerror(res),
                done ? "done" : "not done", took, res == RCC_SUCCESS ? "" : rcci_tls_error());
    printf("%s: connect_start to a stopped peer returned in %.1f ms; the receive: %s after "
           "%.2f s\n",
           tr->name, started * 1e3, res == RCC_SUCCESS ? "still pending" : rcci_tls_error(), took);
    kill(s->pid, SIGKILL);
    tr->close(c);
    tr->fini(ctx);
    return 0;
}

START_TEST(connect_start_to_stopped_peer)
{
    int st[2];
    conf_body = stopped_rank;
    mp_run_status(2, conf_rank, NULL, CONF_TIMEOUT_S, st);
    ck_assert_int_eq(st[1], 0);
    ck_assert_int_eq(st[0], 128 + SIGKILL);
}
END_TEST

/* ---- teardown while busy ---- */

/* Rank 0 closes its connection with sends and receives in flight (they are
 * cancelled and freed: the sanitizer runs check no leak), then frees the
 * context; rank 1 gets the message whole or PEER_LOST, and PEER_LOST for
 * the next. */
static int teardown_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    size_t n = 8u << 20;
    uint8_t *a = conf_buf(n), *b = conf_buf(n);
    rcci_tag_t t0 = conf_tag(0), t1 = conf_tag(1);
    rcci_request_t *r0, *r1;
    int64_t deadline = rcci_now_ns() + CONF_WAIT_NS;
    if (rank == 0) {
        int done;
        if (tr->isend(e.conn, a, n, &t0, NULL, &r0) != RCC_SUCCESS ||
            tr->irecv(e.conn, b, n, &t1, NULL, &r1) != RCC_SUCCESS ||
            tr->test(r0, &done) != RCC_SUCCESS)
            MP_FAIL("posting: %s", rcci_tls_error());
        usleep(20000);
        conf_close(&e); /* r0 (unless done, then freed already) and r1 go with it */
    } else {
        rcc_result_t res = tr->irecv(e.conn, b, n, &t0, NULL, &r0);
        if (res == RCC_SUCCESS)
            res = conf_wait(e.conn, r0, deadline);
        if (res == RCC_SUCCESS) { /* it all came before the close */
            res = tr->irecv(e.conn, a, n, &t1, NULL, &r1);
            if (res == RCC_SUCCESS)
                res = conf_wait(e.conn, r1, deadline);
        }
        if (res != RCC_ERR_PEER_LOST)
            MP_FAIL("a receive from a peer that closed gave %s: %s", rcc_strerror(res),
                    rcci_tls_error());
        conf_close(&e);
    }
    free(a);
    free(b);
    return 0;
}

START_TEST(teardown_while_busy) { ck_assert_int_eq(conf_run(teardown_rank), 0); }
END_TEST

/* A request that completed while the connection moved for another, and was
 * never tested, is still the caller's until close, which frees it (the
 * sanitizer runs check no leak). Rank 0: its send completes while it waits
 * for rank 1's reply; rank 1: its reply completes while it waits for a
 * message that never comes (rank 0 closes). */
static int untested_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    size_t n = 4096;
    uint8_t *a = conf_buf(n), *b = conf_buf(n);
    rcci_tag_t t0 = conf_tag(0), t1 = conf_tag(1), t2 = conf_tag(2);
    rcci_request_t *untested, *r;
    if (rank == 0) {
        conf_fill(a, n, 0);
        if (tr->isend(e.conn, a, n, &t0, NULL, &untested) != RCC_SUCCESS)
            MP_FAIL("posting: %s", rcci_tls_error());
        if (conf_move(&e, 0, n, 1)) /* the reply */
            return 1;
    } else {
        if (conf_move(&e, 0, n, 0))
            return 1;
        conf_fill(a, n, 1);
        if (tr->isend(e.conn, a, n, &t1, NULL, &untested) != RCC_SUCCESS ||
            tr->irecv(e.conn, b, n, &t2, NULL, &r) != RCC_SUCCESS)
            MP_FAIL("posting: %s", rcci_tls_error());
        rcc_result_t res = conf_wait(e.conn, r, rcci_now_ns() + CONF_WAIT_NS);
        if (res != RCC_ERR_PEER_LOST)
            MP_FAIL("a receive from a peer that closed gave %s: %s", rcc_strerror(res),
                    rcci_tls_error());
    }
    conf_close(&e); /* `untested` goes with it */
    free(a);
    free(b);
    return 0;
}

START_TEST(close_frees_completed_untested) { ck_assert_int_eq(conf_run(untested_rank), 0); }
END_TEST

/* ---- in place (version 4) ---- */

/* A stream and an event of the device table, for in-place work. */
typedef struct {
    const rcci_devapi_t *dev;
    void *stream, *event;
} conf_dev_t;

/* The device table's stream and event, or the reason there are none. */
static rcc_result_t conf_dev_open(conf_dev_t *d)
{
    *d = (conf_dev_t){.dev = rcci_devapi()};
    if (!d->dev)
        return rcci_error(RCC_ERR_UNSUPPORTED, "no device table in this build");
    if (d->dev->stream_create(&d->stream) != RCC_SUCCESS)
        return RCC_ERR_CUDA;
    if (d->dev->event_create(&d->event) != RCC_SUCCESS) {
        d->dev->stream_destroy(d->stream);
        return RCC_ERR_CUDA;
    }
    return RCC_SUCCESS;
}

static void conf_dev_close(conf_dev_t *d)
{
    if (d->dev) {
        d->dev->event_destroy(d->event);
        d->dev->stream_destroy(d->stream);
    }
}

/* Waits until the stream's work so far is done. */
static int conf_dev_sync(conf_dev_t *d)
{
    int done = 0;
    int64_t deadline = rcci_now_ns() + CONF_WAIT_NS;
    if (d->dev->event_record(d->event, d->stream) != RCC_SUCCESS)
        MP_FAIL("event_record: %s", rcci_tls_error());
    while (!done) {
        if (d->dev->event_query(d->event, &done) != RCC_SUCCESS || rcci_now_ns() > deadline)
            MP_FAIL("the stream never finished: %s", rcci_tls_error());
        if (!done)
            usleep(50);
    }
    return 0;
}

#define INPLACE_MSGS 48
#define INPLACE_AHEAD 4 /* sends in flight */

/* Whether message i (of a pattern seeded by `who`) moves in place. */
static int inplace_pick(uint32_t i, uint32_t who)
{
    return ((i * 2654435761u + who) >> 7) % 3 != 0;
}

/* Posts receive i (in place or by irecv, by the receiver's pattern). */
static rcc_result_t inplace_post(conf_end_t *e, uint32_t i, size_t n, uint32_t seq, uint8_t **buf,
                                 const void **at, rcci_request_t **req)
{
    rcci_tag_t tag = conf_tag(seq);
    *buf = conf_buf(n);
    *at = NULL;
    return inplace_pick(i, 2) ? tr->irecv_inplace(e->conn, n, &tag, at, req)
                              : tr->irecv(e->conn, *buf, n, &tag, NULL, req);
}

/* One direction: the sender moves INPLACE_MSGS messages, some written
 * straight into the peer's memory (reserve_send + copy + commit_send), the
 * rest by isend; the receiver takes each in place (irecv_inplace, copied
 * out, release) or by irecv, on another pattern. Both keep INPLACE_AHEAD
 * in flight, so that fragments of both kinds are moving at once. Every
 * message is compared byte for byte. */
static int inplace_direction(conf_end_t *e, conf_dev_t *d, int sending, uint32_t base)
{
    size_t max = tr->inplace_bytes(e->conn, sending);
    size_t sizes[] = {0, 1, 7, 4096, 65537, max / 3 + 5, max};
    const size_t nsizes = sizeof sizes / sizeof *sizes;
    uint8_t *bufs[INPLACE_AHEAD] = {0};
    const void *ats[INPLACE_AHEAD] = {0};
    rcci_request_t *reqs[INPLACE_AHEAD] = {0};
    int64_t deadline = rcci_now_ns() + CONF_WAIT_NS;
    rcc_result_t res = RCC_SUCCESS;
    for (uint32_t i = 0; !sending && i < INPLACE_AHEAD; i++)
        if ((res = inplace_post(e, i, sizes[i % nsizes], base + i, &bufs[i], &ats[i], &reqs[i])))
            MP_FAIL("receive #%u: %s: %s", base + i, rcc_strerror(res), rcci_tls_error());
    for (uint32_t i = 0; i < INPLACE_MSGS + INPLACE_AHEAD; i++) {
        size_t k = i % INPLACE_AHEAD, n = sizes[i % nsizes];
        uint32_t seq = base + i;
        rcci_tag_t tag = conf_tag(seq);
        if (!sending) {
            if (i >= INPLACE_MSGS)
                break;
            res = conf_wait(e->conn, reqs[k], deadline);
            if (res == RCC_SUCCESS && ats[k] && n)
                res = d->dev->copy(bufs[k], ats[k], n, d->stream);
            if (res == RCC_SUCCESS && ats[k])
                res = tr->release(e->conn, d->stream);
            uint8_t *buf = bufs[k];
            int inplace = ats[k] != NULL;
            /* The next receive is posted before this one's copy is done. */
            uint32_t next = i + INPLACE_AHEAD;
            if (res == RCC_SUCCESS && next < INPLACE_MSGS)
                res = inplace_post(e, next, sizes[next % nsizes], base + next, &bufs[k], &ats[k],
                                   &reqs[k]);
            if (res == RCC_SUCCESS && inplace && conf_dev_sync(d))
                return 1;
            int ok = res == RCC_SUCCESS && conf_check(buf, n, seq);
            free(buf);
            if (!ok)
                MP_FAIL("receive #%u of %zu bytes (%s): %s: %s", seq, n,
                        inplace ? "in place" : "irecv", rcc_strerror(res),
                        res == RCC_SUCCESS ? "the bytes differ" : rcci_tls_error());
            continue;
        }
        if (reqs[k] || bufs[k]) { /* the oldest in flight, done before its slot is reused */
            if (reqs[k] && (res = conf_wait(e->conn, reqs[k], deadline)) != RCC_SUCCESS)
                MP_FAIL("send #%u: %s: %s", seq - INPLACE_AHEAD, rcc_strerror(res),
                        rcci_tls_error());
            free(bufs[k]);
            reqs[k] = NULL, bufs[k] = NULL;
        }
        if (i >= INPLACE_MSGS)
            continue;
        uint8_t *buf = conf_buf(n);
        conf_fill(buf, n, seq);
        if (inplace_pick(i, 1)) {
            void *at = NULL;
            while (res == RCC_SUCCESS && !at) {
                res = tr->reserve_send(e->conn, n, &at);
                for (size_t j = 0; res == RCC_SUCCESS && !at && j < INPLACE_AHEAD; j++) {
                    int done = 0;
                    if (reqs[j] && (res = tr->test(reqs[j], &done)) == RCC_SUCCESS && done)
                        reqs[j] = NULL; /* its buffer goes when the slot is reused */
                }
                if (res == RCC_SUCCESS && !at && rcci_now_ns() > deadline)
                    MP_FAIL("send #%u: no slot of the peer came free", seq);
            }
            if (res == RCC_SUCCESS && n)
                res = d->dev->copy(at, buf, n, d->stream);
            if (res == RCC_SUCCESS)
                res = tr->commit_send(e->conn, n, &tag, d->stream, 0, &reqs[k]);
        } else {
            res = tr->isend(e->conn, buf, n, &tag, NULL, &reqs[k]);
        }
        bufs[k] = buf;
        if (res != RCC_SUCCESS)
            MP_FAIL("send #%u of %zu bytes: %s: %s", seq, n, rcc_strerror(res), rcci_tls_error());
    }
    return 0;
}

/* Messages moved in place and by isend/irecv, alternating on one
 * connection in both directions (a counter stored by two streams must
 * never run ahead of a fragment). A transport without the in-place calls
 * must say so: 0 bytes, and RCC_ERR_UNSUPPORTED from the others. */
static int inplace_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    if (conf_move(&e, rank == 1, 10, 1) || conf_move(&e, rank == 0, 10, 2)) /* both hellos */
        return 1;
    if (tr->inplace_bytes(e.conn, 0) == 0 || tr->inplace_bytes(e.conn, 1) == 0) {
        void *at;
        const void *view;
        rcci_request_t *r;
        rcci_tag_t tag = conf_tag(3);
        if (tr->inplace_bytes(e.conn, 0) || tr->inplace_bytes(e.conn, 1) ||
            tr->reserve_send(e.conn, 8, &at) != RCC_ERR_UNSUPPORTED ||
            tr->irecv_inplace(e.conn, 8, &tag, &view, &r) != RCC_ERR_UNSUPPORTED ||
            tr->release(e.conn, NULL) != RCC_ERR_UNSUPPORTED ||
            tr->commit_send(e.conn, 8, &tag, NULL, 0, &r) != RCC_ERR_UNSUPPORTED)
            MP_FAIL("%s: in place half there, or not refused", tr->name);
        conf_close(&e);
        return 0;
    }
    conf_dev_t d;
    if (conf_dev_open(&d) != RCC_SUCCESS)
        MP_FAIL("%s moves in place, but no device stream: %s", tr->name, rcci_tls_error());
    if (inplace_direction(&e, &d, rank == 1, 100) || inplace_direction(&e, &d, rank == 0, 200))
        return 1;
    if (conf_move(&e, rank == 1, 1000, 300)) /* and isend/irecv still after */
        return 1;
    conf_dev_close(&d);
    conf_close(&e);
    return 0;
}

START_TEST(in_place_and_copied_alternate) { ck_assert_int_eq(conf_run(inplace_rank), 0); }
END_TEST

/* ---- queued on a stream (transport.h, version 7) ---- */

#define QUEUED_MSGS 27 /* more than three rounds of any transport's slots */

static size_t queued_size(uint32_t i, size_t max)
{
    static const size_t sizes[] = {0, 1, 7, 4096, 65537, 3};
    return i % 9 == 8 ? max : sizes[i % (sizeof sizes / sizeof *sizes)];
}

/* Rank 1 queues every message at once on its stream (each behind a wait
 * for a free slot of rank 0), rank 0 every receive (each behind a wait for
 * its message), without a host wait in between: the counters alone carry
 * them through. Then a message of another operation, which rank 0's test
 * names as a mismatch; then waits that can never pass (sends to slots
 * never freed, a receive never sent), which queue_abort must let pass. A
 * transport without the queued calls must refuse each of them. */
static int queued_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    conf_shared_t *sh = conf_shared();
    if (conf_connect(rank, 0, &e))
        return 1;
    if (conf_move(&e, rank == 1, 10, 1) || conf_move(&e, rank == 0, 10, 2)) /* both hellos */
        return 1;
    rcci_tag_t tag = conf_tag(0);
    void *at;
    const void *view;
    uint32_t ticket;
    int done;
    if (tr->queue_test(e.conn, 1, 0, 8, &tag, &done) == RCC_ERR_UNSUPPORTED) {
        if (tr->queue_recv(e.conn, NULL, 8, &view, &ticket) != RCC_ERR_UNSUPPORTED ||
            tr->queue_send(e.conn, NULL, 8, &at) != RCC_ERR_UNSUPPORTED ||
            tr->queue_release(e.conn, NULL) != RCC_ERR_UNSUPPORTED ||
            tr->queue_commit(e.conn, NULL, 8, &tag, &ticket) != RCC_ERR_UNSUPPORTED ||
            tr->queue_bytes(e.conn, 0) != 0 || tr->queue_bytes(e.conn, 1) != 0)
            MP_FAIL("%s: queued calls half there, or not refused", tr->name);
        tr->queue_abort(e.conn); /* a no-op */
        conf_close(&e);
        return 0;
    }
    conf_dev_t d;
    if (conf_dev_open(&d) != RCC_SUCCESS)
        MP_FAIL("%s queues messages, but no device stream: %s", tr->name, rcci_tls_error());
    size_t max = tr->queue_bytes(e.conn, rank == 1), total = 0, off[QUEUED_MSGS + 1];
    if (max == 0)
        MP_FAIL("%s queues messages of at most 0 bytes", tr->name);
    for (uint32_t i = 0; i < QUEUED_MSGS; i++)
        off[i] = total, total += queued_size(i, max);
    off[QUEUED_MSGS] = total;
    uint8_t *host = NULL;
    uint32_t tickets[QUEUED_MSGS];
    if (d.dev->host_alloc((void **)&host, total + GUARD) != RCC_SUCCESS)
        MP_FAIL("pinned memory: %s", rcci_tls_error());
    int64_t deadline = rcci_now_ns() + CONF_WAIT_NS;
    rcc_result_t res = RCC_SUCCESS;
    memset(host, 0, total);
    for (uint32_t i = 0; i < QUEUED_MSGS && res == RCC_SUCCESS; i++) {
        size_t n = queued_size(i, max);
        tag = conf_tag(0);
        tag.sig[0] = (uint8_t)i; /* each its own operation: a slip shows as a mismatch */
        if (rank == 1) {
            conf_fill(host + off[i], n, 500 + i);
            res = tr->queue_send(e.conn, d.stream, n, &at);
            if (res == RCC_SUCCESS && n)
                res = d.dev->copy(at, host + off[i], n, d.stream);
            if (res == RCC_SUCCESS)
                res = tr->queue_commit(e.conn, d.stream, n, &tag, &tickets[i]);
        } else {
            res = tr->queue_recv(e.conn, d.stream, n, &view, &tickets[i]);
            if (res == RCC_SUCCESS && n)
                res = d.dev->copy(host + off[i], view, n, d.stream);
            if (res == RCC_SUCCESS)
                res = tr->queue_release(e.conn, d.stream);
        }
    }
    if (res != RCC_SUCCESS)
        MP_FAIL("queuing: %s: %s", rcc_strerror(res), rcci_tls_error());
    for (uint32_t i = 0; i < QUEUED_MSGS; i++) {
        tag = conf_tag(0);
        tag.sig[0] = (uint8_t)i;
        for (done = 0; !done;) {
            res = tr->queue_test(e.conn, rank == 1, tickets[i], queued_size(i, max), &tag, &done);
            if (res != RCC_SUCCESS || (!done && rcci_now_ns() > deadline))
                MP_FAIL("queued %s #%u: %s: %s", rank == 1 ? "send" : "receive", i,
                        rcc_strerror(res), res ? rcci_tls_error() : "never done");
            if (!done)
                usleep(50);
        }
    }
    if (conf_dev_sync(&d))
        return 1;
    for (uint32_t i = 0; rank == 0 && i < QUEUED_MSGS; i++) {
        uint8_t *want = conf_buf(queued_size(i, max));
        conf_fill(want, queued_size(i, max), 500 + i);
        if (memcmp(host + off[i], want, queued_size(i, max)))
            MP_FAIL("queued message #%u of %zu bytes: the bytes differ", i, queued_size(i, max));
        free(want);
    }
    /* A message of another operation: rank 0's test names the mismatch. */
    deadline = rcci_now_ns() + CONF_WAIT_NS;
    tag = conf_tag(0);
    tag.sig[0] = rank == 1 ? 0xaa : 0xbb;
    res = rank == 1 ? tr->queue_send(e.conn, d.stream, 64, &at)
                    : tr->queue_recv(e.conn, d.stream, 64, &view, &ticket);
    if (res == RCC_SUCCESS)
        res = rank == 1 ? tr->queue_commit(e.conn, d.stream, 64, &tag, &ticket)
                        : tr->queue_release(e.conn, d.stream);
    for (done = 0; res == RCC_SUCCESS && !done && rcci_now_ns() < deadline; usleep(50))
        res = tr->queue_test(e.conn, rank == 1, ticket, 64, &tag, &done);
    if (rank == 1 ? res != RCC_SUCCESS : res != RCC_ERR_MISMATCH)
        MP_FAIL("a queued message of another operation: %s: %s", rcc_strerror(res),
                rcci_tls_error());
    if (conf_dev_sync(&d))
        return 1;
    /* Waits that never pass: rank 1 fills rank 0's slots and queues past
     * them (nothing frees them), rank 0 waits for a message never sent.
     * Not before rank 0 has checked the mismatch: rank 1's abort makes the
     * check words unreadable (rcci_cipc_check_kept). */
    deadline = rcci_now_ns() + CONF_WAIT_NS;
    if (rank == 1) {
        while (__atomic_load_n(&sh->queued_phase, __ATOMIC_ACQUIRE) < 1 && rcci_now_ns() < deadline)
            usleep(1000);
        for (int i = 0; i < 2 * 8 + 1 && res == RCC_SUCCESS; i++) {
            res = tr->queue_send(e.conn, d.stream, 8, &at);
            if (res == RCC_SUCCESS)
                res = tr->queue_commit(e.conn, d.stream, 8, &tag, &ticket);
        }
        __atomic_store_n(&sh->queued_phase, 2, __ATOMIC_RELEASE);
    } else {
        __atomic_store_n(&sh->queued_phase, 1, __ATOMIC_RELEASE);
        while (__atomic_load_n(&sh->queued_phase, __ATOMIC_ACQUIRE) < 2 && rcci_now_ns() < deadline)
            usleep(1000);
        res = tr->queue_recv(e.conn, d.stream, 8, &view, &ticket); /* lands: it was sent */
        for (int i = 0; i < 3 * 8 && res == RCC_SUCCESS; i++)      /* past all that was */
            res = tr->queue_recv(e.conn, d.stream, 8, &view, &ticket);
    }
    if (res != RCC_SUCCESS)
        MP_FAIL("queuing waits: %s: %s", rcc_strerror(res), rcci_tls_error());
    usleep(100000);
    int stuck = 0;
    if (d.dev->event_record(d.event, d.stream) != RCC_SUCCESS ||
        d.dev->event_query(d.event, &done) != RCC_SUCCESS)
        MP_FAIL("event: %s", rcci_tls_error());
    stuck = !done;
    for (int64_t t = rcci_now_ns() + CONF_WAIT_NS; !done && rcci_now_ns() < t; usleep(1000)) {
        tr->queue_abort(e.conn); /* again and again: the peer's stores may undo it */
        d.dev->event_query(d.event, &done);
    }
    if (!stuck || !done)
        MP_FAIL("rank %d: the stream %s", rank,
                stuck ? "never got past its waits after queue_abort" : "waited for nothing");
    d.dev->host_free(host);
    conf_dev_close(&d);
    conf_close(&e);
    return 0;
}

START_TEST(queued_messages) { ck_assert_int_eq(conf_run(queued_rank), 0); }
END_TEST

/* ---- registered buffers ---- */

#define REG_AHEAD 3 /* sends in flight, each from its own registered buffer */

/* Rank 1 sends every size from registered buffers, REG_AHEAD at a time
 * (ibverbs then does not stage them: the adapter reads the buffer, which
 * must stay untouched until the send completes), into rank 0's registered
 * receive buffers; then the same from device memory where the device table
 * has a device: registered as such where the transport takes it
 * (GPUDirect RDMA for ibverbs, cudaipc's own), else refused with a reason
 * and sent through host memory, as the engine would stage it. */
static int reg_direction(conf_end_t *e, int sending, int device, uint32_t base)
{
    const size_t n_sizes = sizeof sizes / sizeof *sizes;
    conf_dev_t d = {0};
    if (device && conf_dev_open(&d) != RCC_SUCCESS)
        MP_FAIL("device stream: %s", rcci_tls_error());
    uint8_t *host[REG_AHEAD] = {0};
    void *dev_buf[REG_AHEAD] = {0};
    rcci_mr_t *mr[REG_AHEAD] = {0};
    rcci_request_t *req[REG_AHEAD] = {0};
    size_t len[REG_AHEAD] = {0};
    int said = 0;
    for (size_t i = 0; i < n_sizes + REG_AHEAD; i++) {
        int k = (int)(i % REG_AHEAD);
        if (req[k]) { /* the request this buffer served: done first */
            size_t done_i = i - REG_AHEAD;
            rcc_result_t res = conf_wait(e->conn, req[k], rcci_now_ns() + CONF_WAIT_NS);
            if (res != RCC_SUCCESS)
                MP_FAIL("registered %s #%zu (%zu bytes): %s", sending ? "send" : "receive", done_i,
                        len[k], rcci_tls_error());
            if (!sending && !conf_check(host[k], len[k], base + (uint32_t)done_i))
                MP_FAIL("registered receive #%zu (%zu bytes): the bytes differ", done_i, len[k]);
            req[k] = NULL;
        }
        if (mr[k] && tr->dereg_mem(e->ctx, mr[k]) != RCC_SUCCESS)
            MP_FAIL("dereg_mem: %s", rcci_tls_error());
        mr[k] = NULL;
        if (dev_buf[k])
            d.dev->dev_free(dev_buf[k], d.stream);
        dev_buf[k] = NULL;
        free(host[k]);
        host[k] = NULL;
        if (i >= n_sizes)
            continue;
        size_t n = sizes[i];
        uint32_t seq = base + (uint32_t)i;
        rcci_tag_t tag = conf_tag(seq);
        len[k] = n;
        host[k] = conf_buf(n);
        void *buf = host[k];
        rcc_result_t res;
        if (sending)
            conf_fill(host[k], n, seq);
        if (d.dev && sending && n > 0) {
            if (d.dev->dev_alloc(&dev_buf[k], n, d.stream) != RCC_SUCCESS ||
                d.dev->copy(dev_buf[k], host[k], n, d.stream) != RCC_SUCCESS || conf_dev_sync(&d))
                MP_FAIL("device buffer of %zu bytes: %s", n, rcci_tls_error());
            res = tr->reg_mem(e->ctx, dev_buf[k], n, RCCI_MEM_CUDA, &mr[k]);
            if (res == RCC_SUCCESS)
                buf = dev_buf[k];
            else if (res != RCC_ERR_UNSUPPORTED)
                MP_FAIL("reg_mem of device memory: %s: %s", rcc_strerror(res), rcci_tls_error());
            else if (!said++)
                printf("note: %s sends device memory through host memory: %s\n", tr->name,
                       rcci_tls_error());
        }
        if (buf == host[k] && n > 0 &&
            (res = tr->reg_mem(e->ctx, host[k], n, RCCI_MEM_HOST, &mr[k])) != RCC_SUCCESS)
            MP_FAIL("reg_mem of %zu bytes of host memory: %s", n, rcci_tls_error());
        res = sending ? tr->isend(e->conn, buf, n, &tag, mr[k], &req[k])
                      : tr->irecv(e->conn, buf, n, &tag, mr[k], &req[k]);
        if (res != RCC_SUCCESS)
            MP_FAIL("%s of %zu registered bytes: %s", sending ? "isend" : "irecv", n,
                    rcci_tls_error());
    }
    conf_dev_close(&d);
    return 0;
}

static int reg_rank(int rank, int nranks, void *arg)
{
    (void)nranks, (void)arg;
    conf_end_t e;
    if (conf_connect(rank, 0, &e))
        return 1;
    const rcci_devapi_t *dev = rcci_devapi();
    char why[160];
    int device = dev && dev->device_count(why, sizeof why) > 0;
    if (reg_direction(&e, rank == 1, 0, 0) || reg_direction(&e, rank == 0, 0, 100) ||
        (device && reg_direction(&e, rank == 1, 1, 200)) || conf_move(&e, rank == 1, 77, 300))
        return 1;
    conf_close(&e);
    return 0;
}

START_TEST(registered_buffers) { ck_assert_int_eq(conf_run(reg_rank), 0); }
END_TEST

static Suite *conformance_suite(void)
{
    Suite *s = suite_create(tr->name);
    TCase *tc = tcase_create("conformance");
    tcase_set_timeout(tc, 3 * CONF_TIMEOUT_S);
    tcase_add_test(tc, connect_both_ways);
    tcase_add_test(tc, refusal_says_why);
    tcase_add_test(tc, many_sizes);
    tcase_add_test(tc, out_of_order_completion);
    tcase_add_test(tc, flow_control_under_pressure);
    tcase_add_test(tc, large_transfer);
    tcase_add_test(tc, mismatches_are_named);
    tcase_add_test(tc, failure_notice);
    tcase_add_test(tc, peek_and_announce);
    tcase_add_test(tc, peer_loss);
    tcase_add_test(tc, connect_start_to_stopped_peer);
    tcase_add_test(tc, teardown_while_busy);
    tcase_add_test(tc, close_frees_completed_untested);
    tcase_add_test(tc, in_place_and_copied_alternate);
    tcase_add_test(tc, queued_messages);
    tcase_add_test(tc, registered_buffers);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "";
    for (int i = 0; rcci_transports[i]; i++)
        if (strcmp(rcci_transports[i]->name, name) == 0)
            tr = rcci_transports[i];
    if (!tr) {
        fprintf(stderr, "usage: %s TRANSPORT (one built here:", argv[0]);
        for (int i = 0; rcci_transports[i]; i++)
            fprintf(stderr, " %s", rcci_transports[i]->name);
        fprintf(stderr, ")\n");
        return 2;
    }
    if (argc > 2 && strcmp(argv[2], "fake") == 0)
        fakedev_install(); /* before any rank forks: they all inherit it */
    /* Whether it can run here at all: its own reason when not. Asked in a
     * child: a process that has started CUDA (cudaipc's init does) must not
     * fork ranks that use it afterwards. */
    fflush(stdout);
    pid_t probe = fork();
    if (probe == 0) {
        rcci_transport_env_t env = conf_env(0);
        void *ctx;
        if (tr->init(&env, &ctx) != RCC_SUCCESS) {
            printf("SKIP: %s: %s\n", tr->name, rcci_tls_error());
            fflush(stdout); /* _exit does not */
            _exit(77);
        }
        tr->fini(ctx);
        _exit(0);
    }
    int status = 0;
    if (probe < 0 || waitpid(probe, &status, 0) != probe || !WIFEXITED(status))
        return 1;
    if (WEXITSTATUS(status) != 0)
        return WEXITSTATUS(status);
    SRunner *sr = srunner_create(conformance_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
