/*
 * For the targets whose parsers resolve host names (rcci_addr_parse): this
 * getaddrinfo adds AI_NUMERICHOST before calling the C library's, so the
 * fuzzer never waits for a resolver, and keeps the last host asked for in
 * fuzz_last_host. Include it in the target's one source file.
 */
#ifndef RINGCC_FUZZ_RESOLVE_H
#define RINGCC_FUZZ_RESOLVE_H

#include <dlfcn.h>
#include <netdb.h>
#include <stdio.h>

static char fuzz_last_host[512];

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
    static int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
    if (!real)
        real = (int (*)(const char *, const char *, const struct addrinfo *,
                        struct addrinfo **))dlsym(RTLD_NEXT, "getaddrinfo");
    struct addrinfo h = hints ? *hints : (struct addrinfo){0};
    h.ai_flags |= AI_NUMERICHOST;
    snprintf(fuzz_last_host, sizeof fuzz_last_host, "%s", node ? node : "");
    return real(node, service, &h, res);
}

#endif /* RINGCC_FUZZ_RESOLVE_H */
