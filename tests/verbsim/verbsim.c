/*
 * verbsim (verbsim.h): the ibv_* and rdma_* calls of the verbs transport,
 * carried out by a model of one RoCE adapter per process, so that tests run
 * transports/ibverbs/ibverbs.c itself where no RDMA device exists.
 *
 * The model. Device "verbsim0", port 1, active, Ethernet link layer; every
 * local IP address is on it. A connection is a TCP socket between the two
 * processes' models, which carries the connection manager's messages (REQ,
 * REP, RTU, REJ, DREQ with their private data) and then the RC traffic. One
 * thread per process, "the adapter", sends posted work requests later than
 * they were posted (reading their buffers then, as DMA does), applies what
 * arrives and acknowledges it: a send work request completes when the peer
 * placed its data. RDMA WRITE and SEND, each optionally WITH IMMEDIATE.
 *
 * Enforced as real adapters and libraries do, each a test failure waiting
 * to happen on hardware:
 *   - queue depths count a work request until its completion is polled
 *     (post fails with ENOMEM past max_send_wr/max_recv_wr); sge counts;
 *   - posting a send before the QP is connected fails (EINVAL);
 *   - lkeys and bounds of gather/scatter lists (local protection error),
 *     rkeys, bounds and REMOTE_WRITE access of targets (remote access
 *     error; both QPs go to the error state); lkey and rkey differ;
 *   - a write with immediate or a send needs a posted receive: it waits for
 *     one (receiver not ready, retried forever as rnr_retry_count 7 asks);
 *   - a QP in the error state completes every outstanding and later work
 *     request with WR_FLUSH_ERR; rdma_disconnect puts it there at once;
 *   - a peer that disconnected or died: DISCONNECTED, and writes to it fail
 *     with RETRY_EXC_ERR; connect to no listener: REJECTED;
 *   - a completion channel event only for a completion added after
 *     ibv_req_notify_cq armed the CQ;
 *   - misuse counted as violations (verbsim_violations) and printed: CQ
 *     overrun, destroying a CQ/PD/channel still in use, an id with its QP
 *     or unacknowledged events, more private data than rdma_cm carries
 *     (56 bytes on connect, 196 on accept, 148 on reject) fails with EINVAL.
 * Not modelled: timing and loss, UD, SRQ, atomics, RDMA READ, inline data,
 * multiple devices, ports or paths.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbsim.h"

/* Provided by the model in place of the macros' targets. */
#undef ibv_query_port
#undef ibv_reg_mr

#define VS_MAX_SGE 4
#define VS_PRIV_MAX 196
#define VS_PRIV_CONNECT 56
#define VS_PRIV_REJECT 148

/* ---- the wire between two models ---- */

enum { M_REQ = 1, M_REP, M_RTU, M_REJ, M_DREQ, M_WRITE, M_SEND, M_ACK, M_NAK };
#define VS_F_IMM 1u

typedef struct {
    uint32_t type;
    uint32_t len;   /* bytes after the header */
    uint32_t imm;   /* as posted (network order) */
    uint32_t flags; /* VS_F_IMM */
    uint64_t addr;  /* M_WRITE: the target */
    uint32_t rkey;
    uint32_t arg; /* M_NAK: the status for the sender's work request */
} vs_hdr_t;

/* ---- objects ---- */

typedef struct vs_cq vs_cq_t;
typedef struct vs_qp vs_qp_t;
typedef struct vs_id vs_id_t;
typedef struct vs_conn vs_conn_t;

typedef struct vs_event {
    struct rdma_cm_event ev; /* first: what the caller gets and acks */
    struct vs_event *next;
    uint8_t priv[VS_PRIV_MAX];
} vs_event_t;

typedef struct {
    struct rdma_event_channel ch; /* first */
    vs_event_t *head, *tail;
    int nids;
} vs_cmch_t;

typedef struct {
    struct ibv_comp_channel ch; /* first */
    vs_cq_t **q;                /* CQs with an event, oldest first */
    int n, cap;
    int ncqs;
} vs_compch_t;

typedef struct {
    struct ibv_wc wc;
    vs_qp_t *qp; /* whose queue slot the poll frees; NULL once destroyed */
    int is_send;
} vs_cqe_t;

struct vs_cq {
    struct ibv_cq cq; /* first */
    vs_cqe_t *ring;
    int cap, head, n;
    int armed;
    int nqps;
    int unacked; /* events taken by ibv_get_cq_event, not acknowledged */
};

typedef struct {
    struct ibv_pd pd; /* first */
    int users;        /* MRs and QPs */
} vs_pd_t;

typedef struct vs_mr {
    struct ibv_mr mr; /* first */
    int access;
    struct vs_mr *next;
} vs_mr_t;

typedef struct {
    uint64_t wr_id;
    enum ibv_wr_opcode opcode;
    int signaled;
    uint32_t imm;
    uint64_t raddr;
    uint32_t rkey;
    int nsge;
    struct ibv_sge sge[VS_MAX_SGE];
} vs_swr_t;

typedef struct {
    uint64_t wr_id;
    int nsge;
    struct ibv_sge sge[VS_MAX_SGE];
} vs_rwr_t;

struct vs_qp {
    struct ibv_qp qp; /* first */
    vs_id_t *id;
    struct ibv_qp_cap cap;
    int sig_all;
    vs_swr_t *sq; /* posted, not completed: [sq_head, +sq_n); the first sq_sent went out */
    uint32_t sq_head, sq_n, sq_sent;
    uint32_t sq_slots; /* sq_n + completions not yet polled */
    vs_rwr_t *rq;
    uint32_t rq_head, rq_n, rq_slots;
    vs_qp_t *next;
};

enum {
    C_CONNECTING, /* active: TCP connect in progress */
    C_REQ_SENT,
    C_REP_RECEIVED, /* active: ESTABLISHED queued; the RTU goes when the caller takes it */
    C_AWAIT_REQ,    /* passive: accepted, REQ not yet here */
    C_REQ_RECEIVED, /* passive: CONNECT_REQUEST delivered */
    C_REP_SENT,
    C_ESTABLISHED,
    C_DISCONNECTED, /* either side's DREQ */
    C_DEAD          /* rejected, refused, lost */
};

struct vs_conn {
    int fd; /* -1 once closed */
    int state;
    vs_id_t *id;       /* NULL once the id is destroyed */
    vs_id_t *listener; /* passive, before REQ */
    int closing;       /* close the socket once the output went */
    int eof;           /* the peer's end closed: lost after the input is handled */
    uint8_t priv[VS_PRIV_MAX];
    uint8_t priv_len;
    char *out;
    size_t out_len, out_off, out_cap;
    char *in;
    size_t in_len, in_cap;
    vs_conn_t *next;
};

struct vs_id {
    struct rdma_cm_id id; /* first */
    vs_conn_t *conn;
    int listen_fd;
    int unacked; /* delivered events not acknowledged */
    vs_id_t *next;
};

static struct {
    pthread_mutex_t lock;
    pid_t pid;
    int epfd, kick;
    struct ibv_device dev;
    struct ibv_context *ctx;
    vs_mr_t *mrs;
    vs_qp_t *qps;
    vs_conn_t *conns;
    vs_id_t *ids;
    uint32_t next_key, next_qpn;
    int violations;
} vs = {.lock = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .kick = -1};

