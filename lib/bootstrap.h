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
/* The address this rank chose to listen on (port 0) and its interface. */
const rcci_addr_t *rcci_bootstrap_local_addr(const rcci_bootstrap_t *bs);
const char *rcci_bootstrap_ifname(const rcci_bootstrap_t *bs);
/* "rank 3 (10.0.0.4:4310)" for messages. */
void rcci_bootstrap_peer_name(const rcci_bootstrap_t *bs, int rank, char *buf, size_t size);
void rcci_bootstrap_destroy(rcci_bootstrap_t *bs);

#endif /* RINGCC_BOOTSTRAP_H */
