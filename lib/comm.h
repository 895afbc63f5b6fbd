/*
 * The communicator and the operations queued on it. Internal.
 */
#ifndef RINGCC_COMM_H
#define RINGCC_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"
#include "coll/schedule.h"
#include "err.h"
#include "pace.h"
#include "ringcc.h"
#include "timeline.h"
#include "transport.h"

/* Point-to-point connections come in lanes: the user's sends and receives,
 * and collectives that exchange directly with every peer (small-message
 * allreduce), so that the two never meet in one ordered stream; and a
 * control lane that carries no data, only announcements of the operation a
 * stalled rank waits in and failure notices (watch.c). */
enum { RCCI_LANE_USER = 0, RCCI_LANE_COLL = 1, RCCI_LANE_CTRL = 2, RCCI_P2P_LANES = 3 };

/* Transport contexts a communicator can hold (rcci_transports[] is shorter). */
#define RCCI_COMM_MAX_TRANSPORTS 8

/* How many finished operations' signatures a communicator remembers. */
#define RCCI_FINISHED_SIGS 8

/* Allreduce algorithms (see rcci_allreduce_algo below). */
typedef enum {
    RCCI_ALLREDUCE_RING,
    RCCI_ALLREDUCE_RABENSEIFNER,
    RCCI_ALLREDUCE_RD,
    RCCI_ALLREDUCE_DIRECT,
    RCCI_ALLREDUCE_TWOSTEP,
    RCCI_ALLREDUCE_STAR
} rcci_allreduce_algo_t;

/* One message of a point-to-point operation (send, recv, alltoall). */
typedef struct {
    int peer;
    int is_send;
    char *buf;
    size_t bytes;
    int lane;
    int alltoall; /* 0, or k: part of the operation's k-th alltoall (its number: op seq + k - 1) */
    uint32_t seq; /* its number between the two ranks, where numbered ahead (rcci_p2p_number) */
} rcci_p2p_msg_t;

/* One collective call, from the caller's thread to the progress thread and
 * back. Reference-counted: the caller (its request) and the progress thread
 * each hold one, and completion is signalled on the operation itself, so a
 * request outlives its communicator safely. */
/* An operation ordered on a CUDA stream (stream.c): the stream stores
 * *start = ticket when it reaches the call; the progress thread stores
 * *done = ticket when the operation has ended, which the stream waits for. */
typedef struct {
    volatile uint32_t *start, *done; /* NULL: not on a stream */
    uint32_t ticket;
    int released;
    void *stream;
    /* The device path's pinned slots, taken at the call (a pinned
     * allocation may wait for the GPU, which the progress thread must not)
     * and given back with `done`. */
    struct rcci_streams *streams;
    void *pin;
    size_t pin_bytes;
    /* The chunked device path queued at the call (coll/devqueue.h): the
     * operation's GPU work, and what the progress thread needs to drive it.
     * Owned by the operation; freed with `done`. */
    struct rcci_devq *devq;
    /* Its GPU work had not run when the operation ended: the progress
     * thread lets the streams go once it has (stream.c, settling list). */
    int settling;
    int64_t settle_deadline_ns;
    struct rcci_op *settle_next;
} rcci_mark_t;

typedef struct rcci_op {
    struct rcci_op *next; /* queue link, under comm->lock */
    atomic_int refs;
    rcci_coll_t coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* as the schedule counts it (schedule.h) */
    rcc_datatype_t dtype;
    rcc_redop_t redop;
    int root;
    int rounds;    /* an allreduce run as rounds of exchanges (coll/allreduce_rounds.c) */
    int algo;      /* an allreduce's rcci_allreduce_algo_t */
    int device;    /* runs on device buffers, in device chunks (stream.c; in its signature) */
    int alltoalls; /* point-to-point: alltoall calls in it, numbered like collectives */
    int p2p_numbered; /* its messages' numbers taken already (rcci_p2p_number) */
    int on_stream; /* ordered on a CUDA stream (or stands for members that are) */
    rcci_mark_t mark;
    atomic_int launched; /* enqueued (inside a group: only at rcc_group_end) */
    /* A fused operation (group.c): one allreduce over `fusion_buf` standing
     * for its members, which complete when it does. */
    struct rcci_op **members;
    int nmembers;
    char *fusion_buf;
    size_t fusion_bytes;
    struct rcc_comm *fusion_comm; /* whose buffer cache fusion_buf goes back to */
    /* Point-to-point messages (RCCI_COLL_P2P), in call order. */
    rcci_p2p_msg_t *msgs;
    int nmsgs;
    uint32_t seq;                      /* per-communicator operation number, carried on the wire */
    int64_t started_ns, stall_next_ns; /* for stall reports (watch.c) */
    int announced;                     /* watch.c told the ring neighbours what it waits in */
    int spare_fits; /* its allocation may be kept for the next record (progress.c) */
    /* Completion, under `lock`. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    rcc_result_t result;
    char error[RCCI_ERR_TEXT_BYTES];
    _Alignas(max_align_t) char inline_data[]; /* what the operation owns: a barrier's
                                                  buffers, point-to-point messages */
} rcci_op_t;

