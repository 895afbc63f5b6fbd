/*
 * The per-communicator progress thread: takes queued operations in call
 * order and drives them through the transports. It sleeps in epoll_wait on
 * the connections' descriptors (edge-triggered) and an eventfd, so an idle
 * or waiting rank costs no CPU; it re-checks everything after each wake-up.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_COLL /* log.h: the subsystem of this file's lines */
#include "clock.h"
#include "comm.h"
#include "log.h"
#include "params.h"

#define IDLE_WAIT_MS 1000  /* upper bound on one sleep; deadlines are re-checked */
#define ACTIVE_WAIT_MS 100 /* the same while an operation waits: it watches for strays */
#define SETTLE_LOOK_MS 1   /* ... while GPU work of ended stream operations runs (stream.c) */

/* One released record per thread, kept for that thread's next operation: a
 * blocking call makes and releases its record on the caller's thread, and a
 * record (1.3 KB, past malloc's per-thread cache) cost malloc's slow path
 * and a consolidation on every call. The key frees it when the thread
 * ends. Records with more than OP_SPARE_EXTRA bytes of their own data are
 * not kept. */
#define OP_SPARE_EXTRA 256
/* Under ASan every record is freed, so that a use after release shows. */
#if defined(__SANITIZE_ADDRESS__)
#define OP_SPARE_KEEP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OP_SPARE_KEEP 0
#endif
#endif
#ifndef OP_SPARE_KEEP
#define OP_SPARE_KEEP 1
#endif
static pthread_key_t op_spare_key;
static pthread_once_t op_spare_once = PTHREAD_ONCE_INIT;
static _Thread_local rcci_op_t *op_spare;

static void op_spare_make_key(void) { pthread_key_create(&op_spare_key, free); }

rcci_op_t *rcci_op_new(size_t extra)
{
    rcci_op_t *op = NULL;
    if (op_spare && extra <= OP_SPARE_EXTRA) {
        op = op_spare;
        op_spare = NULL;
        pthread_setspecific(op_spare_key, NULL);
        memset(op, 0, sizeof *op + extra);
    } else {
        op = calloc(1, sizeof *op + (extra <= OP_SPARE_EXTRA ? OP_SPARE_EXTRA : extra));
    }
    if (!op)
        return NULL;
    op->spare_fits = extra <= OP_SPARE_EXTRA;
    pthread_mutex_init(&op->lock, NULL);
    rcci_cond_init_monotonic(&op->cond);
    atomic_init(&op->refs, 1);
    return op;
}

