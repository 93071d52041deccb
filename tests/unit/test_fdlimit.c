/* SPDX-License-Identifier: MIT */
/*
 * test_fdlimit: the descriptor budget at start: what a configuration needs, the soft limit
 * raised to the hard one (in this very process: the test lowers its own soft limit first),
 * and a limit still short of the need reported as such.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sys/resource.h>

#include "app/config.h"
#include "app/fdlimit.h"

static void test_need(void **state)
{
    (void)state;
    bm_config_t *cfg = bm_config_new();
    assert_non_null(cfg);
    uint64_t none = bm_fdlimit_need(cfg);
    assert_int_equal(none, cfg->server.max_connections + 64);
    cfg->server.max_connections = 100;
    bm_config_upstream_t ups[2] = {{.max_connections = 64}, {.max_connections = 10}};
    cfg->upstreams = ups;
    cfg->n_upstreams = 2;
    assert_int_equal(bm_fdlimit_need(cfg), 100 + 64 + (64 + 8) + (10 + 8));
    cfg->upstreams = NULL;
    cfg->n_upstreams = 0;
    bm_config_free(cfg);
}

static void test_raise(void **state)
{
    (void)state;
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max <= 64)
        skip(); /* nothing to lower and raise again */
    struct rlimit low = {64, rl.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    bm_fdlimit_t f;
    assert_int_equal(bm_fdlimit_raise(100, &f), 0);
    assert_int_equal(f.soft_before, 64);
    assert_true(f.raised);
    assert_true(f.soft == f.hard);
    assert_false(f.short_of_need);
    struct rlimit now;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &now), 0);
    assert_true(now.rlim_cur == rl.rlim_max); /* the process's own limit was raised */
    /* already at the hard limit: nothing to raise; a need above it is short */
    uint64_t above = f.hard == UINT64_MAX ? UINT64_MAX : f.hard + 1;
    assert_int_equal(bm_fdlimit_raise(above, &f), 0);
    assert_false(f.raised);
    assert_true(f.short_of_need || f.hard == UINT64_MAX);
    /* a hard limit of its own below the need (lowering the hard limit is allowed) */
    struct rlimit tight = {32, 48};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &tight), 0);
    assert_int_equal(bm_fdlimit_raise(1000, &f), 0);
    assert_true(f.raised);
    assert_int_equal(f.soft, 48);
    assert_true(f.short_of_need);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_need),
        cmocka_unit_test(test_raise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
