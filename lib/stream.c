/*
 * The stream path: operations ordered on a CUDA stream (rcc_<name>_stream).
 *
 * collectives.c checks a call and builds its operation as for a host call;
 * here it is tied to the caller's stream with a pair of flags in pinned,
 * device-mapped host memory (a "mark"):
 *   - at the call, the caller's stream is given "start = ticket" (the GPU
 *     stores it once the work queued before the call is done) and, outside
 *     a group, "wait until done >= ticket" (work queued after the call waits
 *     for the result); the calling thread returns at once;
 *   - the progress thread runs the operation once it sees start == ticket,
 *     and stores done = ticket when the operation has ended, successfully or
 *     not, so that a stream is never left waiting.
 * Device buffers travel over the host transports through pinned staging:
 * the operation's inputs are copied in on the library's own stream, the
 * host executor runs on the staging copies, and the outputs are copied back
 * before `done` is stored. Host buffers are used as they are. Ring and
 * chain collectives on device buffers go chunk by chunk instead
 * (coll/pipeline.c): GPU to GPU over the device ring where it has edges
 * (devring.c, cudaipc), else through pinned slots.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_CUDA /* log.h: the subsystem of this file's lines */
#include "clock.h"
#include "comm.h"
#include "devapi.h"
#include "log.h"
#include "rcc_config.h"

/* Marks per communicator: taken in turn, a pair is reused only once the
 * operation that had it last has ended (the caller waits for that, within
 * the timeout, when more operations than this are pending). */
#define STREAM_MARKS 256
/* Pinned staging buffers are kept until the communicator goes, never freed
 * while it runs: cudaFreeHost waits for the whole device, and a caller's
 * stream may be waiting (cuStreamWaitValue32) for a flag that only this
 * thread, blocked in the free, would store. Sizes are powers of two (at
 * least this), so a workload of many sizes keeps a few buffers per size. */
#define STAGING_MIN_BYTES (64u << 10)

#if RCC_HAVE_CUDA
extern const rcci_devapi_t rcci_devapi_cuda;
#endif

static const rcci_devapi_t *devapi_forced;

void rcci_devapi_set(const rcci_devapi_t *api) { devapi_forced = api; }

const rcci_devapi_t *rcci_devapi(void)
{
    if (devapi_forced)
        return devapi_forced;
#if RCC_HAVE_CUDA
    return &rcci_devapi_cuda;
#else
    return NULL;
#endif
}

/* ---- is there a device? -------------------------------------------------- */

static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static const rcci_devapi_t *probed_api; /* the table the answer below is for */
static int probe_devices;
static char probe_why[256];

static int stream_probe(void)
{
    const rcci_devapi_t *api = rcci_devapi();
    pthread_mutex_lock(&probe_lock);
    if (!api) {
        probe_devices = 0;
        snprintf(probe_why, sizeof probe_why, "this build has no CUDA (meson feature `cuda` off)");
    } else if (api != probed_api) {
        char why[200] = "";
        probe_devices = api->device_count(why, sizeof why);
        if (probe_devices == 0)
            snprintf(probe_why, sizeof probe_why, "no usable CUDA device (%s)", why);
    }
    probed_api = api;
    int n = probe_devices;
    pthread_mutex_unlock(&probe_lock);
    return n;
}

int rcci_stream_usable(void) { return stream_probe() > 0; }

const char *rcci_stream_why(void)
{
    stream_probe();
    return probe_devices > 0 ? "" : probe_why;
}

int rcc_cuda_available(void)
{
    rcci_tls_error_clear();
    if (rcci_stream_usable())
        return 1;
    rcci_error(RCC_ERR_UNSUPPORTED, "%s", rcci_stream_why());
    return 0;
}

/* ---- a communicator's stream state ------------------------------------- */

struct rcci_streams {
    const rcci_devapi_t *dev;
    volatile uint32_t *flags; /* pair k: start at 2k, done at 2k + 1 */
    uint32_t tickets;         /* the last handed out (never 0); under comm->lock */
    uint64_t issued;          /* tickets handed out: picks the pair; under comm->lock */
    uint32_t last[STREAM_MARKS]; /* per pair, the ticket of its last operation (0: none) */
    int device;               /* of the first stream call's thread */
    void *copy_stream;        /* staging copies */
    pthread_mutex_t cache_lock;
    /* Staging buffers not in use; those in use are the operations'. */
    struct staging {
        void *buf;
        size_t bytes;
    } *cache;
    int ncache, cache_cap;
};