void rcci_op_release(rcci_op_t *op)
{
    if (atomic_fetch_sub(&op->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&op->lock);
    pthread_cond_destroy(&op->cond);
    if (OP_SPARE_KEEP && op->spare_fits && !op_spare &&
        pthread_once(&op_spare_once, op_spare_make_key) == 0 &&
        pthread_setspecific(op_spare_key, op) == 0) {
        op_spare = op;
        return;
    }
    free(op);
}

void rcci_op_complete(rcci_op_t *op, rcc_result_t res)
{
    pthread_mutex_lock(&op->lock);
    op->result = res;
    if (res != RCC_SUCCESS)
        snprintf(op->error, sizeof op->error, "%s", rcci_tls_error());
    op->done = 1;
    pthread_cond_broadcast(&op->cond);
    pthread_mutex_unlock(&op->lock);
}

/* Ends the progress thread's part in `op`. */
static void progress_complete(rcci_op_t *op, rcc_result_t res)
{
    if (op->on_stream)
        rcci_stream_release(op);
    if (op->nmembers)
        rcci_group_complete_fused(op, res);
    rcci_op_complete(op, res);
    rcci_op_release(op);
}

/* What a failing rank tells its peers before it closes the connections,
 * so that every rank fails with the cause (a mismatch naming both calls,
 * the rank that was lost) rather than with "rank 3 closed the connection".
 * A cause that came from a peer already names its rank and goes on as is;
 * a cause seen here goes with the context that names the peer involved. */
static void progress_notify_peers(struct rcc_comm *comm, rcc_result_t res, const char *cause,
                                  const char *full)
{
    char text[RCCI_ERR_TEXT_BYTES + 32];
    if (res == RCC_ERR_ABORTED) {
        res = RCC_ERR_PEER_LOST;
        snprintf(text, sizeof text, "rank %d aborted its communicator", comm->rank);
    } else if (!strncmp(cause, "rank ", 5)) {
        snprintf(text, sizeof text, "%s", cause);
    } else {
        snprintf(text, sizeof text, "rank %d: %s", comm->rank, full);
    }
    rcci_ring_notify(comm, res, text);
    /* Connections peers made that nobody took yet would be reset unread
     * when the listener closes: take them, so they carry the notice too. */
    rcci_p2p_accept_waiting(comm);
    rcci_p2p_notify(comm, res, text);
}

/* A lost peer is often the echo of a failure that a notice on another
 * connection explains (the peer failed, told everyone and left before this
 * rank reached it): that cause, when there is one, is the better answer. */
#define ROOT_CAUSE_WAIT_NS (300 * 1000 * 1000ll)

static rcc_result_t progress_root_cause(struct rcc_comm *comm, rcc_result_t res)
{
    if (res != RCC_ERR_PEER_LOST)
        return res;
    char text[RCCI_ERR_TEXT_BYTES], cause[RCCI_ERR_TEXT_BYTES];
    snprintf(text, sizeof text, "%s", rcci_tls_error());
    snprintf(cause, sizeof cause, "%s", rcci_tls_cause());
    /* The notice may still be on its way: a rank that failed first tells
     * its ring neighbours, which pass it on, while this rank may have seen
     * only an intermediary's close (a leader of recursive doubling whose
     * exchange failed). Briefly, since a crash leaves no notice. */
    int64_t until = rcci_now_ns() + ROOT_CAUSE_WAIT_NS;
    for (;;) {
        rcc_result_t found = rcci_ring_probe(comm, 1);
        if (found == RCC_SUCCESS)
            found = rcci_p2p_find_notice(comm);
        if (found != RCC_SUCCESS)
            return found;
        if (rcci_now_ns() >= until)
            break;
        nanosleep(&(struct timespec){0, 2 * 1000 * 1000}, NULL);
    }
    rcci_tls_error_restore(text, cause);
    return res;
}

/* After a failure the byte streams are out of step: close the links so no
 * request keeps pointing into a caller's buffer, and fail all later work. */
/* The first failure is the communicator's state; later ones keep it. */
static void progress_mark_broken(struct rcc_comm *comm, rcc_result_t res, const char *text)
{
    pthread_mutex_lock(&comm->lock);
    if (comm->broken == RCC_SUCCESS) {
        comm->broken = res;
        snprintf(comm->broken_text, sizeof comm->broken_text, "%s", text);
    }
    pthread_mutex_unlock(&comm->lock);
}

static void progress_break(struct rcc_comm *comm, rcc_result_t res)
{
    char cause[RCCI_ERR_TEXT_BYTES];
    snprintf(cause, sizeof cause, "%s", rcci_tls_cause()[0] ? rcci_tls_cause() : rcci_tls_error());
    progress_mark_broken(comm, res, rcci_tls_error());
    if (res == RCC_ERR_ABORTED)
        RCC_INFO("communicator aborted by the application");
    else
        RCC_WARN("communicator failed: %s", rcci_tls_error());
    progress_notify_peers(comm, res, cause, comm->broken_text);
    rcci_ring_close(comm, 1);
    rcci_p2p_close(comm);
}

/* Waits up to `us` for the epoll set: below a millisecond (epoll_wait's
 * unit) by ppoll on the set itself, readable when an event is pending. */
static int progress_epoll_wait(struct rcc_comm *comm, struct epoll_event *ev, int max, int us)
{
    if (us % 1000 == 0)
        return epoll_wait(comm->epoll_fd, ev, max, us / 1000);
    struct pollfd p = {.fd = comm->epoll_fd, .events = POLLIN};
    struct timespec t = {us / 1000000, (long)(us % 1000000) * 1000};
    return ppoll(&p, 1, &t, NULL) > 0 ? epoll_wait(comm->epoll_fd, ev, max, 0) : 0;
}

static void progress_sleep(struct rcc_comm *comm, int us)
{
    struct epoll_event ev[16];
    int n = progress_epoll_wait(comm, ev, 16, us);
    int lfd = rcci_p2p_listener_fd(comm);
    for (int i = 0; i < n; i++) {
        if (ev[i].data.fd == comm->wake_fd) {
            uint64_t v;
            ssize_t r = read(comm->wake_fd, &v, sizeof v);
            (void)r;
        } else if (lfd >= 0 && ev[i].data.fd == lfd) {
            rcci_p2p_sweep_listener_now(comm);
        }
    }
}

static void progress_wake(struct rcc_comm *comm)
{
    uint64_t one = 1;
    ssize_t w = write(comm->wake_fd, &one, sizeof one);
    (void)w; /* a full counter already means "wake up" */
}

void rcci_progress_wake(struct rcc_comm *comm)
{
    if (comm->progress_started)
        progress_wake(comm);
}

/* Polls before sleeping when a wait is likely short: a wake-up from
 * epoll_wait costs more than a small message's trip on these hosts. */
static int64_t progress_spin_ns(void) { return rcci_param_int(RCCI_PARAM_SPIN_US) * 1000; }

/* Whether polling pays: a score of how often recent polls ran out before
 * the wait ended (then the rank slept anyway, having spent the CPU its
 * peers needed). Past half, waits sleep at once, except every 8th, which
 * polls to see whether things changed. */
#define SPIN_SCORE_MAX 1024

/* The poll budget: RCC_SPIN_US, or 1.5 times the recent waits' average
 * where that is longer but within SPIN_STRETCH times it. Where ranks
 * outnumber CPUs, some placements make the 8-byte waits of two ranks take
 * 50-100 us; with a fixed 50 us their polls run out, they sleep, and each
 * wait takes a wake-up more (the operation 105-150 us against 80-92 with
 * the stretch, 37-60 in the other placements). Waits longer than the
 * stretch (large operations where the CPU is the limit) keep the plain
 * budget: polling would not catch them, only take the CPU from peers. */
#define SPIN_STRETCH 4

static int64_t spin_budget(struct rcc_comm *comm, int64_t spin_ns)
{
    if (comm->spin_score > SPIN_SCORE_MAX / 2 && comm->spin_waits++ % 8 != 0)
        return 0;
    int64_t want = comm->wait_avg_ns + comm->wait_avg_ns / 2;
    return want < spin_ns || want > SPIN_STRETCH * spin_ns ? spin_ns : want;
}

static void wait_record(struct rcc_comm *comm, int64_t waited_ns)
{
    comm->wait_avg_ns += (waited_ns - comm->wait_avg_ns) / 8;
}

static void spin_record(struct rcc_comm *comm, int polled, int hit)
{
    if (!polled)
        return;
    if (hit)
        comm->spin_score -= comm->spin_score / 8;
    else
        comm->spin_score += (SPIN_SCORE_MAX - comm->spin_score) / 8;
}

/* Sleeps on the eventfd alone: while the progress thread has nothing to
 * run, traffic on the connections (a caller driving them inline) must not
 * wake it. Edges it misses are harmless: it advances everything it admits
 * before it waits on the connections again. And on the listener where a
 * transport needs this side to take a peer's connect (ibverbs), so that
 * an idle rank does not keep its peer waiting for the next round. */
static void progress_idle_sleep(struct rcc_comm *comm, int ms)
{
    struct pollfd pfd[2] = {{.fd = comm->wake_fd, .events = POLLIN},
                            {.fd = rcci_p2p_listener_fd(comm), .events = POLLIN}};
    if (poll(pfd, 2, ms) <= 0)
        return;
    if (pfd[0].revents) {
        uint64_t v;
        ssize_t r = read(comm->wake_fd, &v, sizeof v);
        (void)r;
    }
    if (pfd[1].revents)
        rcci_p2p_sweep_listener_now(comm);
}

/* Point-to-point operations have their own executor; the rest are schedules. */
static int exec_is_p2p(const rcci_op_t *op) { return op->coll == RCCI_COLL_P2P || op->rounds; }

void rcci_exec_waiting_for(struct rcc_comm *comm, const rcci_op_t *op, rcci_exec_t *exec, char *buf,
                           size_t size)
{
    if (op->on_stream)
        rcci_stream_waiting_for(comm, exec, buf, size);
    else
        rcci_exec_host_waiting_for(comm, op, exec, buf, size);
}

void rcci_exec_host_waiting_for(struct rcc_comm *comm, const rcci_op_t *op, rcci_exec_t *exec,
                                char *buf, size_t size)
{
    if (exec_is_p2p(op))
        rcci_p2p_waiting_for(comm, exec, buf, size);
    else
        rcci_coll_waiting_for(comm, exec, buf, size);
}

void rcci_exec_plan(const struct rcc_comm *comm, rcci_op_t *op)
{
    if (op->coll != RCCI_COLL_ALLREDUCE)
        return;
    rcci_allreduce_algo_t algo = rcci_allreduce_algo(comm, op->count * rcc_datatype_size(op->dtype));
    op->algo = (int)algo;
    op->rounds = algo != RCCI_ALLREDUCE_RING;
}

rcc_result_t rcci_exec_host_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **exec)
{
    op->started_ns = rcci_now_ns();
    if (op->coll == RCCI_COLL_P2P)
        return rcci_p2p_start(comm, op, exec);
    rcci_exec_plan(comm, op);
    if (op->rounds)
        return rcci_rounds_allreduce_start(comm, op, (rcci_allreduce_algo_t)op->algo, exec);
    return rcci_coll_start(comm, op, exec);
}

