/* SPDX-License-Identifier: MIT */
/*
 * test_headpoll: when the monitor asks a node for its head. Each case is one node and one
 * moment on a 12 s slot clock: a working stream is never asked; a node without a head is
 * asked at once; a node without a stream at the cluster move or from the mid-slot point;
 * an up stream that delivered nothing in a slot in which the cluster moved past it at the
 * next slot start; never twice a slot; before genesis only a headless node, just before it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster/headpoll.h"

#define GENESIS 1700000000000ull
#define SLOT 12000u

static uint64_t T(uint64_t slot, int64_t off_ms)
{
    return (uint64_t)((int64_t)(GENESIS + slot * SLOT) + off_ms);
}

static bm_headpoll_cluster_t cluster(uint64_t since_ms)
{
    bm_headpoll_cluster_t c = {
        .clock = {GENESIS, SLOT, 32}, .has_head = since_ms != 0, .head_since_ms = since_ms};
    return c;
}

/* A node whose stream has worked: up since slot 1, last head at slot 9 + 300 ms, its head
 * one behind the cluster head now. */
static bm_headpoll_node_t working(void)
{
    bm_headpoll_node_t n = {.stream_up = true,
                            .stream_up_ms = T(1, 0),
                            .last_stream_head_ms = T(9, 300),
                            .has_head = true,
                            .at_cluster_head = false,
                            .polled_slot = UINT64_MAX};
    return n;
}

static void test_working_stream_is_never_asked(void **state)
{
    (void)state;
    bm_headpoll_cluster_t c = cluster(T(10, 100));
    bm_headpoll_node_t n = working();
    /* the cluster moved at 10.1 s; the node spoke in slot 9: its slot-10 head is coming */
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_CLUSTER_MOVED, T(10, 100)),
                     BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_MID_SLOT, T(10, 3000)), BM_HEADPOLL_NO);
    /* a stream whose heads come exactly a slot apart is never judged silent in between */
    n.last_stream_head_ms = T(9, 0);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_MID_SLOT, T(10, 3000)), BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_CLUSTER_MOVED, T(10, 0)), BM_HEADPOLL_NO);
    /* at the cluster head: never, however long it was quiet */
    n.at_cluster_head = true;
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(14, 0)), BM_HEADPOLL_NO);
    /* quiet for slots, but the cluster did not move since its last head (empty slots) */
    n.at_cluster_head = false;
    n.last_stream_head_ms = T(9, 300);
    c = cluster(T(9, 200));
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(12, 0)), BM_HEADPOLL_NO);
}

static void test_silent_stream_asked_once_the_cluster_moved_past_it(void **state)
{
    (void)state;
    /* nothing from its stream in slot 10, in which the cluster head moved past it */
    bm_headpoll_cluster_t c = cluster(T(10, 100));
    bm_headpoll_node_t n = working();
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(11, 0)), BM_HEADPOLL_SILENT);
    assert_string_equal(bm_headpoll_reason_name(BM_HEADPOLL_SILENT), "silent stream");
    /* judged at slot starts only */
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_MID_SLOT, T(11, 3000)), BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_CLUSTER_MOVED, T(11, 100)),
                     BM_HEADPOLL_NO);
    /* it spoke in slot 10 (late in it): not silent */
    n.last_stream_head_ms = T(10, 11000);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(11, 0)), BM_HEADPOLL_NO);
    /* up only since the middle of slot 10 (its head asked at the connect): next slot */
    n.last_stream_head_ms = 0;
    n.stream_up_ms = T(10, 50);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(11, 0)), BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(12, 0)), BM_HEADPOLL_SILENT);
    /* without a cluster head there is nothing to have missed */
    c.has_head = false;
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(12, 0)), BM_HEADPOLL_NO);
}

static void test_no_stream_at_the_move_or_mid_slot(void **state)
{
    (void)state;
    bm_headpoll_cluster_t c = cluster(T(10, 800));
    bm_headpoll_node_t n = working();
    n.stream_up = false;
    /* not at the slot start: the slot's block is not there yet */
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(10, 0)), BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_CLUSTER_MOVED, T(10, 800)),
                     BM_HEADPOLL_NO_STREAM);
    assert_int_equal(bm_headpoll_mid_slot_ms(&c.clock, 10), T(10, 3000));
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_MID_SLOT, T(10, 3000)),
                     BM_HEADPOLL_NO_STREAM);
    /* no stream anywhere and no cluster head: the mid-slot point alone drives the tracker */
    c = cluster(0);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_MID_SLOT, T(10, 3000)),
                     BM_HEADPOLL_NO_STREAM);
    /* a late slot-start round (after the mid-slot point) counts as the mid-slot point */
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(10, 3500)),
                     BM_HEADPOLL_NO_STREAM);
    /* even at the cluster head: its next block may be the first anyone sees */
    n.at_cluster_head = true;
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_MID_SLOT, T(10, 3000)),
                     BM_HEADPOLL_NO_STREAM);
}

static void test_unknown_head_asked_at_once(void **state)
{
    (void)state;
    bm_headpoll_cluster_t c = cluster(0);
    bm_headpoll_node_t n = {.polled_slot = UINT64_MAX};
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(0, 0)),
                     BM_HEADPOLL_UNKNOWN_HEAD);
    assert_string_equal(bm_headpoll_reason_name(BM_HEADPOLL_UNKNOWN_HEAD), "unknown head");
    n.stream_up = true;
    n.stream_up_ms = T(3, 10);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(3, 20)),
                     BM_HEADPOLL_UNKNOWN_HEAD);
}

static void test_once_per_slot_and_before_genesis(void **state)
{
    (void)state;
    bm_headpoll_cluster_t c = cluster(T(10, 100));
    bm_headpoll_node_t n = {.polled_slot = 10};
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_MID_SLOT, T(10, 3000)), BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(11, 0)),
                     BM_HEADPOLL_UNKNOWN_HEAD);
    n.polled_slot = UINT64_MAX;
    n.poll_in_flight = true; /* a hung node: one request at a time */
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(11, 0)), BM_HEADPOLL_NO);
    n.poll_in_flight = false;
    /* before genesis: only in its last moments, and only a node without a head */
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, GENESIS - 1),
                     BM_HEADPOLL_UNKNOWN_HEAD);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, GENESIS - 2000 - 1),
                     BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_pregenesis_ms(&c.clock), 2000);
    bm_slot_clock_t fast = {GENESIS, 1000, 8}; /* half a slot when that is shorter */
    assert_int_equal(bm_headpoll_pregenesis_ms(&fast), 500);
    n.has_head = true;
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, GENESIS - 1), BM_HEADPOLL_NO);
    bm_headpoll_cluster_t none = {0};
    assert_int_equal(bm_headpoll_due(&none, &n, BM_HEADPOLL_SLOT_START, T(11, 0)), BM_HEADPOLL_NO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_working_stream_is_never_asked),
        cmocka_unit_test(test_silent_stream_asked_once_the_cluster_moved_past_it),
        cmocka_unit_test(test_no_stream_at_the_move_or_mid_slot),
        cmocka_unit_test(test_unknown_head_asked_at_once),
        cmocka_unit_test(test_once_per_slot_and_before_genesis),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
