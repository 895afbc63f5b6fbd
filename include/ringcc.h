/*
 * ringcc — a collective communication library.
 *
 * Public C API. Every function that can fail returns an rcc_result_t;
 * RCC_SUCCESS is 0. The few that cannot (rcc_datatype_size,
 * rcc_datatype_name, rcc_redop_name, rcc_strerror, rcc_result_name,
 * rcc_last_error, rcc_cuda_available) return their answer instead.
 * Enum values of results, data types and reduction operators are the same
 * numbers as NCCL's, so an NCCL shim maps them by identity.
 *
 * Conventions that hold for every function unless its comment says otherwise:
 *  - Pointer arguments are borrowed for the duration of the call only.
 *  - On failure nothing is allocated that the caller must free, output
 *    parameters are left untouched, and rcc_last_error() names the problem.
 *  - Every wait inside the library is bounded by the communicator's timeout
 *    (RCC_TIMEOUT, or rcc_config_t.timeout_ms); nothing blocks forever.
 */
#ifndef RINGCC_H
#define RINGCC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Symbols of the public API; everything else in libringcc.so is hidden. */
#if defined(__GNUC__)
#define RCC_API __attribute__((visibility("default")))
#else
#define RCC_API
#endif

#define RCC_VERSION_MAJOR 0
#define RCC_VERSION_MINOR 1
#define RCC_VERSION_PATCH 0
/* MAJOR*10000 + MINOR*100 + PATCH, comparable with <, like NCCL_VERSION_CODE. */
#define RCC_VERSION_CODE (RCC_VERSION_MAJOR * 10000 + RCC_VERSION_MINOR * 100 + RCC_VERSION_PATCH)

/* Result codes. 0..7 are NCCL's ncclResult_t values; ringcc's own, finer
 * codes start at 100 so that NCCL may grow without a collision. */
#define RCC_RESULT_LIST(X)                                                                         \
    X(RCC_SUCCESS, 0, "success")                                                                   \
    X(RCC_ERR_CUDA, 1, "a CUDA call failed")                                                       \
    X(RCC_ERR_SYSTEM, 2, "a system call failed")                                                   \
    X(RCC_ERR_INTERNAL, 3, "internal error (a bug in ringcc)")                                     \
    X(RCC_ERR_INVALID_ARGUMENT, 4, "invalid argument")                                             \
    X(RCC_ERR_INVALID_USAGE, 5, "invalid usage")                                                   \
    X(RCC_ERR_REMOTE, 6, "a remote peer reported an error or broke the protocol")                  \
    X(RCC_IN_PROGRESS, 7, "operation in progress")                                                 \
    X(RCC_ERR_TIMEOUT, 100, "timed out")                                                           \
    X(RCC_ERR_PEER_LOST, 101, "a peer closed its connection or died")                              \
    X(RCC_ERR_MISMATCH, 102, "ranks called different collectives")                                 \
    X(RCC_ERR_UNSUPPORTED, 103, "not supported by this build or transport")                        \
    X(RCC_ERR_ABORTED, 104, "the communicator was aborted")                                        \
    X(RCC_ERR_NO_MEMORY, 105, "out of memory")

typedef enum {
#define RCC_RESULT_ENUM_(name, value, text) name = value,
    RCC_RESULT_LIST(RCC_RESULT_ENUM_)
#undef RCC_RESULT_ENUM_
} rcc_result_t;

/* Element types (NCCL's ncclDataType_t values). */
typedef enum {
    RCC_INT8 = 0,
    RCC_UINT8 = 1,
    RCC_INT32 = 2,
    RCC_UINT32 = 3,
    RCC_INT64 = 4,
    RCC_UINT64 = 5,
    RCC_FLOAT16 = 6, /* IEEE 754 binary16; reduced in float32, rounded once per step */
    RCC_FLOAT32 = 7,
    RCC_FLOAT64 = 8,
    RCC_BFLOAT16 = 9, /* reduced in float32, rounded once per step */
    RCC_NUM_DATATYPES = 10
} rcc_datatype_t;

