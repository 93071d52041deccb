/* SPDX-License-Identifier: MIT */
/* Unit tests of store: LRU bounds by entries and bytes, TTLs, replacement, promotion at
 * finality. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "edge/store.h"

static bm_entry_t *mk(const char *key, size_t body_len, bm_ck_route_t route)
{
    bm_buf_t *b = bm_buf_new(body_len + 1);
    memset(b->data, 'x', body_len);
    b->len = body_len;
    bm_entry_t *e = bm_entry_new(key, strlen(key), b, NULL);
    bm_buf_unref(b);
    e->cls = BM_CK_IMMUTABLE;
    e->route = route;
    return e;
}

static void test_lru_by_entries(void **state)
{
    (void)state;
    bm_store_t *s = bm_store_new(3, 1 << 20);
    assert_int_equal(bm_store_put(s, mk("a", 10, BM_CK_ROUTE_BLOCK)), 0);
    assert_int_equal(bm_store_put(s, mk("b", 10, BM_CK_ROUTE_BLOCK)), 0);
    assert_int_equal(bm_store_put(s, mk("c", 10, BM_CK_ROUTE_STATE)), 0);
    assert_non_null(bm_store_get(s, "a", 1, 0)); /* a is now the most recent */
    assert_int_equal(bm_store_put(s, mk("d", 10, BM_CK_ROUTE_BLOCK)), 0);
    assert_int_equal(bm_store_count(s), 3);
    assert_null(bm_store_get(s, "b", 1, 0)); /* the least recent went */
    assert_non_null(bm_store_get(s, "a", 1, 0));
    assert_non_null(bm_store_get(s, "c", 1, 0));
    assert_int_equal(bm_store_stats(s)->evictions[BM_CK_ROUTE_BLOCK], 1);
    bm_store_free(s);
}

static void test_bytes_never_exceeded(void **state)
{
    (void)state;
    uint64_t max = 100000;
    bm_store_t *s = bm_store_new(100000, max);
    char key[32];
    for (int i = 0; i < 500; i++) {
        snprintf(key, sizeof key, "k%d", i);
        bm_store_put(s, mk(key, (size_t)(1000 + (i * 7919) % 20000), BM_CK_ROUTE_STATE));
        assert_true(bm_store_bytes(s) <= max);
    }
    assert_true(bm_store_count(s) > 1);
    /* one larger than the whole store is refused, and nothing else is lost for it */
    size_t before = bm_store_count(s);
    assert_int_equal(bm_store_put(s, mk("huge", 200000, BM_CK_ROUTE_STATE)), BM_ETOOBIG);
    assert_int_equal(bm_store_count(s), before);
    assert_int_equal(bm_store_stats(s)->refused, 1);
    bm_store_free(s);
}

static void test_ttl_and_replace(void **state)
{
    (void)state;
    bm_store_t *s = bm_store_new(10, 1 << 20);
    bm_entry_t *e = mk("h", 10, BM_CK_ROUTE_BLOCK);
    e->cls = BM_CK_CHAIN;
    e->expires_ms = 1000;
    bm_store_put(s, e);
    assert_non_null(bm_store_get(s, "h", 1, 999));
    assert_null(bm_store_get(s, "h", 1, 1000));
    assert_int_equal(bm_store_stats(s)->expirations, 1);
    bm_store_put(s, mk("r", 10, BM_CK_ROUTE_BLOCK));
    bm_store_put(s, mk("r", 20, BM_CK_ROUTE_BLOCK));
    assert_int_equal(bm_store_count(s), 1);
    assert_int_equal(bm_store_get(s, "r", 1, 0)->body->len, 20);
    bm_store_remove(s, "r", 1);
    assert_int_equal(bm_store_count(s), 0);
    assert_int_equal(bm_store_bytes(s), 0);
    bm_store_free(s);
}

static bool canon(void *ud, const uint8_t root[32], uint64_t slot)
{
    (void)ud;
    (void)slot;
    return root[0] == 1; /* roots starting with 1 are on the finalized chain */
}

static void test_promotion(void **state)
{
    (void)state;
    bm_store_t *s = bm_store_new(10, 1 << 20);
    const char *keys[] = {"on", "off", "late"};
    uint64_t slots[] = {10, 12, 40};
    uint8_t first[] = {1, 2, 1};
    for (int i = 0; i < 3; i++) {
        bm_entry_t *e = mk(keys[i], 10, BM_CK_ROUTE_BLOCK);
        e->cls = BM_CK_CHAIN;
        e->expires_ms = 5000;
        e->has_root = true;
        e->root[0] = first[i];
        e->slot = slots[i];
        bm_store_put(s, e);
    }
    bm_store_promote(s, 32, canon, NULL);
    bm_entry_t *on = bm_store_get(s, "on", 2, 0);
    assert_non_null(on);
    assert_int_equal(on->cls, BM_CK_IMMUTABLE);
    assert_non_null(bm_store_get(s, "on", 2, 1u << 30)); /* no TTL any more */
    assert_null(bm_store_get(s, "off", 3, 0));           /* orphaned: dropped */
    bm_entry_t *late = bm_store_get(s, "late", 4, 0);
    assert_int_equal(late->cls, BM_CK_CHAIN); /* after finality: unchanged */
    assert_int_equal(bm_store_stats(s)->promotions, 1);
    assert_int_equal(bm_store_stats(s)->orphans_dropped, 1);
    bm_store_free(s);
}

static void test_body_outlives_eviction(void **state)
{
    (void)state;
    bm_store_t *s = bm_store_new(1, 1 << 20);
    bm_store_put(s, mk("a", 100, BM_CK_ROUTE_BLOCK));
    bm_buf_t *held = bm_buf_ref(bm_store_get(s, "a", 1, 0)->body); /* a response writing it */
    bm_store_put(s, mk("b", 10, BM_CK_ROUTE_BLOCK));               /* evicts a */
    assert_int_equal(held->len, 100);
    assert_int_equal(held->data[99], 'x');
    bm_buf_unref(held);
    bm_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru_by_entries),         cmocka_unit_test(test_bytes_never_exceeded),
        cmocka_unit_test(test_ttl_and_replace),        cmocka_unit_test(test_promotion),
        cmocka_unit_test(test_body_outlives_eviction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
