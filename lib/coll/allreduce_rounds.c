/*
 * Allreduces made of rounds of pairwise exchanges, for the sizes where the
 * ring's 2(n-1) steps cost more than its bandwidth saves:
 *
 *  direct         one round: every rank sends its input to every other and
 *                 folds all inputs in rank order (n(n-1) messages)
 *  twostep        two rounds, the ring's bytes: every rank sends block q of
 *                 its input to rank q and folds the blocks it gets (its own
 *                 block) in rank order, then sends that result to every
 *                 other (2n(n-1) messages of a block each)
 *  star           two rounds through one rank, the root: every other rank
 *                 sends it its input, and it folds them in rank order and
 *                 sends the result to every other (2(n-1) messages, the
 *                 fewest of all; the root changes from one operation to the
 *                 next, by sequence number, so that no rank does all the
 *                 sending)
 *  rd             recursive doubling: log2(p) rounds, the whole buffer each
 *  rabenseifner   reduce-scatter by recursive halving, then allgather by
 *                 recursive doubling: 2 log2(p) rounds moving the ring's
 *                 bytes, 2(p-1)/p of the buffer per rank
 *
 * rd and rabenseifner run among p leaders, p a power of two <= n: the
 * largest for rabenseifner; for rd also the largest, unless a host would
 * run more leaders than it has CPUs (comm->rd_leaders, rcci_rd_leaders).
 * The n ranks form p groups of consecutive ranks (the first n mod p groups
 * one rank more), whose last rank leads: the others hand it their inputs
 * (round 0), it folds them in rank order, and they get the result back
 * after the last round. With p the largest power of two, that is the usual
 * fold of n - p pairs. A leader's place among the p is its vrank.
 *
 * Why fewer leaders where ranks outnumber the CPUs: every round of
 * recursive doubling needs every leader on a CPU, and the kernel's work per
 * message, not the wire, is the time. 4 ranks on 2 CPUs: 2 leaders run the
 * 8-byte allreduce in 0.57x the time of 4 (bench/results/README.md).
 *
 * For the same reason two leaders that the scheduler put on one CPU take
 * turns where they should run at once (4 ranks on 2 CPUs: 70 against 41 us
 * for 8 bytes), and the scheduler keeps a placement for thousands of
 * operations. So where leaders are fewer than ranks (comm->rd_lead) every
 * message of rd carries a trailer: a member's CPU to its leader, the CPUs
 * its block of groups reported from leader to leader (an allgather riding
 * on the rounds), and from leader to member every group's leader for the
 * next operation, which all leaders work out alike from the same CPUs
 * (rcci_rd_move_leaders). Any rank of a group may lead: the fold takes the
 * inputs in rank order whoever leads, so the results do not change.
 *
 * All ranks end with identical bits: every pairwise reduction puts the lower
 * vrank's operand first (MAX/MIN and NaN payloads are not commutative), so
 * both sides of an rd pair compute the same thing; in rabenseifner and
 * twostep each block is reduced at one rank only and then copied.
 */
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_COLL /* log.h: the subsystem of this file's lines */
#include "byteorder.h"
#include "comm.h"
#include "log.h"
#include "params.h"
#include "reduce.h"
#include "ring.h"

static const struct {
    const char *name;
    rcci_allreduce_algo_t algo;
} algo_names[] = {
    {"ring", RCCI_ALLREDUCE_RING},       {"rabenseifner", RCCI_ALLREDUCE_RABENSEIFNER},
    {"rd", RCCI_ALLREDUCE_RD},           {"direct", RCCI_ALLREDUCE_DIRECT},
    {"twostep", RCCI_ALLREDUCE_TWOSTEP}, {"star", RCCI_ALLREDUCE_STAR},
};

int rcci_allreduce_algo_named(const char *name, rcci_allreduce_algo_t *algo)
{
    if (!strcmp(name, "auto"))
        return 0;
    for (size_t i = 0; i < sizeof algo_names / sizeof algo_names[0]; i++) {
        if (!strcmp(name, algo_names[i].name)) {
            *algo = algo_names[i].algo;
            return 1;
        }
    }
    return -1;
}