static void vs_violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "verbsim: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    vs.violations++;
}

int verbsim_violations(void)
{
    pthread_mutex_lock(&vs.lock);
    int n = vs.violations;
    pthread_mutex_unlock(&vs.lock);
    return n;
}

static void *vs_adapter(void *arg);

/* A forked child inherits the parent's objects but not its adapter
 * thread: it starts afresh (the parent's sockets closed here, so that the
 * parent's peers see only the parent). */
static void vs_atfork_prepare(void) { pthread_mutex_lock(&vs.lock); }
static void vs_atfork_parent(void) { pthread_mutex_unlock(&vs.lock); }
static void vs_atfork_child(void)
{
    for (vs_conn_t *c = vs.conns; c; c = c->next)
        if (c->fd >= 0)
            close(c->fd);
    for (vs_id_t *i = vs.ids; i; i = i->next)
        if (i->listen_fd >= 0)
            close(i->listen_fd);
    if (vs.epfd >= 0)
        close(vs.epfd), close(vs.kick);
    vs.epfd = vs.kick = -1;
    vs.conns = NULL, vs.ids = NULL, vs.qps = NULL, vs.mrs = NULL, vs.ctx = NULL;
    vs.pid = 0;
    pthread_mutex_init(&vs.lock, NULL);
}

__attribute__((constructor)) static void vs_register_atfork(void)
{
    pthread_atfork(vs_atfork_prepare, vs_atfork_parent, vs_atfork_child);
}

static void vs_lock(void)
{
    pthread_mutex_lock(&vs.lock);
    if (vs.pid == getpid())
        return;
    vs.pid = getpid();
    vs.epfd = epoll_create1(EPOLL_CLOEXEC);
    vs.kick = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(vs.epfd, EPOLL_CTL_ADD, vs.kick, &e);
    pthread_t t;
    if (pthread_create(&t, NULL, vs_adapter, NULL) == 0)
        pthread_detach(t);
    else
        vs_violation("cannot start the adapter thread");
}

static void vs_unlock(void) { pthread_mutex_unlock(&vs.lock); }

static void vs_kick(void)
{
    uint64_t one = 1;
    ssize_t w = write(vs.kick, &one, sizeof one);
    (void)w;
}

/* ---- event queues: an eventfd readable while the queue is not empty ---- */

static void fd_signal(int fd)
{
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof one);
    (void)w;
}

static void fd_clear(int fd)
{
    uint64_t v;
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
    fcntl(fd, F_SETFL, fl);
}

/* Waits, unlocked, until `fd` is readable; 0 when the caller made it
 * non-blocking (then the call fails with EAGAIN). */
static int vs_wait_readable(int fd)
{
    if (fcntl(fd, F_GETFL) & O_NONBLOCK)
        return 0;
    vs_unlock();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    poll(&p, 1, 100);
    vs_lock();
    return 1;
}

/* Appends `e` to the channel's queue; the fd turns readable with the first. */
static void ch_push(vs_cmch_t *ch, vs_event_t *e)
{
    e->next = NULL;
    if (!ch->head)
        fd_signal(ch->ch.fd);
    if (ch->tail)
        ch->tail->next = e;
    else
        ch->head = e;
    ch->tail = e;
}

/* Takes the undelivered events of `id` out of the channel's queue, in
 * order; the fd turns unreadable when none is left. */
static vs_event_t *ch_take(vs_cmch_t *ch, const struct rdma_cm_id *id)
{
    vs_event_t *taken = NULL, **tail = &taken;
    int had = ch->head != NULL;
    vs_event_t **p = &ch->head;
    ch->tail = NULL;
    while (*p) {
        if ((*p)->ev.id == id) {
            vs_event_t *e = *p;
            *p = e->next;
            e->next = NULL;
            *tail = e;
            tail = &e->next;
        } else {
            ch->tail = *p;
            p = &(*p)->next;
        }
    }
    if (had && !ch->head)
        fd_clear(ch->ch.fd);
    return taken;
}

static void cm_event(vs_id_t *id, enum rdma_cm_event_type type, int status, vs_id_t *listen_id,
                     const void *priv, size_t priv_len)
{
    vs_cmch_t *ch = (vs_cmch_t *)id->id.channel;
    vs_event_t *e = calloc(1, sizeof *e);
    if (!e) {
        vs_violation("out of memory for an event");
        return;
    }
    e->ev.id = &id->id;
    e->ev.listen_id = listen_id ? &listen_id->id : NULL;
    e->ev.event = type;
    e->ev.status = status;
    if (priv_len > VS_PRIV_MAX)
        priv_len = VS_PRIV_MAX;
    if (priv_len) /* priv may be NULL then */
        memcpy(e->priv, priv, priv_len);
    e->ev.param.conn.private_data = e->priv;
    e->ev.param.conn.private_data_len = (uint8_t)priv_len;
    ch_push(ch, e);
}

/* ---- completions ---- */

static void cq_push(vs_cq_t *cq, vs_qp_t *qp, int is_send, struct ibv_wc wc)
{
    if (cq->n == cq->cap) {
        vs_violation("CQ overrun: a completion found all %d entries of its CQ in use", cq->cap);
        return;
    }
    wc.qp_num = qp->qp.qp_num;
    cq->ring[(cq->head + cq->n++) % cq->cap] = (vs_cqe_t){wc, qp, is_send};
    if (cq->armed && cq->cq.channel) {
        vs_compch_t *ch = (vs_compch_t *)cq->cq.channel;
        cq->armed = 0;
        if (ch->n == ch->cap) {
            int cap = ch->cap ? 2 * ch->cap : 8;
            vs_cq_t **q = realloc(ch->q, sizeof *q * (size_t)cap);
            if (!q) {
                vs_violation("out of memory for a completion event");
                return;
            }
            ch->q = q, ch->cap = cap;
        }
        if (ch->n == 0)
            fd_signal(ch->ch.fd);
        ch->q[ch->n++] = cq;
    }
}

static vs_cq_t *qp_send_cq(vs_qp_t *q) { return (vs_cq_t *)q->qp.send_cq; }
static vs_cq_t *qp_recv_cq(vs_qp_t *q) { return (vs_cq_t *)q->qp.recv_cq; }

static void sq_complete_head(vs_qp_t *q, enum ibv_wc_status status)
{
    vs_swr_t *w = &q->sq[q->sq_head];
    int is_write = w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (status != IBV_WC_SUCCESS || w->signaled || q->sig_all)
        cq_push(qp_send_cq(q), q, 1,
                (struct ibv_wc){.wr_id = w->wr_id,
                                .status = status,
                                .opcode = is_write ? IBV_WC_RDMA_WRITE : IBV_WC_SEND});
    else
        q->sq_slots--; /* no completion to poll: the slot is free now */
    q->sq_head = (q->sq_head + 1) % q->cap.max_send_wr;
    q->sq_n--;
    if (q->sq_sent)
        q->sq_sent--;
}

/* The QP's error state: everything outstanding completes, the first send
 * with `first` (when it is not a flush), then the rest flushed. */
