/* SPDX-License-Identifier: MIT */
/*
 * test_duties: the duties and liveness policy. Dependent slots and roots are tested
 * directly (per endpoint and epoch, proposer v1 against v2, underflow at genesis, empty
 * slots, the head itself for slots at or after it) with a real head tracker fed a
 * synthetic chain; the race rules end to end through the front server against scripted
 * fake nodes (fake_node.h): the answer with the cluster's dependent root wins
 * over faster wrong ones, a node one block behind is re-asked until it has the block,
 * the majority after dutiesMajorityAfter (by dependent root, or by the canonical hash of
 * the data for sync duties), disagreements counted, only ready nodes asked while one is,
 * errors relayed at once; liveness OR-ed over every node with a bound, and 503 unless a
 * node that answered was ready since the queried epoch started. Time is a manual clock
 * the test advances (the nodes' delays too): answer times are asserted to the millisecond.
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
#include "base/log.h"
#include "fake_chain.h"
#include "fake_node.h"

#include "base/json.h"
#include "cluster/head.h"
#include "duties/duties.h"

/* ---- a synthetic chain for the head tracker --------------------------------------------- */

static bool skipped[256];      /* slots without a block */
static bm_clock_t *test_clock; /* the running test's mux clock (for header answers) */

/* The block at `slot` of the synthetic chain: 0xB0, the slot, 0x5A. */
static void R(uint64_t slot, uint8_t out[32])
{
    memset(out, 0, 32);
    out[0] = 0xB0;
    out[1] = (uint8_t)slot;
    out[2] = (uint8_t)(slot >> 8);
    out[31] = 0x5A;
}

static const char *Rhex(uint64_t slot)
{
    static char buf[8][BM_ROOT_HEX_LEN + 1];
    static int next;
    uint8_t r[32];
    R(slot, r);
    char *b = buf[next++ % 8];
    bm_root_to_hex(r, b);
    return b;
}

static void on_fetch(const uint8_t root[32], uint64_t slot, size_t node, void *ud)
{
    bm_head_t *t = ud;
    (void)slot;
    uint64_t s = root[1] | (uint64_t)root[2] << 8;
    uint8_t parent[32] = {0};
    if (s > 0) {
        uint64_t p = s - 1;
        while (p > 0 && skipped[p])
            p--;
        R(p, parent);
    }
    bm_head_on_parent(t, node, root, s, parent, bm_clock_wall_now(test_clock));
}

/* A one-node tracker whose cluster head is the block of `head_slot`, on f's clock. */
static bm_head_t *make_head(fake_mux_t *f, uint64_t head_slot)
{
    bm_head_opts_t o;
    bm_head_opts_default(&o);
    o.quorum = 1;
    o.chase_epochs = 3;
    bm_head_t *t = bm_head_new(1, &o);
    assert_non_null(t);
    bm_head_set_fetch(t, on_fetch, t);
    test_clock = f->clock;
    uint64_t now = bm_clock_wall_now(f->clock);
    assert_int_equal(bm_head_set_clock(t, &f->chain.clock, now), 0);
    bm_head_event_t ev = {.slot = head_slot};
    R(head_slot, ev.root);
    assert_int_equal(bm_head_on_head(t, 0, &ev, now), 0);
    bm_head_info_t h;
    assert_true(bm_head_cluster(t, &h));
    assert_int_equal(h.slot, head_slot);
    return t;
}

typedef struct dfx {
    bm_duties_t *d;
    bm_head_t *head;
} dfx_t;

static void free_module(void *p)
{
    dfx_t *m = p;
    bm_duties_free(m->d);
    bm_head_free(m->head);
    free(m);
}

static bm_duties_t *make(fake_mux_t *f, uint32_t majority_ms, uint64_t head_slot)
{
    memset(skipped, 0, sizeof skipped);
    dfx_t *m = calloc(1, sizeof *m);
    assert_non_null(m);
    bm_duties_opts_t o;
    bm_duties_opts_default(&o);
    o.majority_after_ms = majority_ms;
    o.tail_ms = 200;
    o.liveness_timeout_ms = 300;
    m->d = bm_duties_new(f->clock, f->eng, f->pool, &f->chain, &o);
    assert_non_null(m->d);
    if (head_slot) {
        m->head = make_head(f, head_slot);
        bm_duties_set_head(m->d, m->head);
    }
    f->module = m;
    f->module_free = free_module;
    assert_int_equal(bm_duties_register(m->d, f->router), 0);
    return m->d;
}

