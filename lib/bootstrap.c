/* Rendezvous at a root, then a ring of control sockets between the ranks. */
#include "bootstrap.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RCCI_LOG_SUBSYS RCCI_SUBSYS_BOOTSTRAP /* log.h: the subsystem of this file's lines */
#include "clock.h"
#include "err.h"
#include "log.h"

#define ID_MAGIC 0x55434352u /* "RCCU" */
#define ID_VERSION 1
#define WIRE_ADDR_BYTES RCCI_BOOTSTRAP_ADDR_BYTES
#define ROOT_REPLY_TEXT (RCCI_ROOT_REPLY_BYTES - 8)
#define ROOT_REPLY_BYTES RCCI_ROOT_REPLY_BYTES
#define ROOT_GRACE_NS (10ll * 1000000000) /* ranks wait this much beyond the root's deadline */
#define REPLY_SEND_NS (5ll * 1000000000)
#define MAX_RANKS RCCI_BOOTSTRAP_MAX_RANKS
/* Each allgather step's message: kind u32, length u32, then the block; or,
 * from a rank whose set-up failed, the origin of the failure (u32 rank) and
 * its text, so that every rank names the cause rather than the neighbour
 * that closed its socket (the notice travels round the ring). */
#define BS_MSG_HEAD 8
#define BS_MSG_BLOCK 0x4b4c4252u  /* "RBLK" */
#define BS_MSG_FAILED 0x4c494652u /* "RFIL" */
#define BS_NOTICE_TEXT 400
#define BS_NOTICE_NS (1000ll * 1000000) /* for the rest of a notice already sent */
#define BS_LATE_NOTICE_NS (500ll * 1000000) /* for a silent neighbour's late notice */
#define BS_TAKE_PREV_NS (200ll * 1000000) /* a failing rank takes its previous rank's edge */

struct rcci_bootstrap {
    int rank, nranks;
    int64_t timeout_ns;
    rcci_addr_t local;
    char ifname[64];
    rcci_acceptor_t *acceptor;
    int next_fd, prev_fd;
    rcci_addr_t *peers; /* every rank's bootstrap listen address */
    uint8_t secret[RCCI_SOCK_SECRET_BYTES];
    uint64_t comm_id;
    int out_cut;     /* a message to next was cut short, or a notice went: send nothing more */
    int back_sent;   /* the notice went back to the previous rank too */
    int failed_rank; /* where the failure a notice told of began; -1 when none came */
    char failed_text[BS_NOTICE_TEXT];
};

/* ---- fixed-layout encodings ---------------------------------------------- */

static void bs_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t bs_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void bs_put_addr(uint8_t *p, const rcci_addr_t *addr)
{
    rcci_wire_addr_t w;
    rcci_addr_to_wire(addr, &w);
    p[0] = (uint8_t)w.family, p[1] = (uint8_t)(w.family >> 8);
    memcpy(p + 2, &w.port, 2); /* already network order */
    memcpy(p + 4, w.addr, 16);
}

static rcc_result_t bs_get_addr(const uint8_t *p, rcci_addr_t *addr)
{
    rcci_wire_addr_t w;
    w.family = (uint16_t)(p[0] | p[1] << 8);
    memcpy(&w.port, p + 2, 2);
    memcpy(w.addr, p + 4, 16);
    return rcci_addr_from_wire(&w, addr);
}

void rcci_bootstrap_addr_encode(uint8_t out[RCCI_BOOTSTRAP_ADDR_BYTES], const rcci_addr_t *addr)
{
    bs_put_addr(out, addr);
}

rcc_result_t rcci_bootstrap_addr_decode(const uint8_t in[RCCI_BOOTSTRAP_ADDR_BYTES],
                                        rcci_addr_t *addr)
{
    return bs_get_addr(in, addr);
}

/* Unique id: magic 0, version 4, root 8..28, comm_id 28..36, secret 36..68. */
void rcci_id_encode(const rcci_id_t *id, rcc_unique_id_t *out)
{
    uint8_t *p = (uint8_t *)out->internal;
    memset(out, 0, sizeof *out);
    bs_put32(p, ID_MAGIC);
    bs_put32(p + 4, ID_VERSION);
    bs_put_addr(p + 8, &id->root);
    bs_put32(p + 28, (uint32_t)id->comm_id);
    bs_put32(p + 32, (uint32_t)(id->comm_id >> 32));
    memcpy(p + 36, id->secret, RCCI_SOCK_SECRET_BYTES);
}

