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
 * Device buffers travel over the host transports through pinned staging,
 * queued on the caller's stream at the call: the inputs are copied into
 * staging before `start`, the host executor runs on the staging copies, and
 * the outputs are copied back after `done`. Host buffers are used as they
 * are. Ring and chain collectives on device buffers go chunk by chunk
 * instead, all their GPU work queued here at the call on the library's
 * stream (coll/devqueue.h): through pinned slots behind waits for the
 * network, or GPU to GPU over the device ring where this rank has edges of
 * it (devring.c, cudaipc) behind waits on the transport's slot counters;
 * the caller's stream waits for `done`.
 *
 * Why GPU work is queued at the call: streams share a GPU's hardware
 * queues (CUDA_DEVICE_MAX_CONNECTIONS of them, 8 unless set; Megatron-LM
 * sets 1), and a queue runs its work in the order it was queued, whatever
 * the stream. Work queued after the caller's wait for `done`, on a stream
 * that shares its queue, waits behind it: for `done`, which waits for that
 * work. The device ring driven by the progress thread (coll/pipeline.c,
 * RCC_DEVICE_PIPELINE=4), whose GPU work comes later, is exposed to that
 * and kept only for comparison; docs/cuda.md says more.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_CUDA /* log.h: the subsystem of this file's lines */
#include "clock.h"
#include "coll/devqueue.h"
#include "comm.h"
#include "devapi.h"
#include "log.h"
#include "memreg.h"
#include "params.h"
#include "rcc_config.h"

/* Marks per communicator: taken in turn, a pair is reused only once the
 * operation that had it last has ended (the caller waits for that, within
 * the timeout, when more operations than this are pending). */
#define STREAM_MARKS 4096
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
    struct rcc_comm *comm;
    const rcci_devapi_t *dev;
    volatile uint32_t *flags; /* pair k: start at 2k, done at 2k + 1 */
    uint32_t tickets;         /* the last handed out (never 0); under comm->lock */
    uint64_t issued;          /* tickets handed out: picks the pair; under comm->lock */
    uint32_t last[STREAM_MARKS]; /* per pair, the ticket of its last operation (0: none) */
    uint64_t last_group[STREAM_MARKS]; /* ... and the group it was called in (0: none) */
    int device;               /* of the first stream call's thread */
    void *copy_stream;        /* staging copies; the queued device path's work */
    /* Held from a call's ticket until its operation is queued for the
     * progress thread: the GPU work of the queued device path
     * (coll/devqueue.h) goes on copy_stream in the order the progress
     * thread runs the operations, also with several calling threads. */
    pthread_mutex_t submit_lock;
    pthread_mutex_t cache_lock;
    /* Staging buffers not in use; those in use are the operations'. */
    struct staging {
        void *buf;
        size_t bytes;
    } *cache;
    int ncache, cache_cap;
    /* Staging that a caller's stream still copies from: back to the cache
     * once the event recorded after those copies has completed. */
    struct pending {
        void *buf;
        size_t bytes;
        void *event;
    } *pend;
    int npend, pend_cap;
    /* Ended operations whose queued GPU work has not run yet
     * (rcci_stream_release): the progress thread ends them once it has. */
    pthread_mutex_t settle_lock;
    rcci_op_t *settling;
    atomic_int nsettling;
    /* Set once an operation's GPU work was given up on (its deadline, or
     * its end could not be known): copy_stream may still run it. */
    atomic_int gave_up;
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
            s->comm = comm;
            s->dev = rcci_devapi();
            s->device = comm->cuda_device >= 0 ? comm->cuda_device : s->dev->current_device();
            pthread_mutex_init(&s->cache_lock, NULL);
            pthread_mutex_init(&s->submit_lock, NULL);
            pthread_mutex_init(&s->settle_lock, NULL);
            /* On the communicator's device, whichever is current on the
             * thread that makes the first call: the library's stream, its
             * flags and its kernels belong there. */
            int caller;
            res = rcci_device_enter(s->dev, s->device, &caller);
            void *flags = NULL;
            if (res == RCC_SUCCESS)
                res = s->dev->host_alloc(&flags, 2 * STREAM_MARKS * sizeof(uint32_t));
            s->flags = flags;
            if (res == RCC_SUCCESS)
                res = s->dev->stream_create(&s->copy_stream);
            rcci_device_back(s->dev, caller, s->device);
            if (res != RCC_SUCCESS) {
                if (flags)
                    s->dev->host_free(flags);
                pthread_mutex_destroy(&s->cache_lock);
                pthread_mutex_destroy(&s->submit_lock);
                pthread_mutex_destroy(&s->settle_lock);
                free(s);
                s = NULL;
            }
        }
        /* Read without the lock by rcci_streams_settle. */
        __atomic_store_n(&comm->streams, s, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&comm->lock);
    *out = s;
    return res;
}

static void staging_reap(struct rcci_streams *s, int64_t deadline_ns);

int rcci_streams_quiesce(struct rcc_comm *comm, int64_t deadline_ns)
{
    struct rcci_streams *s = comm->streams;
    if (!s || !atomic_load(&s->gave_up))
        return 1;
    int previous = -1;
    if (rcci_device_enter(s->dev, s->device, &previous) != RCC_SUCCESS)
        previous = -1; /* the calls below say what fails */
    int done = rcci_stream_drain(s->dev, s->copy_stream, deadline_ns);
    rcci_device_back(s->dev, previous, s->device);
    RCC_INFO("teardown: the GPU work given up on has %s", done ? "run" : "not run");
    return done;
}

