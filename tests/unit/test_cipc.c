/* The cudaipc transport's slot protocol (transports/cudaipc/slots.h) and
 * the shared memory it maps (lib/ipcmem.h), without a GPU. */
#include <check.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "cudaipc/slots.h"
#include "err.h"
#include "ipcmem.h"
#include "transport.h"

START_TEST(fragments_cover_the_message)
{
    const size_t slot = 1000;
    static const uint64_t sizes[] = {0, 1, 999, 1000, 1001, 2999, 3000, 3001, 123457};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        uint64_t n = sizes[i], next = 0;
        uint32_t k = rcci_cipc_frags(n, slot);
        ck_assert_uint_eq(k, n == 0 ? 1 : (n + slot - 1) / slot); /* the naive count */
        for (uint32_t f = 0; f < k; f++) {
            uint64_t off;
            size_t len;
            rcci_cipc_frag_span(n, slot, f, &off, &len);
            ck_assert_uint_eq(off, next); /* contiguous, in order */
            ck_assert(len <= slot);
            ck_assert(n == 0 || len > 0);
            next += len;
        }
        ck_assert_uint_eq(next, n);
    }
}
END_TEST

START_TEST(counters_wrap)
{
    /* A sender may be at most RCCI_CIPC_SLOTS fragments ahead of the tail,
     * also across the 2^32 wrap. */
    uint32_t bases[] = {0, 5, 0xfffffffcu, 0xffffffffu};
    for (int b = 0; b < 4; b++) {
        uint32_t tail = bases[b];
        for (uint32_t d = 0; d < 2 * RCCI_CIPC_SLOTS; d++)
            ck_assert_int_eq(rcci_cipc_slot_free(tail + d, tail), d < RCCI_CIPC_SLOTS);
        ck_assert(rcci_cipc_passed(tail + 1, tail));
        ck_assert(!rcci_cipc_passed(tail, tail));
        ck_assert(!rcci_cipc_passed(tail - 1, tail));
    }
}
END_TEST

START_TEST(headers_are_checked)
{
    rcci_tag_t want = {.seq = 7};
    memset(want.sig, 3, sizeof want.sig);
    rcci_cipc_hdr_t h = {.seq = 7, .frag = 2, .bytes = 4096};
    memcpy(h.sig, want.sig, sizeof h.sig);
    ck_assert_int_eq(rcci_cipc_check(&h, &want, 4096, 2, "rank 1", "rank 0", NULL), RCC_SUCCESS);
    ck_assert_int_eq(rcci_cipc_check(&h, &want, 4095, 2, "rank 1", "rank 0", NULL), RCC_ERR_REMOTE);
    ck_assert_int_eq(rcci_cipc_check(&h, &want, 4096, 1, "rank 1", "rank 0", NULL), RCC_ERR_REMOTE);
    ck_assert(strstr(rcci_tls_error(), "fragment 2") != NULL);
    h.seq = 8;
    ck_assert_int_eq(rcci_cipc_check(&h, &want, 4096, 2, "rank 1", "rank 0", NULL),
                     RCC_ERR_MISMATCH);
    ck_assert(strstr(rcci_tls_error(), "rank 1") != NULL);
    h.seq = 7;
    h.sig[5] ^= 1;
    ck_assert_int_eq(rcci_cipc_check(&h, &want, 4096, 2, "rank 1", "rank 0", NULL),
                     RCC_ERR_MISMATCH);
}
END_TEST

/* Queued messages carry one word each (the ticket's low byte, a hash of
 * signature and length): a word of another operation or length, or of
 * another ticket, is a mismatch naming the sender; whether the entry can
 * still hold the ticket's word depends on the receiver's tail (the sender
 * reuses it for ticket + RCCI_CIPC_CHECKS once that fragment's slot is
 * free); a header marked queued fails a receive that is not queued, as a
 * mismatch. */
