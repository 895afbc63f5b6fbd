/*
 * ringcc-soak — a long random mix of every operation, every result checked.
 *
 *   ringcc-run -n 4 ringcc-soak [--ops 10000] [--seed S] [--maxbytes 4M]
 *
 * Every rank draws the same sequence of operations from one shared random stream (seeded by
 * --seed): allreduce, reduce_scatter, allgather, broadcast and reduce (random root), alltoall,
 * point-to-point patterns whose sends and receives match up, and barrier; every dtype and op;
 * counts of 0, 1, a few, up to 64 KiB and up to --maxbytes (odd ones among them); in place and
 * out of place (and, for the rooted ones, the argument shapes non-roots may pass). They are
 * issued in steps of three kinds: one blocking call; a batch of 2 to 8 nonblocking calls (a few
 * of them blocking) in flight together, their requests completed in an order of each rank's own
 * (rcc_wait, rcc_test polling, rcc_wait_all); or a group of 2 to 8 calls (blocking and
 * nonblocking forms), sometimes a run of allreduces of one dtype and op that the group fuses.
 *
 * Inputs and the expected results come from tests/mp/testdata.c, as in the multi-process tests:
 * each rank computes its inputs from (operation, rank, element) and checks its results, bit for
 * bit, against a naive reference reduction it computes itself (exact in every dtype, fp16 and
 * bf16 included: from 9 ranks up the float inputs are drawn from a narrower range, so that no
 * sum leaves the integers bfloat16 holds), plus: send buffers unchanged out of place, a
 * reduce's recvbuf untouched on non-roots, nothing written past either end of any buffer.
 *
 * Point-to-point patterns: every rank to rank+k (a shift), pairs of a random matching
 * exchanging messages, or one message. Blocking pairs send from the lower rank first; a shift
 * outside a group is always issued nonblocking. Inside a group, messages may go to the rank
 * itself, ranks may be left out of a pattern, and messages may be empty: a group launches a
 * rank's point-to-point calls after its collectives, wherever they stood.
 *
 * ringcc-soak-stream (tests/meson.build) is the same program on the stand-in GPU of the tests
 * (tests/mp/fakedev.h), run with --streams K: every collective and point-to-point call is then
 * its stream form (rcc_*_stream) on one of K streams of each rank's own choosing, its buffers
 * "device memory" (most calls), host memory, or a send buffer on the device and a receive
 * buffer on the host, decided alike on every rank. A "kernel" queued on the call's stream
 * before it writes the inputs, and one after it copies the buffers back (guards included),
 * with no host synchronisation in between; the streams are synchronised at the end of each
 * step and the copies checked as above. Barriers stay host calls among the stream calls.
 * ringcc-soak-cuda (bench/, built with CUDA) does the same on a real GPU, every rank on GPU 0
 * (the copies in and back are cudaMemcpyAsync through pinned mirrors of the host buffers; a
 * third of the device buffers, each rank drawing its own, come from the stream-ordered pool,
 * which CUDA IPC cannot export, as with PyTorch's expandable segments; exit status 77 where no
 * GPU is usable); tests/cudaemu builds it on the host model of CUDA (soak_cuda_emu).
 *
 * Prints what ran, the bytes moved, the wrong elements (over all ranks) and the time. Exit
 * status 0 when every result was right, 1 on a wrong result or a failed call (after which the
 * rank stops at once: the launcher stops the others), 2 for bad arguments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "ringcc.h"
#include "testdata.h"
#ifdef RCC_VERBSIM
#include "verbsim.h" /* tests/meson.build's soak_verbsim: the verbs transport on verbsim */
#endif
#ifdef RCC_FAKEDEV
#include "fakedev.h" /* tests/meson.build's soak_stream: the stream path on the stand-in GPU */
#define SOAK_DEVICE 1
#elif defined(RCC_SOAK_CUDA)
#include <cuda_runtime_api.h> /* bench/meson.build's ringcc-soak-cuda: on a real GPU */
#define SOAK_DEVICE 1
#endif

#define SOAK_NAME "ringcc-soak"
#define SOAK_MAX_BATCH 8   /* calls in one nonblocking batch or group */
#define SOAK_REPORTS 20    /* wrong results described in full per rank; the rest are counted */
#define SOAK_PROGRESS 1000 /* rank 0 prints a line every this many operations */
#define SOAK_EXIT_USAGE 2
#define SOAK_MAX_STREAMS 4 /* --streams */

enum soak_kind {
    SK_ALLREDUCE,
    SK_REDUCE_SCATTER,
    SK_ALLGATHER,
    SK_BROADCAST,
    SK_REDUCE,
    SK_ALLTOALL,
    SK_SENDRECV,
    SK_BARRIER,
    SK_NKINDS
};
static const char *const soak_kind_name[SK_NKINDS] = {
    "allreduce", "reduce_scatter", "allgather", "broadcast",
    "reduce",    "alltoall",       "sendrecv",  "barrier",
};
/* How often each kind is drawn, out of 100. */
static const unsigned soak_kind_weight[SK_NKINDS] = {20, 12, 12, 12, 12, 10, 14, 8};

enum soak_mode { MODE_BLOCKING, MODE_BATCH, MODE_GROUP, MODE_N };
static const char *const soak_mode_name[MODE_N] = {"blocking", "nonblocking batch", "group"};

enum soak_pattern { P2P_SHIFT, P2P_PAIRS, P2P_ONE, P2P_N };

struct soak_opts {
    long ops;
    unsigned long long seed;
    size_t maxbytes;
    int timeout_s;
    int verbose;
    int streams; /* 0: host calls; else stream calls on this many streams per rank */
};

/* One operation: what was drawn (the same on every rank), then this rank's share. */
typedef struct {
    int kind, mode;
    rcc_datatype_t dt;
    rcc_redop_t op;
    size_t count; /* as the API counts it: per rank (reduce_scatter, allgather), per peer
                   * (alltoall), per message before soak_msg_count (sendrecv) */
    int root, inplace;
    int variant;  /* rooted, out of place: what non-roots pass (see soak_prepare); sendrecv in a
                     group or nonblocking: 1 issues the receive first */
    int blocking; /* issued with the blocking form */
    int pattern, shift;
    unsigned seed; /* the data's: one per operation */
    long number;   /* 0, 1, 2... in the run */

    int to, from; /* sendrecv: this rank's peers, -1 for none */
    size_t scount, rcount;
    char *smem, *rmem; /* guarded buffers (td_galloc), or NULL */
    size_t sbytes, rbytes;
    const void *sendbuf; /* as passed */
    void *recvbuf;
    char *ssnap, *rsnap; /* what smem / rmem must still hold afterwards, or NULL */
    const char *result;  /* rescount elements there must equal want */
    char *want;
    size_t rescount;
    rcc_request_t req[2]; /* sendrecv: [0] the send, [1] the receive */

    /* Stream calls (--streams): the streams of the call and of a sendrecv's receive, and the
     * device copies of smem / rmem (guards included; NULL: the call takes the host buffer),
     * written from them before the call and copied back after it by "kernels" (copy). On
     * CUDA the copies go through pinned mirrors (pin[]): an asynchronous copy to or from
     * pageable memory may wait on the calling thread for the stream's earlier work, which in
     * a group or a batch is a call not launched yet. */
    int stream, rstream;
    char *dsmem, *drmem;
    struct soak_copy {
        void *dst;
        const void *src;
        size_t n; /* 0: none */
        int stream;
        void *host; /* CUDA: the guarded host buffer that src (copy in) or dst (back) mirrors */
    } copy[4]; /* the sendbuf's copy in, the recvbuf's copy in, then their copies back */
    char *pin[2]; /* CUDA: the pinned mirrors of smem and rmem */
    char pool[2]; /* CUDA: dsmem / drmem from the stream-ordered pool (cudaMallocAsync on its
                   * copy's stream), which CUDA IPC cannot export, PyTorch's expandable
                   * segments alike: no output window over cudaipc for it */
} soak_op_t;

