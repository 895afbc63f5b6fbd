/*
 * The verbs transport: the thin shell that carries out what proto.h,
 * connstate.h and hello.h decide, over librdmacm (connection set-up, RoCE
 * and InfiniBand alike) and libibverbs (RC queue pairs, one completion
 * queue per connection).
 *
 * Data path (proto.h): a message is copied into this side's staging slots
 * and written with RDMA WRITE WITH IMMEDIATE into the peer's receive slots;
 * the receiver copies it out into the posted buffer and returns credits by
 * zero-length SENDs with immediate. A send completes when its last
 * fragment is posted (its bytes are staged), as a TCP send does when the
 * socket took it. Buffers registered with reg_mem go into the registration
 * cache (mrcache.h); an isend given such a registration is not staged: the
 * adapter reads the payload from it (a second gather entry after the header)
 * and the send completes when its last write has completed. Device memory
 * registers directly (GPUDirect RDMA: a dma-buf from the device table, else
 * ibv_reg_mr through nvidia-peermem), so a GPU's data goes from its memory
 * to the wire; isend/irecv receives always land in the host slots.
 *
 * Queued messages (transport.h, version 7; qproto.h), for the device ring's
 * edges to other hosts: a second ring of slots each way in device memory,
 * so data goes GPU to wire to GPU. The queuing thread only queues waits and
 * stores on the GPU's stream, against counters in pinned host memory; the
 * progress thread (through queue_test, probe and peek) posts the writes the
 * GPU has staged, tells the GPU what has landed, and returns as credits the
 * slots its GPU has released.
 *
 * Set-up (connstate.h): connect_start returns once the address is being
 * resolved; test, probe and peek take the connection's rdma_cm events from
 * then on, up to ESTABLISHED or its deadline. connect does the same and
 * waits, accepting for this context's listeners meanwhile.
 *
 * The engine polls through test; while idle it sleeps on wait_fd, an epoll
 * set of the connection's completion channel (armed with ibv_req_notify_cq
 * whenever a poll found nothing) and its rdma_cm channel (disconnects).
 * Static names start with verbs_ (ibv_ is libibverbs' own).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "clock.h"
#include "connstate.h"
#include "devapi.h"
#include "device.h"
#include "err.h"
#include "hello.h"
#include "log.h"
#include "mrcache.h"
#include "params.h"
#include "proto.h"
#include "qproto.h"
#include "socket.h"
#include "tcp/wire.h"
#include "transport.h"

#define IBV_ATTEMPTS 5      /* connection attempts to an unreachable peer */
#define IBV_RESOLVE_MS 2000 /* rdma_resolve_addr/route timeouts */
#define IBV_RETRY_PAUSE_NS 100000000ll
#define IBV_POLL_BATCH 32
/* Registrations a context holds: every rcc_comm_register of the caller's
 * (PyTorch's allocator hook registers each segment it maps) and the
 * library's own buffers. Searched only when registering, never per send. */
#define IBV_MR_CACHE 1024
#define IBV_PENDING_MAX 64 /* valid connect requests held for later accepts */
#define IBV_SWEEP_NS 5000000ll /* connect's wait: how often it accepts for its listeners */
#define IBV_REJECT_TEXT 148 /* rdma_cm's most private data in a reject (IB) */
#define IBV_WR_RECV 0u     /* wr_id of a receive */
#define IBV_WR_WRITE 1u    /* wr_id of a data write */
#define IBV_WR_CONTROL 2u  /* wr_id of a credit or close */
#define IBV_WR_QWRITE 3u   /* wr_id of a queued message's write */
/* reg_mem's registrations are gather sources of sends only: the adapter
 * reads them (always allowed), nothing writes them. Asking for write access
 * would pin with write intent (refused for read-only mappings) and hand
 * peers rights on user and GPU memory they never need. */
#define IBV_MR_ACCESS 0
#define IBV_CLOSE_DRAIN_NS (1000ll * 1000000) /* for the adapter to send what close found posted */
#define IBV_CLOSE_GRACE_NS (20ll * 1000000)   /* ... at least, for each close */

/* Returns a failure at once (functions without a cleanup label). */
#define IBV_TRY(expr)                                                                              \
    do {                                                                                           \
        rcc_result_t ibv_try_res_ = (expr);                                                        \
        if (ibv_try_res_ != RCC_SUCCESS)                                                           \
            return ibv_try_res_;                                                                   \
    } while (0)

typedef struct {
    rcci_transport_env_t env;
    rcci_ibv_device_t dev;
    rcci_mrc_t mrs;
    pthread_mutex_t mrs_lock; /* reg_mem and dereg_mem come from any thread (transport.h) */
    rcci_ibp_geom_t geom;
    pthread_mutex_t listeners_lock;
    rcci_listener_t *listeners; /* connect keeps them moving while it waits */
    int64_t drain_until_ns;     /* closes in a row share one drain window */
    int64_t last_close_ns;      /* when the last close returned */
    uint32_t qslot_bytes;       /* RCC_IB_GDR_SLOT_BYTES: queued messages' slots */
    /* The GPU queued messages use, found on the first queued call (any
     * thread: the lock): 1 usable, -1 not (qdev_why says why), 0 not
     * looked yet. */
    pthread_mutex_t qdev_lock;
    int qdev_state;
    const rcci_devapi_t *qdev;
    char qdev_why[200];
} verbs_ctx_t;

/* One direction's ring of queued slots (qproto.h): device memory, and
 * two counters in pinned host memory, each on its own cache line. */
typedef struct {
    char *slots;
    struct ibv_mr *mr;
    volatile uint32_t *flags;
} verbs_qring_t;
#define IBV_QF_STRIDE 16 /* uint32s: 64 bytes */
enum {
    IBV_QF_GPU = 0, /* stored by the GPU: sends staged / receives released */
    IBV_QF_HOST = 1 /* stored by the host: sends gone (their staging free) / receives landed */
};

/* What a queued send says, from queue_commit to its write. */
typedef struct {
    uint32_t bytes, check;
} verbs_qmeta_t;

/* A connect request accepted at once (rdma_accept sent), waiting for the
 * accept call that asks for its rank and tag; or, conn NULL, one that could
 * not be accepted, kept so that this call fails with the reason (slot
 * geometries that differ, say) rather than by its timeout. */
typedef struct {
    rcci_conn_t *conn;
    rcci_ibh_t hello;
    rcc_result_t refused;
    char why[RCCI_ERR_TEXT_BYTES];
} verbs_pending_t;

struct rcci_listener {
    verbs_ctx_t *ctx;
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    pthread_mutex_t lock; /* sweep_listener may run beside accept */
    verbs_pending_t pending[IBV_PENDING_MAX];
    int npending;
    rcci_listener_t *next; /* in ctx->listeners */
};

struct rcci_request {
    struct rcci_conn *conn;
    struct rcci_request *next;
    char *buf;
    size_t bytes;
    uint64_t sent; /* wire bytes staged and posted (send) */
    const struct ibv_mr *zero_copy; /* send: the payload's registration, read by the adapter */
    uint64_t last_write;            /* zero-copy send: tx.written after its last fragment */
    rcci_tag_t tag;
    int complete;
};

#include "reqfifo.h" /* after struct rcci_request: its functions use it */

struct rcci_conn {
    verbs_ctx_t *ctx;
    rcci_ibc_t state;
    struct rdma_event_channel *cm_ch;
    struct rdma_cm_id *id;
    struct ibv_comp_channel *comp_ch;
    struct ibv_cq *cq;
    int cq_armed;
    int epfd; /* wait_fd: comp_ch and cm_ch */
    char *slots, *staging;
    struct ibv_mr *slots_mr, *staging_mr;
    uint64_t remote_addr;
    uint32_t remote_rkey;
    rcci_ibp_tx_t tx;
    rcci_ibp_rx_t rx;
    int sq_depth, sq_used;
    rcc_result_t failed; /* sticky */
    char failure[RCCI_ERR_TEXT_BYTES];
    int failed_by_notice;
    int goodbye; /* ... and the notice said goodbye: no failure until used */
    int announced; /* an announcement is waiting for peek */
    rcci_tag_t announce_tag;
    char peer[96];
    char self[16];
    /* Active side (connect_start): where to, and set-up's own clock. */
    rcci_addr_t to;
    uint32_t tag;
    char addr_text[80];
    int64_t setup_deadline_ns;
    int64_t retry_at_ns; /* the next attempt starts then; 0: none waits */
    rcci_req_fifo_t sends, recvs;
    rcci_req_fifo_t completed;  /* until test frees them (reqfifo.h) */
    rcci_req_fifo_t unfinished; /* zero-copy sends all posted, their writes not yet complete */
    /* Queued messages. Each ring is made by the queuing thread's first
     * call that way and published by its `ready` (atomic); the numbering
     * (q_*, atomic: queue_abort reads it from any thread) is that
     * thread's, the accounting (qtx, qrx, qpeer) the progress thread's,
     * the FIFO between them under its lock. */
    verbs_qring_t qsend, qrecv;
    int qsend_ready, qrecv_ready;
    uint32_t q_tx, q_rx, q_unreleased;
    int q_reserved;
    size_t q_reserved_bytes;
    pthread_mutex_t qmeta_lock;
    verbs_qmeta_t *qmeta;
    size_t qmeta_cap, qmeta_head, qmeta_count;
    rcci_ibq_tx_t qtx;
    rcci_ibq_rx_t qrx;
    rcci_ibq_slots_t qpeer; /* the peer's receive slots, from its SLOTS */
    int qpeer_known, qslots_told;
};

/* ---- small helpers ---- */

static rcc_result_t verbs_fail(rcci_conn_t *c, rcc_result_t code)
{
    if (c->failed == RCC_SUCCESS) {
        c->failed = code;
        snprintf(c->failure, sizeof c->failure, "%s", rcci_tls_error());
    }
    return c->failed;
}

static rcc_result_t verbs_failed(rcci_conn_t *c) { return rcci_error(c->failed, "%s", c->failure); }

static rcci_ibc_event_t verbs_cm_event(enum rdma_cm_event_type t)
{
    switch (t) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return RCCI_IBC_EV_ADDR_RESOLVED;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return RCCI_IBC_EV_ROUTE_RESOLVED;
    case RDMA_CM_EVENT_ESTABLISHED: return RCCI_IBC_EV_ESTABLISHED;
    case RDMA_CM_EVENT_REJECTED: return RCCI_IBC_EV_REJECTED;
    case RDMA_CM_EVENT_UNREACHABLE: return RCCI_IBC_EV_UNREACHABLE;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return RCCI_IBC_EV_DISCONNECTED;
    default: /* ADDR_ERROR, ROUTE_ERROR, CONNECT_ERROR, ... */ return RCCI_IBC_EV_ERROR;
    }
}

