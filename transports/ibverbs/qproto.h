/*
 * The verbs transport's queued messages (transport.h, version 7), without
 * a single verbs call: GPUDirect RDMA receives for the device ring's edges
 * to other hosts. Unit-tested in tests/unit/test_ibproto.c.
 *
 * A connection that carries queued messages has, besides its host slots
 * (proto.h), a second ring per direction: `nslots` slots of `slot_bytes`
 * in the sender's device memory (its staging) and as many in the
 * receiver's (registered for the adapter's writes). The k-th queued
 * message (k from 0, numbered apart from the host slots' messages) is
 * written by the sender's GPU into staging slot k mod nslots, then by one
 * RDMA WRITE WITH IMMEDIATE into the receiver's slot k mod nslots, where
 * the receiver's GPU reads it and releases the slot. The host of each side
 * only moves counters: the sender's posts the write once its GPU has
 * staged the message and the peer's slot is free; the receiver's tells its
 * GPU that the message has landed, and returns the slots its GPU released
 * as credits.
 *
 * Immediates of kind QUEUED (proto.h's fourth kind), bits 29-28 saying:
 *   DATA    bits 27-24 k mod 16, bits 23-0 rcci_ibq_check of the message;
 *   CREDIT  bits 27-0 the slots the receiver's GPU has released, mod 2^28;
 *   SLOTS   the rest 0: the receiver's slots are described in the sender's
 *           mailbox (64 bytes after its host slots), written just before.
 * The receiver allocates its slots on its first queued receive and sends
 * SLOTS; the sender writes nothing before it has them.
 */
#ifndef RINGCC_IBVERBS_QPROTO_H
#define RINGCC_IBVERBS_QPROTO_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "ringcc.h"
#include "transport.h"

#define RCCI_IBQ_CREDIT_MOD (1u << 28) /* credits count modulo this */
#define RCCI_IBQ_SEQ_MOD 16u           /* DATA carries k modulo this */
#define RCCI_IBQ_MAILBOX_BYTES 64      /* after the host slots, on both sides */
#define RCCI_IBQ_SLOTS_BYTES 24        /* an encoded rcci_ibq_slots_t */

/* What a QUEUED immediate says (proto.h's rcci_ibp_imm_parse hands it
 * over as kind RCCI_IBP_IMM_QUEUED and the raw immediate). */
typedef enum { RCCI_IBQ_DATA = 0, RCCI_IBQ_CREDIT = 1, RCCI_IBQ_SLOTS = 2 } rcci_ibq_kind_t;

typedef struct {
    rcci_ibq_kind_t kind;
    uint32_t seq;      /* DATA: k mod 16 */
    uint32_t check;    /* DATA */
    uint32_t released; /* CREDIT, mod 2^28 */
} rcci_ibq_imm_t;

uint32_t rcci_ibq_imm_data(uint64_t k, uint32_t check);
uint32_t rcci_ibq_imm_credit(uint64_t released);
uint32_t rcci_ibq_imm_slots(void);
/* RCC_ERR_REMOTE naming `peer` for an immediate no sender makes (not of
 * kind QUEUED, sub-kind 3, SLOTS with other bits set). */
rcc_result_t rcci_ibq_imm_parse(uint32_t imm, rcci_ibq_imm_t *out, const char *peer);

/* 24 bits of the operation's signature and the message's length: what
 * DATA carries for the receiver to compare with what it queued (the
 * sequence number is not known when a message is queued). */
uint32_t rcci_ibq_check(const rcci_tag_t *tag, uint64_t bytes);
/* RCC_ERR_MISMATCH naming `peer` and the operation this side expected
 * when `found` (a DATA's check) is not rcci_ibq_check(expect, bytes). */
rcc_result_t rcci_ibq_check_match(uint32_t found, const rcci_tag_t *expect, uint64_t bytes,
                                  uint64_t k, const char *peer, const char *self,
                                  rcci_sig_describe_fn describe);

/* Where the receiver's slots lie: the mailbox's contents. */
typedef struct {
    uint64_t addr;
    uint32_t rkey;
    uint32_t nslots, slot_bytes;
} rcci_ibq_slots_t;

void rcci_ibq_slots_encode(uint8_t out[RCCI_IBQ_SLOTS_BYTES], const rcci_ibq_slots_t *s);
/* RCC_ERR_REMOTE naming `peer` when it is no description (magic); and
 * RCC_ERR_INVALID_USAGE when its geometry is not this side's (`nslots`,
 * `slot_bytes`): the ranks' settings differ. */
rcc_result_t rcci_ibq_slots_decode(const uint8_t in[RCCI_IBQ_SLOTS_BYTES], rcci_ibq_slots_t *s,
                                   uint32_t nslots, uint32_t slot_bytes, const char *peer);

/* ---- sending ---- */

typedef struct {
    uint32_t nslots;
    uint64_t posted;    /* writes posted, ever */
    uint64_t completed; /* of them, completed here: their staging slots are free */
    uint64_t released;  /* of them, released by the peer's GPU (its credits) */
} rcci_ibq_tx_t;

void rcci_ibq_tx_init(rcci_ibq_tx_t *tx, uint32_t nslots);
/* Whether message `posted` may be written now: the GPU has staged it
 * (`staged`, its 32-bit counter: messages below it are) and the peer's
 * slot for it is free. */
int rcci_ibq_tx_ready(const rcci_ibq_tx_t *tx, uint32_t staged);
void rcci_ibq_tx_posted(rcci_ibq_tx_t *tx);
/* A local completion of a queued write. RCC_ERR_INTERNAL when none was
 * outstanding. */
rcc_result_t rcci_ibq_tx_completed(rcci_ibq_tx_t *tx);
/* A CREDIT. RCC_ERR_REMOTE naming `peer` when it releases messages never
 * written to it. */
rcc_result_t rcci_ibq_tx_credit(rcci_ibq_tx_t *tx, uint32_t released, const char *peer);

/* ---- receiving ---- */

typedef struct {
    uint32_t nslots;
    uint64_t arrived;                   /* messages landed, ever */
    uint64_t released;                  /* of them, released by this side's GPU */
    uint64_t returned;                  /* `released` as of the last CREDIT sent */
    uint32_t check[RCCI_IBP_MAX_SLOTS]; /* by slot: the check of what landed there last */
} rcci_ibq_rx_t;

void rcci_ibq_rx_init(rcci_ibq_rx_t *rx, uint32_t nslots);
/* A DATA. RCC_ERR_REMOTE naming `peer` when it is not the next message, or
 * lands in a slot that was not returned to it. */
rcc_result_t rcci_ibq_rx_arrived(rcci_ibq_rx_t *rx, const rcci_ibq_imm_t *imm, const char *peer);
/* The GPU's release counter (32 bits); never past what arrived (after
 * queue_abort the GPU runs through on what was never sent). */
void rcci_ibq_rx_released(rcci_ibq_rx_t *rx, uint32_t counter);
/* 1 and the CREDIT to send now (counted as returned) when the GPU has
 * released slots since the last one. */
int rcci_ibq_rx_credit_due(rcci_ibq_rx_t *rx, uint32_t *imm);
/* 1 and message k's check while it can be read (k has landed, and k +
 * nslots has not landed over it); 0 otherwise. */
int rcci_ibq_rx_check_of(const rcci_ibq_rx_t *rx, uint64_t k, uint32_t *check);

#endif /* RINGCC_IBVERBS_QPROTO_H */
