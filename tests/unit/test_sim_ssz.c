/* SPDX-License-Identifier: MIT */
/*
 * test_sim_ssz: the SSZ that beaconsim produces agrees with SSZ-LAYOUT.md, checked by
 * reading bytes at the absolute positions the document lists (BeaconBlock, the fulu and
 * gloas BlockContents, SignedBeaconBlock, ExecutionPayloadEnvelope, AttestationData,
 * PayloadAttestationData, the Electra Attestation), plus the SSZ offset rules inside the
 * block body. The JSON of the same objects is checked against the field lists of the
 * spec YAML (types/electra/block.yaml, types/gloas and types/phase0 attestation files).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "blocks.h"
#include "chain.h"
#include "node.h"
#include "test_sim_shape.h"

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void desc(bs_block_desc_t *d, bs_fork_t fork)
{
    memset(d, 0, sizeof *d);
    d->fork = fork;
    d->slot = 0x0102030405060708ull;
    d->proposer_index = 4242;
    for (int i = 0; i < 32; i++) {
        d->parent_root.b[i] = (uint8_t)(0xa0 + i);
        d->state_root.b[i] = (uint8_t)(0x10 + i);
        d->exec_block_hash.b[i] = (uint8_t)(0x50 + i);
        d->exec_parent_hash.b[i] = (uint8_t)(0x70 + i);
    }
    d->block_number = 77;
    d->timestamp = 1700000000;
}

static void check_block_at(const uint8_t *p, size_t len, size_t base, const bs_block_desc_t *d)
{
    assert_true(len >= base + 84);
    assert_int_equal(le64(p + base), d->slot);
    assert_int_equal(le64(p + base + 8), d->proposer_index);
    assert_memory_equal(p + base + 16, d->parent_root.b, 32);
    assert_memory_equal(p + base + 48, d->state_root.b, 32);
    assert_int_equal(le32(p + base + 80), 84);
}

/* Offsets inside the body: all within [fixed, len], non-decreasing. */
static void check_body(const uint8_t *body, size_t len, bs_fork_t fork)
{
    const size_t fixed = 396;
    assert_true(len >= fixed);
    size_t offs_fulu[] = {200, 204, 208, 212, 216, 380, 384, 388, 392};
    size_t offs_gloas[] = {200, 204, 208, 212, 216, 380, 384, 388, 392};
    size_t *offs = fork == BS_FORK_GLOAS ? offs_gloas : offs_fulu;
    uint32_t prev = (uint32_t)fixed;
    for (int i = 0; i < 9; i++) {
        uint32_t o = le32(body + offs[i]);
        assert_true(o >= prev);
        assert_true(o <= len);
        prev = o;
    }
    assert_int_equal(le32(body + 200), fixed); /* first variable part right after */
    if (fork == BS_FORK_FULU) {
        /* execution_payload: from off@380 to off@384, its own fixed part is 528 */
        uint32_t a = le32(body + 380), b = le32(body + 384);
        assert_true(b - a >= 528);
        assert_int_equal(le32(body + a + 436), 528);            /* extra_data offset */
        assert_memory_equal(body + a + 472, "\x50\x51\x52", 3); /* block_hash */
        /* execution_requests: three empty lists = three offsets of 12 */
        uint32_t r = le32(body + 392);
        assert_int_equal(len - r, 12);
        assert_int_equal(le32(body + r), 12);
    } else {
        /* signed_execution_payload_bid: from off@384; message at +100; parent_block_root */
        uint32_t a = le32(body + 384);
        assert_int_equal(le32(body + a), 100);
        assert_memory_equal(body + a + 100 + 32, "\xa0\xa1\xa2", 3);
    }
}

static void test_beacon_block(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++) {
        bs_block_desc_t d;
        desc(&d, (bs_fork_t)f);
        bm_str_t s = BM_STR_INIT;
        bs_block_ssz(&s, &d);
        const uint8_t *p = (const uint8_t *)bm_str_data(&s);
        check_block_at(p, bm_str_len(&s), 0, &d);
        check_body(p + 84, bm_str_len(&s) - 84, d.fork);
        bm_str_dispose(&s);
    }
}

