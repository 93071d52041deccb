/* SPDX-License-Identifier: MIT */
/*
 * test_race_errors: the race engine when nodes fail, against the fake nodes of fake_node.h
 * on a manual clock (the fixture of race_kit.h, shared with test_race.c): the most specific
 * error and its priority, a body cut short, network errors only, a transfer's own time
 * limit, failed nodes asked again until the hard timeout (reask_failures), the 503 that
 * names each node's failure (name_failures), observe on every answer, the hard timeout of
 * a write. Every time asserted is exact on the manual clock.
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
#include "cluster/pool.h"
#include "duties/race.h"
#include "fake_node.h"
#include "race_kit.h"

/* When no 2xx arrives, the most specific error wins: a 4xx (with its body) beats a 5xx
 * beats a network error; the first to arrive among equals. */
static void test_error_priority(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 5, "{\"code\":500,\"message\":\"boom\"}"));
    fake_node_t *b =
        fake_node_add1(&f->nodes, FAKE_STATUS(404, 60, "{\"code\":404,\"message\":\"not here\"}"));
    fake_node_add_refused(&f->nodes);
    fake_node_add1(&f->nodes, FAKE_STATUS(400, 120, "{\"code\":400,\"message\":\"later\"}"));
    uint64_t t0 = race_now(f);
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &race_plain_read, NULL, NULL));
    race_go(f, 5);
    race_go(f, 55);
    assert_int_equal(w.calls, 0);
    race_go(f, 60);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 404);
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(w.body, "{\"code\":404,\"message\":\"not here\"}");
    assert_int_equal(w.at_ms, t0 + 120); /* when nothing more could come */
    race_rec_dispose(&w);
}

static void test_error_priority_5xx(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a =
        fake_node_add1(&f->nodes, FAKE_STATUS(502, 5, "{\"code\":502,\"message\":\"first\"}"));
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 40, "{\"code\":500,\"message\":\"second\"}"));
    fake_node_add_refused(&f->nodes);
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &race_plain_read, NULL, NULL));
    race_go(f, 5);
    race_go(f, 35);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 502);
    assert_ptr_equal(w.node, a->node);
    assert_string_equal(w.body, "{\"code\":502,\"message\":\"first\"}");
    race_rec_dispose(&w);
}

/* Only network errors: a synthesized 503 in the Beacon API shape naming each node. */
/* A node that cuts its answer mid-body gave no answer: its truncated body is never
 * served; another node's answer wins, and with none the 503 names the failure. */
static void test_cut_mid_body(void **state)
{
    race_fx_t *f = *state;
    fake_step_t cut = FAKE_OK(5, "{\"root\":\"fresh\",\"pad\":\"0123456789\"}");
    cut.cut = true;
    cut.cut_at = 10;
    fake_node_t *a = fake_node_add1(&f->nodes, cut);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(80, "{\"root\":\"fresh\"}"));
    race_crec_t c = {0};
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &race_plain_read, NULL, &c));
    race_go(f, 5);
    assert_int_equal(a->answered, 1);
    assert_int_equal(w.calls, 0);
    race_go(f, 75);
    assert_int_equal(w.calls, 1);
    assert_int_equal(c.calls, 1);
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(w.body, "{\"root\":\"fresh\"}");
    assert_int_equal(c.status[0], 0);
    assert_int_not_equal(c.err[0], 0);

    /* the cutting node alone: a 503 naming its failure, never the 10 bytes it sent */
    race_crec_t c2 = {0};
    race_rec_t w2;
    race_rec_init(&w2, f);
    bm_node_t *one = a->node;
    bm_race_request_t q = {"GET", "/x", NULL, NULL};
    race_wait_on(&w2,
                 bm_race_start(f->eng, &q, &one, 1, &race_plain_read, NULL, race_on_complete, &c2));
    race_go(f, 5);
    assert_int_equal(w2.calls, 1);
    assert_int_equal(c2.calls, 1);
    assert_int_equal(w2.status, 503);
    assert_null(w2.node);
    char want[256];
    snprintf(want, sizeof want, "{\"code\":503,\"message\":\"no upstream answered: a: %s\"}",
             bm_strerror(c2.err[0]));
    assert_string_equal(w2.body, want);
    assert_int_not_equal(c2.err[0], 0);
    assert_int_equal(a->answered, 2);
    race_rec_dispose(&w);
    race_rec_dispose(&w2);
}

