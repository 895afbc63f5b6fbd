/* The TCP frame header: round trip, every way a header can be wrong, the
 * operation signatures it carries and the failure notice. */
#include <check.h>
#include <string.h>

#include "../check_main.h"

#include "comm.h"
#include "err.h"
#include "tcp/wire.h"

/* Parse then match, as the transport does for a posted receive. */
static rcc_result_t wire_check(const uint8_t *h, const rcci_tag_t *expect, uint64_t length,
                               const char *peer)
{
    rcci_wire_frame_t f;
    rcc_result_t res = rcci_wire_parse(h, &f, peer);
    if (res == RCC_SUCCESS && f.notice)
        return rcci_error(f.notice_res, "notice");
    return res == RCC_SUCCESS
               ? rcci_wire_match(&f, expect, length, peer, "rank 0", rcci_sig_describe)
               : res;
}

static rcci_tag_t tag_of(uint32_t seq, int kind, uint64_t count)
{
    rcci_sig_t sig = {.seq = 17,
                      .kind = kind,
                      .dtype = RCC_FLOAT32,
                      .redop = RCC_SUM,
                      .algo = RCCI_ALLREDUCE_RING,
                      .root = 2,
                      .count = count};
    rcci_tag_t tag = {.seq = seq};
    rcci_sig_encode(&sig, tag.sig);
    return tag;
}

START_TEST(round_trip)
{
    uint8_t h[RCCI_WIRE_HEADER_BYTES];
    rcci_tag_t tag = tag_of(77, RCCI_COLL_ALLREDUCE, 4096);
    rcci_wire_encode(h, &tag, 1ull << 40);
    ck_assert_int_eq(wire_check(h, &tag, 1ull << 40, "peer"), RCC_SUCCESS);
    /* The layout is explicit little-endian, independent of the host. */
    ck_assert_int_eq(h[0], 'R');
    ck_assert_int_eq(h[1], 'C');
    ck_assert_int_eq(h[2], 'C');
    ck_assert_int_eq(h[3], 'D');
    ck_assert_int_eq(h[4], RCCI_WIRE_VERSION);
    ck_assert_int_eq(h[6], RCCI_WIRE_HEADER_BYTES);
    ck_assert_int_eq(h[8], 77);
    ck_assert_int_eq(h[16 + 5], 1);
    ck_assert_int_eq(memcmp(h + 24, tag.sig, RCCI_SIG_BYTES), 0);
}
END_TEST

START_TEST(bad_headers_are_named)
{
    uint8_t h[RCCI_WIRE_HEADER_BYTES];
    rcci_tag_t tag = tag_of(5, RCCI_COLL_ALLREDUCE, 1024),
               other = tag_of(6, RCCI_COLL_ALLREDUCE, 1024);
    rcci_wire_encode(h, &tag, 4096);
    ck_assert_int_eq(wire_check(h, &other, 4096, "rank 2"), RCC_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "message #5"));
    ck_assert_int_eq(wire_check(h, &tag, 8192, "rank 2"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "4096-byte"));
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 2"));
    uint8_t bad[RCCI_WIRE_HEADER_BYTES];
    memcpy(bad, h, sizeof bad);
    bad[0] = 'X';
    ck_assert_int_eq(wire_check(bad, &tag, 4096, "p"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "not a ringcc frame"));
    memcpy(bad, h, sizeof bad);
    bad[4] = 9;
    ck_assert_int_eq(wire_check(bad, &tag, 4096, "p"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "version 9"));
    memcpy(bad, h, sizeof bad);
    bad[6] = 30;
    ck_assert_int_eq(wire_check(bad, &tag, 4096, "p"), RCC_ERR_REMOTE);
    memcpy(bad, h, sizeof bad);
    bad[5] = 0x08; /* no such flag */
    ck_assert_int_eq(wire_check(bad, &tag, 4096, "p"), RCC_ERR_REMOTE);
    memcpy(bad, h, sizeof bad);
    bad[13] = 1;
    ck_assert_int_eq(wire_check(bad, &tag, 4096, "p"), RCC_ERR_REMOTE);
}
END_TEST

/* Every single-byte corruption is caught: all 48 bytes are checked. */
START_TEST(every_corrupted_byte_is_caught)
{
    uint8_t h[RCCI_WIRE_HEADER_BYTES];
    rcci_tag_t tag = tag_of(123456, RCCI_COLL_BROADCAST, 16384);
    rcci_wire_encode(h, &tag, 65536);
    for (int i = 0; i < RCCI_WIRE_HEADER_BYTES; i++) {
        uint8_t bad[RCCI_WIRE_HEADER_BYTES];
        memcpy(bad, h, sizeof bad);
        bad[i] ^= 0x40;
        ck_assert_msg(wire_check(bad, &tag, 65536, "p") != RCC_SUCCESS, "byte %d", i);
    }
}
END_TEST