START_TEST(queued_words_are_checked)
{
    rcci_tag_t want = {.seq = 0}, other = {.seq = 0};
    memset(want.sig, 3, sizeof want.sig);
    memset(other.sig, 3, sizeof other.sig);
    other.sig[9] ^= 0x40;
    static const uint32_t tickets[] = {0, 1, 255, 256, 0xffffffffu};
    for (size_t i = 0; i < sizeof tickets / sizeof *tickets; i++) {
        uint32_t t = tickets[i], w = rcci_cipc_check_word(&want, 4096, t);
        ck_assert_uint_eq(w >> 24, t & 0xffu);
        ck_assert_int_eq(rcci_cipc_check_queued(w, &want, 4096, t, "rank 1", "rank 0", NULL),
                         RCC_SUCCESS);
        uint32_t wrong_len = rcci_cipc_check_word(&want, 4100, t);
        uint32_t wrong_op = rcci_cipc_check_word(&other, 4096, t);
        ck_assert_uint_ne(wrong_len, w);
        ck_assert_uint_ne(wrong_op, w);
        ck_assert_int_eq(
            rcci_cipc_check_queued(wrong_len, &want, 4096, t, "rank 1", "rank 0", NULL),
            RCC_ERR_MISMATCH);
        ck_assert(strstr(rcci_tls_error(), "rank 1") != NULL);
        ck_assert_int_eq(rcci_cipc_check_queued(wrong_op, &want, 4096, t, "rank 1", "rank 0", NULL),
                         RCC_ERR_MISMATCH);
        uint32_t later = rcci_cipc_check_word(&want, 4096, t + RCCI_CIPC_CHECKS);
        ck_assert_int_eq(rcci_cipc_check_queued(later, &want, 4096, t, "rank 1", "rank 0", NULL),
                         RCC_ERR_MISMATCH);
        /* Kept while the tail has not freed fragment t + CHECKS's slot. */
        uint32_t last = t + RCCI_CIPC_CHECKS - RCCI_CIPC_SLOTS; /* its slot's previous fragment */
        ck_assert(rcci_cipc_check_kept(t, t));
        ck_assert(rcci_cipc_check_kept(t + 1, t));
        ck_assert(rcci_cipc_check_kept(last, t));      /* `last` not released yet */
        ck_assert(!rcci_cipc_check_kept(last + 1, t)); /* released: t + CHECKS may be written */
        ck_assert(!rcci_cipc_check_kept(t + 1000, t));
    }
    rcci_cipc_hdr_t h = {.seq = 7, .frag = 0, .bytes = 4096, .flags = RCCI_CIPC_QUEUED};
    memcpy(h.sig, want.sig, sizeof h.sig);
    ck_assert_int_eq(rcci_cipc_check(&h, &want, 4096, 0, "rank 1", "rank 0", NULL),
                     RCC_ERR_MISMATCH);
    ck_assert(strstr(rcci_tls_error(), "queued") != NULL);
}
END_TEST

START_TEST(hellos_are_checked)
{
    rcci_cipc_hello_t h = {.magic = RCCI_CIPC_HELLO_MAGIC,
                           .version = RCCI_CIPC_VERSION,
                           .slots = RCCI_CIPC_SLOTS,
                           .slot_bytes = 2u << 20};
    ck_assert_int_eq(rcci_cipc_hello_check(&h, "rank 2"), RCC_SUCCESS);
    h.slot_bytes = 0;
    ck_assert_int_eq(rcci_cipc_hello_check(&h, "rank 2"), RCC_ERR_REMOTE);
    h.slot_bytes = 4096;
    h.slots = RCCI_CIPC_SLOTS + 1;
    ck_assert_int_eq(rcci_cipc_hello_check(&h, "rank 2"), RCC_ERR_REMOTE);
    h.slots = RCCI_CIPC_SLOTS;
    h.version = 99;
    ck_assert_int_eq(rcci_cipc_hello_check(&h, "rank 2"), RCC_ERR_REMOTE);
    ck_assert(strstr(rcci_tls_error(), "rank 2") != NULL);
}
END_TEST

