/* SPDX-License-Identifier: MIT */
/* Unit tests of breaker (the circuit breaker's state machine) and aimd (the auto-tuned token
 * bucket and the hedge budget). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "read/aimd.h"
#include "read/breaker.h"

static void test_breaker_opens_after_consecutive_failures(void **state)
{
    (void)state;
    bm_breaker_t b;
    bm_breaker_init(&b, &(bm_breaker_opts_t){3, 2, 1000});
    bm_breaker_done(&b, true, false, 0);
    bm_breaker_done(&b, true, false, 0);
    bm_breaker_done(&b, false, false, 0); /* a success (or a 4xx) resets the count */
    bm_breaker_done(&b, true, false, 0);
    bm_breaker_done(&b, true, false, 0);
    assert_int_equal(b.state, BM_BREAKER_CLOSED);
    bm_breaker_done(&b, true, true, 0); /* a cancelled hedge counts for nothing */
    assert_int_equal(b.state, BM_BREAKER_CLOSED);
    bm_breaker_done(&b, true, false, 100);
    assert_int_equal(b.state, BM_BREAKER_OPEN);
    assert_int_equal(b.opens, 1);
    assert_false(bm_breaker_allows(&b, 100));
    assert_false(bm_breaker_allows(&b, 1099));
}

static void test_breaker_half_open_probes_then_closes(void **state)
{
    (void)state;
    bm_breaker_t b;
    bm_breaker_init(&b, &(bm_breaker_opts_t){1, 2, 1000});
    bm_breaker_done(&b, true, false, 0);
    assert_int_equal(b.state, BM_BREAKER_OPEN);
    assert_true(bm_breaker_allows(&b, 1000));
    assert_int_equal(b.state, BM_BREAKER_HALF_OPEN);
    bm_breaker_start(&b);
    assert_false(bm_breaker_allows(&b, 1001)); /* one probe at a time */
    bm_breaker_done(&b, false, false, 1002);
    assert_int_equal(b.state, BM_BREAKER_HALF_OPEN);
    assert_true(bm_breaker_allows(&b, 1003));
    bm_breaker_start(&b);
    bm_breaker_done(&b, false, false, 1004);
    assert_int_equal(b.state, BM_BREAKER_CLOSED);
    assert_string_equal(bm_breaker_state_name(b.state), "closed");
}

static void test_breaker_half_open_failure_reopens(void **state)
{
    (void)state;
    bm_breaker_t b;
    bm_breaker_init(&b, &(bm_breaker_opts_t){1, 1, 500});
    bm_breaker_done(&b, true, false, 0);
    assert_true(bm_breaker_allows(&b, 600));
    bm_breaker_start(&b);
    bm_breaker_done(&b, true, false, 700);
    assert_int_equal(b.state, BM_BREAKER_OPEN);
    assert_false(bm_breaker_allows(&b, 1100)); /* the wait starts again at 700 */
    assert_true(bm_breaker_allows(&b, 1200));
    assert_int_equal(b.opens, 2);
    /* a threshold of 0 never opens */
    bm_breaker_init(&b, &(bm_breaker_opts_t){0, 1, 500});
    for (int i = 0; i < 100; i++)
        bm_breaker_done(&b, true, false, 0);
    assert_int_equal(b.state, BM_BREAKER_CLOSED);
}

static void test_aimd_bucket(void **state)
{
    (void)state;
    bm_aimd_t b;
    bm_aimd_init(&b, 2, 8, 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(bm_aimd_take(&b, 0), 0);
    uint64_t wait = bm_aimd_take(&b, 0); /* empty: one token comes in 1/8 s */
    assert_true(wait >= 124 && wait <= 126);
    assert_int_equal(bm_aimd_take(&b, 125), 0);
    /* multiplicative decrease, floored at min */
    bm_aimd_throttled(&b, 0, 125);
    assert_true(b.rate == 4);
    bm_aimd_throttled(&b, 0, 125);
    bm_aimd_throttled(&b, 0, 125);
    assert_true(b.rate == 2);
    /* additive increase: about +1 per `rate` successes, capped at max */
    for (int i = 0; i < 2; i++)
        bm_aimd_success(&b);
    assert_true(b.rate > 2.8 && b.rate < 3.0);
    for (int i = 0; i < 1000; i++)
        bm_aimd_success(&b);
    assert_true(b.rate == 8);
    /* Retry-After closes the bucket until then */
    bm_aimd_throttled(&b, 1000, 10000);
    assert_int_equal(bm_aimd_wait_ms(&b, 10000), 1000);
    assert_int_equal(bm_aimd_wait_ms(&b, 10600), 400);
    assert_int_equal(bm_aimd_take(&b, 11000), 0);
}

static void test_aimd_disabled(void **state)
{
    (void)state;
    bm_aimd_t b;
    bm_aimd_init(&b, 1, 0, 0);
    assert_false(bm_aimd_enabled(&b));
    for (int i = 0; i < 1000; i++)
        assert_int_equal(bm_aimd_take(&b, 0), 0);
    bm_aimd_throttled(&b, 2000, 0); /* the Retry-After still holds */
    assert_int_equal(bm_aimd_take(&b, 1000), 1000);
    assert_int_equal(b.throttled, 1);
}

static void test_hedge_budget(void **state)
{
    (void)state;
    bm_hedge_budget_t h;
    bm_hedge_budget_init(&h, 0.1, 10);
    unsigned hedges = 0;
    for (int i = 0; i < 1000; i++) {
        bm_hedge_budget_earn(&h);
        hedges += bm_hedge_budget_spend(&h); /* every read wants a hedge */
    }
    assert_true(hedges >= 100 && hedges <= 101); /* 10 % of reads, plus the first */
    assert_true(h.refused >= 899);
    bm_hedge_budget_init(&h, 0, 10);
    bm_hedge_budget_earn(&h);
    assert_false(bm_hedge_budget_spend(&h));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_breaker_opens_after_consecutive_failures),
        cmocka_unit_test(test_breaker_half_open_probes_then_closes),
        cmocka_unit_test(test_breaker_half_open_failure_reopens),
        cmocka_unit_test(test_aimd_bucket),
        cmocka_unit_test(test_aimd_disabled),
        cmocka_unit_test(test_hedge_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
