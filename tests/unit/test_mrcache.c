/* The verbs registration cache (transports/ibverbs/mrcache.h) over fake
 * register/deregister calls that count what is pinned. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "../check_main.h"

#include "err.h"
#include "ibverbs/mrcache.h"

#define PAGE 4096

typedef struct {
    int regs, deregs, live;
    int fail_next;
    size_t last_bytes;
    uintptr_t last_addr;
    int last_kind;
} fake_t;

static rcc_result_t fake_reg(void *arg, void *addr, size_t bytes, int kind, void **handle)
{
    fake_t *f = arg;
    f->last_kind = kind;
    if (f->fail_next) {
        f->fail_next = 0;
        return rcci_error(RCC_ERR_SYSTEM, "ibv_reg_mr of %zu bytes: Cannot allocate memory", bytes);
    }
    f->regs++, f->live++;
    f->last_addr = (uintptr_t)addr, f->last_bytes = bytes;
    *handle = (void *)(uintptr_t)f->regs; /* never NULL */
    return RCC_SUCCESS;
}

static void fake_dereg(void *arg, void *handle)
{
    fake_t *f = arg;
    ck_assert_ptr_nonnull(handle);
    f->deregs++, f->live--;
}

static fake_t fake;
static rcci_mrc_t cache;

static void setup_cache(int capacity)
{
    memset(&fake, 0, sizeof fake);
    rcci_mrc_ops_t ops = {fake_reg, fake_dereg, &fake};
    ck_assert_int_eq(rcci_mrc_init(&cache, &ops, capacity, PAGE), RCC_SUCCESS);
}

#define AT(x) ((const void *)(uintptr_t)(x))

START_TEST(ranges_are_pages_and_covered_lookups_hit)
{
    setup_cache(4);
    rcci_mrc_entry_t *a, *b;
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x10010), 5000, 0, &a), RCC_SUCCESS);
    ck_assert_uint_eq(fake.last_addr, 0x10000);
    ck_assert_uint_eq(fake.last_bytes, 2 * PAGE); /* 0x10010 + 5000 ends in the second page */
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x10000), 1, 0, &b), RCC_SUCCESS);
    ck_assert_ptr_eq(a, b);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x11fff), 1, 0, &b), RCC_SUCCESS);
    ck_assert_ptr_eq(a, b);
    ck_assert_int_eq(a->refs, 3);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x11fff), 2, 0, &b), RCC_SUCCESS); /* crosses out */
    ck_assert_ptr_ne(a, b);
    ck_assert_int_eq(fake.regs, 2);
    ck_assert_uint_eq(cache.hits, 2);
    ck_assert_uint_eq(cache.misses, 2);
    rcci_mrc_fini(&cache);
    ck_assert_int_eq(fake.live, 0); /* held ones too */
}
END_TEST

START_TEST(least_recently_used_unheld_entry_goes)
{
    setup_cache(2);
    rcci_mrc_entry_t *a, *b, *c;
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x100000), 10, 0, &a), RCC_SUCCESS);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x200000), 10, 0, &b), RCC_SUCCESS);
    rcci_mrc_release(&cache, a);
    rcci_mrc_release(&cache, b);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x100000), 10, 0, &a), RCC_SUCCESS); /* a is newer */
    rcci_mrc_release(&cache, a);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x300000), 10, 0, &c), RCC_SUCCESS);
    ck_assert_int_eq(fake.deregs, 1);
    ck_assert_ptr_eq(c, b); /* b's place */
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x100000), 10, 0, &a), RCC_SUCCESS);
    ck_assert_int_eq(fake.regs, 3); /* a survived */
    /* Both held: nothing can go. */
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x400000), 10, 0, &b), RCC_ERR_NO_MEMORY);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "all 2 registrations are in use"));
    rcci_mrc_fini(&cache);
    ck_assert_int_eq(fake.live, 0);
}
END_TEST