/* Point-to-point connections, one per lane, peer and direction, made on
 * first use through the listener every rank keeps open (coll/p2p.c).
 * Messages between two ranks are matched in call order by per-direction
 * sequence numbers. */
typedef struct {
    rcci_conn_t **out, **in;
    uint32_t *out_seq, *in_seq;       /* messages numbered so far */
    uint32_t *out_posted, *in_posted; /* messages handed to the transport so far */
} rcci_p2p_lane_t;

typedef struct {
    const rcci_transport_t *tr;
    void *tctx;
    rcci_listener_t *listener;
    char *handles; /* every rank's listener handle, RCCI_HANDLE_BYTES each */
    rcci_p2p_lane_t lane[RCCI_P2P_LANES];
    int64_t swept_ns; /* when the progress thread last swept the listener */
} rcci_p2p_links_t;

/* One ring edge: its connections (RCC_NSOCKS, all to the same peer) and the
 * transport that runs them. The pipeline deals the messages of a large
 * collective (RCC_NSOCKS_MIN_BYTES) round-robin over the connections
 * (message i on conns[i % nconns]), the same on both ends, so that several
 * streams share the edge; smaller ones use conns[0]. */
#define RCCI_RING_MAX_CONNS 8
typedef struct {
    const rcci_transport_t *tr;
    void *tctx;
    rcci_conn_t *conns[RCCI_RING_MAX_CONNS];
    int nconns;
    size_t spread_min_bytes; /* operations smaller than this use conns[0] only */
    int peer;
} rcci_link_t;

struct rcc_comm {
    struct rcc_comm *live_next; /* live.c's list */
    int rank, nranks;
    uint64_t comm_id;
    int64_t timeout_ns;
    size_t chunk_bytes;
    size_t dev_chunk_bytes; /* RCC_DEVICE_CHUNK_BYTES: operations on the device ring */
    size_t ring_pass_bytes; /* RCC_RING_PASS_BYTES: host allreduces on the ring */
    int dev_pipeline;       /* RCCI_DEVPIPE_*: how device buffers go (stream.c, devring.c) */
    int cuda_device;        /* the GPU current at creation, -1 none: its stream calls use it */
    int slots;
    int algo_forced;            /* RCC_ALGO named an algorithm (else auto) ... */
    rcci_allreduce_algo_t algo; /* ... this one */
    int rd_leaders;             /* ranks that run recursive doubling's rounds (rcci_rd_leaders) */
    /* Fewer leaders than ranks, and RCC_RD_MOVE_LEADERS: the leaders follow
     * the ranks' CPUs (coll/allreduce_rounds.c); NULL otherwise. rd_lead[g]:
     * group g's leader as this rank knows it; rd_host[r]: rank r's host. */
    int *rd_lead;
    uint64_t *rd_host;
    rcci_bootstrap_t *bootstrap;

    /* Transports in use: one context per transport of rcci_transports[]. */
    void *tctx[RCCI_COMM_MAX_TRANSPORTS];
    rcci_link_t send_link; /* to rank + 1 */
    rcci_link_t recv_link; /* from rank - 1 */
    /* The device ring (devring.c): the same edges over a transport that
     * moves device memory (cudaipc), for collectives on device buffers;
     * nconns 0 where an edge has none. */
    rcci_link_t dsend_link, drecv_link;
    int devring_whole; /* every edge of the ring has a device connection (the same on all ranks) */
    int devring_ipc;   /* ... and every one maps its peer's memory (cudaipc: windows, window.h) */
    uint64_t direct_sends;         /* chunks written straight into the next rank's output */
    /* Registered memory (memreg.h), under reg_lock; sends that went from it
     * without a copy (counted by the engine's driver). */
    pthread_mutex_t reg_lock;
    struct rcc_memreg *regs;
    uint64_t zero_copy_sends;
    uint64_t gdr_sends; /* of which chunks of device memory (GPUDirect RDMA, coll/pipeline.c) */
    rcci_p2p_links_t p2p;
    int poll_us;           /* the longest sleep, while an executor waits on what epoll cannot see */
    int spin_score;        /* progress.c: how often polling before sleeping was in vain */
    int64_t wait_avg_ns;   /* progress.c: the caller's recent waits, a moving average */
    rcci_pace_t pace;      /* progress.c: recent allreduces' bus bandwidth, per size */
    int64_t watch_next_ns; /* watch.c: when to look for stray messages next */
    uint8_t (*heard)[RCCI_SIG_BYTES]; /* watch.c: per peer, the last operation it announced */
    uint8_t *heard_valid;
    /* watch.c: the signatures of the last few numbered operations this rank
     * finished (slot seq % RCCI_FINISHED_SIGS), so that a peer's data of an
     * operation already over here is named against what this rank called. */
    uint8_t finished_sig[RCCI_FINISHED_SIGS][RCCI_SIG_BYTES];
    uint8_t finished_set[RCCI_FINISHED_SIGS]; /* the slot holds one */
    unsigned spin_waits;
    char *slot_mem;     /* slots x chunk_bytes: receive slots for reductions */
    char *stage_mem;    /* slots x chunk_bytes: partial results waiting to be sent */
    char *fusion_cache; /* one spare fusion buffer (group.c), under `lock` */
    size_t fusion_cache_bytes;
    char *scratch; /* grow-only scratch for schedules that need it */
    size_t scratch_bytes;

