/*
 * Transport choice per ring edge, and the device ring: a second pair of
 * ring connections, over a transport that moves device memory itself, for
 * the collectives whose buffers are all device memory (stream.c,
 * coll/pipeline.c): cudaipc between GPUs of one host
 * (RCCI_CAP_DEVICE_MEM), and, with the device ring queued at the call
 * (RCC_DEVICE_PIPELINE 2 or 3), ibverbs by GPUDirect RDMA between hosts
 * (RCCI_CAP_QUEUED_DEVICE). Host buffers keep the host ring
 * (comm->send_link/recv_link), so a job mixing both kinds of buffer uses
 * each transport for what it is good at.
 *
 * Made at init, not on the first device operation: connecting needs every
 * rank of the edge at once, and at init they are (lazily, a rank that
 * reached its first device collective would wait for a neighbour still in
 * host work). It costs a CUDA context and 2 x 8 x RCC_CUDAIPC_SLOT_BYTES
 * (or RCC_IB_GDR_SLOT_BYTES; 8 MiB) of device memory per edge, only on
 * ranks that have a GPU and a neighbour with one that such a transport
 * reaches; RCC_TRANSPORT=tcp turns it off. Where a rank cannot map its
 * same-host neighbour's memory, found out before any connection, every rank
 * goes without it; an edge to another host whose ends cannot both register
 * device memory for GPUDirect RDMA is staged through host memory
 * (devring_probe).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "comm.h"
#include "devapi.h"
#include "log.h"
#include "params.h"

/* Connection tag of the device ring's edge (clear of the host ring's and
 * the point-to-point lanes'). */
#define DEVRING_TAG 0x200u
#define DEVRING_SLICE_NS (50ll * 1000000) /* accept waits between bootstrap checks */

static int devring_is_device(const rcci_transport_t *tr)
{
    return (tr->caps & RCCI_CAP_DEVICE_MEM) != 0;
}

/* Whether `tr` can be an edge of this communicator's device ring: a
 * device transport, or one whose queued calls move device memory while
 * the device ring is queued at the call (coll/pipeline.c's driven by the
 * progress thread uses the in-place calls, which only cudaipc has). */
static int devring_can_carry(const struct rcc_comm *comm, const rcci_transport_t *tr)
{
    return devring_is_device(tr) ||
           ((tr->caps & RCCI_CAP_QUEUED_DEVICE) && comm->dev_pipeline == RCCI_DEVPIPE_RING);
}

rcc_result_t rcci_pick_transport(struct rcc_comm *comm, const rcci_peer_info_t *info,
                                 const uint32_t *transports, int peer, int device, int *index,
                                 char *why, size_t why_size)
{
    uint32_t common = transports[comm->rank] & transports[peer];
    const rcci_peer_info_t *me = &info[comm->rank], *them = &info[peer];
    const char *only = rcci_param_str(RCCI_PARAM_TRANSPORT);
    char refused[160] = "";
    for (int i = 0; rcci_transports[i]; i++) {
        const rcci_transport_t *tr = rcci_transports[i];
        int priority;
        if (!(common & (1u << i)) || (device && !devring_can_carry(comm, tr)))
            continue;
        if (device && !devring_is_device(tr) && (me->cuda_device < 0 || them->cuda_device < 0)) {
            snprintf(refused, sizeof refused, "; %s: rank %d has no GPU", tr->name,
                     me->cuda_device < 0 ? me->rank : them->rank);
            continue;
        }
        /* Host buffers go to a device transport only when RCC_TRANSPORT says so. */
        if (!device && devring_is_device(tr) && !*only)
            continue;
        if (tr->can_connect(comm->tctx[i], me, them, &priority) != RCC_SUCCESS) {
            snprintf(refused, sizeof refused, "; %s: %s", tr->name, rcci_tls_error());
            continue;
        }
        *index = i;
        if (*only)
            snprintf(why, why_size, "forced by RCC_TRANSPORT=%s", only);
        else if (device && devring_is_device(tr))
            snprintf(why, why_size, "same host, GPUs %d and %d: device memory moves GPU to GPU",
                     me->cuda_device, them->cuda_device);
        else if (device)
            snprintf(why, why_size,
                     "%s, GPUs %d and %d: device memory moves GPU to GPU by GPUDirect RDMA, its "
                     "GPU work queued at the call",
                     me->host_hash == them->host_hash ? "same host" : "another host",
                     me->cuda_device, them->cuda_device);
        else
            snprintf(why, why_size, "%s, %s; the first built on both that connects them",
                     me->host_hash == them->host_hash ? "same host" : "another host",
                     i == 0 ? "highest priority" : "higher ones cannot");
        return RCC_SUCCESS;
    }
    char name[128];
    rcci_bootstrap_peer_name(comm->bootstrap, peer, name, sizeof name);
    if (device)
        return rcci_error(RCC_ERR_UNSUPPORTED, "no device transport connects rank %d with %s%s",
                          comm->rank, name, refused[0] ? refused : " (none usable here)");
    return rcci_error(RCC_ERR_UNSUPPORTED,
                      "no transport connects rank %d with %s (RCC_TRANSPORT=%s)", comm->rank, name,
                      only);
}

