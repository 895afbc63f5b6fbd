/*
 * ringcc-perf — collective bandwidth and correctness, in the style of nccl-tests' all_reduce_perf,
 * reduce_scatter_perf, all_gather_perf, broadcast_perf, reduce_perf, alltoall_perf and
 * sendrecv_perf (-C picks one).
 *
 *   ringcc-run -n 4 ringcc-perf -b 8 -e 128M -f 2
 *   ringcc-run -n 4 ringcc-perf -C allgather -b 8 -e 128M -f 2
 *
 * Uses only the public API, so it measures what an application sees. Each row is one
 * (dtype, op, size): an untimed checked collective, WARMUP untimed ones, then ITERS timed one by
 * one. The time reported is the median over the iterations of the slowest rank's time for that
 * iteration: every rank times each iteration with CLOCK_MONOTONIC, and the per-iteration times
 * are combined with an RCC_MAX allreduce. A median resists the odd descheduled iteration that
 * would skew a mean on a loaded host. The last column, loop, is the throughput figure beside it:
 * the slowest rank's time for the whole timed loop over ITERS, as nccl-tests times (two ranks
 * that take turns ending late make every iteration's slowest-rank time long without slowing the
 * loop down).
 *
 * Checking: the inputs are small integers chosen per dtype, op and rank count so that the exact
 * result is representable in every dtype (fp16 and bf16 included) whatever order the library
 * reduces in; results are compared bit for bit against values computed here. The pattern has a
 * prime period (PERF_PERIOD elements), so a chunk written to the wrong offset shows. Allgather,
 * broadcast, alltoall and sendrecv only move data, so their inputs are scrambled exact values,
 * different per rank (for alltoall, per sender and destination block).
 *
 * Sizes follow nccl-tests: for allreduce, broadcast and reduce, size = count elements; for
 * reducescatter size is the whole input and count the per-rank output (nranks * count elements
 * in), for allgather size is the whole output and count the per-rank input; so there a size is
 * rounded down to a multiple of nranks elements. Alltoall as alltoall_perf: size is the whole
 * input (and output) of a rank, count the elements sent to each peer. Sendrecv as sendrecv_perf:
 * each rank sends count elements to rank+1 and receives as many from rank-1, in one group; size =
 * count elements. In place (-i 1) follows NCCL: allgather sends from recvbuf + rank * count,
 * reducescatter receives into sendbuf + rank * count, the others pass sendbuf == recvbuf;
 * alltoall is never in place in ringcc, and a sendrecv whose send and receive share a buffer has
 * no defined result, so -i 1 is refused for both.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "report.h"
#include "ringcc.h"
#include "ttyprogress.h"

#define PERF_NAME "ringcc-perf"
#define PERF_PERIOD 509      /* prime: see above */
#define PERF_CANARY_BYTES 64 /* after the last element: must survive the collective */
#define PERF_CANARY 0x5a     /* the canary's bytes */
#define PERF_FILL 0xa5       /* bytes of an output before the call: an element skipped keeps them */
#define PERF_MAX_ITERS 1000000
#define PERF_EXIT_USAGE 2

enum perf_coll {
    PERF_ALLREDUCE,
    PERF_REDUCESCATTER,
    PERF_ALLGATHER,
    PERF_BROADCAST,
    PERF_REDUCE,
    PERF_ALLTOALL,
    PERF_SENDRECV,
    PERF_NUM_COLLS
};

static const struct {
    const char *name;
    int has_op;   /* reduces: -o applies, redop column names it */
    int has_root; /* -r applies */
    int blocks;   /* the count is per rank (per peer for alltoall): nranks blocks of it */
} perf_colls[PERF_NUM_COLLS] = {
    [PERF_ALLREDUCE] = {"allreduce", 1, 0, 0}, [PERF_REDUCESCATTER] = {"reducescatter", 1, 0, 1},
    [PERF_ALLGATHER] = {"allgather", 0, 0, 1}, [PERF_BROADCAST] = {"broadcast", 0, 1, 0},
    [PERF_REDUCE] = {"reduce", 1, 1, 0},       [PERF_ALLTOALL] = {"alltoall", 0, 0, 1},
    [PERF_SENDRECV] = {"sendrecv", 0, 0, 0},
};

struct perf_opts {
    enum perf_coll coll;
    int root;
    size_t minbytes, maxbytes;
    size_t factor;
    int iters, warmup, check, inplace, reg;
    rcc_datatype_t dtypes[RCC_NUM_DATATYPES];
    int ndtypes;
    rcc_redop_t ops[RCC_NUM_OPS];
    int nops;
    const char *json_path, *csv_path; /* --json, --csv: the results as data too ("-": stdout) */
};

/* The table's stream: stdout, or stderr when a --json/--csv report takes stdout. */
static FILE *perf_text;

static rcc_comm_t perf_comm;
static int perf_rank, perf_nranks;

/* ---------------------------------------------------------------------------------------------
 * Errors and arguments
 * ------------------------------------------------------------------------------------------- */

/* Before the communicator exists the rank is only known from the environment: let one rank
 * speak for all of them (they all parse the same arguments). */
static int perf_env_rank0(void)
{
    const char *r = getenv("RCC_RANK");
    return !r || strcmp(r, "0") == 0;
}

__attribute__((format(printf, 1, 2), noreturn)) static void perf_usage_error(const char *fmt, ...)
{
    if (perf_env_rank0()) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: ", PERF_NAME);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\nTry '%s -h' for more information.\n", PERF_NAME);
        va_end(ap);
    } else {
        /* Let rank 0 say why: the first rank to exit makes ringcc-run stop the others. */
        nanosleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL);
    }
    exit(PERF_EXIT_USAGE);
}

__attribute__((noreturn)) static void perf_fail(const char *what, rcc_result_t rc)
{
    fflush(stdout); /* the rows so far first */
    fprintf(stderr, "%s: %s failed: %s: %s\n", PERF_NAME, what, rcc_strerror(rc),
            rcc_last_error(perf_comm));
    exit(1);
}

static void perf_allreduce(const void *send, void *recv, size_t count, rcc_datatype_t dt,
                           rcc_redop_t op)
{
    rcc_result_t rc = rcc_allreduce(send, recv, count, dt, op, perf_comm);
    if (rc != RCC_SUCCESS)
        perf_fail("allreduce", rc);
}