    /* Progress thread and its queue. */
    pthread_t progress;
    int progress_started;
    int epoll_fd;
    int wake_fd; /* eventfd: new work, stop or abort */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    rcci_op_t *queue_head, *queue_tail;
    /* A caller's inline operation handed to the progress thread mid-way
     * (more work was queued behind it), under `lock`. */
    rcci_op_t *adopt_op;
    struct rcci_exec *adopt_exec;
    struct rcci_streams *streams; /* stream.c's state, made at the first stream call */
    uint32_t next_seq;
    uint64_t splits; /* rcc_comm_split calls so far (caller's thread only) */
    int stopping;
    /* Who drives the transports (under `lock`): nobody, the progress thread
     * (it has operations running), or a caller running a blocking call on
     * its own thread (rcci_progress_run_inline). One at a time. */
    enum { RCCI_ENGINE_IDLE, RCCI_ENGINE_PROGRESS, RCCI_ENGINE_CALLER } engine;
    atomic_int aborted;
    int callers;         /* threads inside a call on this communicator */
    rcc_result_t broken; /* sticky failure: later operations fail at once */
    char broken_text[RCCI_ERR_TEXT_BYTES];
    /* A failure found on a caller's thread for the progress thread to act
     * on (rcci_progress_fail), under `lock`. */
    rcc_result_t fail_pending;
    char fail_text[RCCI_ERR_TEXT_BYTES];
    char last_error[RCCI_ERR_TEXT_BYTES];
    rcci_timeline_t *tl; /* RCC_TIMELINE's recorder; NULL when off (timeline.h) */
};

/* Transport choice (devring.c). pick: the first transport of
 * rcci_transports[] both ranks started (transports[r]: bit i for
 * rcci_transports[i]) whose can_connect accepts `peer`; device 1: only
 * those that move device memory (RCCI_CAP_DEVICE_MEM); device 0: only
 * those that do not, unless RCC_TRANSPORT names one. `why` says why, for
 * the INFO line. devring_connect: makes the device ring's connections where
 * an edge has such a transport (every rank calls it: it may allgather). */
rcc_result_t rcci_pick_transport(struct rcc_comm *comm, const rcci_peer_info_t *info,
                                 const uint32_t *transports, int peer, int device, int *index,
                                 char *why, size_t why_size);
rcc_result_t rcci_devring_connect(struct rcc_comm *comm, const rcci_peer_info_t *info,
                                  const uint32_t *transports);

/* Checks the caller's rcc_config_t (NULL: nothing to check). Reads `size`
 * first and nothing past it: a config shorter than this version's fields
 * (or not from RCC_CONFIG_INITIALIZER: wrong magic) is refused, as are
 * blocking != 1, timeout_ms < 0 and chunk_bytes in 1..63. On success a
 * positive timeout_ms replaces *timeout_ns and a positive chunk_bytes
 * *chunk_bytes (both hold the defaults on entry); on failure neither is
 * touched. Returns RCC_SUCCESS or RCC_ERR_INVALID_ARGUMENT with the field
 * and its value in this thread's error text. */
rcc_result_t rcci_config_check(const rcc_config_t *config, int64_t *timeout_ns,
                               size_t *chunk_bytes);

/* Groups (group.c). While this thread is inside rcc_group_start/end,
 * operations are handed to the group instead of being queued; `owned` is
 * the request of a blocking call, which rcc_group_end waits for and frees. */
int rcci_group_active(void);
/* The open group's number, unique in the process (any thread's groups);
 * 0 outside groups. */
