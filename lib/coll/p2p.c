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
 * Algorithms made of rounds of exchanges (the small and mid-sized
 * allreduces, coll/allreduce_rounds.c) run here too, on a lane of their own
 * whose connections carry both directions (the lower rank connects): in an
 * exchange each side's data then carries the acknowledgement of the other's,
 * halving the packets.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_P2P /* log.h: the subsystem of this file's lines */
#include "clock.h"
#include "comm.h"
#include "log.h"
#include "memreg.h"
#include "params.h"
#include "reduce.h"

#define P2P_TAG 1     /* connection tag of lane 0; lane l uses P2P_TAG + l (the ring uses 0) */
#define P2P_POLL_MS 1 /* how often pending accepts are looked at */
#define P2P_GRACE_NS (1000ll * 1000000) /* see p2p_conn */
#define P2P_SWEEP_NS (200ll * 1000000)  /* see rcci_p2p_sweep_listener */

enum { P2P_WAITING, P2P_POSTED, P2P_DONE };

typedef struct {
    rcci_request_t *req;
    uint32_t seq;
    int state;
    int64_t posted_ns; /* for RCC_TIMELINE */
} p2p_state_t;

struct rcci_exec {
    rcci_op_t *op;
    const rcci_p2p_msg_t *msgs; /* the operation's, or the allreduce round's own */
    int nmsgs;
    p2p_state_t *st;
    int64_t last_progress_ns;
    /* An algorithm run as rounds (rcci_p2p_rounds_start). */
    const char *algo;
    rcci_round_fn next_round;
    void *state;
    rcci_p2p_msg_t *own_msgs;
    rcci_memreg_held_t held; /* registered memory its sends go from (memreg.h) */
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

/* The next number of message m per lane, peer and direction. */
static uint32_t p2p_next_seq(struct rcc_comm *comm, const rcci_p2p_msg_t *m)
{
    rcci_p2p_lane_t *lane = &comm->p2p.lane[m->lane];
    return m->is_send ? lane->out_seq[m->peer]++ : lane->in_seq[m->peer]++;
}

void rcci_p2p_number(struct rcc_comm *comm, rcci_op_t *op)
{
    if (op->p2p_numbered)
        return;
    for (int i = 0; i < op->nmsgs; i++)
        if (op->msgs[i].peer != comm->rank)
            op->msgs[i].seq = p2p_next_seq(comm, &op->msgs[i]);
    op->p2p_numbered = 1;
}

/* Numbers the messages per lane, peer and direction, in order (or takes
 * the numbers rcci_p2p_number took). */
static void p2p_number(struct rcc_comm *comm, rcci_exec_t *x)
{
    int ahead = !x->algo && x->op->p2p_numbered && x->msgs == x->op->msgs;
    for (int i = 0; i < x->nmsgs; i++) {
        const rcci_p2p_msg_t *m = &x->msgs[i];
        x->st[i] = (p2p_state_t){NULL, 0, P2P_WAITING, 0};
        if (m->peer != comm->rank)
            x->st[i].seq = ahead ? m->seq : p2p_next_seq(comm, m);
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

rcc_result_t rcci_p2p_rounds_start(struct rcc_comm *comm, rcci_op_t *op, const char *name,
                                   rcci_round_fn next, void *state, int max_msgs, rcci_exec_t **out)
{
    rcci_exec_t *x = calloc(1, sizeof *x);
    rcci_p2p_msg_t *msgs = calloc((size_t)max_msgs, sizeof *msgs);
    if (!x || !msgs) {
        free(x), free(msgs), free(state);
        return rcci_error(RCC_ERR_NO_MEMORY, "%s: state", name);
    }
    *out = x;
    x->op = op;
    x->algo = name;
    x->next_round = next;
    x->state = state;
    x->own_msgs = msgs;
    x->msgs = msgs;
    if (next(comm, state, msgs, &x->nmsgs)) /* over before it began */
        x->next_round = NULL;
    return p2p_begin(comm, x, max_msgs);
}

/* A message's tag: a collective's (rounds) or a send/recv/alltoall's. */
static void p2p_tag(const rcci_exec_t *x, const rcci_p2p_msg_t *m, uint32_t seq, rcci_tag_t *tag)
{
    if (x->algo) {
        rcci_op_tag(x->op, seq, tag);
        return;
    }
    rcci_sig_t sig = {.seq = m->alltoall ? x->op->seq + (uint32_t)m->alltoall - 1 : 0,
                      .kind = m->alltoall ? RCCI_SIG_ALLTOALL : RCCI_SIG_SENDRECV,
                      .count = m->bytes};
    tag->seq = seq;
    rcci_sig_encode(&sig, tag->sig);
}

/* The collectives' lane carries both directions on one connection. */
static int p2p_lane_shared(int lane) { return lane == RCCI_LANE_COLL; }

/* Whether the ring neighbours are still there. A rank that fails closes
 * its links, so a loss anywhere reaches every rank around the ring: this is
 * how a rank waiting for a peer that never connects learns that the job
 * has broken. */
static rcc_result_t p2p_ring_alive(struct rcc_comm *comm) { return rcci_ring_probe(comm, 0); }

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
        /* Returns before the peer answers where it must (ibverbs): a peer
         * that is stopped then shows as a stall, like any other wait. */
        res = p->tr->connect_start(p->tctx, p->handles + (size_t)m->peer * RCCI_HANDLE_BYTES,
                                   tag, rcci_now_ns() + comm->timeout_ns, slot);
    } else {
        res = p->tr->accept(p->listener, m->peer, tag, 0, slot);
        if (res == RCC_ERR_TIMEOUT) { /* the peer has not connected yet: is it still there? */
            rcci_poll_within(comm, P2P_POLL_MS * 1000);
            if (shared)
                return p2p_ring_alive(comm);
            rcc_result_t alive =
                lane->out[m->peer] ? p->tr->probe(lane->out[m->peer]) : RCC_SUCCESS;
            if (alive == RCC_SUCCESS)
                return RCC_SUCCESS;
            if (alive != RCC_ERR_PEER_LOST)
                return alive; /* the peer's failure notice: its cause, as it was */
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
                rcci_tag_t tag;
                p2p_tag(x, m, st->seq, &tag);
                res = m->is_send ? p->tr->isend(conn, m->buf, m->bytes, &tag,
                                                rcci_memreg_send_mr(comm, &x->held, p->tr, m->buf,
                                                                    m->bytes),
                                                &st->req)
                                 : p->tr->irecv(conn, m->buf, m->bytes, &tag, NULL, &st->req);
                if (res == RCC_SUCCESS)
                    st->state = P2P_POSTED, (*next)++, *progressed = 1;
                st->posted_ns = rcci_tl_now(comm->tl);
            }
        }
        if (res == RCC_SUCCESS && st->state == P2P_POSTED) {
            int complete;
            res = p->tr->test(st->req, &complete);
            if (res != RCC_SUCCESS)
                st->req = NULL;
            else if (complete) {
                st->state = P2P_DONE, st->req = NULL, *progressed = 1;
                RCCI_TL(comm,
                        rcci_tl_msg(comm->tl, m->is_send ? RCCI_TL_P2P_SEND : RCCI_TL_P2P_RECV,
                                    st->posted_ns, m->peer, m->bytes, st->seq));
            }
        }
        if (res != RCC_SUCCESS)
            return p2p_fail(comm, x, res, i);
        if (st->state != P2P_DONE)
            *done = 0;
    }
    if (*done && x->next_round && !x->next_round(comm, x->state, x->own_msgs, &x->nmsgs)) {
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
                                      "post the matching call, stalled, or is cut off)",
                                      comm->timeout_ns / 1e9);
        return p2p_fail(comm, x, res, i);
    }
    return RCC_SUCCESS;
}