rcc_result_t rcci_id_decode(const rcc_unique_id_t *in, rcci_id_t *id)
{
    const uint8_t *p = (const uint8_t *)in->internal;
    if (bs_get32(p) != ID_MAGIC || bs_get32(p + 4) != ID_VERSION)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "the unique id was not made by rcc_get_unique_id of this version "
                          "(magic 0x%08x, version %u)",
                          bs_get32(p), bs_get32(p + 4));
    rcc_result_t res = bs_get_addr(p + 8, &id->root);
    if (res != RCC_SUCCESS)
        return res;
    id->comm_id = bs_get32(p + 28) | (uint64_t)bs_get32(p + 32) << 32;
    memcpy(id->secret, p + 36, RCCI_SOCK_SECRET_BYTES);
    return RCC_SUCCESS;
}

/* ---- the root ------------------------------------------------------------ */

typedef struct {
    int listen_fd;
    rcci_id_t id;
    int64_t timeout_ns;
} root_args_t;

void rcci_root_reply_encode(uint8_t out[RCCI_ROOT_REPLY_BYTES], rcc_result_t status, int nranks,
                            const char *text)
{
    memset(out, 0, ROOT_REPLY_BYTES);
    bs_put32(out, (uint32_t)status);
    bs_put32(out + 4, (uint32_t)nranks);
    snprintf((char *)out + 8, ROOT_REPLY_TEXT, "%s", text);
}

static int bs_is_failure_code(uint32_t code)
{
    switch (code) {
#define BS_CODE_(name, value, text) case value:
        RCC_RESULT_LIST(BS_CODE_)
#undef BS_CODE_
        return code != RCC_SUCCESS && code != RCC_IN_PROGRESS;
    }
    return 0;
}

rcc_result_t rcci_root_reply_decode(uint8_t head[RCCI_ROOT_REPLY_BYTES], int nranks,
                                    const char *root, int *root_said)
{
    head[ROOT_REPLY_BYTES - 1] = '\0';
    rcc_result_t status = (rcc_result_t)bs_get32(head);
    *root_said = status != RCC_SUCCESS;
    /* Only the root's failures pass through: whatever else claims to be one
     * (a code this version lacks, "in progress") is the root breaking the
     * protocol. */
    if (*root_said && !bs_is_failure_code(bs_get32(head)))
        status = RCC_ERR_REMOTE;
    if (*root_said)
        return rcci_error(status, "the rendezvous at %s failed: %s", root, (char *)head + 8);
    if ((int)bs_get32(head + 4) != nranks)
        return rcci_error(RCC_ERR_INTERNAL, "the root answered for %u ranks", bs_get32(head + 4));
    return RCC_SUCCESS;
}

rcc_result_t rcci_root_table_decode(const uint8_t *table, int nranks, rcci_addr_t *peers)
{
    for (int i = 0; i < nranks; i++) {
        rcc_result_t res = bs_get_addr(table + (size_t)i * WIRE_ADDR_BYTES, &peers[i]);
        if (res != RCC_SUCCESS)
            return res;
    }
    return RCC_SUCCESS;
}

int rcci_root_hello_check(const rcci_hello_t *h, int nranks, const int *fds, char *bad, size_t size)
{
    if (h->nranks < 1 || h->nranks > MAX_RANKS || h->rank < 0 || h->rank >= h->nranks)
        snprintf(bad, size, "rank %d of %d is not a valid rank", h->rank, h->nranks);
    else if (nranks > 0 && h->nranks != nranks)
        snprintf(bad, size, "rank %d says the job has %d ranks; earlier ranks said %d", h->rank,
                 h->nranks, nranks);
    else if (nranks > 0 && fds[h->rank] >= 0)
        snprintf(bad, size, "two processes joined as rank %d", h->rank);
    else if (h->addr.family != AF_INET && h->addr.family != AF_INET6)
        snprintf(bad, size, "rank %d sent an address of family %u, neither IPv4 nor IPv6", h->rank,
                 h->addr.family);
    else {
        bad[0] = '\0';
        return 1;
    }
    return 0;
}

/* Status, nranks, text; on success followed by the address table. */
static void root_reply(int fd, rcc_result_t status, int nranks, const char *text,
                       const uint8_t *table)
{
    uint8_t head[ROOT_REPLY_BYTES];
    rcci_root_reply_encode(head, status, nranks, text);
    int64_t deadline = rcci_now_ns() + REPLY_SEND_NS;
    if (rcci_sock_send_all(fd, head, sizeof head, deadline) == RCC_SUCCESS && table)
        rcci_sock_send_all(fd, table, (size_t)nranks * WIRE_ADDR_BYTES, deadline);
}