const char *rcci_allreduce_algo_name(int algo)
{
    for (size_t i = 0; i < sizeof algo_names / sizeof algo_names[0]; i++)
        if ((int)algo_names[i].algo == algo)
            return algo_names[i].name;
    return "?";
}

rcci_allreduce_algo_t rcci_allreduce_algo(const struct rcc_comm *comm, size_t bytes)
{
    if (comm->nranks < 2)
        return RCCI_ALLREDUCE_RING;
    if (comm->algo_forced)
        return comm->algo;
    if (bytes <= (size_t)rcci_param_int(RCCI_PARAM_SMALL_MAX_BYTES))
        return RCCI_ALLREDUCE_RD;
    /* Folding extra ranks in moves the whole buffer twice more over their
     * links: fine for latency-bound sizes, not for bandwidth-bound ones. */
    int pof2 = (comm->nranks & (comm->nranks - 1)) == 0;
    if (pof2 && bytes <= (size_t)rcci_param_int(RCCI_PARAM_MID_MAX_BYTES))
        return RCCI_ALLREDUCE_RABENSEIFNER;
    return RCCI_ALLREDUCE_RING;
}

typedef struct {
    const rcci_op_t *op;
    size_t esize;
    int round; /* the round whose messages were handed out last; -1 at the start */
    int nranks, pof2, vrank, levels; /* pof2: the leaders (p); vrank: -1 unless leading */
    int group_lo, group_n;           /* this rank's group: ranks [group_lo, group_lo + group_n) */
    int leader;                      /* its leader in this operation */
    int rabenseifner;
    char *tmp;   /* direct: every rank's input, in rank order; otherwise, at a leader, its
                  * members' inputs, then what a round brings */
    size_t slot; /* the stride of the members' inputs in tmp */
    char *rd_in; /* what an rd round (or, with move, the unfold) brings */
    /* With move (comm->rd_lead): */
    int move;
    char *stage;   /* outgoing data and its trailer */
    uint32_t *cpu; /* every rank's CPU as reported (at leaders, complete after the rounds) */
    int *lead;     /* every group's leader in this operation */
    _Alignas(max_align_t) char tmp_mem[];
} rounds_t;

static rcci_p2p_msg_t coll_msg(int peer, int is_send, const void *buf, size_t bytes)
{
    return (rcci_p2p_msg_t){.peer = peer,
                            .is_send = is_send,
                            .buf = (char *)buf,
                            .bytes = bytes,
                            .lane = RCCI_LANE_COLL};
}

static void add_msg(rcci_p2p_msg_t *msgs, int *k, int peer, int is_send, const void *buf,
                    size_t bytes)
{
    if (bytes) /* both sides compute the same sizes, so both skip an empty one */
        msgs[(*k)++] = coll_msg(peer, is_send, buf, bytes);
}

/* ---- direct exchange --------------------------------------------------- */

/* Every rank's input, in rank order in tmp, folded into the output (rank
 * 0's block accumulates): direct's and star's reduction. */
static void fold_inputs(rounds_t *a, int n)
{
    const rcci_op_t *op = a->op;
    size_t bytes = op->count * a->esize;
    char *acc = a->tmp;
    for (int q = 1; q < n; q++)
        rcci_reduce(q == n - 1 ? (char *)op->recvbuf : acc, acc, a->tmp + (size_t)q * bytes,
                    op->count, op->dtype, op->redop, q == n - 1 && op->redop == RCC_AVG ? n : 1);
}

static int direct_next(const struct rcc_comm *comm, void *state, rcci_p2p_msg_t *msgs, int *nmsgs)
{
    rounds_t *a = state;
    const rcci_op_t *op = a->op;
    int n = comm->nranks, r = comm->rank;
    size_t bytes = op->count * a->esize;
    if (++a->round == 0) {
        int k = 0;
        for (int step = 1; step < n; step++) { /* rank r+1 first, so that sends spread out */
            int q = (r + step) % n;
            msgs[k++] = coll_msg(q, 1, a->tmp + (size_t)r * bytes, bytes);
            msgs[k++] = coll_msg(q, 0, a->tmp + (size_t)q * bytes, bytes);
        }
        *nmsgs = k;
        return 0;
    }
    fold_inputs(a, n);
    return 1;
}

