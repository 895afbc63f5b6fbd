/*
 * ncclRedOpCreatePreMulSum: sum over ranks of scalar * x, each rank with its own scalar. ringcc
 * has no such operator, so the shim multiplies a staging copy of the input on the host and
 * sums that. This needs host buffers: it works where ringcc runs collectives on host memory
 * (stream NULL, no CUDA device), and is refused with ncclInvalidUsage where the data may be on
 * a GPU (README, "NCCL shim").
 */
#include <stdlib.h>
#include <string.h>

#include "halfbits.h"
#include "shim.h"

SHIM_API ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                                ncclDataType_t datatype,
                                                ncclScalarResidence_t residence, ncclComm_t comm)
{
    const char *func = "ncclRedOpCreatePreMulSum";
    ncclResult_t err = ncclSuccess;
    struct ncclComm *c = shim_comm(comm, func, 1, &err);
    if (!c)
        return err;
    if (!op || !scalar)
        return shim_fail(ncclInvalidArgument, func, "op or scalar is NULL");
    size_t esize = rcc_datatype_size((rcc_datatype_t)datatype);
    if (esize == 0)
        return shim_fail(datatype == ncclFloat8e4m3 || datatype == ncclFloat8e5m2
                             ? ncclInvalidUsage
                             : ncclInvalidArgument,
                         func, "datatype %d is not one ringcc reduces", (int)datatype);
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
        return shim_fail(ncclInvalidArgument, func, "residence %d is not valid", (int)residence);
    for (int i = 0; i < SHIM_MAX_PREMUL; i++) {
        shim_premul_t *p = &c->premul[i];
        if (p->in_use)
            continue;
        *p = (shim_premul_t){.in_use = 1, .dtype = datatype, .residence = residence};
        if (residence == ncclScalarHostImmediate)
            memcpy(p->scalar, scalar, esize);
        else
            p->scalar_ptr = scalar;
        *op = (ncclRedOp_t)(ncclNumOps + i);
        return ncclSuccess;
    }
    return shim_fail(ncclInvalidUsage, func, "this communicator has %d PreMulSum operators already",
                     SHIM_MAX_PREMUL);
}
SHIM_ALIAS(ncclRedOpCreatePreMulSum);

/* The operator's slot on comm, or NULL when op is not one of them. */
static shim_premul_t *premul_slot(struct ncclComm *c, ncclRedOp_t op)
{
    long i = (long)op - ncclNumOps;
    if (i < 0 || i >= SHIM_MAX_PREMUL || !c->premul[i].in_use)
        return NULL;
    return &c->premul[i];
}

SHIM_API ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    const char *func = "ncclRedOpDestroy";
    ncclResult_t err = ncclSuccess;
    struct ncclComm *c = shim_comm(comm, func, 0, &err);
    if (!c)
        return err;
    shim_premul_t *p = premul_slot(c, op);
    if (!p)
        return shim_fail(ncclInvalidArgument, func,
                         "op %d was not made by ncclRedOpCreatePreMulSum on this communicator "
                         "(or was destroyed)",
                         (int)op);
    p->in_use = 0;
    return ncclSuccess;
}
SHIM_ALIAS(ncclRedOpDestroy);

/* out[i] = in[i] * s in the type's own arithmetic: integers wrap (computed
 * unsigned, so signed overflow is defined), 16-bit floats are multiplied in
 * float32 and rounded once, which is the correctly rounded 16-bit product
 * (the exact product of two 11- or 8-bit significands fits float32). */
#define SCALE_INT(T, UT)                                                                           \
    do {                                                                                           \
        const T *x = in;                                                                           \
        T *y = out, s;                                                                             \
        memcpy(&s, scalar, sizeof s);                                                              \
        for (size_t i = 0; i < n; i++)                                                             \
            y[i] = (T)((UT)x[i] * (UT)s);                                                          \
    } while (0)
#define SCALE_FLOAT(T)                                                                             \
    do {                                                                                           \
        const T *x = in;                                                                           \
        T *y = out, s;                                                                             \
        memcpy(&s, scalar, sizeof s);                                                              \
        for (size_t i = 0; i < n; i++)                                                             \
            y[i] = x[i] * s;                                                                       \
    } while (0)
#define SCALE_HALF(TO_FLOAT, FROM_FLOAT)                                                           \
    do {                                                                                           \
        const uint16_t *x = in;                                                                    \
        uint16_t *y = out, s;                                                                      \
        memcpy(&s, scalar, sizeof s);                                                              \
        float fs = TO_FLOAT(s);                                                                    \
        for (size_t i = 0; i < n; i++)                                                             \
            y[i] = FROM_FLOAT(TO_FLOAT(x[i]) * fs);                                                \
    } while (0)

static void scale(void *out, const void *in, size_t n, ncclDataType_t dtype, const void *scalar)
{
    switch (dtype) {
    case ncclInt8: SCALE_INT(int8_t, uint8_t); break;
    case ncclUint8: SCALE_INT(uint8_t, unsigned); break;
    case ncclInt32: SCALE_INT(int32_t, uint32_t); break;
    case ncclUint32: SCALE_INT(uint32_t, uint32_t); break;
    case ncclInt64: SCALE_INT(int64_t, uint64_t); break;
    case ncclUint64: SCALE_INT(uint64_t, uint64_t); break;
    case ncclFloat16: SCALE_HALF(red_h2f, red_f2h); break;
    case ncclBfloat16: SCALE_HALF(red_b2f, red_f2b); break;
    case ncclFloat32: SCALE_FLOAT(float); break;
    case ncclFloat64: SCALE_FLOAT(double); break;
    default: break; /* refused at creation */
    }
}

ncclResult_t shim_premul_prepare(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dtype,
                                 const void *sendbuf, size_t count, cudaStream_t stream,
                                 rcc_redop_t *rop, void **staged, const char *func)
{
    *staged = NULL;
    if ((int)op >= 0 && op < ncclNumOps) {
        *rop = (rcc_redop_t)op;
        return ncclSuccess;
    }
    shim_premul_t *p = premul_slot(comm, op);
    if (!p)
        return shim_fail(ncclInvalidArgument, func,
                         "op %d is neither a built-in operator nor a PreMulSum operator of this "
                         "communicator",
                         (int)op);
    if (p->dtype != dtype)
        return shim_fail(ncclInvalidArgument, func,
                         "PreMulSum operator %d was made for datatype %d, used with %d", (int)op,
                         (int)p->dtype, (int)dtype);
    /* Only where ringcc itself works on host memory alone are the buffers
     * known to be readable here. */
    if (stream || rcc_cuda_available())
        return shim_fail(ncclInvalidUsage, func,
                         "PreMulSum operators work on host buffers with a NULL stream only in "
                         "this version of ringcc (the scaling is done on the host); use ncclSum "
                         "on data scaled beforehand");
    *rop = RCC_SUM;
    if (count == 0 || !sendbuf)
        return ncclSuccess; /* ringcc checks the arguments */
    size_t esize = rcc_datatype_size((rcc_datatype_t)dtype);
    void *copy = malloc(count * esize);
    if (!copy)
        return shim_fail(ncclSystemError, func, "out of memory for a %zu-byte staging copy",
                         count * esize);
    scale(copy, sendbuf, count, dtype,
          p->residence == ncclScalarHostImmediate ? (const void *)p->scalar : p->scalar_ptr);
    *staged = copy;
    return ncclSuccess;
}
