/*
 * The cudaipc transport: processes of one host with GPUs move messages GPU
 * to GPU through receive slots in the receiver's device memory, which the
 * sender maps with CUDA IPC (slots.h: the protocol). Every GPU call goes
 * through the device table (lib/devapi.h), so the stand-in device of the
 * tests (tests/mp/fakedev.c) runs this file without a GPU.
 *
 * Each connection also holds a TCP connection of its own (the tcp
 * transport's ops, on loopback): it proves the job secret, carries the
 * hello that exchanges the IPC handles, failure notices, goodbyes and
 * announcements, and its closing is how a dead peer is noticed (the shared
 * memory itself says nothing when its other user dies). Data never goes
 * over it.
 *
 * Per connection, a stream for copies into the peer's slots and one for
 * copies out of this side's slots, so the two directions never wait on each
 * other. A request is complete when the counter its last fragment's copy
 * stores (slots.h) has passed it: the host reads counters, it never waits
 * on the GPU.
 *
 * In place (transport.h, version 4): the engine reads a message in the
 * receive slot it landed in and returns the slot with `release`, and writes
 * a message straight into the peer's slot it got from `reserve_send`; the
 * counters are then stored by the engine's stream, not the connection's.
 * Each counter must only grow, and a store says every fragment below it is
 * done, so a counter's stores from two streams must not overtake each
 * other: a fragment moved the other way than the one before it waits until
 * the counter shows that one done (rx/tx_normal_upto, rx/tx_inplace_upto).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_NET /* log.h: the subsystem of this file's lines */
#include "clock.h"
#include "devapi.h"
#include "err.h"
#include "log.h"
#include "params.h"
#include "retired.h"
#include "slots.h"
#include "transport.h"

extern const rcci_transport_t rcci_transport_tcp;
#define CTRL (&rcci_transport_tcp)

/* How long close waits for this side's copies to finish before it unmaps
 * the peer's memory (a copy into unmapped memory would fault the GPU). */
#define CIPC_DRAIN_NS (5ll * 1000000000)
/* How long a context's end waits for its peers to unmap its connections'
 * receive slots before leaving them to later calls (retired.h). */
#define CIPC_UNMAP_WAIT_NS (1000ll * 1000000)
/* The control connection is looked at (a syscall) at most this often while
 * a request makes no progress: that is how a dead peer shows. */
#define CIPC_CTRL_EVERY_NS (200ll * 1000)
/* A peer that has given up a queued connection tells why by itself (the
 * engine's failure notice, or its death on the control connection): a
 * queue_test that finds the connection given up waits this long for that,
 * and only then fails with its own, vaguer reason. */
#define CIPC_GIVEN_UP_GRACE_NS (2000ll * 1000000)

_Static_assert(sizeof(((rcci_cipc_hello_t *)0)->page_handle) == RCCI_IPC_HANDLE_BYTES,
               "hello handle size");

typedef struct {
    rcci_transport_env_t env;
    const rcci_devapi_t *dev;
    int device;
    void *tcp; /* the tcp transport's context, for the control connections */
} cipc_ctx_t;

struct rcci_listener {
    cipc_ctx_t *ctx;
    rcci_listener_t *ctrl;
};

struct rcci_request {
    struct rcci_conn *conn;
    struct rcci_request *next;
    char *buf;
    size_t bytes;
    rcci_tag_t tag;
    int complete;
    int is_send;
    int inplace, landed;     /* irecv_inplace/commit_send; a receive's fragment is there */
    const void **view;       /* irecv_inplace's *data: NULL once landed when sent direct */
    uint32_t nfrags, posted; /* fragments, and how many are queued on the GPU */
    uint32_t first;          /* the connection's number of its first fragment */
};

#include "reqfifo.h" /* after struct rcci_request: its functions use it */

struct rcci_conn {
    cipc_ctx_t *ctx;
    rcci_conn_t *ctrl;
    rcc_result_t failed; /* sticky */
    char failure[RCCI_ERR_TEXT_BYTES];
    char peer[64], self[16];
    int peer_rank;
    /* Receive side: this process's slots and page, exported. */
    rcci_cipc_page_t *rx_page;
    char *rx_slots;
    size_t rx_slot_bytes;
    uint32_t rx_next; /* fragments whose copy out is queued (or taken in place) */
    void *rx_stream;
    /* In place: the counts of fragments up to the last copied out / taken
     * in place, and the in-place fragments not released yet, oldest first. */
    uint32_t rx_normal_upto, rx_inplace_upto;
    uint32_t held[RCCI_CIPC_SLOTS];
    unsigned held_first, held_count;
    /* Send side: the peer's, mapped. */
    rcci_cipc_page_t *tx_page;
    char *tx_slots;
    size_t tx_slot_bytes;
    uint32_t tx_next; /* fragments whose copy in is queued (or committed in place) */
    void *tx_stream;
    uint32_t tx_normal_upto, tx_inplace_upto; /* as rx_normal/inplace_upto */
    int reserved; /* reserve_send gave out the next slot; commit_send follows */
    size_t reserved_bytes;
    rcci_req_fifo_t sends, recvs;
    rcci_req_fifo_t completed; /* until test frees them (reqfifo.h) */
    int64_t ctrl_next_ns;
    int64_t given_up_ns; /* queue_test first found the connection given up (0: not yet) */
    int announced; /* an announcement the drive took from the control connection */
    rcci_tag_t announce_tag;
    /* The hellos: sent at connect/accept, the peer's taken by the first
     * drive that finds it (a ring's ranks all connect before they accept,
     * so neither end may wait for the other's hello there). */
    rcci_cipc_hello_t mine, theirs;
    rcci_request_t *hello_sreq, *hello_rreq;
    int hello_done;
    int hello_given; /* this side's hello (its handles) was handed to the control connection */
    /* Queued (transport.h, version 7): from the first queued call on, the
     * numbering is the queuing thread's (q_tx, q_rx: the next fragment to
     * queue each way; atomic, as queue_abort reads them from any thread),
     * and the progress thread only reads the counters. */
    int q_on;
    uint32_t q_tx, q_rx, q_unreleased;
    int q_reserved;
    size_t q_reserved_bytes;
};

/* ---- context ------------------------------------------------------------- */

