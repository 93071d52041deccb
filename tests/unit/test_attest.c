/* SPDX-License-Identifier: MIT */
/*
 * test_attest: the fresh-head reads. First the rules on synthetic answers (parsing by
 * Content-Type, the root rule, the Gloas index rule, the payload attestation rule, the
 * coalescing key before and after Electra); then the policy end to end in miniature:
 * fake nodes on loopback answering from scripts, the policy behind the project's server,
 * a head tracker fed by hand, all on a manual clock that the test advances (the nodes'
 * delays too). Each test asserts who answered, what, how many requests each node saw and
 * when, to the millisecond.
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
#include "base/json.h"
#include "base/ssz.h"
#include "duties/attest.h"
#include "fake_chain.h"
#include "fake_node.h"

#define SLOT_MS 12000u
#define SPE 8u

/* ---- synthetic answers ------------------------------------------------------------------- */

static char bodies[32][512];
static int n_bodies;

/* An attestation_data JSON body (kept for the test's lifetime). */
/* Attestation data of `slot` on block `root`, with the source (epoch 0, block `source`) and
 * target (epoch 1, block `target`) given. */
static const char *att_cp_json(uint64_t slot, uint64_t index, unsigned root, unsigned source,
                               unsigned target)
{
    char hex[67], src[67], tgt[67], *b = bodies[n_bodies++ % 32];
    fake_root_hex(root, hex);
    fake_root_hex(source, src);
    fake_root_hex(target, tgt);
    snprintf(b, 512,
             "{\"data\":{\"slot\":\"%llu\",\"index\":\"%llu\",\"beacon_block_root\":\"%s\","
             "\"source\":{\"epoch\":\"0\",\"root\":\"%s\"},\"target\":{\"epoch\":\"1\",\"root\":"
             "\"%s\"}}}",
             (unsigned long long)slot, (unsigned long long)index, hex, src, tgt);
    return b;
}

/* Attestation data with the checkpoints every honest node of the chain gives (source: block
 * 1 of epoch 0, target: block 8, the first of epoch 1). */
static const char *att_json(uint64_t slot, uint64_t index, unsigned root)
{
    return att_cp_json(slot, index, root, 1, 8);
}

static const char *root_json(unsigned root)
{
    char hex[67], *b = bodies[n_bodies++ % 32];
    fake_root_hex(root, hex);
    snprintf(b, 512,
             "{\"execution_optimistic\":false,\"finalized\":false,\"data\":{\"root\":\"%s\"}}",
             hex);
    return b;
}

static const char *payload_json(uint64_t slot, unsigned root, bool present)
{
    char hex[67], *b = bodies[n_bodies++ % 32];
    fake_root_hex(root, hex);
    snprintf(b, 512,
             "{\"version\":\"gloas\",\"data\":{\"beacon_block_root\":\"%s\",\"slot\":\"%llu\","
             "\"payload_present\":%s,\"blob_data_available\":true}}",
             hex, (unsigned long long)slot, present ? "true" : "false");
    return b;
}

static void att_ssz(uint8_t out[128], uint64_t slot, uint64_t index, unsigned root)
{
    memset(out, 0, 128);
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(slot >> (8 * i));
        out[8 + i] = (uint8_t)(index >> (8 * i));
    }
    fake_root(root, out + 16);
    fake_root(1, out + 56); /* source: epoch 0, block 1 */
    out[88] = 1;            /* target: epoch 1, block 8 */
    fake_root(8, out + 96);
}

static bm_buf_t *buf(const char *s)
{
    bm_buf_t *b = bm_buf_from_str(s);
    assert_non_null(b);
    return b;
}

static void test_parse_data(void **state)
{
    (void)state;
    bm_hdrs_t json, ssz, ssz_param;
    bm_hdrs_init(&json);
    bm_hdrs_init(&ssz);
    bm_hdrs_init(&ssz_param);
    bm_hdrs_add_z(&json, "Content-Type", "application/json");
    bm_hdrs_add_z(&ssz, "Content-Type", "application/octet-stream");
    bm_hdrs_add_z(&ssz_param, "content-type", " Application/Octet-Stream; q=1");
    bm_attest_data_t d;
    uint8_t r7[32];
    fake_root(7, r7);

    bm_buf_t *b = buf(att_json(12, 1, 7));
    assert_int_equal(bm_attest_parse_data(&json, b, &d), 0);
    assert_int_equal(d.slot, 12);
    assert_int_equal(d.index, 1);
    assert_memory_equal(d.beacon_block_root, r7, 32);
    assert_int_equal(d.checkpoints.source.epoch, 0);
    assert_int_equal(d.checkpoints.source.root[2], 1);
    assert_int_equal(d.checkpoints.target.epoch, 1);
    assert_int_equal(d.checkpoints.target.root[2], 8);
    /* without a Content-Type a body is read as JSON; as SSZ it is refused */
    assert_int_equal(bm_attest_parse_data(NULL, b, &d), 0);
    assert_int_equal(bm_attest_parse_data(&ssz, b, &d), BM_EINVAL);
    bm_buf_unref(b);

    uint8_t raw[128];
    att_ssz(raw, 0x0102030405060708ull, 1, 9);
    b = bm_buf_copy(raw, 128);
    memset(&d, 0, sizeof d);
    assert_int_equal(bm_attest_parse_data(&ssz, b, &d), 0);
    assert_int_equal(d.slot, 0x0102030405060708ull);
    assert_int_equal(d.index, 1);
    assert_int_equal(d.beacon_block_root[2], 9);
    assert_int_equal(d.checkpoints.source.epoch, 0);
    assert_int_equal(d.checkpoints.source.root[2], 1);
    assert_int_equal(d.checkpoints.target.epoch, 1);
    assert_int_equal(d.checkpoints.target.root[2], 8);
    assert_int_equal(bm_attest_parse_data(&ssz_param, b, &d), 0);
    assert_int_equal(bm_attest_parse_data(&json, b, &d), BM_EINVAL);
    bm_buf_unref(b);
    b = bm_buf_copy(raw, 127); /* an AttestationData is exactly 128 bytes */
    assert_int_equal(bm_attest_parse_data(&ssz, b, &d), BM_EINVAL);
    bm_buf_unref(b);

    const char *bad[] = {
        "{\"data\":{\"slot\":\"1\",\"index\":\"0\"}}",
        "{\"data\":{\"slot\":\"x\",\"index\":\"0\",\"beacon_block_root\":\"0x00\"}}",
        "not json",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        b = buf(bad[i]);
        assert_int_equal(bm_attest_parse_data(&json, b, &d), BM_EINVAL);
        bm_buf_unref(b);
    }
    assert_int_equal(bm_attest_parse_data(&json, NULL, &d), BM_EINVAL);

    uint8_t root[32];
    b = buf(root_json(7));
    assert_int_equal(bm_attest_parse_root(b, root), 0);
    assert_memory_equal(root, r7, 32);
    bm_buf_unref(b);
    b = buf("{\"data\":{}}");
    assert_int_equal(bm_attest_parse_root(b, root), BM_EINVAL);
    bm_buf_unref(b);
    bm_hdrs_dispose(&json);
    bm_hdrs_dispose(&ssz);
    bm_hdrs_dispose(&ssz_param);
}

