/* SPDX-License-Identifier: MIT */
/*
 * test_produce: block production. The rules on synthetic answers first: the parent read
 * from JSON and from SSZ offsets for every fork layout, the parent-or-grandparent rule,
 * value comparison as 256-bit integers above 2^63 and 2^64 with builder_boost_factor
 * 0, 100 and 2^64-1. Then the policy end to end in miniature (fake nodes, the project's
 * server, a head tracker fed by hand, a manual clock the test advances): fresh beats
 * stale, a late head re-orged by the proposer, the deadline, best value, SSZ, and the
 * producing node remembered per slot; answer times to the millisecond.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "duties/produce.h"
#include "fake_chain.h"
#include "fake_node.h"

#define SLOT_MS 12000u
#define SPE 8u

/* ---- synthetic blocks ---------------------------------------------------------------------- */

static char bodies[32][1024];
static int n_bodies;

/* A v3 (fulu BlockContents, or a blinded block) or v4 (gloas BeaconBlock) JSON answer. */
static const char *block_json(uint64_t slot, unsigned parent, unsigned state, bool v4, bool blinded,
                              const char *evalue, const char *cvalue)
{
    char p[67], s[67], *b = bodies[n_bodies++ % 32];
    fake_root_hex(parent, p);
    fake_root_hex(state, s);
    char blk[400];
    snprintf(blk, sizeof blk,
             "{\"slot\":\"%llu\",\"proposer_index\":\"3\",\"parent_root\":\"%s\",\"state_root\":"
             "\"%s\",\"body\":{}}",
             (unsigned long long)slot, p, s);
    if (v4)
        snprintf(b, 1024,
                 "{\"version\":\"gloas\",\"execution_payload_included\":false,"
                 "\"consensus_block_value\":\"%s\",\"data\":%s}",
                 cvalue ? cvalue : "0", blk);
    else if (blinded)
        snprintf(b, 1024,
                 "{\"version\":\"fulu\",\"execution_payload_blinded\":true,"
                 "\"execution_payload_value\":\"%s\",\"consensus_block_value\":\"%s\",\"data\":%s}",
                 evalue ? evalue : "0", cvalue ? cvalue : "0", blk);
    else
        snprintf(b, 1024,
                 "{\"version\":\"fulu\",\"execution_payload_blinded\":false,"
                 "\"execution_payload_value\":\"%s\",\"consensus_block_value\":\"%s\","
                 "\"data\":{\"block\":%s,\"kzg_proofs\":[],\"blobs\":[]}}",
                 evalue ? evalue : "0", cvalue ? cvalue : "0", blk);
    return b;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A (Blinded)BeaconBlock: 84 fixed bytes and a 16-byte body. Returns its length. */
static size_t ssz_block(uint8_t *out, uint64_t slot, unsigned parent, unsigned state)
{
    memset(out, 0, 100);
    put_u64(out, slot);
    put_u64(out + 8, 3);
    fake_root(parent, out + 16);
    fake_root(state, out + 48);
    put_u32(out + 80, 84);
    memset(out + 84, 0xEE, 16);
    return 100;
}

/* A BlockContents with `n_offsets` offsets (3: deneb..fulu, 4: gloas), the block first and
 * 8 bytes for each other field. */
static size_t ssz_contents(uint8_t *out, int n_offsets, uint64_t slot, unsigned parent,
                           unsigned state)
{
    size_t fixed = 4 * (size_t)n_offsets;
    size_t blen = ssz_block(out + fixed, slot, parent, state);
    size_t at = fixed;
    put_u32(out, (uint32_t)at);
    at += blen;
    for (int i = 1; i < n_offsets; i++) {
        put_u32(out + 4 * i, (uint32_t)at);
        memset(out + at, 0x11 * i, 8);
        at += 8;
    }
    return at;
}

static void headers(bm_hdrs_t *h, const char *ctype, const char *fork, const char *blinded,
                    const char *included, const char *evalue, const char *cvalue)
{
    bm_hdrs_init(h);
    if (ctype)
        bm_hdrs_add_z(h, "Content-Type", ctype);
    if (fork)
        bm_hdrs_add_z(h, "Eth-Consensus-Version", fork);
    if (blinded)
        bm_hdrs_add_z(h, "Eth-Execution-Payload-Blinded", blinded);
    if (included)
        bm_hdrs_add_z(h, "Eth-Execution-Payload-Included", included);
    if (evalue)
        bm_hdrs_add_z(h, "Eth-Execution-Payload-Value", evalue);
    if (cvalue)
        bm_hdrs_add_z(h, "Eth-Consensus-Block-Value", cvalue);
}

static void test_parse_json(void **state)
{
    (void)state;
    bm_hdrs_t h;
    bm_produce_block_t b;
    bm_u256_t v;

    /* BlockContents (unblinded fulu): data.block.parent_root; values from the headers */
    headers(&h, "application/json", "fulu", "false", NULL, "18446744073709551617", "7");
    bm_buf_t *body = bm_buf_from_str(block_json(11, 10, 50, false, false, "1", "2"));
    assert_int_equal(bm_produce_parse(&h, body, false, &b), 0);
    assert_int_equal(b.slot, 11);
    assert_int_equal(b.parent_root[2], 10);
    assert_true(b.has_state_root);
    assert_int_equal(b.state_root[2], 50);
    assert_false(b.blinded);
    assert_true(b.has_value);
    assert_int_equal(bm_u256_parse_z("18446744073709551617", &v), 0);
    assert_int_equal(bm_u256_cmp(&b.execution, &v), 0); /* the header, not the JSON field */
    assert_true(bm_u256_to_u64(&b.consensus, NULL));
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);

    /* a blinded block (data.parent_root); values and blinded-ness from the JSON fields */
    headers(&h, NULL, NULL, NULL, NULL, NULL, NULL);
    body = bm_buf_from_str(
        block_json(11, 9, 51, false, true, "340282366920938463463374607431768211456", "5"));
    assert_int_equal(bm_produce_parse(&h, body, false, &b), 0);
    assert_int_equal(b.parent_root[2], 9);
    assert_true(b.blinded);
    assert_int_equal(bm_u256_parse_z("340282366920938463463374607431768211456", &v), 0);
    assert_int_equal(bm_u256_cmp(&b.execution, &v), 0);
    assert_int_equal(b.consensus.w[0], 5);
    bm_buf_unref(body);

    /* v4: a BeaconBlock in data, the consensus value only */
    body = bm_buf_from_str(block_json(11, 8, 52, true, false, NULL, "99"));
    assert_int_equal(bm_produce_parse(&h, body, true, &b), 0);
    assert_int_equal(b.parent_root[2], 8);
    assert_false(b.blinded);
    assert_int_equal(b.consensus.w[0], 99);
    assert_true(bm_u256_is_zero(&b.execution));
    bm_buf_unref(body);

    /* no values at all is fine (has_value false); broken ones are not */
    char r10[67], text[512];
    fake_root_hex(10, r10);
    snprintf(text, sizeof text, "{\"data\":{\"slot\":\"11\",\"parent_root\":\"%s\"}}", r10);
    body = bm_buf_from_str(text);
    assert_int_equal(bm_produce_parse(&h, body, false, &b), 0);
    assert_false(b.has_value);
    assert_false(b.has_state_root);
    assert_int_equal(b.parent_root[2], 10);
    bm_hdrs_dispose(&h);
    headers(&h, NULL, NULL, NULL, NULL, "12x", NULL);
    assert_int_equal(bm_produce_parse(&h, body, false, &b), BM_EINVAL);
    bm_hdrs_dispose(&h);
    headers(&h, NULL, NULL, NULL, NULL, NULL, "-1");
    assert_int_equal(bm_produce_parse(&h, body, false, &b), BM_EINVAL);
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
    headers(&h, NULL, NULL, NULL, NULL, NULL, NULL);
    /* a value that is a JSON number, not a decimal string */
    snprintf(text, sizeof text,
             "{\"consensus_block_value\":12,\"data\":{\"slot\":\"11\",\"parent_root\":\"%s\"}}",
             r10);
    body = bm_buf_from_str(text);
    assert_int_equal(bm_produce_parse(&h, body, false, &b), BM_EINVAL);
    bm_buf_unref(body);
    const char *bad[] = {"{\"data\":{\"slot\":\"11\"}}", "{\"data\":{\"block\":{\"slot\":\"11\"}}}",
                         "[]", "{"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        body = bm_buf_from_str(bad[i]);
        assert_int_equal(bm_produce_parse(&h, body, false, &b), BM_EINVAL);
        bm_buf_unref(body);
    }
    assert_int_equal(bm_produce_parse(&h, NULL, false, &b), BM_EINVAL);
    bm_hdrs_dispose(&h);
}