static rcc_comm_t soak_comm;
static int soak_rank, soak_nranks;
static int soak_nstreams; /* --streams: 0 outside ringcc-soak-stream and ringcc-soak-cuda */
#ifdef SOAK_DEVICE
static void *soak_streams[SOAK_MAX_STREAMS];
static void soak_dev_free(char *p, int pool, int stream);
#ifndef RCC_FAKEDEV
static void soak_cuda_check(cudaError_t err, const char *call);
#endif
#endif

/* ---------------------------------------------------------------------------------------------
 * Random numbers: splitmix64, one stream shared by all ranks, one of each rank's own
 * ------------------------------------------------------------------------------------------- */

static uint64_t soak_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound); 0 when bound is 0. */
static uint64_t soak_below(uint64_t *s, uint64_t bound) { return bound ? soak_next(s) % bound : 0; }

/* ---------------------------------------------------------------------------------------------
 * Drawing an operation (shared stream: every rank draws the same)
 * ------------------------------------------------------------------------------------------- */

/* A count for a call whose largest buffer holds `blocks` * count elements of `es` bytes, at
 * most maxbytes: 0 or 1 (8% each), 2..64 (30%), or a size drawn log-uniformly from 64 bytes to
 * 64 KiB (42%) or from 64 KiB to maxbytes (12%), odd half of the time. */
static size_t soak_draw_count(uint64_t *rng, size_t es, size_t blocks, size_t maxbytes)
{
    size_t most = maxbytes / es / blocks, c;
    unsigned r = (unsigned)soak_below(rng, 100);
    if (r < 8) {
        c = 0;
    } else if (r < 16) {
        c = 1;
    } else if (r < 46) {
        c = 2 + (size_t)soak_below(rng, 63);
    } else {
        size_t hi = r < 88 ? (size_t)64 << 10 : maxbytes;
        unsigned bits = 6; /* hi >= 2^bits */
        while (bits < 62 && ((size_t)2 << bits) <= hi)
            bits++;
        unsigned lo = r < 88 ? 6 : 16; /* from 64 bytes, or 64 KiB */
        if (lo >= bits)
            lo = bits > 6 ? bits - 1 : 6;
        /* bytes in [2^b, 2^(b+1)) with lo <= b < bits: below hi */
        unsigned b = lo + (unsigned)soak_below(rng, bits > lo ? bits - lo : 1);
        size_t bytes = ((size_t)1 << b) + (size_t)soak_below(rng, (uint64_t)1 << b);
        c = (bytes / es / blocks) | (size_t)soak_below(rng, 2);
    }
    return c > most ? most : c;
}

/* The elements of the message src -> dst of a sendrecv drawn with `count`: messages of one
 * operation differ in size. */
static size_t soak_msg_count(size_t count, int src, int dst)
{
    return src == dst ? count : count >> ((unsigned)(src + 2 * dst) % 3);
}

/* The generator seed of the data src sends to dst in operation `seed` (alltoall blocks,
 * messages). */
static unsigned soak_msg_seed(unsigned seed, int src, int dst)
{
    return seed * 4099u + (unsigned)src * 64u + (unsigned)dst;
}

/* This rank's peers in a point-to-point operation, from the shared stream. */
static void soak_draw_p2p(soak_op_t *o, uint64_t *rng, int in_group)
{
    int n = soak_nranks, me = soak_rank;
    o->pattern = (int)soak_below(rng, P2P_N);
    o->to = o->from = -1;
    switch (o->pattern) {
    case P2P_SHIFT: /* to rank + k, from rank - k; k = 0 (to itself) in groups only */
        o->shift = in_group ? (int)soak_below(rng, (uint64_t)n) : 1 + (int)soak_below(rng, n - 1);
        o->to = (me + o->shift) % n;
        o->from = (me - o->shift + n) % n;
        if (!in_group)
            o->blocking = 0; /* blocking sends around a ring would wait for each other */
        break;
    case P2P_PAIRS: { /* a random matching; each pair exchanges messages */
        int perm[256], at = -1;
        for (int i = 0; i < n; i++)
            perm[i] = i;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)soak_below(rng, (uint64_t)i + 1), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        for (int i = 0; i < n; i++)
            if (perm[i] == me)
                at = i;
        int partner = (at ^ 1) < n ? perm[at ^ 1] : (in_group ? me : -1);
        o->to = o->from = partner;
        break;
    }
    default: { /* one message, src -> dst (the same rank in groups only) */
        int src = (int)soak_below(rng, (uint64_t)n);
        int dst = in_group ? (int)soak_below(rng, (uint64_t)n)
                           : (src + 1 + (int)soak_below(rng, (uint64_t)n - 1)) % n;
        if (me == src)
            o->to = dst;
        if (me == dst)
            o->from = src;
        break;
    }
    }
    o->scount = o->to >= 0 ? soak_msg_count(o->count, me, o->to) : 0;
    o->rcount = o->from >= 0 ? soak_msg_count(o->count, o->from, me) : 0;
}

