/*
 * The transport ops table: how bytes move between two endpoints.
 *
 * A transport knows nothing of collectives. The engine drives every
 * transport through this table only and never includes a transport's own
 * header. The struct is versioned the way SQLite's sqlite3_vfs is: `abi` and
 * `size` come first, fields are only ever appended, and an optional slot a
 * transport does not implement points at a stub returning
 * RCC_ERR_UNSUPPORTED (never NULL), so callers need no NULL checks.
 *
 * Threading: one transport context (`tctx`) belongs to one communicator.
 * Every call on a context, its listeners, connections and requests is made
 * from one thread at a time (the communicator's bootstrap thread during
 * init, its progress thread afterwards), except sweep_listener, reg_mem and
 * dereg_mem, which any thread may call at any time (the engine registers
 * on the caller's thread: rcc_comm_register). Transports
 * keep no global mutable state except inside init/fini.
 *
 * Blocking: only connect, accept and connect_start (where it is connect
 * itself) block, and never past their deadline. isend, irecv and test never
 * block; they do as much I/O as the OS accepts now.
 */
#ifndef RINGCC_TRANSPORT_H
#define RINGCC_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ringcc.h"

/* 3: isend/irecv take a tag (seq + the operation's signature); peek,
 * notify, announce and sweep_listener appended. 4: the in-place calls
 * (inplace_bytes, irecv_inplace, release, reserve_send, commit_send)
 * appended. 5: listener_fd appended. 6: connect_start appended. 7: the
 * queued calls (queue_recv ... queue_abort) appended. 8: queue_bytes
 * appended. Pre-release: no transport outside this tree yet. */
#define RCCI_TRANSPORT_ABI 8

/* Connection handles (listen addresses, memory keys) travel through the
 * bootstrap as opaque blobs of at most this size. */
#define RCCI_HANDLE_BYTES 128
#define RCCI_SECRET_BYTES 32

/* Capability bits in rcci_transport.caps. */
enum {
    RCCI_CAP_ONE_SIDED = 1u << 0,  /* `write` puts into a peer's registered memory (RDMA) */
    RCCI_CAP_DEVICE_MEM = 1u << 1, /* isend/irecv/write accept device (CUDA) memory */
    RCCI_CAP_SAME_HOST = 1u << 2,  /* only connects processes on one host (CUDA IPC) */
    RCCI_CAP_NEEDS_REG = 1u << 3,  /* buffers must be registered with reg_mem before use */
    /* isend given a registration (reg_mem) sends from the memory itself
     * (host, or device memory where reg_mem took it), with no copy into
     * the transport's buffers: worth registering long-lived buffers for. */
    RCCI_CAP_ZERO_COPY_SEND = 1u << 4,
    /* The queued calls (version 7) move device memory between hosts: an
     * edge of the device ring where no RCCI_CAP_DEVICE_MEM transport
     * connects (ibverbs, by GPUDirect RDMA both ways). Its host moves the
     * messages once the GPU's counters say so, through queue_test: the
     * engine looks at them often while such messages are pending. */
    RCCI_CAP_QUEUED_DEVICE = 1u << 5,
};

/* Where a buffer lives. */
typedef enum { RCCI_MEM_HOST = 0, RCCI_MEM_CUDA = 1 } rcci_mem_type_t;

/* What the engine knows about a rank when choosing a transport. */
typedef struct {
    int rank;
    uint64_t host_hash; /* equal on ranks of one host (boot id + hostname) */
    int cuda_device;    /* -1 when the rank has no GPU buffers */
    int pid;            /* its process: ranks of one process share an address space */
} rcci_peer_info_t;

/* What a message belongs to, checked by the receiver against what it
 * posted. `seq` numbers the messages of one connection (different: the
 * peer is elsewhere in the stream). `sig` is the engine's description of
 * the operation the message is part of, opaque to transports (different:
 * the ranks called different operations); describe_sig in the
 * environment renders it for error messages. */