static bm_expected_t expect_head(unsigned root, uint64_t slot, bool cluster, bool slot_known,
                                 bool full)
{
    bm_expected_t e;
    memset(&e, 0, sizeof e);
    e.known = true;
    fake_root(root, e.root);
    e.slot = slot;
    e.slot_known = slot_known;
    e.is_cluster_head = cluster;
    e.payload_full = full;
    return e;
}

static bm_attest_data_t data(uint64_t slot, uint64_t index, unsigned root)
{
    bm_attest_data_t d;
    d.slot = slot;
    d.index = index;
    fake_root(root, d.beacon_block_root);
    return d;
}

static void test_root_and_index_rules(void **state)
{
    (void)state;
    bm_attest_data_t d;
    /* no expected head: anything goes (start-up) */
    bm_expected_t none;
    memset(&none, 0, sizeof none);
    d = data(10, 1, 3);
    assert_true(bm_attest_data_ok(&none, true, 10, &d));
    assert_int_equal(bm_attest_expected_index(&none, 10), -1);

    /* before Gloas: the root decides, the index is the committee's */
    bm_expected_t e = expect_head(5, 10, true, true, false);
    d = data(10, 7, 5);
    assert_true(bm_attest_data_ok(&e, false, 10, &d));
    d = data(10, 0, 4);
    assert_false(bm_attest_data_ok(&e, false, 10, &d));

    /* Gloas, the head is the block of the requested slot: index 0, even when full */
    e = expect_head(5, 10, true, true, true);
    assert_int_equal(bm_attest_expected_index(&e, 10), 0);
    d = data(10, 0, 5);
    assert_true(bm_attest_data_ok(&e, true, 10, &d));
    d = data(10, 1, 5);
    assert_false(bm_attest_data_ok(&e, true, 10, &d));

    /* Gloas, the head is from an earlier slot with its payload full: index 1 */
    e = expect_head(5, 9, true, true, true);
    assert_int_equal(bm_attest_expected_index(&e, 10), 1);
    d = data(10, 1, 5);
    assert_true(bm_attest_data_ok(&e, true, 10, &d));
    d = data(10, 0, 5);
    assert_false(bm_attest_data_ok(&e, true, 10, &d));
    d = data(10, 1, 6); /* the right index does not save the wrong root */
    assert_false(bm_attest_data_ok(&e, true, 10, &d));

    /* ... with its payload not known full: index 0 */
    e = expect_head(5, 9, true, true, false);
    assert_int_equal(bm_attest_expected_index(&e, 10), 0);
    d = data(10, 0, 5);
    assert_true(bm_attest_data_ok(&e, true, 10, &d));
    d = data(10, 1, 5);
    assert_false(bm_attest_data_ok(&e, true, 10, &d));

    /* a past slot whose block is older (payload status unknown): the index is not judged */
    e = expect_head(5, 10, false, false, false);
    assert_int_equal(bm_attest_expected_index(&e, 10), -1);
    d = data(10, 1, 5);
    assert_true(bm_attest_data_ok(&e, true, 10, &d));
    d = data(10, 0, 5);
    assert_true(bm_attest_data_ok(&e, true, 10, &d));
    /* a past slot whose own block is known: index 0 */
    e = expect_head(5, 10, false, true, false);
    assert_int_equal(bm_attest_expected_index(&e, 10), 0);
}

static void test_payload_rules(void **state)
{
    (void)state;
    bm_hdrs_t json, ssz;
    bm_hdrs_init(&json);
    bm_hdrs_init(&ssz);
    bm_hdrs_add_z(&json, "Content-Type", "application/json");
    bm_hdrs_add_z(&ssz, "Content-Type", "application/octet-stream");
    bm_attest_payload_t p;

    bm_buf_t *b = buf(payload_json(20, 4, true));
    assert_int_equal(bm_attest_parse_payload(&json, b, &p), 0);
    assert_int_equal(p.slot, 20);
    assert_true(p.payload_present);
    assert_true(p.blob_data_available);
    assert_int_equal(p.beacon_block_root[2], 4);
    bm_buf_unref(b);

    uint8_t raw[42] = {0};
    fake_root(4, raw);
    raw[32] = 20;
    raw[40] = 0;
    raw[41] = 1;
    b = bm_buf_copy(raw, 42);
    assert_int_equal(bm_attest_parse_payload(&ssz, b, &p), 0);
    assert_int_equal(p.slot, 20);
    assert_false(p.payload_present);
    assert_true(p.blob_data_available);
    bm_buf_unref(b);
    raw[40] = 2; /* not an SSZ boolean */
    b = bm_buf_copy(raw, 42);
    assert_int_equal(bm_attest_parse_payload(&ssz, b, &p), BM_EINVAL);
    bm_buf_unref(b);
    b = bm_buf_copy(raw, 41);
    assert_int_equal(bm_attest_parse_payload(&ssz, b, &p), BM_EINVAL);
    bm_buf_unref(b);

    bm_expected_t none;
    memset(&none, 0, sizeof none);
    p.slot = 20;
    fake_root(4, p.beacon_block_root);
    p.payload_present = false;
    assert_true(bm_attest_payload_ok(&none, 20, &p));
    assert_false(bm_attest_payload_ok(&none, 21, &p)); /* another slot's data: never */
    /* the block of the slot, payload not known full */
    bm_expected_t e = expect_head(4, 20, true, true, false);
    assert_true(bm_attest_payload_ok(&e, 20, &p));
    /* the cluster knows it full: payload_present is needed */
    e.payload_full = true;
    assert_false(bm_attest_payload_ok(&e, 20, &p));
    p.payload_present = true;
    assert_true(bm_attest_payload_ok(&e, 20, &p));
    /* the cluster's block is from an earlier slot: nothing for slot 20 is accepted */
    e = expect_head(4, 19, true, true, false);
    assert_false(bm_attest_payload_ok(&e, 20, &p));
    /* another root */
    e = expect_head(3, 20, true, true, false);
    assert_false(bm_attest_payload_ok(&e, 20, &p));
    bm_hdrs_dispose(&json);
    bm_hdrs_dispose(&ssz);
}