static void test_all_network_errors(void **state)
{
    race_fx_t *f = *state;
    fake_node_add_refused(&f->nodes);
    fake_node_add_refused(&f->nodes);
    race_crec_t c = {0};
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &race_plain_read, NULL, &c));
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(w.status, 503);
    assert_int_equal(w.err, 0);
    assert_null(w.node);
    assert_string_equal(bm_hdrs_get(&w.hdrs, "content-type"), "application/json");
    char want[256];
    snprintf(want, sizeof want, "{\"code\":503,\"message\":\"no upstream answered: a: %s; b: %s\"}",
             bm_strerror(BM_ECONNREFUSED), bm_strerror(BM_ECONNREFUSED));
    assert_string_equal(w.body, want);
    assert_int_equal(c.err[0], BM_ECONNREFUSED);
    assert_int_equal(c.err[1], BM_ECONNREFUSED);
    /* recorded: a refused connection makes a node unreachable at once */
    assert_false(f->nodes.node[0].node->reachable);
    assert_int_equal(f->nodes.node[0].node->stats.errors, 1);
    race_rec_dispose(&w);
}

/* A transfer's own limit (transfer_timeout_ms) is on the engine's clock: a hung node is
 * cut at it, recorded as a timeout and reported as BM_ETIMEDOUT, and a sequential race
 * moves on to the next node at that millisecond. */
static void test_transfer_timeout(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"fresh\"}"));
    bm_race_policy_t p = {.sequential = true, .transfer_timeout_ms = 100};
    uint64_t t0 = race_now(f);
    race_crec_t c = {0};
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &p, NULL, &c));
    race_go(f, 99);
    assert_string_equal(f->nodes.log, "a>");
    assert_int_equal(a->node->stats.errors, 0);
    race_go(f, 1);
    assert_int_equal(a->aborted, 1);
    assert_int_equal(b->requests, 1);
    assert_int_equal(a->node->stats.errors, 1);
    race_go(f, 10);
    assert_int_equal(w.calls, 1);
    assert_ptr_equal(w.node, b->node);
    assert_int_equal(w.at_ms, t0 + 110);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.err[0], BM_ETIMEDOUT);
    race_rec_dispose(&w);
}

/* reask_failures: a node that failed (a 5xx, a refused connection) is asked again every
 * repoll interval while the race runs, so a node that recovers still serves it. */
static void test_reask_failures(void **state)
{
    race_fx_t *f = *state;
    fake_step_t s[] = {FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"boom\"}"),
                       FAKE_STATUS(503, 0, "{\"code\":503,\"message\":\"busy\"}"),
                       FAKE_OK(0, "{\"root\":\"fresh\"}")};
    fake_node_t *a = fake_node_add(&f->nodes, s, 3);
    fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.accept = race_accept_fresh, .reask_failures = true};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 200;
    p.hard_timeout_ms = t0 + 1000;
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/att", &p, NULL, NULL));
    race_go(f, 99);
    assert_int_equal(a->requests, 2); /* at 0 and 50 */
    assert_int_equal(w.calls, 0);
    race_go(f, 1);
    assert_int_equal(w.calls, 1);
    assert_string_equal(w.body, "{\"root\":\"fresh\"}");
    assert_int_equal(w.at_ms, t0 + 100);
    assert_int_equal(w.attempt, 2);
    /* without reask_failures the 5xx is never asked again */
    fake_node_script(a, s, 3);
    p.reask_failures = false;
    t0 = race_now(f);
    p.deadline_ms = t0 + 200;
    p.hard_timeout_ms = t0 + 1000;
    race_rec_t w2;
    race_watch(&w2, f, race_start(f, "GET", "/att", &p, NULL, NULL));
    race_go(f, 999);
    assert_int_equal(a->requests, 1);
    assert_int_equal(w2.calls, 0); /* the hung node holds the race to its hard timeout */
    race_go(f, 1);
    assert_int_equal(w2.status, 500);
    race_rec_dispose(&w);
    race_rec_dispose(&w2);
}

