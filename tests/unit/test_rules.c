/* SPDX-License-Identifier: MIT */
/* Unit tests of rules (patterns, blocked paths, client routes, route rules, reads and heavy
 * reads), archive (historical ids, retention, pruned answers) and sticky (client table). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "read/archive.h"
#include "read/rules.h"
#include "read/sticky.h"

static bool matches(const char *pattern, const char *path)
{
    bm_pattern_t *p = bm_pattern_compile(pattern);
    assert_non_null(p);
    bool m = bm_pattern_match(p, path, strlen(path));
    bm_pattern_free(p);
    return m;
}

static void test_patterns(void **state)
{
    (void)state;
    const char *v = "/eth/v1/beacon/states/*/validators";
    assert_true(matches(v, "/eth/v1/beacon/states/head/validators"));
    assert_true(matches(v, "/eth/v1/beacon/states/0x12/validators"));
    assert_false(matches(v, "/eth/v1/beacon/states/head/validator_balances"));
    assert_false(matches(v, "/eth/v1/beacon/states/head/validators/1"));
    assert_false(matches(v, "/eth/v1/beacon/states/validators"));
    /* a trailing `*` is the rest of the path */
    assert_true(matches("/eth/v1/debug/*", "/eth/v1/debug/fork_choice"));
    assert_true(matches("/eth/v1/debug/*", "/eth/v1/debug/beacon/heads"));
    assert_false(matches("/eth/v1/debug/*", "/eth/v1/debug"));
    assert_false(matches("/eth/v1/debug/*", "/eth/v2/debug/beacon/states/head"));
    assert_true(matches("/eth/v1/node/version", "/eth/v1/node/version"));
    assert_false(matches("/eth/v1/node/version", "/eth/v1/node/versions"));
    assert_true(matches("/", "/"));
    assert_false(matches("/", "/a"));

    assert_null(bm_pattern_problem("/eth/v1/*/x/*"));
    assert_non_null(bm_pattern_problem("eth/v1"));
    assert_non_null(bm_pattern_problem(""));
    assert_non_null(bm_pattern_problem("/eth//v1"));
    assert_non_null(bm_pattern_problem("/eth/v1/"));
    assert_non_null(bm_pattern_problem("/eth/v*/x"));
    assert_non_null(bm_pattern_problem("/eth/v1?x=1"));
    assert_non_null(bm_pattern_problem("/eth/%41"));
    assert_non_null(bm_pattern_problem("/a b"));
    assert_null(bm_pattern_compile("/a//b"));
}

static void test_normalise_and_blocked(void **state)
{
    (void)state;
    char out[64];
    const char *p = "/eth/v1/%64ebug//x/?a=1";
    assert_int_equal(bm_rules_normalise(p, strlen(p), out, sizeof out), 15);
    assert_string_equal(out, "/eth/v1/debug/x");
    assert_int_equal(bm_rules_normalise("/a%00", 5, out, sizeof out), (size_t)-1);

    bm_rules_t *t = bm_rules_new();
    assert_int_equal(bm_rules_add_blocked(t, "/eth/v1/debug/*"), 0);
    assert_int_equal(bm_rules_add_blocked(t, "bad"), BM_EINVAL);
    const char *blocked[] = {"/eth/v1/debug/fork_choice", "/eth/v1/debug/fork_choice?x=1",
                             "/eth/v1/%64ebug/fork_choice", "//eth/v1/debug//fork_choice/",
                             "/eth/v1/debug%2Ffork_choice"};
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
        if (!bm_rules_blocked(t, blocked[i], strlen(blocked[i])))
            fail_msg("%s is not blocked", blocked[i]);
    assert_false(bm_rules_blocked(t, "/eth/v1/node/version", 20));
    bm_rules_free(t);
}

static void test_rules_first_match_wins(void **state)
{
    (void)state;
    bm_rules_t *t = bm_rules_new();
    bm_rule_t r;
    bm_rule_init(&r);
    strcpy(r.method, "GET");
    r.path = bm_pattern_compile("/eth/v1/beacon/states/*/validators");
    r.timeout_ms = 10000;
    assert_int_equal(bm_rules_add_rule(t, &r), 0);
    bm_rule_init(&r);
    r.path = bm_pattern_compile("/eth/v1/beacon/states/*");
    r.blocked = true;
    assert_int_equal(bm_rules_add_rule(t, &r), 0);
    const char *v = "/eth/v1/beacon/states/head/validators?id=1";
    const bm_rule_t *m = bm_rules_match(t, "GET", v, strlen(v));
    assert_non_null(m);
    assert_int_equal(m->timeout_ms, 10000);
    assert_int_equal(m->max_attempts, BM_RULE_INHERIT);
    m = bm_rules_match(t, "POST", v, strlen(v)); /* method differs: the second rule */
    assert_non_null(m);
    assert_true(m->blocked);
    assert_null(bm_rules_match(t, "GET", "/eth/v1/node/version", 20));
    bm_rules_free(t);
}