/* Sends `method target` (body `json`), moves time `ms` forward, and waits for the answer. */
static fake_call_t *send_after(fake_mux_t *f, const char *method, const char *target,
                               const char *json, uint64_t ms)
{
    fake_call_t *c = fake_mux_send(f, method, target, json, NULL);
    fake_mux_advance(f, ms);
    fake_mux_wait(f, c);
    return c;
}

static const char *duty_json(const char *root, bool optimistic)
{
    static char buf[16][256];
    static int next;
    char *b = buf[next++ % 16];
    snprintf(b, 256,
             "{\"dependent_root\":\"%s\",\"execution_optimistic\":%s,\"data\":[{\"pubkey\":"
             "\"0x01\",\"validator_index\":\"1\",\"slot\":\"41\"}]}",
             root, optimistic ? "true" : "false");
    return b;
}

static fake_step_t duty(uint32_t ms, const char *root)
{
    return FAKE_OK(ms, duty_json(root, false));
}

static void ready_all(fake_mux_t *f)
{
    for (int i = 0; i < f->nodes.n; i++)
        bm_pool_set_state(f->pool, (&f->nodes.node[i])->node, BM_NODE_READY, "test");
}

#define ATT "/eth/v1/validator/duties/attester/5"
#define IDX "[\"1\",\"2\"]"

/* ---- dependent slots and roots ------------------------------------------------------------ */

static void test_dependent_slots(void **state)
{
    (void)state;
    uint64_t s = 99;
    /* attester, proposer v2, ptc: start(E-1) - 1 */
    assert_true(bm_duties_dependent_slot(BM_DUTY_ATTESTER, 5, 8, &s));
    assert_int_equal(s, 31);
    assert_true(bm_duties_dependent_slot(BM_DUTY_PROPOSER_V2, 5, 8, &s));
    assert_int_equal(s, 31);
    assert_true(bm_duties_dependent_slot(BM_DUTY_PTC, 6, 8, &s));
    assert_int_equal(s, 39);
    /* proposer v1: start(E) - 1 */
    assert_true(bm_duties_dependent_slot(BM_DUTY_PROPOSER_V1, 5, 8, &s));
    assert_int_equal(s, 39);
    /* underflow: the genesis block */
    for (uint64_t e = 0; e <= 1; e++) {
        s = 99;
        assert_true(bm_duties_dependent_slot(BM_DUTY_ATTESTER, e, 32, &s));
        assert_int_equal(s, 0);
    }
    s = 99;
    assert_true(bm_duties_dependent_slot(BM_DUTY_PROPOSER_V1, 0, 32, &s));
    assert_int_equal(s, 0);
    assert_true(bm_duties_dependent_slot(BM_DUTY_PROPOSER_V1, 1, 32, &s));
    assert_int_equal(s, 31);
    assert_true(bm_duties_dependent_slot(BM_DUTY_PROPOSER_V2, 2, 32, &s));
    assert_int_equal(s, 31);
    /* no dependent root, no clock, an epoch beyond any slot */
    assert_false(bm_duties_dependent_slot(BM_DUTY_SYNC, 5, 8, &s));
    assert_false(bm_duties_dependent_slot(BM_DUTY_ATTESTER, 5, 0, &s));
    assert_false(bm_duties_dependent_slot(BM_DUTY_PROPOSER_V1, UINT64_MAX, 32, &s));
    assert_false(bm_duties_dependent_slot(BM_DUTY_KINDS, 5, 8, &s));
}