static rcc_result_t cipc_init(const rcci_transport_env_t *env, void **tctx)
{
    const rcci_devapi_t *dev = rcci_devapi();
    char why[200] = "";
    if (!dev)
        return rcci_error(RCC_ERR_UNSUPPORTED, "this build has no CUDA (meson feature `cuda`)");
    if (!dev->ipc_alloc || !dev->ipc_open)
        return rcci_error(RCC_ERR_UNSUPPORTED, "the device table `%s` has no IPC", dev->name);
    if (dev->device_count(why, sizeof why) <= 0)
        return rcci_error(RCC_ERR_UNSUPPORTED, "no usable CUDA device (%s)", why);
    /* Memory earlier communicators retired whose peers have unmapped it
     * since: freed here, on the application's thread (retired.h). */
    rcci_cipc_reap(NULL, 0);
    cipc_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return rcci_error(RCC_ERR_NO_MEMORY, "cudaipc context");
    ctx->env = *env;
    ctx->dev = dev;
    ctx->device = dev->current_device();
    rcc_result_t res = CTRL->init(env, &ctx->tcp);
    if (res != RCC_SUCCESS) {
        free(ctx);
        return res;
    }
    *tctx = ctx;
    return RCC_SUCCESS;
}

static void cipc_fini(void *tctx)
{
    cipc_ctx_t *ctx = tctx;
    if (!ctx)
        return;
    /* Peers close their ends about now (they destroy their communicators
     * too): a moment for them, then what is left is freed by later calls. */
    int left = rcci_cipc_reap(ctx, rcci_now_ns() + CIPC_UNMAP_WAIT_NS);
    if (left)
        RCC_INFO("cudaipc: the receive slots of %d connection%s stay allocated until their "
                 "peers unmap them (or exit)",
                 left, left == 1 ? "" : "s");
    CTRL->fini(ctx->tcp);
    free(ctx);
}

/* Same host, another process, and both ranks have a GPU: device memory of
 * one is reachable from the other by IPC (CUDA maps a handle only in a
 * process other than the one that exported it). */
static rcc_result_t cipc_can_connect(void *tctx, const rcci_peer_info_t *me,
                                     const rcci_peer_info_t *peer, int *priority)
{
    (void)tctx;
    if (me->host_hash != peer->host_hash)
        return rcci_error(RCC_ERR_UNSUPPORTED, "rank %d is on another host", peer->rank);
    if (me->cuda_device < 0 || peer->cuda_device < 0)
        return rcci_error(RCC_ERR_UNSUPPORTED, "rank %d has no GPU",
                          me->cuda_device < 0 ? me->rank : peer->rank);
    if (me->pid == peer->pid)
        return rcci_error(RCC_ERR_UNSUPPORTED,
                          "rank %d is in this process (CUDA IPC maps only another process's "
                          "memory)",
                          peer->rank);
    *priority = 10;
    return RCC_SUCCESS;
}

/* ---- listening --------------------------------------------------------- */

static rcc_result_t cipc_listen(void *tctx, void *handle, rcci_listener_t **out)
{
    cipc_ctx_t *ctx = tctx;
    rcci_listener_t *l = calloc(1, sizeof *l);
    if (!l)
        return rcci_error(RCC_ERR_NO_MEMORY, "cudaipc listener");
    l->ctx = ctx;
    rcc_result_t res = CTRL->listen(ctx->tcp, handle, &l->ctrl);
    if (res != RCC_SUCCESS) {
        free(l);
        return res;
    }
    *out = l;
    return RCC_SUCCESS;
}

static void cipc_close_listener(rcci_listener_t *l)
{
    if (!l)
        return;
    CTRL->close_listener(l->ctrl);
    free(l);
}

static void cipc_sweep_listener(rcci_listener_t *l) { CTRL->sweep_listener(l->ctrl); }

/* ---- connections ------------------------------------------------------- */

/* Waits for a connection's queued copies to finish, within CIPC_DRAIN_NS;
 * 0 when they did not, or when that cannot be known: the memory then stays
 * mapped. */
static int cipc_drain(const rcci_devapi_t *dev, void *stream)
{
    return !stream || rcci_stream_drain(dev, stream, rcci_now_ns() + CIPC_DRAIN_NS);
}

static void cipc_free_conn(rcci_conn_t *c)
{
    const rcci_devapi_t *dev = c->ctx->dev;
    /* The caller's thread may be the application's (rcc_comm_destroy): its
     * current device is given back below. */
    int caller_device;
    rcci_device_enter(dev, c->ctx->device, &caller_device);
    int drained = cipc_drain(dev, c->tx_stream) & cipc_drain(dev, c->rx_stream);
    if (!drained) /* leaking the mappings beats a GPU fault */
        RCC_WARN("cudaipc: copies to/from %s still running after %.0f s; its memory stays mapped",
                 c->peer, CIPC_DRAIN_NS / 1e9);
    rcci_req_fifo_free_all(&c->sends);
    rcci_req_fifo_free_all(&c->recvs);
    rcci_req_fifo_free_all(&c->completed);
    if (drained) {
        if (c->tx_slots)
            dev->ipc_close(c->tx_slots);
        if (c->tx_page) { /* the peer may free its slots now (retired.h) */
            __atomic_store_n(&c->tx_page->unmapped, 1, __ATOMIC_RELEASE);
            dev->ipc_close(c->tx_page);
        }
        /* This side's slots go once the peer has unmapped them, or died;
         * at once where their handles never left this process. */
        int known = !c->hello_rreq && c->theirs.magic == RCCI_CIPC_HELLO_MAGIC;
        if (c->hello_given) {
            rcci_cipc_retire(dev, c->ctx->device, c->ctx, c->rx_slots, c->rx_page,
                             known ? c->theirs.pid : 0);
        } else {
            if (c->rx_slots)
                dev->ipc_free(c->rx_slots);
            if (c->rx_page)
                dev->ipc_free(c->rx_page);
        }
        if (c->tx_stream)
            dev->stream_destroy(c->tx_stream);
        if (c->rx_stream)
            dev->stream_destroy(c->rx_stream);
    }
    if (c->ctrl)
        CTRL->close(c->ctrl);
    rcci_device_back(dev, caller_device, c->ctx->device);
    free(c);
}

/* After the control connection is up: exports this side's receive slots
 * and sends the hello; the peer's is taken later (cipc_hello). */