static void test_coalescing_key(void **state)
{
    (void)state;
    char a[256], b[256];
    /* before Electra the committee index is part of the key */
    assert_true(bm_attest_data_key(a, sizeof a, 5, "1", "application/json", true) > 0);
    assert_true(bm_attest_data_key(b, sizeof b, 5, "2", "application/json", true) > 0);
    assert_string_not_equal(a, b);
    assert_true(bm_attest_data_key(b, sizeof b, 5, "1", "application/json", true) > 0);
    assert_string_equal(a, b);
    assert_true(bm_attest_data_key(b, sizeof b, 5, NULL, "application/json", true) > 0);
    assert_string_not_equal(a, b);
    /* from Electra every committee shares the race */
    assert_true(bm_attest_data_key(a, sizeof a, 5, "1", "application/json", false) > 0);
    assert_true(bm_attest_data_key(b, sizeof b, 5, "2", "application/json", false) > 0);
    assert_string_equal(a, b);
    assert_true(bm_attest_data_key(b, sizeof b, 5, NULL, "application/json", false) > 0);
    assert_string_equal(a, b);
    /* slot and Accept always count */
    assert_true(bm_attest_data_key(b, sizeof b, 6, "1", "application/json", false) > 0);
    assert_string_not_equal(a, b);
    assert_true(bm_attest_data_key(b, sizeof b, 5, "1", "application/octet-stream", false) > 0);
    assert_string_not_equal(a, b);
    assert_true(bm_attest_data_key(b, sizeof b, 5, "1", NULL, false) > 0);
    assert_string_not_equal(a, b);
    /* too small a buffer */
    assert_int_equal(bm_attest_data_key(b, 10, 5, "1", "application/json", false), -1);
    /* the text, and a buffer that holds it exactly (with its NUL) or one byte less */
    const char *want = "GET /eth/v1/validator/attestation_data slot=18446744073709551615 ci=7 "
                       "accept=application/json";
    int n = bm_attest_data_key(a, sizeof a, UINT64_MAX, "7", "application/json", true);
    assert_int_equal(n, (int)strlen(want));
    assert_string_equal(a, want);
    assert_int_equal(
        bm_attest_data_key(b, strlen(want) + 1, UINT64_MAX, "7", "application/json", true), n);
    assert_string_equal(b, want);
    assert_int_equal(bm_attest_data_key(b, strlen(want), UINT64_MAX, "7", "application/json", true),
                     -1);
    n = bm_attest_data_key(b, sizeof b, 0, NULL, NULL, false);
    assert_string_equal(b, "GET /eth/v1/validator/attestation_data slot=0 ci=* accept=-");
    assert_int_equal(n, (int)strlen(b));
}

/* ---- the policy end to end ------------------------------------------------------------- */

typedef struct tfx {
    fake_mux_t *m;
    bm_hint_t *hint;
    fake_chain_t c;
    bm_attest_t *a;
    uint64_t slot; /* the current slot */
} tfx_t;

static void free_attest(void *p)
{
    bm_attest_free(p);
}

/* beaconmux with the attest policy (options `ao`, NULL: defaults); the wall clock is
 * `into_ms` into slot 10 of a chain whose gloas epoch is `gloas_epoch`; `hold` (NULL:
 * defaults) for every duty. */
static void tfx_init_opts(tfx_t *t, uint64_t into_ms, uint64_t electra_epoch, uint64_t gloas_epoch,
                          const bm_hint_hold_t *hold, const bm_attest_opts_t *ao)
{
    memset(t, 0, sizeof *t);
    t->m = fake_mux_new_manual(false);
    uint64_t now = bm_clock_wall_now(t->m->clock);
    t->slot = 10;
    bm_chain_info_t info;
    fake_chain_info(&info, now - 10 * SLOT_MS - into_ms, SLOT_MS, SPE, electra_epoch, gloas_epoch);
    fake_chain_init(&t->c, 3, &info, now);
    bm_hint_opts_t o;
    if (hold)
        for (int d = 0; d < BM_HINT_DUTY_COUNT; d++)
            o.hold[d] = *hold;
    t->hint = bm_hint_new(hold ? &o : NULL);
    assert_non_null(t->hint);
    bm_hint_set_chain(t->hint, &t->c.info);
    bm_hint_set_head(t->hint, t->c.t);
    t->a = bm_attest_new(t->m->clock, t->m->eng, t->m->pool, t->hint, ao);
    assert_non_null(t->a);
    t->m->module = t->a;
    t->m->module_free = free_attest;
    assert_int_equal(bm_attest_register(t->a, t->m->router), 0);
}

static void tfx_init(tfx_t *t, uint64_t into_ms, uint64_t electra_epoch, uint64_t gloas_epoch,
                     const bm_hint_hold_t *hold)
{
    tfx_init_opts(t, into_ms, electra_epoch, gloas_epoch, hold, NULL);
}

/* The cluster chain 7, 8, 9, 10 (one block per slot, id = slot); the head is `head`. */
static void tfx_chain(tfx_t *t, unsigned head, bm_payload_status_t payload)
{
    uint64_t now = bm_clock_wall_now(t->m->clock);
    for (unsigned id = 7; id <= 10; id++)
        fake_block(&t->c, id, id, id - 1);
    for (unsigned id = 7; id <= head; id++)
        fake_head(&t->c, 0, id, now, id == head ? payload : BM_PAYLOAD_UNKNOWN);
    assert_int_equal(fake_cluster_id(&t->c), (int)head);
}

/* Most tests' fixture: 3 s into slot 10, Electra from genesis, no Gloas, no hold options,
 * the cluster head at block 10. */
static void tfx_default(tfx_t *t)
{
    tfx_init(t, 3000, 0, BM_FAR_FUTURE_EPOCH, NULL);
    tfx_chain(t, 10, BM_PAYLOAD_UNKNOWN);
}

static void tfx_free(tfx_t *t)
{
    fake_mux_free(t->m);
    bm_hint_free(t->hint);
    fake_chain_dispose(&t->c);
}

static int body_root(const fake_call_t *c)
{
    bm_attest_data_t d;
    bm_buf_t *b = bm_buf_copy(c->body, c->body_len);
    int rc = bm_attest_parse_data(&c->hdrs, b, &d);
    bm_buf_unref(b);
    return rc == 0 ? d.beacon_block_root[2] : -1;
}

static void test_stale_node_loses(void **state)
{
    (void)state;
    tfx_t t;
    tfx_default(&t);
    /* a: fast and stale; b: fresh after 150 ms; c: hung */
    fake_node_t *a = fake_mux_node1(t.m, FAKE_STATUS(200, 5, att_json(10, 0, 9)));
    fake_mux_node1(t.m, FAKE_STATUS(200, 150, att_json(10, 0, 10)));
    fake_mux_node1(t.m, FAKE_HANG);
    fake_call_t *c = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10", NULL);
    fake_mux_done_1ms_after(t.m, c, 149);
    assert_int_equal(c->status, 200);
    assert_int_equal(body_root(c), 10);
    assert_string_equal(bm_hdrs_get(&c->hdrs, "content-type"), "application/json");
    /* the stale node was re-asked (at 50 and 100) while the fresh one was on its way */
    assert_true(a->requests >= 3);
    assert_int_equal(fake_call_ms(c), 150);
    bm_attest_stats_t st = bm_attest_stats(t.a);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.races, 1);
    assert_int_equal(st.fallback, 0);
    tfx_free(&t);
}

