/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of health judged against the cluster: the pool's nodes, the health judge
 * and the head tracker wired as in production, fed with synthetic head events, syncing
 * answers and times. The assertions are on states (and their counts), never log text.
 */
#include "base/err.h"
#include "cluster/head.h"
#include "cluster/health.h"
#include "cluster/pool.h"
#include "truth_chain.h"

typedef struct fx {
    bm_pool_t *pool;
    bm_health_t *health;
    bm_head_t *head;
    bm_node_t *n[8];
    size_t count;
    truth_t truth;
    uint64_t now;
    int transitions[8];
} fx_t;

static fx_t *F;

static void on_fetch(const uint8_t root[32], uint64_t slot, size_t node, void *ud)
{
    unsigned id;
    if (is_truth(root, &id) && F->truth.exists[id])
        bm_head_on_parent(F->head, node, root, F->truth.slot[id], R(F->truth.parent[id]).b, F->now);
    else
        bm_head_on_parent_failed(F->head, node, root, F->now);
}

static void on_state(bm_node_t *n, bm_node_state_t old, void *ud)
{
    F->transitions[n->index]++;
}

/* `count` discovered, reachable nodes; health (with `o`) and the tracker attached, the
 * tracker's clock set at `start` (Unix ms). */
static void make_at(size_t count, const bm_health_opts_t *o, uint64_t start)
{
    F->pool = bm_pool_new();
    assert_non_null(F->pool);
    F->count = count;
    for (size_t i = 0; i < count; i++) {
        char id[32], url[48];
        snprintf(id, sizeof id, "n%zu", i);
        snprintf(url, sizeof url, "http://127.0.0.1:%zu", 10000 + i);
        F->n[i] = bm_pool_add(F->pool, id, url, NULL);
        assert_non_null(F->n[i]);
    }
    F->health = bm_health_new(F->pool, o);
    assert_non_null(F->health);
    assert_int_equal(bm_pool_on_state(F->pool, on_state, NULL), 0);
    bm_head_opts_t ho;
    bm_head_opts_default(&ho);
    ho.chase_epochs = 1;
    F->head = bm_head_new(count, &ho);
    assert_non_null(F->head);
    bm_head_set_fetch(F->head, on_fetch, NULL);
    bm_slot_clock_t c = {GENESIS, SLOT, SPE};
    F->now = start;
    assert_int_equal(bm_head_set_clock(F->head, &c, F->now), 0);
    assert_int_equal(bm_health_set_head(F->health, F->head), 0);
    for (size_t i = 0; i < count; i++)
        bm_pool_set_network(F->pool, F->n[i], BM_NET_OK, "same network");
}

/* ... with the chain running (slot 90). */
static void make(size_t count, const bm_health_opts_t *o)
{
    make_at(count, o, T(90, 0));
}

static int setup(void **state)
{
    F = calloc(1, sizeof *F);
    if (F == NULL)
        return -1;
    TRUTH = &F->truth;
    return 0;
}

static int teardown(void **state)
{
    bm_health_free(F->health);
    bm_head_free(F->head);
    bm_pool_free(F->pool);
    free(F);
    F = NULL;
    return 0;
}

static void head_ev(size_t node, unsigned id, uint64_t slot, bool optimistic, uint64_t now)
{
    bm_head_event_t ev = {0};
    ev.slot = slot;
    memcpy(ev.root, R(id).b, 32);
    ev.optimistic = optimistic;
    ev.topic = BM_HEAD_TOPIC_HEAD_V2;
    ev.payload = BM_PAYLOAD_EMPTY;
    F->now = now;
    assert_int_equal(bm_head_on_head(F->head, node, &ev, now), 0);
}

static void head(size_t node, unsigned id, uint64_t now)
{
    assert_true(F->truth.exists[id]);
    head_ev(node, id, F->truth.slot[id], false, now);
}

static void tick(uint64_t now)
{
    F->now = now;
    bm_head_tick(F->head, now);
}

static bm_node_state_t st(size_t i)
{
    return F->n[i]->state;
}

static void sync_answer(size_t i, bool syncing, bool optimistic, bool el_offline,
                        uint64_t head_slot, uint64_t now)
{
    bm_node_syncing_t s = {0};
    s.is_syncing = syncing;
    s.is_optimistic = optimistic;
    s.el_offline = el_offline;
    s.head_slot = head_slot;
    s.sync_distance = 0;
    F->now = now;
    bm_health_set_syncing(F->health, F->n[i], &s, now);
}