void rcci_p2p_finish(struct rcc_comm *comm, rcci_exec_t *x)
{
    if (!x)
        return;
    /* The failure being reported stays the story (copied by hand: snprintf
     * here was a visible share of a small allreduce's CPU). */
    char error[RCCI_ERR_TEXT_BYTES];
    const char *now = rcci_tls_error();
    size_t len = strnlen(now, sizeof error - 1);
    memcpy(error, now, len);
    error[len] = 0;
    for (int i = 0; x->st && i < x->nmsgs; i++) {
        int complete;
        if (x->st[i].req)
            comm->p2p.tr->test(x->st[i].req, &complete);
    }
    if (strcmp(rcci_tls_error(), error) != 0)
        rcci_tls_error_set(error);
    rcci_memreg_drop(comm, &x->held);
    free(x->st);
    free(x->state);
    free(x->own_msgs);
    free(x);
}

static void p2p_accept_waiting(struct rcc_comm *comm);

rcc_result_t rcci_p2p_ctrl_conn(struct rcc_comm *comm, int peer, rcci_conn_t **conn)
{
    rcci_p2p_msg_t m = {.peer = peer, .is_send = 1, .lane = RCCI_LANE_CTRL};
    return p2p_conn(comm, &m, conn);
}

void rcci_p2p_accept_waiting(struct rcc_comm *comm)
{
    char text[RCCI_ERR_TEXT_BYTES], cause[RCCI_ERR_TEXT_BYTES];
    snprintf(text, sizeof text, "%s", rcci_tls_error());
    snprintf(cause, sizeof cause, "%s", rcci_tls_cause());
    p2p_accept_waiting(comm);
    rcci_tls_error_restore(text, cause);
}

