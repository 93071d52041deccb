/* SPDX-License-Identifier: MIT */
/*
 * test_reload_diff: what a reload decides from two configurations. Each group of keys is
 * changed on its own and the diff must name that group and nothing else: a network's keys
 * rebuild that network only (matched by id), the front's keys make a new front, log,
 * listen and server limits go to their owners.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "app/config.h"
#include "app/reload_diff.h"
#include "base/buf.h"

#define ONE                                                                                        \
    "upstreams: [{id: a, url: \"http://127.0.0.1:1\"}, {id: b, url: \"http://127.0.0.1:2\"}]\n"

static bm_config_t *cfg_of(const char *yaml)
{
    bm_config_err_t err;
    bm_config_t *c = bm_config_parse(yaml, strlen(yaml), "t.yaml", NULL, NULL, &err);
    if (!c || bm_config_validate(c, &err) != 0) {
        print_error("%s\n%s\n", yaml, err.msg);
        fail();
    }
    return c;
}

static void diff_of(const char *a, const char *b, bm_reload_diff_t *d)
{
    bm_config_t *x = cfg_of(a), *y = cfg_of(b);
    assert_int_equal(bm_reload_diff(x, y, d), 0);
    bm_config_free(x);
    bm_config_free(y);
}

/* The summary line of diff(a, b). */
static void expect_summary(const char *a, const char *b, const char *want)
{
    bm_config_t *x = cfg_of(a), *y = cfg_of(b);
    bm_reload_diff_t d;
    assert_int_equal(bm_reload_diff(x, y, &d), 0);
    bm_str_t s = BM_STR_INIT;
    assert_int_equal(bm_reload_diff_describe(&d, x, y, &s), 0);
    assert_string_equal(bm_str_data(&s), want);
    bm_str_dispose(&s);
    bm_config_free(x);
    bm_config_free(y);
}

static void test_same_file_changes_nothing(void **state)
{
    (void)state;
    bm_reload_diff_t d;
    diff_of(ONE, ONE, &d);
    assert_true(bm_reload_diff_empty(&d));
    assert_int_equal(d.n_old, 1);
    assert_int_equal(d.n_new, 1);
    assert_int_equal(d.keep[0], 0);
    /* the same values written differently are the same configuration */
    diff_of(ONE "failsafe: {timeout: 4s}\n", ONE "failsafe:\n  timeout: 4000ms\n", &d);
    assert_true(bm_reload_diff_empty(&d));
    expect_summary(ONE, ONE, "nothing changed");
}

static void test_network_keys_rebuild_the_network(void **state)
{
    (void)state;
    static const char *const changed[] = {
        "upstreams: [{id: a, url: \"http://127.0.0.1:1\"}]\n", /* a node removed */
        ONE "failsafe: {timeout: 9s}\n",
        ONE "timeouts: {read: 900ms}\n", /* a global key the network's modules read */
        ONE "duties: {writeTimeout: 9s}\n",
        ONE "cache: {maxEntries: 9}\n",
        ONE "blockedPaths: [\"/eth/v1/debug/*\"]\n",
        /* what each network's observe reads: its options and its routes */
        ONE "metrics: {path: /prom}\n",
        ONE "metrics: {listen: \"127.0.0.1:9100\"}\n",
        ONE "journal: {slots: 64}\n",
        ONE "ui: {enabled: false}\n",
        ONE "log: {access: true}\n",
        /* a secret: a new password counts although --check masks it */
        "upstreams: [{id: a, url: \"http://u:p2@127.0.0.1:1\"}, {id: b, url: "
        "\"http://127.0.0.1:2\"}]\n",
    };
    for (size_t i = 0; i < sizeof changed / sizeof changed[0]; i++) {
        bm_reload_diff_t d;
        diff_of(ONE, changed[i], &d);
        if (d.keep[0] != -1 || d.replaces[0] != 0 || !d.retire[0] || d.front || d.log || d.listen ||
            d.server) {
            print_error("change %zu: %s\n", i, changed[i]);
            fail();
        }
        assert_int_equal(bm_reload_diff_built(&d), 1);
        assert_int_equal(bm_reload_diff_retired(&d), 1);
    }
    expect_summary(ONE, ONE "failsafe: {timeout: 9s}\n", "the network: rebuilt");
}

