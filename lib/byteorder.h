/*
 * Little-endian fields of wire formats, independent of the host's order.
 */
#ifndef RINGCC_BYTEORDER_H
#define RINGCC_BYTEORDER_H

#include <stdint.h>

static inline void rcci_put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t rcci_get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif /* RINGCC_BYTEORDER_H */
