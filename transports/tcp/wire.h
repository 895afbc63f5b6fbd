/*
 * The TCP transport's frame header. Every message on a data connection is
 * one header followed by `length` payload bytes. Fixed little-endian layout:
 *   0  u32 magic "RCCD"   4 u8 version   5 u8 flags   6 u16 header bytes
 *   8  u32 seq           12 u32 payload CRC32C   16 u64 length
 *  24  u8[24] signature of the operation (the engine's, opaque here)
 * A notice (flag RCCI_WIRE_NOTICE) tells the peer that the sender's
 * communicator failed: seq holds the result code, the payload (at most
 * RCCI_WIRE_NOTICE_MAX bytes) the error text, the signature is zero; code 0
 * (RCC_SUCCESS) is a goodbye: the sender destroyed its communicator. An
 * announcement (flag RCCI_WIRE_ANNOUNCE, no payload) carries the tag of
 * the operation the sender is waiting in. With flag RCCI_WIRE_CRC the
 * field at 12 holds the CRC32C of the payload (RCC_CHECKSUM), else 0.
 */
#ifndef RINGCC_TCP_WIRE_H
#define RINGCC_TCP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"
#include "transport.h"

#define RCCI_WIRE_MAGIC 0x44434352u /* "RCCD" read as little-endian */
#define RCCI_WIRE_VERSION 2
#define RCCI_WIRE_HEADER_BYTES 48
#define RCCI_WIRE_CRC 0x01u
#define RCCI_WIRE_NOTICE 0x02u
#define RCCI_WIRE_ANNOUNCE 0x04u
#define RCCI_WIRE_NOTICE_MAX 480

/* A header, decoded. */
typedef struct {
    rcci_tag_t tag;
    uint64_t length;
    int notice;   /* a failure notice, not data */
    int announce; /* an announcement, not data */
    int has_crc;  /* payload_crc is the payload's CRC32C */
    uint32_t payload_crc;
    rcc_result_t notice_res; /* its result code */
} rcci_wire_frame_t;

void rcci_wire_encode(uint8_t out[RCCI_WIRE_HEADER_BYTES], const rcci_tag_t *tag, uint64_t length);
/* The header of a notice carrying `res` and text_bytes (<= RCCI_WIRE_NOTICE_MAX) of text. */
void rcci_wire_encode_notice(uint8_t out[RCCI_WIRE_HEADER_BYTES], rcc_result_t res,
                             size_t text_bytes);

/* Marks an encoded data header as carrying its payload's CRC32C. */
void rcci_wire_set_crc(uint8_t header[RCCI_WIRE_HEADER_BYTES], uint32_t crc);

/* The header of an announcement of `tag`. */
void rcci_wire_encode_announce(uint8_t out[RCCI_WIRE_HEADER_BYTES], const rcci_tag_t *tag);
/* A peer's text of `n` bytes (a notice's, a reject's), shown as is but
 * printable only: ends it at text[n] and turns every byte outside ASCII
 * 0x20-0x7e into '?'. */
void rcci_wire_printable(char *text, size_t n);

/* Decodes a header. RCC_ERR_REMOTE, naming `peer`, when it is not one:
 * wrong magic, version or header size, unknown flags, a nonzero reserved
 * field, a notice longer than RCCI_WIRE_NOTICE_MAX or with a result code
 * that ringcc does not have. */
rcc_result_t rcci_wire_parse(const uint8_t in[RCCI_WIRE_HEADER_BYTES], rcci_wire_frame_t *frame,
                             const char *peer);

/* Checks a decoded data frame against the receive posted for it:
 * RCC_ERR_MISMATCH when the seq or signature differs (the message names
 * `peer` and `self` with their operations, through `describe` when not
 * NULL, else in hex), RCC_ERR_REMOTE when only the length does. */
rcc_result_t rcci_wire_match(const rcci_wire_frame_t *frame, const rcci_tag_t *expect,
                             uint64_t expect_length, const char *peer, const char *self,
                             rcci_sig_describe_fn describe);

#endif /* RINGCC_TCP_WIRE_H */