static void test_expected_roots_from_the_tracker(void **state)
{
    fake_mux_t *f = *state;
    memset(skipped, 0, sizeof skipped);
    skipped[31] = true; /* an empty slot: the block before it is the root at 31 */
    bm_head_t *t = make_head(f, 40);
    uint8_t got[32], want[32];
    /* attester E=5: slot 31 is empty, so the block of 30 */
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_ATTESTER, 5, got), 0);
    R(30, want);
    assert_memory_equal(got, want, 32);
    /* proposer v1 E=5: slot 39; v2 E=5: slot 31 */
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_PROPOSER_V1, 5, got), 0);
    R(39, want);
    assert_memory_equal(got, want, 32);
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_PROPOSER_V2, 5, got), 0);
    R(30, want);
    assert_memory_equal(got, want, 32);
    /* attester E=6 (next epoch): slot 39; ptc the same */
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_ATTESTER, 6, got), 0);
    R(39, want);
    assert_memory_equal(got, want, 32);
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_PTC, 6, got), 0);
    assert_memory_equal(got, want, 32);
    /* proposer v1 E=6: slot 47, after the head: the head itself */
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_PROPOSER_V1, 6, got), 0);
    R(40, want);
    assert_memory_equal(got, want, 32);
    /* beyond the tracker's links, no tracker, no dependent root */
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_ATTESTER, 2, got), BM_ENOTFOUND);
    assert_int_equal(bm_duties_expected_root(NULL, &f->chain, BM_DUTY_ATTESTER, 5, got),
                     BM_EUNAVAIL);
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_SYNC, 5, got), BM_EINVAL);
    bm_chain_info_t none = {0};
    assert_int_equal(bm_duties_expected_root(t, &none, BM_DUTY_ATTESTER, 5, got), BM_EINVAL);
    bm_head_free(t);
}

static void test_expected_root_underflow_at_genesis(void **state)
{
    fake_mux_t *f = *state;
    memset(skipped, 0, sizeof skipped);
    fake_chain_now(&f->chain, 12000, 8, 9, BM_FORK_FULU);
    bm_head_t *t = make_head(f, 9);
    uint8_t got[32], genesis[32], want[32];
    R(0, genesis);
    /* E=0 and E=1: start(E-1) - 1 underflows: the genesis block */
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_ATTESTER, 0, got), 0);
    assert_memory_equal(got, genesis, 32);
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_ATTESTER, 1, got), 0);
    assert_memory_equal(got, genesis, 32);
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_PROPOSER_V1, 0, got), 0);
    assert_memory_equal(got, genesis, 32);
    /* v1 E=1: slot 7; v2 E=1: genesis */
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_PROPOSER_V1, 1, got), 0);
    R(7, want);
    assert_memory_equal(got, want, 32);
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_PROPOSER_V2, 1, got), 0);
    assert_memory_equal(got, genesis, 32);
    /* E=2 attester: slot 7 */
    assert_int_equal(bm_duties_expected_root(t, &f->chain, BM_DUTY_ATTESTER, 2, got), 0);
    assert_memory_equal(got, want, 32);
    bm_head_free(t);
}

/* ---- the duty race --------------------------------------------------------------------------- */

static void test_answer_with_the_clusters_root_wins(void **state)
{
    fake_mux_t *f = *state;
    bm_duties_t *d = make(f, 1000, 40);
    fake_node_t *a = fake_node_add1(&f->nodes, duty(5, Rhex(30)));   /* fast, but another root */
    fake_node_t *b = fake_node_add1(&f->nodes, duty(100, Rhex(31))); /* the cluster's */
    ready_all(f);
    fake_call_t *c = send_after(f, "POST", ATT, IDX, 100);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, Rhex(31)));
    assert_int_equal(fake_call_ms(c), 100);            /* not the majority time */
    assert_string_equal(fake_node_last(b)->body, IDX); /* the body is passed on */
    assert_string_equal(fake_node_last(a)->target, ATT);
    const bm_duties_stats_t *st = bm_duties_stats(d);
    assert_int_equal(st->by_root, 1);
    assert_true(st->mismatches >= 1);
    assert_int_equal(st->disagreements, 1);
    assert_int_equal(st->requests[BM_DUTY_ATTESTER], 1);
}

static void test_proposer_v1_and_v2_roots(void **state)
{
    fake_mux_t *f = *state;
    make(f, 1000, 40);
    fake_step_t s[2] = {duty(5, Rhex(31)), duty(60, Rhex(39))};
    fake_node_t *a = fake_node_add1(&f->nodes, s[0]);
    fake_node_t *b = fake_node_add1(&f->nodes, s[1]);
    ready_all(f);
    /* v1 for epoch 5 depends on slot 39: b's answer */
    fake_call_t *c = send_after(f, "GET", "/eth/v1/validator/duties/proposer/5", NULL, 60);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, Rhex(39)));
    assert_int_equal(fake_call_ms(c), 60);
    /* v2 for epoch 5 depends on slot 31: a's answer */
    fake_node_script(a, &s[0], 1);
    fake_node_script(b, &s[1], 1);
    c = send_after(f, "GET", "/eth/v2/validator/duties/proposer/5", NULL, 5);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, Rhex(31)));
    assert_int_equal(fake_call_ms(c), 5);
    /* ptc for epoch 6 depends on slot 39 */
    fake_node_script(a, &s[0], 1);
    fake_node_script(b, &s[1], 1);
    c = send_after(f, "POST", "/eth/v1/validator/duties/ptc/6", IDX, 60);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, Rhex(39)));
}