static void test_parse_ssz_per_fork(void **state)
{
    (void)state;
    static uint8_t raw[256];
    bm_hdrs_t h;
    bm_produce_block_t b;
    const char *oct = "application/octet-stream";
    struct {
        const char *fork, *blinded, *included;
        bool v4;
        int layout; /* 0: bare block, 3 or 4: BlockContents offsets */
    } cases[] = {
        {"phase0", "false", NULL, false, 0},   {"capella", "false", NULL, false, 0},
        {"bellatrix", "true", NULL, false, 0}, {"deneb", "false", NULL, false, 3},
        {"electra", "true", NULL, false, 0},   {"fulu", "false", NULL, false, 3},
        {"gloas", NULL, "false", true, 0},     {"gloas", NULL, "true", true, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* slot 12 on purpose: a bare block whose first bytes look like a 12-byte offset
         * table must still be read as a block, by the headers */
        size_t len = cases[i].layout ? ssz_contents(raw, cases[i].layout, 12, 20 + (unsigned)i, 60)
                                     : ssz_block(raw, 12, 20 + (unsigned)i, 60);
        headers(&h, oct, cases[i].fork, cases[i].blinded, cases[i].included, "1", "2");
        bm_buf_t *body = bm_buf_copy(raw, len);
        memset(&b, 0, sizeof b);
        if (bm_produce_parse(&h, body, cases[i].v4, &b) != 0)
            print_error("case %zu (%s) refused\n", i, cases[i].fork);
        assert_int_equal(bm_produce_parse(&h, body, cases[i].v4, &b), 0);
        assert_int_equal(b.slot, 12);
        assert_int_equal(b.parent_root[2], 20 + i);
        assert_true(b.has_state_root);
        assert_int_equal(b.state_root[2], 60);
        assert_int_equal(b.blinded, cases[i].blinded && strcmp(cases[i].blinded, "true") == 0);
        bm_buf_unref(body);
        bm_hdrs_dispose(&h);
    }
    /* the layout cannot be told without the headers, or with contradicting ones */
    size_t len = ssz_contents(raw, 3, 12, 20, 60);
    bm_buf_t *body = bm_buf_copy(raw, len);
    headers(&h, oct, NULL, "false", NULL, NULL, NULL);
    assert_int_equal(bm_produce_parse(&h, body, false, &b), BM_EINVAL);
    bm_hdrs_dispose(&h);
    headers(&h, oct, "fulu", NULL, NULL, NULL, NULL);
    assert_int_equal(bm_produce_parse(&h, body, false, &b), BM_EINVAL);
    bm_hdrs_dispose(&h);
    headers(&h, oct, "gloas", NULL, NULL, NULL, NULL); /* v4 without -Included */
    assert_int_equal(bm_produce_parse(&h, body, true, &b), BM_EINVAL);
    bm_hdrs_dispose(&h);
    headers(&h, oct, "gloas", "false", NULL, NULL, NULL); /* a V3 answer cannot be gloas */
    assert_int_equal(bm_produce_parse(&h, body, false, &b), BM_EINVAL);
    bm_hdrs_dispose(&h);
    headers(&h, oct, "phase0", "true", NULL, NULL, NULL); /* no blinded block in phase0 */
    assert_int_equal(bm_produce_parse(&h, body, false, &b), BM_EINVAL);
    bm_hdrs_dispose(&h);
    bm_buf_unref(body);
    body = bm_buf_copy(raw, 40); /* truncated */
    headers(&h, oct, "fulu", "false", NULL, NULL, NULL);
    assert_int_equal(bm_produce_parse(&h, body, false, &b), BM_EINVAL);
    bm_hdrs_dispose(&h);
    bm_buf_unref(body);
}

/* The legacy forms: v2 blocks is a full block (BlockContents from Deneb, a bare block
 * before), blinded_blocks a blinded one; neither needs the v3 Blinded header. */
static void test_parse_legacy_forms(void **state)
{
    (void)state;
    static uint8_t raw[256];
    bm_hdrs_t h;
    bm_produce_block_t b;
    const char *oct = "application/octet-stream";
    struct {
        const char *fork;
        bm_produce_form_t form;
        int layout;
        bool blinded;
    } cases[] = {
        {"capella", BM_PRODUCE_FORM_V2, 0, false},
        {"fulu", BM_PRODUCE_FORM_V2, 3, false},
        {"capella", BM_PRODUCE_FORM_BLINDED_V1, 0, true},
        {"fulu", BM_PRODUCE_FORM_BLINDED_V1, 0, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = cases[i].layout ? ssz_contents(raw, cases[i].layout, 12, 30 + (unsigned)i, 61)
                                     : ssz_block(raw, 12, 30 + (unsigned)i, 61);
        headers(&h, oct, cases[i].fork, NULL, NULL, NULL, NULL);
        bm_buf_t *body = bm_buf_copy(raw, len);
        memset(&b, 0, sizeof b);
        assert_int_equal(bm_produce_parse_form(&h, body, cases[i].form, &b), 0);
        assert_int_equal(b.slot, 12);
        assert_int_equal(b.parent_root[2], 30 + i);
        assert_int_equal(b.state_root[2], 61);
        assert_int_equal(b.blinded, cases[i].blinded);
        /* the same bytes as a v3 answer need the Blinded header */
        assert_int_equal(bm_produce_parse_form(&h, body, BM_PRODUCE_FORM_V3, &b), BM_EINVAL);
        bm_buf_unref(body);
        bm_hdrs_dispose(&h);
    }
    /* JSON: BlockContents or a bare block in data, values from the headers when given */
    char blk[300], p[67], st[67];
    fake_root_hex(10, p);
    fake_root_hex(62, st);
    snprintf(blk, sizeof blk,
             "{\"slot\":\"11\",\"proposer_index\":\"3\",\"parent_root\":\"%s\",\"state_root\":"
             "\"%s\",\"body\":{}}",
             p, st);
    char text[600];
    snprintf(text, sizeof text,
             "{\"version\":\"fulu\",\"data\":{\"block\":%s,\"kzg_proofs\":[],\"blobs\":[]}}", blk);
    headers(&h, NULL, "fulu", NULL, NULL, NULL, "7");
    bm_buf_t *body = bm_buf_from_str(text);
    assert_int_equal(bm_produce_parse_form(&h, body, BM_PRODUCE_FORM_V2, &b), 0);
    assert_int_equal(b.slot, 11);
    assert_int_equal(b.parent_root[2], 10);
    assert_false(b.blinded);
    assert_true(b.has_value);
    bm_buf_unref(body);
    snprintf(text, sizeof text, "{\"version\":\"fulu\",\"data\":%s}", blk);
    body = bm_buf_from_str(text);
    assert_int_equal(bm_produce_parse_form(&h, body, BM_PRODUCE_FORM_BLINDED_V1, &b), 0);
    assert_true(b.blinded);
    assert_int_equal(b.state_root[2], 62);
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
}

static void test_parent_rule(void **state)
{
    (void)state;
    bm_expected_t e;
    uint8_t p[32];
    memset(&e, 0, sizeof e);
    fake_root(4, p);
    assert_true(bm_produce_parent_ok(&e, false, p)); /* no expected head: any block */
    e.known = true;
    fake_root(10, e.root);
    e.parent_known = true;
    fake_root(9, e.parent);
    fake_root(10, p);
    assert_true(bm_produce_parent_ok(&e, false, p));
    assert_true(bm_produce_parent_ok(&e, true, p));
    fake_root(9, p);
    assert_false(bm_produce_parent_ok(&e, false, p)); /* the head was on time */
    assert_true(bm_produce_parent_ok(&e, true, p));   /* late: honest proposers re-org it */
    e.parent_known = false;
    assert_false(bm_produce_parent_ok(&e, true, p));
    fake_root(8, p);
    e.parent_known = true;
    assert_false(bm_produce_parent_ok(&e, true, p)); /* never the grandparent */
}

static bm_produce_block_t val(const char *c, const char *e, bool blinded)
{
    bm_produce_block_t b;
    memset(&b, 0, sizeof b);
    assert_int_equal(bm_u256_parse_z(c, &b.consensus), 0);
    assert_int_equal(bm_u256_parse_z(e, &b.execution), 0);
    b.blinded = blinded;
    b.has_value = true;
    return b;
}

static void test_value_order(void **state)
{
    (void)state;
    /* above 2^63 and 2^64, values a double cannot tell apart */
    bm_produce_block_t a = val("0", "18446744073709551617", false);         /* 2^64 + 1 */
    bm_produce_block_t b = val("0", "18446744073709551616", false);         /* 2^64 */
    assert_true((double)18446744073709551615ull == 18446744073709551616.0); /* why it matters */
    assert_true(bm_produce_value_cmp(&a, &b, 100) > 0);
    assert_true(bm_produce_value_cmp(&b, &a, 100) < 0);
    assert_int_equal(bm_produce_value_cmp(&a, &a, 100), 0);
    bm_produce_block_t c = val("9223372036854775808", "9223372036854775809", false); /* 2^63 each */
    assert_true(bm_produce_value_cmp(&c, &a, 100) == 0); /* their sum is 2^64 + 1 */
    bm_produce_block_t d = val("9223372036854775807", "0", false);
    assert_true(bm_produce_value_cmp(&d, &c, 100) < 0);
    /* the consensus value counts too */
    bm_produce_block_t e = val("1", "18446744073709551616", false);
    assert_int_equal(bm_produce_value_cmp(&e, &a, 100), 0);

    /* builder_boost_factor between a local and a builder (blinded) block */
    bm_produce_block_t local = val("0", "1000", false);
    bm_produce_block_t builder = val("0", "5000", true);
    assert_true(bm_produce_value_cmp(&builder, &local, 100) > 0);        /* compare values */
    assert_true(bm_produce_value_cmp(&local, &builder, 0) > 0);          /* always local */
    assert_true(bm_produce_value_cmp(&builder, &local, 10) < 0);         /* 5000 * 10% = 500 */
    assert_true(bm_produce_value_cmp(&builder, &local, 20) == 0);        /* 1000 == 1000 */
    assert_true(bm_produce_value_cmp(&builder, &local, UINT64_MAX) > 0); /* prefer builder */
    /* with 100 the builder's value is rounded down to a multiple of 100 */
    bm_produce_block_t b1099 = val("0", "1099", true);
    bm_produce_block_t l1050 = val("0", "1050", false);
    assert_true(bm_produce_value_cmp(&b1099, &l1050, 100) < 0); /* 1000 < 1050 */
    /* a boost that overflows 256 bits beats every local value */
    bm_produce_block_t huge = val("0",
                                  "115792089237316195423570985008687907853269984665640564039457"
                                  "584007913129639935",
                                  true);
    bm_produce_block_t lhuge = val("1",
                                   "115792089237316195423570985008687907853269984665640564"
                                   "039457584007913129639933",
                                   false);
    assert_true(bm_produce_value_cmp(&huge, &lhuge, UINT64_MAX) > 0);
    /* boost 0 keeps builders below every local block, and orders builders by value */
    bm_produce_block_t rich = val("1000000", "1000000000000000000000", true);
    bm_produce_block_t poor = val("0", "1", false);
    assert_true(bm_produce_value_cmp(&rich, &poor, 0) < 0);
    assert_true(bm_produce_value_cmp(&rich, &builder, 0) > 0);
    /* builder_boost_factor from the query */
    const char *q = "randao_reveal=0x00&builder_boost_factor=18446744073709551615";
    assert_true(bm_produce_boost(q, strlen(q)) == UINT64_MAX);
    q = "builder_boost_factor=0";
    assert_int_equal(bm_produce_boost(q, strlen(q)), 0);
    q = "builder_boost_factor=18446744073709551616";
    assert_int_equal(bm_produce_boost(q, strlen(q)), 100);
    assert_int_equal(bm_produce_boost(NULL, 0), 100);
}

/* ---- the policy end to end ------------------------------------------------------------- */

typedef struct pfx {
    fake_mux_t *m;
    bm_hint_t *hint;
    fake_chain_t c;
    bm_produce_t *p;
} pfx_t;

static void free_produce(void *p)
{
    bm_produce_free(p);
}

/* The wall clock is `into_ms` into slot 11; the chain 7..10 exists, block 10 announced
 * `head_at_ms` into slot 10 (the head is block 10). */
static void pfx_init(pfx_t *t, uint64_t into_ms, uint64_t head_at_ms, const bm_produce_opts_t *o)
{
    memset(t, 0, sizeof *t);
    t->m = fake_mux_new_manual(false);
    uint64_t now = bm_clock_wall_now(t->m->clock);
    uint64_t genesis = now - 11 * SLOT_MS - into_ms;
    bm_chain_info_t info;
    fake_chain_info(&info, genesis, SLOT_MS, SPE, 0, BM_FAR_FUTURE_EPOCH);
    fake_chain_init(&t->c, 2, &info, now);
    for (unsigned id = 7; id <= 10; id++)
        fake_block(&t->c, id, id, id - 1);
    for (unsigned id = 7; id <= 9; id++)
        fake_head(&t->c, 0, id, genesis + id * SLOT_MS + 500, BM_PAYLOAD_UNKNOWN);
    fake_head(&t->c, 0, 10, genesis + 10 * SLOT_MS + head_at_ms, BM_PAYLOAD_UNKNOWN);
    assert_int_equal(fake_cluster_id(&t->c), 10);
    t->hint = bm_hint_new(NULL);
    assert_non_null(t->hint);
    bm_hint_set_chain(t->hint, &t->c.info);
    bm_hint_set_head(t->hint, t->c.t);
    t->p = bm_produce_new(t->m->clock, t->m->eng, t->m->pool, t->hint, o);
    assert_non_null(t->p);
    t->m->module = t->p;
    t->m->module_free = free_produce;
    assert_int_equal(bm_produce_register(t->p, t->m->router), 0);
}

static void pfx_free(pfx_t *t)
{
    fake_mux_free(t->m);
    bm_hint_free(t->hint);
    fake_chain_dispose(&t->c);
}

#define V3 "/eth/v3/validator/blocks/11?randao_reveal=0x00"

/* A v3 JSON step with the value headers. */
static fake_step_t step_v3(uint32_t delay, unsigned parent, unsigned state, const char *ev,
                           const char *cv)
{
    fake_step_t s = {.status = 200,
                     .delay_ms = delay,
                     .body = block_json(11, parent, state, false, false, ev, cv)};
    s.hdrs[0][0] = "Eth-Consensus-Version";
    s.hdrs[0][1] = "fulu";
    s.hdrs[1][0] = "Eth-Execution-Payload-Blinded";
    s.hdrs[1][1] = "false";
    s.hdrs[2][0] = "Eth-Execution-Payload-Value";
    s.hdrs[2][1] = ev;
    s.hdrs[3][0] = "Eth-Consensus-Block-Value";
    s.hdrs[3][1] = cv;
    return s;
}

static int served_parent(const fake_call_t *c)
{
    bm_produce_block_t b;
    bm_buf_t *body = bm_buf_copy(c->body, c->body_len);
    int rc = bm_produce_parse(&c->hdrs, body, false, &b);
    bm_buf_unref(body);
    return rc == 0 ? b.parent_root[2] : -1;
}

static void test_fresh_beats_stale(void **state)
{
    (void)state;
    pfx_t t;
    pfx_init(&t, 200, 1000, NULL);
    fake_step_t sa = step_v3(5, 9, 41, "900", "900");    /* fast, on a stale parent */
    fake_step_t sb = step_v3(120, 10, 42, "100", "100"); /* on the head */
    fake_mux_node(t.m, &sa, 1);
    fake_node_t *b = fake_mux_node(t.m, &sb, 1);
    assert_int_equal(bm_produce_node_for_slot(t.p, 11, NULL, NULL), -1);
    fake_call_t *c = fake_mux_get(t.m, V3, NULL);
    fake_mux_advance(t.m, 120);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(served_parent(c), 10);
    assert_string_equal(bm_hdrs_get(&c->hdrs, "eth-consensus-version"), "fulu");
    assert_string_equal(bm_hdrs_get(&c->hdrs, "eth-execution-payload-value"), "100");
    assert_int_equal(fake_call_ms(c), 120);
    /* the producing node is remembered, with its block's state_root */
    uint8_t sr[32];
    bool has;
    assert_int_equal(bm_produce_node_for_slot(t.p, 11, sr, &has), b->node->index);
    assert_true(has);
    assert_int_equal(sr[2], 42);
    assert_int_equal(bm_produce_node_for_slot(t.p, 11 + BM_PRODUCE_MEMORY_SLOTS, sr, &has), -1);
    assert_false(has);
    assert_int_equal(bm_produce_node_for_slot(t.p, 10, NULL, NULL), -1);
    bm_produce_stats_t st = bm_produce_stats(t.p);
    assert_int_equal(st.served, 1);
    assert_int_equal(st.accepted, 1);
    assert_int_equal(st.fallback, 0);
    pfx_free(&t);
}

typedef struct remembered {
    int n;
    uint64_t slot;
    int node;
    uint8_t sr2; /* byte 2 of the state root; 0 when none */
    uint64_t time_ms;
} remembered_t;

static void on_remember(void *ud, uint64_t slot, int node, const uint8_t *state_root,
                        uint64_t time_ms)
{
    remembered_t *r = ud;
    r->time_ms = time_ms;
    r->n++;
    r->slot = slot;
    r->node = node;
    r->sr2 = state_root ? state_root[2] : 0;
}

/* Shared state: a production served is told (the other instances learn it); one learnt from
 * another instance answers bm_produce_node_for_slot as if served here, and is not told. */
static void test_remembered_told_and_learnt(void **state)
{
    (void)state;
    pfx_t t;
    pfx_init(&t, 200, 1000, NULL);
    remembered_t r = {0};
    bm_produce_on_remember(t.p, on_remember, &r);
    fake_node_t *b = fake_mux_node1(t.m, step_v3(20, 10, 42, "100", "100"));
    fake_call_t *c = fake_mux_get(t.m, V3, NULL);
    fake_mux_advance(t.m, 20);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.slot, 11);
    assert_int_equal(r.node, b->node->index);
    assert_int_equal(r.sr2, 42);
    uint8_t root[32] = {0}, sr[32];
    bool has;
    root[2] = 77;
    assert_true(r.time_ms > 0 && r.time_ms <= bm_clock_wall_now(t.m->clock));
    bm_produce_learn(t.p, 12, 3, root, 5000);
    assert_int_equal(bm_produce_node_for_slot(t.p, 12, sr, &has), 3);
    assert_true(has);
    assert_int_equal(sr[2], 77);
    /* two records of one slot: the newer wins, whichever comes last */
    bm_produce_learn(t.p, 12, 1, NULL, 4999);
    assert_int_equal(bm_produce_node_for_slot(t.p, 12, sr, &has), 3);
    bm_produce_learn(t.p, 12, 2, NULL, 5001);
    assert_int_equal(bm_produce_node_for_slot(t.p, 12, sr, &has), 2);
    assert_false(has);
    bm_produce_learn(t.p, 13, 1, NULL, 5000);
    assert_int_equal(bm_produce_node_for_slot(t.p, 13, sr, &has), 1);
    assert_false(has);
    /* what the memory holds is listed with its times (written back after an outage) */
    remembered_t all = {0};
    bm_produce_each(t.p, on_remember, &all);
    assert_int_equal(all.n, 3); /* slots 11 (served), 12 and 13 */
    /* a slot the ring has moved past is not learnt over a newer one */
    bm_produce_learn(t.p, 12 + BM_PRODUCE_MEMORY_SLOTS, 2, NULL, 5000);
    bm_produce_learn(t.p, 12, 0, NULL, 9000);
    assert_int_equal(bm_produce_node_for_slot(t.p, 12 + BM_PRODUCE_MEMORY_SLOTS, NULL, NULL), 2);
    assert_int_equal(bm_produce_node_for_slot(t.p, 12, NULL, NULL), -1);
    assert_int_equal(r.n, 1); /* nothing learnt was told */
    pfx_free(&t);
}

static void test_late_head_reorged(void **state)
{
    (void)state;
    /* block 10 reached the cluster 5 s into its slot, after the attestation due time
     * (4 s): the proposer of slot 11 builds on block 9, and that block is accepted at once */
    pfx_t t;
    pfx_init(&t, 200, 5000, NULL);
    fake_step_t sb = {0}; /* hung */
    fake_mux_node1(t.m, step_v3(5, 9, 43, "1", "1"));
    fake_mux_node(t.m, &sb, 1);
    fake_call_t *c = fake_mux_get(t.m, V3, NULL);
    fake_mux_advance(t.m, 5);
    fake_mux_wait(t.m, c);
    assert_int_equal(served_parent(c), 9);
    assert_int_equal(fake_call_ms(c), 5); /* not held until the deadline (1.8 s away) */
    assert_int_equal(bm_produce_stats(t.p).accepted, 1);
    pfx_free(&t);

    /* late again, but the fast node is known to be behind the late head (its own head is
     * block 9): its block on 9 is stale, not a re-org; the node holding 10 and building on 9
     * on purpose wins */
    pfx_init(&t, 200, 5000, NULL);
    fake_head(&t.c, 1, 9, bm_clock_wall_now(t.m->clock), BM_PAYLOAD_UNKNOWN);
    fake_step_t stale = step_v3(5, 9, 44, "1", "1");
    fake_mux_node1(t.m, step_v3(150, 9, 43, "1", "1")); /* index 0: holds block 10 */
    fake_mux_node(t.m, &stale, 1);                      /* index 1: behind */
    c = fake_mux_get(t.m, V3, NULL);
    fake_mux_advance(t.m, 150);
    fake_mux_wait(t.m, c);
    assert_int_equal(served_parent(c), 9);
    assert_int_equal(fake_call_ms(c), 150);
    assert_int_equal(bm_produce_node_for_slot(t.p, 11, NULL, NULL), 0);
    pfx_free(&t);

    /* the same block while the head was on time (3 s): not accepted, the head's wins */
    pfx_init(&t, 200, 3000, NULL);
    fake_mux_node1(t.m, step_v3(5, 9, 43, "1", "1"));
    fake_mux_node1(t.m, step_v3(150, 10, 44, "1", "1"));
    c = fake_mux_get(t.m, V3, NULL);
    fake_mux_advance(t.m, 150);
    fake_mux_wait(t.m, c);
    assert_int_equal(served_parent(c), 10);
    assert_int_equal(fake_call_ms(c), 150);
    pfx_free(&t);
}

static void release_headers(bm_timer_t *timer, void *ud)
{
    (void)timer;
    pfx_t *t = ud;
    fake_chain_release(&t->c, bm_clock_wall_now(t->m->clock));
}

static void test_head_moving_holds_the_old_parent(void **state)
{
    (void)state;
    pfx_t t;
    pfx_init(&t, 200, 1000, NULL);
    /* node 1 announced block 11 (header on its way, released at 100 ms); a block for
     * slot 12 on block 10 (still the cluster head) must wait for it */
    fake_block(&t.c, 11, 11, 10);
    t.c.defer = true;
    fake_head(&t.c, 1, 11, bm_clock_wall_now(t.m->clock), BM_PAYLOAD_UNKNOWN);
    bm_timer_t *timer = bm_timer_new(t.m->clock, release_headers, &t);
    assert_non_null(timer);
    bm_timer_start(timer, 100);
    fake_step_t sa = {
        .status = 200, .delay_ms = 5, .body = block_json(12, 10, 40, false, false, "1", "1")};
    fake_step_t sb = {
        .status = 200, .delay_ms = 20, .body = block_json(12, 11, 41, false, false, "1", "1")};
    fake_mux_node(t.m, &sa, 1);
    fake_mux_node(t.m, &sb, 1);
    fake_call_t *c = fake_mux_get(t.m, "/eth/v3/validator/blocks/12?randao_reveal=0x00", NULL);
    /* neither block is served before the header arrived; both nodes are re-asked at 250 (the
     * production re-ask interval), and b's block on 11 comes 20 ms later */
    fake_mux_advance(t.m, 269);
    assert_false(c->done);
    assert_int_equal(fake_cluster_id(&t.c), 11);
    fake_mux_advance(t.m, 1);
    fake_mux_wait(t.m, c);
    assert_int_equal(served_parent(c), 11);
    assert_int_equal(fake_call_ms(c), 270);
    bm_timer_close(timer, NULL, NULL);
    pfx_free(&t);
}

static void test_deadline_first_2xx(void **state)
{
    (void)state;
    bm_produce_opts_t o;
    bm_produce_opts_default(&o);
    assert_int_equal(o.proposal_deadline_ms, 2000);
    o.proposal_deadline_ms = 700; /* the clock is 200 ms into the slot: 500 ms to go */
    o.repoll_interval_ms = 100;
    pfx_t t;
    pfx_init(&t, 200, 1000, &o);
    fake_node_t *a = fake_mux_node1(t.m, step_v3(5, 8, 45, "1", "1"));
    fake_mux_node1(t.m, step_v3(40, 9, 46, "1", "1"));
    fake_call_t *c = fake_mux_get(t.m, V3, NULL);
    /* nothing acceptable: the stale nodes are re-asked every 100 ms until the deadline (at
     * 500); the last re-asks start at 400 and are answered by 440, after which nothing more
     * can come: the first 2xx goes out then */
    fake_mux_done_1ms_after(t.m, c, 439);
    uint64_t deadline = t.c.info.clock.genesis_ms + 11 * SLOT_MS + 700;
    assert_int_equal(c->end_ms, deadline - 60);
    assert_int_equal(c->status, 200);
    assert_int_equal(served_parent(c), 8);
    assert_int_equal(a->requests, 5);
    assert_int_equal(bm_produce_node_for_slot(t.p, 11, NULL, NULL), a->node->index);
    assert_int_equal(bm_produce_stats(t.p).fallback, 1);
    pfx_free(&t);
}

static void test_best_value(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        bm_produce_opts_t o;
        bm_produce_opts_default(&o);
        o.selection = mode ? BM_PRODUCE_BEST_VALUE : BM_PRODUCE_FIRST;
        o.best_value_grace_ms = 300;
        pfx_t t;
        pfx_init(&t, 200, 1000, &o);
        /* a: first, 2^64 + 1; b: 2^64 + 2 (a double sees them equal); c: stale and richest */
        fake_node_t *a = fake_mux_node1(t.m, step_v3(5, 10, 47, "18446744073709551617", "0"));
        fake_node_t *b = fake_mux_node1(t.m, step_v3(60, 10, 48, "18446744073709551617", "1"));
        fake_mux_node1(t.m, step_v3(10, 9, 49, "99999999999999999999999", "0"));
        fake_call_t *c = fake_mux_get(t.m, V3, NULL);
        /* first: at once; best value: at the end of the grace opened by a (5 + 300) */
        fake_mux_advance(t.m, mode ? 305 : 5);
        fake_mux_wait(t.m, c);
        assert_int_equal(fake_call_ms(c), mode ? 305 : 5);
        assert_int_equal(served_parent(c), 10);
        if (mode) {
            assert_string_equal(bm_hdrs_get(&c->hdrs, "eth-consensus-block-value"), "1");
            assert_int_equal(bm_produce_node_for_slot(t.p, 11, NULL, NULL), b->node->index);
        } else {
            assert_int_equal(bm_produce_node_for_slot(t.p, 11, NULL, NULL), a->node->index);
        }
        pfx_free(&t);
    }

    /* builder_boost_factor=0 from the query: the local block beats a richer builder's */
    bm_produce_opts_t o;
    bm_produce_opts_default(&o);
    o.selection = BM_PRODUCE_BEST_VALUE;
    o.best_value_grace_ms = 200;
    pfx_t t;
    pfx_init(&t, 200, 1000, &o);
    fake_step_t builder = {.status = 200,
                           .delay_ms = 5,
                           .body = block_json(11, 10, 50, false, true, "5000", "0"),
                           .hdrs = {{"Eth-Execution-Payload-Blinded", "true"}}};
    fake_step_t local = step_v3(50, 10, 51, "10", "0");
    fake_mux_node(t.m, &builder, 1);
    fake_node_t *l = fake_mux_node(t.m, &local, 1);
    fake_call_t *c = fake_mux_get(t.m, V3 "&builder_boost_factor=0", NULL);
    fake_mux_advance(t.m, 205);
    fake_mux_wait(t.m, c);
    assert_int_equal(bm_produce_node_for_slot(t.p, 11, NULL, NULL), l->node->index);
    /* ... and with the default (100) the builder's block wins */
    fake_node_script(l, &local, 1);
    c = fake_mux_get(t.m, V3, NULL);
    fake_mux_advance(t.m, 205);
    fake_mux_wait(t.m, c);
    assert_int_equal(bm_produce_node_for_slot(t.p, 11, NULL, NULL), 0);
    pfx_free(&t);
}