static rcc_result_t streams_get(struct rcc_comm *comm, struct rcci_streams **out)
{
    pthread_mutex_lock(&comm->lock);
    struct rcci_streams *s = comm->streams;
    rcc_result_t res = RCC_SUCCESS;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) {
            res = rcci_error(RCC_ERR_NO_MEMORY, "stream state");
        } else {
            s->dev = rcci_devapi();
            s->device = s->dev->current_device();
            pthread_mutex_init(&s->cache_lock, NULL);
            void *flags = NULL;
            res = s->dev->host_alloc(&flags, 2 * STREAM_MARKS * sizeof(uint32_t));
            s->flags = flags;
            if (res == RCC_SUCCESS)
                res = s->dev->stream_create(&s->copy_stream);
            if (res != RCC_SUCCESS) {
                if (flags)
                    s->dev->host_free(flags);
                pthread_mutex_destroy(&s->cache_lock);
                free(s);
                s = NULL;
            }
        }
        comm->streams = s;
    }
    pthread_mutex_unlock(&comm->lock);
    *out = s;
    return res;
}

void rcci_streams_free(struct rcc_comm *comm)
{
    struct rcci_streams *s = comm->streams;
    if (!s)
        return;
    for (int i = 0; i < s->ncache; i++)
        s->dev->host_free(s->cache[i].buf);
    free(s->cache);
    s->dev->stream_destroy(s->copy_stream);
    s->dev->host_free((void *)s->flags);
    pthread_mutex_destroy(&s->cache_lock);
    free(s);
    comm->streams = NULL;
}

rcc_result_t rcci_streams_set_next_ticket(struct rcc_comm *comm, uint32_t next)
{
    struct rcci_streams *s;
    rcc_result_t res = streams_get(comm, &s);
    if (res == RCC_SUCCESS) {
        pthread_mutex_lock(&comm->lock);
        s->tickets = next - 1;
        pthread_mutex_unlock(&comm->lock);
    }
    return res;
}

/* A pinned buffer of at least `bytes`: the smallest cached one that is
 * large enough, or a new one of the next power of two. */
static rcc_result_t staging_take(struct rcci_streams *s, size_t bytes, void **buf, size_t *got)
{
    pthread_mutex_lock(&s->cache_lock);
    int best = -1;
    for (int i = 0; i < s->ncache; i++)
        if (s->cache[i].bytes >= bytes && (best < 0 || s->cache[i].bytes < s->cache[best].bytes))
            best = i;
    if (best >= 0) {
        *buf = s->cache[best].buf, *got = s->cache[best].bytes;
        s->cache[best] = s->cache[--s->ncache];
    }
    pthread_mutex_unlock(&s->cache_lock);
    if (best >= 0)
        return RCC_SUCCESS;
    size_t size = STAGING_MIN_BYTES;
    while (size < bytes && size <= SIZE_MAX / 2)
        size *= 2;
    *got = size < bytes ? bytes : size;
    return s->dev->host_alloc(buf, *got);
}

/* Back to the cache (freed with the communicator, see STAGING_MIN_BYTES).
 * Only where the cache cannot grow (no memory) does the buffer go now. */
static void staging_give(struct rcci_streams *s, void *buf, size_t bytes)
{
    pthread_mutex_lock(&s->cache_lock);
    if (s->ncache == s->cache_cap) {
        int cap = s->cache_cap ? 2 * s->cache_cap : 8;
        struct staging *c = realloc(s->cache, sizeof *c * (size_t)cap);
        if (c)
            s->cache = c, s->cache_cap = cap;
    }
    int kept = s->ncache < s->cache_cap;
    if (kept)
        s->cache[s->ncache++] = (struct staging){buf, bytes};
    pthread_mutex_unlock(&s->cache_lock);
    if (!kept)
        s->dev->host_free(buf);
}

/* ---- marks: the call side ------------------------------------------------ */

/* Streams of the current group, waited on at its end (per thread). */
typedef struct {
    const rcci_devapi_t *dev;
    void *stream;
    volatile uint32_t *done;
    uint32_t ticket;
} group_wait_t;

static _Thread_local group_wait_t *group_waits;
static _Thread_local int group_nwaits, group_cap;

