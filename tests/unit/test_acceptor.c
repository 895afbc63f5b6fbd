/*
 * The acceptor (lib/socket.c) against strangers, in one process on
 * loopback: another protocol's bytes are refused at once, a flood is held
 * to the cap, and a process out of descriptors gives strangers' back to
 * let a member in, or waits without spinning when it has none to give.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../check_main.h"

#include "clock.h"
#include "params.h"
#include "socket.h"

#define COMM_ID 7
#define STRANGERS_CAP 64 /* socket.h */

static const uint8_t secret[RCCI_SOCK_SECRET_BYTES] = {1, 2, 3, 4, 5};

typedef struct {
    rcci_addr_t addr; /* where it listens */
    rcci_acceptor_t *acc;
} listener_t;

static void listener_open(listener_t *l)
{
    ck_assert_int_eq(rcci_params_load(), RCC_SUCCESS);
    rcci_addr_t lo;
    ck_assert_int_eq(rcci_addr_parse("127.0.0.1:9", &lo), RCC_SUCCESS);
    rcci_addr_set_port(&lo, 0);
    int fd;
    ck_assert_int_eq(rcci_sock_listen(&lo, NULL, &fd, &l->addr), RCC_SUCCESS);
    ck_assert_int_eq(rcci_acceptor_create(fd, secret, COMM_ID, &l->acc), RCC_SUCCESS);
}

/* A connected socket; `fd` >= 0: that socket, made earlier. */
static int stranger(const listener_t *l, int fd)
{
    if (fd < 0)
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_eq(connect(fd, &l->addr.u.sa, l->addr.len), 0);
    return fd;
}

/* Whether the acceptor closed fd (EOF or reset) within ms. */
static int closed_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char buf[256];
    if (poll(&p, 1, ms) <= 0)
        return 0;
    ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN);
}

static void member_hello(int fd, int rank, uint32_t tag)
{
    rcci_hello_t h = {
        .kind = RCCI_HELLO_TCP, .rank = rank, .nranks = 4, .tag = tag, .comm_id = COMM_ID};
    ck_assert_int_eq(rcci_hello_send(fd, &h, secret, rcci_now_ns() + 1000000000), RCC_SUCCESS);
}

/* rcci_acceptor_accept of the member (rank, tag) within `ms`; checks the
 * hello it returns. */
static rcc_result_t member_accept(const listener_t *l, int rank, uint32_t tag, int ms, int *fd)
{
    rcci_hello_t h;
    rcc_result_t res = rcci_acceptor_accept(l->acc, RCCI_HELLO_TCP, rank, tag,
                                            rcci_now_ns() + ms * 1000000ll, fd, &h);
    if (res == RCC_SUCCESS)
        ck_assert(h.rank == rank && h.tag == tag && h.comm_id == COMM_ID);
    return res;
}