/* Draws operation `number` of a step in `mode`; with fuse, an allreduce of fuse_dt, fuse_op. */
static void soak_draw(soak_op_t *o, uint64_t *rng, const struct soak_opts *opt, int mode,
                      long number, int fuse, rcc_datatype_t fuse_dt, rcc_redop_t fuse_op)
{
    int n = soak_nranks;
    memset(o, 0, sizeof *o);
    o->mode = mode;
    o->number = number;
    o->seed = (unsigned)(opt->seed * 100003ull + (unsigned long long)number);
    unsigned w = (unsigned)soak_below(rng, 100);
    o->kind = 0;
    while (w >= soak_kind_weight[o->kind])
        w -= soak_kind_weight[o->kind++];
    /* One rank has no one to talk to outside a group. */
    if (o->kind == SK_SENDRECV && n == 1 && mode != MODE_GROUP)
        o->kind = SK_ALLREDUCE;
    o->dt = (rcc_datatype_t)soak_below(rng, RCC_NUM_DATATYPES);
    o->op = (rcc_redop_t)soak_below(rng, RCC_NUM_OPS);
    if (fuse) {
        o->kind = SK_ALLREDUCE;
        o->dt = fuse_dt;
        o->op = fuse_op;
    }
    int blocks = o->kind == SK_REDUCE_SCATTER || o->kind == SK_ALLGATHER || o->kind == SK_ALLTOALL;
    o->count =
        soak_draw_count(rng, rcc_datatype_size(o->dt), blocks ? (size_t)n : 1, opt->maxbytes);
    o->root = (int)soak_below(rng, (uint64_t)n);
    o->inplace = soak_below(rng, 3) == 0 && o->kind != SK_ALLTOALL && o->kind != SK_SENDRECV;
    o->variant = (int)soak_below(rng, 2);
    o->blocking = mode == MODE_BLOCKING || soak_below(rng, 4) == 0;
    if (o->kind == SK_SENDRECV)
        soak_draw_p2p(o, rng, mode == MODE_GROUP);
}

static const char *soak_text(char *s, size_t len, const soak_op_t *o)
{
    char what[200] = "";
    int n = 0;
    if (o->kind == SK_BARRIER)
        n = snprintf(what, sizeof what, "barrier");
    else
        n = snprintf(what, sizeof what, "%s of %zu %s", soak_kind_name[o->kind], o->count,
                     rcc_datatype_name(o->dt));
    if (o->kind == SK_ALLREDUCE || o->kind == SK_REDUCE_SCATTER || o->kind == SK_REDUCE)
        n += snprintf(what + n, sizeof what - (size_t)n, " %s", rcc_redop_name(o->op));
    if (o->inplace)
        n += snprintf(what + n, sizeof what - (size_t)n, ", in place");
    if (o->kind == SK_BROADCAST || o->kind == SK_REDUCE) {
        /* The non-roots' buffer that may be NULL: see soak_prepare. */
        int null = o->kind == SK_BROADCAST ? o->variant == 1 : o->variant == 0;
        n += snprintf(what + n, sizeof what - (size_t)n, ", root %d", o->root);
        if (!o->inplace)
            n += snprintf(what + n, sizeof what - (size_t)n, ", non-roots pass %s %s",
                          null ? "NULL" : "a", o->kind == SK_BROADCAST ? "sendbuf" : "recvbuf");
    }
    if (o->kind == SK_SENDRECV) {
        if (o->pattern == P2P_SHIFT)
            n += snprintf(what + n, sizeof what - (size_t)n, ", shift by %d", o->shift);
        else
            n += snprintf(what + n, sizeof what - (size_t)n, ", %s",
                          o->pattern == P2P_PAIRS ? "pairs" : "one message");
        if (o->to < 0 && o->from < 0)
            snprintf(what + n, sizeof what - (size_t)n, ": this rank takes no part");
        else
            snprintf(what + n, sizeof what - (size_t)n,
                     ": this rank sends %zu to %d, receives %zu from %d (-1: none)", o->scount,
                     o->to, o->rcount, o->from);
    }
    char form[80];
    if (soak_nstreams && o->kind != SK_BARRIER)
        snprintf(form, sizeof form, "stream form on stream %d%s, buffers %s/%s", o->stream,
                 o->rstream != o->stream ? " (receive on another)" : "",
                 o->dsmem ? "device" : "host", o->drmem ? "device" : "host");
    else
        snprintf(form, sizeof form, "%s form", o->blocking ? "blocking" : "nonblocking");
    snprintf(s, len, "rank %d of %d: operation #%ld (%s, %s): %s", soak_rank, soak_nranks,
             o->number, soak_mode_name[o->mode], form, what);
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * This rank's buffers and expected results
 * ------------------------------------------------------------------------------------------- */

/* A guarded input buffer of `count` elements, filled with this rank's data for `seed`. */
static char *soak_input(soak_op_t *o, size_t count, unsigned seed, rcc_redop_t op)
{
    o->sbytes = count * rcc_datatype_size(o->dt);
    o->smem = td_galloc(o->sbytes);
    td_fill(o->smem, 0, count, seed, soak_rank, o->dt, op);
    o->sendbuf = o->smem;
    return o->smem;
}

/* A guarded output buffer of `count` elements, all TD_UNWRITTEN. */
static char *soak_output(soak_op_t *o, size_t count)
{
    o->rbytes = count * rcc_datatype_size(o->dt);
    o->rmem = td_galloc(o->rbytes);
    memset(o->rmem, TD_UNWRITTEN, o->rbytes);
    o->recvbuf = o->rmem;
    return o->rmem;
}

/* The result to check: `count` elements at `at`, expected in want (allocated here). */
static char *soak_expect(soak_op_t *o, const char *at, size_t count)
{
    o->result = at;
    o->rescount = count;
    o->want = malloc(count * rcc_datatype_size(o->dt) + 1);
    if (!o->want) {
        fprintf(stderr, "%s: out of memory\n", SOAK_NAME);
        exit(1);
    }
    return o->want;
}

static void soak_prepare(soak_op_t *o)
{
    int n = soak_nranks, me = soak_rank, root = me == o->root;
    size_t es = rcc_datatype_size(o->dt), c = o->count, bytes = c * es;
    switch (o->kind) {
    case SK_ALLREDUCE:
    case SK_REDUCE_SCATTER: {
        int ar = o->kind == SK_ALLREDUCE;
        soak_input(o, ar ? c : (size_t)n * c, o->seed, o->op);
        if (o->inplace) {
            o->recvbuf = ar ? o->smem : o->smem + (size_t)me * bytes;
        } else {
            o->ssnap = td_dup_bytes(o->smem, o->sbytes);
            soak_output(o, c);
        }
        td_reference(soak_expect(o, o->recvbuf, c), ar ? 0 : (size_t)me * c, c, NULL, n, o->seed,
                     o->dt, o->op);
        break;
    }
    case SK_ALLGATHER: {
        soak_output(o, (size_t)n * c);
        if (o->inplace) {
            td_fill(o->rmem + (size_t)me * bytes, 0, c, o->seed, me, o->dt, RCC_SUM);
            o->sendbuf = o->rmem + (size_t)me * bytes;
        } else {
            soak_input(o, c, o->seed, RCC_SUM);
            o->ssnap = td_dup_bytes(o->smem, o->sbytes);
        }
        char *want = soak_expect(o, o->rmem, (size_t)n * c);
        for (int r = 0; r < n; r++)
            td_fill(want + (size_t)r * bytes, 0, c, o->seed, r, o->dt, RCC_SUM);
        break;
    }
    case SK_BROADCAST:
        /* Out of place, non-roots pass a sendbuf that must stay unread and unchanged (variant
         * 0), or NULL (1). */
        soak_output(o, c);
        if (o->inplace) {
            if (root)
                td_fill(o->rmem, 0, c, o->seed, me, o->dt, RCC_SUM);
            o->sendbuf = o->rmem;
        } else if (root || o->variant == 0) {
            soak_input(o, c, root ? o->seed : o->seed + 77777u, RCC_SUM);
            o->ssnap = td_dup_bytes(o->smem, o->sbytes);
        }
        td_fill(soak_expect(o, o->rmem, c), 0, c, o->seed, o->root, o->dt, RCC_SUM);
        break;
    case SK_REDUCE:
        /* Out of place, non-roots pass a NULL recvbuf (variant 0) or one that must stay
         * untouched (1); in place, their buffer is not written. */
        soak_input(o, c, o->seed, o->op);
        if (o->inplace) {
            o->recvbuf = o->smem;
            if (!root)
                o->ssnap = td_dup_bytes(o->smem, o->sbytes);
        } else {
            o->ssnap = td_dup_bytes(o->smem, o->sbytes);
            if (root || o->variant == 1)
                soak_output(o, c);
            if (!root && o->rmem)
                o->rsnap = td_dup_bytes(o->rmem, o->rbytes);
        }
        if (root)
            td_reference(soak_expect(o, o->recvbuf, c), 0, c, NULL, n, o->seed, o->dt, o->op);
        break;
    case SK_ALLTOALL: {
        /* Block p of this rank's input goes to rank p; block q of the output comes from q. */
        soak_input(o, (size_t)n * c, o->seed, RCC_SUM);
        soak_output(o, (size_t)n * c);
        char *want = soak_expect(o, o->rmem, (size_t)n * c);
        for (int p = 0; p < n; p++) {
            td_fill(o->smem + (size_t)p * bytes, 0, c, soak_msg_seed(o->seed, me, p), me, o->dt,
                    RCC_SUM);
            td_fill(want + (size_t)p * bytes, 0, c, soak_msg_seed(o->seed, p, me), p, o->dt,
                    RCC_SUM);
        }
        o->ssnap = td_dup_bytes(o->smem, o->sbytes);
        break;
    }
    case SK_SENDRECV:
        if (o->to >= 0) {
            soak_input(o, o->scount, soak_msg_seed(o->seed, me, o->to), RCC_SUM);
            o->ssnap = td_dup_bytes(o->smem, o->sbytes);
        }
        if (o->from >= 0) {
            soak_output(o, o->rcount);
            td_fill(soak_expect(o, o->rmem, o->rcount), 0, o->rcount,
                    soak_msg_seed(o->seed, o->from, me), o->from, o->dt, RCC_SUM);
        }
        break;
    default: break; /* barrier */
    }
}

static void soak_free(soak_op_t *o)
{
#ifdef SOAK_DEVICE
    soak_dev_free(o->dsmem, o->pool[0], o->copy[0].stream);
    soak_dev_free(o->drmem, o->pool[1], o->copy[1].stream);
    o->dsmem = o->drmem = NULL;
#ifndef RCC_FAKEDEV
    for (int k = 0; k < 2; k++)
        if (o->pin[k])
            soak_cuda_check(cudaFreeHost(o->pin[k]), "cudaFreeHost");
    o->pin[0] = o->pin[1] = NULL;
#endif
#endif
    td_gfree(o->smem), td_gfree(o->rmem);
    free(o->ssnap), free(o->rsnap), free(o->want);
    o->smem = o->rmem = o->ssnap = o->rsnap = o->want = NULL;
}

/* The bytes this rank's results hold (what the operation delivered to it). */
static uint64_t soak_bytes_in(const soak_op_t *o)
{
    return (uint64_t)o->rescount * rcc_datatype_size(o->dt);
}

/* Wrong elements of a completed operation: its result, a buffer that had to stay unchanged,
 * and one per buffer written past either end. The first SOAK_REPORTS are described. */
static uint64_t soak_check(const soak_op_t *o, int *reports_left)
{
    size_t es = rcc_datatype_size(o->dt);
    const struct {
        const char *what, *got, *want;
        size_t count;
    } parts[] = {
        {"result", o->result, o->want, o->rescount},
        {"sendbuf (must stay unchanged)", o->smem, o->ssnap, o->ssnap ? o->sbytes / es : 0},
        {"recvbuf (must stay untouched)", o->rmem, o->rsnap, o->rsnap ? o->rbytes / es : 0},
    };
    char desc[400], d[300];
    uint64_t wrong = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (parts[i].count == 0)
            continue;
        size_t w = td_count_differing(parts[i].got, parts[i].want, parts[i].count, o->dt);
        wrong += w;
        if (w && (*reports_left)-- > 0) {
            snprintf(desc, sizeof desc, "%s: %s", soak_text(d, sizeof d, o), parts[i].what);
            td_compare(desc, parts[i].got, parts[i].want, parts[i].count, o->dt);
        }
    }
    if ((o->smem && !td_guards_intact(o->smem, o->sbytes)) ||
        (o->rmem && !td_guards_intact(o->rmem, o->rbytes))) {
        wrong++;
        if ((*reports_left)-- > 0)
            fprintf(stderr, "%s: wrote outside its buffers\n", soak_text(d, sizeof d, o));
    }
    return wrong;
}