static rcc_result_t cipc_setup(cipc_ctx_t *ctx, rcci_conn_t *ctrl, int peer_rank, int64_t deadline,
                               rcci_conn_t **out)
{
    const rcci_devapi_t *dev = ctx->dev;
    rcci_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        CTRL->close(ctrl);
        return rcci_error(RCC_ERR_NO_MEMORY, "cudaipc connection");
    }
    c->ctx = ctx;
    c->ctrl = ctrl;
    c->peer_rank = peer_rank;
    snprintf(c->self, sizeof c->self, "rank %d", ctx->env.rank);
    snprintf(c->peer, sizeof c->peer, "rank %d (cudaipc)", peer_rank);
    c->rx_slot_bytes = (size_t)rcci_param_int(RCCI_PARAM_CUDAIPC_SLOT_BYTES) & ~(size_t)255;
    c->mine = (rcci_cipc_hello_t){.magic = RCCI_CIPC_HELLO_MAGIC,
                                  .version = RCCI_CIPC_VERSION,
                                  .slots = RCCI_CIPC_SLOTS,
                                  .slot_bytes = (uint32_t)c->rx_slot_bytes,
                                  .device = ctx->device,
                                  .pid = (int32_t)getpid(),
                                  .rank = ctx->env.rank};
    rcci_tag_t tag = {.seq = 0};
    void *p;
    rcc_result_t res = dev->use_device(ctx->device);
    if (res == RCC_SUCCESS && (res = dev->stream_create(&c->tx_stream)) == RCC_SUCCESS)
        res = dev->stream_create(&c->rx_stream);
    if (res == RCC_SUCCESS && (res = dev->ipc_alloc(&p, sizeof(rcci_cipc_page_t), RCCI_IPC_HOST,
                                                    c->mine.page_handle)) == RCC_SUCCESS) {
        c->rx_page = p;
        c->rx_page->open = 1;
    }
    /* Not cleared: a slot is read only once head says the sender wrote it
     * (the counters live in the page, which is). */
    if (res == RCC_SUCCESS &&
        (res = dev->ipc_alloc(&p, (size_t)RCCI_CIPC_SLOTS * c->rx_slot_bytes, RCCI_IPC_DEVICE,
                              c->mine.slots_handle)) == RCC_SUCCESS)
        c->rx_slots = p;
    if (res == RCC_SUCCESS && (res = CTRL->isend(ctrl, &c->mine, sizeof c->mine, &tag, NULL,
                                                 &c->hello_sreq)) == RCC_SUCCESS)
        c->hello_given = 1;
    /* The hello leaves now (the kernel's socket buffer takes it: no wait
     * for the peer), ahead of any announcement or notice on the connection. */
    for (int done = 0; res == RCC_SUCCESS && !done;) {
        res = CTRL->test(c->hello_sreq, &done);
        if (res == RCC_SUCCESS && !done && rcci_now_ns() > deadline)
            res = rcci_error(RCC_ERR_TIMEOUT, "sending the cudaipc hello");
        if (res == RCC_SUCCESS && !done)
            usleep(100);
    }
    c->hello_sreq = NULL; /* freed by test, or by close */
    if (res == RCC_SUCCESS)
        res = CTRL->irecv(ctrl, &c->theirs, sizeof c->theirs, &tag, NULL, &c->hello_rreq);
    if (res != RCC_SUCCESS) {
        rcci_error_prefix("cudaipc connection with rank %d: ", peer_rank);
        cipc_free_conn(c); /* also the control requests still queued */
        return res;
    }
    *out = c;
    return RCC_SUCCESS;
}

/* Takes the peer's hello once it is there and maps its receive side: until
 * then (*ready 0) nothing can be sent. */
static rcc_result_t cipc_hello(rcci_conn_t *c, int *ready)
{
    const rcci_devapi_t *dev = c->ctx->dev;
    int done = 1;
    *ready = c->hello_done;
    if (c->hello_done)
        return RCC_SUCCESS;
    rcc_result_t res = RCC_SUCCESS;
    if (c->hello_sreq && (res = CTRL->test(c->hello_sreq, &done)) == RCC_SUCCESS && done)
        c->hello_sreq = NULL;
    if (res != RCC_SUCCESS) {
        c->hello_sreq = NULL;
        return res;
    }
    if (c->hello_rreq && (res = CTRL->test(c->hello_rreq, &done)) == RCC_SUCCESS && done)
        c->hello_rreq = NULL;
    if (res != RCC_SUCCESS) {
        c->hello_rreq = NULL;
        return res;
    }
    if (c->hello_rreq || c->hello_sreq)
        return RCC_SUCCESS;
    const rcci_cipc_hello_t *h = &c->theirs;
    void *p;
    res = rcci_cipc_hello_check(h, c->peer);
    if (res == RCC_SUCCESS && h->rank != c->peer_rank && c->peer_rank >= 0)
        res = rcci_error(RCC_ERR_REMOTE, "%s says it is rank %d", c->peer, (int)h->rank);
    if (res != RCC_SUCCESS)
        return res;
    c->peer_rank = h->rank;
    snprintf(c->peer, sizeof c->peer, "rank %d (cudaipc, pid %d, GPU %d)", (int)h->rank,
             (int)h->pid, (int)h->device);
    c->tx_slot_bytes = h->slot_bytes;
    /* A mapping belongs to the device current at the open: this side's, on
     * whatever thread takes the hello (a caller's may have another). */
    int caller_device;
    res = rcci_device_enter(dev, c->ctx->device, &caller_device);
    if (res == RCC_SUCCESS && (res = dev->ipc_open(h->page_handle, &p)) == RCC_SUCCESS)
        c->tx_page = p;
    if (res == RCC_SUCCESS && (res = dev->ipc_open(h->slots_handle, &p)) == RCC_SUCCESS)
        c->tx_slots = p;
    rcci_device_back(dev, caller_device, c->ctx->device);
    if (res != RCC_SUCCESS)
        return res;
    RCC_INFO("cudaipc: connected to %s, device memory of GPU %d to GPU %d", c->peer, c->ctx->device,
             (int)h->device);
    c->hello_done = *ready = 1;
    return RCC_SUCCESS;
}

