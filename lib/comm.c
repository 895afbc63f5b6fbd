/*
 * Communicator life cycle: unique ids, initialisation from an id or from
 * the launcher's environment, transport choice per ring edge, teardown.
 */
#include "comm.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "clock.h"
#include "devapi.h"
#include "envjob.h"
#include "hash.h"
#include "log.h"
#include "memreg.h"
#include "params.h"
#include "rcc_config.h"

#define COMM_SETUP_SLICE_NS (50ll * 1000000) /* accept waits between bootstrap checks */
#define COMM_NOTICE_WAIT_NS (200ll * 1000000) /* for a failed neighbour's reason */

/* The bootstrap's secret is handed to the transports as it is. */
_Static_assert(RCCI_SECRET_BYTES == RCCI_SOCK_SECRET_BYTES, "one job secret size");

/* ---- helpers ---------------------------------------------------------------- */

static rcc_result_t comm_random(void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom((char *)buf + got, len - got, 0);
        if (n < 0 && errno != EINTR)
            return rcci_error_errno(RCC_ERR_SYSTEM, errno, "getrandom");
        if (n > 0)
            got += (size_t)n;
    }
    return RCC_SUCCESS;
}

static uint64_t comm_host_hash(void)
{
    char host[256] = "", boot[64] = "";
    gethostname(host, sizeof host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f))
            boot[0] = '\0';
        fclose(f);
    }
    return rcci_mix64(
        rcci_fnv1a(rcci_fnv1a(RCCI_FNV1A_SEED, host, strlen(host)), boot, strlen(boot)));
}

static rcc_result_t comm_set_error(struct rcc_comm *comm, rcc_result_t res)
{
    if (res != RCC_SUCCESS && comm) {
        pthread_mutex_lock(&comm->lock);
        snprintf(comm->last_error, sizeof comm->last_error, "%s", rcci_tls_error());
        pthread_mutex_unlock(&comm->lock);
    }
    return res;
}

/* ---- unique ids ------------------------------------------------------------- */

rcc_result_t rcc_get_unique_id(rcc_unique_id_t *out)
{
    rcc_result_t res = RCC_SUCCESS;
    int fd = -1;
    rcci_id_t id;
    rcci_tls_error_clear();
    if (!out)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_get_unique_id: id is NULL");
    RCC_CHECK(rcci_params_load());
    char ifname[64];
    rcci_addr_t local;
    RCC_CHECK(rcci_addr_pick_local(rcci_param_str(RCCI_PARAM_SOCKET_IFNAME), NULL, &local, ifname,
                                   sizeof ifname));
    RCC_CHECK(rcci_sock_listen(&local, NULL, &fd, &id.root));
    RCC_CHECK(comm_random(id.secret, sizeof id.secret));
    RCC_CHECK(comm_random(&id.comm_id, sizeof id.comm_id));
    RCC_CHECK(rcci_root_start(fd, &id, rcci_param_int(RCCI_PARAM_TIMEOUT) * 1000000000ll));
    fd = -1; /* the root thread owns it now */
    rcci_id_encode(&id, out);
    char text[80];
    rcci_addr_format(&id.root, text, sizeof text);
    RCC_INFO("rendezvous for a new communicator listening on %s (%s)", text, ifname);
out:
    if (fd >= 0)
        close(fd);
    return res;
}

/* ---- initialisation --------------------------------------------------------- */

typedef struct {
    int32_t rank;
    uint32_t transports; /* bit i: rcci_transports[i] initialised here */
    uint64_t host_hash;
    int32_t nsocks;           /* RCC_NSOCKS: both ends of an edge must make as many */
    int32_t cuda_device;      /* -1: this rank has no GPU (rcci_peer_info_t) */
    int32_t pid;              /* its process (rcci_peer_info_t) */
    int64_t nsocks_min_bytes; /* RCC_NSOCKS_MIN_BYTES: and deal chunks alike */
    int64_t dev_chunk_bytes;  /* RCC_DEVICE_CHUNK_BYTES: device ring chunks cut alike */
    int32_t dev_pipeline;     /* RCC_DEVICE_PIPELINE, resolved (RCCI_DEVPIPE_*) */
    int64_t window_bytes;     /* RCC_CUDAIPC_WINDOW_BYTES: a window message each way, or none */
    int32_t cpus;             /* online CPUs of this rank's host (rcci_rd_leaders) */
    int32_t rd_leaders;       /* RCC_RD_LEADERS: 0 for auto */
    int32_t rd_move;          /* RCC_RD_MOVE_LEADERS */
    /* What every rank must cut and choose alike: checked here, by name, rather
     * than found later as a message of the wrong size or algorithm. */
    int64_t chunk_bytes;     /* RCC_CHUNK_BYTES or config.chunk_bytes, resolved */
    int32_t algo;            /* RCC_ALGO: -1 for auto, else the algorithm */
    int32_t checksum;        /* RCC_CHECKSUM */
    int64_t small_max_bytes; /* RCC_SMALL_MAX_BYTES */
    int64_t mid_max_bytes;   /* RCC_MID_MAX_BYTES */
    int64_t fusion_bytes;    /* RCC_FUSION_BYTES */
    int64_t ring_pass_bytes; /* RCC_RING_PASS_BYTES */
} comm_peer_t;

