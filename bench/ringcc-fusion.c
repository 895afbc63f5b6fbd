/*
 * ringcc-fusion: what tensor fusion buys. Times K allreduces of S bytes
 * issued one by one against the same K issued in one group (fused into one
 * ring pass), alternately over several rounds, checks every result, and
 * prints the medians and their ratio. Runs under ringcc-run like
 * ringcc-perf: ringcc-run -n 4 ringcc-fusion [-k K] [-s BYTES] [-r ROUNDS]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringcc.h"

static rcc_comm_t fus_comm;
static int fus_rank, fus_nranks;
static size_t fus_stride; /* elements from one tensor's start to the next's */

static void fus_check(rcc_result_t res, const char *what)
{
    if (res == RCC_SUCCESS)
        return;
    fprintf(stderr, "ringcc-fusion: %s failed: %s: %s\n", what, rcc_strerror(res),
            rcc_last_error(fus_comm));
    exit(1);
}

static double fus_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fus_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double fus_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, fus_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Inputs: tensor t, element i of rank r = t + i % 7 + r (small integers, exact). */
static void fus_fill(float *buf, int k, size_t count)
{
    for (int t = 0; t < k; t++)
        for (size_t i = 0; i < count; i++)
            buf[(size_t)t * fus_stride + i] = (float)(t % 13 + (int)(i % 7) + fus_rank);
}

static long fus_wrong(const float *buf, int k, size_t count)
{
    long wrong = 0;
    float ranks = (float)(fus_nranks * (fus_nranks - 1) / 2);
    for (int t = 0; t < k; t++)
        for (size_t i = 0; i < count; i++)
            wrong += buf[(size_t)t * fus_stride + i] !=
                     (float)fus_nranks * (float)(t % 13 + (int)(i % 7)) + ranks;
    return wrong;
}

/* Returns this round's time (the slowest rank's) of one mode. */
static double fus_round(float *buf, int k, size_t count, int grouped, long *wrong)
{
    fus_fill(buf, k, count);
    fus_check(rcc_barrier(fus_comm), "barrier");
    double t0 = fus_now();
    if (grouped)
        fus_check(rcc_group_start(), "group start");
    for (int t = 0; t < k; t++)
        fus_check(rcc_allreduce(buf + (size_t)t * fus_stride, buf + (size_t)t * fus_stride, count,
                                RCC_FLOAT32, RCC_SUM, fus_comm),
                  "allreduce");
    if (grouped)
        fus_check(rcc_group_end(), "group end");
    double dt = fus_now() - t0;
    fus_check(rcc_allreduce(&dt, &dt, 1, RCC_FLOAT64, RCC_MAX, fus_comm), "time allreduce");
    *wrong += fus_wrong(buf, k, count);
    return dt;
}

int main(int argc, char **argv)
{
    int k = 1000, rounds = 5, opt, scattered = 0;
    size_t bytes = 4096;
    while ((opt = getopt(argc, argv, "k:s:r:ph")) != -1) {
        switch (opt) {
        case 'k': k = atoi(optarg); break;
        case 's': bytes = (size_t)strtoull(optarg, NULL, 10); break;
        case 'r': rounds = atoi(optarg); break;
        case 'p': scattered = 1; break;
        default:
            fprintf(stderr, "usage: ringcc-fusion [-k ALLREDUCES (1000)] [-s BYTES EACH (4096)] "
                            "[-r ROUNDS (5)] [-p]\n"
                            "  -p: tensors spaced apart (packed into a fusion buffer); by "
                            "default they lie end to end (fused in place)\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    size_t count = bytes / sizeof(float);
    if (k < 1 || rounds < 1 || count < 1) {
        fprintf(stderr, "ringcc-fusion: need k >= 1, rounds >= 1, bytes >= 4\n");
        return 2;
    }
    fus_check(rcc_comm_init_env(&fus_comm, NULL), "init");
    rcc_comm_rank(fus_comm, &fus_rank);
    rcc_comm_size(fus_comm, &fus_nranks);
    fus_stride = count + (scattered ? 16 : 0);
    float *buf = malloc((size_t)k * fus_stride * sizeof *buf);
    double *single = malloc(sizeof(double) * (size_t)rounds);
    double *fused = malloc(sizeof(double) * (size_t)rounds);
    if (!buf || !single || !fused) {
        fprintf(stderr, "ringcc-fusion: out of memory\n");
        return 1;
    }
    long wrong = 0;
    for (int r = 0; r < rounds; r++) {
        single[r] = fus_round(buf, k, count, 0, &wrong);
        fused[r] = fus_round(buf, k, count, 1, &wrong);
    }
    fus_check(rcc_allreduce(&wrong, &wrong, 1, RCC_INT64, RCC_SUM, fus_comm), "wrong allreduce");
    double s = fus_median(single, rounds), f = fus_median(fused, rounds);
    if (fus_rank == 0) {
        printf("# ringcc-fusion: %d ranks, %d allreduces of %zu bytes (float32 sum), %d rounds, "
               "tensors %s\n",
               fus_nranks, k, count * sizeof(float), rounds,
               scattered ? "spaced apart (packed)" : "end to end (fused in place)");
        printf("one by one : median %10.3f ms  (%.1f us per allreduce)\n", s * 1e3, s * 1e6 / k);
        printf("one group  : median %10.3f ms  (%.1f us per allreduce)\n", f * 1e3, f * 1e6 / k);
        printf("speed-up   : %.1fx\n", s / f);
        printf("#wrong     : %ld %s\n", wrong, wrong ? "FAILED" : "OK");
    }
    rcc_comm_destroy(fus_comm);
    free(buf), free(single), free(fused);
    return wrong != 0;
}