/* The chain 95..110, three nodes (health with `o`) each with head 100, 300 ms into its slot. */
static void three_at_100(const bm_health_opts_t *o)
{
    linear(95, 110);
    make(3, o);
    for (size_t i = 0; i < 3; i++)
        head(i, 100, T(100, 300));
}

static bool cluster_at(unsigned id)
{
    bm_head_info_t h;
    return bm_head_cluster(F->head, &h) && memcmp(h.root, R(id).b, 32) == 0;
}

/* ---- tests ---------------------------------------------------------------------------- */

/* Before genesis a node without a head is ready (there is nothing to know yet); once the
 * chain runs it is no-head until a head of its is known, whatever the cluster head. */
static void test_no_head_once_the_chain_runs(void **state)
{
    linear(1, 10);
    make_at(3, NULL, T(0, -5000));
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(st(i), BM_NODE_READY);
        assert_false(F->n[i]->head_lag_known);
        assert_non_null(strstr(F->n[i]->state_reason, "not started"));
    }
    assert_false(bm_head_chain_slot(F->head, NULL));
    assert_int_equal(bm_health_quorum_base(F->health), 3);
    assert_int_equal(bm_health_quorum(F->health), 2);
    assert_int_equal(bm_head_quorum(F->head), 2);
    /* genesis: the chain runs and no head is known from anyone */
    tick(T(0, 0));
    uint64_t slot = 99;
    assert_true(bm_head_chain_slot(F->head, &slot));
    assert_int_equal(slot, 0);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(st(i), BM_NODE_NO_HEAD);
        assert_non_null(strstr(F->n[i]->state_reason, "no head known"));
        assert_non_null(strstr(F->n[i]->state_reason, "no cluster head either"));
    }
    /* the quorum base does not depend on heads: no-head nodes still count */
    assert_int_equal(bm_health_quorum_base(F->health), 3);
    /* one head from one node is no cluster head yet (quorum 2), but that node is judged */
    head(0, 1, T(1, 300));
    assert_int_equal(st(0), BM_NODE_READY);
    assert_non_null(strstr(F->n[0]->state_reason, "no cluster head yet"));
    assert_int_equal(st(1), BM_NODE_NO_HEAD);
    head(1, 1, T(1, 400));
    assert_true(cluster_at(1));
    /* a cluster head does not make a node without a head ready, not even for a slot */
    assert_int_equal(st(2), BM_NODE_NO_HEAD);
    assert_null(strstr(F->n[2]->state_reason, "no cluster head either"));
    assert_false(F->n[2]->head_lag_known);
    head(2, 1, T(1, 500));
    assert_int_equal(st(2), BM_NODE_READY);
    assert_int_equal(F->n[2]->head_lag, 0);
    /* precedence: a node that says it is syncing is syncing, head or not */
    teardown(state);
    setup(state);
    linear(1, 10);
    make_at(2, NULL, T(3, 0));
    assert_int_equal(st(0), BM_NODE_NO_HEAD);
    sync_answer(0, true, false, false, 1, T(3, 100));
    assert_int_equal(st(0), BM_NODE_SYNCING);
    assert_int_equal(bm_node_rank(F->n[1]), bm_node_rank(&(bm_node_t){.state = BM_NODE_LAGGING}));
}

static void test_lag_against_max_head_lag(void **state)
{
    three_at_100(NULL);
    head(0, 101, T(101, 200));
    head(1, 101, T(101, 300));
    assert_true(cluster_at(101));
    assert_int_equal(st(2), BM_NODE_READY); /* one behind: within maxHeadLag 1 */
    assert_true(F->n[2]->head_lag_known);
    assert_int_equal(F->n[2]->head_lag, 1);
    head(0, 102, T(102, 200)); /* re-evaluated at the head event */
    assert_int_equal(F->n[2]->head_lag, 2);
    assert_int_equal(st(2), BM_NODE_LAGGING);
    assert_int_equal(st(1), BM_NODE_READY);
    assert_int_equal(F->n[0]->head_lag, 0);
    head(2, 102, T(102, 4000));
    assert_int_equal(st(2), BM_NODE_READY);

    /* maxHeadLag 0: one slot behind is already lagging */
    teardown(state);
    setup(state);
    bm_health_opts_t o;
    bm_health_opts_default(&o);
    o.max_head_lag = 0;
    three_at_100(&o);
    head(0, 101, T(101, 200));
    assert_int_equal(st(0), BM_NODE_READY);
    assert_int_equal(st(1), BM_NODE_LAGGING);
    assert_int_equal(st(2), BM_NODE_LAGGING);
}

