/*
 * The stream path: operations ordered on a CUDA stream (rcc_<name>_stream).
 * collectives.c checks the arguments and builds the operation; here it is
 * tied to the caller's stream and handed to the progress thread.
 */
#include <pthread.h>
#include <stdio.h>

#include "comm.h"
#include "rcc_config.h"
#if RCC_HAVE_CUDA
#include "cuda/reduce_cuda.h"
#endif

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_devices;
static char probe_why[256] = "this build has no CUDA (meson feature `cuda` off)";

static void stream_probe(void)
{
#if RCC_HAVE_CUDA
    char why[200] = "";
    probe_devices = rcci_cuda_device_count(why, sizeof why);
    if (probe_devices == 0)
        snprintf(probe_why, sizeof probe_why, "no usable CUDA device (%s)", why);
#endif
}

int rcci_stream_usable(void)
{
    pthread_once(&probe_once, stream_probe);
    return probe_devices > 0;
}

const char *rcci_stream_why(void)
{
    pthread_once(&probe_once, stream_probe);
    return probe_devices > 0 ? "" : probe_why;
}

int rcc_cuda_available(void)
{
    rcci_tls_error_clear();
    if (rcci_stream_usable())
        return 1;
    rcci_error(RCC_ERR_UNSUPPORTED, "%s", probe_why);
    return 0;
}

rcc_result_t rcci_stream_submit(struct rcc_comm *comm, rcci_op_t *op, void *stream)
{
    (void)comm;
    (void)stream;
    rcc_result_t res = rcci_error(RCC_ERR_UNSUPPORTED, "%s on a CUDA stream: not built yet",
                                  rcci_coll_name(op->coll));
    rcci_op_release(op);
    return res;
}
