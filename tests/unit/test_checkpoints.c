/* SPDX-License-Identifier: MIT */
/*
 * test_checkpoints: the book of source and target checkpoints per epoch: a pair becomes the
 * epoch's agreement for its target root when a quorum of distinct nodes answered it (the
 * first to get there stays), a pair with another source or target is not the agreement,
 * pairs served before the agreement and contradicted by it are reported once, old epochs
 * are forgotten.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "duties/checkpoints.h"

static bm_checkpoint_pair_t pair(uint64_t epoch, uint8_t source_root, uint8_t target_root)
{
    bm_checkpoint_pair_t p;
    memset(&p, 0, sizeof p);
    p.source.epoch = epoch - 1;
    memset(p.source.root, source_root, 32);
    p.target.epoch = epoch;
    memset(p.target.root, target_root, 32);
    return p;
}

static void test_quorum_makes_the_agreement(void **state)
{
    (void)state;
    bm_checkpoints_t *b = bm_checkpoints_new();
    assert_non_null(b);
    bm_checkpoint_pair_t good = pair(5, 0xa1, 0xb1), bad_source = pair(5, 0xee, 0xb1);
    /* one node, twice: still one node */
    assert_int_equal(bm_checkpoints_note(b, 0, &good, 2), 0);
    assert_int_equal(bm_checkpoints_note(b, 0, &good, 2), 0);
    assert_false(bm_checkpoints_epoch_agreed(b, 5));
    assert_false(bm_checkpoints_agreed(b, &good));
    /* a node with another source, then a second node with the good pair */
    bm_checkpoints_note(b, 2, &bad_source, 2);
    assert_false(bm_checkpoints_epoch_agreed(b, 5));
    bm_checkpoints_note(b, 1, &good, 2);
    assert_true(bm_checkpoints_epoch_agreed(b, 5));
    assert_true(bm_checkpoints_agreed(b, &good));
    assert_false(bm_checkpoints_agreed(b, &bad_source));
    /* a second node with the bad pair later: the first agreement for the target stays */
    bm_checkpoints_note(b, 3, &bad_source, 2);
    assert_false(bm_checkpoints_agreed(b, &bad_source));
    /* another target root of the same epoch (another chain) has none of its own yet */
    bm_checkpoint_pair_t other_chain = pair(5, 0xa1, 0xc1);
    assert_false(bm_checkpoints_agreed(b, &other_chain));
    bm_checkpoints_note(b, 0, &other_chain, 2);
    bm_checkpoints_note(b, 1, &other_chain, 2);
    assert_true(bm_checkpoints_agreed(b, &other_chain));
    /* another epoch knows nothing */
    assert_false(bm_checkpoints_epoch_agreed(b, 6));
    /* nodes past the table's width are not counted */
    bm_checkpoint_pair_t e7 = pair(7, 1, 2);
    bm_checkpoints_note(b, 64, &e7, 1);
    assert_false(bm_checkpoints_epoch_agreed(b, 7));
    bm_checkpoints_note(b, 63, &e7, 1); /* quorum 1: one node is enough */
    assert_true(bm_checkpoints_agreed(b, &e7));
    bm_checkpoints_free(b);
}

static void test_served_before_agreement_reported_once(void **state)
{
    (void)state;
    bm_checkpoints_t *b = bm_checkpoints_new();
    bm_checkpoint_pair_t good = pair(9, 0xa1, 0xb1), bad = pair(9, 0xee, 0xb1);
    bm_checkpoints_served(b, &bad);
    bm_checkpoints_served(b, &bad); /* the same pair once */
    bm_checkpoints_served(b, &good);
    bm_checkpoints_note(b, 0, &good, 2);
    assert_int_equal(bm_checkpoints_note(b, 1, &good, 2), 1); /* the bad one, not the good */
    assert_int_equal(bm_checkpoints_note(b, 2, &good, 2), 0); /* reported once */
    /* once agreed, served pairs are not kept any more */
    bm_checkpoints_served(b, &bad);
    bm_checkpoint_pair_t other = pair(9, 0xa1, 0xc1);
    bm_checkpoints_note(b, 0, &other, 2);
    assert_int_equal(bm_checkpoints_note(b, 1, &other, 2), 0);
    bm_checkpoints_free(b);
}

static void test_old_epochs_forgotten(void **state)
{
    (void)state;
    bm_checkpoints_t *b = bm_checkpoints_new();
    for (uint64_t e = 10; e < 16; e++) {
        bm_checkpoint_pair_t p = pair(e, 1, 2);
        bm_checkpoints_note(b, 0, &p, 1);
    }
    for (uint64_t e = 12; e < 16; e++)
        assert_true(bm_checkpoints_epoch_agreed(b, e));
    assert_false(bm_checkpoints_epoch_agreed(b, 10));
    assert_false(bm_checkpoints_epoch_agreed(b, 11));
    /* an epoch older than every one kept is not taken in */
    bm_checkpoint_pair_t old = pair(3, 1, 2);
    bm_checkpoints_note(b, 0, &old, 1);
    assert_false(bm_checkpoints_epoch_agreed(b, 3));
    assert_true(bm_checkpoints_epoch_agreed(b, 12));
    bm_checkpoints_free(b);
    bm_checkpoints_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quorum_makes_the_agreement),
        cmocka_unit_test(test_served_before_agreement_reported_once),
        cmocka_unit_test(test_old_epochs_forgotten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
