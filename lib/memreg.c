/* Registered memory: see memreg.h. A short list searched linearly (a
 * communicator has a handful of registrations), under its own lock: the
 * caller's thread adds and removes, the engine's driver looks up. */
#include "memreg.h"

#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_NET /* log.h: the subsystem of this file's lines */
#include "comm.h"
#include "devapi.h"
#include "log.h"

struct rcc_memreg {
    struct rcc_memreg *next; /* comm->regs, until removed */
    char *base;
    size_t bytes;
    int internal;
    int refs; /* the table's, until removed, and one per holding executor; under reg_lock */
    rcci_mr_t *mr[RCCI_COMM_MAX_TRANSPORTS]; /* per rcci_transports[i]; NULL: none */
};

/* Whether the communicator sends over `tr` from memory it registered: a
 * zero-copy transport that one of its links uses. */
static int memreg_wanted(const struct rcc_comm *comm, const rcci_transport_t *tr)
{
    if (!(tr->caps & RCCI_CAP_ZERO_COPY_SEND))
        return 0;
    return comm->send_link.tr == tr || comm->p2p.tr == tr || comm->dsend_link.tr == tr;
}

static void memreg_free(struct rcc_comm *comm, struct rcc_memreg *reg)
{
    for (int i = 0; i < RCCI_COMM_MAX_TRANSPORTS && rcci_transports[i]; i++)
        if (reg->mr[i])
            rcci_transports[i]->dereg_mem(comm->tctx[i], reg->mr[i]);
    free(reg);
}

rcc_result_t rcci_memreg_add(struct rcc_comm *comm, void *buf, size_t bytes, int internal,
                             struct rcc_memreg **out)
{
    if (out)
        *out = NULL;
    if (!buf || bytes == 0 || (uintptr_t)buf + bytes < (uintptr_t)buf)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "cannot register %zu bytes at %p", bytes, buf);
    struct rcc_memreg *reg = calloc(1, sizeof *reg);
    if (!reg)
        return rcci_error(RCC_ERR_NO_MEMORY, "registration of %zu bytes", bytes);
    *reg = (struct rcc_memreg){.base = buf, .bytes = bytes, .internal = internal, .refs = 1};
    const rcci_devapi_t *dev = rcci_devapi();
    int device = !internal && dev && rcci_stream_usable() && dev->is_device(buf);
    char saved[RCCI_ERR_TEXT_BYTES];
    snprintf(saved, sizeof saved, "%s", rcci_tls_error());
    for (int i = 0; i < RCCI_COMM_MAX_TRANSPORTS && rcci_transports[i]; i++) {
        const rcci_transport_t *tr = rcci_transports[i];
        if (!comm->tctx[i] || !memreg_wanted(comm, tr))
            continue;
        if (tr->reg_mem(comm->tctx[i], buf, bytes, device ? RCCI_MEM_CUDA : RCCI_MEM_HOST,
                        &reg->mr[i]) == RCC_SUCCESS)
            continue;
        reg->mr[i] = NULL;
        /* Not an error: sends from it are copied, as without registering. */
        if (internal)
            RCC_TRACE("%s: %zu bytes of the library's memory at %p stay unregistered: %s", tr->name,
                      bytes, buf, rcci_tls_error());
        else
            RCC_INFO("%s cannot register %zu bytes of %s memory at %p (%s): sends from it are "
                     "copied",
                     tr->name, bytes, device ? "device" : "host", buf, rcci_tls_error());
    }
    rcci_tls_error_set(saved);
    int registered = 0;
    for (int i = 0; i < RCCI_COMM_MAX_TRANSPORTS; i++)
        registered |= reg->mr[i] != NULL;
    if (internal && !registered) { /* nothing to look up (TCP): not kept */
        free(reg);
        return RCC_SUCCESS;
    }
    pthread_mutex_lock(&comm->reg_lock);
    reg->next = comm->regs;
    comm->regs = reg;
    pthread_mutex_unlock(&comm->reg_lock);
    if (out)
        *out = reg;
    return RCC_SUCCESS;
}

/* Takes `reg` out of the table (under reg_lock); 1 when that was the last
 * hold and the caller frees it. */
static int memreg_unlink(struct rcc_comm *comm, struct rcc_memreg *reg)
{
    for (struct rcc_memreg **p = &comm->regs; *p; p = &(*p)->next)
        if (*p == reg) {
            *p = reg->next;
            break;
        }
    return --reg->refs == 0;
}

