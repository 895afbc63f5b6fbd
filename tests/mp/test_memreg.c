/*
 * Registered memory (rcc_comm_register, lib/memreg.c): the calls' errors;
 * collectives and point-to-point on registered buffers against the naive
 * reference, with the sends that went without a copy counted (over
 * ibverbs, built with -DRCC_VERBSIM on verbsim, some must; over TCP none
 * may); a registration ended while an operation still sends from it; and,
 * on verbsim with the stand-in GPU, device buffers registered for
 * GPUDirect RDMA sent straight from device memory by the chunked stream
 * path, whose order against the GPU work is checked by the results.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check_main.h"
#include "comm.h" /* the transport in use and the zero-copy counters */
#include "fakedev.h"
#include "mp.h"
#include "testdata.h"

#ifdef RCC_VERBSIM
#define ZERO_COPY 1 /* the engine picks ibverbs (verbsim's device) */
#else
#define ZERO_COPY 0
#endif

static int rank_register_errors(int rank, int n, void *arg)
{
    (void)n, (void)arg;
    rcc_comm_t comm = mp_comm(20000);
    char buf[256];
    rcc_memreg_t h = NULL, h2 = NULL;
    if (rcc_comm_register(comm, NULL, 64, &h) != RCC_ERR_INVALID_ARGUMENT)
        MP_FAIL("rank %d: NULL buffer registered", rank);
    if (rcc_comm_register(comm, buf, 0, &h) != RCC_ERR_INVALID_ARGUMENT)
        MP_FAIL("rank %d: 0 bytes registered", rank);
    if (rcc_comm_register(comm, (void *)(UINTPTR_MAX - 8), 64, &h) != RCC_ERR_INVALID_ARGUMENT)
        MP_FAIL("rank %d: a wrapping range registered", rank);
    if (rcc_comm_register(comm, buf, sizeof buf, NULL) != RCC_ERR_INVALID_ARGUMENT ||
        !strstr(rcc_last_error(comm), "handle is NULL"))
        MP_FAIL("rank %d: NULL handle: %s", rank, rcc_last_error(comm));
    if (rcc_comm_register(NULL, buf, sizeof buf, &h) != RCC_ERR_INVALID_ARGUMENT)
        MP_FAIL("rank %d: NULL communicator accepted", rank);
    if (rcc_comm_register(comm, buf, sizeof buf, &h) != RCC_SUCCESS ||
        rcc_comm_register(comm, buf + 8, 16, &h2) != RCC_SUCCESS) /* overlapping: fine */
        MP_FAIL("rank %d: register: %s", rank, rcc_last_error(comm));
    if (rcc_comm_deregister(comm, h) != RCC_SUCCESS)
        MP_FAIL("rank %d: deregister: %s", rank, rcc_last_error(comm));
    if (rcc_comm_deregister(comm, h) != RCC_ERR_INVALID_ARGUMENT ||
        !strstr(rcc_last_error(comm), "rcc_comm_deregister: handle") ||
        !strstr(rcc_last_error(comm), "not a registration of this communicator"))
        MP_FAIL("rank %d: a second deregister: %s", rank, rcc_last_error(comm));
    if (rcc_comm_deregister(comm, (rcc_memreg_t)buf) != RCC_ERR_INVALID_ARGUMENT)
        MP_FAIL("rank %d: a made-up handle was deregistered", rank);
    /* h2 is left registered: the communicator ends it. */
    return td_finish(comm, 0);
}

START_TEST(register_errors) { ck_assert_int_eq(mp_run(2, rank_register_errors, NULL, 60), 0); }
END_TEST

/* The transport of the ring and of point-to-point is the one expected. */
static int check_transport(struct rcc_comm *c, int rank)
{
    const char *want = ZERO_COPY ? "ibverbs" : "tcp";
    if (c->nranks > 1 && strcmp(c->send_link.tr->name, want) != 0) {
        fprintf(stderr, "rank %d: the ring runs over %s, not %s\n", rank, c->send_link.tr->name,
                want);
        return 1;
    }
    return 0;
}

/* An allreduce (algorithm by RCC_ALGO) and an allgather of `count`
 * elements of dt on host buffers, registered or not; the sends that went
 * without a copy are added to *zero_copy. */
