/*
 * What a waiting operation looks at besides its own messages: data that
 * peers sent on connections nobody is reading (a peer in another
 * collective: fail at once with both calls named, instead of waiting out
 * the timeout), and how long it has waited (RCC_STALL_WARN: say which
 * peers it waits for, as Horovod's stall inspector does).
 *
 * Ranks in different collectives need not send each other anything (a
 * reduce's ring and a recursive doubling's pairs can wait for each other
 * in a circle without a byte moving), so a rank stalled for a moment
 * announces the operation it waits in to its ring neighbours on the
 * control lane; a neighbour waiting in the same-numbered operation under
 * another signature names the mismatch. Where all agree, nothing happens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_COLL /* log.h: the subsystem of this file's lines */
#include "comm.h"
#include "log.h"
#include "params.h"

#define WATCH_AFTER_NS (50ll * 1000000)     /* idle this long before looking */
#define WATCH_EVERY_NS (100ll * 1000000)    /* and then at most this often */
#define ANNOUNCE_AFTER_NS (200ll * 1000000) /* stalled this long: tell the neighbours */

static void watch_our_tag(const rcci_op_t *op, rcci_tag_t *tag);

/* The signature of operation `seq` as this rank ended it, or NULL where the
 * history does not hold it (not ended yet, or too long ago). */
static const uint8_t *watch_history(const struct rcc_comm *comm, uint32_t seq)
{
    unsigned slot = seq % RCCI_FINISHED_SIGS;
    const uint8_t *done = comm->finished_sig[slot];
    return comm->finished_set[slot] && rcci_sig_seq(done) == seq ? done : NULL;
}

/* RCC_ERR_MISMATCH naming both calls: `peer`'s (`theirs`) and this rank's;
 * finished: theirs belongs to an operation this rank has already ended
 * (named from the history when it is still there; `ours` is the one
 * running now). */
static rcc_result_t watch_mismatch(const struct rcc_comm *comm, int peer, const uint8_t *theirs,
                                   const uint8_t *ours, int finished)
{
    char peer_name[128], their_call[160], our_call[160], done_call[160];
    rcci_bootstrap_peer_name(comm->bootstrap, peer, peer_name, sizeof peer_name);
    rcci_sig_describe(theirs, their_call, sizeof their_call);
    rcci_sig_describe(ours, our_call, sizeof our_call);
    if (!finished)
        return rcci_error(RCC_ERR_MISMATCH, "%s called %s while rank %d called %s", peer_name,
                          their_call, comm->rank, our_call);
    const uint8_t *done = watch_history(comm, rcci_sig_seq(theirs));
    if (done) {
        rcci_sig_describe(done, done_call, sizeof done_call);
        return rcci_error(RCC_ERR_MISMATCH,
                          "%s called %s while rank %d called %s (its part ended before the "
                          "difference showed; rank %d is now in %s)",
                          peer_name, their_call, comm->rank, done_call, comm->rank, our_call);
    }
    return rcci_error(RCC_ERR_MISMATCH,
                      "%s sent data of %s, which rank %d had already finished as a different "
                      "call; rank %d is now in %s",
                      peer_name, their_call, comm->rank, comm->rank, our_call);
}

void rcci_watch_finished(struct rcc_comm *comm, const rcci_op_t *op)
{
    if (op->coll == RCCI_COLL_P2P && !op->alltoalls)
        return; /* point-to-point operations are not numbered */
    rcci_tag_t tag;
    watch_our_tag(op, &tag);
    memcpy(comm->finished_sig[op->seq % RCCI_FINISHED_SIGS], tag.sig, RCCI_SIG_BYTES);
    comm->finished_set[op->seq % RCCI_FINISHED_SIGS] = 1;
}

/* The stray message on `conn` from `peer`, judged against collective `op`. */
static rcc_result_t watch_conn(struct rcc_comm *comm, const rcci_transport_t *tr, rcci_conn_t *conn,
                               int peer, const rcci_op_t *op, const rcci_tag_t *ours)
{
    rcci_tag_t theirs;
    int found = 0;
    rcc_result_t res = tr->peek(conn, &theirs, &found);
    /* A peer that closed a connection this operation does not read may
     * just have finished and left: whoever needs the connection will see
     * it. A failure notice, though, names a cause: it fails the operation. */
    if (res == RCC_ERR_UNSUPPORTED || res == RCC_ERR_PEER_LOST)
        return RCC_SUCCESS;
    if (res != RCC_SUCCESS || !found)
        return res;
    if (found == RCCI_PEEK_ANNOUNCE) { /* an announcement: judged against ours now and later */
        memcpy(comm->heard[peer], theirs.sig, RCCI_SIG_BYTES);
        comm->heard_valid[peer] = 1;
        return RCC_SUCCESS;
    }
    if (rcci_sig_kind(theirs.sig) == RCCI_SIG_SENDRECV)
        return RCC_SUCCESS; /* not numbered: may be received by a later call */
    uint32_t seq = rcci_sig_seq(theirs.sig);
    if (seq > op->seq || (seq == op->seq && !memcmp(theirs.sig, ours->sig, RCCI_SIG_BYTES)))
        return RCC_SUCCESS; /* ahead of us, or this operation's own, not posted yet */
    return watch_mismatch(comm, peer, theirs.sig, ours->sig, seq < op->seq);
}

/* The operation's tag as its messages carry it; of an alltoall (in a
 * point-to-point operation), the first one's. */