/* A communicator that failed fails later operations at once, with its story. */
static rcc_result_t exec_start_unless_broken(struct rcc_comm *comm, rcci_op_t *op,
                                             rcci_exec_t **exec)
{
    if (comm->broken != RCC_SUCCESS)
        return rcci_error(comm->broken, "the communicator failed earlier: %s", comm->broken_text);
    return op->on_stream ? rcci_stream_exec_start(comm, op, exec)
                         : rcci_exec_host_start(comm, op, exec);
}

rcc_result_t rcci_exec_host_advance(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t *exec,
                                    int *progressed, int *done)
{
    return exec_is_p2p(op) ? rcci_p2p_advance(comm, exec, progressed, done)
                           : rcci_coll_advance(comm, exec, progressed, done);
}

static rcc_result_t exec_advance(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t *exec,
                                 int *progressed, int *done)
{
    return op->on_stream ? rcci_stream_exec_advance(comm, exec, progressed, done)
                         : rcci_exec_host_advance(comm, op, exec, progressed, done);
}

/* The bytes per rank of an operation whose pace counts (pace.h): blocking
 * or not, an allreduce of host memory among 2 or more ranks, larger than
 * RCC_SMALL_MAX_BYTES; else 0. Small ones neither poll long nor count:
 * latency sets their pace (8 B: well under 1 MB/s), and a size not seen
 * yet takes the latest pace. */
