/* SPDX-License-Identifier: MIT */
/*
 * test_arrivals: the heatmap's cells and the arrival histograms, from node views fed by
 * hand and a canonical chain written out slot by slot (as get_block_root_at_slot gives it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <json-c/json.h>
#include <string.h>

#include "observe/arrivals.h"

static const bm_slot_clock_t CLOCK = {
    .genesis_ms = 1000000, .slot_ms = 12000, .slots_per_epoch = 32};

/* The canonical chain: roots by slot (0: past the cluster head). Slot 3 is empty (its
 * root is slot 2's). */
static const unsigned chain[] = {1, 2, 3, 3, 5, 6, 0, 0};

static int canon(uint64_t slot, uint8_t root[32], void *ud)
{
    (void)ud;
    if (slot >= sizeof chain / sizeof chain[0] || !chain[slot])
        return -1;
    memset(root, (int)chain[slot], 32);
    return 0;
}

/* Node `node` announces root `id` at `slot`, arriving `delay_ms` into the slot. */
static bool announce(bm_arrivals_t *a, size_t node, uint64_t slot, unsigned id, int delay_ms,
                     bool optimistic)
{
    bm_head_node_view_t v = {.has_head = true, .slot = slot, .optimistic = optimistic};
    memset(v.root, (int)id, 32);
    v.received_ms = (uint64_t)((int64_t)bm_slot_start_ms(&CLOCK, slot) + delay_ms);
    return bm_arrivals_on_view(a, node, &v, &CLOCK);
}

static bm_arrival_mark_t mark(bm_arrivals_t *a, size_t node, uint64_t slot, int32_t *d, bool *o)
{
    return bm_arrivals_mark(a, node, slot, canon, NULL, d, o);
}

static void test_marks(void **state)
{
    (void)state;
    bm_arrivals_t *a = bm_arrivals_new(2);
    assert_non_null(a);
    assert_true(announce(a, 0, 1, 2, 300, false));
    assert_false(announce(a, 0, 1, 2, 900, false)); /* the same head again: no arrival */
    assert_true(announce(a, 0, 2, 3, 450, true));
    assert_true(announce(a, 0, 4, 5, -200, false)); /* early: the node's clock runs ahead */
    assert_true(announce(a, 1, 1, 2, 5000, false));
    assert_true(announce(a, 1, 2, 9, 700, false)); /* another block at 2: a fork */
    int32_t d;
    bool o;
    assert_int_equal(mark(a, 0, 1, &d, &o), BM_ARRIVAL_OK);
    assert_int_equal(d, 300);
    assert_int_equal(mark(a, 0, 2, &d, &o), BM_ARRIVAL_OK);
    assert_true(o);
    assert_int_equal(mark(a, 0, 3, &d, &o), BM_ARRIVAL_EMPTY);
    assert_int_equal(d, INT32_MIN);
    assert_int_equal(mark(a, 0, 4, &d, &o), BM_ARRIVAL_OK);
    assert_int_equal(d, -200);
    assert_int_equal(mark(a, 0, 5, &d, &o), BM_ARRIVAL_MISSED);
    assert_int_equal(mark(a, 0, 6, &d, &o), BM_ARRIVAL_PENDING);
    assert_int_equal(mark(a, 1, 2, &d, &o), BM_ARRIVAL_OFF_CHAIN);
    assert_int_equal(mark(a, 1, 0, &d, &o), BM_ARRIVAL_UNKNOWN); /* before it was watched */

    const bm_hist_t *h = bm_arrivals_hist(a, 0);
    assert_int_equal(h->count, 3);
    assert_int_equal(bm_hist_cumulative(h, 0), 1); /* -0.2 s in the first bucket */
    assert_int_equal(bm_hist_cumulative(h, 3), 2); /* <= 0.4 s */
    assert_int_equal(bm_hist_cumulative(h, 4), 3); /* <= 0.8 s */
    assert_int_equal(bm_arrivals_hist(a, 1)->count, 2);
    assert_null(bm_arrivals_hist(a, 2));

    /* 64 slots later the cell of slot 1 is another slot's */
    assert_true(announce(a, 0, 1 + BM_ARRIVALS_SLOTS, 7, 10, false));
    assert_int_equal(mark(a, 0, 1, &d, &o), BM_ARRIVAL_MISSED); /* slot 1 has a block */
    assert_int_equal(d, INT32_MIN);
    bm_arrivals_free(a);
}