/* ---------------------------------------------------------------------------------------------
 * Issuing and completing
 * ------------------------------------------------------------------------------------------- */

__attribute__((noreturn)) static void soak_fail(const soak_op_t *o, const char *call,
                                                rcc_result_t res, const char *detail);

#ifdef SOAK_DEVICE
/* ---- stream calls on a GPU (--streams): the stand-in GPU's or CUDA's ---- */

#ifdef RCC_FAKEDEV
static void soak_kern_copy(void *arg)
{
    struct soak_copy *c = arg;
    memcpy(c->dst, c->src, c->n);
}
#else
/* Ends the run on a CUDA error, naming the call. */
static void soak_cuda_check(cudaError_t err, const char *call)
{
    if (err != cudaSuccess)
        soak_fail(NULL, call, RCC_ERR_CUDA, cudaGetErrorString(err));
}
#endif

/* pool (CUDA): from the stream-ordered pool, for work queued on `stream` from now on. */
static char *soak_dev_malloc(size_t bytes, int pool, int stream)
{
#ifdef RCC_FAKEDEV
    (void)pool, (void)stream;
    return fakedev_malloc(bytes);
#else
    void *p = NULL;
    if (pool)
        soak_cuda_check(cudaMallocAsync(&p, bytes, soak_streams[stream]), "cudaMallocAsync");
    else
        soak_cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
#endif
}

/* After the streams that used it were waited for. */
static void soak_dev_free(char *p, int pool, int stream)
{
    if (!p)
        return;
#ifdef RCC_FAKEDEV
    (void)pool, (void)stream;
    fakedev_free(p);
#else
    if (pool)
        soak_cuda_check(cudaFreeAsync(p, soak_streams[stream]), "cudaFreeAsync");
    else
        soak_cuda_check(cudaFree(p), "cudaFree");
#endif
}

