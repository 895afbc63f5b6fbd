/*
 * Every function the shim exports, under NCCL's two names (pncclX, and ncclX, its alias):
 * the whole host API of NCCL 2.28's libnccl.so.2, so that a preloaded shim leaves no NCCL
 * symbol to the real library. tests/shim/check_exports.sh compares `nm -D` against this list.
 */
#ifndef RINGCC_NCCL_API_H
#define RINGCC_NCCL_API_H

#include "nccl_abi.h"

/* Declares pncclX and ncclX alike. */
#define SHIM_DECL(ret, name, params)                                                               \
    ret p##name params;                                                                            \
    ret name params;

/* Versions, errors */
SHIM_DECL(ncclResult_t, ncclGetVersion, (int *version))
SHIM_DECL(const char *, ncclGetErrorString, (ncclResult_t result))
SHIM_DECL(const char *, ncclGetLastError, (ncclComm_t comm))
SHIM_DECL(void, ncclResetDebugInit, (void))

/* Communicators */
SHIM_DECL(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId))
SHIM_DECL(ncclResult_t, ncclCommInitRank,
          (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))
SHIM_DECL(ncclResult_t, ncclCommInitRankConfig,
          (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config))
SHIM_DECL(ncclResult_t, ncclCommInitRankScalable,
          (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds,
           ncclConfig_t *config))
SHIM_DECL(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int *devlist))
SHIM_DECL(ncclResult_t, ncclCommSplit,
          (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config))
SHIM_DECL(ncclResult_t, ncclCommShrink,
          (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
           ncclConfig_t *config, int shrinkFlags))
SHIM_DECL(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
SHIM_DECL(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))
SHIM_DECL(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))
SHIM_DECL(ncclResult_t, ncclCommAbort, (ncclComm_t comm))
SHIM_DECL(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError))
SHIM_DECL(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int *count))
SHIM_DECL(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device))
SHIM_DECL(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int *rank))

/* Memory */
SHIM_DECL(ncclResult_t, ncclMemAlloc, (void **ptr, size_t size))
SHIM_DECL(ncclResult_t, ncclMemFree, (void *ptr))
SHIM_DECL(ncclResult_t, ncclCommRegister,
          (const ncclComm_t comm, void *buff, size_t size, void **handle))
SHIM_DECL(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void *handle))
SHIM_DECL(ncclResult_t, ncclCommWindowRegister,
          (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags))
SHIM_DECL(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))

/* Operators */
SHIM_DECL(ncclResult_t, ncclRedOpCreatePreMulSum,
          (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
           ncclComm_t comm))
SHIM_DECL(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))

/* Collectives and point to point */
SHIM_DECL(ncclResult_t, ncclReduce,
          (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
           ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream))
SHIM_DECL(ncclResult_t, ncclBcast,
          (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream))
SHIM_DECL(ncclResult_t, ncclBroadcast,
          (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
           ncclComm_t comm, cudaStream_t stream))
SHIM_DECL(ncclResult_t, ncclAllReduce,
          (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
SHIM_DECL(ncclResult_t, ncclReduceScatter,
          (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
SHIM_DECL(ncclResult_t, ncclAllGather,
          (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
           ncclComm_t comm, cudaStream_t stream))
SHIM_DECL(ncclResult_t, ncclAlltoAll,
          (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
           ncclComm_t comm, cudaStream_t stream))
SHIM_DECL(ncclResult_t, ncclGather,
          (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
           ncclComm_t comm, cudaStream_t stream))
SHIM_DECL(ncclResult_t, ncclScatter,
          (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
           ncclComm_t comm, cudaStream_t stream))
SHIM_DECL(ncclResult_t, ncclSend,
          (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
           cudaStream_t stream))
SHIM_DECL(ncclResult_t, ncclRecv,
          (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
           cudaStream_t stream))

/* Groups */
SHIM_DECL(ncclResult_t, ncclGroupStart, (void))
SHIM_DECL(ncclResult_t, ncclGroupEnd, (void))
SHIM_DECL(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))

/* The device API's host side (nccl_device/): refused, see devapi.c */
SHIM_DECL(ncclResult_t, ncclDevCommCreate,
          (ncclComm_t comm, const ncclDevCommRequirements_t *reqs, ncclDevComm_t *outDevComm))
SHIM_DECL(ncclResult_t, ncclDevCommDestroy, (ncclComm_t comm, const ncclDevComm_t *devComm))
SHIM_DECL(ncclTeam_t, ncclTeamWorld, (ncclComm_t comm))
SHIM_DECL(ncclTeam_t, ncclTeamLsa, (ncclComm_t comm))
SHIM_DECL(ncclTeam_t, ncclTeamRail, (ncclComm_t comm))
SHIM_DECL(int, ncclTeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank))
SHIM_DECL(int, ncclTeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank))
SHIM_DECL(ncclResult_t, ncclLsaBarrierCreateRequirement,
          (ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t *outHandle,
           ncclDevResourceRequirements_t *outReq))
SHIM_DECL(ncclResult_t, ncclGinBarrierCreateRequirement,
          (ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t *outHandle,
           ncclDevResourceRequirements_t *outReq))
SHIM_DECL(int, ncclLLA2ACalcSlots, (int maxElts, int maxEltSize))
SHIM_DECL(ncclResult_t, ncclLLA2ACreateRequirement,
          (int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle,
           ncclDevResourceRequirements_t *outReq))

#endif /* RINGCC_NCCL_API_H */