static uint64_t pace_bytes(const struct rcc_comm *comm, const rcci_op_t *op)
{
    if (op->coll != RCCI_COLL_ALLREDUCE || op->on_stream || comm->nranks < 2)
        return 0;
    uint64_t bytes = (uint64_t)op->count * rcc_datatype_size(op->dtype);
    return bytes > (uint64_t)rcci_param_int(RCCI_PARAM_SMALL_MAX_BYTES) ? bytes : 0;
}

/* An operation that succeeded: its pace, from its start to now, unless it
 * polled long (slow_ns > 0): the decision must rest on the pace of waits
 * that sleep, or polling where the CPU is the limit would slow operations
 * down enough to keep itself on. */
static void pace_note(struct rcc_comm *comm, const rcci_op_t *op, int64_t slow_ns)
{
    uint64_t bytes = pace_bytes(comm, op);
    if (bytes && slow_ns == 0)
        rcci_pace_record(&comm->pace, bytes, comm->nranks, rcci_now_ns() - op->started_ns);
}

/* How long a blocking allreduce polls in a wait where a slow link sets its
 * pace (RCC_SLOW_POLL_US, pace.h); 0 where the usual budget applies. */
static int64_t slow_poll_ns(struct rcc_comm *comm, const rcci_op_t *op)
{
    int64_t poll_us = rcci_param_int(RCCI_PARAM_SLOW_POLL_US);
    uint64_t bytes = pace_bytes(comm, op);
    if (poll_us == 0 || bytes == 0)
        return 0;
    int changed;
    int slow = rcci_pace_slow(&comm->pace, bytes, rcci_param_int(RCCI_PARAM_SLOW_BUSBW), &changed);
    if (changed) {
        int cls = rcci_pace_class(bytes);
        int first = !(comm->pace.told_set & 1ull << cls);
        comm->pace.told_set |= 1ull << cls;
        RCC_LOG_(first ? RCCI_LOG_INFO : RCCI_LOG_TRACE,
                 "allreduces of %llu to %llu bytes ran at %.0f MB/s bus bandwidth, %s "
                 "RCC_SLOW_BUSBW (%lld MB/s): their waits %s",
                 1ull << cls, (2ull << cls) - 1, rcci_pace_busbw(&comm->pace, bytes) / 1e3,
                 slow ? "below" : "not below", (long long)rcci_param_int(RCCI_PARAM_SLOW_BUSBW),
                 slow ? "poll up to RCC_SLOW_POLL_US before sleeping" : "poll as usual");
    }
    /* Every few operations (by number: on all ranks alike) sleep, to see
     * whether the pace without long polls changed. */
    return slow && op->seq % RCCI_PACE_SAMPLE_EVERY != 0 ? poll_us * 1000 : 0;
}

static void exec_finish(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t *exec)
{
    RCCI_TL(comm, rcci_tl_op(comm->tl, op));
    RCC_TRACE("%s #%u (count %zu, %s, %s, root %d%s%s) ran %.1f us",
              op->coll == RCCI_COLL_P2P ? "point-to-point" : rcci_coll_name(op->coll), op->seq,
              op->count, rcc_datatype_name(op->dtype), rcc_redop_name(op->redop), op->root,
              op->coll == RCCI_COLL_ALLREDUCE ? ", " : "",
              op->coll == RCCI_COLL_ALLREDUCE ? rcci_allreduce_algo_name(op->algo) : "",
              (rcci_now_ns() - op->started_ns) / 1e3);
    rcci_watch_finished(comm, op);
    if (op->on_stream)
        rcci_stream_exec_finish(comm, exec);
    else
        rcci_exec_host_finish(comm, op, exec);
}

