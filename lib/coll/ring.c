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

static size_t ring_div_up(size_t a, size_t b) { return a / b + (a % b ? 1 : 0); }

void rcci_ring_allreduce_plan(rcci_ring_plan_t *plan, size_t count, int nranks, int rank,
                              size_t chunk_elems, size_t pass_elems)
{
    size_t npasses = pass_elems && count / pass_elems > 1 ? count / pass_elems : 1;
    size_t largest = ring_div_up(ring_div_up(count, npasses), (size_t)nranks);
    size_t nchunks = ring_div_up(largest, chunk_elems);
    *plan = (rcci_ring_plan_t){.rank = rank,
                               .nranks = nranks,
                               .count = count,
                               .npasses = npasses,
                               .nchunks = nchunks ? nchunks : 1,
                               .nsteps = 2 * (nranks - 1)};
}

size_t rcci_ring_items(const rcci_ring_plan_t *plan)
{
    return plan->npasses * (size_t)plan->nsteps * plan->nchunks;
}

int rcci_ring_step(const rcci_ring_plan_t *p, size_t item)
{
    return (int)(item / p->nchunks % (size_t)p->nsteps);
}

size_t rcci_ring_pass(const rcci_ring_plan_t *p, size_t item)
{
    return item / p->nchunks / (size_t)p->nsteps;
}

static void ring_item(const rcci_ring_plan_t *p, size_t item, int segment, rcci_ring_item_t *out)
{
    rcci_span_t whole = {0, p->count};
    rcci_span_t pass = rcci_ring_chunk(whole, p->npasses, rcci_ring_pass(p, item));
    rcci_span_t seg = rcci_ring_segment(pass.count, p->nranks, segment);
    seg.offset += pass.offset;
    out->step = rcci_ring_step(p, item);
    out->segment = segment;
    out->span = rcci_ring_chunk(seg, p->nchunks, item % p->nchunks);
}

/* At step s rank r sends segment r - s: in reduce-scatter the partial sum
 * it built at step s-1 (its own input at s = 0), in allgather the finished
 * segment it received at step s-1 (its own finished r+1 at s = n-1). */
void rcci_ring_allreduce_send(const rcci_ring_plan_t *p, size_t item, rcci_ring_item_t *out)
{
    int step = rcci_ring_step(p, item);
    ring_item(p, item, ring_mod((long)p->rank - step, p->nranks), out);
    out->from_input = step == 0;
    out->reduce = out->last_reduce = 0;
}

/* At step s rank r receives segment r - s - 1, what rank r-1 sends at s. */
void rcci_ring_allreduce_recv(const rcci_ring_plan_t *p, size_t item, rcci_ring_item_t *out)
{
    int step = rcci_ring_step(p, item);
    ring_item(p, item, ring_mod((long)p->rank - step - 1, p->nranks), out);
    out->from_input = 0;
    out->reduce = step < p->nranks - 1;
    out->last_reduce = step == p->nranks - 2;
}

long rcci_ring_allreduce_send_dep(const rcci_ring_plan_t *p, size_t item)
{
    return rcci_ring_step(p, item) == 0 ? -1 : (long)(item - p->nchunks);
}
