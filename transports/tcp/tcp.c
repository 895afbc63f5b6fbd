/*
 * The TCP transport: one nonblocking socket per connection, messages framed
 * by wire.h headers, sends and receives queued per connection in FIFO order
 * and moved with writev/readv straight from and into the caller's buffers.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_NET /* log.h: the subsystem of this file's lines */
#include "crc32c.h"
#include "err.h"
#include "log.h"
#include "params.h"
#include "socket.h"
#include "transport.h"
#include "wire.h"

#define TCP_IOV_MAX 64 /* iovecs per readv/writev: batches small messages */

typedef struct {
    rcci_transport_env_t env;
} tcp_ctx_t;

struct rcci_listener {
    tcp_ctx_t *ctx;
    rcci_acceptor_t *acceptor;
};

struct rcci_request {
    struct rcci_conn *conn;
    struct rcci_request *next;
    char *buf;
    size_t bytes;
    size_t moved; /* header and payload bytes moved so far */
    rcci_tag_t tag;
    int complete;
    int check_crc; /* receive: the payload's CRC32C is checked against want_crc */
    uint32_t crc, want_crc;
    uint8_t header[RCCI_WIRE_HEADER_BYTES];
};

#include "reqfifo.h" /* after struct rcci_request: its functions use it */

struct rcci_conn {
    tcp_ctx_t *ctx;
    int fd;
    rcc_result_t failed; /* sticky: a broken stream cannot be resynchronised */
    char failure[RCCI_ERR_TEXT_BYTES];
    int looked_for_notice; /* after a failure at the socket (below) */
    int failed_by_notice;  /* `failed` is what the peer's notice said */
    int goodbye;           /* ... and it said goodbye: no failure until used */
    char peer[96];
    char self[16]; /* "rank 3", for mismatch messages */
    rcci_req_fifo_t sends, recvs;
    rcci_req_fifo_t completed; /* until test frees them (reqfifo.h) */
};

static rcc_result_t tcp_init(const rcci_transport_env_t *env, void **tctx)
{
    tcp_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return rcci_error(RCC_ERR_NO_MEMORY, "tcp context");
    ctx->env = *env;
    *tctx = ctx;
    return RCC_SUCCESS;
}

static void tcp_fini(void *tctx) { free(tctx); }

static rcc_result_t tcp_can_connect(void *tctx, const rcci_peer_info_t *me,
                                    const rcci_peer_info_t *peer, int *priority)
{
    (void)tctx, (void)me, (void)peer;
    *priority = 0; /* reaches everyone; the fallback */
    return RCC_SUCCESS;
}

/* RCC_SOCKET_CONGESTION. Why not the system's default: BBR (the default on
 * some hosts) measured 15% below the link on a 1 Gbit ring, because each
 * link carries one flow's data and the opposite flow's ACKs, which queue
 * behind that data and arrive in bursts that inflate BBR's bandwidth
 * estimate; cubic held the link rate (bench/results/README.md). An algorithm
 * the kernel refuses leaves the default, with one warning per process. */
static void tcp_set_congestion(int fd)
{
    static int warned;
    const char *name = rcci_param_str(RCCI_PARAM_SOCKET_CONGESTION);
    if (name[0] && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name))) {
        int err = errno;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            RCC_WARN("RCC_SOCKET_CONGESTION=%s refused by the kernel (%s; see "
                     "net.ipv4.tcp_allowed_congestion_control): using the system's default",
                     name, strerror(err));
    }
}

/* Options for bulk data, set on the socket before it connects or listens
 * (accepted connections inherit the listener's): RCC_SOCKET_BUF_BYTES and
 * RCC_SOCKET_CONGESTION. Set on a connection already made, the congestion
 * control would take over from the system default's without undoing its
 * set-up: from BBR, that leaves cubic pacing each connection at a rate
 * drawn from its (on these hosts, scheduling-inflated) round trip time,
 * which held the tail of an 8 KiB message back for ~30 us
 * (bench/results/README.md). */
