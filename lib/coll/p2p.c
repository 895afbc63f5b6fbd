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

#define P2P_TAG 1     /* connection tag of point-to-point links (the ring uses 0) */
#define P2P_POLL_MS 1 /* how often pending accepts are looked at */

enum { P2P_WAITING, P2P_POSTED, P2P_DONE };

typedef struct {
    rcci_request_t *req;
    uint32_t seq;
    int state;
} p2p_state_t;

struct rcci_exec {
    rcci_op_t *op;
    p2p_state_t *st;
    int64_t last_progress_ns;
};

static rcc_result_t p2p_fail(struct rcc_comm *comm, rcci_exec_t *x, rcc_result_t res, int i)
{
    const rcci_p2p_msg_t *m = &x->op->msgs[i];
    char peer[128];
    rcci_bootstrap_peer_name(comm->bootstrap, m->peer, peer, sizeof peer);
    rcci_error_prefix(
        "%s of %zu bytes %s %s (message %u between them): ", m->is_send ? "send" : "receive",
        m->bytes, m->is_send ? "to" : "from", peer, x->st[i].seq);
    return res;
}

/* Messages to oneself pair up in order: the k-th send with the k-th receive. */
static rcc_result_t p2p_self(rcci_exec_t *x, int self)
{
    const rcci_op_t *op = x->op;
    for (int s = 0, r = 0;; s++, r++) {
        while (s < op->nmsgs && !(op->msgs[s].peer == self && op->msgs[s].is_send))
            s++;
        while (r < op->nmsgs && !(op->msgs[r].peer == self && !op->msgs[r].is_send))
            r++;
        if (s == op->nmsgs && r == op->nmsgs)
            return RCC_SUCCESS;
        if (s == op->nmsgs || r == op->nmsgs)
            return rcci_error(RCC_ERR_INVALID_USAGE,
                              "a %s to this rank itself has no matching %s in the same group",
                              s < op->nmsgs ? "send" : "receive",
                              s < op->nmsgs ? "receive" : "send");
        if (op->msgs[s].bytes != op->msgs[r].bytes)
            return rcci_error(
                RCC_ERR_INVALID_USAGE,
                "a send of %zu bytes to this rank itself meets a receive of %zu bytes",
                op->msgs[s].bytes, op->msgs[r].bytes);
        memcpy(op->msgs[r].buf, op->msgs[s].buf, op->msgs[s].bytes);
        x->st[s].state = x->st[r].state = P2P_DONE;
    }
}

rcc_result_t rcci_p2p_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **out)
{
    rcci_exec_t *x = calloc(1, sizeof *x);
    if (!x)
        return rcci_error(RCC_ERR_NO_MEMORY, "point-to-point state");
    *out = x;
    x->op = op;
    x->st = calloc((size_t)(op->nmsgs ? op->nmsgs : 1), sizeof *x->st);
    if (!x->st)
        return rcci_error(RCC_ERR_NO_MEMORY, "point-to-point state of %d messages", op->nmsgs);
    x->last_progress_ns = rcci_now_ns();
    for (int i = 0; i < op->nmsgs; i++) {
        const rcci_p2p_msg_t *m = &op->msgs[i];
        if (m->peer != comm->rank)
            x->st[i].seq = m->is_send ? comm->p2p.out_seq[m->peer]++ : comm->p2p.in_seq[m->peer]++;
    }
    return p2p_self(x, comm->rank);
}

/* The connection for message i, made now if it can be; NULL: not yet. */
static rcc_result_t p2p_conn(struct rcc_comm *comm, const rcci_p2p_msg_t *m, rcci_conn_t **out)
{
    rcci_p2p_links_t *p = &comm->p2p;
    rcci_conn_t **slot = m->is_send ? &p->out[m->peer] : &p->in[m->peer];
    rcc_result_t res = RCC_SUCCESS;
    *out = *slot;
    if (*slot)
        return RCC_SUCCESS;
    if (m->is_send) {
        /* Completes in the peer's backlog: bounded by the timeout, brief. */
        res = p->tr->connect(p->tctx, p->handles + (size_t)m->peer * RCCI_HANDLE_BYTES, P2P_TAG,
                             rcci_now_ns() + comm->timeout_ns, slot);
    } else {
        res = p->tr->accept(p->listener, m->peer, P2P_TAG, 0, slot);
        if (res == RCC_ERR_TIMEOUT) { /* the peer has not connected yet */
            comm->poll_ms = P2P_POLL_MS;
            return RCC_SUCCESS;
        }
    }
    if (res == RCC_SUCCESS)
        res = rcci_progress_watch(comm, p->tr->wait_fd(*slot));
    *out = *slot;
    return res;
}

rcc_result_t rcci_p2p_advance(struct rcc_comm *comm, rcci_exec_t *x, int *progressed, int *done)
{
    const rcci_op_t *op = x->op;
    rcci_p2p_links_t *p = &comm->p2p;
    *progressed = 0;
    *done = 1;
    for (int i = 0; i < op->nmsgs; i++) {
        const rcci_p2p_msg_t *m = &op->msgs[i];
        p2p_state_t *st = &x->st[i];
        rcc_result_t res = RCC_SUCCESS;
        /* Messages of one peer and direction are posted strictly in
         * sequence order, across operations too: the connection's queue
         * is the order the peer will see them in. */
        uint32_t *next = m->is_send ? &p->out_posted[m->peer] : &p->in_posted[m->peer];
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
    for (int i = 0; x->st && i < x->op->nmsgs; i++) {
        int complete;
        if (x->st[i].req)
            comm->p2p.tr->test(x->st[i].req, &complete);
    }
    rcci_tls_error_set(error);
    free(x->st);
    free(x);
}

void rcci_p2p_close(struct rcc_comm *comm)
{
    rcci_p2p_links_t *p = &comm->p2p;
    for (int r = 0; r < comm->nranks && p->out; r++) {
        if (p->out[r])
            p->tr->close(p->out[r]);
        if (p->in[r])
            p->tr->close(p->in[r]);
        p->out[r] = p->in[r] = NULL;
    }
}
