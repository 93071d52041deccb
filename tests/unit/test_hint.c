/* SPDX-License-Identifier: MIT */
/*
 * test_hint: the expected head and the hold deadline of duty reads, against a head tracker
 * fed by hand over a synthetic chain and chain information with chosen forks; plus the
 * candidate choice and the query parameter reader the policies share.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "cluster/pool.h"
#include "duties/hint.h"
#include "fake_chain.h"

#define G 1700000000000ull /* genesis */
#define SLOT 12000u
#define SPE 8u

static uint64_t start_of(uint64_t slot)
{
    return G + slot * SLOT;
}

static void test_deadline_formula(void **state)
{
    (void)state;
    /* due far ahead: capped at now + maxHold */
    assert_int_equal(bm_hint_deadline_at(1000, 9000, 400, 1000), 2000);
    /* due within the floor: the floor */
    assert_int_equal(bm_hint_deadline_at(1000, 1200, 400, 1000), 1400);
    /* due between floor and cap: the due time */
    assert_int_equal(bm_hint_deadline_at(1000, 1700, 400, 1000), 1700);
    /* due past or unknown: the floor */
    assert_int_equal(bm_hint_deadline_at(1000, 500, 400, 1000), 1400);
    assert_int_equal(bm_hint_deadline_at(1000, 0, 400, 1000), 1400);
    /* floor 0 after the due time: at once */
    assert_int_equal(bm_hint_deadline_at(1000, 900, 0, 1000), 1000);
    /* floor == cap */
    assert_int_equal(bm_hint_deadline_at(1000, 9000, 700, 700), 1700);
}

