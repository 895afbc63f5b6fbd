/*
 * A FIFO of a transport's requests, linked through their `next` field: the
 * order in which a connection moves its sends and receives; and how `test`
 * ends for such requests. A request is always in one of its connection's
 * FIFOs until `test` frees it, completed ones in a `completed` FIFO, so that
 * close finds and frees every request the caller has not seen finish
 * (transport.h). Each transport
 * defines struct rcci_request (with `struct rcci_request *next`) itself,
 * then includes this header, whose functions see that definition.
 */
#ifndef RINGCC_REQFIFO_H
#define RINGCC_REQFIFO_H

#include <stddef.h>
#include <stdlib.h>

#include "ringcc.h"

typedef struct {
    struct rcci_request *head, *tail;
} rcci_req_fifo_t;

static inline void rcci_req_fifo_push(rcci_req_fifo_t *q, struct rcci_request *r)
{
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

static inline struct rcci_request *rcci_req_fifo_pop(rcci_req_fifo_t *q)
{
    struct rcci_request *r = q->head;
    q->head = r->next;
    if (!q->head)
        q->tail = NULL;
    return r;
}

/* Moves q's head, which has just completed, to `completed`, where it waits
 * for `test` (which frees it) or for close. */
static inline struct rcci_request *rcci_req_fifo_complete(rcci_req_fifo_t *q,
                                                          rcci_req_fifo_t *completed)
{
    struct rcci_request *r = rcci_req_fifo_pop(q);
    r->complete = 1;
    rcci_req_fifo_push(completed, r);
    return r;
}

/* Frees every request in q (a connection's close). */
static inline void rcci_req_fifo_free_all(rcci_req_fifo_t *q)
{
    while (q->head)
        free(rcci_req_fifo_pop(q));
}

/* Unlinks `r` wherever it is (a request failed or cancelled); nothing if absent. */
static inline void rcci_req_fifo_unlink(rcci_req_fifo_t *q, struct rcci_request *r)
{
    struct rcci_request **pp = &q->head, *prev = NULL;
    while (*pp && *pp != r)
        prev = *pp, pp = &(*pp)->next;
    if (!*pp)
        return;
    *pp = r->next;
    if (q->tail == r)
        q->tail = prev;
}

/* The end of a transport's `test`, after driving r's connection (`res`): a
 * complete request leaves `completed`, is freed and reported done, also when
 * the drive failed later on (the connection keeps the failure for the next
 * call); a failure that left it incomplete unlinks and frees it and is
 * returned. Requests need `int complete`. Tests usually come in the order of
 * completion, so the unlink finds r at the head. */
static inline rcc_result_t rcci_req_finish(rcci_req_fifo_t *sends, rcci_req_fifo_t *recvs,
                                           rcci_req_fifo_t *completed, struct rcci_request *r,
                                           rcc_result_t res, int *done)
{
    *done = r->complete;
    if (r->complete) {
        rcci_req_fifo_unlink(completed, r);
        free(r);
        return RCC_SUCCESS;
    }
    if (res != RCC_SUCCESS) {
        rcci_req_fifo_unlink(sends, r);
        rcci_req_fifo_unlink(recvs, r);
        free(r);
    }
    return res;
}

#endif /* RINGCC_REQFIFO_H */
