/*
 * A one-line progress report for long sweeps ("[ 7/24] allreduce float32 4 MiB"),
 * rewritten in place on the terminal and erased at the end. Only when a person
 * watches: stderr is a terminal, or the launcher's is (ringcc-run sets
 * RCC_RUN_TTY=1 then, and the line goes to /dev/tty, past the launcher's
 * line-by-line relay). Never into files or pipes.
 */
#ifndef RINGCC_BENCH_TTYPROGRESS_H
#define RINGCC_BENCH_TTYPROGRESS_H

/* Starts a report of `total` steps; a no-op unless a terminal watches. */
void ttyprogress_start(int total);
/* Step `done` (1-based) of the total, with what it is doing. */
void ttyprogress_step(int done, const char *what);
/* Erases the line. */
void ttyprogress_end(void);

#endif /* RINGCC_BENCH_TTYPROGRESS_H */
