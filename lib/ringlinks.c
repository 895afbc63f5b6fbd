/* The ring edges' connections, for what treats them all alike: the host
 * ring's and the device ring's (devring.c), receiving edges first. */
#include "comm.h"

#define RING_LINKS RCCI_RING_LINKS

rcci_link_t *rcci_ring_link(struct rcc_comm *comm, int i)
{
    rcci_link_t *links[RING_LINKS] = {&comm->recv_link, &comm->drecv_link, &comm->send_link,
                                      &comm->dsend_link};
    return links[i];
}

static int ring_link_receives(int i) { return i < 2; }

rcc_result_t rcci_conn_notice(const rcci_transport_t *tr, rcci_conn_t *conn)
{
    rcci_tag_t tag;
    int found = RCCI_PEEK_NONE;
    rcc_result_t res = tr->peek(conn, &tag, &found);
    if (res == RCC_ERR_PEER_LOST && found != RCCI_PEEK_NOTICE)
        return RCC_SUCCESS; /* a plain close says nothing more */
    return res;
}

int rcci_conn_said_goodbye(const rcci_transport_t *tr, rcci_conn_t *conn)
{
    rcci_tag_t tag;
    int found = RCCI_PEEK_NONE;
    tr->peek(conn, &tag, &found);
    return found == RCCI_PEEK_GOODBYE;
}

int rcci_ring_peer_said_goodbye(struct rcc_comm *comm, int r)
{
    for (int i = 0; i < RING_LINKS; i++) {
        rcci_link_t *link = rcci_ring_link(comm, i);
        for (int c = 0; c < link->nconns && link->peer == r; c++)
            if (link->conns[c] && rcci_conn_said_goodbye(link->tr, link->conns[c]))
                return 1;
    }
    return 0;
}

rcc_result_t rcci_ring_probe(struct rcc_comm *comm, int notices_only)
{
    for (int i = 0; i < RING_LINKS; i++) {
        rcci_link_t *link = rcci_ring_link(comm, i);
        for (int c = 0; c < link->nconns; c++) {
            if (!link->conns[c])
                continue;
            rcc_result_t res = notices_only ? rcci_conn_notice(link->tr, link->conns[c])
                                            : link->tr->probe(link->conns[c]);
            /* A neighbour that left cleanly fails only what needs it. Only the
             * full (idle) probe asks the peer's other connections, whose peeks
             * take announcements that watch.c wants while operations run. */
            if (res == RCC_SUCCESS ||
                (notices_only ? rcci_conn_said_goodbye(link->tr, link->conns[c])
                              : rcci_peer_said_goodbye(comm, link->peer)))
                continue;
            /* The probe's own text says whether the peer told why (its
             * notice names the cause) or just went: it stays. */
            char peer[128];
            rcci_bootstrap_peer_name(comm->bootstrap, link->peer, peer, sizeof peer);
            rcci_error_prefix("the %sring connection %s %s: ", i % 2 ? "device " : "",
                              ring_link_receives(i) ? "from" : "to", peer);
            return res;
        }
    }
    return RCC_SUCCESS;
}

void rcci_ring_notify(struct rcc_comm *comm, rcc_result_t res, const char *text)
{
    for (int i = 0; i < RING_LINKS; i++) {
        rcci_link_t *link = rcci_ring_link(comm, i);
        for (int c = 0; c < link->nconns; c++)
            if (link->conns[c])
                link->tr->notify(link->conns[c], res, text);
    }
}

void rcci_ring_close(struct rcc_comm *comm, int failing)
{
    for (int i = 0; i < RING_LINKS; i++) {
        rcci_link_t *link = rcci_ring_link(comm, i);
        int device = link == &comm->dsend_link || link == &comm->drecv_link;
        if (failing == 1 && device && comm->dev_pipeline == RCCI_DEVPIPE_RING) {
            for (int c = 0; c < link->nconns; c++)
                if (link->conns[c])
                    link->tr->queue_abort(link->conns[c]);
            continue;
        }
        if (failing == RCCI_RING_LEAVE_DEVICE && device && (link->tr->caps & RCCI_CAP_SAME_HOST)) {
            for (int c = 0; c < link->nconns; c++)
                link->conns[c] = NULL; /* left open, the peer's memory mapped */
            continue;
        }
        for (int c = 0; c < link->nconns; c++) {
            if (link->conns[c])
                link->tr->close(link->conns[c]);
            link->conns[c] = NULL;
        }
    }
}

rcc_result_t rcci_ring_watch(struct rcc_comm *comm)
{
    for (int i = 0; i < RING_LINKS; i++) {
        rcci_link_t *link = rcci_ring_link(comm, i);
        for (int c = 0; c < link->nconns; c++) {
            if (!link->conns[c])
                continue;
            rcc_result_t res = rcci_progress_watch(comm, link->tr->wait_fd(link->conns[c]));
            if (res != RCC_SUCCESS)
                return res;
        }
    }
    return RCC_SUCCESS;
}