/* Reduction operators (NCCL's ncclRedOp_t values).
 * Integer SUM and PROD wrap modulo 2^bits. MAX and MIN propagate NaN.
 * AVG is SUM divided by the number of ranks once, at the end (integer
 * types: C division, truncating toward zero). */
typedef enum {
    RCC_SUM = 0,
    RCC_PROD = 1,
    RCC_MAX = 2,
    RCC_MIN = 3,
    RCC_AVG = 4,
    RCC_NUM_OPS = 5
} rcc_redop_t;

/* Size in bytes of one element of `dtype`, or 0 when `dtype` is not valid.
 * Pure (no state); never blocks; thread-safe. */
RCC_API size_t rcc_datatype_size(rcc_datatype_t dtype);
/* Lower-case names ("float32", "sum"); "unknown" for an invalid value.
 * Static strings. Pure (no state); never block; thread-safe. */
RCC_API const char *rcc_datatype_name(rcc_datatype_t dtype);
RCC_API const char *rcc_redop_name(rcc_redop_t op);

/* Version of the loaded library as RCC_VERSION_CODE. Pure (no state);
 * never blocks; thread-safe. Errors: RCC_ERR_INVALID_ARGUMENT (NULL). */
RCC_API rcc_result_t rcc_get_version(int *version);

/* Static text for a result code ("timed out"). Never NULL; thread-safe. */
RCC_API const char *rcc_strerror(rcc_result_t result);
/* Symbolic name of a result code ("RCC_ERR_TIMEOUT"). Never NULL; thread-safe. */
RCC_API const char *rcc_result_name(rcc_result_t result);

/* ---------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------- */

typedef struct rcc_comm *rcc_comm_t;

/* Opaque rendezvous token, 128 bytes like ncclUniqueId. It carries the root's
 * address and a random job secret: any connection that cannot present the
 * secret is dropped without disturbing the job (README.md, "Strangers on the
 * ports"), and whoever holds the id can join, so keep it as private as a
 * password. Copy it to every rank by any means (MPI_Bcast, a file). */
#define RCC_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[RCC_UNIQUE_ID_BYTES];
} rcc_unique_id_t;

/* Optional settings for a new communicator. Initialise with
 * RCC_CONFIG_INITIALIZER and change only the fields you need: `size`,
 * `magic` and `version` let later library versions grow the struct while
 * accepting callers compiled against this one. */
typedef struct {
    size_t size;          /* sizeof(rcc_config_t) as compiled by the caller */
    unsigned int magic;   /* RCC_CONFIG_MAGIC */
    unsigned int version; /* RCC_VERSION_CODE of the header used */
    int timeout_ms;       /* every wait's deadline; 0 = RCC_TIMEOUT */
    int blocking;         /* reserved (nonblocking init); must be 1 */
    int chunk_bytes;      /* pipeline chunk size; 0 = RCC_CHUNK_BYTES */
} rcc_config_t;

#define RCC_CONFIG_MAGIC 0x72636366u /* "rccf" */
#define RCC_CONFIG_INITIALIZER                                                                     \
    {                                                                                              \
        sizeof(rcc_config_t), RCC_CONFIG_MAGIC, RCC_VERSION_CODE, 0, 1, 0                          \
    }

/* Creates a fresh unique id and starts, in this process, the rendezvous that
 * the job's ranks meet at (a listening socket on the interface chosen by
 * RCC_SOCKET_IFNAME, or the one that routes to the outside by default, and a
 * thread that serves it until the job has met or the timeout expires).
 * Call it once per communicator, in one process, usually rank 0's.
 * Blocking: briefly (binds a socket). Thread-safe. Errors: RCC_ERR_SYSTEM
 * (no usable interface, socket failure), RCC_ERR_INVALID_ARGUMENT (NULL). */
RCC_API rcc_result_t rcc_get_unique_id(rcc_unique_id_t *id);

