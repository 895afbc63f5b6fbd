/* Working on another device and giving the thread its own back
 * (lib/devswitch.c), on a table with two devices whose current device is
 * per thread, as CUDA's is. */
#include <check.h>
#include <string.h>

#include "../check_main.h"

#include "devapi.h"
#include "err.h"

static __thread int current;
static __thread int switches;

static int two_current(void) { return current; }

static rcc_result_t two_use(int device)
{
    if (device < 0 || device > 1)
        return rcci_error(RCC_ERR_CUDA, "no device %d", device);
    switches++;
    current = device;
    return RCC_SUCCESS;
}

static const rcci_devapi_t two = {.current_device = two_current, .use_device = two_use};

START_TEST(enter_and_back)
{
    current = 0, switches = 0;
    int previous = -7;
    ck_assert_int_eq(rcci_device_enter(&two, 1, &previous), RCC_SUCCESS);
    ck_assert_int_eq(previous, 0);
    ck_assert_int_eq(current, 1);
    rcci_device_back(&two, previous, 1);
    ck_assert_int_eq(current, 0);
    ck_assert_int_eq(switches, 2);
}
END_TEST

START_TEST(already_there)
{
    current = 1, switches = 0;
    int previous = -7;
    ck_assert_int_eq(rcci_device_enter(&two, 1, &previous), RCC_SUCCESS);
    ck_assert_int_eq(previous, 1);
    rcci_device_back(&two, previous, 1);
    ck_assert_int_eq(current, 1);
    ck_assert_int_eq(switches, 0);
}
END_TEST

START_TEST(enter_refused)
{
    current = 0, switches = 0;
    int previous = -7;
    rcci_tls_error_clear();
    ck_assert_int_eq(rcci_device_enter(&two, 5, &previous), RCC_ERR_CUDA);
    ck_assert_str_eq(rcci_tls_error(), "no device 5");
    ck_assert_int_eq(previous, 0);
    ck_assert_int_eq(current, 0);
    rcci_device_back(&two, previous, 5); /* back to where it still is */
    ck_assert_int_eq(current, 0);
    ck_assert_str_eq(rcci_tls_error(), "no device 5");
}
END_TEST

/* The failure being reported survives the switch back, whether that switch
 * succeeds or fails. */
START_TEST(back_keeps_the_error)
{
    current = 1, switches = 0;
    rcci_error(RCC_ERR_REMOTE, "the failure being reported");
    rcci_device_back(&two, 0, 1);
    ck_assert_int_eq(current, 0);
    ck_assert_str_eq(rcci_tls_error(), "the failure being reported");
    current = 1;
    rcci_device_back(&two, 4, 1); /* use_device(4) fails */
    ck_assert_int_eq(current, 1);
    ck_assert_str_eq(rcci_tls_error(), "the failure being reported");
}
END_TEST

START_TEST(none_known)
{
    current = 1, switches = 0;
    rcci_device_back(&two, -1, 1);
    ck_assert_int_eq(current, 1);
    ck_assert_int_eq(switches, 0);
}
END_TEST

static Suite *devswitch_suite(void)
{
    Suite *s = suite_create("devswitch");
    TCase *tc = tcase_create("devswitch");
    tcase_add_test(tc, enter_and_back);
    tcase_add_test(tc, already_there);
    tcase_add_test(tc, enter_refused);
    tcase_add_test(tc, back_keeps_the_error);
    tcase_add_test(tc, none_known);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(devswitch_suite)
