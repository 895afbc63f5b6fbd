/* RCC_TIMELINE files (timeline.h). */
#define RCCI_LOG_SUBSYS RCCI_SUBSYS_TIMELINE /* log.h: the subsystem of this file's lines */
#include "timeline.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "log.h"
#include "params.h"

#define TL_BUF_BYTES (64 * 1024) /* events held before a write */
#define TL_EVENT_BYTES 768       /* one event's text, at most */
#define TL_LANES 16              /* rows per direction that overlapping steps are packed into */
#define TL_TIDS_PER_COMM 100     /* each communicator of the process has a block of rows */
#define TL_TID_OPS 0 /* + lane: operations may overlap (point-to-point beside a collective) */
#define TL_TID_WAIT 20
#define TL_TID_WORK 21
#define TL_TID_STEPS 30 /* + dir * TL_LANES + lane */
#define TL_KIND_OPS 4   /* after the four rcci_tl_dir_t: the rows of operations */
#define TL_MAX_SLOTS 64 /* RCC_SLOTS' upper bound */

/* The process's file, shared by its communicators. */
typedef struct {
    pthread_mutex_t lock;
    int fd;
    off_t end; /* where the closing ']' is */
    long nevents;
    size_t len;
    int pid;    /* the events' "pid": the first communicator's rank */
    int ncomms; /* communicators so far: each takes the next block of tids */
    char buf[TL_BUF_BYTES];
} tl_file_t;

static tl_file_t *tl_the_file;
static pthread_mutex_t tl_open_lock = PTHREAD_MUTEX_INITIALIZER;
static char tl_host[64];

static const char *const tl_kind_names[] = {"send", "recv", "p2p send", "p2p recv", "operations"};

/* A ring chunk in flight. */
typedef struct {
    int64_t start;
    size_t item;
    size_t bytes;
    int peer;
    int posted;
} tl_slot_t;

struct rcci_timeline {
    tl_file_t *file;
    int tid_base;
    int rank, nranks;
    uint64_t comm_id;
    size_t slots;
    tl_slot_t slot[2][TL_MAX_SLOTS]; /* ring chunks in flight, by direction and item % slots */
    int64_t lane_end[TL_KIND_OPS + 1][TL_LANES];
    uint32_t lane_named[TL_KIND_OPS + 1]; /* bit l: lane l's name was written */
};

/* Writes the buffer and a new closing bracket over the old one: one pwrite,
 * so the file holds one whole JSON array before and after. Under the lock. */
static void tl_flush_locked(tl_file_t *f)
{
    if (f->fd < 0)
        f->len = 0; /* writing failed before: events are dropped */
    if (f->len == 0)
        return;
    memcpy(f->buf + f->len, "\n]", 2); /* the buffer keeps room for these */
    ssize_t w = pwrite(f->fd, f->buf, f->len + 2, f->end);
    if (w != (ssize_t)(f->len + 2)) {
        RCC_WARN("RCC_TIMELINE: writing the timeline failed (%s); no more events are written",
                 w < 0 ? strerror(errno) : "short write");
        close(f->fd);
        f->fd = -1;
    } else {
        f->end += (off_t)f->len + 1;
    }
    f->len = 0;
}

static void tl_flush(tl_file_t *f)
{
    pthread_mutex_lock(&f->lock);
    tl_flush_locked(f);
    pthread_mutex_unlock(&f->lock);
}

__attribute__((format(printf, 2, 3))) static void tl_event(tl_file_t *f, const char *fmt, ...)
{
    char text[TL_EVENT_BYTES];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof text)
        return; /* cut text is no JSON: events are kept short enough */
    pthread_mutex_lock(&f->lock);
    if (f->len + (size_t)n + 4 > sizeof f->buf)
        tl_flush_locked(f);
    const char *sep = f->nevents++ ? ",\n" : "";
    memcpy(f->buf + f->len, sep, strlen(sep));
    f->len += strlen(sep);
    memcpy(f->buf + f->len, text, (size_t)n);
    f->len += (size_t)n;
    pthread_mutex_unlock(&f->lock);
}

static double tl_us(int64_t ns) { return (double)ns / 1000.0; }

static void tl_name_row(rcci_timeline_t *tl, int tid, const char *name)
{
    char prefix[48] = "";
    if (tl->tid_base > 0) /* the process's later communicators say which they are */
        snprintf(prefix, sizeof prefix,
                 "comm %04llx: ", (unsigned long long)(tl->comm_id & 0xffff));
    tl_event(tl->file,
             "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s%"
             "s\"}},"
             "\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{"
             "\"sort_index\":%d}}",
             tl->file->pid, tid, prefix, name, tl->file->pid, tid, tid);
}

/* RCC_TIMELINE's pattern: %r the rank, %h the host, %p the pid. Without %r
 * the rank goes before a ".json" ending, or ".RANK.json" is appended. */