#define RCCI_SIG_BYTES 24
typedef struct {
    uint32_t seq;
    uint8_t sig[RCCI_SIG_BYTES];
} rcci_tag_t;

/* Writes a signature as text ("allreduce(count=4096, float32, sum) as op #17"). */
typedef void (*rcci_sig_describe_fn)(const uint8_t sig[RCCI_SIG_BYTES], char *buf, size_t size);

/* Everything a transport context needs from its communicator. */
typedef struct {
    int rank, nranks;
    unsigned char secret[RCCI_SECRET_BYTES]; /* the job secret: connections prove it */
    uint64_t comm_id;                        /* distinguishes communicators of one job */
    struct sockaddr_storage local_addr;      /* address of the interface chosen for this job */
    socklen_t local_addr_len;
    rcci_sig_describe_fn describe_sig;
} rcci_transport_env_t;

/* Opaque objects owned by a transport. */
typedef struct rcci_listener rcci_listener_t;
typedef struct rcci_conn rcci_conn_t;
typedef struct rcci_request rcci_request_t;
typedef struct rcci_mr rcci_mr_t;

/* What a transport's peek found. GOODBYE: the peer destroyed its
 * communicator cleanly (notify with RCC_SUCCESS); the connection is gone
 * (peek fails with RCC_ERR_PEER_LOST and the peer's text), but that alone
 * is no failure of the job. */
enum {
    RCCI_PEEK_NONE = 0,
    RCCI_PEEK_DATA = 1,
    RCCI_PEEK_ANNOUNCE = 2,
    RCCI_PEEK_NOTICE = 3,
    RCCI_PEEK_GOODBYE = 4
};

