#include "fakedev.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devapi.h"
#include "err.h"
#include "ipcmem.h"
#include "reduce.h"

/* ---- device memory: ranges this module handed out ------------------------- */

/* CUDA's rule for device memory exported by IPC: freeing it while another
 * process still has it open (cudaIpcOpenMemHandle without the matching
 * cudaIpcCloseMemHandle) is undefined behaviour. Modelled: each exportable
 * device allocation has a shared page listing the processes that opened
 * it, and freeing it while a live one still does aborts the process with
 * the reason. A process that has died (or is a zombie) no longer counts:
 * the driver unmaps a dead process's mappings. */
#define FAKE_USERS 64
typedef struct {
    _Atomic int32_t pid[FAKE_USERS];
} fake_users_t;

#define FAKE_MAX_ALLOCS 256
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *p;
    size_t bytes;
    int ipc;    /* 0: fakedev_malloc; 1: exported (ipc_alloc); 2: a peer's, opened */
    int device; /* counts as device memory (is_device) */
    rcci_ipcmem_handle_t handle;
    /* Device memory: who has it open (exporters: theirs; openers: the
     * exporter's, and the entry they took in it). */
    fake_users_t *users;
    rcci_ipcmem_handle_t users_handle;
    int user_slot;
} allocs[FAKE_MAX_ALLOCS];

/* What an exported handle carries: the memory, then its users page. */
typedef struct {
    rcci_ipcmem_handle_t mem, users;
} fake_handle_t;
_Static_assert(sizeof(fake_handle_t) <= RCCI_IPC_HANDLE_BYTES, "fake IPC handle size");

/* Records a range; aborts when the table is full (a test's bug). */
static int allocs_add(char *p, size_t bytes, int ipc, int device,
                      const rcci_ipcmem_handle_t *handle)
{
    pthread_mutex_lock(&mem_lock);
    int i = 0;
    while (i < FAKE_MAX_ALLOCS && allocs[i].p)
        i++;
    if (i == FAKE_MAX_ALLOCS) {
        fprintf(stderr, "fakedev: more than %d allocations at once\n", FAKE_MAX_ALLOCS);
        abort();
    }
    allocs[i].p = p, allocs[i].bytes = bytes, allocs[i].ipc = ipc, allocs[i].device = device;
    allocs[i].users = NULL, allocs[i].user_slot = -1;
    if (handle)
        allocs[i].handle = *handle;
    pthread_mutex_unlock(&mem_lock);
    return i;
}

/* An exporter's users page, made with the allocation. */
static void users_create(int i)
{
    void *u;
    if (rcci_ipcmem_create(sizeof(fake_users_t), &u, &allocs[i].users_handle) != RCC_SUCCESS)
        abort();
    allocs[i].users = u;
}

/* Frees an exporter's users page, aborting when a live process other than
 * this one still has the memory open. */
static void users_check_free(fake_users_t *users, const rcci_ipcmem_handle_t *uh, size_t bytes)
{
    if (!users)
        return;
    for (int k = 0; k < FAKE_USERS; k++) {
        int32_t pid = atomic_load(&users->pid[k]);
        if (pid > 0 && pid != (int32_t)getpid() && rcci_process_running(pid)) {
            fprintf(stderr,
                    "fakedev: process %d freed %zu bytes of device memory that process %d still "
                    "has open by IPC (CUDA: undefined behaviour)\n",
                    (int)getpid(), bytes, (int)pid);
            abort();
        }
    }
    rcci_ipcmem_free(users, uh);
}

/* Forgets the range at p; returns what it was (ipc -1: not found), and
 * gives back (opened) or checks and frees (exported) its users page. */
