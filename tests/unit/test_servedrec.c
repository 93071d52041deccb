/* SPDX-License-Identifier: MIT */
/* Unit tests of servedrec: a served duty read to a line and back, nodes by id (the receiver's
 * own indices), and lines that are not records refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "app/servedrec.h"
#include "base/err.h"

static const char *const SENDER[] = {"alpha", "beta", "gamma"};
static const char *const RECEIVER[] = {"gamma", "alpha"}; /* another order; no beta */

static const char *id_of(void *ud, int i)
{
    (void)ud;
    return i >= 0 && i < 3 ? SENDER[i] : NULL;
}

static int index_of(void *ud, const char *id)
{
    (void)ud;
    for (int i = 0; i < 2; i++)
        if (strcmp(RECEIVER[i], id) == 0)
            return i;
    return -1;
}

static bm_served_t sample(void)
{
    bm_served_t s;
    memset(&s, 0, sizeof s);
    s.duty = BM_DUTY_READ_ATTESTATION_DATA;
    s.slot = 77;
    s.started_ms = 1700000000123;
    s.race_ms = 42;
    s.requests = 5;
    s.node = 2; /* gamma */
    s.served = (bm_served_answer_t){
        .status = 200, .has_root = true, .index = -1, .cls = BM_ANSWER_FRESH, .ms = 40};
    s.served.root[0] = 0xab;
    s.served.root[31] = 0x01;
    s.first_node = 0; /* alpha */
    s.first = (bm_served_answer_t){.status = 0, .index = -1, .cls = BM_ANSWER_HUNG, .ms = 900};
    s.n_nodes = 3;
    s.classes[0] = BM_ANSWER_HUNG;
    s.classes[1] = BM_ANSWER_STALE;
    s.classes[2] = BM_ANSWER_FRESH;
    return s;
}

static void test_round_trip_by_id(void **state)
{
    (void)state;
    bm_served_t s = sample(), r;
    bm_str_t line = BM_STR_INIT;
    assert_int_equal(bm_servedrec_format(&line, &s, id_of, NULL), 0);
    memset(&r, 0x5c, sizeof r);
    assert_int_equal(
        bm_servedrec_parse(bm_str_data(&line), bm_str_len(&line), &r, 2, index_of, NULL), 0);
    assert_int_equal(r.started_ms, s.started_ms);
    assert_int_equal(r.race_ms, 42);
    assert_int_equal(r.requests, 5);
    assert_int_equal(r.node, 0); /* gamma is the receiver's 0 */
    assert_int_equal(r.first_node, 1);
    assert_int_equal(r.served.status, 200);
    assert_true(r.served.has_root);
    assert_memory_equal(r.served.root, s.served.root, 32);
    assert_int_equal(r.served.index, -1);
    assert_int_equal(r.served.cls, BM_ANSWER_FRESH);
    assert_int_equal(r.first.status, 0);
    assert_false(r.first.has_root);
    assert_int_equal(r.first.cls, BM_ANSWER_HUNG);
    assert_int_equal(r.first.ms, 900);
    assert_int_equal(r.n_nodes, 2);
    assert_int_equal(r.classes[0], BM_ANSWER_FRESH); /* gamma */
    assert_int_equal(r.classes[1], BM_ANSWER_HUNG);  /* alpha; beta is not known here */
    bm_str_dispose(&line);
}

static void test_not_a_record(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "1 2 3 - 200,-,-1,1,4 - 200,-,-1,1,4",             /* a field missing */
        "1 2 3 - 200,-,-1,1,4 - 200,-,-1,1,4 - extra",     /* one too many */
        "x 2 3 - 200,-,-1,1,4 - 200,-,-1,1,4 -",           /* not a number */
        "1 2 3 - 200,-,-1,9,4 - 200,-,-1,1,4 -",           /* no such class */
        "1 2 3 - 2000,-,-1,1,4 - 200,-,-1,1,4 -",          /* no such status */
        "1 2 3 - 200,0x12,-1,1,4 - 200,-,-1,1,4 -",        /* not a root */
        "1 2 3 - 200,-,-1,1 - 200,-,-1,1,4 -",             /* an answer cut short */
        "1 2 3 - 200,-,-1,1,4 - 200,-,-1,1,4 alpha",       /* a class without = */
        "1 2 3 - 200,-,-1,1,4 - 200,-,-1,1,4 alpha=7",     /* no such class */
        "1 99999999999 3 - 200,-,-1,1,4 - 200,-,-1,1,4 -", /* race time too big */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bm_served_t r;
        assert_int_equal(bm_servedrec_parse(bad[i], strlen(bad[i]), &r, 2, index_of, NULL),
                         BM_EINVAL);
    }
    bm_served_t r;
    const char *ok = "1 2 3 nobody 200,-,-1,1,4 - 200,-,-1,1,4 -";
    assert_int_equal(bm_servedrec_parse(ok, strlen(ok), &r, 2, index_of, NULL), 0);
    assert_int_equal(r.node, -1); /* a node not configured here names none */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_by_id),
        cmocka_unit_test(test_not_a_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