/* No node can produce (all hung; hung + 5xx; hung + down): failing nodes are asked again
 * until the proposal deadline (a request after it: maxHold more), then a 503 names each
 * node's failure. */
static void test_nothing_usable_answers_by_the_end(void **state)
{
    (void)state;
    const char *to = bm_strerror(BM_ETIMEDOUT), *refused = bm_strerror(BM_ECONNREFUSED);
    for (int kase = 0; kase < 4; kase++) {
        pfx_t t;
        /* 200 ms into slot 11 (the deadline is 1800 ms away); the last case 2500 ms in */
        pfx_init(&t, kase == 3 ? 2500 : 200, 1000, NULL);
        fake_step_t hang = {0};
        fake_step_t boom = {.status = 500, .body = "{\"code\":500,\"message\":\"boom\"}"};
        fake_mux_node(t.m, &hang, 1);
        fake_node_t *b = fake_mux_node(t.m, kase == 1 ? &boom : &hang, 1);
        fake_node_t *c3 = fake_mux_node(t.m, kase == 1 ? &boom : &hang, 1);
        if (kase == 2) {
            fake_node_down(b);
            fake_node_down(c3);
        }
        uint64_t end = kase == 3 ? 1000 : 1800;
        fake_call_t *c = fake_mux_get(t.m, V3, NULL);
        fake_mux_done_1ms_after(t.m, c, end - 1);
        assert_int_equal(fake_call_ms(c), end);
        assert_int_equal(c->status, 503);
        char want[512];
        if (kase == 1)
            snprintf(want, sizeof want,
                     "{\"code\":503,\"message\":\"no usable answer: a: %s; b: 500 boom; c: 500 "
                     "boom\"}",
                     to);
        else
            snprintf(want, sizeof want,
                     "{\"code\":503,\"message\":\"no upstream answered: a: %s; b: %s; c: %s\"}", to,
                     kase == 2 ? refused : to, kase == 2 ? refused : to);
        assert_string_equal(c->body, want);
        if (kase == 1)
            assert_int_equal(b->requests, 8); /* every 250 ms: 0, 250, ..., 1750 */
        assert_int_equal(bm_produce_stats(t.p).failed, 1);
        pfx_free(&t);
    }
}