static void test_node_one_block_behind_is_reasked(void **state)
{
    fake_mux_t *f = *state;
    bm_duties_t *d = make(f, 1000, 40);
    /* attester for epoch 6 depends on slot 39: a has only 38 at first */
    fake_step_t s[2] = {duty(5, Rhex(38)), duty(5, Rhex(39))};
    fake_node_t *a = fake_node_add(&f->nodes, s, 2);
    fake_node_add1(&f->nodes, FAKE_HANG);
    ready_all(f);
    fake_call_t *c = send_after(f, "POST", "/eth/v1/validator/duties/attester/6", IDX, 255);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, Rhex(39)));
    assert_int_equal(a->requests, 2);
    /* re-asked after the interval (250), answered 5 ms later: long before the majority */
    assert_int_equal(fake_call_ms(c), 255);
    assert_int_equal(bm_duties_stats(d)->by_root, 1);
}

static void test_majority_after_the_majority_time(void **state)
{
    fake_mux_t *f = *state;
    bm_duties_t *d = make(f, 300, 40);
    /* nobody has the cluster's root (31): two say 20, one says 21 */
    fake_node_t *a = fake_node_add1(&f->nodes, duty(5, Rhex(20)));
    fake_node_add1(&f->nodes, duty(10, Rhex(21)));
    fake_node_t *c3 = fake_node_add1(&f->nodes, duty(15, Rhex(20)));
    ready_all(f);
    fake_call_t *c = fake_mux_send(f, "POST", ATT, IDX, NULL);
    fake_mux_done_1ms_after(f, c, 299);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, Rhex(20)));
    assert_int_equal(fake_call_ms(c), 300);
    assert_int_equal(a->requests, 2); /* re-asked meanwhile, at 250 */
    assert_int_equal(c3->requests, 2);
    const bm_duties_stats_t *st = bm_duties_stats(d);
    assert_int_equal(st->majority, 1);
    assert_int_equal(st->disagreements, 1);
    assert_true(st->mismatches >= 3);
}

static void test_majority_tie_goes_to_the_first(void **state)
{
    fake_mux_t *f = *state;
    make(f, 300, 40);
    fake_step_t late = duty(40, Rhex(21)), early = duty(5, Rhex(20));
    fake_node_t *a = fake_node_add1(&f->nodes, late);
    fake_node_t *b = fake_node_add1(&f->nodes, early);
    ready_all(f);
    fake_call_t *c = send_after(f, "POST", ATT, IDX, 300);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, Rhex(20)));
    assert_int_equal(fake_call_ms(c), 300);
    /* the other way round: arrival decides, not the order of the nodes */
    fake_node_script(a, &early, 1);
    fake_node_script(b, &late, 1);
    c = send_after(f, "POST", ATT, IDX, 300);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, Rhex(20)));
    assert_int_equal(fake_call_ms(c), 300);
}

static void test_without_a_known_root_the_first_2xx(void **state)
{
    fake_mux_t *f = *state;
    bm_duties_t *d = make(f, 1000, 0); /* no tracker */
    fake_node_t *a = fake_node_add1(&f->nodes, duty(300, Rhex(30)));
    fake_node_add1(&f->nodes, duty(5, Rhex(20)));
    ready_all(f);
    fake_call_t *c = send_after(f, "POST", ATT, IDX, 5);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, Rhex(20)));
    assert_int_equal(fake_call_ms(c), 5);
    assert_int_equal(bm_duties_stats(d)->first, 1);
    RUN_UNTIL(&f->loop, a->aborted == 1, FAKE_BOUND_MS); /* the loser is cancelled */
    assert_int_equal(a->aborted, 1);
}