/* name_failures: with nothing usable at the hard timeout the answer is a 503 naming each
 * node's failure, not one node's 5xx; a 4xx is still relayed as it is. */
static void test_name_failures(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *b =
        fake_node_add1(&f->nodes, FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"boom\"}"));
    fake_node_add_refused(&f->nodes);
    bm_race_policy_t p = {
        .accept = race_accept_fresh, .reask_failures = true, .name_failures = true};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 200;
    p.hard_timeout_ms = t0 + 1000;
    race_crec_t c = {0};
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/att", &p, NULL, &c));
    race_called_1ms_after(f, &w, 999);
    assert_int_equal(w.at_ms, t0 + 1000);
    assert_int_equal(w.status, 503);
    assert_null(w.node);
    char want[256];
    snprintf(want, sizeof want,
             "{\"code\":503,\"message\":\"no usable answer: a: %s; b: 500 boom; c: %s\"}",
             bm_strerror(BM_ETIMEDOUT), bm_strerror(BM_ECONNREFUSED));
    assert_string_equal(w.body, want);
    assert_int_equal(b->requests, 20); /* every 50 ms until the end: 0, 50, ..., 950 */
    assert_int_equal(c.err[0], BM_ETIMEDOUT);
    /* a 4xx is an answer: relayed, and the race needs nothing more from that node */
    fake_node_script(b, &FAKE_STATUS(404, 0, "{\"code\":404,\"message\":\"no\"}"), 1);
    t0 = race_now(f);
    p.deadline_ms = t0 + 200;
    p.hard_timeout_ms = t0 + 1000;
    race_rec_t w2;
    race_watch(&w2, f, race_start(f, "GET", "/att", &p, NULL, NULL));
    race_go(f, 1000);
    assert_int_equal(w2.status, 404);
    assert_int_equal(b->requests, 1);
    race_rec_dispose(&w);
    race_rec_dispose(&w2);
}

/* observe sees every answer the race takes, failures included, from the loop. */
typedef struct seen_answers {
    int n;
    int status[8];
    int err[8];
} seen_answers_t;

static void observe_all(bm_race_t *r, const bm_race_answer_t *a, void *ud)
{
    (void)r;
    seen_answers_t *sa = ud;
    if (sa->n < 8) {
        sa->status[sa->n] = a->status;
        sa->err[sa->n] = a->err;
    }
    sa->n++;
}

static void test_observe(void **state)
{
    race_fx_t *f = *state;
    fake_node_add_refused(&f->nodes);
    fake_node_add1(&f->nodes, FAKE_STATUS(400, 10, "{\"code\":400,\"message\":\"bad\"}"));
    fake_node_add1(&f->nodes, FAKE_OK(20, "{}"));
    seen_answers_t sa = {0};
    bm_race_policy_t p = {.write = true, .observe = observe_all, .ud = &sa};
    race_crec_t c = {0};
    race_start(f, "POST", "/x", &p, NULL, &c);
    race_go(f, 0);
    assert_int_equal(sa.n, 1);
    assert_int_equal(sa.err[0], BM_ECONNREFUSED);
    race_go(f, 10);
    assert_int_equal(sa.n, 2);
    assert_int_equal(sa.status[1], 400);
    race_go(f, 10);
    assert_int_equal(sa.n, 3);
    assert_int_equal(sa.status[2], 200);
    assert_int_equal(c.calls, 1);
}

/* A write cut by its hard timeout: the waiter gets the best in hand, the hung node is
 * reported as timed out, and nothing counts against it in the pool: the race ended itself
 * (its limit is beaconmux's choice, not the node's failure). */