/*
 * A block that cannot be produced any more is refused at once, without asking any node
 * (issue 12, bug 1: such requests ended races that counted against every node): a slot over
 * by more than the clock disparity (500 ms), and a slot whose start no clock can hold.
 * Within the disparity the slot is still raced (a validator's clock may run a little late).
 */
static void test_unservable_slots(void **state)
{
    (void)state;
    for (int kase = 0; kase < 2; kase++) {
        pfx_t t;
        /* slot 10 ended 500 ms ago (the disparity: still raced), or 501 ms ago */
        pfx_init(&t, kase == 0 ? 500 : 501, 1000, NULL);
        fake_step_t no = {.status = 400, .body = "{\"code\":400,\"message\":\"node says\"}"};
        fake_node_t *a = fake_mux_node(t.m, &no, 1);
        static const char *const targets[] = {
            "/eth/v3/validator/blocks/9?randao_reveal=0x00",
            "/eth/v3/validator/blocks/18446744073709551615?randao_reveal=0x00",
            "/eth/v4/validator/blocks/18446744073709551615?randao_reveal=0x00",
            "/eth/v2/validator/blocks/1537228672809129301?randao_reveal=0x00",
            "/eth/v1/validator/blinded_blocks/9?randao_reveal=0x00",
        };
        for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
            fake_call_t *c = fake_mux_get(t.m, targets[i], NULL);
            fake_mux_wait(t.m, c);
            if (c->status != 400 || strstr(c->body, "node says") || fake_call_ms(c) != 0)
                fail_msg("%s: %d after %llu ms: %s", targets[i], c->status,
                         (unsigned long long)fake_call_ms(c), c->body);
        }
        assert_int_equal(a->requests, 0);
        fake_call_t *c = fake_mux_get(t.m, "/eth/v3/validator/blocks/10?randao_reveal=0x00", NULL);
        fake_mux_wait(t.m, c);
        assert_int_equal(c->status, 400);
        if (kase == 0) {
            assert_non_null(strstr(c->body, "node says")); /* raced: the node's own answer */
            assert_int_equal(a->requests, 1);
        } else {
            assert_null(strstr(c->body, "node says"));
            assert_non_null(strstr(c->body, "slot 10 is over"));
            assert_int_equal(a->requests, 0);
        }
        /* the current slot is raced as ever */
        c = fake_mux_get(t.m, V3, NULL);
        fake_mux_wait(t.m, c);
        assert_non_null(strstr(c->body, "node says"));
        pfx_free(&t);
    }
}