static int run_host(rcc_comm_t comm, int rank, int n, size_t count, rcc_datatype_t dt,
                    int registered, unsigned seed, uint64_t *zero_copy)
{
    struct rcc_comm *c = comm;
    size_t es = rcc_datatype_size(dt), nn = (size_t)n;
    char *in = malloc(count * es), *out = malloc(count * nn * es), *want = malloc(count * nn * es);
    rcc_memreg_t rin = NULL, rout = NULL;
    if (registered && (rcc_comm_register(comm, in, count * es, &rin) != RCC_SUCCESS ||
                       rcc_comm_register(comm, out, count * nn * es, &rout) != RCC_SUCCESS))
        MP_FAIL("rank %d: register: %s", rank, rcc_last_error(comm));
    int bad = 0;
    char what[160];
    uint64_t before = c->zero_copy_sends;
    td_fill(in, 0, count, seed, rank, dt, RCC_SUM);
    td_reference(want, 0, count, NULL, n, seed, dt, RCC_SUM);
    memset(out, TD_UNWRITTEN, count * es);
    if (rcc_allreduce(in, out, count, dt, RCC_SUM, comm) != RCC_SUCCESS)
        MP_FAIL("rank %d: allreduce: %s", rank, rcc_last_error(comm));
    snprintf(what, sizeof what, "rank %d of %d: allreduce of %zu %s, %s", rank, n, count,
             rcc_datatype_name(dt), registered ? "registered" : "not registered");
    bad |= td_compare(what, out, want, count, dt);
    for (int r = 0; r < n; r++)
        td_fill(want + (size_t)r * count * es, 0, count, seed + 1, r, dt, RCC_SUM);
    td_fill(in, 0, count, seed + 1, rank, dt, RCC_SUM);
    if (rcc_allgather(in, out, count, dt, comm) != RCC_SUCCESS)
        MP_FAIL("rank %d: allgather: %s", rank, rcc_last_error(comm));
    snprintf(what, sizeof what, "rank %d of %d: allgather of %zu %s, %s", rank, n, count,
             rcc_datatype_name(dt), registered ? "registered" : "not registered");
    bad |= td_compare(what, out, want, count * nn, dt);
    *zero_copy += c->zero_copy_sends - before;
    if (registered && (rcc_comm_deregister(comm, rin) != RCC_SUCCESS ||
                       rcc_comm_deregister(comm, rout) != RCC_SUCCESS))
        MP_FAIL("rank %d: deregister: %s", rank, rcc_last_error(comm));
    free(in), free(out), free(want);
    return bad;
}

/* Host collectives on registered buffers at sizes that take the ring
 * (pipelined, several chunks) and the rounds algorithms, every dtype: the
 * results equal the reference, and over ibverbs the registered runs send
 * without copying where the unregistered ones copied (the library's own
 * staging is registered too, so those count some: only more is asked). */
static int rank_host_registered(int rank, int n, void *arg)
{
    const char *algo = arg;
    setenv("RCC_ALGO", algo, 1);
    rcc_comm_t comm = mp_comm(60000);
    if (check_transport(comm, rank))
        return 1;
    static const rcc_datatype_t dts[] = {RCC_FLOAT32, RCC_BFLOAT16, RCC_INT64, RCC_FLOAT16,
                                         RCC_UINT8,   RCC_FLOAT64,  RCC_INT32};
    int bad = 0;
    uint64_t plain = 0, reg = 0;
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        size_t count = mp_scaled((size_t)(600u << 10) / rcc_datatype_size(dts[d]) + 5);
        bad |= run_host(comm, rank, n, count, dts[d], 0, 10 + (unsigned)d * 2, &plain);
        bad |= run_host(comm, rank, n, count, dts[d], 1, 10 + (unsigned)d * 2, &reg);
    }
    printf("rank %d of %d (%s): %llu sends without a copy unregistered, %llu registered\n", rank, n,
           algo, (unsigned long long)plain, (unsigned long long)reg);
    if (n > 1 && ZERO_COPY && reg <= plain)
        MP_FAIL("rank %d: registered buffers were not sent without a copy (%llu against %llu)",
                rank, (unsigned long long)reg, (unsigned long long)plain);
    if (!ZERO_COPY && (reg || plain))
        MP_FAIL("rank %d: %llu zero-copy sends over TCP", rank, (unsigned long long)(reg + plain));
    return td_finish(comm, bad);
}

START_TEST(host_registered_ring)
{
    ck_assert_int_eq(mp_run(_i, rank_host_registered, "ring", 300), 0);
}
END_TEST

START_TEST(host_registered_rounds)
{
    ck_assert_int_eq(mp_run(_i, rank_host_registered, "rabenseifner", 300), 0);
}
END_TEST

/* A registration ended while operations that send from it are still
 * running (nonblocking, then point-to-point): they finish right, and a
 * later operation on the same memory sends it copied. */
