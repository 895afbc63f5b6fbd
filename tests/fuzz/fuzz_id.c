/*
 * The unique id (rcci_id_decode / rcci_id_encode in lib/bootstrap.c): the
 * 128 bytes a user hands every rank, from wherever the user keeps them.
 * Input: an id's bytes (zero-padded to 128), then the fields of an id to
 * encode (family selector, port, address, comm_id, secret).
 *
 * Invariants:
 *  - decode accepts only ids with an IPv4 or IPv6 root (length to match)
 *    and otherwise fails with RCC_ERR_INVALID_ARGUMENT and a text;
 *  - what decode accepts, encode writes back unchanged in every byte that
 *    carries meaning (magic, version, family, port, the address's bytes,
 *    comm_id, secret), and decoding that again gives the same id;
 *  - decode(encode(id)) == id for every id with an IPv4 or IPv6 root.
 */
#include <arpa/inet.h>

#include "bootstrap.h"
#include "err.h"
#include "fuzz.h"

static void same_addr(const rcci_addr_t *a, const rcci_addr_t *b)
{
    FUZZ_ASSERT(a->u.sa.sa_family == b->u.sa.sa_family, "family %d vs %d", a->u.sa.sa_family,
                b->u.sa.sa_family);
    FUZZ_ASSERT(a->len == b->len, "length %u vs %u", (unsigned)a->len, (unsigned)b->len);
    FUZZ_ASSERT(rcci_addr_port(a) == rcci_addr_port(b), "port %u vs %u", rcci_addr_port(a),
                rcci_addr_port(b));
    if (a->u.sa.sa_family == AF_INET)
        FUZZ_ASSERT(!memcmp(&a->u.in.sin_addr, &b->u.in.sin_addr, 4), "IPv4 address differs");
    else
        FUZZ_ASSERT(!memcmp(&a->u.in6.sin6_addr, &b->u.in6.sin6_addr, 16), "IPv6 address differs");
}

static void same_id(const rcci_id_t *a, const rcci_id_t *b)
{
    same_addr(&a->root, &b->root);
    FUZZ_ASSERT(a->comm_id == b->comm_id, "comm_id %llx vs %llx", (unsigned long long)a->comm_id,
                (unsigned long long)b->comm_id);
    FUZZ_ASSERT(!memcmp(a->secret, b->secret, sizeof a->secret), "secret differs");
}

static void valid_root(const rcci_addr_t *a)
{
    FUZZ_ASSERT((a->u.sa.sa_family == AF_INET && a->len == sizeof a->u.in) ||
                    (a->u.sa.sa_family == AF_INET6 && a->len == sizeof a->u.in6),
                "root family %d with length %u", a->u.sa.sa_family, (unsigned)a->len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    rcc_unique_id_t uid, again;
    fuzz_bytes(&in, &uid, sizeof uid);

    rcci_id_t id, back;
    rcci_tls_error_clear();
    rcc_result_t res = rcci_id_decode(&uid, &id);
    if (res != RCC_SUCCESS) {
        FUZZ_ASSERT(res == RCC_ERR_INVALID_ARGUMENT, "result %d", (int)res);
        FUZZ_ASSERT(rcci_tls_error()[0] != '\0', "a refused id without a reason");
    } else {
        valid_root(&id.root);
        rcci_id_encode(&id, &again);
        const uint8_t *a = (const uint8_t *)uid.internal, *b = (const uint8_t *)again.internal;
        size_t addr_bytes = id.root.u.sa.sa_family == AF_INET ? 4 : 16;
        FUZZ_ASSERT(!memcmp(a, b, 12), "magic, version, family or port re-encoded differently");
        FUZZ_ASSERT(!memcmp(a + 12, b + 12, addr_bytes), "address re-encoded differently");
        FUZZ_ASSERT(!memcmp(a + 28, b + 28, 8 + RCCI_SOCK_SECRET_BYTES),
                    "comm_id or secret re-encoded differently");
        FUZZ_ASSERT(rcci_id_decode(&again, &back) == RCC_SUCCESS, "re-encoded id refused: %s",
                    rcci_tls_error());
        same_id(&id, &back);
    }

    /* An id from fields: encode, decode, compare. */
    rcci_id_t made = {0};
    int v6 = fuzz_u8(&in) & 1;
    uint16_t port = (uint16_t)fuzz_u64(&in, 2);
    made.root.u.sa.sa_family = v6 ? AF_INET6 : AF_INET;
    made.root.len = v6 ? sizeof made.root.u.in6 : sizeof made.root.u.in;
    if (v6)
        fuzz_bytes(&in, &made.root.u.in6.sin6_addr, 16);
    else
        fuzz_bytes(&in, &made.root.u.in.sin_addr, 4);
    rcci_addr_set_port(&made.root, port);
    made.comm_id = fuzz_u64(&in, 8);
    fuzz_bytes(&in, made.secret, sizeof made.secret);
    rcci_id_encode(&made, &uid);
    FUZZ_ASSERT(rcci_id_decode(&uid, &back) == RCC_SUCCESS, "own encoding refused: %s",
                rcci_tls_error());
    valid_root(&back.root);
    same_id(&made, &back);
    return 0;
}
