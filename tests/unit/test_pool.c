/* SPDX-License-Identifier: MIT */
/* Unit tests of pool (nodes, inputs, figures, names) and health (the state function). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "cluster/health.h"
#include "cluster/pool.h"

static int transitions;
static bm_node_state_t last_old, last_new;

static void on_state(bm_node_t *n, bm_node_state_t old, void *ud)
{
    transitions++;
    last_old = old;
    last_new = n->state;
    (*(int *)ud)++;
}

static void test_add_find_and_masking(void **state)
{
    bm_pool_t *p = bm_pool_new();
    bm_hdrs_t extra;
    bm_hdrs_init(&extra);
    bm_hdrs_add_z(&extra, "X-Api-Key", "k");
    bm_node_t *a = bm_pool_add(p, "a", "https://user:secret@host.example:5052/api", &extra);
    assert_non_null(a);
    assert_null(strstr(a->url_masked, "secret"));
    assert_non_null(strstr(a->url_masked, "host.example"));
    assert_string_equal(bm_hdrs_get(&a->extra, "x-api-key"), "k");
    bm_hdrs_dispose(&extra);
    assert_null(bm_pool_add(p, "a", "http://127.0.0.1:1", NULL)); /* duplicate id */
    assert_null(bm_pool_add(p, "b", "ftp://127.0.0.1:1", NULL));  /* not http(s) */
    bm_node_t *b = bm_pool_add(p, "b", "http://127.0.0.1:1", NULL);
    assert_non_null(b);
    assert_int_equal(bm_pool_count(p), 2);
    assert_ptr_equal(bm_pool_find(p, "b"), b);
    assert_int_equal(b->index, 1);
    assert_null(bm_pool_find(p, "c"));
    bm_pool_free(p);
}

static void test_health_follows_inputs(void **state)
{
    bm_pool_t *p = bm_pool_new();
    bm_node_t *n = bm_pool_add(p, "n", "http://127.0.0.1:1", NULL);
    bm_health_t *h = bm_health_new(p, NULL);
    int calls = 0;
    assert_int_equal(bm_pool_on_state(p, on_state, &calls), 0);
    transitions = 0;
    assert_int_equal(n->state, BM_NODE_UNKNOWN);

    bm_pool_set_network(p, n, BM_NET_OK, "same network");
    assert_int_equal(n->state, BM_NODE_READY);
    assert_int_equal(transitions, 1);
    assert_int_equal(last_old, BM_NODE_UNKNOWN);

    /* one timeout is not enough; the second makes the node unreachable */
    bm_pool_record(p, n, BM_OUTCOME_NET_ERROR, false, 0, "timed out");
    assert_int_equal(n->state, BM_NODE_READY);
    bm_pool_record(p, n, BM_OUTCOME_NET_ERROR, false, 0, "timed out");
    assert_int_equal(n->state, BM_NODE_UNREACHABLE);
    assert_non_null(strstr(n->state_reason, "timed out"));
    /* any HTTP answer brings it back, even a 5xx (the node is up, just failing) */
    bm_pool_record(p, n, BM_OUTCOME_HTTP_5XX, false, 1000, NULL);
    assert_int_equal(n->state, BM_NODE_READY);
    /* a probe left unanswered (a stopped node): unreachable at once, until it answers */
    bm_pool_set_unresponsive(p, n, "no answer within %d ms", 500);
    assert_int_equal(n->state, BM_NODE_UNREACHABLE);
    assert_string_equal(n->state_reason, "no answer within 500 ms");
    bm_pool_set_unresponsive(p, n, "again");
    assert_string_equal(n->state_reason, "no answer within 500 ms");
    /* discovery's word about its network does not hide why it is unreachable */
    bm_pool_set_network(p, n, BM_NET_OK, "same network");
    assert_string_equal(n->state_reason, "no answer within 500 ms");
    bm_pool_record(p, n, BM_OUTCOME_OK, false, 1000, NULL);
    assert_int_equal(n->state, BM_NODE_READY);
    /* a refused connection is certain: unreachable at once */
    bm_pool_record(p, n, BM_OUTCOME_NET_ERROR, true, 0, "connection refused");
    assert_int_equal(n->state, BM_NODE_UNREACHABLE);
    /* wrong network wins over everything */
    bm_pool_set_network(p, n, BM_NET_WRONG, "genesis differs");
    assert_int_equal(n->state, BM_NODE_WRONG_NETWORK);
    assert_false(bm_node_usable(n));
    assert_int_equal(transitions, 7);
    assert_int_equal(calls, 7);
    /* a repeated input that changes nothing makes no transition */
    bm_pool_set_network(p, n, BM_NET_WRONG, "genesis differs");
    assert_int_equal(transitions, 7);
    assert_int_equal(n->stats.requests, 5);
    assert_int_equal(n->stats.errors, 4);
    bm_health_free(h);
    bm_pool_free(p);
}

