/*
 * Point-to-point operations: sends and receives between any two ranks
 * (rcc_send/rcc_recv, rcc_alltoall, and all the point-to-point calls of a
 * group, merged into one operation so that they progress together and no
 * order of calls can deadlock).
 *
 * Each peer and direction has its own connection, made on first use: the
 * sender connects to the listener every rank keeps open, the receiver
 * accepts without blocking (polled while the operation waits). Messages go
 * whole, straight from and into the caller's buffers; per-direction
 * sequence numbers match them in call order and catch a mismatch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "comm.h"
#include "log.h"
#include "params.h"
#include "reduce.h"

#define P2P_TAG 1     /* connection tag of lane 0; lane l uses P2P_TAG + l (the ring uses 0) */
#define P2P_POLL_MS 1 /* how often pending accepts are looked at */
#define P2P_GRACE_NS (1000ll * 1000000) /* see p2p_conn */

enum { P2P_WAITING, P2P_POSTED, P2P_DONE };

typedef struct {
    rcci_request_t *req;
    uint32_t seq;
    int state;
} p2p_state_t;

struct rcci_exec {
    rcci_op_t *op;
    const rcci_p2p_msg_t *msgs; /* the operation's, or the direct allreduce's own */
    int nmsgs;
    p2p_state_t *st;
    int64_t last_progress_ns;
    /* Direct allreduce: every rank's input, in rank order, and its messages. */
    char *inputs;
    rcci_p2p_msg_t *own_msgs;
};

static rcc_result_t p2p_fail(struct rcc_comm *comm, rcci_exec_t *x, rcc_result_t res, int i)
{
    const rcci_p2p_msg_t *m = &x->msgs[i];
    char peer[128];
    rcci_bootstrap_peer_name(comm->bootstrap, m->peer, peer, sizeof peer);
    rcci_error_prefix("%s%s of %zu bytes %s %s (message %u between them): ",
                      x->inputs ? "allreduce (direct exchange): " : "",
                      m->is_send ? "send" : "receive", m->bytes, m->is_send ? "to" : "from", peer,
                      x->st[i].seq);
    return res;
}

/* Messages to oneself pair up in order: the k-th send with the k-th receive. */
static rcc_result_t p2p_self(rcci_exec_t *x, int self)
{
    const rcci_p2p_msg_t *msgs = x->msgs;
    int nmsgs = x->nmsgs;
    for (int s = 0, r = 0;; s++, r++) {
        while (s < nmsgs && !(msgs[s].peer == self && msgs[s].is_send))
            s++;
        while (r < nmsgs && !(msgs[r].peer == self && !msgs[r].is_send))
            r++;
        if (s == nmsgs && r == nmsgs)
            return RCC_SUCCESS;
        if (s == nmsgs || r == nmsgs)
            return rcci_error(RCC_ERR_INVALID_USAGE,
                              "a %s to this rank itself has no matching %s in the same group",
                              s < nmsgs ? "send" : "receive", s < nmsgs ? "receive" : "send");
        if (msgs[s].bytes != msgs[r].bytes)
            return rcci_error(
                RCC_ERR_INVALID_USAGE,
                "a send of %zu bytes to this rank itself meets a receive of %zu bytes",
                msgs[s].bytes, msgs[r].bytes);
        memcpy(msgs[r].buf, msgs[s].buf, msgs[s].bytes);
        x->st[s].state = x->st[r].state = P2P_DONE;
    }
}

/* Numbers the messages per lane, peer and direction, in order. */
static rcc_result_t p2p_begin(struct rcc_comm *comm, rcci_exec_t *x)
{
    x->st = calloc((size_t)(x->nmsgs ? x->nmsgs : 1), sizeof *x->st);
    if (!x->st)
        return rcci_error(RCC_ERR_NO_MEMORY, "point-to-point state of %d messages", x->nmsgs);
    x->last_progress_ns = rcci_now_ns();
    for (int i = 0; i < x->nmsgs; i++) {
        const rcci_p2p_msg_t *m = &x->msgs[i];
        rcci_p2p_lane_t *lane = &comm->p2p.lane[m->lane];
        if (m->peer != comm->rank)
            x->st[i].seq = m->is_send ? lane->out_seq[m->peer]++ : lane->in_seq[m->peer]++;
    }
    return p2p_self(x, comm->rank);
}

