/*
 * A FIFO of a transport's requests, linked through their `next` field: the
 * order in which a connection moves its sends and receives. Each transport
 * defines struct rcci_request (with `struct rcci_request *next`) itself,
 * then includes this header, whose functions see that definition.
 */
#ifndef RINGCC_REQFIFO_H
#define RINGCC_REQFIFO_H

#include <stddef.h>

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

#endif /* RINGCC_REQFIFO_H */