static int allocs_take(void *p, size_t *bytes, rcci_ipcmem_handle_t *handle)
{
    int ipc = -1;
    fake_users_t *users = NULL;
    rcci_ipcmem_handle_t uh;
    int slot = -1;
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < FAKE_MAX_ALLOCS && ipc < 0; i++)
        if (allocs[i].p == p) {
            ipc = allocs[i].ipc;
            *bytes = allocs[i].bytes;
            *handle = allocs[i].handle;
            users = allocs[i].users, uh = allocs[i].users_handle, slot = allocs[i].user_slot;
            allocs[i].p = NULL;
            allocs[i].users = NULL;
        }
    pthread_mutex_unlock(&mem_lock);
    if (users && ipc == 2) {
        if (slot >= 0)
            atomic_store(&users->pid[slot], 0);
        rcci_ipcmem_close(users, (size_t)uh.bytes);
    } else if (users) {
        users_check_free(users, &uh, *bytes);
    }
    return ipc;
}

/* A memfd, as exported memory is: a peer may map a user's buffer too
 * (ipc_export), as CUDA IPC maps a cudaMalloc allocation. */
void *fakedev_malloc(size_t bytes)
{
    void *p;
    rcci_ipcmem_handle_t h;
    if (rcci_ipcmem_create(bytes ? bytes : 1, &p, &h) != RCC_SUCCESS)
        abort();
    int i = allocs_add(p, (size_t)h.bytes, 0, 1, &h);
    users_create(i);
    return p;
}

void fakedev_free(void *p)
{
    size_t bytes;
    rcci_ipcmem_handle_t h;
    if (allocs_take(p, &bytes, &h) == 0)
        rcci_ipcmem_free(p, &h);
}

/* The device allocation p lies in (mem_lock held): its index, or -1. */
static int device_alloc_at(const void *p)
{
    for (int i = 0; i < FAKE_MAX_ALLOCS; i++)
        if (allocs[i].p && allocs[i].device && (const char *)p >= allocs[i].p &&
            (const char *)p < allocs[i].p + allocs[i].bytes)
            return i;
    return -1;
}

/* The kind of memory p lies in: 0 fakedev_malloc, 1 exported device memory
 * (ipc_alloc), 2 a peer's opened device memory; -1 other (host memory,
 * exported host pages). */
static int mem_kind(const void *p)
{
    pthread_mutex_lock(&mem_lock);
    int i = device_alloc_at(p), kind = i < 0 ? -1 : allocs[i].ipc;
    pthread_mutex_unlock(&mem_lock);
    return kind;
}

static int fake_is_device(const void *p) { return mem_kind(p) >= 0; }

/* Pinned host memory (host_alloc), under mem_lock: a group of thousands
 * of operations holds as many staging buffers. */
typedef struct {
    char *p;
    size_t bytes;
} pinned_t;
static pinned_t *pinned;
static size_t npinned, pinned_cap;

static void pinned_add(char *p, size_t bytes)
{
    pthread_mutex_lock(&mem_lock);
    if (npinned == pinned_cap) {
        pinned_cap = pinned_cap ? 2 * pinned_cap : 64;
        pinned = realloc(pinned, pinned_cap * sizeof *pinned);
        if (!pinned)
            abort();
    }
    pinned[npinned++] = (pinned_t){p, bytes};
    pthread_mutex_unlock(&mem_lock);
}

static void pinned_remove(const char *p)
{
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < npinned; i++)
        if (pinned[i].p == p) {
            pinned[i] = pinned[--npinned];
            break;
        }
    pthread_mutex_unlock(&mem_lock);
}

/* Whether the device can reach p: memory this module handed out (device,
 * exported or pinned), not a plain malloc's (pageable). NULL passes. */
static int mem_reachable(const void *p)
{
    if (!p)
        return 1;
    const char *c = p;
    int found = 0;
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < FAKE_MAX_ALLOCS && !found; i++)
        found = allocs[i].p && c >= allocs[i].p && c < allocs[i].p + allocs[i].bytes;
    for (size_t i = 0; i < npinned && !found; i++)
        found = c >= pinned[i].p && c < pinned[i].p + pinned[i].bytes;
    pthread_mutex_unlock(&mem_lock);
    return found;
}

/* ---- streams: a thread each, running its queue in order ------------------- */

