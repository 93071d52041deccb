/* SPDX-License-Identifier: MIT */
/* Unit tests of expo (the Prometheus text exposition writer) and hist (fixed-bound
 * histograms): escaping, the bounds of label values, numbers, histogram buckets. The output
 * is parsed back line by line, so a test says what a scraper would read. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"
#include "base/hist.h"
#include "observe/expo.h"

/* The line of `text` that starts with `prefix` (into out), or false. */
static bool line_with(const char *text, const char *prefix, char *out, size_t cap)
{
    size_t pl = strlen(prefix);
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len >= pl && memcmp(p, prefix, pl) == 0) {
            if (len >= cap)
                len = cap - 1;
            memcpy(out, p, len);
            out[len] = '\0';
            return true;
        }
        p += len + (nl ? 1 : 0);
    }
    return false;
}

static void test_family_and_samples(void **state)
{
    (void)state;
    bm_str_t o = BM_STR_INIT;
    bm_expo_family(&o, "beaconmux_x_total", BM_EXPO_COUNTER, "Things.\nWith a \\ in it.");
    bm_label_t l[] = {{"upstream", "n1"}, {"kind", "http_5xx"}};
    bm_expo_u64(&o, "beaconmux_x_total", l, 2, 18446744073709551615ull);
    bm_expo_u64(&o, "beaconmux_x_total", NULL, 0, 0);
    assert_string_equal(bm_str_data(&o), "# HELP beaconmux_x_total Things.\\nWith a \\\\ in it.\n"
                                         "# TYPE beaconmux_x_total counter\n"
                                         "beaconmux_x_total{upstream=\"n1\",kind=\"http_5xx\"} "
                                         "18446744073709551615\n"
                                         "beaconmux_x_total 0\n");
    bm_str_dispose(&o);
}

static void test_label_values_are_escaped(void **state)
{
    (void)state;
    bm_str_t o = BM_STR_INIT;
    bm_label_t l[] = {{"version", "a\"b\\c\nd"}};
    bm_expo_u64(&o, "m", l, 1, 1);
    assert_string_equal(bm_str_data(&o), "m{version=\"a\\\"b\\\\c\\nd\"} 1\n");
    bm_str_dispose(&o);
}