/* A staging buffer goes: its registration first (memreg.h). */
static void staging_free(struct rcci_streams *s, void *buf)
{
    rcci_memreg_forget(s->comm, buf);
    s->dev->host_free(buf);
}

void rcci_streams_free(struct rcc_comm *comm)
{
    struct rcci_streams *s = comm->streams;
    if (!s)
        return;
    /* Copies a caller's stream has still to make from staging: the stream
     * was released (every `done` is stored), so they finish soon; what is
     * still queued after the timeout stays allocated rather than freed
     * under a copy. */
    staging_reap(s, rcci_now_ns() + comm->timeout_ns);
    /* Settled before the links closed (rcci_progress_stop); one left here
     * could no longer be looked at safely, so it stays allocated. */
    if (atomic_load(&s->nsettling))
        RCC_WARN("%d stream operations' GPU work still unsettled at teardown; left allocated",
                 atomic_load(&s->nsettling));
    if (s->npend)
        RCC_WARN("%d staging buffers are still read by copies a stream has not made after %.0f "
                 "s; they stay allocated",
                 s->npend, comm->timeout_ns / 1e9);
    free(s->pend);
    for (int i = 0; i < s->ncache; i++)
        staging_free(s, s->cache[i].buf);
    free(s->cache);
    s->dev->stream_destroy(s->copy_stream);
    s->dev->host_free((void *)s->flags);
    pthread_mutex_destroy(&s->cache_lock);
    pthread_mutex_destroy(&s->submit_lock);
    pthread_mutex_destroy(&s->settle_lock);
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
        /* As after a long run: every pair's `start` and `done` just behind the next
         * ticket. Left at 0, a stream's wait (a cyclic >=) would pass at
         * once for tickets 2^31 or more past it. */
        for (int k = 0; k < STREAM_MARKS; k++) {
            __atomic_store_n(&s->flags[2 * k], next - 1, __ATOMIC_RELEASE);
            __atomic_store_n(&s->flags[2 * k + 1], next - 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&comm->lock);
    }
    return res;
}

/* Into the cache, under cache_lock; 0 where the cache cannot grow. */
static int staging_keep(struct rcci_streams *s, void *buf, size_t bytes)
{
    if (s->ncache == s->cache_cap) {
        int cap = s->cache_cap ? 2 * s->cache_cap : 8;
        struct staging *c = realloc(s->cache, sizeof *c * (size_t)cap);
        if (c)
            s->cache = c, s->cache_cap = cap;
    }
    if (s->ncache == s->cache_cap)
        return 0;
    s->cache[s->ncache++] = (struct staging){buf, bytes};
    return 1;
}

/* Moves pending staging whose copies are done back to the cache; until
 * `deadline_ns` (0: looks once) while some are not. */
static void staging_reap(struct rcci_streams *s, int64_t deadline_ns)
{
    for (;;) {
        pthread_mutex_lock(&s->cache_lock);
        for (int i = 0; i < s->npend; i++) {
            struct pending *p = &s->pend[i];
            int done = 0;
            if (s->dev->event_query(p->event, &done) != RCC_SUCCESS || !done)
                continue; /* an error keeps it: the copies may still run */
            s->dev->event_destroy(p->event);
            if (!staging_keep(s, p->buf, p->bytes))
                staging_free(s, p->buf);
            s->pend[i--] = s->pend[--s->npend];
        }
        int left = s->npend;
        pthread_mutex_unlock(&s->cache_lock);
        if (!left || rcci_now_ns() >= deadline_ns)
            return;
        nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    }
}

/* Hands staging to the pending list once `stream` has queued everything
 * that reads or writes it: it goes back to the cache when an event
 * recorded now has completed. Without an event it is never reused (a
 * leak, not a buffer rewritten under a copy). */
static void staging_pend(struct rcci_streams *s, void *buf, size_t bytes, void *stream)
{
    void *ev = NULL;
    if (s->dev->event_create(&ev) == RCC_SUCCESS && s->dev->event_record(ev, stream) == RCC_SUCCESS) {
        pthread_mutex_lock(&s->cache_lock);
        if (s->npend == s->pend_cap) {
            int cap = s->pend_cap ? 2 * s->pend_cap : 16;
            struct pending *g = realloc(s->pend, sizeof *g * (size_t)cap);
            if (g)
                s->pend = g, s->pend_cap = cap;
        }
        int kept = s->npend < s->pend_cap;
        if (kept)
            s->pend[s->npend++] = (struct pending){buf, bytes, ev};
        pthread_mutex_unlock(&s->cache_lock);
        if (kept)
            return;
    }
    if (ev)
        s->dev->event_destroy(ev);
    RCC_WARN("a staging buffer of %zu bytes cannot be tracked (%s); it stays allocated", bytes,
             rcci_tls_error());
}

/* A pinned buffer of at least `bytes`: the smallest cached one that is
 * large enough, or a new one of the next power of two. */
static rcc_result_t staging_take(struct rcci_streams *s, size_t bytes, void **buf, size_t *got)
{
    staging_reap(s, 0);
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
    rcc_result_t res = s->dev->host_alloc(buf, *got);
    /* Sent from over the host transports: without a copy where they can
     * (memreg.h). Kept until freed, as the buffer is. */
    if (res == RCC_SUCCESS && rcci_memreg_add(s->comm, *buf, *got, 1, NULL) != RCC_SUCCESS)
        RCC_TRACE("staging of %zu bytes stays unregistered: %s", *got, rcci_tls_error());
    return res;
}