/* The legacy production routes race like v3: a fresh block beats a stale one, the producer
 * is remembered for the matching publish, and hung nodes answer by the end. */
static void test_legacy_routes(void **state)
{
    (void)state;
    static const struct {
        const char *path;
        bool blinded;
    } routes[] = {
        {"/eth/v2/validator/blocks/11?randao_reveal=0x00", false},
        {"/eth/v1/validator/blinded_blocks/11?randao_reveal=0x00", true},
    };
    for (size_t r = 0; r < 2; r++) {
        pfx_t t;
        pfx_init(&t, 200, 1000, NULL);
        char blk[2][420];
        for (int i = 0; i < 2; i++) {
            char p[67], st[67];
            fake_root_hex(i ? 10 : 9, p);
            fake_root_hex(i ? 42 : 41, st);
            char b[320];
            snprintf(b, sizeof b,
                     "{\"slot\":\"11\",\"proposer_index\":\"3\",\"parent_root\":\"%s\","
                     "\"state_root\":\"%s\",\"body\":{}}",
                     p, st);
            if (routes[r].blinded)
                snprintf(blk[i], sizeof blk[i], "{\"version\":\"fulu\",\"data\":%s}", b);
            else
                snprintf(blk[i], sizeof blk[i],
                         "{\"version\":\"fulu\",\"data\":{\"block\":%s,\"kzg_proofs\":[],"
                         "\"blobs\":[]}}",
                         b);
        }
        fake_step_t stale = {.status = 200,
                             .delay_ms = 5,
                             .body = blk[0],
                             .hdrs = {{"Eth-Consensus-Version", "fulu"}}};
        fake_step_t fresh = stale;
        fresh.delay_ms = 120;
        fresh.body = blk[1];
        fake_node_t *a = fake_mux_node(t.m, &stale, 1);
        fake_node_t *b = fake_mux_node(t.m, &fresh, 1);
        fake_call_t *c = fake_mux_get(t.m, routes[r].path, NULL);
        fake_mux_advance(t.m, 120);
        fake_mux_wait(t.m, c);
        assert_int_equal(c->status, 200);
        assert_string_equal(c->body, blk[1]);
        assert_int_equal(fake_call_ms(c), 120);
        assert_int_equal(a->requests, 1); /* re-asked only after 250 ms */
        assert_string_equal(fake_node_last(b)->target, routes[r].path);
        uint8_t sr[32];
        bool has;
        assert_int_equal(bm_produce_node_for_slot(t.p, 11, sr, &has), b->node->index);
        assert_true(has);
        assert_int_equal(sr[2], 42);
        /* every node hung: a 503 naming each at the proposal deadline, 2000 ms into the
         * slot (the clock is 320 ms in) */
        fake_step_t hang = {0};
        fake_node_script(a, &hang, 1);
        fake_node_script(b, &hang, 1);
        c = fake_mux_get(t.m, routes[r].path, NULL);
        fake_mux_done_1ms_after(t.m, c, 1679);
        assert_int_equal(c->status, 503);
        assert_int_equal(fake_call_ms(c), 1680);
        pfx_free(&t);
    }
}