static void *soak_dev_stream_create(void)
{
#ifdef RCC_FAKEDEV
    return fakedev_stream_create();
#else
    cudaStream_t s;
    soak_cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    return s;
#endif
}

static void soak_dev_stream_destroy(void *s)
{
#ifdef RCC_FAKEDEV
    fakedev_stream_destroy(s);
#else
    cudaStreamDestroy(s);
#endif
}

/* Queues copy c (`in`: a copy in) on stream s, in stream order: a kernel of the stand-in GPU,
 * or cudaMemcpyAsync from or to the pinned mirror (a copy in fills the mirror first). */
static void soak_dev_copy(void *s, struct soak_copy *c, int in)
{
#ifdef RCC_FAKEDEV
    (void)in;
    fakedev_launch(s, soak_kern_copy, c);
#else
    if (in) /* into the mirror: no work queued before reads it */
        memcpy((void *)c->src, c->host, c->n);
    soak_cuda_check(cudaMemcpyAsync(c->dst, c->src, c->n, cudaMemcpyDefault, s), "cudaMemcpyAsync");
#endif
}

/* Waits until everything queued on s has run; 0, or -1 past timeout_s. */
static int soak_dev_stream_sync(void *s, double timeout_s)
{
#ifdef RCC_FAKEDEV
    return fakedev_stream_sync(s, timeout_s);
#else
    double deadline = td_now_s() + timeout_s;
    cudaError_t err;
    while ((err = cudaStreamQuery(s)) == cudaErrorNotReady) {
        if (td_now_s() > deadline)
            return -1;
        nanosleep(&(struct timespec){.tv_nsec = 200 * 1000}, NULL);
    }
    soak_cuda_check(err, "cudaStreamQuery");
    return 0;
#endif
}

/* A device copy of the guarded host buffer `host` (guards too): copy[in] fills it on `stream`
 * before the call, copy[in + 2] copies it back after (on CUDA through a pinned mirror). */
static char *soak_dev_buffer(soak_op_t *o, char *host, size_t bytes, int in, int stream,
                             uint64_t *own)
{
    size_t n = bytes + 2 * TD_GUARD;
#ifdef RCC_FAKEDEV
    (void)own; /* no pool: the stand-in GPU's draws stay as they were */
#else
    o->pool[in] = soak_below(own, 3) == 0;
#endif
    char *d = soak_dev_malloc(n, o->pool[in], stream), *g = host - TD_GUARD;
#ifdef RCC_FAKEDEV
    o->copy[in] = (struct soak_copy){d, g, n, stream, NULL};
    o->copy[in + 2] = (struct soak_copy){g, d, n, stream, NULL};
#else
    soak_cuda_check(cudaMallocHost((void **)&o->pin[in], n), "cudaMallocHost");
    o->copy[in] = (struct soak_copy){d, o->pin[in], n, stream, g};
    o->copy[in + 2] = (struct soak_copy){o->pin[in], d, n, stream, g};
#endif
    return d;
}

/* Where the call's buffers are, streams included: after soak_prepare, which made the host
 * buffers. Buffer kinds from the shared random stream (every rank alike: they are part of what
 * ranks must agree on), streams from this rank's own. */
static void soak_dev_prepare(soak_op_t *o, uint64_t *shared, uint64_t *own)
{
    /* Under 70: both on the device; under 85: the sendbuf only; else both on the host. */
    unsigned where = (unsigned)soak_below(shared, 100);
    o->stream = o->rstream = (int)soak_below(own, (uint64_t)soak_nstreams);
    /* A shift outside a group receives on another stream, for variety: what keeps a ring of
     * them from deadlocking is the order of the two calls (soak_stream_issue), as streams may
     * share a hardware queue. */
    if (o->kind == SK_SENDRECV && o->pattern == P2P_SHIFT && o->mode != MODE_GROUP)
        o->rstream =
            (o->stream + 1 + (int)soak_below(own, (uint64_t)soak_nstreams - 1)) % soak_nstreams;
    int rs = o->kind == SK_SENDRECV ? o->rstream : o->stream;
    /* Not mixed for a rooted collective: a rank decides alone whether its part goes chunk by
     * chunk on the GPU, so the root's two buffers must be of one kind with its peers' (the
     * contract in ringcc.h). */
    if (where >= 70 && where < 85 && (o->kind == SK_BROADCAST || o->kind == SK_REDUCE))
        where = 0;
    if (where < 85 && o->smem)
        o->dsmem = soak_dev_buffer(o, o->smem, o->sbytes, 0, o->stream, own);
    if (where < 70 && o->rmem)
        o->drmem = soak_dev_buffer(o, o->rmem, o->rbytes, 1, rs, own);
}

/* The device address of a host address inside smem or rmem where those have device copies. */
static void *soak_dev_ptr(const soak_op_t *o, const void *p)
{
    const char *c = p;
    if (c && o->dsmem && c >= o->smem && c <= o->smem + o->sbytes)
        return o->dsmem + TD_GUARD + (c - o->smem);
    if (c && o->drmem && c >= o->rmem && c <= o->rmem + o->rbytes)
        return o->drmem + TD_GUARD + (c - o->rmem);
    return (void *)c;
}

/* Queues copy[first] and copy[first + 1] on their streams. */
static void soak_dev_copies(soak_op_t *o, int first)
{
    for (int i = first; i < first + 2; i++)
        if (o->copy[i].n)
            soak_dev_copy(soak_streams[o->copy[i].stream], &o->copy[i], i < 2);
}

/* The stream form of the call (barriers stay host calls): inputs copied in on the stream
 * first; the copies back are queued by the caller once the step's calls are launched (a group's
 * at rcc_group_end). 1 when issued here. */
