/*
 * Bootstrap: how ranks find each other. A rendezvous ("root") collects every
 * rank's listen address and hands the table back; ranks then form a ring of
 * sockets used for small control exchanges (allgather, barrier) during
 * communicator set-up. Every step proves the job secret and has a deadline.
 */
#ifndef RINGCC_BOOTSTRAP_H
#define RINGCC_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"
#include "socket.h"

/* The content of an rcc_unique_id_t. */
typedef struct {
    rcci_addr_t root;
    uint8_t secret[RCCI_SOCK_SECRET_BYTES];
    uint64_t comm_id;
} rcci_id_t;

void rcci_id_encode(const rcci_id_t *id, rcc_unique_id_t *out);
rcc_result_t rcci_id_decode(const rcc_unique_id_t *in, rcci_id_t *id);

/* Starts the rendezvous for `id` on a detached thread listening on
 * `listen_addr` (already bound: `listen_fd`, ownership passes). It serves
 * one job of however many ranks the first arrival announces, then exits, or
 * gives up after `timeout_ns`, telling the ranks that arrived which did not. */
rcc_result_t rcci_root_start(int listen_fd, const rcci_id_t *id, int64_t timeout_ns);

typedef struct rcci_bootstrap rcci_bootstrap_t;

/* Joins the job: listens, meets at the root, connects the bootstrap ring.
 * `ifname` as RCC_SOCKET_IFNAME. Blocking, bounded by `timeout_ns`. */
rcc_result_t rcci_bootstrap_init(const rcci_id_t *id, int rank, int nranks, int64_t timeout_ns,
                                 const char *ifname, rcci_bootstrap_t **bs);
/* Forms the bootstrap of a sub-communicator (rcc_comm_split) over the
 * parent's: every parent rank takes part; ranks of one `color` become a new
 * job ordered by (key, parent rank), with `comm_id`, no new rendezvous.
 * color < 0: takes part, joins nothing (*child = NULL). Collective over the
 * parent; blocking, bounded by the parent's timeout. */
rcc_result_t rcci_bootstrap_split(rcci_bootstrap_t *parent, int color, int key, uint64_t comm_id,
                                  rcci_bootstrap_t **child);
int rcci_bootstrap_rank(const rcci_bootstrap_t *bs);
int rcci_bootstrap_nranks(const rcci_bootstrap_t *bs);
const uint8_t *rcci_bootstrap_secret(const rcci_bootstrap_t *bs);
uint64_t rcci_bootstrap_comm_id(const rcci_bootstrap_t *bs);

/* `data` holds nranks blocks of `block` bytes; this rank's block (index
 * rank) is sent, the others are filled. Collective over the bootstrap ring. */
rcc_result_t rcci_bootstrap_allgather(rcci_bootstrap_t *bs, void *data, size_t block);
rcc_result_t rcci_bootstrap_barrier(rcci_bootstrap_t *bs);
/* Without waiting: whether a ring neighbour failed (its notice arrived:
 * RCC_ERR_PEER_LOST with the origin and text) or left (its socket closed).
 * For a rank waiting on something else during set-up (a transport's
 * accept), so that it need not wait out the whole timeout. */
rcc_result_t rcci_bootstrap_check(rcci_bootstrap_t *bs);
/* Waits up to `wait_ns` for a failure notice from either ring neighbour
 * (a failing rank sends one both ways) and fails with what it tells;
 * RCC_SUCCESS when none came. For a rank whose own set-up step failed
 * against a neighbour (a refused connect), so that its error says where
 * the failure began rather than only what it met. */
rcc_result_t rcci_bootstrap_await_notice(rcci_bootstrap_t *bs, int64_t wait_ns);
/* Tells the ring neighbours (the next rank, and the previous one, which
 * may be connecting to this one), at once and without waiting, that this
 * rank's set-up failed and why (`why`: the cause; or, when this rank failed on a notice
 * itself, that notice's origin and text), so that every rank's allgather
 * fails naming where the failure began, not the neighbour that closed.
 * Call before destroying a bootstrap whose job failed; NULL is ignored.
 * The bootstrap's allgathers fail afterwards. Does not touch the thread's
 * error text. */
void rcci_bootstrap_fail(rcci_bootstrap_t *bs, const char *why);
/* The address this rank chose to listen on (port 0) and its interface. */
const rcci_addr_t *rcci_bootstrap_local_addr(const rcci_bootstrap_t *bs);
const char *rcci_bootstrap_ifname(const rcci_bootstrap_t *bs);
/* "rank 3 (10.0.0.4:4310)" for messages. */
void rcci_bootstrap_peer_name(const rcci_bootstrap_t *bs, int rank, char *buf, size_t size);
void rcci_bootstrap_destroy(rcci_bootstrap_t *bs);

/* ---- the rendezvous protocol's messages, parsed by pure functions -------
 * (what the functions above send and receive; separate so tests and fuzzers
 * reach them without sockets). All integers little-endian. */

#define RCCI_BOOTSTRAP_MAX_RANKS (1 << 20)
/* An address in ids, the root's table and split entries: family u16,
 * port (network order) 2 bytes, address 16 bytes. */
#define RCCI_BOOTSTRAP_ADDR_BYTES 20
void rcci_bootstrap_addr_encode(uint8_t out[RCCI_BOOTSTRAP_ADDR_BYTES], const rcci_addr_t *addr);
rcc_result_t rcci_bootstrap_addr_decode(const uint8_t in[RCCI_BOOTSTRAP_ADDR_BYTES],
                                        rcci_addr_t *addr);

/* The root's answer to each rank: status u32, nranks u32, a NUL-terminated
 * text; when the status is RCC_SUCCESS, nranks addresses follow (the table). */
#define RCCI_ROOT_REPLY_BYTES (8 + 256)
void rcci_root_reply_encode(uint8_t out[RCCI_ROOT_REPLY_BYTES], rcc_result_t status, int nranks,
                            const char *text);
/* A rank of `nranks` reads the answer of the root named `root`: RCC_SUCCESS,
 * or the failure the root reported (*root_said = 1, its text quoted; a
 * status that is no failure code of this version reads RCC_ERR_REMOTE), or
 * RCC_ERR_INTERNAL when the root answered for another rank count. Terminates
 * the text in `head` in place. */
rcc_result_t rcci_root_reply_decode(uint8_t head[RCCI_ROOT_REPLY_BYTES], int nranks,
                                    const char *root, int *root_said);
/* The table of nranks addresses into peers[0..nranks). */
rcc_result_t rcci_root_table_decode(const uint8_t *table, int nranks, rcci_addr_t *peers);
/* The root's judgement of a proven root hello, given the job so far
 * (nranks < 0: no rank yet; else fds[0..nranks), -1 where no rank joined):
 * 1 when it may join (a valid rank of the job, not yet taken, with an
 * IPv4 or IPv6 address), else 0 and the reason in bad (size bytes). */
int rcci_root_hello_check(const rcci_hello_t *h, int nranks, const int *fds, char *bad,
                          size_t size);

/* rcci_bootstrap_split's allgathered table: n entries of color i32, key
 * i32, parent rank u32, listen address. Fills order[] with the parent
 * ranks of `color`'s members ordered by (key, parent rank) and returns how
 * many there are. */
#define RCCI_SPLIT_ENTRY_BYTES 36
int rcci_split_members(const uint8_t *table, int n, int color, int *order);

#endif /* RINGCC_BOOTSTRAP_H */