static void test_ssz_v3_and_v4(void **state)
{
    (void)state;
    pfx_t t;
    pfx_init(&t, 200, 1000, NULL);
    static uint8_t stale[256], fresh[256];
    size_t ls = ssz_contents(stale, 3, 11, 9, 70);
    size_t lf = ssz_contents(fresh, 3, 11, 10, 71);
    fake_step_t sa = {
        .status = 200,
        .delay_ms = 5,
        .body = stale,
        .len = ls,
        .ctype = "application/octet-stream",
        .hdrs = {{"Eth-Consensus-Version", "fulu"}, {"Eth-Execution-Payload-Blinded", "false"}}};
    fake_step_t sb = sa;
    sb.delay_ms = 80;
    sb.body = fresh;
    sb.len = lf;
    fake_mux_node(t.m, &sa, 1);
    fake_node_t *b = fake_mux_node(t.m, &sb, 1);
    fake_call_t *c = fake_mux_get(t.m, V3, "application/octet-stream");
    fake_mux_advance(t.m, 80);
    fake_mux_wait(t.m, c);
    assert_int_equal(fake_call_ms(c), 80);
    assert_int_equal(c->body_len, lf);
    assert_memory_equal(c->body, fresh, lf);
    assert_string_equal(fake_node_last(b)->accept, "application/octet-stream");
    uint8_t sr[32];
    bool has;
    assert_int_equal(bm_produce_node_for_slot(t.p, 11, sr, &has), b->node->index);
    assert_true(has);
    assert_int_equal(sr[2], 71);

    /* v4 (Gloas BlockContents with the envelope) */
    static uint8_t g[256];
    size_t lg = ssz_contents(g, 4, 11, 10, 72);
    fake_step_t sg = {
        .status = 200,
        .delay_ms = 5,
        .body = g,
        .len = lg,
        .ctype = "application/octet-stream",
        .hdrs = {{"Eth-Consensus-Version", "gloas"}, {"Eth-Execution-Payload-Included", "true"}}};
    fake_node_script(&t.m->nodes.node[0], &sg, 1);
    fake_step_t hang = {0};
    fake_node_script(b, &hang, 1);
    c = fake_mux_get(t.m, "/eth/v4/validator/blocks/11?randao_reveal=0x00&include_payload=true",
                     "application/octet-stream");
    fake_mux_advance(t.m, 5);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->body_len, lg);
    assert_int_equal(bm_produce_node_for_slot(t.p, 11, sr, &has), 0);
    assert_int_equal(sr[2], 72);

    /* a bad slot is refused here */
    c = fake_mux_get(t.m, "/eth/v3/validator/blocks/x1", NULL);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->status, 400);
    c = fake_mux_get(t.m, "/eth/v4/validator/blocks/0", NULL);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->status, 400);
    pfx_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_json),
        cmocka_unit_test(test_parse_ssz_per_fork),
        cmocka_unit_test(test_parse_legacy_forms),
        cmocka_unit_test(test_parent_rule),
        cmocka_unit_test(test_value_order),
        cmocka_unit_test(test_fresh_beats_stale),
        cmocka_unit_test(test_remembered_told_and_learnt),
        cmocka_unit_test(test_late_head_reorged),
        cmocka_unit_test(test_head_moving_holds_the_old_parent),
        cmocka_unit_test(test_deadline_first_2xx),
        cmocka_unit_test(test_best_value),
        cmocka_unit_test(test_nothing_usable_answers_by_the_end),
        cmocka_unit_test(test_unservable_slots),
        cmocka_unit_test(test_legacy_routes),
        cmocka_unit_test(test_ssz_v3_and_v4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
