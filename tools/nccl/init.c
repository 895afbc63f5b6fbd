/*
 * Communicator life cycle of the NCCL shim: unique ids, the init variants, split, finalize,
 * destroy, abort and the queries. Each ncclComm_t wraps one rcc_comm_t.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

_Static_assert(sizeof(ncclUniqueId) == sizeof(rcc_unique_id_t), "ids must have one size");

/* ---- wrappers -------------------------------------------------------------------- */

/* Live wrappers, looked up by pointer: a destroyed or made-up ncclComm_t
 * is refused without reading freed memory (a new wrapper may reuse an
 * address). A handful of communicators per process, so a list will do. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm **live;
static int nlive, live_cap;

/* Aborted wrappers are kept, not freed: NCCL lets ncclCommAbort run while
 * another thread is inside a call on the communicator, which may still read
 * the wrapper. A few KiB per aborted communicator. */
static struct ncclComm *retired;

int shim_comm_live(ncclComm_t comm)
{
    int found = 0;
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < nlive && !found; i++)
        found = live[i] == comm;
    pthread_mutex_unlock(&live_lock);
    return found;
}

static void live_remove(struct ncclComm *comm)
{
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < nlive; i++)
        if (live[i] == comm)
            live[i] = live[--nlive];
    pthread_mutex_unlock(&live_lock);
}

struct ncclComm *shim_comm_wrap(rcc_comm_t rcc, int device, int blocking)
{
    struct ncclComm *comm = calloc(1, sizeof *comm);
    if (!comm)
        return NULL;
    pthread_mutex_lock(&live_lock);
    if (nlive == live_cap) {
        int cap = live_cap ? 2 * live_cap : 16;
        struct ncclComm **grown = realloc(live, (size_t)cap * sizeof *grown);
        if (grown) {
            live = grown;
            live_cap = cap;
        }
    }
    int added = nlive < live_cap;
    if (added)
        live[nlive++] = comm;
    pthread_mutex_unlock(&live_lock);
    if (!added) {
        free(comm);
        return NULL;
    }
    comm->rcc = rcc;
    comm->device = device;
    comm->blocking = blocking;
    comm->init_result = ncclSuccess;
    if (rcc) {
        rcc_comm_rank(rcc, &comm->rank);
        rcc_comm_size(rcc, &comm->nranks);
    }
    return comm;
}

void shim_comm_free(struct ncclComm *comm)
{
    if (!comm)
        return;
    live_remove(comm);
    free(comm);
}

static void comm_retire(struct ncclComm *comm)
{
    live_remove(comm);
    pthread_mutex_lock(&live_lock);
    comm->retired_next = retired;
    retired = comm;
    pthread_mutex_unlock(&live_lock);
}

struct ncclComm *shim_comm(ncclComm_t comm, const char *func, int for_ops, ncclResult_t *err)
{
    if (!comm) {
        *err = shim_fail(ncclInvalidArgument, func, "comm is NULL");
        return NULL;
    }
    if (!shim_comm_live(comm)) {
        *err = shim_fail(ncclInvalidArgument, func,
                         "comm %p is not a live communicator (destroyed or aborted, or not made "
                         "by ncclCommInit*)",
                         (void *)comm);
        return NULL;
    }
    if (!comm->rcc && comm->init_result == ncclInProgress) {
        *err = shim_fail(ncclInvalidUsage, func,
                         "comm %p was created inside a group and is initialised only at the "
                         "outermost ncclGroupEnd",
                         (void *)comm);
        return NULL;
    }
    if (!comm->rcc) {
        *err = shim_fail(ncclInvalidUsage, func,
                         "comm %p: its init, deferred to ncclGroupEnd, failed (%s); destroy it",
                         (void *)comm, pncclGetErrorString(comm->init_result));
        return NULL;
    }
    if (for_ops && comm->finalized) {
        *err = shim_fail(ncclInvalidUsage, func, "comm %p was finalized (ncclCommFinalize)",
                         (void *)comm);
        return NULL;
    }
    return comm;
}

/* The device that NCCL would bind: the caller's current one. */
static int current_device(void)
{
    int dev = shim_cuda_current_device();
    return dev < 0 ? 0 : dev;
}

/* ---- versions and ids ------------------------------------------------------------ */