static void test_block_contents(void **state)
{
    (void)state;
    bs_block_desc_t d;
    /* fulu: 3 offsets [block, kzg_proofs, blobs]; slot 12..20, proposer 20..28, parent 28..60 */
    desc(&d, BS_FORK_FULU);
    bm_str_t s = BM_STR_INIT;
    bs_block_contents_ssz(&s, &d, NULL);
    const uint8_t *p = (const uint8_t *)bm_str_data(&s);
    size_t len = bm_str_len(&s);
    assert_int_equal(le32(p), 12);
    assert_int_equal(le64(p + 12), d.slot);
    assert_int_equal(le64(p + 20), d.proposer_index);
    assert_memory_equal(p + 28, d.parent_root.b, 32);
    assert_true(le32(p + 4) >= le32(p) && le32(p + 8) >= le32(p + 4) && le32(p + 8) <= len);
    check_block_at(p, le32(p + 4), 12, &d);
    bm_str_dispose(&s);

    /* gloas: 4 offsets [block, envelope, kzg_proofs, blobs]; slot 16..24, parent 32..64 */
    desc(&d, BS_FORK_GLOAS);
    bs_root_t root = {{0xcc, 0xdd}};
    bs_block_contents_ssz(&s, &d, &root);
    p = (const uint8_t *)bm_str_data(&s);
    len = bm_str_len(&s);
    assert_int_equal(le32(p), 16);
    assert_int_equal(le64(p + 16), d.slot);
    assert_int_equal(le64(p + 24), d.proposer_index);
    assert_memory_equal(p + 32, d.parent_root.b, 32);
    uint32_t env = le32(p + 4);
    assert_true(env > 16 && env < len);
    /* envelope inside: beacon_block_root at u32@4 + 16, parent at + 48, builder at + 8 */
    assert_memory_equal(p + env + 16, root.b, 32);
    assert_memory_equal(p + env + 48, d.parent_root.b, 32);
    assert_int_equal(le64(p + env + 8), UINT64_MAX);
    assert_true(le32(p + 8) <= len && le32(p + 12) == le32(p + 8));
    bm_str_dispose(&s);
}

static void test_signed_block_and_envelope(void **state)
{
    (void)state;
    bs_block_desc_t d;
    desc(&d, BS_FORK_FULU);
    uint8_t sig[96];
    memset(sig, 0x99, sizeof sig);
    bm_str_t s = BM_STR_INIT;
    bs_signed_block_ssz(&s, &d, sig);
    const uint8_t *p = (const uint8_t *)bm_str_data(&s);
    assert_int_equal(le32(p), 100);
    assert_memory_equal(p + 4, sig, 96);
    assert_int_equal(le64(p + 100), d.slot);
    assert_int_equal(le64(p + 108), d.proposer_index);
    assert_memory_equal(p + 116, d.parent_root.b, 32);
    bm_str_dispose(&s);

    desc(&d, BS_FORK_GLOAS);
    bs_root_t root = {{0x11, 0x22}};
    bs_envelope_ssz(&s, &d, &root);
    p = (const uint8_t *)bm_str_data(&s);
    assert_int_equal(le32(p), 80);
    assert_int_equal(le64(p + 8), UINT64_MAX);
    assert_memory_equal(p + 16, root.b, 32);
    assert_memory_equal(p + 48, d.parent_root.b, 32);
    assert_true(le32(p + 4) > 80 && le32(p + 4) + 12 == bm_str_len(&s));
    assert_int_equal(le32(p + 80 + 436), 540); /* gloas payload: extra_data offset */
    bm_str_dispose(&s);
}

