/* SPDX-License-Identifier: MIT */
/*
 * test_sim_chain: the ground-truth chain of beaconsim. Roots are deterministic under a
 * seed and distinct across seeds and branches; parents skip skipped slots; the skip rate
 * is honoured; late and competing blocks re-org as the scenarios say; dependent roots
 * follow VALIDATOR-FLOWS.md §2; duties cover every validator once per epoch; block values
 * exceed 2^63/2^64 when asked. Also SHA-256 against FIPS 180-4 vectors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chain.h"
#include "base/err.h"
#include "hash.h"

static bs_chain_t *mk(uint64_t seed, double skip, uint32_t spe)
{
    bs_chain_cfg_t cfg;
    bs_chain_cfg_default(&cfg);
    cfg.seed = seed;
    cfg.skip_rate = skip;
    cfg.slots_per_epoch = spe;
    cfg.slot_ms = 1000;
    cfg.genesis_ms = 1000000;
    cfg.nodes = 4;
    bs_chain_t *c = bs_chain_new(&cfg);
    assert_non_null(c);
    return c;
}

static void hex32(const uint8_t *b, char *out)
{
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static void test_sha256_vectors(void **state)
{
    (void)state;
    uint8_t h[32];
    char hx[65];
    bs_sha256("abc", 3, h);
    hex32(h, hx);
    assert_string_equal(hx, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    bs_sha256("", 0, h);
    hex32(h, hx);
    assert_string_equal(hx, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    bs_sha256(m, strlen(m), h);
    hex32(h, hx);
    assert_string_equal(hx, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_roots_deterministic(void **state)
{
    (void)state;
    bs_chain_t *a = mk(7, 0, 8), *b = mk(7, 0, 8), *c = mk(8, 0, 8);
    for (uint64_t s = 0; s < 50; s++) {
        bs_block_id_t id = {0, s};
        bs_root_t ra = bs_chain_root(a, id), rb = bs_chain_root(b, id), rc = bs_chain_root(c, id);
        assert_true(bs_root_eq(&ra, &rb));
        assert_false(bs_root_eq(&ra, &rc));
        if (s > 0) {
            bs_block_id_t other = {3, s};
            bs_root_t ro = bs_chain_root(a, other);
            assert_false(bs_root_eq(&ra, &ro));
            bs_block_id_t prev = {0, s - 1};
            bs_root_t rp = bs_chain_root(a, prev);
            assert_false(bs_root_eq(&ra, &rp));
        }
    }
    /* genesis is shared by all branches */
    bs_root_t g0 = bs_chain_root(a, (bs_block_id_t){0, 0}),
              g5 = bs_chain_root(a, (bs_block_id_t){5, 0});
    assert_true(bs_root_eq(&g0, &g5));
    bs_chain_free(a);
    bs_chain_free(b);
    bs_chain_free(c);
}

static void test_parents_and_skips(void **state)
{
    (void)state;
    bs_chain_t *c = mk(3, 0.3, 8);
    unsigned skipped = 0;
    const uint64_t N = 4000;
    for (uint64_t s = 1; s < N; s++) {
        bs_block_id_t id = {0, s};
        if (!bs_chain_exists(c, id)) {
            skipped++;
            continue;
        }
        bs_block_id_t p;
        assert_true(bs_chain_parent(c, id, &p));
        assert_true(p.slot < s);
        assert_true(bs_chain_exists(c, p));
        for (uint64_t t = p.slot + 1; t < s; t++)
            assert_false(bs_chain_exists(c, (bs_block_id_t){0, t}));
    }
    /* 30 % of 4000 slots: well inside 25..35 % */
    assert_true(skipped > N * 25 / 100 && skipped < N * 35 / 100);
    bs_block_id_t g;
    assert_false(bs_chain_parent(c, (bs_block_id_t){0, 0}, &g));
    bs_chain_free(c);
}

static void test_late_block(void **state)
{
    (void)state;
    bs_chain_t *c = mk(1, 0, 8);
    assert_int_equal(bs_chain_set_late(c, 10, 500), 0);
    assert_int_equal(bs_chain_set_late(c, 0, 500), BM_EINVAL);
    assert_int_equal(bs_chain_set_late(c, 12, 1000), BM_EINVAL); /* not inside the slot */
    bs_block_id_t late = {0, 10}, next = {0, 11}, p;
    assert_true(bs_chain_exists(c, late));
    assert_true(bs_chain_is_late(c, late));
    assert_int_equal(bs_chain_publish_ms(c, late), 1000000 + 10 * 1000 + 500);
    assert_true(bs_chain_parent(c, next, &p));
    assert_int_equal(p.slot, 9); /* the proposer of 11 builds on 10's parent */
    assert_int_equal(bs_chain_canon_at(c, 10).slot, 9);
    assert_false(bs_chain_is_ancestor(c, late, next));
    bs_block_id_t anc = bs_chain_common_ancestor(c, late, next);
    assert_int_equal(anc.slot, 9);
    bs_slot_info_t si;
    bs_chain_slot_info(c, 10, &si);
    assert_true(si.late);
    assert_int_equal(si.late_ms, 500);
    bs_chain_free(c);
}

