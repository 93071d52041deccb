/* SPDX-License-Identifier: MIT */
/*
 * test_sim_spec: every SPEC word of `--node I:SPEC` parses into its field (and only that
 * field), bad values and unknown words are errors that name the word, merging applies
 * only the fields given, and the control API's JSON form reads the same words.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "spec.h"

static bs_behav_t parse_ok(const char *spec)
{
    bs_behav_t b;
    char err[256];
    int rc = bs_behav_parse(spec, &b, err, sizeof err);
    if (rc)
        fail_msg("parse \"%s\": %s", spec, err);
    return b;
}

static void parse_bad(const char *spec, const char *needle)
{
    bs_behav_t b;
    char err[256];
    assert_int_equal(bs_behav_parse(spec, &b, err, sizeof err), BM_EINVAL);
    if (!strstr(err, needle))
        fail_msg("error for \"%s\" is \"%s\", should mention \"%s\"", spec, err, needle);
}

static void test_every_word(void **state)
{
    (void)state;
    bs_behav_t b = parse_ok("lag=800");
    assert_int_equal(b.lag_ms, 800);
    assert_int_equal(b.set, BS_B_LAG);
    b = parse_ok("jitter=50");
    assert_int_equal(b.jitter_ms, 50);
    assert_int_equal(b.set, BS_B_JITTER);
    b = parse_ok("down");
    assert_true(b.down);
    assert_int_equal(b.set, BS_B_DOWN);
    b = parse_ok("hang");
    assert_true(b.hang);
    b = parse_ok("error-rate=0.25");
    assert_true(b.error_rate == 0.25);
    b = parse_ok("slow=120");
    assert_int_equal(b.slow_ms, 120);
    b = parse_ok("stale");
    assert_true(b.stale);
    b = parse_ok("fork");
    assert_true(b.fork);
    b = parse_ok("clock-skew=-3000");
    assert_int_equal(b.clock_skew_ms, -3000);
    b = parse_ok("clock-skew=24000");
    assert_int_equal(b.clock_skew_ms, 24000);
    b = parse_ok("bad-source,bad-target");
    assert_true(b.bad_source && b.bad_target);
    assert_int_equal(b.set, BS_B_BAD_SOURCE | BS_B_BAD_TARGET);
    b = parse_ok("fail-items=0+2+63,dup-items=5");
    assert_true(b.fail_items == ((1ull << 0) | (1ull << 2) | (1ull << 63)));
    assert_true(b.dup_items == 1ull << 5);
    b = parse_ok("fail-items=");
    assert_true(b.fail_items == 0 && (b.set & BS_B_FAIL_ITEMS));
    bs_behav_t bad;
    char err[256];
    assert_int_equal(bs_behav_parse("fail-items=64", &bad, err, sizeof err), BM_EINVAL);
    assert_int_equal(bs_behav_parse("dup-items=1,2", &bad, err, sizeof err), BM_EINVAL);
    assert_int_equal(bs_behav_parse("dup-items=1-2", &bad, err, sizeof err), BM_EINVAL);
    b = parse_ok("syncing");
    assert_true(b.syncing);
    b = parse_ok("optimistic");
    assert_true(b.optimistic);
    b = parse_ok("sse-drop=1");
    assert_true(b.sse_drop == 1.0);
    const char *clients[] = {"lighthouse", "prysm",    "teku",  "nimbus",
                             "lodestar",   "grandine", "caplin"};
    for (int i = 0; i < 7; i++) {
        char spec[64];
        snprintf(spec, sizeof spec, "client=%s", clients[i]);
        b = parse_ok(spec);
        assert_int_equal(b.client, i);
        assert_int_equal(b.set, BS_B_CLIENT);
        assert_string_equal(bs_client_name(b.client), clients[i]);
        assert_non_null(strchr(bs_client_version(b.client), '/'));
    }
    b = parse_ok("sse-style=lighthouse");
    assert_int_equal(b.sse_style, BS_SSE_LIGHTHOUSE);
    b = parse_ok("sse-style=standard");
    assert_int_equal(b.sse_style, BS_SSE_STANDARD);
    assert_int_equal(b.set, BS_B_SSE_STYLE);
    b = parse_ok("sse-fragment");
    assert_true(b.sse_fragment);
    b = parse_ok("gzip");
    assert_true(b.gzip);
    b = parse_ok("no-ssz");
    assert_true(b.no_ssz);
    b = parse_ok("payload-delay=300");
    assert_int_equal(b.payload_delay_ms, 300);
    b = parse_ok("big-values");
    assert_true(b.big_values);
    b = parse_ok("sse-head-with-event");
    assert_true(b.sse_head_with_event);
    assert_int_equal(b.set, BS_B_SSE_HEAD_WITH_EVENT);
    b = parse_ok("sse-first-event-late=6000,sse_head_with_event=false");
    assert_int_equal(b.sse_first_event_late_ms, 6000);
    assert_false(b.sse_head_with_event);
    assert_int_equal(b.set, BS_B_SSE_FIRST_EVENT_LATE | BS_B_SSE_HEAD_WITH_EVENT);
    /* a full spec, with spaces and underscores */
    b = parse_ok("lag=800, jitter=50,client=teku,gzip , no_ssz,down=false");
    assert_int_equal(b.lag_ms, 800);
    assert_int_equal(b.jitter_ms, 50);
    assert_int_equal(b.client, BS_CLIENT_TEKU);
    assert_true(b.gzip && b.no_ssz && !b.down);
    assert_int_equal(b.set,
                     BS_B_LAG | BS_B_JITTER | BS_B_CLIENT | BS_B_GZIP | BS_B_NO_SSZ | BS_B_DOWN);
    b = parse_ok("");
    assert_int_equal(b.set, 0);
}