/* Back to the cache (freed with the communicator, see STAGING_MIN_BYTES).
 * Where the cache cannot grow (no memory) the buffer is leaked, not freed:
 * this may be the progress thread, and cudaFreeHost waits for the device,
 * where a stream may wait for a flag that only this thread stores. */
static void staging_give(struct rcci_streams *s, void *buf, size_t bytes)
{
    pthread_mutex_lock(&s->cache_lock);
    int kept = staging_keep(s, buf, bytes);
    pthread_mutex_unlock(&s->cache_lock);
    if (!kept)
        RCC_WARN("out of memory: a staging buffer of %zu bytes stays allocated", bytes);
}

/* ---- staging on the caller's stream ---------------------------------------- */

/* One stretch of device memory the operation reads (in) or writes (out). */
typedef struct {
    char *dev;
    size_t bytes;
    int in, out;
} region_t;

/* Overlapping regions share a span, staged once (in-place layouts). */
typedef struct {
    char *dev;
    size_t bytes, off;
} span_t;

/* A staged operation's device memory and its copy in pinned staging. */
typedef struct {
    struct rcci_streams *s;
    region_t *regions;
    span_t *spans;
    int nregions, nspans;
    char *buf;
    size_t bytes;
} stage_t;

static void stage_add(stage_t *st, const void *p, size_t bytes, int in, int out)
{
    if (p && bytes > 0 && st->s->dev->is_device(p))
        st->regions[st->nregions++] = (region_t){(char *)p, bytes, in, out};
}

static int region_cmp(const void *a, const void *b)
{
    const region_t *x = a, *y = b;
    return x->dev < y->dev ? -1 : x->dev > y->dev;
}

/* The device memory `op` touches, by collective (the layouts of ringcc.h). */
static void stage_collect(struct rcc_comm *comm, stage_t *st, const rcci_op_t *op)
{
    size_t es = rcc_datatype_size(op->dtype), n = (size_t)comm->nranks;
    size_t one = op->count * es;
    int root = comm->rank == op->root;
    switch (op->coll) {
    case RCCI_COLL_ALLREDUCE:
        stage_add(st, op->sendbuf, one, 1, 0);
        stage_add(st, op->recvbuf, one, 0, 1);
        break;
    case RCCI_COLL_REDUCE_SCATTER:
        stage_add(st, op->sendbuf, one * n, 1, 0);
        stage_add(st, op->recvbuf, one, 0, 1);
        break;
    case RCCI_COLL_ALLGATHER:
        stage_add(st, op->sendbuf, one, 1, 0);
        stage_add(st, op->recvbuf, one * n, 0, 1);
        break;
    case RCCI_COLL_BROADCAST:
        if (root)
            stage_add(st, op->sendbuf, one, 1, 0);
        stage_add(st, op->recvbuf, one, 0, 1);
        break;
    case RCCI_COLL_REDUCE:
        stage_add(st, op->sendbuf, one, 1, 0);
        if (root)
            stage_add(st, op->recvbuf, one, 0, 1);
        break;
    case RCCI_COLL_P2P:
        for (int i = 0; i < op->nmsgs; i++)
            stage_add(st, op->msgs[i].buf, op->msgs[i].bytes, op->msgs[i].is_send,
                      !op->msgs[i].is_send);
        break;
    case RCCI_COLL_BARRIER: break; /* its own memory */
    }
}

/* Sorts the regions into spans and lays the spans out in staging. */
static size_t stage_layout(stage_t *st)
{
    qsort(st->regions, (size_t)st->nregions, sizeof *st->regions, region_cmp);
    size_t off = 0;
    for (int i = 0; i < st->nregions; i++) {
        region_t *r = &st->regions[i];
        span_t *last = st->nspans ? &st->spans[st->nspans - 1] : NULL;
        if (last && r->dev < last->dev + last->bytes) {
            size_t end = (size_t)(r->dev - last->dev) + r->bytes;
            if (end > last->bytes) {
                off += end - last->bytes;
                last->bytes = end;
            }
        } else {
            off = (off + 255) & ~(size_t)255; /* aligned for the reductions */
            st->spans[st->nspans++] = (span_t){r->dev, r->bytes, off};
            off += r->bytes;
        }
    }
    return off;
}

/* Where device address p (inside a region) lies in staging; p itself when
 * it is not staged. */
static void *stage_addr(const stage_t *st, const void *p)
{
    for (int i = 0; p && i < st->nspans; i++) {
        const span_t *sp = &st->spans[i];
        if ((const char *)p >= sp->dev && (const char *)p < sp->dev + sp->bytes)
            return st->buf + sp->off + ((const char *)p - sp->dev);
    }
    return (void *)p;
}

/* Queues the copies of the inputs (to_host) or of the outputs back on
 * `stream`. */
static rcc_result_t stage_copy(const stage_t *st, int to_host, void *stream)
{
    const rcci_devapi_t *dev = st->s->dev;
    for (int i = 0; i < st->nregions; i++) {
        const region_t *r = &st->regions[i];
        if (!(to_host ? r->in : r->out))
            continue;
        void *host = stage_addr(st, r->dev);
        rcc_result_t res = to_host ? dev->copy(host, r->dev, r->bytes, stream)
                                   : dev->copy(r->dev, host, r->bytes, stream);
        if (res != RCC_SUCCESS)
            return res;
    }
    return RCC_SUCCESS;
}