static void test_competing(void **state)
{
    (void)state;
    bs_chain_t *c = mk(1, 0, 8); /* 4 nodes */
    /* nodes 0,1,2 see one block: the listed majority keeps the canonical one */
    assert_int_equal(bs_chain_set_competing(c, 20, 0x7), 0);
    bs_block_id_t b;
    assert_true(bs_chain_block_for(c, 0, 20, 3, &b));
    assert_int_equal(b.branch, BS_BRANCH_ALT);
    assert_true(bs_chain_block_for(c, 0, 20, 0, &b));
    assert_int_equal(b.branch, 0);
    bs_root_t ra = bs_chain_root(c, (bs_block_id_t){BS_BRANCH_ALT, 20});
    bs_root_t rc = bs_chain_root(c, (bs_block_id_t){0, 20});
    assert_false(bs_root_eq(&ra, &rc));
    bs_block_id_t p1, p2;
    assert_true(bs_chain_parent(c, (bs_block_id_t){BS_BRANCH_ALT, 20}, &p1));
    assert_true(bs_chain_parent(c, (bs_block_id_t){0, 20}, &p2));
    assert_true(bs_block_id_eq(p1, p2));
    assert_true(bs_chain_parent(c, (bs_block_id_t){0, 21}, &p1));
    assert_int_equal(p1.branch, 0);
    assert_int_equal(p1.slot, 20);
    /* all nodes or none is not a competition */
    assert_int_equal(bs_chain_set_competing(c, 30, 0xf), BM_EINVAL);
    assert_int_equal(bs_chain_set_competing(c, 30, 0), BM_EINVAL);
    /* a late slot cannot also be competing */
    assert_int_equal(bs_chain_set_late(c, 40, 500), 0);
    assert_int_equal(bs_chain_set_competing(c, 40, 1), BM_EINVAL);
    bs_chain_free(c);
}

static void test_fork_branch(void **state)
{
    (void)state;
    bs_chain_t *c = mk(1, 0, 8);
    bs_block_id_t base = {0, 15};
    uint32_t br = bs_chain_new_branch(c, base, 16);
    assert_true(br >= 1);
    bs_block_id_t f20 = {br, 20}, c20 = {0, 20}, p;
    assert_true(bs_chain_exists(c, f20));
    assert_false(bs_chain_exists(c, (bs_block_id_t){br, 15}));
    bs_root_t rf = bs_chain_root(c, f20), rc = bs_chain_root(c, c20);
    assert_false(bs_root_eq(&rf, &rc));
    assert_true(bs_chain_parent(c, (bs_block_id_t){br, 16}, &p));
    assert_true(bs_block_id_eq(p, base));
    bs_block_id_t anc = bs_chain_common_ancestor(c, f20, c20);
    assert_true(bs_block_id_eq(anc, base));
    assert_true(bs_block_id_eq(bs_chain_block_at(c, f20, 12), (bs_block_id_t){0, 12}));
    bs_chain_free(c);
}

static void test_dependent_roots(void **state)
{
    (void)state;
    bs_chain_t *c = mk(1, 0, 4);
    bs_block_id_t head = {0, 17}; /* epoch 4 */
    bs_root_t g = bs_chain_genesis_root(c);
    /* lookback 1 (attester, proposer v2, ptc): start(E-1) - 1 */
    bs_root_t d = bs_chain_dependent_root(c, head, 4, 1);
    bs_root_t want = bs_chain_root(c, (bs_block_id_t){0, 11});
    assert_true(bs_root_eq(&d, &want));
    /* lookback 0 (proposer v1): start(E) - 1 */
    d = bs_chain_dependent_root(c, head, 4, 0);
    want = bs_chain_root(c, (bs_block_id_t){0, 15});
    assert_true(bs_root_eq(&d, &want));
    /* genesis on underflow */
    d = bs_chain_dependent_root(c, head, 1, 1);
    assert_true(bs_root_eq(&d, &g));
    d = bs_chain_dependent_root(c, head, 0, 0);
    assert_true(bs_root_eq(&d, &g));
    /* a slot after the head resolves to the head itself */
    d = bs_chain_dependent_root(c, head, 6, 0);
    want = bs_chain_root(c, head);
    assert_true(bs_root_eq(&d, &want));
    /* a skipped dependent slot resolves to the block before it */
    bs_chain_t *k = mk(3, 0.5, 4);
    bs_block_id_t h2 = bs_chain_canon_at(k, 40);
    d = bs_chain_dependent_root(k, h2, 8, 1);
    want = bs_chain_root(k, bs_chain_canon_at(k, 27));
    assert_true(bs_root_eq(&d, &want));
    bs_chain_free(k);
    bs_chain_free(c);
}

