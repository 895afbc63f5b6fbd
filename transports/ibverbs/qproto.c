/* The verbs transport's queued messages: see qproto.h. */
#include "qproto.h"

#include <stdio.h>

#include "byteorder.h"
#include "err.h"
#include "hash.h"

#define IBQ_KIND_SHIFT 30 /* proto.h's kind */
#define IBQ_WIRE_KIND 3u  /* QUEUED */
#define IBQ_SUB_SHIFT 28
#define IBQ_SEQ_SHIFT 24
#define IBQ_CHECK_MASK 0xffffffu
#define IBQ_LOW28 (RCCI_IBQ_CREDIT_MOD - 1u)
#define IBQ_SLOTS_MAGIC 0x51494352u /* "RCIQ" read as little-endian */

static uint32_t ibq_imm(rcci_ibq_kind_t kind, uint32_t rest)
{
    return IBQ_WIRE_KIND << IBQ_KIND_SHIFT | (uint32_t)kind << IBQ_SUB_SHIFT | (rest & IBQ_LOW28);
}

uint32_t rcci_ibq_imm_data(uint64_t k, uint32_t check)
{
    return ibq_imm(RCCI_IBQ_DATA,
                   (uint32_t)(k % RCCI_IBQ_SEQ_MOD) << IBQ_SEQ_SHIFT | (check & IBQ_CHECK_MASK));
}

uint32_t rcci_ibq_imm_credit(uint64_t released)
{
    return ibq_imm(RCCI_IBQ_CREDIT, (uint32_t)(released & IBQ_LOW28));
}

uint32_t rcci_ibq_imm_slots(void) { return ibq_imm(RCCI_IBQ_SLOTS, 0); }

rcc_result_t rcci_ibq_imm_parse(uint32_t imm, rcci_ibq_imm_t *out, const char *peer)
{
    *out = (rcci_ibq_imm_t){.kind = (rcci_ibq_kind_t)((imm >> IBQ_SUB_SHIFT) & 3u)};
    if (imm >> IBQ_KIND_SHIFT == IBQ_WIRE_KIND) {
        switch (out->kind) {
        case RCCI_IBQ_DATA:
            out->seq = (imm >> IBQ_SEQ_SHIFT) & (RCCI_IBQ_SEQ_MOD - 1u);
            out->check = imm & IBQ_CHECK_MASK;
            return RCC_SUCCESS;
        case RCCI_IBQ_CREDIT: out->released = imm & IBQ_LOW28; return RCC_SUCCESS;
        case RCCI_IBQ_SLOTS:
            if (imm & IBQ_LOW28)
                break;
            return RCC_SUCCESS;
        }
    }
    return rcci_error(RCC_ERR_REMOTE,
                      "%s sent immediate data 0x%08x that is no queued ringcc message", peer, imm);
}

uint32_t rcci_ibq_check(const rcci_tag_t *tag, uint64_t bytes)
{
    uint64_t h = rcci_mix64(rcci_fnv1a(RCCI_FNV1A_SEED, tag->sig, RCCI_SIG_BYTES) ^ bytes);
    return (uint32_t)(h & IBQ_CHECK_MASK);
}

rcc_result_t rcci_ibq_check_match(uint32_t found, const rcci_tag_t *expect, uint64_t bytes,
                                  uint64_t k, const char *peer, const char *self,
                                  rcci_sig_describe_fn describe)
{
    if (found == rcci_ibq_check(expect, bytes))
        return RCC_SUCCESS;
    char want[160] = "";
    if (describe)
        describe(expect->sig, want, sizeof want);
    return rcci_error(RCC_ERR_MISMATCH,
                      "%s sent queued message %llu of another operation or length (%llu bytes "
                      "expected) where %s expects one of %s",
                      peer, (unsigned long long)k, (unsigned long long)bytes, self,
                      want[0] ? want : "its own operation");
}

void rcci_ibq_slots_encode(uint8_t out[RCCI_IBQ_SLOTS_BYTES], const rcci_ibq_slots_t *s)
{
    rcci_put_le(out, IBQ_SLOTS_MAGIC, 4);
    rcci_put_le(out + 4, s->rkey, 4);
    rcci_put_le(out + 8, s->addr, 8);
    rcci_put_le(out + 16, s->nslots, 4);
    rcci_put_le(out + 20, s->slot_bytes, 4);
}