/* A setting every rank must share (both ends of an edge act on it). */
static rcc_result_t comm_alike(const char *name, int64_t theirs, int64_t mine, int rank, int me)
{
    if (theirs == mine)
        return RCC_SUCCESS;
    return rcci_error(RCC_ERR_INVALID_USAGE,
                      "%s is %lld on rank %d but %lld here (rank %d): set it alike everywhere",
                      name, (long long)theirs, rank, (long long)mine, me);
}

static const char *comm_algo_text(int32_t algo)
{
    return algo < 0 ? "auto" : rcci_allreduce_algo_name(algo);
}

/* The settings of rank r that must equal this rank's (comm_peer_t). */
static rcc_result_t comm_alike_all(const comm_peer_t *theirs, const comm_peer_t *me, int r,
                                   int rank)
{
    if (theirs->algo != me->algo)
        return rcci_error(
            RCC_ERR_INVALID_USAGE,
            "RCC_ALGO is %s on rank %d but %s here (rank %d): set it alike everywhere",
            comm_algo_text(theirs->algo), r, comm_algo_text(me->algo), rank);
    const struct {
        const char *name;
        int64_t theirs, mine;
    } alike[] = {
        {"RCC_NSOCKS", theirs->nsocks, me->nsocks},
        {"RCC_NSOCKS_MIN_BYTES", theirs->nsocks_min_bytes, me->nsocks_min_bytes},
        {"RCC_DEVICE_CHUNK_BYTES", theirs->dev_chunk_bytes, me->dev_chunk_bytes},
        {"RCC_CUDAIPC_WINDOW_BYTES", theirs->window_bytes, me->window_bytes},
        {"RCC_DEVICE_PIPELINE (resolved)", theirs->dev_pipeline, me->dev_pipeline},
        {"RCC_RD_LEADERS", theirs->rd_leaders, me->rd_leaders},
        {"RCC_RD_MOVE_LEADERS", theirs->rd_move, me->rd_move},
        {"the chunk size (RCC_CHUNK_BYTES or config.chunk_bytes, a multiple of 64)",
         theirs->chunk_bytes, me->chunk_bytes},
        {"RCC_CHECKSUM", theirs->checksum, me->checksum},
        {"RCC_SMALL_MAX_BYTES", theirs->small_max_bytes, me->small_max_bytes},
        {"RCC_MID_MAX_BYTES", theirs->mid_max_bytes, me->mid_max_bytes},
        {"RCC_FUSION_BYTES", theirs->fusion_bytes, me->fusion_bytes},
        {"RCC_RING_PASS_BYTES", theirs->ring_pass_bytes, me->ring_pass_bytes},
    };
    for (size_t i = 0; i < sizeof alike / sizeof alike[0]; i++) {
        rcc_result_t res = comm_alike(alike[i].name, alike[i].theirs, alike[i].mine, r, rank);
        if (res != RCC_SUCCESS)
            return res;
    }
    return RCC_SUCCESS;
}

/* Connection tags of a ring edge's connections: the first is tag 0, the
 * others stay clear of the point-to-point lanes' small tags. */
#define COMM_RING_TAG(k) ((k) == 0 ? 0u : 0x100u + (uint32_t)(k))

static rcc_result_t comm_read_config(struct rcc_comm *comm, const rcc_config_t *config)
{
    comm->timeout_ns = rcci_param_int(RCCI_PARAM_TIMEOUT) * 1000000000ll;
    comm->chunk_bytes = (size_t)rcci_param_int(RCCI_PARAM_CHUNK_BYTES);
    comm->dev_chunk_bytes = (size_t)rcci_param_int(RCCI_PARAM_DEVICE_CHUNK_BYTES) & ~(size_t)63;
    comm->ring_pass_bytes = (size_t)rcci_param_int(RCCI_PARAM_RING_PASS_BYTES);
    comm->slots = (int)rcci_param_int(RCCI_PARAM_SLOTS);
    const char *algo = rcci_param_str(RCCI_PARAM_ALGO);
    comm->algo_forced = rcci_allreduce_algo_named(algo, &comm->algo);
    if (comm->algo_forced < 0)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "RCC_ALGO='%s' is not an algorithm: use auto, ring, rabenseifner, "
                          "twostep, rd, direct or star",
                          algo);
    rcc_result_t res = rcci_config_check(config, &comm->timeout_ns, &comm->chunk_bytes);
    /* Slots lie chunk_bytes apart: a multiple of 64 keeps every slot aligned
     * for any element type and for vector loads, on the host and the GPU. */
    comm->chunk_bytes &= ~(size_t)63;
    return res;
}

rcc_result_t rcci_config_check(const rcc_config_t *config, int64_t *timeout_ns, size_t *chunk_bytes)
{
    if (!config)
        return RCC_SUCCESS;
    /* `size` first: nothing past the caller's size is read, not even magic. */
    if (config->size < offsetof(rcc_config_t, magic) + sizeof config->magic)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "config was not initialised with RCC_CONFIG_INITIALIZER (size %zu)",
                          config->size);
    if (config->magic != RCC_CONFIG_MAGIC ||
        config->size < offsetof(rcc_config_t, chunk_bytes) + sizeof config->chunk_bytes)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "config was not initialised with RCC_CONFIG_INITIALIZER (magic 0x%x, "
                          "size %zu)",
                          config->magic, config->size);
    if (config->blocking != 1)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "config.blocking=%d: only blocking (1) "
                          "initialisation is supported",
                          config->blocking);
    if (config->timeout_ms < 0)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "config.timeout_ms=%d is negative",
                          config->timeout_ms);
    if (config->chunk_bytes != 0 && config->chunk_bytes < 64)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "config.chunk_bytes=%d: use 0 (default) or at least 64",
                          config->chunk_bytes);
    if (config->timeout_ms > 0)
        *timeout_ns = config->timeout_ms * 1000000ll;
    if (config->chunk_bytes > 0)
        *chunk_bytes = (size_t)config->chunk_bytes;
    return RCC_SUCCESS;
}