static rcc_result_t cipc_connect(void *tctx, const void *handle, uint32_t tag, int64_t deadline_ns,
                                 rcci_conn_t **out)
{
    cipc_ctx_t *ctx = tctx;
    rcci_conn_t *ctrl;
    rcc_result_t res = CTRL->connect(ctx->tcp, handle, tag, deadline_ns, &ctrl);
    return res == RCC_SUCCESS ? cipc_setup(ctx, ctrl, -1, deadline_ns, out) : res;
}

static rcc_result_t cipc_accept(rcci_listener_t *l, int peer_rank, uint32_t tag,
                                int64_t deadline_ns, rcci_conn_t **out)
{
    rcci_conn_t *ctrl;
    rcc_result_t res = CTRL->accept(l->ctrl, peer_rank, tag, deadline_ns, &ctrl);
    return res == RCC_SUCCESS ? cipc_setup(l->ctx, ctrl, peer_rank, deadline_ns, out) : res;
}

static void cipc_close(rcci_conn_t *c)
{
    if (c)
        cipc_free_conn(c);
}

static rcc_result_t cipc_reg_mem(void *tctx, void *ptr, size_t bytes, rcci_mem_type_t type,
                                 rcci_mr_t **mr)
{
    (void)tctx, (void)ptr, (void)bytes, (void)type;
    *mr = NULL; /* any memory the device can copy from or to will do */
    return RCC_SUCCESS;
}

static rcc_result_t cipc_dereg_mem(void *tctx, rcci_mr_t *mr)
{
    (void)tctx, (void)mr;
    return RCC_SUCCESS;
}

/* ---- moving data ------------------------------------------------------- */

static rcc_result_t cipc_fail(rcci_conn_t *c, rcc_result_t res)
{
    if (c->failed == RCC_SUCCESS) {
        c->failed = res;
        snprintf(c->failure, sizeof c->failure, "%s", rcci_tls_error());
    }
    return res;
}

static rcc_result_t cipc_failed(rcci_conn_t *c) { return rcci_error(c->failed, "%s", c->failure); }

/* Whether counter `c` has reached count `n` (c >= n, modulo 2^32). */
static int cipc_reached(uint32_t c, uint32_t n) { return (int32_t)(c - n) >= 0; }

/* Queues the copies of the sends' fragments while the peer has free slots. */
static rcc_result_t cipc_drive_sends(rcci_conn_t *c, int *moved)
{
    const rcci_devapi_t *dev = c->ctx->dev;
    for (rcci_request_t *r = c->sends.head; r; r = r->next) {
        if (r->nfrags == 0)
            r->nfrags = rcci_cipc_frags(r->bytes, c->tx_slot_bytes);
        if (r->posted == r->nfrags)
            continue;
        while (r->posted < r->nfrags) {
            uint32_t tail = __atomic_load_n(&c->tx_page->tail, __ATOMIC_ACQUIRE);
            if (!rcci_cipc_slot_free(c->tx_next, tail) || c->reserved ||
                !cipc_reached(__atomic_load_n(&c->tx_page->head, __ATOMIC_ACQUIRE),
                              c->tx_inplace_upto))
                return RCC_SUCCESS;
            uint32_t slot = c->tx_next % RCCI_CIPC_SLOTS;
            uint64_t off;
            size_t len;
            rcci_cipc_frag_span(r->bytes, c->tx_slot_bytes, r->posted, &off, &len);
            rcci_cipc_hdr_t *h = &c->tx_page->hdr[slot];
            h->seq = r->tag.seq;
            h->frag = r->posted;
            h->bytes = r->bytes;
            h->flags = 0;
            memcpy(h->sig, r->tag.sig, RCCI_SIG_BYTES);
            __atomic_thread_fence(__ATOMIC_RELEASE); /* the header before the counter */
            rcc_result_t res = RCC_SUCCESS;
            if (len)
                res = dev->copy(c->tx_slots + (size_t)slot * c->tx_slot_bytes, r->buf + off, len,
                                c->tx_stream);
            if (res == RCC_SUCCESS)
                res = dev->write_flag(c->tx_stream, &c->tx_page->head, c->tx_next + 1);
            if (res != RCC_SUCCESS)
                return cipc_fail(c, res);
            if (r->posted == 0)
                r->first = c->tx_next;
            r->posted++;
            c->tx_normal_upto = ++c->tx_next;
            *moved = 1;
        }
        if (r->posted < r->nfrags)
            break; /* messages leave in order */
    }
    return RCC_SUCCESS;
}

/* Queues the copies out of the slots for the receives whose fragments have
 * arrived, checking each fragment's header against the receive. */
static rcc_result_t cipc_drive_recvs(rcci_conn_t *c, int *moved)
{
    const rcci_devapi_t *dev = c->ctx->dev;
    for (rcci_request_t *r = c->recvs.head; r; r = r->next) {
        while (r->posted < r->nfrags) {
            uint32_t head = __atomic_load_n(&c->rx_page->head, __ATOMIC_ACQUIRE);
            if (!rcci_cipc_passed(head, c->rx_next))
                return RCC_SUCCESS;
            uint32_t slot = c->rx_next % RCCI_CIPC_SLOTS;
            rcci_cipc_hdr_t h = c->rx_page->hdr[slot];
            rcc_result_t res = rcci_cipc_check(&h, &r->tag, r->bytes, r->posted, c->peer, c->self,
                                               c->ctx->env.describe_sig);
            if (res != RCC_SUCCESS)
                return cipc_fail(c, res);
            uint32_t tail = __atomic_load_n(&c->rx_page->tail, __ATOMIC_ACQUIRE);
            if (r->inplace) { /* there already: the engine reads it, then releases it */
                if (!cipc_reached(tail, c->rx_normal_upto))
                    return RCC_SUCCESS;
                r->first = c->rx_next;
                r->posted = 1;
                r->landed = 1;
                if (h.flags & RCCI_CIPC_DIRECT)
                    *r->view = NULL; /* written where this rank said */
                c->held[(c->held_first + c->held_count++) % RCCI_CIPC_SLOTS] = c->rx_next;
                c->rx_inplace_upto = ++c->rx_next;
                *moved = 1;
                continue;
            }
            if (!cipc_reached(tail, c->rx_inplace_upto))
                return RCC_SUCCESS;
            uint64_t off;
            size_t len;
            rcci_cipc_frag_span(r->bytes, c->rx_slot_bytes, r->posted, &off, &len);
            if (len && !(h.flags & RCCI_CIPC_DIRECT)) /* direct: at its destination already */
                res = dev->copy(r->buf + off, c->rx_slots + (size_t)slot * c->rx_slot_bytes, len,
                                c->rx_stream);
            if (res == RCC_SUCCESS)
                res = dev->write_flag(c->rx_stream, &c->rx_page->tail, c->rx_next + 1);
            if (res != RCC_SUCCESS)
                return cipc_fail(c, res);
            if (r->posted == 0)
                r->first = c->rx_next;
            r->posted++;
            c->rx_normal_upto = ++c->rx_next;
            *moved = 1;
        }
    }
    return RCC_SUCCESS;
}

