/* Socket helpers: addresses, interfaces, deadlines, the authenticated hello. */
#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_NET /* log.h: the subsystem of this file's lines */
#include "clock.h"
#include "err.h"
#include "log.h"

#define HELLO_MAGIC 0x48434352u /* "RCCH" little-endian */
#define HELLO_VERSION 1
#define ACCEPT_SILENCE_NS (10ll * 1000000000) /* strangers get this long to say hello */
#define ACCEPT_MAX_STRANGERS 64 /* unproven connections held at once, per listening socket */
#define ACCEPT_BATCH 64         /* connections taken off the backlog per look */
#define ACCEPT_PAUSE_NS (100ll * 1000000) /* out of descriptors: stop accepting this long */

/* ---- addresses ---------------------------------------------------------- */

void rcci_addr_to_wire(const rcci_addr_t *addr, rcci_wire_addr_t *wire)
{
    memset(wire, 0, sizeof *wire);
    wire->family = (uint16_t)addr->u.sa.sa_family;
    if (addr->u.sa.sa_family == AF_INET6) {
        wire->port = addr->u.in6.sin6_port;
        memcpy(wire->addr, &addr->u.in6.sin6_addr, 16);
    } else {
        wire->port = addr->u.in.sin_port;
        memcpy(wire->addr, &addr->u.in.sin_addr, 4);
    }
}

rcc_result_t rcci_addr_from_wire(const rcci_wire_addr_t *wire, rcci_addr_t *addr)
{
    memset(addr, 0, sizeof *addr);
    if (wire->family == AF_INET) {
        addr->len = sizeof addr->u.in;
        addr->u.in.sin_family = AF_INET;
        addr->u.in.sin_port = wire->port;
        memcpy(&addr->u.in.sin_addr, wire->addr, 4);
    } else if (wire->family == AF_INET6) {
        addr->len = sizeof addr->u.in6;
        addr->u.in6.sin6_family = AF_INET6;
        addr->u.in6.sin6_port = wire->port;
        memcpy(&addr->u.in6.sin6_addr, wire->addr, 16);
    } else {
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "address family %u is neither IPv4 nor IPv6",
                          wire->family);
    }
    return RCC_SUCCESS;
}

void rcci_addr_format(const rcci_addr_t *addr, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (addr->u.sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &addr->u.in6.sin6_addr, host, sizeof host);
        snprintf(buf, size, "[%s]:%u", host, ntohs(addr->u.in6.sin6_port));
    } else {
        inet_ntop(AF_INET, &addr->u.in.sin_addr, host, sizeof host);
        snprintf(buf, size, "%s:%u", host, ntohs(addr->u.in.sin_port));
    }
}

uint16_t rcci_addr_port(const rcci_addr_t *addr)
{
    return ntohs(addr->u.sa.sa_family == AF_INET6 ? addr->u.in6.sin6_port : addr->u.in.sin_port);
}

void rcci_addr_set_port(rcci_addr_t *addr, uint16_t port)
{
    if (addr->u.sa.sa_family == AF_INET6)
        addr->u.in6.sin6_port = htons(port);
    else
        addr->u.in.sin_port = htons(port);
}

rcc_result_t rcci_addr_parse(const char *text, rcci_addr_t *addr)
{
    char host[256];
    const char *port;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof host)
            return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                              "'%s' is not an address of the form [v6addr]:port", text);
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
        port = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon || (size_t)(colon - text) >= sizeof host || colon == text)
            return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                              "'%s' is not an address of the form host:port", text);
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        port = colon + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (*port == '\0' || *end != '\0' || p < 1 || p > 65535)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "'%s': port '%s' is not in 1..65535", text,
                          port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &ai);
    if (rc != 0 || !ai)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "cannot resolve host '%s' of '%s': %s", host,
                          text, gai_strerror(rc));
    memset(addr, 0, sizeof *addr);
    memcpy(&addr->u, ai->ai_addr, ai->ai_addrlen);
    addr->len = ai->ai_addrlen;
    freeaddrinfo(ai);
    rcci_addr_set_port(addr, (uint16_t)p);
    return RCC_SUCCESS;
}