SHIM_API ncclResult_t pncclGetVersion(int *version)
{
    if (!version)
        return shim_fail(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
    *version = SHIM_NCCL_VERSION_CODE;
    return ncclSuccess;
}
SHIM_ALIAS(ncclGetVersion);

SHIM_API ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (!uniqueId)
        return shim_fail(ncclInvalidArgument, "ncclGetUniqueId", "uniqueId is NULL");
    rcc_unique_id_t id;
    rcc_result_t res = rcc_get_unique_id(&id);
    if (res != RCC_SUCCESS)
        return shim_check(res, "ncclGetUniqueId", NULL);
    memcpy(uniqueId->internal, id.internal, sizeof id.internal);
    return ncclSuccess;
}
SHIM_ALIAS(ncclGetUniqueId);

/* ---- init ------------------------------------------------------------------------ */

/* NCCL's "NCCL version ..." line: once, at the first init, under RCC_DEBUG=INFO. */
static pthread_once_t banner_once = PTHREAD_ONCE_INIT;

static void banner(void)
{
    int v = 0;
    rcc_get_version(&v);
    shim_log(SHIM_LOG_INFO, "ringcc %d.%d.%d, NCCL API %d.%d.%d (the NCCL shim)", v / 10000,
             v / 100 % 100, v % 100, SHIM_NCCL_MAJOR, SHIM_NCCL_MINOR, SHIM_NCCL_PATCH);
}

/* Every init variant ends here. Inside a group the init is deferred to the
 * outermost ncclGroupEnd (group.c), as NCCL does, so that one thread can
 * create several ranks; *newcomm is valid at once and reports ncclInProgress
 * through ncclCommGetAsyncError until then. */
static ncclResult_t init_rank(ncclComm_t *newcomm, int nranks, const ncclUniqueId *id, int rank,
                              const ncclConfig_t *config, const char *func)
{
    pthread_once(&banner_once, banner);
    if (!newcomm)
        return shim_fail(ncclInvalidArgument, func, "newcomm is NULL");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return shim_fail(ncclInvalidArgument, func, "rank %d is not in [0, nranks = %d)", rank,
                         nranks);
    shim_config_t cfg;
    ncclResult_t err = shim_config_read(config, &cfg, func);
    if (err != ncclSuccess)
        return err;
    if (shim_group_depth() > 0) {
        struct ncclComm *comm = shim_comm_wrap(NULL, current_device(), cfg.blocking);
        if (!comm)
            return shim_fail(ncclSystemError, func, "out of memory");
        err = shim_group_defer_init(comm, nranks, id, rank, func);
        if (err != ncclSuccess) {
            shim_comm_free(comm);
            return err;
        }
        *newcomm = comm;
        return ncclSuccess;
    }
    rcc_unique_id_t rid;
    memcpy(rid.internal, id->internal, sizeof rid.internal);
    rcc_comm_t rcc = NULL;
    rcc_result_t res = rcc_comm_init_rank(&rcc, nranks, rid, rank, NULL);
    if (res != RCC_SUCCESS)
        return shim_check(res, func, NULL);
    struct ncclComm *comm = shim_comm_wrap(rcc, current_device(), cfg.blocking);
    if (!comm) {
        rcc_comm_destroy(rcc);
        return shim_fail(ncclSystemError, func, "out of memory");
    }
    shim_log(SHIM_LOG_INFO,
             "%s: comm %p%s%s rank %d nranks %d cudaDev %d blocking %d - Init COMPLETE", func,
             (void *)comm, cfg.comm_name ? " name " : "", cfg.comm_name ? cfg.comm_name : "", rank,
             nranks, comm->device, cfg.blocking);
    *newcomm = comm;
    return ncclSuccess;
}

SHIM_API ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return init_rank(comm, nranks, &commId, rank, NULL, "ncclCommInitRank");
}
SHIM_ALIAS(ncclCommInitRank);

SHIM_API ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                              int rank, ncclConfig_t *config)
{
    return init_rank(comm, nranks, &commId, rank, config, "ncclCommInitRankConfig");
}
SHIM_ALIAS(ncclCommInitRankConfig);

/* NCCL spreads its bootstrap over several ids; ringcc has one rendezvous,
 * so the first id is the job's (the others' rendezvous go unused and close
 * at their timeout). */
SHIM_API ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
                                                int nId, ncclUniqueId *commIds,
                                                ncclConfig_t *config)
{
    if (nId < 1 || !commIds)
        return shim_fail(ncclInvalidArgument, "ncclCommInitRankScalable",
                         "needs at least one id (nId %d, commIds %p)", nId, (void *)commIds);
    return init_rank(newcomm, nranks, &commIds[0], myrank, config, "ncclCommInitRankScalable");
}
SHIM_ALIAS(ncclCommInitRankScalable);

/* ncclCommInitAll: the ndev ranks of one process, each created on a thread
 * of its own (ringcc's init blocks until all ranks have met). */
