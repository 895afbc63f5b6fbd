/* CU(call): a CUDA runtime call inside a rank of tests/mp/mp.h's harness; on failure the rank
 * fails (MP_FAIL) with the call and CUDA's text. */
#ifndef RINGCC_TEST_CUCHECK_H
#define RINGCC_TEST_CUCHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../mp/mp.h"
#include "ringcc.h"

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            MP_FAIL("%s: %s", #call, cudaGetErrorString(e_));                                      \
    } while (0)

/* Whether this machine has a usable CUDA device (else "SKIP: reason" is
 * printed), asked in a child: the test's own process must not fork with a
 * CUDA context. */
static inline int cu_probe_device(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(rcc_cuda_available() ? 0 : (printf("SKIP: %s\n", rcc_last_error(NULL)), 77));
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

#endif /* RINGCC_TEST_CUCHECK_H */
