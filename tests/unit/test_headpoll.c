/* SPDX-License-Identifier: MIT */
/*
 * test_headpoll: when the monitor asks a node for its head. Each case is one node and one
 * moment on a 12 s slot clock: a stream that follows the cluster head is never asked; a
 * node without a head is asked at once; a node without a stream at the cluster move or from
 * the mid-slot point; an up stream whose node has not followed the cluster head a quarter
 * slot after its move, once per move; the probe time; never twice a slot otherwise; before
 * genesis only a headless node, just before it.
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

/* A node whose stream is up, its head one behind the cluster head now, never polled. */
static bm_headpoll_node_t working(void)
{
    bm_headpoll_node_t n = {
        .stream_up = true, .has_head = true, .at_cluster_head = false, .polled_slot = UINT64_MAX};
    return n;
}

static void test_following_stream_is_never_asked(void **state)
{
    (void)state;
    bm_headpoll_cluster_t c = cluster(T(10, 100));
    bm_headpoll_node_t n = working();
    /* the cluster moved at 10.1 s: the node's head event is on its way for a quarter slot */
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_CLUSTER_MOVED, T(10, 100)),
                     BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_MID_SLOT, T(10, 3000)), BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_FOLLOW_UP, T(10, 3099)), BM_HEADPOLL_NO);
    /* at the cluster head (or ahead of it): never, however long it was quiet */
    n.at_cluster_head = true;
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_FOLLOW_UP, T(10, 3100)), BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(14, 0)), BM_HEADPOLL_NO);
    /* without a cluster head there is nothing to follow */
    n.at_cluster_head = false;
    c.has_head = false;
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_FOLLOW_UP, T(10, 3100)), BM_HEADPOLL_NO);
}

/* A node with its stream up that has not followed the cluster head a quarter slot after the
 * move is asked once per move, at whatever moment comes after that point. */
static void test_behind_asked_once_per_move(void **state)
{
    (void)state;
    bm_headpoll_cluster_t c = cluster(T(10, 100));
    bm_headpoll_node_t n = working();
    assert_int_equal(bm_headpoll_behind_ms(&c.clock, T(10, 100)), T(10, 3100));
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_FOLLOW_UP, T(10, 3100)),
                     BM_HEADPOLL_BEHIND);
    assert_string_equal(bm_headpoll_reason_name(BM_HEADPOLL_BEHIND), "behind");
    /* any later moment will do (a round at the next slot start, after a busy loop) */
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(11, 0)), BM_HEADPOLL_BEHIND);
    /* one request at a time: a hung node is not asked again while it holds one */
    n.poll_in_flight = true;
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_FOLLOW_UP, T(10, 3100)), BM_HEADPOLL_NO);
    /* asked since the move (and answered): not again for this move, even slots later */
    n.poll_in_flight = false;
    n.polled_ms = T(10, 3100);
    n.polled_slot = 10;
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_SLOT_START, T(12, 0)), BM_HEADPOLL_NO);
    /* asked before the move (at its connect), or in its millisecond: the move still counts */
    n.polled_ms = T(10, 50);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_FOLLOW_UP, T(10, 3100)),
                     BM_HEADPOLL_BEHIND);
    n.polled_ms = T(10, 100);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_FOLLOW_UP, T(10, 3100)),
                     BM_HEADPOLL_BEHIND);
    /* the next move asks again, even within the same slot */
    n.polled_ms = T(10, 3100);
    c = cluster(T(10, 5000));
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_FOLLOW_UP, T(10, 7999)), BM_HEADPOLL_NO);
    assert_int_equal(bm_headpoll_due(&c, &n, BM_HEADPOLL_FOLLOW_UP, T(10, 8000)),
                     BM_HEADPOLL_BEHIND);
}

/* The probe time: a quarter slot, at most 1 s. */
static void test_probe_time(void **state)
{
    (void)state;
    bm_slot_clock_t mainnet = {GENESIS, 12000, 32}, fast = {GENESIS, 2000, 8},
                    tiny = {GENESIS, 400, 8};
    assert_int_equal(bm_headpoll_probe_ms(&mainnet), 1000);
    assert_int_equal(bm_headpoll_probe_ms(&fast), 500);
    assert_int_equal(bm_headpoll_probe_ms(&tiny), 100);
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
        cmocka_unit_test(test_following_stream_is_never_asked),
        cmocka_unit_test(test_behind_asked_once_per_move),
        cmocka_unit_test(test_probe_time),
        cmocka_unit_test(test_no_stream_at_the_move_or_mid_slot),
        cmocka_unit_test(test_unknown_head_asked_at_once),
        cmocka_unit_test(test_once_per_slot_and_before_genesis),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
