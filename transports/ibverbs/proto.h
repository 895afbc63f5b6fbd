/*
 * The verbs transport's data protocol, without a single verbs call: slot
 * and credit accounting, the immediate data, where each byte of a message
 * goes. ibverbs.c only carries out what these functions decide, so all of
 * it is unit-tested on machines without RDMA (tests/unit/test_ibproto.c).
 *
 * Each direction of a connection has `nslots` receive slots of `slot_bytes`
 * in the receiver's registered memory. A message (a tcp/wire.h header, then
 * the payload) starts in a slot of its own and fills as many as it needs,
 * the header first. The k-th slot written on a connection (k counts from 0
 * over its life) goes to slot k mod nslots, by RDMA WRITE WITH IMMEDIATE
 * whose immediate says DATA, the slot and the bytes written. RC delivers in
 * order, so the receiver knows which slot comes next and treats anything
 * else as a broken peer. The receiver takes slots in order (copying their
 * bytes out) and returns credits: the count of slots it has taken, mod
 * 2^30, in the immediate of a zero-length SEND. A sender has at most nslots
 * slots written and not yet taken, and reuses its own staging slot k mod
 * nslots only once the write from it has completed locally as well.
 *
 * Every incoming WRITE WITH IMMEDIATE or SEND consumes one zero-length
 * receive request, so a side keeps RCCI_IBP_RECV_DEPTH of them posted:
 * between two polls of a side the peer can write at most nslots slots and
 * return at most nslots credits (each for a slot this side wrote), as many
 * of each for queued messages (qproto.h) and their slots' description,
 * plus the closing message.
 */
#ifndef RINGCC_IBVERBS_PROTO_H
#define RINGCC_IBVERBS_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

#define RCCI_IBP_MAX_SLOTS 64               /* the immediate's 6 slot bits */
#define RCCI_IBP_MIN_SLOT_BYTES 4096        /* a header and a whole notice fit in one */
#define RCCI_IBP_MAX_SLOT_BYTES (16u << 20) /* the immediate's 24 length bits (length - 1) */
#define RCCI_IBP_CREDIT_MOD (1u << 30)      /* credits count modulo this */
#define RCCI_IBP_RECV_DEPTH(nslots) (4 * (nslots) + 3)

/* Slots of one direction, agreed at connection set-up. */
typedef struct {
    uint32_t nslots;
    uint32_t slot_bytes;
} rcci_ibp_geom_t;

/* RCC_ERR_INVALID_ARGUMENT naming `what` (an RCC_IB_* parameter, or the
 * peer) when the geometry is outside the limits above. */
rcc_result_t rcci_ibp_geom_check(const rcci_ibp_geom_t *g, const char *what);

/* ---- immediate data (host order; the shell converts to network order) ---- */

typedef enum {
    RCCI_IBP_IMM_DATA = 0,   /* a slot was written: slot, len */
    RCCI_IBP_IMM_CREDIT = 1, /* the peer has taken `taken` slots (mod 2^30) */
    RCCI_IBP_IMM_CLOSE = 2,  /* the peer closes the connection in order */
    RCCI_IBP_IMM_QUEUED = 3, /* a queued message's, parsed by qproto.h from `raw` */
} rcci_ibp_imm_kind_t;

typedef struct {
    rcci_ibp_imm_kind_t kind;
    uint32_t slot, len; /* DATA */
    uint32_t taken;     /* CREDIT */
    uint32_t raw;       /* QUEUED: the immediate as it came */
} rcci_ibp_imm_t;

uint32_t rcci_ibp_imm_data(uint32_t slot, uint32_t len);
uint32_t rcci_ibp_imm_credit(uint64_t taken);
uint32_t rcci_ibp_imm_close(void);
/* RCC_ERR_REMOTE naming `peer` for an immediate no sender makes: a CLOSE
 * with reserved bits set. */
rcc_result_t rcci_ibp_imm_parse(uint32_t imm, rcci_ibp_imm_t *out, const char *peer);

/* ---- sending ---- */

typedef struct {
    rcci_ibp_geom_t g;
    uint64_t written;   /* slots written, ever */
    uint64_t completed; /* of them, writes completed locally (in order on RC) */
    uint64_t taken;     /* of them, taken by the peer (its credits) */
} rcci_ibp_tx_t;

/* One RDMA WRITE WITH IMMEDIATE: `len` bytes into the peer's slot `slot`
 * (at remote_offset in its slot region), from staging slot `slot` here. The
 * first `header_bytes` are the message's header, the rest its payload from
 * `payload_offset`. */
