/* SPDX-License-Identifier: MIT */
/*
 * test_sim_node: a node's view as a function of time. A node with lag=800 answers
 * attestation data for the previous head until 800 ms into the slot and for the new head
 * after; stale freezes the head and catches up when cleared; fork follows its own roots
 * and rejoins with chain_reorg; late and competing blocks re-org at the next slot; the
 * proposer re-orgs a late head; finality follows the epochs; clock skew runs ahead; in
 * Gloas the payload arrives after the block (head_v2 empty then full, index 1). Every
 * event's JSON is checked against the shapes of apis/eventstream/index.yaml.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chain.h"
#include "node.h"
#include "test_sim_shape.h"

#define G 1000000ull
#define SLOT 2000ull

typedef struct ev {
    bs_topic_t topic;
    char data[2048];
} ev_t;

static ev_t evs[256];
static int nevs;

static void capture(bs_node_t *n, bs_topic_t t, bm_buf_t *data, void *ud)
{
    (void)n;
    (void)ud;
    if (nevs < 256) {
        evs[nevs].topic = t;
        size_t len = data->len < 2047 ? data->len : 2047;
        memcpy(evs[nevs].data, data->data, len);
        evs[nevs].data[len] = 0;
        nevs++;
    }
}

static int count(bs_topic_t t)
{
    int c = 0;
    for (int i = 0; i < nevs; i++)
        c += evs[i].topic == t;
    return c;
}

static const ev_t *last(bs_topic_t t)
{
    for (int i = nevs; i-- > 0;)
        if (evs[i].topic == t)
            return &evs[i];
    return NULL;
}

static const char *const SHAPES[BS_TOPIC_COUNT] = {
    [BS_TOPIC_HEAD] = "{slot:u,block:h32,state:h32,epoch_transition:b,previous_duty_dependent_root:"
                      "h32,current_duty_dependent_root:h32,execution_optimistic:b}",
    [BS_TOPIC_HEAD_V2] = "{version:s,data:{slot:u,block:h32,state:h32,payload_status:s,"
                         "epoch_transition:b,current_epoch_dependent_root:h32,"
                         "next_epoch_dependent_root:h32,execution_optimistic:b}}",
    [BS_TOPIC_BLOCK] = "{slot:u,block:h32,execution_optimistic:b}",
    [BS_TOPIC_BLOCK_GOSSIP] = "{slot:u,block:h32}",
    [BS_TOPIC_FINALIZED_CHECKPOINT] = "{block:h32,state:h32,epoch:u,execution_optimistic:b}",
    [BS_TOPIC_CHAIN_REORG] = "{slot:u,depth:u,old_head_block:h32,new_head_block:h32,"
                             "old_head_state:h32,new_head_state:h32,epoch:u,"
                             "execution_optimistic:b}",
    [BS_TOPIC_PAYLOAD_ATTRIBUTES] =
        "{version:s,data:{proposer_index:u,proposal_slot:u,parent_block_number?:u,"
        "parent_block_root:h32,parent_block_hash:h32,payload_attributes:{timestamp:u,"
        "prev_randao:h32,suggested_fee_recipient:h20,withdrawals:[{index:u,validator_index:u,"
        "address:h20,amount:u}],parent_beacon_block_root:h32}}}",
    [BS_TOPIC_EXECUTION_PAYLOAD] =
        "{slot:u,builder_index:u,block_hash:h32,block_root:h32,execution_optimistic:b}",
    [BS_TOPIC_EXECUTION_PAYLOAD_AVAILABLE] = "{slot:u,block_root:h32}",
};

static void check_event_shapes(void)
{
    for (int i = 0; i < nevs; i++) {
        const char *shape = SHAPES[evs[i].topic];
        assert_non_null(shape);
        char err[256];
        if (!bs_shape_check_text(evs[i].data, strlen(evs[i].data), shape, err, sizeof err))
            fail_msg("%s event: %s in %s", bs_topic_name(evs[i].topic), err, evs[i].data);
    }
}

static bs_chain_t *mkchain(double skip, uint64_t gloas_epoch)
{
    bs_chain_cfg_t cfg;
    bs_chain_cfg_default(&cfg);
    cfg.seed = 42;
    cfg.slot_ms = SLOT;
    cfg.slots_per_epoch = 4;
    cfg.genesis_ms = G;
    cfg.skip_rate = skip;
    cfg.nodes = 4;
    cfg.gloas_epoch = gloas_epoch;
    bs_chain_t *c = bs_chain_new(&cfg);
    assert_non_null(c);
    return c;
}

static void mknode(bs_node_t *n, bs_chain_t *c, uint32_t idx, const char *spec, uint64_t now)
{
    bs_behav_t b;
    char err[128];
    assert_int_equal(bs_behav_parse(spec, &b, err, sizeof err), 0);
    assert_int_equal(bs_node_init(n, c, idx, &b, now), 0);
    n->emit = capture;
    n->topic_mask = ~0ull;
    nevs = 0;
}

static uint64_t at(uint64_t slot, uint64_t ms)
{
    return G + slot * SLOT + ms;
}

static void test_lag_800(void **state)
{
    (void)state;
    bs_chain_t *c = mkchain(0, BS_FAR_FUTURE);
    bs_node_t n;
    mknode(&n, c, 0, "lag=800", at(5, 100));
    assert_int_equal(n.head.slot, 4);
    bs_att_data_t d;
    bs_root_t r4 = bs_chain_root(c, (bs_block_id_t){0, 4});
    bs_root_t r5 = bs_chain_root(c, (bs_block_id_t){0, 5});
    bs_node_advance(&n, at(5, 799));
    bs_node_attestation_data(&n, 5, &d);
    assert_true(bs_root_eq(&d.beacon_block_root, &r4));
    assert_int_equal(bs_node_next_due_ms(&n), at(5, 800));
    bs_node_advance(&n, at(5, 800));
    bs_node_attestation_data(&n, 5, &d);
    assert_true(bs_root_eq(&d.beacon_block_root, &r5));
    assert_int_equal(d.index, 0);
    assert_int_equal(d.target.epoch, 1);
    assert_int_equal(d.source.epoch, 0);
    bs_root_t r4t = bs_chain_root(c, (bs_block_id_t){0, 4});
    assert_true(bs_root_eq(&d.target.root, &r4t)); /* epoch 1 starts at slot 4 */
    assert_int_equal(count(BS_TOPIC_HEAD), 1);
    assert_int_equal(count(BS_TOPIC_BLOCK), 1);
    /* a node without lag has slot 5 at once */
    bs_node_t m;
    mknode(&m, c, 1, "", at(5, 0));
    assert_int_equal(m.head.slot, 5);
    /* jitter stays within its bound */
    bs_node_t j;
    mknode(&j, c, 2, "lag=100,jitter=300", at(5, 0));
    for (uint64_t s = 6; s < 30; s++) {
        uint64_t t = bs_node_import_ms(&j, (bs_block_id_t){0, s});
        assert_true(t >= at(s, 100) && t <= at(s, 400));
    }
    check_event_shapes();
    bs_node_dispose(&n);
    bs_node_dispose(&m);
    bs_node_dispose(&j);
    bs_chain_free(c);
}