static void tcp_prepare_socket(int fd)
{
    int64_t buf = rcci_param_int(RCCI_PARAM_SOCKET_BUF_BYTES);
    if (buf > 0) {
        int v = (int)buf;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
    }
    tcp_set_congestion(fd);
}

static rcc_result_t tcp_listen(void *tctx, void *handle, rcci_listener_t **out)
{
    tcp_ctx_t *ctx = tctx;
    rcci_addr_t local = {.len = ctx->env.local_addr_len}, bound;
    memcpy(&local.u, &ctx->env.local_addr, local.len);
    rcci_addr_set_port(&local, 0);
    int fd;
    rcc_result_t res = rcci_sock_listen(&local, tcp_prepare_socket, &fd, &bound);
    if (res != RCC_SUCCESS)
        return res;
    rcci_listener_t *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return rcci_error(RCC_ERR_NO_MEMORY, "tcp listener");
    }
    l->ctx = ctx;
    res = rcci_acceptor_create(fd, ctx->env.secret, ctx->env.comm_id, &l->acceptor);
    if (res != RCC_SUCCESS) {
        close(fd);
        free(l);
        return res;
    }
    memset(handle, 0, RCCI_HANDLE_BYTES);
    rcci_addr_to_wire(&bound, (rcci_wire_addr_t *)handle);
    *out = l;
    return RCC_SUCCESS;
}

static void tcp_sweep_listener(rcci_listener_t *l) { rcci_acceptor_sweep(l->acceptor); }

static void tcp_close_listener(rcci_listener_t *l)
{
    if (!l)
        return;
    rcci_acceptor_destroy(l->acceptor);
    free(l);
}

/* Says once per process and side which congestion control the first
 * connection made (accepted = 1: taken from the listener) runs: what the
 * kernel made of tcp_prepare_socket's choice. */
static void tcp_tell_congestion(int fd, int accepted)
{
    static int told[2];
    if (!rcci_log_on(RCCI_LOG_INFO, RCCI_LOG_SUBSYS) ||
        __atomic_exchange_n(&told[accepted], 1, __ATOMIC_RELAXED))
        return;
    char used[32] = "?";
    socklen_t len = sizeof used - 1;
    getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, used, &len);
    used[sizeof used - 1] = '\0';
    RCC_INFO("tcp: data connections use congestion control %s (%s)", used,
             accepted ? "accepted" : "connected");
}

/* The connection runs nonblocking, without Nagle's delay (its buffers and
 * congestion control were set before it connected: tcp_prepare_socket). */
static rcc_result_t tcp_conn_new(tcp_ctx_t *ctx, int fd, int accepted, const char *peer,
                                 rcci_conn_t **out)
{
    tcp_tell_congestion(fd, accepted);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    rcc_result_t res = rcci_sock_set_nonblocking(fd, 1);
    if (res != RCC_SUCCESS)
        return res;
    rcci_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return rcci_error(RCC_ERR_NO_MEMORY, "tcp connection");
    c->ctx = ctx;
    c->fd = fd;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    snprintf(c->self, sizeof c->self, "rank %d", ctx->env.rank);
    *out = c;
    return RCC_SUCCESS;
}

static rcc_result_t tcp_connect(void *tctx, const void *handle, uint32_t tag, int64_t deadline_ns,
                                rcci_conn_t **out)
{
    tcp_ctx_t *ctx = tctx;
    rcci_addr_t addr;
    rcc_result_t res = rcci_addr_from_wire(handle, &addr);
    if (res != RCC_SUCCESS)
        return res;
    char text[80];
    rcci_addr_format(&addr, text, sizeof text);
    int fd;
    /* The peer's listener is up before its handle is published, so a
     * refusal means the peer is gone: no retrying. */
    res = rcci_sock_connect(&addr, deadline_ns, 0, tcp_prepare_socket, &fd);
    if (res != RCC_SUCCESS)
        return res;
    rcci_hello_t hello = {.kind = RCCI_HELLO_TCP,
                          .rank = ctx->env.rank,
                          .nranks = ctx->env.nranks,
                          .tag = tag,
                          .comm_id = ctx->env.comm_id};
    res = rcci_hello_send(fd, &hello, ctx->env.secret, deadline_ns);
    if (res == RCC_SUCCESS)
        res = tcp_conn_new(ctx, fd, 0, text, out);
    if (res != RCC_SUCCESS)
        close(fd);
    return res;
}