static void *root_main(void *arg)
{
    root_args_t *a = arg;
    int64_t deadline = rcci_now_ns() + a->timeout_ns;
    rcci_acceptor_t *acc = NULL;
    int nranks = -1, joined = 0;
    int *fds = NULL;
    uint8_t *table = NULL;
    rcc_result_t status = RCC_SUCCESS;
    char text[ROOT_REPLY_TEXT] = "";
    if (rcci_acceptor_create(a->listen_fd, a->id.secret, a->id.comm_id, &acc) != RCC_SUCCESS) {
        close(a->listen_fd);
        free(a);
        return NULL;
    }
    while (nranks < 0 || joined < nranks) {
        int fd;
        rcci_hello_t h;
        if (rcci_acceptor_accept(acc, RCCI_HELLO_ROOT, -1, 0, deadline, &fd, &h) != RCC_SUCCESS)
            break; /* the deadline passed: report below */
        char bad[ROOT_REPLY_TEXT];
        if (!rcci_root_hello_check(&h, nranks, fds, bad, sizeof bad)) {
            root_reply(fd, RCC_ERR_INVALID_USAGE, 0, bad, NULL);
            close(fd);
            if (nranks > 0) { /* the job cannot form: tell everyone who came */
                status = RCC_ERR_INVALID_USAGE;
                snprintf(text, sizeof text, "%s", bad);
                break;
            }
            continue;
        }
        if (nranks < 0) {
            nranks = h.nranks;
            fds = malloc(sizeof *fds * (size_t)nranks);
            table = calloc((size_t)nranks, WIRE_ADDR_BYTES);
            if (!fds || !table) {
                close(fd);
                status = RCC_ERR_NO_MEMORY;
                snprintf(text, sizeof text, "the root ran out of memory");
                break;
            }
            for (int i = 0; i < nranks; i++)
                fds[i] = -1;
        }
        fds[h.rank] = fd;
        rcci_addr_t addr;
        rcci_addr_from_wire(&h.addr, &addr);
        bs_put_addr(table + (size_t)h.rank * WIRE_ADDR_BYTES, &addr);
        joined++;
    }
    if (status == RCC_SUCCESS && nranks > 0 && joined < nranks) {
        status = RCC_ERR_TIMEOUT;
        int n = snprintf(text, sizeof text,
                         "only %d of %d ranks reached the root within %.0f s; "
                         "missing:",
                         joined, nranks, a->timeout_ns / 1e9);
        int shown = 0;
        for (int i = 0; i < nranks && shown < 32 && n > 0 && (size_t)n < sizeof text - 16; i++)
            if (fds[i] < 0)
                n += snprintf(text + n, sizeof text - (size_t)n, " %d", i), shown++;
        if (joined + shown < nranks && n > 0 && (size_t)n < sizeof text - 4)
            snprintf(text + n, sizeof text - (size_t)n, " ...");
    }
    for (int i = 0; i < nranks && fds; i++) {
        if (fds[i] < 0)
            continue;
        root_reply(fds[i], status, nranks, text, status == RCC_SUCCESS ? table : NULL);
        close(fds[i]);
    }
    if (status != RCC_SUCCESS && text[0])
        RCC_WARN("rendezvous failed: %s", text);
    free(fds);
    free(table);
    rcci_acceptor_destroy(acc); /* closes the listening socket */
    free(a);
    return NULL;
}

rcc_result_t rcci_root_start(int listen_fd, const rcci_id_t *id, int64_t timeout_ns)
{
    root_args_t *a = calloc(1, sizeof *a);
    if (!a)
        return rcci_error(RCC_ERR_NO_MEMORY, "root arguments");
    *a = (root_args_t){.listen_fd = listen_fd, .id = *id, .timeout_ns = timeout_ns};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, root_main, a);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(a);
        return rcci_error_errno(RCC_ERR_SYSTEM, rc, "cannot start the rendezvous thread");
    }
    return RCC_SUCCESS;
}

/* ---- a rank's side -------------------------------------------------------- */

