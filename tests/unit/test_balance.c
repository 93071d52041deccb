/* SPDX-License-Identifier: MIT */
/* Unit tests of balance (the score, the four strategies) and pick (sets, tiers, archive). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "read/balance.h"
#include "read/pick.h"

#define PICKS 10000

/* First-pick counts over PICKS orders of the items. */
static void first_picks(bm_balance_strategy_t s, bm_balance_item_t *items, size_t n,
                        unsigned *count)
{
    bm_rng_t rng;
    bm_rng_seed(&rng, 42);
    memset(count, 0, n * sizeof *count);
    for (int i = 0; i < PICKS; i++) {
        size_t order[8];
        bm_balance_order(s, items, n, &rng, order);
        count[order[0]]++;
    }
}

/* Each count within 5 % (relative) of its weight's share. */
static void assert_shares(const unsigned *count, const double *w, size_t n)
{
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += w[i];
    for (size_t i = 0; i < n; i++) {
        double want = PICKS * w[i] / total;
        double got = count[i];
        if (fabs(got - want) > 0.05 * want)
            fail_msg("item %zu: %u picks, want %.0f +- 5%%", i, count[i], want);
    }
}

static void test_score_strategy_follows_score_times_weight(void **state)
{
    (void)state;
    int64_t rr[3] = {0};
    bm_balance_item_t items[3] = {
        {.weight = 1, .score = 1.0, .rr = &rr[0]},
        {.weight = 3, .score = 1.0, .rr = &rr[1]},
        {.weight = 2, .score = 0.25, .rr = &rr[2]},
    };
    unsigned count[3];
    const double want[3] = {1.0, 3.0, 0.5};
    first_picks(BM_BALANCE_SCORE, items, 3, count);
    assert_shares(count, want, 3);
}

static void test_random_strategy_follows_weight(void **state)
{
    (void)state;
    int64_t rr[3] = {0};
    bm_balance_item_t items[3] = {
        {.weight = 1, .score = 0.001, .rr = &rr[0]}, /* the score plays no part */
        {.weight = 2, .score = 1.0, .rr = &rr[1]},
        {.weight = 5, .score = 1.0, .rr = &rr[2]},
    };
    unsigned count[3];
    const double want[3] = {1, 2, 5};
    first_picks(BM_BALANCE_RANDOM, items, 3, count);
    assert_shares(count, want, 3);
}

static void test_round_robin_is_smooth_and_weighted(void **state)
{
    (void)state;
    int64_t rr[3] = {0};
    bm_balance_item_t items[3] = {
        {.weight = 5, .rr = &rr[0]}, {.weight = 1, .rr = &rr[1]}, {.weight = 1, .rr = &rr[2]}};
    unsigned count[3];
    const double want[3] = {5, 1, 1};
    first_picks(BM_BALANCE_ROUND_ROBIN, items, 3, count);
    assert_shares(count, want, 3);
    /* nginx's sequence for weights 5, 1, 1: a a b a c a a */
    memset(rr, 0, sizeof rr);
    const size_t seq[7] = {0, 0, 1, 0, 2, 0, 0};
    for (int i = 0; i < 7; i++) {
        size_t order[3];
        bm_balance_order(BM_BALANCE_ROUND_ROBIN, items, 3, NULL, order);
        assert_int_equal(order[0], seq[i]);
    }
}

static void test_least_conn_prefers_fewest_per_weight(void **state)
{
    (void)state;
    int64_t rr[3] = {0};
    bm_rng_t rng;
    bm_rng_seed(&rng, 7);
    bm_balance_item_t items[3] = {
        {.weight = 1, .in_flight = 2, .rr = &rr[0]},
        {.weight = 4, .in_flight = 4, .rr = &rr[1]}, /* 1 per weight: the least */
        {.weight = 1, .in_flight = 3, .rr = &rr[2]},
    };
    size_t order[3];
    bm_balance_order(BM_BALANCE_LEAST_CONN, items, 3, &rng, order);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 0);
    assert_int_equal(order[2], 2);
    /* ties are broken at random: equal loads share the first place evenly */
    bm_balance_item_t tie[2] = {{.weight = 1, .rr = &rr[0]}, {.weight = 1, .rr = &rr[1]}};
    unsigned count[2];
    const double want[2] = {1, 1};
    first_picks(BM_BALANCE_LEAST_CONN, tie, 2, count);
    assert_shares(count, want, 2);
}

