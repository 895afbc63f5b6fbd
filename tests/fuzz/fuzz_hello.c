/*
 * The hello that opens every ringcc connection and proves the job secret
 * (lib/socket.c: what the acceptor reads from anyone who connects).
 * Input: a mode byte; mode 0: 96 bytes as received, checked against this
 * target's secret and comm_id; otherwise the fields of a hello to encode,
 * then a byte position and a bit to flip.
 *
 * Invariants:
 *  - a hello is accepted only with the right magic, version, secret and
 *    comm_id, and a refusal says why;
 *  - an accepted hello is what the sender encoded: encoding the decoded
 *    fields with the secret reproduces every byte the decoder reads (0..80);
 *  - decode(encode(hello)) == hello for any fields;
 *  - flipping any bit of the magic, version, secret or comm_id is refused,
 *    and any other flip decodes to a hello that differs in that field only.
 */
#include "err.h"
#include "fuzz.h"
#include "socket.h"

#define USED_BYTES 80 /* the rest of RCCI_HELLO_BYTES is reserved, zero */

static const uint8_t secret[RCCI_SOCK_SECRET_BYTES] = {
    0x52, 0x43, 0x43, 0x20, 0x66, 0x75, 0x7a, 0x7a, 0x20, 0x73, 0x65, 0x63, 0x72, 0x65, 0x74, 0x00,
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0xff};
static const uint64_t comm_id = 0x0123456789abcdefull;

static int same_hello(const rcci_hello_t *a, const rcci_hello_t *b)
{
    return a->kind == b->kind && a->rank == b->rank && a->nranks == b->nranks && a->tag == b->tag &&
           a->comm_id == b->comm_id && a->addr.family == b->addr.family &&
           a->addr.port == b->addr.port && !memcmp(a->addr.addr, b->addr.addr, 16);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t buf[RCCI_HELLO_BYTES], again[RCCI_HELLO_BYTES];
    rcci_hello_t h, back;
    const char *why = NULL;
    if (fuzz_u8(&in) == 0) {
        fuzz_bytes(&in, buf, sizeof buf);
        if (rcci_hello_decode(buf, secret, comm_id, &h, &why)) {
            FUZZ_ASSERT(h.comm_id == comm_id, "accepted comm_id %llx",
                        (unsigned long long)h.comm_id);
            rcci_hello_encode(again, &h, secret);
            FUZZ_ASSERT(!memcmp(buf, again, USED_BYTES), "accepted bytes the sender never wrote");
        } else {
            FUZZ_ASSERT(why && *why, "refused without a reason");
        }
        return 0;
    }
    memset(&h, 0, sizeof h);
    h.kind = (uint16_t)fuzz_u64(&in, 2);
    h.rank = (int32_t)fuzz_u32(&in);
    h.nranks = (int32_t)fuzz_u32(&in);
    h.tag = fuzz_u32(&in);
    h.comm_id = fuzz_u8(&in) & 1 ? fuzz_u64(&in, 8) : comm_id;
    h.addr.family = (uint16_t)fuzz_u64(&in, 2);
    h.addr.port = (uint16_t)fuzz_u64(&in, 2);
    fuzz_bytes(&in, h.addr.addr, 16);
    unsigned pos = fuzz_u8(&in) % USED_BYTES, bit = fuzz_u8(&in) % 8;

    rcci_hello_encode(buf, &h, secret);
    int ok = rcci_hello_decode(buf, secret, comm_id, &back, &why);
    FUZZ_ASSERT(ok == (h.comm_id == comm_id), "own hello: %d (%s)", ok, ok ? "" : why);
    if (ok)
        FUZZ_ASSERT(same_hello(&h, &back), "decode(encode(h)) != h");

    /* One bit flipped on the way. */
    memcpy(again, buf, sizeof buf);
    again[pos] ^= (uint8_t)(1u << bit);
    int checked = pos < 6 || (pos >= 8 && pos < 48); /* magic, version; secret, comm_id */
    int ok2 = rcci_hello_decode(again, secret, comm_id, &back, &why);
    if (checked || !ok) {
        FUZZ_ASSERT(!ok2 || (!ok && pos >= 40 && pos < 48 && back.comm_id == comm_id),
                    "flipped byte %u bit %u accepted", pos, bit);
    } else {
        FUZZ_ASSERT(ok2, "a flip in byte %u (not a proof field) refused: %s", pos, why);
        FUZZ_ASSERT(!same_hello(&h, &back), "a flip in byte %u changed nothing", pos);
        rcci_hello_encode(buf, &back, secret);
        FUZZ_ASSERT(!memcmp(buf, again, USED_BYTES), "the flipped hello does not re-encode");
    }
    return 0;
}
