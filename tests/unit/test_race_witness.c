/* SPDX-License-Identifier: MIT */
/*
 * test_race_witness: the race's witness (race.h `witness`), the node whose answer to its
 * first request a race learns whatever it decides: the duty journal's "what would the first
 * configured node alone have served". On the manual clock of race_kit.h: every time is
 * exact. And `judged`: how the engine judged each answer, as `observe` sees it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "base/err.h"
#include "duties/race.h"
#include "fake_node.h"
#include "race_kit.h"

/* What observe and witnessed saw. */
typedef struct seen {
    int n;
    bm_node_t *node[16];
    bm_race_judged_t judged[16];
    unsigned attempt[16];
    uint64_t at_ms[16];
    bool witnessed[16]; /* through `witnessed`, not `observe` */
    race_fx_t *f;
} seen_t;

static void note(seen_t *s, const bm_race_answer_t *a, bool witnessed)
{
    if (s->n == 16)
        return;
    s->node[s->n] = a->node;
    s->judged[s->n] = a->judged;
    s->attempt[s->n] = a->attempt;
    s->at_ms[s->n] = race_now(s->f);
    s->witnessed[s->n] = witnessed;
    s->n++;
}

static void on_observe(bm_race_t *r, const bm_race_answer_t *a, void *ud)
{
    (void)r;
    note(ud, a, false);
}

static void on_witnessed(bm_race_t *r, const bm_race_answer_t *a, void *ud)
{
    (void)r;
    note(ud, a, true);
}

/* The index in `s` of `node`'s first report, or -1. */
static int first_of(const seen_t *s, const bm_node_t *node)
{
    for (int i = 0; i < s->n; i++)
        if (s->node[i] == node)
            return i;
    return -1;
}

static bm_race_policy_t witness_policy(race_fx_t *f, seen_t *s, fake_node_t *w, uint64_t deadline)
{
    s->f = f;
    return (bm_race_policy_t){.accept = race_accept_fresh,
                              .observe = on_observe,
                              .witnessed = on_witnessed,
                              .ud = s,
                              .witness = w->node,
                              .deadline_ms = deadline,
                              .repoll = BM_REPOLL_UNTIL_ACCEPTED};
}

/* One race with a witness: what observe and witnessed saw, the policy, the completion and
 * the request waiting on the race. */
typedef struct wrun {
    seen_t s;
    uint64_t t0; /* when the race started */
    bm_race_policy_t p;
    race_crec_t c;
    race_rec_t w;
} wrun_t;

/* Prepares a race whose witness is `witness`, cut `deadline_ms` after now. */
static void wrun_init(wrun_t *r, race_fx_t *f, fake_node_t *witness, uint64_t deadline_ms)
{
    memset(r, 0, sizeof *r);
    r->t0 = race_now(f);
    r->p = witness_policy(f, &r->s, witness, r->t0 + deadline_ms);
    race_rec_init(&r->w, f);
}

/* Starts the race over every node of the fixture, with a request waiting on it. */
static void wrun_start(wrun_t *r, race_fx_t *f)
{
    race_wait_on(&r->w, race_start(f, "GET", "/att", &r->p, NULL, &r->c));
}

/* A candidate witness slower than the winner: the waiter is not held for it, its first
 * transfer is not cancelled by the decision, its answer reaches observe unjudged, and the
 * completion comes with it. */
static void test_witness_outlives_decision(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(150, "{\"root\":\"stale\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(5, "{\"root\":\"fresh\"}"));
    wrun_t r;
    wrun_init(&r, f, a, 1000);
    wrun_start(&r, f);
    race_go(f, 5);
    assert_int_equal(r.w.calls, 1);
    assert_ptr_equal(r.w.node, b->node);
    assert_int_equal(r.w.at_ms, r.t0 + 5);
    assert_int_equal(r.s.judged[first_of(&r.s, b->node)], BM_RACE_ACCEPTED);
    race_go(f, 144);
    assert_int_equal(r.c.calls, 0); /* the witness still runs */
    race_go(f, 1);
    int ia = first_of(&r.s, a->node);
    assert_true(ia >= 0);
    assert_int_equal(r.s.judged[ia], BM_RACE_UNJUDGED);
    assert_false(r.s.witnessed[ia]); /* a candidate: observe */
    assert_int_equal(r.s.attempt[ia], 0);
    assert_int_equal(r.s.at_ms[ia], r.t0 + 150);
    assert_int_equal(r.c.calls, 1);
    assert_int_equal(r.c.at_ms, r.t0 + 150);
    assert_int_equal(a->aborted, 0);
    assert_int_equal(a->requests, 1);
    assert_string_equal(r.c.body[0], "{\"root\":\"stale\"}");
    assert_int_equal(race_in_flight(f), 0);
    race_rec_dispose(&r.w);
}