static void test_client_routes(void **state)
{
    (void)state;
    bm_rules_t *t = bm_rules_new();
    size_t rest;
    assert_int_equal(bm_rules_add_client_route(t, "/lighthouse", 0, 1, true), 0);
    assert_int_equal(bm_rules_add_client_route(t, "/lighthouse", 1, 0, false), 0); /* yields */
    assert_int_equal(bm_rules_add_client_route(t, "/teku", 3, 0, false), 0);
    assert_int_equal(bm_rules_add_client_route(t, "teku", 3, 0, false), BM_EINVAL);
    assert_int_equal(bm_rules_add_client_route(t, "/teku/", 3, 0, false), BM_EINVAL);
    assert_int_equal(bm_rules_client_route_count(t), 2);
    const bm_client_route_t *r = bm_rules_client_route(t, "/lighthouse/peers", 17, &rest);
    assert_non_null(r);
    assert_true(r->strip_prefix && r->nodes == 1 && rest == 11);
    assert_non_null(bm_rules_client_route(t, "/teku?x", 7, &rest));
    assert_null(bm_rules_client_route(t, "/tekus/x", 8, &rest));
    assert_null(bm_rules_client_route(t, "/eth/v1/node/version", 20, &rest));
    bm_rules_free(t);
}

static void test_reads_and_heavy(void **state)
{
    (void)state;
    const char *v = "/eth/v1/beacon/states/head/validators";
    assert_true(bm_rules_is_read("GET", "/x", 2));
    assert_true(bm_rules_is_read("HEAD", "/x", 2));
    assert_true(bm_rules_is_read("POST", v, strlen(v)));
    const char *b = "/eth/v1/beacon/states/head/validator_balances";
    assert_true(bm_rules_is_read("POST", b, strlen(b)));
    assert_true(bm_rules_is_read("POST", "/eth/v1/beacon/rewards/attestations/5", 37));
    assert_false(bm_rules_is_read("POST", "/eth/v1/beacon/pool/attestations", 32));
    assert_false(bm_rules_is_read("DELETE", v, strlen(v)));

    assert_true(bm_rules_is_heavy("GET", v, strlen(v), NULL, 0, NULL, 0));
    assert_true(bm_rules_is_heavy("GET", v, strlen(v), "status=active", 13, NULL, 0));
    assert_false(bm_rules_is_heavy("GET", v, strlen(v), "status=active&id=1", 18, NULL, 0));
    assert_true(bm_rules_is_heavy("POST", v, strlen(v), NULL, 0, "{}", 2));
    assert_false(bm_rules_is_heavy("POST", v, strlen(v), NULL, 0, "{\"ids\":[\"1\"]}", 13));
    const char *s = "/eth/v2/debug/beacon/states/head";
    assert_true(bm_rules_is_heavy("GET", s, strlen(s), NULL, 0, NULL, 0));
    assert_false(bm_rules_is_heavy("GET", "/eth/v1/node/version", 20, NULL, 0, NULL, 0));
}

static void classify(const char *path, bm_hist_id_t *id)
{
    bm_archive_classify(path, strlen(path), 32, id);
}

static void test_archive_classification(void **state)
{
    (void)state;
    bm_hist_id_t id;
    classify("/eth/v1/beacon/blob_sidecars/100?indices=1", &id);
    assert_true(id.kind == BM_HIST_BLOB && id.has_slot && id.slot == 100);
    classify("/eth/v2/beacon/blocks/0xabc", &id);
    assert_true(id.kind == BM_HIST_BLOCK && id.root && !id.has_slot);
    classify("/eth/v1/beacon/states/genesis/validators", &id);
    assert_true(id.kind == BM_HIST_STATE && id.has_slot && id.slot == 0);
    classify("/eth/v1/beacon/rewards/attestations/10", &id);
    assert_true(id.kind == BM_HIST_STATE && id.slot == 320);
    classify("/eth/v1/beacon/states/head/validators", &id);
    assert_int_equal(id.kind, BM_HIST_NONE);
    classify("/eth/v1/beacon/states/finalized/root", &id);
    assert_int_equal(id.kind, BM_HIST_NONE);
    classify("/eth/v1/node/version", &id);
    assert_int_equal(id.kind, BM_HIST_NONE);

    bm_retention_t r;
    bm_retention_default(&r);
    uint64_t now = 9000000; /* slot */
    classify("/eth/v1/beacon/states/100/root", &id);
    assert_true(bm_archive_beyond_retention(&id, &r, now, 32));
    classify("/eth/v1/beacon/states/8991900/root", &id); /* 8100 slots back: kept */
    assert_false(bm_archive_beyond_retention(&id, &r, now, 32));
    classify("/eth/v1/beacon/blob_sidecars/8800000", &id); /* 6250 epochs back */
    assert_true(bm_archive_beyond_retention(&id, &r, now, 32));
    classify("/eth/v2/beacon/blocks/8800000", &id); /* blocks are kept 33024 epochs */
    assert_false(bm_archive_beyond_retention(&id, &r, now, 32));
    classify("/eth/v2/beacon/blocks/0xab", &id); /* a root's age is unknown */
    assert_false(bm_archive_beyond_retention(&id, &r, now, 32));
    /* early in a chain nothing is beyond the window */
    classify("/eth/v1/beacon/states/1/root", &id);
    assert_false(bm_archive_beyond_retention(&id, &r, 100, 32));
}