/* ---- star: gathered, folded and sent back by one rank ---------------------- */

static int star_root(const rcci_op_t *op, int n) { return (int)(op->seq % (uint32_t)n); }

static int star_next(const struct rcc_comm *comm, void *state, rcci_p2p_msg_t *msgs, int *nmsgs)
{
    rounds_t *a = state;
    const rcci_op_t *op = a->op;
    int n = comm->nranks, r = comm->rank, root = star_root(op, n), k = 0;
    size_t bytes = op->count * a->esize;
    switch (++a->round) {
    case 0:
        if (r != root) { /* one round: the result comes only after the input has arrived */
            add_msg(msgs, &k, root, 1, op->sendbuf == op->recvbuf ? a->tmp : op->sendbuf, bytes);
            add_msg(msgs, &k, root, 0, op->recvbuf, bytes);
            break;
        }
        for (int step = 1; step < n; step++) {
            int q = (root + step) % n;
            add_msg(msgs, &k, q, 0, a->tmp + (size_t)q * bytes, bytes);
        }
        break;
    case 1: {
        if (r != root)
            return 1;
        memcpy(a->tmp + (size_t)r * bytes, op->sendbuf, bytes);
        fold_inputs(a, n);
        for (int step = 1; step < n; step++)
            add_msg(msgs, &k, (root + step) % n, 1, op->recvbuf, bytes);
        break;
    }
    default: return 1;
    }
    *nmsgs = k;
    return 0;
}

/* ---- two steps: reduce-scatter and allgather by direct exchange ------------ */

static int twostep_next(const struct rcc_comm *comm, void *state, rcci_p2p_msg_t *msgs, int *nmsgs)
{
    rounds_t *a = state;
    const rcci_op_t *op = a->op;
    int n = comm->nranks, r = comm->rank, k = 0;
    size_t es = a->esize;
    rcci_span_t own = rcci_ring_segment(op->count, n, r); /* the ring's blocks */
    size_t lo = own.offset, mine = own.count;
    char *out = (char *)op->recvbuf;
    const char *in = op->sendbuf;
    switch (++a->round) {
    case 0: /* block q of the input to rank q; everyone's block r into tmp, by rank */
        for (int step = 1; step < n; step++) { /* rank r+1 first, so that sends spread out */
            int q = (r + step) % n;
            rcci_span_t b = rcci_ring_segment(op->count, n, q);
            add_msg(msgs, &k, q, 1, in + b.offset * es, b.count * es);
            add_msg(msgs, &k, q, 0, a->tmp + (size_t)q * mine * es, mine * es);
        }
        break;
    case 1: { /* block r folded in rank order, then given to every rank */
        memcpy(a->tmp + (size_t)r * mine * es, in + lo * es, mine * es);
        char *acc = a->tmp; /* rank 0's part accumulates */
        for (int q = 1; q < n; q++)
            rcci_reduce(q == n - 1 ? out + lo * es : acc, acc, a->tmp + (size_t)q * mine * es,
                        mine, op->dtype, op->redop, q == n - 1 && op->redop == RCC_AVG ? n : 1);
        for (int step = 1; step < n; step++) {
            int q = (r + step) % n;
            rcci_span_t b = rcci_ring_segment(op->count, n, q);
            add_msg(msgs, &k, q, 1, out + lo * es, mine * es);
            add_msg(msgs, &k, q, 0, out + b.offset * es, b.count * es);
        }
        break;
    }
    default: return 1;
    }
    *nmsgs = k;
    return 0;
}

/* ---- recursive doubling and Rabenseifner ------------------------------- */

/* Group g of n ranks under p leaders: its first rank (g = p: n). */
static int group_start(int n, int p, int g)
{
    int q = n / p, extra = n % p;
    return g * q + (g < extra ? g : extra);
}

int rcci_rd_group_start(int n, int p, int g) { return group_start(n, p, g); }