static void tl_path(const char *pattern, int rank, char *out, size_t size)
{
    char with_rank[4096];
    size_t n = 0;
    int had_rank = 0;
    for (const char *p = pattern; *p && n + 24 < sizeof with_rank; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            n += (size_t)snprintf(with_rank + n, sizeof with_rank - n, "%d", rank);
            had_rank = 1, p++;
        } else {
            with_rank[n++] = *p;
        }
    }
    with_rank[n] = '\0';
    if (!had_rank) {
        size_t len = strlen(with_rank);
        int json = len > 5 && !strcmp(with_rank + len - 5, ".json");
        snprintf(with_rank + len - (json ? 5 : 0), sizeof with_rank - len + (json ? 5 : 0),
                 ".%d.json", rank);
    }
    rcci_log_expand_path(with_rank, tl_host, out, size);
}

static tl_file_t *tl_file_create(const char *pattern, int rank)
{
    char path[4096];
    gethostname(tl_host, sizeof tl_host - 1);
    tl_path(pattern, rank, path, sizeof path);
    tl_file_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0 || pwrite(f->fd, "[\n]", 3, 0) != 3) {
        RCC_WARN("RCC_TIMELINE: cannot write %s: %s; no timeline", path, strerror(errno));
        if (f->fd >= 0)
            close(f->fd);
        free(f);
        return NULL;
    }
    pthread_mutex_init(&f->lock, NULL);
    f->end = 2;
    f->pid = rank;
    tl_event(f,
             "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d "
             "(%s, pid %d)\"}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
             "\"args\":{\"sort_index\":%d}}",
             rank, rank, tl_host, (int)getpid(), rank, rank);
    tl_flush(f);
    RCC_INFO("RCC_TIMELINE: rank %d writes its timeline to %s", rank, path);
    return f;
}

rcci_timeline_t *rcci_timeline_open(const struct rcc_comm *comm)
{
    const char *pattern = rcci_param_str(RCCI_PARAM_TIMELINE);
    if (!*pattern)
        return NULL;
    rcci_timeline_t *tl = calloc(1, sizeof *tl);
    if (!tl)
        return NULL;
    pthread_mutex_lock(&tl_open_lock);
    if (!tl_the_file)
        tl_the_file = tl_file_create(pattern, comm->rank);
    tl->file = tl_the_file;
    if (tl->file)
        tl->tid_base = TL_TIDS_PER_COMM * tl->file->ncomms++;
    pthread_mutex_unlock(&tl_open_lock);
    if (!tl->file) {
        free(tl);
        return NULL;
    }
    tl->rank = comm->rank;
    tl->nranks = comm->nranks;
    tl->comm_id = comm->comm_id;
    tl->slots = (size_t)comm->slots < TL_MAX_SLOTS ? (size_t)comm->slots : TL_MAX_SLOTS;
    tl_name_row(tl, tl->tid_base + TL_TID_WAIT, "engine waits");
    tl_name_row(tl, tl->tid_base + TL_TID_WORK, "reduce / copy");
    return tl;
}

void rcci_timeline_close(rcci_timeline_t *tl)
{
    if (!tl)
        return;
    tl_flush(tl->file);
    free(tl); /* the file stays open for the process's other communicators */
}

void rcci_tl_sync(rcci_timeline_t *tl)
{
    struct timespec real;
    clock_gettime(CLOCK_REALTIME, &real);
    int64_t now = rcci_now_ns();
    tl_event(tl->file,
             "{\"name\":\"clock_sync\",\"cat\":\"sync\",\"ph\":\"i\",\"s\":\"p\",\"ts\":%.3f,"
             "\"pid\":%d,\"tid\":%d,\"args\":{\"mono_ns\":%lld,\"real_ns\":%lld,\"rank\":%d,"
             "\"nranks\":%d,\"host\":\"%s\",\"comm\":\"%016llx\",\"first_comm\":%d}}",
             tl_us(now), tl->file->pid, tl->tid_base + TL_TID_OPS, (long long)now,
             (long long)real.tv_sec * 1000000000 + real.tv_nsec, tl->rank, tl->nranks, tl_host,
             (unsigned long long)tl->comm_id, tl->tid_base == 0);
    tl_flush(tl->file);
}

/* The row for a slice of `kind` from `start` to `now`: the first of the
 * kind's rows that is free by then. Slices of a kind end in the order they
 * are recorded, so no row holds overlapping slices (which trace viewers
 * draw badly). */