static rcc_result_t group_wait_add(const group_wait_t *w)
{
    if (group_nwaits == group_cap) {
        int cap = group_cap ? 2 * group_cap : 16;
        group_wait_t *g = realloc(group_waits, sizeof *g * (size_t)cap);
        if (!g)
            return rcci_error(RCC_ERR_NO_MEMORY, "group stream list");
        group_waits = g, group_cap = cap;
    }
    group_waits[group_nwaits++] = *w;
    return RCC_SUCCESS;
}

void rcci_stream_group_end(void)
{
    for (int i = 0; i < group_nwaits; i++) {
        group_wait_t *w = &group_waits[i];
        if (w->dev->wait_flag(w->stream, w->done, w->ticket) != RCC_SUCCESS)
            RCC_WARN("a stream of the group could not be told to wait: %s", rcci_tls_error());
    }
    free(group_waits);
    group_waits = NULL;
    group_nwaits = group_cap = 0;
}

/* Stores done = ticket for `op` (and the members it stands for): the
 * streams waiting for it move on. Idempotent. */
void rcci_stream_release(rcci_op_t *op)
{
    for (int i = 0; i < op->nmembers; i++)
        rcci_stream_release(op->members[i]);
    if (op->mark.done && !op->mark.released) {
        op->mark.released = 1;
        __atomic_store_n(op->mark.done, op->mark.ticket, __ATOMIC_RELEASE);
    }
}

/* Waits, within the timeout, until the operation that last had this pair
 * (ticket `prev`; 0: none) has ended. */
static rcc_result_t mark_pair_free(struct rcc_comm *comm, volatile uint32_t *done, uint32_t prev)
{
    if (prev == 0)
        return RCC_SUCCESS;
    int64_t deadline = rcci_now_ns() + comm->timeout_ns;
    while ((int32_t)(__atomic_load_n(done, __ATOMIC_ACQUIRE) - prev) < 0) {
        if (rcci_now_ns() > deadline)
            return rcci_error(RCC_ERR_TIMEOUT,
                              "more than %d stream operations pending for %.0f s (are the "
                              "streams they wait for stuck?)",
                              STREAM_MARKS, comm->timeout_ns / 1e9);
        nanosleep(&(struct timespec){0, 50 * 1000}, NULL);
    }
    return RCC_SUCCESS;
}

rcc_result_t rcci_stream_submit(struct rcc_comm *comm, rcci_op_t *op, void *stream)
{
    struct rcci_streams *s;
    rcc_result_t res = streams_get(comm, &s);
    if (res != RCC_SUCCESS) {
        rcci_op_release(op);
        return res;
    }
    pthread_mutex_lock(&comm->lock);
    uint32_t ticket = ++s->tickets;
    if (ticket == 0) /* 0 is the flags' initial value: never a ticket */
        ticket = ++s->tickets;
    /* Pairs in turn by a count that does not wrap, each remembering its
     * last ticket: right also after the tickets wrap (2^32 operations). */
    size_t k = (size_t)(s->issued++ % STREAM_MARKS);
    uint32_t prev = s->last[k];
    s->last[k] = ticket;
    pthread_mutex_unlock(&comm->lock);
    volatile uint32_t *start = &s->flags[2 * k], *done = &s->flags[2 * k + 1];
    res = mark_pair_free(comm, done, prev);
    if (res == RCC_SUCCESS)
        res = s->dev->write_flag(stream, start, ticket);
    op->on_stream = 1;
    op->mark = (rcci_mark_t){.start = start, .done = done, .ticket = ticket, .stream = stream};
    if (res == RCC_SUCCESS && rcci_group_active()) {
        group_wait_t w = {s->dev, stream, done, ticket};
        res = group_wait_add(&w);
        if (res == RCC_SUCCESS)
            res = rcci_group_add(comm, op, NULL);
    } else if (res == RCC_SUCCESS) {
        res = s->dev->wait_flag(stream, done, ticket);
        if (res == RCC_SUCCESS)
            res = rcci_progress_enqueue(comm, op);
    }
    if (res != RCC_SUCCESS) /* the stream may already wait for it */
        rcci_stream_release(op);
    rcci_op_release(op); /* the queue or the group holds it now */
    return res;
}

/* ---- the progress side: an executor around the host one ------------------ */

/* One stretch of device memory the operation reads (in) or writes (out). */
typedef struct {
    char *dev;
    size_t bytes;
    int in, out;
    size_t span; /* index into the spans */
} region_t;

/* Overlapping regions share a span, staged once (in-place layouts). */
typedef struct {
    char *dev;
    size_t bytes, off;
} span_t;

