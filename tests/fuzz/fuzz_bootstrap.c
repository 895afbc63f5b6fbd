/*
 * The rendezvous protocol's messages (lib/bootstrap.c), parsed by the pure
 * functions the bootstrap uses. Input: a mode byte, then
 *  0  the root's reply as a rank receives it, and the rank count it expects;
 *  1  an address table of 1..64 entries as a rank receives it;
 *  2  a sequence of proven root hellos as the root judges them, with the
 *     root's bookkeeping (fds, joined) done as root_main does it;
 *  3  rcci_comm_split's allgathered table of 1..64 entries and a color.
 *
 * Invariants:
 *  0  accepted only with status 0 and the expected rank count; a reported
 *     failure returns a failure code of this version (never success, "in
 *     progress" or an unknown number) and quotes the root's text, which is
 *     always terminated; encode then decode round-trips status and text;
 *  1  accepted tables hold only IPv4/IPv6 addresses that re-encode to the
 *     same address; a refused one says why;
 *  2  the root admits a hello only for a free rank of the job's size, at
 *     most nranks of them, each with an address the ranks can decode; a
 *     refusal's text is terminated within the given size;
 *  3  the members are exactly the entries of the color, each once, ordered
 *     by (key, parent rank).
 */
#include <arpa/inet.h>

#include "bootstrap.h"
#include "err.h"
#include "fuzz.h"

static int is_failure_code(rcc_result_t r)
{
    return r != RCC_SUCCESS && r != RCC_IN_PROGRESS &&
           strcmp(rcc_result_name(r), "RCC_UNKNOWN_RESULT");
}

static void check_addr(const rcci_addr_t *a)
{
    FUZZ_ASSERT((a->u.sa.sa_family == AF_INET && a->len == sizeof a->u.in) ||
                    (a->u.sa.sa_family == AF_INET6 && a->len == sizeof a->u.in6),
                "family %d length %u", a->u.sa.sa_family, (unsigned)a->len);
    uint8_t wire[RCCI_BOOTSTRAP_ADDR_BYTES];
    rcci_addr_t back;
    rcci_bootstrap_addr_encode(wire, a);
    FUZZ_ASSERT(rcci_bootstrap_addr_decode(wire, &back) == RCC_SUCCESS, "%s", rcci_tls_error());
    FUZZ_ASSERT(back.len == a->len && !memcmp(&back.u, &a->u, a->len), "address round trip");
}

static void root_reply(fuzz_in_t *in)
{
    uint8_t head[RCCI_ROOT_REPLY_BYTES];
    fuzz_bytes(in, head, sizeof head);
    int nranks = (int)fuzz_u32(in), said = -1;
    uint32_t status = head[0] | head[1] << 8 | head[2] << 16 | (uint32_t)head[3] << 24;
    uint32_t answered = head[4] | head[5] << 8 | head[6] << 16 | (uint32_t)head[7] << 24;
    char text[RCCI_ROOT_REPLY_BYTES];
    memcpy(text, head + 8, sizeof head - 8);
    text[sizeof head - 9] = '\0';
    rcci_tls_error_clear();
    rcc_result_t res = rcci_root_reply_decode(head, nranks, "127.0.0.1:4310", &said);
    FUZZ_ASSERT(head[sizeof head - 1] == '\0', "text left unterminated");
    FUZZ_ASSERT(said == (status != 0), "root_said %d for status %u", said, status);
    if (res == RCC_SUCCESS) {
        FUZZ_ASSERT(status == 0 && (int)answered == nranks, "accepted status %u for %u ranks",
                    status, answered);
        return;
    }
    FUZZ_ASSERT(is_failure_code(res), "decode returned %d", (int)res);
    if (said) {
        rcc_result_t expect =
            is_failure_code((rcc_result_t)status) ? (rcc_result_t)status : RCC_ERR_REMOTE;
        FUZZ_ASSERT(res == expect, "status %u became %d", status, (int)res);
        FUZZ_ASSERT(strstr(rcci_tls_error(), text) != NULL, "the root's text is not quoted");
    } else {
        FUZZ_ASSERT((int)answered != nranks, "refused a good reply: %s", rcci_tls_error());
    }
    /* The root's own encoding of this verdict. */
    rcc_result_t failure =
        is_failure_code((rcc_result_t)status) ? (rcc_result_t)status : RCC_SUCCESS;
    rcci_root_reply_encode(head, failure, nranks, text);
    res = rcci_root_reply_decode(head, nranks, "root", &said);
    FUZZ_ASSERT(res == failure, "round trip of status %d gave %d", (int)failure, (int)res);
    if (failure != RCC_SUCCESS)
        FUZZ_ASSERT(strstr(rcci_tls_error(), text) != NULL, "round trip lost the text");
}

static void table(fuzz_in_t *in)
{
    int n = 1 + fuzz_u8(in) % 64;
    uint8_t *t = malloc((size_t)n * RCCI_BOOTSTRAP_ADDR_BYTES);
    rcci_addr_t *peers = malloc((size_t)n * sizeof *peers); /* exact sizes: ASan sees overruns */
    fuzz_bytes(in, t, (size_t)n * RCCI_BOOTSTRAP_ADDR_BYTES);
    rcci_tls_error_clear();
    if (rcci_root_table_decode(t, n, peers) == RCC_SUCCESS) {
        for (int i = 0; i < n; i++)
            check_addr(&peers[i]);
    } else {
        FUZZ_ASSERT(rcci_tls_error()[0], "refused table without a reason");
    }
    free(t);
    free(peers);
}