/* The group of rank r. */
static int group_of(int n, int p, int r)
{
    int q = n / p, extra = n % p, big = extra * (q + 1);
    return r < big ? r / (q + 1) : extra + (r - big) / q;
}

/* The leader of group `vrank`: its last rank, unless leaders move. */
static int real_rank(const rounds_t *a, int vrank)
{
    return a->move ? a->lead[vrank] : group_start(a->nranks, a->pof2, vrank + 1) - 1;
}

typedef struct {
    uint64_t host;
    int cpus;
} host_cpus_t;

static int host_cmp(const void *x, const void *y)
{
    uint64_t a = ((const host_cpus_t *)x)->host, b = ((const host_cpus_t *)y)->host;
    return a < b ? -1 : a > b;
}

int rcci_rd_leaders(int n, const uint64_t *host, const int *cpus)
{
    int p = 1;
    while (2 * p <= n)
        p *= 2;
    host_cpus_t *hosts = malloc((size_t)n * sizeof *hosts),
                *lead = malloc((size_t)p * sizeof *lead);
    if (!hosts || !lead) {
        free(hosts), free(lead);
        return p; /* the usual fold: right everywhere, only slower where ranks crowd */
    }
    /* Each host once, with the most CPUs any of its ranks reports. */
    for (int r = 0; r < n; r++)
        hosts[r] = (host_cpus_t){host[r], cpus[r]};
    qsort(hosts, (size_t)n, sizeof *hosts, host_cmp);
    int nhosts = 0;
    for (int r = 0; r < n; r++) {
        if (nhosts && hosts[nhosts - 1].host == hosts[r].host) {
            if (hosts[r].cpus > hosts[nhosts - 1].cpus)
                hosts[nhosts - 1].cpus = hosts[r].cpus;
        } else {
            hosts[nhosts++] = hosts[r];
        }
    }
    for (; p > 1; p /= 2) { /* halved while some host has more leaders than CPUs */
        for (int g = 0; g < p; g++)
            lead[g].host = host[group_start(n, p, g + 1) - 1];
        qsort(lead, (size_t)p, sizeof *lead, host_cmp);
        int fits = 1;
        for (int g = 0; g < p && fits;) {
            int run = 1;
            while (g + run < p && lead[g + run].host == lead[g].host)
                run++;
            const host_cpus_t *h =
                bsearch(&lead[g], hosts, (size_t)nhosts, sizeof *hosts, host_cmp);
            fits = h && run <= h->cpus;
            g += run;
        }
        if (fits)
            break;
    }
    free(hosts), free(lead);
    return p;
}

typedef struct {
    uint64_t host;
    uint32_t cpu;
} host_cpu_t;

static int host_cpu_cmp(const void *x, const void *y)
{
    const host_cpu_t *a = x, *b = y;
    if (a->host != b->host)
        return a->host < b->host ? -1 : 1;
    return (a->cpu > b->cpu) - (a->cpu < b->cpu);
}

/* Whether rank r, were it group g's leader, would share a CPU with another
 * group's leader. */
static int lead_shares_cpu(int p, const uint64_t *host, const uint32_t *cpu, const int *lead, int g,
                           int r)
{
    if (cpu[r] == RCCI_CPU_UNKNOWN)
        return 0;
    for (int h = 0; h < p; h++)
        if (h != g && host[lead[h]] == host[r] && cpu[lead[h]] == cpu[r])
            return 1;
    return 0;
}