/* Creates this rank's member of a communicator of `nranks` ranks that all
 * pass the same `id`. Collective: blocks until every rank has joined and the
 * ring connections are up, or until the timeout (RCC_ERR_TIMEOUT, naming
 * the ranks that did not arrive). `config` may be NULL for defaults.
 * Thread-safe with respect to other communicators. On success *comm is owned
 * by the caller until rcc_comm_destroy/rcc_comm_abort.
 * Errors: RCC_ERR_INVALID_ARGUMENT (rank outside [0, nranks), nranks < 1,
 * malformed id or config, a malformed RCC_* variable), RCC_ERR_TIMEOUT,
 * RCC_ERR_SYSTEM, RCC_ERR_REMOTE (another rank disagreed on nranks or reused
 * a rank), RCC_ERR_INVALID_USAGE (a setting every rank must share, such as
 * the chunk size or RCC_ALGO, differs from another rank's; the message names
 * it, that rank and both values). */
RCC_API rcc_result_t rcc_comm_init_rank(rcc_comm_t *comm, int nranks, rcc_unique_id_t id, int rank,
                                        const rcc_config_t *config);

/* Like rcc_comm_init_rank, with rank, size and root taken from the
 * environment, first match wins:
 *   RCC_RANK, RCC_NRANKS, RCC_ROOT=host:port (set by ringcc-run);
 *   RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun);
 *   SLURM_PROCID, SLURM_NTASKS (with RCC_ROOT or MASTER_ADDR/PORT);
 *   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (with RCC_ROOT or MASTER_*).
 * Rank 0 serves the rendezvous on the root's port. The job secret comes from
 * RCC_SECRET (hex, set by ringcc-run); without it a weaker secret is derived
 * from the launcher's job id and the root address, and INFO logs say so.
 * Each rank's n-th call makes one communicator with the other ranks' n-th
 * calls, so a process must make its calls one at a time (not from several
 * threads at once), in the same order on every rank. Reads the environment
 * with getenv: no thread may change it meanwhile. Blocking as
 * rcc_comm_init_rank.
 * Errors: as rcc_comm_init_rank, plus RCC_ERR_INVALID_USAGE when the
 * environment does not describe a job (the message names what is missing). */
RCC_API rcc_result_t rcc_comm_init_env(rcc_comm_t *comm, const rcc_config_t *config);

/* Waits (bounded by the timeout) for this rank's queued operations to finish,
 * closes connections, stops the progress thread and frees the communicator.
 * After a failure whose GPU work ran late (stream operations), also waits,
 * within the timeout, for that work before it unmaps the memory it writes;
 * where it has not run by then, that memory stays mapped (leaked).
 * Not collective, but peers still running operations with this rank will see
 * it leave. `comm` must not be used by any thread afterwards; where that
 * can be detected (ringcc keeps a list of live communicators and refuses
 * others by pointer, without touching freed memory; a new communicator may
 * reuse the address), a later call, a second destroy or an abort of it
 * fails with RCC_ERR_INVALID_ARGUMENT ("not a live communicator") and
 * rcc_last_error(comm) returns the thread's last error.
 * Must not be called while another thread is inside a call on `comm`:
 * destroy waits for the operations queued or running, not for those calls
 * to return, and frees memory they still use. To end a communicator that
 * other threads are blocked on, use rcc_comm_abort.
 * NULL is accepted and ignored. Returns the first error of the drain, if any;
 * the communicator is freed either way. */
RCC_API rcc_result_t rcc_comm_destroy(rcc_comm_t comm);

/* Like rcc_comm_destroy without waiting for operations: queued and running
 * ones fail with RCC_ERR_ABORTED. Safe to call while other threads are
 * inside calls on `comm` (a blocked operation then returns RCC_ERR_ABORTED):
 * abort blocks until those calls have returned, at most the communicator's
 * timeout, and then frees the communicator. Returns RCC_SUCCESS, also for
 * NULL (ignored). Errors: RCC_ERR_INVALID_ARGUMENT for a communicator that
 * is not live (destroyed or aborted already); RCC_ERR_TIMEOUT when calls
 * were still inside at the timeout: the communicator is ended all the same
 * (no later call may use it), but its memory is left allocated, so that
 * those calls never touch freed memory. */