/* One call of the collective under test; count is the API's (per rank for the blocked ones). */
static void perf_collective(enum perf_coll coll, const void *send, void *recv, size_t count,
                            rcc_datatype_t dt, rcc_redop_t op, int root)
{
    rcc_result_t rc = RCC_ERR_INTERNAL;
    switch (coll) {
    case PERF_ALLREDUCE: rc = rcc_allreduce(send, recv, count, dt, op, perf_comm); break;
    case PERF_REDUCESCATTER: rc = rcc_reduce_scatter(send, recv, count, dt, op, perf_comm); break;
    case PERF_ALLGATHER: rc = rcc_allgather(send, recv, count, dt, perf_comm); break;
    case PERF_BROADCAST: rc = rcc_broadcast(send, recv, count, dt, root, perf_comm); break;
    case PERF_REDUCE: rc = rcc_reduce(send, recv, count, dt, op, root, perf_comm); break;
    case PERF_ALLTOALL: rc = rcc_alltoall(send, recv, count, dt, perf_comm); break;
    case PERF_SENDRECV: {
        /* As sendrecv_perf: to rank+1, from rank-1, in one group so neither waits on the other
         * (with one rank, to and from itself). */
        int to = (perf_rank + 1) % perf_nranks, from = (perf_rank - 1 + perf_nranks) % perf_nranks;
        if ((rc = rcc_group_start()) != RCC_SUCCESS)
            perf_fail("rcc_group_start", rc);
        if ((rc = rcc_send(send, count, dt, to, perf_comm)) != RCC_SUCCESS)
            perf_fail("sendrecv: rcc_send", rc);
        if ((rc = rcc_recv(recv, count, dt, from, perf_comm)) != RCC_SUCCESS)
            perf_fail("sendrecv: rcc_recv", rc);
        if ((rc = rcc_group_end()) != RCC_SUCCESS)
            perf_fail("sendrecv: rcc_group_end", rc);
        return;
    }
    default: break;
    }
    if (rc != RCC_SUCCESS)
        perf_fail(perf_colls[coll].name, rc);
}

static void perf_help(void)
{
    if (!perf_env_rank0())
        return;
    printf("Usage: %s [options]   (one process per rank, e.g. under ringcc-run -n N)\n"
           "Measure a collective's time and bandwidth over a range of sizes; check results.\n"
           "\n"
           "  -C, --collective NAME   allreduce (default), reducescatter, allgather,\n"
           "                          broadcast, reduce, alltoall or sendrecv (to rank+1,\n"
           "                          from rank-1, in one group)\n"
           "  -r, --root N            root rank of broadcast and reduce (default 0)\n"
           "  -b, --minbytes SIZE     smallest size (default 32M)\n"
           "  -e, --maxbytes SIZE     largest size (default 32M)\n"
           "  -f, --stepfactor N      multiply the size by N (an integer >= 2) each step "
           "(default 2)\n"
           "  -n, --iters N           timed iterations per row (default 20)\n"
           "  -w, --warmup_iters N    untimed iterations before them (default 5)\n"
           "  -c, --check 0|1         check results exactly (default 1)\n"
           "  -d, --datatype T        data type, a comma-separated list, or 'all' (default "
           "float32):\n"
           "                          int8 uint8 int32 uint32 int64 uint64 float16 float32\n"
           "                          float64 bfloat16 (also half float double bf16 fp16...)\n"
           "  -o, --op OP             sum prod max min avg, a comma-separated list, or 'all'\n"
           "                          (default sum; ignored by allgather, broadcast,\n"
           "                          alltoall and sendrecv)\n"
           "  -R, --register 0|1      1: register the buffers with rcc_comm_register\n"
           "                          (zero-copy sends over ibverbs; default 0)\n"
           "  -i, --inplace 0|1       1: in place, timed and checked that way (default 0):\n"
           "                          sendbuf == recvbuf; allgather: sendbuf =\n"
           "                          recvbuf + rank*count; reducescatter: recvbuf =\n"
           "                          sendbuf + rank*count; not for alltoall and sendrecv\n"
           "      --json PATH         also write the results as JSON to PATH ('-': stdout,\n"
           "                          the table then goes to stderr); rank 0 writes it\n"
           "      --csv PATH          the same as CSV (both may be given)\n"
           "  -h, --help              show this help\n"
           "SIZE is bytes, with an optional K, M, G or T suffix (powers of 1024). A size is\n"
           "rounded down to whole elements (for reducescatter, allgather and alltoall to a\n"
           "multiple of n elements); a size below that runs as a count-0 row.\n"
           "\n"
           "Columns, as in nccl-tests: size (bytes) and count (elements): for allreduce,\n"
           "broadcast, reduce and sendrecv size = count elements; reducescatter: size = the\n"
           "whole input, count = the elements each rank receives; allgather: size = the\n"
           "whole output, count = the elements each rank sends; alltoall: size = the whole\n"
           "input of a rank, count = the elements it sends to each rank. type; redop ('none'\n"
           "for allgather, broadcast, alltoall and sendrecv); time(us) = median over the\n"
           "iterations of the slowest rank's time for each iteration; algbw = size/time;\n"
           "busbw = algbw * 2(n-1)/n for allreduce, (n-1)/n for reducescatter, allgather\n"
           "and alltoall, 1 for broadcast, reduce and sendrecv (comparable across n);\n"
           "#wrong = elements, over all ranks, that differ from the exact\n"
           "expected value (including a written send buffer out of place, bytes written\n"
           "past the end, or a reduce's recvbuf written on a rank that is not the root);\n"
           "loop(us) = the slowest rank's time for its whole timed loop over the\n"
           "iterations / iterations: the mean time per operation back to back, timed\n"
           "over the loop as nccl-tests does (throughput: a late end that the next\n"
           "iteration makes up costs it nothing, unlike time).\n"
           "Exit status: 0 if nothing was wrong, 1 if something was or an error occurred,\n"
           "2 for bad arguments.\n",
           PERF_NAME);
}

static size_t perf_parse_size(const char *opt, const char *s)
{
    size_t v;
    if (bench_parse_size(s, &v))
        perf_usage_error("%s: expected a size like 8, 64K or 32M, not '%s'", opt, s);
    return v;
}

static int perf_parse_int(const char *opt, const char *s, int lo, int hi)
{
    long v;
    if (bench_parse_int(s, lo, hi, &v))
        perf_usage_error("%s: expected an integer from %d to %d, not '%s'", opt, lo, hi, s);
    return (int)v;
}