static void qp_error(vs_qp_t *q, enum ibv_wc_status first)
{
    if (q->qp.state != IBV_QPS_ERR && q->sq_n)
        sq_complete_head(q, first);
    q->qp.state = IBV_QPS_ERR;
    while (q->sq_n)
        sq_complete_head(q, IBV_WC_WR_FLUSH_ERR);
    while (q->rq_n) {
        vs_rwr_t *r = &q->rq[q->rq_head];
        cq_push(qp_recv_cq(q), q, 0,
                (struct ibv_wc){
                    .wr_id = r->wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = IBV_WC_RECV});
        q->rq_head = (q->rq_head + 1) % q->cap.max_recv_wr;
        q->rq_n--;
    }
}

static vs_qp_t *conn_qp(vs_conn_t *c) { return c->id ? (vs_qp_t *)c->id->id.qp : NULL; }

/* ---- memory ---- */

static vs_mr_t *mr_find(uint32_t key, int remote)
{
    for (vs_mr_t *m = vs.mrs; m; m = m->next)
        if ((remote ? m->mr.rkey : m->mr.lkey) == key)
            return m;
    return NULL;
}

static int mr_covers(const vs_mr_t *m, uint64_t addr, uint64_t len)
{
    uint64_t start = (uint64_t)(uintptr_t)m->mr.addr;
    return addr >= start && len <= m->mr.length && addr - start <= m->mr.length - len;
}

/* An sge list against the local registrations of `pd`; its byte total. */
static int sges_valid(struct ibv_pd *pd, const struct ibv_sge *s, int n, int need_write,
                      uint64_t *total)
{
    *total = 0;
    for (int i = 0; i < n; i++) {
        vs_mr_t *m = mr_find(s[i].lkey, 0);
        if (!m || m->mr.pd != pd || !mr_covers(m, s[i].addr, s[i].length) ||
            (need_write && !(m->access & IBV_ACCESS_LOCAL_WRITE)))
            return 0;
        *total += s[i].length;
    }
    return 1;
}

/* Whether [addr, addr + len) is mapped in this process (ibv_reg_mr pins it). */
static int range_mapped(const void *addr, size_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(page - 1);
    uintptr_t end = ((uintptr_t)addr + len + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    size_t pages = (end - start) / (size_t)page;
    unsigned char *vec = malloc(pages ? pages : 1);
    int ok = vec && mincore((void *)start, end - start, vec) == 0;
    free(vec);
    return ok;
}

static struct ibv_mr *mr_new(struct ibv_pd *pd, void *addr, size_t len, int access, int check_map)
{
    if (!pd || len == 0 ||
        ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
        errno = EINVAL; /* remote write without local write: the verbs rule */
        return NULL;
    }
    if (check_map && !range_mapped(addr, len)) {
        errno = EFAULT;
        return NULL;
    }
    vs_mr_t *m = calloc(1, sizeof *m);
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    vs_lock();
    uint32_t key = ++vs.next_key;
    m->mr = (struct ibv_mr){.context = pd->context,
                            .pd = pd,
                            .addr = addr,
                            .length = len,
                            .handle = key,
                            .lkey = key << 8 | 0x11,
                            .rkey = key << 8 | 0x22};
    m->access = access;
    m->next = vs.mrs;
    vs.mrs = m;
    ((vs_pd_t *)pd)->users++;
    vs_unlock();
    return &m->mr;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return mr_new(pd, addr, length, access, 1);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                unsigned int access)
{
    if (iova != (uint64_t)(uintptr_t)addr) {
        errno = EINVAL; /* the model addresses by virtual address only */
        return NULL;
    }
    return mr_new(pd, addr, length, (int)access, 1);
}

/* The stand-in GPU's device memory is host memory at `iova` (a real
 * dma-buf's iova is the device address the exporter gave): the model checks
 * the descriptor and reaches the bytes there. */
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
                                 int fd, int access)
{
    (void)offset;
    if (fcntl(fd, F_GETFD) < 0) {
        errno = EBADF;
        return NULL;
    }
    return mr_new(pd, (void *)(uintptr_t)iova, length, access, 1);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
    vs_lock();
    for (vs_mr_t **p = &vs.mrs; *p; p = &(*p)->next)
        if (&(*p)->mr == mr) {
            vs_mr_t *m = *p;
            *p = m->next;
            ((vs_pd_t *)m->mr.pd)->users--;
            free(m);
            vs_unlock();
            return 0;
        }
    vs_violation("ibv_dereg_mr of an unknown registration");
    vs_unlock();
    return EINVAL;
}

/* ---- device, context, PD ---- */

static int vs_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc);
static int vs_req_notify_cq(struct ibv_cq *ibcq, int solicited_only);
static int vs_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int vs_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* Under the lock: the one context, made at first use. */
static struct ibv_context *vs_context(void)
{
    if (vs.ctx)
        return vs.ctx;
    snprintf(vs.dev.name, sizeof vs.dev.name, "verbsim0");
    snprintf(vs.dev.dev_name, sizeof vs.dev.dev_name, "uverbs-sim0");
    vs.dev.node_type = IBV_NODE_CA;
    vs.dev.transport_type = IBV_TRANSPORT_IB;
    struct ibv_context *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->device = &vs.dev;
    c->ops.poll_cq = vs_poll_cq;
    c->ops.req_notify_cq = vs_req_notify_cq;
    c->ops.post_send = vs_post_send;
    c->ops.post_recv = vs_post_recv;
    c->cmd_fd = c->async_fd = -1;
    c->num_comp_vectors = 1;
    pthread_mutex_init(&c->mutex, NULL);
    vs.ctx = c;
    return c;
}

struct ibv_device **ibv_get_device_list(int *num)
{
    struct ibv_device **list = calloc(2, sizeof *list);
    if (!list) {
        errno = ENOMEM;
        return NULL;
    }
    vs_lock();
    vs_context();
    list[0] = &vs.dev;
    vs_unlock();
    if (num)
        *num = 1;
    return list;
}

void ibv_free_device_list(struct ibv_device **list) { free(list); }

const char *ibv_get_device_name(struct ibv_device *device) { return device->name; }

int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                   struct _compat_ibv_port_attr *port_attr)
{
    (void)context;
    if (port_num != 1)
        return EINVAL;
    /* Only fields of the old (compat) layout, which this entry point fills. */
    struct ibv_port_attr *pa = (struct ibv_port_attr *)port_attr;
    pa->state = IBV_PORT_ACTIVE;
    pa->max_mtu = pa->active_mtu = IBV_MTU_4096;
    pa->gid_tbl_len = 16;
    pa->max_msg_sz = 1u << 31;
    pa->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    vs_pd_t *p = calloc(1, sizeof *p);
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    p->pd.context = context;
    return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
    vs_lock();
    vs_pd_t *p = (vs_pd_t *)pd;
    if (p->users) {
        vs_violation("ibv_dealloc_pd with %d registrations or QPs still on it", p->users);
        vs_unlock();
        return EBUSY;
    }
    vs_unlock();
    free(p);
    return 0;
}