static void test_syncing_poll_only_worsens(void **state)
{
    three_at_100(NULL);
    for (unsigned s = 101; s <= 103; s++) {
        head(0, s, T(s, 200));
        head(1, s, T(s, 300));
    }
    assert_int_equal(st(2), BM_NODE_LAGGING);
    /* a syncing answer claiming to be at the head does not make it ready */
    sync_answer(2, false, false, false, 103, T(103, 1000));
    assert_int_equal(st(2), BM_NODE_LAGGING);
    /* but one saying it is syncing, optimistic or EL-offline makes a ready node worse */
    sync_answer(0, true, false, false, 103, T(103, 1100));
    assert_int_equal(st(0), BM_NODE_SYNCING);
    sync_answer(0, false, true, false, 103, T(103, 1200));
    assert_int_equal(st(0), BM_NODE_OPTIMISTIC);
    sync_answer(0, false, false, true, 103, T(103, 1300));
    assert_int_equal(st(0), BM_NODE_OPTIMISTIC);
    assert_non_null(strstr(F->n[0]->state_reason, "el_offline"));
    /* a clean answer leaves the judgement to the cluster comparison again */
    sync_answer(0, false, false, false, 103, T(103, 1400));
    assert_int_equal(st(0), BM_NODE_READY);
    /* a node that says syncing may not vote: its heads do not move the cluster head */
    sync_answer(1, true, false, false, 103, T(103, 1500));
    bm_head_node_view_t v;
    assert_int_equal(bm_head_node_view(F->head, 1, &v), 0);
    assert_false(v.may_vote);
    assert_false(v.voter);
}

static void test_time_discrepancy_from_syncing_poll(void **state)
{
    three_at_100(NULL);
    sync_answer(1, false, false, false, 103, T(101, 0)); /* two slots ahead */
    assert_int_equal(st(1), BM_NODE_TIME_DISCREPANCY);
    sync_answer(1, false, false, false, 101, T(101, 10));
    assert_int_equal(st(1), BM_NODE_READY);
}

static void test_stale_node_becomes_lagging(void **state)
{
    three_at_100(NULL);
    head(0, 101, T(101, 200));
    head(1, 101, T(101, 300));
    tick(T(102, 0));
    assert_int_equal(st(2), BM_NODE_READY);
    head(0, 102, T(102, 200));
    assert_int_equal(st(2), BM_NODE_LAGGING); /* node 2 stopped; the cluster moved on */
    /* its stream drops: the stale head is kept for lag, and says so */
    F->now = T(102, 300);
    bm_head_on_disconnect(F->head, 2, F->now);
    assert_int_equal(st(2), BM_NODE_LAGGING);
    assert_non_null(strstr(F->n[2]->state_reason, "stream"));
    assert_int_equal(F->n[2]->head_lag, 2);
    head(1, 102, T(102, 400));
    assert_int_equal(st(1), BM_NODE_READY);
}

static void test_one_broken_node_does_not_make_others_lagging(void **state)
{
    linear(80, 120);
    blk(1101, 99, 101); /* node 4's own branch, from 99, always ahead */
    for (unsigned s = 102; s <= 106; s++)
        blk(1000 + s, 1000 + s - 1, s);
    make(5, NULL);
    for (size_t i = 0; i < 5; i++)
        head(i, 100, T(100, 300));
    assert_true(cluster_at(100));
    for (unsigned s = 101; s <= 104; s++) {
        /* node 2 announces blocks from the future, node 3 optimistic ones a slot ahead,
         * node 4 its own branch, early in each slot */
        head_ev(2, 2000 + s, s + 3, false, T(s, 10));
        head_ev(3, 3000 + s, s + 1, true, T(s, 20));
        head(4, 1000 + s, T(s, 50));
        head(0, s, T(s, 300));
        head(1, s, T(s, 400));
        tick(T(s, 500));
    }
    tick(T(105, 0));
    assert_true(cluster_at(104));
    assert_int_equal(st(0), BM_NODE_READY);
    assert_int_equal(st(1), BM_NODE_READY);
    assert_int_equal(F->n[0]->head_lag, 0);
    assert_int_equal(F->n[1]->head_lag, 0);
    assert_int_equal(st(2), BM_NODE_TIME_DISCREPANCY);
    assert_int_equal(st(3), BM_NODE_OPTIMISTIC);
    assert_int_equal(st(4), BM_NODE_FORKED);
    /* only the two healthy ones count: quorum 1 now */
    assert_int_equal(bm_health_quorum_base(F->health), 2);
    assert_int_equal(bm_head_quorum(F->head), 1);
    /* the forked node rejoins */
    head(4, 104, T(105, 100));
    assert_int_equal(st(4), BM_NODE_READY);
    assert_int_equal(bm_health_quorum_base(F->health), 3);
    assert_int_equal(bm_head_quorum(F->head), 2);
}