static rcc_result_t tcp_accept(rcci_listener_t *l, int peer_rank, uint32_t tag, int64_t deadline_ns,
                               rcci_conn_t **out)
{
    int fd;
    rcci_hello_t hello;
    rcc_result_t res =
        rcci_acceptor_accept(l->acceptor, RCCI_HELLO_TCP, peer_rank, tag, deadline_ns, &fd, &hello);
    if (res != RCC_SUCCESS)
        return res;
    rcci_addr_t from = {.len = sizeof from.u};
    char addr[80] = "?", text[96];
    if (getpeername(fd, &from.u.sa, &from.len) == 0)
        rcci_addr_format(&from, addr, sizeof addr);
    snprintf(text, sizeof text, "rank %d (%s)", (int)hello.rank, addr);
    res = tcp_conn_new(l->ctx, fd, 1, text, out);
    if (res != RCC_SUCCESS)
        close(fd);
    return res;
}

static rcc_result_t tcp_reg_mem(void *tctx, void *ptr, size_t bytes, rcci_mem_type_t type,
                                rcci_mr_t **mr)
{
    (void)tctx, (void)ptr, (void)bytes;
    if (type != RCCI_MEM_HOST)
        return rcci_error(RCC_ERR_UNSUPPORTED, "the tcp transport moves host memory only");
    *mr = NULL;
    return RCC_SUCCESS;
}

static rcc_result_t tcp_dereg_mem(void *tctx, rcci_mr_t *mr)
{
    (void)tctx, (void)mr;
    return RCC_SUCCESS;
}

/* The CRC32C a send carries; RCC_CHECKSUM_FAULT=N sends every Nth one
 * wrong, as a payload damaged on its way would arrive (tests). */
static uint32_t tcp_send_crc(const void *buf, size_t bytes)
{
    static unsigned long sent;
    uint32_t crc = rcci_crc32c_update(RCCI_CRC32C_INIT, buf, bytes);
    int64_t every = rcci_param_int(RCCI_PARAM_CHECKSUM_FAULT);
    if (every > 0 && __atomic_add_fetch(&sent, 1, __ATOMIC_RELAXED) % (unsigned long)every == 0)
        crc ^= 1u;
    return crc;
}

static rcc_result_t tcp_post(rcci_conn_t *c, int is_send, const void *buf, size_t bytes,
                             const rcci_tag_t *tag, rcci_request_t **out)
{
    if (c->failed != RCC_SUCCESS)
        return rcci_error(c->failed, "%s", c->failure);
    rcci_request_t *r = calloc(1, sizeof *r);
    if (!r)
        return rcci_error(RCC_ERR_NO_MEMORY, "tcp request");
    r->conn = c;
    r->buf = (char *)buf;
    r->bytes = bytes;
    r->tag = *tag;
    if (is_send) {
        rcci_wire_encode(r->header, tag, bytes);
        if (rcci_param_int(RCCI_PARAM_CHECKSUM))
            rcci_wire_set_crc(r->header, tcp_send_crc(buf, bytes));
    }
    rcci_req_fifo_push(is_send ? &c->sends : &c->recvs, r);
    *out = r;
    return RCC_SUCCESS;
}

static rcc_result_t tcp_isend(rcci_conn_t *c, const void *buf, size_t bytes, const rcci_tag_t *tag,
                              rcci_mr_t *mr, rcci_request_t **req)
{
    (void)mr;
    return tcp_post(c, 1, buf, bytes, tag, req);
}

