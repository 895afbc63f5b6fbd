/* Encoding and validation of the TCP frame header. */
#include "wire.h"

#include "err.h"

static void wire_put(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t wire_get(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void rcci_wire_encode(uint8_t out[RCCI_WIRE_HEADER_BYTES], uint32_t seq, uint64_t length)
{
    wire_put(out, RCCI_WIRE_MAGIC, 4);
    out[4] = RCCI_WIRE_VERSION;
    out[5] = 0;
    wire_put(out + 6, RCCI_WIRE_HEADER_BYTES, 2);
    wire_put(out + 8, seq, 4);
    wire_put(out + 12, 0, 4);
    wire_put(out + 16, length, 8);
}

rcc_result_t rcci_wire_check(const uint8_t in[RCCI_WIRE_HEADER_BYTES], uint32_t expect_seq,
                             uint64_t expect_length, const char *peer)
{
    uint32_t magic = (uint32_t)wire_get(in, 4);
    if (magic != RCCI_WIRE_MAGIC)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s sent bytes that are not a ringcc frame (magic 0x%08x)", peer, magic);
    if (in[4] != RCCI_WIRE_VERSION || wire_get(in + 6, 2) != RCCI_WIRE_HEADER_BYTES)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s speaks frame version %u with %u-byte headers; this is version %u",
                          peer, in[4], (unsigned)wire_get(in + 6, 2), RCCI_WIRE_VERSION);
    if (in[5] != 0 || wire_get(in + 12, 4) != 0)
        return rcci_error(RCC_ERR_REMOTE, "%s sent a frame with unknown flags 0x%02x", peer, in[5]);
    uint32_t seq = (uint32_t)wire_get(in + 8, 4);
    uint64_t length = wire_get(in + 16, 8);
    if (seq != expect_seq)
        return rcci_error(RCC_ERR_MISMATCH,
                          "%s sent data of operation #%u while this rank is in operation #%u", peer,
                          seq, expect_seq);
    if (length != expect_length)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s sent a %llu-byte message where %llu bytes were expected (operation "
                          "#%u): the ranks disagree on the operation's size",
                          peer, (unsigned long long)length, (unsigned long long)expect_length, seq);
    return RCC_SUCCESS;
}