static void test_bad_words(void **state)
{
    (void)state;
    parse_bad("lagg=5", "lagg");
    parse_bad("lag", "lag");
    parse_bad("lag=-1", "lag");
    parse_bad("lag=12x", "lag");
    parse_bad("jitter=", "jitter");
    parse_bad("error-rate=1.5", "error-rate");
    parse_bad("error-rate=abc", "error-rate");
    parse_bad("sse-drop=-0.1", "sse-drop");
    parse_bad("client=geth", "client");
    parse_bad("sse-style=prysm", "sse-style");
    parse_bad("down=maybe", "down");
    parse_bad("slow=99999999999", "slow");
    parse_bad("lag=10,bogus", "bogus");
    parse_bad("sse-first-event-late=-5", "sse-first-event-late");
    parse_bad("sse-head-with-event=later", "sse-head-with-event");
}

static void test_merge(void **state)
{
    (void)state;
    bs_behav_t cur;
    bs_behav_default(&cur);
    bs_behav_t d = parse_ok("lag=800,gzip");
    bs_behav_merge(&cur, &d);
    d = parse_ok("down");
    bs_behav_merge(&cur, &d);
    assert_int_equal(cur.lag_ms, 800);
    assert_true(cur.gzip);
    assert_true(cur.down);
    d = parse_ok("down=false,lag=0");
    bs_behav_merge(&cur, &d);
    assert_false(cur.down);
    assert_int_equal(cur.lag_ms, 0);
    assert_true(cur.gzip);
}

static void test_json(void **state)
{
    (void)state;
    json_object *o = json_tokener_parse("{\"lag\":800,\"down\":true,\"client\":\"prysm\","
                                        "\"error_rate\":0.5,\"sse-style\":\"lighthouse\","
                                        "\"spec\":\"gzip,jitter=10\"}");
    assert_non_null(o);
    bs_behav_t b;
    bool reset;
    char err[256];
    assert_int_equal(bs_behav_from_json(o, &b, &reset, err, sizeof err), 0);
    json_object_put(o);
    assert_false(reset);
    assert_int_equal(b.lag_ms, 800);
    assert_true(b.down);
    assert_int_equal(b.client, BS_CLIENT_PRYSM);
    assert_true(b.error_rate == 0.5);
    assert_int_equal(b.sse_style, BS_SSE_LIGHTHOUSE);
    assert_true(b.gzip);
    assert_int_equal(b.jitter_ms, 10);
    o = json_tokener_parse("{\"reset\":true,\"nonsense\":1}");
    assert_int_equal(bs_behav_from_json(o, &b, &reset, err, sizeof err), BM_EINVAL);
    assert_non_null(strstr(err, "nonsense"));
    json_object_put(o);
    o = json_tokener_parse("{\"lag\":[1]}");
    assert_int_equal(bs_behav_from_json(o, &b, &reset, err, sizeof err), BM_EINVAL);
    json_object_put(o);
    /* the JSON rendering names every field and parses back */
    bs_behav_t all = parse_ok("lag=5,jitter=6,slow=7,clock-skew=-8,error-rate=0.5,sse-drop=0.25,"
                              "client=nimbus,sse-style=lighthouse,gzip,no-ssz,hang,stale,fork,"
                              "syncing,optimistic,sse-fragment,payload-delay=9,big-values,down,"
                              "bad-source,bad-target,fail-items=0+2+63,dup-items=1,"
                              "sse-head-with-event,sse-first-event-late=11");
    bm_str_t s = BM_STR_INIT;
    bs_behav_json(&s, &all);
    o = json_tokener_parse(bm_str_data(&s));
    assert_non_null(o);
    bs_behav_t back;
    assert_int_equal(bs_behav_from_json(o, &back, &reset, err, sizeof err), 0);
    json_object_put(o);
    bm_str_dispose(&s);
    assert_int_equal(back.set, BS_B_ALL);
    bs_behav_t cmp = all;
    cmp.set = back.set;
    assert_memory_equal(&cmp, &back, sizeof back);
}

static void test_help_names_every_word(void **state)
{
    (void)state;
    const char *words[] = {"lag=",
                           "jitter=",
                           "down",
                           "hang",
                           "error-rate",
                           "slow=",
                           "stale",
                           "fork",
                           "clock-skew",
                           "syncing",
                           "optimistic",
                           "sse-drop",
                           "client=",
                           "sse-style",
                           "sse-fragment",
                           "gzip",
                           "no-ssz",
                           "payload-delay",
                           "big-values",
                           "bad-source",
                           "bad-target",
                           "fail-items=",
                           "dup-items=",
                           "sse-head-with-event",
                           "sse-first-event-late="};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strstr(bs_behav_help, words[i]))
            fail_msg("help does not mention %s", words[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_word),
        cmocka_unit_test(test_bad_words),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_help_names_every_word),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