/* ---- completion channels and CQs ---- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    vs_compch_t *ch = calloc(1, sizeof *ch);
    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    ch->ch.context = context;
    ch->ch.fd = eventfd(0, EFD_CLOEXEC);
    if (ch->ch.fd < 0) {
        free(ch);
        return NULL;
    }
    return &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    vs_compch_t *ch = (vs_compch_t *)channel;
    vs_lock();
    if (ch->ncqs) {
        vs_violation("ibv_destroy_comp_channel with %d CQs still on it", ch->ncqs);
        vs_unlock();
        return EBUSY;
    }
    vs_unlock();
    close(ch->ch.fd);
    free(ch->q);
    free(ch);
    return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector)
{
    (void)comp_vector;
    if (cqe <= 0) {
        errno = EINVAL;
        return NULL;
    }
    vs_cq_t *cq = calloc(1, sizeof *cq);
    if (cq)
        cq->ring = calloc((size_t)cqe, sizeof *cq->ring);
    if (!cq || !cq->ring) {
        free(cq);
        errno = ENOMEM;
        return NULL;
    }
    cq->cap = cqe; /* exactly what was asked: a test finds an undersized CQ */
    cq->cq = (struct ibv_cq){
        .context = context, .channel = channel, .cq_context = cq_context, .cqe = cqe};
    vs_lock();
    if (channel)
        ((vs_compch_t *)channel)->ncqs++;
    vs_unlock();
    return &cq->cq;
}

int ibv_destroy_cq(struct ibv_cq *ibcq)
{
    vs_cq_t *cq = (vs_cq_t *)ibcq;
    vs_lock();
    if (cq->nqps) {
        vs_violation("ibv_destroy_cq with %d QPs still on it", cq->nqps);
        vs_unlock();
        return EBUSY;
    }
    if (cq->unacked) /* libibverbs would wait for them forever */
        vs_violation("ibv_destroy_cq with %d completion events not acknowledged", cq->unacked);
    if (ibcq->channel) {
        vs_compch_t *ch = (vs_compch_t *)ibcq->channel;
        int k = 0;
        for (int i = 0; i < ch->n; i++)
            if (ch->q[i] != cq)
                ch->q[k++] = ch->q[i];
        if (ch->n && !k)
            fd_clear(ch->ch.fd);
        ch->n = k;
        ch->ncqs--;
    }
    vs_unlock();
    free(cq->ring);
    free(cq);
    return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
    vs_compch_t *ch = (vs_compch_t *)channel;
    vs_lock();
    while (ch->n == 0) {
        if (!vs_wait_readable(ch->ch.fd)) {
            vs_unlock();
            errno = EAGAIN;
            return -1;
        }
    }
    vs_cq_t *c = ch->q[0];
    memmove(ch->q, ch->q + 1, sizeof *ch->q * (size_t)--ch->n);
    if (ch->n == 0)
        fd_clear(ch->ch.fd);
    c->unacked++;
    *cq = &c->cq;
    *cq_context = c->cq.cq_context;
    vs_unlock();
    return 0;
}

void ibv_ack_cq_events(struct ibv_cq *ibcq, unsigned int nevents)
{
    vs_cq_t *cq = (vs_cq_t *)ibcq;
    vs_lock();
    if ((unsigned)cq->unacked < nevents)
        vs_violation("ibv_ack_cq_events(%u) with %d events taken", nevents, cq->unacked);
    else
        cq->unacked -= (int)nevents;
    vs_unlock();
}

static int vs_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
    (void)solicited_only;
    vs_lock();
    ((vs_cq_t *)ibcq)->armed = 1;
    vs_unlock();
    return 0;
}

static int vs_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc)
{
    vs_cq_t *cq = (vs_cq_t *)ibcq;
    vs_lock();
    int n = 0;
    while (n < num && cq->n) {
        vs_cqe_t *e = &cq->ring[cq->head];
        wc[n++] = e->wc;
        if (e->qp && e->is_send)
            e->qp->sq_slots--;
        else if (e->qp)
            e->qp->rq_slots--;
        cq->head = (cq->head + 1) % cq->cap;
        cq->n--;
    }
    vs_unlock();
    return n;
}

/* ---- posting ---- */

static int vs_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    vs_qp_t *q = (vs_qp_t *)ibqp;
    int err = 0;
    vs_lock();
    for (; wr; wr = wr->next) {
        int op = wr->opcode;
        if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR)
            err = EINVAL; /* not connected yet */
        else if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge)
            err = EINVAL;
        else if (op != IBV_WR_RDMA_WRITE && op != IBV_WR_RDMA_WRITE_WITH_IMM && op != IBV_WR_SEND &&
                 op != IBV_WR_SEND_WITH_IMM)
            err = EINVAL; /* not modelled */
        else if (q->sq_slots >= q->cap.max_send_wr)
            err = ENOMEM;
        if (err) {
            *bad = wr;
            break;
        }
        vs_swr_t *w = &q->sq[(q->sq_head + q->sq_n) % q->cap.max_send_wr];
        *w = (vs_swr_t){.wr_id = wr->wr_id,
                        .opcode = wr->opcode,
                        .signaled = !!(wr->send_flags & IBV_SEND_SIGNALED),
                        .imm = wr->imm_data,
                        .raddr = wr->wr.rdma.remote_addr,
                        .rkey = wr->wr.rdma.rkey,
                        .nsge = wr->num_sge};
        if (wr->num_sge) /* sg_list may be NULL then */
            memcpy(w->sge, wr->sg_list, sizeof *w->sge * (size_t)wr->num_sge);
        q->sq_n++;
        q->sq_slots++;
        if (q->qp.state == IBV_QPS_ERR)
            qp_error(q, IBV_WC_WR_FLUSH_ERR);
    }
    vs_kick();
    vs_unlock();
    return err;
}

static int vs_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    vs_qp_t *q = (vs_qp_t *)ibqp;
    int err = 0;
    vs_lock();
    for (; wr; wr = wr->next) {
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_recv_sge)
            err = EINVAL;
        else if (q->rq_slots >= q->cap.max_recv_wr)
            err = ENOMEM;
        if (err) {
            *bad = wr;
            break;
        }
        vs_rwr_t *r = &q->rq[(q->rq_head + q->rq_n) % q->cap.max_recv_wr];
        *r = (vs_rwr_t){.wr_id = wr->wr_id, .nsge = wr->num_sge};
        if (wr->num_sge)
            memcpy(r->sge, wr->sg_list, sizeof *r->sge * (size_t)wr->num_sge);
        q->rq_n++;
        q->rq_slots++;
        if (q->qp.state == IBV_QPS_ERR)
            qp_error(q, IBV_WC_WR_FLUSH_ERR);
    }
    vs_kick(); /* a message may wait for this receive */
    vs_unlock();
    return err;
}

/* ---- the wire ---- */

static int out_append(vs_conn_t *c, const void *p, size_t n)
{
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 65536;
        while (cap < c->out_len + n)
            cap *= 2;
        char *o = realloc(c->out, cap);
        if (!o) {
            vs_violation("out of memory for %zu bytes of output", c->out_len + n);
            return -1;
        }
        c->out = o, c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    return 0;
}

