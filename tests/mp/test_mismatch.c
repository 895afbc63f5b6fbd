/*
 * Ranks that call different operations: every pair of collective kinds,
 * and one kind with another count, type, reduction op or root. Every rank
 * must fail with RCC_ERR_MISMATCH within a few seconds (not at the
 * timeout, not with a hang, not with a success that read one operation's
 * bytes as another's), in that call or, where its own part was over before
 * anyone could disagree (a broadcast's root), in the next; its message must
 * name both calls. Every case runs on 3 ranks with rank 1 the odd one, and
 * once more on 4 or 5 ranks with another rank the odd one (the root, the
 * last rank, one in the middle) and the other message-size class.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check_main.h"
#include "mp.h"
#include "testdata.h"

#define MAX_RANKS 5
#define BOUND_S 5.0 /* the timeout is 30 s: a failure by timeout fails the test */
#define TIMEOUT_MS 30000

typedef enum {
    K_ALLREDUCE,
    K_REDUCE_SCATTER,
    K_ALLGATHER,
    K_BROADCAST,
    K_REDUCE,
    K_BARRIER,
    K_ALLTOALL,
    K_COUNT
} kind_t;

static const char *const kind_names[K_COUNT] = {
    "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "barrier", "alltoall"};

typedef struct {
    kind_t kind;
    size_t count; /* allreduce/broadcast/reduce count; reduce_scatter recvcount; allgather
                     sendcount; alltoall count per peer */
    rcc_datatype_t dtype;
    rcc_redop_t op;
    int root;
} call_t;

typedef struct {
    call_t common, odd;
    int nranks, odd_rank; /* the one rank that calls something else */
    int common_delay_ms;  /* the others call this much later: the odd rank's part (a
                             reduce leaf's sends) ends before theirs begins */
} case_t;

typedef struct {
    rcc_result_t res[MAX_RANKS];
    double took[MAX_RANKS];
    char text[MAX_RANKS][1024];
    int warmed; /* ranks whose warm-up allreduce returned */
} area_t;

static rcc_result_t run_call(const call_t *c, int nranks, rcc_comm_t comm)
{
    size_t es = rcc_datatype_size(c->dtype), n = (size_t)nranks;
    size_t in = c->count, out = c->count;
    if (c->kind == K_REDUCE_SCATTER)
        in = c->count * n;
    if (c->kind == K_ALLGATHER)
        out = c->count * n;
    if (c->kind == K_ALLTOALL)
        in = out = c->count * n;
    char *send = calloc(in ? in : 1, es), *recv = calloc(out ? out : 1, es);
    rcc_result_t res = RCC_ERR_INTERNAL;
    switch (c->kind) {
    case K_ALLREDUCE: res = rcc_allreduce(send, recv, c->count, c->dtype, c->op, comm); break;
    case K_REDUCE_SCATTER:
        res = rcc_reduce_scatter(send, recv, c->count, c->dtype, c->op, comm);
        break;
    case K_ALLGATHER: res = rcc_allgather(send, recv, c->count, c->dtype, comm); break;
    case K_BROADCAST: res = rcc_broadcast(send, recv, c->count, c->dtype, c->root, comm); break;
    case K_REDUCE: res = rcc_reduce(send, recv, c->count, c->dtype, c->op, c->root, comm); break;
    case K_BARRIER: res = rcc_barrier(comm); break;
    case K_ALLTOALL: res = rcc_alltoall(send, recv, c->count, c->dtype, comm); break;
    default: break;
    }
    free(send);
    free(recv);
    return res;
}

static int rank_mismatch(int rank, int n, void *arg)
{
    const case_t *c = arg;
    area_t *area = mp_shared(NULL);
    rcc_comm_t comm = mp_comm(TIMEOUT_MS);
    /* One agreed operation first: connections up, operation numbers equal. */
    int one = 1, sum = 0;
    rcc_result_t res = rcc_allreduce(&one, &sum, 1, RCC_INT32, RCC_SUM, comm);
    if (res != RCC_SUCCESS || sum != n)
        MP_FAIL("warm-up allreduce: %s (sum %d): %s", rcc_result_name(res), sum,
                rcc_last_error(comm));
    /* Nobody goes on before every warm-up returned: a rank whose part of it
     * is still on its way (a connection being made) would otherwise fail it
     * with the mismatch the others find next. */
    __atomic_add_fetch(&area->warmed, 1, __ATOMIC_SEQ_CST);
    for (double until = td_now_s() + 30; __atomic_load_n(&area->warmed, __ATOMIC_SEQ_CST) < n;)
        if (td_now_s() > until)
            MP_FAIL("rank %d: the others' warm-up allreduces did not return in 30 s", rank);
        else
            usleep(1000);
    if (rank != c->odd_rank && c->common_delay_ms)
        usleep((useconds_t)c->common_delay_ms * 1000);
    double t0 = td_now_s();
    res = run_call(rank == c->odd_rank ? &c->odd : &c->common, n, comm);
    /* A rank whose part ended before anything could disagree with it (a
     * broadcast's root: its sends left) learns it in its next call. */
    if (res == RCC_SUCCESS)
        res = rcc_allreduce(&one, &sum, 1, RCC_INT32, RCC_SUM, comm);
    area->took[rank] = td_now_s() - t0;
    area->res[rank] = res;
    snprintf(area->text[rank], sizeof area->text[rank], "%s", rcc_last_error(comm));
    rcc_result_t async = RCC_SUCCESS;
    rcc_comm_get_async_error(comm, &async);
    rcc_comm_destroy(comm);
    fprintf(stderr, "(mismatch) rank %d: %s after %.3f s\n", rank, rcc_result_name(res),
            area->took[rank]);
    if (res != RCC_ERR_MISMATCH)
        MP_FAIL("rank %d: %s, expected RCC_ERR_MISMATCH: %s", rank, rcc_result_name(res),
                area->text[rank]);
    if (async != RCC_ERR_MISMATCH)
        MP_FAIL("rank %d: rcc_comm_get_async_error says %s after the mismatch", rank,
                rcc_result_name(async));
    if (area->took[rank] > BOUND_S)
        MP_FAIL("rank %d took %.2f s to see the mismatch", rank, area->took[rank]);
    /* Both calls are named; unless a rank's part of it ended before the
     * disagreement could be seen: then its next call (op #2) is. */
    const char *kinds[2] = {kind_names[c->common.kind], kind_names[c->odd.kind]};
    for (int i = 0; i < 2 && !strstr(area->text[rank], "as op #2"); i++)
        if (!strstr(area->text[rank], kinds[i]))
            MP_FAIL("rank %d: the message does not name %s: %s", rank, kinds[i], area->text[rank]);
    if (!strstr(area->text[rank], " while rank ") || !strstr(area->text[rank], " called "))
        MP_FAIL("rank %d: the message does not name both ranks' calls: %s", rank, area->text[rank]);
    /* The odd rank learns of it in its next call and still names both op #1
     * calls: from its history of finished operations when it sees the
     * stray data itself, or from a peer's failure notice. */
    if (c->common_delay_ms && rank == c->odd_rank &&
        (!strstr(area->text[rank], kinds[0]) || !strstr(area->text[rank], kinds[1])))
        MP_FAIL("rank %d: the message does not name both op #1 calls: %s", rank, area->text[rank]);
    return 0;
}

static call_t call_of(kind_t k)
{
    return (call_t){.kind = k, .count = 1000, .dtype = RCC_FLOAT32, .op = RCC_SUM, .root = 0};
}

/* Case i: pairs of different kinds (i < K_COUNT * (K_COUNT - 1)), then the variants. */
static case_t case_of(int i, int small)
{
    case_t c = {0};
    int pairs = K_COUNT * (K_COUNT - 1);
    if (i < pairs) {
        int a = i / (K_COUNT - 1), b = i % (K_COUNT - 1);
        b += b >= a;
        c.common = call_of((kind_t)a);
        c.odd = call_of((kind_t)b);
    } else {
        c.common = c.odd = call_of(K_ALLREDUCE);
        switch (i - pairs) {
        case 0: c.odd.count = 999; break;
        case 1: c.odd.dtype = RCC_INT32; break;
        case 2: c.odd.op = RCC_MAX; break;
        case 3: c.common = c.odd = call_of(K_BROADCAST), c.odd.root = 2; break;
        case 4: c.common = c.odd = call_of(K_REDUCE), c.odd.root = 1; break;
        case 5: c.common = c.odd = call_of(K_ALLGATHER), c.odd.count = 1001; break;
        case 6: c.common = c.odd = call_of(K_ALLTOALL), c.odd.count = 10; break;
        default: break;
        }
    }
    if (small) { /* the small-message algorithms (recursive doubling) */
        c.common.count = c.common.count == 1000 ? 2 : c.common.count % 7 + 1;
        c.odd.count = c.odd.count == 1000 ? 2 : c.odd.count % 7 + 1;
        if (c.common.count == c.odd.count && c.common.kind == c.odd.kind &&
            c.common.dtype == c.odd.dtype && c.common.op == c.odd.op && c.common.root == c.odd.root)
            c.odd.count++;
    }
    return c;
}

#define NCASES (K_COUNT * (K_COUNT - 1) + 7)

/* MM_CASE=i runs case i alone (debugging). */
static int skip_case(int i)
{
    const char *only = getenv("MM_CASE");
    return only && atoi(only) != i;
}

static void run_case(int i, int small, int nranks, int odd_rank)
{
    if (skip_case(i))
        return;
    case_t c = case_of(i, small);
    c.nranks = nranks;
    c.odd_rank = odd_rank;
    ck_assert_int_eq(mp_run(nranks, rank_mismatch, &c, 60), 0);
}

START_TEST(mismatch_large) { run_case(_i, 0, 3, 1); }
END_TEST

START_TEST(mismatch_small) { run_case(_i, 1, 3, 1); }
END_TEST

/* 4 and 5 ranks; the odd rank and the size class change from case to case. */
START_TEST(mismatch_wide)
{
    int n = 4 + _i % 2;
    run_case(_i, _i / 2 % 2, n, (_i * 3) % n);
}
END_TEST

/* A reduce's leaf only sends: its part is over before the others, who
 * start later, show that they called something else. */
START_TEST(mismatch_after_own_part)
{
    static const kind_t others[] = {K_ALLGATHER, K_REDUCE_SCATTER, K_BARRIER};
    case_t c = {.common = call_of(others[_i]), .odd = call_of(K_REDUCE), .nranks = 3,
                .odd_rank = 1, .common_delay_ms = 300};
    ck_assert_int_eq(mp_run(c.nranks, rank_mismatch, &c, 60), 0);
}
END_TEST

static Suite *mismatch_suite(void)
{
    Suite *s = suite_create("mp_mismatch");
    TCase *tc = tcase_create("mismatch");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, mismatch_large, 0, NCASES);
    tcase_add_loop_test(tc, mismatch_small, 0, NCASES);
    tcase_add_loop_test(tc, mismatch_wide, 0, NCASES);
    tcase_add_loop_test(tc, mismatch_after_own_part, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(mismatch_suite)