/* A child maps the parent's memory, writes into it, and keeps its mapping
 * after the exporter's descriptor is gone; once the exporting process has
 * died, opening its handle fails with PEER_LOST, never a crash. */
START_TEST(shared_memory_across_processes)
{
    void *p;
    rcci_ipcmem_handle_t h;
    ck_assert_int_eq(rcci_ipcmem_create(12345, &p, &h), RCC_SUCCESS);
    pid_t child = fork();
    if (child == 0) {
        void *q;
        if (rcci_ipcmem_open(&h, &q) != RCC_SUCCESS)
            _exit(1);
        memset(q, 0x5a, 12345);
        rcci_ipcmem_close(q, 12345);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (size_t i = 0; i < 12345; i++)
        ck_assert_uint_eq(((unsigned char *)p)[i], 0x5a);
    rcci_ipcmem_free(p, &h);

    /* A dead exporter. */
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    child = fork();
    if (child == 0) {
        void *m;
        rcci_ipcmem_handle_t hh;
        if (rcci_ipcmem_create(4096, &m, &hh) != RCC_SUCCESS)
            _exit(1);
        if (write(pipefd[1], &hh, sizeof hh) != (ssize_t)sizeof hh)
            _exit(1);
        pause();
        _exit(0);
    }
    rcci_ipcmem_handle_t hh;
    ck_assert_int_eq(read(pipefd[0], &hh, sizeof hh), (ssize_t)sizeof hh);
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
    void *q = NULL;
    ck_assert_int_eq(rcci_ipcmem_open(&hh, &q), RCC_ERR_PEER_LOST);
    close(pipefd[0]);
    close(pipefd[1]);
    /* Not a handle at all. */
    hh.magic = 0;
    ck_assert_int_eq(rcci_ipcmem_open(&hh, &q), RCC_ERR_INVALID_ARGUMENT);
}
END_TEST

/* Which peers the transport takes: another process of this host, both with a
 * GPU. Ranks of one process (ncclCommInitAll's) cannot map each other's
 * handles, so they go to another transport, with the reason. */
START_TEST(peers_it_connects)
{
    const rcci_transport_t *cipc = NULL;
    for (int i = 0; rcci_transports[i]; i++)
        if (!strcmp(rcci_transports[i]->name, "cudaipc"))
            cipc = rcci_transports[i];
    ck_assert_ptr_nonnull(cipc);
    rcci_peer_info_t me = {.rank = 0, .host_hash = 7, .cuda_device = 0, .pid = 100};
    rcci_peer_info_t peer = {.rank = 1, .host_hash = 7, .cuda_device = 0, .pid = 101};
    int priority = 0;
    ck_assert_int_eq(cipc->can_connect(NULL, &me, &peer, &priority), RCC_SUCCESS);
    ck_assert_int_gt(priority, 0);
    peer.pid = me.pid;
    ck_assert_int_eq(cipc->can_connect(NULL, &me, &peer, &priority), RCC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "in this process"));
    peer.pid = 101, peer.host_hash = 8;
    ck_assert_int_eq(cipc->can_connect(NULL, &me, &peer, &priority), RCC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "another host"));
    peer.host_hash = 7, peer.cuda_device = -1;
    ck_assert_int_eq(cipc->can_connect(NULL, &me, &peer, &priority), RCC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "no GPU"));
}
END_TEST

static Suite *cipc_suite(void)
{
    Suite *s = suite_create("cudaipc protocol");
    TCase *tc = tcase_create("slots");
    tcase_add_test(tc, fragments_cover_the_message);
    tcase_add_test(tc, counters_wrap);
    tcase_add_test(tc, headers_are_checked);
    tcase_add_test(tc, queued_words_are_checked);
    tcase_add_test(tc, hellos_are_checked);
    tcase_add_test(tc, shared_memory_across_processes);
    tcase_add_test(tc, peers_it_connects);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(cipc_suite)