static void test_stale(void **state)
{
    (void)state;
    bs_chain_t *c = mkchain(0, BS_FAR_FUTURE);
    bs_node_t n;
    mknode(&n, c, 0, "stale", at(3, 10));
    assert_int_equal(n.head.slot, 3); /* knows the chain up to its start */
    bs_node_advance(&n, at(9, 10));
    assert_int_equal(n.head.slot, 3);
    assert_int_equal(bs_node_next_due_ms(&n), UINT64_MAX);
    bs_behav_t d;
    char err[64];
    bs_behav_parse("stale=false", &d, err, sizeof err);
    bs_node_set_behav(&n, &d, at(9, 10));
    assert_int_equal(n.head.slot, 9);
    assert_int_equal(count(BS_TOPIC_HEAD), 1); /* one head event for the catch-up */
    assert_int_equal(count(BS_TOPIC_CHAIN_REORG), 0);
    check_event_shapes();
    bs_node_dispose(&n);
    bs_chain_free(c);
}

static void test_fork_and_rejoin(void **state)
{
    (void)state;
    bs_chain_t *c = mkchain(0, BS_FAR_FUTURE);
    bs_node_t n;
    mknode(&n, c, 0, "", at(4, 10));
    bs_behav_t d;
    char err[64];
    bs_behav_parse("fork", &d, err, sizeof err);
    bs_node_set_behav(&n, &d, at(4, 10));
    bs_node_advance(&n, at(7, 10));
    assert_int_equal(n.head.slot, 7);
    assert_int_not_equal(n.head.branch, 0);
    bs_root_t mine = bs_chain_root(c, n.head), canon = bs_chain_root(c, (bs_block_id_t){0, 7});
    assert_false(bs_root_eq(&mine, &canon));
    /* the shared history is canonical */
    bs_block_id_t b4 = bs_node_block_at(&n, 4);
    assert_int_equal(b4.branch, 0);
    /* duties differ once the dependent root is on the fork */
    bs_root_t dep = bs_node_dependent_root(&n, 3, 1);
    bs_root_t cdep = bs_chain_dependent_root(c, (bs_block_id_t){0, 7}, 3, 1);
    assert_false(bs_root_eq(&dep, &cdep));
    nevs = 0;
    bs_behav_parse("fork=false", &d, err, sizeof err);
    bs_node_set_behav(&n, &d, at(8, 10));
    assert_int_equal(n.head.branch, 0);
    assert_int_equal(n.head.slot, 8);
    const ev_t *e = last(BS_TOPIC_CHAIN_REORG);
    assert_non_null(e);
    if (!strstr(e->data, "\"depth\":\"4\"")) /* fork blocks 5 to 8 */
        fail_msg("reorg: %s", e->data);
    check_event_shapes();
    bs_node_dispose(&n);
    bs_chain_free(c);
}