/* Marks complete the requests whose last fragment's copy has finished
 * (the counter its stream stores has passed it), in order. */
static void cipc_retire(rcci_conn_t *c, int *moved)
{
    for (rcci_request_t *r = c->sends.head; r && r->nfrags && r->posted == r->nfrags; r = r->next) {
        if (!r->complete && !rcci_cipc_passed(__atomic_load_n(&c->tx_page->head, __ATOMIC_ACQUIRE),
                                              r->first + r->nfrags - 1))
            break;
        *moved |= !r->complete;
        r->complete = 1;
    }
    for (rcci_request_t *r = c->recvs.head; r && r->posted == r->nfrags; r = r->next) {
        if (!r->complete && !r->landed &&
            !rcci_cipc_passed(__atomic_load_n(&c->rx_page->tail, __ATOMIC_ACQUIRE),
                              r->first + r->nfrags - 1))
            break;
        *moved |= !r->complete;
        r->complete = 1;
    }
    /* Completed requests wait in `completed` for test, which frees them. */
    while (c->sends.head && c->sends.head->complete)
        rcci_req_fifo_complete(&c->sends, &c->completed);
    while (c->recvs.head && c->recvs.head->complete)
        rcci_req_fifo_complete(&c->recvs, &c->completed);
}

/* The control connection, without waiting: a notice, a goodbye or a close
 * fails the connection with its text; an announcement is kept for peek. */
static rcc_result_t cipc_look_at_ctrl(rcci_conn_t *c)
{
    rcci_tag_t tag;
    int found = RCCI_PEEK_NONE;
    rcc_result_t res = CTRL->peek(c->ctrl, &tag, &found);
    if (res == RCC_SUCCESS && found == RCCI_PEEK_ANNOUNCE) {
        c->announced = 1;
        c->announce_tag = tag;
    }
    return res == RCC_SUCCESS ? RCC_SUCCESS : cipc_fail(c, res);
}

static rcc_result_t cipc_drive(rcci_conn_t *c)
{
    if (c->failed != RCC_SUCCESS)
        return cipc_failed(c);
    int moved = 0, ready = 0;
    rcc_result_t res = c->ctx->dev->use_device(c->ctx->device);
    if (res == RCC_SUCCESS)
        res = cipc_hello(c, &ready);
    if (res == RCC_SUCCESS && ready)
        res = cipc_drive_sends(c, &moved);
    if (res == RCC_SUCCESS)
        res = cipc_drive_recvs(c, &moved);
    if (res != RCC_SUCCESS)
        return cipc_fail(c, res);
    cipc_retire(c, &moved);
    /* Only what waits for the peer (a fragment to arrive, a slot to free)
     * looks at the control connection: a message that has arrived whole is
     * delivered even when its sender has gone since. */
    int waits = 0;
    for (rcci_request_t *r = c->sends.head; r && !waits; r = r->next)
        waits = r->nfrags == 0 || r->posted < r->nfrags; /* 0: not started */
    for (rcci_request_t *r = c->recvs.head; r && !waits; r = r->next)
        waits = r->posted < r->nfrags;
    int64_t now = rcci_now_ns();
    if (!moved && waits && now >= c->ctrl_next_ns) {
        c->ctrl_next_ns = now + CIPC_CTRL_EVERY_NS;
        return cipc_look_at_ctrl(c);
    }
    return RCC_SUCCESS;
}

static rcc_result_t cipc_post(rcci_conn_t *c, int is_send, int inplace, const void *buf,
                              size_t bytes, const rcci_tag_t *tag, rcci_request_t **out,
                              const void **view)
{
    if (c->failed != RCC_SUCCESS)
        return cipc_failed(c);
    rcci_request_t *r = calloc(1, sizeof *r);
    if (!r)
        return rcci_error(RCC_ERR_NO_MEMORY, "cudaipc request");
    r->conn = c;
    r->buf = (char *)buf;
    r->bytes = bytes;
    r->tag = *tag;
    r->is_send = is_send;
    r->inplace = inplace;
    r->view = view;
    /* A send's fragments are cut when it starts: the peer's slot size may
     * not be known yet (its hello). */
    r->nfrags = is_send ? 0 : rcci_cipc_frags(bytes, c->rx_slot_bytes);
    rcci_req_fifo_push(is_send ? &c->sends : &c->recvs, r);
    *out = r;
    cipc_drive(c); /* a failure stays on the connection for test */
    return RCC_SUCCESS;
}

static rcc_result_t cipc_isend(rcci_conn_t *c, const void *buf, size_t bytes, const rcci_tag_t *tag,
                               rcci_mr_t *mr, rcci_request_t **req)
{
    (void)mr;
    return cipc_post(c, 1, 0, buf, bytes, tag, req, NULL);
}

static rcc_result_t cipc_irecv(rcci_conn_t *c, void *buf, size_t bytes, const rcci_tag_t *tag,
                               rcci_mr_t *mr, rcci_request_t **req)
{
    (void)mr;
    return cipc_post(c, 0, 0, buf, bytes, tag, req, NULL);
}

static rcc_result_t cipc_test(rcci_request_t *r, int *done)
{
    rcci_conn_t *c = r->conn;
    rcc_result_t res = r->complete ? RCC_SUCCESS : cipc_drive(c);
    return rcci_req_finish(&c->sends, &c->recvs, &c->completed, r, res, done);
}

static int cipc_wait_fd(rcci_conn_t *c) { return CTRL->wait_fd(c->ctrl); }