/* Ends the staging of an operation: queues the copies of its outputs on
 * `stream` (copy_out; else the outputs stay as they are), and hands the
 * buffer over to be reused once the stream has made them. */
static rcc_result_t stage_end(stage_t *st, int copy_out, void *stream)
{
    if (!st)
        return RCC_SUCCESS;
    rcc_result_t res = copy_out ? stage_copy(st, 0, stream) : RCC_SUCCESS;
    if (st->buf)
        staging_pend(st->s, st->buf, st->bytes, stream);
    free(st->regions);
    free(st->spans);
    free(st);
    return res;
}

/* Stages `op` on the caller's stream: takes staging for its device memory,
 * queues the copies of its inputs, and points the operation at the copies
 * (the host executor sees host memory only). *out NULL: nothing to stage. */
static rcc_result_t stage_begin(struct rcc_comm *comm, struct rcci_streams *s, rcci_op_t *op,
                                void *stream, stage_t **out)
{
    *out = NULL;
    stage_t *st = calloc(1, sizeof *st);
    int most = op->coll == RCCI_COLL_P2P ? op->nmsgs : 2;
    if (st) {
        st->s = s;
        st->regions = calloc((size_t)most + 1, sizeof *st->regions);
        st->spans = calloc((size_t)most + 1, sizeof *st->spans);
    }
    if (!st || !st->regions || !st->spans) {
        if (st)
            free(st->regions), free(st->spans);
        free(st);
        return rcci_error(RCC_ERR_NO_MEMORY, "stream staging table");
    }
    stage_collect(comm, st, op);
    if (!st->nregions)
        return stage_end(st, 0, stream);
    rcc_result_t res = staging_take(s, stage_layout(st), (void **)&st->buf, &st->bytes);
    if (res != RCC_SUCCESS) {
        st->buf = NULL;
        stage_end(st, 0, stream);
        return res;
    }
    *out = st; /* from here on the stream may read into the buffer */
    res = stage_copy(st, 1, stream);
    op->sendbuf = stage_addr(st, op->sendbuf);
    op->recvbuf = stage_addr(st, op->recvbuf);
    for (int i = 0; i < op->nmsgs; i++)
        op->msgs[i].buf = stage_addr(st, op->msgs[i].buf);
    return res;
}

/* ---- marks: the call side ------------------------------------------------ */

/* Streams of the current group, waited on at its end (per thread), with
 * the staging to copy back after each wait. */
typedef struct {
    const rcci_devapi_t *dev;
    void *stream;
    volatile uint32_t *done;
    uint32_t ticket;
    rcci_op_t *op; /* a reference: whether it was launched */
    stage_t *stage;
    int device; /* the communicator's: its stream's and events' */
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
    atomic_fetch_add(&w->op->refs, 1);
    return RCC_SUCCESS;
}

void rcci_stream_group_end(void)
{
    /* A group may span communicators on several devices (one thread
     * driving them all): each entry's calls on its own, the caller's
     * device current again at the end. */
    int mine = group_nwaits ? group_waits[0].dev->current_device() : -1, current = mine;
    for (int i = 0; i < group_nwaits; i++) {
        group_wait_t *w = &group_waits[i];
        rcc_result_t res = RCC_SUCCESS;
        if (w->device != current && (res = w->dev->use_device(w->device)) == RCC_SUCCESS)
            current = w->device;
        if (res == RCC_SUCCESS)
            res = w->dev->wait_flag(w->stream, w->done, w->ticket);
        /* One that was never launched, or failed at launch, leaves its
         * outputs as they are. */
        int copy_out = atomic_load(&w->op->launched) &&
                       !(rcci_op_done(w->op) && w->op->result != RCC_SUCCESS);
        if (res == RCC_SUCCESS)
            res = stage_end(w->stage, copy_out, w->stream);
        else
            stage_end(w->stage, 0, w->stream);
        if (res != RCC_SUCCESS)
            RCC_WARN("a stream of the group could not be told to wait and copy back: %s",
                     rcci_tls_error());
        rcci_op_release(w->op);
    }
    if (group_nwaits)
        rcci_device_back(group_waits[0].dev, mine, current);
    free(group_waits);
    group_waits = NULL;
    group_nwaits = group_cap = 0;
}

/* The queued device path's GPU work, before its stream may go on: let run
 * through (after a failure its waits would never be met) and waited for,
 * within STREAM_SETTLE_NS of the operation's end, by the progress thread
 * (rcci_streams_settle), never by a caller: after a failure at the call
 * that work may first wait for the caller's earlier work on its stream.
 * Then its state goes, and its pinned area is pended behind the library's
 * stream. The area stays the operation's until then, since releasing
 * writes its flags. */
#define STREAM_SETTLE_NS (5ll * 1000000000)

/* Looks once whether the GPU work has run, letting it run through if not:
 * 1 when it has, or when that cannot be known (said); 0 while it runs. */