static void test_deadline_per_duty(void **state)
{
    (void)state;
    bm_chain_info_t info;
    fake_chain_info(&info, G, SLOT, SPE, 0, 10); /* gloas from epoch 10 = slot 80 */
    bm_hint_opts_t o;
    bm_hint_opts_default(&o);
    for (int d = 0; d < BM_HINT_DUTY_COUNT; d++) {
        assert_int_equal(o.hold[d].hold_floor_ms, 400);
        assert_int_equal(o.hold[d].max_hold_ms, 1000);
    }
    o.hold[BM_HINT_HEAD_ROOT].hold_floor_ms = 100;
    o.hold[BM_HINT_HEAD_ROOT].max_hold_ms = 300;
    o.hold[BM_HINT_AGGREGATE].hold_floor_ms = 2000; /* above its cap: clamped to it */
    o.hold[BM_HINT_AGGREGATE].max_hold_ms = 1500;
    bm_hint_t *h = bm_hint_new(&o);
    assert_non_null(h);

    /* no chain yet: due unknown, the floor */
    assert_int_equal(bm_hint_due_ms(h, BM_HINT_ATTESTATION_DATA, 5), 0);
    assert_int_equal(bm_hint_deadline(h, BM_HINT_ATTESTATION_DATA, 5, start_of(5)),
                     start_of(5) + 400);
    assert_null(bm_hint_chain(h));
    bm_fork_t fork;
    uint64_t slot;
    assert_false(bm_hint_fork(h, 5, &fork));
    assert_false(bm_hint_slot_at(h, start_of(5), &slot));

    bm_hint_set_chain(h, &info);
    assert_ptr_equal(bm_hint_chain(h), &info);
    /* before Gloas: 1/3 and 2/3 (3333 and 6667 basis points) */
    uint64_t due = bm_hint_due_ms(h, BM_HINT_ATTESTATION_DATA, 5);
    assert_int_equal(due, start_of(5) + 3999);
    assert_int_equal(bm_hint_due_ms(h, BM_HINT_HEAD_ROOT, 5), start_of(5) + 3999);
    assert_int_equal(bm_hint_due_ms(h, BM_HINT_AGGREGATE, 5), start_of(5) + 8000);
    assert_int_equal(bm_hint_due_ms(h, BM_HINT_SYNC_CONTRIBUTION, 5), start_of(5) + 8000);
    /* asked at 3.2 s: held until the due time (within the cap) */
    assert_int_equal(bm_hint_deadline(h, BM_HINT_ATTESTATION_DATA, 5, start_of(5) + 3200), due);
    /* asked at the block (0.5 s): capped at maxHold */
    assert_int_equal(bm_hint_deadline(h, BM_HINT_ATTESTATION_DATA, 5, start_of(5) + 500),
                     start_of(5) + 1500);
    /* asked after the due time: the floor */
    assert_int_equal(bm_hint_deadline(h, BM_HINT_ATTESTATION_DATA, 5, start_of(5) + 5000),
                     start_of(5) + 5400);
    /* per duty holds */
    assert_int_equal(bm_hint_deadline(h, BM_HINT_HEAD_ROOT, 5, start_of(5) + 500),
                     start_of(5) + 800);
    bm_hint_hold_t agg = bm_hint_get_hold(h, BM_HINT_AGGREGATE);
    assert_int_equal(agg.hold_floor_ms, 1500);
    assert_int_equal(bm_hint_deadline(h, BM_HINT_AGGREGATE, 5, start_of(5) + 7900),
                     start_of(5) + 9400);
    /* the end without a usable answer: the later of maxHold and the due time */
    assert_int_equal(bm_hint_end(h, BM_HINT_ATTESTATION_DATA, 5, start_of(5) + 500),
                     due); /* the due time (1/3 of 12 s) after now + maxHold */
    assert_int_equal(bm_hint_end(h, BM_HINT_ATTESTATION_DATA, 5, start_of(5) + 3500),
                     start_of(5) + 4500); /* now + maxHold after the due time */
    assert_int_equal(bm_hint_end(h, BM_HINT_HEAD_ROOT, 5, start_of(5) + 5000),
                     start_of(5) + 5300);                 /* its own maxHold (300) */
    assert_int_equal(bm_hint_end_at(1000, 0, 700), 1700); /* unknown due: past */

    /* from Gloas: 1/4, 1/2 and the PTC at 3/4 */
    assert_int_equal(bm_hint_due_ms(h, BM_HINT_ATTESTATION_DATA, 80), start_of(80) + 3000);
    assert_int_equal(bm_hint_due_ms(h, BM_HINT_AGGREGATE, 80), start_of(80) + 6000);
    assert_int_equal(bm_hint_due_ms(h, BM_HINT_PAYLOAD_ATTESTATION, 80), start_of(80) + 9000);
    assert_int_equal(bm_hint_deadline(h, BM_HINT_ATTESTATION_DATA, 80, start_of(80) + 2800),
                     start_of(80) + 3200);
    assert_int_equal(bm_hint_deadline(h, BM_HINT_ATTESTATION_DATA, 80, start_of(80) + 2500),
                     start_of(80) + 3000);

    /* forks and the clock */
    assert_true(bm_hint_fork(h, 79, &fork));
    assert_int_equal(fork, BM_FORK_FULU);
    assert_true(bm_hint_fork(h, 80, &fork));
    assert_int_equal(fork, BM_FORK_GLOAS);
    assert_true(bm_hint_slot_at(h, start_of(7) + 11999, &slot));
    assert_int_equal(slot, 7);

    /* a chain that is not known yet counts as none */
    info.known = false;
    assert_null(bm_hint_chain(h));
    assert_int_equal(bm_hint_due_ms(h, BM_HINT_ATTESTATION_DATA, 5), 0);
    bm_hint_free(h);
}