/* The peers table as the transports see it. */
static rcc_result_t comm_peer_info(const struct rcc_comm *comm, const comm_peer_t *peers,
                                   rcci_peer_info_t **info, uint32_t **transports)
{
    size_t n = comm->nranks > 0 ? (size_t)comm->nranks : 1;
    *info = calloc(n, sizeof **info);
    *transports = calloc(n, sizeof **transports);
    if (!*info || !*transports)
        return rcci_error(RCC_ERR_NO_MEMORY, "peer tables for %d ranks", comm->nranks);
    for (int r = 0; r < comm->nranks; r++) {
        (*info)[r] = (rcci_peer_info_t){.rank = r,
                                        .host_hash = peers[r].host_hash,
                                        .cuda_device = peers[r].cuda_device,
                                        .pid = peers[r].pid};
        (*transports)[r] = peers[r].transports;
    }
    return RCC_SUCCESS;
}

/* Recursive doubling's leaders: RCC_RD_LEADERS (a power of two; more than
 * the ranks means all of them), else by the hosts' CPUs. */
static rcc_result_t comm_choose_rd_leaders(struct rcc_comm *comm, const comm_peer_t *peers)
{
    int n = comm->nranks, asked = peers[comm->rank].rd_leaders;
    if (asked & (asked - 1))
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "RCC_RD_LEADERS=%d is not a power of two (0 for auto)", asked);
    uint64_t *host = malloc((size_t)n * sizeof *host);
    int *cpus = malloc((size_t)n * sizeof *cpus);
    if (!host || !cpus) {
        free(host), free(cpus);
        return rcci_error(RCC_ERR_NO_MEMORY, "host tables for %d ranks", n);
    }
    for (int r = 0; r < n; r++)
        host[r] = peers[r].host_hash, cpus[r] = peers[r].cpus;
    int all = 1, here = 0;
    while (2 * all <= n)
        all *= 2;
    int p = asked > 0 ? (asked < all ? asked : all) : rcci_rd_leaders(n, host, cpus);
    for (int r = 0; r < n; r++)
        here += host[r] == host[comm->rank];
    /* One leader has nobody to share a CPU with. */
    int move = p < all && p > 1 && peers[comm->rank].rd_move;
    if (p < all)
        RCC_INFO("small allreduces: %d of %d ranks run recursive doubling, the others hand them "
                 "their inputs (%s; this host: %d ranks, %d CPUs)%s",
                 p, n, asked ? "RCC_RD_LEADERS" : "a host has more ranks than CPUs", here,
                 (int)peers[comm->rank].cpus,
                 move ? "; a leader sharing a CPU with another hands the lead on" : "");
    comm->rd_leaders = p;
    free(cpus);
    if (move) {
        comm->rd_lead = malloc((size_t)p * sizeof *comm->rd_lead);
        if (!comm->rd_lead) {
            free(host);
            return rcci_error(RCC_ERR_NO_MEMORY, "leader table of %d groups", p);
        }
        for (int g = 0; g < p; g++) /* at first each group's last rank leads */
            comm->rd_lead[g] = rcci_rd_group_start(n, p, g + 1) - 1;
        comm->rd_host = host, host = NULL;
    }
    free(host);
    return RCC_SUCCESS;
}

/* The ring connect to `next` (`name`) failed with `res`. A next rank whose
 * own set-up failed has closed its listener and sends its reason back
 * through the bootstrap ring a moment later: that reason, where it comes,
 * says where the failure began (a killed root, say). Otherwise the error
 * names the rank, since the transport knew only its address. */
static rcc_result_t comm_connect_failed(struct rcc_comm *comm, rcc_result_t res, int next,
                                        const char *name)
{
    char why[RCCI_ERR_TEXT_BYTES];
    snprintf(why, sizeof why, "%s", rcci_tls_error());
    if (res == RCC_ERR_PEER_LOST) {
        rcc_result_t told = rcci_bootstrap_await_notice(comm->bootstrap, COMM_NOTICE_WAIT_NS);
        if (told != RCC_SUCCESS)
            return told;
    }
    return rcci_error(res, "connecting to %s%s: %s", name, next == 0 ? " (the root)" : "", why);
}