/* Whether the edge from rank r to r + 1 gets a device connection: the same
 * answer on every rank (can_connect looks at the peers' information only). */
static int devring_edge(struct rcc_comm *comm, const rcci_peer_info_t *info,
                        const uint32_t *transports, int r, int *index, char *why, size_t size)
{
    int n = comm->nranks, next = (r + 1) % n;
    struct rcc_comm view = *comm; /* pick for rank r: the choice is symmetric */
    view.rank = r;
    char saved[RCCI_ERR_TEXT_BYTES];
    snprintf(saved, sizeof saved, "%s", rcci_tls_error());
    int ok = rcci_pick_transport(&view, info, transports, next, 1, index, why, size) == RCC_SUCCESS;
    if (!ok)
        snprintf(why, size, "%s", rcci_tls_error());
    rcci_tls_error_set(saved);
    return ok;
}

/* One empty message over each device edge before the communicator is
 * handed out: the transport's set-up (IPC mappings, the first stream
 * stores) runs now, and what fails there (no peer access between the GPUs)
 * fails the init with its reason rather than the first device collective. */
#define DEVRING_HELLO_SEQ 0xffffffffu /* no operation's number */
static rcc_result_t devring_first_message(struct rcc_comm *comm, int64_t deadline)
{
    rcci_link_t *links[2] = {&comm->dsend_link, &comm->drecv_link};
    rcci_request_t *req[2] = {NULL, NULL};
    rcci_tag_t tag = {.seq = DEVRING_HELLO_SEQ};
    char byte = 0;
    rcc_result_t res = RCC_SUCCESS;
    for (int i = 0; i < 2 && res == RCC_SUCCESS; i++)
        if (links[i]->nconns > 0)
            res = i == 0 ? links[i]->tr->isend(links[i]->conns[0], &byte, 0, &tag, NULL, &req[i])
                         : links[i]->tr->irecv(links[i]->conns[0], &byte, 0, &tag, NULL, &req[i]);
    int64_t check_ns = rcci_now_ns() + DEVRING_SLICE_NS;
    for (int i = 0; i < 2 && res == RCC_SUCCESS; i++) {
        int done = !req[i];
        while (res == RCC_SUCCESS && !done) {
            res = links[i]->tr->test(req[i], &done);
            int64_t now = rcci_now_ns();
            if (res != RCC_SUCCESS || done)
                break;
            if (now > deadline)
                res = rcci_error(RCC_ERR_TIMEOUT,
                                 "the first message on the device ring %s rank %d did not %s",
                                 i == 0 ? "to" : "from", links[i]->peer, i == 0 ? "go" : "come");
            else if (now > check_ns) { /* a neighbour that failed shows here first */
                check_ns = now + DEVRING_SLICE_NS;
                res = rcci_bootstrap_check(comm->bootstrap);
            } else {
                nanosleep(&(struct timespec){0, 100000}, NULL);
            }
        }
        req[i] = NULL; /* freed by test, or with the connection */
    }
    return res;
}

/* Queued on the device ring (coll/devqueue.c), a chunk is one message in
 * one slot of the transport: the chunk size must fit on both edges. */
static rcc_result_t devring_chunk_fits(struct rcc_comm *comm)
{
    rcci_link_t *links[2] = {&comm->dsend_link, &comm->drecv_link};
    if (comm->dev_pipeline != RCCI_DEVPIPE_RING)
        return RCC_SUCCESS;
    for (int i = 0; i < 2; i++) {
        if (links[i]->nconns == 0)
            continue;
        const rcci_transport_t *tr = links[i]->tr;
        size_t fits = tr->queue_bytes(links[i]->conns[0], i == 0);
        if (comm->dev_chunk_bytes > fits)
            return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                              "RCC_DEVICE_CHUNK_BYTES (%zu) exceeds the device ring's slot %s rank "
                              "%d over %s (%zu bytes: %s); a chunk must fit one slot",
                              (size_t)comm->dev_chunk_bytes, i == 0 ? "to" : "from", links[i]->peer,
                              tr->name, fits,
                              devring_is_device(tr)
                                  ? "RCC_CUDAIPC_SLOT_BYTES, or 0 with RCC_CUDAIPC_INPLACE=0"
                                  : "RCC_IB_GDR_SLOT_BYTES");
    }
    return RCC_SUCCESS;
}