static void test_sync_duties_first_and_majority_by_data(void **state)
{
    fake_mux_t *f = *state;
    bm_duties_t *d = make(f, 300, 40);
    const char *d1 = "{\"execution_optimistic\":true,\"data\":[{\"validator_index\":\"1\","
                     "\"validator_sync_committee_indices\":[\"3\"]}]}";
    const char *d1b = "{\"data\":[{\"validator_sync_committee_indices\":[\"3\"],"
                      "\"validator_index\":\"1\"}],\"execution_optimistic\":true}";
    const char *d2 = "{\"execution_optimistic\":true,\"data\":[{\"validator_index\":\"1\","
                     "\"validator_sync_committee_indices\":[\"4\"]}]}";
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(20, d1));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(5, d2));
    fake_node_t *c3 =
        fake_node_add1(&f->nodes, FAKE_OK(30, d1b)); /* the same data in another key order */
    ready_all(f);
    /* optimistic answers are never accepted: the majority by data decides */
    fake_call_t *c = send_after(f, "POST", "/eth/v1/validator/duties/sync/5", IDX, 300);
    assert_int_equal(c->status, 200);
    assert_string_equal(c->body, d1);
    assert_int_equal(fake_call_ms(c), 300);
    assert_int_equal(bm_duties_stats(d)->majority, 1);
    assert_int_equal(bm_duties_stats(d)->disagreements, 1);
    /* not optimistic: the first 2xx at once (no dependent root to check) */
    fake_step_t s1 = FAKE_OK(30, "{\"execution_optimistic\":false,\"data\":[]}");
    fake_step_t s2 =
        FAKE_OK(5, "{\"execution_optimistic\":false,\"data\":[{\"validator_index\":\"1\"}]}");
    fake_node_script(a, &s1, 1);
    fake_node_script(b, &s2, 1);
    fake_node_script(c3, &s1, 1);
    c = send_after(f, "POST", "/eth/v1/validator/duties/sync/5", IDX, 5);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "validator_index"));
    assert_int_equal(fake_call_ms(c), 5);
    assert_int_equal(bm_duties_stats(d)->first, 1);
}

static void test_optimistic_answer_waits(void **state)
{
    fake_mux_t *f = *state;
    make(f, 1000, 40);
    fake_node_add1(&f->nodes, FAKE_OK(5, duty_json(Rhex(31), true)));
    fake_node_add1(&f->nodes, duty(80, Rhex(31)));
    ready_all(f);
    fake_call_t *c = send_after(f, "POST", ATT, IDX, 80);
    assert_int_equal(fake_call_ms(c), 80);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "\"execution_optimistic\":false"));
}

static void test_errors_are_relayed_at_once(void **state)
{
    fake_mux_t *f = *state;
    bm_duties_t *d = make(f, 1000, 40);
    fake_node_add1(&f->nodes, FAKE_STATUS(503, 5, "{\"code\":503,\"message\":\"syncing\"}"));
    fake_node_add1(&f->nodes, FAKE_STATUS(400, 20, "{\"code\":400,\"message\":\"epoch too far\"}"));
    ready_all(f);
    fake_call_t *c = send_after(f, "POST", ATT, IDX, 50);
    assert_int_equal(c->status, 400);
    assert_non_null(strstr(c->body, "epoch too far"));
    assert_int_equal(fake_call_ms(c), 50); /* the first check after both failed */
    assert_int_equal(bm_duties_stats(d)->errors, 1);
}

static void test_hung_nodes_bounded(void **state)
{
    fake_mux_t *f = *state;
    make(f, 300, 40); /* answers by majority time + tail (200) */
    fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_HANG);
    ready_all(f);
    for (int kase = 0; kase < 3; kase++) {
        /* all hung; hung + 5xx (asked again every re-ask interval, then named); hung + down */
        fake_fail_case(kase, b, c3);
        fake_call_t *c = fake_mux_send(f, "POST", ATT, IDX, NULL);
        fake_mux_done_1ms_after(f, c, 499);
        assert_int_equal(c->status, 503);
        assert_int_equal(fake_call_ms(c), 500);
        assert_string_equal(c->body, fake_fail_case_answer(kase));
        if (kase == 1)
            assert_int_equal(b->requests, 2); /* at 0 and 250 (the duty re-ask interval) */
    }
}

/* A node that failed is asked again and serves the duties once it recovers, before the
 * majority time: the failure did not end the race, nor did it wait for the bound. */
