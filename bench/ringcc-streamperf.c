/*
 * ringcc-streamperf: float32 sum allreduce of device buffers on a CUDA
 * stream (rcc_allreduce_stream) beside the same sizes from host buffers
 * (rcc_allreduce), in one run, rounds alternating, medians reported.
 *
 *   ringcc-run -n 4 ringcc-streamperf [-b 1M] [-e 64M] [-f 4] [-n 10] [-w 2] [-r 3]
 *
 * Every rank uses device (LOCAL_RANK, else RCC_RANK, mod the device count):
 * on a one-GPU machine all ranks share it. Device iterations are queued back to back on one
 * stream and timed from the first call to the stream's end (nccl-tests'
 * way); host iterations are timed call by call. busbw = 2(n-1)/n * bytes /
 * time. The inputs are small integers, exact in float32, and the result of
 * the last iteration of each mode is checked on every rank: #wrong counts the
 * elements, over all ranks, that differ. Exit status 0 when nothing was
 * wrong, 1 otherwise or on an error, 77 when no CUDA device is usable.
 *
 * Device buffers of ranks on one host with GPUs go GPU to GPU (the cudaipc
 * transport; RCC_TRANSPORT=tcp stages them over TCP instead). Beside each
 * size, the ring's memory-traffic lower bound: a ring allreduce reads and
 * writes about 5 * S * (N-1) / N bytes of device memory per rank
 * (reduce-scatter: 2 reads + 1 write of S/N per step, allgather: 1 + 1, N-1
 * steps each), so a GPU holding k ranks moves k times that; at the
 * device-to-device cudaMemcpy bandwidth measured in the same run (read +
 * write bytes per second, by rank 0 before the sizes), that takes "bound
 * us". dev/bound is the measured device time over it (issue 7: at most 1.25
 * at 256 MiB).
 */
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringcc.h"

#define NAME "ringcc-streamperf"
#define MAX_ROUNDS 15

static rcc_comm_t comm;
static int rank, nranks;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "%s: rank %d: %s: %s\n", NAME, rank, what, detail);
    exit(1);
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            die(#call, cudaGetErrorString(e_));                                                    \
    } while (0)

#define RC(call)                                                                                   \
    do {                                                                                           \
        rcc_result_t r_ = (call);                                                                  \
        if (r_ != RCC_SUCCESS)                                                                     \
            die(#call, rcc_last_error(comm));                                                      \
    } while (0)

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    size_t mul = *end == 'K' ? 1u << 10 : *end == 'M' ? 1u << 20 : *end == 'G' ? 1u << 30 : 1;
    if (v <= 0 || (*end && !strchr("KMG", *end)))
        die("expected a size like 64K or 16M", s);
    return (size_t)(v * (double)mul);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Rank 0's device-to-device cudaMemcpy bandwidth (read + write bytes per
 * second, median of 5 copies of `bytes`, after 5 that bring the clocks up)
 * while the others wait, shared. */
static double d2d_bandwidth(void *dst, const void *src, size_t bytes, cudaStream_t st)
{
    double bw[5] = {0}, all = 0;
    if (rank == 0) {
        cudaEvent_t a, b;
        CU(cudaEventCreate(&a));
        CU(cudaEventCreate(&b));
        for (int i = 0; i < 5; i++) /* warm-up */
            CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
        for (int i = 0; i < 5; i++) {
            float ms = 0;
            CU(cudaEventRecord(a, st));
            CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
            CU(cudaEventRecord(b, st));
            CU(cudaEventSynchronize(b));
            CU(cudaEventElapsedTime(&ms, a, b));
            bw[i] = 2.0 * (double)bytes / (ms * 1e-3);
        }
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        all = median(bw, 5);
    }
    RC(rcc_broadcast(&all, &all, 1, RCC_FLOAT64, 0, comm));
    return all;
}

/* Input element i of rank r, and the sum over the ranks. */
static float input(int r, size_t i) { return (float)((r + 1) * (int)(i % 97 + 1)); }
static float expected(size_t i) { return (float)(nranks * (nranks + 1) / 2 * (int)(i % 97 + 1)); }

static uint64_t count_wrong(const float *got, size_t count)
{
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += got[i] != expected(i);
    return wrong;
}

