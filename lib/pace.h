/*
 * The pace of recent allreduces, per size class, for the decision to poll
 * through a wait rather than sleep (progress.c). Where a 1 Gbit/s link, not
 * the CPU, sets the pace, a waiting rank's CPU has nothing else to do, and
 * the wake-up from epoll_wait (about 40 us on the lab's VMs) is what an
 * operation of 64 KiB loses against a peer that polls. Where the CPU is the
 * limit (ranks sharing cores, fast links), polling takes it from the peers
 * and loses more. The recent bus bandwidth of operations of that size tells
 * the two apart: a slow link caps it far below what the CPUs reach. It is
 * measured on operations that do not poll long, since polling where the
 * CPU is the limit lowers it (4 ranks on 2 CPUs, 16 KiB: 201 MB/s sleeping,
 * 140 polling), which would keep the polls on.
 *
 * Plain data, no locks: only the engine's driver (whoever runs the
 * collectives of a communicator, one thread at a time) touches it.
 */
#ifndef RINGCC_PACE_H
#define RINGCC_PACE_H

#include <stdint.h>

/* One operation in this many (by sequence number) of a class found slow
 * waits as usual: the pace is measured on those (progress.c). */
#define RCCI_PACE_SAMPLE_EVERY 8

/* Size classes: floor(log2(bytes)), the last one holding all larger. */
#define RCCI_PACE_CLASSES 48

typedef struct {
    /* Per class, a moving average of the bus bandwidth (bytes per ms, as
     * 2(n-1)/n x bytes / time); 0: none seen. */
    int64_t busbw[RCCI_PACE_CLASSES];
    int64_t latest;    /* the latest operation's, for a class not seen yet */
    uint64_t warm_set; /* per class, 1 once its first operation went by (not counted) */
    uint64_t slow_set; /* per class, 1 while the last decision was "slow" (for the log) */
    uint64_t told_set; /* per class, 1 once a change was logged at INFO (later ones: TRACE) */
} rcci_pace_t;

int rcci_pace_class(uint64_t bytes);

/* Records an allreduce of `bytes` per rank among `nranks` (2 or more) that
 * took `ns`. Nothing for empty or timeless operations, nor for the first of
 * a class, which may run cold (4 ranks on loopback: a communicator's first
 * allreduce of 16 KiB took 1.4 ms, the next ones 0.2). */
void rcci_pace_record(rcci_pace_t *pace, uint64_t bytes, int nranks, int64_t ns);

/* The recent bus bandwidth (bytes per ms) of operations of `bytes`: the
 * class's average, else the latest operation's; 0 when nothing was seen. */
int64_t rcci_pace_busbw(const rcci_pace_t *pace, uint64_t bytes);

/* Whether operations of `bytes` recently ran below `slow_mb_s` MB/s (10^6
 * bytes per second) of bus bandwidth; 0 when nothing was seen. Sets
 * *changed when the answer differs from the last one for that class. */
int rcci_pace_slow(rcci_pace_t *pace, uint64_t bytes, int64_t slow_mb_s, int *changed);

#endif /* RINGCC_PACE_H */