static int soak_stream_issue(soak_op_t *o, int in_group)
{
    rcc_comm_t comm = soak_comm;
    void *st = soak_streams[o->stream], *rst = soak_streams[o->rstream];
    const void *s = soak_dev_ptr(o, o->sendbuf);
    void *r = soak_dev_ptr(o, o->recvbuf);
    size_t c = o->count;
    rcc_result_t res = RCC_SUCCESS;
    if (o->kind == SK_BARRIER)
        return 0;
    soak_dev_copies(o, 0);
    switch (o->kind) {
    case SK_ALLREDUCE: res = rcc_allreduce_stream(s, r, c, o->dt, o->op, comm, st); break;
    case SK_REDUCE_SCATTER: res = rcc_reduce_scatter_stream(s, r, c, o->dt, o->op, comm, st); break;
    case SK_ALLGATHER: res = rcc_allgather_stream(s, r, c, o->dt, comm, st); break;
    case SK_BROADCAST: res = rcc_broadcast_stream(s, r, c, o->dt, o->root, comm, st); break;
    case SK_REDUCE: res = rcc_reduce_stream(s, r, c, o->dt, o->op, o->root, comm, st); break;
    case SK_ALLTOALL: res = rcc_alltoall_stream(s, r, c, o->dt, comm, st); break;
    default: { /* sendrecv: outside a group, the lower rank of a pair sends first */
        /* Whatever the streams: each call's wait is queued at the call, and streams may
         * share one hardware queue that runs their work in the order it was queued
         * (CUDA_DEVICE_MAX_CONNECTIONS=1, FAKEDEV_QUEUES=1), so a receive queued first holds
         * up this rank's send behind it also when the send is on another stream: around a
         * ring, every rank would wait for the send its peer queued behind its receive. */
        int recv_first = !in_group ? o->to >= 0 && o->to < soak_rank : o->variant;
        for (int step = 0; step < 2 && res == RCC_SUCCESS; step++) {
            int send = (step == 0) != recv_first;
            if (send && o->to >= 0)
                res = rcc_send_stream(s, o->scount, o->dt, o->to, comm, st);
            else if (!send && o->from >= 0)
                res = rcc_recv_stream(r, o->rcount, o->dt, o->from, comm, rst);
        }
        break;
    }
    }
    if (res != RCC_SUCCESS)
        soak_fail(o, "the stream call", res, rcc_last_error(comm));
    return 1;
}

/* After the step's calls: the copies back queued, then every stream waited for (bounded). */
static void soak_stream_complete(soak_op_t *ops, int nops, const struct soak_opts *opt)
{
    for (int i = 0; i < nops; i++)
        soak_dev_copies(&ops[i], 2);
    for (int s = 0; s < soak_nstreams; s++)
        if (soak_dev_stream_sync(soak_streams[s], 2.0 * opt->timeout_s))
            soak_fail(NULL, "waiting for a stream", RCC_ERR_TIMEOUT,
                      "its work did not end within twice the communicator's timeout");
#ifndef RCC_FAKEDEV
    for (int i = 0; i < nops; i++) /* out of the pinned mirrors */
        for (int k = 2; k < 4; k++)
            if (ops[i].copy[k].n)
                memcpy(ops[i].copy[k].host, ops[i].copy[k].dst, ops[i].copy[k].n);
#endif
}
#endif

__attribute__((noreturn)) static void soak_fail(const soak_op_t *o, const char *call,
                                                rcc_result_t res, const char *detail)
{
    char d[300];
    fflush(stdout);
    fprintf(stderr, "%s: %s: %s failed: %s: %s\n", SOAK_NAME, o ? soak_text(d, sizeof d, o) : "",
            call, rcc_result_name(res), detail);
    exit(1);
}

static void soak_p2p_issue(soak_op_t *o, int in_group)
{
    rcc_comm_t comm = soak_comm;
    /* Blocking, outside a group: between a pair the lower rank sends first, so neither waits
     * for the other (one message: either order). Otherwise as drawn. */
    int recv_first = o->blocking && !in_group ? o->to >= 0 && o->to < soak_rank : o->variant;
    for (int step = 0; step < 2; step++) {
        rcc_result_t res = RCC_SUCCESS;
        int send = (step == 0) != recv_first;
        if (send && o->to >= 0)
            res = o->blocking ? rcc_send(o->sendbuf, o->scount, o->dt, o->to, comm)
                              : rcc_isend(o->sendbuf, o->scount, o->dt, o->to, comm, &o->req[0]);
        else if (!send && o->from >= 0)
            res = o->blocking ? rcc_recv(o->recvbuf, o->rcount, o->dt, o->from, comm)
                              : rcc_irecv(o->recvbuf, o->rcount, o->dt, o->from, comm, &o->req[1]);
        if (res != RCC_SUCCESS)
            soak_fail(o, send ? "send" : "receive", res, rcc_last_error(comm));
    }
}

static void soak_issue(soak_op_t *o, int in_group)
{
#ifdef SOAK_DEVICE
    if (soak_nstreams && soak_stream_issue(o, in_group))
        return;
#endif
    rcc_comm_t comm = soak_comm;
    rcc_request_t *rq = o->blocking ? NULL : &o->req[0];
    const void *s = o->sendbuf;
    void *r = o->recvbuf;
    size_t c = o->count;
    rcc_result_t res;
    switch (o->kind) {
    case SK_ALLREDUCE:
        res = rq ? rcc_iallreduce(s, r, c, o->dt, o->op, comm, rq)
                 : rcc_allreduce(s, r, c, o->dt, o->op, comm);
        break;
    case SK_REDUCE_SCATTER:
        res = rq ? rcc_ireduce_scatter(s, r, c, o->dt, o->op, comm, rq)
                 : rcc_reduce_scatter(s, r, c, o->dt, o->op, comm);
        break;
    case SK_ALLGATHER:
        res = rq ? rcc_iallgather(s, r, c, o->dt, comm, rq) : rcc_allgather(s, r, c, o->dt, comm);
        break;
    case SK_BROADCAST:
        res = rq ? rcc_ibroadcast(s, r, c, o->dt, o->root, comm, rq)
                 : rcc_broadcast(s, r, c, o->dt, o->root, comm);
        break;
    case SK_REDUCE:
        res = rq ? rcc_ireduce(s, r, c, o->dt, o->op, o->root, comm, rq)
                 : rcc_reduce(s, r, c, o->dt, o->op, o->root, comm);
        break;
    case SK_ALLTOALL:
        res = rq ? rcc_ialltoall(s, r, c, o->dt, comm, rq) : rcc_alltoall(s, r, c, o->dt, comm);
        break;
    case SK_SENDRECV: soak_p2p_issue(o, in_group); return;
    default: res = rq ? rcc_ibarrier(comm, rq) : rcc_barrier(comm); break;
    }
    if (res != RCC_SUCCESS)
        soak_fail(o, "the call", res, rcc_last_error(comm));
}

/* Completes every request of ops[0..nops) in an order of this rank's own: a random share with
 * rcc_wait one by one, a share polled with rcc_test, the rest with one rcc_wait_all. */