static void watch_our_tag(const rcci_op_t *op, rcci_tag_t *tag)
{
    if (op->coll != RCCI_COLL_P2P) {
        rcci_op_tag(op, 0, tag);
        return;
    }
    rcci_sig_t sig = {.seq = op->seq, .kind = RCCI_SIG_ALLTOALL};
    for (int i = 0; i < op->nmsgs; i++)
        if (op->msgs[i].alltoall == 1)
            sig.count = op->msgs[i].bytes;
    tag->seq = 0;
    rcci_sig_encode(&sig, tag->sig);
}

/* Tells the ring neighbours which operation this rank waits in. Failing
 * to reach one changes nothing here: a lost peer shows up on its own. */
static void watch_announce(struct rcc_comm *comm, const rcci_tag_t *ours)
{
    int n = comm->nranks;
    int peers[2] = {(comm->rank + 1) % n, (comm->rank + n - 1) % n};
    for (int i = 0; i < 2 && n > 1; i++) {
        if (i == 1 && peers[1] == peers[0])
            break;
        rcci_conn_t *conn = NULL;
        if (rcci_p2p_ctrl_conn(comm, peers[i], &conn) == RCC_SUCCESS && conn)
            comm->p2p.tr->announce(conn, ours);
    }
}

rcc_result_t rcci_watch_strays(struct rcc_comm *comm, const rcci_op_t *op, int64_t now,
                               int64_t idle_ns)
{
    if (!op || (op->coll == RCCI_COLL_P2P && !op->alltoalls) || idle_ns < WATCH_AFTER_NS ||
        now < comm->watch_next_ns)
        return RCC_SUCCESS;
    comm->watch_next_ns = now + WATCH_EVERY_NS;
    rcci_tag_t ours;
    watch_our_tag(op, &ours);
    if (!comm->heard) {
        comm->heard = calloc((size_t)comm->nranks, sizeof *comm->heard);
        comm->heard_valid = calloc((size_t)comm->nranks, 1);
        if (!comm->heard || !comm->heard_valid)
            return rcci_error(RCC_ERR_NO_MEMORY, "announcements of %d ranks", comm->nranks);
    }
    if (idle_ns >= ANNOUNCE_AFTER_NS && !op->announced) {
        ((rcci_op_t *)op)->announced = 1;
        watch_announce(comm, &ours);
    }
    rcci_p2p_accept_waiting(comm);
    for (int i = 0; i < RCCI_RING_LINKS; i++) {
        const rcci_link_t *link = rcci_ring_link(comm, i);
        for (int c = 0; c < link->nconns; c++) {
            if (!link->conns[c])
                continue;
            rcc_result_t res = watch_conn(comm, link->tr, link->conns[c], link->peer, op, &ours);
            if (res != RCC_SUCCESS)
                return res;
        }
    }
    rcci_p2p_links_t *p = &comm->p2p;
    for (int l = 0; l < RCCI_P2P_LANES && p->tr; l++) {
        rcci_p2p_lane_t *lane = &p->lane[l];
        for (int r = 0; r < comm->nranks && lane->in; r++) {
            if (!lane->in[r])
                continue;
            rcc_result_t res = watch_conn(comm, p->tr, lane->in[r], r, op, &ours);
            if (res != RCC_SUCCESS)
                return res;
        }
    }
    for (int r = 0; r < comm->nranks; r++) {
        if (!comm->heard_valid[r])
            continue;
        uint32_t seq = rcci_sig_seq(comm->heard[r]);
        if (seq == op->seq && memcmp(comm->heard[r], ours.sig, RCCI_SIG_BYTES))
            return watch_mismatch(comm, r, comm->heard[r], ours.sig, 0);
        /* A peer still waiting in an operation this rank has ended under
         * another signature (its part needed nothing from that peer: a
         * reduce's non-root whose sends went over another connection). */
        const uint8_t *done = watch_history(comm, seq);
        if (done && (int32_t)(seq - op->seq) < 0 && memcmp(comm->heard[r], done, RCCI_SIG_BYTES))
            return watch_mismatch(comm, r, comm->heard[r], ours.sig, 1);
    }
    return RCC_SUCCESS;
}

void rcci_watch_stall(struct rcc_comm *comm, const rcci_op_t *op, rcci_exec_t *exec, int64_t now)
{
    int64_t every = rcci_param_int(RCCI_PARAM_STALL_WARN) * 1000000000ll;
    rcci_op_t *w = (rcci_op_t *)op;
    if (every <= 0 || now - w->started_ns < every || now < w->stall_next_ns)
        return;
    w->stall_next_ns = now + every; /* repeats at most once per period */
    char waiting[512], call[160];
    rcci_exec_waiting_for(comm, op, exec, waiting, sizeof waiting);
    if (op->coll == RCCI_COLL_P2P) {
        snprintf(call, sizeof call, "point-to-point operation (%d messages)", op->nmsgs);
    } else {
        rcci_tag_t tag;
        rcci_op_tag(op, 0, &tag);
        rcci_sig_describe(tag.sig, call, sizeof call);
    }
    RCC_WARN("stalled: %s has waited %.0f s for %s (it fails after RCC_TIMEOUT=%lld s without "
             "progress)",
             call, (double)(now - w->started_ns) / 1e9, waiting,
             (long long)(comm->timeout_ns / 1000000000));
}