RCC_API rcc_result_t rcc_comm_abort(rcc_comm_t comm);

/* The communicator's error state (ncclCommGetAsyncError): *async_error is
 * RCC_SUCCESS while it is healthy, else the failure that broke it — an
 * operation's failure (RCC_ERR_PEER_LOST, RCC_ERR_MISMATCH, RCC_ERR_TIMEOUT,
 * RCC_ERR_REMOTE, ...), or one seen now: on an idle communicator this call
 * probes the connections without blocking, so a peer that died or failed
 * since the last operation is reported (and its peers told). Once broken,
 * every later operation fails at once with the same story; the text is in
 * rcc_last_error(comm). Never blocks; thread-safe, also while another thread
 * is inside an operation on `comm`. Errors: RCC_ERR_INVALID_ARGUMENT (NULL). */
RCC_API rcc_result_t rcc_comm_get_async_error(rcc_comm_t comm, rcc_result_t *async_error);

/* Splits `comm` into sub-communicators (MPI_Comm_split, ncclCommSplit):
 * ranks passing the same color form one, ranked by (key, rank in comm).
 * color RCC_SPLIT_NOCOLOR takes part but joins none (*newcomm = NULL).
 * Collective over `comm`: every rank must call it, in the same order
 * relative to other splits. Uses comm's bootstrap, no new rendezvous; the
 * new communicator inherits comm's timeout and chunk size. Blocking (bounded
 * by the timeout). Must not run concurrently with another split of `comm`.
 * Errors: RCC_ERR_INVALID_ARGUMENT (NULL, color < RCC_SPLIT_NOCOLOR),
 * RCC_ERR_TIMEOUT, RCC_ERR_PEER_LOST, RCC_ERR_SYSTEM. */
#define RCC_SPLIT_NOCOLOR (-1)
RCC_API rcc_result_t rcc_comm_split(rcc_comm_t comm, int color, int key, rcc_comm_t *newcomm);

/* This rank's index and the number of ranks. Never block; thread-safe.
 * Errors: RCC_ERR_INVALID_ARGUMENT (NULL output, NULL comm, or a
 * communicator that is not live), detail in rcc_last_error(NULL). */
RCC_API rcc_result_t rcc_comm_rank(const rcc_comm_t comm, int *rank);
RCC_API rcc_result_t rcc_comm_size(const rcc_comm_t comm, int *size);

/* The detail of the most recent failure: of `comm`'s operations when comm is
 * a live communicator, else of this thread's last failed call (init failures
 * have no communicator yet). Never NULL ("" when nothing failed); never
 * blocks; thread-safe. The string is owned by the library and is this
 * thread's own: for a communicator, a copy taken at the call, valid until
 * this thread's next rcc_last_error(comm) of any communicator; else the
 * thread's text, which most calls clear on entry. Not during
 * rcc_comm_destroy or rcc_comm_abort of `comm` (no call on comm is). */
RCC_API const char *rcc_last_error(rcc_comm_t comm);

/* ---------------------------------------------------------------------------
 * Registered memory (NCCL's ncclCommRegister)
 *
 * Registering a long-lived buffer (host or device memory) with a
 * communicator lets transports that read memory themselves send from it
 * without copying it into their own buffers first: ibverbs, whose adapter
 * reads registered host memory, and device memory directly where GPUDirect
 * RDMA works (a dma-buf, or nvidia-peermem). An operation uses a
 * registration that covers the whole of what it sends; results are the same
 * with or without one, so registering is only ever an optimisation, and
 * ranks register independently (no collective call). Registrations may
 * overlap. Over TCP and CUDA IPC registering does nothing (those copy
 * anyway), and costs nothing.
 * ------------------------------------------------------------------------- */

/* An opaque registration handle. */
typedef struct rcc_memreg *rcc_memreg_t;