static void test_rank_and_latency(void **state)
{
    bm_pool_t *p = bm_pool_new();
    bm_node_t *n = bm_pool_add(p, "n", "http://127.0.0.1:1", NULL);
    n->state = BM_NODE_READY;
    int ready = bm_node_rank(n);
    n->state = BM_NODE_LAGGING;
    int lagging = bm_node_rank(n);
    n->state = BM_NODE_NO_HEAD;
    int no_head = bm_node_rank(n);
    n->state = BM_NODE_OPTIMISTIC;
    int optimistic = bm_node_rank(n);
    n->state = BM_NODE_UNREACHABLE;
    int unreachable = bm_node_rank(n);
    assert_true(ready < lagging && lagging < unreachable);
    /* a node whose head is unknown still answers: after ready, with lagging */
    assert_true(ready < no_head && no_head == lagging && no_head < optimistic);
    n->state = BM_NODE_NO_HEAD;
    assert_true(bm_node_usable(n));
    for (int i = 0; i < 98; i++)
        bm_pool_record(p, n, BM_OUTCOME_OK, false, 3000, NULL); /* 3 ms */
    bm_pool_record(p, n, BM_OUTCOME_OK, false, 400000, NULL);   /* 400 ms */
    bm_pool_record(p, n, BM_OUTCOME_OK, false, 400000, NULL);
    assert_true(bm_node_latency_pct(n, 50) <= 5.0);
    assert_true(bm_node_latency_pct(n, 50) >= 3.0);
    assert_true(bm_node_latency_pct(n, 99) >= 400.0);
    assert_true(n->stats.latency_ewma_ms > 3.0);
    bm_pool_free(p);
}

/* The percentile of the window by sorting a copy: what bm_node_recent_latency_ms must give. */
static double sorted_percentile(const uint32_t *ring, uint32_t k, double pct)
{
    uint32_t v[BM_RECENT_WINDOW];
    memcpy(v, ring, k * sizeof v[0]);
    for (uint32_t i = 1; i < k; i++)
        for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            uint32_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    uint32_t idx = (uint32_t)ceil((double)k * pct / 100.0);
    idx = idx == 0 ? 0 : idx - 1;
    return (double)v[idx < k ? idx : k - 1] / 1000.0;
}

/* The window's percentiles, kept up to date sample by sample, equal those of a sort of the
 * last BM_RECENT_WINDOW successful latencies at every step: while the window fills, once it
 * evicts, with repeated values, failures in between (no sample) and values at the limits. */
static void test_recent_latency_incremental(void **state)
{
    bm_pool_t *p = bm_pool_new();
    bm_node_t *n = bm_pool_add(p, "n", "http://127.0.0.1:1", NULL);
    assert_true(bm_node_recent_latency_ms(n, 90) == 0);
    uint32_t ring[BM_RECENT_WINDOW];
    uint32_t k = 0, pos = 0;
    uint64_t rng = 88172645463325252ull;
    const double pcts[] = {0, 1, 50, 90, 99, 100};
    for (int step = 0; step < 2000; step++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if (rng % 7 == 0) { /* a failure: counted as an error, no latency sample */
            bm_pool_record(p, n, BM_OUTCOME_HTTP_5XX, false, 5, NULL);
            continue;
        }
        uint64_t us = step % 97 == 0 ? UINT64_MAX             /* clamped to UINT32_MAX */
                      : step < 300   ? (rng >> 8) % 16 * 1000 /* many equal values */
                                     : (rng >> 8) % 2000000;
        bm_pool_record(p, n, BM_OUTCOME_OK, false, us, NULL);
        ring[pos] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
        pos = (pos + 1) % BM_RECENT_WINDOW;
        if (k < BM_RECENT_WINDOW)
            k++;
        for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
            assert_true(bm_node_recent_latency_ms(n, pcts[i]) ==
                        sorted_percentile(ring, k, pcts[i]));
    }
    assert_int_equal(k, BM_RECENT_WINDOW);
    bm_pool_free(p);
}