static int rank_deregister_in_flight(int rank, int n, void *arg)
{
    (void)arg;
    setenv("RCC_ALGO", "ring", 1);
    rcc_comm_t comm = mp_comm(60000);
    struct rcc_comm *c = comm;
    size_t count = mp_scaled((size_t)(3u << 20) / sizeof(float) + 7);
    float *in = malloc(count * sizeof *in), *out = malloc(count * sizeof *out),
          *want = malloc(count * sizeof *want);
    rcc_memreg_t h;
    if (rcc_comm_register(comm, in, count * sizeof *in, &h) != RCC_SUCCESS)
        MP_FAIL("rank %d: register: %s", rank, rcc_last_error(comm));
    td_fill(in, 0, count, 3, rank, RCC_FLOAT32, RCC_SUM);
    td_reference(want, 0, count, NULL, n, 3, RCC_FLOAT32, RCC_SUM);
    rcc_request_t req;
    uint64_t before = __atomic_load_n(&c->zero_copy_sends, __ATOMIC_RELAXED);
    if (rcc_iallreduce(in, out, count, RCC_FLOAT32, RCC_SUM, comm, &req) != RCC_SUCCESS)
        MP_FAIL("rank %d: iallreduce: %s", rank, rcc_last_error(comm));
    /* Over ibverbs, once the operation sends from the registration (holds it). */
    for (int waited = 0; ZERO_COPY && n > 1 && waited < 10000; waited++) {
        if (__atomic_load_n(&c->zero_copy_sends, __ATOMIC_RELAXED) != before)
            break;
        usleep(1000);
    }
    if (rcc_comm_deregister(comm, h) != RCC_SUCCESS)
        MP_FAIL("rank %d: deregister while in use: %s", rank, rcc_last_error(comm));
    if (rcc_wait(&req) != RCC_SUCCESS)
        MP_FAIL("rank %d: wait: %s", rank, rcc_last_error(NULL));
    char what[120];
    snprintf(what, sizeof what, "rank %d of %d: allreduce deregistered mid-way", rank, n);
    int bad = td_compare(what, (char *)out, (char *)want, count, RCC_FLOAT32);
    /* Point-to-point around the ring from a registered buffer. */
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    if (rcc_comm_register(comm, in, count * sizeof *in, &h) != RCC_SUCCESS)
        MP_FAIL("rank %d: register: %s", rank, rcc_last_error(comm));
    before = __atomic_load_n(&c->zero_copy_sends, __ATOMIC_RELAXED);
    rcc_request_t reqs[2];
    if (rcc_group_start() != RCC_SUCCESS ||
        rcc_isend(in, count, RCC_FLOAT32, next, comm, &reqs[0]) != RCC_SUCCESS ||
        rcc_irecv(out, count, RCC_FLOAT32, prev, comm, &reqs[1]) != RCC_SUCCESS ||
        rcc_group_end() != RCC_SUCCESS || rcc_wait_all(2, reqs) != RCC_SUCCESS)
        MP_FAIL("rank %d: send/recv: %s", rank, rcc_last_error(comm));
    if (rcc_comm_deregister(comm, h) != RCC_SUCCESS)
        MP_FAIL("rank %d: deregister: %s", rank, rcc_last_error(comm));
    td_fill(want, 0, count, 3, prev, RCC_FLOAT32, RCC_SUM);
    snprintf(what, sizeof what, "rank %d of %d: recv from %d", rank, n, prev);
    bad |= td_compare(what, (char *)out, (char *)want, count, RCC_FLOAT32);
    if (n > 1 && ZERO_COPY && __atomic_load_n(&c->zero_copy_sends, __ATOMIC_RELAXED) == before)
        MP_FAIL("rank %d: the registered send was copied", rank);
    /* Ended: the same buffer sends copied again. */
    before = __atomic_load_n(&c->zero_copy_sends, __ATOMIC_RELAXED);
    if (rcc_group_start() != RCC_SUCCESS ||
        rcc_send(in, count, RCC_FLOAT32, next, comm) != RCC_SUCCESS ||
        rcc_recv(out, count, RCC_FLOAT32, prev, comm) != RCC_SUCCESS ||
        rcc_group_end() != RCC_SUCCESS)
        MP_FAIL("rank %d: send/recv: %s", rank, rcc_last_error(comm));
    if (__atomic_load_n(&c->zero_copy_sends, __ATOMIC_RELAXED) != before)
        MP_FAIL("rank %d: a deregistered buffer was sent without a copy", rank);
    free(in), free(out), free(want);
    return td_finish(comm, bad);
}

START_TEST(deregister_in_flight)
{
    ck_assert_int_eq(mp_run(_i, rank_deregister_in_flight, NULL, 300), 0);
}
END_TEST

#ifdef RCC_VERBSIM
/* Device buffers of the stand-in GPU over ibverbs, chunk by chunk on the
 * stream path through pinned slots (RCC_DEVICE_PIPELINE=1: no device ring,
 * which would move them by the transport's own queued messages, mp_stream's
 * verbsim build): registered, their sends go from device memory itself
 * (GPUDirect RDMA), each once the GPU work that writes it has run;
 * unregistered, through pinned slots. The results say whether the order
 * held. */
