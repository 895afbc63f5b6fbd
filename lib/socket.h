/*
 * Socket helpers shared by the bootstrap and the TCP transport: addresses,
 * interface choice, connect/accept with deadlines, and the authenticated
 * hello every ringcc connection starts with.
 */
#ifndef RINGCC_SOCKET_H
#define RINGCC_SOCKET_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ringcc.h"

#define RCCI_SOCK_SECRET_BYTES 32

typedef struct {
    socklen_t len;
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
    } u;
} rcci_addr_t;

/* An address as it travels in ids and handles: explicit, fixed layout. */
typedef struct {
    uint16_t family; /* AF_INET or AF_INET6, host order */
    uint16_t port;   /* network order */
    uint8_t addr[16];
} rcci_wire_addr_t;

void rcci_addr_to_wire(const rcci_addr_t *addr, rcci_wire_addr_t *wire);
rcc_result_t rcci_addr_from_wire(const rcci_wire_addr_t *wire, rcci_addr_t *addr);
/* "10.0.0.1:4310" or "[fe80::1]:4310". */
void rcci_addr_format(const rcci_addr_t *addr, char *buf, size_t size);
/* Parses "host:port" or "[v6]:port"; host may be a name (resolved once). */
rcc_result_t rcci_addr_parse(const char *text, rcci_addr_t *addr);
uint16_t rcci_addr_port(const rcci_addr_t *addr);
void rcci_addr_set_port(rcci_addr_t *addr, uint16_t port);

/* Chooses the local address to listen on: the first address of an up
 * interface whose name starts with `ifname` when it is non-empty; else the
 * address that routes toward `toward` (when not NULL); else the first
 * non-loopback IPv4 interface, else loopback. Port is 0.
 * `ifname_out` receives the interface's name. */
rcc_result_t rcci_addr_pick_local(const char *ifname, const rcci_addr_t *toward, rcci_addr_t *local,
                                  char *ifname_out, size_t ifname_size);

/* Sets options a connection must be born with, on a fresh socket before
 * it connects or listens (connections accepted from a listener inherit
 * them). Congestion control is one: the kernel sets up the algorithm at the
 * handshake, and one chosen afterwards takes over without undoing what the
 * first set up (BBR, a common default, leaves the socket paced). */
typedef void (*rcci_sock_prepare_fn)(int fd);

/* Listening socket (CLOEXEC, REUSEADDR) on `addr`, `prepare`d when not
 * NULL; *bound gets the port. */
rcc_result_t rcci_sock_listen(const rcci_addr_t *addr, rcci_sock_prepare_fn prepare, int *fd,
                              rcci_addr_t *bound);
/* Blocking-style connect with a deadline, from a socket `prepare`d when not
 * NULL. With `retry_refused`, a refused connection is retried until the
 * deadline (the peer may not listen yet). The returned socket is blocking,
 * CLOEXEC, TCP_NODELAY. */
rcc_result_t rcci_sock_connect(const rcci_addr_t *addr, int64_t deadline_ns, int retry_refused,
                               rcci_sock_prepare_fn prepare, int *fd);
rcc_result_t rcci_sock_send_all(int fd, const void *buf, size_t len, int64_t deadline_ns);
rcc_result_t rcci_sock_recv_all(int fd, void *buf, size_t len, int64_t deadline_ns);
/* Sends to one socket and receives from another at once (no deadlock when
 * both sides send first). */
rcc_result_t rcci_sock_sendrecv(int out_fd, const void *sbuf, size_t slen, int in_fd, void *rbuf,
                                size_t rlen, int64_t deadline_ns);
/* The same, telling how many bytes went out and came in (also on failure:
 * what arrived before a peer closed may say why it did). */
rcc_result_t rcci_sock_exchange(int out_fd, const void *sbuf, size_t slen, int in_fd, void *rbuf,
                                size_t rlen, int64_t deadline_ns, size_t *sent, size_t *got);
rcc_result_t rcci_sock_set_nonblocking(int fd, int on);

/* The first bytes on every ringcc connection. Fixed little-endian layout. */
enum { RCCI_HELLO_ROOT = 1, RCCI_HELLO_BOOTSTRAP = 2, RCCI_HELLO_TCP = 3 };
typedef struct {
    uint16_t kind;
    int32_t rank;
    int32_t nranks;
    uint32_t tag;
    uint64_t comm_id;
    rcci_wire_addr_t addr; /* the sender's listen address (root hello) */
} rcci_hello_t;
#define RCCI_HELLO_BYTES 96

/* Writes the hello with the job secret. */
rcc_result_t rcci_hello_send(int fd, const rcci_hello_t *hello,
                             const uint8_t secret[RCCI_SOCK_SECRET_BYTES], int64_t deadline_ns);

/* The hello's bytes, and their check (what rcci_hello_send and the acceptor
 * use; pure, for tests). Decode returns 1 and fills *hello when `in` is a
 * hello of this protocol version proving `secret` for `comm_id`; else 0 and
 * *why names the problem (*hello is then undefined). */
void rcci_hello_encode(uint8_t out[RCCI_HELLO_BYTES], const rcci_hello_t *hello,
                       const uint8_t secret[RCCI_SOCK_SECRET_BYTES]);
int rcci_hello_decode(const uint8_t in[RCCI_HELLO_BYTES],
                      const uint8_t secret[RCCI_SOCK_SECRET_BYTES], uint64_t comm_id,
                      rcci_hello_t *hello, const char **why);

/* Accepts connections on a listening socket and returns those that prove
 * the job secret and carry the expected hello. Strangers are closed without
 * disturbing anyone: a wrong magic or version as soon as those bytes
 * arrive, a wrong secret or communicator when the hello is whole, a
 * connection with no complete hello 10 s after it was accepted (silent or
 * trickling). Nothing waits on one connection: all are read as their bytes
 * come. At most 64 strangers are held per socket (a flood closes the
 * oldest); valid connections for other (kind, rank, tag) are kept for
 * later calls. */
typedef struct rcci_acceptor rcci_acceptor_t;
/* On success owns `listen_fd` (made nonblocking); on failure the caller does. */
rcc_result_t rcci_acceptor_create(int listen_fd, const uint8_t secret[RCCI_SOCK_SECRET_BYTES],
                                  uint64_t comm_id, rcci_acceptor_t **acceptor);
/* rank -1 matches any rank. On success *fd is blocking and *hello filled. */
rcc_result_t rcci_acceptor_accept(rcci_acceptor_t *acceptor, uint16_t kind, int rank, uint32_t tag,
                                  int64_t deadline_ns, int *fd, rcci_hello_t *hello);
/* Does accept's work on strangers without blocking and without returning
 * anything: for a listening socket that stays open while nobody accepts on
 * it. May run on another thread than accept; skips its turn while an
 * accept runs. */
void rcci_acceptor_sweep(rcci_acceptor_t *acceptor);
/* Closes pending connections and the listening socket. */
void rcci_acceptor_destroy(rcci_acceptor_t *acceptor);

#endif /* RINGCC_SOCKET_H */