static void p2p_accept_waiting(struct rcc_comm *comm)
{
    rcci_p2p_links_t *p = &comm->p2p;
    for (int l = 0; l < RCCI_P2P_LANES && p->listener; l++) {
        rcci_p2p_lane_t *lane = &p->lane[l];
        int shared = p2p_lane_shared(l);
        for (int r = 0; r < comm->nranks && lane->in; r++) {
            if (r == comm->rank || lane->in[r] || (shared && comm->rank < r))
                continue; /* there, or this rank's to make */
            rcci_conn_t *conn = NULL;
            if (p->tr->accept(p->listener, r, P2P_TAG + (uint32_t)l, 0, &conn) != RCC_SUCCESS)
                continue;
            if (rcci_progress_watch(comm, p->tr->wait_fd(conn)) != RCC_SUCCESS) {
                p->tr->close(conn);
                continue;
            }
            lane->in[r] = conn;
            if (shared)
                lane->out[r] = conn;
        }
    }
}

/* The distinct connections with peer r on a lane: out, and in when it is
 * another (the collectives' lane shares one for both directions). */
static void p2p_conns(const rcci_p2p_lane_t *lane, int r, rcci_conn_t *conns[2])
{
    conns[0] = lane->out[r];
    conns[1] = lane->in[r] != lane->out[r] ? lane->in[r] : NULL;
}

int rcci_peer_said_goodbye(struct rcc_comm *comm, int r)
{
    if (rcci_ring_peer_said_goodbye(comm, r))
        return 1;
    rcci_p2p_links_t *p = &comm->p2p;
    for (int l = 0; l < RCCI_P2P_LANES; l++) {
        rcci_p2p_lane_t *lane = &p->lane[l];
        rcci_conn_t *conns[2];
        if (!lane->out)
            continue;
        p2p_conns(lane, r, conns);
        for (int i = 0; i < 2; i++)
            if (conns[i] && rcci_conn_said_goodbye(p->tr, conns[i]))
                return 1;
    }
    return 0;
}

/* The first failure a probe of the point-to-point connections finds; with
 * notices_only, the first that is not a plain loss (a peer's notice). */