typedef struct rcci_transport {
    /* -- version 1 -- */
    uint32_t abi;     /* RCCI_TRANSPORT_ABI the table was built for */
    uint32_t size;    /* sizeof(struct rcci_transport) when it was built */
    const char *name; /* "tcp", "ibverbs", "cudaipc": RCC_TRANSPORT matches it */
    uint32_t caps;    /* RCCI_CAP_* */

    /* Creates a per-communicator context. May refuse with
     * RCC_ERR_UNSUPPORTED and a reason in rcc_last_error (no device found);
     * the engine then tries the next transport. */
    rcc_result_t (*init)(const rcci_transport_env_t *env, void **tctx);
    /* Frees the context. All its connections and listeners are closed first. */
    void (*fini)(void *tctx);

    /* Whether this transport can connect `me` to `peer`; *priority higher
     * wins among transports that can (0 = usable fallback). */
    rcc_result_t (*can_connect)(void *tctx, const rcci_peer_info_t *me,
                                const rcci_peer_info_t *peer, int *priority);

    /* Starts listening; writes an opaque handle (<= RCCI_HANDLE_BYTES) that a
     * peer passes to connect. */
    rcc_result_t (*listen)(void *tctx, void *handle, rcci_listener_t **listener);
    /* Connects to the listener behind `handle`, proving the secret and
     * announcing (this rank, `tag`). Blocks until done or `deadline_ns`
     * (CLOCK_MONOTONIC) passes: RCC_ERR_TIMEOUT. Must complete while the
     * peer is itself blocked in connect (a ring connects before it
     * accepts): in the kernel's backlog (TCP), or by accepting for this
     * context's listeners while it waits (ibverbs: rdma_cm completes a
     * connect only when the peer accepts). */
    rcc_result_t (*connect)(void *tctx, const void *handle, uint32_t tag, int64_t deadline_ns,
                            rcci_conn_t **conn);
    /* Accepts the connection from `peer_rank` with `tag`. Connections that do
     * not prove the secret, or announce something unexpected, are closed and
     * ignored; connections from other ranks/tags arriving meanwhile are kept
     * for later accept calls. Blocks until done or the deadline; a deadline
     * already passed only looks, and leaves a connection still being set
     * up for a later call. */
    rcc_result_t (*accept)(rcci_listener_t *listener, int peer_rank, uint32_t tag,
                           int64_t deadline_ns, rcci_conn_t **conn);
    void (*close_listener)(rcci_listener_t *listener);

    /* Registers memory for isend/irecv/write (RDMA keys, CUDA IPC handles).
     * Optional: a transport without RCCI_CAP_NEEDS_REG returns success and
     * a NULL *mr, and accepts NULL mr in isend/irecv. The memory stays
     * mapped until dereg_mem, which comes after the requests using `mr`
     * completed; after it the memory may be freed, and a later reg_mem of
     * the same addresses registers what lies there then. */
    rcc_result_t (*reg_mem)(void *tctx, void *ptr, size_t bytes, rcci_mem_type_t type,
                            rcci_mr_t **mr);
    rcc_result_t (*dereg_mem)(void *tctx, rcci_mr_t *mr);

    /* Queue a message on a connection. Messages on one connection arrive in
     * the order they were sent and are matched in order with the receiver's
     * irecvs; the receiver's irecv must post exactly `bytes` (a different
     * length is a protocol error, RCC_ERR_REMOTE). `buf` must stay valid and
     * unmodified (send) / untouched (recv) until test reports completion.
     * `tag` (copied) travels with the message and is checked by the
     * receiver against the tag of its irecv: RCC_ERR_MISMATCH naming both
     * operations when they differ. */
    rcc_result_t (*isend)(rcci_conn_t *conn, const void *buf, size_t bytes, const rcci_tag_t *tag,
                          rcci_mr_t *mr, rcci_request_t **req);
    rcc_result_t (*irecv)(rcci_conn_t *conn, void *buf, size_t bytes, const rcci_tag_t *tag,
                          rcci_mr_t *mr, rcci_request_t **req);
    /* Makes progress on the request's connection and reports whether `req`
     * is complete (*done = 1, the request is then freed and must not be used
     * again). An error fails the request (it is freed) and the connection. */
    rcc_result_t (*test)(rcci_request_t *req, int *done);

    /* One-sided put into a peer's registered memory (RDMA WRITE). Optional
     * (RCCI_CAP_ONE_SIDED). `remote_key` is the peer's mr handle blob. */
    rcc_result_t (*write)(rcci_conn_t *conn, const void *buf, size_t bytes, rcci_mr_t *mr,
                          const void *remote_key, uint64_t remote_offset, rcci_request_t **req);

    /* A file descriptor that becomes readable or writable (edge-triggered)
     * when the connection may be able to make progress, or -1 when the
     * transport must be polled. Valid until close. */
    int (*wait_fd)(rcci_conn_t *conn);

    /* Closes the connection; every request not yet reported done by test
     * (in flight, or complete but not tested) is cancelled and freed. */
    void (*close)(rcci_conn_t *conn);
    /* -- end of version 1; append new fields below, never reorder -- */

    /* -- version 2 -- */
    /* Whether the peer is still there, without waiting and without taking
     * any data: RCC_ERR_PEER_LOST once the connection is known to be closed
     * (used while waiting for something the peer should start). */
    rcc_result_t (*probe)(rcci_conn_t *conn);

    /* -- version 3 -- */
    /* The tag of the next message waiting on the connection that no posted
     * receive covers, without taking it (*found = RCCI_PEEK_DATA; NONE:
     * nothing, or not whole yet), or of an announcement (below), which is
     * taken (ANNOUNCE). Never blocks. How a rank waiting in one operation
     * sees that a peer has sent data of another. Errors as probe; a notice
     * (below) waiting there, or taken earlier, is returned as the error it
     * carries with *found = NOTICE (a failed peer's notice names the cause
     * even when its code is RCC_ERR_PEER_LOST, as a plain close's does not). */
    rcc_result_t (*peek)(rcci_conn_t *conn, rcci_tag_t *tag, int *found);
    /* Best effort, never blocks: tells the peer that this rank's
     * communicator failed with `res` and `text`, when the connection is at
     * a message boundary; the peer's next receive or peek on it then fails
     * with `res` and the text ("rank 2 failed: ..."). Close follows.
     * res RCC_SUCCESS says goodbye instead (a clean destroy): the peer's
     * receives fail with RCC_ERR_PEER_LOST and the text, its peek reports
     * RCCI_PEEK_GOODBYE. */
    void (*notify)(rcci_conn_t *conn, rcc_result_t res, const char *text);
    /* Best effort, never blocks, at a message boundary only: tells the peer
     * which operation (`tag`) this rank is waiting in; the peer's peek
     * reports it. For connections that carry no data (a control lane). */
    void (*announce)(rcci_conn_t *conn, const rcci_tag_t *tag);
    /* Without blocking, closes what strangers (anything that does not prove
     * the job secret) opened on the listener, as accept would: a listener
     * stays open between operations with nobody accepting on it. Valid
     * connections are kept for accept. May run at the same time as accept
     * on the same listener (the progress thread sweeps while a caller runs
     * an operation inline); it may then skip its turn. */
    void (*sweep_listener)(rcci_listener_t *listener);

    /* -- version 4 -- */
    /* In place: for a transport whose messages land in memory of its own
     * that the GPU reaches (cudaipc's receive slots), the engine reduces a
     * message where it landed and writes the next one straight into the
     * peer's memory, so a chunk is not copied in and out on its way. On a
     * connection, messages moved in place and by isend/irecv may alternate
     * in either direction; both ends choose independently (the wire is the
     * same). Transports without it: inplace_bytes returns 0 and the others
     * RCC_ERR_UNSUPPORTED. */
    /* Largest message the in-place calls take on `conn` (send 0: this
     * side's receive slot; send 1: the peer's), 0 when they cannot be used
     * (not supported, or the peer's memory is not mapped yet). */
    size_t (*inplace_bytes)(rcci_conn_t *conn, int send);
    /* irecv without a buffer: *data says at once where the message will lie
     * (the transport's memory: device memory for cudaipc); the request
     * completes when it lies there whole, checked as irecv checks. The
     * memory stays the message's until release. When the sender wrote the
     * message straight into this rank's memory instead (RCCI_SEND_DIRECT),
     * *data is set to NULL as the request completes: the message is
     * wherever this rank told the sender to write it. `data` must stay
     * valid until then. */
    rcc_result_t (*irecv_inplace)(rcci_conn_t *conn, size_t bytes, const rcci_tag_t *tag,
                                  const void **data, rcci_request_t **req);
    /* Enqueues on `stream` (a device stream, lib/devapi.h) the return of the
     * oldest in-place receive's memory to the peer, once the work queued on
     * the stream before it (what reads the message) is done. Once per
     * completed irecv_inplace, in their order. */
    rcc_result_t (*release)(rcci_conn_t *conn, void *stream);
    /* Where in the peer's memory the next message sent on `conn` will lie,
     * when it may be written there now; *data NULL when not yet (no slot is
     * free, or earlier sends are still being moved). The caller writes the
     * message there with work on a stream, then calls commit_send before
     * any other send on the connection. */
    rcc_result_t (*reserve_send)(rcci_conn_t *conn, size_t bytes, void **data);
    /* Enqueues on `stream` the sending of the reserved message, once the
     * work queued on the stream before it (what writes the message) is
     * done; `*req` completes as isend's does. flags RCCI_SEND_DIRECT: the
     * caller wrote the message into the receiver's own memory, where the
     * receiver said its receive wants it, not into the reserved slot; the
     * receiver's receive then completes without copying (an irecv whose
     * buffer is not that memory would get wrong bytes: the engine arranges
     * that both ends agree). */
    rcc_result_t (*commit_send)(rcci_conn_t *conn, size_t bytes, const rcci_tag_t *tag,
                                void *stream, uint32_t flags, rcci_request_t **req);

    /* -- version 5 -- */
    /* A descriptor that turns readable when the listener holds something a
     * peer's connect waits for this side to take (sweep_listener takes it),
     * so that an idle engine wakes for it; -1 where connects complete
     * without this side (TCP: the kernel's backlog). ibverbs: rdma_cm's
     * channel, whose connect requests are accepted when swept. */
    int (*listener_fd)(rcci_listener_t *listener);

    /* -- version 6 -- */
    /* connect for a thread that must not wait for the peer (the progress
     * thread: it watches every operation's stall and deadline). Returns the
     * connection once set-up has started, perhaps before the peer has
     * answered: isend/irecv on it queue; test, probe and peek move the
     * set-up on (wait_fd wakes for it) and fail the connection, as connect
     * would have, when it fails or `deadline_ns` passes. ibverbs: a stopped
     * peer never accepts, and connect would wait out its deadline. A
     * transport whose connect completes without the peer (TCP: the kernel's
     * backlog; cudaipc: its control connection is TCP's, and the peer's
     * hello is taken by later calls) passes connect itself. */
    rcc_result_t (*connect_start)(void *tctx, const void *handle, uint32_t tag, int64_t deadline_ns,
                                  rcci_conn_t **conn);

    /* -- version 7 -- */
    /* Queued: in-place messages (version 4) whose every step is queued on
     * a device stream ahead of time, by the thread that calls these, each
     * behind a wait on the transport's own counters: no thread acts per
     * message, so the stream's work is all queued before anything queued
     * after the call (a later wait for its result) can come between
     * (docs/cuda.md, "Hardware queues"). A message is one slot (at most
     * inplace_bytes). Once a connection has carried a queued message, all
     * its messages must be queued (the numbering is the calling thread's).
     * The queue_* calls on one connection come from one thread at a time,
     * any thread (the engine's submitting one), while the progress thread
     * may run queue_test, probe, peek and notify on it; close only once no
     * queue_* call can come. Transports without it (RCCI_TRANSPORT_NO_QUEUED)
     * return RCC_ERR_UNSUPPORTED. */
    /* Enqueues on `stream` a wait until the next message has landed; *data
     * is where it will lie (the transport's device memory) and *ticket
     * names it for queue_test. */
    rcc_result_t (*queue_recv)(rcci_conn_t *conn, void *stream, size_t bytes, const void **data,
                               uint32_t *ticket);
    /* Enqueues the return of the oldest queued receive's memory to the
     * peer, once the stream's work before it (what reads it) is done. Once
     * per queue_recv, in their order. */
    rcc_result_t (*queue_release)(rcci_conn_t *conn, void *stream);
    /* Enqueues a wait until the peer's memory for the next message is
     * free, and says where that is (*data); the caller writes the message
     * there with work on the stream, then calls queue_commit before any
     * other queue_send. */
    rcc_result_t (*queue_send)(rcci_conn_t *conn, void *stream, size_t bytes, void **data);
    /* Enqueues the sending of the message queue_send placed, once the
     * stream's work before it (what writes it) is done; `tag` goes with it
     * for the receiver's check. */
    rcc_result_t (*queue_commit)(rcci_conn_t *conn, void *stream, size_t bytes,
                                 const rcci_tag_t *tag, uint32_t *ticket);
    /* Never blocks: whether queued message `ticket` has gone (send) or has
     * landed (receive: then checked against `bytes` and `tag`,
     * RCC_ERR_MISMATCH, where what the sender said about it can still be
     * read: a receiver that looks long after its GPU has read the message
     * may find it gone, and checks nothing). While it has not, the peer is
     * looked at now and then (a dead one: RCC_ERR_PEER_LOST). */
    rcc_result_t (*queue_test)(rcci_conn_t *conn, int send, uint32_t ticket, size_t bytes,
                               const rcci_tag_t *tag, int *done);
    /* After a failure, any thread, repeatable: makes every wait queued on
     * the connection so far pass, so that queued work runs through (on
     * whatever the memory holds) rather than hold its stream forever. A
     * live peer's later stores can undo it: repeat until the work has run.
     * What runs through must not pass for messages at either end: where
     * the GPU's stores are the messages' counters (cudaipc), the connection
     * is marked given up first and queue_test then fails at both ends. */
    void (*queue_abort)(rcci_conn_t *conn);

    /* -- version 8 -- */
    /* Largest message the queued calls take on `conn` (send 0: this side's
     * receive slot; send 1: the peer's, where known, else this side's
     * setting, which both ends must share), 0 when they cannot be used
     * (not supported, or no GPU this side can queue on). Never blocks. */
    size_t (*queue_bytes)(rcci_conn_t *conn, int send);
} rcci_transport_t;

