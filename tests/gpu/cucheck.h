/* CU(call): a CUDA runtime call inside a rank of tests/mp/mp.h's harness; on failure the rank
 * fails (MP_FAIL) with the call and CUDA's text. */
#ifndef RINGCC_TEST_CUCHECK_H
#define RINGCC_TEST_CUCHECK_H

#include <cuda_runtime_api.h>

#include "../mp/mp.h"

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            MP_FAIL("%s: %s", #call, cudaGetErrorString(e_));                                      \
    } while (0)

#endif /* RINGCC_TEST_CUCHECK_H */
