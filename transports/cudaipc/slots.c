/* The cudaipc transport's slot protocol (slots.h). */
#include "slots.h"

#include <stdio.h>
#include <string.h>

#include "err.h"
#include "hash.h"
#include "tcp/wire.h" /* rcci_wire_match: the same words for the same mistakes */

uint32_t rcci_cipc_frags(uint64_t bytes, size_t slot_bytes)
{
    return bytes == 0 ? 1 : (uint32_t)((bytes + slot_bytes - 1) / slot_bytes);
}

void rcci_cipc_frag_span(uint64_t bytes, size_t slot_bytes, uint32_t k, uint64_t *off, size_t *len)
{
    *off = (uint64_t)k * slot_bytes;
    uint64_t left = bytes > *off ? bytes - *off : 0;
    *len = (size_t)(left < slot_bytes ? left : slot_bytes);
}

int rcci_cipc_slot_free(uint32_t next, uint32_t tail)
{
    return (uint32_t)(next - tail) < RCCI_CIPC_SLOTS;
}

int rcci_cipc_passed(uint32_t c, uint32_t f) { return (int32_t)(c - f) > 0; }

/* RCC_ERR_MISMATCH: `peer` sent `what` where `self` expects a message of
 * the operation `expect` describes. */
static rcc_result_t cipc_mismatch(const char *peer, const char *what, const char *self,
                                  const rcci_tag_t *expect, rcci_sig_describe_fn describe)
{
    char want[160] = "";
    if (describe)
        describe(expect->sig, want, sizeof want);
    return rcci_error(RCC_ERR_MISMATCH, "%s sent %s where %s expects one of %s", peer, what, self,
                      want[0] ? want : "its own operation");
}

rcc_result_t rcci_cipc_check(const rcci_cipc_hdr_t *hdr, const rcci_tag_t *expect,
                             uint64_t expect_bytes, uint32_t frag, const char *peer,
                             const char *self, rcci_sig_describe_fn describe)
{
    if (hdr->flags & RCCI_CIPC_QUEUED)
        return cipc_mismatch(peer,
                             "a message queued at its call, which has no header (an operation "
                             "of another kind)",
                             self, expect, describe);
    rcci_wire_frame_t f = {.length = hdr->bytes};
    f.tag.seq = hdr->seq;
    memcpy(f.tag.sig, hdr->sig, RCCI_SIG_BYTES);
    rcc_result_t res = rcci_wire_match(&f, expect, expect_bytes, peer, self, describe);
    if (res == RCC_SUCCESS && hdr->frag != frag)
        res = rcci_error(RCC_ERR_REMOTE,
                         "%s wrote fragment %u of message #%u where fragment %u was due: the "
                         "slot protocol broke",
                         peer, hdr->frag, hdr->seq, frag);
    return res;
}

uint32_t rcci_cipc_check_word(const rcci_tag_t *tag, uint64_t bytes, uint32_t ticket)
{
    uint64_t h = rcci_mix64(rcci_fnv1a(RCCI_FNV1A_SEED, tag->sig, RCCI_SIG_BYTES) ^ bytes);
    return (ticket & 0xffu) << 24 | (uint32_t)(h & 0xffffffu);
}

int rcci_cipc_check_kept(uint32_t tail, uint32_t ticket)
{
    /* Fragment ticket + CHECKS may be written once tail has passed
     * ticket + CHECKS - SLOTS (its slot's previous fragment). */
    return !rcci_cipc_passed(tail, ticket + RCCI_CIPC_CHECKS - RCCI_CIPC_SLOTS);
}

rcc_result_t rcci_cipc_check_queued(uint32_t found, const rcci_tag_t *expect, uint64_t bytes,
                                    uint32_t ticket, const char *peer, const char *self,
                                    rcci_sig_describe_fn describe)
{
    if (found == rcci_cipc_check_word(expect, bytes, ticket))
        return RCC_SUCCESS;
    char what[160];
    snprintf(what, sizeof what, "message %u of another operation or length (%llu bytes expected)",
             ticket, (unsigned long long)bytes);
    return cipc_mismatch(peer, what, self, expect, describe);
}

rcc_result_t rcci_cipc_hello_check(const rcci_cipc_hello_t *h, const char *peer)
{
    if (h->magic != RCCI_CIPC_HELLO_MAGIC || h->version != RCCI_CIPC_VERSION)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s sent no cudaipc hello of version %d (magic 0x%x, version %u)", peer,
                          RCCI_CIPC_VERSION, h->magic, h->version);
    if (h->slots != RCCI_CIPC_SLOTS || h->slot_bytes == 0 || h->slot_bytes > (1u << 30))
        return rcci_error(RCC_ERR_REMOTE,
                          "%s offers %u slots of %u bytes; this build uses %d slots of 1 byte to "
                          "1 GiB",
                          peer, h->slots, h->slot_bytes, RCCI_CIPC_SLOTS);
    return RCC_SUCCESS;
}
