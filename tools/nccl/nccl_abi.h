/*
 * The NCCL C API's types as the shim declares them, written from NCCL 2.28's ABI (the values and
 * layouts; tests/shim/test_shim_abi.c compiles against the real nccl.h and asserts that they
 * are the same). Only what the shim's exported functions take and return is here. No CUDA
 * header is needed: a cudaStream_t is a pointer to an opaque struct, passed through to ringcc.
 */
#ifndef RINGCC_NCCL_ABI_H
#define RINGCC_NCCL_ABI_H

#include <stddef.h>

/* The NCCL API version the shim implements (2.28.9), as ncclGetVersion reports it. */
#define SHIM_NCCL_MAJOR 2
#define SHIM_NCCL_MINOR 28
#define SHIM_NCCL_PATCH 9
#define SHIM_NCCL_VERSION_CODE (SHIM_NCCL_MAJOR * 10000 + SHIM_NCCL_MINOR * 100 + SHIM_NCCL_PATCH)

/* Enumerators and struct fields are lists, so that tests/shim/test_shim_abi.c can check each
 * one against the real nccl.h (which it cannot include together with this header). Defining
 * SHIM_ABI_LISTS_ONLY before including this file gives the lists without the declarations. */
#define SHIM_RESULT_LIST(X)                                                                        \
    X(ncclSuccess, 0)                                                                              \
    X(ncclUnhandledCudaError, 1)                                                                   \
    X(ncclSystemError, 2)                                                                          \
    X(ncclInternalError, 3)                                                                        \
    X(ncclInvalidArgument, 4)                                                                      \
    X(ncclInvalidUsage, 5)                                                                         \
    X(ncclRemoteError, 6)                                                                          \
    X(ncclInProgress, 7)                                                                           \
    X(ncclNumResults, 8)

/* Built-in operators; values from ncclNumOps up are operators made by
 * ncclRedOpCreatePreMulSum. ncclMaxRedOp keeps the enum int-sized. */
#define SHIM_REDOP_LIST(X)                                                                         \
    X(ncclSum, 0)                                                                                  \
    X(ncclProd, 1)                                                                                 \
    X(ncclMax, 2)                                                                                  \
    X(ncclMin, 3)                                                                                  \
    X(ncclAvg, 4)                                                                                  \
    X(ncclNumOps, 5)                                                                               \
    X(ncclMaxRedOp, 0x7fffffff)

/* The float8 types exist in NCCL's enum but not in ringcc. */
#define SHIM_DATATYPE_LIST(X)                                                                      \
    X(ncclInt8, 0)                                                                                 \
    X(ncclUint8, 1)                                                                                \
    X(ncclInt32, 2)                                                                                \
    X(ncclUint32, 3)                                                                               \
    X(ncclInt64, 4)                                                                                \
    X(ncclUint64, 5)                                                                               \
    X(ncclFloat16, 6)                                                                              \
    X(ncclFloat32, 7)                                                                              \
    X(ncclFloat64, 8)                                                                              \
    X(ncclBfloat16, 9)                                                                             \
    X(ncclFloat8e4m3, 10)                                                                          \
    X(ncclFloat8e5m2, 11)                                                                          \
    X(ncclNumTypes, 12)

#define SHIM_RESIDENCE_LIST(X)                                                                     \
    X(ncclScalarDevice, 0)                                                                         \
    X(ncclScalarHostImmediate, 1)

/* ncclConfig_t as of NCCL 2.28. Callers built against older headers pass a
 * shorter struct (NCCL only ever appends fields, and `size` says how much
 * there is), newer ones a longer one: config.c reads a field only when
 * `size` covers it. */
#define SHIM_CONFIG_FIELDS(X)                                                                      \
    X(size_t, size)                                                                                \
    X(unsigned int, magic)                                                                         \
    X(unsigned int, version)                                                                       \
    X(int, blocking)                                                                               \
    X(int, cgaClusterSize)                                                                         \
    X(int, minCTAs)                                                                                \
    X(int, maxCTAs)                                                                                \
    X(const char *, netName)                                                                       \
    X(int, splitShare)                                                                             \
    X(int, trafficClass)                                                                           \
    X(const char *, commName)                                                                      \
    X(int, collnetEnable)                                                                          \
    X(int, CTAPolicy)                                                                              \
    X(int, shrinkShare)                                                                            \
    X(int, nvlsCTAs)                                                                               \
    X(int, nChannelsPerNetPeer)                                                                    \
    X(int, nvlinkCentricSched)

#define SHIM_SIM_INFO_FIELDS(X)                                                                    \
    X(size_t, size)                                                                                \
    X(unsigned int, magic)                                                                         \
    X(unsigned int, version)                                                                       \
    X(float, estimatedTime)

/* The device API's team (nccl_device/core.h), returned by value. */
#define SHIM_TEAM_FIELDS(X)                                                                        \
    X(int, nRanks)                                                                                 \
    X(int, rank)                                                                                   \
    X(int, stride)

#define SHIM_UNIQUE_ID_BYTES 128
#define SHIM_CONFIG_MAGIC 0xcafebeefu
#define SHIM_CONFIG_UNDEF_INT (-2147483647 - 1) /* INT_MIN: "not set" */
#define SHIM_SIM_INFO_MAGIC 0x74685283u

#ifndef SHIM_ABI_LISTS_ONLY

#define SHIM_ENUMERATOR(name, value) name = value,
#define SHIM_FIELD(type, name) type name;

typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
typedef struct CUstream_st *cudaStream_t;

typedef struct {
    char internal[SHIM_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum { SHIM_RESULT_LIST(SHIM_ENUMERATOR) } ncclResult_t;
typedef enum { SHIM_REDOP_LIST(SHIM_ENUMERATOR) } ncclRedOp_t;
typedef enum { SHIM_DATATYPE_LIST(SHIM_ENUMERATOR) } ncclDataType_t;
typedef enum { SHIM_RESIDENCE_LIST(SHIM_ENUMERATOR) } ncclScalarResidence_t;
typedef struct {
    SHIM_CONFIG_FIELDS(SHIM_FIELD)
} ncclConfig_t;
typedef struct {
    SHIM_SIM_INFO_FIELDS(SHIM_FIELD)
} ncclSimInfo_t;
typedef struct ncclTeam {
    SHIM_TEAM_FIELDS(SHIM_FIELD)
} ncclTeam_t;

/* Device-API types that host functions take by pointer only. */
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;

#endif /* SHIM_ABI_LISTS_ONLY */
#endif /* RINGCC_NCCL_ABI_H */
