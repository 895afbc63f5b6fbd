/*
 * Root addresses as the environment gives them (rcci_addr_parse in
 * lib/socket.c: RCC_ROOT, and MASTER_ADDR:MASTER_PORT as rcc_comm_init_env
 * joins them), and the wire form of addresses (rcci_addr_from_wire: the
 * TCP transport's handles). Input: the text (a NUL ends it early).
 *
 * Host names are resolved numerically only (fuzz_resolve.h adds
 * AI_NUMERICHOST), so the fuzzer never waits for a resolver; the parsing
 * around the lookup is the code under test.
 *
 * Invariants:
 *  - an accepted address is IPv4 or IPv6 with a port of 1..65535, equal to
 *    the port after the last ':' (after ']' for [v6]), and the host text is
 *    what the resolver saw;
 *  - formatting it and parsing that again gives the same address;
 *  - its wire form decodes to the same address, and any wire form decodes
 *    only for IPv4 and IPv6;
 *  - a refusal is RCC_ERR_INVALID_ARGUMENT with a reason.
 */
#include <arpa/inet.h>

#include "err.h"
#include "fuzz.h"
#include "fuzz_resolve.h"
#include "socket.h"

static int same_addr(const rcci_addr_t *a, const rcci_addr_t *b)
{
    if (a->u.sa.sa_family != b->u.sa.sa_family || rcci_addr_port(a) != rcci_addr_port(b))
        return 0;
    if (a->u.sa.sa_family == AF_INET)
        return !memcmp(&a->u.in.sin_addr, &b->u.in.sin_addr, 4);
    return !memcmp(&a->u.in6.sin6_addr, &b->u.in6.sin6_addr, 16);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Wire form first: the first 20 bytes as a handle. */
    fuzz_in_t wire_in = {data, size};
    rcci_wire_addr_t w;
    fuzz_bytes(&wire_in, &w, sizeof w);
    rcci_addr_t a, b;
    if (rcci_addr_from_wire(&w, &a) == RCC_SUCCESS) {
        FUZZ_ASSERT(w.family == AF_INET || w.family == AF_INET6, "family %u decoded", w.family);
        rcci_wire_addr_t w2;
        rcci_addr_to_wire(&a, &w2);
        FUZZ_ASSERT(rcci_addr_from_wire(&w2, &b) == RCC_SUCCESS && same_addr(&a, &b),
                    "wire round trip");
    }

    fuzz_in_t in = {data, size};
    char *text = fuzz_string(&in);
    fuzz_last_host[0] = '\0';
    rcci_tls_error_clear();
    rcc_result_t res = rcci_addr_parse(text, &a);
    if (res != RCC_SUCCESS) {
        FUZZ_ASSERT(res == RCC_ERR_INVALID_ARGUMENT && rcci_tls_error()[0], "'%s': %d", text,
                    (int)res);
        free(text);
        return 0;
    }
    FUZZ_ASSERT((a.u.sa.sa_family == AF_INET && a.len == sizeof a.u.in) ||
                    (a.u.sa.sa_family == AF_INET6 && a.len == sizeof a.u.in6),
                "'%s': family %d length %u", text, a.u.sa.sa_family, (unsigned)a.len);
    const char *colon = text[0] == '[' ? strchr(text, ']') + 1 : strrchr(text, ':');
    FUZZ_ASSERT(*colon == ':', "'%s' accepted without a port", text);
    long port = strtol(colon + 1, NULL, 10);
    FUZZ_ASSERT(port >= 1 && port <= 65535 && rcci_addr_port(&a) == port, "'%s': port %u", text,
                rcci_addr_port(&a));
    size_t host_len = text[0] == '[' ? (size_t)(colon - text) - 2 : (size_t)(colon - text);
    FUZZ_ASSERT(strlen(fuzz_last_host) == host_len &&
                    !memcmp(fuzz_last_host, text + (text[0] == '['), host_len),
                "'%s': resolved '%s'", text, fuzz_last_host);
    char formatted[128];
    rcci_addr_format(&a, formatted, sizeof formatted);
    FUZZ_ASSERT(rcci_addr_parse(formatted, &b) == RCC_SUCCESS, "'%s' formatted as '%s': %s", text,
                formatted, rcci_tls_error());
    FUZZ_ASSERT(same_addr(&a, &b), "'%s' -> '%s' is another address", text, formatted);
    rcci_addr_to_wire(&a, &w);
    FUZZ_ASSERT(rcci_addr_from_wire(&w, &b) == RCC_SUCCESS && same_addr(&a, &b),
                "'%s': wire round trip", text);
    free(text);
    return 0;
}
