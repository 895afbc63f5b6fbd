/*
 * Groups (rcc_group_start/end, NCCL's semantics): calls made inside a group
 * are recorded per thread and launched together at the outermost end.
 * Consecutive allreduces of one dtype and op on one communicator are fused
 * (Horovod's tensor fusion): their inputs are packed into one buffer, one
 * ring pass reduces it, and the result is unpacked into each caller's
 * output. Small allreduces are dominated by per-operation latency, so this
 * turns a thousand round trips into one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "params.h"

typedef struct {
    struct rcc_comm *comm;
    rcci_op_t *op;
    rcc_request_t owned; /* a blocking call's request: waited for and freed at the end */
} group_entry_t;

static _Thread_local int group_depth;
static _Thread_local group_entry_t *group_entries;
static _Thread_local int group_count, group_cap;

static _Thread_local uint64_t group_serial_now; /* the open group's; 0 outside groups */
static atomic_uint_fast64_t group_serials;

int rcci_group_active(void) { return group_depth > 0; }

uint64_t rcci_group_serial(void) { return group_depth > 0 ? group_serial_now : 0; }

rcc_result_t rcc_group_start(void)
{
    if (group_depth++ == 0)
        group_serial_now = atomic_fetch_add(&group_serials, 1) + 1;
    return RCC_SUCCESS;
}

rcc_result_t rcci_group_add(struct rcc_comm *comm, rcci_op_t *op, rcc_request_t owned)
{
    if (group_count == group_cap) {
        int cap = group_cap ? 2 * group_cap : 64;
        group_entry_t *e = realloc(group_entries, sizeof *e * (size_t)cap);
        if (!e)
            return rcci_error(RCC_ERR_NO_MEMORY, "group of %d operations", group_count + 1);
        group_entries = e;
        group_cap = cap;
    }
    atomic_fetch_add(&op->refs, 1); /* the group's, until it is launched */
    group_entries[group_count++] = (group_entry_t){comm, op, owned};
    return RCC_SUCCESS;
}

static int group_fusable(const rcci_op_t *a, const rcci_op_t *b)
{
    /* Stream operations are not packed: their buffers may be device memory. */
    return !a->nmembers && a->coll == RCCI_COLL_ALLREDUCE && b->coll == RCCI_COLL_ALLREDUCE &&
           a->dtype == b->dtype && a->redop == b->redop && !a->on_stream && !b->on_stream;
}

/* Fusion buffers: the communicator keeps the last one freed, so a training
 * loop that fuses every step reuses warm pages instead of faulting in a new
 * buffer (a fresh 4 MiB costs milliseconds on a VM). Any thread. */
static char *group_buffer_take(struct rcc_comm *comm, size_t bytes)
{
    char *buf = NULL;
    pthread_mutex_lock(&comm->lock);
    if (comm->fusion_cache && comm->fusion_cache_bytes >= bytes) {
        buf = comm->fusion_cache;
        comm->fusion_cache = NULL;
    }
    pthread_mutex_unlock(&comm->lock);
    return buf ? buf : malloc(bytes ? bytes : 1);
}

static void group_buffer_give(struct rcc_comm *comm, char *buf, size_t bytes)
{
    if (!buf)
        return;
    pthread_mutex_lock(&comm->lock);
    if (!comm->fusion_cache || comm->fusion_cache_bytes < bytes) {
        char *old = comm->fusion_cache;
        comm->fusion_cache = buf;
        comm->fusion_cache_bytes = bytes;
        buf = old;
    }
    pthread_mutex_unlock(&comm->lock);
    free(buf);
}

/* Ends the members of a fused operation that could not be launched. */
static void group_fail(rcci_op_t **ops, int n, rcc_result_t res)
{
    for (int i = 0; i < n; i++) {
        rcci_stream_release(ops[i]);
        rcci_op_complete(ops[i], res);
    }
}

