/*
 * RCC_TIMELINE: what each rank's engine did and when, as a Chrome-trace /
 * Perfetto JSON file per process (chrome://tracing, ui.perfetto.dev), with
 * one event per operation and per step: every chunk sent and received (from
 * its post to its completion), every reduction and local copy, and every
 * time the engine slept waiting for the network. tools/ringcc-timeline
 * merges the ranks' files into one trace, aligned in time.
 *
 * The file is valid JSON at every moment, also after a crash: events are
 * kept in a buffer and written in one pwrite that overwrites the closing
 * "]" and ends with a new one (when the buffer fills, when an operation
 * ends and before the engine sleeps), so the file only ever goes from one
 * whole array to a longer one; a crash loses at most the events since.
 *
 * Cost: the engine calls these through RCCI_TL, one predictable branch on
 * comm->tl (NULL when RCC_TIMELINE is unset); nothing else runs.
 */
#ifndef RINGCC_TIMELINE_H
#define RINGCC_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "clock.h"

typedef struct rcci_timeline rcci_timeline_t;
struct rcc_comm;
struct rcci_op;

/* What a step moved: a ring chunk (lanes of the pipeline) or a point-to-point message. */
typedef enum { RCCI_TL_SEND, RCCI_TL_RECV, RCCI_TL_P2P_SEND, RCCI_TL_P2P_RECV } rcci_tl_dir_t;

/* Runs `call` only when the communicator records a timeline. */
#define RCCI_TL(comm, call)                                                                        \
    do {                                                                                           \
        if (__builtin_expect((comm)->tl != NULL, 0))                                               \
            call;                                                                                  \
    } while (0)

/* The time a span starts: 0 (and no clock read) when the timeline is off. */
static inline int64_t rcci_tl_now(const rcci_timeline_t *tl) { return tl ? rcci_now_ns() : 0; }

/* A timeline for `comm` when RCC_TIMELINE is set (NULL otherwise, or when
 * the file cannot be made: a warning says why). The process's file is made
 * by its first communicator, named after that one's rank. */
rcci_timeline_t *rcci_timeline_open(const struct rcc_comm *comm);
/* Writes what is buffered and frees the communicator's part. */
void rcci_timeline_close(rcci_timeline_t *tl);

/* The clock mark the merge aligns ranks on: call right after a barrier that
 * every rank leaves at about the same moment. */
void rcci_tl_sync(rcci_timeline_t *tl);
/* An operation from its start (op->started_ns) to now. */
void rcci_tl_op(rcci_timeline_t *tl, const struct rcci_op *op);
/* Step `item` of direction `dir` was posted now (ring chunks: at most
 * `slots` in flight per direction, so item % slots identifies it). */
void rcci_tl_post(rcci_timeline_t *tl, rcci_tl_dir_t dir, size_t item, int peer, size_t bytes);
/* ... and completed now (a no-op for an item that was never posted). */
void rcci_tl_done(rcci_timeline_t *tl, rcci_tl_dir_t dir, size_t item, uint32_t seq);
/* A point-to-point message posted at `start_ns`, completed now. */
void rcci_tl_msg(rcci_timeline_t *tl, rcci_tl_dir_t dir, int64_t start_ns, int peer, size_t bytes,
                 uint32_t seq);
/* Local work (`name`: "reduce", "copy") from `start_ns` to now. */
void rcci_tl_work(rcci_timeline_t *tl, const char *name, int64_t start_ns, size_t bytes);
/* The engine is about to sleep waiting for the network: writes what is
 * buffered (the file is then current while nothing happens) and returns
 * the time for rcci_tl_woke. */
int64_t rcci_tl_sleep(rcci_timeline_t *tl);
void rcci_tl_woke(rcci_timeline_t *tl, int64_t start_ns);

#endif /* RINGCC_TIMELINE_H */