static int rank_device_gdr(int rank, int n, void *arg)
{
    (void)arg;
    setenv("RCC_ALGO", "ring", 1);
    setenv("RCC_DEVICE_PIPELINE", "1", 1);
    setenv("RCC_TRANSPORT", "ibverbs", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(60000);
    struct rcc_comm *c = comm;
    if (check_transport(c, rank))
        return 1;
    void *stream = fakedev_stream_create();
    int bad = 0;
    uint64_t gdr[2] = {0, 0};
    for (int registered = 0; registered < 2; registered++)
        for (int kind = 0; kind < 2; kind++) {
            rcc_datatype_t dt = kind ? RCC_BFLOAT16 : RCC_FLOAT32;
            size_t es = rcc_datatype_size(dt), nn = (size_t)n;
            size_t count = mp_scaled((size_t)(2u << 20) / es + 3);
            size_t out_elems = kind ? count * nn : count;
            char *in = malloc(count * es), *want = malloc(out_elems * es),
                 *got = malloc(out_elems * es);
            char *din = fakedev_malloc(count * es), *dout = fakedev_malloc(out_elems * es);
            rcc_memreg_t rin = NULL, rout = NULL;
            if (registered && (rcc_comm_register(comm, din, count * es, &rin) != RCC_SUCCESS ||
                               rcc_comm_register(comm, dout, out_elems * es, &rout) != RCC_SUCCESS))
                MP_FAIL("rank %d: register: %s", rank, rcc_last_error(comm));
            unsigned seed = 20 + (unsigned)(registered * 2 + kind);
            td_fill(in, 0, count, seed, rank, dt, RCC_SUM);
            if (kind)
                for (int r = 0; r < n; r++)
                    td_fill(want + (size_t)r * count * es, 0, count, seed, r, dt, RCC_SUM);
            else
                td_reference(want, 0, count, NULL, n, seed, dt, RCC_SUM);
            memcpy(din, in, count * es);
            uint64_t before = __atomic_load_n(&c->gdr_sends, __ATOMIC_RELAXED);
            rcc_result_t res =
                kind ? rcc_allgather_stream(din, dout, count, dt, comm, stream)
                     : rcc_allreduce_stream(din, dout, count, dt, RCC_SUM, comm, stream);
            if (res != RCC_SUCCESS || fakedev_stream_sync(stream, 60))
                MP_FAIL("rank %d: %s: %s", rank, rcc_result_name(res), rcc_last_error(comm));
            gdr[registered] += __atomic_load_n(&c->gdr_sends, __ATOMIC_RELAXED) - before;
            memcpy(got, dout, out_elems * es);
            char what[160];
            snprintf(what, sizeof what, "rank %d of %d: %s of %zu %s on the device, %s", rank, n,
                     kind ? "allgather" : "allreduce", count, rcc_datatype_name(dt),
                     registered ? "registered" : "not registered");
            bad |= td_compare(what, got, want, out_elems, dt);
            if (registered && (rcc_comm_deregister(comm, rin) != RCC_SUCCESS ||
                               rcc_comm_deregister(comm, rout) != RCC_SUCCESS))
                MP_FAIL("rank %d: deregister: %s", rank, rcc_last_error(comm));
            fakedev_free(din), fakedev_free(dout);
            free(in), free(want), free(got);
        }
    fakedev_stream_destroy(stream);
    printf("rank %d of %d: %llu sends from device memory unregistered, %llu registered\n", rank, n,
           (unsigned long long)gdr[0], (unsigned long long)gdr[1]);
    if (gdr[0] != 0 || (n > 1 && gdr[1] == 0))
        MP_FAIL("rank %d: GPUDirect sends: %llu unregistered (want 0), %llu registered (want "
                "some)",
                rank, (unsigned long long)gdr[0], (unsigned long long)gdr[1]);
    return td_finish(comm, bad);
}

START_TEST(device_gpudirect_sends) { ck_assert_int_eq(mp_run(_i, rank_device_gdr, NULL, 300), 0); }
END_TEST
#endif

static Suite *memreg_suite(void)
{
    Suite *s = suite_create("mp_memreg");
    TCase *tc = tcase_create("memreg");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, register_errors);
    tcase_add_loop_test(tc, host_registered_ring, 1, 6);
    tcase_add_loop_test(tc, host_registered_rounds, 2, 5);
    tcase_add_loop_test(tc, deregister_in_flight, 1, 4);
#ifdef RCC_VERBSIM
    tcase_add_loop_test(tc, device_gpudirect_sends, 2, 5);
#endif
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(memreg_suite)