/* A request's candidates: the preferred nodes, else every usable one; ranked or in pool order. */
static void test_candidates(void **state)
{
    (void)state;
    bm_pool_t *p = bm_pool_new();
    const char *ids[] = {"a", "b", "c", "d", "e"};
    bm_node_t *n[5];
    for (int i = 0; i < 5; i++) {
        char url[32];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", i + 1);
        n[i] = bm_pool_add(p, ids[i], url, NULL);
        assert_non_null(n[i]);
    }
    /* a: unreachable, b: syncing, c: ready, d: wrong network, e: ready */
    n[0]->state = BM_NODE_UNREACHABLE;
    n[1]->state = BM_NODE_SYNCING;
    n[2]->state = BM_NODE_READY;
    n[3]->state = BM_NODE_WRONG_NETWORK;
    n[4]->state = BM_NODE_READY;
    for (int i = 0; i < 5; i++)
        n[i]->reachable = i == 1 || i == 3;
    bm_node_t *out[8];
    assert_int_equal(bm_pool_candidates(p, BM_POOL_PREFER_READY, true, out, 8), 2);
    assert_ptr_equal(out[0], n[2]);
    assert_ptr_equal(out[1], n[4]);
    /* not unreachable, best rank first: the ready ones in pool order, then syncing */
    assert_int_equal(bm_pool_candidates(p, BM_POOL_PREFER_ANSWERING, true, out, 8), 3);
    assert_ptr_equal(out[0], n[2]);
    assert_ptr_equal(out[1], n[4]);
    assert_ptr_equal(out[2], n[1]);
    /* reachable and usable (never the wrong network), in pool order */
    assert_int_equal(bm_pool_candidates(p, BM_POOL_PREFER_REACHABLE, false, out, 8), 1);
    assert_ptr_equal(out[0], n[1]);
    /* `cap` bounds the list */
    assert_int_equal(bm_pool_candidates(p, BM_POOL_PREFER_ANSWERING, true, out, 1), 1);
    assert_ptr_equal(out[0], n[2]);
    /* nobody ready: every usable node, best rank first (unreachable last) */
    n[2]->state = n[4]->state = BM_NODE_UNREACHABLE;
    assert_int_equal(bm_pool_candidates(p, BM_POOL_PREFER_READY, true, out, 8), 4);
    assert_ptr_equal(out[0], n[1]);
    assert_ptr_equal(out[1], n[0]);
    assert_ptr_equal(out[2], n[2]);
    assert_ptr_equal(out[3], n[4]);
    /* the same in pool order */
    n[1]->reachable = false;
    assert_int_equal(bm_pool_candidates(p, BM_POOL_PREFER_REACHABLE, false, out, 8), 4);
    assert_ptr_equal(out[0], n[0]);
    assert_ptr_equal(out[1], n[1]);
    assert_ptr_equal(out[2], n[2]);
    assert_ptr_equal(out[3], n[4]);
    bm_pool_free(p);
}

static void test_client_names(void **state)
{
    assert_int_equal(bm_client_detect("Lighthouse/v7.0.0-abc/x86_64-linux"), BM_CLIENT_LIGHTHOUSE);
    assert_int_equal(
        bm_client_detect("teku/v25.1.0/linux-x86_64/-eclipseadoptium-openjdk64bitservervm-java-21"),
        BM_CLIENT_TEKU);
    assert_int_equal(bm_client_detect("Prysm/v6.0.0 (linux amd64)"), BM_CLIENT_PRYSM);
    assert_int_equal(bm_client_detect("Nimbus/v25.3.0-abc-stateofus"), BM_CLIENT_NIMBUS);
    assert_int_equal(bm_client_detect("Lodestar/v1.30.0/abc"), BM_CLIENT_LODESTAR);
    assert_int_equal(bm_client_detect("Grandine/1.1.0-abc/x86_64-linux"), BM_CLIENT_GRANDINE);
    assert_int_equal(bm_client_detect("erigon/caplin"), BM_CLIENT_CAPLIN);
    assert_int_equal(bm_client_detect("Something/1.0"), BM_CLIENT_UNKNOWN);
    assert_int_equal(bm_client_detect(NULL), BM_CLIENT_UNKNOWN);
    assert_int_equal(bm_client_parse("prysm", 5), BM_CLIENT_PRYSM);
    assert_string_equal(bm_client_name(BM_CLIENT_NIMBUS), "nimbus");
    assert_string_equal(bm_node_state_name(BM_NODE_TIME_DISCREPANCY), "time-discrepancy");
    assert_string_equal(bm_node_state_name(BM_NODE_WRONG_NETWORK), "wrong-network");
    assert_string_equal(bm_node_state_name(BM_NODE_NO_HEAD), "no-head");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_find_and_masking),
        cmocka_unit_test(test_health_follows_inputs),
        cmocka_unit_test(test_rank_and_latency),
        cmocka_unit_test(test_recent_latency_incremental),
        cmocka_unit_test(test_candidates),
        cmocka_unit_test(test_client_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