static void test_stale_node_catches_up(void **state)
{
    (void)state;
    tfx_t t;
    tfx_default(&t);
    /* the only answering node is stale twice, then has the head: the re-ask wins */
    fake_step_t sa[] = {FAKE_STATUS(200, 5, att_json(10, 0, 9)),
                        FAKE_STATUS(200, 5, att_json(10, 0, 9)),
                        FAKE_STATUS(200, 5, att_json(10, 0, 10))};
    fake_node_t *a = fake_mux_node(t.m, sa, 3);
    fake_mux_node1(t.m, FAKE_HANG);
    fake_call_t *c = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10", NULL);
    /* asked at 0, 50 and 100 (the re-ask interval), each answering 5 ms later */
    fake_mux_advance(t.m, 105);
    fake_mux_wait(t.m, c);
    assert_int_equal(body_root(c), 10);
    assert_int_equal(a->requests, 3);
    assert_int_equal(fake_call_ms(c), 105);
    tfx_free(&t);
}

static void release_headers(bm_timer_t *timer, void *ud)
{
    (void)timer;
    tfx_t *t = ud;
    fake_chain_release(&t->c, bm_clock_wall_now(t->m->clock));
}

static void test_head_moving_holds_the_old_head(void **state)
{
    (void)state;
    tfx_t t;
    tfx_init(&t, 3000, 0, BM_FAR_FUTURE_EPOCH, NULL);
    tfx_chain(&t, 9, BM_PAYLOAD_UNKNOWN);
    /* node 1 just announced block 10; its header is on the way (released at 100 ms) */
    t.c.defer = true;
    fake_head(&t.c, 1, 10, bm_clock_wall_now(t.m->clock), BM_PAYLOAD_UNKNOWN);
    assert_int_equal(fake_cluster_id(&t.c), 9);
    bm_timer_t *timer = bm_timer_new(t.m->clock, release_headers, &t);
    assert_non_null(timer);
    bm_timer_start(timer, 100);
    /* a answers block 9 (still the cluster head) at once; b answers block 10 */
    fake_mux_node1(t.m, FAKE_STATUS(200, 5, att_json(10, 0, 9)));
    fake_mux_node1(t.m, FAKE_STATUS(200, 20, att_json(10, 0, 10)));
    fake_call_t *c = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10", NULL);
    /* neither is served while the header is on its way: a's block 9 is about to be
     * replaced, b's block 10 is not the cluster head yet */
    fake_mux_advance(t.m, 99);
    assert_false(c->done);
    assert_int_equal(fake_cluster_id(&t.c), 9);
    /* at 100 the header arrives and both are re-asked: b's block 10 comes 20 ms later */
    fake_mux_advance(t.m, 21);
    fake_mux_wait(t.m, c);
    assert_int_equal(body_root(c), 10);
    assert_int_equal(fake_cluster_id(&t.c), 10);
    assert_int_equal(fake_call_ms(c), 120);
    bm_timer_close(timer, NULL, NULL);
    tfx_free(&t);
}

static void test_deadline_fallback(void **state)
{
    (void)state;
    tfx_t t;
    bm_hint_hold_t hold = {.hold_floor_ms = 300, .max_hold_ms = 1000};
    /* 6 s into the slot: past the attestation due time, so the floor is the deadline */
    tfx_init(&t, 6000, 0, BM_FAR_FUTURE_EPOCH, &hold);
    tfx_chain(&t, 10, BM_PAYLOAD_UNKNOWN);
    fake_mux_node1(t.m, FAKE_STATUS(200, 5, att_json(10, 0, 9)));
    fake_mux_node1(t.m, FAKE_STATUS(503, 5, "{\"code\":503,\"message\":\"syncing\"}"));
    fake_call_t *c = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10", NULL);
    fake_mux_done_1ms_after(t.m, c, 299);
    /* voting stale beats not voting: the stale 200, at the deadline */
    assert_int_equal(c->status, 200);
    assert_int_equal(body_root(c), 9);
    assert_int_equal(fake_call_ms(c), 300);
    assert_int_equal(bm_attest_stats(t.a).fallback, 1);
    tfx_free(&t);
}

static void test_no_cluster_head_first_2xx(void **state)
{
    (void)state;
    tfx_t t;
    tfx_init(&t, 3000, 0, BM_FAR_FUTURE_EPOCH, NULL);
    /* no head event yet: the first 2xx wins at once, whatever its root */
    fake_node_t *a = fake_mux_node1(t.m, FAKE_STATUS(200, 5, att_json(10, 0, 9)));
    fake_mux_node1(t.m, FAKE_STATUS(200, 400, att_json(10, 0, 10)));
    fake_call_t *c = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10", NULL);
    fake_mux_advance(t.m, 5);
    fake_mux_wait(t.m, c);
    assert_int_equal(body_root(c), 9);
    assert_int_equal(a->requests, 1);
    assert_int_equal(fake_call_ms(c), 5);
    tfx_free(&t);
}

static void test_coalescing(void **state)
{
    (void)state;
    for (int pre = 0; pre <= 1; pre++) {
        tfx_t t;
        /* electra from epoch 0, or (pre) not scheduled */
        tfx_init(&t, 3000, pre ? BM_FAR_FUTURE_EPOCH : 0, BM_FAR_FUTURE_EPOCH, NULL);
        tfx_chain(&t, 10, BM_PAYLOAD_UNKNOWN);
        fake_step_t s = FAKE_STATUS(200, 300, att_json(10, 0, 10));
        fake_node_t *a = fake_mux_node(t.m, &s, 1);
        fake_node_t *b = fake_mux_node(t.m, &s, 1);
        fake_call_t *c[8];
        for (int i = 0; i < 8; i++) {
            char path[128];
            snprintf(path, sizeof path,
                     "/eth/v1/validator/attestation_data?slot=10&committee_index=%d", i % 2);
            c[i] = fake_mux_get(t.m, path, "application/json");
        }
        fake_mux_advance(t.m, 300);
        for (int i = 0; i < 8; i++) {
            fake_mux_wait(t.m, c[i]);
            assert_int_equal(c[i]->status, 200);
            assert_int_equal(body_root(c[i]), 10);
            assert_string_equal(c[i]->body, c[0]->body);
            assert_int_equal(fake_call_ms(c[i]), 300);
        }
        /* one race per distinct key: one from Electra on, one per committee before */
        bm_attest_stats_t st = bm_attest_stats(t.a);
        assert_int_equal(st.requests, 8);
        assert_int_equal(st.races, pre ? 2 : 1);
        assert_int_equal(st.joined, pre ? 6 : 7);
        assert_int_equal(st.fallback, 0); /* every request got an accepted answer */
        assert_int_equal(a->requests, pre ? 2 : 1);
        assert_int_equal(b->requests, pre ? 2 : 1);
        tfx_free(&t);
    }
}

