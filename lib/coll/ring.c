/* Ring allreduce schedule arithmetic (no I/O; unit-tested by simulation). */
#include "ring.h"

static int ring_mod(long a, int n) { return (int)(((a % n) + n) % n); }

rcci_span_t rcci_ring_segment(size_t count, int nranks, int segment)
{
    size_t n = (size_t)nranks, s = (size_t)segment;
    size_t base = count / n, extra = count % n;
    rcci_span_t span = {s * base + (s < extra ? s : extra), base + (s < extra ? 1 : 0)};
    return span;
}

rcci_span_t rcci_ring_chunk(rcci_span_t span, size_t nchunks, size_t chunk)
{
    size_t base = span.count / nchunks, extra = span.count % nchunks;
    rcci_span_t c = {span.offset + chunk * base + (chunk < extra ? chunk : extra),
                     base + (chunk < extra ? 1 : 0)};
    return c;
}

void rcci_ring_allreduce_plan(rcci_ring_plan_t *plan, size_t count, int nranks, int rank,
                              size_t chunk_elems)
{
    size_t largest = count / (size_t)nranks + (count % (size_t)nranks ? 1 : 0);
    size_t nchunks = (largest + chunk_elems - 1) / chunk_elems;
    *plan = (rcci_ring_plan_t){.rank = rank,
                               .nranks = nranks,
                               .count = count,
                               .nchunks = nchunks ? nchunks : 1,
                               .nsteps = 2 * (nranks - 1)};
}

size_t rcci_ring_items(const rcci_ring_plan_t *plan)
{
    return (size_t)plan->nsteps * plan->nchunks;
}

static void ring_item(const rcci_ring_plan_t *p, size_t item, int segment, rcci_ring_item_t *out)
{
    out->step = (int)(item / p->nchunks);
    out->segment = segment;
    out->span = rcci_ring_chunk(rcci_ring_segment(p->count, p->nranks, segment), p->nchunks,
                                item % p->nchunks);
}

/* At step s rank r sends segment r - s: in reduce-scatter the partial sum
 * it built at step s-1 (its own input at s = 0), in allgather the finished
 * segment it received at step s-1 (its own finished r+1 at s = n-1). */
void rcci_ring_allreduce_send(const rcci_ring_plan_t *p, size_t item, rcci_ring_item_t *out)
{
    int step = (int)(item / p->nchunks);
    ring_item(p, item, ring_mod((long)p->rank - step, p->nranks), out);
    out->from_input = step == 0;
    out->reduce = out->last_reduce = 0;
}

/* At step s rank r receives segment r - s - 1, what rank r-1 sends at s. */
void rcci_ring_allreduce_recv(const rcci_ring_plan_t *p, size_t item, rcci_ring_item_t *out)
{
    int step = (int)(item / p->nchunks);
    ring_item(p, item, ring_mod((long)p->rank - step - 1, p->nranks), out);
    out->from_input = 0;
    out->reduce = step < p->nranks - 1;
    out->last_reduce = step == p->nranks - 2;
}

long rcci_ring_allreduce_send_dep(const rcci_ring_plan_t *p, size_t item)
{
    return item < p->nchunks ? -1 : (long)(item - p->nchunks);
}