static void test_expected_head(void **state)
{
    (void)state;
    bm_chain_info_t info;
    fake_chain_info(&info, G, SLOT, SPE, 0, BM_FAR_FUTURE_EPOCH);
    fake_chain_t c;
    fake_chain_init(&c, 2, &info, start_of(1));
    bm_hint_t *h = bm_hint_new(NULL);
    bm_expected_t e;

    /* no tracker, then no cluster head */
    assert_false(bm_hint_expected(h, 5, &e));
    assert_false(e.known);
    bm_hint_set_head(h, c.t);
    assert_ptr_equal(bm_hint_head(h), c.t);
    assert_false(bm_hint_expected(h, 5, &e));

    /* blocks 1, 2, 3 and 5 (slot 4 is empty), each announced 1 s into its slot */
    fake_block(&c, 1, 1, 0);
    fake_block(&c, 2, 2, 1);
    fake_block(&c, 3, 3, 2);
    fake_block(&c, 5, 5, 3);
    unsigned ids[] = {1, 2, 3, 5};
    for (size_t i = 0; i < 4; i++)
        fake_head(&c, 0, ids[i], start_of(c.slot[ids[i]]) + 1000, BM_PAYLOAD_UNKNOWN);
    assert_int_equal(fake_cluster_id(&c), 5);

    uint8_t r5[32], r3[32], r2[32];
    fake_root(5, r5);
    fake_root(3, r3);
    fake_root(2, r2);
    /* at the head's slot and after it: the cluster head itself */
    for (uint64_t s = 5; s <= 7; s++) {
        assert_true(bm_hint_expected(h, s, &e));
        assert_memory_equal(e.root, r5, 32);
        assert_true(e.is_cluster_head);
        assert_true(e.slot_known);
        assert_int_equal(e.slot, 5);
        assert_true(e.parent_known);
        assert_memory_equal(e.parent, r3, 32);
        assert_int_equal(e.first_seen_ms, start_of(5) + 1000);
        assert_false(e.payload_full);
    }
    /* a past slot: the chain's block at it */
    assert_true(bm_hint_expected(h, 2, &e));
    assert_memory_equal(e.root, r2, 32);
    assert_false(e.is_cluster_head);
    assert_true(e.slot_known);
    assert_int_equal(e.slot, 2);
    /* the empty slot 4: block 3, from an earlier slot */
    assert_true(bm_hint_expected(h, 4, &e));
    assert_memory_equal(e.root, r3, 32);
    assert_false(e.slot_known);
    assert_false(e.is_cluster_head);

    /* the payload of the head becomes known full (Gloas head_v2 "full") */
    fake_head(&c, 0, 5, start_of(5) + 1500, BM_PAYLOAD_FULL);
    assert_true(bm_hint_expected(h, 6, &e));
    assert_true(e.payload_full);

    /* the head moves on: the expected head is read live */
    fake_block(&c, 6, 6, 5);
    fake_head(&c, 1, 6, start_of(6) + 300, BM_PAYLOAD_UNKNOWN);
    assert_true(bm_hint_expected(h, 6, &e));
    assert_int_equal(e.root[2], 6);
    assert_false(e.payload_full);

    /* node 0 holds block 5, an ancestor of the head (6): behind; node 1 holds the head */
    assert_true(bm_hint_node_behind(h, 0));
    assert_false(bm_hint_node_behind(h, 1));
    assert_false(bm_hint_node_behind(h, 7)); /* no such node */

    /* a node announces block 7 and its header is on its way: the head is moving (for
     * duty reads about slot 7 or later); once the header is in, it moved */
    assert_false(bm_hint_head_moving(h, 7));
    fake_block(&c, 7, 7, 6);
    c.defer = true;
    fake_head(&c, 1, 7, start_of(7) + 200, BM_PAYLOAD_UNKNOWN);
    assert_int_equal(fake_cluster_id(&c), 6);
    assert_true(bm_hint_head_moving(h, 7));
    assert_true(bm_hint_head_moving(h, UINT64_MAX));
    assert_false(bm_hint_head_moving(h, 6)); /* not for an older slot's reads */
    fake_chain_release(&c, start_of(7) + 205);
    assert_int_equal(fake_cluster_id(&c), 7);
    assert_false(bm_hint_head_moving(h, 7));
    /* a header that never comes (request failed): not moving any more */
    fake_block(&c, 8, 8, 7);
    c.defer = true;
    fake_head(&c, 1, 8, start_of(8) + 200, BM_PAYLOAD_UNKNOWN);
    assert_true(bm_hint_head_moving(h, 8));
    c.defer = false;
    c.n_held = 0;
    uint8_t r8[32];
    fake_root(8, r8);
    assert_int_equal(bm_head_on_parent_failed(c.t, 1, r8, start_of(8) + 300), 0);
    assert_false(bm_hint_head_moving(h, 8));

    bm_hint_set_head(h, NULL);
    assert_false(bm_hint_expected(h, 6, &e));
    assert_false(bm_hint_node_behind(h, 0));
    assert_false(bm_hint_head_moving(h, 8));
    bm_hint_free(h);
    fake_chain_dispose(&c);
}

