/*
 * Operation signatures: what all ranks must agree on about an operation
 * (its number, kind, type, count, op, root, algorithm), carried in the tag
 * of each of its messages and compared by the receiver, so that ranks
 * calling different collectives fail with both calls named instead of
 * hanging or reading one operation's bytes as another's.
 *
 * Layout (little-endian, RCCI_SIG_BYTES): 0 u32 operation number (0 for
 * send/recv, which are not numbered), 4 u8 kind, 5 u8 dtype, 6 u8 redop,
 * 7 u8 algorithm, 8 i32 root, 12 u8 flags (1: device buffers, which are
 * cut in other chunks and may take other connections than host ones, so
 * ranks must agree on it too), 13 u8[3] zero, 16 u64 count. Fields that do
 * not apply to a kind hold 0xff (root: -1).
 */
#include <stdio.h>
#include <string.h>

#include "byteorder.h"
#include "comm.h"

#define SIG_NONE 0xffu

void rcci_sig_encode(const rcci_sig_t *sig, uint8_t out[RCCI_SIG_BYTES])
{
    int reduces = sig->kind == RCCI_COLL_ALLREDUCE || sig->kind == RCCI_COLL_REDUCE ||
                  sig->kind == RCCI_COLL_REDUCE_SCATTER;
    int rooted = sig->kind == RCCI_COLL_BROADCAST || sig->kind == RCCI_COLL_REDUCE;
    int p2p = sig->kind == RCCI_SIG_SENDRECV || sig->kind == RCCI_SIG_ALLTOALL;
    int typed = sig->kind != RCCI_COLL_BARRIER && !p2p;
    memset(out, 0, RCCI_SIG_BYTES);
    rcci_put_le(out, sig->seq, 4);
    out[4] = (uint8_t)sig->kind;
    out[5] = typed ? (uint8_t)sig->dtype : SIG_NONE;
    out[6] = reduces ? (uint8_t)sig->redop : SIG_NONE;
    out[7] = sig->kind == RCCI_COLL_ALLREDUCE ? (uint8_t)sig->algo : SIG_NONE;
    rcci_put_le(out + 8, (uint32_t)(rooted ? sig->root : -1), 4);
    out[12] = sig->device ? 1 : 0;
    rcci_put_le(out + 16, sig->kind == RCCI_COLL_BARRIER ? 0 : sig->count, 8);
}

uint32_t rcci_sig_seq(const uint8_t sig[RCCI_SIG_BYTES]) { return (uint32_t)rcci_get_le(sig, 4); }

int rcci_sig_kind(const uint8_t sig[RCCI_SIG_BYTES]) { return sig[4]; }

void rcci_op_tag(const rcci_op_t *op, uint32_t seq, rcci_tag_t *tag)
{
    rcci_sig_t sig = {.seq = op->seq,
                      .kind = (int)op->coll,
                      .dtype = op->dtype,
                      .redop = op->redop,
                      .algo = op->algo,
                      .root = op->root,
                      .count = op->count,
                      .device = op->device};
    tag->seq = seq;
    rcci_sig_encode(&sig, tag->sig);
}

static const char *sig_kind_name(unsigned kind)
{
    if (kind == RCCI_SIG_SENDRECV)
        return "send/recv";
    if (kind == RCCI_SIG_ALLTOALL)
        return "alltoall";
    if (kind <= RCCI_COLL_BARRIER)
        return rcci_coll_name((rcci_coll_t)kind);
    return "an unknown operation";
}

void rcci_sig_describe(const uint8_t sig[RCCI_SIG_BYTES], char *buf, size_t size)
{
    uint32_t seq = rcci_sig_seq(sig);
    unsigned kind = (unsigned)rcci_sig_kind(sig), dtype = sig[5], redop = sig[6], algo = sig[7];
    int32_t root = (int32_t)(uint32_t)rcci_get_le(sig + 8, 4);
    unsigned long long count = (unsigned long long)rcci_get_le(sig + 16, 8);
    size_t n = 0;
#define SIG_ADD(...)                                                                               \
    do {                                                                                           \
        int k_ = snprintf(buf + n, size - n, __VA_ARGS__);                                         \
        n += k_ > 0 && (size_t)k_ < size - n ? (size_t)k_ : size - n - (size > n);                 \
    } while (0)
    if (size == 0)
        return;
    buf[0] = '\0';
    if (kind == RCCI_SIG_SENDRECV) {
        SIG_ADD("a %llu-byte send/recv message", count);
        return;
    }
    if (kind == RCCI_SIG_ALLTOALL) {
        SIG_ADD("alltoall(%llu bytes per peer) as op #%u", count, seq);
        return;
    }
    SIG_ADD("%s(", sig_kind_name(kind));
    if (kind != RCCI_COLL_BARRIER)
        SIG_ADD("count=%llu, %s", count, rcc_datatype_name((rcc_datatype_t)dtype));
    if (redop != SIG_NONE)
        SIG_ADD(", %s", rcc_redop_name((rcc_redop_t)redop));
    if (root >= 0)
        SIG_ADD(", root=%d", (int)root);
    if (algo != SIG_NONE)
        SIG_ADD(", %s", rcci_allreduce_algo_name((int)algo));
    if (sig[12] & 1)
        SIG_ADD(", device buffers");
    SIG_ADD(") as op #%u", seq);
#undef SIG_ADD
}