static rcc_result_t tcp_irecv(rcci_conn_t *c, void *buf, size_t bytes, const rcci_tag_t *tag,
                              rcci_mr_t *mr, rcci_request_t **req)
{
    (void)mr;
    return tcp_post(c, 0, buf, bytes, tag, req);
}

static rcc_result_t tcp_fail(rcci_conn_t *c, rcc_result_t code)
{
    c->failed = code;
    snprintf(c->failure, sizeof c->failure, "%s", rcci_tls_error());
    return code;
}

/* iovecs covering what is left of the queued messages, from the head on. */
static int tcp_gather(rcci_req_fifo_t *q, struct iovec *iov)
{
    int n = 0;
    for (struct rcci_request *r = q->head; r && n + 2 <= TCP_IOV_MAX; r = r->next) {
        if (r->moved < RCCI_WIRE_HEADER_BYTES)
            iov[n++] = (struct iovec){r->header + r->moved, RCCI_WIRE_HEADER_BYTES - r->moved};
        size_t done = r->moved > RCCI_WIRE_HEADER_BYTES ? r->moved - RCCI_WIRE_HEADER_BYTES : 0;
        if (r->bytes > done)
            iov[n++] = (struct iovec){r->buf + done, r->bytes - done};
    }
    return n;
}

/* A failure notice: its text is what follows the header, some of it
 * already read (in the order of the receive queue's iovecs: the rest of
 * r's payload, then the next requests' headers and payloads: `extra`
 * bytes), the rest still in the socket. Fails the connection with it. */