int rcci_rd_move_leaders(int n, int p, const uint64_t *host, const uint32_t *cpu, int *lead)
{
    /* Every operation asks; mostly no two leaders share a CPU, which a sort
     * shows without looking at every pair. */
    host_cpu_t quick[64], *hc = p <= 64 ? quick : malloc((size_t)p * sizeof *hc);
    int shared = !hc; /* without memory: the long way */
    if (hc) {
        int k = 0;
        for (int g = 0; g < p; g++)
            if (cpu[lead[g]] != RCCI_CPU_UNKNOWN)
                hc[k++] = (host_cpu_t){host[lead[g]], cpu[lead[g]]};
        qsort(hc, (size_t)k, sizeof *hc, host_cpu_cmp);
        for (int i = 1; i < k && !shared; i++)
            shared = !host_cpu_cmp(&hc[i - 1], &hc[i]);
        if (hc != quick)
            free(hc);
    }
    int moved = 0;
    for (int g = 0; shared && g < p; g++) {
        if (!lead_shares_cpu(p, host, cpu, lead, g, lead[g]))
            continue;
        for (int r = group_start(n, p, g); r < group_start(n, p, g + 1); r++) {
            if (r != lead[g] && cpu[r] != RCCI_CPU_UNKNOWN &&
                !lead_shares_cpu(p, host, cpu, lead, g, r)) {
                lead[g] = r;
                moved++;
                break;
            }
        }
    }
    return moved;
}

/* ---- the trailers of moving leaders (comm->rd_lead) ---------------------- */

#define TRAILER_WORD 4 /* a CPU or a rank, little-endian */

static uint32_t my_cpu(void)
{
    int c = sched_getcpu();
    return c >= 0 ? (uint32_t)c : RCCI_CPU_UNKNOWN;
}

/* The ranks [*lo, *hi) whose CPUs leader `vrank` knows before rd round j:
 * those of its block of 2^(j-1) groups. */
static void known_ranks(const rounds_t *a, int vrank, int j, int *lo, int *hi)
{
    int size = 1 << (j - 1), first = vrank & ~(size - 1);
    *lo = group_start(a->nranks, a->pof2, first);
    *hi = group_start(a->nranks, a->pof2, first + size);
}

static void put_words(char *dst, const uint32_t *words, int n)
{
    for (int i = 0; i < n; i++)
        rcci_put_le((uint8_t *)dst + (size_t)i * TRAILER_WORD, words[i], TRAILER_WORD);
}

static void get_words(uint32_t *words, const char *src, int n)
{
    for (int i = 0; i < n; i++)
        words[i] =
            (uint32_t)rcci_get_le((const uint8_t *)src + (size_t)i * TRAILER_WORD, TRAILER_WORD);
}

/* The elements [*lo, *hi) that `vrank` holds after `halvings` rounds of
 * recursive halving: each round keeps the lower half when the vrank's bit
 * for that round (p/2, p/4, ...) is clear, the upper half when set. */
static void halving_segment(const rounds_t *a, int vrank, int halvings, size_t *lo, size_t *hi)
{
    *lo = 0, *hi = a->op->count;
    for (int i = 1; i <= halvings; i++) {
        size_t mid = *lo + (*hi - *lo) / 2;
        if (vrank & (a->pof2 >> i))
            *lo = mid;
        else
            *hi = mid;
    }
}

/* Rank q's input at its group's leader: the leader's own, or the slot of
 * the member that q is, in rank order. */
static const char *fold_input(const rounds_t *a, int q)
{
    if (q == a->leader)
        return a->op->sendbuf;
    return a->tmp + (size_t)(q - a->group_lo - (q > a->leader)) * a->slot;
}

/* Handles round a->round's arrivals (with move, a member also takes the
 * next operation's leaders into comm->rd_lead here). */
