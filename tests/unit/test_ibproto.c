/* The verbs transport's data protocol (transports/ibverbs/proto.h) without
 * a device: the immediate data, every way a peer can break the slot and
 * credit rules, and whole conversations over a simulated RC link whose
 * writes, completions and credits are delivered in a random interleaving,
 * every payload byte compared. The same for queued messages (qproto.h):
 * their immediates, checks, slot descriptions and counters. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check_main.h"

#include "err.h"
#include "ibverbs/proto.h"
#include "ibverbs/qproto.h"
#include "tcp/wire.h"

#define HDR RCCI_WIRE_HEADER_BYTES

START_TEST(geometry_limits)
{
    rcci_ibp_geom_t ok[] = {
        {1, RCCI_IBP_MIN_SLOT_BYTES}, {64, RCCI_IBP_MAX_SLOT_BYTES}, {8, 65536}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        ck_assert_int_eq(rcci_ibp_geom_check(&ok[i], "test"), RCC_SUCCESS);
    rcci_ibp_geom_t bad[] = {{0, 65536},
                             {65, 65536},
                             {4, RCCI_IBP_MIN_SLOT_BYTES - 1},
                             {4, RCCI_IBP_MAX_SLOT_BYTES + 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(rcci_ibp_geom_check(&bad[i], "RCC_IB_SLOTS"), RCC_ERR_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "RCC_IB_SLOTS"));
    }
}
END_TEST

START_TEST(immediates_round_trip)
{
    rcci_ibp_imm_t imm;
    uint32_t lens[] = {1, 2, 47, 48, 4095, 4096, 65537, RCCI_IBP_MAX_SLOT_BYTES};
    for (uint32_t slot = 0; slot < RCCI_IBP_MAX_SLOTS; slot++)
        for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
            ck_assert_int_eq(rcci_ibp_imm_parse(rcci_ibp_imm_data(slot, lens[i]), &imm, "p"),
                             RCC_SUCCESS);
            ck_assert_int_eq(imm.kind, RCCI_IBP_IMM_DATA);
            ck_assert_uint_eq(imm.slot, slot);
            ck_assert_uint_eq(imm.len, lens[i]);
        }
    uint64_t counts[] = {0, 1, RCCI_IBP_CREDIT_MOD - 1, RCCI_IBP_CREDIT_MOD,
                         5ull * RCCI_IBP_CREDIT_MOD + 7};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        ck_assert_int_eq(rcci_ibp_imm_parse(rcci_ibp_imm_credit(counts[i]), &imm, "p"),
                         RCC_SUCCESS);
        ck_assert_int_eq(imm.kind, RCCI_IBP_IMM_CREDIT);
        ck_assert_uint_eq(imm.taken, counts[i] % RCCI_IBP_CREDIT_MOD);
    }
    ck_assert_int_eq(rcci_ibp_imm_parse(rcci_ibp_imm_close(), &imm, "p"), RCC_SUCCESS);
    ck_assert_int_eq(imm.kind, RCCI_IBP_IMM_CLOSE);
}
END_TEST

START_TEST(foreign_immediates_are_named)
{
    rcci_ibp_imm_t imm;
    uint32_t bad[] = {rcci_ibp_imm_close() | 1u, rcci_ibp_imm_close() | 0x20000000u};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(rcci_ibp_imm_parse(bad[i], &imm, "rank 5 (mlx5_0)"), RCC_ERR_REMOTE);
        ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 5 (mlx5_0)"));
    }
    /* Kind 3 is a queued message's: handed over whole, judged by qproto. */
    rcci_ibq_imm_t q;
    uint32_t qbad[] = {0xffffffffu,
                       0xf0000000u,
                       rcci_ibq_imm_slots() | 1u,
                       rcci_ibq_imm_slots() | 0x08000000u,
                       rcci_ibp_imm_credit(5),
                       rcci_ibp_imm_data(3, 100)};
    for (size_t i = 0; i < sizeof qbad / sizeof *qbad; i++) {
        int queued = qbad[i] >> 30 == 3;
        ck_assert_int_eq(rcci_ibp_imm_parse(qbad[i], &imm, "p"), RCC_SUCCESS);
        ck_assert_int_eq(imm.kind == RCCI_IBP_IMM_QUEUED, queued);
        ck_assert_int_eq(rcci_ibq_imm_parse(qbad[i], &q, "rank 5 (mlx5_0)"), RCC_ERR_REMOTE);
        ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 5 (mlx5_0)"));
    }
}
END_TEST