static void test_score_terms(void **state)
{
    (void)state;
    bm_score_weights_t w = {4, 8, 2, 1};
    bm_score_terms_t t;
    bm_score_compute(&(bm_score_input_t){0}, &w, &t);
    assert_true(t.score == 1.0 && t.error_rate == 1.0 && t.latency == 1.0);
    bm_score_compute(&(bm_score_input_t){.error_rate = 0.5}, &w, &t);
    assert_true(fabs(t.error_rate - 0.75) < 1e-9);
    assert_true(fabs(t.score - pow(0.75, 4)) < 1e-9);
    bm_score_compute(&(bm_score_input_t){.latency_p90_ms = 250}, &w, &t);
    assert_true(fabs(t.latency - 0.5) < 1e-9);
    bm_score_compute(&(bm_score_input_t){.head_lag = 4, .sync_distance = 32}, &w, &t);
    assert_true(fabs(t.head_lag - 0.5) < 1e-9 && fabs(t.sync_distance - 0.5) < 1e-9);
    assert_true(fabs(t.score - 0.25 * 0.5) < 1e-9);
    /* a node ahead of the cluster head is not penalised; a weight of 0 ignores a term */
    bm_score_compute(&(bm_score_input_t){.head_lag = -3, .error_rate = 1}, &(bm_score_weights_t){0},
                     &t);
    assert_true(t.head_lag == 1.0 && t.score == 1.0);
    /* terms stay in (0, 1] whatever the input */
    bm_score_compute(&(bm_score_input_t){.error_rate = 7, .latency_p90_ms = 1e12}, &w, &t);
    assert_true(t.error_rate > 0 && t.latency > 0 && t.score > 0);
}

static bm_pick_node_t node(int set, uint32_t prio, bool archive, int64_t *rr)
{
    return (bm_pick_node_t){.set = set,
                            .priority = prio,
                            .archive = archive,
                            .available = true,
                            .item = {.weight = 1, .score = 1, .rr = rr}};
}

static void test_pick_sets_then_tiers(void **state)
{
    (void)state;
    int64_t rr[5] = {0};
    bm_rng_t rng;
    bm_rng_seed(&rng, 1);
    bm_pick_node_t n[5] = {
        node(BM_PICK_MAYBE_BACK, 0, false, &rr[0]), node(BM_PICK_READY, 1, false, &rr[1]),
        node(BM_PICK_ANSWERING, 0, false, &rr[2]),  node(BM_PICK_READY, 0, false, &rr[3]),
        node(BM_PICK_NEVER, 0, false, &rr[4]),
    };
    bm_pick_opts_t o = {.strategy = BM_BALANCE_SCORE};
    size_t order[5];
    assert_int_equal(bm_pick_order(n, 5, &o, 5, &rng, order), 4);
    const size_t want[4] = {3, 1, 2, 0}; /* ready tier 0, ready tier 1, answering, maybe back */
    assert_memory_equal(order, want, sizeof want);
    /* an unavailable tier-0 node (open breaker) lets tier 1 first */
    n[3].available = false;
    assert_int_equal(bm_pick_order(n, 5, &o, 1, &rng, order), 1);
    assert_int_equal(order[0], 1);
    /* a no-head style state (anything new) counts as answering, never as ready */
    assert_int_equal(bm_pick_set_of((bm_node_state_t)(BM_NODE_STATE_COUNT + 1)), BM_PICK_ANSWERING);
    assert_int_equal(bm_pick_set_of(BM_NODE_NO_HEAD), BM_PICK_ANSWERING);
    assert_int_equal(bm_pick_set_of(BM_NODE_LAGGING), BM_PICK_ANSWERING);
    assert_int_equal(bm_pick_set_of(BM_NODE_WRONG_NETWORK), BM_PICK_NEVER);
    assert_int_equal(bm_pick_set_of(BM_NODE_UNREACHABLE), BM_PICK_MAYBE_BACK);
}

static void test_pick_archive(void **state)
{
    (void)state;
    int64_t rr[3] = {0};
    bm_rng_t rng;
    bm_rng_seed(&rng, 1);
    bm_pick_node_t n[3] = {node(BM_PICK_READY, 0, false, &rr[0]),
                           node(BM_PICK_ANSWERING, 1, true, &rr[1]),
                           node(BM_PICK_READY, 0, false, &rr[2])};
    size_t order[3];
    bm_pick_opts_t o = {.strategy = BM_BALANCE_SCORE, .archive_first = true};
    assert_int_equal(bm_pick_order(n, 3, &o, 3, &rng, order), 3);
    assert_int_equal(order[0], 1);
    o.archive_only = true;
    assert_int_equal(bm_pick_order(n, 3, &o, 3, &rng, order), 1);
    assert_int_equal(order[0], 1);
    n[1].available = false;
    assert_int_equal(bm_pick_order(n, 3, &o, 3, &rng, order), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_score_strategy_follows_score_times_weight),
        cmocka_unit_test(test_random_strategy_follows_weight),
        cmocka_unit_test(test_round_robin_is_smooth_and_weighted),
        cmocka_unit_test(test_least_conn_prefers_fewest_per_weight),
        cmocka_unit_test(test_score_terms),
        cmocka_unit_test(test_pick_sets_then_tiers),
        cmocka_unit_test(test_pick_archive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