static void test_small_containers(void **state)
{
    (void)state;
    bs_att_data_t d = {.slot = 9, .index = 1};
    memset(d.beacon_block_root.b, 0xbb, 32);
    d.source.epoch = 3;
    memset(d.source.root.b, 0x33, 32);
    d.target.epoch = 4;
    memset(d.target.root.b, 0x44, 32);
    bm_str_t s = BM_STR_INIT;
    bs_att_data_ssz(&s, &d);
    const uint8_t *p = (const uint8_t *)bm_str_data(&s);
    assert_int_equal(bm_str_len(&s), 128);
    assert_int_equal(le64(p), 9);
    assert_int_equal(le64(p + 8), 1);
    assert_memory_equal(p + 16, d.beacon_block_root.b, 32);
    assert_int_equal(le64(p + 48), 3);
    assert_memory_equal(p + 56, d.source.root.b, 32);
    assert_int_equal(le64(p + 88), 4);
    assert_memory_equal(p + 96, d.target.root.b, 32);
    bm_str_dispose(&s);

    bs_payload_att_data_ssz(&s, &d.beacon_block_root, 77, true, false);
    p = (const uint8_t *)bm_str_data(&s);
    assert_int_equal(bm_str_len(&s), 42);
    assert_memory_equal(p, d.beacon_block_root.b, 32);
    assert_int_equal(le64(p + 32), 77);
    assert_int_equal(p[40], 1);
    assert_int_equal(p[41], 0);
    bm_str_dispose(&s);

    /* Electra Attestation: off 236, data 4..132, signature 132..228, committee_bits 228..236 */
    uint8_t bits[2] = {0xff, 0x01}; /* 9 of 10 participants */
    uint8_t sig[96];
    memset(sig, 0x5a, 96);
    bs_attestation_ssz(&s, &d, bits, 10, sig);
    p = (const uint8_t *)bm_str_data(&s);
    assert_int_equal(le32(p), 236);
    assert_int_equal(le64(p + 4), 9);
    assert_memory_equal(p + 132, sig, 96);
    assert_int_equal(p[228], 1);
    assert_int_equal(bm_str_len(&s), 236 + 2);
    assert_int_equal(p[236], 0xff);
    assert_int_equal(p[237], 0x01 | 1 << 2); /* bit 8 set, delimiter at bit 10 */
    bm_str_dispose(&s);
}

static const char ATT_DATA[] = "{slot:u,index:u,beacon_block_root:h32,source:{epoch:u,root:h32},"
                               "target:{epoch:u,root:h32}}";

static void check(bm_str_t *s, const char *shape)
{
    char err[256];
    if (!bs_shape_check_text(bm_str_data(s), bm_str_len(s), shape, err, sizeof err))
        fail_msg("%s in %.300s", err, bm_str_data(s));
    bm_str_clear(s);
}

static void test_json_shapes(void **state)
{
    (void)state;
    bs_block_desc_t d;
    bm_str_t s = BM_STR_INIT;
    desc(&d, BS_FORK_FULU);
    bs_block_json(&s, &d);
    check(&s, FULU_BLOCK);
    desc(&d, BS_FORK_GLOAS);
    bs_block_json(&s, &d);
    check(&s, GLOAS_BLOCK);
    bs_root_t root = {{1}};
    bs_envelope_json(&s, &d, &root);
    check(&s, ENVELOPE);
    bs_att_data_t ad = {.slot = 1};
    bs_att_data_json(&s, &ad);
    check(&s, ATT_DATA);
    uint8_t bits[1] = {0x3};
    uint8_t sig[96] = {0};
    bs_attestation_json(&s, &ad, bits, 3, sig);
    char shape[512];
    snprintf(shape, sizeof shape, "{aggregation_bits:hx,data:%s,signature:h96,committee_bits:h8}",
             ATT_DATA);
    check(&s, shape);
    /* the shape checker itself rejects what it should */
    char err[128];
    assert_false(bs_shape_check_text("{\"a\":\"1\",\"b\":1}", 15, "{a:u}", err, sizeof err));
    assert_false(bs_shape_check_text("{\"a\":1}", 7, "{a:u}", err, sizeof err));
    assert_false(bs_shape_check_text("{\"a\":\"0x12\"}", 12, "{a:h2}", err, sizeof err));
    assert_true(bs_shape_check_text("{\"a\":\"0x1234\"}", 14, "{a:h2,b?:u}", err, sizeof err));
    bm_str_dispose(&s);
}

static void test_values_in_block(void **state)
{
    (void)state;
    /* a chain block's description is consistent with the chain */
    bs_chain_cfg_t cfg;
    bs_chain_cfg_default(&cfg);
    cfg.slots_per_epoch = 4;
    cfg.slot_ms = 1000;
    bs_chain_t *c = bs_chain_new(&cfg);
    bs_block_desc_t d;
    bs_block_describe(c, (bs_block_id_t){0, 9}, 7, &d);
    bs_root_t p = bs_chain_root(c, (bs_block_id_t){0, 8});
    assert_true(bs_root_eq(&d.parent_root, &p));
    assert_int_equal(d.proposer_index, 7);
    bs_chain_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_beacon_block),
        cmocka_unit_test(test_block_contents),
        cmocka_unit_test(test_signed_block_and_envelope),
        cmocka_unit_test(test_small_containers),
        cmocka_unit_test(test_json_shapes),
        cmocka_unit_test(test_values_in_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
