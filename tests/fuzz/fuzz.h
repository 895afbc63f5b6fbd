/*
 * Shared by the libFuzzer targets: invariant checks that abort (libFuzzer
 * then saves the input as a crash artifact) and a reader that takes fields
 * from the input, zeros once it runs out, so every input means something.
 */
#ifndef RINGCC_FUZZ_H
#define RINGCC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ASSERT(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz invariant broken at %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    const uint8_t *p;
    size_t left;
} fuzz_in_t;

/* Copies n bytes of input into out, zero-filling what the input lacks. */
static inline void fuzz_bytes(fuzz_in_t *in, void *out, size_t n)
{
    size_t k = n < in->left ? n : in->left;
    memcpy(out, in->p, k);
    memset((uint8_t *)out + k, 0, n - k);
    in->p += k;
    in->left -= k;
}

static inline uint64_t fuzz_u64(fuzz_in_t *in, int bytes)
{
    uint8_t b[8];
    fuzz_bytes(in, b, (size_t)bytes);
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static inline uint8_t fuzz_u8(fuzz_in_t *in) { return (uint8_t)fuzz_u64(in, 1); }
static inline uint32_t fuzz_u32(fuzz_in_t *in) { return (uint32_t)fuzz_u64(in, 4); }

/* The rest of the input as a NUL-terminated string (a NUL inside ends it
 * early, as in an environment variable). Free it. */
static inline char *fuzz_string(fuzz_in_t *in)
{
    char *s = malloc(in->left + 1);
    if (!s)
        abort();
    memcpy(s, in->p, in->left);
    s[in->left] = '\0';
    in->p += in->left;
    in->left = 0;
    return s;
}

#endif /* RINGCC_FUZZ_H */