/* ---- queued messages (qproto.h) ---- */

START_TEST(queued_immediates_round_trip)
{
    rcci_ibp_imm_t imm;
    rcci_ibq_imm_t q;
    uint32_t checks[] = {0, 1, 0x123456, 0xffffff};
    for (uint64_t k = 0; k < 40; k++)
        for (size_t i = 0; i < sizeof checks / sizeof *checks; i++) {
            uint32_t raw = rcci_ibq_imm_data(k, checks[i]);
            ck_assert_int_eq(rcci_ibp_imm_parse(raw, &imm, "p"), RCC_SUCCESS);
            ck_assert_int_eq(imm.kind, RCCI_IBP_IMM_QUEUED);
            ck_assert_uint_eq(imm.raw, raw);
            ck_assert_int_eq(rcci_ibq_imm_parse(raw, &q, "p"), RCC_SUCCESS);
            ck_assert_int_eq(q.kind, RCCI_IBQ_DATA);
            ck_assert_uint_eq(q.seq, k % RCCI_IBQ_SEQ_MOD);
            ck_assert_uint_eq(q.check, checks[i]);
        }
    uint64_t counts[] = {0, 1, RCCI_IBQ_CREDIT_MOD - 1, RCCI_IBQ_CREDIT_MOD,
                         3ull * RCCI_IBQ_CREDIT_MOD + 9};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        ck_assert_int_eq(rcci_ibq_imm_parse(rcci_ibq_imm_credit(counts[i]), &q, "p"), RCC_SUCCESS);
        ck_assert_int_eq(q.kind, RCCI_IBQ_CREDIT);
        ck_assert_uint_eq(q.released, counts[i] % RCCI_IBQ_CREDIT_MOD);
    }
    ck_assert_int_eq(rcci_ibq_imm_parse(rcci_ibq_imm_slots(), &q, "p"), RCC_SUCCESS);
    ck_assert_int_eq(q.kind, RCCI_IBQ_SLOTS);
}
END_TEST

static void describe_sig(const uint8_t sig[RCCI_SIG_BYTES], char *buf, size_t size)
{
    snprintf(buf, size, "operation %u", sig[0]);
}

/* The check tells operations and lengths apart; a mismatch names the
 * peer, this side and what it expected. */
START_TEST(queued_checks_tell_operations_apart)
{
    rcci_tag_t a = {.seq = 1}, b = {.seq = 2};
    a.sig[0] = 7;
    b.sig[0] = 8;
    uint32_t ca = rcci_ibq_check(&a, 4096);
    ck_assert_uint_le(ca, 0xffffffu);
    ck_assert_uint_eq(ca, rcci_ibq_check(&(rcci_tag_t){.seq = 99, .sig = {7}}, 4096));
    ck_assert_uint_ne(ca, rcci_ibq_check(&b, 4096));
    ck_assert_uint_ne(ca, rcci_ibq_check(&a, 4095));
    ck_assert_int_eq(rcci_ibq_check_match(ca, &a, 4096, 3, "rank 1", "rank 2", describe_sig),
                     RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibq_check_match(ca, &b, 4096, 3, "rank 1", "rank 2", describe_sig),
                     RCC_ERR_MISMATCH);
    const char *e = rcci_tls_error();
    ck_assert_ptr_nonnull(strstr(e, "rank 1"));
    ck_assert_ptr_nonnull(strstr(e, "rank 2"));
    ck_assert_ptr_nonnull(strstr(e, "operation 8"));
    ck_assert_ptr_nonnull(strstr(e, "4096 bytes"));
}
END_TEST

