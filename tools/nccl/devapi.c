/*
 * The host side of NCCL's device API (nccl_device/: device communicators, teams, barriers,
 * GIN), which lets CUDA kernels communicate by themselves. ringcc has no device-initiated
 * communication: creating a device communicator or its resources is refused with
 * ncclInvalidUsage. The team queries answer truthfully for a process with no peer reachable
 * by loads and stores: the LSA team is this rank alone, the rail team the whole world.
 */
#include "shim.h"

#define NO_DEVICE_API "ringcc has no device-initiated communication (NCCL's device API)"

SHIM_API ncclResult_t pncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements_t *reqs,
                                         ncclDevComm_t *outDevComm)
{
    (void)comm, (void)reqs, (void)outDevComm;
    return shim_fail(ncclInvalidUsage, "ncclDevCommCreate", NO_DEVICE_API);
}
SHIM_ALIAS(ncclDevCommCreate);

SHIM_API ncclResult_t pncclDevCommDestroy(ncclComm_t comm, const ncclDevComm_t *devComm)
{
    (void)comm, (void)devComm;
    return shim_fail(ncclInvalidUsage, "ncclDevCommDestroy", NO_DEVICE_API);
}
SHIM_ALIAS(ncclDevCommDestroy);

SHIM_API ncclResult_t pncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                                       ncclLsaBarrierHandle_t *outHandle,
                                                       ncclDevResourceRequirements_t *outReq)
{
    (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
    return shim_fail(ncclInvalidUsage, "ncclLsaBarrierCreateRequirement", NO_DEVICE_API);
}
SHIM_ALIAS(ncclLsaBarrierCreateRequirement);

SHIM_API ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team,
                                                       int nBarriers,
                                                       ncclGinBarrierHandle_t *outHandle,
                                                       ncclDevResourceRequirements_t *outReq)
{
    (void)comm, (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
    return shim_fail(ncclInvalidUsage, "ncclGinBarrierCreateRequirement", NO_DEVICE_API);
}
SHIM_ALIAS(ncclGinBarrierCreateRequirement);

SHIM_API ncclResult_t pncclLLA2ACreateRequirement(int nBlocks, int nSlots,
                                                  ncclLLA2AHandle_t *outHandle,
                                                  ncclDevResourceRequirements_t *outReq)
{
    (void)nBlocks, (void)nSlots, (void)outHandle, (void)outReq;
    return shim_fail(ncclInvalidUsage, "ncclLLA2ACreateRequirement", NO_DEVICE_API);
}
SHIM_ALIAS(ncclLLA2ACreateRequirement);

/* Slots of a device all-to-all buffer; none exist here. */
SHIM_API int pncclLLA2ACalcSlots(int maxElts, int maxEltSize)
{
    (void)maxElts, (void)maxEltSize;
    shim_fail(ncclInvalidUsage, "ncclLLA2ACalcSlots", NO_DEVICE_API);
    return 0;
}
SHIM_ALIAS(ncclLLA2ACalcSlots);

/* A team {nRanks, rank, stride}; an empty one for a bad communicator. */
static ncclTeam_t team_of(ncclComm_t comm, int whole, const char *func)
{
    ncclResult_t err;
    struct ncclComm *c = shim_comm(comm, func, 0, &err);
    if (!c)
        return (ncclTeam_t){0, 0, 0};
    return whole ? (ncclTeam_t){c->nranks, c->rank, 1} : (ncclTeam_t){1, 0, 1};
}

SHIM_API ncclTeam_t pncclTeamWorld(ncclComm_t comm) { return team_of(comm, 1, "ncclTeamWorld"); }
SHIM_ALIAS(ncclTeamWorld);

SHIM_API ncclTeam_t pncclTeamLsa(ncclComm_t comm) { return team_of(comm, 0, "ncclTeamLsa"); }
SHIM_ALIAS(ncclTeamLsa);

SHIM_API ncclTeam_t pncclTeamRail(ncclComm_t comm) { return team_of(comm, 1, "ncclTeamRail"); }
SHIM_ALIAS(ncclTeamRail);

/* Teams are arithmetic progressions of world ranks through this rank. */
SHIM_API int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank)
{
    ncclResult_t err;
    struct ncclComm *c = shim_comm(comm, "ncclTeamRankToWorld", 0, &err);
    return c ? c->rank + (rank - team.rank) * team.stride : -1;
}
SHIM_ALIAS(ncclTeamRankToWorld);

/* The LSA team is this rank alone: rank 0 of it, or -1 for anyone else. */
SHIM_API int pncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank)
{
    ncclResult_t err;
    struct ncclComm *c = shim_comm(comm, "ncclTeamRankToLsa", 0, &err);
    if (!c)
        return -1;
    return c->rank + (rank - team.rank) * team.stride == c->rank ? 0 : -1;
}
SHIM_ALIAS(ncclTeamRankToLsa);