void rcci_exec_host_finish(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t *exec)
{
    if (exec_is_p2p(op))
        rcci_p2p_finish(comm, exec);
    else
        rcci_coll_finish(comm, exec);
}

/* Operations running now. Collectives run one at a time, in call order;
 * point-to-point operations run together, however many are queued (an
 * irecv and the isend after it must not wait for each other), also beside
 * a running collective, whose ring links they do not use. */

typedef struct {
    rcci_op_t *op;
    rcci_exec_t *exec;
} active_t;

/* The next operation to admit, if any; taking one makes the progress thread
 * the engine's driver. Nothing while a caller drives inline. */
/* Doubles the active list; non-zero when out of memory. */
static int grow_active(active_t **act, int *cap)
{
    active_t *grown = realloc(*act, sizeof **act * (size_t)(*cap ? 2 * *cap : 16));
    if (!grown)
        return 1;
    *act = grown;
    *cap = *cap ? 2 * *cap : 16;
    return 0;
}

static rcci_op_t *progress_pop(struct rcc_comm *comm, int only_p2p, int *stop)
{
    pthread_mutex_lock(&comm->lock);
    rcci_op_t *op = comm->engine == RCCI_ENGINE_CALLER ? NULL : comm->queue_head;
    if (op && only_p2p && op->coll != RCCI_COLL_P2P)
        op = NULL;
    if (op) {
        comm->queue_head = op->next;
        if (!comm->queue_head)
            comm->queue_tail = NULL;
        comm->engine = RCCI_ENGINE_PROGRESS;
    }
    *stop = comm->stopping && comm->engine != RCCI_ENGINE_CALLER;
    pthread_mutex_unlock(&comm->lock);
    return op;
}

/* Nothing runs: hands the engine back, unless more is queued. */
static void progress_release_engine(struct rcc_comm *comm)
{
    pthread_mutex_lock(&comm->lock);
    if (comm->engine == RCCI_ENGINE_PROGRESS && !comm->queue_head)
        comm->engine = RCCI_ENGINE_IDLE;
    pthread_mutex_unlock(&comm->lock);
}

static int progress_caller_drives(struct rcc_comm *comm)
{
    pthread_mutex_lock(&comm->lock);
    int caller = comm->engine == RCCI_ENGINE_CALLER;
    pthread_mutex_unlock(&comm->lock);
    return caller;
}

/* Ends every running operation with `res` (whose detail is this thread's
 * error text), then breaks the communicator. */
static void progress_fail_all(struct rcc_comm *comm, active_t *act, int *nact, rcc_result_t res)
{
    res = progress_root_cause(comm, res);
    char error[RCCI_ERR_TEXT_BYTES];
    snprintf(error, sizeof error, "%s", rcci_tls_error());
    /* Broken before any operation ends: a stream released by one of them
     * (stream.c) must find the failure in rcc_comm_get_async_error. */
    progress_mark_broken(comm, res, error);
    for (int i = 0; i < *nact; i++) {
        exec_finish(comm, act[i].op, act[i].exec);
        rcci_tls_error_set(error);
        progress_complete(act[i].op, res);
    }
    *nact = 0;
    progress_break(comm, res);
}