/* Registers [buf, buf + bytes), which must stay allocated until
 * rcc_comm_deregister, with comm's transports. A transport that cannot
 * register it (no RDMA device, device memory without GPUDirect RDMA, its
 * registration table full) goes on copying, and RCC_DEBUG=INFO says why:
 * that is not an error. Blocking: registers now (pinning pages takes time
 * in proportion to the size). Thread-safe.
 * Errors: RCC_ERR_INVALID_ARGUMENT (NULL buf or handle, bytes 0, a range
 * that wraps, a communicator that is not live), RCC_ERR_NO_MEMORY. */
RCC_API rcc_result_t rcc_comm_register(rcc_comm_t comm, void *buf, size_t bytes,
                                       rcc_memreg_t *handle);
/* Ends a registration. Operations called later do not use it; operations
 * still running that have begun sending from it keep the transports'
 * registration until they end (the others copy what they send), so the
 * memory may be freed as soon as those operations are complete (as with any
 * of their buffers). Never blocks on the network; thread-safe. A
 * communicator's registrations end with it.
 * Errors: RCC_ERR_INVALID_ARGUMENT (a handle that is not one of comm's live
 * registrations: deregistered already, or of another communicator). */
RCC_API rcc_result_t rcc_comm_deregister(rcc_comm_t comm, rcc_memreg_t handle);

/* ---------------------------------------------------------------------------
 * Collectives on host memory
 *
 * Blocking variants return when this rank's part is complete and the result
 * is in recvbuf. Calls on one communicator must be issued in the same order
 * on every rank; calls on different communicators are independent. A
 * communicator may be used by several threads, but the caller must order the
 * calls identically on every rank (as with NCCL).
 *
 * Every collective has a nonblocking form, rcc_i<name>(..., &req), that
 * checks its arguments, queues the operation and returns at once; the
 * communicator's progress thread runs queued operations in call order.
 * Buffers belong to the library until the request completes. A blocking
 * call is its nonblocking form followed by rcc_wait; when nothing else is
 * queued or running on the communicator it runs on the calling thread
 * instead (RCC_INLINE), handing over to the progress thread as soon as
 * another thread queues work behind it.
 *
 * The CUDA stream-ordered forms, rcc_<name>_stream(), follow at the end.
 * ------------------------------------------------------------------------- */

/* A nonblocking operation in flight. Owned by the caller until rcc_test
 * reports it done or rcc_wait returns; both free it and set it to NULL. */
typedef struct rcc_request *rcc_request_t;

/* recvbuf[i] = op over all ranks of sendbuf[i], for i < count, identical bits
 * on every rank. sendbuf == recvbuf is in-place; other overlap is invalid.
 * count 0 is a no-op. Errors: RCC_ERR_INVALID_ARGUMENT (NULL buffer with
 * count > 0, bad dtype/op, partial overlap), RCC_ERR_TIMEOUT,
 * RCC_ERR_PEER_LOST, RCC_ERR_MISMATCH (ranks called different collectives,
 * or this one with other counts, types, ops or roots: the message names both
 * calls and the ranks), RCC_ERR_REMOTE, RCC_ERR_ABORTED. On error recvbuf
 * holds unspecified values; sendbuf is never written (unless in-place).
 * Every collective below fails the same ways. */
RCC_API rcc_result_t rcc_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                   rcc_datatype_t dtype, rcc_redop_t op, rcc_comm_t comm);

/* sendbuf holds nranks blocks of recvcount elements; recvbuf (recvcount
 * elements) receives block `rank` reduced over all ranks (NCCL's
 * ReduceScatter). In-place when recvbuf == sendbuf + rank * recvcount
 * elements. Errors as rcc_allreduce. */
RCC_API rcc_result_t rcc_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                        rcc_datatype_t dtype, rcc_redop_t op, rcc_comm_t comm);

/* recvbuf (nranks * sendcount elements) receives every rank's sendbuf
 * (sendcount elements), rank r's at block r (NCCL's AllGather). In-place
 * when sendbuf == recvbuf + rank * sendcount elements. Errors as
 * rcc_allreduce. */
RCC_API rcc_result_t rcc_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   rcc_datatype_t dtype, rcc_comm_t comm);