rcc_result_t rcci_p2p_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **out)
{
    rcci_exec_t *x = calloc(1, sizeof *x);
    if (!x)
        return rcci_error(RCC_ERR_NO_MEMORY, "point-to-point state");
    *out = x;
    x->op = op;
    x->msgs = op->msgs;
    x->nmsgs = op->nmsgs;
    return p2p_begin(comm, x);
}

int rcci_use_direct_allreduce(const struct rcc_comm *comm, size_t bytes)
{
    const char *algo = rcci_param_str(RCCI_PARAM_ALGO);
    if (comm->nranks < 2 || !strcmp(algo, "ring"))
        return 0;
    if (!strcmp(algo, "direct"))
        return 1;
    return bytes <= (size_t)rcci_param_int(RCCI_PARAM_DIRECT_MAX_BYTES);
}

rcc_result_t rcci_direct_allreduce_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **out)
{
    int n = comm->nranks, r = comm->rank;
    size_t bytes = op->count * rcc_datatype_size(op->dtype);
    rcci_exec_t *x = calloc(1, sizeof *x);
    if (!x)
        return rcci_error(RCC_ERR_NO_MEMORY, "direct allreduce state");
    *out = x;
    x->op = op;
    x->inputs = malloc((size_t)n * bytes);
    x->own_msgs = malloc(sizeof *x->own_msgs * 2 * (size_t)(n - 1));
    if (!x->inputs || !x->own_msgs)
        return rcci_error(RCC_ERR_NO_MEMORY, "direct allreduce of %zu bytes on %d ranks", bytes, n);
    memcpy(x->inputs + (size_t)r * bytes, op->sendbuf, bytes);
    int k = 0;
    for (int step = 1; step < n; step++) { /* rank r+1 first, so that sends spread out */
        int q = (r + step) % n;
        x->own_msgs[k++] =
            (rcci_p2p_msg_t){q, 1, x->inputs + (size_t)r * bytes, bytes, RCCI_LANE_COLL};
        x->own_msgs[k++] =
            (rcci_p2p_msg_t){q, 0, x->inputs + (size_t)q * bytes, bytes, RCCI_LANE_COLL};
    }
    x->msgs = x->own_msgs;
    x->nmsgs = k;
    return p2p_begin(comm, x);
}

/* All inputs are in: fold them in rank order, the same on every rank. */
static void p2p_direct_reduce(const struct rcc_comm *comm, const rcci_exec_t *x)
{
    const rcci_op_t *op = x->op;
    int n = comm->nranks;
    size_t bytes = op->count * rcc_datatype_size(op->dtype);
    char *acc = x->inputs; /* rank 0's block accumulates */
    for (int q = 1; q < n; q++)
        rcci_reduce(q == n - 1 ? (char *)op->recvbuf : acc, acc, x->inputs + (size_t)q * bytes,
                    op->count, op->dtype, op->redop, q == n - 1 && op->redop == RCC_AVG ? n : 1);
}

/* The connection for message i, made now if it can be; NULL: not yet. */
static rcc_result_t p2p_conn(struct rcc_comm *comm, const rcci_p2p_msg_t *m, rcci_conn_t **out)
{
    rcci_p2p_links_t *p = &comm->p2p;
    rcci_p2p_lane_t *lane = &p->lane[m->lane];
    rcci_conn_t **slot = m->is_send ? &lane->out[m->peer] : &lane->in[m->peer];
    uint32_t tag = P2P_TAG + (uint32_t)m->lane;
    rcc_result_t res = RCC_SUCCESS;
    *out = *slot;
    if (*slot)
        return RCC_SUCCESS;
    if (m->is_send) {
        /* Completes in the peer's backlog: bounded by the timeout, brief. */
        res = p->tr->connect(p->tctx, p->handles + (size_t)m->peer * RCCI_HANDLE_BYTES, tag,
                             rcci_now_ns() + comm->timeout_ns, slot);
    } else {
        res = p->tr->accept(p->listener, m->peer, tag, 0, slot);
        if (res == RCC_ERR_TIMEOUT) { /* the peer has not connected yet: is it still there? */
            comm->poll_ms = P2P_POLL_MS;
            if (!lane->out[m->peer] || p->tr->probe(lane->out[m->peer]) == RCC_SUCCESS)
                return RCC_SUCCESS;
            /* Our connection to it closed. A peer that finished its part and
             * left had connected to us first, so its connection is already
             * in our backlog: give the accept a moment before calling it
             * lost. */
            char lost[RCCI_ERR_TEXT_BYTES];
            snprintf(lost, sizeof lost, "%s", rcci_tls_error());
            res = p->tr->accept(p->listener, m->peer, tag, rcci_now_ns() + P2P_GRACE_NS, slot);
            if (res != RCC_SUCCESS)
                return rcci_error(RCC_ERR_PEER_LOST, "%s", lost);
        }
    }
    if (res == RCC_SUCCESS)
        res = rcci_progress_watch(comm, p->tr->wait_fd(*slot));
    *out = *slot;
    return res;
}