static void send_msg(vs_conn_t *c, uint32_t type, uint32_t arg, const void *payload, uint32_t len)
{
    if (c->fd < 0)
        return;
    vs_hdr_t h = {.type = type, .len = len, .arg = arg};
    if (out_append(c, &h, sizeof h) == 0 && len)
        out_append(c, payload, len);
}

static void conn_close_fd(vs_conn_t *c)
{
    if (c->fd < 0)
        return;
    epoll_ctl(vs.epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->out_len = c->out_off = 0;
}

static vs_conn_t *conn_new(int fd, int state)
{
    vs_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->state = state;
    struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c};
    epoll_ctl(vs.epfd, EPOLL_CTL_ADD, fd, &e);
    c->next = vs.conns;
    vs.conns = c;
    return c;
}

/* The socket went (EOF, error): what the peer's going means in each state. */
static void conn_lost(vs_conn_t *c)
{
    conn_close_fd(c);
    vs_qp_t *q = conn_qp(c);
    int was = c->state;
    c->state = C_DEAD;
    if (!c->id)
        return;
    switch (was) {
    case C_CONNECTING: cm_event(c->id, RDMA_CM_EVENT_REJECTED, 8, NULL, NULL, 0); break;
    case C_REQ_SENT: cm_event(c->id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, NULL, 0); break;
    case C_REP_RECEIVED: cm_event(c->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, 0); break;
    case C_REQ_RECEIVED:
    case C_REP_SENT: cm_event(c->id, RDMA_CM_EVENT_CONNECT_ERROR, -ETIMEDOUT, NULL, NULL, 0); break;
    case C_ESTABLISHED: cm_event(c->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, 0); break;
    default: break;
    }
    if (q && q->sq_n && q->qp.state != IBV_QPS_ERR)
        qp_error(q, IBV_WC_RETRY_EXC_ERR);
}

/* Sends the QP's posted work requests not yet sent. */
static void qp_transmit(vs_conn_t *c, vs_qp_t *q)
{
    while (q->sq_sent < q->sq_n && q->qp.state == IBV_QPS_RTS) {
        if (c->fd < 0 || c->state == C_DEAD) {
            qp_error(q, IBV_WC_RETRY_EXC_ERR); /* nobody answers */
            return;
        }
        vs_swr_t *w = &q->sq[(q->sq_head + q->sq_sent) % q->cap.max_send_wr];
        uint64_t len;
        if (!sges_valid(q->qp.pd, w->sge, w->nsge, 0, &len)) {
            /* Only the failing request: earlier ones are on the wire. */
            if (q->sq_sent == 0)
                qp_error(q, IBV_WC_LOC_PROT_ERR);
            else
                q->qp.state = IBV_QPS_SQE; /* completes as the ACKs come, then fails */
            return;
        }
        int write = w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
        int imm = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || w->opcode == IBV_WR_SEND_WITH_IMM;
        vs_hdr_t h = {.type = write ? M_WRITE : M_SEND,
                      .len = (uint32_t)len,
                      .imm = w->imm,
                      .flags = imm ? VS_F_IMM : 0,
                      .addr = w->raddr,
                      .rkey = w->rkey};
        if (out_append(c, &h, sizeof h))
            return;
        for (int i = 0; i < w->nsge; i++)
            out_append(c, (const void *)(uintptr_t)w->sge[i].addr, w->sge[i].length);
        q->sq_sent++;
    }
}

/* Applies one arrived data message to the QP; 0 when it must wait for a
 * receive to be posted (receiver not ready). */
static int deliver_data(vs_conn_t *c, const vs_hdr_t *h, const char *payload)
{
    vs_qp_t *q = conn_qp(c);
    if (!q || q->qp.state == IBV_QPS_ERR || q->qp.state == IBV_QPS_RESET) {
        send_msg(c, M_NAK, IBV_WC_RETRY_EXC_ERR, NULL, 0); /* a dead QP acks nothing */
        return 1;
    }
    int need_recv = h->type == M_SEND || (h->flags & VS_F_IMM);
    if (h->type == M_WRITE) {
        vs_mr_t *m = mr_find(h->rkey, 1);
        if (!m || m->mr.pd != q->qp.pd || !(m->access & IBV_ACCESS_REMOTE_WRITE) ||
            !mr_covers(m, h->addr, h->len)) {
            send_msg(c, M_NAK, IBV_WC_REM_ACCESS_ERR, NULL, 0);
            qp_error(q, IBV_WC_WR_FLUSH_ERR);
            return 1;
        }
        if (need_recv && q->rq_n == 0)
            return 0;
        memcpy((void *)(uintptr_t)h->addr, payload, h->len);
    } else if (q->rq_n == 0) {
        return 0;
    }
    struct ibv_wc wc = {.status = IBV_WC_SUCCESS,
                        .byte_len = h->len,
                        .opcode = h->type == M_WRITE ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
                        .imm_data = h->imm,
                        .wc_flags = (h->flags & VS_F_IMM) ? IBV_WC_WITH_IMM : 0};
    if (need_recv) {
        vs_rwr_t *r = &q->rq[q->rq_head];
        wc.wr_id = r->wr_id;
        if (h->type == M_WRITE)
            wc.byte_len = h->len; /* placed at the target, not in the receive's buffers */
        else {
            uint64_t room;
            if (!sges_valid(q->qp.pd, r->sge, r->nsge, 1, &room) || room < h->len) {
                wc.status = room < h->len ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR;
                q->rq_head = (q->rq_head + 1) % q->cap.max_recv_wr;
                q->rq_n--;
                cq_push(qp_recv_cq(q), q, 0, wc);
                send_msg(c, M_NAK, IBV_WC_REM_INV_REQ_ERR, NULL, 0);
                qp_error(q, IBV_WC_WR_FLUSH_ERR);
                return 1;
            }
            const char *p = payload;
            for (int i = 0; i < r->nsge && p < payload + h->len; i++) {
                size_t n = r->sge[i].length;
                if (n > (size_t)(payload + h->len - p))
                    n = (size_t)(payload + h->len - p);
                memcpy((void *)(uintptr_t)r->sge[i].addr, p, n);
                p += n;
            }
        }
        q->rq_head = (q->rq_head + 1) % q->cap.max_recv_wr;
        q->rq_n--;
        cq_push(qp_recv_cq(q), q, 0, wc);
    }
    send_msg(c, M_ACK, 0, NULL, 0);
    return 1;
}

static vs_id_t *id_new(struct rdma_event_channel *ch, void *context, enum rdma_port_space ps);