typedef enum { ITEM_COPY, ITEM_REDUCE, ITEM_WRITE, ITEM_WAIT, ITEM_EVENT, ITEM_FN } item_kind_t;

typedef struct item {
    struct item *next;
    item_kind_t kind;
    void *dst;
    const void *src;
    size_t n;
    volatile uint32_t *flag;
    uint32_t value;
    atomic_uint_fast64_t *event_done;
    uint64_t event_seq;
    void (*fn)(void *);
    void *arg;
    const void *src2; /* reduce: dst = src op src2 (and dst2 = dst when set) */
    void *dst2;       /* copy: also (or, dst NULL, only) there */
    void *const *at;  /* *at + at_off, where not NULL when it runs, replaces dst2 */
    size_t at_off;
    rcc_datatype_t dtype;
    rcc_redop_t op;
    int divisor;
} item_t;

typedef struct fake_stream {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    item_t *head, *tail;
    uint64_t queued, ran; /* items */
    int stop;
    unsigned seed;
    struct fake_stream *queue; /* FAKEDEV_QUEUES: the hardware queue it shares; else NULL */
    struct fake_stream *next_queue; /* the process's queues (device_sync) */
} fake_stream_t;

/* Every queue of this process (a stream with its own, or a shared one). */
static pthread_mutex_t queues_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_stream_t *queues_all;

typedef struct {
    atomic_uint_fast64_t done; /* the last record that has run */
    uint64_t recorded;
} fake_event_t;

static void sleep_us(long us) { nanosleep(&(struct timespec){0, us * 1000}, NULL); }

static void item_run(fake_stream_t *s, item_t *it)
{
    sleep_us(rand_r(&s->seed) % (FAKEDEV_JITTER_US + 1));
    void *at = it->at ? __atomic_load_n((void **)it->at, __ATOMIC_ACQUIRE) : NULL;
    if (at)
        it->dst2 = (char *)at + it->at_off;
    switch (it->kind) {
    case ITEM_COPY:
        if (it->dst)
            memmove(it->dst, it->src, it->n);
        if (it->dst2)
            memcpy(it->dst2, it->src, it->n);
        break;
    case ITEM_REDUCE:
        if (!it->dst) { /* reduce_copy_at: only the second destination */
            rcci_reduce(it->dst2, it->src, it->src2, it->n, it->dtype, it->op, it->divisor);
            break;
        }
        rcci_reduce(it->dst, it->src, it->src2, it->n, it->dtype, it->op, it->divisor);
        if (it->dst2)
            memcpy(it->dst2, it->dst, it->n * rcc_datatype_size(it->dtype));
        break;
    case ITEM_WRITE: __atomic_store_n(it->flag, it->value, __ATOMIC_RELEASE); break;
    case ITEM_WAIT: {
        while ((int32_t)(__atomic_load_n(it->flag, __ATOMIC_ACQUIRE) - it->value) < 0)
            sleep_us(20);
        const char *late = getenv("FAKEDEV_WAIT_LATE_US"); /* a slow GPU: what follows runs late */
        if (late)
            sleep_us(atol(late));
        break;
    }
    case ITEM_EVENT: atomic_store(it->event_done, it->event_seq); break;
    case ITEM_FN: it->fn(it->arg); break;
    }
}

static void *stream_main(void *arg)
{
    fake_stream_t *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cond, &s->lock);
        if (!s->head)
            break;
        item_t *it = s->head;
        s->head = it->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&s->lock);
        item_run(s, it);
        free(it);
        pthread_mutex_lock(&s->lock);
        s->ran++;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* The queue a stream's work goes into: its own, or the shared one. */
static fake_stream_t *stream_queue(void *stream)
{
    fake_stream_t *s = stream;
    return s->queue ? s->queue : s;
}