static rcc_result_t verbs_nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return rcci_error_errno(RCC_ERR_SYSTEM, errno, "fcntl(O_NONBLOCK)");
    return RCC_SUCCESS;
}

/* rdma_get_cm_event, passing over (acknowledged) the events that change
 * nothing for a connection: an address change (a bond's failover) keeps
 * the connection working. */
static int verbs_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **ev)
{
    for (;;) {
        if (rdma_get_cm_event(ch, ev) != 0)
            return -1;
        if ((*ev)->event != RDMA_CM_EVENT_ADDR_CHANGE)
            return 0;
        rdma_ack_cm_event(*ev);
    }
}

/* ---- context ---- */

/* GPUDirect RDMA: device memory registered for the adapter to reach it
 * directly. A dma-buf first (the upstream kernel path, CUDA 11.7+ and a
 * kernel with dma-buf support in the RDMA driver), else ibv_reg_mr on the
 * device pointer, which works where nvidia-peermem is loaded. */
static rcc_result_t verbs_reg_device(verbs_ctx_t *ctx, void *addr, size_t bytes, int access,
                                     void **handle)
{
    const rcci_devapi_t *dev = rcci_devapi();
    char dmabuf_why[400] = "no dma-buf export in this build";
    if (dev && dev->dmabuf_export) {
        int fd = -1;
        uint64_t offset = 0;
        if (dev->dmabuf_export(addr, bytes, &fd, &offset) == RCC_SUCCESS) {
            struct ibv_mr *mr = ibv_reg_dmabuf_mr(ctx->dev.pd, offset, bytes,
                                                  (uint64_t)(uintptr_t)addr, fd, access);
            int err = errno;
            close(fd); /* the registration holds the dma-buf itself */
            if (mr) {
                *handle = mr;
                return RCC_SUCCESS;
            }
            snprintf(dmabuf_why, sizeof dmabuf_why, "ibv_reg_dmabuf_mr: %s", strerror(err));
        } else {
            snprintf(dmabuf_why, sizeof dmabuf_why, "%s", rcci_tls_error());
        }
    }
    struct ibv_mr *mr = ibv_reg_mr(ctx->dev.pd, addr, bytes, access);
    if (mr) {
        *handle = mr;
        return RCC_SUCCESS;
    }
    return rcci_error(RCC_ERR_UNSUPPORTED,
                      "GPUDirect RDMA: device memory (%zu bytes at %p) cannot be registered on "
                      "%s: as a dma-buf: %s; as peer memory: ibv_reg_mr: %s (nvidia-peermem not "
                      "loaded?)",
                      bytes, addr, ctx->dev.name, dmabuf_why, strerror(errno));
}

static rcc_result_t verbs_reg(void *arg, void *addr, size_t bytes, int kind, void **handle)
{
    verbs_ctx_t *ctx = arg;
    if (kind == RCCI_MEM_CUDA)
        return verbs_reg_device(ctx, addr, bytes, IBV_MR_ACCESS, handle);
    struct ibv_mr *mr = ibv_reg_mr(ctx->dev.pd, addr, bytes, IBV_MR_ACCESS);
    if (!mr)
        return rcci_error_errno(RCC_ERR_SYSTEM, errno, "ibv_reg_mr of %zu bytes at %p on %s", bytes,
                                addr, ctx->dev.name);
    *handle = mr;
    return RCC_SUCCESS;
}

static void verbs_dereg(void *arg, void *handle)
{
    (void)arg;
    ibv_dereg_mr(handle);
}

static rcc_result_t verbs_init(const rcci_transport_env_t *env, void **tctx)
{
    rcc_result_t res = RCC_SUCCESS;
    verbs_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return rcci_error(RCC_ERR_NO_MEMORY, "verbs context");
    ctx->env = *env;
    pthread_mutex_init(&ctx->listeners_lock, NULL);
    pthread_mutex_init(&ctx->mrs_lock, NULL);
    pthread_mutex_init(&ctx->qdev_lock, NULL);
    ctx->qslot_bytes = (uint32_t)rcci_param_int(RCCI_PARAM_IB_GDR_SLOT_BYTES);
    ctx->geom = (rcci_ibp_geom_t){.nslots = (uint32_t)rcci_param_int(RCCI_PARAM_IB_SLOTS),
                                  .slot_bytes = (uint32_t)rcci_param_int(RCCI_PARAM_IB_SLOT_BYTES)};
    RCC_CHECK(rcci_ibp_geom_check(&ctx->geom, "RCC_IB_SLOTS/RCC_IB_SLOT_BYTES"));
    RCC_CHECK(rcci_ibv_device_open(env, &ctx->dev));
    rcci_mrc_ops_t ops = {verbs_reg, verbs_dereg, ctx};
    res = rcci_mrc_init(&ctx->mrs, &ops, IBV_MR_CACHE, (size_t)sysconf(_SC_PAGESIZE));
    if (res != RCC_SUCCESS)
        rcci_ibv_device_close(&ctx->dev);
out:
    if (res != RCC_SUCCESS) {
        pthread_mutex_destroy(&ctx->listeners_lock);
        pthread_mutex_destroy(&ctx->mrs_lock);
        pthread_mutex_destroy(&ctx->qdev_lock);
        free(ctx);
    } else {
        *tctx = ctx;
    }
    return res;
}

static void verbs_fini(void *tctx)
{
    verbs_ctx_t *ctx = tctx;
    rcci_mrc_fini(&ctx->mrs);
    rcci_ibv_device_close(&ctx->dev);
    pthread_mutex_destroy(&ctx->listeners_lock);
    pthread_mutex_destroy(&ctx->mrs_lock);
    pthread_mutex_destroy(&ctx->qdev_lock);
    free(ctx);
}

static rcc_result_t verbs_can_connect(void *tctx, const rcci_peer_info_t *me,
                                      const rcci_peer_info_t *peer, int *priority)
{
    (void)tctx, (void)me, (void)peer;
    *priority = 10; /* both ends started it: their addresses are on RDMA devices */
    return RCC_SUCCESS;
}

/* ---- connection resources ---- */

static void verbs_qring_free(rcci_conn_t *c, verbs_qring_t *r);

static void verbs_conn_free(rcci_conn_t *c)
{
    if (c->id && c->id->qp)
        rdma_destroy_qp(c->id);
    if (c->id)
        rdma_destroy_id(c->id);
    verbs_qring_free(c, &c->qsend); /* no peer writes into them now */
    verbs_qring_free(c, &c->qrecv);
    pthread_mutex_destroy(&c->qmeta_lock);
    free(c->qmeta);
    if (c->cq)
        ibv_destroy_cq(c->cq);
    if (c->comp_ch)
        ibv_destroy_comp_channel(c->comp_ch);
    if (c->cm_ch)
        rdma_destroy_event_channel(c->cm_ch);
    if (c->slots_mr)
        ibv_dereg_mr(c->slots_mr);
    if (c->staging_mr)
        ibv_dereg_mr(c->staging_mr);
    if (c->epfd >= 0)
        close(c->epfd);
    free(c->slots);
    free(c->staging);
    free(c);
}

/* Everything but the cm id and its QP: slots, CQ, channels. */
static rcc_result_t verbs_conn_new(verbs_ctx_t *ctx, const char *peer, rcci_conn_t **out)
{
    rcc_result_t res = RCC_SUCCESS;
    rcci_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return rcci_error(RCC_ERR_NO_MEMORY, "verbs connection");
    c->ctx = ctx;
    c->epfd = -1;
    pthread_mutex_init(&c->qmeta_lock, NULL);
    rcci_ibc_init(&c->state, IBV_ATTEMPTS);
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    snprintf(c->self, sizeof c->self, "rank %d", ctx->env.rank);
    /* The slots, then the mailbox where queued messages' slots are told
     * (qproto.h): incoming after the receive slots, outgoing after the
     * staging. */
    size_t region = (size_t)ctx->geom.nslots * ctx->geom.slot_bytes + RCCI_IBQ_MAILBOX_BYTES;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (posix_memalign((void **)&c->slots, page, region) ||
        posix_memalign((void **)&c->staging, page, region))
        RCC_FAIL(RCC_ERR_NO_MEMORY, "verbs slots of %zu bytes", region);
    c->slots_mr =
        ibv_reg_mr(ctx->dev.pd, c->slots, region, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    c->staging_mr = ibv_reg_mr(ctx->dev.pd, c->staging, region, IBV_ACCESS_LOCAL_WRITE);
    if (!c->slots_mr || !c->staging_mr)
        RCC_FAIL(RCC_ERR_SYSTEM, "ibv_reg_mr of 2 x %zu bytes on %s: %s", region, ctx->dev.name,
                 strerror(errno));
    /* Writes and credits each way, of the host slots and of the queued
     * ones; the SLOTS message, a notice and the close. */
    c->sq_depth = 4 * (int)ctx->geom.nslots + 6;
    int cqe = c->sq_depth + RCCI_IBP_RECV_DEPTH((int)ctx->geom.nslots);
    c->comp_ch = ibv_create_comp_channel(ctx->dev.verbs);
    c->cq = c->comp_ch ? ibv_create_cq(ctx->dev.verbs, cqe, c, c->comp_ch, 0) : NULL;
    c->cm_ch = rdma_create_event_channel();
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!c->cq || !c->cm_ch || c->epfd < 0)
        RCC_FAIL(RCC_ERR_SYSTEM, "completion queue, channels for %s on %s: %s", peer, ctx->dev.name,
                 strerror(errno));
    RCC_CHECK(verbs_nonblocking(c->comp_ch->fd));
    RCC_CHECK(verbs_nonblocking(c->cm_ch->fd));
    struct epoll_event e = {.events = EPOLLIN};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->comp_ch->fd, &e) ||
        epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->cm_ch->fd, &e))
        RCC_FAIL(RCC_ERR_SYSTEM, "epoll_ctl: %s", strerror(errno));
    rcci_ibp_tx_init(&c->tx, &ctx->geom);
    rcci_ibp_rx_init(&c->rx, &ctx->geom);
    rcci_ibq_tx_init(&c->qtx, ctx->geom.nslots);
    rcci_ibq_rx_init(&c->qrx, ctx->geom.nslots);
out:
    if (res != RCC_SUCCESS)
        verbs_conn_free(c);
    else
        *out = c;
    return res;
}

static rcc_result_t verbs_post_recvs(rcci_conn_t *c, int n)
{
    for (int i = 0; i < n; i++) {
        struct ibv_recv_wr wr = {.wr_id = IBV_WR_RECV}, *bad;
        int err = ibv_post_recv(c->id->qp, &wr, &bad); /* returns the errno value */
        if (err)
            return rcci_error_errno(RCC_ERR_SYSTEM, err, "ibv_post_recv to %s", c->peer);
    }
    return RCC_SUCCESS;
}