static void rounds_reduce(const struct rcc_comm *comm, rounds_t *a)
{
    const rcci_op_t *op = a->op;
    char *acc = op->recvbuf;
    int j = a->round, v = a->vrank, L = a->levels;
    size_t bytes = op->count * a->esize;
    if (j == 0) { /* the fold: the group's inputs in rank order, whoever leads */
        if (v < 0)
            return;
        if (a->move) {
            for (int q = a->group_lo; q < a->group_lo + a->group_n; q++)
                if (q != a->leader)
                    get_words(&a->cpu[q], fold_input(a, q) + bytes, 1);
            a->cpu[a->leader] = my_cpu();
        }
        if (a->group_n == 1) {
            if (op->sendbuf != op->recvbuf)
                memcpy(acc, op->sendbuf, bytes);
            return;
        }
        /* Partial results go to the first member's slot (read by the first
         * step), not to the output: that may be the leader's input, read
         * later. One leader (L = 0): the last step completes the sum. */
        char *partial = a->tmp;
        for (int k = 1; k < a->group_n; k++) {
            int last = k == a->group_n - 1;
            rcci_reduce(last ? acc : partial, k == 1 ? fold_input(a, a->group_lo) : partial,
                        fold_input(a, a->group_lo + k), op->count, op->dtype, op->redop,
                        last && L == 0 && op->redop == RCC_AVG ? comm->nranks : 1);
        }
        return;
    }
    if (a->move && j == L + 1 && v < 0) { /* a member's result, and who leads next */
        memcpy(acc, a->rd_in, bytes);
        for (int g = 0; g < a->pof2; g++)
            comm->rd_lead[g] = (int)rcci_get_le(
                (const uint8_t *)a->rd_in + bytes + (size_t)g * TRAILER_WORD, TRAILER_WORD);
        return;
    }
    if (v < 0 || j > L)
        return; /* allgather rounds receive in place; the unfold is a copy */
    int divisor = j == L && op->redop == RCC_AVG ? comm->nranks : 1; /* the sum is complete */
    if (!a->rabenseifner) { /* recursive doubling: the whole buffer */
        int partner = v ^ (1 << (j - 1)), mine_first = v < partner;
        rcci_reduce(acc, mine_first ? acc : a->rd_in, mine_first ? a->rd_in : acc, op->count,
                    op->dtype, op->redop, divisor);
        if (a->move) {
            int lo, hi;
            known_ranks(a, partner, j, &lo, &hi);
            get_words(&a->cpu[lo], a->rd_in + bytes, hi - lo);
        }
    } else { /* halving: the half kept */
        size_t lo, hi;
        halving_segment(a, v, j, &lo, &hi);
        char *kept = acc + lo * a->esize;
        int mine_first = !(v & (a->pof2 >> j));
        rcci_reduce(kept, mine_first ? kept : a->tmp, mine_first ? a->tmp : kept, hi - lo,
                    op->dtype, op->redop, divisor);
    }
}