static void test_archive_pruned_answers(void **state)
{
    (void)state;
    bm_hist_id_t id;
    classify("/eth/v1/beacon/states/100/root", &id);
    assert_true(bm_archive_pruned_answer(&id, 404, NULL, 0, 1000));
    assert_false(bm_archive_pruned_answer(&id, 404, NULL, 0, 50)); /* a future slot */
    assert_false(bm_archive_pruned_answer(&id, 500, NULL, 0, 1000));
    assert_false(bm_archive_pruned_answer(&id, 400, "custody", 7, 1000)); /* not a blob */
    classify("/eth/v1/beacon/blob_sidecars/0xab", &id);
    assert_true(bm_archive_pruned_answer(&id, 404, NULL, 0, 1000));
    const char *m = "{\"code\":400,\"message\":\"blobs not in Custody\"}";
    assert_true(bm_archive_pruned_answer(&id, 400, m, strlen(m), 1000));
    const char *other = "{\"code\":400,\"message\":\"bad index\"}";
    assert_false(bm_archive_pruned_answer(&id, 400, other, strlen(other), 1000));
    classify("/eth/v1/beacon/states/head/root", &id);
    assert_false(bm_archive_pruned_answer(&id, 404, NULL, 0, 1000));
}

typedef struct sticky_seen {
    int n;
    uint64_t key[4], used[4];
    int node[4];
} sticky_seen_t;

static void sticky_note(void *ud, uint64_t key, int node, uint64_t used_ms)
{
    sticky_seen_t *s = ud;
    if (s->n < 4) {
        s->key[s->n] = key;
        s->node[s->n] = node;
        s->used[s->n] = used_ms;
    }
    s->n++;
}

static void test_sticky(void **state)
{
    (void)state;
    bm_sticky_t *s = bm_sticky_new(10);
    uint64_t a = bm_sticky_key("10.0.0.1", 8), b = bm_sticky_key("10.0.0.2", 8);
    assert_true(a != b);
    assert_int_equal(bm_sticky_get(s, a, 0), -1);
    bm_sticky_set(s, a, 2, 0);
    bm_sticky_set(s, b, 2, 0);
    assert_int_equal(bm_sticky_get(s, a, 1), 2);
    bm_sticky_set(s, a, 1, 2); /* moves */
    assert_int_equal(bm_sticky_count(s, 2), 1);
    assert_int_equal(bm_sticky_count(s, 1), 1);
    /* every client once, with its node and last use (what is written back to Redis) */
    sticky_seen_t seen = {0};
    bm_sticky_each(s, sticky_note, &seen);
    assert_int_equal(seen.n, 2);
    for (int i = 0; i < 2; i++) {
        if (seen.key[i] == a) {
            assert_int_equal(seen.node[i], 1);
            assert_int_equal(seen.used[i], 2);
        } else {
            assert_true(seen.key[i] == b);
            assert_int_equal(seen.node[i], 2);
            assert_int_equal(seen.used[i], 0);
        }
    }
    bm_sticky_drop(s, b);
    assert_int_equal(bm_sticky_total(s), 1);
    /* bounded: many clients never grow it past its capacity */
    for (uint64_t k = 0; k < 10000; k++)
        bm_sticky_set(s, k * 7919 + 3, (int)(k % 3), k);
    assert_true(bm_sticky_total(s) <= 64);
    /* node 0 holding everything is overloaded at factor 2 with a third of the weight */
    bm_sticky_t *o = bm_sticky_new(64);
    for (uint64_t k = 1; k <= 9; k++)
        bm_sticky_set(o, k, 0, 0);
    assert_true(bm_sticky_overloaded(o, 0, 1.0 / 3, 2.0));
    assert_false(bm_sticky_overloaded(o, 0, 1.0 / 3, 4.0));
    bm_sticky_free(o);
    bm_sticky_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_normalise_and_blocked),
        cmocka_unit_test(test_rules_first_match_wins),
        cmocka_unit_test(test_client_routes),
        cmocka_unit_test(test_reads_and_heavy),
        cmocka_unit_test(test_archive_classification),
        cmocka_unit_test(test_archive_pruned_answers),
        cmocka_unit_test(test_sticky),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