/* Every rank's recvbuf receives root's sendbuf (count elements); sendbuf is
 * read on root only, and may equal recvbuf (in place). Errors as
 * rcc_allreduce, plus RCC_ERR_INVALID_ARGUMENT for a root outside
 * [0, nranks). */
RCC_API rcc_result_t rcc_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                   rcc_datatype_t dtype, int root, rcc_comm_t comm);

/* root's recvbuf = op over all ranks of sendbuf (count elements); recvbuf is
 * written on root only (others may pass NULL). In-place on root when
 * sendbuf == recvbuf. Errors as rcc_broadcast. */
RCC_API rcc_result_t rcc_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                rcc_datatype_t dtype, rcc_redop_t op, int root, rcc_comm_t comm);

/* Returns when every rank has entered the barrier (or with an error naming
 * who did not, after the timeout). */
RCC_API rcc_result_t rcc_barrier(rcc_comm_t comm);

/* Point to point (NCCL's ncclSend/ncclRecv): `count` elements to/from rank
 * `peer`. Messages between two ranks are matched in call order, per
 * direction; the receive must name the same size in bytes as the send
 * (else RCC_ERR_MISMATCH on the receiver, naming both sizes). A blocking send may return before the
 * peer has received (the data is then in the transport's buffers). Issue sends and receives that
 * depend on each other inside one group: a group's point-to-point calls progress together, so no
 * order of them deadlocks, and a group may send to this rank itself. Errors: as rcc_broadcast, with
 * `peer` for root; RCC_ERR_INVALID_USAGE for a message to oneself outside a
 * group. */
RCC_API rcc_result_t rcc_send(const void *sendbuf, size_t count, rcc_datatype_t dtype, int peer,
                              rcc_comm_t comm);
RCC_API rcc_result_t rcc_recv(void *recvbuf, size_t count, rcc_datatype_t dtype, int peer,
                              rcc_comm_t comm);

/* Block p (count elements) of sendbuf goes to rank p, which stores it as
 * block `rank` of its recvbuf (nranks * count elements each). Not in place.
 * Errors as rcc_allgather. */
RCC_API rcc_result_t rcc_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                  rcc_datatype_t dtype, rcc_comm_t comm);

/* Nonblocking forms: same arguments and checks, plus *req, which receives
 * the request (NULL when the call fails, or when there is nothing to do:
 * rcc_wait/rcc_test accept a NULL request as already complete). */
RCC_API rcc_result_t rcc_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                    rcc_datatype_t dtype, rcc_redop_t op, rcc_comm_t comm,
                                    rcc_request_t *req);
RCC_API rcc_result_t rcc_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                         rcc_datatype_t dtype, rcc_redop_t op, rcc_comm_t comm,
                                         rcc_request_t *req);
RCC_API rcc_result_t rcc_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                    rcc_datatype_t dtype, rcc_comm_t comm, rcc_request_t *req);
RCC_API rcc_result_t rcc_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                    rcc_datatype_t dtype, int root, rcc_comm_t comm,
                                    rcc_request_t *req);
RCC_API rcc_result_t rcc_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                                 rcc_datatype_t dtype, rcc_redop_t op, int root, rcc_comm_t comm,
                                 rcc_request_t *req);
RCC_API rcc_result_t rcc_ibarrier(rcc_comm_t comm, rcc_request_t *req);
RCC_API rcc_result_t rcc_isend(const void *sendbuf, size_t count, rcc_datatype_t dtype, int peer,
                               rcc_comm_t comm, rcc_request_t *req);
RCC_API rcc_result_t rcc_irecv(void *recvbuf, size_t count, rcc_datatype_t dtype, int peer,
                               rcc_comm_t comm, rcc_request_t *req);
RCC_API rcc_result_t rcc_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                                   rcc_datatype_t dtype, rcc_comm_t comm, rcc_request_t *req);