static void test_arrived_late(void **state)
{
    (void)state;
    bm_chain_info_t info;
    fake_chain_info(&info, G, SLOT, SPE, 0, 10);
    fake_chain_t c;
    fake_chain_init(&c, 1, &info, start_of(1));
    bm_hint_t *h = bm_hint_new(NULL);
    bm_hint_set_head(h, c.t);
    bm_expected_t e;

    fake_block(&c, 1, 1, 0);
    fake_block(&c, 2, 2, 1);
    fake_block(&c, 3, 3, 2);
    fake_head(&c, 0, 1, start_of(1) + 100, BM_PAYLOAD_UNKNOWN);
    /* on time: 1 ms before the attestation due time (3999 ms) */
    fake_head(&c, 0, 2, start_of(2) + 3998, BM_PAYLOAD_UNKNOWN);
    assert_true(bm_hint_expected(h, 3, &e));
    assert_false(bm_hint_arrived_late(h, &e));
    /* no chain information: never late */
    bm_hint_set_chain(h, NULL);
    fake_head(&c, 0, 3, start_of(3) + 5000, BM_PAYLOAD_UNKNOWN);
    assert_true(bm_hint_expected(h, 4, &e));
    assert_false(bm_hint_arrived_late(h, &e));
    bm_hint_set_chain(h, &info);
    /* 1 ms after the due time: late */
    assert_true(bm_hint_arrived_late(h, &e));
    /* an ancestor looked up for a past slot has no arrival time */
    assert_true(bm_hint_expected(h, 2, &e));
    assert_false(bm_hint_arrived_late(h, &e));
    /* in Gloas the due time is a quarter slot: 3001 ms is late */
    fake_block(&c, 80, 80, 3);
    fake_head(&c, 0, 80, start_of(80) + 3001, BM_PAYLOAD_UNKNOWN);
    assert_true(bm_hint_expected(h, 81, &e));
    assert_true(bm_hint_arrived_late(h, &e));
    bm_hint_free(h);
    fake_chain_dispose(&c);
}

static void test_candidates(void **state)
{
    (void)state;
    bm_pool_t *pool = bm_pool_new();
    const char *ids[] = {"a", "b", "c", "d"};
    bm_node_t *n[4];
    for (int i = 0; i < 4; i++) {
        n[i] = bm_pool_add(pool, ids[i], "http://127.0.0.1:1", NULL);
        assert_non_null(n[i]);
    }
    bm_node_t *out[4];
    /* the ready nodes, in pool order */
    n[0]->state = BM_NODE_READY;
    n[1]->state = BM_NODE_LAGGING;
    n[2]->state = BM_NODE_READY;
    n[3]->state = BM_NODE_WRONG_NETWORK;
    assert_int_equal(bm_hint_candidates(pool, out, 4), 2);
    assert_ptr_equal(out[0], n[0]);
    assert_ptr_equal(out[1], n[2]);
    assert_int_equal(bm_hint_candidates(pool, out, 1), 1);
    /* none ready: every usable node, best state first; never a wrong-network one */
    n[0]->state = BM_NODE_UNREACHABLE;
    n[1]->state = BM_NODE_UNKNOWN;
    n[2]->state = BM_NODE_LAGGING;
    assert_int_equal(bm_hint_candidates(pool, out, 4), 3);
    assert_ptr_equal(out[0], n[2]);
    assert_ptr_equal(out[1], n[1]);
    assert_ptr_equal(out[2], n[0]);
    /* a node whose head is unknown is no candidate beside a ready one; alone it ranks with
     * lagging nodes, ahead of syncing and unreachable ones */
    n[0]->state = BM_NODE_NO_HEAD;
    n[1]->state = BM_NODE_READY;
    n[2]->state = BM_NODE_SYNCING;
    assert_int_equal(bm_hint_candidates(pool, out, 4), 1);
    assert_ptr_equal(out[0], n[1]);
    n[1]->state = BM_NODE_UNREACHABLE;
    assert_int_equal(bm_hint_candidates(pool, out, 4), 3);
    assert_ptr_equal(out[0], n[0]);
    assert_ptr_equal(out[1], n[2]);
    assert_ptr_equal(out[2], n[1]);
    n[0]->state = n[1]->state = n[2]->state = BM_NODE_WRONG_NETWORK;
    assert_int_equal(bm_hint_candidates(pool, out, 4), 0);
    bm_pool_free(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deadline_formula), cmocka_unit_test(test_deadline_per_duty),
        cmocka_unit_test(test_expected_head),    cmocka_unit_test(test_arrived_late),
        cmocka_unit_test(test_candidates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
