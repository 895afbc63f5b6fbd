/* Collectives as ring schedules: item -> (count, where from, where to). */
#include "schedule.h"

#include <string.h>

const char *rcci_coll_name(rcci_coll_t coll)
{
    static const char *const names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                        "reduce",    "barrier",        "send/recv"};
    return (unsigned)coll < sizeof names / sizeof names[0] ? names[coll] : "unknown";
}

static int sched_is_ring(const rcci_schedule_t *s)
{
    return s->coll == RCCI_COLL_ALLREDUCE || s->coll == RCCI_COLL_BARRIER ||
           s->coll == RCCI_COLL_REDUCE_SCATTER || s->coll == RCCI_COLL_ALLGATHER;
}

size_t rcci_schedule_scratch_bytes(rcci_coll_t coll, size_t count, size_t esize)
{
    return coll == RCCI_COLL_REDUCE_SCATTER ? 2 * count * esize : 0;
}

void rcci_schedule_init(rcci_schedule_t *s)
{
    int n = s->nranks;
    size_t ce = s->chunk_elems ? s->chunk_elems : 1;
    if (sched_is_ring(s)) {
        /* Reduce-scatter and allgather are the two halves of allreduce on
         * N blocks, on a ring rotated by one so that rank r ends up owning
         * block r (allreduce's rank r finishes block r+1). */
        int whole = s->coll == RCCI_COLL_ALLREDUCE || s->coll == RCCI_COLL_BARRIER;
        size_t total = whole ? s->count : s->count * (size_t)n;
        int virtual_rank = whole ? s->rank : (s->rank + n - 1) % n;
        /* Reduce-scatter and allgather use one half each: one pass. */
        size_t pass = s->coll == RCCI_COLL_ALLREDUCE ? s->pass_elems : 0;
        rcci_ring_allreduce_plan(&s->ring, total, n, virtual_rank, ce, pass);
        size_t half = (size_t)(n - 1) * s->ring.nchunks;
        s->ring_first = s->coll == RCCI_COLL_ALLGATHER ? (long)half : 0;
        s->nsend = s->nrecv = whole ? rcci_ring_items(&s->ring) : half;
        return;
    }
    s->nchunks = (s->count + ce - 1) / ce;
    if (s->nchunks == 0)
        s->nchunks = 1;
    s->chain_pos = s->coll == RCCI_COLL_BROADCAST ? (s->rank - s->root + n) % n
                                                  : (s->rank - s->root - 1 + 2 * n) % n;
    s->nsend = s->chain_pos < n - 1 ? s->nchunks : 0;
    s->nrecv = s->chain_pos > 0 ? s->nchunks : 0;
}

int rcci_schedule_local_copy(const rcci_schedule_t *s, char **dst, const char **src,
                             size_t *bytes)
{
    *bytes = s->count * s->esize;
    *dst = NULL, *src = s->sendbuf;
    switch (s->coll) {
    case RCCI_COLL_ALLREDUCE:
    case RCCI_COLL_REDUCE_SCATTER:
    case RCCI_COLL_REDUCE: /* one rank: AVG over one rank divides by 1 */
        if (s->nranks == 1)
            *dst = s->recvbuf;
        break;
    case RCCI_COLL_ALLGATHER: *dst = s->recvbuf + (size_t)s->rank * *bytes; break;
    case RCCI_COLL_BROADCAST:
        if (s->rank == s->root)
            *dst = s->recvbuf;
        break;
    case RCCI_COLL_BARRIER:
    case RCCI_COLL_P2P: break;
    }
    return *dst && *dst != *src && *bytes > 0;
}

void rcci_schedule_local(const rcci_schedule_t *s)
{
    char *dst;
    const char *src;
    size_t bytes;
    if (rcci_schedule_local_copy(s, &dst, &src, &bytes))
        memcpy(dst, src, bytes);
}

/* Where in the scratch pair a ring item's chunk lives: segments are
 * `count` elements each for reduce-scatter, so offsets are within one. */