/* The RC queue pair on c->id, its receives posted before the peer can write. */
static rcc_result_t verbs_make_qp(rcci_conn_t *c)
{
    int depth = RCCI_IBP_RECV_DEPTH((int)c->ctx->geom.nslots);
    struct ibv_qp_init_attr qa = {.send_cq = c->cq,
                                  .recv_cq = c->cq,
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = (uint32_t)c->sq_depth,
                                          .max_recv_wr = (uint32_t)depth,
                                          .max_send_sge = 2, /* header + zero-copy payload */
                                          .max_recv_sge = 1}};
    if (rdma_create_qp(c->id, c->ctx->dev.pd, &qa))
        return rcci_error_errno(RCC_ERR_SYSTEM, errno, "rdma_create_qp for %s", c->peer);
    return verbs_post_recvs(c, depth);
}

static void verbs_my_hello(rcci_conn_t *c, uint32_t tag, uint8_t out[RCCI_IBH_BYTES])
{
    rcci_ibh_t h = {.rank = c->ctx->env.rank,
                    .tag = tag,
                    .comm_id = c->ctx->env.comm_id,
                    .slots_addr = (uint64_t)(uintptr_t)c->slots,
                    .rkey = c->slots_mr->rkey,
                    .geom = c->ctx->geom};
    rcci_ibh_encode(out, &h, c->ctx->env.secret);
}

/* The peer's slots, from its hello. Both ends must use one geometry. */
static rcc_result_t verbs_take_hello(rcci_conn_t *c, const rcci_ibh_t *h)
{
    if (h->geom.nslots != c->ctx->geom.nslots || h->geom.slot_bytes != c->ctx->geom.slot_bytes)
        return rcci_error(RCC_ERR_INVALID_USAGE,
                          "%s has %u verbs slots of %u bytes, this rank %u of %u: set "
                          "RCC_IB_SLOTS and RCC_IB_SLOT_BYTES alike on every rank",
                          c->peer, h->geom.nslots, h->geom.slot_bytes, c->ctx->geom.nslots,
                          c->ctx->geom.slot_bytes);
    c->remote_addr = h->slots_addr;
    c->remote_rkey = h->rkey;
    return RCC_SUCCESS;
}

static struct rdma_conn_param verbs_conn_param(const uint8_t *hello)
{
    return (struct rdma_conn_param){.private_data = hello,
                                    .private_data_len = RCCI_IBH_BYTES,
                                    .responder_resources = 1,
                                    .initiator_depth = 1,
                                    .retry_count = 7,
                                    .rnr_retry_count = 7}; /* 7: retry receiver-not-ready forever */
}

/* ---- set-up ---- */

static rcc_result_t verbs_listen(void *tctx, void *handle, rcci_listener_t **out)
{
    verbs_ctx_t *ctx = tctx;
    rcci_listener_t *l = calloc(1, sizeof *l);
    if (!l)
        return rcci_error(RCC_ERR_NO_MEMORY, "verbs listener");
    l->ctx = ctx;
    pthread_mutex_init(&l->lock, NULL);
    rcci_addr_t local = {.len = ctx->env.local_addr_len};
    memcpy(&local.u, &ctx->env.local_addr, local.len);
    rcci_addr_set_port(&local, 0);
    rcc_result_t res = RCC_SUCCESS;
    l->ch = rdma_create_event_channel();
    if (!l->ch || verbs_nonblocking(l->ch->fd) != RCC_SUCCESS ||
        rdma_create_id(l->ch, &l->id, l, RDMA_PS_TCP) || rdma_bind_addr(l->id, &local.u.sa) ||
        rdma_listen(l->id, 128))
        RCC_FAIL(RCC_ERR_SYSTEM, "verbs listener on %s: %s", ctx->dev.name, strerror(errno));
    rcci_addr_t bound = {.len = local.len};
    memcpy(&bound.u, rdma_get_local_addr(l->id), local.len);
    memset(handle, 0, RCCI_HANDLE_BYTES);
    rcci_addr_to_wire(&bound, (rcci_wire_addr_t *)handle);
    *out = l;
    pthread_mutex_lock(&ctx->listeners_lock);
    l->next = ctx->listeners;
    ctx->listeners = l;
    pthread_mutex_unlock(&ctx->listeners_lock);
out:
    if (res != RCC_SUCCESS) {
        if (l->id)
            rdma_destroy_id(l->id);
        if (l->ch)
            rdma_destroy_event_channel(l->ch);
        pthread_mutex_destroy(&l->lock);
        free(l);
    }
    return res;
}

/* Carries out a state machine action on the active side. */
static rcc_result_t verbs_act(rcci_conn_t *c, rcci_ibc_action_t act)
{
    rcci_addr_t src = {.len = c->ctx->env.local_addr_len};
    memcpy(&src.u, &c->ctx->env.local_addr, src.len);
    rcci_addr_set_port(&src, 0);
    uint8_t hello[RCCI_IBH_BYTES];
    struct rdma_conn_param param;
    switch (act) {
    case RCCI_IBC_DO_RETRY: /* a new cm id after a pause: verbs_setup_step starts it */
        if (c->id->qp)
            rdma_destroy_qp(c->id);
        rdma_destroy_id(c->id);
        c->id = NULL;
        c->retry_at_ns = rcci_now_ns() + IBV_RETRY_PAUSE_NS;
        return RCC_SUCCESS;
    case RCCI_IBC_DO_RESOLVE_ADDR:
        if (rdma_resolve_addr(c->id, &src.u.sa, (struct sockaddr *)&c->to.u.sa, IBV_RESOLVE_MS))
            return rcci_error_errno(RCC_ERR_SYSTEM, errno, "rdma_resolve_addr %s", c->peer);
        return RCC_SUCCESS;
    case RCCI_IBC_DO_RESOLVE_ROUTE:
        if (rdma_resolve_route(c->id, IBV_RESOLVE_MS))
            return rcci_error_errno(RCC_ERR_SYSTEM, errno, "rdma_resolve_route %s", c->peer);
        return RCC_SUCCESS;
    case RCCI_IBC_DO_CONNECT: {
        rcc_result_t res = verbs_make_qp(c);
        if (res != RCC_SUCCESS)
            return res;
        verbs_my_hello(c, c->tag, hello);
        param = verbs_conn_param(hello);
        if (rdma_connect(c->id, &param))
            return rcci_error_errno(RCC_ERR_SYSTEM, errno, "rdma_connect %s", c->peer);
        return RCC_SUCCESS;
    }
    case RCCI_IBC_DO_NONE: return RCC_SUCCESS;
    default: return rcci_ibc_error(&c->state, c->peer);
    }
}

static void verbs_sweep_ctx(verbs_ctx_t *ctx);

/* The reason a peer gave with its reject (verbs_accept_start), printable. */
static void verbs_refusal(const struct rdma_cm_event *ev, char *out, size_t size)
{
    size_t n = ev->param.conn.private_data_len < size - 1 ? ev->param.conn.private_data_len
                                                          : size - 1;
    memcpy(out, ev->param.conn.private_data, n);
    rcci_wire_printable(out, n);
}

/* Whether an active connection is still being set up. */
static int verbs_in_setup(const rcci_conn_t *c)
{
    rcci_ibc_state_t s = c->state.state;
    return s == RCCI_IBC_ADDR || s == RCCI_IBC_ROUTE || s == RCCI_IBC_CONNECTING;
}

/* One rdma_cm event of an active connection's set-up, acknowledged here. */
static rcc_result_t verbs_setup_event(rcci_conn_t *c, struct rdma_cm_event *ev)
{
    char refused[IBV_REJECT_TEXT + 1] = "";
    rcci_ibc_event_t e = verbs_cm_event(ev->event);
    rcci_ibh_t h;
    rcc_result_t res = RCC_SUCCESS;
    if (e == RCCI_IBC_EV_ESTABLISHED)
        res = rcci_ibh_decode(ev->param.conn.private_data, ev->param.conn.private_data_len, &h,
                              c->ctx->env.secret, c->peer);
    if (e == RCCI_IBC_EV_REJECTED && ev->param.conn.private_data_len > 0)
        verbs_refusal(ev, refused, sizeof refused);
    rdma_ack_cm_event(ev);
    if (refused[0])
        return rcci_error(RCC_ERR_REMOTE, "%s refused the connection: %s", c->peer, refused);
    if (res == RCC_SUCCESS && e == RCCI_IBC_EV_ESTABLISHED) {
        res = verbs_take_hello(c, &h);
        /* Errors from now on name the rank, not only its address. */
        snprintf(c->peer, sizeof c->peer, "rank %d (%s)", (int)h.rank, c->addr_text);
    }
    return res == RCC_SUCCESS ? verbs_act(c, rcci_ibc_step(&c->state, e)) : res;
}

/* Moves an active connection's set-up on without waiting: takes its
 * rdma_cm events (taking the peer's accept is what sends the RTU that
 * completes the peer's side), starts the next attempt once its pause is
 * over, and fails the connection at its deadline. */
static rcc_result_t verbs_setup_step(rcci_conn_t *c)
{
    if (c->failed != RCC_SUCCESS)
        return verbs_failed(c);
    rcc_result_t res = RCC_SUCCESS;
    while (res == RCC_SUCCESS && verbs_in_setup(c)) {
        if (c->retry_at_ns) {
            if (rcci_now_ns() < c->retry_at_ns)
                break;
            c->retry_at_ns = 0;
            if (rdma_create_id(c->cm_ch, &c->id, c, RDMA_PS_TCP))
                res = rcci_error_errno(RCC_ERR_SYSTEM, errno, "rdma_create_id");
            else
                res = verbs_act(c, RCCI_IBC_DO_RESOLVE_ADDR);
            continue;
        }
        struct rdma_cm_event *ev;
        if (verbs_get_cm_event(c->cm_ch, &ev) != 0) {
            if (errno != EAGAIN && errno != EINTR)
                res = rcci_error_errno(RCC_ERR_SYSTEM, errno, "rdma_get_cm_event");
            break;
        }
        res = verbs_setup_event(c, ev);
    }
    if (res == RCC_SUCCESS && verbs_in_setup(c) && rcci_now_ns() >= c->setup_deadline_ns) {
        rcci_ibc_step(&c->state, RCCI_IBC_EV_DEADLINE);
        res = rcci_ibc_error(&c->state, c->peer);
    }
    return res == RCC_SUCCESS ? RCC_SUCCESS : verbs_fail(c, res);
}