static rcc_result_t bs_meet_root(rcci_bootstrap_t *bs, const rcci_id_t *id, int64_t deadline)
{
    rcc_result_t res = RCC_SUCCESS;
    int fd = -1;
    uint8_t head[ROOT_REPLY_BYTES];
    uint8_t *table = NULL;
    int root_said = 0; /* the root's verdict already names the problem */
    char root[80];
    rcci_addr_format(&id->root, root, sizeof root);
    RCC_CHECK(rcci_sock_connect(&id->root, deadline, 1, NULL, &fd));
    rcci_hello_t hello = {
        .kind = RCCI_HELLO_ROOT, .rank = bs->rank, .nranks = bs->nranks, .comm_id = id->comm_id};
    rcci_addr_to_wire(&bs->local, &hello.addr);
    RCC_CHECK(rcci_hello_send(fd, &hello, id->secret, deadline));
    RCC_CHECK(rcci_sock_recv_all(fd, head, sizeof head, deadline + ROOT_GRACE_NS));
    RCC_CHECK(rcci_root_reply_decode(head, bs->nranks, root, &root_said));
    table = malloc((size_t)bs->nranks * WIRE_ADDR_BYTES);
    bs->peers = calloc((size_t)bs->nranks, sizeof *bs->peers);
    if (!table || !bs->peers)
        RCC_FAIL(RCC_ERR_NO_MEMORY, "address table for %d ranks", bs->nranks);
    RCC_CHECK(rcci_sock_recv_all(fd, table, (size_t)bs->nranks * WIRE_ADDR_BYTES, deadline));
    RCC_CHECK(rcci_root_table_decode(table, bs->nranks, bs->peers));
out:
    if (res != RCC_SUCCESS && !root_said) /* in the cause: see bs_connect_ring */
        res = rcci_error_prefix_cause(res, "meeting the root %s: ", root);
    if (fd >= 0)
        close(fd);
    free(table);
    return res;
}

/* Connects this rank to the next one and accepts the previous one. */
static rcc_result_t bs_connect_ring(rcci_bootstrap_t *bs, int64_t deadline)
{
    rcc_result_t res = RCC_SUCCESS;
    if (bs->nranks > 1) {
        int next = (bs->rank + 1) % bs->nranks, prev = (bs->rank + bs->nranks - 1) % bs->nranks;
        rcci_hello_t hello = {.kind = RCCI_HELLO_BOOTSTRAP,
                              .rank = bs->rank,
                              .nranks = bs->nranks,
                              .comm_id = bs->comm_id};
        /* Connecting first cannot deadlock: the kernel completes the
         * handshake and buffers the hello before the peer accepts. */
        res = rcci_sock_connect(&bs->peers[next], deadline, 1, NULL, &bs->next_fd);
        if (res != RCC_SUCCESS) {
            /* Name the rank, its address alone says little, in the cause
             * too: that is what a notice tells the other ranks, and they
             * need the name. */
            res = rcci_error_prefix_cause(res, "connecting the bootstrap ring to rank %d%s: ", next,
                                          next == 0 ? " (the root)" : "");
            goto out;
        }
        RCC_CHECK(rcci_hello_send(bs->next_fd, &hello, bs->secret, deadline));
        rcci_hello_t got;
        RCC_CHECK(rcci_acceptor_accept(bs->acceptor, RCCI_HELLO_BOOTSTRAP, prev, 0, deadline,
                                       &bs->prev_fd, &got));
    }
    /* Nobody connects here again (a split listens anew): stop listening, so
     * that strangers' connections are refused rather than left unanswered
     * in a backlog nobody reads. */
    rcci_acceptor_destroy(bs->acceptor);
    bs->acceptor = NULL;
out:
    return res;
}

/* A bootstrap with its listener up, not yet part of a job. */
static rcc_result_t bs_new(int rank, int nranks, int64_t timeout_ns, const uint8_t *secret,
                           uint64_t comm_id, const rcci_addr_t *listen_on, rcci_bootstrap_t **out)
{
    rcc_result_t res = RCC_SUCCESS;
    int lfd = -1;
    rcci_bootstrap_t *bs = calloc(1, sizeof *bs);
    if (!bs)
        return rcci_error(RCC_ERR_NO_MEMORY, "bootstrap");
    *bs = (rcci_bootstrap_t){.rank = rank,
                             .nranks = nranks,
                             .timeout_ns = timeout_ns,
                             .next_fd = -1,
                             .failed_rank = -1,
                             .prev_fd = -1,
                             .comm_id = comm_id};
    memcpy(bs->secret, secret, sizeof bs->secret);
    RCC_CHECK(rcci_sock_listen(listen_on, NULL, &lfd, &bs->local));
    RCC_CHECK(rcci_acceptor_create(lfd, bs->secret, bs->comm_id, &bs->acceptor));
    lfd = -1;
    *out = bs;
out:
    if (lfd >= 0)
        close(lfd);
    if (res != RCC_SUCCESS)
        rcci_bootstrap_destroy(bs);
    return res;
}

#define SPLIT_ENTRY_BYTES RCCI_SPLIT_ENTRY_BYTES

