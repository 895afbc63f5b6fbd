/* Ids and communicators for the NCCL shim's multi-process tests (shimtest.h). */
#include "shimtest.h"

#include <unistd.h>

int share_id(int rank, int slot, ncclUniqueId *id)
{
    size_t size;
    id_area_t *area = mp_shared(&size);
    if (rank == 0) {
        CHECK_NCCL(ncclGetUniqueId(&area->ids[slot]));
        atomic_store(&area->ready[slot], 1);
    }
    for (int waited = 0; !atomic_load(&area->ready[slot]); waited++) {
        if (waited > 60000)
            MP_FAIL("no unique id from rank 0");
        usleep(1000);
    }
    *id = area->ids[slot];
    return 0;
}

int make_comm(int rank, int nranks, int slot, ncclComm_t *comm)
{
    ncclUniqueId id;
    if (share_id(rank, slot, &id))
        return 1;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = rank % 2 ? 0 : 1;
    CHECK_NCCL(ncclCommInitRankConfig(comm, nranks, id, rank, &config));
    ncclResult_t state = ncclInternalError;
    CHECK_NCCL(ncclCommGetAsyncError(*comm, &state));
    if (state != ncclSuccess)
        MP_FAIL("a new communicator reports %d", (int)state);
    return 0;
}