uint64_t rcci_group_serial(void);
rcc_result_t rcci_group_add(struct rcc_comm *comm, rcci_op_t *op, rcc_request_t owned);
/* Unpacks a fused operation's result into its members and completes them. */
void rcci_group_complete_fused(rcci_op_t *fused, rcc_result_t res);

/* Communicators handed to the application and not yet destroyed (live.c),
 * so that a call on a destroyed one is refused by its pointer, without
 * touching freed memory ("where detectable": a new communicator may reuse
 * the address). add: when init/split hands it out; remove: at the start of
 * destroy/abort (0: it was not live). check: RCC_ERR_INVALID_ARGUMENT
 * naming `fn` for NULL or a communicator that is not live. */
void rcci_live_add(struct rcc_comm *comm);
int rcci_live_remove(const struct rcc_comm *comm);
int rcci_live(const struct rcc_comm *comm);
rcc_result_t rcci_live_check(const struct rcc_comm *comm, const char *fn);

/* Brackets every public call on a communicator: abort waits for callers to
 * leave; leave records a failure as the communicator's last error. */
rcc_result_t rcci_comm_enter(struct rcc_comm *comm);
rcc_result_t rcci_comm_leave(struct rcc_comm *comm, rcc_result_t res);

/* The ring edges' connections taken together (ringlinks.c). probe: looks
 * at each without waiting (receiving edge first); a failure's text gets
 * "the ring connection from/to rank R (addr): " in front and is returned;
 * with `notices_only`, only a peer's notice counts (rcci_conn_notice),
 * not a plain close: it names the cause. notify: a failure
 * notice on each (transport notify). close: closes and forgets them all.
 * watch: adds them to the progress thread's epoll set. */
rcc_result_t rcci_ring_probe(struct rcc_comm *comm, int notices_only);
/* The ring's edges one by one, i < RCCI_RING_LINKS (nconns 0: none): the
 * host ring's and the device ring's, receiving edges first. */
#define RCCI_RING_LINKS 4
rcci_link_t *rcci_ring_link(struct rcc_comm *comm, int i);
/* A failed peer's notice on `conn`, waiting or taken earlier: the error it
 * carries (text set); RCC_SUCCESS when there is none — a healthy
 * connection, or a plain close. Never blocks. */
rcc_result_t rcci_conn_notice(const rcci_transport_t *tr, rcci_conn_t *conn);
/* Whether the peer on a failed `conn` said goodbye (a clean destroy): the
 * probes above and rcci_p2p_probe pass over such connections, so an idle
 * communicator is not broken by a peer that left; an operation that needs
 * the peer fails with its text. */
int rcci_conn_said_goodbye(const rcci_transport_t *tr, rcci_conn_t *conn);
/* Whether rank r said goodbye (destroyed its communicator cleanly) on any
 * connection with this rank, of the ring (rcci_ring_peer_said_goodbye) or
 * point-to-point. A clean destroy says it on the connections it knows, then
 * closes the rest with its listeners: one this rank made that r had not yet
 * accepted is then reset by r's kernel, with no goodbye of its own, and
 * means no failure. Peeks every such connection, taking announcements
 * (watch.c's) waiting there: for an idle communicator's probe only. */
int rcci_ring_peer_said_goodbye(struct rcc_comm *comm, int r);
int rcci_peer_said_goodbye(struct rcc_comm *comm, int r);
void rcci_ring_notify(struct rcc_comm *comm, rcc_result_t res, const char *text);
/* Closes the ring's connections. `failing` (the progress thread, after a
 * failure): the device ring's stay open where operations queue on them at
 * the call (another thread may be queuing now); their queued waits are
 * made to pass instead (queue_abort), and they close with the communicator.
 * RCCI_RING_LEAVE_DEVICE (teardown, GPU work still queued on them after
 * rcci_streams_quiesce's wait): the device ring's that map a peer's memory
 * (cudaipc) are forgotten, not closed, so that memory the GPU may still
 * write stays mapped (freeing this rank's own device memory waits for the
 * GPU: cudaFree synchronises). */
#define RCCI_RING_LEAVE_DEVICE 2
void rcci_ring_close(struct rcc_comm *comm, int failing);
rcc_result_t rcci_ring_watch(struct rcc_comm *comm);

/* Progress thread (progress.c). */
rcc_result_t rcci_progress_start(struct rcc_comm *comm);
/* Stops the thread after the queue drains (abort: at once). */
void rcci_progress_stop(struct rcc_comm *comm);
/* Makes the progress thread fail every pending operation with
 * RCC_ERR_ABORTED and close the links. Safe from any thread. */
void rcci_progress_abort(struct rcc_comm *comm);
/* Fails the communicator with `res` and the calling thread's error text,
 * from any thread: later operations fail at once, and the progress thread
 * fails the pending ones and tells the peers, as after a failure of its
 * own. For state a caller's thread cannot leave behind (a device-ring
 * operation queued in part: the connections' numbering moved on). */