/* One fused allreduce for ops[0..n), all on `comm`, inputs packed now. */
static rcc_result_t group_launch_fused(struct rcc_comm *comm, rcci_op_t **ops, int n, size_t total)
{
    size_t esize = rcc_datatype_size(ops[0]->dtype);
    /* Members that already lie end to end (in and out alike) need no
     * packing: the ring runs over the caller's memory as one buffer. */
    int adjacent = 1;
    size_t off = 0;
    for (int i = 0; i < n && adjacent; i++) {
        adjacent = (const char *)ops[i]->sendbuf == (const char *)ops[0]->sendbuf + off &&
                   (char *)ops[i]->recvbuf == (char *)ops[0]->recvbuf + off;
        off += ops[i]->count * esize;
    }
    /* ...as long as the whole is a valid allreduce: in place, or with input
     * and output apart. */
    uintptr_t s0 = (uintptr_t)ops[0]->sendbuf, r0 = (uintptr_t)ops[0]->recvbuf;
    if (adjacent && s0 != r0 && s0 < r0 + off && r0 < s0 + off)
        adjacent = 0;
    rcci_op_t *fused = rcci_op_new(0);
    char *buf = adjacent ? NULL : group_buffer_take(comm, total * esize);
    rcci_op_t **members = malloc(sizeof *members * (size_t)n);
    if (!fused || (!adjacent && !buf) || !members) {
        group_buffer_give(comm, buf, total * esize);
        free(members);
        if (fused)
            rcci_op_release(fused);
        return rcci_error(RCC_ERR_NO_MEMORY, "fusion buffer of %zu bytes", total * esize);
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (buf)
            memcpy(buf + at, ops[i]->sendbuf, ops[i]->count * esize);
        at += ops[i]->count * esize;
        members[i] = ops[i];
        atomic_fetch_add(&ops[i]->refs, 1); /* the fused operation's */
        atomic_store(&ops[i]->launched, 1);
    }
    fused->coll = RCCI_COLL_ALLREDUCE;
    fused->sendbuf = buf ? buf : ops[0]->sendbuf;
    fused->recvbuf = buf ? buf : ops[0]->recvbuf;
    fused->fusion_buf = buf;
    fused->count = total;
    fused->dtype = ops[0]->dtype;
    fused->redop = ops[0]->redop;
    fused->members = members;
    fused->nmembers = n;
    fused->fusion_comm = comm;
    fused->fusion_bytes = total * esize;
    rcc_result_t res = rcci_progress_enqueue(comm, fused);
    if (res != RCC_SUCCESS)
        rcci_group_complete_fused(fused, res); /* fails and frees the members' side */
    rcci_op_release(fused);
    return res;
}

void rcci_group_complete_fused(rcci_op_t *fused, rcc_result_t res)
{
    size_t esize = rcc_datatype_size(fused->dtype), at = 0;
    for (int i = 0; i < fused->nmembers; i++) {
        rcci_op_t *m = fused->members[i];
        if (res == RCC_SUCCESS && fused->fusion_buf)
            memcpy(m->recvbuf, fused->fusion_buf + at, m->count * esize);
        at += m->count * esize;
        rcci_op_complete(m, res);
        rcci_op_release(m);
    }
    free(fused->members);
    if (fused->fusion_buf)
        group_buffer_give(fused->fusion_comm, fused->fusion_buf, fused->fusion_bytes);
    if (fused->coll == RCCI_COLL_P2P)
        free(fused->msgs); /* a merged operation's own copy */
    fused->msgs = NULL;
    fused->members = NULL;
    fused->nmembers = 0;
    fused->fusion_buf = NULL;
}

/* All point-to-point operations of one communicator's share of a group
 * become one, launched after the group's collectives: their messages then
 * progress together, so their order cannot deadlock, and ranks whose
 * point-to-point calls stood at different places among the same
 * collectives still queue them alike (a point-to-point operation runs
 * beside a collective queued before it, never the other way round).
 * Returns the number of operations left in ops[]. */
static int group_merge_p2p(rcci_op_t **ops, int n, rcc_result_t *res)
{
    int first = -1, count = 0, nmsgs = 0;
    for (int i = 0; i < n; i++) {
        if (ops[i]->coll != RCCI_COLL_P2P)
            continue;
        first = first < 0 ? i : first;
        count++;
        nmsgs += ops[i]->nmsgs;
    }
    if (count == 1) { /* nothing to merge: it just moves to the end */
        rcci_op_t *p2p = ops[first];
        memmove(ops + first, ops + first + 1, sizeof *ops * (size_t)(n - first - 1));
        ops[n - 1] = p2p;
        return n;
    }
    if (count == 0)
        return n;
    rcci_op_t *merged = rcci_op_new(0);
    rcci_p2p_msg_t *msgs = malloc(sizeof *msgs * (size_t)nmsgs);
    rcci_op_t **members = malloc(sizeof *members * (size_t)count);
    if (!merged || !msgs || !members) {
        free(msgs), free(members);
        if (merged)
            rcci_op_release(merged);
        *res = rcci_error(RCC_ERR_NO_MEMORY, "merging %d point-to-point calls", count);
        return n; /* launched one by one instead */
    }
    int k = 0, m = 0, left = 0;
    for (int i = 0; i < n; i++) {
        if (ops[i]->coll != RCCI_COLL_P2P) {
            ops[left++] = ops[i];
            continue;
        }
        memcpy(msgs + m, ops[i]->msgs, sizeof *msgs * (size_t)ops[i]->nmsgs);
        for (int j = 0; j < ops[i]->nmsgs; j++) /* alltoalls keep their call order */
            if (msgs[m + j].alltoall)
                msgs[m + j].alltoall += merged->alltoalls;
        merged->alltoalls += ops[i]->alltoalls;
        merged->on_stream |= ops[i]->on_stream;
        m += ops[i]->nmsgs;
        members[k] = ops[i];
        atomic_fetch_add(&ops[i]->refs, 1); /* the merged operation's */
        atomic_store(&ops[i]->launched, 1);
        k++;
    }
    ops[left++] = merged;
    merged->coll = RCCI_COLL_P2P;
    merged->msgs = msgs;
    merged->nmsgs = nmsgs;
    merged->members = members;
    merged->nmembers = count;
    merged->count = 1;
    return left;
}

