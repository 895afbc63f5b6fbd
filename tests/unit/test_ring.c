/*
 * Ring allreduce schedule: arithmetic properties, and a simulation of all
 * ranks exchanging items through in-memory FIFOs, executed in a scrambled
 * but dependency-respecting order, against a naive reference sum.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../check_main.h"

#include "comm.h"
#include "coll/ring.h"
#include "coll/schedule.h"

START_TEST(segments_tile_the_buffer)
{
    for (int n = 1; n <= 9; n++) {
        for (size_t count = 0; count < 200; count += 1 + count / 7) {
            size_t next = 0;
            for (int s = 0; s < n; s++) {
                rcci_span_t seg = rcci_ring_segment(count, n, s);
                ck_assert_uint_eq(seg.offset, next);
                ck_assert(seg.count == count / (size_t)n || seg.count == count / (size_t)n + 1);
                next += seg.count;
                for (size_t nc = 1; nc <= 5; nc++) {
                    size_t cnext = seg.offset;
                    for (size_t c = 0; c < nc; c++) {
                        rcci_span_t ch = rcci_ring_chunk(seg, nc, c);
                        ck_assert_uint_eq(ch.offset, cnext);
                        cnext += ch.count;
                    }
                    ck_assert_uint_eq(cnext, seg.offset + seg.count);
                }
            }
            ck_assert_uint_eq(next, count);
        }
    }
}
END_TEST

START_TEST(huge_counts_do_not_overflow)
{
    size_t count = (1ull << 33) + 5;
    rcci_span_t last = rcci_ring_segment(count, 7, 6);
    ck_assert_uint_eq(last.offset + last.count, count);
    rcci_ring_plan_t p;
    rcci_ring_allreduce_plan(&p, count, 7, 3, 1 << 18, 0);
    rcci_span_t seg = rcci_ring_segment(count, 7, 0);
    ck_assert_uint_ge(p.nchunks * (1 << 18), seg.count);
    rcci_ring_item_t it;
    rcci_ring_allreduce_send(&p, rcci_ring_items(&p) - 1, &it);
    ck_assert_int_eq(it.step, 11);
}
END_TEST

/* What rank r sends at item k is what rank r+1 receives at item k. */
START_TEST(edges_agree)
{
    static const size_t passes[] = {0, 7, 16};
    for (int n = 2; n <= 7; n++) {
        for (size_t count = 0; count < 60; count += 3) {
            for (size_t ce = 1; ce < 9; ce += 3) {
                for (size_t p = 0; p < sizeof passes / sizeof passes[0]; p++) {
                    rcci_ring_plan_t ps[7];
                    for (int r = 0; r < n; r++)
                        rcci_ring_allreduce_plan(&ps[r], count, n, r, ce, passes[p]);
                    for (int r = 0; r < n; r++) {
                        ck_assert_uint_eq(rcci_ring_items(&ps[r]), rcci_ring_items(&ps[0]));
                        for (size_t k = 0; k < rcci_ring_items(&ps[r]); k++) {
                            rcci_ring_item_t s, v;
                            rcci_ring_allreduce_send(&ps[r], k, &s);
                            rcci_ring_allreduce_recv(&ps[(r + 1) % n], k, &v);
                            ck_assert_int_eq(s.segment, v.segment);
                            ck_assert_uint_eq(s.span.offset, v.span.offset);
                            ck_assert_uint_eq(s.span.count, v.span.count);
                            ck_assert_uint_le(s.span.count, ce);
                        }
                    }
                }
            }
        }
    }
}
END_TEST

/* Passes cut the buffer into as many near-equal parts as hold the size asked
 * for (one where fewer than two do), and every element ends on a rank exactly once:
 * reduced for the last time there (the segment the rank finishes) or landed
 * by the allgather (the others). A send waits for the receive one step
 * before it in its own pass, none in a pass's first step. */
