/* The verbs connection state machine: see connstate.h. */
#include "connstate.h"

#include "err.h"

#define IBC_NAME(name) #name,
static const char *const ibc_state_names[] = {RCCI_IBC_STATES(IBC_NAME)};
static const char *const ibc_event_names[] = {RCCI_IBC_EVENTS(IBC_NAME)};
static const char *const ibc_action_names[] = {RCCI_IBC_ACTIONS(IBC_NAME)};
#undef IBC_NAME

const char *rcci_ibc_state_name(rcci_ibc_state_t s)
{
    return s < RCCI_IBC_NSTATES ? ibc_state_names[s] : "?";
}
const char *rcci_ibc_event_name(rcci_ibc_event_t e)
{
    return e < RCCI_IBC_NEVENTS ? ibc_event_names[e] : "?";
}
const char *rcci_ibc_action_name(rcci_ibc_action_t a)
{
    return a < RCCI_IBC_NACTIONS ? ibc_action_names[a] : "?";
}

void rcci_ibc_init(rcci_ibc_t *c, int attempts)
{
    *c = (rcci_ibc_t){.state = RCCI_IBC_IDLE, .attempts_left = attempts > 1 ? attempts - 1 : 0};
}

static rcci_ibc_action_t ibc_go(rcci_ibc_t *c, rcci_ibc_state_t to, rcci_ibc_action_t act)
{
    c->state = to;
    return act;
}

/* Before READY on the active side: start over while attempts are left. */
static rcci_ibc_action_t ibc_setup_failed(rcci_ibc_t *c, rcci_ibc_event_t ev)
{
    if (ev != RCCI_IBC_EV_REJECTED && c->state != RCCI_IBC_ACCEPTING && c->attempts_left > 0) {
        c->attempts_left--;
        return ibc_go(c, RCCI_IBC_ADDR, RCCI_IBC_DO_RETRY);
    }
    return ibc_go(c, RCCI_IBC_FAILED, RCCI_IBC_DO_FAIL);
}

rcci_ibc_action_t rcci_ibc_step(rcci_ibc_t *c, rcci_ibc_event_t ev)
{
    rcci_ibc_state_t s = c->state;
    c->from = s;
    c->last_event = ev;
    int setup = s == RCCI_IBC_ADDR || s == RCCI_IBC_ROUTE || s == RCCI_IBC_CONNECTING ||
                s == RCCI_IBC_ACCEPTING;
    switch (ev) {
    case RCCI_IBC_EV_CLOSE: /* always allowed: what is left to undo depends on the state */
        if (s == RCCI_IBC_CLOSED)
            return RCCI_IBC_DO_NONE;
        return ibc_go(c, RCCI_IBC_CLOSED,
                      s == RCCI_IBC_READY || s == RCCI_IBC_PEER_CLOSED ? RCCI_IBC_DO_DISCONNECT
                                                                       : RCCI_IBC_DO_DESTROY);
    case RCCI_IBC_EV_CONNECT:
        if (s == RCCI_IBC_IDLE)
            return ibc_go(c, RCCI_IBC_ADDR, RCCI_IBC_DO_RESOLVE_ADDR);
        break;
    case RCCI_IBC_EV_REQUEST:
        if (s == RCCI_IBC_IDLE)
            return ibc_go(c, RCCI_IBC_ACCEPTING, RCCI_IBC_DO_ACCEPT);
        break;
    case RCCI_IBC_EV_ADDR_RESOLVED:
        if (s == RCCI_IBC_ADDR)
            return ibc_go(c, RCCI_IBC_ROUTE, RCCI_IBC_DO_RESOLVE_ROUTE);
        break;
    case RCCI_IBC_EV_ROUTE_RESOLVED:
        if (s == RCCI_IBC_ROUTE)
            return ibc_go(c, RCCI_IBC_CONNECTING, RCCI_IBC_DO_CONNECT);
        break;
    case RCCI_IBC_EV_ESTABLISHED:
        if (s == RCCI_IBC_CONNECTING || s == RCCI_IBC_ACCEPTING)
            return ibc_go(c, RCCI_IBC_READY, RCCI_IBC_DO_NONE);
        break;
    case RCCI_IBC_EV_REJECTED:
    case RCCI_IBC_EV_UNREACHABLE:
        if (setup)
            return ibc_setup_failed(c, ev);
        break;
    case RCCI_IBC_EV_ERROR:
        if (setup)
            return ibc_setup_failed(c, ev);
        if (s == RCCI_IBC_READY)
            return ibc_go(c, RCCI_IBC_FAILED, RCCI_IBC_DO_FAIL);
        if (s == RCCI_IBC_PEER_CLOSED || s == RCCI_IBC_FAILED || s == RCCI_IBC_CLOSED)
            return RCCI_IBC_DO_NONE; /* flushed requests of a connection already down */
        break;
    case RCCI_IBC_EV_DISCONNECTED:
    case RCCI_IBC_EV_PEER_CLOSE:
        if (s == RCCI_IBC_READY)
            return ibc_go(c, RCCI_IBC_PEER_CLOSED, RCCI_IBC_DO_NONE);
        if (s == RCCI_IBC_PEER_CLOSED || s == RCCI_IBC_FAILED || s == RCCI_IBC_CLOSED)
            return RCCI_IBC_DO_NONE; /* the close's second sign, or one after ours */
        if (s == RCCI_IBC_ACCEPTING || s == RCCI_IBC_CONNECTING)
            return ibc_go(c, RCCI_IBC_FAILED, RCCI_IBC_DO_FAIL);
        break;
    case RCCI_IBC_EV_DEADLINE:
        if (setup || s == RCCI_IBC_IDLE)
            return ibc_go(c, RCCI_IBC_FAILED, RCCI_IBC_DO_FAIL);
        return RCCI_IBC_DO_NONE; /* set-up is over: the deadline means nothing now */
    case RCCI_IBC_NEVENTS: break;
    }
    if (s == RCCI_IBC_CLOSED)
        return RCCI_IBC_DO_NONE; /* late events of a closed connection */
    c->illegal = 1;
    return ibc_go(c, RCCI_IBC_FAILED, RCCI_IBC_DO_FAIL);
}

rcc_result_t rcci_ibc_error(const rcci_ibc_t *c, const char *peer)
{
    const char *ev = rcci_ibc_event_name(c->last_event), *from = rcci_ibc_state_name(c->from);
    if (c->illegal)
        return rcci_error(RCC_ERR_REMOTE, "connection to %s: event %s in state %s", peer, ev, from);
    switch (c->last_event) {
    case RCCI_IBC_EV_DEADLINE:
        return rcci_error(RCC_ERR_TIMEOUT, "connection to %s timed out in state %s", peer, from);
    case RCCI_IBC_EV_REJECTED:
        /* rdma_cm rejects a request for a port nobody listens on, as TCP
         * refuses: most often the rank left or died. */
        return rcci_error(RCC_ERR_PEER_LOST,
                          "%s rejected the connection (it no longer listens: the rank left or "
                          "died; or it refused this rank)",
                          peer);
    case RCCI_IBC_EV_PEER_CLOSE:
        return rcci_error(RCC_ERR_PEER_LOST, "%s closed the connection", peer);
    case RCCI_IBC_EV_DISCONNECTED:
        return rcci_error(RCC_ERR_PEER_LOST, "%s disconnected (state %s)", peer, from);
    default:
        return rcci_error(RCC_ERR_PEER_LOST, "connection to %s failed: %s in state %s", peer, ev,
                          from);
    }
}