static rcc_result_t comm_connect_ring(struct rcc_comm *comm)
{
    rcc_result_t res = RCC_SUCCESS;
    int64_t deadline = rcci_now_ns() + comm->timeout_ns;
    comm_peer_t *peers = NULL;
    rcci_peer_info_t *info = NULL;
    uint32_t *trs = NULL;
    char *handles = NULL;
    rcci_listener_t *listener = NULL;
    int next = (comm->rank + 1) % comm->nranks,
        prev = (comm->rank + comm->nranks - 1) % comm->nranks;
    const char *only = rcci_param_str(RCCI_PARAM_TRANSPORT);
    char why[RCCI_ERR_TEXT_BYTES / 2] = ""; /* the last transport's reason not to run */

    rcci_transport_env_t env = {
        .rank = comm->rank, .nranks = comm->nranks, .comm_id = comm->comm_id};
    memcpy(env.secret, rcci_bootstrap_secret(comm->bootstrap), sizeof env.secret);
    const rcci_addr_t *local = rcci_bootstrap_local_addr(comm->bootstrap);
    memcpy(&env.local_addr, &local->u, local->len);
    env.local_addr_len = local->len;
    env.describe_sig = rcci_sig_describe;

    peers = calloc((size_t)comm->nranks, sizeof *peers);
    handles = calloc((size_t)comm->nranks, RCCI_HANDLE_BYTES);
    if (!peers || !handles)
        RCC_FAIL(RCC_ERR_NO_MEMORY, "peer tables for %d ranks", comm->nranks);
    comm_peer_t *me = &peers[comm->rank];
    me->rank = comm->rank;
    me->host_hash = comm_host_hash();
    me->pid = (int32_t)getpid();
    me->nsocks = (int32_t)rcci_param_int(RCCI_PARAM_NSOCKS);
    me->nsocks_min_bytes = rcci_param_int(RCCI_PARAM_NSOCKS_MIN_BYTES);
    me->dev_chunk_bytes = (int64_t)comm->dev_chunk_bytes;
    me->window_bytes = rcci_param_int(RCCI_PARAM_CUDAIPC_WINDOW_BYTES);
    me->dev_pipeline = rcci_stream_device_pipeline();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    me->cpus = cpus > 0 && cpus < INT32_MAX ? (int32_t)cpus : 1;
    me->rd_leaders = (int32_t)rcci_param_int(RCCI_PARAM_RD_LEADERS);
    me->rd_move = (int32_t)rcci_param_int(RCCI_PARAM_RD_MOVE_LEADERS);
    me->chunk_bytes = (int64_t)comm->chunk_bytes;
    me->algo = comm->algo_forced ? (int32_t)comm->algo : -1;
    me->checksum = (int32_t)rcci_param_int(RCCI_PARAM_CHECKSUM);
    me->small_max_bytes = rcci_param_int(RCCI_PARAM_SMALL_MAX_BYTES);
    me->mid_max_bytes = rcci_param_int(RCCI_PARAM_MID_MAX_BYTES);
    me->fusion_bytes = rcci_param_int(RCCI_PARAM_FUSION_BYTES);
    me->ring_pass_bytes = (int64_t)comm->ring_pass_bytes;
    /* A GPU here: device buffers may then move GPU to GPU (devring.c). */
    me->cuda_device = rcci_stream_usable() ? rcci_devapi()->current_device() : -1;
    comm->cuda_device = me->cuda_device;
    /* A transport that cannot start here is no failure of the communicator:
     * its reason must not linger as this thread's last error and cause. */
    char saved_text[RCCI_ERR_TEXT_BYTES], saved_cause[RCCI_ERR_TEXT_BYTES];
    snprintf(saved_text, sizeof saved_text, "%s", rcci_tls_error());
    snprintf(saved_cause, sizeof saved_cause, "%s", rcci_tls_cause());
    for (int i = 0; rcci_transports[i] && i < RCCI_COMM_MAX_TRANSPORTS; i++) {
        const rcci_transport_t *tr = rcci_transports[i];
        if (*only && strcmp(only, tr->name) != 0)
            continue;
        if (tr->abi != RCCI_TRANSPORT_ABI || tr->size < sizeof(rcci_transport_t)) {
            RCC_WARN("transport %s was built for ops table ABI %u; skipped", tr->name, tr->abi);
            continue;
        }
        if (tr->init(&env, &comm->tctx[i]) == RCC_SUCCESS) {
            me->transports |= 1u << i;
        } else {
            RCC_INFO("transport %s unavailable: %s", tr->name, rcci_tls_error());
            snprintf(why, sizeof why, "%s unavailable: %s", tr->name, rcci_tls_error());
        }
    }
    if (!me->transports && *only && !why[0]) {
        size_t used = 0;
        for (int i = 0; rcci_transports[i] && used < sizeof why; i++)
            used += (size_t)snprintf(why + used, sizeof why - used, "%s%s", i ? ", " : "",
                                     rcci_transports[i]->name);
        RCC_FAIL(RCC_ERR_INVALID_ARGUMENT,
                 "RCC_TRANSPORT=%s names no transport built here (built: %s)", only, why);
    }
    if (me->transports)
        rcci_tls_error_restore(saved_text, saved_cause);
    if (!me->transports)
        RCC_FAIL(RCC_ERR_UNSUPPORTED, "no transport is usable%s%s%s%s%s",
                 *only ? " (RCC_TRANSPORT=" : "", only, *only ? "; " : "", *only ? why : "",
                 *only ? ")" : "");
    RCC_CHECK(rcci_bootstrap_allgather(comm->bootstrap, peers, sizeof *peers));
    for (int r = 0; r < comm->nranks; r++)
        RCC_CHECK(comm_alike_all(&peers[r], me, r, comm->rank));
    comm->dev_pipeline = me->dev_pipeline;
    RCC_CHECK(comm_choose_rd_leaders(comm, peers));

    int send_tr, recv_tr;
    char send_why[128], recv_why[128];
    RCC_CHECK(comm_peer_info(comm, peers, &info, &trs));
    RCC_CHECK(rcci_pick_transport(comm, info, trs, next, 0, &send_tr, send_why, sizeof send_why));
    RCC_CHECK(rcci_pick_transport(comm, info, trs, prev, 0, &recv_tr, recv_why, sizeof recv_why));
    comm->send_link = (rcci_link_t){.tr = rcci_transports[send_tr],
                                    .tctx = comm->tctx[send_tr],
                                    .nconns = me->nsocks,
                                    .spread_min_bytes = (size_t)me->nsocks_min_bytes,
                                    .peer = next};
    comm->recv_link = (rcci_link_t){.tr = rcci_transports[recv_tr],
                                    .tctx = comm->tctx[recv_tr],
                                    .nconns = me->nsocks,
                                    .spread_min_bytes = (size_t)me->nsocks_min_bytes,
                                    .peer = prev};
    RCC_CHECK(comm->recv_link.tr->listen(
        comm->recv_link.tctx, handles + (size_t)comm->rank * RCCI_HANDLE_BYTES, &listener));
    RCC_CHECK(rcci_bootstrap_allgather(comm->bootstrap, handles, RCCI_HANDLE_BYTES));
    char nname[128], pname[128];
    rcci_bootstrap_peer_name(comm->bootstrap, next, nname, sizeof nname);
    rcci_bootstrap_peer_name(comm->bootstrap, prev, pname, sizeof pname);
    /* Connect first, then accept: connects complete in the kernel's backlog. */
    for (int k = 0; k < comm->send_link.nconns; k++) {
        res = comm->send_link.tr->connect(comm->send_link.tctx,
                                          handles + (size_t)next * RCCI_HANDLE_BYTES,
                                          COMM_RING_TAG(k), deadline, &comm->send_link.conns[k]);
        if (res != RCC_SUCCESS) {
            res = comm_connect_failed(comm, res, next, nname);
            goto out;
        }
    }
    /* In slices: between them the bootstrap ring tells whether a rank
     * failed or left meanwhile, rather than waiting out the timeout. */
    for (int k = 0; k < comm->recv_link.nconns; k++) {
        for (;;) {
            int64_t slice = rcci_now_ns() + COMM_SETUP_SLICE_NS;
            res = comm->recv_link.tr->accept(listener, prev, COMM_RING_TAG(k),
                                             slice < deadline ? slice : deadline,
                                             &comm->recv_link.conns[k]);
            if (res != RCC_ERR_TIMEOUT || slice >= deadline)
                break;
            RCC_CHECK(rcci_bootstrap_check(comm->bootstrap));
        }
        if (res != RCC_SUCCESS)
            goto out;
    }
    char edges[96] = "1 connection per edge";
    if (me->nsocks > 1)
        snprintf(edges, sizeof edges,
                 "%d connections per edge (channels) for operations of %lld bytes or more, else 1",
                 me->nsocks, (long long)me->nsocks_min_bytes);
    RCC_INFO("ring: sends to %s via %s (%s), receives from %s via %s (%s); %s", nname,
             comm->send_link.tr->name, send_why, pname, comm->recv_link.tr->name, recv_why, edges);
    /* The listener stays open for point-to-point connections, made on first
     * use. They run over this rank's receive transport (one transport per
     * job today; per-peer choice arrives with the second transport). */
    rcci_p2p_links_t *p2p = &comm->p2p;
    p2p->tr = comm->recv_link.tr;
    p2p->tctx = comm->recv_link.tctx;
    for (int l = 0; l < RCCI_P2P_LANES; l++) {
        rcci_p2p_lane_t *lane = &p2p->lane[l];
        size_t n = (size_t)comm->nranks;
        lane->out = calloc(n, sizeof *lane->out);
        lane->in = calloc(n, sizeof *lane->in);
        lane->out_seq = calloc(4 * n, sizeof *lane->out_seq); /* one block, four counters */
        if (!lane->out || !lane->in || !lane->out_seq)
            RCC_FAIL(RCC_ERR_NO_MEMORY, "point-to-point tables for %d ranks", comm->nranks);
        lane->in_seq = lane->out_seq + n;
        lane->out_posted = lane->out_seq + 2 * n;
        lane->in_posted = lane->out_seq + 3 * n;
    }
    p2p->listener = listener;
    listener = NULL;
    p2p->handles = handles;
    handles = NULL;
    RCC_CHECK(rcci_devring_connect(comm, info, trs));
out:
    if (res != RCC_SUCCESS)
        rcci_error_prefix("connecting the ring: ");
    if (listener)
        comm->recv_link.tr->close_listener(listener);
    free(peers);
    free(info);
    free(trs);
    free(handles);
    return res;
}