void rcci_progress_fail(struct rcc_comm *comm, rcc_result_t res);
/* Wakes the progress thread (new work for it to look at). */
void rcci_progress_wake(struct rcc_comm *comm);
/* The communicator's failure, RCC_SUCCESS while healthy. An idle
 * communicator's connections are probed first (nonblocking), so a peer
 * that died or failed since is noticed; the failure then breaks it as an
 * operation's would (peers notified, links closed). Any thread. */
rcc_result_t rcci_progress_health(struct rcc_comm *comm);
/* Queues an operation (takes a reference for the progress thread). */
rcc_result_t rcci_progress_enqueue(struct rcc_comm *comm, rcci_op_t *op);

/* The stream path (stream.c). rcci_stream_usable: this build has CUDA and
 * the process sees a device (else rcci_stream_why says why). Submit ties a
 * checked operation (count > 0) to `stream` and queues it; it owns `op`
 * from the call on, also when it fails. */
int rcci_stream_usable(void);
const char *rcci_stream_why(void);
rcc_result_t rcci_stream_submit(struct rcc_comm *comm, rcci_op_t *op, void *stream);
/* Lets the streams waiting for `op` (and its members) go on; idempotent.
 * Every end of a stream operation passes here. Never waits for the GPU:
 * queued GPU work that has not run yet (after a failure, behind the
 * caller's earlier work) is left to rcci_streams_settle, and the streams
 * go on once it has. */
void rcci_stream_release(rcci_op_t *op);
/* The progress thread's part of that: ends the operations whose GPU work
 * has run since (or whose wait is past its deadline), without waiting;
 * with `wait`, until none is left (each has its deadline). Returns how many
 * are left. */
int rcci_streams_settle(struct rcc_comm *comm, int wait);
/* At the outermost rcc_group_end, after the launch: each stream of the
 * group's stream calls waits for their results. */
void rcci_stream_group_end(void);
/* At teardown, before the device ring's connections close: where GPU work
 * was given up on (rcci_streams_settle's deadline), whether the library's
 * stream has run everything queued on it, waited for until `deadline_ns`
 * (that work may still write into the slots and windows a close unmaps,
 * which would fault the GPU); 1 at once where nothing was given up on. */
int rcci_streams_quiesce(struct rcc_comm *comm, int64_t deadline_ns);
void rcci_streams_free(struct rcc_comm *comm);
/* For tests: the next stream operation gets ticket `next` (the counter's
 * wrap after 2^32 operations, without making them). */
rcc_result_t rcci_streams_set_next_ticket(struct rcc_comm *comm, uint32_t next);
/* How this process runs stream collectives on device buffers
 * (RCC_DEVICE_PIPELINE, auto resolved; docs/cuda.md, "Hardware queues"):
 * staged whole; chunk by chunk with all GPU work queued at the call
 * (coll/devqueue.h), over the host ring only or also over the device ring;
 * or the device ring with its GPU work queued by the progress thread as
 * chunks arrive (coll/pipeline.c: exposed to the hardware-queue deadlock,
 * kept to compare with on a GPU). */
enum {
    RCCI_DEVPIPE_WHOLE = 0,
    RCCI_DEVPIPE_QUEUED = 1,
    RCCI_DEVPIPE_RING = 2,
    RCCI_DEVPIPE_AUTO = 3, /* the setting only, never resolved to */
    RCCI_DEVPIPE_RING_PROGRESS = 4,
};
int rcci_stream_device_pipeline(void);
/* Runs a blocking call's operation to its end on the calling thread when
 * nothing else is queued or running (RCC_INLINE): no hand-off to the
 * progress thread and back, which dominates small messages. Returns 1 when
 * it ran (the result is on the operation), 0 when the caller must queue it. */
int rcci_progress_run_inline(struct rcc_comm *comm, rcci_op_t *op);

/* Records the result and wakes waiters (the caller keeps its reference). */
void rcci_op_complete(rcci_op_t *op, rcc_result_t res);
/* A new operation with one reference and `extra` bytes of inline_data. */
rcci_op_t *rcci_op_new(size_t extra);
void rcci_op_release(rcci_op_t *op);
/* Whether it finished (never blocks). */
int rcci_op_done(rcci_op_t *op);
/* Waits for it to finish; returns its result with the detail in this
 * thread's error text. */
rcc_result_t rcci_op_wait(rcci_op_t *op);

/* The pipeline that executes every collective's schedule (coll/pipeline.c),
 * called on the progress thread only. start prepares; advance moves it
 * forward without blocking, setting *progressed when anything happened and
 * *done at the end; finish releases what advance still holds (after an
 * error too). */
