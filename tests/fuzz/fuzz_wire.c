/*
 * The TCP frame header (transports/tcp/wire.c), through its public
 * functions and constants only. Input: a header (RCCI_WIRE_HEADER_BYTES),
 * then the tag (seq u32, signature) and length (u64) the receiver posted,
 * then a byte position and a bit.
 *
 * Invariants:
 *  - parse + match never accept what a sender would not have encoded: an
 *    accepted data header is byte for byte rcci_wire_encode(tag, length),
 *    with rcci_wire_set_crc(its checksum) when it carries one;
 *  - a notice parses with a failure code and at most RCCI_WIRE_NOTICE_MAX
 *    bytes of text; an announcement with no payload;
 *  - a rejection is RCC_ERR_REMOTE or RCC_ERR_MISMATCH and names the peer;
 *  - encode then parse + match round-trips, and refuses the encoding for
 *    any other seq, signature or length, and with any one bit flipped.
 */
#include <string.h>

#include "err.h"
#include "fuzz.h"
#include "tcp/wire.h"

#define PEER "rank 7 (fuzz)"

static void check_rejection(rcc_result_t res)
{
    FUZZ_ASSERT(res == RCC_ERR_REMOTE || res == RCC_ERR_MISMATCH, "result %d", (int)res);
    FUZZ_ASSERT(strstr(rcci_tls_error(), PEER) != NULL, "error text '%s' names no peer",
                rcci_tls_error());
}

/* Parse then match, as the transport does for a posted receive; notices
 * and announcements are not data (RCC_ERR_REMOTE here). */
static rcc_result_t check_data(const uint8_t *h, const rcci_tag_t *tag, uint64_t length)
{
    rcci_wire_frame_t f;
    rcc_result_t res = rcci_wire_parse(h, &f, PEER);
    if (res == RCC_SUCCESS && (f.notice || f.announce))
        return rcci_error(RCC_ERR_REMOTE, "%s: not data", PEER);
    return res == RCC_SUCCESS ? rcci_wire_match(&f, tag, length, PEER, "rank 0", NULL) : res;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t header[RCCI_WIRE_HEADER_BYTES], encoded[RCCI_WIRE_HEADER_BYTES];
    rcci_tag_t tag;
    fuzz_bytes(&in, header, sizeof header);
    tag.seq = fuzz_u32(&in);
    fuzz_bytes(&in, tag.sig, sizeof tag.sig);
    uint64_t length = fuzz_u64(&in, 8);
    unsigned pos = fuzz_u8(&in) % RCCI_WIRE_HEADER_BYTES, bit = fuzz_u8(&in) % 8;

    rcci_tls_error_clear();
    rcci_wire_frame_t f;
    rcc_result_t res = rcci_wire_parse(header, &f, PEER);
    if (res == RCC_SUCCESS && f.notice)
        FUZZ_ASSERT(f.length <= RCCI_WIRE_NOTICE_MAX &&
                        strcmp(rcc_result_name(f.notice_res), "RCC_UNKNOWN_RESULT") != 0,
                    "notice of %llu bytes, code %d", (unsigned long long)f.length,
                    (int)f.notice_res); /* code 0 is a goodbye */
    if (res == RCC_SUCCESS && f.announce)
        FUZZ_ASSERT(f.length == 0, "announcement with %llu bytes", (unsigned long long)f.length);
    if (res != RCC_SUCCESS)
        check_rejection(res);

    res = check_data(header, &tag, length);
    rcci_wire_encode(encoded, &tag, length);
    if (res == RCC_SUCCESS) {
        rcci_wire_parse(header, &f, PEER);
        if (f.has_crc)
            rcci_wire_set_crc(encoded, f.payload_crc);
        FUZZ_ASSERT(memcmp(header, encoded, sizeof header) == 0,
                    "accepted a header that differs from the encoding of seq %u length %llu",
                    tag.seq, (unsigned long long)length);
        rcci_wire_encode(encoded, &tag, length);
    } else {
        check_rejection(res);
    }

    FUZZ_ASSERT(check_data(encoded, &tag, length) == RCC_SUCCESS, "round trip: %s",
                rcci_tls_error());
    rcci_tag_t other = tag;
    other.seq++;
    check_rejection(check_data(encoded, &other, length));
    other = tag;
    other.sig[pos % RCCI_SIG_BYTES] ^= (uint8_t)(1u << bit);
    check_rejection(check_data(encoded, &other, length));
    check_rejection(check_data(encoded, &tag, length ^ (1ull << (bit * 8 % 64))));
    /* Every bit counts, but the checksum flag: a header claiming a zero
     * CRC is well formed; the payload's check (tcp.c) refuses it. */
    if (pos == 5 && (1u << bit) == RCCI_WIRE_CRC)
        return 0;
    encoded[pos] ^= (uint8_t)(1u << bit);
    res = check_data(encoded, &tag, length);
    FUZZ_ASSERT(res != RCC_SUCCESS, "byte %u bit %u flipped and still accepted", pos, bit);
    check_rejection(res);
    return 0;
}