static void stream_push(void *stream, item_t tmpl)
{
    fake_stream_t *s = stream_queue(stream);
    item_t *it = malloc(sizeof *it);
    if (!it)
        abort();
    *it = tmpl;
    it->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    s->queued++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static fake_stream_t *stream_new(void);

/* FAKEDEV_QUEUES=N: like a GPU's hardware work queues (CUDA_DEVICE_MAX_
 * CONNECTIONS), N queues that the streams share in turn, each running
 * its streams' work in the order it was submitted, whatever the stream:
 * work waiting behind another stream's blocked flag wait waits too. */
static fake_stream_t *stream_shared_queue(void)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static fake_stream_t *queues[64];
    static unsigned next;
    const char *env = getenv("FAKEDEV_QUEUES");
    int n = env ? atoi(env) : 0;
    if (n <= 0)
        return NULL;
    n = n > 64 ? 64 : n;
    pthread_mutex_lock(&lock);
    unsigned q = next++ % (unsigned)n;
    if (!queues[q])
        queues[q] = stream_new(); /* lives as long as the process */
    fake_stream_t *queue = queues[q];
    pthread_mutex_unlock(&lock);
    return queue;
}

void *fakedev_stream_create(void)
{
    fake_stream_t *queue = stream_shared_queue();
    if (queue) {
        fake_stream_t *s = calloc(1, sizeof *s);
        if (!s)
            abort();
        s->queue = queue;
        return s;
    }
    return stream_new();
}

static fake_stream_t *stream_new(void)
{
    fake_stream_t *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->seed = (unsigned)(uintptr_t)s ^ (unsigned)time(NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0)
        abort();
    pthread_mutex_lock(&queues_lock);
    s->next_queue = queues_all;
    queues_all = s;
    pthread_mutex_unlock(&queues_lock);
    return s;
}

void fakedev_stream_destroy(void *stream)
{
    fake_stream_t *s = stream;
    if (!s)
        return;
    if (s->queue) { /* the queue stays; what was queued runs */
        free(s);
        return;
    }
    pthread_mutex_lock(&queues_lock);
    for (fake_stream_t **q = &queues_all; *q; q = &(*q)->next_queue)
        if (*q == s) {
            *q = s->next_queue;
            break;
        }
    pthread_mutex_unlock(&queues_lock);
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}

void fakedev_launch(void *stream, void (*fn)(void *), void *arg)
{
    stream_push(stream, (item_t){.kind = ITEM_FN, .fn = fn, .arg = arg});
}

/* CLOCK_REALTIME (the queues' condition variables') `seconds` from now. */
static struct timespec deadline_in(double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += (time_t)seconds;
    return t;
}

/* Waits until queue q has run what was queued on it so far: 0, or -1 once
 * `deadline` has passed. */
static int queue_drain(fake_stream_t *q, const struct timespec *deadline)
{
    int rc = 0;
    pthread_mutex_lock(&q->lock);
    uint64_t target = q->queued;
    while (q->ran < target && rc == 0)
        if (pthread_cond_timedwait(&q->cond, &q->lock, deadline) != 0)
            rc = -1;
    pthread_mutex_unlock(&q->lock);
    return rc;
}

int fakedev_stream_sync(void *stream, double timeout_s)
{
    struct timespec deadline = deadline_in(timeout_s);
    return queue_drain(stream_queue(stream), &deadline);
}

/* How long the stand-in's implicit synchronisations wait before they call
 * it a hang: FAKEDEV_SYNC_S, default 10 s. */
static double sync_limit_s(void)
{
    const char *env = getenv("FAKEDEV_SYNC_S");
    return env ? atof(env) : 10;
}

/* CUDA's cudaFree, cudaFreeHost and cudaHostUnregister wait for all the
 * work queued on the device so far (an implicit synchronisation), also
 * for a cuStreamWaitValue32 whose flag nobody has stored yet: called from
 * the thread that would store it, they never return. Modelled: the same
 * wait for every queue of this process; past FAKEDEV_SYNC_S seconds
 * (default 10) it aborts the process, saying what would have hung. */