static void soak_complete(soak_op_t *ops, int nops, uint64_t *own, const struct soak_opts *opt)
{
    rcc_request_t *reqs[2 * SOAK_MAX_BATCH];
    const soak_op_t *owner[2 * SOAK_MAX_BATCH];
    int nreq = 0;
    for (int i = 0; i < nops; i++)
        for (int k = 0; k < 2; k++)
            if (ops[i].req[k]) {
                owner[nreq] = &ops[i];
                reqs[nreq++] = &ops[i].req[k];
            }
    for (int i = nreq - 1; i > 0; i--) {
        int j = (int)soak_below(own, (uint64_t)i + 1);
        rcc_request_t *t = reqs[i];
        const soak_op_t *u = owner[i];
        reqs[i] = reqs[j], owner[i] = owner[j];
        reqs[j] = t, owner[j] = u;
    }
    int nwait = (int)soak_below(own, (uint64_t)nreq + 1);
    int ntest = (int)soak_below(own, (uint64_t)(nreq - nwait) + 1);
    for (int i = 0; i < nwait; i++) {
        rcc_result_t res = rcc_wait(reqs[i]);
        if (res != RCC_SUCCESS)
            soak_fail(owner[i], "rcc_wait", res, rcc_last_error(NULL));
    }
    /* Polled: bounded by twice the communicator's timeout, which fails the operation first. */
    double deadline = td_now_s() + 2.0 * opt->timeout_s;
    for (int pending = ntest; pending > 0;) {
        pending = 0;
        for (int i = nwait; i < nwait + ntest; i++) {
            int done = 0;
            if (!*reqs[i])
                continue;
            rcc_result_t res = rcc_test(reqs[i], &done);
            if (res != RCC_SUCCESS)
                soak_fail(owner[i], "rcc_test", res, rcc_last_error(NULL));
            pending += !done;
        }
        if (pending && td_now_s() > deadline)
            soak_fail(NULL, "rcc_test", RCC_ERR_TIMEOUT, "requests still pending at the deadline");
        if (pending)
            sched_yield();
    }
    rcc_request_t rest[2 * SOAK_MAX_BATCH];
    int nrest = 0;
    for (int i = nwait + ntest; i < nreq; i++)
        rest[nrest++] = *reqs[i];
    rcc_result_t res = rcc_wait_all(nrest, rest);
    if (res != RCC_SUCCESS)
        soak_fail(NULL, "rcc_wait_all", res, rcc_last_error(NULL));
    for (int i = nwait + ntest; i < nreq; i++)
        *reqs[i] = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Arguments
 * ------------------------------------------------------------------------------------------- */

__attribute__((format(printf, 1, 2), noreturn)) static void soak_usage_error(const char *fmt, ...)
{
    const char *r = getenv("RCC_RANK");
    if (!r || strcmp(r, "0") == 0) { /* one rank speaks for all: they parse the same */
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: ", SOAK_NAME);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\nTry '%s --help' for more information.\n", SOAK_NAME);
        va_end(ap);
    } else {
        nanosleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL); /* let rank 0 say */
    }
    exit(SOAK_EXIT_USAGE);
}

static unsigned long long soak_parse_number(const char *opt, const char *s, int suffixes,
                                            unsigned long long lo, unsigned long long hi)
{
    char *end = (char *)s;
    unsigned long long v = 0;
    unsigned shift = 0;
    errno = 0;
    if (isdigit((unsigned char)*s))
        v = strtoull(s, &end, 10);
    const char *units = "KMG", *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (suffixes && end != s && u) {
        shift = 10 * (unsigned)(u - units + 1);
        end++;
    }
    if (errno || end == s || *end || v > (hi >> shift) || (v << shift) < lo)
        soak_usage_error("%s: expected %s from %llu to %llu, not '%s'", opt,
                         suffixes ? "a size (K, M, G suffixes allowed)" : "an integer", lo, hi, s);
    return v << shift;
}

static void soak_help(void)
{
    const char *r = getenv("RCC_RANK");
    if (r && strcmp(r, "0") != 0)
        return;
    printf("Usage: %s [options]   (one process per rank, e.g. under ringcc-run -n N)\n"
           "Run a long random mix of every collective, point-to-point patterns and barriers,\n"
           "blocking, nonblocking and in groups, and check every result exactly.\n"
           "\n"
           "  -n, --ops N          operations to run (default 10000)\n"
           "  -s, --seed S         seed of the sequence, the same on every rank (default 1)\n"
           "  -e, --maxbytes SIZE  largest buffer of one call, K/M/G suffixes (default 4M)\n"
           "  -t, --timeout SECS   the communicator's timeout: a call that makes no progress\n"
           "                       for that long fails (default 60)\n"
           "  -S, --streams K      (ringcc-soak-stream and ringcc-soak-cuda) every call in its\n"
           "                       stream form on one of K streams (2 to 4) of the GPU (the\n"
           "                       stand-in one, or GPU 0), buffers on it, on the host, or mixed\n"
           "  -v, --verbose        print every operation on every rank before it is issued\n"
           "  -h, --help           show this help\n"
           "\n"
           "Prints the operations run (by kind and by how they were issued), the bytes\n"
           "moved (what the results delivered, summed over ranks), the wrong elements over\n"
           "all ranks (results, send buffers that had to stay unchanged, writes past a\n"
           "buffer) and the time. Exit status: 0 if everything was right, 1 on a wrong\n"
           "result or a failed call, 2 for bad arguments.\n",
           SOAK_NAME);
}

