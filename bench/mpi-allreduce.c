/*
 * mpi-allreduce — the reference side of bench/compare-netlab.sh: MPI_Allreduce (float32, sum)
 * timed exactly as ringcc-perf times rcc_allreduce, so the two tables compare row by row.
 *
 *   mpirun -np 4 mpi-allreduce -b 8 -e 64M -f 4 -n 20 -w 3 [-i 0|1]
 *
 * -i 1 runs in place (MPI_IN_PLACE, the result over the input, as torch's all_reduce and
 * ringcc-perf -i 1 do); the default, 0, reduces into a separate output buffer.
 * Each row: one untimed checked call, WARMUP untimed calls, then ITERS calls timed one by one with
 * CLOCK_MONOTONIC; the per-iteration times are combined with an MPI_MAX allreduce and the median
 * of those slowest-rank times is reported, with algbw = size/time and busbw = algbw * 2(n-1)/n;
 * the last column, loop(us), is the slowest rank's whole timed loop / ITERS (as ringcc-perf).
 * The checked call uses small integers whose sum is exact in float32.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K':
    case 'k': v *= 1024; break;
    case 'M':
    case 'm': v *= 1024 * 1024; break;
    case 'G':
    case 'g': v *= 1024.0 * 1024 * 1024; break;
    case '\0': break;
    default: fprintf(stderr, "mpi-allreduce: bad size '%s'\n", s); exit(2);
    }
    return (size_t)v;
}

int main(int argc, char **argv)
{
    size_t minb = 8, maxb = 64 << 20;
    int factor = 2, iters = 20, warmup = 3, inplace = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b"))
            minb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-e"))
            maxb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-f"))
            factor = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n"))
            iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-w"))
            warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-i"))
            inplace = atoi(argv[i + 1]);
        else {
            fprintf(stderr,
                    "usage: mpi-allreduce [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] "
                    "[-i 0|1]\n");
            return 2;
        }
    }
    if (minb < 4 || maxb < minb || factor < 2 || iters < 1 || warmup < 0 ||
        (inplace != 0 && inplace != 1)) {
        fprintf(stderr, "mpi-allreduce: bad arguments\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    float *in = malloc(maxb), *out = malloc(maxb);
    /* Per iteration, then the whole loop's. */
    double *t = malloc(sizeof *t * ((size_t)iters + 1)),
           *tmax = malloc(sizeof *t * ((size_t)iters + 1));
    if (!in || !out || !t || !tmax) {
        fprintf(stderr, "mpi-allreduce: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0)
        printf("# mpi-allreduce: MPI_Allreduce float32 sum, %d ranks, %s\n"
               "#       size         count      type   redop    time(us)  algbw(GB/s)  busbw(GB/s) "
               "   #wrong    loop(us)\n",
               n, inplace ? "in-place" : "out-of-place");
    /* In place, every call sums over the previous result, as torch's all_reduce does in
     * gloo-allreduce.py: the values grow (and may reach infinity), which costs nothing. */
    const void *src = in;
    if (inplace)
        src = MPI_IN_PLACE;
    long total_wrong = 0;
    for (size_t size = minb; size <= maxb; size *= (size_t)factor) {
        size_t count = size / sizeof(float);
        for (size_t i = 0; i < count; i++)
            in[i] = (float)((i * 7 + (size_t)rank * 3) % 17);
        if (inplace)
            memcpy(out, in, count * sizeof(float));
        MPI_Allreduce(src, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        long wrong = 0, all_wrong = 0;
        for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += (float)((i * 7 + (size_t)r * 3) % 17);
            wrong += out[i] != want;
        }
        MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        total_wrong += all_wrong;
        for (int k = 0; k < warmup; k++)
            MPI_Allreduce(src, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double loop0 = now();
        for (int k = 0; k < iters; k++) {
            double t0 = now();
            MPI_Allreduce(src, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            t[k] = now() - t0;
        }
        t[iters] = now() - loop0;
        MPI_Allreduce(t, tmax, iters + 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0) {
            double loop = tmax[iters] / iters;
            qsort(tmax, (size_t)iters, sizeof *tmax, cmp_double);
            double med = iters % 2 ? tmax[iters / 2] : (tmax[iters / 2 - 1] + tmax[iters / 2]) / 2;
            double algbw = (double)(count * sizeof(float)) / med / 1e9;
            printf("  %10zu  %12zu  %8s  %6s  %10.2f  %11.3f  %11.3f  %8ld  %10.2f\n",
                   count * sizeof(float), count, "float32", "sum", med * 1e6, algbw,
                   algbw * 2.0 * (n - 1) / n, all_wrong, loop * 1e6);
            fflush(stdout);
        }
    }
    free(in), free(out), free(t), free(tmax);
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}