static void test_failed_node_recovers(void **state)
{
    fake_mux_t *f = *state;
    bm_duties_t *d = make(f, 1000, 40);
    fake_step_t s[2] = {FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"boom\"}"),
                        duty(5, Rhex(31))};
    fake_node_t *a = fake_node_add(&f->nodes, s, 2);
    fake_node_add1(&f->nodes, FAKE_HANG);
    ready_all(f);
    fake_call_t *c = fake_mux_send(f, "POST", ATT, IDX, NULL);
    fake_mux_advance(f, 254);
    assert_false(c->done);
    assert_int_equal(a->requests, 2); /* at 0 and 250 */
    fake_mux_advance(f, 1);
    fake_mux_wait(f, c);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, Rhex(31)));
    assert_int_equal(fake_call_ms(c), 255);
    assert_int_equal(bm_duties_stats(d)->by_root, 1);
}

static void test_hung_node_does_not_delay(void **state)
{
    fake_mux_t *f = *state;
    make(f, 1000, 40);
    fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_add1(&f->nodes, duty(10, Rhex(31)));
    fake_node_add1(&f->nodes, FAKE_HANG);
    ready_all(f);
    fake_call_t *c = send_after(f, "POST", ATT, IDX, 10);
    assert_int_equal(c->status, 200);
    assert_int_equal(fake_call_ms(c), 10);
}

static void test_only_ready_nodes_while_one_is(void **state)
{
    fake_mux_t *f = *state;
    make(f, 1000, 40);
    fake_node_t *a = fake_node_add1(&f->nodes, duty(60, Rhex(31)));
    fake_node_t *b = fake_node_add1(&f->nodes, duty(5, Rhex(31)));
    fake_node_t *c3 = fake_node_add1(&f->nodes, duty(5, Rhex(31)));
    bm_pool_set_state(f->pool, (a)->node, BM_NODE_READY, "test");
    bm_pool_set_state(f->pool, (b)->node, BM_NODE_LAGGING, "test");
    bm_pool_set_state(f->pool, (c3)->node, BM_NODE_OPTIMISTIC, "test");
    fake_call_t *c = send_after(f, "POST", ATT, IDX, 60);
    assert_int_equal(c->status, 200);
    assert_int_equal(a->requests, 1);
    assert_int_equal(b->requests + c3->requests, 0);
    /* none ready: every usable node */
    bm_pool_set_state(f->pool, (a)->node, BM_NODE_FORKED, "test");
    c = send_after(f, "POST", ATT, IDX, 5);
    assert_int_equal(c->status, 200);
    assert_int_equal(b->requests + c3->requests, 2);
}

static void test_bad_epoch(void **state)
{
    fake_mux_t *f = *state;
    make(f, 1000, 40);
    fake_node_t *a = fake_node_add1(&f->nodes, duty(5, Rhex(31)));
    ready_all(f);
    fake_call_t *c =
        fake_mux_send_wait(f, "POST", "/eth/v1/validator/duties/attester/x5", IDX, NULL);
    assert_int_equal(c->status, 400);
    assert_non_null(strstr(c->body, "Invalid epoch"));
    c = fake_mux_send_wait(f, "POST", "/eth/v1/validator/liveness/99999999999999999999", IDX, NULL);
    assert_int_equal(c->status, 400);
    assert_int_equal(a->requests, 0);
}

/* ---- liveness ------------------------------------------------------------------------------ */

static void test_liveness_merge(void **state)
{
    (void)state;
    const uint64_t idx[] = {7, 1, 2, 7};
    bm_buf_t *ans[4];
    ans[0] = bm_buf_from_str("{\"data\":[{\"index\":\"1\",\"is_live\":true},{\"index\":\"2\","
                             "\"is_live\":false},{\"index\":\"7\",\"is_live\":false}]}");
    ans[1] = bm_buf_from_str("{\"data\":[{\"index\":2,\"is_live\":true},{\"index\":\"9\","
                             "\"is_live\":true}]}");
    ans[2] = bm_buf_from_str("{\"data\":[{\"index\":\"7\",\"is_live\":\"yes\"}]}"); /* bad */
    ans[3] = NULL;
    bool valid[4];
    bm_str_t out = BM_STR_INIT;
    assert_int_equal(bm_duties_liveness_merge(idx, 4, ans, 4, valid, &out), 2);
    assert_true(valid[0] && valid[1]);
    assert_false(valid[2] || valid[3]);
    assert_string_equal(bm_str_data(&out),
                        "{\"data\":[{\"index\":\"7\",\"is_live\":false},{\"index\":\"1\",\"is_"
                        "live\":true},{\"index\":\"2\",\"is_live\":true},{\"index\":\"7\",\"is_"
                        "live\":false}]}");
    bm_str_dispose(&out);
    /* nothing readable: every index not live, zero readable answers */
    assert_int_equal(bm_duties_liveness_merge(idx, 2, ans + 2, 2, NULL, &out), 0);
    assert_non_null(strstr(bm_str_data(&out), "\"is_live\":false"));
    bm_str_dispose(&out);
    for (int i = 0; i < 3; i++)
        bm_buf_unref(ans[i]);
}

