/* The parameter table, size parsing, error texts and the id encoding. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../check_main.h"

#include "bootstrap.h"
#include "err.h"
#include "log.h"
#include "params.h"

START_TEST(sizes_parse)
{
    int64_t v;
    ck_assert_int_eq(rcci_parse_size("4096", 0, INT64_MAX, &v), RCC_SUCCESS);
    ck_assert_int_eq(v, 4096);
    ck_assert_int_eq(rcci_parse_size("64K", 0, INT64_MAX, &v), RCC_SUCCESS);
    ck_assert_int_eq(v, 65536);
    ck_assert_int_eq(rcci_parse_size("2m", 0, INT64_MAX, &v), RCC_SUCCESS);
    ck_assert_int_eq(v, 2 << 20);
    ck_assert_int_eq(rcci_parse_size("3G", 0, INT64_MAX, &v), RCC_SUCCESS);
    ck_assert_int_eq(v, 3ll << 30);
    static const char *const bad[] = {
        "", "K", "-1", "1.5", "12 parsecs", "1KB", "0x10", "99999999999999999999", "9000000000G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(rcci_parse_size(bad[i], 0, INT64_MAX, &v) != RCC_SUCCESS, "%s", bad[i]);
    ck_assert_int_ne(rcci_parse_size("100", 200, 300, &v), RCC_SUCCESS);
    ck_assert_int_ne(rcci_parse_size("400", 200, 300, &v), RCC_SUCCESS);
}
END_TEST

START_TEST(table_is_complete)
{
    for (int i = 0; i < RCCI_PARAM_COUNT; i++) {
        const rcci_param_info_t *p = rcci_param_info((rcci_param_id_t)i);
        ck_assert_ptr_nonnull(p->name);
        ck_assert(strncmp(p->name, "RCC_", 4) == 0);
        ck_assert(strlen(p->description) > 10);
        if (p->is_int) { /* every default is itself valid */
            int64_t v;
            ck_assert_int_eq(rcci_parse_size(p->default_text, p->min, p->max, &v), RCC_SUCCESS);
        }
    }
}
END_TEST

START_TEST(bad_value_is_named)
{
    /* Check forks each test: the once-only load sees this environment. */
    setenv("RCC_SLOTS", "1000", 1);
    ck_assert_int_eq(rcci_params_load(), RCC_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "RCC_SLOTS='1000'"));
    ck_assert_int_eq(rcci_param_int(RCCI_PARAM_SLOTS), 4);          /* the default stays */
    ck_assert_int_eq(rcci_params_load(), RCC_ERR_INVALID_ARGUMENT); /* sticky */
}
END_TEST

START_TEST(good_values_are_read)
{
    setenv("RCC_CHUNK_BYTES", "128K", 1);
    setenv("RCC_TRANSPORT", "tcp", 1);
    ck_assert_int_eq(rcci_params_load(), RCC_SUCCESS);
    ck_assert_int_eq(rcci_param_int(RCCI_PARAM_CHUNK_BYTES), 128 << 10);
    ck_assert_str_eq(rcci_param_str(RCCI_PARAM_TRANSPORT), "tcp");
    ck_assert_str_eq(rcci_param_str(RCCI_PARAM_SOCKET_IFNAME), "");
}
END_TEST

START_TEST(result_texts)
{
    ck_assert_str_eq(rcc_strerror(RCC_SUCCESS), "success");
    ck_assert_str_eq(rcc_result_name(RCC_ERR_TIMEOUT), "RCC_ERR_TIMEOUT");
    ck_assert_str_eq(rcc_strerror((rcc_result_t)9999), "unknown result code");
    /* NCCL's numbers, so a shim maps by identity. */
    ck_assert_int_eq(RCC_ERR_INVALID_USAGE, 5);
    ck_assert_int_eq(RCC_IN_PROGRESS, 7);
    ck_assert_int_eq(RCC_BFLOAT16, 9);
    ck_assert_int_eq(RCC_AVG, 4);
    ck_assert_uint_eq(sizeof(rcc_unique_id_t), 128);
    ck_assert_uint_eq(rcc_datatype_size(RCC_BFLOAT16), 2);
    ck_assert_uint_eq(rcc_datatype_size((rcc_datatype_t)10), 0);
}
END_TEST