/* Starts a connection and returns it at once: its set-up goes on in
 * verbs_setup_step, from test, probe and peek (their requests wait for
 * it), so a peer that does not answer (stopped) holds no thread. */
static rcc_result_t verbs_connect_start(void *tctx, const void *handle, uint32_t tag,
                                        int64_t deadline_ns, rcci_conn_t **out)
{
    verbs_ctx_t *ctx = tctx;
    rcci_addr_t to;
    rcc_result_t res = rcci_addr_from_wire(handle, &to);
    if (res != RCC_SUCCESS)
        return res;
    char text[80];
    rcci_addr_format(&to, text, sizeof text);
    rcci_conn_t *c;
    IBV_TRY(verbs_conn_new(ctx, text, &c));
    c->to = to;
    c->tag = tag;
    c->setup_deadline_ns = deadline_ns;
    snprintf(c->addr_text, sizeof c->addr_text, "%s", text);
    if (rdma_create_id(c->cm_ch, &c->id, c, RDMA_PS_TCP))
        res = rcci_error_errno(RCC_ERR_SYSTEM, errno, "rdma_create_id");
    else
        res = verbs_act(c, rcci_ibc_step(&c->state, RCCI_IBC_EV_CONNECT));
    if (res != RCC_SUCCESS)
        verbs_conn_free(c);
    else
        *out = c;
    return res;
}

static rcc_result_t verbs_connect(void *tctx, const void *handle, uint32_t tag, int64_t deadline_ns,
                                  rcci_conn_t **out)
{
    rcci_conn_t *c;
    IBV_TRY(verbs_connect_start(tctx, handle, tag, deadline_ns, &c));
    rcc_result_t res;
    for (;;) {
        /* The peer may be connecting to this rank meanwhile (a ring: every
         * rank connects, then accepts): unlike a TCP backlog, its connect
         * only completes when this rank accepts, so accept it now. */
        verbs_sweep_ctx(c->ctx);
        res = verbs_setup_step(c);
        if (res != RCC_SUCCESS || c->state.state == RCCI_IBC_READY)
            break;
        int64_t until = rcci_now_ns() + IBV_SWEEP_NS;
        struct pollfd p = {.fd = c->cm_ch->fd, .events = POLLIN};
        poll(&p, 1, rcci_ms_until(until < deadline_ns ? until : deadline_ns, 5));
    }
    if (res != RCC_SUCCESS)
        verbs_conn_free(c);
    else
        *out = c;
    return res;
}

/* Drops held connection i (its peer asked again, or the listener closes). */
static void verbs_drop_pending(rcci_listener_t *l, int i)
{
    if (l->pending[i].conn)
        verbs_conn_free(l->pending[i].conn);
    l->pending[i] = l->pending[--l->npending];
}

/* Rejects the request on `id` with this thread's error text as the reason:
 * the peer's connect fails with it (verbs_refusal). */
static void verbs_reject_why(struct rdma_cm_id *id)
{
    const char *why = rcci_tls_error();
    size_t n = strlen(why);
    rdma_reject(id, why, (uint8_t)(n < IBV_REJECT_TEXT ? n : IBV_REJECT_TEXT));
}

/* Accepts the request on `id` (its hello `h`) at once: its own channel,
 * slots and QP, and rdma_accept. Its ESTABLISHED is taken by the accept
 * call that asks for it (verbs_accept_progress). A request that cannot be
 * accepted is rejected, so that the peer learns at once. */
static rcc_result_t verbs_accept_start(rcci_listener_t *l, struct rdma_cm_id *id,
                                       const rcci_ibh_t *h, rcci_conn_t **out)
{
    char text[96];
    snprintf(text, sizeof text, "rank %d", (int)h->rank);
    rcci_conn_t *c;
    rcc_result_t res = verbs_conn_new(l->ctx, text, &c);
    if (res != RCC_SUCCESS) {
        verbs_reject_why(id);
        rdma_destroy_id(id);
        return res;
    }
    c->id = id;
    if (rdma_migrate_id(c->id, c->cm_ch))
        RCC_FAIL(RCC_ERR_SYSTEM, "rdma_migrate_id: %s", strerror(errno));
    c->id->context = c;
    RCC_CHECK(verbs_take_hello(c, h));
    RCC_CHECK(verbs_make_qp(c));
    if (rcci_ibc_step(&c->state, RCCI_IBC_EV_REQUEST) != RCCI_IBC_DO_ACCEPT)
        RCC_FAIL(RCC_ERR_INTERNAL, "verbs accept out of order");
    uint8_t hello[RCCI_IBH_BYTES];
    verbs_my_hello(c, h->tag, hello);
    struct rdma_conn_param param = verbs_conn_param(hello);
    if (rdma_accept(c->id, &param))
        RCC_FAIL(RCC_ERR_SYSTEM, "rdma_accept %s: %s", c->peer, strerror(errno));
    *out = c;
    c = NULL;
out:
    if (c) {
        verbs_reject_why(c->id);
        verbs_conn_free(c);
    }
    return res;
}

/* Takes connect requests off the listener without blocking: strangers are
 * rejected, valid ones accepted (or their reason kept) for accept. */
static void verbs_take_requests(rcci_listener_t *l)
{
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(l->ch, &ev) == 0) {
        if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
            rdma_ack_cm_event(ev); /* accepted ids report on their own channels */
            continue;
        }
        rcci_ibh_t h;
        struct rdma_cm_id *id = ev->id;
        rcc_result_t res =
            rcci_ibh_decode(ev->param.conn.private_data, ev->param.conn.private_data_len, &h,
                            l->ctx->env.secret, "a verbs peer");
        rdma_ack_cm_event(ev); /* before any destroy: rdma_destroy_id waits for its acks */
        if (res == RCC_SUCCESS && h.comm_id != l->ctx->env.comm_id)
            res = rcci_error(RCC_ERR_REMOTE, "a connection of another communicator");
        if (res == RCC_SUCCESS) {
            /* The same rank and tag again: it retried, the older is dead. */
            for (int i = 0; i < l->npending; i++)
                if (l->pending[i].hello.rank == h.rank && l->pending[i].hello.tag == h.tag) {
                    verbs_drop_pending(l, i);
                    break;
                }
        }
        if (res == RCC_SUCCESS && l->npending >= IBV_PENDING_MAX)
            res = rcci_error(RCC_ERR_NO_MEMORY, "%d connections wait for accept already",
                             IBV_PENDING_MAX);
        if (res != RCC_SUCCESS) {
            RCC_INFO("ibverbs: refused a connection: %s", rcci_tls_error());
            rdma_reject(id, NULL, 0);
            rdma_destroy_id(id);
            continue;
        }
        rcci_conn_t *c = NULL;
        verbs_pending_t *p = &l->pending[l->npending++];
        *p = (verbs_pending_t){.hello = h};
        p->refused = verbs_accept_start(l, id, &h, &c);
        if (p->refused == RCC_SUCCESS) {
            p->conn = c;
        } else {
            snprintf(p->why, sizeof p->why, "%s", rcci_tls_error());
            RCC_INFO("ibverbs: cannot accept rank %d: %s", (int)h.rank, p->why);
        }
    }
}

/* Takes a held connection's rdma_cm events without waiting: it is READY
 * then, or still ACCEPTING, or failed (the error). */
static rcc_result_t verbs_accept_progress(rcci_conn_t *c)
{
    struct rdma_cm_event *ev;
    while (c->state.state == RCCI_IBC_ACCEPTING && verbs_get_cm_event(c->cm_ch, &ev) == 0) {
        rcci_ibc_event_t e = verbs_cm_event(ev->event);
        rdma_ack_cm_event(ev);
        if (rcci_ibc_step(&c->state, e) == RCCI_IBC_DO_FAIL)
            return rcci_ibc_error(&c->state, c->peer);
    }
    return RCC_SUCCESS;
}

/* The held connection from `peer_rank` with `tag` once it is established.
 * One that is not yet stays held past the deadline: an accept that only
 * looks (deadline now) must not kill a connection the peer already uses. */
static rcc_result_t verbs_accept(rcci_listener_t *l, int peer_rank, uint32_t tag,
                                 int64_t deadline_ns, rcci_conn_t **out)
{
    pthread_mutex_lock(&l->lock);
    rcc_result_t res;
    rcci_conn_t *held = NULL;
    for (;;) {
        verbs_take_requests(l);
        held = NULL;
        for (int i = 0; i < l->npending && !held; i++) {
            if (l->pending[i].hello.rank != peer_rank || l->pending[i].hello.tag != tag)
                continue;
            if (!l->pending[i].conn) { /* refused: the reason, once */
                res = rcci_error(l->pending[i].refused, "%s", l->pending[i].why);
                l->pending[i] = l->pending[--l->npending];
                goto out;
            }
            held = l->pending[i].conn;
            res = verbs_accept_progress(held);
            if (res != RCC_SUCCESS || held->state.state == RCCI_IBC_READY) {
                l->pending[i] = l->pending[--l->npending];
                if (res == RCC_SUCCESS)
                    *out = held;
                else
                    verbs_conn_free(held);
                goto out;
            }
        }
        if (rcci_now_ns() >= deadline_ns)
            break;
        struct pollfd pf[2] = {{.fd = l->ch->fd, .events = POLLIN},
                               {.fd = held ? held->cm_ch->fd : -1, .events = POLLIN}};
        poll(pf, 2, rcci_ms_until(deadline_ns, 100));
    }
    res = held ? rcci_error(RCC_ERR_TIMEOUT,
                            "the verbs connection from rank %d (tag %u) is not established yet",
                            peer_rank, tag)
               : rcci_error(RCC_ERR_TIMEOUT, "no verbs connection from rank %d (tag %u) came",
                            peer_rank, tag);
out:
    pthread_mutex_unlock(&l->lock);
    return res;
}

static void verbs_sweep_listener(rcci_listener_t *l)
{
    if (pthread_mutex_trylock(&l->lock) != 0)
        return; /* accept is running: it takes the requests */
    verbs_take_requests(l);
    pthread_mutex_unlock(&l->lock);
}

/* Readable while connect requests wait on the listener's channel: taking
 * them (sweep) drains it, so an idle engine waking on it does not spin. */
static int verbs_listener_fd(rcci_listener_t *l) { return l->ch->fd; }

static void verbs_sweep_ctx(verbs_ctx_t *ctx)
{
    pthread_mutex_lock(&ctx->listeners_lock);
    for (rcci_listener_t *l = ctx->listeners; l; l = l->next)
        verbs_sweep_listener(l);
    pthread_mutex_unlock(&ctx->listeners_lock);
}