int rcci_split_members(const uint8_t *table, int n, int color, int *order)
{
    /* Insertion sort, stable on parent rank because ranks are visited in
     * order. */
    int members = 0;
    for (int r = 0; r < n; r++) {
        const uint8_t *e = table + (size_t)r * SPLIT_ENTRY_BYTES;
        if ((int)bs_get32(e) != color)
            continue;
        int k = (int)bs_get32(e + 4), at = members++;
        while (at > 0 && (int)bs_get32(table + (size_t)order[at - 1] * SPLIT_ENTRY_BYTES + 4) > k) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = r;
    }
    return members;
}

rcc_result_t rcci_bootstrap_split(rcci_bootstrap_t *parent, int color, int key, uint64_t comm_id,
                                  rcci_bootstrap_t **child)
{
    rcc_result_t res = RCC_SUCCESS;
    int64_t deadline = rcci_now_ns() + parent->timeout_ns;
    int n = parent->nranks, members = 0, me = -1;
    rcci_bootstrap_t *bs = NULL;
    uint8_t *table = calloc((size_t)n, SPLIT_ENTRY_BYTES);
    int *order = calloc((size_t)n, sizeof *order);
    *child = NULL;
    if (!table || !order)
        RCC_FAIL(RCC_ERR_NO_MEMORY, "split table for %d ranks", n);
    rcci_addr_t listen_on = parent->local;
    rcci_addr_set_port(&listen_on, 0);
    if (color >= 0) {
        RCC_CHECK(bs_new(0, 1, parent->timeout_ns, parent->secret, comm_id, &listen_on, &bs));
        snprintf(bs->ifname, sizeof bs->ifname, "%s", parent->ifname);
    }
    uint8_t *mine = table + (size_t)parent->rank * SPLIT_ENTRY_BYTES;
    bs_put32(mine, (uint32_t)color);
    bs_put32(mine + 4, (uint32_t)key);
    bs_put32(mine + 8, (uint32_t)parent->rank);
    if (bs)
        bs_put_addr(mine + 12, &bs->local);
    RCC_CHECK(rcci_bootstrap_allgather(parent, table, SPLIT_ENTRY_BYTES));
    if (color < 0)
        goto out;
    members = rcci_split_members(table, n, color, order);
    bs->nranks = members;
    bs->peers = calloc((size_t)members, sizeof *bs->peers);
    if (!bs->peers)
        RCC_FAIL(RCC_ERR_NO_MEMORY, "address table for %d ranks", members);
    for (int i = 0; i < members; i++) {
        if (order[i] == parent->rank)
            me = i;
        RCC_CHECK(bs_get_addr(table + (size_t)order[i] * SPLIT_ENTRY_BYTES + 12, &bs->peers[i]));
    }
    bs->rank = me;
    RCC_CHECK(bs_connect_ring(bs, deadline));
    *child = bs;
    bs = NULL;
out:
    if (res != RCC_SUCCESS) {
        rcci_bootstrap_fail(bs, rcci_tls_cause());
        rcci_error_prefix("splitting (color %d, key %d): ", color, key);
    }
    rcci_bootstrap_destroy(bs);
    free(table);
    free(order);
    return res;
}

int rcci_bootstrap_rank(const rcci_bootstrap_t *bs) { return bs->rank; }
int rcci_bootstrap_nranks(const rcci_bootstrap_t *bs) { return bs->nranks; }
const uint8_t *rcci_bootstrap_secret(const rcci_bootstrap_t *bs) { return bs->secret; }
uint64_t rcci_bootstrap_comm_id(const rcci_bootstrap_t *bs) { return bs->comm_id; }

rcc_result_t rcci_bootstrap_init(const rcci_id_t *id, int rank, int nranks, int64_t timeout_ns,
                                 const char *ifname, rcci_bootstrap_t **out)
{
    rcc_result_t res = RCC_SUCCESS;
    int64_t deadline = rcci_now_ns() + timeout_ns;
    rcci_bootstrap_t *bs = NULL;
    rcci_addr_t local;
    char ifn[64];
    RCC_CHECK(rcci_addr_pick_local(ifname, &id->root, &local, ifn, sizeof ifn));
    RCC_CHECK(bs_new(rank, nranks, timeout_ns, id->secret, id->comm_id, &local, &bs));
    snprintf(bs->ifname, sizeof bs->ifname, "%s", ifn);
    RCC_CHECK(bs_meet_root(bs, id, deadline));
    RCC_CHECK(bs_connect_ring(bs, deadline));
    *out = bs;
out:
    if (res != RCC_SUCCESS) {
        rcci_bootstrap_fail(bs, rcci_tls_cause());
        rcci_bootstrap_destroy(bs);
    }
    return res;
}

