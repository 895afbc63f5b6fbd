/* The verbs connection state machine (transports/ibverbs/connstate.h), every
 * (state, event) pair, and the connection hello (hello.h): round trip and
 * every way one can be wrong. */
#include <check.h>
#include <string.h>

#include "../check_main.h"

#include "err.h"
#include "ibverbs/connstate.h"
#include "ibverbs/hello.h"

#define S(x) RCCI_IBC_##x
#define E(x) RCCI_IBC_EV_##x
#define A(x) RCCI_IBC_DO_##x

/* The specification: every pair that is not an error. Pairs not listed fail
 * the connection as events out of place, except in CLOSED, which ignores
 * everything. Retries assume attempts are left. */
static const struct {
    rcci_ibc_state_t from;
    rcci_ibc_event_t ev;
    rcci_ibc_state_t to;
    rcci_ibc_action_t act;
} legal[] = {
    {S(IDLE), E(CONNECT), S(ADDR), A(RESOLVE_ADDR)},
    {S(IDLE), E(REQUEST), S(ACCEPTING), A(ACCEPT)},
    {S(IDLE), E(DEADLINE), S(FAILED), A(FAIL)},
    {S(IDLE), E(CLOSE), S(CLOSED), A(DESTROY)},
    {S(ADDR), E(ADDR_RESOLVED), S(ROUTE), A(RESOLVE_ROUTE)},
    {S(ADDR), E(REJECTED), S(FAILED), A(FAIL)},
    {S(ADDR), E(UNREACHABLE), S(ADDR), A(RETRY)},
    {S(ADDR), E(ERROR), S(ADDR), A(RETRY)},
    {S(ADDR), E(DEADLINE), S(FAILED), A(FAIL)},
    {S(ADDR), E(CLOSE), S(CLOSED), A(DESTROY)},
    {S(ROUTE), E(ROUTE_RESOLVED), S(CONNECTING), A(CONNECT)},
    {S(ROUTE), E(REJECTED), S(FAILED), A(FAIL)},
    {S(ROUTE), E(UNREACHABLE), S(ADDR), A(RETRY)},
    {S(ROUTE), E(ERROR), S(ADDR), A(RETRY)},
    {S(ROUTE), E(DEADLINE), S(FAILED), A(FAIL)},
    {S(ROUTE), E(CLOSE), S(CLOSED), A(DESTROY)},
    {S(CONNECTING), E(ESTABLISHED), S(READY), A(NONE)},
    {S(CONNECTING), E(REJECTED), S(FAILED), A(FAIL)},
    {S(CONNECTING), E(UNREACHABLE), S(ADDR), A(RETRY)},
    {S(CONNECTING), E(ERROR), S(ADDR), A(RETRY)},
    {S(CONNECTING), E(DISCONNECTED), S(FAILED), A(FAIL)},
    {S(CONNECTING), E(PEER_CLOSE), S(FAILED), A(FAIL)},
    {S(CONNECTING), E(DEADLINE), S(FAILED), A(FAIL)},
    {S(CONNECTING), E(CLOSE), S(CLOSED), A(DESTROY)},
    {S(ACCEPTING), E(ESTABLISHED), S(READY), A(NONE)},
    {S(ACCEPTING), E(REJECTED), S(FAILED), A(FAIL)},
    {S(ACCEPTING), E(UNREACHABLE), S(FAILED), A(FAIL)},
    {S(ACCEPTING), E(ERROR), S(FAILED), A(FAIL)},
    {S(ACCEPTING), E(DISCONNECTED), S(FAILED), A(FAIL)},
    {S(ACCEPTING), E(PEER_CLOSE), S(FAILED), A(FAIL)},
    {S(ACCEPTING), E(DEADLINE), S(FAILED), A(FAIL)},
    {S(ACCEPTING), E(CLOSE), S(CLOSED), A(DESTROY)},
    {S(READY), E(ERROR), S(FAILED), A(FAIL)},
    {S(READY), E(DISCONNECTED), S(PEER_CLOSED), A(NONE)},
    {S(READY), E(PEER_CLOSE), S(PEER_CLOSED), A(NONE)},
    {S(READY), E(DEADLINE), S(READY), A(NONE)},
    {S(READY), E(CLOSE), S(CLOSED), A(DISCONNECT)},
    {S(PEER_CLOSED), E(ERROR), S(PEER_CLOSED), A(NONE)},
    {S(PEER_CLOSED), E(DISCONNECTED), S(PEER_CLOSED), A(NONE)},
    {S(PEER_CLOSED), E(PEER_CLOSE), S(PEER_CLOSED), A(NONE)},
    {S(PEER_CLOSED), E(DEADLINE), S(PEER_CLOSED), A(NONE)},
    {S(PEER_CLOSED), E(CLOSE), S(CLOSED), A(DISCONNECT)},
    {S(FAILED), E(ERROR), S(FAILED), A(NONE)},
    {S(FAILED), E(DISCONNECTED), S(FAILED), A(NONE)},
    {S(FAILED), E(PEER_CLOSE), S(FAILED), A(NONE)},
    {S(FAILED), E(DEADLINE), S(FAILED), A(NONE)},
    {S(FAILED), E(CLOSE), S(CLOSED), A(DESTROY)},
};