static void test_quorum_default_follows_ready_count(void **state)
{
    linear(95, 110);
    make(4, NULL);
    assert_int_equal(bm_head_quorum(F->head), 2);
    /* lag does not count: a lagging node still counts for the quorum base */
    for (size_t i = 0; i < 4; i++)
        head(i, 100, T(100, 300));
    head(0, 101, T(101, 100));
    head(0, 102, T(102, 100));
    assert_int_equal(st(3), BM_NODE_LAGGING);
    assert_int_equal(bm_health_quorum_base(F->health), 4);
    /* unreachable and wrong-network nodes do not */
    bm_pool_record(F->pool, F->n[3], BM_OUTCOME_NET_ERROR, true, 0, "connection refused");
    assert_int_equal(st(3), BM_NODE_UNREACHABLE);
    bm_pool_set_network(F->pool, F->n[2], BM_NET_WRONG, "genesis differs");
    assert_int_equal(st(2), BM_NODE_WRONG_NETWORK);
    assert_int_equal(bm_health_quorum_base(F->health), 2);
    assert_int_equal(bm_head_quorum(F->head), 1);
    bm_head_node_view_t v;
    assert_int_equal(bm_head_node_view(F->head, 2, &v), 0);
    assert_false(v.may_vote); /* another network never votes */
    bm_pool_record(F->pool, F->n[3], BM_OUTCOME_OK, false, 1000, NULL);
    assert_int_equal(bm_head_quorum(F->head), 2);

    /* a configured headQuorum wins */
    teardown(state);
    setup(state);
    linear(95, 110);
    bm_health_opts_t o;
    bm_health_opts_default(&o);
    o.head_quorum = 3;
    make(3, &o);
    assert_int_equal(bm_head_quorum(F->head), 3);
    head(0, 100, T(100, 300));
    head(1, 100, T(100, 300));
    bm_head_info_t h;
    assert_false(bm_head_cluster(F->head, &h));
    head(2, 100, T(100, 300));
    assert_true(cluster_at(100));
}

/* A shadow node is judged like any node but counts for nothing: not in the quorum base, an
 * observer for the tracker (its head moves nothing), and its state is its own. */
static void test_shadow_counts_for_nothing(void **state)
{
    linear(95, 110);
    make(4, NULL);
    assert_int_equal(bm_health_quorum_base(F->health), 4);
    bm_pool_set_shadow(F->n[3], true);
    bm_health_eval_all(F->health);
    assert_int_equal(bm_health_quorum_base(F->health), 3);
    assert_int_equal(bm_head_quorum(F->head), 2);
    bm_head_node_view_t v;
    assert_int_equal(bm_head_node_view(F->head, 3, &v), 0);
    assert_true(v.observer);
    /* with two serving nodes the quorum is 1: the shadow's base never makes it 2 */
    bm_pool_record(F->pool, F->n[2], BM_OUTCOME_NET_ERROR, true, 0, "connection refused");
    assert_int_equal(bm_health_quorum_base(F->health), 2);
    assert_int_equal(bm_head_quorum(F->head), 1);
    /* its head alone is no cluster head, however early */
    head(3, 100, T(100, 100));
    assert_false(cluster_at(100));
    head(0, 100, T(100, 300));
    assert_true(cluster_at(100));
    assert_int_equal(st(3), BM_NODE_READY);
    /* judged: it falls behind like any node */
    head(0, 101, T(101, 100));
    head(0, 102, T(102, 100));
    assert_int_equal(st(3), BM_NODE_LAGGING);
    /* and a serving count of nodes in a state leaves it out */
    assert_int_equal(bm_pool_count_state(F->pool, BM_NODE_LAGGING), 0);
    assert_int_equal(bm_pool_count_state(F->pool, BM_NODE_NO_HEAD), 1); /* node 1 */
    head(1, 102, T(102, 200));
    head(3, 102, T(102, 300));
    assert_int_equal(st(3), BM_NODE_READY);
    assert_int_equal(bm_pool_count_state(F->pool, BM_NODE_READY), 2);
    assert_false(bm_node_usable(F->n[3]));
}