static char *sched_scratch(const rcci_schedule_t *s, int step, const rcci_ring_item_t *it)
{
    rcci_span_t seg = rcci_ring_segment(s->count * (size_t)s->nranks, s->nranks, it->segment);
    return s->scratch + ((size_t)(step % 2) * s->count + (it->span.offset - seg.offset)) * s->esize;
}

void rcci_schedule_send(const rcci_schedule_t *s, size_t item, rcci_send_step_t *out)
{
    if (sched_is_ring(s)) {
        rcci_ring_item_t it;
        rcci_ring_allreduce_send(&s->ring, (size_t)s->ring_first + item, &it);
        size_t off = it.span.offset * s->esize;
        long dep = rcci_ring_allreduce_send_dep(&s->ring, (size_t)s->ring_first + item);
        out->count = it.span.count;
        out->dep = dep < s->ring_first ? -1 : dep - s->ring_first;
        if (s->coll == RCCI_COLL_REDUCE_SCATTER)
            out->src = it.step == 0 ? s->sendbuf + off : sched_scratch(s, it.step - 1, &it);
        else if (s->coll == RCCI_COLL_ALLGATHER)
            out->src = s->recvbuf + off;
        else
            out->src = (it.from_input ? s->sendbuf : s->recvbuf) + off;
        return;
    }
    rcci_span_t whole = {0, s->count};
    rcci_span_t ch = rcci_ring_chunk(whole, s->nchunks, item);
    size_t off = ch.offset * s->esize;
    out->count = ch.count;
    out->dep = s->chain_pos == 0 ? -1 : (long)item;
    if (s->chain_pos == 0)
        out->src = s->sendbuf + off;
    else if (s->coll == RCCI_COLL_BROADCAST)
        out->src = s->recvbuf + off;
    else
        out->src = s->stage + (item % s->slots) * s->chunk_elems * s->esize;
}

void rcci_schedule_recv(const rcci_schedule_t *s, size_t item, rcci_recv_step_t *out)
{
    memset(out, 0, sizeof *out);
    out->divisor = 1;
    out->guard = -1;
    if (sched_is_ring(s)) {
        rcci_ring_item_t it;
        rcci_ring_allreduce_recv(&s->ring, (size_t)s->ring_first + item, &it);
        size_t off = it.span.offset * s->esize;
        out->count = it.span.count;
        if (!it.reduce) {
            out->dst = s->recvbuf + off;
            return;
        }
        out->local = s->sendbuf + off;
        if (it.last_reduce && s->redop == RCC_AVG)
            out->divisor = s->nranks;
        if (s->coll != RCCI_COLL_REDUCE_SCATTER) {
            out->out = s->recvbuf + off;
            /* A partial sum there is overwritten by the allgather's receive. */
            out->forward_only = !it.last_reduce;
        } else if (it.last_reduce) { /* the segment this rank owns: block `rank` */
            rcci_span_t seg =
                rcci_ring_segment(s->count * (size_t)s->nranks, s->nranks, it.segment);
            out->out = s->recvbuf + (it.span.offset - seg.offset) * s->esize;
        } else {
            /* Scratch half step%2 was last read by the send of step-1. */
            out->forward_only = 1;
            out->out = sched_scratch(s, it.step, &it);
            out->guard = (long)item - (long)s->ring.nchunks;
        }
        return;
    }
    rcci_span_t whole = {0, s->count};
    rcci_span_t ch = rcci_ring_chunk(whole, s->nchunks, item);
    size_t off = ch.offset * s->esize;
    out->count = ch.count;
    if (s->coll == RCCI_COLL_BROADCAST) {
        out->dst = s->recvbuf + off;
        return;
    }
    out->local = s->sendbuf + off;
    if (s->chain_pos == s->nranks - 1) { /* the root */
        out->out = s->recvbuf + off;
        if (s->redop == RCC_AVG)
            out->divisor = s->nranks;
    } else {
        out->out = s->stage + (item % s->slots) * s->chunk_elems * s->esize;
        out->guard = (long)item - (long)s->slots;
        out->forward_only = 1;
    }
}