rcc_result_t rcci_p2p_advance(struct rcc_comm *comm, rcci_exec_t *x, int *progressed, int *done)
{
    rcci_p2p_links_t *p = &comm->p2p;
    *progressed = 0;
    *done = 1;
    for (int i = 0; i < x->nmsgs; i++) {
        const rcci_p2p_msg_t *m = &x->msgs[i];
        p2p_state_t *st = &x->st[i];
        rcc_result_t res = RCC_SUCCESS;
        /* Messages of one peer and direction are posted strictly in
         * sequence order, across operations too: the connection's queue
         * is the order the peer will see them in. */
        rcci_p2p_lane_t *lane = &p->lane[m->lane];
        uint32_t *next = m->is_send ? &lane->out_posted[m->peer] : &lane->in_posted[m->peer];
        if (st->state == P2P_WAITING && m->peer != comm->rank && *next == st->seq) {
            rcci_conn_t *conn = NULL;
            res = p2p_conn(comm, m, &conn);
            if (res == RCC_SUCCESS && conn) {
                res = m->is_send ? p->tr->isend(conn, m->buf, m->bytes, st->seq, NULL, &st->req)
                                 : p->tr->irecv(conn, m->buf, m->bytes, st->seq, NULL, &st->req);
                if (res == RCC_SUCCESS)
                    st->state = P2P_POSTED, (*next)++, *progressed = 1;
            }
        }
        if (res == RCC_SUCCESS && st->state == P2P_POSTED) {
            int complete;
            res = p->tr->test(st->req, &complete);
            if (res != RCC_SUCCESS)
                st->req = NULL;
            else if (complete)
                st->state = P2P_DONE, st->req = NULL, *progressed = 1;
        }
        if (res != RCC_SUCCESS)
            return p2p_fail(comm, x, res, i);
        if (st->state != P2P_DONE)
            *done = 0;
    }
    if (*done && x->inputs)
        p2p_direct_reduce(comm, x);
    int64_t now = rcci_now_ns();
    if (*progressed)
        x->last_progress_ns = now;
    if (!*done && now - x->last_progress_ns > comm->timeout_ns) {
        int i = 0;
        while (x->st[i].state == P2P_DONE)
            i++;
        rcc_result_t res = rcci_error(RCC_ERR_TIMEOUT,
                                      "no progress for %.0f s (the peer did not "
                                      "post the matching call)",
                                      comm->timeout_ns / 1e9);
        return p2p_fail(comm, x, res, i);
    }
    return RCC_SUCCESS;
}

void rcci_p2p_finish(struct rcc_comm *comm, rcci_exec_t *x)
{
    if (!x)
        return;
    char error[RCCI_ERR_TEXT_BYTES]; /* the failure being reported stays the story */
    snprintf(error, sizeof error, "%s", rcci_tls_error());
    for (int i = 0; x->st && i < x->nmsgs; i++) {
        int complete;
        if (x->st[i].req)
            comm->p2p.tr->test(x->st[i].req, &complete);
    }
    rcci_tls_error_set(error);
    free(x->st);
    free(x->inputs);
    free(x->own_msgs);
    free(x);
}

void rcci_p2p_close(struct rcc_comm *comm)
{
    rcci_p2p_links_t *p = &comm->p2p;
    for (int l = 0; l < RCCI_P2P_LANES; l++) {
        rcci_p2p_lane_t *lane = &p->lane[l];
        for (int r = 0; r < comm->nranks && lane->out; r++) {
            if (lane->out[r])
                p->tr->close(lane->out[r]);
            if (lane->in[r])
                p->tr->close(lane->in[r]);
            lane->out[r] = lane->in[r] = NULL;
        }
    }
}