/* A hung witness is cut at the deadline, to the millisecond; it reports no answer and
 * counts no failure for its node. */
static void test_witness_cut_at_deadline(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_add1(&f->nodes, FAKE_OK(5, "{\"root\":\"fresh\"}"));
    wrun_t r;
    wrun_init(&r, f, a, 200);
    wrun_start(&r, f);
    race_go(f, 5);
    assert_int_equal(r.w.calls, 1);
    race_go(f, 194);
    assert_int_equal(r.c.calls, 0);
    race_go(f, 1);
    assert_int_equal(r.c.calls, 1);
    assert_int_equal(r.c.at_ms, r.t0 + 200);
    assert_int_equal(r.c.err[0], BM_ECANCELED);
    assert_int_equal(a->aborted, 1);
    assert_int_equal(first_of(&r.s, a->node), -1);
    assert_int_equal(a->node->stats.errors, 0);
    assert_int_equal(race_in_flight(f), 0);
    race_rec_dispose(&r.w);
}

/* A witness that is not a candidate is asked once beside the race: even its fresh answer is
 * never accepted nor served, it goes to `witnessed` (not observe), and the completion does
 * not list it. */
static void test_witness_not_candidate(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(5, "{\"root\":\"fresh\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(20, "{\"root\":\"stale\"}"));
    wrun_t r;
    wrun_init(&r, f, a, 300);
    bm_race_request_t q = {"GET", "/att", NULL, NULL};
    bm_race_t *race = bm_race_start(f->eng, &q, &b->node, 1, &r.p, NULL, race_on_complete, &r.c);
    assert_non_null(race);
    race_wait_on(&r.w, race);
    race_go(f, 300);
    assert_int_equal(r.w.calls, 1);
    assert_ptr_equal(r.w.node, b->node); /* stale: the witness is no candidate */
    assert_string_equal(r.w.body, "{\"root\":\"stale\"}");
    int ia = first_of(&r.s, a->node);
    assert_true(ia >= 0);
    assert_true(r.s.witnessed[ia]);
    assert_int_equal(r.s.judged[ia], BM_RACE_UNJUDGED);
    assert_int_equal(r.s.at_ms[ia], r.t0 + 5);
    for (int i = 0; i < r.s.n; i++)
        if (r.s.node[i] == b->node)
            assert_int_equal(r.s.judged[i], BM_RACE_USABLE);
    assert_int_equal(a->requests, 1); /* never re-asked */
    assert_true(b->requests > 1);     /* the candidate was */
    assert_int_equal(r.c.calls, 1);
    assert_int_equal(r.c.n, 1);
    assert_ptr_equal(r.c.node[0], b->node);
    assert_int_equal(a->node->stats.requests, 1); /* its exchange counts for the node */
    assert_int_equal(race_in_flight(f), 0);
    race_rec_dispose(&r.w);
}

/* Without a deadline the witness ends with the decision, like any loser. */
static void test_witness_without_deadline(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_add1(&f->nodes, FAKE_OK(5, "{}"));
    bm_race_policy_t p = {.witness = a->node};
    race_crec_t c = {0};
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &p, NULL, &c));
    race_go(f, 5);
    assert_int_equal(w.calls, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.err[0], BM_ECANCELED);
    assert_int_equal(a->aborted, 1);
    assert_int_equal(race_in_flight(f), 0);
    race_rec_dispose(&w);
}

/* With keep_losers the witness is one loser among others: it is not cut at the deadline. */
static void test_witness_with_kept_losers(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(500, "{\"root\":\"stale\"}"));
    fake_node_add1(&f->nodes, FAKE_OK(5, "{\"root\":\"fresh\"}"));
    wrun_t r;
    wrun_init(&r, f, a, 200);
    r.p.keep_losers = true;
    wrun_start(&r, f);
    race_go(f, 499);
    assert_int_equal(r.w.calls, 1);
    assert_int_equal(r.c.calls, 0);
    race_go(f, 1);
    assert_int_equal(r.c.calls, 1);
    int ia = first_of(&r.s, a->node);
    assert_true(ia >= 0 && r.s.at_ms[ia] == r.t0 + 500);
    assert_int_equal(a->aborted, 0);
    race_rec_dispose(&r.w);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, race_setup, race_teardown)
    const struct CMUnitTest tests[] = {
        T(test_witness_outlives_decision), T(test_witness_cut_at_deadline),
        T(test_witness_not_candidate),     T(test_witness_without_deadline),
        T(test_witness_with_kept_losers),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