static rcc_result_t cipc_probe(rcci_conn_t *c)
{
    int ready;
    if (c->failed != RCC_SUCCESS)
        return cipc_failed(c);
    rcc_result_t res = cipc_hello(c, &ready);
    if (res == RCC_SUCCESS)
        res = CTRL->probe(c->ctrl);
    return res == RCC_SUCCESS ? RCC_SUCCESS : cipc_fail(c, res);
}

/* The connection's number of the first fragment that no posted receive
 * takes: where the next receive starts, and what peek looks at. */
static uint32_t cipc_unclaimed(const rcci_conn_t *c)
{
    uint32_t frag = c->rx_next;
    for (const rcci_request_t *r = c->recvs.head; r; r = r->next)
        frag += r->nfrags - r->posted;
    return frag;
}

/* Announcements and notices come from the control connection; data waiting
 * is the first fragment past those the posted receives cover. */
static rcc_result_t cipc_peek(rcci_conn_t *c, rcci_tag_t *tag, int *found)
{
    *found = RCCI_PEEK_NONE;
    int ready;
    /* The hellos first: the control connection's one data message, ahead
     * of any notice or announcement on it. */
    rcc_result_t res = c->failed != RCC_SUCCESS ? RCC_SUCCESS : cipc_hello(c, &ready);
    if (res != RCC_SUCCESS)
        cipc_fail(c, res);
    if (c->announced) {
        c->announced = 0;
        *tag = c->announce_tag;
        *found = RCCI_PEEK_ANNOUNCE;
        return RCC_SUCCESS;
    }
    res = CTRL->peek(c->ctrl, tag, found);
    if (res != RCC_SUCCESS || *found != RCCI_PEEK_NONE)
        return res;
    if (__atomic_load_n(&c->q_on, __ATOMIC_ACQUIRE))
        return RCC_SUCCESS; /* no headers, and the numbering is another thread's */
    uint32_t next = cipc_unclaimed(c);
    if (rcci_cipc_passed(__atomic_load_n(&c->rx_page->head, __ATOMIC_ACQUIRE), next)) {
        const rcci_cipc_hdr_t *h = &c->rx_page->hdr[next % RCCI_CIPC_SLOTS];
        if (__atomic_load_n(&h->flags, __ATOMIC_ACQUIRE) & RCCI_CIPC_QUEUED)
            return RCC_SUCCESS; /* no header to show: a receive reports it (rcci_cipc_check) */
        tag->seq = h->seq;
        memcpy(tag->sig, h->sig, RCCI_SIG_BYTES);
        *found = RCCI_PEEK_DATA;
    }
    return RCC_SUCCESS;
}

static void cipc_notify(rcci_conn_t *c, rcc_result_t res, const char *text)
{
    CTRL->notify(c->ctrl, res, text);
}

static void cipc_announce(rcci_conn_t *c, const rcci_tag_t *tag) { CTRL->announce(c->ctrl, tag); }

/* ---- in place (transport.h, version 4) ------------------------------------ */

static size_t cipc_inplace_bytes(rcci_conn_t *c, int send)
{
    if (c->failed != RCC_SUCCESS || !rcci_param_int(RCCI_PARAM_CUDAIPC_INPLACE))
        return 0;
    return send ? (c->hello_done ? c->tx_slot_bytes : 0) : c->rx_slot_bytes;
}

static rcc_result_t cipc_irecv_inplace(rcci_conn_t *c, size_t bytes, const rcci_tag_t *tag,
                                       const void **data, rcci_request_t **out)
{
    if (bytes > c->rx_slot_bytes)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "cudaipc: an in-place receive of %zu bytes from %s exceeds its %zu-byte "
                          "slot",
                          bytes, c->peer, c->rx_slot_bytes);
    uint32_t frag = cipc_unclaimed(c); /* its fragment */
    *data = c->rx_slots + (size_t)(frag % RCCI_CIPC_SLOTS) * c->rx_slot_bytes;
    rcc_result_t res = cipc_post(c, 0, 1, NULL, bytes, tag, out, data);
    return res;
}

static rcc_result_t cipc_release(rcci_conn_t *c, void *stream)
{
    if (c->failed != RCC_SUCCESS)
        return cipc_failed(c);
    if (c->held_count == 0)
        return rcci_error(RCC_ERR_INTERNAL, "cudaipc: release with no in-place receive held (%s)",
                          c->peer);
    uint32_t frag = c->held[c->held_first];
    c->held_first = (c->held_first + 1) % RCCI_CIPC_SLOTS;
    c->held_count--;
    rcc_result_t res = c->ctx->dev->write_flag(stream, &c->rx_page->tail, frag + 1);
    return res == RCC_SUCCESS ? RCC_SUCCESS : cipc_fail(c, res);
}

static rcc_result_t cipc_reserve_send(rcci_conn_t *c, size_t bytes, void **data)
{
    int ready = 0;
    *data = NULL;
    if (c->failed != RCC_SUCCESS)
        return cipc_failed(c);
    if (c->reserved)
        return rcci_error(RCC_ERR_INTERNAL, "cudaipc: a second reserve_send before commit_send");
    rcc_result_t res = cipc_hello(c, &ready);
    if (res != RCC_SUCCESS)
        return cipc_fail(c, res);
    if (!ready)
        return RCC_SUCCESS;
    if (bytes > c->tx_slot_bytes)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "cudaipc: an in-place send of %zu bytes to %s exceeds its %zu-byte slot",
                          bytes, c->peer, c->tx_slot_bytes);
    /* Messages leave in order: none of the queued sends may still be moving
     * in, and their counter stores must have landed (the header comment). */
    for (rcci_request_t *r = c->sends.head; r; r = r->next)
        if (r->nfrags == 0 || r->posted < r->nfrags)
            return RCC_SUCCESS;
    if (!cipc_reached(__atomic_load_n(&c->tx_page->head, __ATOMIC_ACQUIRE), c->tx_normal_upto) ||
        !rcci_cipc_slot_free(c->tx_next, __atomic_load_n(&c->tx_page->tail, __ATOMIC_ACQUIRE)))
        return RCC_SUCCESS;
    c->reserved = 1;
    c->reserved_bytes = bytes;
    *data = c->tx_slots + (size_t)(c->tx_next % RCCI_CIPC_SLOTS) * c->tx_slot_bytes;
    return RCC_SUCCESS;
}