static void soak_parse_args(int argc, char **argv, struct soak_opts *o)
{
    static const struct option longopts[] = {
        {"ops", required_argument, NULL, 'n'},      {"seed", required_argument, NULL, 's'},
        {"maxbytes", required_argument, NULL, 'e'}, {"timeout", required_argument, NULL, 't'},
        {"verbose", no_argument, NULL, 'v'},        {"streams", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    *o = (struct soak_opts){.ops = 10000, .seed = 1, .maxbytes = 4u << 20, .timeout_s = 60};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":n:s:e:t:S:vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': o->ops = (long)soak_parse_number("--ops", optarg, 0, 0, 1000000000); break;
        case 's': o->seed = soak_parse_number("--seed", optarg, 0, 0, UINT64_MAX); break;
        case 'e':
            o->maxbytes = (size_t)soak_parse_number("--maxbytes", optarg, 1, 8, 1ull << 32);
            break;
        case 't': o->timeout_s = (int)soak_parse_number("--timeout", optarg, 0, 1, 86400); break;
        case 'v': o->verbose = 1; break;
        case 'S':
#ifdef SOAK_DEVICE
            o->streams = (int)soak_parse_number("--streams", optarg, 0, 2, SOAK_MAX_STREAMS);
            break;
#else
            soak_usage_error("--streams: this build has no GPU (ringcc-soak-stream and "
                             "ringcc-soak-cuda have)");
#endif
        case 'h': soak_help(); exit(0);
        case ':': soak_usage_error("%s needs a value", argv[optind - 1]);
        default: soak_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        soak_usage_error("unexpected argument '%s'", argv[optind]);
}

/* ---------------------------------------------------------------------------------------------
 * The run
 * ------------------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    struct soak_opts opt;
    soak_parse_args(argc, argv, &opt);
#ifdef RCC_FAKEDEV
    fakedev_install(); /* before the first stream call; the library finds the stand-in GPU */
#elif defined(SOAK_DEVICE)
    int ndev = 0;
    if (opt.streams && (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)) {
        printf("SKIP: %s: no usable CUDA device\n", SOAK_NAME);
        return 77;
    }
    if (opt.streams) /* every rank on GPU 0, before the communicator picks its device */
        soak_cuda_check(cudaSetDevice(0), "cudaSetDevice");
#endif
#ifdef SOAK_DEVICE
    soak_nstreams = opt.streams;
    for (int s = 0; s < soak_nstreams; s++)
        soak_streams[s] = soak_dev_stream_create();
#endif
    rcc_config_t config = RCC_CONFIG_INITIALIZER;
    config.timeout_ms = opt.timeout_s * 1000;
    rcc_result_t res = rcc_comm_init_env(&soak_comm, &config);
    if (res != RCC_SUCCESS)
        soak_fail(NULL, "rcc_comm_init_env", res, rcc_last_error(NULL));
    rcc_comm_rank(soak_comm, &soak_rank);
    rcc_comm_size(soak_comm, &soak_nranks);
    if (soak_nranks > 256)
        soak_usage_error("at most 256 ranks, not %d", soak_nranks);
    td_set_nranks(soak_nranks); /* inputs whose sums stay exact in bfloat16 */
    if (soak_rank == 0) {
        printf("# %s: %d ranks, %ld operations, seed %llu, buffers up to %zu bytes, "
               "timeout %d s",
               SOAK_NAME, soak_nranks, opt.ops, opt.seed, opt.maxbytes, opt.timeout_s);
        if (soak_nstreams)
            printf(", stream calls on %d streams of %s", soak_nstreams,
#ifdef RCC_FAKEDEV
                   "the stand-in GPU"
#else
                   "CUDA device 0"
#endif
            );
        printf("\n");
        fflush(stdout);
    }

    uint64_t shared = opt.seed,
             own = opt.seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(soak_rank + 1));
    long kinds[SK_NKINDS] = {0}, modes[MODE_N] = {0}, steps[MODE_N] = {0}, fused = 0;
    uint64_t totals[2] = {0, 0}; /* wrong elements, bytes moved */
    int reports_left = SOAK_REPORTS;
    double t0 = td_now_s(), in_calls = 0;
    soak_op_t ops[SOAK_MAX_BATCH];
    for (long done = 0; done < opt.ops;) {
        unsigned m = (unsigned)soak_below(&shared, 100);
        int mode = m < 50 ? MODE_BLOCKING : m < 75 ? MODE_BATCH : MODE_GROUP;
        int k = mode == MODE_BLOCKING ? 1 : 2 + (int)soak_below(&shared, SOAK_MAX_BATCH - 1);
        if (k > opt.ops - done)
            k = (int)(opt.ops - done);
        /* A third of the groups: allreduces of one dtype and op, which the group fuses. */
        int fuse = mode == MODE_GROUP && soak_below(&shared, 3) == 0;
        rcc_datatype_t fuse_dt = (rcc_datatype_t)soak_below(&shared, RCC_NUM_DATATYPES);
        rcc_redop_t fuse_op = (rcc_redop_t)soak_below(&shared, RCC_NUM_OPS);
        for (int i = 0; i < k; i++) {
            soak_draw(&ops[i], &shared, &opt, mode, done + i, fuse, fuse_dt, fuse_op);
            soak_prepare(&ops[i]);
#ifdef SOAK_DEVICE
            if (soak_nstreams)
                soak_dev_prepare(&ops[i], &shared, &own);
#endif
            kinds[ops[i].kind]++;
        }
        modes[mode] += k;
        steps[mode]++;
        fused += fuse ? k : 0;

        double t1 = td_now_s();
        if (mode == MODE_GROUP && (res = rcc_group_start()) != RCC_SUCCESS)
            soak_fail(&ops[0], "rcc_group_start", res, rcc_last_error(NULL));
        for (int i = 0; i < k; i++) {
            if (opt.verbose) {
                char d[300];
                printf("%s\n", soak_text(d, sizeof d, &ops[i]));
                fflush(stdout);
            }
            soak_issue(&ops[i], mode == MODE_GROUP);
        }
        if (mode == MODE_GROUP && (res = rcc_group_end()) != RCC_SUCCESS)
            soak_fail(&ops[0], "rcc_group_end (of the group starting here)", res,
                      rcc_last_error(NULL));
        soak_complete(ops, k, &own, &opt);
#ifdef SOAK_DEVICE
        if (soak_nstreams)
            soak_stream_complete(ops, k, &opt);
#endif
        in_calls += td_now_s() - t1;

        for (int i = 0; i < k; i++) {
            totals[0] += soak_check(&ops[i], &reports_left);
            totals[1] += soak_bytes_in(&ops[i]);
            soak_free(&ops[i]);
        }
        long before = done;
        done += k;
        if (soak_rank == 0 && done / SOAK_PROGRESS != before / SOAK_PROGRESS) {
            printf("# %ld operations, %.1f s, %" PRIu64 " wrong elements on rank 0\n", done,
                   td_now_s() - t0, totals[0]);
            fflush(stdout);
        }
    }
    double times[2] = {td_now_s() - t0, in_calls}, slowest[2];
    uint64_t all[2];
    if ((res = rcc_allreduce(totals, all, 2, RCC_UINT64, RCC_SUM, soak_comm)) != RCC_SUCCESS ||
        (res = rcc_allreduce(times, slowest, 2, RCC_FLOAT64, RCC_MAX, soak_comm)) != RCC_SUCCESS)
        soak_fail(NULL, "the summary's allreduce", res, rcc_last_error(soak_comm));

    if (soak_rank == 0) {
        printf("# ops run: %ld:", opt.ops);
        for (int i = 0; i < SK_NKINDS; i++)
            printf(" %s %ld%s", soak_kind_name[i], kinds[i], i + 1 < SK_NKINDS ? "," : "\n");
        printf("#   issued as: %ld blocking calls; %ld in %ld nonblocking batches; %ld in %ld "
               "groups (%ld of them fused allreduces)\n",
               modes[MODE_BLOCKING], modes[MODE_BATCH], steps[MODE_BATCH], modes[MODE_GROUP],
               steps[MODE_GROUP], fused);
        printf("# bytes moved: %" PRIu64 " (%.2f GB; the bytes the results delivered, all ranks)\n",
               all[1], (double)all[1] / 1e9);
        printf("# wrong elements: %" PRIu64 "\n", all[0]);
        printf("# time: %.1f s (slowest rank; %.1f s of it issuing and waiting, the rest making "
               "and checking data)\n",
               slowest[0], slowest[1]);
        printf("# %s\n", all[0] ? "FAILED" : "OK");
        fflush(stdout);
    }
    res = rcc_comm_destroy(soak_comm);
    if (res != RCC_SUCCESS)
        soak_fail(NULL, "rcc_comm_destroy", res, rcc_last_error(NULL));
#ifdef SOAK_DEVICE
    for (int s = 0; s < soak_nstreams; s++)
        soak_dev_stream_destroy(soak_streams[s]);
#endif
#ifdef RCC_VERBSIM
    int misuses = verbsim_violations();
    if (misuses > 0) { /* each was printed as it happened */
        fprintf(stderr, "%s: rank %d: verbsim saw %d misuse(s) of the verbs API\n", SOAK_NAME,
                soak_rank, misuses);
        return 1;
    }
#endif
    return all[0] ? 1 : 0;
}
