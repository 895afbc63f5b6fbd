/* Unit tests for the pace of recent allreduces (lib/pace.c): size classes,
 * the bus bandwidth average and the slow/not-slow decision with its change
 * flag, against figures worked out here by hand. */
#include <check.h>
#include <stdint.h>

#include "../check_main.h"
#include "pace.h"

/* The first operation of a class is not counted (it may run cold): one
 * that took a second, which would count as slow if it did. */
static void warm(rcci_pace_t *p, uint64_t bytes) { rcci_pace_record(p, bytes, 4, 1000000000); }

START_TEST(classes_are_powers_of_two)
{
    ck_assert_int_eq(rcci_pace_class(0), 0);
    ck_assert_int_eq(rcci_pace_class(1), 0);
    ck_assert_int_eq(rcci_pace_class(2), 1);
    ck_assert_int_eq(rcci_pace_class(3), 1);
    ck_assert_int_eq(rcci_pace_class(65535), 15);
    ck_assert_int_eq(rcci_pace_class(65536), 16);
    ck_assert_int_eq(rcci_pace_class(131071), 16);
    ck_assert_int_eq(rcci_pace_class(1ull << 47), RCCI_PACE_CLASSES - 1);
    ck_assert_int_eq(rcci_pace_class(UINT64_MAX), RCCI_PACE_CLASSES - 1);
}
END_TEST

START_TEST(busbw_is_the_ring_formula)
{
    rcci_pace_t p = {0};
    ck_assert_int_eq(rcci_pace_busbw(&p, 65536), 0); /* nothing seen */
    warm(&p, 65536);
    ck_assert_int_eq(rcci_pace_busbw(&p, 65536), 0);
    ck_assert_int_eq(p.latest, 0);
    /* 64 KiB among 4 ranks in 1 ms: 2*3/4 * 65536 bytes per ms. */
    rcci_pace_record(&p, 65536, 4, 1000000);
    ck_assert_int_eq(rcci_pace_busbw(&p, 65536), 98304);
    ck_assert_int_eq(rcci_pace_busbw(&p, 100000), 98304); /* same class */
    /* An unseen class takes the latest operation's. */
    ck_assert_int_eq(rcci_pace_busbw(&p, 1 << 20), 98304);
    /* 2 ranks: factor 1. */
    warm(&p, 1 << 20);
    rcci_pace_record(&p, 1 << 20, 2, 2000000);
    ck_assert_int_eq(rcci_pace_busbw(&p, 1 << 20), 524288);
    ck_assert_int_eq(rcci_pace_busbw(&p, 65536), 98304); /* its class keeps its own */
    ck_assert_int_eq(rcci_pace_busbw(&p, 1 << 24), 524288);
}
END_TEST

START_TEST(average_moves_by_a_quarter)
{
    rcci_pace_t p = {0};
    warm(&p, 4096);
    rcci_pace_record(&p, 4096, 2, 1000000); /* 4096 per ms */
    rcci_pace_record(&p, 4096, 2, 500000);  /* 8192 per ms: 4096 + 4096/4 */
    ck_assert_int_eq(rcci_pace_busbw(&p, 4096), 5120);
    rcci_pace_record(&p, 4096, 2, 4000000); /* 1024 per ms: 5120 - 4096/4 */
    ck_assert_int_eq(rcci_pace_busbw(&p, 4096), 4096);
}
END_TEST

START_TEST(nothing_recorded_from_nothing)
{
    rcci_pace_t p = {0};
    rcci_pace_record(&p, 0, 4, 1000);
    rcci_pace_record(&p, 4096, 4, 0);
    rcci_pace_record(&p, 4096, 4, -5);
    rcci_pace_record(&p, 4096, 1, 1000);
    ck_assert_int_eq(rcci_pace_busbw(&p, 4096), 0);
    ck_assert_int_eq(p.latest, 0);
    /* ... nor do they warm the class up: the next is the cold one. */
    rcci_pace_record(&p, 4096, 4, 1000);
    ck_assert_int_eq(rcci_pace_busbw(&p, 4096), 0);
    rcci_pace_record(&p, 4096, 4, 1000);
    ck_assert_int_eq(rcci_pace_busbw(&p, 4096), 6144000); /* 4096 x 1.5 per us */
    /* Huge and tiny paces stay positive and finite. */
    warm(&p, UINT64_MAX);
    rcci_pace_record(&p, UINT64_MAX, 4, 1);
    ck_assert_int_gt(rcci_pace_busbw(&p, UINT64_MAX), 0);
    warm(&p, 1);
    rcci_pace_record(&p, 1, 64, INT64_MAX);
    ck_assert_int_eq(rcci_pace_busbw(&p, 1), 1);
}
END_TEST

START_TEST(slow_decision_and_its_changes)
{
    rcci_pace_t p = {0};
    int changed = -1;
    /* Nothing seen: not slow, and no change from the initial "not slow". */
    ck_assert_int_eq(rcci_pace_slow(&p, 65536, 150, &changed), 0);
    ck_assert_int_eq(changed, 0);
    /* 117 MB/s (a 1 Gbit/s link): 117000 bytes per ms. */
    warm(&p, 65536);
    ck_assert_int_eq(rcci_pace_slow(&p, 65536, 150, &changed), 0); /* the cold one: not counted */
    rcci_pace_record(&p, 65536, 4, 65536 * 3 / 2 * 1000000ll / 117000);
    ck_assert_int_eq(rcci_pace_slow(&p, 65536, 150, &changed), 1);
    ck_assert_int_eq(changed, 1);
    ck_assert_int_eq(rcci_pace_slow(&p, 65536, 150, &changed), 1);
    ck_assert_int_eq(changed, 0);
    ck_assert_int_eq(rcci_pace_slow(&p, 65536, 100, &changed), 0); /* a lower threshold */
    ck_assert_int_eq(changed, 1);
    ck_assert_int_eq(rcci_pace_slow(&p, 65536, 0, &changed), 0); /* 0: never slow */
    ck_assert_int_eq(changed, 0);
    /* Another class keeps its own state (here it borrows the latest pace). */
    ck_assert_int_eq(rcci_pace_slow(&p, 1 << 20, 150, &changed), 1);
    ck_assert_int_eq(changed, 1);
    /* Faster operations move the class above the threshold again. */
    for (int i = 0; i < 20; i++)
        rcci_pace_record(&p, 65536, 4, 65536 * 3 / 2 * 1000000ll / 1000000);
    ck_assert_int_eq(rcci_pace_slow(&p, 65536, 150, &changed), 0);
    ck_assert_int_eq(changed, 0); /* it was "not slow" at the last call */
    /* The unseen class borrows the latest pace, now 1000 MB/s. */
    ck_assert_int_eq(rcci_pace_slow(&p, 1 << 20, 150, &changed), 0);
    ck_assert_int_eq(changed, 1);
}
END_TEST

static Suite *pace_suite(void)
{
    Suite *s = suite_create("pace");
    TCase *tc = tcase_create("pace");
    tcase_add_test(tc, classes_are_powers_of_two);
    tcase_add_test(tc, busbw_is_the_ring_formula);
    tcase_add_test(tc, average_moves_by_a_quarter);
    tcase_add_test(tc, nothing_recorded_from_nothing);
    tcase_add_test(tc, slow_decision_and_its_changes);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(pace_suite)
