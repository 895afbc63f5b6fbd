/* Command-line values shared by the benchmarks. */
#ifndef RINGCC_BENCH_ARGS_H
#define RINGCC_BENCH_ARGS_H

#include <stddef.h>

/* A size: digits with an optional K, M, G or T suffix (powers of 1024),
 * optionally followed by B or iB. 0 and *out, or -1 when `s` is not one. */
int bench_parse_size(const char *s, size_t *out);

/* A decimal integer in [lo, hi]: 0 and *out, or -1. */
int bench_parse_int(const char *s, long lo, long hi, long *out);

#endif /* RINGCC_BENCH_ARGS_H */
