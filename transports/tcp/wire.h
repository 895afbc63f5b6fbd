/*
 * The TCP transport's frame header. Every message on a data connection is
 * one header followed by `length` payload bytes. Fixed little-endian layout:
 *   0  u32 magic "RCCD"   4 u8 version   5 u8 flags (0)   6 u16 header bytes
 *   8  u32 seq           12 u32 reserved (0)             16 u64 length
 */
#ifndef RINGCC_TCP_WIRE_H
#define RINGCC_TCP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

#define RCCI_WIRE_MAGIC 0x44434352u /* "RCCD" read as little-endian */
#define RCCI_WIRE_VERSION 1
#define RCCI_WIRE_HEADER_BYTES 24

void rcci_wire_encode(uint8_t out[RCCI_WIRE_HEADER_BYTES], uint32_t seq, uint64_t length);

/* Validates a received header against what the receiver posted. Returns
 * RCC_ERR_REMOTE (not a frame, wrong version, wrong length) or
 * RCC_ERR_MISMATCH (different seq: the peer is in another operation), with a
 * message naming the fields; `peer` names the sender in it. */
rcc_result_t rcci_wire_check(const uint8_t in[RCCI_WIRE_HEADER_BYTES], uint32_t expect_seq,
                             uint64_t expect_length, const char *peer);

#endif /* RINGCC_TCP_WIRE_H */