static void test_late_block_reorg(void **state)
{
    (void)state;
    bs_chain_t *c = mkchain(0, BS_FAR_FUTURE);
    bs_node_t fast, lagging;
    mknode(&fast, c, 0, "", at(4, 10));
    bs_node_t *pf = &fast;
    bs_node_init(&lagging, c, 1, NULL, at(4, 10));
    assert_int_equal(bs_chain_set_late(c, 6, 1200), 0); /* after the 1/3 due time (666 ms) */
    bs_node_advance(pf, at(6, 1199));
    assert_int_equal(pf->head.slot, 5);
    bs_node_advance(pf, at(6, 1200));
    assert_int_equal(pf->head.slot, 6);
    /* the proposer of slot 7 re-orgs the late head: it builds on slot 5 */
    bs_block_id_t parent = bs_node_proposal_parent(pf, 7);
    assert_int_equal(parent.slot, 5);
    nevs = 0;
    bs_node_advance(pf, at(7, 0));
    assert_int_equal(pf->head.slot, 7);
    const ev_t *e = last(BS_TOPIC_CHAIN_REORG);
    assert_non_null(e);
    assert_non_null(strstr(e->data, "\"depth\":\"1\""));
    /* a normal head is not re-orged */
    assert_int_equal(bs_node_proposal_parent(pf, 8).slot, 7);
    check_event_shapes();
    bs_node_dispose(&fast);
    bs_node_dispose(&lagging);
    bs_chain_free(c);
}

static void test_competing(void **state)
{
    (void)state;
    bs_chain_t *c = mkchain(0, BS_FAR_FUTURE);
    bs_node_t a, b;
    mknode(&b, c, 1, "", at(4, 10));
    mknode(&a, c, 0, "", at(4, 10));
    assert_int_equal(bs_chain_set_competing(c, 6, 0x1), 0); /* node 0 sees the other block */
    bs_node_advance(&a, at(6, 10));
    bs_node_advance(&b, at(6, 10));
    bs_root_t ra = bs_chain_root(c, a.head), rb = bs_chain_root(c, b.head);
    assert_false(bs_root_eq(&ra, &rb));
    assert_int_equal(a.head.slot, 6);
    assert_int_equal(b.head.slot, 6);
    nevs = 0;
    bs_node_advance(&a, at(7, 10));
    assert_non_null(last(BS_TOPIC_CHAIN_REORG));
    bs_node_advance(&b, at(7, 10));
    assert_true(bs_block_id_eq(a.head, b.head));
    check_event_shapes();
    bs_node_dispose(&a);
    bs_node_dispose(&b);
    bs_chain_free(c);
}

static void test_finality(void **state)
{
    (void)state;
    bs_chain_t *c = mkchain(0, BS_FAR_FUTURE);
    bs_node_t n;
    mknode(&n, c, 0, "", at(1, 10));
    bs_node_advance(&n, at(17, 10)); /* epoch 4 */
    bs_checkpoint_t pj, cj, fin;
    bs_node_checkpoints(&n, &pj, &cj, &fin);
    assert_int_equal(cj.epoch, 3);
    assert_int_equal(fin.epoch, 2);
    bs_root_t r8 = bs_chain_root(c, (bs_block_id_t){0, 8});
    assert_true(bs_root_eq(&fin.root, &r8));
    assert_true(count(BS_TOPIC_FINALIZED_CHECKPOINT) >= 1);
    const ev_t *e = last(BS_TOPIC_FINALIZED_CHECKPOINT);
    assert_non_null(strstr(e->data, "\"epoch\":\"2\""));
    assert_true(bs_node_finalized(&n, (bs_block_id_t){0, 8}));
    assert_false(bs_node_finalized(&n, (bs_block_id_t){0, 9}));
    check_event_shapes();
    bs_node_dispose(&n);
    bs_chain_free(c);
}