static int addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static void addr_from_sa(const struct sockaddr *sa, rcci_addr_t *out)
{
    memset(out, 0, sizeof *out);
    out->len = sa->sa_family == AF_INET6 ? sizeof out->u.in6 : sizeof out->u.in;
    memcpy(&out->u, sa, out->len);
    rcci_addr_set_port(out, 0);
}

/* The interface that owns `addr`, for the log and for ringcc's users. */
static void addr_ifname(const rcci_addr_t *addr, struct ifaddrs *list, char *out, size_t size)
{
    snprintf(out, size, "?");
    for (struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != addr->u.sa.sa_family)
            continue;
        int same =
            addr->u.sa.sa_family == AF_INET
                ? !memcmp(&((struct sockaddr_in *)ifa->ifa_addr)->sin_addr, &addr->u.in.sin_addr, 4)
                : !memcmp(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr,
                          &addr->u.in6.sin6_addr, 16);
        if (same) {
            snprintf(out, size, "%s", ifa->ifa_name);
            return;
        }
    }
}

rcc_result_t rcci_addr_pick_local(const char *ifname, const rcci_addr_t *toward, rcci_addr_t *local,
                                  char *ifname_out, size_t ifname_size)
{
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return rcci_error_errno(RCC_ERR_SYSTEM, errno, "getifaddrs");
    rcc_result_t res = RCC_SUCCESS;
    int found = 0;
    if (ifname && *ifname) {
        /* Prefer IPv4, then IPv6, among interfaces matching the prefix. */
        for (int pass = 0; pass < 2 && !found; pass++) {
            for (struct ifaddrs *ifa = list; ifa && !found; ifa = ifa->ifa_next) {
                if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP) ||
                    strncmp(ifa->ifa_name, ifname, strlen(ifname)) != 0)
                    continue;
                if (ifa->ifa_addr->sa_family != (pass == 0 ? AF_INET : AF_INET6))
                    continue;
                if (pass == 1 &&
                    IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))
                    continue;
                addr_from_sa(ifa->ifa_addr, local);
                found = 1;
            }
        }
        if (!found)
            RCC_FAIL(RCC_ERR_SYSTEM,
                     "RCC_SOCKET_IFNAME='%s' matches no interface that is up and has an address",
                     ifname);
    } else if (toward) {
        /* A connected UDP socket reveals the source address the routing table
         * picks for `toward`; connect() on UDP sends nothing. */
        int fd = socket(toward->u.sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (fd < 0 || connect(fd, &toward->u.sa, toward->len) != 0 ||
            getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
            int err = errno;
            char text[80];
            rcci_addr_format(toward, text, sizeof text);
            if (fd >= 0)
                close(fd);
            RCC_FAIL(RCC_ERR_SYSTEM, "no route to the root %s: %s", text, strerror(err));
        }
        close(fd);
        addr_from_sa((struct sockaddr *)&ss, local);
        found = 1;
    } else {
        for (int pass = 0; pass < 2 && !found; pass++) {
            for (struct ifaddrs *ifa = list; ifa && !found; ifa = ifa->ifa_next) {
                if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP) ||
                    ifa->ifa_addr->sa_family != AF_INET)
                    continue;
                if (pass == 0 && addr_is_loopback(ifa->ifa_addr))
                    continue;
                addr_from_sa(ifa->ifa_addr, local);
                found = 1;
            }
        }
        if (!found)
            RCC_FAIL(RCC_ERR_SYSTEM, "no network interface with an IPv4 address is up");
    }
    addr_ifname(local, list, ifname_out, ifname_size);
out:
    freeifaddrs(list);
    return res;
}

/* ---- sockets with deadlines --------------------------------------------- */

rcc_result_t rcci_sock_set_nonblocking(int fd, int on)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK) < 0)
        return rcci_error_errno(RCC_ERR_SYSTEM, errno, "fcntl(O_NONBLOCK)");
    return RCC_SUCCESS;
}