rcc_result_t rcci_ibq_slots_decode(const uint8_t in[RCCI_IBQ_SLOTS_BYTES], rcci_ibq_slots_t *s,
                                   uint32_t nslots, uint32_t slot_bytes, const char *peer)
{
    if (rcci_get_le(in, 4) != IBQ_SLOTS_MAGIC)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s announced its queued receive slots, but its mailbox holds none",
                          peer);
    *s = (rcci_ibq_slots_t){.rkey = (uint32_t)rcci_get_le(in + 4, 4),
                            .addr = rcci_get_le(in + 8, 8),
                            .nslots = (uint32_t)rcci_get_le(in + 16, 4),
                            .slot_bytes = (uint32_t)rcci_get_le(in + 20, 4)};
    if (s->nslots != nslots || s->slot_bytes != slot_bytes)
        return rcci_error(RCC_ERR_INVALID_USAGE,
                          "%s receives device data in %u slots of %u bytes, this rank sends %u of "
                          "%u: set RCC_IB_SLOTS and RCC_IB_GDR_SLOT_BYTES alike on every rank",
                          peer, s->nslots, s->slot_bytes, nslots, slot_bytes);
    return RCC_SUCCESS;
}

/* ---- sending ---- */

void rcci_ibq_tx_init(rcci_ibq_tx_t *tx, uint32_t nslots)
{
    *tx = (rcci_ibq_tx_t){.nslots = nslots};
}

/* How far 32-bit counter `c` is ahead of count `n` (at most 2^31 apart);
 * 0 when it is not. */
static uint64_t ibq_ahead(uint32_t c, uint64_t n)
{
    int32_t d = (int32_t)(c - (uint32_t)n);
    return d > 0 ? (uint64_t)d : 0;
}

int rcci_ibq_tx_ready(const rcci_ibq_tx_t *tx, uint32_t staged)
{
    return ibq_ahead(staged, tx->posted) > 0 && tx->posted - tx->released < tx->nslots;
}

void rcci_ibq_tx_posted(rcci_ibq_tx_t *tx) { tx->posted++; }

rcc_result_t rcci_ibq_tx_completed(rcci_ibq_tx_t *tx)
{
    if (tx->completed >= tx->posted)
        return rcci_error(RCC_ERR_INTERNAL,
                          "a queued write completed that was never posted (%llu of %llu)",
                          (unsigned long long)tx->completed, (unsigned long long)tx->posted);
    tx->completed++;
    return RCC_SUCCESS;
}

rcc_result_t rcci_ibq_tx_credit(rcci_ibq_tx_t *tx, uint32_t released, const char *peer)
{
    /* The peer is at most nslots behind: the difference mod 2^28 is how
     * far it moved. */
    uint64_t step = (released - (uint32_t)(tx->released & IBQ_LOW28)) & IBQ_LOW28;
    if (tx->released + step > tx->posted)
        return rcci_error(
            RCC_ERR_REMOTE, "%s released %llu queued messages but only %llu were written to it",
            peer, (unsigned long long)(tx->released + step), (unsigned long long)tx->posted);
    tx->released += step;
    return RCC_SUCCESS;
}

/* ---- receiving ---- */

void rcci_ibq_rx_init(rcci_ibq_rx_t *rx, uint32_t nslots)
{
    *rx = (rcci_ibq_rx_t){.nslots = nslots};
}

rcc_result_t rcci_ibq_rx_arrived(rcci_ibq_rx_t *rx, const rcci_ibq_imm_t *imm, const char *peer)
{
    if (imm->kind != RCCI_IBQ_DATA)
        return rcci_error(RCC_ERR_INTERNAL, "not a queued DATA immediate");
    uint32_t want = (uint32_t)(rx->arrived % RCCI_IBQ_SEQ_MOD);
    if (imm->seq != want)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s wrote queued message %u (mod %u) where message %llu was next", peer,
                          imm->seq, RCCI_IBQ_SEQ_MOD, (unsigned long long)rx->arrived);
    if (rx->arrived - rx->returned >= rx->nslots)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s wrote queued message %llu while all %u slots were taken (it "
                          "ignored its credits)",
                          peer, (unsigned long long)rx->arrived, rx->nslots);
    rx->check[rx->arrived % rx->nslots] = imm->check;
    rx->arrived++;
    return RCC_SUCCESS;
}

void rcci_ibq_rx_released(rcci_ibq_rx_t *rx, uint32_t counter)
{
    uint64_t r = rx->released + ibq_ahead(counter, rx->released);
    if (r > rx->arrived)
        r = rx->arrived;
    if (r > rx->released)
        rx->released = r;
}

int rcci_ibq_rx_credit_due(rcci_ibq_rx_t *rx, uint32_t *imm)
{
    if (rx->released == rx->returned)
        return 0;
    rx->returned = rx->released;
    *imm = rcci_ibq_imm_credit(rx->released);
    return 1;
}

int rcci_ibq_rx_check_of(const rcci_ibq_rx_t *rx, uint64_t k, uint32_t *check)
{
    if (k >= rx->arrived || rx->arrived > k + rx->nslots)
        return 0;
    *check = rx->check[k % rx->nslots];
    return 1;
}
