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
#include <string.h>
#include <cmocka.h>

#include <sys/resource.h>

#include "app/config.h"
#include "app/fdlimit.h"

static bm_config_t *parse(const char *yaml)
{
    bm_config_err_t err;
    bm_config_t *cfg = bm_config_parse(yaml, strlen(yaml), "t.yaml", NULL, NULL, &err);
    if (!cfg)
        fail_msg("%s", err.msg);
    return cfg;
}

static void test_need(void **state)
{
    (void)state;
    bm_config_t *cfg = parse("upstreams: []\n");
    assert_int_equal(bm_fdlimit_need(cfg), cfg->server.max_connections + 64);
    bm_config_free(cfg);
    cfg = parse("server: {maxConnections: 100}\n"
                "upstreams:\n"
                "  - {url: \"http://127.0.0.1:1\", maxConnections: 64}\n"
                "  - {url: \"http://127.0.0.1:2\", maxConnections: 10}\n");
    assert_int_equal(bm_fdlimit_need(cfg), 100 + 64 + (64 + 8) + (10 + 8));
    bm_config_free(cfg);
    /* every network's nodes count, not only the top level's */
    cfg = parse("server: {maxConnections: 100}\n"
                "networks:\n"
                "  - id: mainnet\n"
                "    upstreams: [{url: \"http://127.0.0.1:1\", maxConnections: 5}]\n"
                "  - id: hoodi\n"
                "    upstreams: [{url: \"http://127.0.0.1:3\", maxConnections: 7},\n"
                "                {url: \"http://127.0.0.1:4\", maxConnections: 9}]\n");
    assert_int_equal(bm_fdlimit_need(cfg), 100 + 64 + (5 + 8) + (7 + 8) + (9 + 8));
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
