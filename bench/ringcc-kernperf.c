/*
 * ringcc-kernperf: the bandwidth of the CUDA reduction kernels (lib/cuda/reduce_cuda.h) beside
 * cudaMemcpy device-to-device bandwidth measured in the same run (issue 6's acceptance figure:
 * sum for float32, bfloat16 and float16 at 256 MiB and more reaches 95% of memcpy's).
 *
 *   ringcc-kernperf [-n ITERS] [-s MIB]... [-h]    (default: -n 20 -s 256 -s 1024)
 *
 * Each figure is the median of ITERS runs, each timed alone with CUDA events after 3 warm-up
 * runs. A reduction moves 2 reads + 1 write of the buffer size (reduce_copy: 2 + 2), copy2 (the
 * allgather's forwarding copy, to two destinations) 1 + 2, memcpy 1 read + 1 write. MIB is the size of one buffer (a, b and dst each; 4 buffers are allocated).
 * Exit status 0, 1 on a CUDA error, 2 on bad arguments, 77 without a CUDA device.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/reduce_cuda.h"

#define MAX_ITERS 1000
#define MAX_SIZES 8
#define WARMUP 3

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "ringcc-kernperf: %s: %s\n", #call, cudaGetErrorString(e_));           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { W_MEMCPY, W_REDUCE, W_COPY, W_COPY2 };

struct work {
    int what;
    rcc_datatype_t dt;
    void *dst, *dst2, *a, *b;
    size_t bytes;
};

static void run_once(const struct work *w)
{
    size_t n = w->bytes / rcc_datatype_size(w->dt);
    rcc_result_t res = RCC_SUCCESS;
    switch (w->what) {
    case W_MEMCPY: CU(cudaMemcpyAsync(w->dst, w->a, w->bytes, cudaMemcpyDeviceToDevice, 0)); break;
    case W_REDUCE: res = rcci_cuda_reduce(w->dst, w->a, w->b, n, w->dt, RCC_SUM, 1, NULL); break;
    case W_COPY2: res = rcci_cuda_copy2(w->dst, w->dst2, w->a, w->bytes, NULL); break;
    default: res = rcci_cuda_reduce_copy(w->dst, w->dst2, w->a, w->b, n, w->dt, RCC_SUM, 1, NULL);
    }
    if (res != RCC_SUCCESS) {
        fprintf(stderr, "ringcc-kernperf: reduction failed: %s\n", rcc_result_name(res));
        exit(1);
    }
}

static int cmp_float(const void *p, const void *q)
{
    float x = *(const float *)p, y = *(const float *)q;
    return (x > y) - (x < y);
}

/* Median milliseconds of `iters` timed runs. */
static float time_ms(const struct work *w, int iters)
{
    static float ms[MAX_ITERS];
    cudaEvent_t start, stop;
    CU(cudaEventCreate(&start));
    CU(cudaEventCreate(&stop));
    for (int i = 0; i < WARMUP; i++)
        run_once(w);
    for (int i = 0; i < iters; i++) {
        CU(cudaEventRecord(start, 0));
        run_once(w);
        CU(cudaEventRecord(stop, 0));
        CU(cudaEventSynchronize(stop));
        CU(cudaEventElapsedTime(&ms[i], start, stop));
    }
    CU(cudaEventDestroy(start));
    CU(cudaEventDestroy(stop));
    qsort(ms, (size_t)iters, sizeof ms[0], cmp_float);
    return ms[iters / 2];
}

static void usage(FILE *f) { fprintf(f, "usage: ringcc-kernperf [-n ITERS] [-s MIB]... [-h]\n"); }

static double gbps(size_t bytes, int moves, float ms) { return (double)bytes * moves / ms / 1e6; }

int main(int argc, char **argv)
{
    int iters = 20, nsizes = 0;
    size_t mib[MAX_SIZES];
    setvbuf(stdout, NULL, _IOLBF, 0); /* a row at a time, also into a pipe that may be cut */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc && nsizes < MAX_SIZES)
            mib[nsizes++] = strtoul(argv[++i], NULL, 10);
        else {
            usage(stderr);
            return 2;
        }
    }
    if (iters < 1 || iters > MAX_ITERS) {
        fprintf(stderr, "ringcc-kernperf: -n must be 1 to %d\n", MAX_ITERS);
        return 2;
    }
    if (!nsizes) {
        mib[nsizes++] = 256;
        mib[nsizes++] = 1024;
    }
    char why[256];
    if (rcci_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIP: no CUDA device: %s\n", why);
        return 77;
    }
    struct cudaDeviceProp prop;
    int dev;
    CU(cudaGetDevice(&dev));
    CU(cudaGetDeviceProperties(&prop, dev));
    printf("# device %d: %s, sm_%d%d; median of %d runs; reduce counts 2 reads + 1 write, "
           "reduce_copy 2 + 2, copy2 1 + 2, memcpy 1 + 1\n",
           dev, prop.name, prop.major, prop.minor, iters);
    printf("%-10s %-12s %8s %10s %12s %12s %7s\n", "op", "dtype", "MiB", "ms", "GB/s",
           "memcpy GB/s", "ratio");

    const rcc_datatype_t dts[] = {RCC_FLOAT32, RCC_BFLOAT16, RCC_FLOAT16};
    double worst = 1e9;
    for (int s = 0; s < nsizes; s++) {
        size_t bytes = mib[s] << 20;
        void *buf[4];
        for (int k = 0; k < 4; k++) {
            CU(cudaMalloc(&buf[k], bytes));
            CU(cudaMemset(buf[k], 0x3c, bytes)); /* finite, normal values in every dtype */
        }
        struct work cp = {W_MEMCPY, RCC_UINT8, buf[2], NULL, buf[0], NULL, bytes};
        double mem = gbps(bytes, 2, time_ms(&cp, iters));
        for (int d = 0; d < 3; d++) {
            for (int what = W_REDUCE; what <= W_COPY; what++) {
                struct work w = {what, dts[d], buf[2], buf[3], buf[0], buf[1], bytes};
                float ms = time_ms(&w, iters);
                double bw = gbps(bytes, what == W_REDUCE ? 3 : 4, ms);
                printf("%-10s %-12s %8zu %10.3f %12.1f %12.1f %7.3f\n",
                       what == W_REDUCE ? "sum" : "sum+copy", rcc_datatype_name(dts[d]), mib[s], ms,
                       bw, mem, bw / mem);
                if (what == W_REDUCE && bw / mem < worst)
                    worst = bw / mem;
            }
        }
        /* The allgather's forwarding copy (one read, two writes): no dtype. */
        struct work c2 = {W_COPY2, RCC_UINT8, buf[2], buf[3], buf[0], NULL, bytes};
        float ms = time_ms(&c2, iters);
        double bw = gbps(bytes, 3, ms);
        printf("%-10s %-12s %8zu %10.3f %12.1f %12.1f %7.3f\n", "copy2", "-", mib[s], ms, bw, mem,
               bw / mem);
        for (int k = 0; k < 4; k++)
            CU(cudaFree(buf[k]));
    }
    printf("# acceptance (sum, each dtype and size, GB/s >= 0.95 x memcpy): lowest ratio %.3f: "
           "%s\n",
           worst, worst >= 0.95 ? "PASS" : "FAIL");
    return 0;
}
