/* The verbs connection hello: see hello.h. */
#include "hello.h"

#include <string.h>

#include "byteorder.h"
#include "err.h"

void rcci_ibh_encode(uint8_t out[RCCI_IBH_BYTES], const rcci_ibh_t *h,
                     const uint8_t secret[RCCI_IBH_SECRET_BYTES])
{
    rcci_put_le(out, RCCI_IBH_MAGIC, 4);
    out[4] = RCCI_IBH_VERSION;
    out[5] = 0;
    rcci_put_le(out + 6, h->geom.nslots, 2);
    rcci_put_le(out + 8, (uint32_t)h->rank, 4);
    rcci_put_le(out + 12, h->tag, 4);
    rcci_put_le(out + 16, h->comm_id, 8);
    rcci_put_le(out + 24, h->slots_addr, 8);
    rcci_put_le(out + 32, h->rkey, 4);
    rcci_put_le(out + 36, h->geom.slot_bytes, 4);
    memcpy(out + 40, secret, RCCI_IBH_SECRET_BYTES);
}

rcc_result_t rcci_ibh_decode(const uint8_t *in, size_t bytes, rcci_ibh_t *h,
                             const uint8_t secret[RCCI_IBH_SECRET_BYTES], const char *peer)
{
    if (bytes < RCCI_IBH_BYTES)
        return rcci_error(RCC_ERR_REMOTE, "%s sent %zu bytes of connection data, not %d", peer,
                          bytes, RCCI_IBH_BYTES);
    uint32_t magic = (uint32_t)rcci_get_le(in, 4);
    if (magic != RCCI_IBH_MAGIC || in[4] != RCCI_IBH_VERSION || in[5] != 0)
        return rcci_error(RCC_ERR_REMOTE,
                          "%s is no ringcc verbs endpoint of version %d (magic 0x%08x, version "
                          "%u, reserved %u)",
                          peer, RCCI_IBH_VERSION, magic, in[4], in[5]);
    unsigned diff = 0; /* constant time: how much matched tells a stranger nothing */
    for (int i = 0; i < RCCI_IBH_SECRET_BYTES; i++)
        diff |= (unsigned)(in[40 + i] ^ secret[i]);
    if (diff)
        return rcci_error(RCC_ERR_REMOTE, "%s does not prove the job secret", peer);
    *h = (rcci_ibh_t){.rank = (int32_t)(uint32_t)rcci_get_le(in + 8, 4),
                      .tag = (uint32_t)rcci_get_le(in + 12, 4),
                      .comm_id = rcci_get_le(in + 16, 8),
                      .slots_addr = rcci_get_le(in + 24, 8),
                      .rkey = (uint32_t)rcci_get_le(in + 32, 4),
                      .geom = {.nslots = (uint32_t)rcci_get_le(in + 6, 2),
                               .slot_bytes = (uint32_t)rcci_get_le(in + 36, 4)}};
    /* The text names the peer and its slots; the fault is the peer's. */
    return rcci_ibp_geom_check(&h->geom, peer) == RCC_SUCCESS ? RCC_SUCCESS : RCC_ERR_REMOTE;
}