int main(int argc, char **argv)
{
    size_t minb = 1u << 20, maxb = 64u << 20, factor = 4;
    int iters = 10, warmup = 2, rounds = 3, c;
    setvbuf(stdout, NULL, _IOLBF, 0); /* a row at a time, also into a pipe that may be cut */
    while ((c = getopt(argc, argv, "b:e:f:n:w:r:h")) != -1) {
        switch (c) {
        case 'b': minb = parse_size(optarg); break;
        case 'e': maxb = parse_size(optarg); break;
        case 'f': factor = (size_t)atoi(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        default:
            fprintf(stderr,
                    "usage: ringcc-run -n N %s [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] "
                    "[-w WARMUP] [-r ROUNDS]\n",
                    NAME);
            return c == 'h' ? 0 : 2;
        }
    }
    if (factor < 2 || iters < 1 || warmup < 0 || rounds < 1 || rounds > MAX_ROUNDS || minb > maxb)
        die("bad options", "need -f >= 2, -n >= 1, -w >= 0, 1 <= -r <= 15, -b <= -e");
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    const char *local = getenv("LOCAL_RANK"); /* torchrun's; else the global rank */
    if (!local)
        local = getenv("RCC_RANK");
    CU(cudaSetDevice((local ? atoi(local) : 0) % ndev));
    RC(rcc_comm_init_env(&comm, NULL));
    RC(rcc_comm_rank(comm, &rank));
    RC(rcc_comm_size(comm, &nranks));
    if (!rcc_cuda_available())
        die("rcc_cuda_available", rcc_last_error(NULL));
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    float *hsend = malloc(maxb), *hrecv = malloc(maxb), *check = malloc(maxb);
    float *dsend, *drecv;
    CU(cudaMalloc((void **)&dsend, maxb));
    CU(cudaMalloc((void **)&drecv, maxb));
    if (!hsend || !hrecv || !check)
        die("malloc", "out of memory");
    for (size_t i = 0; i < maxb / 4; i++)
        hsend[i] = input(rank, i);
    CU(cudaMemcpy(dsend, hsend, maxb, cudaMemcpyHostToDevice));
    double busfac = nranks > 1 ? 2.0 * (nranks - 1) / nranks : 1.0;
    double d2d = d2d_bandwidth(drecv, dsend, maxb, st); /* into drecv: dsend is the input */
    int per_gpu = (nranks + ndev - 1) / ndev; /* ranks spread round-robin over the GPUs */
    if (rank == 0)
        printf("# %s: %d ranks, float32 sum, %d iterations after %d warm-up, %d rounds "
               "(median)\n# device-to-device cudaMemcpy: %.1f GB/s (read + write, %zu bytes); "
               "%d rank%s per GPU\n#%11s %12s %10s %12s %10s %8s %10s %9s %8s\n",
               NAME, nranks, iters, warmup, rounds, d2d / 1e9, maxb, per_gpu,
               per_gpu == 1 ? "" : "s", "bytes", "host us", "host GB/s", "device us", "dev GB/s",
               "dev/host", "bound us", "dev/bound", "#wrong");
    int status = 0;
    for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
        size_t count = bytes / 4;
        double host_t[MAX_ROUNDS], dev_t[MAX_ROUNDS];
        uint64_t wrong = 0;
        for (int r = 0; r < rounds; r++) {
            for (int i = 0; i < warmup; i++)
                RC(rcc_allreduce(hsend, hrecv, count, RCC_FLOAT32, RCC_SUM, comm));
            RC(rcc_barrier(comm));
            memset(hrecv, 0, bytes);
            double t0 = now_s();
            for (int i = 0; i < iters; i++)
                RC(rcc_allreduce(hsend, hrecv, count, RCC_FLOAT32, RCC_SUM, comm));
            host_t[r] = (now_s() - t0) / iters;
            wrong += count_wrong(hrecv, count);

            for (int i = 0; i < warmup; i++)
                RC(rcc_allreduce_stream(dsend, drecv, count, RCC_FLOAT32, RCC_SUM, comm, st));
            CU(cudaMemsetAsync(drecv, 0, bytes, st));
            CU(cudaStreamSynchronize(st));
            RC(rcc_barrier(comm));
            t0 = now_s();
            for (int i = 0; i < iters; i++)
                RC(rcc_allreduce_stream(dsend, drecv, count, RCC_FLOAT32, RCC_SUM, comm, st));
            CU(cudaStreamSynchronize(st));
            dev_t[r] = (now_s() - t0) / iters;
            rcc_result_t async = RCC_SUCCESS;
            RC(rcc_comm_get_async_error(comm, &async));
            if (async != RCC_SUCCESS)
                die("the stream operations failed", rcc_last_error(comm));
            CU(cudaMemcpy(check, drecv, bytes, cudaMemcpyDeviceToHost));
            wrong += count_wrong(check, count);
        }
        uint64_t all_wrong = 0;
        RC(rcc_allreduce(&wrong, &all_wrong, 1, RCC_UINT64, RCC_SUM, comm));
        /* The slowest rank's time is the operation's. */
        double ht = median(host_t, rounds), dt = median(dev_t, rounds), t[2] = {ht, dt}, tmax[2];
        RC(rcc_allreduce(t, tmax, 2, RCC_FLOAT64, RCC_MAX, comm));
        double bound = per_gpu * 5.0 * (double)bytes * (nranks - 1) / nranks / d2d;
        if (rank == 0)
            printf("%12zu %12.1f %10.3f %12.1f %10.3f %8.3f %10.1f %9.2f %8llu\n", bytes,
                   tmax[0] * 1e6, busfac * (double)bytes / tmax[0] / 1e9, tmax[1] * 1e6,
                   busfac * (double)bytes / tmax[1] / 1e9, tmax[0] / tmax[1], bound * 1e6,
                   tmax[1] / bound, (unsigned long long)all_wrong);
        status |= all_wrong != 0;
    }
    cudaStreamDestroy(st);
    cudaFree(dsend);
    cudaFree(drecv);
    free(hsend), free(hrecv), free(check);
    RC(rcc_comm_destroy(comm));
    return status;
}