/* Before any connection, every rank of a device edge tries what the
 * transport will need. Same host (cudaipc): the receiver exports a small
 * block of device memory and one of device-mapped host memory, the sender
 * maps and unmaps both; that is what fails where GPUs cannot reach each
 * other's memory (no peer access) or processes cannot open each other's
 * (no shared IPC namespace, /proc closed). Other hosts (ibverbs): both ends
 * register a block of device memory with the adapter, which fails where
 * the stack has no GPUDirect RDMA (no dma-buf support, no nvidia-peermem).
 * Every rank's answer goes round through the bootstrap, so all ranks
 * agree: where a same-host edge cannot be made, no rank makes the device
 * ring (*made = 0, `why` says which rank could not and why), and device
 * buffers are staged through host memory as without one; an edge to
 * another host whose ends cannot both register is staged alone
 * (devring_gdr_ok, from *answers, which the caller frees). */
#define DEVRING_PROBE_BYTES 4096
#define DEVRING_GDR_PROBE_BYTES 65536

typedef struct {
    uint32_t failed; /* cannot map a same-host neighbour's memory */
    uint32_t no_gdr; /* cannot register device memory for GPUDirect RDMA */
    char why[156];
} devring_probe_t;

static int devring_handle_empty(const char *h)
{
    for (size_t i = 0; i < RCCI_IPC_HANDLE_BYTES; i++)
        if (h[i])
            return 0;
    return 1;
}

/* Whether this rank can register device memory with transport `tr`. */
static int devring_gdr_probe(struct rcc_comm *comm, int tr, char *why, size_t size)
{
    const rcci_devapi_t *dev = rcci_devapi();
    char handle[RCCI_IPC_HANDLE_BYTES];
    void *p = NULL;
    rcci_mr_t *mr = NULL;
    int ok = dev && dev->ipc_alloc &&
             dev->ipc_alloc(&p, DEVRING_GDR_PROBE_BYTES, RCCI_IPC_DEVICE, handle) == RCC_SUCCESS &&
             rcci_transports[tr]->reg_mem(comm->tctx[tr], p, DEVRING_GDR_PROBE_BYTES, RCCI_MEM_CUDA,
                                          &mr) == RCC_SUCCESS;
    if (!ok)
        snprintf(why, size, "rank %d cannot register device memory with %s: %s", comm->rank,
                 rcci_transports[tr]->name, dev ? rcci_tls_error() : "no GPU API");
    if (mr)
        rcci_transports[tr]->dereg_mem(comm->tctx[tr], mr);
    if (p)
        dev->ipc_free(p);
    return ok;
}