START_TEST(queued_slot_descriptions)
{
    rcci_ibq_slots_t s = {.addr = 0x7f0012345000ull,
                          .rkey = 0xabcdef01u,
                          .nslots = 8,
                          .slot_bytes = 8u << 20},
                     got;
    uint8_t wire[RCCI_IBQ_SLOTS_BYTES];
    rcci_ibq_slots_encode(wire, &s);
    ck_assert_int_eq(rcci_ibq_slots_decode(wire, &got, 8, 8u << 20, "p"), RCC_SUCCESS);
    ck_assert_uint_eq(got.addr, s.addr);
    ck_assert_uint_eq(got.rkey, s.rkey);
    ck_assert_int_eq(rcci_ibq_slots_decode(wire, &got, 4, 8u << 20, "rank 3"),
                     RCC_ERR_INVALID_USAGE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "RCC_IB_GDR_SLOT_BYTES"));
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 3"));
    ck_assert_int_eq(rcci_ibq_slots_decode(wire, &got, 8, 1u << 20, "p"), RCC_ERR_INVALID_USAGE);
    wire[0] ^= 1;
    ck_assert_int_eq(rcci_ibq_slots_decode(wire, &got, 8, 8u << 20, "rank 3"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 3"));
}
END_TEST

/* Sender and receiver counters through a conversation: the GPU stages
 * ahead, writes wait for credits, the receiver's GPU releases late, every
 * message's check read back while it can be; counters start near the
 * wrap of the 32-bit GPU counters and of the credits. */
START_TEST(queued_counters_in_a_conversation)
{
    uint64_t starts[] = {0, (1ull << 32) - 5, RCCI_IBQ_CREDIT_MOD - 3};
    for (size_t si = 0; si < sizeof starts / sizeof *starts; si++) {
        const uint32_t n = 4;
        uint64_t base = starts[si];
        rcci_ibq_tx_t tx;
        rcci_ibq_rx_t rx;
        rcci_ibq_tx_init(&tx, n);
        rcci_ibq_rx_init(&rx, n);
        tx.posted = tx.completed = tx.released = base;
        rx.arrived = rx.released = rx.returned = base;
        uint64_t staged = base, total = base + 200, gpu_released = base;
        unsigned seed = 7;
        rcci_tag_t tag = {0};
        while (rx.released < total) {
            unsigned r = (unsigned)rand_r(&seed) % 5;
            if (r == 0 && staged < total && staged - tx.completed < n) {
                staged++; /* the GPU waits for its staging slot, then stages */
            } else if (r == 1 && rcci_ibq_tx_ready(&tx, (uint32_t)staged)) {
                tag.sig[0] = (uint8_t)tx.posted;
                rcci_ibq_imm_t q;
                ck_assert_int_eq(
                    rcci_ibq_imm_parse(rcci_ibq_imm_data(tx.posted, rcci_ibq_check(&tag, 64)), &q,
                                       "p"),
                    RCC_SUCCESS);
                rcci_ibq_tx_posted(&tx);
                ck_assert_int_eq(rcci_ibq_tx_completed(&tx), RCC_SUCCESS);
                ck_assert_int_eq(rcci_ibq_rx_arrived(&rx, &q, "p"), RCC_SUCCESS);
            } else if (r == 2 && gpu_released < rx.arrived) {
                uint64_t k = gpu_released;
                uint32_t check;
                ck_assert_int_eq(rcci_ibq_rx_check_of(&rx, k, &check), 1);
                tag.sig[0] = (uint8_t)k;
                ck_assert_uint_eq(check, rcci_ibq_check(&tag, 64));
                rcci_ibq_rx_released(&rx, (uint32_t)++gpu_released);
            } else if (r == 3) {
                uint32_t imm;
                rcci_ibq_imm_t q;
                if (rcci_ibq_rx_credit_due(&rx, &imm)) {
                    ck_assert_int_eq(rcci_ibq_imm_parse(imm, &q, "p"), RCC_SUCCESS);
                    ck_assert_int_eq(rcci_ibq_tx_credit(&tx, q.released, "p"), RCC_SUCCESS);
                }
            }
            ck_assert_uint_le(tx.posted - tx.released, n);
            ck_assert_uint_le(rx.arrived - rx.returned, n);
        }
        ck_assert_uint_eq(tx.posted, total);
        /* Checks that slots have been overwritten since are not offered. */
        uint32_t check;
        ck_assert_int_eq(rcci_ibq_rx_check_of(&rx, total - n, &check), 1);
        ck_assert_int_eq(rcci_ibq_rx_check_of(&rx, total - n - 1, &check), 0);
        ck_assert_int_eq(rcci_ibq_rx_check_of(&rx, total, &check), 0);
    }
}
END_TEST

/* A peer that breaks the rules is named: a message out of order, one past
 * its credits, credits for messages never written; a GPU counter that ran
 * through after an abort releases no more than arrived. */
START_TEST(queued_rule_breakers_are_named)
{
    rcci_ibq_rx_t rx;
    rcci_ibq_tx_t tx;
    rcci_ibq_imm_t q;
    rcci_ibq_rx_init(&rx, 2);
    rcci_ibq_imm_parse(rcci_ibq_imm_data(1, 0), &q, "p");
    ck_assert_int_eq(rcci_ibq_rx_arrived(&rx, &q, "rank 4"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 4"));
    for (uint64_t k = 0; k < 2; k++) {
        rcci_ibq_imm_parse(rcci_ibq_imm_data(k, 0), &q, "p");
        ck_assert_int_eq(rcci_ibq_rx_arrived(&rx, &q, "p"), RCC_SUCCESS);
    }
    rcci_ibq_imm_parse(rcci_ibq_imm_data(2, 0), &q, "p");
    ck_assert_int_eq(rcci_ibq_rx_arrived(&rx, &q, "rank 4"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "credits"));
    rcci_ibq_rx_released(&rx, 1000); /* ran through: at most what arrived */
    ck_assert_uint_eq(rx.released, 2);
    rcci_ibq_rx_released(&rx, 1); /* never backwards */
    ck_assert_uint_eq(rx.released, 2);
    rcci_ibq_tx_init(&tx, 2);
    ck_assert_int_eq(rcci_ibq_tx_completed(&tx), RCC_ERR_INTERNAL);
    ck_assert_int_eq(rcci_ibq_tx_ready(&tx, 0), 0);
    ck_assert_int_eq(rcci_ibq_tx_ready(&tx, 1), 1);
    rcci_ibq_tx_posted(&tx);
    ck_assert_int_eq(rcci_ibq_tx_credit(&tx, 2, "rank 4"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 4"));
    ck_assert_int_eq(rcci_ibq_tx_credit(&tx, 1, "p"), RCC_SUCCESS);
    rcci_ibq_tx_posted(&tx);
    rcci_ibq_tx_posted(&tx);
    ck_assert_int_eq(rcci_ibq_tx_ready(&tx, 100), 0); /* two out, none released */
}
END_TEST

/* Fragments of one message: slots used, header first, payload offsets
 * contiguous, lengths summing to header + payload. */
START_TEST(fragments_cover_a_message)
{
    rcci_ibp_geom_t g = {64, 4096};
    uint64_t sizes[] = {
        0, 1, 47, 48, 4096 - HDR - 1, 4096 - HDR, 4096 - HDR + 1, 4096, 3 * 4096 + 17, 60 * 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        rcci_ibp_tx_t tx;
        rcci_ibp_tx_init(&tx, &g);
        uint64_t sent = 0, payload = 0, n = 0;
        rcci_ibp_frag_t f;
        while (rcci_ibp_tx_next(&tx, sizes[i], &sent, &f)) {
            ck_assert_uint_eq(f.slot, n % g.nslots);
            ck_assert_uint_eq(f.remote_offset, (uint64_t)f.slot * g.slot_bytes);
            ck_assert_uint_eq(f.header_bytes, n == 0 ? HDR : 0);
            ck_assert_uint_eq(f.payload_offset, payload);
            ck_assert_uint_eq(f.header_bytes + f.payload_bytes, f.len);
            ck_assert_uint_le(f.len, g.slot_bytes);
            ck_assert_int_eq(f.last, sent == HDR + sizes[i]);
            rcci_ibp_imm_t imm;
            ck_assert_int_eq(rcci_ibp_imm_parse(f.imm, &imm, "p"), RCC_SUCCESS);
            ck_assert_uint_eq(imm.slot, f.slot);
            ck_assert_uint_eq(imm.len, f.len);
            payload += f.payload_bytes;
            n++;
        }
        ck_assert_uint_eq(payload, sizes[i]);
        ck_assert_uint_eq(sent, HDR + sizes[i]);
        ck_assert_uint_eq(n, rcci_ibp_msg_slots(&g, sizes[i]));
    }
}
END_TEST

/* The sender stops at nslots slots in flight until both a credit and the
 * local completion free the oldest. */
START_TEST(sender_waits_for_credit_and_completion)
{
    rcci_ibp_geom_t g = {4, 4096};
    rcci_ibp_tx_t tx;
    rcci_ibp_tx_init(&tx, &g);
    uint64_t sent = 0;
    rcci_ibp_frag_t f;
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(rcci_ibp_tx_next(&tx, 10 * 4096, &sent, &f), 1);
    ck_assert_int_eq(rcci_ibp_tx_next(&tx, 10 * 4096, &sent, &f), 0);
    ck_assert_int_eq(rcci_ibp_tx_credit(&tx, 1, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_tx_next(&tx, 10 * 4096, &sent, &f), 0); /* not completed */
    ck_assert_int_eq(rcci_ibp_tx_completed(&tx), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_tx_completed(&tx), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_tx_next(&tx, 10 * 4096, &sent, &f), 1); /* credit was 1 */
    ck_assert_uint_eq(f.slot, 0);
    ck_assert_int_eq(rcci_ibp_tx_next(&tx, 10 * 4096, &sent, &f), 0);
    ck_assert_int_eq(rcci_ibp_tx_idle(&tx), 0);
    /* Credits for slots never written, and completions never posted. */
    ck_assert_int_eq(rcci_ibp_tx_credit(&tx, 6, "rank 2"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 2"));
    ck_assert_int_eq(rcci_ibp_tx_credit(&tx, 5, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_tx_credit(&tx, 5, "p"), RCC_SUCCESS); /* a repeat moves nothing */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(rcci_ibp_tx_completed(&tx), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_tx_completed(&tx), RCC_ERR_INTERNAL);
    ck_assert_int_eq(rcci_ibp_tx_idle(&tx), 1);
}
END_TEST

/* Credit counts wrap at 2^30 without losing their place. */
START_TEST(credits_wrap)
{
    rcci_ibp_geom_t g = {8, 4096};
    rcci_ibp_tx_t tx;
    rcci_ibp_tx_init(&tx, &g);
    tx.written = tx.completed = tx.taken = RCCI_IBP_CREDIT_MOD - 3;
    uint64_t sent = 0;
    rcci_ibp_frag_t f;
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(rcci_ibp_tx_next(&tx, 8 * 4096, &sent, &f), 1);
    ck_assert_uint_eq(f.slot, (RCCI_IBP_CREDIT_MOD - 3 + 7) % 8);
    rcci_ibp_imm_t imm;
    ck_assert_int_eq(rcci_ibp_imm_parse(rcci_ibp_imm_credit(tx.written), &imm, "p"), RCC_SUCCESS);
    ck_assert_uint_lt(imm.taken, 8); /* wrapped */
    ck_assert_int_eq(rcci_ibp_tx_credit(&tx, imm.taken, "p"), RCC_SUCCESS);
    ck_assert_uint_eq(tx.taken, tx.written);
}
END_TEST

static rcci_ibp_imm_t data_imm(uint32_t slot, uint32_t len)
{
    rcci_ibp_imm_t imm;
    ck_assert_int_eq(rcci_ibp_imm_parse(rcci_ibp_imm_data(slot, len), &imm, "p"), RCC_SUCCESS);
    return imm;
}

START_TEST(receiver_names_broken_writes)
{
    rcci_ibp_geom_t g = {2, 4096};
    rcci_ibp_rx_t rx;
    rcci_ibp_take_t t;
    rcci_ibp_rx_init(&rx, &g);
    rcci_ibp_imm_t wrong_slot = data_imm(1, 100), too_long = data_imm(0, 4097);
    ck_assert_int_eq(rcci_ibp_rx_arrived(&rx, &wrong_slot, "rank 1"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "slot 1 where slot 0"));
    ck_assert_int_eq(rcci_ibp_rx_arrived(&rx, &too_long, "rank 1"), RCC_ERR_REMOTE);
    ck_assert_int_eq(rcci_ibp_rx_take(&rx, &t, "p"), RCC_ERR_INTERNAL); /* nothing started */
    ck_assert_int_eq(rcci_ibp_rx_start(&rx, 0, "p"), RCC_ERR_INTERNAL); /* nothing arrived */
    rcci_ibp_imm_t s0 = data_imm(0, 4096), s1 = data_imm(1, 4096);
    ck_assert_int_eq(rcci_ibp_rx_arrived(&rx, &s0, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_arrived(&rx, &s1, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_arrived(&rx, &s0, "rank 1"), RCC_ERR_REMOTE); /* overrun */
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "ignored its credits"));
    /* A header announcing other lengths than the slots hold. */
    ck_assert_int_eq(rcci_ibp_rx_start(&rx, 100, "rank 1"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "100-byte message"));
    ck_assert_int_eq(rcci_ibp_rx_start(&rx, 3 * 4096, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_take(&rx, &t, "p"), RCC_SUCCESS);
    ck_assert_uint_eq(t.slot_offset, HDR);
    ck_assert_uint_eq(t.payload_offset, 0);
    ck_assert_uint_eq(t.bytes, 4096 - HDR);
    ck_assert_int_eq(t.last, 0);
    ck_assert_int_eq(rcci_ibp_rx_take(&rx, &t, "p"), RCC_SUCCESS);
    ck_assert_uint_eq(t.slot_offset, 0);
    ck_assert_uint_eq(t.payload_offset, 4096 - HDR);
    ck_assert_int_eq(rcci_ibp_rx_take(&rx, &t, "p"), RCC_ERR_INTERNAL); /* none arrived */
    rcci_ibp_imm_t short0 = data_imm(0, 10);
    ck_assert_int_eq(rcci_ibp_rx_arrived(&rx, &short0, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_take(&rx, &t, "rank 1"), RCC_ERR_REMOTE); /* needs 4096 */
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "needs 4096"));
}
END_TEST

/* Credits go back at a quarter of the slots, or when nothing is left. */
START_TEST(credit_policy)
{
    rcci_ibp_geom_t g = {8, 4096};
    rcci_ibp_rx_t rx;
    rcci_ibp_rx_init(&rx, &g);
    uint32_t imm;
    rcci_ibp_take_t t;
    ck_assert_int_eq(rcci_ibp_rx_credit_due(&rx, &imm), 0);
    for (uint32_t i = 0; i < 4; i++) {
        rcci_ibp_imm_t d = data_imm(i, 100);
        ck_assert_int_eq(rcci_ibp_rx_arrived(&rx, &d, "p"), RCC_SUCCESS);
    }
    ck_assert_int_eq(rcci_ibp_rx_start(&rx, 100 - HDR, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_take(&rx, &t, "p"), RCC_SUCCESS);
    ck_assert_int_eq(t.last, 1);
    ck_assert_int_eq(rcci_ibp_rx_credit_due(&rx, &imm), 0); /* 1 < 2, and more to take */
    ck_assert_int_eq(rcci_ibp_rx_start(&rx, 100 - HDR, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_take(&rx, &t, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_credit_due(&rx, &imm), 1);
    ck_assert_uint_eq(imm, rcci_ibp_imm_credit(2));
    ck_assert_int_eq(rcci_ibp_rx_credit_due(&rx, &imm), 0);
    ck_assert_int_eq(rcci_ibp_rx_start(&rx, 100 - HDR, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_take(&rx, &t, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_credit_due(&rx, &imm), 0);
    ck_assert_int_eq(rcci_ibp_rx_start(&rx, 100 - HDR, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_take(&rx, &t, "p"), RCC_SUCCESS);
    ck_assert_int_eq(rcci_ibp_rx_credit_due(&rx, &imm), 1); /* drained */
    ck_assert_uint_eq(imm, rcci_ibp_imm_credit(4));
}
END_TEST

/* ---- a simulated RC link ------------------------------------------------ */

#define SIM_QUEUE 256

typedef struct {
    rcci_ibp_geom_t g;
    rcci_ibp_tx_t tx;
    rcci_ibp_rx_t rx;
    uint8_t *staging, *slots; /* sender's staging slots, receiver's slots */
    uint32_t wire[SIM_QUEUE]; /* writes posted, not yet landed (their immediates) */
    int wire_head, wire_n;
    int landed_uncompleted; /* landed writes whose local completion is pending */
    uint32_t credits[SIM_QUEUE];
    int credit_head, credit_n;
} sim_t;

static void sim_push(uint32_t *q, int head, int *n, uint32_t v)
{
    ck_assert_int_lt(*n, SIM_QUEUE);
    q[(head + *n) % SIM_QUEUE] = v;
    (*n)++;
}

static uint32_t sim_pop(uint32_t *q, int *head, int *n)
{
    uint32_t v = q[*head];
    *head = (*head + 1) % SIM_QUEUE;
    (*n)--;
    return v;
}

/* Sends `nmsg` messages of the given sizes and receives them with every
 * step chosen at random among those possible (after `start` slots of an
 * earlier conversation); returns steps taken. */
static long sim_run(const rcci_ibp_geom_t *g, const uint64_t *sizes, int nmsg, unsigned seed,
                    uint64_t start)
{
    sim_t s = {.g = *g};
    rcci_ibp_tx_init(&s.tx, g);
    rcci_ibp_rx_init(&s.rx, g);
    /* As if `start` slots had gone through already. */
    s.tx.written = s.tx.completed = s.tx.taken = start;
    s.rx.arrived = s.rx.taken = s.rx.returned = start;
    size_t region = (size_t)g->nslots * g->slot_bytes;
    s.staging = calloc(1, region);
    s.slots = calloc(1, region);
    uint8_t **src = calloc((size_t)nmsg, sizeof *src), **dst = calloc((size_t)nmsg, sizeof *dst);
    for (int m = 0; m < nmsg; m++) {
        src[m] = malloc(sizes[m] + 1);
        dst[m] = calloc(1, sizes[m] + 1);
        for (uint64_t i = 0; i < sizes[m]; i++)
            src[m][i] = (uint8_t)(i * 131 + (uint64_t)m * 7 + 1);
    }
    int send_m = 0, recv_m = 0;
    uint64_t sent = 0;
    long steps = 0;
    srand(seed);
    while (recv_m < nmsg) {
        ck_assert_msg(++steps < 10000000, "the simulated link deadlocked");
        switch (rand() % 5) {
        case 0: { /* post a write */
            rcci_ibp_frag_t f;
            if (send_m >= nmsg || !rcci_ibp_tx_next(&s.tx, sizes[send_m], &sent, &f))
                break;
            uint8_t *st = s.staging + f.remote_offset;
            if (f.header_bytes) {
                rcci_tag_t tag = {.seq = (uint32_t)send_m};
                rcci_wire_encode(st, &tag, sizes[send_m]);
            }
            memcpy(st + f.header_bytes, src[send_m] + f.payload_offset, f.payload_bytes);
            sim_push(s.wire, s.wire_head, &s.wire_n, f.imm);
            if (f.last)
                send_m++, sent = 0;
            break;
        }
        case 1: { /* a write lands: the RDMA engine reads the staging slot now */
            if (!s.wire_n)
                break;
            rcci_ibp_imm_t imm;
            ck_assert_int_eq(
                rcci_ibp_imm_parse(sim_pop(s.wire, &s.wire_head, &s.wire_n), &imm, "p"),
                RCC_SUCCESS);
            size_t at = (size_t)imm.slot * g->slot_bytes;
            memcpy(s.slots + at, s.staging + at, imm.len);
            ck_assert_int_eq(rcci_ibp_rx_arrived(&s.rx, &imm, "p"), RCC_SUCCESS);
            s.landed_uncompleted++;
            break;
        }
        case 2: /* its local completion */
            if (!s.landed_uncompleted)
                break;
            s.landed_uncompleted--;
            ck_assert_int_eq(rcci_ibp_tx_completed(&s.tx), RCC_SUCCESS);
            break;
        case 3: { /* the receiver takes a slot, then maybe returns credit */
            rcci_ibp_slot_t sl;
            if (!rcci_ibp_rx_peek(&s.rx, &sl))
                break;
            if (sl.starts_message) {
                rcci_wire_frame_t fr;
                ck_assert_int_eq(
                    rcci_wire_parse(s.slots + (size_t)sl.slot * g->slot_bytes, &fr, "p"),
                    RCC_SUCCESS);
                ck_assert_uint_eq(fr.tag.seq, recv_m);
                ck_assert_uint_eq(fr.length, sizes[recv_m]);
                ck_assert_int_eq(rcci_ibp_rx_start(&s.rx, fr.length, "p"), RCC_SUCCESS);
            }
            rcci_ibp_take_t t;
            ck_assert_int_eq(rcci_ibp_rx_take(&s.rx, &t, "p"), RCC_SUCCESS);
            ck_assert_uint_le(t.payload_offset + t.bytes, sizes[recv_m]);
            memcpy(dst[recv_m] + t.payload_offset,
                   s.slots + (size_t)t.slot * g->slot_bytes + t.slot_offset, t.bytes);
            if (t.last)
                recv_m++;
            uint32_t imm;
            if (rcci_ibp_rx_credit_due(&s.rx, &imm))
                sim_push(s.credits, s.credit_head, &s.credit_n, imm);
            break;
        }
        case 4: { /* a credit arrives */
            if (!s.credit_n)
                break;
            rcci_ibp_imm_t imm;
            ck_assert_int_eq(
                rcci_ibp_imm_parse(sim_pop(s.credits, &s.credit_head, &s.credit_n), &imm, "p"),
                RCC_SUCCESS);
            ck_assert_int_eq(imm.kind, RCCI_IBP_IMM_CREDIT);
            ck_assert_int_eq(rcci_ibp_tx_credit(&s.tx, imm.taken, "p"), RCC_SUCCESS);
            break;
        }
        }
        ck_assert_uint_le(s.tx.written - s.rx.taken, g->nslots); /* never overrun */
    }
    for (int m = 0; m < nmsg; m++) {
        ck_assert_msg(memcmp(src[m], dst[m], sizes[m]) == 0, "message %d (%llu bytes) differs", m,
                      (unsigned long long)sizes[m]);
        ck_assert_uint_eq(dst[m][sizes[m]], 0); /* nothing past its end */
        free(src[m]);
        free(dst[m]);
    }
    free(src);
    free(dst);
    free(s.staging);
    free(s.slots);
    return steps;
}

START_TEST(conversations_over_a_simulated_link)
{
    rcci_ibp_geom_t geoms[] = {{1, 4096}, {2, 4096}, {3, 5000}, {8, 4096}, {64, 8192}};
    uint64_t sizes[] = {0,    1,    47,    48, 4048, 4049,  4096,   5000, 4095,
                        1000, 9999, 40000, 3,  0,    12289, 100000, 7,    65536};
    int n = (int)(sizeof sizes / sizeof *sizes);
    for (size_t i = 0; i < sizeof geoms / sizeof *geoms; i++)
        for (unsigned seed = 1; seed <= 4; seed++)
            sim_run(&geoms[i], sizes, n, seed * 7919u + (unsigned)i, 0);
}
END_TEST

/* Many small messages through one slot pass the credit counter's wrap
 * point when started just short of it. */
START_TEST(long_conversation)
{
    rcci_ibp_geom_t g = {4, 4096};
    enum { N = 2000 };
    uint64_t *sizes = malloc(N * sizeof *sizes);
    for (int i = 0; i < N; i++)
        sizes[i] = (uint64_t)(i * 37) % 9000;
    sim_run(&g, sizes, N, 42, RCCI_IBP_CREDIT_MOD - 1000);
    free(sizes);
}
END_TEST

static Suite *ibproto_suite(void)
{
    Suite *s = suite_create("ibproto");
    TCase *tc = tcase_create("proto");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, geometry_limits);
    tcase_add_test(tc, immediates_round_trip);
    tcase_add_test(tc, foreign_immediates_are_named);
    tcase_add_test(tc, fragments_cover_a_message);
    tcase_add_test(tc, sender_waits_for_credit_and_completion);
    tcase_add_test(tc, credits_wrap);
    tcase_add_test(tc, receiver_names_broken_writes);
    tcase_add_test(tc, credit_policy);
    tcase_add_test(tc, conversations_over_a_simulated_link);
    tcase_add_test(tc, long_conversation);
    tcase_add_test(tc, queued_immediates_round_trip);
    tcase_add_test(tc, queued_checks_tell_operations_apart);
    tcase_add_test(tc, queued_slot_descriptions);
    tcase_add_test(tc, queued_counters_in_a_conversation);
    tcase_add_test(tc, queued_rule_breakers_are_named);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(ibproto_suite)
