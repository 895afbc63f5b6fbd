/* The TCP frame header: round trip, and every way a header can be wrong. */
#include <check.h>
#include <string.h>

#include "../check_main.h"

#include "err.h"
#include "tcp/wire.h"

START_TEST(round_trip)
{
    uint8_t h[RCCI_WIRE_HEADER_BYTES];
    rcci_wire_encode(h, 77, 1ull << 40);
    ck_assert_int_eq(rcci_wire_check(h, 77, 1ull << 40, "peer"), RCC_SUCCESS);
    /* The layout is explicit little-endian, independent of the host. */
    ck_assert_int_eq(h[0], 'R');
    ck_assert_int_eq(h[1], 'C');
    ck_assert_int_eq(h[2], 'C');
    ck_assert_int_eq(h[3], 'D');
    ck_assert_int_eq(h[4], RCCI_WIRE_VERSION);
    ck_assert_int_eq(h[8], 77);
    ck_assert_int_eq(h[16 + 5], 1);
}
END_TEST

START_TEST(bad_headers_are_named)
{
    uint8_t h[RCCI_WIRE_HEADER_BYTES];
    rcci_wire_encode(h, 5, 4096);
    ck_assert_int_eq(rcci_wire_check(h, 6, 4096, "rank 2"), RCC_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "operation #5"));
    ck_assert_int_eq(rcci_wire_check(h, 5, 8192, "rank 2"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "4096-byte"));
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 2"));
    uint8_t bad[RCCI_WIRE_HEADER_BYTES];
    memcpy(bad, h, sizeof bad);
    bad[0] = 'X';
    ck_assert_int_eq(rcci_wire_check(bad, 5, 4096, "p"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "not a ringcc frame"));
    memcpy(bad, h, sizeof bad);
    bad[4] = 9;
    ck_assert_int_eq(rcci_wire_check(bad, 5, 4096, "p"), RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "version 9"));
    memcpy(bad, h, sizeof bad);
    bad[6] = 30;
    ck_assert_int_eq(rcci_wire_check(bad, 5, 4096, "p"), RCC_ERR_REMOTE);
    memcpy(bad, h, sizeof bad);
    bad[5] = 1;
    ck_assert_int_eq(rcci_wire_check(bad, 5, 4096, "p"), RCC_ERR_REMOTE);
    memcpy(bad, h, sizeof bad);
    bad[13] = 1;
    ck_assert_int_eq(rcci_wire_check(bad, 5, 4096, "p"), RCC_ERR_REMOTE);
}
END_TEST

/* Every single-byte corruption is either caught or changes nothing the
 * receiver relies on (there is no such byte: all 24 are checked). */
START_TEST(every_corrupted_byte_is_caught)
{
    uint8_t h[RCCI_WIRE_HEADER_BYTES];
    rcci_wire_encode(h, 123456, 65536);
    for (int i = 0; i < RCCI_WIRE_HEADER_BYTES; i++) {
        uint8_t bad[RCCI_WIRE_HEADER_BYTES];
        memcpy(bad, h, sizeof bad);
        bad[i] ^= 0x40;
        ck_assert_msg(rcci_wire_check(bad, 123456, 65536, "p") != RCC_SUCCESS, "byte %d", i);
    }
}
END_TEST

static Suite *wire_suite(void)
{
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("header");
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, bad_headers_are_named);
    tcase_add_test(tc, every_corrupted_byte_is_caught);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(wire_suite)