/* A head learnt by a poll (a stream that sends nothing before its first event, or none at
 * all) says which block the node had, not when: the cell is judged, with no time, and no
 * histogram sample; the node's next head from its stream has its time again. */
static void test_polled_head_has_no_time(void **state)
{
    (void)state;
    bm_arrivals_t *a = bm_arrivals_new(1);
    bm_head_node_view_t v = {.has_head = true, .slot = 1, .polled = true};
    memset(v.root, 2, 32);
    v.received_ms = bm_slot_start_ms(&CLOCK, 1) + 900; /* when beaconmux asked */
    assert_true(bm_arrivals_on_view(a, 0, &v, &CLOCK));
    assert_true(announce(a, 0, 2, 3, 600, false));
    int32_t d;
    bool o;
    assert_int_equal(mark(a, 0, 1, &d, &o), BM_ARRIVAL_OK);
    assert_int_equal(d, INT32_MIN);
    assert_int_equal(mark(a, 0, 2, &d, &o), BM_ARRIVAL_OK);
    assert_int_equal(d, 600);
    assert_int_equal(bm_arrivals_hist(a, 0)->count, 1);
    assert_int_equal(mark(a, 0, 0, &d, &o), BM_ARRIVAL_UNKNOWN); /* watched from the poll on */
    bm_arrivals_free(a);
}

/* Before a node's first arrival nothing is known of it; a node never heard is missing
 * from the first slot any node announced. */
static void test_watched_since(void **state)
{
    (void)state;
    bm_arrivals_t *a = bm_arrivals_new(2);
    int32_t d;
    bool o;
    assert_int_equal(mark(a, 0, 4, &d, &o), BM_ARRIVAL_UNKNOWN); /* nothing heard at all */
    assert_true(announce(a, 0, 2, 3, 100, false));
    assert_int_equal(mark(a, 0, 1, &d, &o), BM_ARRIVAL_UNKNOWN);
    assert_int_equal(mark(a, 0, 5, &d, &o), BM_ARRIVAL_MISSED);
    assert_int_equal(mark(a, 1, 1, &d, &o), BM_ARRIVAL_UNKNOWN);
    assert_int_equal(mark(a, 1, 2, &d, &o), BM_ARRIVAL_MISSED); /* silent since slot 2 */
    bm_arrivals_free(a);
}

static void test_json(void **state)
{
    (void)state;
    bm_arrivals_t *a = bm_arrivals_new(1);
    announce(a, 0, 2, 3, 90, false);
    announce(a, 0, 5, 6, 120, false);
    bm_str_t o = BM_STR_INIT;
    const char *ids[] = {"lh"};
    bm_arrivals_json(a, 6, canon, NULL, ids, 1, &o);
    struct json_object *doc = json_tokener_parse(bm_str_data(&o));
    assert_non_null(doc);
    struct json_object *v, *nodes, *n0, *cells, *c;
    assert_true(json_object_object_get_ex(doc, "from_slot", &v));
    assert_string_equal(json_object_get_string(v), "0");
    assert_true(json_object_object_get_ex(doc, "own_block", &v));
    assert_int_equal(json_object_array_length(v), 7);
    assert_false(json_object_get_boolean(json_object_array_get_idx(v, 3)));
    assert_true(json_object_get_boolean(json_object_array_get_idx(v, 5)));
    assert_true(json_object_object_get_ex(doc, "nodes", &nodes));
    n0 = json_object_array_get_idx(nodes, 0);
    assert_true(json_object_object_get_ex(n0, "cells", &cells));
    assert_int_equal(json_object_array_length(cells), 7);
    c = json_object_array_get_idx(cells, 5);
    assert_true(json_object_object_get_ex(c, "d", &v));
    assert_int_equal(json_object_get_int(v), 120);
    assert_true(json_object_object_get_ex(c, "m", &v));
    assert_string_equal(json_object_get_string(v), "ok");
    c = json_object_array_get_idx(cells, 4);
    assert_true(json_object_object_get_ex(c, "m", &v));
    assert_string_equal(json_object_get_string(v), "missed");
    json_object_put(doc);
    bm_str_dispose(&o);
    bm_arrivals_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_marks),
        cmocka_unit_test(test_watched_since),
        cmocka_unit_test(test_polled_head_has_no_time),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