/* Requests sharing a race that serves a stale answer at its deadline: each is served the
 * same bytes and counted as served without the expected head, by the race's verdict. */
static void test_coalesced_fallback(void **state)
{
    (void)state;
    tfx_t t;
    bm_hint_hold_t hold = {.hold_floor_ms = 300, .max_hold_ms = 1000};
    tfx_init(&t, 6000, 0, BM_FAR_FUTURE_EPOCH, &hold);
    tfx_chain(&t, 10, BM_PAYLOAD_UNKNOWN);
    fake_mux_node1(t.m, FAKE_STATUS(200, 5, att_json(10, 0, 9)));
    fake_call_t *c[4];
    for (int i = 0; i < 4; i++)
        c[i] = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10", NULL);
    fake_mux_advance(t.m, 300);
    for (int i = 0; i < 4; i++) {
        fake_mux_wait(t.m, c[i]);
        assert_int_equal(c[i]->status, 200);
        assert_int_equal(body_root(c[i]), 9);
        assert_string_equal(c[i]->body, c[0]->body);
    }
    bm_attest_stats_t st = bm_attest_stats(t.a);
    assert_int_equal(st.races, 1);
    assert_int_equal(st.joined, 3);
    assert_int_equal(st.fallback, 4);
    assert_int_equal(st.checkpoint_refused, 0);
    tfx_free(&t);
}

static void test_ssz_and_headers(void **state)
{
    (void)state;
    tfx_t t;
    tfx_default(&t);
    static uint8_t stale[128], fresh[128];
    att_ssz(stale, 10, 0, 9);
    att_ssz(fresh, 10, 0, 10);
    fake_step_t sa = {.status = 200,
                      .delay_ms = 5,
                      .body = stale,
                      .len = 128,
                      .ctype = "application/octet-stream"};
    fake_step_t sb = {.status = 200,
                      .delay_ms = 100,
                      .body = fresh,
                      .len = 128,
                      .ctype = "application/octet-stream",
                      .hdrs = {{"Eth-Consensus-Version", "fulu"}, {"X-Node", "b"}}};
    fake_mux_node(t.m, &sa, 1);
    fake_node_t *b = fake_mux_node(t.m, &sb, 1);
    fake_call_t *c[3];
    for (int i = 0; i < 3; i++)
        c[i] = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10",
                            "application/octet-stream");
    fake_mux_advance(t.m, 100);
    for (int i = 0; i < 3; i++) {
        fake_mux_wait(t.m, c[i]);
        assert_int_equal(c[i]->status, 200);
        assert_int_equal(c[i]->body_len, 128);
        assert_memory_equal(c[i]->body, fresh, 128);
        /* every waiter gets the winner's headers */
        assert_string_equal(bm_hdrs_get(&c[i]->hdrs, "content-type"), "application/octet-stream");
        assert_string_equal(bm_hdrs_get(&c[i]->hdrs, "eth-consensus-version"), "fulu");
        assert_string_equal(bm_hdrs_get(&c[i]->hdrs, "x-node"), "b");
    }
    assert_string_equal(fake_node_last(b)->accept, "application/octet-stream");
    assert_int_equal(b->requests, 1);
    tfx_free(&t);
}

static void test_gloas_index(void **state)
{
    (void)state;
    tfx_t t;
    tfx_init(&t, 3000, 0, 0, NULL); /* Gloas from genesis */
    /* the head is the block of slot 9 with its payload full; data for slot 10 */
    for (unsigned id = 7; id <= 9; id++)
        fake_block(&t.c, id, id, id - 1);
    uint64_t now = bm_clock_wall_now(t.m->clock);
    for (unsigned id = 7; id <= 9; id++)
        fake_head(&t.c, 0, id, now, BM_PAYLOAD_EMPTY);
    fake_head(&t.c, 0, 9, now, BM_PAYLOAD_FULL);
    fake_step_t sa = FAKE_STATUS(200, 5, att_json(10, 0, 9));  /* says empty */
    fake_step_t sb = FAKE_STATUS(200, 80, att_json(10, 1, 9)); /* says full */
    fake_mux_node(t.m, &sa, 1);
    fake_mux_node(t.m, &sb, 1);
    fake_call_t *c = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10", NULL);
    fake_mux_advance(t.m, 80);
    fake_mux_wait(t.m, c);
    assert_int_equal(fake_call_ms(c), 80);
    bm_attest_data_t d;
    bm_buf_t *bb = bm_buf_copy(c->body, c->body_len);
    assert_int_equal(bm_attest_parse_data(NULL, bb, &d), 0);
    bm_buf_unref(bb);
    assert_int_equal(d.index, 1);
    assert_int_equal(d.beacon_block_root[2], 9);
    tfx_free(&t);
}

static void test_head_root(void **state)
{
    (void)state;
    tfx_t t;
    tfx_default(&t);
    fake_node_t *a = fake_mux_node1(t.m, FAKE_STATUS(200, 5, root_json(9)));
    fake_mux_node1(t.m, FAKE_STATUS(200, 60, root_json(10)));
    fake_call_t *c = fake_mux_get(t.m, "/eth/v1/beacon/blocks/head/root", NULL);
    fake_mux_advance(t.m, 60);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(fake_call_ms(c), 60);
    uint8_t root[32];
    bm_buf_t *bb = bm_buf_copy(c->body, c->body_len);
    assert_int_equal(bm_attest_parse_root(bb, root), 0);
    bm_buf_unref(bb);
    assert_int_equal(root[2], 10);
    assert_int_equal(a->requests, 2); /* the stale node re-asked at 50 */
    tfx_free(&t);
}