static void device_sync(const char *what)
{
    struct timespec deadline = deadline_in(sync_limit_s());
    pthread_mutex_lock(&queues_lock);
    for (fake_stream_t *s = queues_all; s; s = s->next_queue) {
        if (queue_drain(s, &deadline) != 0) {
            fprintf(stderr,
                    "fakedev: %s waits for the whole device, and a stream still had work "
                    "queued (a flag wait?) after the wait's limit: on a GPU this call would "
                    "never return\n",
                    what);
            abort();
        }
    }
    pthread_mutex_unlock(&queues_lock);
}

/* ---- the table ------------------------------------------------------------ */

static int fake_device_count(char *why, size_t size)
{
    (void)why, (void)size;
    return 1;
}

static int fake_current_device(void) { return 0; }

static rcc_result_t fake_use_device(int device)
{
    return device == 0 ? RCC_SUCCESS : rcci_error(RCC_ERR_CUDA, "fake device %d", device);
}

static rcc_result_t fake_host_alloc(void **p, size_t bytes)
{
    *p = calloc(1, bytes ? bytes : 1);
    if (!*p)
        return rcci_error(RCC_ERR_NO_MEMORY, "fake pinned memory");
    pinned_add(*p, bytes ? bytes : 1);
    return RCC_SUCCESS;
}

static void fake_host_free(void *p)
{
    if (!p)
        return;
    device_sync("freeing pinned memory (cudaFreeHost)");
    pinned_remove(p);
    free(p);
}

/* GPU work (a kernel, a stream memory operation) on memory the device
 * cannot reach: a fault on a GPU. Aborts, naming it. */
static void reach_check(const char *what, const void *p)
{
    if (mem_reachable(p))
        return;
    fprintf(stderr, "fakedev: %s on %p, pageable host memory the GPU cannot reach\n", what, p);
    abort();
}

/* cudaMemcpyAsync with pageable host memory on one side is synchronous:
 * it waits for the stream's earlier work and returns when the copy is done
 * (so, from the thread that stores a flag the stream waits for, it never
 * returns). Modelled after queuing it; aborts past FAKEDEV_SYNC_S. */
static void pageable_copy_wait(void *stream, const void *dst, const void *src)
{
    if (mem_reachable(dst) && mem_reachable(src))
        return;
    if (fakedev_stream_sync(stream, sync_limit_s()) != 0) {
        fprintf(stderr,
                "fakedev: a copy with pageable host memory (%p <- %p) waits for its stream, "
                "which did not get there within the wait's limit: on a GPU this call would "
                "never return\n",
                dst, src);
        abort();
    }
}

/* Stream order does not matter here: the memory exists at once and is
 * freed when the stream reaches the free (as cudaFreeAsync: the caller
 * never waits). */
static rcc_result_t fake_dev_alloc(void **p, size_t bytes, void *stream)
{
    (void)stream;
    *p = fakedev_malloc(bytes);
    return RCC_SUCCESS;
}

static void fake_dev_free(void *p, void *stream)
{
    stream_push(stream, (item_t){.kind = ITEM_FN, .fn = fakedev_free, .arg = p});
}

static rcc_result_t fake_stream_create(void **stream)
{
    *stream = fakedev_stream_create();
    return RCC_SUCCESS;
}

static rcc_result_t fake_event_create(void **event)
{
    fake_event_t *e = calloc(1, sizeof *e);
    *event = e;
    return e ? RCC_SUCCESS : rcci_error(RCC_ERR_NO_MEMORY, "fake event");
}

static void fake_event_destroy(void *event) { free(event); }

/* FAKEDEV_COPY_FAILS_AFTER=N: copies after the first N fail, as a launch
 * on a broken context does. */
static rcc_result_t fake_copy(void *dst, const void *src, size_t n, void *stream)
{
    static atomic_long copies;
    const char *fails = getenv("FAKEDEV_COPY_FAILS_AFTER");
    if (fails && atomic_fetch_add(&copies, 1) >= atol(fails))
        return rcci_error(RCC_ERR_CUDA, "fakedev: copy refused (FAKEDEV_COPY_FAILS_AFTER=%s)",
                          fails);
    stream_push(stream, (item_t){.kind = ITEM_COPY, .dst = dst, .src = src, .n = n});
    pageable_copy_wait(stream, dst, src);
    return RCC_SUCCESS;
}