/* Groups (NCCL's ncclGroupStart/ncclGroupEnd), per thread. Collective calls
 * made between rcc_group_start and the matching rcc_group_end check their
 * arguments and return at once, blocking forms included; rcc_group_end
 * launches them together, in call order per communicator, fusing
 * consecutive allreduces of one dtype and op on one communicator into one
 * buffer and one operation (tensor fusion, up to RCC_FUSION_BYTES), and
 * returns when the operations issued with blocking calls have finished
 * (nonblocking ones complete through their requests, which must not be
 * waited for before the group ends). Groups nest; only the outermost end
 * launches. Buffers of every call must stay valid until it completes.
 * Errors: rcc_group_end without a start is RCC_ERR_INVALID_USAGE; otherwise
 * the first failure among the group's blocking operations, with its detail
 * in rcc_last_error(NULL) (a group may span communicators). */
RCC_API rcc_result_t rcc_group_start(void);
RCC_API rcc_result_t rcc_group_end(void);

/* Never blocks. When the operation has finished, sets *done = 1, frees the
 * request, sets *req = NULL and returns the operation's result, with its
 * detail in rcc_last_error(NULL) (this thread's); otherwise *done = 0 and
 * RCC_SUCCESS. A NULL *req counts as finished. Thread-safe for different
 * requests. A request may outlive its communicator. */
RCC_API rcc_result_t rcc_test(rcc_request_t *req, int *done);

/* Blocks until the operation finishes (bounded by the communicator's
 * timeout, enforced by its progress thread), frees the request, sets *req =
 * NULL and returns the operation's result (detail in rcc_last_error(NULL)).
 * A NULL *req counts as finished. Thread-safe for different requests.
 * Errors: RCC_ERR_INVALID_ARGUMENT (req NULL); RCC_ERR_INVALID_USAGE for an
 * operation of a group that has not ended (the request is left as it is,
 * not freed). */
RCC_API rcc_result_t rcc_wait(rcc_request_t *req);

/* rcc_wait on each of n requests, in any completion order; returns the
 * first failure (detail in rcc_last_error(NULL)). Every request is waited
 * for and freed even after a failure, except one of a group that has not
 * ended: that one gets RCC_ERR_INVALID_USAGE and is left as it is, not freed.
 * Thread-safe for different requests (no other thread may use those in reqs
 * meanwhile).
 * Errors: RCC_ERR_INVALID_ARGUMENT (n < 0, or reqs NULL with n > 0; nothing
 * is waited for), else those of rcc_wait. */
RCC_API rcc_result_t rcc_wait_all(int n, rcc_request_t *reqs);