static int perf_dtype_by_name(const char *name)
{
    static const struct {
        const char *alias;
        rcc_datatype_t dt;
    } aliases[] = {
        {"char", RCC_INT8},      {"int", RCC_INT32},     {"half", RCC_FLOAT16},
        {"fp16", RCC_FLOAT16},   {"float", RCC_FLOAT32}, {"fp32", RCC_FLOAT32},
        {"double", RCC_FLOAT64}, {"fp64", RCC_FLOAT64},  {"bf16", RCC_BFLOAT16},
    };
    for (int d = 0; d < RCC_NUM_DATATYPES; d++)
        if (strcasecmp(name, rcc_datatype_name((rcc_datatype_t)d)) == 0)
            return d;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].alias) == 0)
            return (int)aliases[i].dt;
    return -1;
}

static int perf_op_by_name(const char *name)
{
    for (int o = 0; o < RCC_NUM_OPS; o++)
        if (strcasecmp(name, rcc_redop_name((rcc_redop_t)o)) == 0)
            return o;
    return -1;
}

/* nccl-tests names its programs all_reduce_perf, reduce_scatter_perf...: accept those spellings
 * too ("all_reduce", "all-gather"). */
static enum perf_coll perf_parse_coll(const char *arg)
{
    char name[32];
    size_t n = 0;
    for (const char *p = arg; *p && n < sizeof name - 1; p++)
        if (*p != '_' && *p != '-')
            name[n++] = (char)tolower((unsigned char)*p);
    name[n] = '\0';
    for (int c = 0; c < PERF_NUM_COLLS; c++)
        if (strcmp(name, perf_colls[c].name) == 0)
            return (enum perf_coll)c;
    perf_usage_error("-C: expected allreduce, reducescatter, allgather, broadcast, reduce, "
                     "alltoall or sendrecv, not '%s'",
                     arg);
}

/* "all", or a comma-separated list of names; returns how many went into out[]. */
static int perf_parse_list(const char *opt, const char *arg, int (*lookup)(const char *), int nall,
                           int *out)
{
    if (strcasecmp(arg, "all") == 0) {
        for (int i = 0; i < nall; i++)
            out[i] = i;
        return nall;
    }
    char *copy = strdup(arg);
    if (!copy)
        perf_usage_error("out of memory");
    int n = 0;
    for (char *save, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int v = lookup(tok);
        if (v < 0)
            perf_usage_error("%s: unknown name '%s'", opt, tok);
        int dup = 0;
        for (int i = 0; i < n; i++)
            dup |= out[i] == v;
        if (!dup && n < nall)
            out[n++] = v;
    }
    free(copy);
    if (n == 0)
        perf_usage_error("%s: empty list", opt);
    return n;
}