/* Writes round a->round's messages. */
static void rounds_plan(const struct rcc_comm *comm, rounds_t *a, rcci_p2p_msg_t *msgs, int *nmsgs)
{
    const rcci_op_t *op = a->op;
    size_t bytes = op->count * a->esize, es = a->esize;
    char *acc = op->recvbuf;
    int r = comm->rank, j = a->round, v = a->vrank, L = a->levels;
    int body = a->rabenseifner ? 2 * L : L, k = 0;
    int leader = a->leader;
    if (j == 0) { /* the fold */
        if (r != leader && a->move) { /* the input, then this rank's CPU */
            memcpy(a->stage, op->sendbuf, bytes);
            uint32_t cpu = my_cpu();
            put_words(a->stage + bytes, &cpu, 1);
            add_msg(msgs, &k, leader, 1, a->stage, bytes + TRAILER_WORD);
        } else if (r != leader) {
            add_msg(msgs, &k, leader, 1, op->sendbuf, bytes);
        } else {
            for (int q = a->group_lo; q < a->group_lo + a->group_n; q++)
                if (q != leader)
                    add_msg(msgs, &k, q, 0, (char *)fold_input(a, q),
                            bytes + (a->move ? TRAILER_WORD : 0));
        }
    } else if (j <= body && v >= 0) {
        if (!a->rabenseifner) {
            int partner = v ^ (1 << (j - 1)), peer = real_rank(a, partner);
            size_t out = bytes, in = bytes;
            const char *from = acc;
            if (a->move) { /* the result so far, then the CPUs this leader knows */
                int lo, hi, plo, phi;
                known_ranks(a, v, j, &lo, &hi);
                known_ranks(a, partner, j, &plo, &phi);
                memcpy(a->stage, acc, bytes);
                put_words(a->stage + bytes, &a->cpu[lo], hi - lo);
                from = a->stage;
                out += (size_t)(hi - lo) * TRAILER_WORD;
                in += (size_t)(phi - plo) * TRAILER_WORD;
            }
            add_msg(msgs, &k, peer, 1, from, out);
            add_msg(msgs, &k, peer, 0, a->rd_in, in);
        } else if (j <= L) { /* halving round j: send the half the partner keeps */
            int m = a->pof2 >> j, peer = real_rank(a, v ^ m);
            size_t lo, hi, plo, phi;
            halving_segment(a, v, j, &lo, &hi);
            halving_segment(a, v ^ m, j, &plo, &phi);
            add_msg(msgs, &k, peer, 1, acc + plo * es, (phi - plo) * es);
            add_msg(msgs, &k, peer, 0, a->tmp, (hi - lo) * es);
        } else { /* doubling round j - L: undoes halving round 2L - j + 1 */
            int h = 2 * L - j + 1, m = a->pof2 >> h, peer = real_rank(a, v ^ m);
            size_t lo, hi, plo, phi;
            halving_segment(a, v, h, &lo, &hi);
            halving_segment(a, v ^ m, h, &plo, &phi);
            add_msg(msgs, &k, peer, 1, acc + lo * es, (hi - lo) * es);
            add_msg(msgs, &k, peer, 0, acc + plo * es, (phi - plo) * es);
        }
    } else if (j == body + 1 && a->move) { /* the unfold: the result, then who leads next */
        size_t with_leads = bytes + (size_t)a->pof2 * TRAILER_WORD;
        if (r != leader) {
            add_msg(msgs, &k, leader, 0, a->rd_in, with_leads);
        } else {
            /* Every leader works this out from the same CPUs, alike. */
            int moved = rcci_rd_move_leaders(a->nranks, a->pof2, comm->rd_host, a->cpu, a->lead);
            if (moved)
                RCC_TRACE("op #%u: %d leader(s) of recursive doubling moved off a shared CPU",
                          op->seq, moved);
            memcpy(comm->rd_lead, a->lead, (size_t)a->pof2 * sizeof *a->lead);
            memcpy(a->stage, acc, bytes);
            for (int g = 0; g < a->pof2; g++) {
                uint32_t rank = (uint32_t)a->lead[g];
                put_words(a->stage + bytes + (size_t)g * TRAILER_WORD, &rank, 1);
            }
            for (int q = a->group_lo; q < a->group_lo + a->group_n; q++)
                if (q != leader)
                    add_msg(msgs, &k, q, 1, a->stage, with_leads);
        }
    } else if (j == body + 1) { /* the unfold */
        if (r != leader)
            add_msg(msgs, &k, leader, 0, acc, bytes);
        else
            for (int q = a->group_lo; q < a->group_lo + a->group_n; q++)
                if (q != leader)
                    add_msg(msgs, &k, q, 1, acc, bytes);
    }
    *nmsgs = k;
}

static int rounds_next(const struct rcc_comm *comm, void *state, rcci_p2p_msg_t *msgs, int *nmsgs)
{
    rounds_t *a = state;
    int body = a->rabenseifner ? 2 * a->levels : a->levels;
    if (a->round >= 0) {
        int64_t t0 = rcci_tl_now(comm->tl);
        rounds_reduce(comm, a);
        RCCI_TL(comm, rcci_tl_work(comm->tl, "reduce", t0, a->op->count * a->esize));
    }
    if (++a->round > body + 1)
        return 1;
    rounds_plan(comm, a, msgs, nmsgs);
    return 0;
}