rcc_result_t rcci_sock_listen(const rcci_addr_t *addr, rcci_sock_prepare_fn prepare, int *fd_out,
                              rcci_addr_t *bound)
{
    char text[80];
    rcci_addr_format(addr, text, sizeof text);
    int fd = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rcci_error_errno(RCC_ERR_SYSTEM, errno, "socket for listening on %s", text);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (prepare)
        prepare(fd);
    if (bind(fd, &addr->u.sa, addr->len) != 0 || listen(fd, 1024) != 0) {
        int err = errno;
        close(fd);
        return rcci_error_errno(RCC_ERR_SYSTEM, err, "cannot listen on %s", text);
    }
    *bound = *addr;
    bound->len = sizeof bound->u;
    getsockname(fd, &bound->u.sa, &bound->len);
    *fd_out = fd;
    return RCC_SUCCESS;
}

/* Waits for `events` on fd until the deadline. */
static rcc_result_t sock_wait(int fd, short events, int64_t deadline_ns, const char *what)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int ms = rcci_ms_until(deadline_ns, 1000);
        if (ms == 0 && rcci_now_ns() >= deadline_ns)
            return rcci_error(RCC_ERR_TIMEOUT, "%s: timed out", what);
        int n = poll(&p, 1, ms);
        if (n < 0 && errno != EINTR)
            return rcci_error_errno(RCC_ERR_SYSTEM, errno, "poll during %s", what);
        if (n > 0)
            return RCC_SUCCESS;
    }
}

rcc_result_t rcci_sock_connect(const rcci_addr_t *addr, int64_t deadline_ns, int retry_refused,
                               rcci_sock_prepare_fn prepare, int *fd_out)
{
    char text[80];
    rcci_addr_format(addr, text, sizeof text);
    int64_t backoff_ms = 10;
    for (;;) {
        int fd = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            return rcci_error_errno(RCC_ERR_SYSTEM, errno, "socket to connect to %s", text);
        if (prepare)
            prepare(fd);
        int err = 0;
        if (connect(fd, &addr->u.sa, addr->len) != 0) {
            err = errno;
            if (err == EINPROGRESS) {
                char what[128];
                snprintf(what, sizeof what, "connect to %s", text);
                rcc_result_t res = sock_wait(fd, POLLOUT, deadline_ns, what);
                if (res != RCC_SUCCESS) {
                    close(fd);
                    return res;
                }
                socklen_t len = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            }
        }
        if (err == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            rcc_result_t res = rcci_sock_set_nonblocking(fd, 0);
            if (res != RCC_SUCCESS) {
                close(fd);
                return res;
            }
            *fd_out = fd;
            return RCC_SUCCESS;
        }
        close(fd);
        int retryable = retry_refused && (err == ECONNREFUSED || err == ETIMEDOUT ||
                                          err == EHOSTUNREACH || err == ENETUNREACH);
        /* Refused where a listener was known to be, or reset by one that
         * closed with the connection in its backlog: the peer is gone. */
        int gone = err == ECONNREFUSED || err == ECONNRESET;
        if (!retryable)
            return rcci_error_errno(gone ? RCC_ERR_PEER_LOST : RCC_ERR_SYSTEM, err,
                                    "cannot connect to %s%s", text,
                                    gone ? " (it no longer listens: the rank left or died)" : "");
        if (rcci_now_ns() + backoff_ms * 1000000 >= deadline_ns)
            return rcci_error_errno(RCC_ERR_TIMEOUT, err, "gave up connecting to %s", text);
        struct timespec ts = {0, (long)backoff_ms * 1000000};
        nanosleep(&ts, NULL);
        if (backoff_ms < 200)
            backoff_ms *= 2;
    }
}