static void test_front_log_listen_server(void **state)
{
    (void)state;
    bm_reload_diff_t d;
    static const char *const front[] = {
        ONE "auth: {keys: [{id: k, secret: \"0123456789abcdef\"}]}\n",
        ONE "rateLimit: {perClient: {rate: 10, burst: 20}}\n",
        ONE "cors: {allowedOrigins: [\"https://x.example\"]}\n",
        ONE "trustedProxies: [\"10.0.0.1\"]\n",
        ONE "server: {allowedClients: [\"127.0.0.0/8\"]}\n",
    };
    for (size_t i = 0; i < sizeof front / sizeof front[0]; i++) {
        diff_of(ONE, front[i], &d);
        if (!d.front || d.server || d.listen || d.log || d.keep[0] != 0) {
            print_error("front change %zu: %s\n", i, front[i]);
            fail();
        }
    }
    diff_of(ONE, ONE "log: {level: debug}\n", &d);
    assert_true(d.log);
    assert_false(d.front || d.server || d.listen);
    assert_int_equal(d.keep[0], 0);
    diff_of(ONE, ONE "listen: \"127.0.0.1:6000\"\n", &d);
    assert_true(d.listen);
    assert_false(d.front || d.server || d.log);
    assert_int_equal(d.keep[0], 0);
    diff_of(ONE, ONE "server: {maxBodyBytes: 1024}\n", &d);
    assert_true(d.server);
    assert_false(d.front || d.listen || d.log);
    assert_int_equal(d.keep[0], 0);
    expect_summary(ONE, ONE "log: {level: debug}\nlisten: \"127.0.0.1:6000\"\n",
                   "log: applied; listen: re-bound");
}

#define NETS(second)                                                                               \
    "networks:\n"                                                                                  \
    "  - id: main\n"                                                                               \
    "    upstreams: [{id: a, url: \"http://127.0.0.1:1\"}]\n" second

static void test_networks_matched_by_id(void **state)
{
    (void)state;
    const char *two = NETS("  - id: test\n    upstreams: [{id: t, url: \"http://127.0.0.1:3\"}]\n");
    bm_reload_diff_t d;
    /* one network changed: only it is rebuilt */
    diff_of(two, NETS("  - id: test\n    upstreams: [{id: t, url: \"http://127.0.0.1:4\"}]\n"), &d);
    assert_int_equal(d.keep[0], 0);
    assert_int_equal(d.keep[1], -1);
    assert_int_equal(d.replaces[1], 1);
    assert_false(d.retire[0]);
    assert_true(d.retire[1]);
    /* a network removed, the other kept though its position changed */
    diff_of(two, "networks:\n  - id: test\n    upstreams: [{id: t, url: \"http://127.0.0.1:3\"}]\n",
            &d);
    assert_int_equal(d.n_new, 1);
    assert_int_equal(d.keep[0], 1);
    assert_true(d.retire[0]);
    assert_false(d.retire[1]);
    expect_summary(two,
                   "networks:\n  - id: test\n    upstreams: [{id: t, url: "
                   "\"http://127.0.0.1:3\"}]\n",
                   "network main: removed");
    /* a network added: built, replacing nothing */
    diff_of(NETS(""), two, &d);
    assert_int_equal(d.keep[0], 0);
    assert_int_equal(d.keep[1], -1);
    assert_int_equal(d.replaces[1], -1);
    expect_summary(NETS(""), two, "network test: added");
    /* a top-level per-network section applies to every network that does not give its own */
    diff_of(two,
            "failsafe: {timeout: 9s}\n" NETS("  - id: test\n    upstreams: [{id: t, url: "
                                             "\"http://127.0.0.1:3\"}]\n    failsafe: "
                                             "{timeout: 4s}\n"),
            &d);
    assert_int_equal(d.keep[0], -1); /* main inherits the new top-level timeout */
    /* test gives its own section, the defaults' values: unchanged */
    assert_int_equal(d.keep[1], 1);
    /* from one unnamed network to named ones: the unnamed one is replaced by nothing */
    diff_of(ONE, two, &d);
    assert_true(d.retire[0]);
    assert_int_equal(d.replaces[0], -1);
    assert_int_equal(d.replaces[1], -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_file_changes_nothing),
        cmocka_unit_test(test_network_keys_rebuild_the_network),
        cmocka_unit_test(test_front_log_listen_server),
        cmocka_unit_test(test_networks_matched_by_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