static void verbs_close_listener(rcci_listener_t *l)
{
    if (!l)
        return;
    verbs_ctx_t *ctx = l->ctx;
    pthread_mutex_lock(&ctx->listeners_lock);
    for (rcci_listener_t **p = &ctx->listeners; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    pthread_mutex_unlock(&ctx->listeners_lock);
    while (l->npending)
        verbs_drop_pending(l, 0);
    rdma_destroy_id(l->id);
    rdma_destroy_event_channel(l->ch);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

/* ---- memory ---- */

struct rcci_mr {
    rcci_mrc_entry_t *entry;
    rcci_mem_type_t type;
};

static rcc_result_t verbs_reg_mem(void *tctx, void *ptr, size_t bytes, rcci_mem_type_t type,
                                  rcci_mr_t **out)
{
    verbs_ctx_t *ctx = tctx;
    /* CUDA memory that cannot be registered directly fails here, with both
     * reasons; the caller then stages it through host memory. */
    rcci_mr_t *mr = calloc(1, sizeof *mr);
    if (!mr)
        return rcci_error(RCC_ERR_NO_MEMORY, "verbs memory handle");
    mr->type = type;
    pthread_mutex_lock(&ctx->mrs_lock);
    rcc_result_t res = rcci_mrc_get(&ctx->mrs, ptr, bytes, (int)type, &mr->entry);
    pthread_mutex_unlock(&ctx->mrs_lock);
    if (res != RCC_SUCCESS) {
        free(mr);
        return res;
    }
    *out = mr;
    return RCC_SUCCESS;
}

static rcc_result_t verbs_dereg_mem(void *tctx, rcci_mr_t *mr)
{
    verbs_ctx_t *ctx = tctx;
    if (mr) { /* the caller may free the memory now: no stale entry stays */
        pthread_mutex_lock(&ctx->mrs_lock);
        rcci_mrc_put(&ctx->mrs, mr->entry);
        pthread_mutex_unlock(&ctx->mrs_lock);
        free(mr);
    }
    return RCC_SUCCESS;
}

/* ---- data path ---- */

static int verbs_sq_free(const rcci_conn_t *c) { return c->sq_used < c->sq_depth; }

static rcc_result_t verbs_post_send(rcci_conn_t *c, struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad;
    wr->send_flags = IBV_SEND_SIGNALED;
    int err = ibv_post_send(c->id->qp, wr, &bad); /* returns the errno value */
    if (err)
        return verbs_fail(c, rcci_error_errno(RCC_ERR_SYSTEM, err, "ibv_post_send to %s", c->peer));
    c->sq_used++;
    return RCC_SUCCESS;
}

static rcc_result_t verbs_post_control(rcci_conn_t *c, uint32_t imm)
{
    struct ibv_send_wr wr = {
        .wr_id = IBV_WR_CONTROL, .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(imm)};
    return verbs_post_send(c, &wr);
}

/* Writes the next fragment of a message (header `hdr`, payload `buf`): the
 * header always, and the payload unless `zero_copy` registers it, staged;
 * 0 when no slot or send queue entry is free. */
static int verbs_write_next(rcci_conn_t *c, const uint8_t *hdr, const char *buf, size_t bytes,
                            uint64_t *sent, const struct ibv_mr *zero_copy)
{
    rcci_ibp_frag_t f;
    if (!verbs_sq_free(c) || !rcci_ibp_tx_next(&c->tx, bytes, sent, &f))
        return 0;
    char *st = c->staging + f.remote_offset;
    memcpy(st, hdr, f.header_bytes); /* 0 but in the first fragment */
    struct ibv_sge sge[2];
    int nsge = 0;
    if (!zero_copy || f.header_bytes)
        sge[nsge++] = (struct ibv_sge){.addr = (uintptr_t)st, .length = f.header_bytes,
                                       .lkey = c->staging_mr->lkey};
    if (f.payload_bytes && !zero_copy) {
        memcpy(st + f.header_bytes, buf + f.payload_offset, f.payload_bytes);
        sge[0].length += (uint32_t)f.payload_bytes;
    } else if (f.payload_bytes) {
        sge[nsge++] = (struct ibv_sge){.addr = (uintptr_t)(buf + f.payload_offset),
                                       .length = (uint32_t)f.payload_bytes,
                                       .lkey = zero_copy->lkey};
    }
    struct ibv_send_wr wr = {
        .wr_id = IBV_WR_WRITE,
        .sg_list = sge,
        .num_sge = nsge,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .imm_data = htonl(f.imm),
        .wr.rdma = {.remote_addr = c->remote_addr + f.remote_offset, .rkey = c->remote_rkey}};
    return verbs_post_send(c, &wr) == RCC_SUCCESS;
}

/* A failure notice in the slot at hand: fails the connection with its text. */
static rcc_result_t verbs_take_notice(rcci_conn_t *c, const rcci_wire_frame_t *f, const char *slot)
{
    char text[RCCI_WIRE_NOTICE_MAX + 1];
    size_t n = (size_t)f->length;
    memcpy(text, slot + RCCI_WIRE_HEADER_BYTES, n);
    rcci_wire_printable(text, n);
    c->failed_by_notice = 1;
    if (f->notice_res == RCC_SUCCESS) { /* it left: whatever needs it now has lost it */
        c->goodbye = 1;
        return verbs_fail(c, rcci_error(RCC_ERR_PEER_LOST, "%s",
                                        n ? text : "the peer destroyed its communicator"));
    }
    return verbs_fail(c, rcci_error(f->notice_res, "%s", n ? text : "a peer failed (no detail)"));
}

/* The header at the start of the next slot. Notices fail the connection,
 * announcements are taken and kept for peek; data is left (*is_data). */
static rcc_result_t verbs_next_header(rcci_conn_t *c, rcci_wire_frame_t *f, int *is_data)
{
    rcci_ibp_slot_t s;
    *is_data = 0;
    if (!rcci_ibp_rx_peek(&c->rx, &s) || !s.starts_message)
        return RCC_SUCCESS;
    const char *slot = c->slots + (size_t)s.slot * c->ctx->geom.slot_bytes;
    rcc_result_t res = rcci_wire_parse((const uint8_t *)slot, f, c->peer);
    if (res == RCC_SUCCESS && f->notice)
        res = rcci_ibp_rx_start(&c->rx, f->length, c->peer);
    if (res == RCC_SUCCESS && f->notice)
        return verbs_take_notice(c, f, slot);
    if (res == RCC_SUCCESS && f->announce) {
        rcci_ibp_take_t t;
        res = rcci_ibp_rx_start(&c->rx, 0, c->peer);
        if (res == RCC_SUCCESS)
            res = rcci_ibp_rx_take(&c->rx, &t, c->peer);
        c->announced = 1;
        c->announce_tag = f->tag;
        return res == RCC_SUCCESS ? RCC_SUCCESS : verbs_fail(c, res);
    }
    if (res != RCC_SUCCESS)
        return verbs_fail(c, res);
    *is_data = 1;
    return RCC_SUCCESS;
}

/* Copies arrived slots into the posted receives, in order. */
static rcc_result_t verbs_deliver(rcci_conn_t *c)
{
    rcci_ibp_slot_t s;
    while (c->failed == RCC_SUCCESS && c->recvs.head && rcci_ibp_rx_peek(&c->rx, &s)) {
        struct rcci_request *r = c->recvs.head;
        rcc_result_t res = RCC_SUCCESS;
        if (s.starts_message) {
            rcci_wire_frame_t f;
            int is_data;
            RCC_CHECK(verbs_next_header(c, &f, &is_data));
            if (!is_data)
                continue;
            res =
                rcci_wire_match(&f, &r->tag, r->bytes, c->peer, c->self, c->ctx->env.describe_sig);
            if (res == RCC_SUCCESS)
                res = rcci_ibp_rx_start(&c->rx, f.length, c->peer);
            if (res != RCC_SUCCESS)
                return verbs_fail(c, res);
        }
        rcci_ibp_take_t t;
        res = rcci_ibp_rx_take(&c->rx, &t, c->peer);
        if (res != RCC_SUCCESS)
            return verbs_fail(c, res);
        memcpy(r->buf + t.payload_offset,
               c->slots + (size_t)t.slot * c->ctx->geom.slot_bytes + t.slot_offset, t.bytes);
        if (t.last)
            rcci_req_fifo_complete(&c->recvs, &c->completed);
    }
out:
    return c->failed;
}

/* ---- queued messages: the progress thread's part (qproto.h) ---- */

static volatile uint32_t *verbs_qflag(const verbs_qring_t *r, int which)
{
    return r->flags + which * IBV_QF_STRIDE;
}

static int verbs_qready(int *ready) { return __atomic_load_n(ready, __ATOMIC_ACQUIRE); }

/* Where this side's queued receive slots lie: written into the peer's
 * mailbox by the same WRITE WITH IMMEDIATE that announces it. */
static rcc_result_t verbs_tell_qslots(rcci_conn_t *c)
{
    const verbs_ctx_t *ctx = c->ctx;
    size_t mailbox = (size_t)ctx->geom.nslots * ctx->geom.slot_bytes;
    rcci_ibq_slots_t s = {.addr = (uint64_t)(uintptr_t)c->qrecv.slots,
                          .rkey = c->qrecv.mr->rkey,
                          .nslots = ctx->geom.nslots,
                          .slot_bytes = ctx->qslot_bytes};
    uint8_t *out = (uint8_t *)c->staging + mailbox;
    rcci_ibq_slots_encode(out, &s);
    struct ibv_sge sge = {
        .addr = (uintptr_t)out, .length = RCCI_IBQ_SLOTS_BYTES, .lkey = c->staging_mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = IBV_WR_CONTROL,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .imm_data = htonl(rcci_ibq_imm_slots()),
        .wr.rdma = {.remote_addr = c->remote_addr + mailbox, .rkey = c->remote_rkey}};
    return verbs_post_send(c, &wr);
}

static int verbs_qmeta_pop(rcci_conn_t *c, verbs_qmeta_t *m)
{
    pthread_mutex_lock(&c->qmeta_lock);
    int any = c->qmeta_count > 0;
    if (any) {
        *m = c->qmeta[c->qmeta_head];
        c->qmeta_head = (c->qmeta_head + 1) % c->qmeta_cap;
        c->qmeta_count--;
    }
    pthread_mutex_unlock(&c->qmeta_lock);
    return any;
}

/* The next queued message, from its staging slot into the peer's slot. */
static rcc_result_t verbs_qwrite(rcci_conn_t *c, const verbs_qmeta_t *m)
{
    uint64_t k = c->qtx.posted;
    size_t off = (size_t)(k % c->ctx->geom.nslots) * c->ctx->qslot_bytes;
    struct ibv_sge sge = {
        .addr = (uintptr_t)(c->qsend.slots + off), .length = m->bytes, .lkey = c->qsend.mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = IBV_WR_QWRITE,
        .sg_list = m->bytes ? &sge : NULL,
        .num_sge = m->bytes ? 1 : 0,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .imm_data = htonl(rcci_ibq_imm_data(k, m->check)),
        .wr.rdma = {.remote_addr = c->qpeer.addr + off, .rkey = c->qpeer.rkey}};
    IBV_TRY(verbs_post_send(c, &wr));
    rcci_ibq_tx_posted(&c->qtx);
    return RCC_SUCCESS;
}

/* Everything of the queued messages that can move now: the SLOTS message
 * once this side has its receive slots, credits for what its GPU released,
 * writes of what its GPU staged once the peer's slots are known. */
static rcc_result_t verbs_queued_move(rcci_conn_t *c, int *any)
{
    if (c->state.state != RCCI_IBC_READY)
        return RCC_SUCCESS;
    if (verbs_qready(&c->qrecv_ready)) {
        if (!c->qslots_told && verbs_sq_free(c)) {
            IBV_TRY(verbs_tell_qslots(c));
            c->qslots_told = 1;
            *any = 1;
        }
        rcci_ibq_rx_released(&c->qrx,
                             __atomic_load_n(verbs_qflag(&c->qrecv, IBV_QF_GPU), __ATOMIC_ACQUIRE));
        uint32_t imm;
        while (verbs_sq_free(c) && rcci_ibq_rx_credit_due(&c->qrx, &imm)) {
            IBV_TRY(verbs_post_control(c, imm));
            *any = 1;
        }
    }
    if (c->qpeer_known && verbs_qready(&c->qsend_ready)) {
        uint32_t staged = __atomic_load_n(verbs_qflag(&c->qsend, IBV_QF_GPU), __ATOMIC_ACQUIRE);
        verbs_qmeta_t m;
        while (verbs_sq_free(c) && rcci_ibq_tx_ready(&c->qtx, staged) && verbs_qmeta_pop(c, &m)) {
            IBV_TRY(verbs_qwrite(c, &m));
            *any = 1;
        }
    }
    return RCC_SUCCESS;
}

/* A queued write completed: its staging slot is free for the GPU. */
static rcc_result_t verbs_queued_sent(rcci_conn_t *c)
{
    IBV_TRY(rcci_ibq_tx_completed(&c->qtx));
    __atomic_store_n(verbs_qflag(&c->qsend, IBV_QF_HOST), (uint32_t)c->qtx.completed,
                     __ATOMIC_RELEASE);
    return RCC_SUCCESS;
}

/* A QUEUED immediate. A message that landed is made visible to the GPU's
 * later reads (GPUDirect RDMA writes may otherwise still be on their way
 * inside the GPU when its completion is seen) before the GPU is told. */
static rcc_result_t verbs_queued_arrived(rcci_conn_t *c, uint32_t raw)
{
    const verbs_ctx_t *ctx = c->ctx;
    rcci_ibq_imm_t q;
    IBV_TRY(rcci_ibq_imm_parse(raw, &q, c->peer));
    switch (q.kind) {
    case RCCI_IBQ_DATA:
        if (!verbs_qready(&c->qrecv_ready))
            return rcci_error(RCC_ERR_REMOTE,
                              "%s wrote a queued message before this rank had receive slots for it",
                              c->peer);
        IBV_TRY(rcci_ibq_rx_arrived(&c->qrx, &q, c->peer));
        if (ctx->qdev->flush_remote_writes)
            IBV_TRY(ctx->qdev->flush_remote_writes());
        __atomic_store_n(verbs_qflag(&c->qrecv, IBV_QF_HOST), (uint32_t)c->qrx.arrived,
                         __ATOMIC_RELEASE);
        return RCC_SUCCESS;
    case RCCI_IBQ_CREDIT: return rcci_ibq_tx_credit(&c->qtx, q.released, c->peer);
    case RCCI_IBQ_SLOTS:
        IBV_TRY(rcci_ibq_slots_decode((const uint8_t *)c->slots +
                                          (size_t)ctx->geom.nslots * ctx->geom.slot_bytes,
                                      &c->qpeer, ctx->geom.nslots, ctx->qslot_bytes, c->peer));
        c->qpeer_known = 1;
        return RCC_SUCCESS;
    }
    return rcci_error(RCC_ERR_INTERNAL, "queued immediate of kind %d", (int)q.kind);
}

static rcc_result_t verbs_on_completion(rcci_conn_t *c, const struct ibv_wc *wc)
{
    /* A QP destroyed by a connect retry may leave completions in the CQ
     * (destroying it need not remove them): not this connection's. */
    if (c->id && c->id->qp && wc->qp_num != c->id->qp->qp_num)
        return RCC_SUCCESS;
    if (wc->wr_id != IBV_WR_RECV) /* opcode is undefined in failed completions: wr_id tells */
        c->sq_used--;
    if (wc->status != IBV_WC_SUCCESS) {
        if (rcci_ibc_step(&c->state, RCCI_IBC_EV_ERROR) == RCCI_IBC_DO_FAIL)
            return verbs_fail(c, rcci_error(RCC_ERR_PEER_LOST, "verbs to %s failed: %s", c->peer,
                                            ibv_wc_status_str(wc->status)));
        return RCC_SUCCESS; /* flushed after the peer left */
    }
    if (wc->wr_id == IBV_WR_WRITE)
        return rcci_ibp_tx_completed(&c->tx);
    if (wc->wr_id == IBV_WR_QWRITE)
        return verbs_queued_sent(c);
    if (wc->wr_id != IBV_WR_RECV)
        return RCC_SUCCESS;
    rcc_result_t res = verbs_post_recvs(c, 1);
    rcci_ibp_imm_t imm;
    if (res == RCC_SUCCESS && !(wc->wc_flags & IBV_WC_WITH_IMM)) /* every message carries one */
        res = rcci_error(RCC_ERR_REMOTE, "%s sent a message without immediate data (opcode %d)",
                         c->peer, (int)wc->opcode);
    if (res == RCC_SUCCESS)
        res = rcci_ibp_imm_parse(ntohl(wc->imm_data), &imm, c->peer);
    if (res != RCC_SUCCESS)
        return verbs_fail(c, res);
    switch (imm.kind) {
    case RCCI_IBP_IMM_DATA: res = rcci_ibp_rx_arrived(&c->rx, &imm, c->peer); break;
    case RCCI_IBP_IMM_CREDIT: res = rcci_ibp_tx_credit(&c->tx, imm.taken, c->peer); break;
    case RCCI_IBP_IMM_CLOSE: rcci_ibc_step(&c->state, RCCI_IBC_EV_PEER_CLOSE); break;
    case RCCI_IBP_IMM_QUEUED: res = verbs_queued_arrived(c, imm.raw); break;
    }
    return res == RCC_SUCCESS ? RCC_SUCCESS : verbs_fail(c, res);
}

/* rdma_cm events of an established connection: disconnects. */
static void verbs_cm_events(rcci_conn_t *c)
{
    struct rdma_cm_event *ev;
    while (verbs_get_cm_event(c->cm_ch, &ev) == 0) {
        rcci_ibc_event_t e = verbs_cm_event(ev->event);
        rdma_ack_cm_event(ev);
        rcci_ibc_step(&c->state, e);
    }
}

/* Polls completions; *any when there were some. */
static rcc_result_t verbs_poll(rcci_conn_t *c, int *any)
{
    struct ibv_wc wc[IBV_POLL_BATCH];
    int n;
    while ((n = ibv_poll_cq(c->cq, IBV_POLL_BATCH, wc)) > 0) {
        *any = 1;
        for (int i = 0; i < n; i++) {
            rcc_result_t res = verbs_on_completion(c, &wc[i]);
            if (res != RCC_SUCCESS)
                return res;
        }
    }
    if (n < 0)
        return verbs_fail(c, rcci_error(RCC_ERR_SYSTEM, "ibv_poll_cq on %s failed", c->peer));
    return RCC_SUCCESS;
}

/* Everything that can move now: completions, deliveries, credits, sends.
 * When nothing did, arms the completion channel so wait_fd wakes. */
static rcc_result_t verbs_drive(rcci_conn_t *c)
{
    if (verbs_in_setup(c)) {
        IBV_TRY(verbs_setup_step(c));
        if (verbs_in_setup(c))
            return RCC_SUCCESS; /* its rdma_cm events wake wait_fd */
    }
    struct ibv_cq *cq;
    void *cq_ctx;
    if (c->cq_armed && ibv_get_cq_event(c->comp_ch, &cq, &cq_ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        c->cq_armed = 0;
    }
    verbs_cm_events(c);
    while (c->failed == RCC_SUCCESS) {
        int any = 0;
        IBV_TRY(verbs_poll(c, &any));
        IBV_TRY(verbs_deliver(c));
        uint32_t imm;
        while (verbs_sq_free(c) && rcci_ibp_rx_credit_due(&c->rx, &imm)) {
            IBV_TRY(verbs_post_control(c, imm));
            any = 1;
        }
        IBV_TRY(verbs_queued_move(c, &any));
        while (c->sends.head && c->state.state == RCCI_IBC_READY) {
            struct rcci_request *r = c->sends.head;
            uint8_t hdr[RCCI_WIRE_HEADER_BYTES];
            rcci_wire_encode(hdr, &r->tag, r->bytes);
            if (!verbs_write_next(c, hdr, r->buf, r->bytes, &r->sent, r->zero_copy))
                break;
            any = 1;
            if (r->sent == RCCI_WIRE_HEADER_BYTES + r->bytes) {
                r->last_write = c->tx.written;
                if (r->zero_copy) /* the adapter still reads the buffer */
                    rcci_req_fifo_push(&c->unfinished, rcci_req_fifo_pop(&c->sends));
                else
                    rcci_req_fifo_complete(&c->sends, &c->completed);
            }
        }
        /* Writes complete in order on RC: a zero-copy send is done with
         * its buffer once the write of its last fragment has completed. */
        while (c->unfinished.head && c->tx.completed >= c->unfinished.head->last_write)
            rcci_req_fifo_complete(&c->unfinished, &c->completed);
        if (any)
            continue;
        if (!c->cq_armed) { /* arm, then look once more: no wake-up is lost */
            int err = ibv_req_notify_cq(c->cq, 0); /* returns the errno value */
            if (err) /* unarmed, the wait fd would never wake */
                return verbs_fail(c, rcci_error_errno(RCC_ERR_SYSTEM, err,
                                                      "ibv_req_notify_cq for %s", c->peer));
            c->cq_armed = 1;
            continue;
        }
        break;
    }
    if (c->failed == RCC_SUCCESS && c->state.state != RCCI_IBC_READY &&
        !rcci_ibp_rx_peek(&c->rx, &(rcci_ibp_slot_t){0}) && (c->recvs.head || c->sends.head))
        return verbs_fail(c, rcci_ibc_error(&c->state, c->peer));
    return c->failed == RCC_SUCCESS ? RCC_SUCCESS : verbs_failed(c);
}

static rcc_result_t verbs_post(rcci_conn_t *c, int is_send, const void *buf, size_t bytes,
                               const rcci_tag_t *tag, rcci_request_t **out)
{
    if (c->failed != RCC_SUCCESS)
        return verbs_failed(c);
    rcci_request_t *r = calloc(1, sizeof *r);
    if (!r)
        return rcci_error(RCC_ERR_NO_MEMORY, "verbs request");
    *r = (rcci_request_t){.conn = c, .buf = (char *)buf, .bytes = bytes, .tag = *tag};
    rcci_req_fifo_push(is_send ? &c->sends : &c->recvs, r);
    *out = r;
    return RCC_SUCCESS;
}

static rcc_result_t verbs_isend(rcci_conn_t *c, const void *buf, size_t bytes,
                                const rcci_tag_t *tag, rcci_mr_t *mr, rcci_request_t **req)
{
    if (mr && bytes > 0 &&
        ((uintptr_t)buf < mr->entry->start || bytes > mr->entry->end - (uintptr_t)buf))
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "send of %zu bytes at %p to %s: outside its registration [%#lx, %#lx)",
                          bytes, buf, c->peer, (unsigned long)mr->entry->start,
                          (unsigned long)mr->entry->end);
    rcc_result_t res = verbs_post(c, 1, buf, bytes, tag, req);
    if (res == RCC_SUCCESS && mr && bytes > 0)
        (*req)->zero_copy = mr->entry->handle;
    return res;
}

static rcc_result_t verbs_irecv(rcci_conn_t *c, void *buf, size_t bytes, const rcci_tag_t *tag,
                                rcci_mr_t *mr, rcci_request_t **req)
{
    if (mr && mr->type == RCCI_MEM_CUDA)
        return rcci_error(RCC_ERR_UNSUPPORTED,
                          "receive from %s into device memory: ibverbs receives into host memory "
                          "(its slots), so device buffers are received through host memory",
                          c->peer);
    return verbs_post(c, 0, buf, bytes, tag, req);
}

static rcc_result_t verbs_test(rcci_request_t *r, int *done)
{
    rcci_conn_t *c = r->conn;
    rcc_result_t res = r->complete ? RCC_SUCCESS : verbs_drive(c);
    if (res != RCC_SUCCESS && !r->complete) /* rcci_req_finish frees it */
        rcci_req_fifo_unlink(&c->unfinished, r);
    return rcci_req_finish(&c->sends, &c->recvs, &c->completed, r, res, done);
}

static int verbs_wait_fd(rcci_conn_t *c) { return c->epfd; }

static rcc_result_t verbs_peek(rcci_conn_t *c, rcci_tag_t *tag, int *found)
{
    *found = RCCI_PEEK_NONE;
    if (c->failed == RCC_SUCCESS && !c->recvs.head)
        verbs_drive(c);
    if (c->failed != RCC_SUCCESS) {
        if (c->failed_by_notice)
            *found = c->goodbye ? RCCI_PEEK_GOODBYE : RCCI_PEEK_NOTICE;
        return verbs_failed(c);
    }
    if (c->recvs.head)
        return RCC_SUCCESS; /* a posted receive notices a close or a notice by itself */
    rcci_wire_frame_t f;
    int is_data;
    rcc_result_t res = verbs_next_header(c, &f, &is_data);
    if (res != RCC_SUCCESS) {
        *found = !c->failed_by_notice ? RCCI_PEEK_NONE
                 : c->goodbye         ? RCCI_PEEK_GOODBYE
                                      : RCCI_PEEK_NOTICE;
        return res;
    }
    if (c->announced) {
        c->announced = 0;
        *tag = c->announce_tag;
        *found = RCCI_PEEK_ANNOUNCE;
    } else if (is_data) {
        *tag = f.tag;
        *found = RCCI_PEEK_DATA;
    } else if (c->state.state != RCCI_IBC_READY && !verbs_in_setup(c)) {
        return verbs_fail(c, rcci_ibc_error(&c->state, c->peer));
    }
    return RCC_SUCCESS;
}

static rcc_result_t verbs_probe(rcci_conn_t *c)
{
    rcci_tag_t tag;
    int found;
    rcc_result_t res = verbs_peek(c, &tag, &found);
    if (found == RCCI_PEEK_ANNOUNCE) { /* probe takes nothing: keep it for peek */
        c->announced = 1;
        c->announce_tag = tag;
    }
    return res;
}

/* Writes a header-only message (and `text`) now, or not at all: only at a
 * message boundary of the send stream, with a slot free. */
static void verbs_send_frame_now(rcci_conn_t *c, const uint8_t *hdr, const char *text, size_t len)
{
    if (c->failed != RCC_SUCCESS || c->state.state != RCCI_IBC_READY ||
        (c->sends.head && c->sends.head->sent > 0))
        return;
    verbs_poll(c, &(int){0});
    uint64_t sent = 0;
    verbs_write_next(c, hdr, text, len, &sent, NULL); /* best effort */
}

static void verbs_announce(rcci_conn_t *c, const rcci_tag_t *tag)
{
    if (!c)
        return;
    uint8_t hdr[RCCI_WIRE_HEADER_BYTES];
    rcci_wire_encode_announce(hdr, tag);
    verbs_send_frame_now(c, hdr, NULL, 0);
}

static void verbs_notify(rcci_conn_t *c, rcc_result_t res, const char *text)
{
    if (!c)
        return;
    size_t len = strlen(text);
    len = len < RCCI_WIRE_NOTICE_MAX ? len : RCCI_WIRE_NOTICE_MAX;
    uint8_t hdr[RCCI_WIRE_HEADER_BYTES];
    rcci_wire_encode_notice(hdr, res, len);
    verbs_send_frame_now(c, hdr, text, len);
}

static void verbs_close(rcci_conn_t *c)
{
    if (!c)
        return;
    if (rcci_ibc_step(&c->state, RCCI_IBC_EV_CLOSE) == RCCI_IBC_DO_DISCONNECT) {
        verbs_poll(c, &(int){0});
        if (verbs_sq_free(c))
            verbs_post_control(c, rcci_ibp_imm_close()); /* best effort, before the disconnect */
        /* rdma_disconnect moves the QP to the error state at once, which
         * flushes whatever the adapter has not sent yet: the last writes, a
         * notice, the close. Every work request is signalled, so sq_used
         * says when all went; bounded, as a gone peer's writes only fail
         * after the adapter's retries. A failing communicator closes all
         * its connections in a row: they share one window (and a grace
         * each, for connections whose writes the window's wait let go
         * out), so a peer that stopped answering costs it once, not once
         * per connection. */
        int64_t now = rcci_now_ns();
        if (now - c->ctx->last_close_ns > IBV_CLOSE_GRACE_NS) /* not in a row: a new window */
            c->ctx->drain_until_ns = now + IBV_CLOSE_DRAIN_NS;
        int64_t deadline = c->ctx->drain_until_ns > now + IBV_CLOSE_GRACE_NS
                               ? c->ctx->drain_until_ns
                               : now + IBV_CLOSE_GRACE_NS;
        while (c->sq_used > 0 && c->failed == RCC_SUCCESS && rcci_now_ns() < deadline) {
            int any = 0;
            verbs_poll(c, &any);
            if (!any)
                nanosleep(&(struct timespec){0, 20000}, NULL);
        }
        rdma_disconnect(c->id);
        c->ctx->last_close_ns = rcci_now_ns();
    }
    rcci_req_fifo_free_all(&c->sends);
    rcci_req_fifo_free_all(&c->unfinished);
    rcci_req_fifo_free_all(&c->recvs);
    rcci_req_fifo_free_all(&c->completed);
    verbs_conn_free(c);
}

/* ---- queued messages: the calls (transport.h, version 7) ---- */

/* Stored by queue_abort past every count a queued wait asks for (waits
 * compare cyclically, and far fewer messages are ever queued ahead). */
#define IBV_Q_RUN_THROUGH 0x40000000u

/* The GPU whose streams the queued calls use: RCC_ERR_UNSUPPORTED with
 * the reason where there is none (this build has no GPU API, the machine
 * no GPU). Looked for once per context. */
static rcc_result_t verbs_qdev(verbs_ctx_t *ctx)
{
    pthread_mutex_lock(&ctx->qdev_lock);
    if (ctx->qdev_state == 0) {
        const rcci_devapi_t *dev = rcci_devapi();
        char why[160] = "this build has no GPU API";
        if (dev && !dev->ipc_alloc)
            snprintf(why, sizeof why, "the GPU API (%s) allocates no plain device memory",
                     dev->name);
        else if (dev && dev->device_count(why, sizeof why) > 0)
            ctx->qdev = dev;
        ctx->qdev_state = ctx->qdev ? 1 : -1;
        snprintf(ctx->qdev_why, sizeof ctx->qdev_why, "%s", why);
    }
    int state = ctx->qdev_state;
    pthread_mutex_unlock(&ctx->qdev_lock);
    if (state > 0)
        return RCC_SUCCESS;
    return rcci_error(RCC_ERR_UNSUPPORTED, "ibverbs: no queued messages (GPU to GPU): %s",
                      ctx->qdev_why);
}

static size_t verbs_queue_bytes(rcci_conn_t *c, int send)
{
    (void)send; /* both ends use RCC_IB_GDR_SLOT_BYTES, checked when the slots are told */
    char error[RCCI_ERR_TEXT_BYTES]; /* a question, not a failure: the error stays */
    snprintf(error, sizeof error, "%s", rcci_tls_error());
    int usable = verbs_qdev(c->ctx) == RCC_SUCCESS;
    rcci_tls_error_set(error);
    return usable ? c->ctx->qslot_bytes : 0;
}

/* A queued message is one slot, on a GPU. */
static rcc_result_t verbs_queued_fits(rcci_conn_t *c, int send, size_t bytes)
{
    IBV_TRY(verbs_qdev(c->ctx));
    if (bytes <= c->ctx->qslot_bytes)
        return RCC_SUCCESS;
    return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                      "ibverbs: a queued %s of %zu bytes %s %s exceeds its %u-byte slot "
                      "(RCC_IB_GDR_SLOT_BYTES)",
                      send ? "send" : "receive", bytes, send ? "to" : "from", c->peer,
                      c->ctx->qslot_bytes);
}

static void verbs_qring_free(rcci_conn_t *c, verbs_qring_t *r)
{
    const rcci_devapi_t *dev = c->ctx->qdev;
    if (r->mr)
        ibv_dereg_mr(r->mr);
    if (r->slots)
        dev->ipc_free(r->slots);
    if (r->flags)
        dev->host_free((void *)r->flags);
    *r = (verbs_qring_t){0};
}

/* One direction's ring, on its first queued call: plain device memory
 * (cudaMalloc's, which ipc_alloc makes; a stream-ordered pool's cannot be
 * registered), registered with the adapter as GPUDirect RDMA memory;
 * receive slots for the peer's writes, staging only for reads. Not cleared:
 * every slot is written before it is read, and clearing would wait for the
 * GPU, behind the caller's own queued work on a shared hardware queue (a
 * group's calls, launched only at its end, deadlocked there). */
static rcc_result_t verbs_qring_make(rcci_conn_t *c, verbs_qring_t *r, int access, int *ready)
{
    if (verbs_qready(ready))
        return RCC_SUCCESS;
    const rcci_devapi_t *dev = c->ctx->qdev;
    size_t bytes = (size_t)c->ctx->geom.nslots * c->ctx->qslot_bytes;
    char handle[RCCI_IPC_HANDLE_BYTES];
    void *mr = NULL;
    rcc_result_t res = dev->ipc_alloc((void **)&r->slots, bytes, RCCI_IPC_DEVICE, handle);
    if (res == RCC_SUCCESS)
        res = dev->host_alloc((void **)&r->flags, 2 * IBV_QF_STRIDE * sizeof *r->flags);
    if (res == RCC_SUCCESS)
        res = verbs_reg_device(c->ctx, r->slots, bytes, access, &mr);
    r->mr = mr;
    if (res != RCC_SUCCESS) {
        verbs_qring_free(c, r);
        rcci_error_prefix("ibverbs: queued %s slots (%u x %u bytes of device memory) for %s: ",
                          access ? "receive" : "send", c->ctx->geom.nslots, c->ctx->qslot_bytes,
                          c->peer);
        return res;
    }
    __atomic_store_n(ready, 1, __ATOMIC_RELEASE);
    return RCC_SUCCESS;
}

static rcc_result_t verbs_queue_recv(rcci_conn_t *c, void *stream, size_t bytes, const void **data,
                                     uint32_t *ticket)
{
    IBV_TRY(verbs_queued_fits(c, 0, bytes));
    IBV_TRY(verbs_qring_make(c, &c->qrecv, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                             &c->qrecv_ready));
    uint32_t k = c->q_rx;
    IBV_TRY(c->ctx->qdev->wait_flag(stream, verbs_qflag(&c->qrecv, IBV_QF_HOST), k + 1));
    *data = c->qrecv.slots + (size_t)(k % c->ctx->geom.nslots) * c->ctx->qslot_bytes;
    *ticket = k;
    __atomic_store_n(&c->q_rx, k + 1, __ATOMIC_RELEASE);
    return RCC_SUCCESS;
}

static rcc_result_t verbs_queue_release(rcci_conn_t *c, void *stream)
{
    IBV_TRY(verbs_qdev(c->ctx));
    if (!verbs_qready(&c->qrecv_ready) || c->q_unreleased == c->q_rx)
        return rcci_error(RCC_ERR_INTERNAL, "ibverbs: queue_release with no queued receive (%s)",
                          c->peer);
    IBV_TRY(
        c->ctx->qdev->write_flag(stream, verbs_qflag(&c->qrecv, IBV_QF_GPU), c->q_unreleased + 1));
    c->q_unreleased++;
    return RCC_SUCCESS;
}

static rcc_result_t verbs_queue_send(rcci_conn_t *c, void *stream, size_t bytes, void **data)
{
    if (c->q_reserved)
        return rcci_error(RCC_ERR_INTERNAL, "ibverbs: a second queue_send before queue_commit");
    IBV_TRY(verbs_queued_fits(c, 1, bytes));
    IBV_TRY(verbs_qring_make(c, &c->qsend, 0, &c->qsend_ready));
    uint32_t k = c->q_tx, n = c->ctx->geom.nslots;
    /* Its staging slot is free once the write of message k - n has gone. */
    IBV_TRY(c->ctx->qdev->wait_flag(stream, verbs_qflag(&c->qsend, IBV_QF_HOST), k - n + 1));
    *data = c->qsend.slots + (size_t)(k % n) * c->ctx->qslot_bytes;
    c->q_reserved = 1;
    c->q_reserved_bytes = bytes;
    return RCC_SUCCESS;
}

static rcc_result_t verbs_queue_commit(rcci_conn_t *c, void *stream, size_t bytes,
                                       const rcci_tag_t *tag, uint32_t *ticket)
{
    IBV_TRY(verbs_qdev(c->ctx));
    if (!c->q_reserved || bytes != c->q_reserved_bytes)
        return rcci_error(RCC_ERR_INTERNAL,
                          "ibverbs: queue_commit of %zu bytes to %s without its queue_send", bytes,
                          c->peer);
    /* What the write will say goes in first: the progress thread takes it
     * once the GPU has staged the message, which is queued below. */
    pthread_mutex_lock(&c->qmeta_lock);
    if (c->qmeta_count == c->qmeta_cap) {
        size_t cap = c->qmeta_cap ? 2 * c->qmeta_cap : 64;
        verbs_qmeta_t *grown = malloc(cap * sizeof *grown);
        for (size_t i = 0; grown && i < c->qmeta_count; i++)
            grown[i] = c->qmeta[(c->qmeta_head + i) % c->qmeta_cap];
        if (grown) {
            free(c->qmeta);
            c->qmeta = grown, c->qmeta_cap = cap, c->qmeta_head = 0;
        }
    }
    int room = c->qmeta_count < c->qmeta_cap;
    if (room)
        c->qmeta[(c->qmeta_head + c->qmeta_count++) % c->qmeta_cap] =
            (verbs_qmeta_t){(uint32_t)bytes, rcci_ibq_check(tag, bytes)};
    pthread_mutex_unlock(&c->qmeta_lock);
    if (!room)
        return rcci_error(RCC_ERR_NO_MEMORY, "ibverbs: queued sends to %s", c->peer);
    uint32_t k = c->q_tx;
    IBV_TRY(c->ctx->qdev->write_flag(stream, verbs_qflag(&c->qsend, IBV_QF_GPU), k + 1));
    c->q_reserved = 0;
    *ticket = k;
    __atomic_store_n(&c->q_tx, k + 1, __ATOMIC_RELEASE);
    return RCC_SUCCESS;
}

/* Whether count `n` has passed message `ticket` (n > ticket, the ticket
 * within 2^31 below). */
static int verbs_qpassed(uint64_t n, uint32_t ticket)
{
    return (int32_t)((uint32_t)n - ticket) > 0;
}

static rcc_result_t verbs_queue_test(rcci_conn_t *c, int send, uint32_t ticket, size_t bytes,
                                     const rcci_tag_t *tag, int *done)
{
    *done = 0;
    /* A ring made means a GPU was found: no lock per test on this path. */
    if (!verbs_qready(&c->qsend_ready) && !verbs_qready(&c->qrecv_ready))
        IBV_TRY(verbs_qdev(c->ctx));
    IBV_TRY(c->failed == RCC_SUCCESS ? verbs_drive(c) : verbs_failed(c));
    if (send) {
        *done = verbs_qpassed(c->qtx.completed, ticket);
    } else if (verbs_qpassed(c->qrx.arrived, ticket)) {
        *done = 1;
        uint64_t k = c->qrx.arrived - ((uint32_t)c->qrx.arrived - ticket);
        uint32_t check;
        if (!rcci_ibq_rx_check_of(&c->qrx, k, &check))
            return RCC_SUCCESS; /* looked too late: nothing to check */
        rcc_result_t res =
            rcci_ibq_check_match(check, tag, bytes, k, c->peer, c->self, c->ctx->env.describe_sig);
        return res == RCC_SUCCESS ? RCC_SUCCESS : verbs_fail(c, res);
    }
    if (!*done && c->state.state != RCCI_IBC_READY && !verbs_in_setup(c))
        return verbs_fail(c, rcci_ibc_error(&c->state, c->peer));
    return RCC_SUCCESS;
}

static void verbs_queue_abort(rcci_conn_t *c)
{
    if (!c)
        return;
    if (verbs_qready(&c->qrecv_ready))
        __atomic_store_n(verbs_qflag(&c->qrecv, IBV_QF_HOST),
                         __atomic_load_n(&c->q_rx, __ATOMIC_ACQUIRE) + IBV_Q_RUN_THROUGH,
                         __ATOMIC_RELEASE);
    if (verbs_qready(&c->qsend_ready))
        __atomic_store_n(verbs_qflag(&c->qsend, IBV_QF_HOST),
                         __atomic_load_n(&c->q_tx, __ATOMIC_ACQUIRE) + IBV_Q_RUN_THROUGH,
                         __ATOMIC_RELEASE);
}

const rcci_transport_t rcci_transport_ibverbs = {
    .abi = RCCI_TRANSPORT_ABI,
    .size = sizeof(rcci_transport_t),
    .name = "ibverbs",
    /* Two-sided (write is for later); registered memory, device memory
     * included (GPUDirect RDMA), is sent from where it lies; queued
     * messages go GPU to GPU. */
    .caps = RCCI_CAP_ZERO_COPY_SEND | RCCI_CAP_QUEUED_DEVICE,
    .init = verbs_init,
    .fini = verbs_fini,
    .can_connect = verbs_can_connect,
    .listen = verbs_listen,
    .connect = verbs_connect,
    .connect_start = verbs_connect_start,
    .accept = verbs_accept,
    .close_listener = verbs_close_listener,
    .reg_mem = verbs_reg_mem,
    .dereg_mem = verbs_dereg_mem,
    .isend = verbs_isend,
    .irecv = verbs_irecv,
    .test = verbs_test,
    .write = rcci_transport_unsupported_write,
    RCCI_TRANSPORT_NO_INPLACE,
    .queue_recv = verbs_queue_recv,
    .queue_release = verbs_queue_release,
    .queue_send = verbs_queue_send,
    .queue_commit = verbs_queue_commit,
    .queue_test = verbs_queue_test,
    .queue_abort = verbs_queue_abort,
    .queue_bytes = verbs_queue_bytes,
    .wait_fd = verbs_wait_fd,
    .close = verbs_close,
    .probe = verbs_probe,
    .peek = verbs_peek,
    .notify = verbs_notify,
    .announce = verbs_announce,
    .sweep_listener = verbs_sweep_listener,
    .listener_fd = verbs_listener_fd,
};
