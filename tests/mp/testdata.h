/*
 * Test data for the multi-process tests: deterministic inputs in every
 * dtype, the naive reference reduction they are checked against, buffers
 * with guard bytes, and element-wise comparison with a readable report.
 * Everything here is plain host code, the same in every rank.
 */
#ifndef RINGCC_TEST_TESTDATA_H
#define RINGCC_TEST_TESTDATA_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

/* What receive buffers hold before the call (memset byte). */
#define TD_UNWRITTEN 0xA5

/* Input element i of rank r for the operation or message numbered `seed`:
 * integers, exact in every dtype (seed 0 gives test_allreduce.c's original
 * values). PROD uses mostly ones so float products stay exact; integer
 * types also get large values so sums and products wrap (the reference
 * wraps the same way). */
int64_t td_gen(unsigned seed, int r, size_t i, rcc_datatype_t dt, rcc_redop_t op);

/* The ranks whose inputs are summed (default and minimum 8): from 9 ranks
 * up, float inputs are drawn from a narrower range, so that sums stay exact
 * in bfloat16 up to 256 ranks and in half up to 2048. Call before making
 * any data, with the same n on every rank. */
void td_set_nranks(int n);

/* buf[i] = v converted to dt (half and bfloat16 rounded as the library
 * does). */
void td_store(void *buf, size_t i, rcc_datatype_t dt, int64_t v);

/* buf[j] = rank r's input element start + j of operation `seed`, j < count. */
void td_fill(void *buf, size_t start, size_t count, unsigned seed, int r, rcc_datatype_t dt,
             rcc_redop_t op);

/* Naive reference: out[j] = input element start + j folded over the ranks
 * who[0..n) in that order (ranks 0..n-1 when who is NULL), with the type's
 * own arithmetic; AVG divides once at the end. */
void td_reference(void *out, size_t start, size_t count, const int *who, int n, unsigned seed,
                  rcc_datatype_t dt, rcc_redop_t op);

/* The element at p as text in s (len bytes), for failure messages; returns s. */
const char *td_elem_text(char *s, size_t len, const void *p, rcc_datatype_t dt);

/* The number of elements among the first `count` in which got and want
 * differ (bit for bit). */
size_t td_count_differing(const char *got, const char *want, size_t count, rcc_datatype_t dt);

/* Compares `count` elements of got with want; when they differ, prints the
 * first difference under the description `what` and returns 1. 0 when equal. */
int td_compare(const char *what, const char *got, const char *want, size_t count,
               rcc_datatype_t dt);

/* A buffer of `bytes` with TD_GUARD guard bytes on both sides; aborts when
 * out of memory. Free with td_gfree (NULL is fine). */
#define TD_GUARD 64
char *td_galloc(size_t bytes);
/* 1 when nothing wrote into the guards of a td_galloc buffer. */
int td_guards_intact(const char *p, size_t bytes);
void td_gfree(char *p);

/* Reads up to size - 1 bytes of the file at `path` into buf, NUL-terminated
 * (empty when it cannot be read), and removes the file: a rank's log. */
void td_take_file(const char *path, char *buf, size_t size);

/* A malloc'd copy of `bytes` bytes at p (at least one byte allocated);
 * aborts when out of memory. */
char *td_dup_bytes(const char *p, size_t bytes);

/* Destroys comm; returns 1 when that failed (printed) or bad is set, else 0. */
int td_finish(rcc_comm_t comm, int bad);

/* Seconds on CLOCK_MONOTONIC. */
double td_now_s(void);

#endif /* RINGCC_TEST_TESTDATA_H */
