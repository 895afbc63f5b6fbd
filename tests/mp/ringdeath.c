/* A rank killed on the device ring: see ringdeath.h. */
#include "ringdeath.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h" /* the device ring's links, to see that it is there */
#include "fakedev.h"
#include "mp.h"
#include "testdata.h"

static int ringdeath_rank(int rank, int n, void *arg)
{
    const char *transport = arg;
    setenv("RCC_ALGO", "ring", 1);
    fakedev_install();
    rcc_comm_t comm = mp_comm(30000);
    struct rcc_comm *c = comm;
    if (c->dsend_link.nconns != 1 || c->drecv_link.nconns != 1 ||
        strcmp(c->dsend_link.tr->name, transport) || strcmp(c->drecv_link.tr->name, transport))
        MP_FAIL("rank %d: no device ring over %s", rank, transport);
    void *stream = fakedev_stream_create();
    size_t count = 8u << 20; /* 32 MiB of float32: every slot in use */
    float *d = fakedev_malloc(count * sizeof *d);
    /* One that works first: the connections are up, their slots mapped or told. */
    rcc_result_t res = rcc_allreduce_stream(d, d, 1000, RCC_FLOAT32, RCC_SUM, comm, stream);
    if (res != RCC_SUCCESS || fakedev_stream_sync(stream, 30))
        MP_FAIL("rank %d: the first allreduce: %s", rank, rcc_last_error(comm));
    res = rcc_allreduce_stream(d, d, count, RCC_FLOAT32, RCC_SUM, comm, stream);
    /* A second one queued behind it: the failure must end it too, and
     * its stream's wait with it (the progress thread stores its `done`
     * after the failure's clean-up, which must not wait for the device:
     * fakedev.h). */
    if (res == RCC_SUCCESS)
        res = rcc_allreduce_stream(d, d, count / 2, RCC_FLOAT32, RCC_SUM, comm, stream);
    if (rank == n - 1) {
        usleep(20000);
        kill(getpid(), SIGKILL);
    }
    double t0 = td_now_s();
    if (res != RCC_SUCCESS)
        MP_FAIL("rank %d: the call itself failed: %s", rank, rcc_last_error(comm));
    if (fakedev_stream_sync(stream, 25))
        MP_FAIL("rank %d: the stream was left waiting after a peer died", rank);
    rcc_result_t async = RCC_SUCCESS;
    rcc_comm_get_async_error(comm, &async);
    const char *text = rcc_last_error(comm);
    char dead[32];
    snprintf(dead, sizeof dead, "rank %d", n - 1);
    if (async != RCC_ERR_PEER_LOST || !strstr(text, dead))
        MP_FAIL("rank %d: after rank %d died: %s: %s", rank, n - 1, rcc_result_name(async), text);
    printf("rank %d: failed %.2f s after the call: %s\n", rank, td_now_s() - t0, text);
    /* The survivors' buffers may still be mapped by each other (cudaipc's
     * windows) until their communicators have ended: freed once all have
     * aborted. */
    fakedev_stream_destroy(stream);
    mp_abort_and_wait(comm, n - 1);
    fakedev_free(d);
    return 0;
}

int ringdeath_run(int nranks, const char *transport)
{
    int st[8];
    if (nranks < 2 || nranks > 8)
        return -1;
    mp_run_status(nranks, ringdeath_rank, (void *)transport, 120, st);
    for (int r = 0; r < nranks - 1; r++)
        if (st[r] != 0)
            return -1;
    return st[nranks - 1] == 128 + SIGKILL ? 0 : -1;
}
