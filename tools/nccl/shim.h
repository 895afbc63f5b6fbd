/*
 * Internals shared by the NCCL shim's files: the communicator wrapper, error recording, result
 * mapping, logging, and the macro that exports a function under NCCL's two names.
 */
#ifndef RINGCC_NCCL_SHIM_H
#define RINGCC_NCCL_SHIM_H

#include <stdint.h>

#include "nccl_abi.h"
#include "nccl_api.h"
#include "ringcc.h"

/* NCCL exports every function as pncclX (the profiling name, strong) and
 * ncclX (a weak alias a profiler may interpose on); so does the shim.
 * Define the function as pncclX, then SHIM_ALIAS(ncclX). No symbol
 * versions: libnccl.so.2 has none either. */
#define SHIM_API __attribute__((visibility("default")))
#define SHIM_ALIAS(name)                                                                           \
    extern __typeof(p##name) name __attribute__((weak, alias("p" #name), visibility("default")))

/* A ringcc enumerator that must be NCCL's number (ringcc.h promises it). */
#define SHIM_SAME_VALUE(rcc, nccl) _Static_assert((int)(rcc) == (int)(nccl), #rcc " is not " #nccl)

/* Operators made by ncclRedOpCreatePreMulSum, per communicator. */
#define SHIM_MAX_PREMUL 64
typedef struct {
    int in_use;
    ncclDataType_t dtype;
    ncclScalarResidence_t residence;
    const void *scalar_ptr;  /* ncclScalarDevice: read when the operation runs */
    unsigned char scalar[8]; /* ncclScalarHostImmediate: the value, read at creation */
} shim_premul_t;

/* What an ncclComm_t points to. */
struct ncclComm {
    struct ncclComm *retired_next; /* init.c's list of aborted wrappers */
    rcc_comm_t rcc;                /* NULL until an init deferred to ncclGroupEnd succeeds */
    int rank, nranks;
    int device;               /* the CUDA device current at init, or 0 without a runtime */
    int blocking;             /* config.blocking (0: nonblocking; calls still complete at once) */
    int finalized;            /* ncclCommFinalize was called */
    ncclResult_t init_result; /* of a deferred init: ncclInProgress until it ran */
    shim_premul_t premul[SHIM_MAX_PREMUL];
};

/* ---- errors (errors.c) ---------------------------------------------------------- */

/* ringcc's result as NCCL's (0..7 are the same numbers; README, "NCCL shim"). */
ncclResult_t shim_result(rcc_result_t res);
/* Records "FUNC: text" as this thread's last error (ncclGetLastError) and
 * logs it at WARN; returns `code`. */
ncclResult_t shim_fail(ncclResult_t code, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* For a ringcc call's result: on failure records ringcc's detail (of comm,
 * or of this thread when comm is NULL) and returns the mapped code. */
ncclResult_t shim_check(rcc_result_t res, const char *func, rcc_comm_t comm);

/* ---- logging (errors.c): RCC_DEBUG=WARN|INFO|TRACE, as NCCL_DEBUG ----------------- */
enum { SHIM_LOG_NONE, SHIM_LOG_WARN, SHIM_LOG_INFO, SHIM_LOG_TRACE };
void shim_log_reload(void); /* reads RCC_DEBUG again (ncclResetDebugInit) */
void shim_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- communicators (init.c) ------------------------------------------------------ */

/* 1 when comm is a live wrapper (found by pointer, never dereferenced
 * otherwise, as ringcc does for its communicators). */
int shim_comm_live(ncclComm_t comm);
/* comm when it is a live, initialised shim communicator, else NULL with the
 * failure recorded for `func` in *err: ncclInvalidArgument for NULL or a
 * pointer that is no communicator, ncclInvalidUsage for one whose init is
 * still deferred to ncclGroupEnd, and, when `for_ops`, for a finalized one. */
struct ncclComm *shim_comm(ncclComm_t comm, const char *func, int for_ops, ncclResult_t *err);
/* A new live wrapper for `rcc` (rank and size read from it). */
struct ncclComm *shim_comm_wrap(rcc_comm_t rcc, int device, int blocking);
/* Takes a wrapper off the live list and frees it (the ringcc communicator
 * is the caller's business). */
void shim_comm_free(struct ncclComm *comm);

/* ---- configs (config.c) ---------------------------------------------------------- */

typedef struct {
    int blocking;          /* 1 unless the config says 0 */
    int blocking_set;      /* the config sets it (else a split inherits the parent's) */
    const char *comm_name; /* NULL when absent */
} shim_config_t;
/* Reads a caller's ncclConfig_t by its size, magic and version (NULL:
 * defaults). ncclInvalidArgument with the reason for a struct that was not
 * made by NCCL_CONFIG_INITIALIZER. */
ncclResult_t shim_config_read(const ncclConfig_t *config, shim_config_t *out, const char *func);

/* ---- groups (group.c) ------------------------------------------------------------ */

/* The depth of this thread's ncclGroupStart nesting. */
int shim_group_depth(void);
/* Defers a communicator's init to the outermost ncclGroupEnd (NCCL's
 * semantics for inits inside a group: one thread may create several ranks). */
ncclResult_t shim_group_defer_init(struct ncclComm *comm, int nranks, const ncclUniqueId *id,
                                   int rank, const char *func);
/* Frees `buf` once this thread's operations have run: at once outside a
 * group, at the outermost ncclGroupEnd inside one. */
void shim_group_free_later(void *buf);
/* Counts an operation issued inside this thread's group (which
 * ncclGroupSimulateEnd then cannot discard). */
void shim_group_count_op(void);

/* ---- the CUDA runtime, when the process has loaded one (cudart.c) ------------------ */

/* The current device, or -1 where no CUDA runtime is loaded in the process. */
int shim_cuda_current_device(void);
/* cudaMalloc/cudaFree through the process's runtime; -1 when there is none,
 * else the cudaError_t. */
int shim_cuda_malloc(void **ptr, size_t size);
int shim_cuda_free(void *ptr);

/* ---- pre-multiplied sums (premul.c) ---------------------------------------------- */

/* For a collective given `op` on `comm`: sets *rop to the ringcc operator
 * and, for a PreMulSum operator, *staged to a scaled copy of `count`
 * elements of sendbuf (to be sent instead of it; freed after the
 * operation runs); else leaves *staged NULL. */
ncclResult_t shim_premul_prepare(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dtype,
                                 const void *sendbuf, size_t count, cudaStream_t stream,
                                 rcc_redop_t *rop, void **staged, const char *func);

#endif /* RINGCC_NCCL_SHIM_H */
