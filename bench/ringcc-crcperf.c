/*
 * ringcc-crcperf — throughput of the CRC32C paths (lib/crc32c.c) on one core.
 *
 *   ringcc-crcperf [-t SECONDS]
 *
 * For buffers of 4 KiB to 4 MiB, prints GB/s (10^9 bytes per second) of the portable
 * slice-by-8 path, of the SSE4.2 path where the CPU has it, and of rcci_crc32c_update (the one
 * the library takes). Each figure is the best of five runs of at least SECONDS/5 each over the
 * same buffer, so buffers up to the cache sizes are measured hot, as a chunk just received is.
 * Before timing, the paths must agree on every buffer (exit status 1 otherwise).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"

#define CRCPERF_NAME "ringcc-crcperf"
#define CRCPERF_MIN (4u << 10)
#define CRCPERF_MAX (4u << 20)
#define CRCPERF_RUNS 5

static double crcperf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best GB/s of fn over buf[0..len) in CRCPERF_RUNS runs of at least `run_s` seconds each. */
static double crcperf_measure(rcci_crc32c_fn fn, const unsigned char *buf, size_t len, double run_s)
{
    double best = 0;
    volatile uint32_t sink = 0; /* keeps the calls from being optimised away */
    for (int r = 0; r < CRCPERF_RUNS; r++) {
        uint64_t calls = 0;
        uint32_t crc = 0;
        double t0 = crcperf_now(), t;
        do {
            for (int k = 0; k < 8; k++)
                crc = fn(crc, buf, len);
            calls += 8;
            t = crcperf_now() - t0;
        } while (t < run_s);
        sink ^= crc;
        double gbs = (double)calls * (double)len / t / 1e9;
        if (gbs > best)
            best = gbs;
    }
    (void)sink;
    return best;
}

static void crcperf_usage(FILE *f)
{
    fprintf(f,
            "Usage: %s [-t SECONDS]\n"
            "Measure CRC32C throughput (GB/s = 10^9 bytes/s, one core) of each path for\n"
            "buffers of 4 KiB to 4 MiB: the portable slice-by-8 path, the SSE4.2 path (where\n"
            "the CPU has it) and rcci_crc32c_update, which takes the best of them.\n"
            "\n"
            "  -t SECONDS   time per figure, best of %d runs (default 1; decimals allowed)\n"
            "  -h           show this help\n"
            "Exit status: 0, or 1 when the paths disagree on a buffer, 2 for bad arguments.\n",
            CRCPERF_NAME, CRCPERF_RUNS);
}

int main(int argc, char **argv)
{
    double seconds = 1;
    int c;
    while ((c = getopt(argc, argv, "t:h")) != -1) {
        char *end;
        switch (c) {
        case 't':
            errno = 0;
            seconds = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(seconds > 0 && seconds <= 3600)) {
                fprintf(stderr, "%s: -t: expected seconds from 0 to 3600, not '%s'\n", CRCPERF_NAME,
                        optarg);
                return 2;
            }
            break;
        case 'h': crcperf_usage(stdout); return 0;
        default: crcperf_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", CRCPERF_NAME, argv[optind]);
        crcperf_usage(stderr);
        return 2;
    }

    unsigned char *buf = aligned_alloc(4096, CRCPERF_MAX);
    if (!buf) {
        fprintf(stderr, "%s: cannot allocate %u bytes\n", CRCPERF_NAME, CRCPERF_MAX);
        return 1;
    }
    uint64_t x = 88172645463325252ull; /* xorshift64 */
    for (size_t i = 0; i < CRCPERF_MAX; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }

    rcci_crc32c_fn hw = rcci_crc32c_hw();
    printf("# %s: CRC32C, GB/s (10^9 bytes/s) on one core, best of %d runs of %.2f s\n",
           CRCPERF_NAME, CRCPERF_RUNS, seconds / CRCPERF_RUNS);
    printf("# rcci_crc32c_update takes the %s path%s\n", rcci_crc32c_impl(),
           hw ? "" : "; this CPU has no SSE4.2");
    printf("# %10s  %12s  %12s  %12s\n", "bytes", "slice-by-8", "sse4.2", "update");
    int bad = 0;
    for (size_t len = CRCPERF_MIN; len <= CRCPERF_MAX; len *= 4) {
        uint32_t p = rcci_crc32c_update_portable(0, buf, len), u = rcci_crc32c_update(0, buf, len);
        if (p != u || (hw && hw(0, buf, len) != p)) {
            fprintf(stderr, "%s: the paths disagree on %zu bytes: portable 0x%08X, update 0x%08X\n",
                    CRCPERF_NAME, len, p, u);
            bad = 1;
            continue;
        }
        double run_s = seconds / CRCPERF_RUNS;
        double gp = crcperf_measure(rcci_crc32c_update_portable, buf, len, run_s);
        double gh = hw ? crcperf_measure(hw, buf, len, run_s) : 0;
        double gu = crcperf_measure(rcci_crc32c_update, buf, len, run_s);
        char hwtext[32] = "-";
        if (hw)
            snprintf(hwtext, sizeof hwtext, "%.2f", gh);
        printf("  %10zu  %12.2f  %12s  %12.2f\n", len, gp, hwtext, gu);
        fflush(stdout);
    }
    free(buf);
    return bad;
}