static rcc_result_t cipc_commit_send(rcci_conn_t *c, size_t bytes, const rcci_tag_t *tag,
                                     void *stream, uint32_t flags, rcci_request_t **out)
{
    if (c->failed != RCC_SUCCESS)
        return cipc_failed(c);
    if (!c->reserved || bytes != c->reserved_bytes)
        return rcci_error(RCC_ERR_INTERNAL,
                          "cudaipc: commit_send of %zu bytes to %s without its reserve_send", bytes,
                          c->peer);
    rcci_request_t *r = calloc(1, sizeof *r);
    if (!r)
        return rcci_error(RCC_ERR_NO_MEMORY, "cudaipc request");
    uint32_t slot = c->tx_next % RCCI_CIPC_SLOTS;
    rcci_cipc_hdr_t *h = &c->tx_page->hdr[slot];
    h->seq = tag->seq;
    h->frag = 0;
    h->bytes = bytes;
    h->flags = flags & RCCI_SEND_DIRECT ? RCCI_CIPC_DIRECT : 0;
    memcpy(h->sig, tag->sig, RCCI_SIG_BYTES);
    __atomic_thread_fence(__ATOMIC_RELEASE); /* the header before the counter */
    rcc_result_t res = c->ctx->dev->write_flag(stream, &c->tx_page->head, c->tx_next + 1);
    if (res != RCC_SUCCESS) {
        free(r);
        return cipc_fail(c, res);
    }
    *r = (rcci_request_t){.conn = c,
                          .bytes = bytes,
                          .tag = *tag,
                          .is_send = 1,
                          .inplace = 1,
                          .nfrags = 1,
                          .posted = 1,
                          .first = c->tx_next};
    rcci_req_fifo_push(&c->sends, r);
    c->tx_inplace_upto = ++c->tx_next;
    c->reserved = 0;
    *out = r;
    return RCC_SUCCESS;
}

/* ---- queued (transport.h, version 7) --------------------------------------- */

/* Stored by queue_abort past every count a queued wait asks for (waits
 * compare cyclically, and far fewer fragments are ever queued ahead). */
#define CIPC_RUN_THROUGH 0x40000000u

/* The first queued call takes the numbering over: the connection's
 * messages so far (the engine's first message, at init) are done. */
static void cipc_queued_on(rcci_conn_t *c)
{
    if (c->q_on)
        return;
    c->q_tx = c->tx_next;
    c->q_rx = c->q_unreleased = c->rx_next;
    for (int i = 0; c->tx_page && i < RCCI_CIPC_SLOTS; i++) /* the headers are stale from now */
        __atomic_store_n(&c->tx_page->hdr[i].flags, RCCI_CIPC_QUEUED, __ATOMIC_RELEASE);
    __atomic_store_n(&c->q_on, 1, __ATOMIC_RELEASE);
}

/* A queued message is one slot: RCC_ERR_INVALID_ARGUMENT where it is larger. */
static rcc_result_t cipc_queued_fits(const rcci_conn_t *c, int send, size_t bytes)
{
    size_t slot = send ? c->tx_slot_bytes : c->rx_slot_bytes;
    if (bytes <= slot)
        return RCC_SUCCESS;
    return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                      "cudaipc: a queued %s of %zu bytes %s %s exceeds its %zu-byte slot (%s)",
                      send ? "send" : "receive", bytes, send ? "to" : "from", c->peer, slot,
                      send ? "the peer's RCC_CUDAIPC_SLOT_BYTES" : "RCC_CUDAIPC_SLOT_BYTES");
}

static rcc_result_t cipc_queue_recv(rcci_conn_t *c, void *stream, size_t bytes, const void **data,
                                    uint32_t *ticket)
{
    rcc_result_t res = cipc_queued_fits(c, 0, bytes);
    if (res != RCC_SUCCESS)
        return res;
    cipc_queued_on(c);
    uint32_t f = c->q_rx;
    res = c->ctx->dev->wait_flag(stream, &c->rx_page->head, f + 1);
    if (res == RCC_SUCCESS) /* and the sender had not given up when it stored head */
        res = c->ctx->dev->wait_flag(stream, &c->rx_page->open, 1);
    if (res != RCC_SUCCESS)
        return res;
    *data = c->rx_slots + (size_t)(f % RCCI_CIPC_SLOTS) * c->rx_slot_bytes;
    *ticket = f;
    __atomic_store_n(&c->q_rx, f + 1, __ATOMIC_RELEASE);
    return RCC_SUCCESS;
}

static rcc_result_t cipc_queue_release(rcci_conn_t *c, void *stream)
{
    if (!c->q_on || c->q_unreleased == c->q_rx)
        return rcci_error(RCC_ERR_INTERNAL, "cudaipc: queue_release with no queued receive (%s)",
                          c->peer);
    rcc_result_t res = c->ctx->dev->write_flag(stream, &c->rx_page->tail, c->q_unreleased + 1);
    if (res == RCC_SUCCESS)
        c->q_unreleased++;
    return res;
}

static rcc_result_t cipc_queue_send(rcci_conn_t *c, void *stream, size_t bytes, void **data)
{
    if (!c->hello_done) /* the engine's first message at init waited for it */
        return rcci_error(RCC_ERR_INTERNAL, "cudaipc: a queued send before %s's memory is mapped",
                          c->peer);
    if (c->q_reserved)
        return rcci_error(RCC_ERR_INTERNAL, "cudaipc: a second queue_send before queue_commit");
    rcc_result_t res = cipc_queued_fits(c, 1, bytes);
    if (res != RCC_SUCCESS)
        return res;
    cipc_queued_on(c);
    uint32_t f = c->q_tx;
    /* Its slot is free once the receiver has released fragment f - SLOTS. */
    res = c->ctx->dev->wait_flag(stream, &c->tx_page->tail, f - RCCI_CIPC_SLOTS + 1);
    if (res != RCC_SUCCESS)
        return res;
    *data = c->tx_slots + (size_t)(f % RCCI_CIPC_SLOTS) * c->tx_slot_bytes;
    c->q_reserved = 1;
    c->q_reserved_bytes = bytes;
    return RCC_SUCCESS;
}