/* Reads the rest of a failure notice from `fd`, the connection with rank
 * `from` (`got` bytes of it are in `in`, which holds BS_MSG_HEAD + 4 +
 * BS_NOTICE_TEXT) and fails with what it says. */
static rcc_result_t bs_read_notice(rcci_bootstrap_t *bs, int fd, int from, uint8_t *in,
                                   size_t got)
{
    uint32_t len = bs_get32(in + 4);
    if (len < 4 || len > 4 + BS_NOTICE_TEXT - 1)
        return rcci_error(RCC_ERR_PEER_LOST, "rank %d failed (its notice is malformed)", from);
    if (got < BS_MSG_HEAD + len &&
        rcci_sock_recv_all(fd, in + got, BS_MSG_HEAD + len - got, rcci_now_ns() + BS_NOTICE_NS) !=
            RCC_SUCCESS)
        return rcci_error(RCC_ERR_PEER_LOST, "rank %d failed (its notice was cut short)", from);
    uint32_t origin = bs_get32(in + BS_MSG_HEAD);
    if (origin >= (uint32_t)bs->nranks)
        origin = (uint32_t)from;
    size_t n = len - 4;
    for (size_t i = 0; i < n; i++) { /* a proven peer's text, printed: printable only */
        char c = (char)in[BS_MSG_HEAD + 4 + i];
        bs->failed_text[i] = c >= 0x20 && c < 0x7f ? c : '?';
    }
    bs->failed_text[n] = '\0';
    bs->failed_rank = (int)origin;
    return rcci_error(RCC_ERR_PEER_LOST, "rank %d failed: %s", bs->failed_rank, bs->failed_text);
}

/* Takes a failure notice waiting first on `fd` (the connection with rank
 * `from`): *found = 1 and the error it tells. Otherwise takes nothing;
 * fails only when the connection is closed and `fd` is the previous
 * rank's (its next message was due there). */
static rcc_result_t bs_take_notice(rcci_bootstrap_t *bs, int fd, int from, int *found)
{
    uint8_t in[BS_MSG_HEAD + 4 + BS_NOTICE_TEXT];
    *found = 0;
    ssize_t got = recv(fd, in, BS_MSG_HEAD, MSG_PEEK | MSG_DONTWAIT);
    if (got == BS_MSG_HEAD && bs_get32(in) == BS_MSG_FAILED) {
        *found = 1;
        got = recv(fd, in, sizeof in, MSG_DONTWAIT);
        return bs_read_notice(bs, fd, from, in, got > 0 ? (size_t)got : 0);
    }
    if (fd == bs->prev_fd && (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)))
        return rcci_error(RCC_ERR_PEER_LOST, "rank %d left the bootstrap ring", from);
    return RCC_SUCCESS;
}