/* One complete message; 0 when it must wait (the rest wait behind it). */
static int handle_msg(vs_conn_t *c, const vs_hdr_t *h, const char *payload)
{
    vs_qp_t *q = conn_qp(c);
    switch (h->type) {
    case M_REQ:
        if (c->state != C_AWAIT_REQ)
            break;
        if (!c->listener || h->len > VS_PRIV_CONNECT) {
            send_msg(c, M_REJ, 0, NULL, 0);
            c->closing = 1;
            c->state = C_DEAD;
            return 1;
        }
        vs_id_t *l = c->listener;
        vs_id_t *id = id_new(l->id.channel, l->id.context, l->id.ps);
        if (!id)
            return 1;
        ((vs_cmch_t *)l->id.channel)->nids++;
        id->id.verbs = vs.ctx;
        id->id.port_num = 1;
        id->id.route.addr.src_storage = l->id.route.addr.src_storage;
        socklen_t sl = sizeof id->id.route.addr.dst_storage;
        getpeername(c->fd, &id->id.route.addr.dst_addr, &sl);
        id->conn = c;
        c->id = id;
        c->listener = NULL;
        c->state = C_REQ_RECEIVED;
        cm_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, l, payload, h->len);
        return 1;
    case M_REP:
        if (c->state != C_REQ_SENT || !c->id)
            break;
        /* librdmacm answers the REP (QP to RTR and RTS, then the RTU) only
         * when the application takes this event: rdma_get_cm_event. A rank
         * that does not poll its channel keeps its peer waiting. */
        c->state = C_REP_RECEIVED;
        cm_event(c->id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, payload, h->len);
        return 1;
    case M_RTU:
        if (c->state != C_REP_SENT || !c->id)
            break;
        c->state = C_ESTABLISHED;
        cm_event(c->id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, NULL, 0);
        return 1;
    case M_REJ:
        if (c->state == C_REQ_SENT && c->id)
            cm_event(c->id, RDMA_CM_EVENT_REJECTED, 28, NULL, payload, h->len);
        c->state = C_DEAD;
        c->closing = 1;
        return 1;
    case M_DREQ:
        if (c->state == C_ESTABLISHED && c->id) {
            c->state = C_DISCONNECTED;
            cm_event(c->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, 0);
        }
        return 1;
    case M_WRITE:
    case M_SEND: return deliver_data(c, h, payload);
    case M_ACK:
        if (q && q->sq_sent && q->qp.state != IBV_QPS_ERR) {
            sq_complete_head(q, IBV_WC_SUCCESS);
            if (q->qp.state == IBV_QPS_SQE && q->sq_sent == 0)
                qp_error(q, IBV_WC_LOC_PROT_ERR); /* the invalid request is next */
        }
        return 1;
    case M_NAK:
        if (q && q->qp.state != IBV_QPS_ERR)
            qp_error(q, (enum ibv_wc_status)h->arg);
        return 1;
    }
    return 1; /* out of place for this state: dropped */
}

static void conn_read(vs_conn_t *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < 65536) {
            size_t cap = c->in_cap ? 2 * c->in_cap : 262144;
            char *in = realloc(c->in, cap);
            if (!in) {
                vs_violation("out of memory for input");
                return;
            }
            c->in = in, c->in_cap = cap;
        }
        ssize_t n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
        if (n > 0) {
            c->in_len += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        c->eof = 1; /* EOF or error: lost once what came before it is handled */
        return;
    }
}

static void conn_process(vs_conn_t *c)
{
    size_t off = 0;
    while (c->in_len - off >= sizeof(vs_hdr_t)) {
        vs_hdr_t h;
        memcpy(&h, c->in + off, sizeof h);
        if (c->in_len - off - sizeof h < h.len)
            break;
        if (!handle_msg(c, &h, c->in + off + sizeof h))
            break;
        off += sizeof h + h.len;
    }
    if (off) { /* c->in may be NULL when nothing was read */
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
}

static void conn_flush(vs_conn_t *c)
{
    while (c->fd >= 0 && c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            return;
        } else {
            conn_lost(c);
            return;
        }
    }
    c->out_off = c->out_len = 0;
    if (c->closing && c->fd >= 0) {
        conn_close_fd(c);
        if (c->state != C_DEAD)
            c->state = C_DEAD;
    }
}

/* An active connect in progress: done, refused, or not yet. */
static void conn_check_connect(vs_conn_t *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLOUT};
    if (poll(&p, 1, 0) <= 0)
        return;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
        conn_lost(c); /* refused: REJECTED, as an IB CM answers a REQ for no listener */
        return;
    }
    c->state = C_REQ_SENT;
    send_msg(c, M_REQ, 0, c->priv, c->priv_len);
}

static void accept_all(vs_id_t *l)
{
    for (;;) {
        int fd = accept4(l->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
        vs_conn_t *c = conn_new(fd, C_AWAIT_REQ);
        if (!c) {
            close(fd);
            return;
        }
        c->listener = l;
    }
}

/* Moves everything that can move: the adapter's whole work, in one pass. */
static void vs_pump(void)
{
    for (vs_id_t *i = vs.ids; i; i = i->next)
        if (i->listen_fd >= 0)
            accept_all(i);
    for (vs_conn_t *c = vs.conns; c; c = c->next) {
        if (c->fd >= 0 && c->state == C_CONNECTING)
            conn_check_connect(c);
        if (c->fd >= 0 && !c->eof)
            conn_read(c);
        conn_process(c);
        if (c->eof && c->fd >= 0)
            conn_lost(c);
        vs_qp_t *q = conn_qp(c);
        if (q && (c->state == C_ESTABLISHED || c->state == C_DISCONNECTED || c->state == C_DEAD))
            qp_transmit(c, q);
        conn_flush(c);
    }
    /* Connections with neither a socket nor an id are done. */
    for (vs_conn_t **p = &vs.conns; *p;) {
        vs_conn_t *c = *p;
        if (c->fd < 0 && !c->id) {
            *p = c->next;
            free(c->out);
            free(c->in);
            free(c);
        } else {
            p = &c->next;
        }
    }
}

static void *vs_adapter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&vs.lock);
    pid_t me = vs.pid;
    int epfd = vs.epfd, kick = vs.kick;
    pthread_mutex_unlock(&vs.lock);
    for (;;) {
        struct epoll_event ev[32];
        epoll_wait(epfd, ev, 32, 20);
        uint64_t v;
        ssize_t r = read(kick, &v, sizeof v);
        (void)r;
        pthread_mutex_lock(&vs.lock);
        if (vs.pid != me) { /* not this process's model any more */
            pthread_mutex_unlock(&vs.lock);
            return NULL;
        }
        vs_pump();
        pthread_mutex_unlock(&vs.lock);
    }
    return NULL;
}

/* ---- rdma_cm ---- */

struct rdma_event_channel *rdma_create_event_channel(void)
{
    vs_cmch_t *ch = calloc(1, sizeof *ch);
    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    ch->ch.fd = eventfd(0, EFD_CLOEXEC);
    if (ch->ch.fd < 0) {
        free(ch);
        return NULL;
    }
    return &ch->ch;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    vs_cmch_t *ch = (vs_cmch_t *)channel;
    vs_lock();
    if (ch->nids)
        vs_violation("rdma_destroy_event_channel with %d ids still on it", ch->nids);
    while (ch->head) {
        vs_event_t *e = ch->head;
        ch->head = e->next;
        free(e);
    }
    vs_unlock();
    close(ch->ch.fd);
    free(ch);
}

static vs_id_t *id_new(struct rdma_event_channel *ch, void *context, enum rdma_port_space ps)
{
    vs_id_t *id = calloc(1, sizeof *id);
    if (!id)
        return NULL;
    id->id.channel = ch;
    id->id.context = context;
    id->id.ps = ps;
    id->id.qp_type = IBV_QPT_RC;
    id->listen_fd = -1;
    id->next = vs.ids;
    vs.ids = id;
    return id;
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
                   enum rdma_port_space ps)
{
    vs_lock();
    vs_id_t *i = id_new(channel, context, ps);
    if (i)
        ((vs_cmch_t *)channel)->nids++;
    vs_unlock();
    if (!i) {
        errno = ENOMEM;
        return -1;
    }
    *id = &i->id;
    return 0;
}

