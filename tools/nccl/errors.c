/*
 * Results, error text and logging of the NCCL shim: ncclGetErrorString, ncclGetLastError, the
 * mapping of ringcc's results to NCCL's, and NCCL_DEBUG-style lines under RCC_DEBUG.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"

static _Thread_local char last_error[1024];

/* ringcc's results 0..7 are NCCL's (ringcc.h): passed on as they are. */
SHIM_SAME_VALUE(RCC_SUCCESS, ncclSuccess);
SHIM_SAME_VALUE(RCC_ERR_CUDA, ncclUnhandledCudaError);
SHIM_SAME_VALUE(RCC_ERR_SYSTEM, ncclSystemError);
SHIM_SAME_VALUE(RCC_ERR_INTERNAL, ncclInternalError);
SHIM_SAME_VALUE(RCC_ERR_INVALID_ARGUMENT, ncclInvalidArgument);
SHIM_SAME_VALUE(RCC_ERR_INVALID_USAGE, ncclInvalidUsage);
SHIM_SAME_VALUE(RCC_ERR_REMOTE, ncclRemoteError);
SHIM_SAME_VALUE(RCC_IN_PROGRESS, ncclInProgress);

ncclResult_t shim_result(rcc_result_t res)
{
    switch (res) {
    case RCC_SUCCESS:
    case RCC_ERR_CUDA:
    case RCC_ERR_SYSTEM:
    case RCC_ERR_INTERNAL:
    case RCC_ERR_INVALID_ARGUMENT:
    case RCC_ERR_INVALID_USAGE:
    case RCC_ERR_REMOTE:
    case RCC_IN_PROGRESS:
        return (ncclResult_t)res; /* the same numbers by design */
    /* A peer that went silent or away is what NCCL calls a remote error
     * (PyTorch treats it as a network failure and aborts the communicator). */
    case RCC_ERR_TIMEOUT:
    case RCC_ERR_PEER_LOST: return ncclRemoteError;
    /* Ranks that called different collectives used the API wrongly; an
     * unsupported request or an aborted communicator is the caller's too. */
    case RCC_ERR_MISMATCH:
    case RCC_ERR_UNSUPPORTED:
    case RCC_ERR_ABORTED: return ncclInvalidUsage;
    case RCC_ERR_NO_MEMORY: return ncclSystemError; /* as NCCL reports a failed allocation */
    }
    return ncclInternalError;
}

static const char *code_name(ncclResult_t code)
{
    static const char *names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                  "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                  "ncclRemoteError",   "ncclInProgress"};
    return (unsigned)code < sizeof names / sizeof *names ? names[code] : "unknown result";
}

static void record(const char *func, const char *fmt, va_list ap)
{
    int n = snprintf(last_error, sizeof last_error, "%s: ", func);
    if (n < 0 || (size_t)n >= sizeof last_error)
        return;
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
}

ncclResult_t shim_fail(ncclResult_t code, const char *func, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(func, fmt, ap);
    va_end(ap);
    shim_log(SHIM_LOG_WARN, "%s (%s)", last_error, code_name(code));
    return code;
}

ncclResult_t shim_check(rcc_result_t res, const char *func, rcc_comm_t comm)
{
    if (res == RCC_SUCCESS)
        return ncclSuccess;
    const char *detail = rcc_last_error(comm);
    return shim_fail(shim_result(res), func, "%s (%s)", detail[0] ? detail : rcc_strerror(res),
                     rcc_result_name(res));
}

/* ---- the API --------------------------------------------------------------------- */

/* NCCL's texts say what kind of failure it was, so callers that print them
 * read the same; ringcc's detail is in ncclGetLastError. */
SHIM_API const char *pncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with RCC_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with RCC_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to ringcc";
    case ncclInvalidArgument: return "invalid argument (run with RCC_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with RCC_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}
SHIM_ALIAS(ncclGetErrorString);

/* NCCL keeps one last-error text per thread and ignores comm; so does the
 * shim (its text already holds ringcc's detail of the failed call). */
SHIM_API const char *pncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return last_error;
}
SHIM_ALIAS(ncclGetLastError);

/* ---- logging --------------------------------------------------------------------- */

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static _Atomic int level = SHIM_LOG_WARN;

/* The same names ringcc's own log accepts (lib/log.c warns about a bad value). */
static void level_read(void)
{
    const char *v = getenv("RCC_DEBUG");
    static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
    int lvl = SHIM_LOG_WARN;
    for (int i = 0; v && i < 4; i++)
        if (strcasecmp(v, names[i]) == 0)
            lvl = i;
    level = lvl;
}

static int log_level(void)
{
    pthread_once(&level_once, level_read);
    return level;
}

void shim_log_reload(void)
{
    pthread_once(&level_once, level_read);
    level_read();
}

/* NCCL re-reads NCCL_DEBUG; the shim re-reads RCC_DEBUG (its own lines;
 * ringcc's log reads its level once). The internal name is exported by
 * libnccl.so.2 as well, so it is here too. */
SHIM_API void pncclResetDebugInit(void) { shim_log_reload(); }
SHIM_ALIAS(ncclResetDebugInit);
extern __typeof(pncclResetDebugInit) ncclResetDebugInitInternal
    __attribute__((alias("pncclResetDebugInit"), visibility("default")));

/* "host:pid:tid NCCL-shim INFO text", one write per line, like NCCL_DEBUG's. */
void shim_log(int lvl, const char *fmt, ...)
{
    if (lvl > log_level())
        return;
    static const char *tags[] = {"", "WARN", "INFO", "TRACE"};
    char host[64] = "?", line[1400];
    gethostname(host, sizeof host - 1);
    int n = snprintf(line, sizeof line, "%s:%d:%ld ringcc-nccl %s ", host, (int)getpid(),
                     (long)syscall(SYS_gettid), tags[lvl]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