static void root_loop(fuzz_in_t *in)
{
    int nranks = -1, joined = 0, *fds = NULL;
    while (in->left > 0) {
        rcci_hello_t h = {.kind = RCCI_HELLO_ROOT};
        /* Mostly small numbers, so jobs form; sometimes anything. */
        uint8_t shape = fuzz_u8(in);
        h.rank = shape & 1 ? (int32_t)fuzz_u32(in) : fuzz_u8(in) % 9 - 1;
        h.nranks = shape & 2 ? (int32_t)fuzz_u32(in) : fuzz_u8(in) % 9;
        h.addr.family = shape & 4 ? (uint16_t)fuzz_u64(in, 2) : (shape & 8 ? AF_INET6 : AF_INET);
        h.addr.port = (uint16_t)fuzz_u64(in, 2);
        fuzz_bytes(in, h.addr.addr, 16);
        size_t size = shape & 16 ? 1 + fuzz_u8(in) % 32 : 256;
        char *bad = malloc(size);
        memset(bad, 'x', size);
        int ok = rcci_root_hello_check(&h, nranks, fds, bad, size);
        FUZZ_ASSERT(memchr(bad, '\0', size) != NULL, "reason not terminated within %zu", size);
        if (!ok) {
            FUZZ_ASSERT(bad[0] != '\0' || size == 1, "refused without a reason");
            free(bad);
            if (nranks > 0)
                break; /* the root gives up the job, as root_main does */
            continue;
        }
        free(bad);
        FUZZ_ASSERT(h.nranks >= 1 && h.nranks <= RCCI_BOOTSTRAP_MAX_RANKS, "admitted %d ranks",
                    h.nranks);
        FUZZ_ASSERT(h.rank >= 0 && h.rank < h.nranks, "admitted rank %d of %d", h.rank, h.nranks);
        FUZZ_ASSERT(nranks < 0 || h.nranks == nranks, "admitted a job of %d into one of %d",
                    h.nranks, nranks);
        rcci_addr_t addr;
        FUZZ_ASSERT(rcci_addr_from_wire(&h.addr, &addr) == RCC_SUCCESS,
                    "admitted family %u, which no rank can decode", h.addr.family);
        if (nranks < 0) {
            if (h.nranks > 4096)
                return; /* a valid job too large to model cheaply */
            nranks = h.nranks;
            fds = malloc(sizeof *fds * (size_t)nranks);
            for (int i = 0; i < nranks; i++)
                fds[i] = -1;
        }
        FUZZ_ASSERT(fds[h.rank] < 0, "rank %d admitted twice", h.rank);
        fds[h.rank] = 1;
        joined++;
        FUZZ_ASSERT(joined <= nranks, "%d joined a job of %d", joined, nranks);
        if (joined == nranks)
            break;
    }
    free(fds);
}

static int32_t entry_i32(const uint8_t *e)
{
    return (int32_t)(e[0] | e[1] << 8 | e[2] << 16 | (uint32_t)e[3] << 24);
}

static void split(fuzz_in_t *in)
{
    int n = 1 + fuzz_u8(in) % 64;
    uint8_t *t = malloc((size_t)n * RCCI_SPLIT_ENTRY_BYTES);
    int *order = malloc((size_t)n * sizeof *order);
    fuzz_bytes(in, t, (size_t)n * RCCI_SPLIT_ENTRY_BYTES);
    int color = entry_i32(t); /* rank 0's color, as rank 0 would split */
    int members = rcci_split_members(t, n, color, order);
    int expect = 0;
    for (int r = 0; r < n; r++)
        expect += entry_i32(t + (size_t)r * RCCI_SPLIT_ENTRY_BYTES) == color;
    FUZZ_ASSERT(members == expect, "%d members, %d entries of color %d", members, expect, color);
    char *seen = calloc((size_t)n, 1);
    for (int i = 0; i < members; i++) {
        FUZZ_ASSERT(order[i] >= 0 && order[i] < n, "member %d is rank %d", i, order[i]);
        FUZZ_ASSERT(!seen[order[i]]++, "rank %d listed twice", order[i]);
        const uint8_t *e = t + (size_t)order[i] * RCCI_SPLIT_ENTRY_BYTES;
        FUZZ_ASSERT(entry_i32(e) == color, "rank %d has another color", order[i]);
        if (i > 0) {
            int32_t k0 = entry_i32(t + (size_t)order[i - 1] * RCCI_SPLIT_ENTRY_BYTES + 4);
            int32_t k1 = entry_i32(e + 4);
            FUZZ_ASSERT(k0 < k1 || (k0 == k1 && order[i - 1] < order[i]),
                        "not ordered by (key, rank) at %d", i);
        }
    }
    free(seen);
    free(t);
    free(order);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    switch (fuzz_u8(&in) % 4) {
    case 0: root_reply(&in); break;
    case 1: table(&in); break;
    case 2: root_loop(&in); break;
    default: split(&in); break;
    }
    return 0;
}
