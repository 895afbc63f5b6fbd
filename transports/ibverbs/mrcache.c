/* The registration cache: see mrcache.h. A small array searched
 * linearly: a communicator registers a handful of buffers, not thousands. */
#include "mrcache.h"

#include <stdlib.h>

#include "err.h"

rcc_result_t rcci_mrc_init(rcci_mrc_t *c, const rcci_mrc_ops_t *ops, int capacity, size_t page)
{
    if (capacity < 1 || page == 0 || (page & (page - 1)))
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "registration cache of %d entries, page %zu: need >= 1 and a power of 2",
                          capacity, page);
    *c = (rcci_mrc_t){.ops = *ops, .page = page, .capacity = capacity};
    c->entries = calloc((size_t)capacity, sizeof *c->entries);
    if (!c->entries)
        return rcci_error(RCC_ERR_NO_MEMORY, "registration cache of %d entries", capacity);
    return RCC_SUCCESS;
}

static void mrc_drop(rcci_mrc_t *c, rcci_mrc_entry_t *e)
{
    c->ops.dereg(c->ops.arg, e->handle);
    *e = (rcci_mrc_entry_t){0};
    c->count--;
}

void rcci_mrc_fini(rcci_mrc_t *c)
{
    for (int i = 0; c->entries && i < c->capacity; i++)
        if (c->entries[i].handle)
            mrc_drop(c, &c->entries[i]);
    free(c->entries);
    c->entries = NULL;
}

rcc_result_t rcci_mrc_get(rcci_mrc_t *c, const void *addr, size_t bytes, int kind,
                          rcci_mrc_entry_t **out)
{
    uintptr_t a = (uintptr_t)addr;
    if (bytes == 0 || a + bytes < a || a + bytes > UINTPTR_MAX - c->page)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "cannot register %zu bytes at %p", bytes, addr);
    uintptr_t start = a & ~(uintptr_t)(c->page - 1);
    uintptr_t end = (a + bytes + c->page - 1) & ~(uintptr_t)(c->page - 1);
    rcci_mrc_entry_t *slot = NULL, *victim = NULL;
    c->clock++;
    for (int i = 0; i < c->capacity; i++) {
        rcci_mrc_entry_t *e = &c->entries[i];
        if (!e->handle) {
            slot = slot ? slot : e;
            continue;
        }
        if (e->kind == kind && e->start <= start && end <= e->end) {
            e->refs++;
            e->used = c->clock;
            c->hits++;
            *out = e;
            return RCC_SUCCESS;
        }
        if (!e->refs && (!victim || e->used < victim->used))
            victim = e;
    }
    if (!slot && !victim)
        return rcci_error(RCC_ERR_NO_MEMORY,
                          "all %d registrations are in use: cannot register %zu bytes at %p",
                          c->capacity, bytes, addr);
    if (!slot) {
        mrc_drop(c, victim);
        slot = victim;
    }
    void *handle = NULL;
    rcc_result_t res = c->ops.reg(c->ops.arg, (void *)start, end - start, kind, &handle);
    if (res != RCC_SUCCESS)
        return res;
    *slot = (rcci_mrc_entry_t){
        .start = start, .end = end, .handle = handle, .kind = kind, .refs = 1, .used = c->clock};
    c->count++;
    c->misses++;
    *out = slot;
    return RCC_SUCCESS;
}

void rcci_mrc_release(rcci_mrc_t *c, rcci_mrc_entry_t *e)
{
    (void)c;
    if (e && e->refs > 0)
        e->refs--;
}

void rcci_mrc_put(rcci_mrc_t *c, rcci_mrc_entry_t *e)
{
    rcci_mrc_release(c, e);
    if (e && e->handle && e->refs == 0)
        mrc_drop(c, e);
}

int rcci_mrc_invalidate(rcci_mrc_t *c, const void *addr, size_t bytes)
{
    uintptr_t a = (uintptr_t)addr, b = a + bytes;
    int dropped = 0;
    for (int i = 0; i < c->capacity; i++) {
        rcci_mrc_entry_t *e = &c->entries[i];
        if (e->handle && !e->refs && e->start < b && a < e->end) {
            mrc_drop(c, e);
            dropped++;
        }
    }
    return dropped;
}