/* Whatever a node says its version is, the series stays one valid, bounded line. */
static void test_label_values_are_bounded_and_utf8(void **state)
{
    (void)state;
    char longv[1000];
    memset(longv, 'x', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    bm_str_t o = BM_STR_INIT;
    bm_label_t l[] = {{"v", longv}};
    bm_expo_u64(&o, "m", l, 1, 1);
    const char *s = bm_str_data(&o);
    assert_int_equal(strlen(s), strlen("m{v=\"\"} 1\n") + BM_EXPO_LABEL_MAX);
    bm_str_clear(&o);

    /* invalid bytes become '?', a multibyte character is never cut in half */
    char bad[] = {'a',        (char)0xff, (char)0xc3, (char)0xa9, (char)0xed,
                  (char)0xa0, (char)0x80, 'z',        0};
    l[0].value = bad;
    bm_expo_u64(&o, "m", l, 1, 1);
    assert_string_equal(bm_str_data(&o), "m{v=\"a?\xc3\xa9???z\"} 1\n");
    bm_str_clear(&o);
    char edge[BM_EXPO_LABEL_MAX + 2];
    memset(edge, 'y', BM_EXPO_LABEL_MAX - 1);
    edge[BM_EXPO_LABEL_MAX - 1] = (char)0xc3; /* a 2-byte character across the limit */
    edge[BM_EXPO_LABEL_MAX] = (char)0xa9;
    edge[BM_EXPO_LABEL_MAX + 1] = '\0';
    l[0].value = edge;
    bm_expo_u64(&o, "m", l, 1, 1);
    s = bm_str_data(&o);
    assert_int_equal(strlen(s), strlen("m{v=\"\"} 1\n") + BM_EXPO_LABEL_MAX - 1);
    assert_null(strchr(s, (char)0xc3));
    bm_str_dispose(&o);
}

static void test_numbers(void **state)
{
    (void)state;
    const struct {
        double v;
        const char *text;
    } cases[] = {{0, "0"},           {1, "1"},
                 {-3, "-3"},         {0.25, "0.25"},
                 {0.1, "0.1"},       {1e-5, "1e-05"},
                 {2.5, "2.5"},       {1.0 / 3, "0.3333333333333333"},
                 {INFINITY, "+Inf"}, {-INFINITY, "-Inf"},
                 {NAN, "NaN"},       {1e300, "1e+300"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bm_str_t o = BM_STR_INIT;
        bm_expo_number(&o, cases[i].v);
        if (strcmp(bm_str_data(&o), cases[i].text) != 0)
            fail_msg("%g: %s, expected %s", cases[i].v, bm_str_data(&o), cases[i].text);
        if (!isnan(cases[i].v) && !isinf(cases[i].v))
            assert_true(strtod(bm_str_data(&o), NULL) == cases[i].v); /* reads back the same */
        bm_str_dispose(&o);
    }
}

static const double bounds[] = {0.001, 0.01, 0.1, 1};

static void test_hist_buckets(void **state)
{
    (void)state;
    bm_hist_t h;
    bm_hist_init(&h, bounds, 4);
    bm_hist_add(&h, 0.001); /* on a bound: in that bucket (le) */
    bm_hist_add(&h, 0.0005);
    bm_hist_add(&h, 0.05);
    bm_hist_add(&h, 7);
    bm_hist_add(&h, NAN); /* ignored */
    assert_int_equal(h.count, 4);
    assert_int_equal(bm_hist_cumulative(&h, 0), 2);
    assert_int_equal(bm_hist_cumulative(&h, 1), 2);
    assert_int_equal(bm_hist_cumulative(&h, 2), 3);
    assert_int_equal(bm_hist_cumulative(&h, 3), 3);
    assert_int_equal(bm_hist_cumulative(&h, 4), 4);

    bm_str_t o = BM_STR_INIT;
    bm_label_t l[] = {{"duty", "attestation_data"}};
    bm_expo_family(&o, "beaconmux_race_seconds", BM_EXPO_HISTOGRAM, "Race time.");
    bm_expo_hist(&o, "beaconmux_race_seconds", l, 1, &h);
    const char *s = bm_str_data(&o);
    char line[256];
    assert_true(line_with(s,
                          "beaconmux_race_seconds_bucket{duty=\"attestation_data\",le=\"0.001\"}",
                          line, sizeof line));
    assert_string_equal(strrchr(line, ' '), " 2");
    assert_true(line_with(s, "beaconmux_race_seconds_bucket{duty=\"attestation_data\",le=\"0.1\"}",
                          line, sizeof line));
    assert_string_equal(strrchr(line, ' '), " 3");
    assert_true(line_with(s, "beaconmux_race_seconds_bucket{duty=\"attestation_data\",le=\"+Inf\"}",
                          line, sizeof line));
    assert_string_equal(strrchr(line, ' '), " 4");
    assert_true(
        line_with(s, "beaconmux_race_seconds_count{duty=\"attestation_data\"}", line, sizeof line));
    assert_string_equal(strrchr(line, ' '), " 4");
    assert_true(
        line_with(s, "beaconmux_race_seconds_sum{duty=\"attestation_data\"}", line, sizeof line));
    assert_true(fabs(strtod(strrchr(line, ' ') + 1, NULL) - 7.0515) < 1e-9);
    /* buckets in ascending order, cumulative, and nothing else in the family */
    double prev_le = -1;
    uint64_t prev = 0;
    size_t buckets = 0;
    for (const char *p = s; (p = strstr(p, "_bucket{")) != NULL; p++) {
        const char *le = strstr(p, "le=\"") + 4;
        double v = strncmp(le, "+Inf", 4) == 0 ? INFINITY : strtod(le, NULL);
        uint64_t c = strtoull(strchr(p, '}') + 2, NULL, 10);
        assert_true(v > prev_le);
        assert_true(c >= prev);
        prev_le = v;
        prev = c;
        buckets++;
    }
    assert_int_equal(buckets, 5);
    bm_str_dispose(&o);
}

static void test_hist_without_labels(void **state)
{
    (void)state;
    bm_hist_t h;
    bm_hist_init(&h, bounds, 4);
    bm_str_t o = BM_STR_INIT;
    bm_expo_hist(&o, "h", NULL, 0, &h);
    assert_non_null(strstr(bm_str_data(&o), "h_bucket{le=\"0.01\"} 0\n"));
    assert_non_null(strstr(bm_str_data(&o), "h_sum 0\nh_count 0\n"));
    bm_str_dispose(&o);
}

static void test_names(void **state)
{
    (void)state;
    assert_true(bm_expo_metric_name_ok("beaconmux_upstream_up"));
    assert_true(bm_expo_metric_name_ok("a:b_c"));
    assert_false(bm_expo_metric_name_ok("9a"));
    assert_false(bm_expo_metric_name_ok("a-b"));
    assert_false(bm_expo_metric_name_ok(""));
    assert_true(bm_expo_label_name_ok("upstream"));
    assert_false(bm_expo_label_name_ok("__name"));
    assert_false(bm_expo_label_name_ok("a:b"));
}

/* Several networks' texts become one: each family once, its samples grouped, each sample
 * labelled with its network first. */
static void test_merge(void **state)
{
    (void)state;
    bm_hist_t h;
    bm_hist_init(&h, bounds, 2);
    bm_hist_add(&h, 0.005);
    bm_str_t a = BM_STR_INIT, b = BM_STR_INIT, out = BM_STR_INIT;
    bm_label_t up[] = {{"upstream", "n1"}};
    bm_expo_family(&a, "x_total", BM_EXPO_COUNTER, "X.");
    bm_expo_u64(&a, "x_total", NULL, 0, 1);
    bm_expo_family(&a, "h_seconds", BM_EXPO_HISTOGRAM, "H.");
    bm_expo_hist(&a, "h_seconds", up, 1, &h);
    bm_expo_family(&b, "only_b", BM_EXPO_GAUGE, "B.");
    bm_expo_u64(&b, "only_b", up, 1, 7);
    bm_expo_family(&b, "x_total", BM_EXPO_COUNTER, "X.");
    bm_expo_u64(&b, "x_total", NULL, 0, 2);
    const char *texts[] = {bm_str_data(&a), bm_str_data(&b)};
    const char *nets[] = {"mainnet", "hoo\"di"};
    assert_int_equal(bm_expo_merge(texts, "network", nets, 2, &out), 0);
    assert_string_equal(bm_str_data(&out),
                        "# HELP x_total X.\n# TYPE x_total counter\n"
                        "x_total{network=\"mainnet\"} 1\n"
                        "x_total{network=\"hoo\\\"di\"} 2\n"
                        "# HELP h_seconds H.\n# TYPE h_seconds histogram\n"
                        "h_seconds_bucket{network=\"mainnet\",upstream=\"n1\",le=\"0.001\"} 0\n"
                        "h_seconds_bucket{network=\"mainnet\",upstream=\"n1\",le=\"0.01\"} 1\n"
                        "h_seconds_bucket{network=\"mainnet\",upstream=\"n1\",le=\"+Inf\"} 1\n"
                        "h_seconds_sum{network=\"mainnet\",upstream=\"n1\"} 0.005\n"
                        "h_seconds_count{network=\"mainnet\",upstream=\"n1\"} 1\n"
                        "# HELP only_b B.\n# TYPE only_b gauge\n"
                        "only_b{network=\"hoo\\\"di\",upstream=\"n1\"} 7\n");
    bm_str_clear(&out);
    assert_int_equal(bm_expo_merge(texts, "network", nets, 0, &out), 0);
    assert_string_equal(bm_str_data(&out), "");
    bm_str_dispose(&a);
    bm_str_dispose(&b);
    bm_str_dispose(&out);
}

/* A family without samples in one text (no requests yet on that network) keeps its own
 * header only: the next family's header and samples stay the next family's. A text without
 * a value (the process's families) is copied as it is. */
static void test_merge_empty_family_and_unlabelled(void **state)
{
    (void)state;
    bm_str_t p = BM_STR_INIT, a = BM_STR_INIT, b = BM_STR_INIT, out = BM_STR_INIT;
    bm_expo_family(&p, "proc_seconds", BM_EXPO_COUNTER, "P.");
    bm_expo_u64(&p, "proc_seconds", NULL, 0, 3);
    bm_expo_family(&a, "req_total", BM_EXPO_COUNTER, "R.");
    bm_expo_u64(&a, "req_total", NULL, 0, 4);
    bm_expo_family(&a, "read_total", BM_EXPO_COUNTER, "D.");
    bm_expo_u64(&a, "read_total", NULL, 0, 5);
    bm_expo_family(&b, "req_total", BM_EXPO_COUNTER, "R."); /* no samples */
    bm_expo_family(&b, "read_total", BM_EXPO_COUNTER, "D.");
    bm_expo_u64(&b, "read_total", NULL, 0, 6);
    const char *texts[] = {bm_str_data(&p), bm_str_data(&a), bm_str_data(&b)};
    const char *nets[] = {NULL, "a", "b"};
    assert_int_equal(bm_expo_merge(texts, "network", nets, 3, &out), 0);
    assert_string_equal(bm_str_data(&out), "# HELP proc_seconds P.\n# TYPE proc_seconds counter\n"
                                           "proc_seconds 3\n"
                                           "# HELP req_total R.\n# TYPE req_total counter\n"
                                           "req_total{network=\"a\"} 4\n"
                                           "# HELP read_total D.\n# TYPE read_total counter\n"
                                           "read_total{network=\"a\"} 5\n"
                                           "read_total{network=\"b\"} 6\n");
    bm_str_dispose(&p);
    bm_str_dispose(&a);
    bm_str_dispose(&b);
    bm_str_dispose(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_and_samples),
        cmocka_unit_test(test_label_values_are_escaped),
        cmocka_unit_test(test_label_values_are_bounded_and_utf8),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_hist_buckets),
        cmocka_unit_test(test_hist_without_labels),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_merge_empty_family_and_unlabelled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