static void close_all(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* Allows only the `room` next descriptors; returns the old limit. */
static struct rlimit limit_descriptors(int room)
{
    struct rlimit old, rl;
    getrlimit(RLIMIT_NOFILE, &old);
    int lowest_free = dup(0);
    close(lowest_free);
    rl = old;
    rl.rlim_cur = (rlim_t)(lowest_free + room);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    return old;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

START_TEST(other_protocols_are_refused_at_once)
{
    listener_t l;
    listener_open(&l);
    int http = stranger(&l, -1), one = stranger(&l, -1), silent = stranger(&l, -1);
    ck_assert_int_eq(send(http, "GET / HTTP/1.1\r\n\r\n", 18, 0), 18); /* 18 of 96 bytes */
    ck_assert_int_eq(send(one, "x", 1, 0), 1);                         /* 1 byte */
    usleep(50000);
    rcci_acceptor_sweep(l.acc);
    ck_assert(closed_within(http, 1000));
    ck_assert(closed_within(one, 1000));
    ck_assert(!closed_within(silent, 200)); /* it has 10 s */
    close(http), close(one), close(silent);
    rcci_acceptor_destroy(l.acc);
}
END_TEST

START_TEST(a_flood_is_held_to_the_cap)
{
    listener_t l;
    listener_open(&l);
    enum { FLOOD = 100 };
    int fds[FLOOD], closed = 0;
    for (int i = 0; i < FLOOD; i++)
        fds[i] = stranger(&l, -1);
    usleep(50000);
    rcci_acceptor_sweep(l.acc);
    rcci_acceptor_sweep(l.acc);
    for (int i = 0; i < FLOOD; i++)
        closed += closed_within(fds[i], i < FLOOD - STRANGERS_CAP ? 1000 : 1);
    /* The oldest went; the youngest 64 wait for their 10 s. */
    ck_assert_int_eq(closed, FLOOD - STRANGERS_CAP);
    for (int i = FLOOD - STRANGERS_CAP; i < FLOOD; i++)
        ck_assert(!closed_within(fds[i], 0));
    /* A member still gets in, at once. */
    int member = stranger(&l, -1);
    member_hello(member, 2, 5);
    int fd;
    ck_assert_int_eq(member_accept(&l, 2, 5, 2000, &fd), RCC_SUCCESS);
    close(fd), close(member);
    close_all(fds, FLOOD);
    rcci_acceptor_destroy(l.acc);
}
END_TEST

START_TEST(out_of_descriptors_strangers_make_room)
{
    listener_t l;
    listener_open(&l);
    enum { N = 8 };
    int fds[N], member = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), closed = 0;
    for (int i = 0; i < N; i++)
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct rlimit old = limit_descriptors(2); /* sockets exist; connecting needs none */
    for (int i = 0; i < N; i++)
        stranger(&l, fds[i]);
    usleep(50000);
    rcci_acceptor_sweep(l.acc);
    stranger(&l, member);
    member_hello(member, 1, 3);
    int fd;
    rcc_result_t res = member_accept(&l, 1, 3, 2000, &fd);
    setrlimit(RLIMIT_NOFILE, &old);
    ck_assert_int_eq(res, RCC_SUCCESS);
    for (int i = 0; i < N; i++)
        closed += closed_within(fds[i], 100);
    ck_assert_int_ge(closed, N - 2); /* at most two descriptors were to be had */
    close(fd), close(member);
    close_all(fds, N);
    rcci_acceptor_destroy(l.acc);
}
END_TEST

START_TEST(out_of_descriptors_without_strangers_waits_without_spinning)
{
    listener_t l;
    listener_open(&l);
    int member = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fd;
    struct rlimit old = limit_descriptors(0);
    stranger(&l, member);
    member_hello(member, 1, 3);
    double cpu = cpu_s();
    int64_t t = rcci_now_ns();
    rcc_result_t res = member_accept(&l, 1, 3, 500, &fd);
    double waited = (rcci_now_ns() - t) / 1e9;
    cpu = cpu_s() - cpu;
    setrlimit(RLIMIT_NOFILE, &old);
    ck_assert_int_eq(res, RCC_ERR_TIMEOUT);
    ck_assert(waited >= 0.45 && waited < 2.0);
    ck_assert_msg(cpu < 0.2, "spent %.3f s of CPU waiting %.3f s", cpu, waited);
    /* Descriptors back: the member, still in the backlog, gets in. */
    ck_assert_int_eq(member_accept(&l, 1, 3, 2000, &fd), RCC_SUCCESS);
    close(fd), close(member);
    rcci_acceptor_destroy(l.acc);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("acceptor");
    TCase *tc = tcase_create("strangers");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, other_protocols_are_refused_at_once);
    tcase_add_test(tc, a_flood_is_held_to_the_cap);
    tcase_add_test(tc, out_of_descriptors_strangers_make_room);
    tcase_add_test(tc, out_of_descriptors_without_strangers_waits_without_spinning);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(make_suite)