static int stream_devq_ran(rcci_op_t *op, int64_t now)
{
    char error[RCCI_ERR_TEXT_BYTES]; /* the failure being reported stays the story */
    snprintf(error, sizeof error, "%s", rcci_tls_error());
    int done = 0;
    rcc_result_t res = rcci_devq_gpu_done(op->mark.devq, &done);
    if (res == RCC_SUCCESS && !done) {
        /* Work still queued means the operation failed: let it run
         * through. Again at every look: a live peer's stores on the device
         * ring's counters may undo it (transport.h, queue_abort). After
         * success there is none, and the counters must not be touched. */
        rcci_devq_release(op->mark.devq);
        if (now < op->mark.settle_deadline_ns || !op->mark.settling)
            return 0;
        RCC_WARN("op #%u: its GPU work did not end within %.0f s of its end; its stream goes on",
                 op->seq, STREAM_SETTLE_NS / 1e9);
        atomic_store(&op->mark.streams->gave_up, 1);
    } else if (res != RCC_SUCCESS) {
        RCC_WARN("op #%u: when its GPU work ends cannot be known (%s); its stream goes on", op->seq,
                 rcci_tls_error());
        atomic_store(&op->mark.streams->gave_up, 1);
    }
    rcci_tls_error_set(error);
    return 1;
}

/* Its GPU work has run (or is given up on): its state goes, its pinned
 * area behind the library's stream, and the streams go on. */
static void stream_devq_end(rcci_op_t *op)
{
    struct rcci_streams *s = op->mark.streams;
    char error[RCCI_ERR_TEXT_BYTES];
    snprintf(error, sizeof error, "%s", rcci_tls_error());
    rcci_devq_free(s->comm, op->mark.devq);
    op->mark.devq = NULL;
    if (op->mark.pin)
        staging_pend(s, op->mark.pin, op->mark.pin_bytes, s->copy_stream);
    op->mark.pin = NULL;
    rcci_tls_error_set(error);
}

/* Stores done = ticket (the streams waiting for it move on) and gives its
 * pinned slots back. */
static void stream_mark_end(rcci_op_t *op)
{
    if (op->mark.done && !op->mark.released) {
        op->mark.released = 1;
        __atomic_store_n(op->mark.done, op->mark.ticket, __ATOMIC_RELEASE);
    }
    if (op->mark.pin) {
        staging_give(op->mark.streams, op->mark.pin, op->mark.pin_bytes);
        op->mark.pin = NULL;
    }
}

/* For the progress thread, which ends it once its GPU work has run. */
static void stream_settle_later(rcci_op_t *op)
{
    struct rcci_streams *s = op->mark.streams;
    atomic_fetch_add(&op->refs, 1); /* the settling list's */
    op->mark.settling = 1;
    op->mark.settle_deadline_ns = rcci_now_ns() + STREAM_SETTLE_NS;
    pthread_mutex_lock(&s->settle_lock);
    op->mark.settle_next = s->settling;
    s->settling = op;
    atomic_fetch_add(&s->nsettling, 1);
    pthread_mutex_unlock(&s->settle_lock);
    rcci_progress_wake(s->comm);
}

void rcci_stream_release(rcci_op_t *op)
{
    for (int i = 0; i < op->nmembers; i++)
        rcci_stream_release(op->members[i]);
    if (op->mark.settling) /* rcci_streams_settle ends it */
        return;
    if (op->mark.devq) {
        /* Now, before a failure closes the connections. */
        rcci_devq_settle_requests(op->mark.devq);
        if (!stream_devq_ran(op, rcci_now_ns())) {
            stream_settle_later(op);
            return;
        }
        stream_devq_end(op);
    }
    stream_mark_end(op);
}