rcc_result_t rcci_memreg_remove(struct rcc_comm *comm, struct rcc_memreg *reg)
{
    pthread_mutex_lock(&comm->reg_lock);
    struct rcc_memreg *r = comm->regs;
    while (r && (r != reg || r->internal))
        r = r->next;
    int last = r ? memreg_unlink(comm, r) : 0;
    pthread_mutex_unlock(&comm->reg_lock);
    if (!r) /* only compared, never read: it may be freed memory */
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "handle %p is not a registration of this communicator (deregistered "
                          "already?)",
                          (void *)reg);
    if (last)
        memreg_free(comm, r);
    return RCC_SUCCESS;
}

void rcci_memreg_forget(struct rcc_comm *comm, const void *buf)
{
    pthread_mutex_lock(&comm->reg_lock);
    struct rcc_memreg *r = comm->regs;
    while (r && !(r->internal && r->base == buf))
        r = r->next;
    int last = r ? memreg_unlink(comm, r) : 0;
    pthread_mutex_unlock(&comm->reg_lock);
    if (last)
        memreg_free(comm, r);
}

static int memreg_covers(const struct rcc_memreg *reg, int t, const void *buf, size_t bytes)
{
    uintptr_t a = (uintptr_t)buf, base = (uintptr_t)reg->base;
    return reg->mr[t] && a >= base && a - base <= reg->bytes && bytes <= reg->bytes - (a - base);
}

rcci_mr_t *rcci_memreg_send_mr(struct rcc_comm *comm, rcci_memreg_held_t *held,
                               const rcci_transport_t *tr, const void *buf, size_t bytes)
{
    if (!(tr->caps & RCCI_CAP_ZERO_COPY_SEND)) /* every send over TCP: nothing to look up */
        return NULL;
    int t = 0;
    while (t < RCCI_COMM_MAX_TRANSPORTS && rcci_transports[t] && rcci_transports[t] != tr)
        t++;
    if (t == RCCI_COMM_MAX_TRANSPORTS || !rcci_transports[t])
        return NULL;
    for (int i = 0; i < held->n; i++)
        if (memreg_covers(held->reg[i], t, buf, bytes)) {
            __atomic_fetch_add(&comm->zero_copy_sends, 1, __ATOMIC_RELAXED); /* tests read it */
            return held->reg[i]->mr[t];
        }
    if (held->n == RCCI_MEMREG_HELD)
        return NULL;
    pthread_mutex_lock(&comm->reg_lock);
    struct rcc_memreg *r = comm->regs;
    while (r && !memreg_covers(r, t, buf, bytes))
        r = r->next;
    if (r) {
        r->refs++;
        held->reg[held->n++] = r;
        __atomic_fetch_add(&comm->zero_copy_sends, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&comm->reg_lock);
    return r ? r->mr[t] : NULL;
}

void rcci_memreg_drop(struct rcc_comm *comm, rcci_memreg_held_t *held)
{
    struct rcc_memreg *gone[RCCI_MEMREG_HELD];
    int ngone = 0;
    pthread_mutex_lock(&comm->reg_lock);
    for (int i = 0; i < held->n; i++)
        if (--held->reg[i]->refs == 0)
            gone[ngone++] = held->reg[i];
    pthread_mutex_unlock(&comm->reg_lock);
    for (int i = 0; i < ngone; i++)
        memreg_free(comm, gone[i]);
    held->n = 0;
}

void rcci_memreg_free_all(struct rcc_comm *comm)
{
    struct rcc_memreg *r = comm->regs;
    comm->regs = NULL;
    while (r) {
        struct rcc_memreg *next = r->next;
        memreg_free(comm, r);
        r = next;
    }
}

/* ---- the public calls ------------------------------------------------------ */

rcc_result_t rcc_comm_register(rcc_comm_t comm, void *buf, size_t bytes, rcc_memreg_t *handle)
{
    rcci_tls_error_clear();
    rcc_result_t res = rcci_live_check(comm, "rcc_comm_register");
    if (res != RCC_SUCCESS)
        return res;
    rcci_comm_enter(comm);
    if (!handle)
        return rcci_comm_leave(
            comm, rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_comm_register: handle is NULL"));
    *handle = NULL;
    res = rcci_memreg_add(comm, buf, bytes, 0, handle);
    if (res != RCC_SUCCESS)
        rcci_error_prefix("rcc_comm_register: ");
    return rcci_comm_leave(comm, res);
}

rcc_result_t rcc_comm_deregister(rcc_comm_t comm, rcc_memreg_t handle)
{
    rcci_tls_error_clear();
    rcc_result_t res = rcci_live_check(comm, "rcc_comm_deregister");
    if (res != RCC_SUCCESS)
        return res;
    rcci_comm_enter(comm);
    res = rcci_memreg_remove(comm, handle);
    if (res != RCC_SUCCESS)
        rcci_error_prefix("rcc_comm_deregister: ");
    return rcci_comm_leave(comm, res);
}