static void test_duties(void **state)
{
    (void)state;
    bs_chain_t *c = mk(1, 0, 8);
    bs_root_t dep = bs_chain_root(c, (bs_block_id_t){0, 7});
    uint32_t per_slot[8] = {0};
    for (uint32_t v = 0; v < 64; v++) {
        bs_attester_duty_t d;
        assert_int_equal(bs_chain_attester_duty(c, &dep, 2, v, &d), 0);
        assert_true(d.slot >= 16 && d.slot < 24);
        assert_int_equal(d.committee_length, bs_chain_committee_length(c, &dep, d.slot));
        assert_true(d.validator_committee_index < d.committee_length);
        per_slot[d.slot - 16]++;
    }
    for (int i = 0; i < 8; i++)
        assert_int_equal(per_slot[i], bs_chain_committee_length(c, &dep, 16 + (uint64_t)i));
    /* a different dependent root shuffles differently */
    bs_root_t dep2 = bs_chain_root(c, (bs_block_id_t){0, 6});
    int moved = 0;
    for (uint32_t v = 0; v < 64; v++) {
        bs_attester_duty_t a, b;
        bs_chain_attester_duty(c, &dep, 2, v, &a);
        bs_chain_attester_duty(c, &dep2, 2, v, &b);
        moved += a.slot != b.slot;
    }
    assert_true(moved > 0);
    assert_int_equal(bs_chain_attester_duty(c, &dep, 2, 64, &(bs_attester_duty_t){0}),
                     BM_ENOTFOUND);
    /* sync committee: 512 positions over the validators */
    size_t total = 0;
    uint32_t pos[512];
    for (uint32_t v = 0; v < 64; v++)
        total += bs_chain_sync_positions(c, 0, v, pos, 512);
    assert_int_equal(total, BS_SYNC_COMMITTEE_SIZE);
    /* proposers and pubkeys are deterministic */
    assert_int_equal(bs_chain_proposer(c, &dep, 17), bs_chain_proposer(c, &dep, 17));
    uint8_t pk[48];
    bs_chain_pubkey(c, 5, pk);
    assert_int_equal(bs_chain_validator_by_pubkey(c, pk), 5);
    uint32_t m[BS_PTC_MEMBERS];
    size_t nm = bs_chain_ptc_members(c, &dep, 17, m);
    assert_true(nm > 0 && nm <= BS_PTC_MEMBERS);
    bs_chain_free(c);
}

static void test_values(void **state)
{
    (void)state;
    bs_chain_t *c = mk(1, 0, 8);
    bs_u128_t e0, c0, e1, c1, e0b, c0b;
    bs_chain_block_values(c, 0, 5, false, &e0, &c0);
    bs_chain_block_values(c, 1, 5, false, &e1, &c1);
    bs_chain_block_values(c, 0, 5, false, &e0b, &c0b);
    assert_true(e0 == e0b && c0 == c0b);
    assert_true(e0 != e1);
    assert_true(e0 < ((bs_u128_t)1 << 63));
    bs_chain_block_values(c, 2, 5, true, &e1, &c1);
    assert_true(e1 > ((bs_u128_t)1 << 64));
    assert_true(c1 > ((bs_u128_t)1 << 63));
    bs_chain_set_big_values(c, true);
    bs_chain_block_values(c, 0, 5, false, &e0, &c0);
    assert_true(e0 > ((bs_u128_t)1 << 64));
    char dec[48];
    bs_u128_dec(((bs_u128_t)1 << 64), dec);
    assert_string_equal(dec, "18446744073709551616");
    bs_u128_dec(0, dec);
    assert_string_equal(dec, "0");
    bs_chain_free(c);
}

static void test_fork_schedule(void **state)
{
    (void)state;
    bs_chain_t *c = mk(1, 0, 8);
    assert_int_equal(bs_chain_fork_at(c, 1000), BS_FORK_FULU);
    bs_chain_set_gloas_epoch(c, 3);
    assert_int_equal(bs_chain_fork_at(c, 23), BS_FORK_FULU);
    assert_int_equal(bs_chain_fork_at(c, 24), BS_FORK_GLOAS);
    assert_string_equal(bs_fork_name(BS_FORK_GLOAS), "gloas");
    bs_chain_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_roots_deterministic),
        cmocka_unit_test(test_parents_and_skips),
        cmocka_unit_test(test_late_block),
        cmocka_unit_test(test_competing),
        cmocka_unit_test(test_fork_branch),
        cmocka_unit_test(test_dependent_roots),
        cmocka_unit_test(test_duties),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_fork_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
