/*
 * Non-cryptographic 64-bit hashing: FNV-1a over bytes, and splitmix64's
 * finaliser to spread the result. They identify hosts and derive the weak
 * job secret and the communicator ids; never use them to keep anyone out
 * (RCC_SECRET is the strong way).
 */
#ifndef RINGCC_HASH_H
#define RINGCC_HASH_H

#include <stddef.h>
#include <stdint.h>

#define RCCI_FNV1A_SEED 0xcbf29ce484222325ull

/* FNV-1a: `h` continued over `len` bytes (start from RCCI_FNV1A_SEED). */
static inline uint64_t rcci_fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* splitmix64's step: every bit of `x` reaches every bit of the result. */
static inline uint64_t rcci_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#endif /* RINGCC_HASH_H */
