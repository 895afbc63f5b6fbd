/*
 * Multi-process test harness: runs a function as N real ranks (forked
 * processes) that meet on loopback through the RCC_* environment, and
 * reports how each ended. Bounded: ranks still running at the deadline are
 * killed and the run fails.
 */
#ifndef RINGCC_TEST_MP_H
#define RINGCC_TEST_MP_H

#include <stddef.h>

#include "ringcc.h"

/* RCC_TEST_QUICK=1 (set by the sanitizer and valgrind runs of
 * tools/test-all, and for the mp_*_verbsim tests): every case runs, with
 * its large buffers cut down.
 * mp_scaled(n) is n, or n / 16 (odd when n is) in quick mode for n of a
 * million or more; smaller counts stay as they are. */
int mp_quick(void);
size_t mp_scaled(size_t n);
/* RCC_TEST_MAX_RANKS=N (the sanitizer and valgrind runs): mp_run passes runs of
 * more than N ranks without running them. */
int mp_max_ranks(void);

/* A rank's body; returns 0 on success (its exit status). */
typedef int (*mp_rank_fn)(int rank, int nranks, void *arg);

/* Runs fn on `nranks` ranks with RCC_RANK, RCC_NRANKS, RCC_ROOT (a free
 * loopback port) and RCC_SECRET set. Returns 0 when every rank exited 0
 * within timeout_s; otherwise prints what happened and returns -1. */
int mp_run(int nranks, mp_rank_fn fn, void *arg, int timeout_s);

/* Like mp_run, but reports each rank's exit status in statuses[] (a signal
 * shows as 128 + signo; -1 when killed at the deadline) instead of judging. */
int mp_run_status(int nranks, mp_rank_fn fn, void *arg, int timeout_s, int *statuses);

/* The loopback port of the current run's root (valid inside mp_run). */
int mp_root_port(void);

/* Memory shared by the ranks of one run (zeroed at start). */
void *mp_shared(size_t *size);

/* Whether the file at `path` (a log, say) has a line holding `text`. */
int mp_file_has(const char *path, const char *text);

/* Rank 0 makes a unique id and every rank gets it (MPI_Bcast style, via the
 * shared memory); `slot` distinguishes several ids in one run. */
rcc_result_t mp_bcast_unique_id(int rank, int slot, rcc_unique_id_t *id);

/* After a failure: aborts `comm`, then waits (at most 20 s) until `ranks`
 * ranks of the run have come here. A same-host peer may map this rank's
 * device buffers (cudaipc's windows) until its own communicator has ended,
 * and it learns of a failure in its own time: buffers are freed after this
 * (ringcc.h, stream collectives). */
void mp_abort_and_wait(rcc_comm_t comm, int ranks);

/* A communicator from the environment with a test timeout; aborts the rank
 * (exit 90 + message) on failure. */
rcc_comm_t mp_comm(int timeout_ms);

#define MP_FAIL(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "rank failure at %s:%d: ", __FILE__, __LINE__);                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        return 1;                                                                                  \
    } while (0)

#endif /* RINGCC_TEST_MP_H */