static void *progress_main(void *arg)
{
    struct rcc_comm *comm = arg;
    rcci_log_set_rank(comm->rank);
    active_t *act = NULL;
    int nact = 0, cap = 0, abort_seen = 0, stop = 0;
    const int64_t spin_ns = progress_spin_ns();
    int64_t idle_since = rcci_now_ns(), quiet_since = idle_since;
    for (;;) {
        rcci_p2p_sweep_listener(comm);
        /* Stream operations whose GPU work runs late after a failure. */
        int settling = rcci_streams_settle(comm, 0);
        /* A caller driving inline handles the abort itself; the links are
         * closed here only once it is done with them. */
        if (!abort_seen && atomic_load(&comm->aborted) && !progress_caller_drives(comm)) {
            abort_seen = 1;
            rcc_result_t res = rcci_error(RCC_ERR_ABORTED, "the communicator was aborted");
            progress_fail_all(comm, act, &nact, res);
        }
        if (!progress_caller_drives(comm)) { /* a caller's thread failed it (rcci_progress_fail) */
            pthread_mutex_lock(&comm->lock);
            rcc_result_t failed = comm->fail_pending;
            comm->fail_pending = RCC_SUCCESS;
            pthread_mutex_unlock(&comm->lock);
            if (failed != RCC_SUCCESS)
                progress_fail_all(comm, act, &nact, rcci_error(failed, "%s", comm->fail_text));
        }
        /* An operation a caller started inline and handed over runs first:
         * it was called before anything queued. */
        if (nact < cap || !grow_active(&act, &cap)) {
            pthread_mutex_lock(&comm->lock);
            if (comm->adopt_op) {
                act[nact++] = (active_t){comm->adopt_op, comm->adopt_exec};
                comm->adopt_op = NULL, comm->adopt_exec = NULL;
            }
            pthread_mutex_unlock(&comm->lock);
        }
        /* Admit queued work: anything when idle, more point-to-point while
         * only point-to-point runs. */
        for (;;) {
            if (nact == cap && grow_active(&act, &cap))
                break; /* runs what it has; admits more when some end */
            int only_p2p = nact > 0;
            rcci_op_t *op = progress_pop(comm, only_p2p, &stop);
            if (!op)
                break;
            rcci_exec_t *exec = NULL;
            rcc_result_t res = exec_start_unless_broken(comm, op, &exec);
            if (res != RCC_SUCCESS) {
                exec_finish(comm, op, exec);
                progress_complete(op, res);
                continue;
            }
            act[nact++] = (active_t){op, exec};
            if (op->coll != RCCI_COLL_P2P)
                break;
        }
        if (nact == 0) {
            if (stop && !settling) /* each has its deadline */
                break;
            progress_release_engine(comm);
            progress_idle_sleep(comm, settling ? SETTLE_LOOK_MS : IDLE_WAIT_MS);
            continue;
        }
        int any = 0;
        comm->poll_us = 0;
        for (int i = 0; i < nact; i++) {
            int progressed, done;
            rcc_result_t res = exec_advance(comm, act[i].op, act[i].exec, &progressed, &done);
            if (res != RCC_SUCCESS) {
                progress_fail_all(comm, act, &nact, res);
                any = 1;
                break;
            }
            any |= progressed;
            if (done) {
                pace_note(comm, act[i].op, 0);
                exec_finish(comm, act[i].op, act[i].exec);
                progress_complete(act[i].op, RCC_SUCCESS);
                memmove(act + i, act + i + 1, sizeof *act * (size_t)(nact - i - 1));
                nact--, i--;
                any = 1;
            }
        }
        int64_t now = rcci_now_ns();
        if (!any) {
            /* Strays are judged against the oldest numbered operation
             * running: later ones (alltoalls beside it) may not have posted
             * their receives yet (a stream's waits for its stream), and
             * their messages are ahead of it, not behind. */
            const rcci_op_t *coll = NULL;
            for (int i = 0; i < nact; i++) {
                rcci_watch_stall(comm, act[i].op, act[i].exec, now);
                if (!coll && (act[i].op->coll != RCCI_COLL_P2P || act[i].op->alltoalls))
                    coll = act[i].op;
            }
            rcc_result_t res = rcci_watch_strays(comm, coll, now, now - quiet_since);
            if (res != RCC_SUCCESS) {
                progress_fail_all(comm, act, &nact, res);
                continue;
            }
        }
        if (any) {
            idle_since = quiet_since = now;
        } else if (now - idle_since < spin_ns) {
            sched_yield(); /* as in rcci_progress_run_inline */
        } else {
            int64_t slept = 0;
            RCCI_TL(comm, slept = rcci_tl_sleep(comm->tl));
            int us = comm->poll_us > 0 ? comm->poll_us : ACTIVE_WAIT_MS * 1000;
            progress_sleep(comm,
                           settling && us > SETTLE_LOOK_MS * 1000 ? SETTLE_LOOK_MS * 1000 : us);
            RCCI_TL(comm, rcci_tl_woke(comm->tl, slept));
            idle_since = rcci_now_ns();
        }
    }
    free(act);
    return NULL;
}

/* Numbers an operation as launched, in call order; under comm->lock.
 * Collectives are numbered per communicator (all ranks call the same
 * ones), alltoalls too, also inside a merged point-to-point operation;
 * point-to-point messages are numbered per peer (p2p.c). */
static void progress_launch(struct rcc_comm *comm, rcci_op_t *op)
{
    int numbers = op->coll == RCCI_COLL_P2P ? op->alltoalls : 1;
    op->seq = numbers ? comm->next_seq : 0;
    comm->next_seq += (uint32_t)numbers;
    op->launched = 1;
}

/* Work queued behind an inline operation (another thread's call) must not
 * wait for it: point-to-point operations run beside it, and its completion
 * may depend on them. So the running operation moves to the progress
 * thread, which runs them all as if it had started it. */