/* Launches one communicator's share of the group: its collectives in call
 * order, then its point-to-point calls as one operation. */
static rcc_result_t group_launch_comm(struct rcc_comm *comm, rcci_op_t **ops, int n)
{
    size_t fusion_bytes = (size_t)rcci_param_int(RCCI_PARAM_FUSION_BYTES);
    rcc_result_t first = RCC_SUCCESS;
    n = group_merge_p2p(ops, n, &first);
    for (int i = 0; i < n;) {
        size_t esize = rcc_datatype_size(ops[i]->dtype), total = ops[i]->count;
        int j = i + 1;
        while (j < n && group_fusable(ops[i], ops[j]) &&
               (total + ops[j]->count) * esize <= fusion_bytes)
            total += ops[j++]->count;
        rcc_result_t res;
        if (j - i >= 2) {
            res = group_launch_fused(comm, ops + i, j - i, total);
        } else {
            /* Read before the enqueue: once queued, the progress thread may
             * complete a merged operation, which clears its members. */
            int merged = ops[i]->nmembers > 0;
            res = rcci_progress_enqueue(comm, ops[i]);
            if (res != RCC_SUCCESS && merged)
                rcci_group_complete_fused(ops[i], res);
            if (res != RCC_SUCCESS)
                group_fail(ops + i, 1, res);
            if (merged)
                rcci_op_release(ops[i]); /* a merged operation: the queue holds it now */
        }
        if (res != RCC_SUCCESS && first == RCC_SUCCESS)
            first = res;
        i = j;
    }
    return first;
}

rcc_result_t rcc_group_end(void)
{
    rcci_tls_error_clear();
    if (group_depth == 0)
        return rcci_error(RCC_ERR_INVALID_USAGE, "rcc_group_end without rcc_group_start");
    if (--group_depth > 0)
        return RCC_SUCCESS;
    int n = group_count;
    group_entry_t *entries = group_entries;
    group_entries = NULL;
    group_count = group_cap = 0;
    rcc_result_t first = RCC_SUCCESS;
    char error[RCCI_ERR_TEXT_BYTES] = "";
    rcci_op_t **ops = malloc(sizeof *ops * (size_t)(n ? n : 1));
    /* Communicators in order of first appearance; each one's operations in
     * call order. */
    for (int i = 0; i < n && ops; i++) {
        struct rcc_comm *comm = entries[i].comm;
        if (!comm)
            continue;
        int k = 0;
        for (int j = i; j < n; j++) {
            if (entries[j].comm != comm)
                continue;
            ops[k++] = entries[j].op;
            if (j > i)
                entries[j].comm = NULL; /* taken */
        }
        rcc_result_t res = group_launch_comm(comm, ops, k);
        if (res != RCC_SUCCESS && first == RCC_SUCCESS) {
            first = res;
            snprintf(error, sizeof error, "%s", rcci_tls_error());
        }
    }
    if (!ops) {
        first = rcci_error(RCC_ERR_NO_MEMORY, "launching a group of %d operations", n);
        snprintf(error, sizeof error, "%s", rcci_tls_error());
        for (int i = 0; i < n; i++) {
            rcci_stream_release(entries[i].op);
            rcci_op_complete(entries[i].op, first);
        }
    }
    for (int i = 0; i < n; i++) {
        if (entries[i].owned) {
            rcc_result_t res = rcc_wait(&entries[i].owned);
            if (res != RCC_SUCCESS && first == RCC_SUCCESS) {
                first = res;
                snprintf(error, sizeof error, "%s", rcci_tls_error());
            }
        }
        rcci_op_release(entries[i].op);
    }
    free(ops);
    free(entries);
    rcci_stream_group_end();
    if (first != RCC_SUCCESS)
        rcci_tls_error_set(error);
    return first;
}
