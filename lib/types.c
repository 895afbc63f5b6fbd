/* Data types, operators and the version: small facts the API exposes. */
#include "err.h"
#include "ringcc.h"

size_t rcc_datatype_size(rcc_datatype_t dtype)
{
    static const size_t sizes[RCC_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return (unsigned)dtype < RCC_NUM_DATATYPES ? sizes[dtype] : 0;
}

const char *rcc_datatype_name(rcc_datatype_t dtype)
{
    static const char *const names[RCC_NUM_DATATYPES] = {"int8",    "uint8",   "int32",   "uint32",
                                                         "int64",   "uint64",  "float16", "float32",
                                                         "float64", "bfloat16"};
    return (unsigned)dtype < RCC_NUM_DATATYPES ? names[dtype] : "unknown";
}

const char *rcc_redop_name(rcc_redop_t op)
{
    static const char *const names[RCC_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};
    return (unsigned)op < RCC_NUM_OPS ? names[op] : "unknown";
}

rcc_result_t rcc_get_version(int *version)
{
    if (!version)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_get_version: version is NULL");
    *version = RCC_VERSION_CODE;
    return RCC_SUCCESS;
}