static int inline_hand_off(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t *exec)
{
    pthread_mutex_lock(&comm->lock);
    int hand_off = comm->queue_head != NULL;
    if (hand_off) {
        atomic_fetch_add(&op->refs, 1); /* the progress thread's */
        comm->adopt_op = op;
        comm->adopt_exec = exec;
        comm->engine = RCCI_ENGINE_PROGRESS;
    }
    pthread_mutex_unlock(&comm->lock);
    if (hand_off)
        progress_wake(comm);
    return hand_off;
}

int rcci_progress_run_inline(struct rcc_comm *comm, rcci_op_t *op)
{
    if (!rcci_param_int(RCCI_PARAM_INLINE) || !comm->progress_started)
        return 0;
    pthread_mutex_lock(&comm->lock);
    if (comm->engine != RCCI_ENGINE_IDLE || comm->queue_head || comm->stopping ||
        atomic_load(&comm->aborted)) {
        pthread_mutex_unlock(&comm->lock);
        return 0;
    }
    comm->engine = RCCI_ENGINE_CALLER;
    progress_launch(comm, op);
    pthread_mutex_unlock(&comm->lock);

    rcci_exec_t *exec = NULL;
    rcc_result_t res = exec_start_unless_broken(comm, op, &exec);
    const int64_t spin_ns = progress_spin_ns(), slow_ns = slow_poll_ns(comm, op);
    int64_t idle_since = rcci_now_ns(), quiet_since = idle_since, budget = -1, wait_since = 0;
    int slept = 0, long_wait = 0;
    while (res == RCC_SUCCESS) {
        if (atomic_load(&comm->aborted)) {
            res = rcci_error(RCC_ERR_ABORTED, "the communicator was aborted");
            break;
        }
        int progressed, done;
        comm->poll_us = 0;
        res = exec_advance(comm, op, exec, &progressed, &done);
        if ((progressed || done) && budget >= 0) { /* a wait ended */
            /* Long polls say nothing of whether the usual ones pay. */
            spin_record(comm, budget > 0 && !long_wait, !slept);
            wait_record(comm, rcci_now_ns() - wait_since);
            budget = -1, slept = 0, long_wait = 0;
        }
        if (res != RCC_SUCCESS || done)
            break;
        if (inline_hand_off(comm, op, exec))
            return 1; /* the progress thread ends it; the caller waits for it */
        int64_t now = rcci_now_ns();
        if (progressed) {
            idle_since = quiet_since = now;
            continue;
        }
        rcci_watch_stall(comm, op, exec, now);
        res = rcci_watch_strays(comm, op, now, now - quiet_since);
        if (res != RCC_SUCCESS)
            break;
        if (budget < 0) {
            budget = spin_budget(comm, spin_ns);
            if (slow_ns > budget)
                budget = slow_ns, long_wait = 1;
            wait_since = idle_since;
        }
        if (now - idle_since < budget) {
            /* Polling ranks may outnumber the cores: let the one whose
             * message we wait for run. */
            sched_yield();
            continue;
        }
        if (slow_ns > 0 && budget == slow_ns)
            budget = spin_ns; /* the long poll ran out: once per wait */
        /* The eventfd is in the set too: an abort wakes this wait. */
        struct epoll_event ev[16];
        int64_t waited = 0;
        RCCI_TL(comm, waited = rcci_tl_sleep(comm->tl));
        progress_epoll_wait(comm, ev, 16,
                            comm->poll_us > 0 ? comm->poll_us : ACTIVE_WAIT_MS * 1000);
        RCCI_TL(comm, rcci_tl_woke(comm->tl, waited));
        idle_since = rcci_now_ns();
        slept = 1;
    }
    if (res != RCC_SUCCESS)
        res = progress_root_cause(comm, res);
    else
        pace_note(comm, op, slow_ns);
    exec_finish(comm, op, exec);
    if (res != RCC_SUCCESS)
        progress_break(comm, res);
    rcci_op_complete(op, res);

    pthread_mutex_lock(&comm->lock);
    comm->engine = RCCI_ENGINE_IDLE;
    int wake = comm->queue_head || comm->stopping || atomic_load(&comm->aborted);
    pthread_mutex_unlock(&comm->lock);
    if (wake)
        progress_wake(comm);
    return 1;
}