enum { PH_START, PH_COPY_IN, PH_RUN, PH_COPY_OUT, PH_DONE };

struct rcci_exec {
    rcci_op_t *op;
    struct rcci_streams *s;
    int phase;
    rcci_exec_t *inner;
    region_t *regions;
    span_t *spans;
    int nregions, nspans;
    char *staging;
    size_t staging_bytes;
    void *event;
    int pipelined; /* chunk by chunk on the device (inner is a pipeline) */
    char *dscratch;
    char *dslots; /* the device ring's receive slots (devring.c), device memory */
};

/* Every mark `op` waits for has been started by its stream. */
static int marks_started(const rcci_op_t *op)
{
    for (int i = 0; i < op->nmembers; i++)
        if (!marks_started(op->members[i]))
            return 0;
    return !op->mark.start || __atomic_load_n(op->mark.start, __ATOMIC_ACQUIRE) == op->mark.ticket;
}

static int region_add(rcci_exec_t *x, const void *p, size_t bytes, int in, int out)
{
    if (!p || bytes == 0 || !x->s->dev->is_device(p))
        return 0;
    x->regions[x->nregions++] = (region_t){(char *)p, bytes, in, out, 0};
    return 1;
}

static int region_cmp(const void *a, const void *b)
{
    const region_t *x = a, *y = b;
    return x->dev < y->dev ? -1 : x->dev > y->dev;
}

/* The device memory `op` touches, by collective (the layouts of ringcc.h). */
static void regions_collect(struct rcc_comm *comm, rcci_exec_t *x)
{
    const rcci_op_t *op = x->op;
    size_t es = rcc_datatype_size(op->dtype), n = (size_t)comm->nranks;
    size_t one = op->count * es;
    int root = comm->rank == op->root;
    switch (op->coll) {
    case RCCI_COLL_ALLREDUCE:
        region_add(x, op->sendbuf, one, 1, 0);
        region_add(x, op->recvbuf, one, 0, 1);
        break;
    case RCCI_COLL_REDUCE_SCATTER:
        region_add(x, op->sendbuf, one * n, 1, 0);
        region_add(x, op->recvbuf, one, 0, 1);
        break;
    case RCCI_COLL_ALLGATHER:
        region_add(x, op->sendbuf, one, 1, 0);
        region_add(x, op->recvbuf, one * n, 0, 1);
        break;
    case RCCI_COLL_BROADCAST:
        if (root)
            region_add(x, op->sendbuf, one, 1, 0);
        region_add(x, op->recvbuf, one, 0, 1);
        break;
    case RCCI_COLL_REDUCE:
        region_add(x, op->sendbuf, one, 1, 0);
        if (root)
            region_add(x, op->recvbuf, one, 0, 1);
        break;
    case RCCI_COLL_P2P:
        for (int i = 0; i < op->nmsgs; i++)
            region_add(x, op->msgs[i].buf, op->msgs[i].bytes, op->msgs[i].is_send,
                       !op->msgs[i].is_send);
        break;
    case RCCI_COLL_BARRIER: break; /* its own memory */
    }
}

/* Sorts the regions into spans and lays the spans out in staging. */
static size_t spans_layout(rcci_exec_t *x)
{
    qsort(x->regions, (size_t)x->nregions, sizeof *x->regions, region_cmp);
    size_t off = 0;
    for (int i = 0; i < x->nregions; i++) {
        region_t *r = &x->regions[i];
        span_t *last = x->nspans ? &x->spans[x->nspans - 1] : NULL;
        if (last && r->dev < last->dev + last->bytes) {
            size_t end = (size_t)(r->dev - last->dev) + r->bytes;
            if (end > last->bytes) {
                off += end - last->bytes;
                last->bytes = end;
            }
        } else {
            off = (off + 255) & ~(size_t)255; /* aligned for the reductions */
            x->spans[x->nspans++] = (span_t){r->dev, r->bytes, off};
            off += r->bytes;
        }
        r->span = (size_t)(x->nspans - 1);
    }
    return off;
}

/* Where device address p (inside a region) lies in staging; p itself when
 * it is not staged. */
static void *staged(const rcci_exec_t *x, const void *p)
{
    for (int i = 0; p && i < x->nspans; i++) {
        const span_t *sp = &x->spans[i];
        if ((const char *)p >= sp->dev && (const char *)p < sp->dev + sp->bytes)
            return x->staging + sp->off + ((const char *)p - sp->dev);
    }
    return (void *)p;
}