static rcc_result_t tcp_take_notice(rcci_conn_t *c, const rcci_wire_frame_t *f,
                                    struct rcci_request *r, size_t extra)
{
    char text[RCCI_WIRE_NOTICE_MAX + 1];
    size_t want = (size_t)f->length, got = 0;
    size_t in_r = r->moved - RCCI_WIRE_HEADER_BYTES;
    got = in_r < want ? in_r : want;
    if (got)
        memcpy(text, r->buf, got);
    for (struct rcci_request *q = r->next; q && extra > 0 && got < want; q = q->next) {
        const char *parts[2] = {(const char *)q->header, q->buf};
        size_t sizes[2] = {RCCI_WIRE_HEADER_BYTES, q->bytes};
        for (int i = 0; i < 2 && extra > 0 && got < want; i++) {
            size_t k = sizes[i] < extra ? sizes[i] : extra;
            k = k < want - got ? k : want - got;
            memcpy(text + got, parts[i], k);
            got += k, extra -= k;
        }
    }
    while (got < want) { /* sent in one piece: the rest is there or never comes */
        ssize_t k = recv(c->fd, text + got, want - got, MSG_DONTWAIT);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    rcci_wire_printable(text, got);
    c->failed_by_notice = 1;
    if (f->notice_res == RCC_SUCCESS) { /* it left: whatever needs it now has lost it */
        c->goodbye = 1;
        return tcp_fail(c, rcci_error(RCC_ERR_PEER_LOST, "%s",
                                      got ? text : "the peer destroyed its communicator"));
    }
    return tcp_fail(c, rcci_error(f->notice_res, "%s", got ? text : "a peer failed (no detail)"));
}

/* Credits `n` moved bytes to the queue in order, completing messages.
 * Received headers are validated as soon as they are whole. */
static rcc_result_t tcp_advance(rcci_conn_t *c, rcci_req_fifo_t *q, size_t n, int is_recv)
{
    while (n > 0) {
        struct rcci_request *r = q->head;
        size_t total = RCCI_WIRE_HEADER_BYTES + r->bytes;
        size_t take = total - r->moved < n ? total - r->moved : n;
        int header_was_partial = r->moved < RCCI_WIRE_HEADER_BYTES;
        r->moved += take;
        n -= take;
        if (is_recv && header_was_partial && r->moved >= RCCI_WIRE_HEADER_BYTES) {
            rcci_wire_frame_t f;
            rcc_result_t res = rcci_wire_parse(r->header, &f, c->peer);
            if (res == RCC_SUCCESS && f.notice)
                return tcp_take_notice(c, &f, r, n);
            if (res == RCC_SUCCESS && f.announce)
                res = rcci_error(RCC_ERR_REMOTE, "%s sent an announcement where data was expected",
                                 c->peer);
            if (res == RCC_SUCCESS)
                res = rcci_wire_match(&f, &r->tag, r->bytes, c->peer, c->self,
                                      c->ctx->env.describe_sig);
            if (res == RCC_SUCCESS && !f.has_crc && rcci_param_int(RCCI_PARAM_CHECKSUM))
                res = rcci_error(RCC_ERR_INVALID_USAGE,
                                 "%s sends without checksums while this rank has RCC_CHECKSUM=1: "
                                 "set it alike on every rank",
                                 c->peer);
            if (res != RCC_SUCCESS)
                return tcp_fail(c, res);
            r->check_crc = f.has_crc;
            r->want_crc = f.payload_crc;
            r->crc = RCCI_CRC32C_INIT;
        }
        if (is_recv && r->check_crc && r->moved > RCCI_WIRE_HEADER_BYTES) {
            size_t from = r->moved - take, to = r->moved - RCCI_WIRE_HEADER_BYTES;
            from = from > RCCI_WIRE_HEADER_BYTES ? from - RCCI_WIRE_HEADER_BYTES : 0;
            r->crc = rcci_crc32c_update(r->crc, r->buf + from, to - from);
            if (r->moved == total && r->crc != r->want_crc)
                return tcp_fail(c, rcci_error(RCC_ERR_REMOTE,
                                              "the %zu-byte payload of message #%u from %s fails "
                                              "its checksum (CRC32C 0x%08x, sent 0x%08x): the "
                                              "data was damaged on its way",
                                              r->bytes, r->tag.seq, c->peer, r->crc, r->want_crc));
        }
        if (r->moved == total)
            rcci_req_fifo_complete(q, &c->completed);
    }
    return RCC_SUCCESS;
}

/* Moves as many bytes as the socket takes/gives now, in both directions. */
static rcc_result_t tcp_drive(rcci_conn_t *c)
{
    struct iovec iov[TCP_IOV_MAX];
    while (c->failed == RCC_SUCCESS && c->sends.head) {
        int n = tcp_gather(&c->sends, iov);
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            int lost = errno == EPIPE || errno == ECONNRESET;
            return tcp_fail(c, rcci_error_errno(lost ? RCC_ERR_PEER_LOST : RCC_ERR_SYSTEM, errno,
                                                "send to %s", c->peer));
        }
        tcp_advance(c, &c->sends, (size_t)w, 0);
    }
    while (c->failed == RCC_SUCCESS && c->recvs.head) {
        int n = tcp_gather(&c->recvs, iov);
        ssize_t r = readv(c->fd, iov, n);
        if (r == 0)
            return tcp_fail(c, rcci_error(RCC_ERR_PEER_LOST, "%s closed the connection", c->peer));
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            return tcp_fail(
                c, rcci_error_errno(errno == ECONNRESET ? RCC_ERR_PEER_LOST : RCC_ERR_SYSTEM, errno,
                                    "receive from %s", c->peer));
        }
        rcc_result_t res = tcp_advance(c, &c->recvs, (size_t)r, 1);
        if (res != RCC_SUCCESS)
            return res;
    }
    return c->failed == RCC_SUCCESS ? RCC_SUCCESS : rcci_error(c->failed, "%s", c->failure);
}

static rcc_result_t tcp_test(rcci_request_t *r, int *done)
{
    rcci_conn_t *c = r->conn;
    rcc_result_t res = r->complete ? RCC_SUCCESS : tcp_drive(c);
    return rcci_req_finish(&c->sends, &c->recvs, &c->completed, r, res, done);
}