rcc_result_t rcci_progress_health(struct rcc_comm *comm)
{
    pthread_mutex_lock(&comm->lock);
    rcc_result_t broken = comm->broken;
    int take = broken == RCC_SUCCESS && comm->engine == RCCI_ENGINE_IDLE && !comm->queue_head &&
               !comm->stopping && comm->progress_started && !atomic_load(&comm->aborted);
    if (take)
        comm->engine = RCCI_ENGINE_CALLER;
    pthread_mutex_unlock(&comm->lock);
    if (!take)
        return broken; /* whoever drives the engine sees failures as they come */
    /* Idle: nobody reads the connections, so look (nonblocking probes). */
    rcc_result_t res = rcci_ring_probe(comm, 0);
    if (res == RCC_SUCCESS)
        res = rcci_p2p_probe(comm);
    if (res != RCC_SUCCESS)
        progress_break(comm, res);
    pthread_mutex_lock(&comm->lock);
    comm->engine = RCCI_ENGINE_IDLE;
    broken = comm->broken;
    int wake = comm->queue_head || comm->stopping || atomic_load(&comm->aborted);
    pthread_mutex_unlock(&comm->lock);
    if (wake)
        progress_wake(comm);
    return broken;
}

rcc_result_t rcci_progress_watch(struct rcc_comm *comm, int fd)
{
    if (fd < 0)
        return RCC_SUCCESS;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.fd = fd};
    if (epoll_ctl(comm->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST)
        return rcci_error_errno(RCC_ERR_SYSTEM, errno, "epoll_ctl");
    return RCC_SUCCESS;
}

rcc_result_t rcci_progress_start(struct rcc_comm *comm)
{
    comm->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (comm->epoll_fd < 0)
        return rcci_error_errno(RCC_ERR_SYSTEM, errno, "epoll_create1");
    comm->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (comm->wake_fd < 0)
        return rcci_error_errno(RCC_ERR_SYSTEM, errno, "eventfd");
    rcc_result_t res = rcci_progress_watch(comm, comm->wake_fd);
    if (res == RCC_SUCCESS)
        res = rcci_ring_watch(comm);
    if (res == RCC_SUCCESS) /* busy, it takes a peer's connect as soon, too */
        res = rcci_progress_watch(comm, rcci_p2p_listener_fd(comm));
    if (res != RCC_SUCCESS)
        return res;
    int rc = pthread_create(&comm->progress, NULL, progress_main, comm);
    if (rc != 0)
        return rcci_error_errno(RCC_ERR_SYSTEM, rc, "cannot start the progress thread");
    comm->progress_started = 1;
    return RCC_SUCCESS;
}

void rcci_progress_stop(struct rcc_comm *comm)
{
    if (!comm->progress_started)
        return;
    pthread_mutex_lock(&comm->lock);
    comm->stopping = 1;
    pthread_mutex_unlock(&comm->lock);
    progress_wake(comm);
    pthread_join(comm->progress, NULL);
    comm->progress_started = 0;
    rcci_streams_settle(comm, 1); /* none left where the thread ran to its end */
}

rcc_result_t rcci_progress_enqueue(struct rcc_comm *comm, rcci_op_t *op)
{
    pthread_mutex_lock(&comm->lock);
    if (comm->stopping || atomic_load(&comm->aborted)) {
        pthread_mutex_unlock(&comm->lock);
        return rcci_error(RCC_ERR_INVALID_USAGE, "the communicator is being destroyed or aborted");
    }
    progress_launch(comm, op);
    atomic_fetch_add(&op->refs, 1); /* the progress thread's */
    op->next = NULL;
    if (comm->queue_tail)
        comm->queue_tail->next = op;
    else
        comm->queue_head = op;
    comm->queue_tail = op;
    pthread_mutex_unlock(&comm->lock);
    progress_wake(comm);
    return RCC_SUCCESS;
}

int rcci_op_done(rcci_op_t *op)
{
    pthread_mutex_lock(&op->lock);
    int done = op->done;
    pthread_mutex_unlock(&op->lock);
    return done;
}

rcc_result_t rcci_op_wait(rcci_op_t *op)
{
    pthread_mutex_lock(&op->lock);
    /* The progress thread ends every operation: by success, by error, by
     * abort, or when it stalls past the timeout; so this wait is bounded. */
    while (!op->done)
        pthread_cond_wait(&op->cond, &op->lock);
    rcc_result_t res = op->result;
    if (res != RCC_SUCCESS)
        rcci_tls_error_set(op->error);
    pthread_mutex_unlock(&op->lock);
    return res;
}

void rcci_progress_fail(struct rcc_comm *comm, rcc_result_t res)
{
    char text[RCCI_ERR_TEXT_BYTES];
    snprintf(text, sizeof text, "%s", rcci_tls_error());
    progress_mark_broken(comm, res, text);
    pthread_mutex_lock(&comm->lock);
    if (comm->fail_pending == RCC_SUCCESS) {
        comm->fail_pending = res;
        snprintf(comm->fail_text, sizeof comm->fail_text, "%s", text);
    }
    pthread_mutex_unlock(&comm->lock);
    rcci_progress_wake(comm);
}

void rcci_progress_abort(struct rcc_comm *comm)
{
    atomic_store(&comm->aborted, 1);
    rcci_progress_wake(comm);
}