static atomic_size_t reduce_copies, slot_reads, fused_sends;

size_t fakedev_reduce_copies(void) { return atomic_load(&reduce_copies); }
size_t fakedev_slot_reads(void) { return atomic_load(&slot_reads); }
size_t fakedev_fused_sends(void) { return atomic_load(&fused_sends); }

/* reduce_copy and reduce_copy_at: dst2 replaced by *at + off when that is
 * set as the work runs (item_run). */
static rcc_result_t fake_reduce_copy_at(void *dst, void *dst2, void *const *at, size_t off,
                                        const void *a, const void *b, size_t n,
                                        rcc_datatype_t dtype, rcc_redop_t op, int divisor,
                                        void *stream)
{
    reach_check("a reduction kernel", dst);
    reach_check("a reduction kernel", dst2);
    reach_check("a reduction kernel", at);
    reach_check("a reduction kernel", a);
    reach_check("a reduction kernel", b);
    if (dst2)
        atomic_fetch_add(&reduce_copies, 1);
    if ((dst2 && mem_kind(dst2) == 2) || mem_kind(dst) == 2)
        atomic_fetch_add(&fused_sends, 1);
    if (mem_kind(b) == 1)
        atomic_fetch_add(&slot_reads, 1);
    stream_push(stream, (item_t){.kind = ITEM_REDUCE,
                                 .dst = dst,
                                 .dst2 = dst2,
                                 .at = at,
                                 .at_off = off,
                                 .src = a,
                                 .src2 = b,
                                 .n = n,
                                 .dtype = dtype,
                                 .op = op,
                                 .divisor = divisor});
    return RCC_SUCCESS;
}

static rcc_result_t fake_reduce_copy(void *dst, void *dst2, const void *a, const void *b, size_t n,
                                    rcc_datatype_t dtype, rcc_redop_t op, int divisor,
                                    void *stream)
{
    return fake_reduce_copy_at(dst, dst2, NULL, 0, a, b, n, dtype, op, divisor, stream);
}

static rcc_result_t fake_reduce(void *dst, const void *a, const void *b, size_t n,
                               rcc_datatype_t dtype, rcc_redop_t op, int divisor, void *stream)
{
    return fake_reduce_copy(dst, NULL, a, b, n, dtype, op, divisor, stream);
}

/* copy2 and copy2_at (dst NULL: only the second destination). */
static rcc_result_t fake_copy2_at(void *dst, void *dst2, void *const *at, size_t off,
                                  const void *src, size_t n, void *stream)
{
    reach_check("a copy kernel", dst);
    reach_check("a copy kernel", dst2);
    reach_check("a copy kernel", at);
    reach_check("a copy kernel", src);
    if (mem_kind(dst2) == 2)
        atomic_fetch_add(&fused_sends, 1);
    stream_push(stream, (item_t){.kind = ITEM_COPY,
                                 .dst = dst,
                                 .dst2 = dst2,
                                 .at = at,
                                 .at_off = off,
                                 .src = src,
                                 .n = n});
    return RCC_SUCCESS;
}

static rcc_result_t fake_copy2(void *dst, void *dst2, const void *src, size_t n, void *stream)
{
    return fake_copy2_at(dst, dst2, NULL, 0, src, n, stream);
}

static rcc_result_t fake_event_record(void *event, void *stream)
{
    fake_event_t *e = event;
    e->recorded++;
    stream_push(stream,
                (item_t){.kind = ITEM_EVENT, .event_done = &e->done, .event_seq = e->recorded});
    return RCC_SUCCESS;
}

/* FAKEDEV_EVENTS_HANG=1: no event ever completes, as on a GPU that hangs
 * (the streams' own work still runs). */
static rcc_result_t fake_event_query(void *event, int *done)
{
    fake_event_t *e = event;
    *done = atomic_load(&e->done) >= e->recorded && !getenv("FAKEDEV_EVENTS_HANG");
    return RCC_SUCCESS;
}