rcc_result_t rcci_bootstrap_allgather(rcci_bootstrap_t *bs, void *data, size_t block)
{
    rcc_result_t res = RCC_SUCCESS;
    int n = bs->nranks, r = bs->rank;
    int64_t deadline = rcci_now_ns() + bs->timeout_ns;
    size_t msg = BS_MSG_HEAD + block, notice = BS_MSG_HEAD + 4 + BS_NOTICE_TEXT;
    uint8_t *out = malloc(msg), *in = malloc(msg > notice ? msg : notice);
    if (!out || !in)
        RCC_FAIL(RCC_ERR_NO_MEMORY, "bootstrap messages of %zu bytes", msg);
    if (bs->out_cut)
        RCC_FAIL(RCC_ERR_INVALID_USAGE, "the bootstrap ring failed earlier");
    for (int step = 0; step < n - 1; step++) {
        int send_block = (r - step + n) % n, recv_block = (r - step - 1 + n) % n;
        bs_put32(out, BS_MSG_BLOCK);
        bs_put32(out + 4, (uint32_t)block);
        memcpy(out + BS_MSG_HEAD, (char *)data + (size_t)send_block * block, block);
        size_t sent = 0, got = 0;
        res = rcci_sock_exchange(bs->next_fd, out, msg, bs->prev_fd, in, msg, deadline, &sent,
                                 &got);
        if (got >= BS_MSG_HEAD && bs_get32(in) == BS_MSG_FAILED) {
            if (sent < msg) { /* finish the message so that the notice can follow it */
                int64_t soon = rcci_now_ns() + BS_NOTICE_NS;
                if (rcci_sock_send_all(bs->next_fd, out + sent, msg - sent, soon) != RCC_SUCCESS)
                    bs->out_cut = 1;
            }
            res = bs_read_notice(bs, bs->prev_fd, (r + n - 1) % n, in, got);
        } else if (res != RCC_SUCCESS) {
            /* A new error, not a prefix: the peer belongs in the cause
             * that a notice tells the other ranks. */
            int receiving = got < msg && sent == msg, found = 0;
            rcc_result_t told = receiving ? RCC_SUCCESS
                                          : bs_take_notice(bs, bs->next_fd, (r + 1) % n, &found);
            if (found) { /* the next rank failed and said why, back here */
                bs->out_cut = 1;
                res = told;
                rcci_error_prefix("bootstrap allgather step %d: ", step);
                break;
            }
            char why[256];
            snprintf(why, sizeof why, "%s", rcci_tls_error());
            /* A silent previous rank may be waiting out a deadline of its own
             * (for a killed root), a moment later than ours: its notice, where
             * it comes, says where the failure began. */
            if (receiving && got == 0 && res == RCC_ERR_TIMEOUT &&
                (told = rcci_bootstrap_await_notice(bs, BS_LATE_NOTICE_NS)) != RCC_SUCCESS) {
                res = told;
                rcci_error_prefix("bootstrap allgather step %d: ", step);
                break;
            }
            bs->out_cut = sent < msg;
            res = rcci_error(res, "%s rank %d: %s", receiving ? "receiving from" : "sending to",
                             receiving ? (r + n - 1) % n : (r + 1) % n, why);
        } else if (bs_get32(in) != BS_MSG_BLOCK || bs_get32(in + 4) != block) {
            bs->out_cut = 1;
            res = rcci_error(RCC_ERR_INTERNAL,
                             "rank %d sent a message of kind %08x and length %u where a block of "
                             "%zu bytes belonged (are all ranks the same ringcc version?)",
                             (r + n - 1) % n, bs_get32(in), bs_get32(in + 4), block);
        } else {
            memcpy((char *)data + (size_t)recv_block * block, in + BS_MSG_HEAD, block);
        }
        if (res != RCC_SUCCESS) {
            rcci_error_prefix("bootstrap allgather step %d: ", step);
            break;
        }
    }
out:
    free(out);
    free(in);
    return res;
}

rcc_result_t rcci_bootstrap_check(rcci_bootstrap_t *bs)
{
    if (bs->nranks < 2 || bs->next_fd < 0 || bs->prev_fd < 0)
        return RCC_SUCCESS;
    int n = bs->nranks, next = (bs->rank + 1) % n, prev = (bs->rank + n - 1) % n;
    /* Nothing ever comes from the next rank: readable means it is gone. */
    struct pollfd p[2] = {{.fd = bs->next_fd, .events = POLLIN}, {.fd = bs->prev_fd, .events = POLLIN}};
    if (poll(p, 2, 0) <= 0)
        return RCC_SUCCESS;
    /* From the previous rank: a notice, or its next message. From the next
     * rank only a notice ever comes (sent back by a failing rank). */
    int fds[2] = {bs->prev_fd, bs->next_fd}, ranks[2] = {prev, next};
    for (int i = 0; i < 2; i++) {
        if (!p[1 - i].revents)
            continue;
        int found = 0;
        rcc_result_t res = bs_take_notice(bs, fds[i], ranks[i], &found);
        if (found || res != RCC_SUCCESS)
            return res;
        if (i == 1) /* readable and no notice: the next rank is gone */
            return rcci_error(RCC_ERR_PEER_LOST, "rank %d left the bootstrap ring", next);
    }
    return RCC_SUCCESS;
}

rcc_result_t rcci_bootstrap_await_notice(rcci_bootstrap_t *bs, int64_t wait_ns)
{
    if (!bs || bs->nranks < 2 || bs->next_fd < 0 || bs->prev_fd < 0)
        return RCC_SUCCESS;
    int n = bs->nranks, next = (bs->rank + 1) % n, prev = (bs->rank + n - 1) % n;
    int fds[2] = {bs->prev_fd, bs->next_fd}, ranks[2] = {prev, next}, open[2] = {1, 1};
    int64_t deadline = rcci_now_ns() + wait_ns;
    while (open[0] || open[1]) {
        struct pollfd p[2];
        int np = 0, which[2];
        for (int i = 0; i < 2; i++)
            if (open[i]) {
                p[np] = (struct pollfd){.fd = fds[i], .events = POLLIN};
                which[np++] = i;
            }
        int64_t left_ms = (deadline - rcci_now_ns()) / 1000000;
        if (left_ms < 0 || poll(p, (nfds_t)np, (int)left_ms) <= 0)
            break;
        for (int k = 0; k < np; k++) {
            if (!p[k].revents)
                continue;
            int i = which[k], found = 0;
            rcc_result_t res = bs_take_notice(bs, fds[i], ranks[i], &found);
            if (found)
                return res;
            /* Closed, or the previous rank's next message: no notice here. */
            open[i] = 0;
        }
    }
    return RCC_SUCCESS;
}