static void comm_free(struct rcc_comm *comm)
{
    if (!comm)
        return;
    /* GPU work given up on after a failure may still write into the device
     * ring's slots and windows: unmapped under it, the GPU would fault,
     * breaking the application's CUDA context. Waited for within the
     * timeout; past it, the device ring stays open (leaked). */
    int quiet = rcci_streams_quiesce(comm, rcci_now_ns() + comm->timeout_ns);
    if (!quiet)
        RCC_WARN("GPU work queued after a failure has not run within %.0f s; the device ring's "
                 "memory stays mapped",
                 comm->timeout_ns / 1e9);
    rcci_p2p_close(comm);
    if (comm->p2p.listener)
        comm->p2p.tr->close_listener(comm->p2p.listener);
    free(comm->p2p.handles);
    for (int l = 0; l < RCCI_P2P_LANES; l++) {
        free(comm->p2p.lane[l].out);
        free(comm->p2p.lane[l].in);
        free(comm->p2p.lane[l].out_seq); /* holds all four counters */
    }
    rcci_ring_close(comm, quiet ? 0 : RCCI_RING_LEAVE_DEVICE);
    rcci_timeline_close(comm->tl);
    rcci_streams_free(comm); /* its staging first: registered with the transports */
    rcci_memreg_free_all(comm);
    for (int i = 0; rcci_transports[i] && i < RCCI_COMM_MAX_TRANSPORTS; i++)
        if (comm->tctx[i])
            rcci_transports[i]->fini(comm->tctx[i]);
    rcci_bootstrap_destroy(comm->bootstrap);
    if (comm->epoll_fd >= 0)
        close(comm->epoll_fd);
    if (comm->wake_fd >= 0)
        close(comm->wake_fd);
    free(comm->slot_mem);
    free(comm->stage_mem);
    free(comm->scratch);
    free(comm->heard);
    free(comm->heard_valid);
    free(comm->fusion_cache);
    free(comm->rd_lead);
    free(comm->rd_host);
    pthread_mutex_destroy(&comm->lock);
    pthread_mutex_destroy(&comm->reg_lock);
    pthread_cond_destroy(&comm->cond);
    free(comm);
}