START_TEST(every_state_and_event)
{
    int listed = 0;
    for (int s = 0; s < RCCI_IBC_NSTATES; s++)
        for (int e = 0; e < RCCI_IBC_NEVENTS; e++) {
            rcci_ibc_t c;
            rcci_ibc_init(&c, 3);
            c.state = (rcci_ibc_state_t)s;
            rcci_ibc_action_t act = rcci_ibc_step(&c, (rcci_ibc_event_t)e);
            const char *sn = rcci_ibc_state_name((rcci_ibc_state_t)s),
                       *en = rcci_ibc_event_name((rcci_ibc_event_t)e);
            size_t i = 0;
            while (i < sizeof legal / sizeof *legal &&
                   !((int)legal[i].from == s && (int)legal[i].ev == e))
                i++;
            if (i < sizeof legal / sizeof *legal) {
                listed++;
                ck_assert_msg(c.state == legal[i].to && act == legal[i].act, "%s + %s gave %s, %s",
                              sn, en, rcci_ibc_state_name(c.state), rcci_ibc_action_name(act));
                ck_assert_int_eq(c.illegal, 0);
            } else if (s == RCCI_IBC_CLOSED) {
                ck_assert_msg(c.state == RCCI_IBC_CLOSED && act == RCCI_IBC_DO_NONE,
                              "CLOSED + %s was not ignored", en);
            } else {
                ck_assert_msg(c.state == RCCI_IBC_FAILED && act == RCCI_IBC_DO_FAIL && c.illegal,
                              "%s + %s should fail the connection", sn, en);
                ck_assert_int_eq(rcci_ibc_error(&c, "rank 4"), RCC_ERR_REMOTE);
                ck_assert_ptr_nonnull(strstr(rcci_tls_error(), en));
                ck_assert_ptr_nonnull(strstr(rcci_tls_error(), sn));
                ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 4"));
            }
        }
    ck_assert_int_eq(listed, (int)(sizeof legal / sizeof *legal));
}
END_TEST

START_TEST(paths)
{
    rcci_ibc_t c;
    rcci_ibc_event_t active[] = {E(CONNECT),    E(ADDR_RESOLVED), E(ROUTE_RESOLVED), E(ESTABLISHED),
                                 E(PEER_CLOSE), E(DISCONNECTED),  E(CLOSE)};
    rcci_ibc_init(&c, 1);
    for (size_t i = 0; i < sizeof active / sizeof *active; i++)
        rcci_ibc_step(&c, active[i]);
    ck_assert_int_eq(c.state, RCCI_IBC_CLOSED);
    rcci_ibc_init(&c, 1);
    ck_assert_int_eq(rcci_ibc_step(&c, E(REQUEST)), A(ACCEPT));
    ck_assert_int_eq(rcci_ibc_step(&c, E(ESTABLISHED)), A(NONE));
    ck_assert_int_eq(rcci_ibc_step(&c, E(DISCONNECTED)), A(NONE));
    ck_assert_int_eq(rcci_ibc_error(&c, "rank 1"), RCC_ERR_PEER_LOST);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 1 disconnected"));
    ck_assert_int_eq(rcci_ibc_step(&c, E(CLOSE)), A(DISCONNECT));
    ck_assert_int_eq(rcci_ibc_step(&c, E(CLOSE)), A(NONE));
}
END_TEST

/* Three attempts: two retries, then the unreachable peer fails it. */
START_TEST(retries_run_out)
{
    rcci_ibc_t c;
    rcci_ibc_init(&c, 3);
    rcci_ibc_step(&c, E(CONNECT));
    ck_assert_int_eq(rcci_ibc_step(&c, E(UNREACHABLE)), A(RETRY));
    rcci_ibc_step(&c, E(ADDR_RESOLVED));
    rcci_ibc_step(&c, E(ROUTE_RESOLVED));
    ck_assert_int_eq(rcci_ibc_step(&c, E(ERROR)), A(RETRY));
    ck_assert_int_eq(c.state, RCCI_IBC_ADDR);
    ck_assert_int_eq(rcci_ibc_step(&c, E(UNREACHABLE)), A(FAIL));
    ck_assert_int_eq(c.state, RCCI_IBC_FAILED);
    ck_assert_int_eq(rcci_ibc_error(&c, "rank 2"), RCC_ERR_PEER_LOST);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "UNREACHABLE"));
}
END_TEST

