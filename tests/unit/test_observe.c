/* SPDX-License-Identifier: MIT */
/*
 * test_observe: observe's glue on a synthetic chain (fake_chain.h: a head tracker fed by
 * hand): served records go to the journal, a tick two slots after a slot settles it against
 * the tracker's chain (an empty slot too), a finalized checkpoint settles finally only when
 * its root is the cluster chain's and not past the cluster head, head moves are counted by
 * cause, arrivals are recorded per node; and the exposition has the journal's counts.
 * Ended requests are counted by class, and several networks' expositions merge.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "base/buf.h"
#include "cluster/pool.h"
#include "fake_chain.h"
#include "observe/metrics.h"
#include "observe/observe.h"

#define SLOT_MS 12000u
#define SPE 8u
#define GENESIS 1000000000ull

typedef struct tfx {
    fake_chain_t c;
    bm_pool_t *pool;
    bm_observe_t *o;
} tfx_t;

static uint64_t at(uint64_t slot, uint64_t ms)
{
    return GENESIS + slot * SLOT_MS + ms;
}

/* Blocks 1..10 at their slots, but slot 9 is empty (10's parent is 8); three nodes follow
 * them up to 8 (the clock in slot 8). */
static void tfx_init(tfx_t *t)
{
    memset(t, 0, sizeof *t);
    bm_chain_info_t info;
    fake_chain_info(&info, GENESIS, SLOT_MS, SPE, 0, BM_FAR_FUTURE_EPOCH);
    fake_chain_init(&t->c, 3, &info, at(1, 0));
    for (unsigned id = 1; id <= 8; id++)
        fake_block(&t->c, id, id, id - 1);
    fake_block(&t->c, 10, 10, 8);
    t->pool = bm_pool_new();
    const char *ids[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++)
        assert_non_null(bm_pool_add(t->pool, ids[i], "http://127.0.0.1:1", NULL));
    bm_observe_sources_t src = {.pool = t->pool, .head = t->c.t, .chain = &t->c.info};
    t->o = bm_observe_new(&src, NULL);
    assert_non_null(t->o);
    for (unsigned id = 1; id <= 8; id++)
        for (size_t n = 0; n < 3; n++)
            fake_head(&t->c, n, id, at(id, 100 + 200 * n), BM_PAYLOAD_UNKNOWN);
}

static void tfx_free(tfx_t *t)
{
    bm_observe_free(t->o);
    bm_pool_free(t->pool);
    fake_chain_dispose(&t->c);
}

/* A record of attestation data at `slot`: served `served`, the first node alone `first`. */
static bm_served_t rec(uint64_t slot, unsigned served, unsigned first)
{
    bm_served_t r = {.duty = BM_DUTY_READ_ATTESTATION_DATA,
                     .slot = slot,
                     .requests = 1,
                     .node = 1,
                     .n_nodes = 3,
                     .first_node = 0,
                     .race_ms = 3};
    r.served =
        (bm_served_answer_t){.status = 200, .has_root = true, .index = -1, .cls = BM_ANSWER_FRESH};
    fake_root(served, r.served.root);
    r.first =
        (bm_served_answer_t){.status = 200, .has_root = true, .index = -1, .cls = BM_ANSWER_STALE};
    fake_root(first, r.first.root);
    return r;
}

static void tick(tfx_t *t, uint64_t now)
{
    t->c.now = now;
    bm_head_tick(t->c.t, now);
}