static void test_hard_timeout(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.write = true};
    uint64_t t0 = race_now(f);
    p.hard_timeout_ms = t0 + 200;
    race_crec_t c = {0};
    race_rec_t w;
    race_watch(&w, f, race_start(f, "POST", "/eth/v1/beacon/pool/attestations", &p, NULL, &c));
    race_go(f, 199);
    assert_int_equal(w.calls + c.calls, 0);
    race_go(f, 1);
    assert_int_equal(w.calls, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(w.status, 503);
    char want[128];
    snprintf(want, sizeof want, "{\"code\":503,\"message\":\"no upstream answered: a: %s\"}",
             bm_strerror(BM_ETIMEDOUT));
    assert_string_equal(w.body, want);
    assert_int_equal(w.at_ms, p.hard_timeout_ms);
    assert_int_equal(c.err[0], BM_ETIMEDOUT);
    assert_int_equal(a->node->stats.errors, 0);
    assert_int_equal(a->node->stats.requests, 0);
    assert_int_equal(a->node->stats.in_flight, 0);
    assert_int_equal(a->aborted, 1);
    race_rec_dispose(&w);
}

/*
 * Races beaconmux ends itself never count against a node (issue 12, bug 1: two block
 * productions for a past slot made every node unreachable): a read cut at its hard timeout
 * (a past deadline leaves only maxHold), a read whose client left, and the losers of a read
 * that found its winner. Twice in a row, as the attack did: every node stays reachable,
 * with no error and no failure in a row. A node's own failure (here a refused connection)
 * still counts.
 */
static void test_self_ended_races_never_count(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    for (int round = 0; round < 2; round++) {
        bm_race_policy_t p = race_plain_read;
        p.hard_timeout_ms = race_now(f) + 1000;
        p.reask_failures = true;
        p.name_failures = true;
        race_rec_t w;
        race_watch(&w, f, race_start(f, "GET", "/eth/v3/validator/blocks/9", &p, NULL, NULL));
        race_go(f, 1000);
        assert_int_equal(w.calls, 1);
        assert_int_equal(w.status, 503);
        race_rec_dispose(&w);
    }
    /* a client that leaves: its race is cancelled */
    race_rec_t w;
    race_watch(&w, f,
               race_start(f, "GET", "/eth/v1/validator/attestation_data?slot=9", &race_plain_read,
                          NULL, NULL));
    race_go(f, 100);
    bm_race_leave(w.w);
    race_go(f, 10);
    race_rec_dispose(&w);
    for (fake_node_t *n = a; n; n = n == a ? b : NULL) {
        if (n->node->stats.errors || n->node->stats.consecutive_failures || !n->node->reachable)
            fail_msg("%s: %llu errors, %u in a row, reachable %d", n->node->id,
                     (unsigned long long)n->node->stats.errors, n->node->stats.consecutive_failures,
                     n->node->reachable);
    }
    /* the losers of a decided read: one node answers, the hung one is cancelled */
    fake_node_script(a, &(fake_step_t){.status = 200, .body = "{\"data\":{}}"}, 1);
    race_watch(&w, f, race_start(f, "GET", "/eth/v1/node/version", &race_plain_read, NULL, NULL));
    race_go(f, 10);
    assert_int_equal(w.status, 200);
    race_rec_dispose(&w);
    assert_int_equal(b->node->stats.errors, 0);
    assert_true(b->node->reachable);
    /* a node's own failure counts: a refused connection makes it unreachable at once */
    fake_node_down(b);
    race_watch(&w, f, race_start(f, "GET", "/eth/v1/node/version", &race_plain_read, NULL, NULL));
    race_go(f, 10);
    race_rec_dispose(&w);
    assert_int_equal(b->node->stats.errors, 1);
    assert_false(b->node->reachable);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, race_setup, race_teardown)
    const struct CMUnitTest tests[] = {
        T(test_error_priority),     T(test_error_priority_5xx),
        T(test_all_network_errors), T(test_cut_mid_body),
        T(test_transfer_timeout),   T(test_reask_failures),
        T(test_name_failures),      T(test_observe),
        T(test_hard_timeout),       T(test_self_ended_races_never_count),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