/* Ranks in different collectives: the receiver names both calls. */
START_TEST(mismatch_names_both_calls)
{
    uint8_t h[RCCI_WIRE_HEADER_BYTES];
    rcci_tag_t theirs = tag_of(17, RCCI_COLL_ALLGATHER, 1024);
    rcci_tag_t ours = tag_of(17, RCCI_COLL_ALLREDUCE, 4096);
    rcci_wire_encode(h, &theirs, 4096);
    ck_assert_int_eq(wire_check(h, &ours, 4096, "rank 2"), RCC_ERR_MISMATCH);
    const char *text = rcci_tls_error();
    ck_assert_msg(strstr(text, "rank 2 called allgather(count=1024, float32) as op #17 while "
                               "rank 0 called allreduce(count=4096, float32, sum, ring) as op #17"),
                  "%s", text);
    /* Every field a rank must agree on is in the signature. */
    rcci_sig_t base = {.seq = 3,
                       .kind = RCCI_COLL_REDUCE,
                       .dtype = RCC_INT32,
                       .redop = RCC_MAX,
                       .root = 1,
                       .count = 10};
    rcci_sig_t variants[] = {base, base, base, base, base, base};
    variants[0].seq = 4;
    variants[1].kind = RCCI_COLL_BROADCAST;
    variants[2].dtype = RCC_UINT32;
    variants[3].redop = RCC_MIN;
    variants[4].root = 0;
    variants[5].count = 11;
    uint8_t a[RCCI_SIG_BYTES], b[RCCI_SIG_BYTES];
    rcci_sig_encode(&base, a);
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        rcci_sig_encode(&variants[i], b);
        ck_assert_msg(memcmp(a, b, sizeof a) != 0, "variant %zu", i);
    }
    /* Fields that do not apply to a kind do not count: a broadcast's op. */
    base.kind = RCCI_COLL_BROADCAST;
    rcci_sig_encode(&base, a);
    base.redop = RCC_SUM;
    rcci_sig_encode(&base, b);
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
    char d[160];
    rcci_sig_describe(a, d, sizeof d);
    ck_assert_str_eq(d, "broadcast(count=10, int32, root=1) as op #3");
    rcci_sig_describe(a, d, 20); /* truncated, still a string */
    ck_assert_uint_eq(strlen(d), 19);
}
END_TEST

START_TEST(checksums)
{
    uint8_t h[RCCI_WIRE_HEADER_BYTES];
    rcci_tag_t tag = tag_of(9, RCCI_COLL_ALLREDUCE, 10);
    rcci_wire_encode(h, &tag, 40);
    rcci_wire_set_crc(h, 0xE3069283u);
    rcci_wire_frame_t f;
    ck_assert_int_eq(rcci_wire_parse(h, &f, "p"), RCC_SUCCESS);
    ck_assert_int_eq(f.has_crc, 1);
    ck_assert_uint_eq(f.payload_crc, 0xE3069283u);
    ck_assert_int_eq(wire_check(h, &tag, 40, "p"), RCC_SUCCESS);
    /* A checksum field without its flag, or on a notice, is not a frame. */
    h[5] = 0;
    ck_assert_int_eq(rcci_wire_parse(h, &f, "p"), RCC_ERR_REMOTE);
    rcci_wire_encode_notice(h, RCC_ERR_MISMATCH, 10);
    rcci_wire_set_crc(h, 1);
    ck_assert_int_eq(rcci_wire_parse(h, &f, "p"), RCC_ERR_REMOTE);
}
END_TEST

START_TEST(notices)
{
    uint8_t h[RCCI_WIRE_HEADER_BYTES];
    rcci_wire_encode_notice(h, RCC_ERR_MISMATCH, 100);
    rcci_wire_frame_t f;
    ck_assert_int_eq(rcci_wire_parse(h, &f, "p"), RCC_SUCCESS);
    ck_assert_int_eq(f.notice, 1);
    ck_assert_int_eq(f.notice_res, RCC_ERR_MISMATCH);
    ck_assert_uint_eq(f.length, 100);
    rcci_wire_encode_notice(h, RCC_ERR_MISMATCH, 100000); /* clamped */
    ck_assert_int_eq(rcci_wire_parse(h, &f, "p"), RCC_SUCCESS);
    ck_assert_uint_eq(f.length, RCCI_WIRE_NOTICE_MAX);
    /* Lengths and codes from the wire are bounded. */
    h[16 + 2] = 1;
    ck_assert_int_eq(rcci_wire_parse(h, &f, "p"), RCC_ERR_REMOTE);
    rcci_wire_encode_notice(h, RCC_SUCCESS, 10); /* a goodbye */
    ck_assert_int_eq(rcci_wire_parse(h, &f, "p"), RCC_SUCCESS);
    ck_assert_int_eq(f.notice, 1);
    ck_assert_int_eq(f.notice_res, RCC_SUCCESS);
    rcci_wire_encode_notice(h, (rcc_result_t)4242, 10);
    ck_assert_int_eq(rcci_wire_parse(h, &f, "p"), RCC_ERR_REMOTE);
}
END_TEST

static Suite *wire_suite(void)
{
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("header");
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, bad_headers_are_named);
    tcase_add_test(tc, every_corrupted_byte_is_caught);
    tcase_add_test(tc, mismatch_names_both_calls);
    tcase_add_test(tc, checksums);
    tcase_add_test(tc, notices);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(wire_suite)
