/*
 * What the NCCL shim's multi-process tests share (test_shim.c on host buffers, test_shim_stream.c
 * on the stand-in GPU): NCCL's declarations (the real nccl.h where meson found one, defining
 * SHIM_REAL_NCCL_H, else the shim's own), checks of NCCL results inside a rank (tests/mp/mp.h),
 * and communicators made the NCCL way, from an id that rank 0 makes.
 */
#ifndef RINGCC_TEST_SHIMTEST_H
#define RINGCC_TEST_SHIMTEST_H

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#ifdef SHIM_REAL_NCCL_H
#include <nccl.h>
/* nccl_device/core.h, which declares it, is C++ only. */
struct ncclDevCommRequirements;
struct ncclDevComm;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements *reqs,
                               struct ncclDevComm *outDevComm);
#else
#include "nccl_api.h"
#define NCCL_CONFIG_INITIALIZER                                                                    \
    {                                                                                              \
        .size = sizeof(ncclConfig_t), .magic = SHIM_CONFIG_MAGIC,                                  \
        .version = SHIM_NCCL_VERSION_CODE, .blocking = SHIM_CONFIG_UNDEF_INT                       \
    }
#define NCCL_SIM_INFO_INITIALIZER                                                                  \
    {                                                                                              \
        sizeof(ncclSimInfo_t), SHIM_SIM_INFO_MAGIC, SHIM_NCCL_VERSION_CODE, -1.0f                  \
    }
#define NCCL_SPLIT_NOCOLOR (-1)
#endif

#include "mp.h"

#define CHECK_NCCL(call)                                                                           \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            MP_FAIL("%s: %s: %s", #call, ncclGetErrorString(r_), ncclGetLastError(NULL));          \
    } while (0)

/* A call that must fail with `code` and leave text naming `word` in ncclGetLastError. */
#define EXPECT_FAIL(call, code, word)                                                              \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != (code))                                                                          \
            MP_FAIL("%s returned %d, not %s", #call, (int)r_, #code);                              \
        if (!strstr(ncclGetLastError(NULL), (word)))                                               \
            MP_FAIL("%s: last error \"%s\" does not name \"%s\"", #call, ncclGetLastError(NULL),   \
                    (word));                                                                       \
    } while (0)

/* The start of mp_shared(): the ids of a run (the rest is free for the test). */
typedef struct {
    atomic_int ready[8];
    ncclUniqueId ids[8];
} id_area_t;

/* Rank 0 makes id `slot` with ncclGetUniqueId; every rank gets it. 0 or 1 (printed). */
int share_id(int rank, int slot, ncclUniqueId *id);

/* A communicator from ncclCommInitRankConfig on id `slot`; odd ranks ask for
 * a nonblocking one, which must behave alike. 0 or 1 (printed). */
int make_comm(int rank, int nranks, int slot, ncclComm_t *comm);

#endif /* RINGCC_TEST_SHIMTEST_H */