static int tcp_wait_fd(rcci_conn_t *c) { return c->fd; }

/* Takes a notice whose header (in `f`) was peeked: the header, then its
 * text; fails the connection with what it says. */
static rcc_result_t tcp_take_peeked_notice(rcci_conn_t *c, const rcci_wire_frame_t *f, int *found)
{
    uint8_t header[RCCI_WIRE_HEADER_BYTES];
    if (recv(c->fd, header, sizeof header, MSG_DONTWAIT) != (ssize_t)sizeof header)
        return tcp_fail(c, rcci_error(RCC_ERR_PEER_LOST, "%s failed", c->peer));
    struct rcci_request none = {.moved = RCCI_WIRE_HEADER_BYTES};
    rcc_result_t res = tcp_take_notice(c, f, &none, 0);
    *found = c->goodbye ? RCCI_PEEK_GOODBYE : RCCI_PEEK_NOTICE;
    return res;
}

/* The header of the next message when no receive is posted and it is
 * whole in the socket (*found); a notice there is taken and fails the
 * connection with what it says. A close seen here fails it too. */
static rcc_result_t tcp_peek_frame(rcci_conn_t *c, rcci_wire_frame_t *f, int *found)
{
    *found = RCCI_PEEK_NONE;
    uint8_t header[RCCI_WIRE_HEADER_BYTES];
    if (c->failed != RCC_SUCCESS) {
        /* A peer that fails sends a notice and closes, and a close with
         * unread data in its socket resets the connection: a send here then
         * fails, with the notice unread in front of the reset. Once, at a
         * message boundary of the receive stream, look for it. */
        int boundary = !c->recvs.head || c->recvs.head->moved == 0;
        if (!c->failed_by_notice && c->failed == RCC_ERR_PEER_LOST && boundary &&
            !c->looked_for_notice) {
            c->looked_for_notice = 1;
            if (recv(c->fd, header, sizeof header, MSG_PEEK | MSG_DONTWAIT) ==
                    (ssize_t)sizeof header &&
                rcci_wire_parse(header, f, c->peer) == RCC_SUCCESS && f->notice)
                return tcp_take_peeked_notice(c, f, found);
        }
        if (c->failed_by_notice)
            *found = c->goodbye ? RCCI_PEEK_GOODBYE : RCCI_PEEK_NOTICE;
        return rcci_error(c->failed, "%s", c->failure);
    }
    if (c->recvs.head)
        return RCC_SUCCESS; /* a posted receive notices a close or a notice by itself */
    ssize_t r = recv(c->fd, header, sizeof header, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0)
        return tcp_fail(c, rcci_error(RCC_ERR_PEER_LOST, "%s closed the connection", c->peer));
    if (r < 0 && errno != EAGAIN && errno != EINTR)
        return tcp_fail(c, rcci_error_errno(RCC_ERR_PEER_LOST, errno, "%s", c->peer));
    if (r < (ssize_t)sizeof header)
        return RCC_SUCCESS; /* nothing, or not whole yet */
    rcc_result_t res = rcci_wire_parse(header, f, c->peer);
    if (res != RCC_SUCCESS)
        return tcp_fail(c, res);
    if (f->notice) /* the stream ends with it: take it */
        return tcp_take_peeked_notice(c, f, found);
    if (f->announce) { /* not data: taken now, reported once */
        if (recv(c->fd, header, sizeof header, MSG_DONTWAIT) != (ssize_t)sizeof header)
            return tcp_fail(c, rcci_error(RCC_ERR_PEER_LOST, "%s failed", c->peer));
        *found = RCCI_PEEK_ANNOUNCE;
        return RCC_SUCCESS;
    }
    *found = RCCI_PEEK_DATA;
    return RCC_SUCCESS;
}

