#include "streamcase.h"

#include <stdio.h>
#include <string.h>

#include "testdata.h"

static const char *const kind_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                         "reduce"};

void scase_sizes(const scase_t *c, int n, size_t *send_elems, size_t *recv_elems, size_t *big)
{
    *send_elems = c->kind == K_REDUCE_SCATTER ? c->count * (size_t)n : c->count;
    *recv_elems = c->kind == K_ALLGATHER ? c->count * (size_t)n : c->count;
    *big = (*send_elems > *recv_elems ? *send_elems : *recv_elems) * rcc_datatype_size(c->dt);
}

void scase_expect(const scase_t *c, int rank, int n, char *in, char *want)
{
    size_t es = rcc_datatype_size(c->dt), cnt = c->count, send_elems, recv_elems, big;
    scase_sizes(c, n, &send_elems, &recv_elems, &big);
    td_fill(in, 0, send_elems, c->seed, c->kind == K_BROADCAST ? c->root : rank, c->dt, c->op);
    switch (c->kind) {
    case K_ALLREDUCE:
    case K_REDUCE: td_reference(want, 0, cnt, NULL, n, c->seed, c->dt, c->op); break;
    case K_REDUCE_SCATTER:
        td_reference(want, (size_t)rank * cnt, cnt, NULL, n, c->seed, c->dt, c->op);
        break;
    case K_ALLGATHER:
        for (int r = 0; r < n; r++)
            td_fill(want + (size_t)r * cnt * es, 0, cnt, c->seed, r, c->dt, c->op);
        break;
    default: memcpy(want, in, cnt * es); break;
    }
}

void scase_layout(const scase_t *c, int rank, char *area, char *area2, char **sendbuf,
                  char **recvbuf)
{
    size_t block = c->count * rcc_datatype_size(c->dt);
    *sendbuf = area;
    *recvbuf = c->inplace ? area : area2;
    if (c->inplace && c->kind == K_REDUCE_SCATTER)
        *recvbuf = area + (size_t)rank * block;
    if (c->inplace && c->kind == K_ALLGATHER)
        *sendbuf = area + (size_t)rank * block;
}

rcc_result_t scase_call(const scase_t *c, const void *s, void *r, rcc_comm_t comm, void *stream)
{
    switch (c->kind) {
    case K_ALLREDUCE: return rcc_allreduce_stream(s, r, c->count, c->dt, c->op, comm, stream);
    case K_REDUCE_SCATTER:
        return rcc_reduce_scatter_stream(s, r, c->count, c->dt, c->op, comm, stream);
    case K_ALLGATHER: return rcc_allgather_stream(s, r, c->count, c->dt, comm, stream);
    case K_BROADCAST: return rcc_broadcast_stream(s, r, c->count, c->dt, c->root, comm, stream);
    default: return rcc_reduce_stream(s, r, c->count, c->dt, c->op, c->root, comm, stream);
    }
}

void scase_text(const scase_t *c, int rank, int n, char *buf, size_t size)
{
    snprintf(buf, size, "rank %d/%d %s %s %s count %zu%s%s root %d", rank, n,
             kind_names[c->kind], rcc_datatype_name(c->dt), rcc_redop_name(c->op), c->count,
             c->inplace ? " in place" : "", c->device ? " device" : " host", c->root);
}

int scase_has_result(const scase_t *c, int rank) { return c->kind != K_REDUCE || rank == c->root; }
