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
 *
 * The small-message allreduces run here too, as rounds of such messages on
 * a lane of their own whose connections carry both directions (the lower
 * rank connects): in an exchange each side's data then carries the
 * acknowledgement of the other's, halving the packets.
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
    const rcci_p2p_msg_t *msgs; /* the operation's, or the allreduce round's own */
    int nmsgs;
    p2p_state_t *st;
    int64_t last_progress_ns;
    /* Allreduce by rounds: when a round's messages are all done,
     * `round_done` reduces what came and sets up the next round's messages
     * in own_msgs, or returns 1 at the end. */
    const char *algo;
    int (*round_done)(const struct rcc_comm *comm, rcci_exec_t *x);
    int round;
    char *tmp; /* direct: every rank's input in rank order; rd: one input */
    rcci_p2p_msg_t *own_msgs;
    int rd_pof2, rd_rem, rd_vrank; /* recursive doubling (see rd_round_done) */
};

static rcc_result_t p2p_fail(struct rcc_comm *comm, rcci_exec_t *x, rcc_result_t res, int i)
{
    const rcci_p2p_msg_t *m = &x->msgs[i];
    char peer[128];
    rcci_bootstrap_peer_name(comm->bootstrap, m->peer, peer, sizeof peer);
    rcci_error_prefix("%s%s%s of %zu bytes %s %s (message %u between them): ",
                      x->algo ? x->algo : "", x->algo ? ": " : "", m->is_send ? "send" : "receive",
                      m->bytes, m->is_send ? "to" : "from", peer, x->st[i].seq);
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
static void p2p_number(struct rcc_comm *comm, rcci_exec_t *x)
{
    for (int i = 0; i < x->nmsgs; i++) {
        const rcci_p2p_msg_t *m = &x->msgs[i];
        rcci_p2p_lane_t *lane = &comm->p2p.lane[m->lane];
        x->st[i] = (p2p_state_t){NULL, 0, P2P_WAITING};
        if (m->peer != comm->rank)
            x->st[i].seq = m->is_send ? lane->out_seq[m->peer]++ : lane->in_seq[m->peer]++;
    }
}

static rcc_result_t p2p_begin(struct rcc_comm *comm, rcci_exec_t *x, int max_msgs)
{
    x->st = calloc((size_t)(max_msgs ? max_msgs : 1), sizeof *x->st);
    if (!x->st)
        return rcci_error(RCC_ERR_NO_MEMORY, "point-to-point state of %d messages", max_msgs);
    x->last_progress_ns = rcci_now_ns();
    p2p_number(comm, x);
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
    return p2p_begin(comm, x, x->nmsgs);
}

rcci_allreduce_algo_t rcci_allreduce_algo(const struct rcc_comm *comm, size_t bytes)
{
    const char *algo = rcci_param_str(RCCI_PARAM_ALGO);
    if (comm->nranks < 2 || !strcmp(algo, "ring"))
        return RCCI_ALLREDUCE_RING;
    if (!strcmp(algo, "direct"))
        return RCCI_ALLREDUCE_DIRECT;
    if (!strcmp(algo, "rd"))
        return RCCI_ALLREDUCE_RD;
    return bytes <= (size_t)rcci_param_int(RCCI_PARAM_SMALL_MAX_BYTES) ? RCCI_ALLREDUCE_RD
                                                                       : RCCI_ALLREDUCE_RING;
}

static rcci_p2p_msg_t p2p_coll_msg(int peer, int is_send, const void *buf, size_t bytes)
{
    return (rcci_p2p_msg_t){peer, is_send, (char *)buf, bytes, RCCI_LANE_COLL};
}

/* Direct exchange, one round: every rank sends its input to every other,
 * then folds all inputs in rank order, the same on every rank. */
static int direct_round_done(const struct rcc_comm *comm, rcci_exec_t *x)
{
    const rcci_op_t *op = x->op;
    int n = comm->nranks;
    size_t bytes = op->count * rcc_datatype_size(op->dtype);
    char *acc = x->tmp; /* rank 0's block accumulates */
    for (int q = 1; q < n; q++)
        rcci_reduce(q == n - 1 ? (char *)op->recvbuf : acc, acc, x->tmp + (size_t)q * bytes,
                    op->count, op->dtype, op->redop, q == n - 1 && op->redop == RCC_AVG ? n : 1);
    return 1;
}

static rcc_result_t direct_start(struct rcc_comm *comm, rcci_exec_t *x, size_t bytes)
{
    int n = comm->nranks, r = comm->rank;
    x->algo = "allreduce (direct exchange)";
    x->round_done = direct_round_done;
    x->tmp = malloc((size_t)n * bytes);
    x->own_msgs = malloc(sizeof *x->own_msgs * 2 * (size_t)(n - 1));
    if (!x->tmp || !x->own_msgs)
        return rcci_error(RCC_ERR_NO_MEMORY, "direct allreduce of %zu bytes on %d ranks", bytes, n);
    memcpy(x->tmp + (size_t)r * bytes, x->op->sendbuf, bytes);
    int k = 0;
    for (int step = 1; step < n; step++) { /* rank r+1 first, so that sends spread out */
        int q = (r + step) % n;
        x->own_msgs[k++] = p2p_coll_msg(q, 1, x->tmp + (size_t)r * bytes, bytes);
        x->own_msgs[k++] = p2p_coll_msg(q, 0, x->tmp + (size_t)q * bytes, bytes);
    }
    x->msgs = x->own_msgs;
    x->nmsgs = k;
    return p2p_begin(comm, x, k);
}

/*
 * Recursive doubling: log2(p) rounds of pairwise exchange among p = the
 * largest power of two <= n ranks, each rank sending one message per round.
 * With rem = n - p, the first 2*rem ranks pair up first: each even one
 * hands its input to the odd one above it, and gets the result back after
 * the last round. Rank r's place among the p is its vrank.
 *
 * Every reduction puts the lower vrank's operand first, so both sides of a
 * pair compute the same bits (MAX/MIN/NaN payloads are not commutative),
 * and so all ranks end with identical results.
 */
static int rd_real_rank(const rcci_exec_t *x, int vrank)
{
    return vrank < x->rd_rem ? 2 * vrank + 1 : vrank + x->rd_rem;
}

/* Sets up round x->round's messages; 1 when there are none left. */
static int rd_plan(const struct rcc_comm *comm, rcci_exec_t *x)
{
    const rcci_op_t *op = x->op;
    size_t bytes = op->count * rcc_datatype_size(op->dtype);
    int r = comm->rank, rounds = 0;
    for (int m = 1; m < x->rd_pof2; m <<= 1)
        rounds++;
    /* Round 0: the fold; rounds 1..rounds: the doubling; then the unfold. */
    int k = 0;
    if (x->round == 0) {
        if (r < 2 * x->rd_rem)
            x->own_msgs[k++] = r % 2 ? p2p_coll_msg(r - 1, 0, x->tmp, bytes)
                                     : p2p_coll_msg(r + 1, 1, op->sendbuf, bytes);
    } else if (x->round <= rounds) {
        if (x->rd_vrank >= 0) {
            int partner = rd_real_rank(x, x->rd_vrank ^ (1 << (x->round - 1)));
            x->own_msgs[k++] = p2p_coll_msg(partner, 1, op->recvbuf, bytes);
            x->own_msgs[k++] = p2p_coll_msg(partner, 0, x->tmp, bytes);
        }
    } else if (x->round == rounds + 1) {
        if (r < 2 * x->rd_rem)
            x->own_msgs[k++] = r % 2 ? p2p_coll_msg(r - 1, 1, op->recvbuf, bytes)
                                     : p2p_coll_msg(r + 1, 0, op->recvbuf, bytes);
    } else {
        return 1;
    }
    x->nmsgs = k;
    return 0;
}

static int rd_round_done(const struct rcc_comm *comm, rcci_exec_t *x)
{
    const rcci_op_t *op = x->op;
    int rounds = 0;
    for (int m = 1; m < x->rd_pof2; m <<= 1)
        rounds++;
    char *acc = op->recvbuf;
    int last = x->round == rounds; /* the doubling's last round completes the sum */
    int divisor = last && op->redop == RCC_AVG ? comm->nranks : 1;
    if (x->round == 0 && x->nmsgs == 1 && comm->rank % 2) /* fold: the even rank is vrank-lower */
        rcci_reduce(acc, x->tmp, op->sendbuf, op->count, op->dtype, op->redop, 1);
    else if (x->round == 0 && comm->rank >= 2 * x->rd_rem && op->sendbuf != op->recvbuf)
        memcpy(acc, op->sendbuf, op->count * rcc_datatype_size(op->dtype));
    if (x->round >= 1 && x->round <= rounds && x->rd_vrank >= 0) {
        int mine_first = x->rd_vrank < (x->rd_vrank ^ (1 << (x->round - 1)));
        rcci_reduce(acc, mine_first ? acc : x->tmp, mine_first ? x->tmp : acc, op->count, op->dtype,
                    op->redop, divisor);
    }
    x->round++;
    return rd_plan(comm, x);
}

static rcc_result_t rd_start(struct rcc_comm *comm, rcci_exec_t *x, size_t bytes)
{
    int n = comm->nranks, r = comm->rank;
    x->algo = "allreduce (recursive doubling)";
    x->round_done = rd_round_done;
    x->rd_pof2 = 1;
    while (2 * x->rd_pof2 <= n)
        x->rd_pof2 *= 2;
    x->rd_rem = n - x->rd_pof2;
    x->rd_vrank = r < 2 * x->rd_rem ? (r % 2 ? r / 2 : -1) : r - x->rd_rem;
    x->tmp = malloc(bytes);
    x->own_msgs = malloc(sizeof *x->own_msgs * 2);
    if (!x->tmp || !x->own_msgs)
        return rcci_error(RCC_ERR_NO_MEMORY, "allreduce of %zu bytes: receive buffer", bytes);
    x->round = 0;
    rd_plan(comm, x);
    x->msgs = x->own_msgs;
    return p2p_begin(comm, x, 2);
}

rcc_result_t rcci_small_allreduce_start(struct rcc_comm *comm, rcci_op_t *op,
                                        rcci_allreduce_algo_t algo, rcci_exec_t **out)
{
    rcci_exec_t *x = calloc(1, sizeof *x);
    if (!x)
        return rcci_error(RCC_ERR_NO_MEMORY, "allreduce state");
    *out = x;
    x->op = op;
    size_t bytes = op->count * rcc_datatype_size(op->dtype);
    return algo == RCCI_ALLREDUCE_DIRECT ? direct_start(comm, x, bytes) : rd_start(comm, x, bytes);
}

/* The collectives' lane carries both directions on one connection. */
static int p2p_lane_shared(int lane) { return lane == RCCI_LANE_COLL; }

/* Whether the ring neighbours are still there. A rank that fails closes
 * its links, so a loss anywhere reaches every rank around the ring: this is
 * how a rank waiting for a peer that never connects learns that the job
 * has broken. */
static rcc_result_t p2p_ring_alive(struct rcc_comm *comm)
{
    rcci_link_t *links[2] = {&comm->send_link, &comm->recv_link};
    for (int i = 0; i < 2; i++) {
        if (links[i]->conn && links[i]->tr->probe(links[i]->conn) != RCC_SUCCESS) {
            char peer[128];
            rcci_bootstrap_peer_name(comm->bootstrap, links[i]->peer, peer, sizeof peer);
            return rcci_error(RCC_ERR_PEER_LOST,
                              "%s closed its ring connection (it failed, or saw a failure)", peer);
        }
    }
    return RCC_SUCCESS;
}

/* The connection for message i, made now if it can be; NULL: not yet. */
static rcc_result_t p2p_conn(struct rcc_comm *comm, const rcci_p2p_msg_t *m, rcci_conn_t **out)
{
    rcci_p2p_links_t *p = &comm->p2p;
    rcci_p2p_lane_t *lane = &p->lane[m->lane];
    int shared = p2p_lane_shared(m->lane);
    rcci_conn_t **slot = m->is_send || shared ? &lane->out[m->peer] : &lane->in[m->peer];
    uint32_t tag = P2P_TAG + (uint32_t)m->lane;
    rcc_result_t res = RCC_SUCCESS;
    *out = *slot;
    if (*slot)
        return RCC_SUCCESS;
    if (shared ? comm->rank < m->peer : m->is_send) {
        /* Completes in the peer's backlog: bounded by the timeout, brief. */
        res = p->tr->connect(p->tctx, p->handles + (size_t)m->peer * RCCI_HANDLE_BYTES, tag,
                             rcci_now_ns() + comm->timeout_ns, slot);
    } else {
        res = p->tr->accept(p->listener, m->peer, tag, 0, slot);
        if (res == RCC_ERR_TIMEOUT) { /* the peer has not connected yet: is it still there? */
            comm->poll_ms = P2P_POLL_MS;
            if (shared)
                return p2p_ring_alive(comm);
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
    if (res == RCC_SUCCESS && shared)
        lane->in[m->peer] = *slot;
    *out = *slot;
    return res;
}

rcc_result_t rcci_p2p_advance(struct rcc_comm *comm, rcci_exec_t *x, int *progressed, int *done)
{
    rcci_p2p_links_t *p = &comm->p2p;
    *progressed = 0;
again:
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
    if (*done && x->round_done && !x->round_done(comm, x)) {
        p2p_number(comm, x); /* the next round starts at once */
        *progressed = 1;
        goto again;
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
    for (int i = 0; x->st && i < x->nmsgs; i++) {
        int complete;
        if (x->st[i].req)
            comm->p2p.tr->test(x->st[i].req, &complete);
    }
    rcci_tls_error_set(error);
    free(x->st);
    free(x->tmp);
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
            if (lane->in[r] && lane->in[r] != lane->out[r])
                p->tr->close(lane->in[r]);
            lane->out[r] = lane->in[r] = NULL;
        }
    }
}
