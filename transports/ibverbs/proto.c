/* The verbs transport's data protocol: see proto.h. */
#include "proto.h"

#include "err.h"
#include "tcp/wire.h" /* the message header both transports frame with */

#define IBP_HDR RCCI_WIRE_HEADER_BYTES
#define IBP_KIND_SHIFT 30
#define IBP_SLOT_SHIFT 24
#define IBP_LEN_MASK 0xffffffu
#define IBP_LOW30 (RCCI_IBP_CREDIT_MOD - 1u)

rcc_result_t rcci_ibp_geom_check(const rcci_ibp_geom_t *g, const char *what)
{
    if (g->nslots < 1 || g->nslots > RCCI_IBP_MAX_SLOTS)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: %u slots; use 1 to %d", what, g->nslots,
                          RCCI_IBP_MAX_SLOTS);
    if (g->slot_bytes < RCCI_IBP_MIN_SLOT_BYTES || g->slot_bytes > RCCI_IBP_MAX_SLOT_BYTES)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "%s: slots of %u bytes; use %d to %u", what,
                          g->slot_bytes, RCCI_IBP_MIN_SLOT_BYTES, RCCI_IBP_MAX_SLOT_BYTES);
    return RCC_SUCCESS;
}

/* ---- immediate data ---- */

uint32_t rcci_ibp_imm_data(uint32_t slot, uint32_t len)
{
    return (uint32_t)RCCI_IBP_IMM_DATA << IBP_KIND_SHIFT | slot << IBP_SLOT_SHIFT |
           ((len - 1) & IBP_LEN_MASK);
}

uint32_t rcci_ibp_imm_credit(uint64_t taken)
{
    return (uint32_t)RCCI_IBP_IMM_CREDIT << IBP_KIND_SHIFT | (uint32_t)(taken & IBP_LOW30);
}

uint32_t rcci_ibp_imm_close(void) { return (uint32_t)RCCI_IBP_IMM_CLOSE << IBP_KIND_SHIFT; }

rcc_result_t rcci_ibp_imm_parse(uint32_t imm, rcci_ibp_imm_t *out, const char *peer)
{
    *out = (rcci_ibp_imm_t){.kind = (rcci_ibp_imm_kind_t)(imm >> IBP_KIND_SHIFT)};
    switch (out->kind) {
    case RCCI_IBP_IMM_DATA:
        out->slot = (imm >> IBP_SLOT_SHIFT) & (RCCI_IBP_MAX_SLOTS - 1);
        out->len = (imm & IBP_LEN_MASK) + 1;
        return RCC_SUCCESS;
    case RCCI_IBP_IMM_CREDIT: out->taken = imm & IBP_LOW30; return RCC_SUCCESS;
    case RCCI_IBP_IMM_CLOSE:
        if (imm & IBP_LOW30)
            break;
        return RCC_SUCCESS;
    case RCCI_IBP_IMM_QUEUED: out->raw = imm; return RCC_SUCCESS;
    }
    return rcci_error(RCC_ERR_REMOTE, "%s sent immediate data 0x%08x that is no ringcc message",
                      peer, imm);
}

/* ---- sending ---- */

void rcci_ibp_tx_init(rcci_ibp_tx_t *tx, const rcci_ibp_geom_t *g)
{
    *tx = (rcci_ibp_tx_t){.g = *g};
}

uint64_t rcci_ibp_msg_slots(const rcci_ibp_geom_t *g, uint64_t payload)
{
    return (IBP_HDR + payload + g->slot_bytes - 1) / g->slot_bytes;
}

int rcci_ibp_tx_next(rcci_ibp_tx_t *tx, uint64_t payload, uint64_t *sent, rcci_ibp_frag_t *f)
{
    uint64_t wire = IBP_HDR + payload;
    /* The oldest of the peer's slot and of the local staging slot bounds reuse. */
    uint64_t reusable = tx->taken < tx->completed ? tx->taken : tx->completed;
    if (*sent >= wire || tx->written - reusable >= tx->g.nslots)
        return 0;
    uint64_t len = wire - *sent < tx->g.slot_bytes ? wire - *sent : tx->g.slot_bytes;
    uint32_t slot = (uint32_t)(tx->written % tx->g.nslots);
    uint32_t header = *sent < IBP_HDR ? (uint32_t)(IBP_HDR - *sent) : 0;
    if (header > len)
        header = (uint32_t)len; /* never: slots hold a whole header */
    *f = (rcci_ibp_frag_t){.slot = slot,
                           .remote_offset = (uint64_t)slot * tx->g.slot_bytes,
                           .len = (uint32_t)len,
                           .header_bytes = header,
                           .payload_offset = *sent + header - IBP_HDR,
                           .payload_bytes = len - header,
                           .imm = rcci_ibp_imm_data(slot, (uint32_t)len),
                           .last = *sent + len == wire};
    *sent += len;
    tx->written++;
    return 1;
}

rcc_result_t rcci_ibp_tx_completed(rcci_ibp_tx_t *tx)
{
    if (tx->completed >= tx->written)
        return rcci_error(RCC_ERR_INTERNAL,
                          "a write completed that was never posted (%llu of %llu)",
                          (unsigned long long)tx->completed, (unsigned long long)tx->written);
    tx->completed++;
    return RCC_SUCCESS;
}

