/* The communicators handed to the application and not yet destroyed. */
#include <pthread.h>

#include "comm.h"

/* An intrusive list: adding cannot fail, and a lookup compares pointers
 * and reads only communicators that are alive. A handful per process. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rcc_comm *live_head;

void rcci_live_add(struct rcc_comm *comm)
{
    pthread_mutex_lock(&live_lock);
    comm->live_next = live_head;
    live_head = comm;
    pthread_mutex_unlock(&live_lock);
}

int rcci_live_remove(const struct rcc_comm *comm)
{
    int found = 0;
    pthread_mutex_lock(&live_lock);
    for (struct rcc_comm **p = &live_head; *p; p = &(*p)->live_next) {
        if (*p == comm) {
            *p = comm->live_next;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
    return found;
}

int rcci_live(const struct rcc_comm *comm)
{
    int found = 0;
    pthread_mutex_lock(&live_lock);
    for (const struct rcc_comm *c = live_head; c && !found; c = c->live_next)
        found = c == comm;
    pthread_mutex_unlock(&live_lock);
    return found;
}

rcc_result_t rcci_live_check(const struct rcc_comm *comm, const char *fn)
{
    if (!comm)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: comm is NULL", fn);
    if (!rcci_live(comm))
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "%s: comm %p is not a live communicator (destroyed or aborted "
                          "already, or never made by ringcc)",
                          fn, (const void *)comm);
    return RCC_SUCCESS;
}