/* Copies the inputs (to_host) or the outputs back, on the library's stream,
 * and records the event that says they are done. */
static rcc_result_t regions_copy(rcci_exec_t *x, int to_host)
{
    const rcci_devapi_t *dev = x->s->dev;
    for (int i = 0; i < x->nregions; i++) {
        const region_t *r = &x->regions[i];
        if (!(to_host ? r->in : r->out))
            continue;
        void *host = staged(x, r->dev);
        rcc_result_t res = to_host ? dev->copy(host, r->dev, r->bytes, x->s->copy_stream)
                                   : dev->copy(r->dev, host, r->bytes, x->s->copy_stream);
        if (res != RCC_SUCCESS)
            return res;
    }
    return dev->event_record(x->event, x->s->copy_stream);
}

/* Ring and chain collectives whose buffers are all device memory run chunk
 * by chunk through pinned slots (coll/pipeline.c), copies and reductions on
 * the GPU overlapping the wire, partial results in device scratch. The rest
 * (the small-message allreduces, point-to-point, a mix of host and device
 * buffers) are staged whole. */
static int op_pipelines_on_device(struct rcc_comm *comm, const rcci_op_t *op,
                                  const rcci_devapi_t *dev)
{
    int root = comm->rank == op->root;
    switch (op->coll) {
    case RCCI_COLL_ALLREDUCE:
    case RCCI_COLL_ALLGATHER:
    case RCCI_COLL_REDUCE_SCATTER:
        return !op->rounds && dev->is_device(op->sendbuf) && dev->is_device(op->recvbuf);
    case RCCI_COLL_BROADCAST:
        return dev->is_device(op->recvbuf) && (!root || dev->is_device(op->sendbuf));
    case RCCI_COLL_REDUCE:
        return dev->is_device(op->sendbuf) && (!root || dev->is_device(op->recvbuf));
    default: return 0;
    }
}

/* Points the operation at the staging copies (the host executor sees host
 * memory only). */
static void op_retarget(rcci_exec_t *x)
{
    rcci_op_t *op = x->op;
    op->sendbuf = staged(x, op->sendbuf);
    op->recvbuf = staged(x, op->recvbuf);
    for (int i = 0; i < op->nmsgs; i++)
        op->msgs[i].buf = staged(x, op->msgs[i].buf);
}

rcc_result_t rcci_stream_exec_start(struct rcc_comm *comm, rcci_op_t *op, rcci_exec_t **out)
{
    rcci_exec_t *x = calloc(1, sizeof *x);
    *out = x;
    if (!x)
        return rcci_error(RCC_ERR_NO_MEMORY, "stream operation state");
    x->op = op;
    x->phase = PH_START;
    op->started_ns = rcci_now_ns(); /* for stall reports; again once the stream reaches it */
    rcci_exec_plan(comm, op);       /* peers may ask about it while it waits for its stream */
    rcc_result_t res = streams_get(comm, &x->s);
    if (res == RCC_SUCCESS) /* this (progress) thread's CUDA calls go to that device */
        res = x->s->dev->use_device(x->s->device);
    if (res != RCC_SUCCESS)
        return res;
    /* Chunk by chunk on the device: in its signature, which peers may ask
     * about (or compare) while it waits for its stream. */
    op->device = op_pipelines_on_device(comm, op, x->s->dev);
    int most = op->coll == RCCI_COLL_P2P ? op->nmsgs : 2;
    x->regions = calloc((size_t)most + 1, sizeof *x->regions);
    x->spans = calloc((size_t)most + 1, sizeof *x->spans);
    if (!x->regions || !x->spans)
        return rcci_error(RCC_ERR_NO_MEMORY, "stream staging table");
    return RCC_SUCCESS;
}