static int tl_row(rcci_timeline_t *tl, int kind, int64_t start, int64_t now)
{
    int lane = 0;
    while (lane < TL_LANES - 1 && tl->lane_end[kind][lane] > start)
        lane++;
    tl->lane_end[kind][lane] = now;
    int tid = tl->tid_base +
              (kind == TL_KIND_OPS ? TL_TID_OPS + lane : TL_TID_STEPS + kind * TL_LANES + lane);
    if (!(tl->lane_named[kind] >> lane & 1u)) {
        char row[32];
        snprintf(row, sizeof row, lane || kind != TL_KIND_OPS ? "%s %d" : "%s", tl_kind_names[kind],
                 lane);
        tl_name_row(tl, tid, row);
        tl->lane_named[kind] |= 1u << lane;
    }
    return tid;
}

void rcci_tl_op(rcci_timeline_t *tl, const struct rcci_op *op)
{
    int64_t now = rcci_now_ns();
    size_t esize = rcc_datatype_size(op->dtype);
    char name[64];
    if (op->coll == RCCI_COLL_P2P)
        snprintf(name, sizeof name, "%s (%d messages)", op->alltoalls ? "alltoall" : "p2p",
                 op->nmsgs);
    else
        snprintf(name, sizeof name, "%s #%u", rcci_coll_name(op->coll), op->seq);
    tl_event(tl->file,
             "{\"name\":\"%s\",\"cat\":\"op\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
             "\"tid\":%d,\"args\":{\"seq\":%u,\"count\":%zu,\"bytes\":%zu,\"dtype\":\"%s\","
             "\"redop\":\"%s\",\"root\":%d,\"algo\":\"%s\",\"rank\":%d,\"comm\":\"%016llx\"}}",
             name, tl_us(op->started_ns), tl_us(now - op->started_ns), tl->file->pid,
             tl_row(tl, TL_KIND_OPS, op->started_ns, now), op->seq, op->count, op->count * esize,
             rcc_datatype_name(op->dtype), rcc_redop_name(op->redop), op->root,
             op->coll == RCCI_COLL_ALLREDUCE ? rcci_allreduce_algo_name(op->algo) : "-", tl->rank,
             (unsigned long long)tl->comm_id);
    tl_flush(tl->file);
}

/* A step of `dir` from start to now. */
static void tl_step(rcci_timeline_t *tl, rcci_tl_dir_t dir, int64_t start, int peer, size_t bytes,
                    uint32_t seq, size_t item)
{
    int64_t now = rcci_now_ns();
    int tid = tl_row(tl, (int)dir, start, now);
    int to = dir == RCCI_TL_SEND || dir == RCCI_TL_P2P_SEND;
    tl_event(tl->file,
             "{\"name\":\"%s\",\"cat\":\"step\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
             "\"tid\":%d,\"args\":{\"%s\":%d,\"bytes\":%zu,\"op\":%u,\"step\":%zu}}",
             to ? "send" : "recv", tl_us(start), tl_us(now - start), tl->file->pid, tid,
             to ? "to" : "from", peer, bytes, seq, item);
}

void rcci_tl_post(rcci_timeline_t *tl, rcci_tl_dir_t dir, size_t item, int peer, size_t bytes)
{
    if (dir > RCCI_TL_RECV)
        return;
    tl->slot[dir][item % tl->slots] = (tl_slot_t){
        .start = rcci_now_ns(), .item = item, .bytes = bytes, .peer = peer, .posted = 1};
}

void rcci_tl_done(rcci_timeline_t *tl, rcci_tl_dir_t dir, size_t item, uint32_t seq)
{
    if (dir > RCCI_TL_RECV)
        return;
    tl_slot_t *s = &tl->slot[dir][item % tl->slots];
    if (!s->posted || s->item != item)
        return; /* an empty step, never posted */
    s->posted = 0;
    tl_step(tl, dir, s->start, s->peer, s->bytes, seq, item);
}

void rcci_tl_msg(rcci_timeline_t *tl, rcci_tl_dir_t dir, int64_t start_ns, int peer, size_t bytes,
                 uint32_t seq)
{
    tl_step(tl, dir, start_ns, peer, bytes, seq, 0);
}

void rcci_tl_work(rcci_timeline_t *tl, const char *name, int64_t start_ns, size_t bytes)
{
    int64_t now = rcci_now_ns();
    tl_event(tl->file,
             "{\"name\":\"%s\",\"cat\":\"work\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
             "\"tid\":%d,\"args\":{\"bytes\":%zu}}",
             name, tl_us(start_ns), tl_us(now - start_ns), tl->file->pid,
             tl->tid_base + TL_TID_WORK, bytes);
}

int64_t rcci_tl_sleep(rcci_timeline_t *tl)
{
    tl_flush(tl->file);
    return rcci_now_ns();
}

void rcci_tl_woke(rcci_timeline_t *tl, int64_t start_ns)
{
    int64_t now = rcci_now_ns();
    tl_event(tl->file,
             "{\"name\":\"wait\",\"cat\":\"wait\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
             "\"tid\":%d}",
             tl_us(start_ns), tl_us(now - start_ns), tl->file->pid, tl->tid_base + TL_TID_WAIT);
}