typedef struct {
    uint32_t slot;
    uint64_t remote_offset;
    uint32_t len;
    uint32_t header_bytes;
    uint64_t payload_offset;
    uint64_t payload_bytes;
    uint32_t imm;
    int last; /* the message's last fragment */
} rcci_ibp_frag_t;

void rcci_ibp_tx_init(rcci_ibp_tx_t *tx, const rcci_ibp_geom_t *g);
/* Slots of a message of `payload` bytes (header included). */
uint64_t rcci_ibp_msg_slots(const rcci_ibp_geom_t *g, uint64_t payload);
/* The next fragment of a message of `payload` bytes of which `*sent` wire
 * bytes (header + payload) are written: 1 and *f, counted as written and
 * *sent advanced, when a slot is free here and at the peer; 0 when not (a
 * credit or a local completion frees one). 0 also once the message is
 * whole. */
int rcci_ibp_tx_next(rcci_ibp_tx_t *tx, uint64_t payload, uint64_t *sent, rcci_ibp_frag_t *f);
/* A local write completion. RCC_ERR_INTERNAL when none was outstanding. */
rcc_result_t rcci_ibp_tx_completed(rcci_ibp_tx_t *tx);
/* A credit from the peer (its immediate's count). RCC_ERR_REMOTE naming
 * `peer` when it takes slots that were never written. */
rcc_result_t rcci_ibp_tx_credit(rcci_ibp_tx_t *tx, uint32_t taken, const char *peer);
/* Whether every slot written is complete and taken (a clean close). */
int rcci_ibp_tx_idle(const rcci_ibp_tx_t *tx);

/* ---- receiving ---- */

typedef struct {
    rcci_ibp_geom_t g;
    uint64_t arrived;  /* slots written by the peer, ever */
    uint64_t taken;    /* of them, taken (their bytes copied out) */
    uint64_t returned; /* `taken` as of the last credit sent */
    uint32_t len[RCCI_IBP_MAX_SLOTS];
    uint64_t msg_wire;  /* wire bytes of the message being taken; 0 between messages */
    uint64_t msg_taken; /* of them, taken */
} rcci_ibp_rx_t;

/* The next slot to take, and what is in it. */
typedef struct {
    uint32_t slot;
    uint32_t len;
    int starts_message; /* a header is at its start */
} rcci_ibp_slot_t;

/* Where one slot's bytes go: `bytes` from slot offset `slot_offset` to the
 * message's payload offset `payload_offset`. */
typedef struct {
    uint32_t slot;
    uint32_t slot_offset;
    uint64_t payload_offset;
    uint32_t bytes;
    int last; /* the message is complete */
} rcci_ibp_take_t;

void rcci_ibp_rx_init(rcci_ibp_rx_t *rx, const rcci_ibp_geom_t *g);
/* A DATA immediate. RCC_ERR_REMOTE naming `peer` when the peer wrote a slot
 * other than the next, more than nslots slots ahead of what was taken, or
 * more bytes than a slot holds. */
rcc_result_t rcci_ibp_rx_arrived(rcci_ibp_rx_t *rx, const rcci_ibp_imm_t *imm, const char *peer);
/* 1 and *s when a slot has arrived and is not taken yet. */
int rcci_ibp_rx_peek(const rcci_ibp_rx_t *rx, rcci_ibp_slot_t *s);
/* Starts taking the message whose header is at the start of the next slot
 * and announced `payload` bytes. RCC_ERR_REMOTE naming `peer` when the
 * slot's length disagrees with it; RCC_ERR_INTERNAL when no slot starting
 * a message is next. */
rcc_result_t rcci_ibp_rx_start(rcci_ibp_rx_t *rx, uint64_t payload, const char *peer);
/* Takes the next slot of the started message (the slot is then free for
 * the peer). RCC_ERR_REMOTE naming `peer` when its length is not what the
 * message needs there; RCC_ERR_INTERNAL when nothing is started or no slot
 * has arrived. */
rcc_result_t rcci_ibp_rx_take(rcci_ibp_rx_t *rx, rcci_ibp_take_t *t, const char *peer);
/* 1 and the immediate of a credit to send now (counted as returned): when
 * slots were taken since the last credit and either a quarter of the slots
 * is, or nothing is left to take (so a waiting sender never waits on a
 * credit held back). */
int rcci_ibp_rx_credit_due(rcci_ibp_rx_t *rx, uint32_t *imm);

#endif /* RINGCC_IBVERBS_PROTO_H */