/* Transports built into this library, in priority order, NULL-terminated. */
extern const rcci_transport_t *const rcci_transports[];

/* commit_send's flags. */
#define RCCI_SEND_DIRECT 1u

/* Shared stubs for optional slots. */
rcc_result_t rcci_transport_unsupported_write(rcci_conn_t *conn, const void *buf, size_t bytes,
                                              rcci_mr_t *mr, const void *remote_key,
                                              uint64_t remote_offset, rcci_request_t **req);
/* listener_fd of a transport whose connects complete by themselves. */
int rcci_transport_no_listener_fd(rcci_listener_t *listener);
/* The in-place calls of a transport without them. */
#define RCCI_TRANSPORT_NO_INPLACE                                                                  \
    .inplace_bytes = rcci_transport_no_inplace_bytes,                                              \
    .irecv_inplace = rcci_transport_unsupported_irecv_inplace,                                     \
    .release = rcci_transport_unsupported_release,                                                 \
    .reserve_send = rcci_transport_unsupported_reserve_send,                                       \
    .commit_send = rcci_transport_unsupported_commit_send
size_t rcci_transport_no_inplace_bytes(rcci_conn_t *conn, int send);
rcc_result_t rcci_transport_unsupported_irecv_inplace(rcci_conn_t *conn, size_t bytes,
                                                      const rcci_tag_t *tag, const void **data,
                                                      rcci_request_t **req);
