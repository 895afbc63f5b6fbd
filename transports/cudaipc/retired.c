/* Retired receive memory (retired.h). */
#include "retired.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_NET /* log.h: the subsystem of this file's lines */
#include "clock.h"
#include "ipcmem.h"
#include "log.h"

typedef struct retired {
    struct retired *next;
    const rcci_devapi_t *dev;
    int device;
    const void *owner; /* NULL once its context is gone */
    void *slots;
    rcci_cipc_page_t *page;
    int32_t peer_pid;
} retired_t;

static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static retired_t *retired_list;

static int retired_may_free(const retired_t *r)
{
    if (r->page && __atomic_load_n(&r->page->unmapped, __ATOMIC_ACQUIRE))
        return 1;
    if (r->peer_pid <= 0)
        return 0;
    return !rcci_process_running(r->peer_pid); /* a zombie's mappings are gone */
}

static void retired_free(retired_t *r)
{
    int caller_device;
    rcci_device_enter(r->dev, r->device, &caller_device);
    if (r->slots)
        r->dev->ipc_free(r->slots);
    if (r->page)
        r->dev->ipc_free(r->page);
    rcci_device_back(r->dev, caller_device, r->device);
    free(r);
}

/* Takes out of the list what may be freed now (lock held); returns it. */
static retired_t *retired_take_freeable(void)
{
    retired_t *out = NULL;
    for (retired_t **p = &retired_list; *p;) {
        retired_t *r = *p;
        if (retired_may_free(r)) {
            *p = r->next;
            r->next = out;
            out = r;
        } else {
            p = &r->next;
        }
    }
    return out;
}

static void retired_free_all(retired_t *r)
{
    while (r) {
        retired_t *next = r->next;
        retired_free(r);
        r = next;
    }
}

void rcci_cipc_retire(const rcci_devapi_t *dev, int device, const void *owner, void *slots,
                      rcci_cipc_page_t *page, int32_t peer_pid)
{
    if (!slots && !page)
        return;
    retired_t *r = calloc(1, sizeof *r);
    if (!r) { /* leaking beats freeing under the peer */
        RCC_WARN("cudaipc: out of memory: receive slots stay allocated");
        return;
    }
    *r = (retired_t){.dev = dev,
                     .device = device,
                     .owner = owner,
                     .slots = slots,
                     .page = page,
                     .peer_pid = peer_pid};
    pthread_mutex_lock(&retired_lock);
    r->next = retired_list;
    retired_list = r;
    pthread_mutex_unlock(&retired_lock);
}

int rcci_cipc_reap(const void *owner, int64_t deadline_ns)
{
    for (;;) {
        pthread_mutex_lock(&retired_lock);
        retired_t *go = retired_take_freeable();
        int left = 0;
        for (retired_t *r = retired_list; r && owner; r = r->next)
            left += r->owner == owner;
        int done = !left || rcci_now_ns() >= deadline_ns;
        for (retired_t *r = retired_list; done && owner && r; r = r->next)
            if (r->owner == owner)
                r->owner = NULL; /* later calls free it */
        pthread_mutex_unlock(&retired_lock);
        retired_free_all(go);
        if (done)
            return left;
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
}