#define LIVE "/eth/v1/validator/liveness/5"

/* Moves the chain so that epoch 5 starts at `start_ms`. */
static void epoch5_starts_at(fake_mux_t *f, uint64_t start_ms)
{
    f->chain.clock.genesis_ms = start_ms - 5 * 8 * (uint64_t)f->chain.clock.slot_ms;
}

static void test_liveness_or_over_every_node(void **state)
{
    fake_mux_t *f = *state;
    bm_duties_t *d = make(f, 1000, 0);
    fake_node_t *a = fake_node_add1(
        &f->nodes, FAKE_OK(5, "{\"data\":[{\"index\":\"1\",\"is_live\":true},{\"index\":\"2\","
                              "\"is_live\":false},{\"index\":\"3\",\"is_live\":false}]}"));
    fake_node_t *b = fake_node_add1(
        &f->nodes, FAKE_OK(60, "{\"data\":[{\"index\":\"1\",\"is_live\":false},{\"index\":\"2\","
                               "\"is_live\":true},{\"index\":\"3\",\"is_live\":false}]}"));
    fake_node_t *h = fake_node_add1(&f->nodes, FAKE_HANG);
    ready_all(f);
    epoch5_starts_at(f, bm_clock_wall_now(f->clock) + 1000); /* ready before the epoch */
    const char *body = "[\"1\",\"2\",\"3\"]";
    fake_call_t *c = send_after(f, "POST", LIVE, body, 300);
    assert_int_equal(c->status, 200);
    assert_string_equal(c->body, "{\"data\":[{\"index\":\"1\",\"is_live\":true},{\"index\":"
                                 "\"2\",\"is_live\":true},{\"index\":\"3\",\"is_live\":false}]}");
    /* every node was asked; the hung one bounds the wait */
    assert_int_equal(a->requests + b->requests + h->requests, 3);
    assert_string_equal(fake_node_last(b)->body, body);
    assert_int_equal(fake_call_ms(c), 300);
    assert_int_equal(bm_duties_stats(d)->liveness, 1);
    /* all answered: no waiting */
    h->steps[0] = FAKE_OK(5, "{\"data\":[{\"index\":\"3\",\"is_live\":true}]}");
    c = send_after(f, "POST", LIVE, body, 60);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "{\"index\":\"3\",\"is_live\":true}"));
    assert_int_equal(fake_call_ms(c), 60);
}

/* Liveness keeps its bound (livenessTimeout, 300 ms here) with all nodes hung, one hung
 * and the others failing, one hung and the others down; the answer names every node. */
static void test_liveness_no_node_can_answer(void **state)
{
    fake_mux_t *f = *state;
    make(f, 1000, 0);
    fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_HANG);
    ready_all(f);
    for (int kase = 0; kase < 3; kase++) {
        /* each case from reachable nodes (the earlier cases' time-outs would leave a out) */
        for (int i = 0; i < f->nodes.n; i++)
            bm_pool_record(f->pool, f->nodes.node[i].node, BM_OUTCOME_OK, false, 1000, NULL);
        fake_fail_case(kase, b, c3);
        fake_call_t *c = fake_mux_send(f, "POST", LIVE, "[\"1\"]", NULL);
        fake_mux_done_1ms_after(f, c, 299);
        assert_int_equal(c->status, 503);
        assert_int_equal(fake_call_ms(c), 300);
        assert_string_equal(c->body, fake_fail_case_answer(kase));
    }
}