static rcc_result_t comm_new(int rank, int nranks, uint64_t comm_id, const rcc_config_t *config,
                             struct rcc_comm **out)
{
    struct rcc_comm *comm = calloc(1, sizeof *comm);
    if (!comm)
        return rcci_error(RCC_ERR_NO_MEMORY, "communicator");
    comm->rank = rank;
    comm->nranks = nranks;
    comm->comm_id = comm_id;
    comm->epoll_fd = comm->wake_fd = -1;
    comm->cuda_device = -1; /* set with the peers' table; a lone rank's stream state takes the
                             * device current at its first stream call */
    pthread_mutex_init(&comm->lock, NULL);
    pthread_mutex_init(&comm->reg_lock, NULL);
    rcci_cond_init_monotonic(&comm->cond);
    rcci_log_set_rank(rank);
    *out = comm;
    return comm_read_config(comm, config);
}

/* Everything after the bootstrap: transports, ring connections, slots, the
 * progress thread. On failure the caller frees the communicator. */
static rcc_result_t comm_setup(struct rcc_comm *comm)
{
    rcc_result_t res = RCC_SUCCESS;
    comm->dev_pipeline = rcci_stream_device_pipeline(); /* with peers: agreed on below */
    if (comm->nranks > 1) {
        RCC_CHECK(comm_connect_ring(comm));
        RCC_CHECK(rcci_bootstrap_barrier(comm->bootstrap));
        size_t slot_bytes = (size_t)comm->slots * comm->chunk_bytes;
        if (posix_memalign((void **)&comm->slot_mem, 4096, slot_bytes) ||
            posix_memalign((void **)&comm->stage_mem, 4096, slot_bytes))
            RCC_FAIL(RCC_ERR_NO_MEMORY, "%d receive slots of %zu bytes", comm->slots,
                     comm->chunk_bytes);
        /* Partial results are sent from it: sent without a copy where the
         * ring's transport can (ibverbs). */
        RCC_CHECK(rcci_memreg_add(comm, comm->stage_mem, slot_bytes, 1, NULL));
    }
    /* Every rank left the barrier above within a message's latency of the
     * others: the moment the timeline merge aligns the ranks' clocks on. */
    comm->tl = rcci_timeline_open(comm);
    RCCI_TL(comm, rcci_tl_sync(comm->tl));
    RCC_CHECK(rcci_progress_start(comm));
    char addr[80];
    rcci_addr_format(rcci_bootstrap_local_addr(comm->bootstrap), addr, sizeof addr);
    if (comm->rank == 0)
        RCC_INFO("ringcc %s (features: CUDA %s, verbs %s): communicator %016llx of %d ranks; "
                 "chunk %zu bytes, %d slots, allreduce algorithm %s (rd up to %lld bytes, "
                 "rabenseifner up to %lld), fusion up to %lld bytes, timeout %.0f s",
                 RCC_VERSION_STRING, RCC_HAVE_CUDA ? "built" : "not built",
                 RCC_HAVE_IBVERBS ? "built" : "not built", (unsigned long long)comm->comm_id,
                 comm->nranks, comm->chunk_bytes, comm->slots, rcci_param_str(RCCI_PARAM_ALGO),
                 (long long)rcci_param_int(RCCI_PARAM_SMALL_MAX_BYTES),
                 (long long)rcci_param_int(RCCI_PARAM_MID_MAX_BYTES),
                 (long long)rcci_param_int(RCCI_PARAM_FUSION_BYTES), comm->timeout_ns / 1e9);
    /* Every rank: where it is, since ranks on other hosts pick other interfaces. */
    RCC_INFO("rank %d of %d up: interface %s, address %s", comm->rank, comm->nranks,
             rcci_bootstrap_ifname(comm->bootstrap), addr);
out:
    return res;
}

static void comm_discard(struct rcc_comm *comm)
{
    if (!comm)
        return;
    rcci_progress_stop(comm);
    comm_free(comm);
}

static rcc_result_t comm_init(rcc_comm_t *out, int nranks, const rcci_id_t *id, int rank,
                              const rcc_config_t *config)
{
    rcc_result_t res = RCC_SUCCESS;
    struct rcc_comm *comm = NULL;
    if (!out)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "comm (the output pointer) is NULL");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "rank %d of %d: need nranks >= 1 and 0 <= rank < nranks", rank, nranks);
    RCC_CHECK(rcci_params_load());
    RCC_CHECK(comm_new(rank, nranks, id->comm_id, config, &comm));
    RCC_CHECK(rcci_bootstrap_init(id, rank, nranks, comm->timeout_ns,
                                  rcci_param_str(RCCI_PARAM_SOCKET_IFNAME), &comm->bootstrap));
    RCC_CHECK(comm_setup(comm));
    rcci_live_add(comm);
    *out = comm;
    return RCC_SUCCESS;
