/* SPDX-License-Identifier: MIT */
/*
 * test_peers: the per-client connection counts behind server.maxConnectionsPerClient: the
 * cap per address, addresses apart from each other, an address forgotten with its last
 * connection, and a table that grows past its first buckets without losing a count.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "http/peers.h"

static void test_cap_per_address(void **state)
{
    (void)state;
    bm_peers_t *p = bm_peers_new();
    assert_non_null(p);
    for (int i = 0; i < 3; i++)
        assert_true(bm_peers_take(p, "10.0.0.1", 3));
    assert_false(bm_peers_take(p, "10.0.0.1", 3)); /* the fourth is refused */
    assert_int_equal(bm_peers_count(p, "10.0.0.1"), 3);
    assert_true(bm_peers_take(p, "10.0.0.2", 3)); /* another client is not */
    assert_true(bm_peers_take(p, "::1", 3));
    assert_int_equal(bm_peers_clients(p), 3);
    bm_peers_release(p, "10.0.0.1");
    assert_true(bm_peers_take(p, "10.0.0.1", 3)); /* room again after a close */
    assert_false(bm_peers_take(p, "10.0.0.1", 3));
    for (int i = 0; i < 3; i++)
        bm_peers_release(p, "10.0.0.1");
    assert_int_equal(bm_peers_count(p, "10.0.0.1"), 0);
    assert_int_equal(bm_peers_clients(p), 2); /* forgotten with its last connection */
    bm_peers_release(p, "10.0.0.9");          /* unknown: nothing happens */
    assert_int_equal(bm_peers_clients(p), 2);
    /* cap 0: no cap */
    for (int i = 0; i < 5000; i++)
        assert_true(bm_peers_take(p, "10.0.0.3", 0));
    assert_int_equal(bm_peers_count(p, "10.0.0.3"), 5000);
    bm_peers_free(p);
}

static void test_many_clients(void **state)
{
    (void)state;
    bm_peers_t *p = bm_peers_new();
    char a[64];
    for (int i = 0; i < 10000; i++) {
        snprintf(a, sizeof a, "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
        assert_true(bm_peers_take(p, a, 2));
        assert_true(bm_peers_take(p, a, 2));
    }
    assert_int_equal(bm_peers_clients(p), 10000);
    for (int i = 0; i < 10000; i++) {
        snprintf(a, sizeof a, "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
        assert_int_equal(bm_peers_count(p, a), 2);
        assert_false(bm_peers_take(p, a, 2));
        bm_peers_release(p, a);
        if (i % 2)
            bm_peers_release(p, a);
    }
    assert_int_equal(bm_peers_clients(p), 5000);
    bm_peers_free(p); /* frees what is left */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cap_per_address),
        cmocka_unit_test(test_many_clients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
