/*
 * ncclGroupStart/End/SimulateEnd on ringcc's groups (which have NCCL's semantics for
 * operations). The shim adds what NCCL's groups also hold: communicator inits, which are
 * deferred to the outermost end and then run together (one thread per rank), and staging
 * buffers of PreMulSum operations, freed once the group's operations have run.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

typedef struct {
    struct ncclComm *comm;
    rcc_unique_id_t id;
    int nranks, rank;
    rcc_result_t res;
    char error[512];
} deferred_init_t;

static _Thread_local int depth;
static _Thread_local int ops_in_group;
static _Thread_local deferred_init_t *inits;
static _Thread_local int ninits, inits_cap;
static _Thread_local void **staged;
static _Thread_local int nstaged, staged_cap;

int shim_group_depth(void) { return depth; }

void shim_group_count_op(void)
{
    if (depth > 0)
        ops_in_group++;
}

/* Appends to a growing thread-local array; 0 when out of memory. */
static int grow(void **array, int *cap, int count, size_t elem)
{
    if (count < *cap)
        return 1;
    int ncap = *cap ? 2 * *cap : 8;
    void *p = realloc(*array, (size_t)ncap * elem);
    if (!p)
        return 0;
    *array = p;
    *cap = ncap;
    return 1;
}

ncclResult_t shim_group_defer_init(struct ncclComm *comm, int nranks, const ncclUniqueId *id,
                                   int rank, const char *func)
{
    if (!grow((void **)&inits, &inits_cap, ninits, sizeof *inits))
        return shim_fail(ncclSystemError, func, "out of memory");
    deferred_init_t *d = &inits[ninits++];
    *d = (deferred_init_t){.comm = comm, .nranks = nranks, .rank = rank};
    memcpy(d->id.internal, id->internal, sizeof d->id.internal);
    comm->init_result = ncclInProgress;
    return ncclSuccess;
}

void shim_group_free_later(void *buf)
{
    if (depth == 0 || !buf) {
        free(buf);
        return;
    }
    if (!grow((void **)&staged, &staged_cap, nstaged, sizeof *staged)) {
        /* Cannot happen in practice (a few pointers); keeping the buffer
         * alive matters more than freeing it. */
        return;
    }
    staged[nstaged++] = buf;
}

static void *deferred_init_thread(void *arg)
{
    deferred_init_t *d = arg;
    rcc_comm_t rcc = NULL;
    d->res = rcc_comm_init_rank(&rcc, d->nranks, d->id, d->rank, NULL);
    if (d->res != RCC_SUCCESS) {
        strncpy(d->error, rcc_last_error(NULL), sizeof d->error - 1);
        return NULL;
    }
    d->comm->rcc = rcc;
    rcc_comm_rank(rcc, &d->comm->rank);
    rcc_comm_size(rcc, &d->comm->nranks);
    return NULL;
}

/* All of this thread's deferred inits at once: they may be ranks of one
 * communicator, each blocking until the others arrive. */
static ncclResult_t run_inits(void)
{
    int n = ninits;
    deferred_init_t *list = inits;
    inits = NULL;
    ninits = inits_cap = 0;
    if (n == 0)
        return ncclSuccess;
    pthread_t *threads = calloc((size_t)n, sizeof *threads);
    int *started = calloc((size_t)n, sizeof *started);
    for (int i = 0; i < n; i++) {
        list[i].res = RCC_ERR_SYSTEM;
        strcpy(list[i].error, "could not start an init thread");
        if (!shim_comm_live(list[i].comm)) { /* destroyed before the group ended */
            list[i].comm = NULL;
            strcpy(list[i].error, "the communicator was destroyed before ncclGroupEnd");
        } else if (threads && started && n > 1)
            started[i] = pthread_create(&threads[i], NULL, deferred_init_thread, &list[i]) == 0;
        else if (n == 1)
            deferred_init_thread(&list[i]);
    }
    ncclResult_t first = ncclSuccess;
    for (int i = 0; i < n; i++) {
        if (started && started[i])
            pthread_join(threads[i], NULL);
        ncclResult_t err = shim_result(list[i].res);
        if (list[i].comm)
            list[i].comm->init_result = err;
        if (err != ncclSuccess && first == ncclSuccess)
            first = shim_fail(err, "ncclGroupEnd", "init of rank %d of %d: %s", list[i].rank,
                              list[i].nranks, list[i].error);
        else if (err == ncclSuccess)
            shim_log(SHIM_LOG_INFO, "ncclGroupEnd: comm %p rank %d nranks %d - Init COMPLETE",
                     (void *)list[i].comm, list[i].rank, list[i].nranks);
    }
    free(threads);
    free(started);
    free(list);
    return first;
}

static void free_staged(void)
{
    for (int i = 0; i < nstaged; i++)
        free(staged[i]);
    free(staged);
    staged = NULL;
    nstaged = staged_cap = 0;
}

SHIM_API ncclResult_t pncclGroupStart(void)
{
    depth++;
    rcc_group_start();
    return ncclSuccess;
}
SHIM_ALIAS(ncclGroupStart);

/* Inits first (operations cannot name a communicator still being made),
 * then ringcc launches the operations and waits for the blocking ones. */
SHIM_API ncclResult_t pncclGroupEnd(void)
{
    if (depth == 0)
        return shim_fail(ncclInvalidUsage, "ncclGroupEnd", "no group started (ncclGroupStart)");
    if (depth > 1) {
        depth--;
        rcc_group_end();
        return ncclSuccess;
    }
    ncclResult_t first = run_inits();
    rcc_result_t res = rcc_group_end();
    depth = 0;
    ops_in_group = 0;
    free_staged();
    if (res != RCC_SUCCESS && first == ncclSuccess)
        first = shim_check(res, "ncclGroupEnd", NULL);
    return first;
}
SHIM_ALIAS(ncclGroupEnd);

/* NCCL estimates the group's time and discards its operations. ringcc
 * cannot take back an operation once issued, so only a group that holds
 * none (inits at most) can be simulated: its estimate is 0. */
SHIM_API ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
    const char *func = "ncclGroupSimulateEnd";
    if (!simInfo)
        return shim_fail(ncclInvalidArgument, func, "simInfo is NULL");
    if (simInfo->magic != SHIM_SIM_INFO_MAGIC ||
        simInfo->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float))
        return shim_fail(ncclInvalidArgument, func,
                         "simInfo (magic 0x%x, size %zu) was not initialised with "
                         "NCCL_SIM_INFO_INITIALIZER",
                         simInfo->magic, simInfo->size);
    if (depth == 0)
        return shim_fail(ncclInvalidUsage, func, "no group started (ncclGroupStart)");
    if (ops_in_group > 0)
        return shim_fail(ncclInvalidUsage, func,
                         "ringcc cannot simulate a group holding operations (%d issued); the "
                         "group stays open: end it with ncclGroupEnd",
                         ops_in_group);
    ncclResult_t err = pncclGroupEnd();
    if (err == ncclSuccess)
        simInfo->estimatedTime = 0.0f;
    return err;
}
SHIM_ALIAS(ncclGroupSimulateEnd);