static void perf_parse_args(int argc, char **argv, struct perf_opts *o)
{
    static const struct option longopts[] = {
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup_iters", required_argument, NULL, 'w'},
        {"check", required_argument, NULL, 'c'},
        {"datatype", required_argument, NULL, 'd'},
        {"op", required_argument, NULL, 'o'},
        {"inplace", required_argument, NULL, 'i'},
        {"collective", required_argument, NULL, 'C'},
        {"root", required_argument, NULL, 'r'},
        {"register", required_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},
        {"json", required_argument, NULL, 'J'},
        {"csv", required_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct perf_opts){
        .minbytes = 32u << 20,
        .maxbytes = 32u << 20,
        .factor = 2,
        .iters = 20,
        .warmup = 5,
        .check = 1,
        .ndtypes = 1,
        .nops = 1,
    };
    o->dtypes[0] = RCC_FLOAT32;
    o->ops[0] = RCC_SUM;
    int list[(int)RCC_NUM_DATATYPES > (int)RCC_NUM_OPS ? (int)RCC_NUM_DATATYPES : (int)RCC_NUM_OPS];
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":b:e:f:n:w:c:d:o:i:C:r:R:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': o->minbytes = perf_parse_size("-b", optarg); break;
        case 'e': o->maxbytes = perf_parse_size("-e", optarg); break;
        case 'f': o->factor = (size_t)perf_parse_int("-f", optarg, 2, 1 << 20); break;
        case 'n': o->iters = perf_parse_int("-n", optarg, 1, PERF_MAX_ITERS); break;
        case 'w': o->warmup = perf_parse_int("-w", optarg, 0, PERF_MAX_ITERS); break;
        case 'c': o->check = perf_parse_int("-c", optarg, 0, 1); break;
        case 'i': o->inplace = perf_parse_int("-i", optarg, 0, 1); break;
        case 'C': o->coll = perf_parse_coll(optarg); break;
        case 'r': o->root = perf_parse_int("-r", optarg, 0, INT_MAX); break;
        case 'R': o->reg = perf_parse_int("-R", optarg, 0, 1); break;
        case 'd':
            o->ndtypes = perf_parse_list("-d", optarg, perf_dtype_by_name, RCC_NUM_DATATYPES, list);
            for (int k = 0; k < o->ndtypes; k++)
                o->dtypes[k] = (rcc_datatype_t)list[k];
            break;
        case 'o':
            o->nops = perf_parse_list("-o", optarg, perf_op_by_name, RCC_NUM_OPS, list);
            for (int k = 0; k < o->nops; k++)
                o->ops[k] = (rcc_redop_t)list[k];
            break;
        case 'J': o->json_path = optarg; break;
        case 'V': o->csv_path = optarg; break;
        case 'h': perf_help(); exit(0);
        case ':': perf_usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            if (optopt)
                perf_usage_error("unknown option '-%c'", optopt);
            perf_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        perf_usage_error("unexpected argument '%s'", argv[optind]);
    if (o->minbytes > o->maxbytes)
        perf_usage_error("-b (%zu bytes) is larger than -e (%zu bytes)", o->minbytes, o->maxbytes);
    if (o->inplace && o->coll == PERF_ALLTOALL)
        perf_usage_error("-i 1: alltoall is not in place in ringcc (sendbuf and recvbuf must not "
                         "overlap); use -i 0");
    if (o->inplace && o->coll == PERF_SENDRECV)
        perf_usage_error("-i 1: a sendrecv that receives into the buffer it sends from has no "
                         "defined result; use -i 0");
}

/* ---------------------------------------------------------------------------------------------
 * Exact test values
 * ------------------------------------------------------------------------------------------- */

static int perf_is_float(rcc_datatype_t dt)
{
    return dt == RCC_FLOAT16 || dt == RCC_FLOAT32 || dt == RCC_FLOAT64 || dt == RCC_BFLOAT16;
}

static int perf_is_unsigned(rcc_datatype_t dt)
{
    return dt == RCC_UINT8 || dt == RCC_UINT32 || dt == RCC_UINT64;
}

/* Largest L such that every integer in [-L, L] (or [0, L] unsigned) is exact and in range;
 * capped where larger buys nothing. */
static int64_t perf_exact_limit(rcc_datatype_t dt)
{
    switch (dt) {
    case RCC_INT8: return 127;
    case RCC_UINT8: return 255;
    case RCC_FLOAT16: return 2048; /* 11-bit significand */
    case RCC_BFLOAT16: return 256; /* 8-bit significand */
    case RCC_FLOAT32: return 1 << 24;
    default: return INT32_MAX;
    }
}

/* SUM and integer AVG: every partial sum, in any order, stays within the exact range: at most
 * 5 per rank, fewer when there are many ranks, and when even 1 per rank is too much only the
 * first L ranks contribute (0 or 1). */
static int64_t perf_sum_value(rcc_datatype_t dt, int nranks, int r, int j)
{
    int64_t lim = perf_exact_limit(dt);
    int64_t per = lim / nranks;
    if (per >= 1)
        return 1 + (7 * j + 3 * r) % (per < 5 ? per : 5);
    return r < lim ? (j + r) % 2 : 0;
}

/* Value rank r contributes at element j of the period. */
static int64_t perf_value(rcc_datatype_t dt, rcc_redop_t op, int nranks, int r, int j)
{
    int bits = (int)rcc_datatype_size(dt) * 8;
    switch (op) {
    case RCC_SUM: return perf_sum_value(dt, nranks, r, j);
    case RCC_AVG: {
        if (!perf_is_float(dt))
            return perf_sum_value(dt, nranks, r, j); /* expected: truncated sum / n */
        /* Floats: b + d(r) with the d(r) = +1,-1,+1,-1,... (0 for an odd last rank) summing to
         * 0, so the sum is n*b and the average exactly b, whatever the rounding of sum/n. */
        int64_t bmax = perf_exact_limit(dt) / nranks - 1;
        int64_t b = bmax >= 1 ? 1 + (7 * j) % (bmax < 5 ? bmax : 5) : 0;
        int64_t d = r < nranks - nranks % 2 ? (r % 2 ? -1 : 1) : 0;
        return b + d;
    }
    case RCC_MAX:
    case RCC_MIN: {
        /* Spread over the type's range, so a signed/unsigned mix-up or a compare on the low
         * bits only shows: unsigned values reach the top bit, signed ones are of both signs. */
        int64_t base = (7 * j + 13 * r) % 61;
        if (perf_is_float(dt))
            return base - 30;
        if (perf_is_unsigned(dt))
            return (int64_t)((uint64_t)base << (bits - 6));
        return (base - 30) * (int64_t)((uint64_t)1 << (bits - 8));
    }
    case RCC_PROD: {
        /* Factors of 1 and 2 with at most six 2s (|product| <= 64 fits int8), and some -1s
         * for signed types. */
        int64_t mag = (r < 6 && (j + r) % 3 == 0) ? 2 : 1;
        int neg = !perf_is_unsigned(dt) && r < 16 && (j + 2 * r) % 7 == 0;
        return neg ? -mag : mag;
    }
    default: return 0;
    }
}

static int64_t perf_expected(rcc_datatype_t dt, rcc_redop_t op, int nranks, int j)
{
    int64_t acc = perf_value(dt, op, nranks, 0, j);
    for (int r = 1; r < nranks; r++) {
        int64_t v = perf_value(dt, op, nranks, r, j);
        switch (op) {
        case RCC_SUM:
        case RCC_AVG: acc += v; break;
        case RCC_PROD: acc *= v; break;
        case RCC_MAX:
            if (perf_is_unsigned(dt) ? (uint64_t)v > (uint64_t)acc : v > acc)
                acc = v;
            break;
        case RCC_MIN:
            if (perf_is_unsigned(dt) ? (uint64_t)v < (uint64_t)acc : v < acc)
                acc = v;
            break;
        default: break;
        }
    }
    if (op == RCC_AVG)
        acc /= nranks; /* exact for floats by construction; C truncation for integers */
    return acc;
}

/* IEEE binary16 / bfloat16 bits of an integer that is exactly representable (the patterns
 * above guarantee it; anything else is a bug here, not in the library). */
static uint16_t perf_small_float(int64_t v, int mant_bits, int bias)
{
    if (v == 0)
        return 0;
    uint16_t sign = (uint16_t)(v < 0 ? 0x8000 : 0);
    uint64_t a = v < 0 ? (uint64_t)-v : (uint64_t)v;
    int e = 63 - __builtin_clzll(a);
    uint64_t mant;
    if (e <= mant_bits) {
        mant = (a << (mant_bits - e)) & ((1u << mant_bits) - 1);
    } else {
        if (a & ((UINT64_C(1) << (e - mant_bits)) - 1)) {
            fprintf(stderr, "%s: internal error: %" PRId64 " is not exact\n", PERF_NAME, v);
            abort();
        }
        mant = (a >> (e - mant_bits)) & ((1u << mant_bits) - 1);
    }
    return (uint16_t)(sign | (uint16_t)((e + bias) << mant_bits) | (uint16_t)mant);
}

static void perf_store(rcc_datatype_t dt, void *dst, int64_t v)
{
    switch (dt) {
    case RCC_INT8:
    case RCC_UINT8: {
        uint8_t x = (uint8_t)(uint64_t)v;
        memcpy(dst, &x, 1);
        break;
    }
    case RCC_INT32:
    case RCC_UINT32: {
        uint32_t x = (uint32_t)(uint64_t)v;
        memcpy(dst, &x, 4);
        break;
    }
    case RCC_INT64:
    case RCC_UINT64: {
        uint64_t x = (uint64_t)v;
        memcpy(dst, &x, 8);
        break;
    }
    case RCC_FLOAT16: {
        uint16_t x = perf_small_float(v, 10, 15);
        memcpy(dst, &x, 2);
        break;
    }
    case RCC_BFLOAT16: {
        uint16_t x = perf_small_float(v, 7, 127);
        memcpy(dst, &x, 2);
        break;
    }
    case RCC_FLOAT32: {
        float x = (float)v;
        memcpy(dst, &x, 4);
        break;
    }
    case RCC_FLOAT64: {
        double x = (double)v;
        memcpy(dst, &x, 8);
        break;
    }
    default: break;
    }
}

/* Allgather, broadcast, alltoall and sendrecv only copy, so any exact value will do: scrambled
 * ones, different per key (the rank; for alltoall, the sender and the destination block, see
 * perf_a2a_key) and per element of the period, so that a block from the wrong rank or offset shows.
 * Integers use every bit of the type; floats the exact integers of perf_exact_limit. Never the
 * PERF_FILL bytes a skipped element would keep. */
static int64_t perf_copy_value(rcc_datatype_t dt, int r, int j)
{
    uint64_t h = ((uint64_t)(uint32_t)r << 32 | (uint32_t)j) + UINT64_C(0x9e3779b97f4a7c15);
    h = (h ^ (h >> 30)) * UINT64_C(0xbf58476d1ce4e5b9); /* splitmix64's finaliser */
    h = (h ^ (h >> 27)) * UINT64_C(0x94d049bb133111eb);
    h ^= h >> 31;
    int64_t v = (int64_t)h; /* perf_store keeps the low bits of an integer type */
    if (perf_is_float(dt)) {
        int64_t lim = perf_exact_limit(dt);
        v = (int64_t)(h % (uint64_t)(2 * lim + 1)) - lim;
    }
    size_t esz = rcc_datatype_size(dt);
    unsigned char bytes[8], fill[8];
    memset(fill, PERF_FILL, sizeof fill);
    perf_store(dt, bytes, v);
    if (memcmp(bytes, fill, esz) == 0)
        v ^= 1; /* integers only: no float integer is all PERF_FILL bytes */
    return v;
}

/* Alltoall: the key of the block that rank `from` sends to rank `to`. */
static int perf_a2a_key(int from, int to) { return from * perf_nranks + to; }

/* period[0..PERF_PERIOD) = perf_copy_value(dt, key, j). */
static void perf_copy_period(char *period, rcc_datatype_t dt, int key)
{
    size_t esz = rcc_datatype_size(dt);
    for (int j = 0; j < PERF_PERIOD; j++)
        perf_store(dt, period + (size_t)j * esz, perf_copy_value(dt, key, j));
}

/* dst[0..count) = the period repeated. */
static void perf_tile(char *dst, const char *period, size_t esz, size_t count)
{
    for (size_t i = 0; i < count; i += PERF_PERIOD) {
        size_t n = count - i < PERF_PERIOD ? count - i : PERF_PERIOD;
        memcpy(dst + i * esz, period, n * esz);
    }
}

/* Elements of buf[0..count) that differ, bit for bit, from the period repeated, buf[0] being
 * element `start` of the repetition. */
static uint64_t perf_count_wrong(const char *buf, const char *period, size_t esz, size_t count,
                                 size_t start)
{
    uint64_t wrong = 0;
    size_t j = start % PERF_PERIOD;
    for (size_t i = 0; i < count; j = 0) {
        size_t n = count - i < PERF_PERIOD - j ? count - i : PERF_PERIOD - j;
        const char *b = buf + i * esz, *p = period + j * esz;
        if (memcmp(b, p, n * esz) != 0)
            for (size_t k = 0; k < n; k++)
                wrong += memcmp(b + k * esz, p + k * esz, esz) != 0;
        i += n;
    }
    return wrong;
}

/* Elements of buf[0..count) with a byte that is not PERF_FILL: written when they should not. */
static uint64_t perf_count_written(const char *buf, size_t esz, size_t count)
{
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        for (size_t k = 0; k < esz; k++)
            if ((unsigned char)buf[i * esz + k] != PERF_FILL) {
                wrong++;
                break;
            }
    return wrong;
}

/* ---------------------------------------------------------------------------------------------
 * The benchmark
 * ------------------------------------------------------------------------------------------- */

struct perf_bufs {
    char *send, *recv;        /* maxbytes + canary, page aligned */
    char *in_period;          /* this rank's input, one period (alltoall: scratch) */
    char *exp_period;         /* the expected result, one period (allgather, alltoall: scratch) */
    double *times, *maxtimes; /* per iteration, then the whole loop: this rank's, the slowest */
};

/* The buffers of one call with `count` as passed to the API (per rank for reducescatter and
 * allgather, per peer for alltoall), following NCCL's in-place conventions; *in and *out are
 * their lengths in elements, *end where the collective's memory ends (the canary goes there),
 * *send_end where the send buffer ends out of place (another canary; NULL in place). */
struct perf_call {
    char *send, *recv, *end, *send_end;
    size_t in, out;
};

static struct perf_call perf_call_bufs(const struct perf_bufs *b, const struct perf_opts *o,
                                       size_t count, size_t esz)
{
    size_t n = (size_t)perf_nranks, me = (size_t)perf_rank;
    struct perf_call c = {b->send, b->recv, NULL, NULL, count, count};
    if (o->coll == PERF_REDUCESCATTER || o->coll == PERF_ALLTOALL)
        c.in = n * count;
    if (o->coll == PERF_ALLGATHER || o->coll == PERF_ALLTOALL)
        c.out = n * count;
    if (!o->inplace) {
        c.end = c.recv + c.out * esz;
        c.send_end = c.send + c.in * esz;
        return c;
    }
    switch (o->coll) {
    case PERF_REDUCESCATTER:
        c.recv = c.send + me * count * esz;
        c.end = c.send + c.in * esz;
        break;
    case PERF_ALLGATHER:
        c.send = c.recv + me * count * esz;
        c.end = c.recv + c.out * esz;
        break;
    default:
        c.recv = c.send;
        c.end = c.send + count * esz;
        break;
    }
    return c;
}

static void *perf_alloc(size_t bytes)
{
    void *p = NULL;
    bytes = (bytes + 4095) & ~(size_t)4095;
    if (bytes == 0 || posix_memalign(&p, 4096, bytes) != 0) {
        fprintf(stderr, "%s: cannot allocate %zu bytes\n", PERF_NAME, bytes);
        exit(1);
    }
    memset(p, 0, bytes); /* touch every page now, not in the timed loop */
    return p;
}

static double perf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int perf_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double perf_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, perf_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One period of this rank's input and of the expected result, for (dtype, op). */
static void perf_periods(struct perf_bufs *b, const struct perf_opts *o, rcc_datatype_t dt,
                         rcc_redop_t op)
{
    size_t esz = rcc_datatype_size(dt);
    for (int j = 0; j < PERF_PERIOD; j++) {
        char *in = b->in_period + (size_t)j * esz, *exp = b->exp_period + (size_t)j * esz;
        if (perf_colls[o->coll].has_op) {
            perf_store(dt, in, perf_value(dt, op, perf_nranks, perf_rank, j));
            perf_store(dt, exp, perf_expected(dt, op, perf_nranks, j));
        } else { /* broadcast: from the root; sendrecv: from rank-1; others: per block */
            int from =
                o->coll == PERF_SENDRECV ? (perf_rank + perf_nranks - 1) % perf_nranks : o->root;
            perf_store(dt, in, perf_copy_value(dt, perf_rank, j));
            perf_store(dt, exp, perf_copy_value(dt, from, j));
        }
    }
}

/* The checked collective: returns the elements this rank finds wrong. */
static uint64_t perf_check(struct perf_bufs *b, const struct perf_opts *o, size_t count,
                           rcc_datatype_t dt, rcc_redop_t op)
{
    size_t esz = rcc_datatype_size(dt);
    struct perf_call c = perf_call_bufs(b, o, count, esz);
    int is_root = perf_rank == o->root;
    if (o->inplace && o->coll == PERF_ALLGATHER)
        memset(c.recv, PERF_FILL, c.out * esz); /* the other blocks; ours is the input */
    if (o->inplace && o->coll == PERF_BROADCAST && !is_root) {
        memset(c.send, PERF_FILL, count * esz); /* must be overwritten */
    } else if (o->coll == PERF_ALLTOALL) {
        for (int p = 0; p < perf_nranks; p++) { /* block p, for rank p */
            perf_copy_period(b->in_period, dt, perf_a2a_key(perf_rank, p));
            perf_tile(c.send + (size_t)p * count * esz, b->in_period, esz, count);
        }
    } else {
        perf_tile(c.send, b->in_period, esz, c.in);
    }
    if (!o->inplace) {
        memset(c.recv, PERF_FILL, c.out * esz); /* an element the library skips must not pass */
        memset(c.send_end, PERF_CANARY, PERF_CANARY_BYTES);
    }
    memset(c.end, PERF_CANARY, PERF_CANARY_BYTES);

    perf_collective(o->coll, c.send, c.recv, count, dt, op, o->root);

    uint64_t wrong = 0;
    switch (o->coll) {
    case PERF_REDUCESCATTER:
        wrong = perf_count_wrong(c.recv, b->exp_period, esz, count, (size_t)perf_rank * count);
        break;
    case PERF_ALLGATHER:
        for (int r = 0; r < perf_nranks; r++) {
            for (int j = 0; j < PERF_PERIOD; j++)
                perf_store(dt, b->exp_period + (size_t)j * esz, perf_copy_value(dt, r, j));
            wrong +=
                perf_count_wrong(c.recv + (size_t)r * count * esz, b->exp_period, esz, count, 0);
        }
        break;
    case PERF_REDUCE:
        if (is_root)
            wrong = perf_count_wrong(c.recv, b->exp_period, esz, count, 0);
        else if (o->inplace) /* recvbuf == sendbuf, written on the root only */
            wrong = perf_count_wrong(c.recv, b->in_period, esz, count, 0);
        else
            wrong = perf_count_written(c.recv, esz, count);
        break;
    case PERF_ALLTOALL: /* block p: what rank p sent to this rank */
        for (int p = 0; p < perf_nranks; p++) {
            perf_copy_period(b->exp_period, dt, perf_a2a_key(p, perf_rank));
            wrong +=
                perf_count_wrong(c.recv + (size_t)p * count * esz, b->exp_period, esz, count, 0);
        }
        break;
    default: /* allreduce, broadcast, sendrecv */
        wrong = perf_count_wrong(c.recv, b->exp_period, esz, count, 0);
        break;
    }
    size_t bad_canary = 0;
    for (size_t k = 0; k < PERF_CANARY_BYTES; k++)
        bad_canary += (unsigned char)c.end[k] != PERF_CANARY;
    if (!o->inplace) { /* the send buffer is the caller's: never written out of place */
        if (o->coll == PERF_ALLTOALL) {
            for (int p = 0; p < perf_nranks; p++) {
                perf_copy_period(b->in_period, dt, perf_a2a_key(perf_rank, p));
                wrong +=
                    perf_count_wrong(c.send + (size_t)p * count * esz, b->in_period, esz, count, 0);
            }
        } else {
            wrong += perf_count_wrong(c.send, b->in_period, esz, c.in, 0);
        }
        for (size_t k = 0; k < PERF_CANARY_BYTES; k++)
            bad_canary += (unsigned char)c.send_end[k] != PERF_CANARY;
    }
    return wrong + (bad_canary + esz - 1) / esz;
}

/* busbw from algbw: the traffic of the ring algorithm per rank, comparable across n. */
static double perf_busbw(enum perf_coll coll, double algbw)
{
    switch (coll) {
    case PERF_ALLREDUCE: return algbw * 2.0 * (perf_nranks - 1) / perf_nranks;
    case PERF_REDUCESCATTER:
    case PERF_ALLGATHER:
    case PERF_ALLTOALL: return algbw * (perf_nranks - 1) / perf_nranks;
    default: return algbw;
    }
}

static void perf_header(const struct perf_opts *o)
{
    int version = 0;
    rcc_get_version(&version);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    char what[64];
    if (perf_colls[o->coll].has_root)
        snprintf(what, sizeof what, "%s, root %d", perf_colls[o->coll].name, o->root);
    else
        snprintf(what, sizeof what, "%s", perf_colls[o->coll].name);
    static const char *const factor[PERF_NUM_COLLS] = {
        [PERF_ALLREDUCE] = "algbw*2(n-1)/n",
        [PERF_REDUCESCATTER] = "algbw*(n-1)/n",
        [PERF_ALLGATHER] = "algbw*(n-1)/n",
        [PERF_BROADCAST] = "algbw",
        [PERF_REDUCE] = "algbw",
        [PERF_ALLTOALL] = "algbw*(n-1)/n",
        [PERF_SENDRECV] = "algbw",
    };
    fprintf(perf_text, "# %s: %s, %d ranks, ringcc library %d.%d.%d\n", PERF_NAME, what,
            perf_nranks, version / 10000, version / 100 % 100, version % 100);
    fprintf(perf_text,
            "# minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d "
            "validation: %d mode: %s\n",
            o->minbytes, o->maxbytes, o->factor, o->warmup, o->iters, o->check,
            o->inplace ? "in-place" : "out-of-place");
    fprintf(perf_text,
            "# time: median over the iters of each iteration's slowest rank (RCC_MAX of the\n"
            "#   per-rank CLOCK_MONOTONIC times); algbw = size/time; busbw = %s;\n"
            "#   #wrong: elements differing from the exact result, all ranks, checked untimed;\n"
            "#   loop: the slowest rank's whole timed loop / iters (as nccl-tests times)\n",
            factor[o->coll]);
    if (o->coll == PERF_REDUCESCATTER)
        fprintf(perf_text,
                "#   size: the whole input (n*count elements); count: elements per rank out\n");
    if (o->coll == PERF_ALLGATHER)
        fprintf(perf_text,
                "#   size: the whole output (n*count elements); count: elements per rank in\n");
    if (o->coll == PERF_ALLTOALL)
        fprintf(perf_text,
                "#   size: a rank's whole input (n*count elements); count: elements per peer\n");
    if (o->coll == PERF_SENDRECV)
        fprintf(perf_text,
                "#   each rank sends count elements to rank+1, receives from rank-1 (one group)\n");
    fprintf(perf_text, "# rank 0: pid %d on %s\n#\n", (int)getpid(), host);
    fprintf(perf_text, "# %10s  %12s  %8s  %6s  %10s  %11s  %11s  %8s  %10s\n", "size", "count",
            "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "loop(us)");
    fflush(perf_text);
}

/* Rank 0's --json/--csv reports (NULL when not asked for). */
struct perf_reports {
    report_t *r[2];
};

static void perf_reports_open(struct perf_reports *rep, const struct perf_opts *o)
{
    const char *paths[2] = {o->json_path, o->csv_path};
    const report_format_t formats[2] = {REPORT_JSON, REPORT_CSV};
    int version = 0;
    rcc_get_version(&version);
    char ver[32];
    snprintf(ver, sizeof ver, "%d.%d.%d", version / 10000, version / 100 % 100, version % 100);
    for (int k = 0; k < 2; k++) {
        rep->r[k] = NULL;
        if (!paths[k])
            continue;
        if (!(rep->r[k] = report_open(paths[k], formats[k], PERF_NAME))) {
            fprintf(stderr, "%s: cannot write %s: %s\n", PERF_NAME, paths[k], strerror(errno));
            exit(1);
        }
        report_field_t meta[] = {
            REPORT_S("impl", "ringcc"),
            REPORT_S("version", ver),
            REPORT_S("collective", perf_colls[o->coll].name),
            REPORT_I("nranks", perf_nranks),
            REPORT_I("root", o->root),
            REPORT_I("iters", o->iters),
            REPORT_I("warmup", o->warmup),
            REPORT_I("check", o->check),
            REPORT_S("mode", o->inplace ? "in-place" : "out-of-place"),
            REPORT_S("time", "median over iters of the slowest rank's time"),
            REPORT_S("loop", "the slowest rank's timed loop over iters"),
        };
        report_meta(rep->r[k], meta, (int)(sizeof meta / sizeof meta[0]));
        report_meta_env(rep->r[k]);
    }
}

static void perf_reports_row(struct perf_reports *rep, const struct perf_opts *o, size_t bytes,
                             size_t count, rcc_datatype_t dt, const char *redop, double t,
                             double algbw, double busbw, uint64_t wrong, double loop)
{
    report_field_t row[] = {
        REPORT_S("collective", perf_colls[o->coll].name),
        REPORT_I("nranks", perf_nranks),
        REPORT_I("size", bytes),
        REPORT_I("count", count),
        REPORT_S("type", rcc_datatype_name(dt)),
        REPORT_S("redop", redop),
        REPORT_D("time_us", t * 1e6),
        REPORT_D("algbw_GBps", algbw),
        REPORT_D("busbw_GBps", busbw),
        o->check ? REPORT_I("wrong", wrong) : REPORT_NIL("wrong"),
        REPORT_D("loop_us", loop * 1e6),
    };
    for (int k = 0; k < 2; k++)
        if (rep->r[k])
            report_row(rep->r[k], row, (int)(sizeof row / sizeof row[0]));
}

static void perf_reports_close(struct perf_reports *rep, uint64_t wrong, double avg_busbw)
{
    report_field_t sum[] = {REPORT_I("wrong", wrong), REPORT_D("avg_busbw_GBps", avg_busbw)};
    for (int k = 0; k < 2; k++)
        if (report_close(rep->r[k], sum, 2) != 0) {
            fprintf(stderr, "%s: writing the report failed: %s\n", PERF_NAME, strerror(errno));
            exit(1);
        }
}

/* The size after `size` in the sweep, or SIZE_MAX past the last. */
static size_t perf_next_size(const struct perf_opts *o, size_t size)
{
    if (size == 0)
        return 1;
    return size > o->maxbytes / o->factor ? SIZE_MAX : size * o->factor;
}

/* The rows a sweep will print, for the progress line. */
static int perf_nrows(const struct perf_opts *o)
{
    int sizes = 0;
    for (size_t size = o->minbytes; size <= o->maxbytes; size = perf_next_size(o, size))
        sizes++;
    return sizes * o->ndtypes * (perf_colls[o->coll].has_op ? o->nops : 1);
}

int main(int argc, char **argv)
{
    struct perf_opts o;
    perf_parse_args(argc, argv, &o);

    rcc_result_t rc = rcc_comm_init_env(&perf_comm, NULL);
    if (rc != RCC_SUCCESS) {
        fprintf(stderr, "%s: rcc_comm_init_env failed: %s: %s\n", PERF_NAME, rcc_strerror(rc),
                rcc_last_error(NULL));
        return 1;
    }
    if ((rc = rcc_comm_rank(perf_comm, &perf_rank)) != RCC_SUCCESS)
        perf_fail("rcc_comm_rank", rc);
    if ((rc = rcc_comm_size(perf_comm, &perf_nranks)) != RCC_SUCCESS)
        perf_fail("rcc_comm_size", rc);
    if (perf_colls[o.coll].has_root && o.root >= perf_nranks)
        perf_usage_error("-r %d: the root must be a rank, 0 to %d", o.root, perf_nranks - 1);

    struct perf_bufs b;
    b.send = perf_alloc(o.maxbytes + PERF_CANARY_BYTES);
    b.recv = perf_alloc(o.maxbytes + PERF_CANARY_BYTES);
    rcc_memreg_t reg_send = NULL, reg_recv = NULL;
    if (o.reg && ((rc = rcc_comm_register(perf_comm, b.send, o.maxbytes + PERF_CANARY_BYTES,
                                          &reg_send)) != RCC_SUCCESS ||
                  (rc = rcc_comm_register(perf_comm, b.recv, o.maxbytes + PERF_CANARY_BYTES,
                                          &reg_recv)) != RCC_SUCCESS))
        perf_fail("rcc_comm_register", rc);
    b.in_period = perf_alloc(PERF_PERIOD * sizeof(uint64_t));
    b.exp_period = perf_alloc(PERF_PERIOD * sizeof(uint64_t));
    b.times = perf_alloc(((size_t)o.iters + 1) * sizeof(double)); /* + the whole loop's */
    b.maxtimes = perf_alloc(((size_t)o.iters + 1) * sizeof(double));

    int to_stdout =
        (o.json_path && !strcmp(o.json_path, "-")) || (o.csv_path && !strcmp(o.csv_path, "-"));
    perf_text = to_stdout ? stderr : stdout;
    struct perf_reports rep = {{NULL, NULL}};
    int row_no = 0;
    if (perf_rank == 0) {
        perf_header(&o);
        perf_reports_open(&rep, &o);
        ttyprogress_start(perf_nrows(&o));
    }

    const int has_op = perf_colls[o.coll].has_op;
    const size_t blocks = perf_colls[o.coll].blocks ? (size_t)perf_nranks : 1;
    uint64_t total_wrong = 0;
    double bw_sum = 0;
    int bw_rows = 0;
    for (int di = 0; di < o.ndtypes; di++) {
        rcc_datatype_t dt = o.dtypes[di];
        size_t esz = rcc_datatype_size(dt);
        for (int oi = 0; oi < (has_op ? o.nops : 1); oi++) {
            rcc_redop_t op = has_op ? o.ops[oi] : RCC_SUM; /* not passed without has_op */
            perf_periods(&b, &o, dt, op);
            for (size_t size = o.minbytes; size <= o.maxbytes;) { /* SIZE_MAX: past the last */
                size_t count = size / esz / blocks;               /* as passed to the API */
                size_t bytes = count * blocks * esz;
                uint64_t wrong = 0;
                struct perf_call c = perf_call_bufs(&b, &o, count, esz);
                if (o.check) {
                    uint64_t mine = perf_check(&b, &o, count, dt, op);
                    perf_allreduce(&mine, &wrong, 1, RCC_UINT64, RCC_SUM);
                    total_wrong += wrong;
                } else {
                    perf_tile(c.send, b.in_period, esz, c.in); /* realistic data all the same */
                }
                for (int k = 0; k < o.warmup; k++)
                    perf_collective(o.coll, c.send, c.recv, count, dt, op, o.root);
                double loop0 = perf_now();
                for (int k = 0; k < o.iters; k++) {
                    double t0 = perf_now();
                    perf_collective(o.coll, c.send, c.recv, count, dt, op, o.root);
                    b.times[k] = perf_now() - t0;
                }
                b.times[o.iters] = perf_now() - loop0;
                perf_allreduce(b.times, b.maxtimes, (size_t)o.iters + 1, RCC_FLOAT64, RCC_MAX);

                if (perf_rank == 0) {
                    double t = perf_median(b.maxtimes, o.iters);
                    double loop = b.maxtimes[o.iters] / o.iters;
                    double algbw = t > 0 ? (double)bytes / t / 1e9 : 0;
                    double busbw = perf_busbw(o.coll, algbw);
                    char wbuf[32];
                    if (o.check)
                        snprintf(wbuf, sizeof wbuf, "%" PRIu64, wrong);
                    else
                        snprintf(wbuf, sizeof wbuf, "N/A");
                    const char *redop = has_op ? rcc_redop_name(op) : "none";
                    fprintf(perf_text,
                            "  %10zu  %12zu  %8s  %6s  %10.2f  %11.3f  %11.3f  %8s  %10.2f\n",
                            bytes, count, rcc_datatype_name(dt), redop, t * 1e6, algbw, busbw, wbuf,
                            loop * 1e6);
                    fflush(perf_text);
                    perf_reports_row(&rep, &o, bytes, count, dt, redop, t, algbw, busbw, wrong,
                                     loop);
                    char what[96];
                    snprintf(what, sizeof what, "%s %s %s %zu bytes: %.3f GB/s busbw",
                             perf_colls[o.coll].name, rcc_datatype_name(dt), redop, bytes, busbw);
                    ttyprogress_step(++row_no, what);
                    if (count > 0) { /* no-op rows would drag the average to 0 */
                        bw_sum += busbw;
                        bw_rows++;
                    }
                }
                size = perf_next_size(&o, size);
            }
        }
    }

    if (perf_rank == 0) {
        ttyprogress_end();
        fprintf(perf_text, "# Out of bounds values : %" PRIu64 " %s\n", total_wrong,
                total_wrong ? "FAILED" : "OK");
        fprintf(perf_text, "# Avg bus bandwidth    : %g\n#\n", bw_rows ? bw_sum / bw_rows : 0.0);
        fflush(perf_text);
        perf_reports_close(&rep, total_wrong, bw_rows ? bw_sum / bw_rows : 0.0);
    }
    /* Keep every rank until rank 0 has printed: a rank exiting 1 early makes ringcc-run stop
     * the others, which could lose the summary above. */
    uint64_t done = 0, all_done;
    perf_allreduce(&done, &all_done, 1, RCC_UINT64, RCC_SUM);
    if (reg_send && (rc = rcc_comm_deregister(perf_comm, reg_send)) != RCC_SUCCESS)
        perf_fail("rcc_comm_deregister", rc);
    if (reg_recv && (rc = rcc_comm_deregister(perf_comm, reg_recv)) != RCC_SUCCESS)
        perf_fail("rcc_comm_deregister", rc);
    free(b.send);
    free(b.recv);
    free(b.in_period);
    free(b.exp_period);
    free(b.times);
    free(b.maxtimes);
    rc = rcc_comm_destroy(perf_comm);
    perf_comm = NULL;
    if (rc != RCC_SUCCESS) {
        fprintf(stderr, "%s: rcc_comm_destroy failed: %s: %s\n", PERF_NAME, rcc_strerror(rc),
                rcc_last_error(NULL));
        return 1;
    }
    return total_wrong ? 1 : 0;
}