int rcci_streams_settle(struct rcc_comm *comm, int wait)
{
    struct rcci_streams *s = __atomic_load_n(&comm->streams, __ATOMIC_ACQUIRE);
    if (!s || atomic_load(&s->nsettling) == 0)
        return 0;
    /* Its CUDA calls (events, the pinned area's event) on the
     * communicator's device; this thread's own device again after. */
    int previous = -1;
    if (rcci_device_enter(s->dev, s->device, &previous) != RCC_SUCCESS)
        previous = -1; /* the queries say what fails */
    int left;
    for (;;) {
        pthread_mutex_lock(&s->settle_lock);
        rcci_op_t *list = s->settling;
        s->settling = NULL;
        pthread_mutex_unlock(&s->settle_lock);
        rcci_op_t *keep = NULL, *last = NULL;
        int64_t now = rcci_now_ns();
        while (list) {
            rcci_op_t *op = list;
            list = op->mark.settle_next;
            if (!stream_devq_ran(op, now)) {
                op->mark.settle_next = keep;
                keep = op;
                last = last ? last : op;
                continue;
            }
            stream_devq_end(op);
            op->mark.settling = 0;
            stream_mark_end(op);
            atomic_fetch_sub(&s->nsettling, 1);
            rcci_op_release(op);
        }
        pthread_mutex_lock(&s->settle_lock);
        if (keep) { /* ahead of any added meanwhile */
            last->mark.settle_next = s->settling;
            s->settling = keep;
        }
        pthread_mutex_unlock(&s->settle_lock);
        left = atomic_load(&s->nsettling);
        if (!wait || left == 0)
            break;
        nanosleep(&(struct timespec){0, 200 * 1000}, NULL);
    }
    rcci_device_back(s->dev, previous, s->device);
    return left;
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

int rcci_stream_device_pipeline(void)
{
    int setting = rcci_param_int(RCCI_PARAM_DEVICE_PIPELINE);
    return setting == RCCI_DEVPIPE_AUTO ? RCCI_DEVPIPE_RING : setting;
}

/* Ring and chain collectives whose buffers are all device memory run chunk
 * by chunk through pinned slots (coll/pipeline.c), copies and reductions on
 * the GPU overlapping the wire, partial results in device scratch. The rest
 * (the small-message allreduces, point-to-point, a mix of host and device
 * buffers) are staged whole, and all are where the device path is not
 * allowed. The same on every rank (it is in the operation's signature). */
static int op_pipelines_on_device(struct rcc_comm *comm, const rcci_op_t *op,
                                  const rcci_devapi_t *dev)
{
    int root = comm->rank == op->root;
    if (!comm->dev_pipeline)
        return 0;
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

/* Queues a device operation's GPU work on the library's stream, at the
 * call (coll/devqueue.h), over the host ring and the device ring alike;
 * except for the device ring driven by the progress thread
 * (RCC_DEVICE_PIPELINE=4, coll/pipeline.c), kept for comparison. Its
 * device scratch is freed after that work, in stream order, whatever
 * happens; its pinned slots go with its `done` (stream_devq_settle). */
static int stream_queues_device(const struct rcc_comm *comm)
{
    return comm->dev_pipeline != RCCI_DEVPIPE_RING_PROGRESS ||
           (comm->dsend_link.nconns == 0 && comm->drecv_link.nconns == 0);
}

static rcc_result_t stream_queue_device(struct rcc_comm *comm, struct rcci_streams *s,
                                        rcci_op_t *op)
{
    char *dscratch = NULL;
    size_t scratch = rcci_devq_scratch_bytes(comm, op);
    rcc_result_t res = scratch ? s->dev->dev_alloc((void **)&dscratch, scratch, s->copy_stream)
                               : RCC_SUCCESS;
    if (res == RCC_SUCCESS)
        res = rcci_devq_queue(comm, op, s->dev, s->copy_stream, op->mark.start, op->mark.ticket,
                              op->mark.pin, dscratch, &op->mark.devq);
    if (res != RCC_SUCCESS) {
        rcci_devq_release(op->mark.devq); /* what it queued runs through */
        if (rcci_devq_on_device_ring(op->mark.devq))
            rcci_progress_fail(comm, res);
    }
    if (dscratch)
        s->dev->dev_free(dscratch, s->copy_stream);
    return res;
}

static rcc_result_t stream_submit(struct rcc_comm *comm, struct rcci_streams *s, rcci_op_t *op,
                                  void *stream);

rcc_result_t rcci_stream_submit(struct rcc_comm *comm, rcci_op_t *op, void *stream)
{
    /* Refused before anything is made: a first call's allocations and
     * stream would otherwise land in the capture. */
    const rcci_devapi_t *dev = rcci_devapi();
    int capturing = 0;
    rcc_result_t res = RCC_SUCCESS;
    if (dev->stream_capturing && (res = dev->stream_capturing(stream, &capturing)) == RCC_SUCCESS &&
        capturing)
        res = rcci_error(RCC_ERR_UNSUPPORTED,
                         "the stream is capturing a CUDA graph: ringcc's stream operations cannot "
                         "be captured (each call's flags carry its own ticket); call it outside "
                         "the capture");
    struct rcci_streams *s = NULL;
    if (res == RCC_SUCCESS)
        res = streams_get(comm, &s);
    if (res != RCC_SUCCESS) {
        rcci_op_release(op);
        return res;
    }
    /* The caller's thread may have another device current: the
     * communicator's own for the call (its streams, events and kernels),
     * the caller's again after. */
    int mine;
    res = rcci_device_enter(s->dev, s->device, &mine);
    if (res != RCC_SUCCESS) {
        rcci_op_release(op);
        return res;
    }
    pthread_mutex_lock(&s->submit_lock);
    res = stream_submit(comm, s, op, stream);
    pthread_mutex_unlock(&s->submit_lock);
    rcci_device_back(s->dev, mine, s->device);
    return res;
}

static rcc_result_t stream_submit(struct rcc_comm *comm, struct rcci_streams *s, rcci_op_t *op,
                                  void *stream)
{
    rcc_result_t res;
    pthread_mutex_lock(&comm->lock);
    if (comm->broken != RCC_SUCCESS) {
        /* Nothing queued on a failed communicator: its device ring's
         * numbering may have moved on under a half-queued call. */
        rcc_result_t broken = comm->broken;
        char text[RCCI_ERR_TEXT_BYTES];
        snprintf(text, sizeof text, "%s", comm->broken_text);
        pthread_mutex_unlock(&comm->lock);
        rcci_op_release(op);
        return rcci_error(broken, "the communicator failed earlier: %s", text);
    }
    /* Pairs in turn by a count that does not wrap, each remembering its
     * last ticket: right also after the tickets wrap (2^32 operations). */
    size_t k = (size_t)(s->issued % STREAM_MARKS);
    uint64_t group = rcci_group_serial();
    if (group && s->last_group[k] == group) {
        /* Its pair's last operation is in this open group: launched only at
         * rcc_group_end, it cannot end before this call would have to wait. */
        pthread_mutex_unlock(&comm->lock);
        rcci_op_release(op);
        return rcci_error(RCC_ERR_INVALID_USAGE,
                          "more than %d stream operations on one communicator in one group: "
                          "end the group (rcc_group_end) before the next",
                          STREAM_MARKS);
    }
    s->issued++;
    uint32_t ticket = ++s->tickets;
    if (ticket == 0) /* 0 is the flags' initial value: never a ticket */
        ticket = ++s->tickets;
    uint32_t prev = s->last[k];
    s->last[k] = ticket;
    s->last_group[k] = group;
    pthread_mutex_unlock(&comm->lock);
    volatile uint32_t *start = &s->flags[2 * k], *done = &s->flags[2 * k + 1];
    op->on_stream = 1;
    op->mark = (rcci_mark_t){.start = start, .done = done, .ticket = ticket, .stream = stream};
    res = mark_pair_free(comm, done, prev);
    if (res != RCC_SUCCESS) {
        /* The pair is still `prev`'s, and its stream may wait on it: this
         * operation must not store its ticket there, and the pair's next
         * user waits for `prev` again. */
        op->mark.released = 1;
        pthread_mutex_lock(&comm->lock);
        if (s->last[k] == ticket)
            s->last[k] = prev;
        pthread_mutex_unlock(&comm->lock);
    }
    /* Chunk by chunk on the device, or staged whole here: in its
     * signature, which peers may ask about (or compare) while it waits for
     * its stream. */
    rcci_exec_plan(comm, op);
    op->device = op_pipelines_on_device(comm, op, s->dev);
    stage_t *stage = NULL;
    if (res == RCC_SUCCESS && !op->device)
        res = stage_begin(comm, s, op, stream, &stage);
    int queued = op->device && stream_queues_device(comm);
    if (res == RCC_SUCCESS && op->device) { /* its pinned slots, here (rcci_mark_t) */
        op->mark.streams = s;
        res = staging_take(s,
                           queued ? rcci_devq_pinned_bytes(comm, op)
                                  : 2 * (size_t)comm->slots * rcci_coll_device_chunk(comm, op),
                           &op->mark.pin, &op->mark.pin_bytes);
        if (res != RCC_SUCCESS)
            op->mark.pin = NULL;
    }
    int started = 0;
    if (res == RCC_SUCCESS) {
        res = s->dev->write_flag(stream, start, ticket);
        started = res == RCC_SUCCESS;
    }
    if (res == RCC_SUCCESS && queued)
        res = stream_queue_device(comm, s, op);
    if (res == RCC_SUCCESS && rcci_group_active()) {
        group_wait_t w = {s->dev, stream, done, ticket, op, stage, s->device};
        res = group_wait_add(&w);
        if (res == RCC_SUCCESS) {
            stage = NULL; /* the group's end copies back */
            res = rcci_group_add(comm, op, NULL);
        }
    } else if (res == RCC_SUCCESS) {
        res = s->dev->wait_flag(stream, done, ticket);
        if (res == RCC_SUCCESS)
            res = rcci_progress_enqueue(comm, op);
        if (res == RCC_SUCCESS) { /* queued: from here on it runs */
            rcc_result_t copied = stage_end(stage, 1, stream);
            stage = NULL;
            if (copied != RCC_SUCCESS)
                RCC_WARN("cannot queue the copy of a stream operation's outputs: %s",
                         rcci_tls_error());
        }
    }
    stage_end(stage, 0, stream); /* not launched: the outputs stay as they are */
    if (res != RCC_SUCCESS) {
        /* Part of the work may be queued on the library's stream, reading
         * the caller's buffers once it runs through: the caller's stream
         * waits for `done`, which the release stores once that part has run
         * (stream_devq_settle). The stream may already wait for it. */
        if (started)
            (void)s->dev->wait_flag(stream, done, ticket);
        rcci_stream_release(op);
    }
    rcci_op_release(op); /* the queue or the group holds it now */
    return res;
}

/* ---- the progress side: an executor around the host one ------------------ */

enum { PH_START, PH_RUN, PH_DRAIN, PH_DONE };

struct rcci_exec {
    rcci_op_t *op;
    struct rcci_streams *s;
    int phase;
    rcci_exec_t *inner;
    /* The chunked device path (inner is a pipeline): its device scratch
     * and receive slots of the device ring (devring.c). */
    int pipelined;
    char *dscratch;
    char *dslots;
    void *event; /* recorded on the device path's stream when it ends */
    int64_t drain_ns; /* when PH_DRAIN began: its wait has the communicator's timeout too */
};

/* Every mark `op` waits for has been started by its stream. */
static int marks_started(const rcci_op_t *op)
{
    for (int i = 0; i < op->nmembers; i++)
        if (!marks_started(op->members[i]))
            return 0;
    return !op->mark.start || __atomic_load_n(op->mark.start, __ATOMIC_ACQUIRE) == op->mark.ticket;
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
    rcci_exec_plan(comm, op);       /* a merged operation (group.c) has no plan yet */
    /* Its messages numbered now, in call order: it starts once its stream
     * reaches it, maybe after a later call's on another stream. */
    if (op->coll == RCCI_COLL_P2P)
        rcci_p2p_number(comm, op);
    rcc_result_t res = streams_get(comm, &x->s);
    if (res == RCC_SUCCESS) /* this (progress) thread's CUDA calls go to that device */
        res = x->s->dev->use_device(x->s->device);
    /* Its event queries and allocations go on while the application
     * captures a graph on another thread (PyTorch captures in the global
     * mode, which forbids them otherwise). */
    if (res == RCC_SUCCESS && x->s->dev->relax_capture)
        x->s->dev->relax_capture();
    return res;
}

/* The chunked device path: its buffers, and the pipeline. Its pinned
 * slots were taken at the call (op->mark.pin). */
static rcc_result_t stream_pipeline_start(struct rcc_comm *comm, rcci_exec_t *x)
{
    size_t chunk = rcci_coll_device_chunk(comm, x->op);
    rcc_result_t res = RCC_SUCCESS;
    if (!x->op->mark.pin)
        res = rcci_error(RCC_ERR_INTERNAL, "a device-path operation without its pinned slots");
    size_t scratch = rcci_coll_device_scratch_bytes(comm, x->op);
    if (res == RCC_SUCCESS && scratch)
        res = x->s->dev->dev_alloc((void **)&x->dscratch, scratch, x->s->copy_stream);
    if (res == RCC_SUCCESS && comm->drecv_link.nconns > 0 && !rcci_coll_device_inplace(comm, x->op))
        res = x->s->dev->dev_alloc((void **)&x->dslots, (size_t)comm->slots * chunk,
                                   x->s->copy_stream);
    if (res == RCC_SUCCESS)
        res = rcci_coll_start_device(comm, x->op, x->s->dev, x->s->copy_stream, x->op->mark.pin,
                                     x->dscratch, x->dslots, &x->inner);
    x->pipelined = 1;
    return res;
}

rcc_result_t rcci_stream_exec_advance(struct rcc_comm *comm, rcci_exec_t *x, int *progressed,
                                      int *done)
{
    rcc_result_t res = RCC_SUCCESS;
    *progressed = *done = 0;
    switch (x->phase) {
    case PH_START:
        if (!marks_started(x->op)) {
            rcci_poll_within(comm, RCCI_POLL_GPU_ACT_US); /* the GPU stores the flag */
            return RCC_SUCCESS;
        }
        if (comm->broken != RCC_SUCCESS)
            return rcci_error(comm->broken, "the communicator failed earlier: %s",
                              comm->broken_text);
        x->op->started_ns = rcci_now_ns();
        x->phase = PH_RUN;
        *progressed = 1;
        /* Staged ops run on the copies their stream made before `start`;
         * queued ones drive the GPU work queued at the call. */
        return x->op->device && !x->op->mark.devq ? stream_pipeline_start(comm, x) : RCC_SUCCESS;
    case PH_RUN:
        if (x->op->mark.devq) {
            int ended = 0;
            res = rcci_devq_advance(comm, x->op->mark.devq, progressed, &ended);
            if (res == RCC_SUCCESS && ended) {
                x->phase = PH_DRAIN;
                x->drain_ns = rcci_now_ns();
            }
            return res;
        }
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
        if (!x->pipelined) {
            x->phase = PH_DONE;
            *done = 1;
            return RCC_SUCCESS;
        }
        /* `done` only once the device path's last GPU work has run. */
        res = x->s->dev->event_create(&x->event);
        if (res == RCC_SUCCESS)
            res = x->s->dev->event_record(x->event, x->s->copy_stream);
        x->phase = PH_DRAIN;
        x->drain_ns = rcci_now_ns();
        return res;
    case PH_DRAIN: {
        int ready = 0;
        res = x->op->mark.devq ? rcci_devq_gpu_done(x->op->mark.devq, &ready)
                               : x->s->dev->event_query(x->event, &ready);
        if (res == RCC_SUCCESS && !ready && rcci_now_ns() - x->drain_ns > comm->timeout_ns)
            return rcci_error(RCC_ERR_TIMEOUT,
                              "%s: every message has moved, but the GPU did not finish the "
                              "operation's last work within %.0f s (is the device hung?)",
                              rcci_coll_name(x->op->coll), comm->timeout_ns / 1e9);
        if (res != RCC_SUCCESS || !ready) {
            rcci_poll_within(comm, RCCI_POLL_GPU_ACT_US); /* its `done` waits for this */
            return res;
        }
        x->phase = PH_DONE;
        *progressed = *done = 1;
        return RCC_SUCCESS;
    }
    default: *done = 1; return RCC_SUCCESS;
    }
}

void rcci_stream_exec_finish(struct rcc_comm *comm, rcci_exec_t *x)
{
    if (!x)
        return;
    if (x->inner)
        rcci_exec_host_finish(comm, x->op, x->inner);
    /* Ended early (a failure): copies into and out of the pinned slots may
     * still be queued on the library's stream, so they go back only behind
     * it, not to the cache at the release. At PH_DONE its work has run. */
    if (x->pipelined && x->phase != PH_DONE && x->op->mark.pin) {
        staging_pend(x->s, x->op->mark.pin, x->op->mark.pin_bytes, x->s->copy_stream);
        x->op->mark.pin = NULL;
    }
    if (x->dscratch)
        x->s->dev->dev_free(x->dscratch, x->s->copy_stream);
    if (x->dslots)
        x->s->dev->dev_free(x->dslots, x->s->copy_stream);
    if (x->event)
        x->s->dev->event_destroy(x->event);
    free(x);
}

void rcci_stream_waiting_for(struct rcc_comm *comm, rcci_exec_t *x, char *buf, size_t size)
{
    if (x->phase == PH_RUN && x->op->mark.devq)
        rcci_devq_waiting_for(comm, x->op->mark.devq, buf, size);
    else if (x->phase == PH_RUN && x->inner)
        rcci_exec_host_waiting_for(comm, x->op, x->inner, buf, size);
    else
        snprintf(buf, size, "%s",
                 x->phase == PH_START   ? "its stream to reach it"
                 : x->phase == PH_DRAIN ? "its last GPU work"
                                        : "");
}