static rcc_result_t tcp_probe(rcci_conn_t *c)
{
    rcci_wire_frame_t f;
    int found;
    return tcp_peek_frame(c, &f, &found);
}

static rcc_result_t tcp_peek(rcci_conn_t *c, rcci_tag_t *tag, int *found)
{
    rcci_wire_frame_t f;
    rcc_result_t res = tcp_peek_frame(c, &f, found);
    if (res == RCC_SUCCESS && *found)
        *tag = f.tag;
    return res;
}

/* Sends a whole small frame now or not at all: only at a message
 * boundary of the send stream (else it would land inside a payload). */
static void tcp_send_frame_now(rcci_conn_t *c, const uint8_t *frame, size_t bytes)
{
    struct rcci_request *head = c->sends.head;
    if (head && head->moved > 0)
        return;
    ssize_t w = send(c->fd, frame, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w; /* best effort: a full socket or a gone peer learns from the close */
}

static void tcp_announce(rcci_conn_t *c, const rcci_tag_t *tag)
{
    if (!c || c->failed != RCC_SUCCESS)
        return;
    uint8_t frame[RCCI_WIRE_HEADER_BYTES];
    rcci_wire_encode_announce(frame, tag);
    tcp_send_frame_now(c, frame, sizeof frame);
}

static void tcp_notify(rcci_conn_t *c, rcc_result_t res, const char *text)
{
    /* A stream that failed reading (a mismatch, a malformed frame) can
     * still carry the notice; one that failed at the socket cannot. */
    if (!c || c->failed == RCC_ERR_PEER_LOST || c->failed == RCC_ERR_SYSTEM)
        return;
    uint8_t frame[RCCI_WIRE_HEADER_BYTES + RCCI_WIRE_NOTICE_MAX];
    size_t len = strlen(text);
    len = len < RCCI_WIRE_NOTICE_MAX ? len : RCCI_WIRE_NOTICE_MAX;
    rcci_wire_encode_notice(frame, res, len);
    memcpy(frame + RCCI_WIRE_HEADER_BYTES, text, len);
    tcp_send_frame_now(c, frame, RCCI_WIRE_HEADER_BYTES + len);
}

static void tcp_close(rcci_conn_t *c)
{
    if (!c)
        return;
    rcci_req_fifo_free_all(&c->sends);
    rcci_req_fifo_free_all(&c->recvs);
    rcci_req_fifo_free_all(&c->completed);
    /* Bytes left unread at close make the kernel reset the connection, and
     * the peer may then read "connection reset" where this side's last
     * words were (its goodbye, a failure notice): an announcement this side
     * never looked at would do it. Read them away first (bounded). */
    char sink[4096];
    for (int i = 0; i < 64 && recv(c->fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
        ;
    close(c->fd);
    free(c);
}

const rcci_transport_t rcci_transport_tcp = {
    .abi = RCCI_TRANSPORT_ABI,
    .size = sizeof(rcci_transport_t),
    .name = "tcp",
    .caps = 0,
    .init = tcp_init,
    .fini = tcp_fini,
    .can_connect = tcp_can_connect,
    .listen = tcp_listen,
    .connect = tcp_connect,
    .accept = tcp_accept,
    .close_listener = tcp_close_listener,
    .reg_mem = tcp_reg_mem,
    .dereg_mem = tcp_dereg_mem,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .test = tcp_test,
    .write = rcci_transport_unsupported_write,
    RCCI_TRANSPORT_NO_INPLACE,
    RCCI_TRANSPORT_NO_QUEUED,
    .wait_fd = tcp_wait_fd,
    .close = tcp_close,
    .probe = tcp_probe,
    .peek = tcp_peek,
    .notify = tcp_notify,
    .announce = tcp_announce,
    .sweep_listener = tcp_sweep_listener,
    .listener_fd = rcci_transport_no_listener_fd,
    .connect_start = tcp_connect, /* completes in the peer's backlog */
};