rcc_result_t rcci_sock_exchange(int out_fd, const void *sbuf, size_t slen, int in_fd, void *rbuf,
                                size_t rlen, int64_t deadline_ns, size_t *sent_out, size_t *got_out)
{
    size_t sent = 0, got = 0;
    rcc_result_t res = RCC_SUCCESS;
    while (res == RCC_SUCCESS && (sent < slen || got < rlen)) {
        struct pollfd p[2];
        int n = 0, si = -1, ri = -1;
        if (sent < slen) {
            si = n;
            p[n++] = (struct pollfd){.fd = out_fd, .events = POLLOUT};
        }
        if (got < rlen) {
            ri = n;
            p[n++] = (struct pollfd){.fd = in_fd, .events = POLLIN};
        }
        int ms = rcci_ms_until(deadline_ns, 1000);
        if (ms == 0 && rcci_now_ns() >= deadline_ns) {
            res = rcci_error(RCC_ERR_TIMEOUT,
                             "socket exchange timed out (%zu/%zu bytes sent, "
                             "%zu/%zu received)",
                             sent, slen, got, rlen);
            break;
        }
        int rc = poll(p, (nfds_t)n, ms);
        if (rc < 0 && errno != EINTR)
            res = rcci_error_errno(RCC_ERR_SYSTEM, errno, "poll");
        if (rc <= 0)
            continue;
        if (si >= 0 && p[si].revents) {
            ssize_t w =
                send(out_fd, (const char *)sbuf + sent, slen - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                res = rcci_error_errno(errno == EPIPE || errno == ECONNRESET ? RCC_ERR_PEER_LOST
                                                                             : RCC_ERR_SYSTEM,
                                       errno, "send");
            if (w > 0)
                sent += (size_t)w;
        }
        /* Read what arrived even after a failed send: it may say why. */
        if (ri >= 0 && p[ri].revents) {
            ssize_t r = recv(in_fd, (char *)rbuf + got, rlen - got, MSG_DONTWAIT);
            if (r == 0 && res == RCC_SUCCESS)
                res = rcci_error(RCC_ERR_PEER_LOST, "connection closed by the peer");
            if (r < 0 && errno != EAGAIN && errno != EINTR && res == RCC_SUCCESS)
                res = rcci_error_errno(errno == ECONNRESET ? RCC_ERR_PEER_LOST : RCC_ERR_SYSTEM,
                                       errno, "recv");
            if (r > 0)
                got += (size_t)r;
        }
    }
    if (sent_out)
        *sent_out = sent;
    if (got_out)
        *got_out = got;
    return res;
}

rcc_result_t rcci_sock_sendrecv(int out_fd, const void *sbuf, size_t slen, int in_fd, void *rbuf,
                                size_t rlen, int64_t deadline_ns)
{
    return rcci_sock_exchange(out_fd, sbuf, slen, in_fd, rbuf, rlen, deadline_ns, NULL, NULL);
}


rcc_result_t rcci_sock_send_all(int fd, const void *buf, size_t len, int64_t deadline_ns)
{
    return rcci_sock_sendrecv(fd, buf, len, -1, NULL, 0, deadline_ns);
}

rcc_result_t rcci_sock_recv_all(int fd, void *buf, size_t len, int64_t deadline_ns)
{
    return rcci_sock_sendrecv(-1, NULL, 0, fd, buf, len, deadline_ns);
}

/* ---- the hello ---------------------------------------------------------- */

static void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Layout: magic 0, version 4, kind 6, secret 8..40, comm_id 40, rank 48,
 * nranks 52, tag 56, addr.family 60, addr.port 62 (as sent), addr 64..80. */
static void hello_encode(uint8_t out[RCCI_HELLO_BYTES], const rcci_hello_t *h,
                         const uint8_t secret[RCCI_SOCK_SECRET_BYTES])
{
    memset(out, 0, RCCI_HELLO_BYTES);
    put_u32(out, HELLO_MAGIC);
    put_u16(out + 4, HELLO_VERSION);
    put_u16(out + 6, h->kind);
    memcpy(out + 8, secret, RCCI_SOCK_SECRET_BYTES);
    put_u64(out + 40, h->comm_id);
    put_u32(out + 48, (uint32_t)h->rank);
    put_u32(out + 52, (uint32_t)h->nranks);
    put_u32(out + 56, h->tag);
    put_u16(out + 60, h->addr.family);
    memcpy(out + 62, &h->addr.port, 2);
    memcpy(out + 64, h->addr.addr, 16);
}

/* Constant-time comparison: a stranger learns nothing from timing. */
static int secret_equal(const uint8_t *a, const uint8_t *b)
{
    uint8_t diff = 0;
    for (int i = 0; i < RCCI_SOCK_SECRET_BYTES; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

/* Whether the first `got` bytes of a hello can still be one: the magic and
 * version are judged as soon as they are in, so a stranger speaking another
 * protocol is refused without waiting for 96 bytes it may never send. */
static int hello_prefix_ok(const uint8_t *in, size_t got, const char **why)
{
    uint8_t magic[4];
    put_u32(magic, HELLO_MAGIC);
    if (memcmp(in, magic, got < 4 ? got : 4) != 0)
        return *why = "not a ringcc connection (bad magic)", 0;
    if (got >= 6 && get_u16(in + 4) != HELLO_VERSION)
        return *why = "unsupported protocol version", 0;
    return 1;
}

static int hello_decode(const uint8_t in[RCCI_HELLO_BYTES], const uint8_t *secret, uint64_t comm_id,
                        rcci_hello_t *h, const char **why)
{
    if (!hello_prefix_ok(in, RCCI_HELLO_BYTES, why))
        return 0;
    if (!secret_equal(in + 8, secret))
        return *why = "wrong job secret", 0;
    h->kind = get_u16(in + 6);
    h->comm_id = get_u64(in + 40);
    h->rank = (int32_t)get_u32(in + 48);
    h->nranks = (int32_t)get_u32(in + 52);
    h->tag = get_u32(in + 56);
    h->addr.family = get_u16(in + 60);
    memcpy(&h->addr.port, in + 62, 2);
    memcpy(h->addr.addr, in + 64, 16);
    if (h->comm_id != comm_id)
        return *why = "belongs to another communicator", 0;
    return 1;
}

rcc_result_t rcci_hello_send(int fd, const rcci_hello_t *hello,
                             const uint8_t secret[RCCI_SOCK_SECRET_BYTES], int64_t deadline_ns)
{
    uint8_t buf[RCCI_HELLO_BYTES];
    hello_encode(buf, hello, secret);
    return rcci_sock_send_all(fd, buf, sizeof buf, deadline_ns);
}

void rcci_hello_encode(uint8_t out[RCCI_HELLO_BYTES], const rcci_hello_t *hello,
                       const uint8_t secret[RCCI_SOCK_SECRET_BYTES])
{
    hello_encode(out, hello, secret);
}

int rcci_hello_decode(const uint8_t in[RCCI_HELLO_BYTES],
                      const uint8_t secret[RCCI_SOCK_SECRET_BYTES], uint64_t comm_id,
                      rcci_hello_t *hello, const char **why)
{
    return hello_decode(in, secret, comm_id, hello, why);
}

/* ---- acceptor ----------------------------------------------------------- */

/* A connection taken off the backlog. A stranger until its hello proves the
 * job secret; then valid, kept until an accept claims it. */
typedef struct {
    int fd;
    int valid; /* hello complete and proven */
    size_t got;
    int64_t since_ns;
    rcci_addr_t from;
    rcci_hello_t hello;
    uint8_t buf[RCCI_HELLO_BYTES];
} acc_pending_t;

struct rcci_acceptor {
    /* accept and sweep may run on different threads (transport.h) */
    pthread_mutex_t lock;
    int listen_fd;
    uint8_t secret[RCCI_SOCK_SECRET_BYTES];
    uint64_t comm_id;
    int64_t paused_until_ns; /* out of descriptors: accept nothing until then */
    int warned;              /* the first stranger caught lying is a warning */
    int npending, cap, nstrangers;
    acc_pending_t *pending; /* grows for valid connections; strangers are capped */
};

rcc_result_t rcci_acceptor_create(int listen_fd, const uint8_t secret[RCCI_SOCK_SECRET_BYTES],
                                  uint64_t comm_id, rcci_acceptor_t **out)
{
    /* acc_take accepts until the backlog is empty: it must not block then. */
    rcc_result_t res = rcci_sock_set_nonblocking(listen_fd, 1);
    if (res != RCC_SUCCESS)
        return res;
    rcci_acceptor_t *a = calloc(1, sizeof *a);
    if (!a)
        return rcci_error(RCC_ERR_NO_MEMORY, "acceptor");
    pthread_mutex_init(&a->lock, NULL);
    a->listen_fd = listen_fd;
    memcpy(a->secret, secret, RCCI_SOCK_SECRET_BYTES);
    a->comm_id = comm_id;
    *out = a;
    return RCC_SUCCESS;
}

/* Closes pending[i]; `proven_bad`: it said something false (a warning the
 * first time: two jobs sharing a port, or a wrong RCC_SECRET, look so),
 * rather than just going away or staying silent. */
static void acc_drop(rcci_acceptor_t *a, int i, const char *why, int proven_bad)
{
    char text[80];
    rcci_addr_format(&a->pending[i].from, text, sizeof text);
    if (proven_bad && !a->warned) {
        a->warned = 1;
        RCC_WARN("refused a connection from %s: %s (not a member of this job; further refusals "
                 "are logged at INFO)",
                 text, why);
    } else {
        RCC_INFO("dropped a connection from %s: %s", text, why);
    }
    close(a->pending[i].fd);
    if (!a->pending[i].valid)
        a->nstrangers--;
    a->pending[i] = a->pending[--a->npending];
}

/* Drops the stranger that has waited longest; 0 when there is none. */
static int acc_drop_oldest(rcci_acceptor_t *a, const char *why)
{
    int oldest = -1;
    for (int i = 0; i < a->npending; i++)
        if (!a->pending[i].valid &&
            (oldest < 0 || a->pending[i].since_ns < a->pending[oldest].since_ns))
            oldest = i;
    if (oldest >= 0)
        acc_drop(a, oldest, why, 0);
    return oldest >= 0;
}

/* Reads what stranger i has sent; a false magic or version is refused at
 * once, the rest when the hello is whole. Returns 1 when i was dropped
 * (pending[i] is then another connection). */
static int acc_read(rcci_acceptor_t *a, int i)
{
    acc_pending_t *pc = &a->pending[i];
    ssize_t r = recv(pc->fd, pc->buf + pc->got, RCCI_HELLO_BYTES - pc->got, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        acc_drop(a, i, r == 0 ? "closed before its hello" : "reset before its hello", 0);
        return 1;
    }
    if (r > 0)
        pc->got += (size_t)r;
    const char *why = NULL;
    if (pc->got < RCCI_HELLO_BYTES
            ? hello_prefix_ok(pc->buf, pc->got, &why)
            : hello_decode(pc->buf, a->secret, a->comm_id, &pc->hello, &why)) {
        if (pc->got == RCCI_HELLO_BYTES) {
            pc->valid = 1;
            a->nstrangers--;
        }
        return 0;
    }
    acc_drop(a, i, why, 1);
    return 1;
}

/* Takes up to ACCEPT_BATCH connections off the backlog and reads the hello
 * each has already sent, so a member's connection is proven at once and no
 * later flood can push it out. A flood pushes out the oldest strangers. */
static void acc_take(rcci_acceptor_t *a)
{
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        rcci_addr_t from = {.len = sizeof from.u};
        int fd = accept4(a->listen_fd, &from.u.sa, &from.len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue; /* that one is gone; others may wait */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The listening socket stays readable: rather than spin on
                 * it, give back a stranger's descriptor, or pause. */
                if (acc_drop_oldest(a, "this process is out of file descriptors"))
                    continue;
                static int warned;
                int err = errno;
                a->paused_until_ns = rcci_now_ns() + ACCEPT_PAUSE_NS;
                if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                    RCC_WARN("accept: %s: connections wait in the backlog until descriptors "
                             "are free (warned once)",
                             strerror(err));
            }
            return; /* EAGAIN: the backlog is empty */
        }
        if (a->npending == a->cap) {
            int cap = a->cap ? 2 * a->cap : ACCEPT_MAX_STRANGERS;
            acc_pending_t *grown = realloc(a->pending, sizeof *grown * (size_t)cap);
            if (!grown) {
                close(fd);
                return;
            }
            a->pending = grown, a->cap = cap;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        a->pending[a->npending++] =
            (acc_pending_t){.fd = fd, .since_ns = rcci_now_ns(), .from = from};
        a->nstrangers++;
        /* Only one that stays makes room: a scan that is gone at once must
         * not push out a member whose hello is on its way. */
        if (!acc_read(a, a->npending - 1) && a->nstrangers > ACCEPT_MAX_STRANGERS)
            acc_drop_oldest(a, "too many unauthenticated connections");
    }
}

/* One look at the listening socket and the strangers, waiting up to
 * `timeout_ms` for something to happen: new connections are taken, hellos
 * read, strangers past ACCEPT_SILENCE_NS closed. Under a->lock. */
static rcc_result_t acc_pass(rcci_acceptor_t *a, int timeout_ms)
{
    struct pollfd p[ACCEPT_MAX_STRANGERS + 1];
    int map[ACCEPT_MAX_STRANGERS + 1];
    int n = 0;
    int64_t now = rcci_now_ns();
    int listening = now >= a->paused_until_ns;
    if (!listening)
        timeout_ms = rcci_ms_until(a->paused_until_ns, timeout_ms);
    p[n] = (struct pollfd){.fd = listening ? a->listen_fd : -1, .events = POLLIN};
    map[n++] = -1;
    for (int i = 0; i < a->npending; i++) {
        if (a->pending[i].valid)
            continue;
        if (now - a->pending[i].since_ns > ACCEPT_SILENCE_NS) {
            acc_drop(a, i--, "no complete hello within 10 s", 0);
            continue;
        }
        if (n <= ACCEPT_MAX_STRANGERS) { /* always: strangers are capped */
            p[n] = (struct pollfd){.fd = a->pending[i].fd, .events = POLLIN};
            map[n++] = i;
        }
    }
    int rc = poll(p, (nfds_t)n, timeout_ms);
    if (rc < 0 && errno != EINTR)
        return rcci_error_errno(RCC_ERR_SYSTEM, errno, "poll in accept");
    if (rc <= 0)
        return RCC_SUCCESS;
    /* Hellos first, from the highest index down: a drop moves the last
     * entry into the hole, one already handled. Then new connections. */
    for (int k = n - 1; k >= 1; k--)
        if (p[k].revents)
            acc_read(a, map[k]);
    if (p[0].revents)
        acc_take(a);
    return RCC_SUCCESS;
}

static int acc_match(const acc_pending_t *p, uint16_t kind, int rank, uint32_t tag)
{
    return p->valid && p->hello.kind == kind && (rank < 0 || p->hello.rank == rank) &&
           p->hello.tag == tag;
}

rcc_result_t rcci_acceptor_accept(rcci_acceptor_t *a, uint16_t kind, int rank, uint32_t tag,
                                  int64_t deadline_ns, int *fd_out, rcci_hello_t *hello_out)
{
    rcc_result_t res = RCC_SUCCESS;
    pthread_mutex_lock(&a->lock);
    /* At least one look at the socket even past the deadline, so a deadline
     * of 0 polls without blocking. */
    for (int looked = 0;; looked = 1) {
        int i = 0;
        while (i < a->npending && !acc_match(&a->pending[i], kind, rank, tag))
            i++;
        if (i < a->npending) {
            res = rcci_sock_set_nonblocking(a->pending[i].fd, 0);
            if (res == RCC_SUCCESS) {
                *fd_out = a->pending[i].fd;
                *hello_out = a->pending[i].hello;
                a->pending[i] = a->pending[--a->npending];
            }
            break;
        }
        if (looked && rcci_now_ns() >= deadline_ns) {
            res = rcci_error(RCC_ERR_TIMEOUT, "no connection from rank %d (tag %u) arrived in time",
                             rank, tag);
            break;
        }
        res = acc_pass(a, rcci_ms_until(deadline_ns, 1000));
        if (res != RCC_SUCCESS)
            break;
    }
    pthread_mutex_unlock(&a->lock);
    return res;
}

void rcci_acceptor_sweep(rcci_acceptor_t *a)
{
    if (pthread_mutex_trylock(&a->lock) != 0)
        return; /* an accept is running, and does the same */
    acc_pass(a, 0);
    pthread_mutex_unlock(&a->lock);
}

void rcci_acceptor_destroy(rcci_acceptor_t *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->npending; i++)
        close(a->pending[i].fd);
    close(a->listen_fd);
    free(a->pending);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