START_TEST(passes_cover_the_buffer)
{
    static const size_t counts[] = {0, 1, 9, 100, 1001, 4096};
    static const size_t passes[] = {0, 1, 3, 64, 100, 4096};
    for (int n = 2; n <= 6; n++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (size_t p = 0; p < sizeof passes / sizeof passes[0]; p++) {
                size_t count = counts[c], pass = passes[p];
                rcci_ring_plan_t plan;
                rcci_ring_allreduce_plan(&plan, count, n, 1, 5, pass);
                size_t want = pass && count / pass > 1 ? count / pass : 1;
                ck_assert_uint_eq(plan.npasses, want);
                int *last = calloc(count + 1, sizeof *last),
                    *landed = calloc(count + 1, sizeof *landed);
                for (size_t k = 0; k < rcci_ring_items(&plan); k++) {
                    rcci_ring_item_t it;
                    rcci_ring_allreduce_recv(&plan, k, &it);
                    ck_assert_int_eq(it.step, (int)(k / plan.nchunks % (size_t)plan.nsteps));
                    ck_assert_uint_le(it.span.count, 5);
                    for (size_t i = it.span.offset; i < it.span.offset + it.span.count; i++) {
                        last[i] += it.last_reduce;
                        landed[i] += !it.reduce;
                    }
                    long dep = rcci_ring_allreduce_send_dep(&plan, k);
                    ck_assert(dep < 0 ? it.step == 0 : (size_t)dep + plan.nchunks == k);
                }
                for (size_t i = 0; i < count; i++) {
                    ck_assert_int_eq(last[i] + landed[i], 1);
                }
                free(last), free(landed);
            }
}
END_TEST

/* Simulation: every rank's items run through per-edge FIFOs; the receiver
 * reduces exactly as the engine does. The order in which ranks act is
 * pseudo-random, so any legal interleaving is exercised. */
typedef struct {
    int64_t *data[64];
    size_t head, tail;
} fifo_t;

static void simulate(int n, size_t count, size_t ce, size_t pass, unsigned seed, int inplace)
{
    rcci_ring_plan_t plan[16];
    int64_t *in[16], *out[16];
    fifo_t fifo[16]; /* fifo[r]: from rank r to rank r+1 */
    size_t sent[16] = {0}, recvd[16] = {0};
    memset(fifo, 0, sizeof fifo);
    for (int r = 0; r < n; r++) {
        rcci_ring_allreduce_plan(&plan[r], count, n, r, ce, pass);
        in[r] = malloc((count + 1) * sizeof(int64_t));
        out[r] = inplace ? in[r] : malloc((count + 1) * sizeof(int64_t));
        for (size_t i = 0; i < count; i++) {
            in[r][i] = (int64_t)(i * 31 + (size_t)r * 1000003);
            if (!inplace)
                out[r][i] = -7; /* garbage the algorithm must overwrite */
        }
    }
    size_t items = rcci_ring_items(&plan[0]);
    srand(seed);
    int active = n;
    while (active > 0) {
        int r = rand() % n;
        int is_send = rand() & 1;
        if (is_send && sent[r] < items) {
            long dep = rcci_ring_allreduce_send_dep(&plan[r], sent[r]);
            fifo_t *f = &fifo[r];
            if ((dep < 0 || (size_t)dep < recvd[r]) && f->tail - f->head < 64) {
                rcci_ring_item_t it;
                rcci_ring_allreduce_send(&plan[r], sent[r], &it);
                int64_t *msg = malloc((it.span.count + 1) * sizeof *msg);
                memcpy(msg, (it.from_input ? in[r] : out[r]) + it.span.offset,
                       it.span.count * sizeof *msg);
                f->data[f->tail++ % 64] = msg;
                sent[r]++;
            }
        } else if (!is_send && recvd[r] < items) {
            fifo_t *f = &fifo[(r + n - 1) % n];
            if (f->head < f->tail) {
                int64_t *msg = f->data[f->head++ % 64];
                rcci_ring_item_t it;
                rcci_ring_allreduce_recv(&plan[r], recvd[r], &it);
                for (size_t i = 0; i < it.span.count; i++) {
                    size_t at = it.span.offset + i;
                    out[r][at] = it.reduce ? in[r][at] + msg[i] : msg[i];
                }
                free(msg);
                recvd[r]++;
            }
        }
        active = 0;
        for (int q = 0; q < n; q++)
            active += sent[q] < items || recvd[q] < items;
    }
    for (size_t i = 0; i < count; i++) {
        int64_t expect = 0;
        for (int r = 0; r < n; r++)
            expect += (int64_t)(i * 31 + (size_t)r * 1000003);
        for (int r = 0; r < n; r++)
            ck_assert_msg(out[r][i] == expect,
                          "n=%d count=%zu ce=%zu pass=%zu inplace=%d: rank %d elem %zu", n, count,
                          ce, pass, inplace, r, i);
    }
    for (int r = 0; r < n; r++) {
        if (!inplace)
            free(out[r]);
        free(in[r]);
    }
}

START_TEST(simulated_ring_reduces_correctly)
{
    static const size_t counts[] = {0, 1, 2, 3, 5, 7, 11, 13, 64, 101, 257};
    for (int n = 2; n <= 9; n++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (size_t ce = 1; ce <= 17; ce += 8)
                for (size_t pass = 0; pass <= 20; pass += 20)
                    for (int inplace = 0; inplace < 2; inplace++)
                        simulate(n, counts[c], ce, pass, (unsigned)(n * 1000 + c * 10 + ce + pass),
                                 inplace);
}
END_TEST

/* ---- every schedule, simulated with bounded FIFOs --------------------------------
 *
 * Each rank runs the pipeline's rules exactly: receives and sends retire in
 * order, at most `slots` of each in flight, a send waits for its `dep`, a
 * reduction waits for its `guard`. The FIFO between two ranks holds at most
 * `slots` messages (a receiver only takes what it has posted), so a
 * schedule that could deadlock on a rendezvous transport deadlocks here. */

#define SIM_SLOTS 3

typedef struct {
    int64_t *msg[SIM_SLOTS];
    size_t count[SIM_SLOTS];
    size_t head, tail;
} sim_fifo_t;

static void sim_collective(rcci_coll_t coll, int n, size_t count, size_t ce, size_t pass, int root,
                           int inplace, unsigned seed)
{
    size_t total =
        coll == RCCI_COLL_ALLREDUCE || coll == RCCI_COLL_BROADCAST || coll == RCCI_COLL_REDUCE
            ? count
            : count * (size_t)n;
    rcci_schedule_t sc[8];
    int64_t *in[8], *out[8], *stage[8], *scratch[8];
    sim_fifo_t fifo[8];
    size_t sent[8] = {0}, recvd[8] = {0};
    memset(fifo, 0, sizeof fifo);
    for (int r = 0; r < n; r++) {
        in[r] = calloc(total + 1, sizeof(int64_t));
        out[r] = calloc(total + 1, sizeof(int64_t));
        stage[r] = calloc(SIM_SLOTS * ce + 1, sizeof(int64_t));
        scratch[r] = calloc(2 * count + 1, sizeof(int64_t));
        for (size_t i = 0; i < total; i++)
            in[r][i] = (int64_t)(i * 31 + (size_t)r * 1000003 + 7);
        const int64_t *send = in[r];
        int64_t *recv = out[r];
        if (inplace) { /* NCCL's in-place layouts */
            if (coll == RCCI_COLL_REDUCE_SCATTER)
                recv = in[r] + (size_t)r * count;
            else if (coll == RCCI_COLL_ALLGATHER) {
                for (size_t i = 0; i < count; i++)
                    out[r][(size_t)r * count + i] = in[r][i];
                send = out[r] + (size_t)r * count;
            } else
                recv = in[r];
        }
        sc[r] = (rcci_schedule_t){.coll = coll,
                                  .rank = r,
                                  .nranks = n,
                                  .root = root,
                                  .count = count,
                                  .esize = sizeof(int64_t),
                                  .redop = RCC_SUM,
                                  .sendbuf = (const char *)send,
                                  .recvbuf = (char *)recv,
                                  .scratch = (char *)scratch[r],
                                  .stage = (char *)stage[r],
                                  .slots = SIM_SLOTS,
                                  .chunk_elems = ce,
                                  .pass_elems = pass};
        rcci_schedule_init(&sc[r]);
        rcci_schedule_local(&sc[r]);
    }
    srand(seed);
    for (long spins = 0;; spins++) {
        int busy = 0;
        for (int r = 0; r < n; r++)
            busy |= sent[r] < sc[r].nsend || recvd[r] < sc[r].nrecv;
        if (!busy)
            break;
        ck_assert_msg(spins < 10000000, "%s n=%d count=%zu: deadlock", rcci_coll_name(coll), n,
                      count);
        int r = rand() % n;
        if (rand() & 1) {
            rcci_send_step_t st;
            if (sent[r] >= sc[r].nsend)
                continue;
            rcci_schedule_send(&sc[r], sent[r], &st);
            sim_fifo_t *f = &fifo[r];
            if ((st.dep >= 0 && (size_t)st.dep >= recvd[r]) || f->tail - f->head == SIM_SLOTS)
                continue;
            int64_t *m = malloc((st.count + 1) * sizeof *m);
            memcpy(m, st.src, st.count * sizeof *m);
            f->msg[f->tail % SIM_SLOTS] = m;
            f->count[f->tail % SIM_SLOTS] = st.count;
            f->tail++;
            sent[r]++;
        } else {
            rcci_recv_step_t st;
            sim_fifo_t *f = &fifo[(r + n - 1) % n];
            if (recvd[r] >= sc[r].nrecv || f->head == f->tail)
                continue;
            rcci_schedule_recv(&sc[r], recvd[r], &st);
            if (st.guard >= 0 && (size_t)st.guard >= sent[r])
                continue;
            int64_t *m = f->msg[f->head % SIM_SLOTS];
            ck_assert_uint_eq(f->count[f->head % SIM_SLOTS], st.count);
            f->head++;
            for (size_t i = 0; i < st.count; i++) {
                if (st.local)
                    ((int64_t *)st.out)[i] = ((const int64_t *)st.local)[i] + m[i];
                else
                    ((int64_t *)st.dst)[i] = m[i];
            }
            free(m);
            recvd[r]++;
        }
    }
    for (int r = 0; r < n; r++) {
        const int64_t *res = (const int64_t *)sc[r].recvbuf;
        for (size_t i = 0; i < count && coll != RCCI_COLL_ALLGATHER; i++) {
            size_t g = coll == RCCI_COLL_REDUCE_SCATTER ? (size_t)r * count + i : i;
            int64_t sum = 0;
            for (int q = 0; q < n; q++)
                sum += (int64_t)(g * 31 + (size_t)q * 1000003 + 7);
            int64_t expect =
                coll == RCCI_COLL_BROADCAST ? (int64_t)(g * 31 + (size_t)root * 1000003 + 7) : sum;
            if (coll == RCCI_COLL_REDUCE && r != root)
                break;
            ck_assert_msg(res[i] == expect,
                          "%s n=%d count=%zu ce=%zu pass=%zu root=%d inplace=%d rank %d [%zu]",
                          rcci_coll_name(coll), n, count, ce, pass, root, inplace, r, i);
        }
        for (size_t i = 0; coll == RCCI_COLL_ALLGATHER && i < total; i++)
            ck_assert_msg(res[i] == (int64_t)((i % count) * 31 + (i / count) * 1000003 + 7),
                          "allgather n=%d count=%zu rank %d [%zu]", n, count, r, i);
        free(in[r]), free(out[r]), free(stage[r]), free(scratch[r]);
    }
}

START_TEST(every_schedule_simulated)
{
    static const rcci_coll_t colls[] = {RCCI_COLL_ALLREDUCE, RCCI_COLL_REDUCE_SCATTER,
                                        RCCI_COLL_ALLGATHER, RCCI_COLL_BROADCAST, RCCI_COLL_REDUCE};
    static const size_t counts[] = {1, 2, 5, 13, 64, 101};
    for (size_t c = 0; c < sizeof colls / sizeof colls[0]; c++)
        for (int n = 1; n <= 6; n++)
            for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
                for (size_t ce = 1; ce <= 9; ce += 4)
                    for (size_t pass = 0; pass <= 12; pass += 12) /* allreduce uses it */
                        for (int inplace = 0; inplace < 2; inplace++)
                            sim_collective(
                                colls[c], n, counts[k], ce, pass, (int)(k % (size_t)n), inplace,
                                (unsigned)(c * 7919 + (size_t)n * 131 + k * 17 + ce + pass));
}
END_TEST

/* Recursive doubling's leaders: `hosts` hosts of ranks in blocks, `cpus` CPUs each. */
static int leaders_on(int n, int hosts, int cpus)
{
    uint64_t host[64];
    int cpu[64];
    for (int r = 0; r < n; r++)
        host[r] = 0x9e3779b97f4a7c15ull * (uint64_t)(1 + r * hosts / n), cpu[r] = cpus;
    return rcci_rd_leaders(n, host, cpu);
}

START_TEST(rd_leaders_fit_the_cpus)
{
    /* ranks, hosts, CPUs per host: leaders */
    static const int cases[][4] = {
        {1, 1, 1, 1}, {2, 1, 1, 1}, {2, 1, 2, 2},  {3, 1, 2, 2},    {4, 1, 2, 2},    {4, 1, 4, 4},
        {4, 1, 3, 2}, {5, 1, 2, 2}, {5, 1, 8, 4},  {8, 1, 2, 2},    {8, 1, 1, 1},    {8, 2, 2, 4},
        {8, 2, 1, 2}, {8, 4, 2, 8}, {12, 3, 2, 4}, {16, 1, 64, 16}, {63, 1, 64, 32}, {64, 8, 4, 32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(leaders_on(cases[i][0], cases[i][1], cases[i][2]) == cases[i][3],
                      "%d ranks on %d hosts of %d CPUs: %d leaders, expected %d", cases[i][0],
                      cases[i][1], cases[i][2], leaders_on(cases[i][0], cases[i][1], cases[i][2]),
                      cases[i][3]);
    /* A host's CPUs are the most any of its ranks sees. */
    uint64_t host[4] = {7, 7, 7, 7};
    int cpu[4] = {1, 4, 1, 1};
    ck_assert_int_eq(rcci_rd_leaders(4, host, cpu), 4);
    /* Groups that straddle hosts: 6 ranks, hosts {0,1,2} and {3,4,5}, 2 CPUs each; 4 leaders
     * (ranks 1, 3, 4, 5) would put 3 on the second host. */
    uint64_t h6[6] = {1, 1, 1, 2, 2, 2};
    int c6[6] = {2, 2, 2, 2, 2, 2};
    ck_assert_int_eq(rcci_rd_leaders(6, h6, c6), 2);
}
END_TEST

#define U RCCI_CPU_UNKNOWN

/* Leaders sharing a host and a CPU, counted in pairs. */
static int shared_pairs(int p, const uint64_t *host, const uint32_t *cpu, const int *lead)
{
    int pairs = 0;
    for (int g = 0; g < p; g++)
        for (int h = g + 1; h < p; h++)
            pairs +=
                cpu[lead[g]] != U && host[lead[g]] == host[lead[h]] && cpu[lead[g]] == cpu[lead[h]];
    return pairs;
}

START_TEST(rd_leaders_move_off_shared_cpus)
{
    static const uint64_t one[8] = {5, 5, 5, 5, 5, 5, 5, 5};
    /* 4 ranks, 2 groups {0,1} {2,3}: leaders 1 and 3 on CPU 1; group 0
     * hands the lead to rank 0, on CPU 0. */
    const uint32_t c1[4] = {0, 1, 0, 1};
    int lead[4] = {1, 3};
    ck_assert_int_eq(rcci_rd_move_leaders(4, 2, one, c1, lead), 1);
    ck_assert_int_eq(lead[0], 0);
    ck_assert_int_eq(lead[1], 3);
    ck_assert_int_eq(rcci_rd_move_leaders(4, 2, one, c1, lead), 0); /* and stays */
    /* Leaders apart already, all ranks on one CPU, CPUs unknown: nothing moves. */
    const uint32_t c2[4] = {0, 1, 1, 0}, c3[4] = {0, 0, 0, 0}, c4[4] = {U, U, U, U};
    const uint32_t *still[] = {c2, c3, c4};
    for (int i = 0; i < 3; i++) {
        lead[0] = 1, lead[1] = 3;
        ck_assert_int_eq(rcci_rd_move_leaders(4, 2, one, still[i], lead), 0);
        ck_assert(lead[0] == 1 && lead[1] == 3);
    }
    /* The same CPU number on two hosts is two CPUs. */
    const uint64_t two[4] = {1, 1, 2, 2};
    lead[0] = 1, lead[1] = 3;
    ck_assert_int_eq(rcci_rd_move_leaders(4, 2, two, c3, lead), 0);
    /* 8 ranks, 4 groups of 2, 4 CPUs; leaders 1, 3, 5, 7 all on CPU 0:
     * groups 1-3 move to their first ranks, on CPUs 1-3 (group 0's first
     * rank is on CPU 0 too, so group 0 keeps its leader). */
    const uint32_t c8[8] = {0, 0, 1, 0, 2, 0, 3, 0};
    int lead8[4] = {1, 3, 5, 7};
    ck_assert_int_eq(rcci_rd_move_leaders(8, 4, one, c8, lead8), 3);
    ck_assert(lead8[0] == 1 && lead8[1] == 2 && lead8[2] == 4 && lead8[3] == 6);
    ck_assert_int_eq(shared_pairs(4, one, c8, lead8), 0);
    /* Uneven groups (7 ranks, 2 leaders: {0,1,2,3} {4,5,6}) and random
     * placements on 1-4 CPUs and 1-2 hosts: each leader stays in its group,
     * the count is what changed, no more pairs share than before, and where
     * any still does, no rank of its group was free. */
    uint64_t seed = 12345;
    for (int t = 0; t < 20000; t++) {
        int n = 2 + t % 15, p = 1;
        while (2 * p <= n / 2)
            p *= 2;
        p = p > 1 && t % 3 == 0 ? p / 2 : p;
        uint64_t host[16];
        uint32_t cpu[16];
        int cpus = 1 + t % 4, hosts = 1 + t % 2, before[16], after[16];
        for (int r = 0; r < n; r++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            host[r] = (uint64_t)(1 + (seed >> 40) % (uint64_t)hosts);
            cpu[r] = (seed >> 20) % 11 == 0 ? U : (uint32_t)((seed >> 50) % (uint64_t)cpus);
        }
        for (int g = 0; g < p; g++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int lo = rcci_rd_group_start(n, p, g), size = rcci_rd_group_start(n, p, g + 1) - lo;
            before[g] = after[g] = lo + (int)((seed >> 33) % (uint64_t)size);
        }
        int moved = rcci_rd_move_leaders(n, p, host, cpu, after), changed = 0;
        for (int g = 0; g < p; g++) {
            ck_assert(after[g] >= rcci_rd_group_start(n, p, g) &&
                      after[g] < rcci_rd_group_start(n, p, g + 1));
            changed += after[g] != before[g];
        }
        ck_assert_int_eq(moved, changed);
        ck_assert_int_le(shared_pairs(p, host, cpu, after), shared_pairs(p, host, cpu, before));
        for (int g = 0; g < p; g++) {
            int shares = 0;
            for (int h = 0; h < p; h++)
                shares |= h != g && cpu[after[g]] != U && host[after[h]] == host[after[g]] &&
                          cpu[after[h]] == cpu[after[g]];
            for (int r = rcci_rd_group_start(n, p, g);
                 shares && r < rcci_rd_group_start(n, p, g + 1); r++) {
                int free_cpu = cpu[r] != U;
                for (int h = 0; h < p && free_cpu; h++)
                    free_cpu = h == g || host[after[h]] != host[r] || cpu[after[h]] != cpu[r];
                ck_assert_msg(!free_cpu, "case %d: group %d's rank %d was free", t, g, r);
            }
        }
    }
}
END_TEST

static Suite *ring_suite(void)
{
    Suite *s = suite_create("ring_schedule");
    TCase *tc = tcase_create("ring");
    tcase_add_test(tc, segments_tile_the_buffer);
    tcase_add_test(tc, huge_counts_do_not_overflow);
    tcase_add_test(tc, edges_agree);
    tcase_add_test(tc, passes_cover_the_buffer);
    tcase_add_test(tc, simulated_ring_reduces_correctly);
    tcase_add_test(tc, every_schedule_simulated);
    tcase_add_test(tc, rd_leaders_fit_the_cpus);
    tcase_add_test(tc, rd_leaders_move_off_shared_cpus);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(ring_suite)