void rcci_bootstrap_fail(rcci_bootstrap_t *bs, const char *why)
{
    if (!bs || bs->nranks < 2 || (bs->out_cut && bs->back_sent))
        return;
    int origin = bs->failed_rank >= 0 ? bs->failed_rank : bs->rank;
    const char *text = bs->failed_rank >= 0 ? bs->failed_text : why ? why : "";
    size_t len = strnlen(text, BS_NOTICE_TEXT - 1);
    uint8_t msg[BS_MSG_HEAD + 4 + BS_NOTICE_TEXT];
    bs_put32(msg, BS_MSG_FAILED);
    bs_put32(msg + 4, (uint32_t)(4 + len));
    bs_put32(msg + BS_MSG_HEAD, (uint32_t)origin);
    memcpy(msg + BS_MSG_HEAD + 4, text, len);
    /* Failing while the ring forms (its next rank, the root, gone): the
     * previous rank may have connected already, its ring edge waiting in
     * this rank's backlog, and would learn only that the connection was
     * reset. Take that edge, briefly, to tell it why. Its own failure does
     * not matter: the thread's error stays this one. */
    if (bs->prev_fd < 0 && bs->acceptor && bs->peers) {
        char saved_text[RCCI_ERR_TEXT_BYTES], saved_cause[RCCI_ERR_TEXT_BYTES];
        snprintf(saved_text, sizeof saved_text, "%s", rcci_tls_error());
        snprintf(saved_cause, sizeof saved_cause, "%s", rcci_tls_cause());
        rcci_hello_t got;
        int prev = (bs->rank + bs->nranks - 1) % bs->nranks;
        if (rcci_acceptor_accept(bs->acceptor, RCCI_HELLO_BOOTSTRAP, prev, 0,
                                 rcci_now_ns() + BS_TAKE_PREV_NS, &bs->prev_fd,
                                 &got) != RCC_SUCCESS)
            bs->prev_fd = -1;
        rcci_tls_error_restore(saved_text, saved_cause);
    }
    /* Best effort and at once: a few hundred bytes fit any socket buffer,
     * and a rank that is failing waits for nobody. */
    ssize_t w = 0;
    if (bs->next_fd >= 0 && !bs->out_cut)
        w = send(bs->next_fd, msg, BS_MSG_HEAD + 4 + len, MSG_NOSIGNAL | MSG_DONTWAIT);
    /* Back too: the previous rank may be connecting to this one (a ring
     * edge) and would otherwise learn only that it was refused. Nothing
     * else travels that way, so the notice is whole on arrival. */
    if (bs->prev_fd >= 0 && !bs->back_sent)
        w = send(bs->prev_fd, msg, BS_MSG_HEAD + 4 + len, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    bs->out_cut = 1;
    bs->back_sent = 1;
}

rcc_result_t rcci_bootstrap_barrier(rcci_bootstrap_t *bs)
{
    char stack[64];
    char *flags = bs->nranks <= (int)sizeof stack ? stack : calloc((size_t)bs->nranks, 1);
    if (!flags)
        return rcci_error(RCC_ERR_NO_MEMORY, "barrier");
    flags[bs->rank] = 1;
    rcc_result_t res = rcci_bootstrap_allgather(bs, flags, 1);
    if (flags != stack)
        free(flags);
    return res;
}

const rcci_addr_t *rcci_bootstrap_local_addr(const rcci_bootstrap_t *bs) { return &bs->local; }

const char *rcci_bootstrap_ifname(const rcci_bootstrap_t *bs) { return bs->ifname; }

void rcci_bootstrap_peer_name(const rcci_bootstrap_t *bs, int rank, char *buf, size_t size)
{
    char addr[80] = "?";
    if (bs->peers && rank >= 0 && rank < bs->nranks) {
        rcci_addr_t a = bs->peers[rank];
        rcci_addr_format(&a, addr, sizeof addr);
    }
    snprintf(buf, size, "rank %d (%s)", rank, addr);
}

void rcci_bootstrap_destroy(rcci_bootstrap_t *bs)
{
    if (!bs)
        return;
    if (bs->next_fd >= 0)
        close(bs->next_fd);
    if (bs->prev_fd >= 0)
        close(bs->prev_fd);
    rcci_acceptor_destroy(bs->acceptor);
    free(bs->peers);
    free(bs);
}