rcc_result_t rcci_transport_unsupported_release(rcci_conn_t *conn, void *stream);
rcc_result_t rcci_transport_unsupported_reserve_send(rcci_conn_t *conn, size_t bytes, void **data);
rcc_result_t rcci_transport_unsupported_commit_send(rcci_conn_t *conn, size_t bytes,
                                                    const rcci_tag_t *tag, void *stream,
                                                    uint32_t flags, rcci_request_t **req);
/* The queued calls of a transport without them. */
#define RCCI_TRANSPORT_NO_QUEUED                                                                   \
    .queue_recv = rcci_transport_unsupported_queue_recv,                                           \
    .queue_release = rcci_transport_unsupported_release,                                           \
    .queue_send = rcci_transport_unsupported_queue_send,                                           \
    .queue_commit = rcci_transport_unsupported_queue_commit,                                       \
    .queue_test = rcci_transport_unsupported_queue_test,                                           \
    .queue_abort = rcci_transport_no_queue_abort,                                                  \
    .queue_bytes = rcci_transport_no_inplace_bytes
rcc_result_t rcci_transport_unsupported_queue_recv(rcci_conn_t *conn, void *stream, size_t bytes,
                                                   const void **data, uint32_t *ticket);
rcc_result_t rcci_transport_unsupported_queue_send(rcci_conn_t *conn, void *stream, size_t bytes,
                                                   void **data);
rcc_result_t rcci_transport_unsupported_queue_commit(rcci_conn_t *conn, void *stream, size_t bytes,
                                                     const rcci_tag_t *tag, uint32_t *ticket);
rcc_result_t rcci_transport_unsupported_queue_test(rcci_conn_t *conn, int send, uint32_t ticket,
                                                   size_t bytes, const rcci_tag_t *tag, int *done);
void rcci_transport_no_queue_abort(rcci_conn_t *conn);

#endif /* RINGCC_TRANSPORT_H */