/* ---------------------------------------------------------------------------
 * Collectives ordered on a CUDA stream (NCCL's semantics)
 *
 * rcc_<name>_stream takes the arguments of rcc_<name> and a `stream`, a
 * cudaStream_t passed as void * so that this header needs no CUDA header
 * (NULL is CUDA's legacy default stream). Buffers may be device memory or
 * host memory (pinned or not), in any mix, the same on every rank: each
 * rank decides alone how its part runs (below), so an operation whose
 * buffers are device memory on one rank and host memory on another fails
 * with RCC_ERR_MISMATCH naming the device buffers (RCC_ERR_TIMEOUT where no
 * rank is left waiting to notice: in a last operation whose parts all ended
 * but one). For broadcast and reduce this includes the root's buffer that
 * the other ranks do not pass: a reduce whose sendbufs are device memory
 * needs a device recvbuf at the root, a broadcast whose recvbufs are device
 * memory a device sendbuf.
 *
 * In a build with CUDA (rcc_cuda_available() says whether this process can
 * use a device) the call checks its arguments, queues the operation and
 * returns without waiting for the GPU or the network: the operation starts
 * once the work queued on `stream` before the call has finished, and work
 * queued on `stream` after the call starts only once the operation's result
 * is in recvbuf. The calling thread never synchronises with the GPU (no
 * cudaStreamSynchronize, no device-wide synchronisation); the
 * communicator's progress thread moves the data. Device memory goes over the
 * host transports through pinned host staging: chunk by chunk, reduced on the
 * GPU, for the ring and chain collectives on device buffers (the call queues
 * all of that GPU work, a few stream operations per chunk, each behind a
 * wait for the network); by whole buffers
 * (copied out on `stream` before the operation, the host collective on the
 * copy, the result copied back on `stream` after it) for the small-message
 * allreduces, point-to-point and mixed host/device buffers, and for every
 * collective where RCC_DEVICE_PIPELINE=0. Buffers belong to the library
 * until the stream has passed the operation.
 *
 * Errors found by the call (bad arguments, a broken communicator) are
 * returned at once and nothing is queued. Where CUDA refuses part of the
 * work the call queues (a launch error, as on a broken context), the call
 * returns the error at once, without waiting for the GPU; the part already
 * queued runs through (it reads the buffers; behind the stream's earlier
 * work) and `stream` goes on only after it (given up after 5 s); the
 * communicator has then failed. A failure while the operation
 * runs (a peer lost, a timeout, a mismatch) is reported as NCCL reports it:
 * by rcc_comm_get_async_error and by every later call on the communicator;
 * the stream is released all the same (never left waiting), and recvbuf then
 * holds unspecified values. After such a failure a same-host peer may still
 * have this rank's device buffers mapped (CUDA IPC) until it notices the
 * failure: free them only once every rank has destroyed or aborted its
 * communicator (freeing memory another process has open is undefined
 * behaviour in CUDA).
 *
 * Without CUDA in the build, or with no usable device, only stream == NULL
 * with host buffers is accepted: the call is then the blocking host
 * collective. Any other stream is RCC_ERR_UNSUPPORTED.
 *
 * Inside a group (rcc_group_start/end) stream calls are launched at the
 * outermost rcc_group_end, like host calls, and each stream of the group
 * waits for all of the group's operations issued on it. A group holds at
 * most 4096 stream calls per communicator: the next is refused at once
 * (RCC_ERR_INVALID_USAGE, nothing queued) and the group's others still run.
 * Outside groups, a call made while 4096 of the communicator's stream
 * operations are still pending waits for the oldest to end (within the
 * timeout).
 *
 * The communicator's GPU is the device current on the thread that created
 * it; a call made while another device is current works on the
 * communicator's and leaves the caller's current again. A stream that is
 * capturing a CUDA graph is RCC_ERR_UNSUPPORTED, and nothing is queued on
 * it: the operations are not capturable (each call's flags carry a ticket
 * of its own, which a replayed graph would reuse).
 *
 * Thread-safety and ordering rules are those of the host collectives.
 * ------------------------------------------------------------------------- */

/* 1 when this build has CUDA and the process sees at least one device, else
 * 0 (with the reason in rcc_last_error(NULL)). Never blocks for long (the
 * first call loads the driver); thread-safe. */
RCC_API int rcc_cuda_available(void);

RCC_API rcc_result_t rcc_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                          rcc_datatype_t dtype, rcc_redop_t op, rcc_comm_t comm,
                                          void *stream);
RCC_API rcc_result_t rcc_reduce_scatter_stream(const void *sendbuf, void *recvbuf,
                                               size_t recvcount, rcc_datatype_t dtype,
                                               rcc_redop_t op, rcc_comm_t comm, void *stream);
RCC_API rcc_result_t rcc_allgather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                          rcc_datatype_t dtype, rcc_comm_t comm, void *stream);
RCC_API rcc_result_t rcc_broadcast_stream(const void *sendbuf, void *recvbuf, size_t count,
                                          rcc_datatype_t dtype, int root, rcc_comm_t comm,
                                          void *stream);
RCC_API rcc_result_t rcc_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                       rcc_datatype_t dtype, rcc_redop_t op, int root,
                                       rcc_comm_t comm, void *stream);
RCC_API rcc_result_t rcc_send_stream(const void *sendbuf, size_t count, rcc_datatype_t dtype,
                                     int peer, rcc_comm_t comm, void *stream);
RCC_API rcc_result_t rcc_recv_stream(void *recvbuf, size_t count, rcc_datatype_t dtype, int peer,
                                     rcc_comm_t comm, void *stream);
RCC_API rcc_result_t rcc_alltoall_stream(const void *sendbuf, void *recvbuf, size_t count,
                                         rcc_datatype_t dtype, rcc_comm_t comm, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* RINGCC_H */