static void test_settles_two_slots_later(void **state)
{
    (void)state;
    tfx_t t;
    tfx_init(&t);
    tick(&t, at(8, 500)); /* the journal starts here */
    bm_served_t r8 = rec(8, 8, 7), r9 = rec(9, 8, 8);
    bm_observe_served(&r8, t.o);
    bm_observe_served(&r9, t.o);
    const bm_observe_figures_t *f = bm_observe_figures(t.o);
    assert_int_equal(f->races[BM_DUTY_READ_ATTESTATION_DATA], 2);
    assert_int_equal(f->served[BM_DUTY_READ_ATTESTATION_DATA][BM_ANSWER_FRESH], 2);
    assert_int_equal(f->race[BM_DUTY_READ_ATTESTATION_DATA].count, 2);
    bm_journal_slot_t js;
    tick(&t, at(10, 0) - 1);
    assert_true(bm_journal_slot(f->journal, 8, &js));
    assert_int_equal(js.stage, BM_STAGE_OPEN); /* only at slot 10 */
    /* slot 9 stays empty; 10 comes on 8 */
    for (size_t n = 0; n < 3; n++)
        fake_head(&t.c, n, 10, at(10, 50), BM_PAYLOAD_UNKNOWN);
    tick(&t, at(10, 60));
    assert_true(bm_journal_slot(f->journal, 8, &js));
    assert_int_equal(js.stage, BM_STAGE_PROVISIONAL);
    tick(&t, at(11, 0));
    assert_true(bm_journal_slot(f->journal, 9, &js));
    assert_int_equal(js.stage, BM_STAGE_PROVISIONAL);
    uint8_t r8root[32];
    fake_root(8, r8root);
    assert_memory_equal(js.canon.root, r8root, 32); /* empty: 8's root */
    assert_memory_equal(js.canon.prev, r8root, 32);
    bm_journal_entry_t e;
    assert_true(bm_journal_entry(f->journal, 8, 0, &e));
    assert_int_equal(e.verdict, BM_VERDICT_CORRECT);
    assert_int_equal(e.first_verdict, BM_VERDICT_WRONG);
    assert_true(bm_journal_entry(f->journal, 9, 0, &e));
    assert_int_equal(e.verdict, BM_VERDICT_CORRECT);
    assert_int_equal(e.first_verdict, BM_VERDICT_CORRECT);
    assert_int_equal(bm_journal_stats(f->journal)->provisional.saved, 1);

    /* moves: the first head by quorum, then extensions; arrivals per node */
    assert_true(f->moves_extension >= 8);
    assert_int_equal(f->moves_reorg, 0);
    const bm_hist_t *h = bm_arrivals_hist(f->arrivals, 2);
    assert_int_equal(h->count, 9);
    assert_int_equal(bm_hist_cumulative(h, 4), 9); /* 500 ms and less: <= 0.8 s */

    /* the exposition shows the provisional count, no final one yet */
    bm_str_t out = BM_STR_INIT;
    bm_metrics_write(t.o, &out);
    const char *m = bm_str_data(&out);
    assert_non_null(strstr(m, "beaconmux_votes_saved_provisional_total 1\n"));
    assert_non_null(strstr(m, "beaconmux_votes_saved_total 0\n"));
    assert_non_null(strstr(m, "beaconmux_duty_head_provisional_total{duty=\"attestation_data\","
                              "verdict=\"correct\"} 2\n"));
    assert_non_null(strstr(m, "beaconmux_upstream_head_slot{upstream=\"c\"} 10\n"));
    bm_str_dispose(&out);
    tfx_free(&t);
}

