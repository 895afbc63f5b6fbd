/*
 * The TCP frame header check (transports/tcp/wire.c), through its public
 * functions and constants only, so the target follows the header as it
 * grows. Input: a header (RCCI_WIRE_HEADER_BYTES), then the seq (u32) and
 * length (u64) the receiver expects, then a byte position and a bit.
 *
 * Invariants:
 *  - the check never accepts what the sender would not have encoded: an
 *    accepted header is byte for byte rcci_wire_encode(expected seq, length);
 *  - a rejection is RCC_ERR_REMOTE or RCC_ERR_MISMATCH and names the peer;
 *  - encode then check round-trips, and the check refuses the encoding for
 *    any other seq or length, and with any one bit flipped.
 * A new header field that rcci_wire_check does not verify (one only a later
 * step checks) breaks the first and last: say so here when adding one.
 */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t header[RCCI_WIRE_HEADER_BYTES], encoded[RCCI_WIRE_HEADER_BYTES];
    fuzz_bytes(&in, header, sizeof header);
    uint32_t seq = fuzz_u32(&in);
    uint64_t length = fuzz_u64(&in, 8);
    unsigned pos = fuzz_u8(&in) % RCCI_WIRE_HEADER_BYTES, bit = fuzz_u8(&in) % 8;

    rcci_tls_error_clear();
    rcc_result_t res = rcci_wire_check(header, seq, length, PEER);
    rcci_wire_encode(encoded, seq, length);
    if (res == RCC_SUCCESS)
        FUZZ_ASSERT(memcmp(header, encoded, sizeof header) == 0,
                    "accepted a header that differs from the encoding of seq %u length %llu", seq,
                    (unsigned long long)length);
    else
        check_rejection(res);

    FUZZ_ASSERT(rcci_wire_check(encoded, seq, length, PEER) == RCC_SUCCESS, "round trip: %s",
                rcci_tls_error());
    check_rejection(rcci_wire_check(encoded, seq + 1, length, PEER));
    check_rejection(rcci_wire_check(encoded, seq, length ^ (1ull << (bit * 8 % 64)), PEER));
    encoded[pos] ^= (uint8_t)(1u << bit);
    res = rcci_wire_check(encoded, seq, length, PEER);
    FUZZ_ASSERT(res != RCC_SUCCESS, "byte %u bit %u flipped and still accepted", pos, bit);
    check_rejection(res);
    return 0;
}