typedef struct {
    rcc_unique_id_t id;
    int nranks, rank;
    rcc_comm_t rcc;
    rcc_result_t res;
    char error[512];
} init_all_rank_t;

static void *init_all_thread(void *arg)
{
    init_all_rank_t *r = arg;
    r->res = rcc_comm_init_rank(&r->rcc, r->nranks, r->id, r->rank, NULL);
    if (r->res != RCC_SUCCESS)
        strncpy(r->error, rcc_last_error(NULL), sizeof r->error - 1);
    return NULL;
}

SHIM_API ncclResult_t pncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    const char *func = "ncclCommInitAll";
    if (!comms || ndev < 1)
        return shim_fail(ncclInvalidArgument, func, "comms %p, ndev %d", (void *)comms, ndev);
    rcc_unique_id_t id;
    rcc_result_t res = rcc_get_unique_id(&id);
    if (res != RCC_SUCCESS)
        return shim_check(res, func, NULL);
    init_all_rank_t *ranks = calloc((size_t)ndev, sizeof *ranks);
    pthread_t *threads = calloc((size_t)ndev, sizeof *threads);
    int started = 0;
    ncclResult_t err = ncclSuccess;
    if (!ranks || !threads)
        err = shim_fail(ncclSystemError, func, "out of memory");
    for (int i = 0; err == ncclSuccess && i < ndev; i++) {
        ranks[i] = (init_all_rank_t){.id = id, .nranks = ndev, .rank = i};
        if (pthread_create(&threads[i], NULL, init_all_thread, &ranks[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    if (err == ncclSuccess && started < ndev)
        err = shim_fail(ncclSystemError, func, "could not start a thread for rank %d", started);
    for (int i = 0; err == ncclSuccess && i < ndev; i++)
        if (ranks[i].res != RCC_SUCCESS)
            err = shim_fail(shim_result(ranks[i].res), func, "rank %d: %s", i, ranks[i].error);
    for (int i = 0; err == ncclSuccess && i < ndev; i++) {
        comms[i] = shim_comm_wrap(ranks[i].rcc, devlist ? devlist[i] : i, 1);
        if (!comms[i]) {
            err = shim_fail(ncclSystemError, func, "out of memory");
            while (i-- > 0)
                shim_comm_free(comms[i]);
        }
    }
    if (err != ncclSuccess)
        for (int i = 0; i < started; i++)
            rcc_comm_destroy(ranks[i].rcc); /* NULL where that rank failed */
    else
        shim_log(SHIM_LOG_INFO, "%s: %d ranks in this process - Init COMPLETE", func, ndev);
    free(ranks);
    free(threads);
    return err;
}
SHIM_ALIAS(ncclCommInitAll);

/* ---- split, shrink, revoke ------------------------------------------------------- */

SHIM_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                     ncclConfig_t *config)
{
    const char *func = "ncclCommSplit";
    ncclResult_t err = ncclSuccess;
    struct ncclComm *parent = shim_comm(comm, func, 1, &err);
    if (!parent)
        return err;
    if (!newcomm)
        return shim_fail(ncclInvalidArgument, func, "newcomm is NULL");
    shim_config_t cfg;
    err = shim_config_read(config, &cfg, func);
    if (err != ncclSuccess)
        return err;
    if (!cfg.blocking_set)
        cfg.blocking = parent->blocking; /* NCCL: what the config leaves, the parent's */
    rcc_comm_t rcc = NULL;
    rcc_result_t res = rcc_comm_split(parent->rcc, color, key, &rcc);
    if (res != RCC_SUCCESS)
        return shim_check(res, func, NULL);
    if (!rcc) {
        *newcomm = NULL; /* NCCL_SPLIT_NOCOLOR */
        return ncclSuccess;
    }
    struct ncclComm *child = shim_comm_wrap(rcc, parent->device, cfg.blocking);
    if (!child) {
        rcc_comm_destroy(rcc);
        return shim_fail(ncclSystemError, func, "out of memory");
    }
    shim_log(SHIM_LOG_INFO, "%s: comm %p rank %d nranks %d from parent %p color %d key %d", func,
             (void *)child, child->rank, child->nranks, (void *)parent, color, key);
    *newcomm = child;
    return ncclSuccess;
}
SHIM_ALIAS(ncclCommSplit);

/* Shrink is called by the surviving ranks only, while ringcc's split needs
 * every rank of the parent. */
SHIM_API ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                      ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
    (void)comm, (void)excludeRanksList, (void)excludeRanksCount, (void)config, (void)shrinkFlags;
    if (newcomm)
        *newcomm = NULL;
    return shim_fail(ncclInvalidUsage, "ncclCommShrink",
                     "not supported by ringcc (create a new communicator, or split one in which "
                     "every rank takes part)");
}
SHIM_ALIAS(ncclCommShrink);

SHIM_API ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
    (void)comm, (void)revokeFlags;
    return shim_fail(ncclInvalidUsage, "ncclCommRevoke",
                     "not supported by ringcc (ncclCommAbort stops a communicator's operations)");
}
SHIM_ALIAS(ncclCommRevoke);

