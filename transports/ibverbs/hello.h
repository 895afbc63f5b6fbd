/*
 * What two verbs endpoints tell each other in rdma_cm's private data when
 * they connect (rdma_connect) and accept (rdma_accept): who they are, where
 * their receive slots lie, and the job secret's first half as proof. It
 * must fit the 56 bytes an RC connect request may carry. Fixed
 * little-endian layout:
 *   0 u32 magic "RCIB"  4 u8 version  5 u8 reserved  6 u16 nslots
 *   8 i32 rank  12 u32 tag  16 u64 comm_id  24 u64 slot region address
 *  32 u32 rkey  36 u32 slot_bytes  40 u8[16] secret (first half)
 */
#ifndef RINGCC_IBVERBS_HELLO_H
#define RINGCC_IBVERBS_HELLO_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "ringcc.h"

#define RCCI_IBH_MAGIC 0x42494352u /* "RCIB" read as little-endian */
#define RCCI_IBH_VERSION 1
#define RCCI_IBH_BYTES 56
#define RCCI_IBH_SECRET_BYTES 16

typedef struct {
    int32_t rank;
    uint32_t tag;
    uint64_t comm_id;
    uint64_t slots_addr; /* the sender's receive slots, for the peer's writes */
    uint32_t rkey;
    rcci_ibp_geom_t geom;
} rcci_ibh_t;

void rcci_ibh_encode(uint8_t out[RCCI_IBH_BYTES], const rcci_ibh_t *h,
                     const uint8_t secret[RCCI_IBH_SECRET_BYTES]);
/* Decodes `bytes` of private data. RCC_ERR_REMOTE naming `peer` when it is
 * too short, of another magic or version, proves another secret (compared
 * in constant time), has a reserved byte set or slots outside the limits. */
rcc_result_t rcci_ibh_decode(const uint8_t *in, size_t bytes, rcci_ibh_t *h,
                             const uint8_t secret[RCCI_IBH_SECRET_BYTES], const char *peer);

#endif /* RINGCC_IBVERBS_HELLO_H */