START_TEST(error_prefix_and_truncation)
{
    rcci_error(RCC_ERR_SYSTEM, "inner %d", 1);
    rcci_error_prefix("outer: ");
    ck_assert_str_eq(rcci_tls_error(), "outer: inner 1");
    ck_assert_str_eq(rcci_tls_cause(), "inner 1"); /* a prefix stays out of the cause */
    ck_assert_int_eq(rcci_error_prefix_cause(RCC_ERR_PEER_LOST, "to rank %d: ", 3),
                     RCC_ERR_PEER_LOST);
    ck_assert_str_eq(rcci_tls_error(), "to rank 3: outer: inner 1");
    ck_assert_str_eq(rcci_tls_cause(), "to rank 3: outer: inner 1");
    char big[3000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    rcci_error(RCC_ERR_SYSTEM, "%s", big);
    rcci_error_prefix("p: ");
    ck_assert_uint_eq(strlen(rcci_tls_error()), RCCI_ERR_TEXT_BYTES - 1);
}
END_TEST

/* RCC_DEBUG_SUBSYS: lists, "all", "^" for all but, any case; the first unknown name is told. */
START_TEST(log_subsystems_parse)
{
    uint32_t mask;
    char bad[32];
    ck_assert_int_eq(rcci_log_subsys_parse("all", &mask, bad, sizeof bad), 1);
    ck_assert_uint_eq(mask, ~0u);
    ck_assert_int_eq(rcci_log_subsys_parse("NET,coll", &mask, bad, sizeof bad), 1);
    ck_assert_uint_eq(mask, (1u << RCCI_SUBSYS_NET) | (1u << RCCI_SUBSYS_COLL));
    ck_assert_int_eq(rcci_log_subsys_parse("^init", &mask, bad, sizeof bad), 1);
    ck_assert_uint_eq(mask, ~(1u << RCCI_SUBSYS_INIT));
    ck_assert_int_eq(rcci_log_subsys_parse("net,,bogus,nope", &mask, bad, sizeof bad), 0);
    ck_assert_str_eq(bad, "bogus");
    ck_assert_uint_eq(mask, 1u << RCCI_SUBSYS_NET);
    ck_assert_int_eq(rcci_log_subsys_parse("", &mask, bad, sizeof bad), 1);
    ck_assert_uint_eq(mask, 0);
}
END_TEST

START_TEST(unique_id_round_trip)
{
    rcci_id_t id = {.comm_id = 0x0123456789abcdefull}, back;
    ck_assert_int_eq(rcci_addr_parse("127.0.0.1:4310", &id.root), RCC_SUCCESS);
    for (int i = 0; i < RCCI_SOCK_SECRET_BYTES; i++)
        id.secret[i] = (uint8_t)(i * 7);
    rcc_unique_id_t uid;
    rcci_id_encode(&id, &uid);
    ck_assert_int_eq(rcci_id_decode(&uid, &back), RCC_SUCCESS);
    ck_assert_uint_eq(back.comm_id, id.comm_id);
    ck_assert_int_eq(memcmp(back.secret, id.secret, sizeof id.secret), 0);
    ck_assert_int_eq(rcci_addr_port(&back.root), 4310);
    uid.internal[0] ^= 1;
    ck_assert_int_eq(rcci_id_decode(&uid, &back), RCC_ERR_INVALID_ARGUMENT);
    rcci_addr_t a;
    ck_assert_int_eq(rcci_addr_parse("[::1]:80", &a), RCC_SUCCESS);
    ck_assert_int_eq(rcci_addr_parse("localhost", &a), RCC_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(rcci_addr_parse("127.0.0.1:0", &a), RCC_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(rcci_addr_parse("127.0.0.1:99999", &a), RCC_ERR_INVALID_ARGUMENT);
}
END_TEST

static Suite *params_suite(void)
{
    Suite *s = suite_create("params");
    TCase *tc = tcase_create("params");
    tcase_add_test(tc, sizes_parse);
    tcase_add_test(tc, table_is_complete);
    tcase_add_test(tc, bad_value_is_named);
    tcase_add_test(tc, good_values_are_read);
    tcase_add_test(tc, result_texts);
    tcase_add_test(tc, error_prefix_and_truncation);
    tcase_add_test(tc, unique_id_round_trip);
    tcase_add_test(tc, log_subsystems_parse);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(params_suite)
