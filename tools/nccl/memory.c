/*
 * Memory calls of the NCCL shim. ncclMemAlloc/Free use the process's CUDA runtime (cudart.c).
 * Buffer and window registration become ringcc registrations (rcc_comm_register: zero-copy
 * sends where the transport has them); the handle is the shim's own, which deregistration
 * checks before it ends the ringcc registration and frees it.
 */
#include <stdlib.h>

#include "shim.h"

#define REG_MAGIC 0x72656773u /* "regs" */

typedef struct {
    uint32_t magic;
    struct ncclComm *comm;
    void *buff;
    size_t size;
    rcc_memreg_t reg;
} registration_t;

SHIM_API ncclResult_t pncclMemAlloc(void **ptr, size_t size)
{
    if (!ptr)
        return shim_fail(ncclInvalidArgument, "ncclMemAlloc", "ptr is NULL");
    int err = shim_cuda_malloc(ptr, size);
    if (err < 0)
        return shim_fail(ncclInvalidUsage, "ncclMemAlloc",
                         "no CUDA runtime is loaded in this process (the shim allocates device "
                         "memory through the process's own runtime)");
    if (err != 0)
        return shim_fail(ncclUnhandledCudaError, "ncclMemAlloc",
                         "cudaMalloc of %zu bytes failed with cudaError %d", size, err);
    return ncclSuccess;
}
SHIM_ALIAS(ncclMemAlloc);

SHIM_API ncclResult_t pncclMemFree(void *ptr)
{
    if (!ptr)
        return ncclSuccess;
    int err = shim_cuda_free(ptr);
    if (err < 0)
        return shim_fail(ncclInvalidUsage, "ncclMemFree",
                         "no CUDA runtime is loaded in this process");
    if (err != 0)
        return shim_fail(ncclUnhandledCudaError, "ncclMemFree", "cudaFree failed with cudaError %d",
                         err);
    return ncclSuccess;
}
SHIM_ALIAS(ncclMemFree);

static ncclResult_t reg_make(ncclComm_t comm, void *buff, size_t size, void **handle,
                             const char *func)
{
    ncclResult_t err = ncclSuccess;
    struct ncclComm *c = shim_comm(comm, func, 0, &err);
    if (!c)
        return err;
    if (!handle)
        return shim_fail(ncclInvalidArgument, func, "handle is NULL");
    registration_t *r = malloc(sizeof *r);
    if (!r)
        return shim_fail(ncclSystemError, func, "out of memory");
    *r = (registration_t){.magic = REG_MAGIC, .comm = c, .buff = buff, .size = size};
    ncclResult_t res = shim_check(rcc_comm_register(c->rcc, buff, size, &r->reg), func, c->rcc);
    if (res != ncclSuccess) {
        free(r);
        return res;
    }
    *handle = r;
    return ncclSuccess;
}

static ncclResult_t reg_free(ncclComm_t comm, void *handle, const char *func)
{
    ncclResult_t err = ncclSuccess;
    struct ncclComm *c = shim_comm(comm, func, 0, &err);
    if (!c)
        return err;
    registration_t *r = handle;
    if (!r || r->magic != REG_MAGIC || r->comm != c)
        return shim_fail(ncclInvalidArgument, func,
                         "handle %p was not registered on this communicator", handle);
    ncclResult_t res = shim_check(rcc_comm_deregister(c->rcc, r->reg), func, c->rcc);
    r->magic = 0;
    free(r);
    return res;
}

SHIM_API ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                        void **handle)
{
    return reg_make(comm, buff, size, handle, "ncclCommRegister");
}
SHIM_ALIAS(ncclCommRegister);

SHIM_API ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle)
{
    return reg_free(comm, handle, "ncclCommDeregister");
}
SHIM_ALIAS(ncclCommDeregister);

SHIM_API ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                              ncclWindow_t *win, int winFlags)
{
    (void)winFlags; /* symmetric or not, ringcc's collectives are the same */
    return reg_make(comm, buff, size, (void **)win, "ncclCommWindowRegister");
}
SHIM_ALIAS(ncclCommWindowRegister);

SHIM_API ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    return reg_free(comm, win, "ncclCommWindowDeregister");
}
SHIM_ALIAS(ncclCommWindowDeregister);