rcc_result_t rcci_stream_exec_advance(struct rcc_comm *comm, rcci_exec_t *x, int *progressed,
                                      int *done)
{
    rcc_result_t res = RCC_SUCCESS;
    int ready;
    *progressed = *done = 0;
    switch (x->phase) {
    case PH_START:
        if (!marks_started(x->op)) {
            comm->poll_ms = 1; /* the GPU stores the flag; epoll cannot see it */
            return RCC_SUCCESS;
        }
        if (comm->broken != RCC_SUCCESS)
            return rcci_error(comm->broken, "the communicator failed earlier: %s",
                              comm->broken_text);
        x->op->started_ns = rcci_now_ns();
        if (x->op->device) {
            size_t chunk = rcci_coll_device_chunk(comm, x->op);
            size_t bytes = 2 * (size_t)comm->slots * chunk;
            res = staging_take(x->s, bytes, (void **)&x->staging, &x->staging_bytes);
            if (res == RCC_SUCCESS)
                res = x->s->dev->event_create(&x->event);
            size_t scratch = rcci_coll_device_scratch_bytes(comm, x->op);
            if (res == RCC_SUCCESS && scratch)
                res = x->s->dev->dev_alloc((void **)&x->dscratch, scratch, x->s->copy_stream);
            if (res == RCC_SUCCESS && comm->drecv_link.nconns > 0 &&
                !rcci_coll_device_inplace(comm, x->op))
                res = x->s->dev->dev_alloc((void **)&x->dslots, (size_t)comm->slots * chunk,
                                           x->s->copy_stream);
            if (res == RCC_SUCCESS)
                res = rcci_coll_start_device(comm, x->op, x->s->dev, x->s->copy_stream, x->staging,
                                             x->dscratch, x->dslots, &x->inner);
            x->pipelined = 1;
            x->phase = PH_RUN;
            *progressed = 1;
            return res;
        }
        regions_collect(comm, x);
        if (x->nregions) {
            size_t bytes = spans_layout(x);
            res = staging_take(x->s, bytes, (void **)&x->staging, &x->staging_bytes);
            if (res == RCC_SUCCESS)
                res = x->s->dev->event_create(&x->event);
            if (res == RCC_SUCCESS)
                res = regions_copy(x, 1);
            if (res != RCC_SUCCESS)
                return res;
            op_retarget(x);
        }
        x->phase = x->nregions ? PH_COPY_IN : PH_RUN;
        *progressed = 1;
        return RCC_SUCCESS;
    case PH_COPY_IN:
        res = x->s->dev->event_query(x->event, &ready);
        if (res != RCC_SUCCESS || !ready) {
            comm->poll_ms = 1;
            return res;
        }
        x->phase = PH_RUN;
        *progressed = 1;
        return RCC_SUCCESS;
    case PH_RUN:
        if (!x->inner) {
            res = rcci_exec_host_start(comm, x->op, &x->inner);
            if (res != RCC_SUCCESS)
                return res;
        }
        int inner_done = 0;
        res = rcci_exec_host_advance(comm, x->op, x->inner, progressed, &inner_done);
        if (res != RCC_SUCCESS || !inner_done)
            return res;
        rcci_exec_host_finish(comm, x->op, x->inner);
        x->inner = NULL;
        *progressed = 1;
        if (!x->nregions && !x->pipelined) {
            x->phase = PH_DONE;
            *done = 1;
            return RCC_SUCCESS;
        }
        res = regions_copy(x, 0);
        x->phase = PH_COPY_OUT;
        return res;
    case PH_COPY_OUT:
        res = x->s->dev->event_query(x->event, &ready);
        if (res != RCC_SUCCESS || !ready) {
            comm->poll_ms = 1;
            return res;
        }
        x->phase = PH_DONE;
        *progressed = *done = 1;
        return RCC_SUCCESS;
    default: *done = 1; return RCC_SUCCESS;
    }
}

void rcci_stream_exec_finish(struct rcc_comm *comm, rcci_exec_t *x)
{
    if (!x)
        return;
    if (x->inner)
        rcci_exec_host_finish(comm, x->op, x->inner);
    if (x->staging)
        staging_give(x->s, x->staging, x->staging_bytes);
    if (x->dscratch)
        x->s->dev->dev_free(x->dscratch, x->s->copy_stream);
    if (x->dslots)
        x->s->dev->dev_free(x->dslots, x->s->copy_stream);
    if (x->event)
        x->s->dev->event_destroy(x->event);
    free(x->regions);
    free(x->spans);
    free(x);
}

void rcci_stream_waiting_for(struct rcc_comm *comm, rcci_exec_t *x, char *buf, size_t size)
{
    static const char *const what[] = {"its stream to reach it", "the copy of its inputs", "",
                                       "the copy of its outputs", ""};
    if (x->phase == PH_RUN && x->inner)
        rcci_exec_host_waiting_for(comm, x->op, x->inner, buf, size);
    else
        snprintf(buf, size, "%s", what[x->phase]);
}
