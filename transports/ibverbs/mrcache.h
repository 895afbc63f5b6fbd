/*
 * Memory registrations kept by address range, so a buffer used again is
 * not registered again (registration pins pages and costs tens of
 * microseconds per megabyte). Plain C: registering and deregistering are
 * callbacks (ibv_reg_mr and ibv_dereg_mr in ibverbs.c, fakes in the unit
 * test). Ranges are widened to whole pages; a lookup is served by any entry
 * that covers it; when the cache is full the least recently used entry
 * without users goes. Entries are held (refs) while a request uses them.
 *
 * Hazard, as in every such cache: memory freed and mapped again at the same
 * address keeps its old, pinned pages in the entry. So the transport puts
 * only what reg_mem registered explicitly here, the caller keeps that
 * memory mapped until dereg_mem, and dereg_mem drops the entry once no
 * registration holds it (rcci_mrc_put), since the caller may free the
 * memory next: an entry is shared only by registrations alive together.
 * Other buffers are staged.
 */
#ifndef RINGCC_IBVERBS_MRCACHE_H
#define RINGCC_IBVERBS_MRCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

typedef struct {
    /* Registers [addr, addr + bytes) of memory of `kind` (the caller's
     * word for how to register it: host or device memory); its error
     * names what failed. */
    rcc_result_t (*reg)(void *arg, void *addr, size_t bytes, int kind, void **handle);
    void (*dereg)(void *arg, void *handle);
    void *arg;
} rcci_mrc_ops_t;

typedef struct {
    uintptr_t start, end; /* [start, end), page aligned */
    void *handle;         /* what reg returned */
    int kind;             /* as given to rcci_mrc_get: only lookups of that kind hit */
    int refs;
    uint64_t used; /* the cache's clock when last looked up: LRU */
} rcci_mrc_entry_t;

typedef struct {
    rcci_mrc_ops_t ops;
    size_t page;
    int capacity, count;
    uint64_t clock;
    uint64_t hits, misses; /* for tests and TRACE */
    rcci_mrc_entry_t *entries;
} rcci_mrc_t;

rcc_result_t rcci_mrc_init(rcci_mrc_t *c, const rcci_mrc_ops_t *ops, int capacity, size_t page);
/* Deregisters everything, held or not. */
void rcci_mrc_fini(rcci_mrc_t *c);
/* The entry of `kind` covering [addr, addr + bytes), registered now (reg
 * gets `kind`) if none does, held until rcci_mrc_release. RCC_ERR_INVALID_ARGUMENT for an empty or
 * wrapping range; RCC_ERR_NO_MEMORY when the cache is full of held
 * entries; reg's error when registration fails. */
rcc_result_t rcci_mrc_get(rcci_mrc_t *c, const void *addr, size_t bytes, int kind,
                          rcci_mrc_entry_t **out);
void rcci_mrc_release(rcci_mrc_t *c, rcci_mrc_entry_t *e);
/* Releases `e` and, when nothing holds it any more, deregisters it: its
 * memory may be unmapped once the last holder is done. */
void rcci_mrc_put(rcci_mrc_t *c, rcci_mrc_entry_t *e);
/* Drops (deregisters) the unheld entries overlapping [addr, addr + bytes):
 * memory about to be unmapped. Returns how many went; held ones stay. */
int rcci_mrc_invalidate(rcci_mrc_t *c, const void *addr, size_t bytes);

#endif /* RINGCC_IBVERBS_MRCACHE_H */