out:
    if (comm) {
        rcci_bootstrap_fail(comm->bootstrap, rcci_tls_cause());
        /* Ring neighbours that finished their set-up already may be in a
         * collective with this rank: tell them why it goes. */
        char text[RCCI_ERR_TEXT_BYTES + 48];
        snprintf(text, sizeof text, "rank %d failed in its set-up: %s", rank, rcci_tls_error());
        rcci_ring_notify(comm, res, text);
    }
    rcci_error_prefix("rank %d of %d: ", rank, nranks);
    comm_discard(comm);
    return res;
}

rcc_result_t rcc_comm_split(rcc_comm_t parent, int color, int key, rcc_comm_t *newcomm)
{
    rcc_result_t res = RCC_SUCCESS;
    struct rcc_comm *comm = NULL;
    rcci_bootstrap_t *child = NULL;
    rcci_tls_error_clear();
    if (!newcomm)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_comm_split: newcomm is NULL");
    *newcomm = NULL;
    res = rcci_live_check(parent, "rcc_comm_split");
    if (res != RCC_SUCCESS)
        return res;
    if (color < RCC_SPLIT_NOCOLOR)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "rcc_comm_split: color %d is negative (RCC_SPLIT_NOCOLOR is %d)", color,
                          RCC_SPLIT_NOCOLOR);
    *newcomm = NULL;
    rcci_comm_enter(parent);
    /* Every rank of the parent numbers its splits alike, so the n-th split's
     * communicators get the same ids everywhere. */
    uint64_t comm_id = rcci_mix64(parent->comm_id ^ rcci_mix64(++parent->splits) ^
                                  rcci_mix64((uint64_t)(uint32_t)color + 0x5b1dull));
    RCC_CHECK(rcci_bootstrap_split(parent->bootstrap, color, key, comm_id, &child));
    if (!child)
        goto out; /* RCC_SPLIT_NOCOLOR: took part, joined nothing */
    rcc_config_t config = RCC_CONFIG_INITIALIZER;
    config.timeout_ms = (int)(parent->timeout_ns / 1000000);
    config.chunk_bytes = (int)parent->chunk_bytes;
    RCC_CHECK(comm_new(rcci_bootstrap_rank(child), rcci_bootstrap_nranks(child), comm_id, &config,
                       &comm));
    comm->bootstrap = child;
    child = NULL;
    RCC_CHECK(comm_setup(comm));
    rcci_live_add(comm);
    *newcomm = comm;
    comm = NULL;
out:
    if (res != RCC_SUCCESS) {
        rcci_bootstrap_fail(child, rcci_tls_cause());
        rcci_bootstrap_fail(comm ? comm->bootstrap : NULL, rcci_tls_cause());
    }
    rcci_bootstrap_destroy(child);
    comm_discard(comm);
    rcci_log_set_rank(parent->rank);
    return rcci_comm_leave(parent, res);
}

rcc_result_t rcc_comm_init_rank(rcc_comm_t *comm, int nranks, rcc_unique_id_t uid, int rank,
                                const rcc_config_t *config)
{
    rcci_tls_error_clear();
    rcci_id_t id;
    rcc_result_t res = rcci_id_decode(&uid, &id);
    return res != RCC_SUCCESS ? res : comm_init(comm, nranks, &id, rank, config);
}

/* ---- initialisation from the environment ------------------------------------ */

static const char *comm_getenv(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

rcc_result_t rcc_comm_init_env(rcc_comm_t *comm, const rcc_config_t *config)
{
    static atomic_uint generation;
    rcc_result_t res = RCC_SUCCESS;
    rcci_env_job_t job;
    int fd = -1;
    rcci_tls_error_clear();
    if (!comm)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "comm (the output pointer) is NULL");
    RCC_CHECK(rcci_params_load());
    res = rcci_env_job(comm_getenv, NULL, &generation, &job);
    if (job.source)
        rcci_log_set_rank(job.rank);
    if (job.secret_from == RCCI_SECRET_JOB_ID || job.secret_from == RCCI_SECRET_ROOT)
        RCC_INFO("RCC_SECRET is not set: the job secret is derived from the %s; set RCC_SECRET "
                 "(64 hex digits) to keep strangers out",
                 job.secret_from == RCCI_SECRET_JOB_ID ? "launcher's job id and the root address"
                                                       : "root address only");
    if (res != RCC_SUCCESS)
        goto out;
    if (job.rank == 0) {
        /* Rank 0 serves the rendezvous on the root's port, on every address:
         * the root's name may resolve to any of this host's addresses. */
        const rcci_addr_t *root = &job.id.root;
        rcci_addr_t any = {0}, bound;
        any.u.sa.sa_family = root->u.sa.sa_family;
        any.len = root->len;
        if (any.u.sa.sa_family == AF_INET6)
            any.u.in6.sin6_addr = in6addr_any;
        rcci_addr_set_port(&any, rcci_addr_port(root));
        res = rcci_sock_listen(&any, NULL, &fd, &bound);
        if (res != RCC_SUCCESS) {
            rcci_error_prefix("rank 0 serves the rendezvous at %s and ", job.root);
            goto out;
        }
        RCC_CHECK(rcci_root_start(fd, &job.id, rcci_param_int(RCCI_PARAM_TIMEOUT) * 1000000000ll));
        fd = -1;
    }
    RCC_INFO("rank %d of %d from %s, rendezvous at %s", job.rank, job.nranks, job.source, job.root);
    return comm_init(comm, job.nranks, &job.id, job.rank, config);
out:
    if (fd >= 0)
        close(fd);
    return res;
}