static void test_liveness_503_unless_ready_through_the_epoch(void **state)
{
    fake_mux_t *f = *state;
    bm_duties_t *d = make(f, 1000, 0);
    const char *yes = "{\"data\":[{\"index\":\"1\",\"is_live\":true}]}";
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(5, yes));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(5, yes));
    uint64_t t0 = bm_clock_wall_now(f->clock);
    ready_all(f);
    assert_true(bm_duties_ready_since(d, a->node) >= t0);
    /* the epoch started before the nodes became ready (a restart within the epoch) */
    epoch5_starts_at(f, t0 - 1000);
    fake_call_t *c = send_after(f, "POST", LIVE, "[\"1\"]", 5);
    assert_int_equal(c->status, 503);
    assert_non_null(strstr(c->body, "ready since the epoch started"));
    assert_int_equal(bm_duties_stats(d)->liveness_unavailable, 1);
    /* the next epoch: they were ready through it */
    epoch5_starts_at(f, t0 + 10);
    c = send_after(f, "POST", LIVE, "[\"1\"]", 5);
    assert_int_equal(c->status, 200);
    /* only a node that was ready through the epoch and answered vouches: a answers an
     * error, b answers but is not ready now */
    a->steps[0] = FAKE_STATUS(500, 5, "{\"code\":500,\"message\":\"x\"}");
    bm_pool_set_state(f->pool, (b)->node, BM_NODE_LAGGING, "test");
    assert_int_equal(bm_duties_ready_since(d, b->node), 0);
    c = send_after(f, "POST", LIVE, "[\"1\"]", 5);
    assert_int_equal(c->status, 503);
    assert_int_equal(b->requests, 3); /* asked all the same */
    /* b is ready again, but only from now on: the epoch started before */
    bm_pool_set_state(f->pool, (b)->node, BM_NODE_READY, "test");
    assert_true(bm_duties_ready_since(d, b->node) >= t0);
    epoch5_starts_at(f, bm_duties_ready_since(d, b->node) - 1);
    c = send_after(f, "POST", LIVE, "[\"1\"]", 5);
    assert_int_equal(c->status, 503);
    /* a answers again: it has been ready since t0 */
    a->steps[0] = FAKE_OK(5, yes);
    epoch5_starts_at(f, t0 + 1);
    c = send_after(f, "POST", LIVE, "[\"1\"]", 5);
    assert_int_equal(c->status, 200);
    /* an unknown chain clock: nothing can vouch */
    f->chain.clock.slot_ms = 0;
    c = send_after(f, "POST", LIVE, "[\"1\"]", 5);
    assert_int_equal(c->status, 503);
}

static void test_liveness_errors_and_bad_bodies(void **state)
{
    fake_mux_t *f = *state;
    make(f, 1000, 0);
    fake_node_t *a = fake_node_add1(
        &f->nodes, FAKE_STATUS(400, 5, "{\"code\":400,\"message\":\"Invalid epoch\"}"));
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 5, "{\"code\":500,\"message\":\"boom\"}"));
    ready_all(f);
    fake_call_t *c = send_after(f, "POST", LIVE, "[\"1\"]", 5);
    assert_int_equal(c->status, 400);
    assert_non_null(strstr(c->body, "Invalid epoch"));
    static const char *const bad[] = {"[]", "{}", "[\"x\"]", "[-1]", "[\"1\",true]", "nope"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = fake_mux_send_wait(f, "POST", LIVE, bad[i], NULL);
        assert_int_equal(c->status, 400);
    }
    assert_int_equal(a->requests, 1);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fake_mux_manual_setup, fake_mux_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dependent_slots),
        T(test_expected_roots_from_the_tracker),
        T(test_expected_root_underflow_at_genesis),
        T(test_answer_with_the_clusters_root_wins),
        T(test_proposer_v1_and_v2_roots),
        T(test_node_one_block_behind_is_reasked),
        T(test_majority_after_the_majority_time),
        T(test_majority_tie_goes_to_the_first),
        T(test_without_a_known_root_the_first_2xx),
        T(test_sync_duties_first_and_majority_by_data),
        T(test_optimistic_answer_waits),
        T(test_errors_are_relayed_at_once),
        T(test_hung_nodes_bounded),
        T(test_failed_node_recovers),
        T(test_hung_node_does_not_delay),
        T(test_only_ready_nodes_while_one_is),
        T(test_bad_epoch),
        cmocka_unit_test(test_liveness_merge),
        T(test_liveness_or_over_every_node),
        T(test_liveness_no_node_can_answer),
        T(test_liveness_503_unless_ready_through_the_epoch),
        T(test_liveness_errors_and_bad_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