typedef struct rcci_exec rcci_exec_t;
rcc_result_t rcci_coll_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **exec);
rcc_result_t rcci_coll_advance(struct rcc_comm *comm, rcci_exec_t *exec, int *progressed,
                               int *done);
void rcci_coll_finish(struct rcc_comm *comm, rcci_exec_t *exec);
/* rcci_coll_start for buffers in device memory, in chunks of
 * rcci_coll_device_chunk bytes: chunks go through `pinned` (2 * slots *
 * that, of host_alloc memory: receive slots, then send slots), copies and reductions run on `dstream`, partial results go to
 * `dscratch`, device memory of rcci_coll_device_scratch_bytes (stream.c).
 * Edges of the device ring (comm->dsend_link/drecv_link) skip the staging:
 * receives that reduce land in `dslots` (slots * rcci_coll_device_chunk of
 * device memory; NULL: in place, or over the host ring), or are reduced
 * where the transport received them (in place), the rest in their
 * destination. */
struct rcci_devapi;
rcc_result_t rcci_coll_start_device(struct rcc_comm *comm, rcci_op_t *op,
                                    const struct rcci_devapi *dev, void *dstream, char *pinned,
                                    char *dscratch, char *dslots, rcci_exec_t **exec);
size_t rcci_coll_device_scratch_bytes(const struct rcc_comm *comm, const rcci_op_t *op);
/* The schedule a device operation runs (as rcci_coll_start_device cuts it;
 * partial results in `dscratch`), the connections per edge it deals its
 * messages over, and an error prefixed with the step it failed in: for
 * coll/devqueue.c, which runs the same schedules on the same wire. */
void rcci_coll_device_schedule(struct rcc_comm *comm, const rcci_op_t *op, char *dscratch,
                               rcci_schedule_t *sched);
size_t rcci_coll_edge_conns(const struct rcc_comm *comm, const rcci_op_t *op);
rcc_result_t rcci_coll_step_fail(struct rcc_comm *comm, const rcci_op_t *op,
                                 const rcci_schedule_t *sched, int peer, rcc_result_t res,
                                 size_t item, int is_send);
/* Tests *req of `link` (NULL: a step never posted, complete); *req is
 * cleared once it has ended, whether it failed or completed. */
rcc_result_t rcci_coll_test_req(const rcci_link_t *link, rcci_request_t **req, int *complete);
/* After a failure: one test of each request still out (by slot: n each
 * way), which frees those that ended; the rest stay queued on their
 * connection, which the progress thread closes after a failure. */
void rcci_coll_test_once(const rcci_link_t *sl, const rcci_link_t *rl, rcci_request_t **sreq,
                         rcci_request_t **rreq, size_t n);
/* The chunk (bytes) device operation `op` runs with: at most
 * RCC_DEVICE_CHUNK_BYTES, at least 2 per segment where every edge of the
 * ring has a device connection (devring_whole) and 8 where some are staged
 * through host memory; the same on every rank, as chunks must be. */
size_t rcci_coll_device_chunk(const struct rcc_comm *comm, const rcci_op_t *op);
/* Whether its chunks fit the device ring's receive slots, so receives are
 * reduced where they land (in place) and need no `dslots`. */
int rcci_coll_device_inplace(const struct rcc_comm *comm, const rcci_op_t *op);

/* The same three for point-to-point operations (coll/p2p.c), and closing
 * every point-to-point connection (after a failure, at destroy). */
rcc_result_t rcci_p2p_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **exec);
rcc_result_t rcci_p2p_advance(struct rcc_comm *comm, rcci_exec_t *exec, int *progressed, int *done);
void rcci_p2p_finish(struct rcc_comm *comm, rcci_exec_t *exec);
void rcci_p2p_close(struct rcc_comm *comm);
/* Takes the numbers of a point-to-point operation's messages now, for an
 * rcci_p2p_start that comes later: the progress thread admits operations in
 * call order, but a stream's runs once its stream reaches it, and messages
 * between two ranks must be numbered in call order on both. Idempotent. */
void rcci_p2p_number(struct rcc_comm *comm, rcci_op_t *op);
/* Accepts, without waiting, the point-to-point connections peers have
 * made that this rank has not taken yet (so that what arrives on them can
 * be looked at while an operation waits); failures are left for later. */
void rcci_p2p_accept_waiting(struct rcc_comm *comm);
/* This rank's connection to `peer` on the control lane, made now if need be
 * (bounded by the timeout). */
rcc_result_t rcci_p2p_ctrl_conn(struct rcc_comm *comm, int peer, rcci_conn_t **conn);
/* Probes every point-to-point connection (transport probe): the first
 * failure; find_notice: the first that is a peer's failure notice. */