static rcc_result_t devring_probe(struct rcc_comm *comm, int send_tr, int recv_tr, int *made,
                                  char *why, size_t why_size, devring_probe_t **answers_out)
{
    const rcci_devapi_t *dev = rcci_devapi();
    int n = comm->nranks, next = (comm->rank + 1) % n;
    size_t block = 2 * RCCI_IPC_HANDLE_BYTES;
    char *handles = calloc((size_t)n, block);
    devring_probe_t *answers = calloc((size_t)n, sizeof *answers);
    void *mine[2] = {NULL, NULL};
    devring_probe_t me = {0};
    rcc_result_t res = RCC_SUCCESS;
    int ipc_send = send_tr >= 0 && devring_is_device(rcci_transports[send_tr]);
    int ipc_recv = recv_tr >= 0 && devring_is_device(rcci_transports[recv_tr]);
    *answers_out = NULL;
    if (!handles || !answers)
        RCC_FAIL(RCC_ERR_NO_MEMORY, "device ring probe of %d ranks", n);
    for (int k = 0; k < 2 && ipc_recv && !me.failed; k++) {
        char *h = handles + (size_t)comm->rank * block + (size_t)k * RCCI_IPC_HANDLE_BYTES;
        if (!dev || !dev->ipc_alloc ||
            dev->ipc_alloc(&mine[k], DEVRING_PROBE_BYTES, k ? RCCI_IPC_HOST : RCCI_IPC_DEVICE, h) !=
                RCC_SUCCESS) {
            me.failed = 1;
            snprintf(me.why, sizeof me.why, "rank %d cannot export %s memory: %s", comm->rank,
                     k ? "device-mapped host" : "device", dev ? rcci_tls_error() : "no GPU API");
        }
    }
    RCC_CHECK(rcci_bootstrap_allgather(comm->bootstrap, handles, block));
    for (int k = 0; k < 2 && ipc_send && !me.failed; k++) {
        const char *h = handles + (size_t)next * block + (size_t)k * RCCI_IPC_HANDLE_BYTES;
        void *p = NULL;
        if (devring_handle_empty(h))
            break; /* the receiver could not export it: its answer says why */
        if (!dev || !dev->ipc_open || dev->ipc_open(h, &p) != RCC_SUCCESS) {
            me.failed = 1;
            snprintf(me.why, sizeof me.why, "rank %d cannot map rank %d's %s memory: %s",
                     comm->rank, next, k ? "device-mapped host" : "device",
                     dev ? rcci_tls_error() : "no GPU API");
        } else {
            dev->ipc_close(p);
        }
    }
    for (int k = 0; k < 2 && !me.failed && !me.no_gdr; k++) {
        int tr = k ? recv_tr : send_tr;
        if (tr >= 0 && !devring_is_device(rcci_transports[tr]))
            me.no_gdr = !devring_gdr_probe(comm, tr, me.why, sizeof me.why);
    }
    answers[comm->rank] = me;
    RCC_CHECK(rcci_bootstrap_allgather(comm->bootstrap, answers, sizeof *answers));
    *made = 1;
    for (int r = 0; r < n; r++) {
        answers[r].why[sizeof answers[r].why - 1] = '\0';
        if (answers[r].failed && *made) {
            *made = 0;
            snprintf(why, why_size, "%s", answers[r].why);
        }
    }
    *answers_out = answers;
    answers = NULL;
out:
    for (int k = 0; k < 2; k++) /* after the second round: the sender has unmapped it */
        if (mine[k])
            dev->ipc_free(mine[k]);
    free(handles);
    free(answers);
    return res;
}

/* Whether edge r -> r + 1, over transport `tr`, survives the probe: a
 * same-host edge does (or no edge does), one over GPUDirect RDMA where
 * both its ends could register; else `why` says which could not. */
static int devring_gdr_ok(const struct rcc_comm *comm, const devring_probe_t *answers, int r,
                          int tr, char *why, size_t size)
{
    if (devring_is_device(rcci_transports[tr]))
        return 1;
    for (int k = 0; k < 2; k++) {
        const devring_probe_t *a = &answers[(r + k) % comm->nranks];
        if (a->no_gdr) {
            snprintf(why, size, "%s", a->why);
            return 0;
        }
    }
    return 1;
}