START_TEST(errors_say_what_happened)
{
    struct {
        rcci_ibc_state_t s;
        rcci_ibc_event_t e;
        rcc_result_t code;
        const char *text;
    } cases[] = {
        {S(CONNECTING), E(DEADLINE), RCC_ERR_TIMEOUT, "timed out in state CONNECTING"},
        {S(ROUTE), E(REJECTED), RCC_ERR_PEER_LOST, "rank 9 rejected"},
        {S(READY), E(PEER_CLOSE), RCC_ERR_PEER_LOST, "rank 9 closed the connection"},
        {S(READY), E(ERROR), RCC_ERR_PEER_LOST, "ERROR in state READY"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rcci_ibc_t c;
        rcci_ibc_init(&c, 1);
        c.state = cases[i].s;
        rcci_ibc_step(&c, cases[i].e);
        ck_assert_int_eq(rcci_ibc_error(&c, "rank 9"), cases[i].code);
        ck_assert_msg(strstr(rcci_tls_error(), cases[i].text), "%s", rcci_tls_error());
    }
}
END_TEST

/* ---- hello ---- */

static const uint8_t secret[RCCI_IBH_SECRET_BYTES] = "0123456789abcdef";

START_TEST(hello_round_trip)
{
    rcci_ibh_t h = {.rank = 65537,
                    .tag = 0x101,
                    .comm_id = 0x1122334455667788ull,
                    .slots_addr = 0x7fff12345000ull,
                    .rkey = 0xdeadbeef,
                    .geom = {64, RCCI_IBP_MAX_SLOT_BYTES}},
               out;
    uint8_t b[RCCI_IBH_BYTES];
    rcci_ibh_encode(b, &h, secret);
    ck_assert_int_eq(rcci_ibh_decode(b, sizeof b, &out, secret, "p"), RCC_SUCCESS);
    ck_assert_int_eq(out.rank, h.rank); /* field by field: the struct has padding */
    ck_assert_uint_eq(out.tag, h.tag);
    ck_assert_uint_eq(out.comm_id, h.comm_id);
    ck_assert_uint_eq(out.slots_addr, h.slots_addr);
    ck_assert_uint_eq(out.rkey, h.rkey);
    ck_assert_uint_eq(out.geom.nslots, h.geom.nslots);
    ck_assert_uint_eq(out.geom.slot_bytes, h.geom.slot_bytes);
    ck_assert_int_eq(memcmp(b, "RCIB", 4), 0); /* little-endian, host-independent */
    ck_assert_int_le(RCCI_IBH_BYTES, 56);      /* rdma_connect's private data on RC */
}
END_TEST

START_TEST(bad_hellos_are_named)
{
    rcci_ibh_t h = {.rank = 1, .geom = {8, 65536}}, out;
    uint8_t good[RCCI_IBH_BYTES], b[RCCI_IBH_BYTES];
    rcci_ibh_encode(good, &h, secret);
    ck_assert_int_eq(rcci_ibh_decode(good, RCCI_IBH_BYTES - 1, &out, secret, "10.0.0.9"),
                     RCC_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "10.0.0.9 sent 55 bytes"));
    int bad_bytes[] = {0, 3, 4, 5}; /* magic, version, reserved */
    for (size_t i = 0; i < sizeof bad_bytes / sizeof *bad_bytes; i++) {
        memcpy(b, good, sizeof b);
        b[bad_bytes[i]] ^= 0x40;
        ck_assert_int_eq(rcci_ibh_decode(b, sizeof b, &out, secret, "p"), RCC_ERR_REMOTE);
        ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "no ringcc verbs endpoint"));
    }
    for (int i = 0; i < RCCI_IBH_SECRET_BYTES; i++) {
        memcpy(b, good, sizeof b);
        b[40 + i] ^= 1;
        ck_assert_int_eq(rcci_ibh_decode(b, sizeof b, &out, secret, "p"), RCC_ERR_REMOTE);
        ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "job secret"));
    }
    rcci_ibh_t geoms[] = {{.geom = {0, 65536}}, {.geom = {65, 65536}}, {.geom = {8, 100}}};
    for (size_t i = 0; i < sizeof geoms / sizeof *geoms; i++) {
        rcci_ibh_encode(b, &geoms[i], secret);
        ck_assert_int_eq(rcci_ibh_decode(b, sizeof b, &out, secret, "rank 3"), RCC_ERR_REMOTE);
        ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "rank 3"));
    }
}
END_TEST

static Suite *ibconn_suite(void)
{
    Suite *s = suite_create("ibconn");
    TCase *tc = tcase_create("conn");
    tcase_add_test(tc, every_state_and_event);
    tcase_add_test(tc, paths);
    tcase_add_test(tc, retries_run_out);
    tcase_add_test(tc, errors_say_what_happened);
    tcase_add_test(tc, hello_round_trip);
    tcase_add_test(tc, bad_hellos_are_named);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(ibconn_suite)
