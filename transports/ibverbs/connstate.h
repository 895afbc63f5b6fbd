/*
 * The life of one verbs connection as a state machine, without verbs
 * calls: ibverbs.c feeds it what rdma_cm and the completion queue report
 * and carries out the action it returns. Every (state, event) pair has a
 * defined outcome; a pair the table does not list is a broken peer or a
 * bug and fails the connection (tests/unit/test_ibproto.c walks them all).
 *
 *   active:  IDLE -connect-> ADDR -addr resolved-> ROUTE -route resolved->
 *            CONNECTING -established-> READY
 *   passive: IDLE -request (hello checked, accept sent)-> ACCEPTING
 *            -established-> READY
 *   READY -peer's CLOSE or disconnect-> PEER_CLOSED; any -close-> CLOSED
 *
 * Reconnect: an unreachable peer or an address/route/connect error before
 * READY starts the active side over (RETRY: new cm id, resolve again) while
 * attempts are left; a rejection does not (the peer refused us).
 */
#ifndef RINGCC_IBVERBS_CONNSTATE_H
#define RINGCC_IBVERBS_CONNSTATE_H

#include "ringcc.h"

#define RCCI_IBC_STATES(X)                                                                         \
    X(IDLE) X(ADDR) X(ROUTE) X(CONNECTING) X(ACCEPTING) X(READY) X(PEER_CLOSED) X(CLOSED) X(FAILED)
#define RCCI_IBC_EVENTS(X)                                                                         \
    X(CONNECT)        /* connect called (active side) */                                           \
    X(REQUEST)        /* a connect request with a valid hello (passive side) */                    \
    X(ADDR_RESOLVED)  /* RDMA_CM_EVENT_ADDR_RESOLVED */                                            \
    X(ROUTE_RESOLVED) /* RDMA_CM_EVENT_ROUTE_RESOLVED */                                           \
    X(ESTABLISHED)    /* RDMA_CM_EVENT_ESTABLISHED */                                              \
    X(REJECTED)       /* RDMA_CM_EVENT_REJECTED */                                                 \
    X(UNREACHABLE)    /* RDMA_CM_EVENT_UNREACHABLE */                                              \
    X(ERROR)          /* ADDR/ROUTE/CONNECT_ERROR, a failed work completion */                     \
    X(DISCONNECTED)   /* RDMA_CM_EVENT_DISCONNECTED (or DEVICE_REMOVAL) */                         \
    X(PEER_CLOSE)     /* the peer's CLOSE immediate */                                             \
    X(CLOSE)          /* close called */                                                           \
    X(DEADLINE)       /* the set-up deadline passed */
#define RCCI_IBC_ACTIONS(X)                                                                        \
    X(NONE)                                                                                        \
    X(RESOLVE_ADDR) X(RESOLVE_ROUTE) X(CONNECT) X(ACCEPT) X(RETRY) X(FAIL) X(DISCONNECT)           \
        X(DESTROY)

#define RCCI_IBC_ENUM(name) RCCI_IBC_##name,
typedef enum { RCCI_IBC_STATES(RCCI_IBC_ENUM) RCCI_IBC_NSTATES } rcci_ibc_state_t;
#undef RCCI_IBC_ENUM
#define RCCI_IBC_ENUM(name) RCCI_IBC_EV_##name,
typedef enum { RCCI_IBC_EVENTS(RCCI_IBC_ENUM) RCCI_IBC_NEVENTS } rcci_ibc_event_t;
#undef RCCI_IBC_ENUM
#define RCCI_IBC_ENUM(name) RCCI_IBC_DO_##name,
typedef enum { RCCI_IBC_ACTIONS(RCCI_IBC_ENUM) RCCI_IBC_NACTIONS } rcci_ibc_action_t;
#undef RCCI_IBC_ENUM

typedef struct {
    rcci_ibc_state_t state;
    int attempts_left;           /* RETRYs still allowed */
    rcci_ibc_event_t last_event; /* what moved it last */
    rcci_ibc_state_t from;       /* the state it moved from */
    int illegal;                 /* it failed on an event the table does not list */
} rcci_ibc_t;

void rcci_ibc_init(rcci_ibc_t *c, int attempts);
/* Moves on `ev` and returns what the shell must do now. */
rcci_ibc_action_t rcci_ibc_step(rcci_ibc_t *c, rcci_ibc_event_t ev);
/* The error of a connection that ended in FAILED or PEER_CLOSED: its code
 * (RCC_ERR_TIMEOUT, RCC_ERR_PEER_LOST, RCC_ERR_REMOTE for a refusal or an
 * event out of place) with a text naming `peer` and what happened. */
rcc_result_t rcci_ibc_error(const rcci_ibc_t *c, const char *peer);

const char *rcci_ibc_state_name(rcci_ibc_state_t s);
const char *rcci_ibc_event_name(rcci_ibc_event_t e);
const char *rcci_ibc_action_name(rcci_ibc_action_t a);

#endif /* RINGCC_IBVERBS_CONNSTATE_H */