rcc_result_t rcci_devring_connect(struct rcc_comm *comm, const rcci_peer_info_t *info,
                                  const uint32_t *transports)
{
    rcc_result_t res = RCC_SUCCESS;
    int n = comm->nranks, prev = (comm->rank + n - 1) % n;
    int any = 0, all = 1, ipc = 1, send_tr = -1, recv_tr = -1, idx;
    char send_why[200] = "", recv_why[200] = "", why[200];
    if (comm->dev_pipeline != RCCI_DEVPIPE_RING &&
        comm->dev_pipeline != RCCI_DEVPIPE_RING_PROGRESS) {
        /* alike on every rank (comm.c checked) */
        RCC_INFO("device ring: none (RCC_DEVICE_PIPELINE resolved to %d: device buffers are %s)",
                 comm->dev_pipeline,
                 comm->dev_pipeline == RCCI_DEVPIPE_WHOLE
                     ? "staged whole on the caller's stream"
                     : "staged through pinned slots, their GPU work queued at the call");
        return RCC_SUCCESS;
    }
    for (int r = 0; r < n; r++)
        any |= devring_edge(comm, info, transports, r, &idx, why, sizeof why);
    if (!any) { /* no rank makes one: no extra round through the bootstrap */
        devring_edge(comm, info, transports, comm->rank, &idx, send_why, sizeof send_why);
        RCC_INFO("device ring: none (%s); device buffers are staged through host memory", send_why);
        return RCC_SUCCESS;
    }
    if (!devring_edge(comm, info, transports, comm->rank, &send_tr, send_why, sizeof send_why))
        send_tr = -1;
    if (!devring_edge(comm, info, transports, prev, &recv_tr, recv_why, sizeof recv_why))
        recv_tr = -1;
    int made = 0;
    devring_probe_t *answers = NULL;
    res = devring_probe(comm, send_tr, recv_tr, &made, why, sizeof why, &answers);
    if (res != RCC_SUCCESS)
        return res;
    if (!made) {
        RCC_WARN("device ring: not made, %s; device buffers are staged through host memory on "
                 "every rank",
                 why);
        free(answers);
        return RCC_SUCCESS;
    }
    /* Edges over GPUDirect RDMA that cannot be registered at both ends go
     * staged; the answers are every rank's, so every rank agrees. */
    any = 0;
    for (int r = 0; r < n; r++) {
        int edge = devring_edge(comm, info, transports, r, &idx, why, sizeof why) &&
                   devring_gdr_ok(comm, answers, r, idx, why, sizeof why);
        any |= edge;
        all &= edge;
        ipc &= edge && devring_is_device(rcci_transports[idx]);
    }
    if (send_tr >= 0 &&
        !devring_gdr_ok(comm, answers, comm->rank, send_tr, send_why, sizeof send_why))
        send_tr = -1;
    if (recv_tr >= 0 && !devring_gdr_ok(comm, answers, prev, recv_tr, recv_why, sizeof recv_why))
        recv_tr = -1;
    free(answers);
    if (!any) {
        RCC_INFO("device ring: none (%s); device buffers are staged through host memory",
                 send_tr < 0 && send_why[0] ? send_why : why);
        return RCC_SUCCESS;
    }
    rcci_listener_t *listener = NULL;
    char *handles = calloc((size_t)n, RCCI_HANDLE_BYTES);
    int64_t deadline = rcci_now_ns() + comm->timeout_ns;
    if (!handles)
        RCC_FAIL(RCC_ERR_NO_MEMORY, "device ring handles for %d ranks", n);
    if (recv_tr >= 0)
        RCC_CHECK(rcci_transports[recv_tr]->listen(
            comm->tctx[recv_tr], handles + (size_t)comm->rank * RCCI_HANDLE_BYTES, &listener));
    RCC_CHECK(rcci_bootstrap_allgather(comm->bootstrap, handles, RCCI_HANDLE_BYTES));
    if (send_tr >= 0) {
        rcci_link_t *l = &comm->dsend_link;
        *l = (rcci_link_t){.tr = rcci_transports[send_tr],
                           .tctx = comm->tctx[send_tr],
                           .nconns = 1,
                           .spread_min_bytes = SIZE_MAX,
                           .peer = (comm->rank + 1) % n};
        RCC_CHECK(l->tr->connect(l->tctx, handles + (size_t)l->peer * RCCI_HANDLE_BYTES,
                                 DEVRING_TAG, deadline, &l->conns[0]));
    }
    if (recv_tr >= 0) {
        rcci_link_t *l = &comm->drecv_link;
        *l = (rcci_link_t){.tr = rcci_transports[recv_tr],
                           .tctx = comm->tctx[recv_tr],
                           .nconns = 1,
                           .spread_min_bytes = SIZE_MAX,
                           .peer = prev};
        /* In slices, as the host ring: a neighbour that failed meanwhile
         * shows in the bootstrap before the timeout. */
        for (;;) {
            int64_t slice = rcci_now_ns() + DEVRING_SLICE_NS;
            res = l->tr->accept(listener, prev, DEVRING_TAG, slice < deadline ? slice : deadline,
                                &l->conns[0]);
            if (res != RCC_ERR_TIMEOUT || slice >= deadline)
                break;
            RCC_CHECK(rcci_bootstrap_check(comm->bootstrap));
        }
        if (res != RCC_SUCCESS)
            goto out;
    }
    RCC_CHECK(devring_first_message(comm, deadline));
    RCC_CHECK(devring_chunk_fits(comm));
    comm->devring_whole = all;
    comm->devring_ipc = all && ipc;
    RCC_INFO("device ring: sends to rank %d %s%s%s, receives from rank %d %s%s%s",
             (comm->rank + 1) % n, send_tr >= 0 ? "via " : "staged through host memory (",
             send_tr >= 0 ? rcci_transports[send_tr]->name : send_why, send_tr >= 0 ? "" : ")",
             prev, recv_tr >= 0 ? "via " : "staged through host memory (",
             recv_tr >= 0 ? rcci_transports[recv_tr]->name : recv_why, recv_tr >= 0 ? "" : ")");
    if (send_tr >= 0)
        RCC_INFO("device ring: rank %d -> rank %d: %s", comm->rank, (comm->rank + 1) % n, send_why);
out:
    if (res != RCC_SUCCESS)
        rcci_error_prefix("connecting the device ring: ");
    if (listener)
        rcci_transports[recv_tr]->close_listener(listener);
    free(handles);
    return res;
}
