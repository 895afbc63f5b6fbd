/* Monotonic time and deadlines, in nanoseconds. */
#ifndef RINGCC_CLOCK_H
#define RINGCC_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline int64_t rcci_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Milliseconds until `deadline_ns` for poll()/epoll_wait(), rounded up,
 * clamped to [0, cap_ms]. */
static inline int rcci_ms_until(int64_t deadline_ns, int cap_ms)
{
    int64_t left = deadline_ns - rcci_now_ns();
    if (left <= 0)
        return 0;
    int64_t ms = (left + 999999) / 1000000;
    return ms > cap_ms ? cap_ms : (int)ms;
}

/* A condition variable whose timed waits use CLOCK_MONOTONIC, so a change
 * of the wall clock does not stretch or cut a deadline. */
static inline void rcci_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &ca);
    pthread_condattr_destroy(&ca);
}

#endif /* RINGCC_CLOCK_H */