static void test_payload_attestation(void **state)
{
    (void)state;
    tfx_t t;
    bm_hint_hold_t hold = {.hold_floor_ms = 300, .max_hold_ms = 1000};
    tfx_init(&t, 9500, 0, 0, &hold); /* past the PTC due time (9 s): deadline = floor */
    tfx_chain(&t, 10, BM_PAYLOAD_UNKNOWN);
    /* a: no block seen (204) at once; b: the block of slot 10 after 100 ms */
    fake_mux_node1(t.m, FAKE_STATUS(204, 5, ""));
    fake_node_t *b = fake_mux_node1(t.m, FAKE_STATUS(200, 100, payload_json(10, 10, true)));
    fake_call_t *c = fake_mux_get(t.m, "/eth/v1/validator/payload_attestation_data?slot=10", NULL);
    fake_mux_advance(t.m, 100);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "\"payload_present\":true"));
    assert_int_equal(fake_call_ms(c), 100);

    /* everyone says 204: the 204 is never accepted; both nodes are re-asked until the
     * deadline (300), and once the last re-asks that start before it (at 250) answered
     * nothing more can come: the 204 is served then */
    fake_step_t s204 = FAKE_STATUS(204, 5, "");
    fake_node_script(b, &s204, 1);
    c = fake_mux_get(t.m, "/eth/v1/validator/payload_attestation_data?slot=10", NULL);
    fake_mux_done_1ms_after(t.m, c, 254);
    assert_int_equal(c->status, 204);
    assert_int_equal(fake_call_ms(c), 255);

    /* the cluster knows the payload is full: a 200 without payload_present loses to one
     * with it, and to the deadline a 200 beats a 204 */
    fake_head(&t.c, 0, 10, bm_clock_wall_now(t.m->clock), BM_PAYLOAD_FULL);
    fake_step_t absent = FAKE_STATUS(200, 5, payload_json(10, 10, false));
    fake_node_script(b, &absent, 1);
    c = fake_mux_get(t.m, "/eth/v1/validator/payload_attestation_data?slot=10", NULL);
    fake_mux_advance(t.m, 255);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "\"payload_present\":false"));
    assert_int_equal(fake_call_ms(c), 255);
    fake_step_t present[] = {FAKE_STATUS(200, 5, payload_json(10, 10, false)),
                             FAKE_STATUS(200, 5, payload_json(10, 10, true))};
    fake_node_script(b, present, 2);
    c = fake_mux_get(t.m, "/eth/v1/validator/payload_attestation_data?slot=10", NULL);
    fake_mux_advance(t.m, 55); /* re-asked at 50, answered 5 ms later */
    fake_mux_wait(t.m, c);
    assert_non_null(strstr(c->body, "\"payload_present\":true"));
    assert_int_equal(fake_call_ms(c), 55);
    tfx_free(&t);
}

/* The three reads of this policy, each about slot 10 (head root: the current slot). */
static const char *const READS[] = {
    "/eth/v1/validator/attestation_data?slot=10",
    "/eth/v1/beacon/blocks/head/root",
    "/eth/v1/validator/payload_attestation_data?slot=10",
};

/* Nodes that cannot serve the read: hung, failing, down. With nothing usable a read keeps
 * asking every node until the later of maxHold and the duty's due time, never longer, and
 * then answers a 503 naming each node's failure. `into` is the clock's place in slot 10;
 * `end` the expected answer time from the request; `want` the 503's message. */
static void no_node_can_serve(const char *read, uint64_t into, const fake_step_t *steps, int n,
                              uint64_t end, const char *want)
{
    tfx_t t;
    tfx_init(&t, into, 0, strstr(read, "payload") ? 0 : BM_FAR_FUTURE_EPOCH, NULL);
    tfx_chain(&t, 10, BM_PAYLOAD_UNKNOWN);
    fake_node_t *nodes[3];
    for (int i = 0; i < n; i++)
        nodes[i] = steps[i].status < 0 ? fake_node_add_refused(&t.m->nodes)
                                       : fake_mux_node(t.m, &steps[i], 1);
    for (int i = 0; i < n; i++)
        nodes[i]->node->state = BM_NODE_READY;
    fake_call_t *c = fake_mux_get(t.m, read, NULL);
    fake_mux_done_1ms_after(t.m, c, end - 1);
    assert_int_equal(fake_call_ms(c), end);
    assert_int_equal(c->status, 503);
    assert_string_equal(c->body, want);
    tfx_free(&t);
}

static void test_nothing_usable_answers_by_the_end(void **state)
{
    (void)state;
    const fake_step_t hang = FAKE_HANG;
    const fake_step_t boom = FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"boom\"}");
    const fake_step_t down = {.status = -1};
    char timed_out[64], refused[64];
    snprintf(timed_out, sizeof timed_out, "%s", bm_strerror(BM_ETIMEDOUT));
    snprintf(refused, sizeof refused, "%s", bm_strerror(BM_ECONNREFUSED));
    for (size_t r = 0; r < sizeof READS / sizeof READS[0]; r++) {
        char want[512];
        /* all hung, 6 s into the slot (every due time but the PTC's is over): maxHold */
        fake_step_t all_hung[] = {hang, hang, hang};
        uint64_t end = r == 2 ? 3000 : 1000; /* the PTC is due 9 s into the slot */
        snprintf(want, sizeof want,
                 "{\"code\":503,\"message\":\"no upstream answered: a: %s; b: %s; c: %s\"}",
                 timed_out, timed_out, timed_out);
        no_node_can_serve(READS[r], 6000, all_hung, 3, end, want);
        /* hung + 5xx: the failing nodes are asked again and again, then named */
        fake_step_t hung_5xx[] = {hang, boom, boom};
        snprintf(want, sizeof want,
                 "{\"code\":503,\"message\":\"no usable answer: a: %s; b: 500 boom; c: 500 "
                 "boom\"}",
                 timed_out);
        no_node_can_serve(READS[r], 6000, hung_5xx, 3, end, want);
        /* hung + down */
        fake_step_t hung_down[] = {hang, down, down};
        snprintf(want, sizeof want,
                 "{\"code\":503,\"message\":\"no upstream answered: a: %s; b: %s; c: %s\"}",
                 timed_out, refused, refused);
        no_node_can_serve(READS[r], 6000, hung_down, 3, end, want);
    }
    /* asked early in the slot: the attestation is due later than maxHold, and the read
     * keeps asking until then (a node that recovers can still serve the vote) */
    fake_step_t all_hung[] = {hang, hang};
    char want[256];
    snprintf(want, sizeof want, "{\"code\":503,\"message\":\"no upstream answered: a: %s; b: %s\"}",
             timed_out, timed_out);
    no_node_can_serve(READS[0], 500, all_hung, 2, 3499, want);
}