rcc_result_t rcci_p2p_probe(struct rcc_comm *comm);
rcc_result_t rcci_p2p_find_notice(struct rcc_comm *comm);
/* Sends a failure notice (transport notify) on every point-to-point connection. */
void rcci_p2p_notify(struct rcc_comm *comm, rcc_result_t res, const char *text);
/* Turns away strangers' connections to the listener (at most every few
 * hundred ms): the progress thread calls it whatever it is doing, so a rank
 * that makes no new connection for a long time still closes them. */
void rcci_p2p_sweep_listener(struct rcc_comm *comm);
/* The same at once, when the listener's descriptor (below) said a peer's
 * connect waits for this rank to take it. */
void rcci_p2p_sweep_listener_now(struct rcc_comm *comm);
/* The transport's listener_fd: -1 where connects complete by themselves. */
int rcci_p2p_listener_fd(const struct rcc_comm *comm);
/* Algorithms made of rounds of messages on the collectives' lane (one
 * two-way connection per pair of ranks), run by the point-to-point executor
 * (rcci_p2p_advance/finish). `next` is called once at the start and again
 * each time all messages of a round are done: it handles what arrived, then
 * writes the next round's messages (at most max_msgs) into msgs and returns
 * 0, or returns 1 when the algorithm is over. `state` is the algorithm's
 * own (malloc'd; freed by rcci_p2p_finish, also on failure to start). */
typedef int (*rcci_round_fn)(const struct rcc_comm *comm, void *state, rcci_p2p_msg_t *msgs,
                             int *nmsgs);
rcc_result_t rcci_p2p_rounds_start(struct rcc_comm *comm, rcci_op_t *op, const char *name,
                                   rcci_round_fn next, void *state, int max_msgs,
                                   rcci_exec_t **exec);

/* Allreduce algorithms (coll/allreduce_rounds.c, except the ring): the
 * pipelined ring (bandwidth-optimal, 2(n-1) steps), Rabenseifner's
 * (reduce-scatter by recursive halving, allgather by recursive doubling:
 * the ring's bytes in 2 log2(n) rounds), recursive doubling (log2(n)
 * rounds, the whole buffer each), the direct exchange (every rank sends
 * its input to every other: one round, n(n-1) messages), twostep
 * (reduce-scatter and allgather by direct exchange: the ring's bytes in 2
 * rounds) and star (gathered, folded and sent back by one rank: 2 rounds,
 * 2(n-1) messages). */
/* RCC_ALGO's value: 1 with *algo set for a forced algorithm, 0 for
 * "auto", -1 for anything else. */
int rcci_allreduce_algo_named(const char *name, rcci_allreduce_algo_t *algo);
/* "ring", "rabenseifner", "rd", "direct", "twostep" or "star" (RCC_ALGO's names);
 * "?" for a value that is none. */
const char *rcci_allreduce_algo_name(int algo);
/* The algorithm for an allreduce of `bytes` per rank on `comm` (RCC_ALGO,
 * RCC_SMALL_MAX_BYTES, RCC_MID_MAX_BYTES): the same answer on every rank. */
rcci_allreduce_algo_t rcci_allreduce_algo(const struct rcc_comm *comm, size_t bytes);
/* How many of n ranks run recursive doubling's exchanges, the others
 * handing their inputs to them (coll/allreduce_rounds.c): the largest power
 * of two <= n, halved while some host would run more of them than it has
 * CPUs. host[r] and cpus[r]: rank r's host and the CPUs it sees. The same
 * answer on every rank given the same tables. */
int rcci_rd_leaders(int n, const uint64_t *host, const int *cpus);
/* Where p leaders of n ranks (groups as rcci_rd_leaders's) share CPUs:
 * lead[g] (group g's leader, a rank of the group) moves to a rank of group g
 * whose CPU no other leader of its host uses, for each g in order whose
 * leader shares its host and CPU with another group's. cpu[r]: rank r's CPU,
 * RCCI_CPU_UNKNOWN for none (never shared); host[r]: its host. Returns the
 * leaders moved. */
#define RCCI_CPU_UNKNOWN UINT32_MAX
int rcci_rd_move_leaders(int n, int p, const uint64_t *host, const uint32_t *cpu, int *lead);
/* Group g's first rank among n ranks under p leaders (g = p: n). */
int rcci_rd_group_start(int n, int p, int g);
/* Starts one of the round-based ones (not the ring). */
rcc_result_t rcci_rounds_allreduce_start(struct rcc_comm *comm, rcci_op_t *op,
                                         rcci_allreduce_algo_t algo, rcci_exec_t **exec);
/* Operation signatures (opsig.c): what every rank must agree on about an
 * operation, carried in the tag of each of its messages and compared by
 * the receiver (transport.h). Kinds are rcci_coll_t values plus these. */