static rcc_result_t fake_write_flag(void *stream, volatile uint32_t *flag, uint32_t value)
{
    reach_check("a stream write (cuStreamWriteValue32)", (const void *)flag);
    stream_push(stream, (item_t){.kind = ITEM_WRITE, .flag = flag, .value = value});
    return RCC_SUCCESS;
}

static rcc_result_t fake_wait_flag(void *stream, volatile uint32_t *flag, uint32_t value)
{
    reach_check("a stream wait (cuStreamWaitValue32)", (const void *)flag);
    stream_push(stream, (item_t){.kind = ITEM_WAIT, .flag = flag, .value = value});
    return RCC_SUCCESS;
}

/* ---- IPC: memory another process maps (lib/ipcmem.h: a memfd the peer
 * opens through /proc), so the cudaipc transport runs across the forked
 * ranks of a test as it would across processes sharing a GPU. ------------- */

/* Writes the handle of allocation i (mem_lock held, or i not yet shared). */
static void handle_of(int i, void *handle)
{
    fake_handle_t fh = {.mem = allocs[i].handle};
    if (allocs[i].users)
        fh.users = allocs[i].users_handle;
    memset(handle, 0, RCCI_IPC_HANDLE_BYTES);
    memcpy(handle, &fh, sizeof fh);
}

static rcc_result_t fake_ipc_alloc(void **p, size_t bytes, int kind, void *handle)
{
    int host = kind == RCCI_IPC_HOST;
    rcci_ipcmem_handle_t h;
    rcc_result_t res = rcci_ipcmem_create(bytes ? bytes : 1, p, &h);
    if (res != RCC_SUCCESS)
        return res;
    if (!host) /* device memory is not cleared: a read before a write shows */
        memset(*p, 0xcb, (size_t)h.bytes);
    int i = allocs_add(*p, (size_t)h.bytes, 1, !host, &h);
    if (!host) /* host pages live while mapped anywhere, as CUDA's do (lib/ipcmem.h) */
        users_create(i);
    handle_of(i, handle);
    return RCC_SUCCESS;
}

static rcc_result_t fake_ipc_open(const void *handle, void **p)
{
    /* Fault injection: a GPU that cannot reach its peer's memory. */
    if (getenv("FAKEDEV_IPC_OPEN_FAILS"))
        return rcci_error(RCC_ERR_UNSUPPORTED, "fake device: no peer access to the peer's memory "
                                               "(FAKEDEV_IPC_OPEN_FAILS)");
    fake_handle_t fh;
    memcpy(&fh, handle, sizeof fh);
    void *users = NULL;
    if (fh.users.magic && rcci_ipcmem_open(&fh.users, &users) != RCC_SUCCESS)
        users = NULL; /* the exporter is gone: nobody to free it under us */
    rcc_result_t res = rcci_ipcmem_open(&fh.mem, p);
    if (res != RCC_SUCCESS) {
        if (users)
            rcci_ipcmem_close(users, (size_t)fh.users.bytes);
        return res;
    }
    int i = allocs_add(*p, (size_t)fh.mem.bytes, 2, 1, &fh.mem);
    if (users) {
        fake_users_t *u = users;
        int slot = 0;
        for (int32_t zero = 0; slot < FAKE_USERS; slot++, zero = 0)
            if (atomic_compare_exchange_strong(&u->pid[slot], &zero, (int32_t)getpid()))
                break;
        if (slot == FAKE_USERS)
            abort(); /* more openers than a test makes */
        pthread_mutex_lock(&mem_lock);
        allocs[i].users = u, allocs[i].users_handle = fh.users, allocs[i].user_slot = slot;
        pthread_mutex_unlock(&mem_lock);
    }
    return RCC_SUCCESS;
}

static void fake_ipc_release(void *p)
{
    size_t bytes;
    rcci_ipcmem_handle_t h;
    int ipc = allocs_take(p, &bytes, &h);
    if (ipc == 1)
        rcci_ipcmem_free(p, &h);
    else if (ipc == 2)
        rcci_ipcmem_close(p, bytes);
}

