/*
 * The shim's ABI against the real nccl.h: this file is compiled with NVIDIA's header, checks at
 * compile time that every enumerator, struct size and field offset the shim declares
 * (tools/nccl/nccl_abi.h, included here as lists only, since the two headers cannot both be
 * included) is NCCL's, and then makes host-side calls through the header's prototypes into
 * libringcc_nccl.so on a 1-rank communicator. Without nccl.h meson builds
 * test_shim_abi_skip.c instead (exit 77, meson's SKIP).
 */
#include <nccl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHIM_ABI_LISTS_ONLY
#include "nccl_abi.h"

/* ---- compile time ---------------------------------------------------------------- */

#define SAME_VALUE(name, value) _Static_assert((long long)(name) == (value), #name " differs");
SHIM_RESULT_LIST(SAME_VALUE)
SHIM_REDOP_LIST(SAME_VALUE)
SHIM_DATATYPE_LIST(SAME_VALUE)
SHIM_RESIDENCE_LIST(SAME_VALUE)

/* The shim's enums hold ints only, so they are int-sized; NCCL's must be too. */
_Static_assert(sizeof(ncclResult_t) == sizeof(int), "ncclResult_t size");
_Static_assert(sizeof(ncclRedOp_t) == sizeof(int), "ncclRedOp_t size");
_Static_assert(sizeof(ncclDataType_t) == sizeof(int), "ncclDataType_t size");
_Static_assert(sizeof(ncclScalarResidence_t) == sizeof(int), "ncclScalarResidence_t size");

_Static_assert(NCCL_UNIQUE_ID_BYTES == SHIM_UNIQUE_ID_BYTES, "unique id size");
_Static_assert(sizeof(ncclUniqueId) == SHIM_UNIQUE_ID_BYTES, "ncclUniqueId size");
_Static_assert(sizeof(ncclComm_t) == sizeof(void *), "ncclComm_t is a pointer");
_Static_assert(NCCL_CONFIG_UNDEF_INT == SHIM_CONFIG_UNDEF_INT, "NCCL_CONFIG_UNDEF_INT");
_Static_assert(NCCL_SPLIT_NOCOLOR == -1, "NCCL_SPLIT_NOCOLOR");

/* The shim's structs, rebuilt from its field lists under other names. */
#define LAYOUT_FIELD(type, name) type name;
struct shim_config {
    SHIM_CONFIG_FIELDS(LAYOUT_FIELD)
};
struct shim_sim_info {
    SHIM_SIM_INFO_FIELDS(LAYOUT_FIELD)
};

#define SAME_FIELD(real, shim, type, name)                                                         \
    _Static_assert(offsetof(real, name) == offsetof(struct shim, name),                            \
                   #real "." #name " offset");                                                     \
    _Static_assert(sizeof(((real *)0)->name) == sizeof(type), #real "." #name " size");
#define CONFIG_FIELD(type, name) SAME_FIELD(ncclConfig_t, shim_config, type, name)
#define SIM_INFO_FIELD(type, name) SAME_FIELD(ncclSimInfo_t, shim_sim_info, type, name)
SHIM_CONFIG_FIELDS(CONFIG_FIELD)
SHIM_SIM_INFO_FIELDS(SIM_INFO_FIELD)
_Static_assert(sizeof(ncclConfig_t) == sizeof(struct shim_config), "ncclConfig_t size");
_Static_assert(sizeof(ncclSimInfo_t) == sizeof(struct shim_sim_info), "ncclSimInfo_t size");
/* (ncclTeam, of nccl_device/core.h, is left out: that header is not C. Its
 * three ints are in tools/nccl/nccl_abi.h's SHIM_TEAM_FIELDS.) */

/* ---- run time -------------------------------------------------------------------- */

static int failures;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond,        \
                    ncclGetLastError(NULL));                                                       \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static void check_initializers(void)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    EXPECT(config.magic == SHIM_CONFIG_MAGIC);
    EXPECT(config.size == sizeof(ncclConfig_t));
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    EXPECT(sim.magic == SHIM_SIM_INFO_MAGIC);
}

static void check_version_and_texts(void)
{
    int version = 0;
    EXPECT(ncclGetVersion(&version) == ncclSuccess);
    EXPECT(version == SHIM_NCCL_VERSION_CODE);
    printf("shim reports NCCL %d; this nccl.h is %d\n", version, NCCL_VERSION_CODE);
    for (int r = 0; r <= ncclNumResults; r++)
        EXPECT(ncclGetErrorString((ncclResult_t)r)[0] != '\0');
    EXPECT(ncclGetVersion(NULL) == ncclInvalidArgument);
    EXPECT(strstr(ncclGetLastError(NULL), "ncclGetVersion"));
}

/* A 1-rank communicator through each init's real prototype, one host
 * allreduce on it (a NULL stream: the host path), and the queries. */
static void check_one_rank(void)
{
    ncclUniqueId id;
    EXPECT(ncclGetUniqueId(&id) == ncclSuccess);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = "abi";
    ncclComm_t comm = NULL;
    EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclSuccess);
    if (!comm)
        return;
    ncclResult_t state = ncclInternalError;
    EXPECT(ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclSuccess);
    int count = 0, rank = -1, dev = -1;
    EXPECT(ncclCommCount(comm, &count) == ncclSuccess && count == 1);
    EXPECT(ncclCommUserRank(comm, &rank) == ncclSuccess && rank == 0);
    EXPECT(ncclCommCuDevice(comm, &dev) == ncclSuccess && dev >= 0);
    double in[3] = {1.5, -2, 4}, out[3] = {0};
    EXPECT(ncclAllReduce(in, out, 3, ncclFloat64, ncclSum, comm, (cudaStream_t)0) == ncclSuccess);
    EXPECT(out[0] == 1.5 && out[1] == -2 && out[2] == 4);
    double scalar = 3;
    ncclRedOp_t premul;
    EXPECT(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat64, ncclScalarHostImmediate, comm) ==
           ncclSuccess);
    EXPECT(ncclAllReduce(in, out, 3, ncclFloat64, premul, comm, NULL) == ncclSuccess);
    EXPECT(out[0] == 4.5 && out[1] == -6 && out[2] == 12);
    EXPECT(ncclRedOpDestroy(premul, comm) == ncclSuccess);
    void *handle = NULL;
    EXPECT(ncclCommRegister(comm, out, sizeof out, &handle) == ncclSuccess);
    EXPECT(ncclCommDeregister(comm, handle) == ncclSuccess);
    EXPECT(ncclCommFinalize(comm) == ncclSuccess);
    EXPECT(ncclCommDestroy(comm) == ncclSuccess);
}

/* The shim brings libringcc into the process: proof that the calls went to
 * it, also where this program is linked against NVIDIA's libnccl.so.2 and
 * the shim comes in by LD_PRELOAD or LD_LIBRARY_PATH (tests/shim/meson.build). */
static void check_ringcc_loaded(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (maps && !found && fgets(line, sizeof line, maps))
        found = strstr(line, "libringcc") != NULL;
    if (maps)
        fclose(maps);
    EXPECT(found);
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    /* The allreduces below read their results at once: the host path, which
     * ringcc takes for a NULL stream where no GPU is usable. */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    check_ringcc_loaded();
    check_initializers();
    check_version_and_texts();
    check_one_rank();
    printf("%s\n", failures ? "FAILED" : "ok: the shim's ABI is nccl.h's");
    return failures ? 1 : 0;
}