/* ---- finalize, destroy, abort ---------------------------------------------------- */

/* Operations already finish within their calls or on their streams, and
 * ncclCommDestroy waits for queued ones; finalize only closes the
 * communicator to new operations (it is then quiescent at once, so even a
 * nonblocking communicator reports ncclSuccess). */
SHIM_API ncclResult_t pncclCommFinalize(ncclComm_t comm)
{
    ncclResult_t err = ncclSuccess;
    struct ncclComm *c = shim_comm(comm, "ncclCommFinalize", 1, &err);
    if (!c)
        return err;
    c->finalized = 1;
    return ncclSuccess;
}
SHIM_ALIAS(ncclCommFinalize);

SHIM_API ncclResult_t pncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess; /* as NCCL */
    if (!shim_comm_live(comm))
        return shim_fail(ncclInvalidArgument, "ncclCommDestroy",
                         "comm %p is not a live communicator", (void *)comm);
    rcc_comm_t rcc = comm->rcc;
    shim_comm_free(comm);
    return shim_check(rcc_comm_destroy(rcc), "ncclCommDestroy", NULL);
}
SHIM_ALIAS(ncclCommDestroy);

SHIM_API ncclResult_t pncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    if (!shim_comm_live(comm))
        return shim_fail(ncclInvalidArgument, "ncclCommAbort", "comm %p is not a live communicator",
                         (void *)comm);
    rcc_comm_t rcc = comm->rcc;
    comm_retire(comm);
    shim_log(SHIM_LOG_INFO, "ncclCommAbort: comm %p", (void *)comm);
    return rcc ? shim_check(rcc_comm_abort(rcc), "ncclCommAbort", NULL) : ncclSuccess;
}
SHIM_ALIAS(ncclCommAbort);

/* ---- queries --------------------------------------------------------------------- */

SHIM_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    const char *func = "ncclCommGetAsyncError";
    if (!asyncError)
        return shim_fail(ncclInvalidArgument, func, "asyncError is NULL");
    if (comm && shim_comm_live(comm) && !comm->rcc) {
        *asyncError = comm->init_result; /* a deferred init: in progress, or its failure */
        return ncclSuccess;
    }
    ncclResult_t err = ncclSuccess;
    struct ncclComm *c = shim_comm(comm, func, 0, &err);
    if (!c)
        return err;
    /* Finalized: quiescent, as NCCL reports it once finalize is done. Not
     * probed: peers that destroyed their communicators would read as lost
     * (ringcc's probe cannot tell a clean exit from a crash). */
    if (c->finalized) {
        *asyncError = ncclSuccess;
        return ncclSuccess;
    }
    rcc_result_t state = RCC_SUCCESS;
    rcc_result_t res = rcc_comm_get_async_error(c->rcc, &state);
    if (res != RCC_SUCCESS)
        return shim_check(res, func, NULL);
    if (state != RCC_SUCCESS)
        shim_check(state, func, c->rcc); /* the failure's story, for ncclGetLastError */
    *asyncError = shim_result(state);
    return ncclSuccess;
}
SHIM_ALIAS(ncclCommGetAsyncError);

/* One int of a live communicator (even a finalized one), for the queries. */
static ncclResult_t query(ncclComm_t comm, int *out, const char *what, const char *func)
{
    ncclResult_t err = ncclSuccess;
    struct ncclComm *c = shim_comm(comm, func, 0, &err);
    if (!c)
        return err;
    if (!out)
        return shim_fail(ncclInvalidArgument, func, "%s is NULL", what);
    *out = what[0] == 'c' ? c->nranks : what[0] == 'd' ? c->device : c->rank;
    return ncclSuccess;
}

SHIM_API ncclResult_t pncclCommCount(const ncclComm_t comm, int *count)
{
    return query(comm, count, "count", "ncclCommCount");
}
SHIM_ALIAS(ncclCommCount);

SHIM_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device)
{
    return query(comm, device, "device", "ncclCommCuDevice");
}
SHIM_ALIAS(ncclCommCuDevice);

SHIM_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank)
{
    return query(comm, rank, "rank", "ncclCommUserRank");
}
SHIM_ALIAS(ncclCommUserRank);