rcc_result_t rcci_rounds_allreduce_start(struct rcc_comm *comm, rcci_op_t *op,
                                         rcci_allreduce_algo_t algo, rcci_exec_t **exec)
{
    int n = comm->nranks, r = comm->rank;
    size_t esize = rcc_datatype_size(op->dtype), bytes = op->count * esize;
    /* rd and rabenseifner: the leaders, and this rank's group */
    int p = 1, levels = 0;
    while (2 * p <= n)
        p *= 2, levels++;
    if (algo == RCCI_ALLREDUCE_RD && comm->rd_leaders > 0)
        while (p > comm->rd_leaders)
            p /= 2, levels--;
    int group = group_of(n, p, r), group_lo = group_start(n, p, group);
    int group_n = group_start(n, p, group + 1) - group_lo;
    /* Leaders that follow the CPUs: only where recursive doubling folds
     * (p is then comm->rd_leaders; never for RCC_ALGO=rabenseifner). */
    int move = algo == RCCI_ALLREDUCE_RD && comm->rd_lead;
    /* direct: every rank's input; twostep: every rank's part of this rank's
     * block; the others: a leader's members' inputs, at least one buffer
     * (rabenseifner's rounds need at most half); with move each input has
     * its trailer, and besides: an rd round's arrival (or the unfold's),
     * the outgoing stage (trailers of at most n words), the CPUs, the
     * leaders. */
#define ALIGN16(x) (((x) + 15) & ~(size_t)15)
    size_t slot = move ? ALIGN16(bytes + TRAILER_WORD) : bytes;
    size_t wide = ALIGN16(bytes + (size_t)n * TRAILER_WORD);
    size_t fold_bytes = (size_t)(group_n > 2 ? group_n - 1 : 1) * slot;
    int star_root_here = algo == RCCI_ALLREDUCE_STAR && star_root(op, n) == r;
    size_t tmp_bytes = algo == RCCI_ALLREDUCE_DIRECT || star_root_here ? (size_t)n * bytes
                       : algo == RCCI_ALLREDUCE_TWOSTEP ? (size_t)n * (op->count / n + 1) * esize
                       : move ? ALIGN16(fold_bytes) + 2 * wide + (size_t)n * sizeof(uint32_t) +
                                    (size_t)p * sizeof(int)
                              : fold_bytes;
    rounds_t *a = malloc(sizeof *a + tmp_bytes);
    if (!a)
        return rcci_error(RCC_ERR_NO_MEMORY, "allreduce of %zu bytes on %d ranks: buffers", bytes,
                          n);
    memset(a, 0, sizeof *a);
    a->tmp = a->tmp_mem;
    a->slot = slot;
    a->rd_in = a->tmp;
    if (move) {
        a->move = 1;
        a->rd_in = a->tmp + ALIGN16(fold_bytes);
        a->stage = a->rd_in + wide;
        a->cpu = (uint32_t *)(void *)(a->stage + wide);
        a->lead = (int *)(void *)(a->cpu + n);
        for (int q = 0; q < n; q++)
            a->cpu[q] = RCCI_CPU_UNKNOWN;
        memcpy(a->lead, comm->rd_lead, (size_t)p * sizeof *a->lead);
    }
#undef ALIGN16
    a->op = op;
    a->esize = esize;
    a->round = -1;
    if (algo == RCCI_ALLREDUCE_DIRECT) {
        memcpy(a->tmp + (size_t)r * bytes, op->sendbuf, bytes);
        return rcci_p2p_rounds_start(comm, op, "allreduce (direct exchange)", direct_next, a,
                                     2 * (n - 1), exec);
    }
    if (algo == RCCI_ALLREDUCE_STAR) {
        if (!star_root_here && op->sendbuf == op->recvbuf) /* the result lands on it */
            memcpy(a->tmp, op->sendbuf, bytes);
        return rcci_p2p_rounds_start(comm, op, "allreduce (star)", star_next, a,
                                     n - 1 > 2 ? n - 1 : 2, exec);
    }
    if (algo == RCCI_ALLREDUCE_TWOSTEP)
        return rcci_p2p_rounds_start(comm, op, "allreduce (two steps)", twostep_next, a,
                                     2 * (n - 1), exec);
    a->rabenseifner = algo == RCCI_ALLREDUCE_RABENSEIFNER;
    a->nranks = n;
    a->pof2 = p;
    a->levels = levels;
    a->group_lo = group_lo;
    a->group_n = group_n;
    a->leader = move ? comm->rd_lead[group] : group_lo + group_n - 1;
    a->vrank = r == a->leader ? group : -1;
    return rcci_p2p_rounds_start(
        comm, op, a->rabenseifner ? "allreduce (rabenseifner)" : "allreduce (recursive doubling)",
        rounds_next, a, group_n - 1 > 2 ? group_n - 1 : 2, exec);
}