enum { RCCI_SIG_SENDRECV = 0x40, RCCI_SIG_ALLTOALL = 0x41 };
typedef struct {
    uint32_t seq; /* operation number; 0 for point-to-point */
    int kind;
    rcc_datatype_t dtype;
    rcc_redop_t redop;
    int algo;
    int root;
    uint64_t count; /* elements; bytes for point-to-point messages */
    int device;     /* device buffers: cut in device chunks, over the device ring */
} rcci_sig_t;
void rcci_sig_encode(const rcci_sig_t *sig, uint8_t out[RCCI_SIG_BYTES]);
/* The tag of a message of collective `op` (seq: the message's number on its connection). */
void rcci_op_tag(const rcci_op_t *op, uint32_t seq, rcci_tag_t *tag);
/* A signature's operation number and kind (rcci_coll_t or RCCI_SIG_*). */
uint32_t rcci_sig_seq(const uint8_t sig[RCCI_SIG_BYTES]);
int rcci_sig_kind(const uint8_t sig[RCCI_SIG_BYTES]);
/* "allgather(count=1024, float32) as op #17": the transports' describe_sig. */
void rcci_sig_describe(const uint8_t sig[RCCI_SIG_BYTES], char *buf, size_t size);

/* Watching a waiting operation (watch.c), called by whoever drives the
 * engine when `op` made no progress for idle_ns. strays: data a peer sent
 * on a connection nobody reads that belongs to this operation's number
 * under another signature, or to an earlier operation, is
 * RCC_ERR_MISMATCH naming both calls (rate-limited; `op` NULL or
 * point-to-point: nothing to judge). stall: past RCC_STALL_WARN seconds,
 * a warning naming the peers the operation waits for, once per period. */
rcc_result_t rcci_watch_strays(struct rcc_comm *comm, const rcci_op_t *op, int64_t now,
                               int64_t idle_ns);
void rcci_watch_stall(struct rcc_comm *comm, const rcci_op_t *op, rcci_exec_t *exec, int64_t now);
/* Remembers the signature of numbered operation `op`, which just ended here. */
void rcci_watch_finished(struct rcc_comm *comm, const rcci_op_t *op);
/* Writes whom a running operation waits for ("rank 1 (receive), rank 3
 * (send)"): coll/pipeline.c and coll/p2p.c, dispatched by progress.c. */
void rcci_exec_waiting_for(struct rcc_comm *comm, const rcci_op_t *op, rcci_exec_t *exec, char *buf,
                           size_t size);
void rcci_coll_waiting_for(struct rcc_comm *comm, rcci_exec_t *exec, char *buf, size_t size);
void rcci_p2p_waiting_for(struct rcc_comm *comm, rcci_exec_t *exec, char *buf, size_t size);

/* The host executors behind one interface (progress.c), and stream.c's,
 * which waits for the stream, stages device memory and runs a host one. */
/* Chooses the algorithm (op->algo, op->rounds) before the operation runs:
 * what it tells peers about it (its signature) must not change later. */
void rcci_exec_plan(const struct rcc_comm *comm, rcci_op_t *op);
rcc_result_t rcci_exec_host_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **exec);
rcc_result_t rcci_exec_host_advance(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t *exec,
                                    int *progressed, int *done);
void rcci_exec_host_finish(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t *exec);
void rcci_exec_host_waiting_for(struct rcc_comm *comm, const rcci_op_t *op, rcci_exec_t *exec,
                                char *buf, size_t size);
rcc_result_t rcci_stream_exec_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **exec);
rcc_result_t rcci_stream_exec_advance(struct rcc_comm *comm, rcci_exec_t *exec, int *progressed,
                                      int *done);
void rcci_stream_exec_finish(struct rcc_comm *comm, rcci_exec_t *exec);
void rcci_stream_waiting_for(struct rcc_comm *comm, rcci_exec_t *exec, char *buf, size_t size);

/* Adds a connection's descriptor to the progress thread's epoll set. */
rcc_result_t rcci_progress_watch(struct rcc_comm *comm, int fd);

/* How often the progress thread looks at what epoll cannot see (counters
 * a GPU stores): flags the host must act on as soon as they change (a
 * chunk the GPU staged, a slot it freed), and those it only watches. An
 * executor calls rcci_poll_within each pass it waits; the shortest wins. */
#define RCCI_POLL_GPU_ACT_US 100
#define RCCI_POLL_WATCH_US 1000
static inline void rcci_poll_within(struct rcc_comm *comm, int us)
{
    if (comm->poll_us == 0 || us < comm->poll_us)
        comm->poll_us = us;
}

#endif /* RINGCC_COMM_H */