/* A failing node that recovers within the hold serves the read. */
static void test_failing_node_recovers(void **state)
{
    (void)state;
    tfx_t t;
    tfx_init(&t, 6000, 0, BM_FAR_FUTURE_EPOCH, NULL);
    tfx_chain(&t, 10, BM_PAYLOAD_UNKNOWN);
    fake_step_t sa[] = {FAKE_STATUS(503, 0, "{\"code\":503,\"message\":\"restarting\"}"),
                        FAKE_STATUS(503, 0, "{\"code\":503,\"message\":\"restarting\"}"),
                        FAKE_STATUS(200, 0, att_json(10, 0, 10))};
    fake_node_t *a = fake_mux_node(t.m, sa, 3);
    fake_mux_node1(t.m, FAKE_HANG);
    fake_call_t *c = fake_mux_get(t.m, READS[0], NULL);
    fake_mux_advance(t.m, 100);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(body_root(c), 10);
    assert_int_equal(fake_call_ms(c), 100); /* asked again at 50 and 100 */
    assert_int_equal(a->requests, 3);
    tfx_free(&t);
}

/* Live checkpoints: before the nodes agreed on the epoch's checkpoints the answer on the head
 * is served, whatever they are; the slower nodes' answers are still taken (the race lets them
 * finish), their agreement contradicts what was served and is counted; from then on an answer
 * with other checkpoints is neither accepted nor a fallback, and costs no time. */
static void test_checkpoints_live(void **state)
{
    (void)state;
    tfx_t t;
    tfx_default(&t);
    /* c is fast and names another source (block 66); a and b agree */
    fake_step_t bad = FAKE_STATUS(200, 5, att_cp_json(10, 0, 10, 66, 8));
    fake_mux_node1(t.m, FAKE_STATUS(200, 20, att_json(10, 0, 10)));
    fake_mux_node1(t.m, FAKE_STATUS(200, 30, att_json(10, 0, 10)));
    fake_mux_node(t.m, &bad, 1);
    const char *path = "/eth/v1/validator/attestation_data?slot=10";
    fake_call_t *c = fake_mux_get(t.m, path, NULL);
    fake_mux_advance(t.m, 5);
    fake_mux_wait(t.m, c);
    assert_int_equal(fake_call_ms(c), 5);           /* served at once: nothing was agreed yet */
    assert_non_null(strstr(c->body, "0xb0004200")); /* block 66: the bad source */
    assert_int_equal(bm_attest_stats(t.a).checkpoint_disagreements, 0);
    fake_mux_advance(t.m, 25); /* a and b answer the finished race: the epoch is agreed */
    assert_int_equal(bm_attest_stats(t.a).checkpoint_disagreements, 1);
    /* the next request: c's answer is refused at once, a's served when it comes */
    c = fake_mux_get(t.m, path, NULL);
    fake_mux_done_1ms_after(t.m, c, 19);
    assert_int_equal(fake_call_ms(c), 20);
    assert_string_equal(c->body, att_json(10, 0, 10));
    assert_true(bm_attest_stats(t.a).checkpoint_refused >= 1);
    /* the bad node alone (the others hung): never served, not even at the deadline */
    fake_step_t hang = FAKE_HANG;
    fake_node_script(&t.m->nodes.node[0], &hang, 1);
    fake_node_script(&t.m->nodes.node[1], &hang, 1);
    c = fake_mux_get(t.m, path, NULL);
    fake_mux_advance(t.m, 1000);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->status, 503);
    assert_non_null(strstr(c->body, "c: 200, not usable"));
    tfx_free(&t);
}

/* Strict checkpoints: an answer is served only when a quorum of the race's nodes gave the
 * same source and target; meanwhile the race keeps asking; without a quorum the error. */
static void test_checkpoints_strict(void **state)
{
    (void)state;
    bm_attest_opts_t ao;
    bm_attest_opts_default(&ao);
    ao.checkpoint_mode = BM_ATTEST_CHECKPOINTS_STRICT;
    tfx_t t;
    tfx_init_opts(&t, 3000, 0, BM_FAR_FUTURE_EPOCH, NULL, &ao);
    tfx_chain(&t, 10, BM_PAYLOAD_UNKNOWN);
    fake_step_t good_a = FAKE_STATUS(200, 20, att_json(10, 0, 10));
    fake_step_t good_b = FAKE_STATUS(200, 40, att_json(10, 0, 10));
    fake_step_t bad = FAKE_STATUS(200, 5, att_cp_json(10, 0, 10, 1, 77)); /* another target */
    fake_node_t *a = fake_mux_node(t.m, &good_a, 1);
    fake_node_t *b = fake_mux_node(t.m, &good_b, 1);
    fake_mux_node(t.m, &bad, 1);
    const char *path = "/eth/v1/validator/attestation_data?slot=10";
    /* c at 5 (alone with its checkpoints), a at 20 (alone with its own): neither is served;
     * b at 40 makes the quorum (2 of 3): its whole answer is served */
    fake_call_t *c = fake_mux_get(t.m, path, NULL);
    fake_mux_done_1ms_after(t.m, c, 39);
    assert_int_equal(fake_call_ms(c), 40);
    assert_string_equal(c->body, att_json(10, 0, 10));
    /* with a quorum of 3, no answer of the cluster ever qualifies: the nodes are asked again
     * until the hold ends (the deadline, 400 ms: past the due time, the floor); the last
     * re-asks start at 350 and b's answers at 390, when nothing more can come: the error
     * names each node */
    tfx_free(&t);
    ao.checkpoint_quorum = 3;
    tfx_init_opts(&t, 6000, 0, BM_FAR_FUTURE_EPOCH, NULL, &ao);
    tfx_chain(&t, 10, BM_PAYLOAD_UNKNOWN);
    a = fake_mux_node(t.m, &good_a, 1);
    b = fake_mux_node(t.m, &good_b, 1);
    fake_mux_node(t.m, &bad, 1);
    c = fake_mux_get(t.m, path, NULL);
    fake_mux_done_1ms_after(t.m, c, 389);
    assert_int_equal(fake_call_ms(c), 390);
    assert_int_equal(c->status, 503);
    assert_string_equal(c->body, "{\"code\":503,\"message\":\"no usable answer: a: 200, not "
                                 "usable; b: 200, not usable; c: 200, not usable\"}");
    assert_int_equal(a->requests, 8); /* at 0, 50, ..., 350 */
    assert_int_equal(b->requests, 8);
    tfx_free(&t);
}

/* The records of served races: the root and payload index each endpoint is about, who
 * served it, and the first node's own first answer. */
typedef struct recs {
    int n;
    bm_served_t r[4];
} recs_t;

static void on_served(const bm_served_t *s, void *ud)
{
    recs_t *rs = ud;
    if (rs->n < 4)
        rs->r[rs->n] = *s;
    rs->n++;
}