/* Drops the undelivered events of `id` from its channel. */
static void id_drop_events(vs_id_t *id)
{
    for (vs_event_t *e = ch_take((vs_cmch_t *)id->id.channel, &id->id), *next; e; e = next) {
        next = e->next;
        free(e);
    }
}

/* A listener's requests whose CONNECT_REQUEST nobody took go with it, as
 * the kernel destroys them: rejected, their ids and events dropped. */
static void drop_requests(vs_id_t *l)
{
    vs_cmch_t *ch = (vs_cmch_t *)l->id.channel;
    for (vs_event_t *e = ch->head; e;) {
        if (e->ev.event != RDMA_CM_EVENT_CONNECT_REQUEST || e->ev.listen_id != &l->id) {
            e = e->next;
            continue;
        }
        vs_id_t *child = (vs_id_t *)e->ev.id;
        id_drop_events(child); /* frees e and any later event of the child */
        e = ch->head;
        ch->nids--;
        if (child->conn) {
            send_msg(child->conn, M_REJ, 0, NULL, 0);
            child->conn->closing = 1;
            child->conn->state = C_DEAD;
            child->conn->id = NULL;
        }
        for (vs_id_t **p = &vs.ids; *p; p = &(*p)->next)
            if (*p == child) {
                *p = child->next;
                break;
            }
        free(child);
    }
}

int rdma_destroy_id(struct rdma_cm_id *cmid)
{
    vs_id_t *id = (vs_id_t *)cmid;
    vs_lock();
    if (cmid->qp)
        vs_violation("rdma_destroy_id with its QP (rdma_destroy_qp first)");
    if (id->unacked) /* librdmacm waits for them: a hang */
        vs_violation("rdma_destroy_id with %d events not acknowledged", id->unacked);
    id_drop_events(id);
    ((vs_cmch_t *)cmid->channel)->nids--;
    if (id->listen_fd >= 0)
        drop_requests(id);
    if (id->listen_fd >= 0) {
        close(id->listen_fd);
        for (vs_conn_t *c = vs.conns; c; c = c->next)
            if (c->listener == id)
                c->listener = NULL;
    }
    vs_conn_t *c = id->conn;
    if (c) {
        if (c->state == C_ESTABLISHED)
            send_msg(c, M_DREQ, 0, NULL, 0);
        else if (c->state == C_REQ_RECEIVED)
            send_msg(c, M_REJ, 0, NULL, 0);
        c->closing = 1;
        c->id = NULL;
        conn_flush(c);
    }
    for (vs_id_t **p = &vs.ids; *p; p = &(*p)->next)
        if (*p == id) {
            *p = id->next;
            break;
        }
    vs_kick();
    vs_unlock();
    free(id);
    return 0;
}

/* Whether `sa` is an address of this host (a socket can bind it). */
static int addr_local(const struct sockaddr *sa)
{
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) {
        errno = EAFNOSUPPORT;
        return 0;
    }
    socklen_t len =
        sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    struct sockaddr_storage s;
    memcpy(&s, sa, len);
    ((struct sockaddr_in *)&s)->sin_port = 0;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&s, len) == 0;
    int err = errno;
    if (fd >= 0)
        close(fd);
    errno = err;
    return ok;
}

static socklen_t sa_len(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

int rdma_bind_addr(struct rdma_cm_id *cmid, struct sockaddr *addr)
{
    if (!addr_local(addr))
        return -1;
    vs_lock();
    memcpy(&cmid->route.addr.src_storage, addr, sa_len(addr));
    cmid->verbs = vs_context();
    cmid->port_num = 1;
    vs_unlock();
    return 0;
}

int rdma_listen(struct rdma_cm_id *cmid, int backlog)
{
    vs_id_t *id = (vs_id_t *)cmid;
    struct sockaddr *sa = &cmid->route.addr.src_addr;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    socklen_t len = sa_len(sa);
    if (bind(fd, sa, len) || listen(fd, backlog) || getsockname(fd, sa, &len)) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    vs_lock();
    id->listen_fd = fd;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(vs.epfd, EPOLL_CTL_ADD, fd, &e);
    vs_unlock();
    return 0;
}

int rdma_resolve_addr(struct rdma_cm_id *cmid, struct sockaddr *src_addr, struct sockaddr *dst_addr,
                      int timeout_ms)
{
    (void)timeout_ms;
    if (src_addr && !addr_local(src_addr))
        return -1;
    vs_lock();
    if (src_addr)
        memcpy(&cmid->route.addr.src_storage, src_addr, sa_len(src_addr));
    memcpy(&cmid->route.addr.dst_storage, dst_addr, sa_len(dst_addr));
    cmid->verbs = vs_context();
    cmid->port_num = 1;
    cm_event((vs_id_t *)cmid, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, NULL, 0);
    vs_unlock();
    return 0;
}

int rdma_resolve_route(struct rdma_cm_id *cmid, int timeout_ms)
{
    (void)timeout_ms;
    vs_lock();
    if (!cmid->verbs) {
        vs_unlock();
        errno = EINVAL;
        return -1;
    }
    cm_event((vs_id_t *)cmid, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, NULL, 0);
    vs_unlock();
    return 0;
}

int rdma_create_qp(struct rdma_cm_id *cmid, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    if (!cmid->verbs || !pd || attr->qp_type != IBV_QPT_RC || !attr->send_cq || !attr->recv_cq ||
        attr->srq || attr->cap.max_send_sge > VS_MAX_SGE || attr->cap.max_recv_sge > VS_MAX_SGE ||
        attr->cap.max_send_wr == 0 || attr->cap.max_recv_wr == 0 || cmid->qp) {
        errno = EINVAL;
        return -1;
    }
    vs_qp_t *q = calloc(1, sizeof *q);
    if (q) {
        q->sq = calloc(attr->cap.max_send_wr, sizeof *q->sq);
        q->rq = calloc(attr->cap.max_recv_wr, sizeof *q->rq);
    }
    if (!q || !q->sq || !q->rq) {
        if (q)
            free(q->sq), free(q->rq);
        free(q);
        errno = ENOMEM;
        return -1;
    }
    vs_lock();
    q->qp = (struct ibv_qp){.context = cmid->verbs,
                            .qp_context = attr->qp_context,
                            .pd = pd,
                            .send_cq = attr->send_cq,
                            .recv_cq = attr->recv_cq,
                            .qp_num = ++vs.next_qpn,
                            .state = IBV_QPS_INIT,
                            .qp_type = IBV_QPT_RC};
    q->cap = attr->cap;
    q->sig_all = attr->sq_sig_all;
    q->id = (vs_id_t *)cmid;
    ((vs_cq_t *)attr->send_cq)->nqps++;
    ((vs_cq_t *)attr->recv_cq)->nqps++;
    ((vs_pd_t *)pd)->users++;
    q->next = vs.qps;
    vs.qps = q;
    cmid->qp = &q->qp;
    cmid->pd = pd;
    cmid->send_cq = attr->send_cq;
    cmid->recv_cq = attr->recv_cq;
    vs_unlock();
    return 0;
}

void rdma_destroy_qp(struct rdma_cm_id *cmid)
{
    vs_qp_t *q = (vs_qp_t *)cmid->qp;
    if (!q)
        return;
    vs_lock();
    /* Completions still in the CQs stay; their slots are nobody's now. */
    vs_cq_t *cqs[2] = {qp_send_cq(q), qp_recv_cq(q)};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < cqs[k]->n; i++) {
            vs_cqe_t *e = &cqs[k]->ring[(cqs[k]->head + i) % cqs[k]->cap];
            if (e->qp == q)
                e->qp = NULL;
        }
        cqs[k]->nqps--;
    }
    ((vs_pd_t *)q->qp.pd)->users--;
    for (vs_qp_t **p = &vs.qps; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    cmid->qp = NULL;
    vs_unlock();
    free(q->sq);
    free(q->rq);
    free(q);
}