static rcc_result_t p2p_probe_all(struct rcc_comm *comm, int notices_only)
{
    rcci_p2p_links_t *p = &comm->p2p;
    for (int l = 0; l < RCCI_P2P_LANES; l++) {
        rcci_p2p_lane_t *lane = &p->lane[l];
        for (int r = 0; r < comm->nranks && lane->out; r++) {
            rcci_conn_t *conns[2];
            p2p_conns(lane, r, conns);
            for (int i = 0; i < 2; i++) {
                rcc_result_t res = !conns[i]      ? RCC_SUCCESS
                                   : notices_only ? rcci_conn_notice(p->tr, conns[i])
                                                  : p->tr->probe(conns[i]);
                /* The peer's other connections only in the full (idle) probe:
                 * their peeks take announcements watch.c wants otherwise. */
                if (res == RCC_SUCCESS || (notices_only ? rcci_conn_said_goodbye(p->tr, conns[i])
                                                        : rcci_peer_said_goodbye(comm, r)))
                    continue;
                char peer[128];
                rcci_bootstrap_peer_name(comm->bootstrap, r, peer, sizeof peer);
                rcci_error_prefix("connection with %s: ", peer);
                return res;
            }
        }
    }
    return RCC_SUCCESS;
}

rcc_result_t rcci_p2p_probe(struct rcc_comm *comm) { return p2p_probe_all(comm, 0); }

rcc_result_t rcci_p2p_find_notice(struct rcc_comm *comm) { return p2p_probe_all(comm, 1); }

void rcci_p2p_notify(struct rcc_comm *comm, rcc_result_t res, const char *text)
{
    rcci_p2p_links_t *p = &comm->p2p;
    for (int l = 0; l < RCCI_P2P_LANES; l++) {
        rcci_p2p_lane_t *lane = &p->lane[l];
        for (int r = 0; r < comm->nranks && lane->out; r++) {
            rcci_conn_t *conns[2];
            p2p_conns(lane, r, conns);
            for (int i = 0; i < 2; i++)
                if (conns[i])
                    p->tr->notify(conns[i], res, text);
        }
    }
}

void rcci_p2p_close(struct rcc_comm *comm)
{
    rcci_p2p_links_t *p = &comm->p2p;
    for (int l = 0; l < RCCI_P2P_LANES; l++) {
        rcci_p2p_lane_t *lane = &p->lane[l];
        for (int r = 0; r < comm->nranks && lane->out; r++) {
            rcci_conn_t *conns[2];
            p2p_conns(lane, r, conns);
            for (int i = 0; i < 2; i++)
                if (conns[i])
                    p->tr->close(conns[i]);
            lane->out[r] = lane->in[r] = NULL;
        }
    }
}

void rcci_p2p_waiting_for(struct rcc_comm *comm, rcci_exec_t *x, char *buf, size_t size)
{
    size_t n = 0;
    int listed = 0;
    buf[0] = '\0';
    for (int i = 0; i < x->nmsgs && n + 1 < size; i++) {
        const rcci_p2p_msg_t *m = &x->msgs[i];
        if (x->st[i].state == P2P_DONE)
            continue;
        if (listed++ == 8) {
            snprintf(buf + n, size - n, ", ...");
            break;
        }
        char peer[128];
        rcci_bootstrap_peer_name(comm->bootstrap, m->peer, peer, sizeof peer);
        int k = snprintf(buf + n, size - n, "%s%s (%s of %zu bytes%s)", n ? ", " : "", peer,
                         m->is_send ? "send" : "receive", m->bytes,
                         x->st[i].state == P2P_WAITING ? ", not started" : "");
        n += k > 0 ? (size_t)k : 0;
    }
}

void rcci_p2p_sweep_listener(struct rcc_comm *comm)
{
    rcci_p2p_links_t *p = &comm->p2p;
    int64_t now = rcci_now_ns();
    if (!p->listener || now - p->swept_ns < P2P_SWEEP_NS)
        return;
    p->swept_ns = now;
    p->tr->sweep_listener(p->listener);
}

void rcci_p2p_sweep_listener_now(struct rcc_comm *comm)
{
    comm->p2p.swept_ns = 0;
    rcci_p2p_sweep_listener(comm);
}

int rcci_p2p_listener_fd(const struct rcc_comm *comm)
{
    const rcci_p2p_links_t *p = &comm->p2p;
    return p->listener ? p->tr->listener_fd(p->listener) : -1;
}
