/* Encoding and validation of the TCP frame header. */
#include "wire.h"

#include <stdio.h>
#include <string.h>

#include "byteorder.h"
#include "err.h"

static void wire_put_header(uint8_t *out, uint8_t flags, uint32_t seq, uint64_t length,
                            const uint8_t *sig)
{
    rcci_put_le(out, RCCI_WIRE_MAGIC, 4);
    out[4] = RCCI_WIRE_VERSION;
    out[5] = flags;
    rcci_put_le(out + 6, RCCI_WIRE_HEADER_BYTES, 2);
    rcci_put_le(out + 8, seq, 4);
    rcci_put_le(out + 12, 0, 4);
    rcci_put_le(out + 16, length, 8);
    if (sig)
        memcpy(out + 24, sig, RCCI_SIG_BYTES);
    else
        memset(out + 24, 0, RCCI_SIG_BYTES);
}

void rcci_wire_encode(uint8_t out[RCCI_WIRE_HEADER_BYTES], const rcci_tag_t *tag, uint64_t length)
{
    wire_put_header(out, 0, tag->seq, length, tag->sig);
}

void rcci_wire_set_crc(uint8_t header[RCCI_WIRE_HEADER_BYTES], uint32_t crc)
{
    header[5] |= RCCI_WIRE_CRC;
    rcci_put_le(header + 12, crc, 4);
}

void rcci_wire_encode_announce(uint8_t out[RCCI_WIRE_HEADER_BYTES], const rcci_tag_t *tag)
{
    wire_put_header(out, RCCI_WIRE_ANNOUNCE, tag->seq, 0, tag->sig);
}

void rcci_wire_encode_notice(uint8_t out[RCCI_WIRE_HEADER_BYTES], rcc_result_t res,
                             size_t text_bytes)
{
    if (text_bytes > RCCI_WIRE_NOTICE_MAX)
        text_bytes = RCCI_WIRE_NOTICE_MAX;
    wire_put_header(out, RCCI_WIRE_NOTICE, (uint32_t)res, text_bytes, NULL);
}

rcc_result_t rcci_wire_parse(const uint8_t in[RCCI_WIRE_HEADER_BYTES], rcci_wire_frame_t *frame,
                             const char *peer)
{
    uint32_t magic = (uint32_t)rcci_get_le(in, 4);
    if (magic != RCCI_WIRE_MAGIC)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s sent bytes that are not a ringcc frame (magic 0x%08x)", peer, magic);
    if (in[4] != RCCI_WIRE_VERSION || rcci_get_le(in + 6, 2) != RCCI_WIRE_HEADER_BYTES)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s speaks frame version %u with %u-byte headers; this is version %u",
                          peer, in[4], (unsigned)rcci_get_le(in + 6, 2), RCCI_WIRE_VERSION);
    const unsigned kinds = RCCI_WIRE_NOTICE | RCCI_WIRE_ANNOUNCE;
    const unsigned known = kinds | RCCI_WIRE_CRC;
    if ((in[5] & ~known) != 0 || (in[5] & kinds) == kinds ||
        ((in[5] & RCCI_WIRE_CRC) ? (in[5] & kinds) != 0 : rcci_get_le(in + 12, 4) != 0))
        return rcci_error(RCC_ERR_REMOTE, "%s sent a frame with unknown flags 0x%02x", peer, in[5]);
    memset(frame, 0, sizeof *frame);
    frame->tag.seq = (uint32_t)rcci_get_le(in + 8, 4);
    frame->length = rcci_get_le(in + 16, 8);
    memcpy(frame->tag.sig, in + 24, RCCI_SIG_BYTES);
    frame->has_crc = (in[5] & RCCI_WIRE_CRC) != 0;
    frame->payload_crc = (uint32_t)rcci_get_le(in + 12, 4);
    if (in[5] & RCCI_WIRE_ANNOUNCE) {
        frame->announce = 1;
        if (frame->length != 0)
            return rcci_error(RCC_ERR_REMOTE, "%s sent an announcement with a %llu-byte payload",
                              peer, (unsigned long long)frame->length);
    }
    if (in[5] & RCCI_WIRE_NOTICE) {
        frame->notice = 1;
        frame->notice_res = (rcc_result_t)(int32_t)frame->tag.seq;
        if (frame->length > RCCI_WIRE_NOTICE_MAX ||
            !strcmp(rcc_result_name(frame->notice_res), "RCC_UNKNOWN_RESULT"))
            return rcci_error(RCC_ERR_REMOTE,
                              "%s sent a malformed failure notice (code %u, %llu bytes)", peer,
                              frame->tag.seq, (unsigned long long)frame->length);
    }
    return RCC_SUCCESS;
}

static void wire_describe(rcci_sig_describe_fn describe, const uint8_t *sig, char *buf, size_t size)
{
    if (describe) {
        describe(sig, buf, size);
        return;
    }
    size_t n = 0;
    for (int i = 0; i < RCCI_SIG_BYTES && n + 3 <= size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%02x", sig[i]);
}

rcc_result_t rcci_wire_match(const rcci_wire_frame_t *frame, const rcci_tag_t *expect,
                             uint64_t expect_length, const char *peer, const char *self,
                             rcci_sig_describe_fn describe)
{
    char theirs[160], ours[160];
    if (frame->tag.seq != expect->seq || memcmp(frame->tag.sig, expect->sig, RCCI_SIG_BYTES)) {
        wire_describe(describe, frame->tag.sig, theirs, sizeof theirs);
        wire_describe(describe, expect->sig, ours, sizeof ours);
        if (frame->tag.seq != expect->seq)
            return rcci_error(RCC_ERR_MISMATCH,
                              "%s sent message #%u of its stream, from %s, where %s waits for "
                              "message #%u, of %s",
                              peer, frame->tag.seq, theirs, self, expect->seq, ours);
        return rcci_error(RCC_ERR_MISMATCH, "%s called %s while %s called %s", peer, theirs, self,
                          ours);
    }
    if (frame->length != expect_length)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s sent a %llu-byte message where %llu bytes were expected (message "
                          "#%u): the ranks disagree on the operation's size",
                          peer, (unsigned long long)frame->length,
                          (unsigned long long)expect_length, frame->tag.seq);
    return RCC_SUCCESS;
}

void rcci_wire_printable(char *text, size_t n)
{
    text[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] > 0x7e)
            text[i] = '?';
}