/* ---- teardown and queries --------------------------------------------------- */

rcc_result_t rcc_comm_destroy(rcc_comm_t comm)
{
    if (!comm)
        return RCC_SUCCESS;
    if (!rcci_live_remove(comm))
        return rcci_live_check(comm, "rcc_comm_destroy");
    rcci_progress_stop(comm); /* runs queued operations to their end first */
    if (comm->broken == RCC_SUCCESS) {
        /* Goodbye on every connection: a peer that probes its idle
         * communicator is not told it broke; one that needs this rank is
         * told it left. */
        char self[128], text[200];
        rcci_bootstrap_peer_name(comm->bootstrap, comm->rank, self, sizeof self);
        snprintf(text, sizeof text, "%s left: it destroyed its communicator", self);
        rcci_ring_notify(comm, RCC_SUCCESS, text);
        rcci_p2p_notify(comm, RCC_SUCCESS, text);
    }
    comm_free(comm);
    return RCC_SUCCESS;
}

rcc_result_t rcc_comm_abort(rcc_comm_t comm)
{
    if (!comm)
        return RCC_SUCCESS;
    if (!rcci_live_remove(comm))
        return rcci_live_check(comm, "rcc_comm_abort");
    rcci_progress_abort(comm);
    /* Callers blocked in an operation return RCC_ERR_ABORTED before the memory
     * goes; the progress thread ends their operations promptly. */
    pthread_mutex_lock(&comm->lock);
    int64_t deadline = rcci_now_ns() + comm->timeout_ns;
    while (comm->callers > 0 && rcci_now_ns() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 10000000;
        if (ts.tv_nsec >= 1000000000)
            ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&comm->cond, &comm->lock, &ts);
    }
    int inside = comm->callers;
    pthread_mutex_unlock(&comm->lock);
    rcci_progress_stop(comm);
    if (inside > 0) { /* freeing would pull the memory from under them: keep it */
        rcc_result_t res = rcci_error(RCC_ERR_TIMEOUT,
                                      "rcc_comm_abort: %d call%s still inside after %.0f s; the "
                                      "communicator is ended but its memory is left allocated",
                                      inside, inside == 1 ? " is" : "s are", comm->timeout_ns / 1e9);
        RCC_WARN("%s", rcci_tls_error());
        return res;
    }
    comm_free(comm);
    return RCC_SUCCESS;
}

rcc_result_t rcc_comm_rank(const rcc_comm_t comm, int *rank)
{
    if (!rank || !rcci_live(comm))
        return rank ? rcci_live_check(comm, "rcc_comm_rank")
                    : rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_comm_rank: rank is NULL");
    *rank = comm->rank;
    return RCC_SUCCESS;
}

rcc_result_t rcc_comm_size(const rcc_comm_t comm, int *size)
{
    if (!size || !rcci_live(comm))
        return size ? rcci_live_check(comm, "rcc_comm_size")
                    : rcci_error(RCC_ERR_INVALID_ARGUMENT, "rcc_comm_size: size is NULL");
    *size = comm->nranks;
    return RCC_SUCCESS;
}

rcc_result_t rcc_comm_get_async_error(rcc_comm_t comm, rcc_result_t *async_error)
{
    if (!async_error || !rcci_live(comm))
        return async_error ? rcci_live_check(comm, "rcc_comm_get_async_error")
                           : rcci_error(RCC_ERR_INVALID_ARGUMENT,
                                        "rcc_comm_get_async_error: async_error is NULL");
    *async_error = rcci_progress_health(comm);
    if (*async_error != RCC_SUCCESS) {
        pthread_mutex_lock(&comm->lock);
        snprintf(comm->last_error, sizeof comm->last_error, "%s", comm->broken_text);
        pthread_mutex_unlock(&comm->lock);
    }
    return RCC_SUCCESS;
}

/* A communicator that is not live has no text of its own: the thread's
 * last error (which says so, after a refused call) stands in. */
const char *rcc_last_error(rcc_comm_t comm)
{
    /* A copy taken under the lock: another thread's failing call may
     * rewrite the communicator's text while this caller reads it. */
    static _Thread_local char copy[RCCI_ERR_TEXT_BYTES];
    if (!comm || !rcci_live(comm))
        return rcci_tls_error();
    pthread_mutex_lock(&comm->lock);
    memcpy(copy, comm->last_error, sizeof copy);
    pthread_mutex_unlock(&comm->lock);
    return copy;
}

rcc_result_t rcci_comm_enter(struct rcc_comm *comm)
{
    pthread_mutex_lock(&comm->lock);
    comm->callers++;
    pthread_mutex_unlock(&comm->lock);
    return RCC_SUCCESS;
}

rcc_result_t rcci_comm_leave(struct rcc_comm *comm, rcc_result_t res)
{
    comm_set_error(comm, res);
    pthread_mutex_lock(&comm->lock);
    comm->callers--;
    if (atomic_load(&comm->aborted)) /* only rcc_comm_abort waits for callers */
        pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
    return res;
}