static void test_clock_skew(void **state)
{
    (void)state;
    bs_chain_t *c = mkchain(0, BS_FAR_FUTURE);
    bs_node_t n;
    mknode(&n, c, 0, "clock-skew=6000", at(4, 10));
    assert_int_equal(n.head.slot, 7);
    assert_int_equal(bs_node_slot(&n, at(4, 10)), 7);
    assert_int_equal(bs_node_next_due_ms(&n), at(5, 0));
    bs_node_dispose(&n);
    bs_chain_free(c);
}

static void test_gloas_payload(void **state)
{
    (void)state;
    bs_chain_t *c = mkchain(0, 0);
    bs_node_t n;
    mknode(&n, c, 0, "payload-delay=500", at(3, 10));
    bs_node_advance(&n, at(4, 0));
    assert_int_equal(n.head.slot, 4);
    assert_false(n.head_full);
    bs_att_data_t d;
    bs_node_attestation_data(&n, 5, &d);
    assert_int_equal(d.index, 0); /* head 4, payload still empty */
    bs_node_attestation_data(&n, 4, &d);
    assert_int_equal(d.index, 0); /* same-slot head: always 0 */
    assert_int_equal(bs_node_next_due_ms(&n), at(4, 500));
    bs_node_advance(&n, at(4, 500));
    assert_true(n.head_full);
    bs_node_attestation_data(&n, 5, &d);
    assert_int_equal(d.index, 1);
    assert_int_equal(count(BS_TOPIC_HEAD_V2), 2);
    const ev_t *first = NULL;
    for (int i = 0; i < nevs && !first; i++)
        if (evs[i].topic == BS_TOPIC_HEAD_V2)
            first = &evs[i];
    assert_non_null(strstr(first->data, "\"payload_status\":\"empty\""));
    const ev_t *e = last(BS_TOPIC_HEAD_V2);
    assert_non_null(strstr(e->data, "\"payload_status\":\"full\""));
    assert_int_equal(count(BS_TOPIC_EXECUTION_PAYLOAD_AVAILABLE), 1);
    e = last(BS_TOPIC_PAYLOAD_ATTRIBUTES);
    assert_non_null(e);
    assert_null(strstr(e->data, "parent_block_number")); /* removed from gloas */
    check_event_shapes();
    bs_node_dispose(&n);
    bs_chain_free(c);
}

static void test_att_memo_and_root(void **state)
{
    (void)state;
    bs_chain_t *c = mkchain(0.2, BS_FAR_FUTURE);
    bs_node_t n;
    mknode(&n, c, 0, "", at(20, 10));
    bs_att_data_t d, back;
    bs_node_attestation_data(&n, 20, &d);
    bs_root_t r = bs_att_data_root(&d);
    assert_false(bs_node_find_att(&n, &r, &back));
    bs_node_memo_att(&n, &d);
    assert_true(bs_node_find_att(&n, &r, &back));
    assert_memory_equal(&back, &d, sizeof d);
    d.index = 1;
    bs_root_t r2 = bs_att_data_root(&d);
    assert_false(bs_root_eq(&r, &r2));
    /* every block of the node's chain is found by root */
    for (uint64_t s = 0; s <= n.head.slot; s++) {
        bs_block_id_t b = bs_node_block_at(&n, s), f;
        bs_root_t br = bs_chain_root(c, b);
        assert_true(bs_node_find_root(&n, &br, &f));
        assert_true(bs_block_id_eq(f, b));
    }
    bs_root_t unknown = {{1, 2, 3}};
    bs_block_id_t f;
    assert_false(bs_node_find_root(&n, &unknown, &f));
    /* liveness */
    bs_node_mark_live(&n, 5, 3);
    assert_true(bs_node_is_live(&n, 5, 3));
    assert_false(bs_node_is_live(&n, 5, 4));
    assert_false(bs_node_is_live(&n, 6, 3));
    /* submissions are kept in order and cleared */
    bm_buf_t *body = bm_buf_from_str("[1]");
    assert_int_equal(bs_node_record(&n, 1, "r", "/x", "application/json", "fulu", NULL, body, 200),
                     1);
    assert_int_equal(bs_node_record(&n, 2, "r", "/y", NULL, NULL, NULL, NULL, 400), 2);
    bm_buf_unref(body);
    assert_int_equal(n.nsubs, 2);
    bs_node_clear_submissions(&n);
    assert_int_equal(n.nsubs, 0);
    bs_node_dispose(&n);
    bs_chain_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lag_800),           cmocka_unit_test(test_stale),
        cmocka_unit_test(test_fork_and_rejoin),   cmocka_unit_test(test_late_block_reorg),
        cmocka_unit_test(test_competing),         cmocka_unit_test(test_finality),
        cmocka_unit_test(test_clock_skew),        cmocka_unit_test(test_gloas_payload),
        cmocka_unit_test(test_att_memo_and_root),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