/* Exported memory goes with cudaFree (device) or cudaHostUnregister
 * (host pages): both wait for the device. */
static void fake_ipc_free(void *p)
{
    if (p)
        device_sync("freeing exported memory (cudaFree, cudaHostUnregister)");
    fake_ipc_release(p);
}

/* FAKEDEV_IPC_CLOSE_SYNCS=1: as if cudaIpcCloseMemHandle waited for the
 * device, which CUDA leaves unsaid; shows which paths would then hang. */
static void fake_ipc_close(void *p)
{
    if (p && getenv("FAKEDEV_IPC_CLOSE_SYNCS"))
        device_sync("closing a peer's memory (cudaIpcCloseMemHandle)");
    fake_ipc_release(p);
}

static rcc_result_t fake_ipc_export(const void *p, void *handle, size_t *offset)
{
    pthread_mutex_lock(&mem_lock);
    int i = device_alloc_at(p), found = i >= 0 && allocs[i].ipc < 2; /* not a peer's */
    if (found) {
        handle_of(i, handle);
        *offset = (size_t)((const char *)p - allocs[i].p);
    }
    pthread_mutex_unlock(&mem_lock);
    if (getenv("FAKEDEV_NO_EXPORT"))
        found = 0;
    /* Fault injection: a peer whose window reaches past its allocation. */
    if (found && getenv("FAKEDEV_EXPORT_OFFSET"))
        *offset += (size_t)atoll(getenv("FAKEDEV_EXPORT_OFFSET"));
    return found ? RCC_SUCCESS
                 : rcci_error(RCC_ERR_UNSUPPORTED, "fake device: %p cannot be exported", p);
}

static rcc_result_t fake_ipc_size(void *p, size_t *bytes)
{
    int found = 0;
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < FAKE_MAX_ALLOCS && !found; i++)
        if (allocs[i].p == p && allocs[i].ipc == 2)
            *bytes = allocs[i].bytes, found = 1;
    pthread_mutex_unlock(&mem_lock);
    return found ? RCC_SUCCESS
                 : rcci_error(RCC_ERR_INVALID_ARGUMENT, "fake device: %p is no peer's mapping", p);
}

static atomic_int capturing_now;

void fakedev_set_capturing(int on) { atomic_store(&capturing_now, on); }

static rcc_result_t fake_stream_capturing(void *stream, int *capturing)
{
    (void)stream;
    *capturing = atomic_load(&capturing_now);
    return RCC_SUCCESS;
}

static const rcci_devapi_t fake_api = {
    .name = "fake",
    .device_count = fake_device_count,
    .is_device = fake_is_device,
    .current_device = fake_current_device,
    .use_device = fake_use_device,
    .host_alloc = fake_host_alloc,
    .host_free = fake_host_free,
    .dev_alloc = fake_dev_alloc,
    .dev_free = fake_dev_free,
    .stream_create = fake_stream_create,
    .stream_destroy = fakedev_stream_destroy,
    .event_create = fake_event_create,
    .event_destroy = fake_event_destroy,
    .copy = fake_copy,
    .reduce = fake_reduce,
    .event_record = fake_event_record,
    .event_query = fake_event_query,
    .write_flag = fake_write_flag,
    .wait_flag = fake_wait_flag,
    .reduce_copy = fake_reduce_copy,
    .ipc_alloc = fake_ipc_alloc,
    .ipc_free = fake_ipc_free,
    .ipc_open = fake_ipc_open,
    .ipc_close = fake_ipc_close,
    .copy2 = fake_copy2,
    .ipc_export = fake_ipc_export,
    .ipc_size = fake_ipc_size,
    .copy2_at = fake_copy2_at,
    .reduce_copy_at = fake_reduce_copy_at,
    .stream_capturing = fake_stream_capturing,
};

void fakedev_install(void) { rcci_devapi_set(&fake_api); }