rcc_result_t rcci_ibp_tx_credit(rcci_ibp_tx_t *tx, uint32_t taken, const char *peer)
{
    /* The peer is at most nslots (< 2^30) behind, so the difference mod
     * 2^30 is how far it moved. */
    uint64_t step = (taken - (uint32_t)(tx->taken & IBP_LOW30)) & IBP_LOW30;
    if (tx->taken + step > tx->written)
        return rcci_error(
            RCC_ERR_REMOTE, "%s returned credit for %llu slots but only %llu were written to it",
            peer, (unsigned long long)(tx->taken + step), (unsigned long long)tx->written);
    tx->taken += step;
    return RCC_SUCCESS;
}

int rcci_ibp_tx_idle(const rcci_ibp_tx_t *tx)
{
    return tx->completed == tx->written && tx->taken == tx->written;
}

/* ---- receiving ---- */

void rcci_ibp_rx_init(rcci_ibp_rx_t *rx, const rcci_ibp_geom_t *g)
{
    *rx = (rcci_ibp_rx_t){.g = *g};
}

rcc_result_t rcci_ibp_rx_arrived(rcci_ibp_rx_t *rx, const rcci_ibp_imm_t *imm, const char *peer)
{
    uint32_t want = (uint32_t)(rx->arrived % rx->g.nslots);
    if (imm->kind != RCCI_IBP_IMM_DATA)
        return rcci_error(RCC_ERR_INTERNAL, "not a DATA immediate");
    if (rx->arrived - rx->taken >= rx->g.nslots)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s wrote slot %u while all %u slots were full (it ignored its credits)",
                          peer, imm->slot, rx->g.nslots);
    if (imm->slot != want)
        return rcci_error(RCC_ERR_REMOTE, "%s wrote slot %u where slot %u was next", peer,
                          imm->slot, want);
    if (imm->len > rx->g.slot_bytes)
        return rcci_error(RCC_ERR_REMOTE, "%s wrote %u bytes into a slot of %u", peer, imm->len,
                          rx->g.slot_bytes);
    rx->len[want] = imm->len;
    rx->arrived++;
    return RCC_SUCCESS;
}

int rcci_ibp_rx_peek(const rcci_ibp_rx_t *rx, rcci_ibp_slot_t *s)
{
    if (rx->taken == rx->arrived)
        return 0;
    uint32_t slot = (uint32_t)(rx->taken % rx->g.nslots);
    *s = (rcci_ibp_slot_t){.slot = slot, .len = rx->len[slot], .starts_message = rx->msg_wire == 0};
    return 1;
}

/* The bytes the next slot of the current message must hold. */
static uint64_t ibp_rx_expect(const rcci_ibp_rx_t *rx)
{
    uint64_t left = rx->msg_wire - rx->msg_taken;
    return left < rx->g.slot_bytes ? left : rx->g.slot_bytes;
}

rcc_result_t rcci_ibp_rx_start(rcci_ibp_rx_t *rx, uint64_t payload, const char *peer)
{
    rcci_ibp_slot_t s;
    if (!rcci_ibp_rx_peek(rx, &s) || !s.starts_message)
        return rcci_error(RCC_ERR_INTERNAL, "no message starts in the next slot");
    rx->msg_wire = IBP_HDR + payload;
    rx->msg_taken = 0;
    if (s.len != ibp_rx_expect(rx)) {
        uint64_t want = ibp_rx_expect(rx);
        rx->msg_wire = 0;
        return rcci_error(RCC_ERR_REMOTE,
                          "%s announced a %llu-byte message but wrote %u bytes into its first "
                          "slot (%llu expected)",
                          peer, (unsigned long long)payload, s.len, (unsigned long long)want);
    }
    return RCC_SUCCESS;
}

rcc_result_t rcci_ibp_rx_take(rcci_ibp_rx_t *rx, rcci_ibp_take_t *t, const char *peer)
{
    rcci_ibp_slot_t s;
    if (rx->msg_wire == 0 || !rcci_ibp_rx_peek(rx, &s))
        return rcci_error(RCC_ERR_INTERNAL, "no slot of a started message to take");
    if (s.len != ibp_rx_expect(rx))
        return rcci_error(RCC_ERR_REMOTE,
                          "%s wrote %u bytes into slot %u where its message needs %llu", peer,
                          s.len, s.slot, (unsigned long long)ibp_rx_expect(rx));
    uint32_t skip = rx->msg_taken < IBP_HDR ? (uint32_t)(IBP_HDR - rx->msg_taken) : 0;
    *t = (rcci_ibp_take_t){.slot = s.slot,
                           .slot_offset = skip,
                           .payload_offset = rx->msg_taken + skip - IBP_HDR,
                           .bytes = s.len - skip};
    rx->msg_taken += s.len;
    rx->taken++;
    if (rx->msg_taken == rx->msg_wire) {
        t->last = 1;
        rx->msg_wire = rx->msg_taken = 0;
    }
    return RCC_SUCCESS;
}

int rcci_ibp_rx_credit_due(rcci_ibp_rx_t *rx, uint32_t *imm)
{
    uint64_t quarter = (rx->g.nslots + 3) / 4;
    uint64_t owed = rx->taken - rx->returned;
    if (owed == 0 || (owed < quarter && rx->taken != rx->arrived))
        return 0;
    rx->returned = rx->taken;
    *imm = rcci_ibp_imm_credit(rx->taken);
    return 1;
}