int rdma_connect(struct rdma_cm_id *cmid, struct rdma_conn_param *param)
{
    vs_id_t *id = (vs_id_t *)cmid;
    if (!cmid->qp || id->conn || (param && param->private_data_len > VS_PRIV_CONNECT)) {
        errno = EINVAL;
        return -1;
    }
    struct sockaddr *dst = &cmid->route.addr.dst_addr;
    int fd = socket(dst->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
    if (connect(fd, dst, sa_len(dst)) && errno != EINPROGRESS) {
        /* Refused at once: the answer comes as an event, as on a fabric. */
        close(fd);
        fd = -1;
    }
    vs_lock();
    vs_conn_t *c = fd >= 0 ? conn_new(fd, C_CONNECTING) : NULL;
    if (!c) {
        if (fd >= 0)
            close(fd);
        cm_event(id, RDMA_CM_EVENT_REJECTED, 8, NULL, NULL, 0);
        vs_unlock();
        return 0;
    }
    c->id = id;
    id->conn = c;
    if (param && param->private_data_len) {
        memcpy(c->priv, param->private_data, param->private_data_len);
        c->priv_len = param->private_data_len;
    }
    ((vs_qp_t *)cmid->qp)->qp.state = IBV_QPS_INIT;
    vs_kick();
    vs_unlock();
    return 0;
}

int rdma_accept(struct rdma_cm_id *cmid, struct rdma_conn_param *param)
{
    vs_id_t *id = (vs_id_t *)cmid;
    if (param && param->private_data_len > VS_PRIV_MAX) {
        errno = EINVAL;
        return -1;
    }
    vs_lock();
    vs_conn_t *c = id->conn;
    if (!cmid->qp || !c || c->state != C_REQ_RECEIVED) {
        vs_unlock();
        errno = EINVAL;
        return -1;
    }
    /* The QP goes to RTS with the REP; the peer may write once it has it. */
    ((vs_qp_t *)cmid->qp)->qp.state = IBV_QPS_RTS;
    send_msg(c, M_REP, 0, param ? param->private_data : NULL, param ? param->private_data_len : 0);
    c->state = C_REP_SENT;
    vs_kick();
    vs_unlock();
    return 0;
}

int rdma_reject(struct rdma_cm_id *cmid, const void *private_data, uint8_t private_data_len)
{
    vs_id_t *id = (vs_id_t *)cmid;
    if (private_data_len > VS_PRIV_REJECT) {
        errno = EINVAL;
        return -1;
    }
    vs_lock();
    vs_conn_t *c = id->conn;
    if (c && c->state == C_REQ_RECEIVED) {
        send_msg(c, M_REJ, 0, private_data, private_data_len);
        c->state = C_DEAD;
        c->closing = 1;
        conn_flush(c); /* the kernel sends it: it survives the process's exit */
    }
    vs_kick();
    vs_unlock();
    return 0;
}

int rdma_disconnect(struct rdma_cm_id *cmid)
{
    vs_id_t *id = (vs_id_t *)cmid;
    vs_lock();
    vs_conn_t *c = id->conn;
    if (!c || (c->state != C_ESTABLISHED && c->state != C_DISCONNECTED)) {
        vs_unlock();
        errno = EINVAL;
        return -1;
    }
    /* At once, as librdmacm does for IB/RoCE: whatever the adapter has not
     * sent or seen acknowledged is flushed. */
    vs_qp_t *q = (vs_qp_t *)cmid->qp;
    if (q && q->qp.state != IBV_QPS_ERR)
        qp_error(q, IBV_WC_WR_FLUSH_ERR);
    if (c->state == C_ESTABLISHED)
        send_msg(c, M_DREQ, 0, NULL, 0);
    conn_flush(c); /* what the adapter had, and the DREQ, as the kernel would */
    c->state = C_DISCONNECTED;
    cm_event(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, 0);
    vs_kick();
    vs_unlock();
    return 0;
}

int rdma_migrate_id(struct rdma_cm_id *cmid, struct rdma_event_channel *channel)
{
    vs_lock();
    vs_cmch_t *from = (vs_cmch_t *)cmid->channel, *to = (vs_cmch_t *)channel;
    /* Undelivered events move with the id, as the kernel moves them. */
    vs_event_t *moved = ch_take(from, cmid);
    from->nids--;
    to->nids++;
    cmid->channel = channel;
    for (vs_event_t *e = moved, *next; e; e = next) {
        next = e->next;
        ch_push(to, e);
    }
    vs_unlock();
    return 0;
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
    vs_cmch_t *ch = (vs_cmch_t *)channel;
    vs_lock();
    while (!ch->head) {
        if (!vs_wait_readable(ch->ch.fd)) {
            vs_unlock();
            errno = EAGAIN;
            return -1;
        }
    }
    vs_event_t *e = ch->head;
    ch->head = e->next;
    if (!ch->head) {
        ch->tail = NULL;
        fd_clear(ch->ch.fd);
    }
    vs_id_t *id = (vs_id_t *)e->ev.id;
    id->unacked++;
    vs_conn_t *c = id->conn;
    if (e->ev.event == RDMA_CM_EVENT_ESTABLISHED && c && c->state == C_REP_RECEIVED) {
        c->state = C_ESTABLISHED;
        if (id->id.qp)
            ((vs_qp_t *)id->id.qp)->qp.state = IBV_QPS_RTS;
        send_msg(c, M_RTU, 0, NULL, 0);
        vs_kick();
    } else if (e->ev.event == RDMA_CM_EVENT_ESTABLISHED && id->id.qp && c && c->state == C_DEAD) {
        ((vs_qp_t *)id->id.qp)->qp.state = IBV_QPS_RTS; /* its sends fail: nobody answers */
    }
    vs_unlock();
    *event = &e->ev;
    return 0;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    vs_event_t *e = (vs_event_t *)event;
    vs_lock();
    for (vs_id_t *i = vs.ids; i; i = i->next)
        if (&i->id == event->id) {
            i->unacked--;
            break;
        }
    vs_unlock();
    free(e);
    return 0;
}