static rcc_result_t cipc_queue_commit(rcci_conn_t *c, void *stream, size_t bytes,
                                      const rcci_tag_t *tag, uint32_t *ticket)
{
    if (!c->q_reserved || bytes != c->q_reserved_bytes)
        return rcci_error(RCC_ERR_INTERNAL,
                          "cudaipc: queue_commit of %zu bytes to %s without its queue_send", bytes,
                          c->peer);
    uint32_t f = c->q_tx;
    const rcci_devapi_t *dev = c->ctx->dev;
    rcc_result_t res = dev->write_flag(stream, &c->tx_page->check[f % RCCI_CIPC_CHECKS],
                                       rcci_cipc_check_word(tag, bytes, f));
    if (res == RCC_SUCCESS)
        res = dev->write_flag(stream, &c->tx_page->head, f + 1);
    if (res != RCC_SUCCESS)
        return res;
    c->q_reserved = 0;
    *ticket = f;
    __atomic_store_n(&c->q_tx, f + 1, __ATOMIC_RELEASE);
    return RCC_SUCCESS;
}

static rcc_result_t cipc_queue_test(rcci_conn_t *c, int send, uint32_t ticket, size_t bytes,
                                    const rcci_tag_t *tag, int *done)
{
    *done = 0;
    if (c->failed != RCC_SUCCESS)
        return cipc_failed(c);
    rcci_cipc_page_t *page = send ? c->tx_page : c->rx_page;
    int passed = rcci_cipc_passed(__atomic_load_n(&page->head, __ATOMIC_ACQUIRE), ticket);
    /* Counters run through after a failure say nothing of the data: not
     * done, while the reason is on its way (read after head). */
    int given_up = passed && __atomic_load_n(&page->aborted, __ATOMIC_ACQUIRE);
    if (passed && !given_up) {
        *done = 1;
        if (send)
            return RCC_SUCCESS;
        uint32_t word = __atomic_load_n(&page->check[ticket % RCCI_CIPC_CHECKS], __ATOMIC_ACQUIRE);
        /* The tail after the word: whether the word can still be this ticket's. */
        if (!rcci_cipc_check_kept(__atomic_load_n(&page->tail, __ATOMIC_ACQUIRE), ticket))
            return RCC_SUCCESS; /* looked too late: nothing to check */
        rcc_result_t res = rcci_cipc_check_queued(word, tag, bytes, ticket, c->peer, c->self,
                                                  c->ctx->env.describe_sig);
        return res == RCC_SUCCESS ? RCC_SUCCESS : cipc_fail(c, res);
    }
    int64_t now = rcci_now_ns();
    if (given_up && !c->given_up_ns)
        c->given_up_ns = now;
    if (given_up && now - c->given_up_ns > CIPC_GIVEN_UP_GRACE_NS)
        return cipc_fail(c, rcci_error(RCC_ERR_REMOTE,
                                       "cudaipc: %s gave up the connection after a failure (its "
                                       "queued work runs through, moving nothing) and said nothing "
                                       "more for %.0f s",
                                       c->peer, CIPC_GIVEN_UP_GRACE_NS / 1e9));
    /* Waiting for the peer: whether it is still there, now and then. */
    if (now < c->ctrl_next_ns)
        return RCC_SUCCESS;
    c->ctrl_next_ns = now + CIPC_CTRL_EVERY_NS;
    return cipc_look_at_ctrl(c);
}

static void cipc_queue_abort(rcci_conn_t *c)
{
    if (!c || !__atomic_load_n(&c->q_on, __ATOMIC_ACQUIRE))
        return;
    /* First, so that neither end takes what runs through for messages, and
     * the peer's stream stops at the first chunk this end runs through; its
     * own waits pass (not undone: a peer stores 0 only over the first 1). */
    __atomic_store_n(&c->rx_page->aborted, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&c->rx_page->open, CIPC_RUN_THROUGH, __ATOMIC_RELEASE);
    if (c->tx_page) {
        uint32_t was_open = 1;
        __atomic_store_n(&c->tx_page->aborted, 1, __ATOMIC_RELEASE);
        __atomic_compare_exchange_n(&c->tx_page->open, &was_open, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
    }
    __atomic_store_n(&c->rx_page->head,
                     __atomic_load_n(&c->q_rx, __ATOMIC_ACQUIRE) + CIPC_RUN_THROUGH,
                     __ATOMIC_RELEASE);
    if (c->tx_page)
        __atomic_store_n(&c->tx_page->tail,
                         __atomic_load_n(&c->q_tx, __ATOMIC_ACQUIRE) + CIPC_RUN_THROUGH,
                         __ATOMIC_RELEASE);
}

const rcci_transport_t rcci_transport_cudaipc = {
    .abi = RCCI_TRANSPORT_ABI,
    .size = sizeof(rcci_transport_t),
    .name = "cudaipc",
    .caps = RCCI_CAP_DEVICE_MEM | RCCI_CAP_SAME_HOST,
    .init = cipc_init,
    .fini = cipc_fini,
    .can_connect = cipc_can_connect,
    .listen = cipc_listen,
    .connect = cipc_connect,
    .accept = cipc_accept,
    .close_listener = cipc_close_listener,
    .reg_mem = cipc_reg_mem,
    .dereg_mem = cipc_dereg_mem,
    .isend = cipc_isend,
    .irecv = cipc_irecv,
    .test = cipc_test,
    .write = rcci_transport_unsupported_write,
    .wait_fd = cipc_wait_fd,
    .close = cipc_close,
    .probe = cipc_probe,
    .peek = cipc_peek,
    .notify = cipc_notify,
    .announce = cipc_announce,
    .sweep_listener = cipc_sweep_listener,
    .listener_fd = rcci_transport_no_listener_fd, /* its control connections are TCP's */
    .connect_start = cipc_connect, /* takes the peer's hello later (cipc_hello) */
    .inplace_bytes = cipc_inplace_bytes,
    .irecv_inplace = cipc_irecv_inplace,
    .release = cipc_release,
    .reserve_send = cipc_reserve_send,
    .commit_send = cipc_commit_send,
    .queue_recv = cipc_queue_recv,
    .queue_release = cipc_queue_release,
    .queue_send = cipc_queue_send,
    .queue_commit = cipc_queue_commit,
    .queue_test = cipc_queue_test,
    .queue_abort = cipc_queue_abort,
    .queue_bytes = cipc_inplace_bytes, /* a queued message is one slot, as an in-place one */
};