static void test_finality(void **state)
{
    (void)state;
    tfx_t t;
    tfx_init(&t);
    tick(&t, at(8, 500));
    bm_served_t r8 = rec(8, 8, 7);
    bm_observe_served(&r8, t.o);
    for (size_t n = 0; n < 3; n++)
        fake_head(&t.c, n, 10, at(10, 50), BM_PAYLOAD_UNKNOWN);
    tick(&t, at(11, 0));
    const bm_observe_figures_t *f = bm_observe_figures(t.o);
    uint8_t root[32];
    fake_root(7, root);
    bm_observe_finalized(t.o, 0, 1, root); /* epoch 1 starts at 8, whose block is not 7 */
    assert_false(f->finalized_known);
    fake_root(10, root);
    bm_observe_finalized(t.o, 0, 2, root); /* epoch 2 starts at 16: past the cluster head */
    assert_false(f->finalized_known);
    fake_root(8, root);
    bm_observe_finalized(t.o, 1, 1, root);
    assert_true(f->finalized_known);
    assert_int_equal(f->finalized_epoch, 1);
    bm_journal_slot_t js;
    assert_true(bm_journal_slot(f->journal, 8, &js));
    assert_int_equal(js.stage, BM_STAGE_FINAL);
    assert_true(bm_journal_slot(f->journal, 9, &js));
    assert_int_equal(js.stage, BM_STAGE_PROVISIONAL);
    const bm_journal_stats_t *st = bm_journal_stats(f->journal);
    assert_int_equal(st->final.saved, 1);
    assert_int_equal(st->final_slot, 8);
    fake_root(7, root);
    bm_observe_finalized(t.o, 2, 1, root); /* an older or equal epoch changes nothing */
    assert_int_equal(f->finalized_epoch, 1);
    tfx_free(&t);
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Ended requests are counted by route class and status class (no class: "other"; no
 * status: "none"; past the table's room: "other"); two networks' expositions merge with
 * the process's families once and every other sample under its network. */
static void test_requests_and_networks(void **state)
{
    (void)state;
    tfx_t t;
    tfx_init(&t);
    bm_req_summary_t s = {.method = "GET", .target = "/x", .peer = "127.0.0.1", .status = 200};
    s.route_class = "duty";
    bm_observe_request_ended(&s, t.o);
    bm_observe_request_ended(&s, t.o);
    s.route_class = "read";
    s.status = 503;
    bm_observe_request_ended(&s, t.o);
    s.route_class = NULL;
    s.status = 0;
    bm_observe_request_ended(&s, t.o);
    const bm_observe_figures_t *f = bm_observe_figures(t.o);
    assert_int_equal(f->n_classes, 3);
    assert_string_equal(f->classes[0], "duty");
    assert_int_equal(f->requests[0][BM_CODE_2XX], 2);
    assert_int_equal(f->requests[1][BM_CODE_5XX], 1);
    assert_string_equal(f->classes[2], "other");
    assert_int_equal(f->requests[2][BM_CODE_NONE], 1);
    static const char *const many[] = {"c1", "c2",  "c3",  "c4",  "c5",  "c6",  "c7", "c8",
                                       "c9", "c10", "c11", "c12", "c13", "c14", "c15"};
    s.status = 200;
    for (size_t i = 0; i < sizeof many / sizeof many[0]; i++) {
        s.route_class = many[i];
        bm_observe_request_ended(&s, t.o);
    }
    assert_int_equal(f->n_classes, BM_OBSERVE_MAX_CLASSES - 1); /* "other" is among them */
    assert_int_equal(f->requests[2][BM_CODE_2XX], 3);           /* c13..c15 share "other" */

    bm_pool_t *pool2 = bm_pool_new();
    assert_non_null(bm_pool_add(pool2, "x", "http://127.0.0.1:2", NULL));
    bm_observe_sources_t src2 = {.pool = pool2};
    bm_observe_t *o2 = bm_observe_new(&src2, NULL);
    assert_non_null(o2);
    const bm_observe_t *obs[] = {t.o, o2};
    const char *ids[] = {"alpha", "beta"};
    bm_str_t out = BM_STR_INIT;
    assert_int_equal(bm_metrics_write_merged(obs, ids, 2, &out), 0);
    const char *m = bm_str_data(&out);
    assert_non_null(strstr(m, "beaconmux_upstream_state{network=\"alpha\",upstream=\"a\","));
    assert_non_null(strstr(m, "beaconmux_upstream_state{network=\"beta\",upstream=\"x\","));
    assert_null(strstr(m, "network=\"beta\",upstream=\"a\""));
    assert_int_equal(count_of(m, "# TYPE beaconmux_upstream_state "), 1);
    assert_int_equal(count_of(m, "\nprocess_cpu_seconds_total "), 1);
    assert_null(strstr(m, "process_cpu_seconds_total{"));
    assert_non_null(strstr(m, "beaconmux_server_requests_total{network=\"alpha\",class=\"duty\","
                              "code=\"2xx\"} 2\n"));
    bm_str_dispose(&out);
    bm_observe_free(o2);
    bm_pool_free(pool2);
    tfx_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settles_two_slots_later),
        cmocka_unit_test(test_finality),
        cmocka_unit_test(test_requests_and_networks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