static void test_state_precedence(void **state)
{
    linear(95, 110);
    blk(1101, 99, 101);
    blk(1102, 1101, 102);
    make(4, NULL);
    for (size_t i = 0; i < 4; i++)
        head(i, 100, T(100, 300));
    /* forked beats syncing and optimistic */
    head(3, 1101, T(101, 100)); /* off the chain from here */
    head(0, 101, T(101, 300));
    head(1, 101, T(101, 300));
    head(2, 101, T(101, 300));
    head(3, 1102, T(102, 100));
    tick(T(102, 100));
    assert_int_equal(st(3), BM_NODE_READY); /* one slot off is not yet forked */
    tick(T(102, 200));
    assert_int_equal(st(3), BM_NODE_FORKED);
    sync_answer(3, true, true, false, 102, T(102, 300));
    assert_int_equal(st(3), BM_NODE_FORKED);
    /* time-discrepancy beats forked */
    head_ev(3, 1999, 110, false, T(102, 400));
    assert_int_equal(st(3), BM_NODE_TIME_DISCREPANCY);
    /* unreachable beats time-discrepancy; wrong-network beats unreachable */
    bm_pool_record(F->pool, F->n[3], BM_OUTCOME_NET_ERROR, true, 0, "refused");
    assert_int_equal(st(3), BM_NODE_UNREACHABLE);
    bm_pool_set_network(F->pool, F->n[3], BM_NET_WRONG, "other chain");
    assert_int_equal(st(3), BM_NODE_WRONG_NETWORK);
    /* syncing beats optimistic, optimistic beats lagging */
    head(0, 102, T(102, 500));
    head(1, 102, T(102, 500));
    head(0, 103, T(103, 500));
    assert_int_equal(st(2), BM_NODE_LAGGING);
    sync_answer(2, false, true, false, 101, T(103, 600));
    assert_int_equal(st(2), BM_NODE_OPTIMISTIC);
    sync_answer(2, true, true, false, 101, T(103, 700));
    assert_int_equal(st(2), BM_NODE_SYNCING);
    /* undiscovered beats everything head-related */
    bm_pool_set_network(F->pool, F->n[2], BM_NET_UNKNOWN, "rediscovering");
    assert_int_equal(st(2), BM_NODE_UNKNOWN);
}

static void test_transitions_counted_once(void **state)
{
    three_at_100(NULL);
    memset(F->transitions, 0, sizeof F->transitions);
    head(0, 101, T(101, 300));
    head(0, 102, T(102, 300));
    assert_int_equal(st(2), BM_NODE_LAGGING);
    assert_int_equal(F->transitions[2], 1);
    for (int k = 0; k < 5; k++) {
        tick(T(102, 1000 + k));
        bm_health_eval_all(F->health);
    }
    assert_int_equal(F->transitions[2], 1); /* re-evaluations that change nothing */
    head(2, 102, T(102, 2000));
    assert_int_equal(st(2), BM_NODE_READY);
    assert_int_equal(F->transitions[2], 2);
    assert_int_equal(F->transitions[0], 0);
}

static void test_detach_and_free_order(void **state)
{
    three_at_100(NULL);
    head(0, 101, T(101, 300));
    head(0, 102, T(102, 300));
    assert_int_equal(st(2), BM_NODE_LAGGING);
    assert_int_equal(bm_health_set_head(F->health, NULL), 0);
    assert_int_equal(st(2), BM_NODE_READY); /* without a tracker, the issue-2 rules */
    /* a tracker with fewer nodes than the pool is refused */
    bm_head_t *small = bm_head_new(2, NULL);
    assert_int_equal(bm_health_set_head(F->health, small), BM_EINVAL);
    bm_head_free(small);
    assert_int_equal(bm_health_set_head(F->health, F->head), 0);
    assert_int_equal(st(2), BM_NODE_LAGGING);
    /* health freed first: the tracker goes on without calling it */
    bm_health_free(F->health);
    F->health = NULL;
    head(0, 103, T(103, 300));
    assert_true(cluster_at(103));
}

int main(void)
{
#define TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        TEST(test_no_head_once_the_chain_runs),
        TEST(test_lag_against_max_head_lag),
        TEST(test_syncing_poll_only_worsens),
        TEST(test_time_discrepancy_from_syncing_poll),
        TEST(test_stale_node_becomes_lagging),
        TEST(test_one_broken_node_does_not_make_others_lagging),
        TEST(test_quorum_default_follows_ready_count),
        TEST(test_shadow_counts_for_nothing),
        TEST(test_state_precedence),
        TEST(test_transitions_counted_once),
        TEST(test_detach_and_free_order),
    };
#undef TEST
    return cmocka_run_group_tests(tests, NULL, NULL);
}