START_TEST(invalidate_drops_unheld_overlaps)
{
    setup_cache(4);
    rcci_mrc_entry_t *a, *b, *c;
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x100000), 3 * PAGE, 0, &a), RCC_SUCCESS);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x200000), PAGE, 0, &b), RCC_SUCCESS);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x300000), PAGE, 0, &c), RCC_SUCCESS);
    rcci_mrc_release(&cache, a);
    rcci_mrc_release(&cache, c);
    ck_assert_int_eq(rcci_mrc_invalidate(&cache, AT(0x100000 + 2 * PAGE), 1), 1); /* a */
    ck_assert_int_eq(rcci_mrc_invalidate(&cache, AT(0x200000), 10 * PAGE), 0);    /* b held */
    ck_assert_int_eq(rcci_mrc_invalidate(&cache, AT(0x300000 + PAGE), PAGE), 0); /* c ends before */
    ck_assert_int_eq(cache.count, 2);
    rcci_mrc_release(&cache, b);
    ck_assert_int_eq(rcci_mrc_invalidate(&cache, AT(0), UINTPTR_MAX / 2), 2);
    ck_assert_int_eq(fake.live, 0);
    rcci_mrc_fini(&cache);
}
END_TEST

/* The same range asked for as another kind of memory is registered anew,
 * with that kind: an entry registered one way never serves the other. */
START_TEST(kinds_do_not_share_entries)
{
    setup_cache(4);
    rcci_mrc_entry_t *a, *b, *c;
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x100000), PAGE, 0, &a), RCC_SUCCESS);
    ck_assert_int_eq(fake.last_kind, 0);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x100000), 10, 1, &b), RCC_SUCCESS);
    ck_assert_int_eq(fake.last_kind, 1);
    ck_assert_ptr_ne(a, b);
    ck_assert_int_eq(fake.regs, 2);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x100008), 8, 1, &c), RCC_SUCCESS);
    ck_assert_ptr_eq(b, c);
    ck_assert_int_eq(fake.regs, 2);
    rcci_mrc_release(&cache, a);
    rcci_mrc_release(&cache, b);
    rcci_mrc_release(&cache, c);
    rcci_mrc_fini(&cache);
    ck_assert_int_eq(fake.live, 0);
}
END_TEST

/* put: an entry still held by another registration stays; the last put
 * deregisters it, so the same addresses (memory freed and mapped again)
 * are registered anew. */
START_TEST(put_drops_the_entry_with_its_last_holder)
{
    setup_cache(4);
    rcci_mrc_entry_t *a, *b;
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x100000), PAGE, 0, &a), RCC_SUCCESS);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x100000), 16, 0, &b), RCC_SUCCESS);
    ck_assert_ptr_eq(a, b);
    rcci_mrc_put(&cache, b);
    ck_assert_int_eq(fake.live, 1);
    ck_assert_int_eq(cache.count, 1);
    rcci_mrc_put(&cache, a);
    ck_assert_int_eq(fake.live, 0);
    ck_assert_int_eq(cache.count, 0);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x100000), PAGE, 0, &a), RCC_SUCCESS);
    ck_assert_int_eq(fake.regs, 2);
    rcci_mrc_put(&cache, a);
    rcci_mrc_put(&cache, NULL);
    rcci_mrc_fini(&cache);
    ck_assert_int_eq(fake.live, 0);
}
END_TEST

START_TEST(bad_input_and_failed_registration)
{
    setup_cache(2);
    rcci_mrc_entry_t *a;
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x1000), 0, 0, &a), RCC_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(UINTPTR_MAX - 10), 100, 0, &a), RCC_ERR_INVALID_ARGUMENT);
    fake.fail_next = 1;
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x1000), 10, 0, &a), RCC_ERR_SYSTEM);
    ck_assert_ptr_nonnull(strstr(rcci_tls_error(), "ibv_reg_mr of 4096 bytes"));
    ck_assert_int_eq(cache.count, 0);
    ck_assert_int_eq(rcci_mrc_get(&cache, AT(0x1000), 10, 0, &a), RCC_SUCCESS);
    rcci_mrc_fini(&cache);
    rcci_mrc_ops_t ops = {fake_reg, fake_dereg, &fake};
    ck_assert_int_eq(rcci_mrc_init(&cache, &ops, 0, PAGE), RCC_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(rcci_mrc_init(&cache, &ops, 4, 3000), RCC_ERR_INVALID_ARGUMENT);
}
END_TEST

static Suite *mrcache_suite(void)
{
    Suite *s = suite_create("mrcache");
    TCase *tc = tcase_create("mrcache");
    tcase_add_test(tc, ranges_are_pages_and_covered_lookups_hit);
    tcase_add_test(tc, least_recently_used_unheld_entry_goes);
    tcase_add_test(tc, invalidate_drops_unheld_overlaps);
    tcase_add_test(tc, kinds_do_not_share_entries);
    tcase_add_test(tc, put_drops_the_entry_with_its_last_holder);
    tcase_add_test(tc, bad_input_and_failed_registration);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(mrcache_suite)