static void test_records(void **state)
{
    (void)state;
    tfx_t t;
    tfx_init(&t, 3000, 0, 0, NULL); /* Gloas from genesis */
    for (unsigned id = 7; id <= 9; id++)
        fake_block(&t.c, id, id, id - 1);
    uint64_t now = bm_clock_now_ms();
    for (unsigned id = 7; id <= 9; id++)
        fake_head(&t.c, 0, id, now, BM_PAYLOAD_EMPTY);
    fake_head(&t.c, 0, 9, now, BM_PAYLOAD_FULL);
    recs_t rs = {0};
    bm_attest_on_served(t.a, on_served, &rs, true);
    /* a (the first node): stale at once; b: the full payload of 9 after 40 ms */
    fake_node_t *a = fake_mux_node1(t.m, FAKE_STATUS(200, 5, att_json(10, 0, 8)));
    fake_node_t *b = fake_mux_node1(t.m, FAKE_STATUS(200, 40, att_json(10, 1, 9)));
    fake_call_t *c = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10", NULL);
    fake_mux_advance(t.m, 40);
    fake_mux_wait(t.m, c);
    fake_mux_advance(t.m, 1000); /* the losers kept for their checkpoints end */
    RUN_UNTIL(&t.m->loop, rs.n == 1, FAKE_BOUND_MS);
    bm_served_t *r = &rs.r[0];
    assert_int_equal(r->duty, BM_DUTY_READ_ATTESTATION_DATA);
    assert_int_equal(r->slot, 10);
    assert_int_equal(r->node, 1);
    assert_int_equal(r->requests, 1);
    assert_int_equal(r->served.root[2], 9);
    assert_int_equal(r->served.index, 1);
    assert_int_equal(r->served.cls, BM_ANSWER_FRESH);
    assert_int_equal(r->first_node, 0);
    assert_int_equal(r->first.root[2], 8);
    assert_int_equal(r->first.index, 0);
    assert_int_equal(r->first.cls, BM_ANSWER_STALE);
    assert_int_equal(r->race_ms, 40);
    assert_int_equal(r->first.ms, 5);

    /* head root: about the slot it was asked in */
    fake_step_t ra = FAKE_STATUS(200, 5, root_json(9));
    fake_node_script(a, &ra, 1);
    fake_node_script(b, &ra, 1);
    c = fake_mux_get(t.m, "/eth/v1/beacon/blocks/head/root", NULL);
    fake_mux_advance(t.m, 5);
    fake_mux_wait(t.m, c);
    fake_mux_advance(t.m, 1000);
    RUN_UNTIL(&t.m->loop, rs.n == 2, FAKE_BOUND_MS);
    r = &rs.r[1];
    assert_int_equal(r->duty, BM_DUTY_READ_HEAD_ROOT);
    assert_int_equal(r->slot, 10);
    assert_int_equal(r->served.root[2], 9);
    assert_int_equal(r->served.index, -1);
    assert_int_equal(r->first.cls, BM_ANSWER_FRESH); /* judged, or the served root */

    /* payload attestation: a 204 names no root */
    fake_step_t p204 = FAKE_STATUS(204, 5, "");
    fake_node_script(a, &p204, 1);
    fake_node_script(b, &p204, 1);
    c = fake_mux_get(t.m, "/eth/v1/validator/payload_attestation_data?slot=9", NULL);
    fake_mux_advance(t.m, 1000); /* nothing accepted: the 204 at the deadline */
    fake_mux_wait(t.m, c);
    fake_mux_advance(t.m, 1000);
    RUN_UNTIL(&t.m->loop, rs.n == 3, FAKE_BOUND_MS);
    r = &rs.r[2];
    assert_int_equal(r->duty, BM_DUTY_READ_PAYLOAD_ATTESTATION);
    assert_int_equal(r->served.status, 204);
    assert_false(r->served.has_root);
    assert_int_equal(r->first.status, 204);
    tfx_free(&t);
}

static void test_bad_requests(void **state)
{
    (void)state;
    tfx_t t;
    tfx_init(&t, 3000, 0, BM_FAR_FUTURE_EPOCH, NULL);
    fake_step_t s = FAKE_STATUS(200, 5, att_json(10, 0, 10));
    fake_node_t *a = fake_mux_node(t.m, &s, 1);
    const char *paths[] = {"/eth/v1/validator/attestation_data",
                           "/eth/v1/validator/attestation_data?slot=abc",
                           "/eth/v1/validator/attestation_data?slot=99999999999999999999",
                           "/eth/v1/validator/payload_attestation_data?slot="};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        fake_call_t *c = fake_mux_get(t.m, paths[i], NULL);
        fake_mux_wait(t.m, c);
        assert_int_equal(c->status, 400);
        assert_non_null(strstr(c->body, "\"code\":400"));
    }
    assert_int_equal(a->requests, 0);
    /* every node down: the engine's 503 in the Beacon API shape */
    a->node->state = BM_NODE_WRONG_NETWORK;
    fake_call_t *c = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10", NULL);
    fake_mux_wait(t.m, c);
    assert_int_equal(c->status, 503);
    assert_non_null(strstr(c->body, "\"code\":503"));
    tfx_free(&t);
}

static void test_client_leaves(void **state)
{
    (void)state;
    tfx_t t;
    tfx_default(&t);
    fake_mux_node1(t.m, FAKE_HANG);
    /* a client that gives up: its race (it was the only waiter) stops asking the node */
    fake_call_t *gone = fake_mux_get(t.m, "/eth/v1/validator/attestation_data?slot=10", NULL);
    fake_mux_settle(t.m);
    assert_int_equal(t.m->nodes.held, 1);
    bm_upstream_cancel(gone->x);
    gone->x = NULL;
    RUN_UNTIL(&t.m->loop, t.m->nodes.held == 0, FAKE_BOUND_MS);
    assert_int_equal(t.m->nodes.held, 0); /* the node saw its request cancelled */
    RUN_UNTIL(&t.m->loop, bm_race_engine_active(t.m->eng) == 0, FAKE_BOUND_MS);
    assert_int_equal(bm_race_engine_active(t.m->eng), 0);
    tfx_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_data),
        cmocka_unit_test(test_root_and_index_rules),
        cmocka_unit_test(test_payload_rules),
        cmocka_unit_test(test_coalescing_key),
        cmocka_unit_test(test_stale_node_loses),
        cmocka_unit_test(test_stale_node_catches_up),
        cmocka_unit_test(test_head_moving_holds_the_old_head),
        cmocka_unit_test(test_deadline_fallback),
        cmocka_unit_test(test_coalesced_fallback),
        cmocka_unit_test(test_no_cluster_head_first_2xx),
        cmocka_unit_test(test_coalescing),
        cmocka_unit_test(test_ssz_and_headers),
        cmocka_unit_test(test_gloas_index),
        cmocka_unit_test(test_head_root),
        cmocka_unit_test(test_payload_attestation),
        cmocka_unit_test(test_nothing_usable_answers_by_the_end),
        cmocka_unit_test(test_failing_node_recovers),
        cmocka_unit_test(test_checkpoints_live),
        cmocka_unit_test(test_checkpoints_strict),
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_client_leaves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
