/* SPDX-License-Identifier: MIT */
/*
 * test_race: the race engine against real beacon-node stand-ins on loopback: the fake
 * nodes of fake_node.h, answering from scripts (status, body, header fields, delay, or
 * never; a sequence across re-asks; or a refused port). Each node counts its requests,
 * its answers and the requests whose client went away before the answer (the engine
 * cancelled the transfer), and every event goes into one ordered log ("a>" request to a,
 * "a<" answer from a), so sequencing is asserted, not guessed.
 *
 * Nothing waits on sleeps: the loop runs until a condition holds, with a bound; times
 * are measured with the wall clock the engine uses, and only upper bounds with generous
 * slack are asserted. Every test ends with uv_loop_close() == 0 (in the teardown).
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
#include "base/log.h"
#include "cluster/pool.h"
#include "duties/race.h"
#include "http/server.h"
#include "http/upstream.h"
#include "fake_node.h"

#define BOUND_MS 5000 /* every wait ends within this, or the test fails */
#define SLACK_MS 150  /* allowed lateness of a timed decision on a shared machine */
#define MAX_NODES FAKE_MAX_NODES

/* ---- fixture ------------------------------------------------------------------------------ */

typedef struct fx {
    uv_loop_t loop;
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_race_engine_t *eng;
    fake_nodes_t nodes;
} fx_t;

static int fx_setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    bm_log_setup(BM_LOG_ERROR, BM_LOG_TEXT, NULL);
    if (uv_loop_init(&f->loop) != 0)
        return -1;
    bm_upstream_opts_t o;
    bm_upstream_opts_default(&o);
    f->up = bm_upstream_new(&f->loop, &o);
    f->pool = bm_pool_new();
    if (!f->up || !f->pool)
        return -1;
    f->eng = bm_race_engine_new(&f->loop, f->up, f->pool);
    if (!f->eng)
        return -1;
    fake_nodes_init(&f->nodes, &f->loop, f->pool);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;
    if (f->eng)
        bm_race_engine_free(f->eng);
    bm_upstream_free(f->up);
    fake_nodes_close(&f->nodes);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    bm_pool_free(f->pool);
    free(f);
    return 0;
}

/* ---- recording waiters and completions ------------------------------------------------- */

typedef struct rec {
    fx_t *f;
    int calls;
    int status;
    int err;
    bm_node_t *node;
    char body[512];
    uint64_t at_ms;
    unsigned attempt;
    bm_hdrs_t hdrs;
    bm_race_waiter_t *w;
    /* re-entrancy scripts */
    bm_race_waiter_t *leave_other; /* leave this waiter from the callback */
    bool free_engine;              /* free the engine from the callback */
    const char *restart_key;       /* start a new race under this key from the callback */
    bm_race_t *restarted;
} rec_t;

static void rec_init(rec_t *r, fx_t *f)
{
    memset(r, 0, sizeof *r);
    r->f = f;
    bm_hdrs_init(&r->hdrs);
}

static void rec_dispose(rec_t *r)
{
    bm_hdrs_dispose(&r->hdrs);
}

static const bm_race_policy_t plain_read; /* everything default */

static void on_answer(bm_race_waiter_t *w, const bm_race_answer_t *a, void *ud)
{
    rec_t *r = ud;
    assert_ptr_equal(w, r->w);
    r->calls++;
    r->status = a->status;
    r->err = a->err;
    r->node = a->node;
    r->at_ms = bm_clock_now_ms();
    r->attempt = a->attempt;
    assert_non_null(a->headers);
    assert_non_null(a->body); /* never an empty answer */
    snprintf(r->body, sizeof r->body, "%.*s", (int)a->body->len, a->body->data);
    bm_hdrs_clear(&r->hdrs);
    bm_hdrs_copy(&r->hdrs, a->headers);
    if (r->leave_other)
        bm_race_leave(r->leave_other);
    if (r->restart_key) {
        /* the answered race is not joinable any more: a new one starts */
        assert_null(bm_race_find(r->f->eng, r->restart_key));
        bm_node_t *n = r->f->nodes.node[0].node;
        bm_race_request_t q = {"GET", "/again", NULL, NULL};
        r->restarted = bm_race_start(r->f->eng, &q, &n, 1, &plain_read, r->restart_key, NULL, NULL);
        assert_non_null(r->restarted);
    }
    if (r->free_engine) {
        bm_race_engine_free(r->f->eng);
        r->f->eng = NULL;
    }
}

static void wait_on(rec_t *rec, bm_race_t *race)
{
    rec->w = bm_race_wait(race, on_answer, rec);
    assert_non_null(rec->w);
}

typedef struct crec {
    int calls;
    size_t n;
    bm_node_t *node[MAX_NODES];
    int status[MAX_NODES];
    int err[MAX_NODES];
    unsigned attempt[MAX_NODES];
    char body[MAX_NODES][128];
    uint64_t at_ms;
} crec_t;

static void on_complete(bm_race_t *race, const bm_race_answer_t *v, size_t n, void *ud)
{
    crec_t *c = ud;
    (void)race;
    c->calls++;
    c->n = n;
    c->at_ms = bm_clock_now_ms();
    assert_true(n <= MAX_NODES);
    for (size_t i = 0; i < n; i++) {
        c->node[i] = v[i].node;
        c->status[i] = v[i].status;
        c->err[i] = v[i].err;
        c->attempt[i] = v[i].attempt;
        assert_non_null(v[i].headers);
        if (v[i].err == 0)
            assert_non_null(v[i].body);
        snprintf(c->body[i], sizeof c->body[i], "%.*s", v[i].body ? (int)v[i].body->len : 0,
                 v[i].body ? v[i].body->data : "");
    }
}

/* ---- policy predicates over the fake bodies ---------------------------------------------- */

static bool body_has(const bm_race_answer_t *a, const char *word)
{
    return a->body && memmem(a->body->data, a->body->len, word, strlen(word)) != NULL;
}

static bool accept_fresh(const bm_race_answer_t *a, void *ud)
{
    (void)ud;
    return body_has(a, "fresh");
}

static bool usable_not_empty(const bm_race_answer_t *a, void *ud)
{
    (void)ud;
    return !body_has(a, "empty");
}

static double score_field(const bm_race_answer_t *a, void *ud)
{
    (void)ud;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%.*s", a->body ? (int)a->body->len : 0,
             a->body ? a->body->data : "");
    const char *p = strstr(tmp, "\"score\":");
    return p ? atof(p + 8) : 0;
}

static bool complete_at_5(const bm_race_answer_t *a, void *ud)
{
    (void)ud;
    return score_field(a, NULL) >= 5;
}

static bm_race_t *start(fx_t *f, const char *method, const char *target, const bm_race_policy_t *p,
                        const char *key, crec_t *c)
{
    bm_node_t *nodes[MAX_NODES];
    for (int i = 0; i < f->nodes.n; i++)
        nodes[i] = f->nodes.node[i].node;
    bm_race_request_t q = {method, target, NULL, NULL};
    bm_race_t *r =
        bm_race_start(f->eng, &q, nodes, (size_t)f->nodes.n, p, key, c ? on_complete : NULL, c);
    assert_non_null(r);
    return r;
}

static uint64_t in_flight(fx_t *f)
{
    uint64_t n = 0;
    for (int i = 0; i < f->nodes.n; i++)
        n += f->nodes.node[i].node->stats.in_flight;
    return n;
}

/* ---- tests ------------------------------------------------------------------------------ */

/* A hung node never delays the answer past the deadline: a usable (not accepted) answer
 * in hand is given at the deadline, and the hung node's transfer is cancelled. */
static void test_hung_node_deadline(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"stale\"}"));
    bm_race_policy_t p = {.accept = accept_fresh};
    uint64_t t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 200;
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    bm_race_t *race = start(f, "GET", "/att", &p, NULL, &c);
    wait_on(&w, race);
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 200);
    assert_string_equal(w.body, "{\"root\":\"stale\"}");
    assert_ptr_equal(w.node, f->nodes.node[1].node);
    assert_true(w.at_ms >= p.deadline_ms);
    assert_true(w.at_ms <= p.deadline_ms + SLACK_MS);
    /* the hung node's server sees its client go away; the completion reports it */
    RUN_UNTIL(&f->loop, a->aborted == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(a->aborted, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.err[0], BM_ECANCELED);
    assert_int_equal(c.status[1], 200);
    assert_int_equal(in_flight(f), 0);
    assert_int_equal(bm_race_engine_active(f->eng), 0);
    rec_dispose(&w);
}

/* Exactly one answer per race, to every waiter; coalesced waiters get the same one; the
 * race is joinable until it answered, never afterwards; the answer never runs inside
 * bm_race_start or bm_race_wait. */
static void test_one_answer_coalesced(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(30, "{\"root\":\"fresh\"}"));
    fake_node_add1(&f->nodes, FAKE_OK(60, "{\"root\":\"fresh\",\"other\":1}"));
    rec_t w[3];
    crec_t c = {0};
    bm_race_t *race = start(f, "GET", "/att?slot=1", &plain_read, "att:1", &c);
    for (int i = 0; i < 3; i++) {
        rec_init(&w[i], f);
        bm_race_t *found = bm_race_find(f->eng, "att:1");
        assert_ptr_equal(found, race);
        wait_on(&w[i], found);
    }
    assert_null(bm_race_find(f->eng, "att:2"));
    assert_int_equal(bm_race_waiters(race), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(w[i].calls, 0);
    RUN_UNTIL(&f->loop, w[0].calls && w[1].calls && w[2].calls && c.calls, BOUND_MS);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(w[i].calls, 1);
        assert_int_equal(w[i].status, 200);
        assert_string_equal(w[i].body, "{\"root\":\"fresh\"}");
        assert_ptr_equal(w[i].node, a->node);
    }
    assert_null(bm_race_find(f->eng, "att:1"));
    RUN_FOR(&f->loop, 100);
    for (int i = 0; i < 3; i++)
        assert_int_equal(w[i].calls, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(a->requests, 1);
    assert_int_equal(f->nodes.node[1].requests, 1);
    for (int i = 0; i < 3; i++)
        rec_dispose(&w[i]);
}

/* A race with no candidate answers a 503 of its own, from the loop, never inside the
 * call; a waiter may join until then. */
static void test_no_candidates(void **state)
{
    fx_t *f = *state;
    bm_race_request_t q = {"GET", "/x", NULL, NULL};
    crec_t c = {0};
    bm_race_t *race = bm_race_start(f->eng, &q, NULL, 0, &plain_read, "k", on_complete, &c);
    assert_non_null(race);
    rec_t w;
    rec_init(&w, f);
    assert_ptr_equal(bm_race_find(f->eng, "k"), race); /* decided, not answered yet */
    wait_on(&w, race);
    assert_int_equal(w.calls, 0);
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 503);
    assert_null(w.node);
    assert_string_equal(w.body, "{\"code\":503,\"message\":\"no upstream available\"}");
    assert_string_equal(bm_hdrs_get(&w.hdrs, "content-type"), "application/json");
    assert_int_equal(c.n, 0);
    rec_dispose(&w);
}

/* An accepted 2xx wins at once; the losers' transfers are cancelled (their servers see the
 * client go away); the completion has every node in candidate order. */
static void test_accept_wins_cancels_losers(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(300, "{\"root\":\"fresh\",\"n\":\"a\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(20, "{\"root\":\"fresh\",\"n\":\"b\"}"));
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.accept = accept_fresh};
    uint64_t t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 2000;
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    bm_race_t *race = start(f, "GET", "/att", &p, NULL, &c);
    wait_on(&w, race);
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, b->node);
    assert_true(w.at_ms < t0 + 300); /* neither the slower node nor the deadline */
    RUN_UNTIL(&f->loop, a->aborted == 1 && c3->aborted == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(a->aborted, 1);
    assert_int_equal(a->answered, 0);
    assert_int_equal(c3->aborted, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.n, 3);
    assert_ptr_equal(c.node[0], a->node);
    assert_int_equal(c.err[0], BM_ECANCELED);
    assert_int_equal(c.status[1], 200);
    assert_int_equal(c.err[2], BM_ECANCELED);
    assert_int_equal(in_flight(f), 0);
    rec_dispose(&w);
}

/* With a score and a grace, a better-scoring accepted answer within the grace wins; one
 * after the grace does not count. */
static void test_score_grace(void **state)
{
    fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"fresh\",\"score\":1}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(60, "{\"root\":\"fresh\",\"score\":5}"));
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_OK(800, "{\"root\":\"fresh\",\"score\":9}"));
    bm_race_policy_t p = {.accept = accept_fresh, .score = score_field, .grace_ms = 200};
    uint64_t t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 3000;
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/agg", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(w.body, "{\"root\":\"fresh\",\"score\":5}");
    /* the grace runs from the first accepted answer (about t0 + 10) */
    assert_true(w.at_ms >= t0 + 200);
    assert_true(w.at_ms <= t0 + 10 + 200 + SLACK_MS);
    RUN_UNTIL(&f->loop, c3->aborted == 1, BOUND_MS);
    assert_int_equal(c3->answered, 0);
    rec_dispose(&w);
}

/* `complete` ends the grace early, and the grace never runs past the deadline. */
static void test_complete_ends_grace(void **state)
{
    fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"fresh\",\"score\":1}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(50, "{\"root\":\"fresh\",\"score\":5}"));
    fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {
        .accept = accept_fresh, .score = score_field, .complete = complete_at_5, .grace_ms = 3000};
    uint64_t t0 = bm_clock_now_ms();
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/agg", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, b->node);
    assert_true(w.at_ms < t0 + 1000);

    /* same without `complete`, with a deadline before the grace end */
    bm_race_policy_t p2 = {.accept = accept_fresh, .score = score_field, .grace_ms = 3000};
    t0 = bm_clock_now_ms();
    p2.deadline_ms = t0 + 250;
    rec_t w2;
    rec_init(&w2, f);
    wait_on(&w2, start(f, "GET", "/agg2", &p2, NULL, NULL));
    RUN_UNTIL(&f->loop, w2.calls == 1, BOUND_MS);
    assert_ptr_equal(w2.node, b->node);
    assert_true(w2.at_ms >= p2.deadline_ms);
    assert_true(w2.at_ms <= p2.deadline_ms + SLACK_MS);
    rec_dispose(&w);
    rec_dispose(&w2);
}

/* Nothing accepted: at the deadline the best-scoring usable 2xx wins (an unusable one
 * never does). */
static void test_deadline_best_usable(void **state)
{
    fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"stale\",\"score\":2}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(30, "{\"root\":\"stale\",\"score\":7}"));
    fake_node_add1(&f->nodes, FAKE_OK(20, "{\"root\":\"empty\",\"score\":99}"));
    fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.accept = accept_fresh, .usable = usable_not_empty, .score = score_field};
    uint64_t t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 200;
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/att", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, b->node);
    assert_true(w.at_ms >= p.deadline_ms && w.at_ms <= p.deadline_ms + SLACK_MS);
    rec_dispose(&w);
}

/* No usable 2xx at the deadline: the first usable one to arrive after it wins. When
 * everything has failed, the race ends without waiting for the deadline. */
static void test_past_deadline_first_usable(void **state)
{
    fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 10, "{\"code\":500,\"message\":\"boom\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(400, "{\"root\":\"stale\"}"));
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_OK(900, "{\"root\":\"stale\",\"n\":3}"));
    bm_race_policy_t p = {.accept = accept_fresh};
    uint64_t t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 150;
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/att", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, b->node);
    assert_true(w.at_ms >= t0 + 400 && w.at_ms < t0 + 900);
    RUN_UNTIL(&f->loop, c3->aborted == 1, BOUND_MS);
    rec_dispose(&w);
}

static void test_all_failed_before_deadline(void **state)
{
    fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_STATUS(404, 10, "{\"code\":404,\"message\":\"nope\"}"));
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 20, "{\"code\":500,\"message\":\"boom\"}"));
    bm_race_policy_t p = {.accept = accept_fresh};
    uint64_t t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 2000;
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/att", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_int_equal(w.status, 404);
    assert_true(w.at_ms < t0 + 1000);
    rec_dispose(&w);
}

/* until-accepted: a node answering stale twice then fresh is re-asked about every 50 ms
 * and its fresh answer wins long before the deadline. */
static void test_repoll_until_accepted(void **state)
{
    fx_t *f = *state;
    fake_step_t s[] = {FAKE_OK(0, "{\"root\":\"stale\"}"), FAKE_OK(0, "{\"root\":\"stale\"}"),
                       FAKE_OK(0, "{\"root\":\"fresh\"}")};
    fake_node_t *a = fake_node_add(&f->nodes, s, 3);
    fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.accept = accept_fresh, .repoll = BM_REPOLL_UNTIL_ACCEPTED};
    uint64_t t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 1500;
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/att", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_string_equal(w.body, "{\"root\":\"fresh\"}");
    assert_ptr_equal(w.node, a->node);
    assert_int_equal(w.attempt, 2);
    assert_int_equal(a->requests, 3);
    assert_true(w.at_ms < t0 + 600);
    for (int i = 1; i < 3; i++) {
        uint64_t gap = a->reqs[i].at_ms - a->reqs[i - 1].at_ms;
        assert_true(gap >= 40); /* never faster than the interval (minus connect jitter) */
        assert_true(gap <= 50 + SLACK_MS); /* and not much slower */
    }
    rec_dispose(&w);
}

/* Repolls stop at the deadline: no re-ask starts at or after it, the stale answer is given
 * by then, and nothing more is asked afterwards. */
static void test_repolls_stop_at_deadline(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(0, "{\"root\":\"stale\"}"));
    bm_race_policy_t p = {.accept = accept_fresh, .repoll = BM_REPOLL_UNTIL_ACCEPTED};
    uint64_t t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 250;
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/att", &p, NULL, &c));
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1, BOUND_MS);
    assert_string_equal(w.body, "{\"root\":\"stale\"}");
    /* the answer comes when the last re-ask that could start before the deadline has
     * answered (nothing more can change it), at the latest at the deadline */
    assert_true(w.at_ms >= t0 + 150 && w.at_ms <= p.deadline_ms + SLACK_MS);
    assert_true(a->requests >= 4 && a->requests <= 6);
    assert_int_equal(c.attempt[0], (unsigned)a->requests - 1);
    int seen = a->requests;
    RUN_FOR(&f->loop, 200);
    assert_int_equal(a->requests, seen);
    rec_dispose(&w);
}

/* until-any-2xx: a node whose 2xx is not usable goes on being re-asked past the deadline
 * until it has something usable; until-accepted in the same situation stops at the
 * deadline and answers the most specific answer in hand (a 5xx beats an unusable 2xx). */
static void test_repoll_until_any_2xx(void **state)
{
    fx_t *f = *state;
    fake_step_t s[] = {FAKE_OK(0, "{\"root\":\"empty\"}"), FAKE_OK(0, "{\"root\":\"empty\"}"),
                       FAKE_OK(0, "{\"root\":\"empty\"}"), FAKE_OK(0, "{\"root\":\"empty\"}"),
                       FAKE_OK(0, "{\"root\":\"empty\"}"), FAKE_OK(0, "{\"root\":\"empty\"}"),
                       FAKE_OK(0, "{\"root\":\"stale\"}")};
    fake_node_t *a = fake_node_add(&f->nodes, s, 7);
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 5, "{\"code\":500,\"message\":\"boom\"}"));
    bm_race_policy_t p = {
        .accept = accept_fresh, .usable = usable_not_empty, .repoll = BM_REPOLL_UNTIL_ANY_2XX};
    uint64_t t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 120;
    p.hard_timeout_ms = t0 + 3000;
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/agg", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_int_equal(w.status, 200);
    assert_string_equal(w.body, "{\"root\":\"stale\"}");
    assert_int_equal(a->requests, 7);
    assert_true(w.at_ms > p.deadline_ms);

    /* until-accepted: the same node script from the start */
    a->requests = 0;
    p.repoll = BM_REPOLL_UNTIL_ACCEPTED;
    t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 120;
    p.hard_timeout_ms = t0 + 3000;
    rec_t w2;
    rec_init(&w2, f);
    wait_on(&w2, start(f, "GET", "/agg", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w2.calls == 1, BOUND_MS);
    assert_int_equal(w2.status, 500);
    /* the last re-ask before the deadline answered: nothing more can come, no need to wait */
    assert_true(w2.at_ms <= p.deadline_ms + SLACK_MS);
    assert_true(a->requests < 7);
    rec_dispose(&w);
    rec_dispose(&w2);
}

/* When no 2xx arrives, the most specific error wins: a 4xx (with its body) beats a 5xx
 * beats a network error; the first to arrive among equals. */
static void test_error_priority(void **state)
{
    fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 5, "{\"code\":500,\"message\":\"boom\"}"));
    fake_node_t *b =
        fake_node_add1(&f->nodes, FAKE_STATUS(404, 60, "{\"code\":404,\"message\":\"not here\"}"));
    fake_node_add_refused(&f->nodes);
    fake_node_add1(&f->nodes, FAKE_STATUS(400, 120, "{\"code\":400,\"message\":\"later\"}"));
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/x", &plain_read, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_int_equal(w.status, 404);
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(w.body, "{\"code\":404,\"message\":\"not here\"}");
    rec_dispose(&w);
}

static void test_error_priority_5xx(void **state)
{
    fx_t *f = *state;
    fake_node_t *a =
        fake_node_add1(&f->nodes, FAKE_STATUS(502, 5, "{\"code\":502,\"message\":\"first\"}"));
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 40, "{\"code\":500,\"message\":\"second\"}"));
    fake_node_add_refused(&f->nodes);
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/x", &plain_read, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_int_equal(w.status, 502);
    assert_ptr_equal(w.node, a->node);
    assert_string_equal(w.body, "{\"code\":502,\"message\":\"first\"}");
    rec_dispose(&w);
}

/* Only network errors: a synthesized 503 in the Beacon API shape naming each node. */
/* A node that cuts its answer mid-body gave no answer: its truncated body is never
 * served; another node's answer wins, and with none the 503 names the failure. */
static void test_cut_mid_body(void **state)
{
    fx_t *f = *state;
    fake_step_t cut = FAKE_OK(5, "{\"root\":\"fresh\",\"pad\":\"0123456789\"}");
    cut.cut = true;
    cut.cut_at = 10;
    fake_node_t *a = fake_node_add1(&f->nodes, cut);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(80, "{\"root\":\"fresh\"}"));
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/x", &plain_read, NULL, &c));
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(a->answered, 1);
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(w.body, "{\"root\":\"fresh\"}");
    assert_int_equal(c.status[0], 0);
    assert_int_not_equal(c.err[0], 0);

    /* the cutting node alone: a 503 naming its failure, never the 10 bytes it sent */
    crec_t c2 = {0};
    rec_t w2;
    rec_init(&w2, f);
    bm_node_t *one = a->node;
    bm_race_request_t q = {"GET", "/x", NULL, NULL};
    wait_on(&w2, bm_race_start(f->eng, &q, &one, 1, &plain_read, NULL, on_complete, &c2));
    RUN_UNTIL(&f->loop, w2.calls == 1 && c2.calls == 1, BOUND_MS);
    assert_int_equal(w2.status, 503);
    assert_null(w2.node);
    char want[256];
    snprintf(want, sizeof want, "{\"code\":503,\"message\":\"no upstream answered: a: %s\"}",
             bm_strerror(c2.err[0]));
    assert_string_equal(w2.body, want);
    assert_int_not_equal(c2.err[0], 0);
    assert_int_equal(a->answered, 2);
    rec_dispose(&w);
    rec_dispose(&w2);
}

static void test_all_network_errors(void **state)
{
    fx_t *f = *state;
    fake_node_add_refused(&f->nodes);
    fake_node_add_refused(&f->nodes);
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/x", &plain_read, NULL, &c));
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
    rec_dispose(&w);
}

/* Sequential dispatch: the second node is asked only after the first failed; the third
 * is never asked once the second answered. */
static void test_sequential(void **state)
{
    fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 20, "{\"code\":500,\"message\":\"boom\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(20, "{\"root\":\"fresh\"}"));
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_OK(0, "{\"root\":\"fresh\"}"));
    bm_race_policy_t p = {.sequential = true};
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/x", &p, NULL, &c));
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(f->nodes.log, "a>a<b>b<");
    assert_int_equal(c3->requests, 0);
    assert_int_equal(c.err[2], BM_ECANCELED); /* never asked */
    assert_int_equal(c.status[0], 500);
    rec_dispose(&w);
}

/* Sequential with a deadline answers by the deadline with what it has, even while a later
 * node hangs. */
static void test_sequential_deadline(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"stale\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.sequential = true, .accept = accept_fresh};
    uint64_t t0 = bm_clock_now_ms();
    p.deadline_ms = t0 + 200;
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/x", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, a->node);
    assert_true(w.at_ms >= p.deadline_ms && w.at_ms <= p.deadline_ms + SLACK_MS);
    RUN_UNTIL(&f->loop, b->aborted == 1, BOUND_MS);
    assert_string_equal(f->nodes.log, "a>a<b>b!");
    rec_dispose(&w);
}

/* Sequential with until-accepted: once every node was asked, the due re-asks run one at
 * a time, earliest first, until an accepted answer. */
static void test_sequential_repoll(void **state)
{
    fx_t *f = *state;
    fake_step_t s[] = {FAKE_OK(0, "{\"root\":\"stale\"}"), FAKE_OK(0, "{\"root\":\"stale\"}"),
                       FAKE_OK(0, "{\"root\":\"fresh\"}")};
    fake_node_t *a = fake_node_add(&f->nodes, s, 3);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(0, "{\"root\":\"stale\"}"));
    bm_race_policy_t p = {
        .sequential = true, .accept = accept_fresh, .repoll = BM_REPOLL_UNTIL_ACCEPTED};
    p.deadline_ms = bm_clock_now_ms() + 2000;
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/x", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, a->node);
    assert_string_equal(w.body, "{\"root\":\"fresh\"}");
    assert_int_equal(a->requests, 3);
    assert_int_equal(b->requests, 2);
    assert_string_equal(f->nodes.log, "a>a<b>b<a>a<b>b<a>a<"); /* never two at once */
    rec_dispose(&w);
}

/* Sequential: a refused node and a 2xx that is not accepted move on to the next; the
 * unaccepted 2xx stays the fallback when nobody has better. */
static void test_sequential_not_accepted(void **state)
{
    fx_t *f = *state;
    fake_node_add_refused(&f->nodes);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"stale\"}"));
    fake_node_t *c3 =
        fake_node_add1(&f->nodes, FAKE_STATUS(503, 10, "{\"code\":503,\"message\":\"syncing\"}"));
    bm_race_policy_t p = {.sequential = true, .accept = accept_fresh};
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/x", &p, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(f->nodes.log, "b>b<c>c<");
    assert_int_equal(c3->requests, 1);
    rec_dispose(&w);
}

/* A waiter leaving a read race removes only itself; the last one leaving cancels the race:
 * the servers see the cancel, the completion runs once, nobody is answered. */
static void test_leave_read(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    crec_t c = {0};
    rec_t w1, w2;
    rec_init(&w1, f);
    rec_init(&w2, f);
    bm_race_t *race = start(f, "GET", "/att", &plain_read, "k", &c);
    wait_on(&w1, race);
    wait_on(&w2, bm_race_find(f->eng, "k"));
    RUN_UNTIL(&f->loop, a->requests == 1 && b->requests == 1, BOUND_MS);
    assert_int_equal(in_flight(f), 2);
    bm_race_leave(w1.w);
    assert_int_equal(bm_race_waiters(race), 1);
    RUN_FOR(&f->loop, 50);
    assert_int_equal(a->aborted + b->aborted, 0);
    assert_ptr_equal(bm_race_find(f->eng, "k"), race);
    bm_race_leave(w2.w);
    assert_null(bm_race_find(f->eng, "k"));
    assert_int_equal(c.calls, 0); /* never inside bm_race_leave */
    assert_int_equal(in_flight(f), 0);
    RUN_UNTIL(&f->loop, a->aborted == 1 && b->aborted == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.err[0], BM_ECANCELED);
    assert_int_equal(c.err[1], BM_ECANCELED);
    RUN_FOR(&f->loop, 50);
    assert_int_equal(c.calls, 1);
    assert_int_equal(w1.calls + w2.calls, 0);
    assert_int_equal(bm_race_engine_active(f->eng), 0);
    /* nothing was recorded for the cancelled transfers */
    assert_int_equal(a->node->stats.requests, 0);
    rec_dispose(&w1);
    rec_dispose(&w2);
}

/* A write survives its only waiter leaving right after the start: every node still gets
 * the request (with its body) and answers; the completion reports them all. */
static void test_write_detached(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(300, "{}"));
    fake_node_t *c3 =
        fake_node_add1(&f->nodes, FAKE_STATUS(500, 100, "{\"code\":500,\"message\":\"boom\"}"));
    bm_race_policy_t p = {.write = true};
    bm_node_t *nodes[3] = {a->node, b->node, c3->node};
    bm_buf_t *body = bm_buf_from_str("{\"block\":1}");
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "application/json");
    bm_race_request_t q = {"POST", "/eth/v2/beacon/blocks?broadcast_validation=gossip", &h, body};
    crec_t c = {0};
    bm_race_t *race = bm_race_start(f->eng, &q, nodes, 3, &p, NULL, on_complete, &c);
    assert_non_null(race);
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, race);
    bm_race_leave(w.w); /* the client hung up */
    RUN_UNTIL(&f->loop, c.calls == 1, BOUND_MS);
    assert_int_equal(c.calls, 1);
    assert_int_equal(w.calls, 0);
    for (int i = 0; i < 3; i++) {
        fake_node_t *tn = &f->nodes.node[i];
        assert_int_equal(tn->requests, 1);
        assert_int_equal(tn->answered, 1);
        assert_int_equal(tn->aborted, 0);
        assert_string_equal(fake_node_last(tn)->method, "POST");
        assert_string_equal(fake_node_last(tn)->target,
                            "/eth/v2/beacon/blocks?broadcast_validation=gossip");
        assert_string_equal(fake_node_last(tn)->body, "{\"block\":1}");
    }
    assert_int_equal(c.status[0], 200);
    assert_int_equal(c.status[1], 200);
    assert_int_equal(c.status[2], 500);
    assert_int_equal(in_flight(f), 0);
    rec_dispose(&w);
}

/* A write answers its waiter at the first 2xx and goes on until every node answered. */
static void test_write_answers_first_then_runs_on(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(300, "{}"));
    bm_race_policy_t p = {.write = true};
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    uint64_t t0 = bm_clock_now_ms();
    wait_on(&w, start(f, "POST", "/eth/v1/beacon/pool/attestations", &p, NULL, &c));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, a->node);
    assert_true(w.at_ms < t0 + 300);
    assert_int_equal(c.calls, 0);
    RUN_UNTIL(&f->loop, c.calls == 1, BOUND_MS);
    assert_int_equal(b->answered, 1);
    assert_int_equal(b->aborted, 0);
    assert_true(c.at_ms >= t0 + 300);
    rec_dispose(&w);
}

/* A write cut by its hard timeout: the waiter gets the best in hand, the hung node is
 * recorded as a timeout and reported as such. */
static void test_hard_timeout(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.write = true};
    uint64_t t0 = bm_clock_now_ms();
    p.hard_timeout_ms = t0 + 200;
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "POST", "/eth/v1/beacon/pool/attestations", &p, NULL, &c));
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(w.status, 503);
    char want[128];
    snprintf(want, sizeof want, "{\"code\":503,\"message\":\"no upstream answered: a: %s\"}",
             bm_strerror(BM_ETIMEDOUT));
    assert_string_equal(w.body, want);
    assert_true(w.at_ms >= p.hard_timeout_ms && w.at_ms <= p.hard_timeout_ms + SLACK_MS);
    assert_int_equal(c.err[0], BM_ETIMEDOUT);
    assert_int_equal(a->node->stats.errors, 1);
    assert_int_equal(a->node->stats.in_flight, 0);
    RUN_UNTIL(&f->loop, a->aborted == 1, BOUND_MS);
    rec_dispose(&w);
}

/* A policy timer and bm_race_decide: nothing is accepted, every node answered early, the
 * pending timer holds the race, and then the policy picks the majority answer itself. */
typedef struct majority {
    int calls;
    int decide_rc;
    size_t seen;
} majority_t;

static void decide_majority(bm_race_t *r, void *ud)
{
    majority_t *m = ud;
    m->calls++;
    size_t n;
    const bm_race_answer_t *v = bm_race_answers(r, &n);
    m->seen = n;
    const bm_race_answer_t *best = NULL;
    int best_votes = 0;
    for (size_t i = 0; i < n; i++) {
        int votes = 0;
        for (size_t j = 0; j < n; j++)
            votes += v[i].body && v[j].body && v[i].body->len == v[j].body->len &&
                     memcmp(v[i].body->data, v[j].body->data, v[i].body->len) == 0;
        if (votes > best_votes) {
            best_votes = votes;
            best = &v[i];
        }
    }
    m->decide_rc = bm_race_decide(r, best);
}

static bool accept_none(const bm_race_answer_t *a, void *ud)
{
    (void)a;
    (void)ud;
    return false;
}

static void test_decide_at_majority(void **state)
{
    fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"dependent_root\":\"x\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(20, "{\"dependent_root\":\"y\"}"));
    fake_node_add1(&f->nodes, FAKE_OK(30, "{\"dependent_root\":\"y\"}"));
    fake_node_add1(&f->nodes, FAKE_OK(40, "{\"dependent_root\":\"y\"}"));
    bm_race_policy_t p = {.accept = accept_none};
    uint64_t t0 = bm_clock_now_ms();
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    bm_race_t *race = start(f, "GET", "/duties", &p, NULL, &c);
    wait_on(&w, race);
    majority_t m = {0};
    assert_int_equal(bm_race_at(race, t0 + 200, decide_majority, &m), 0);
    assert_int_equal(bm_race_at(race, t0 + 5000, decide_majority, &m), 0);
    assert_int_equal(bm_race_at(race, t0, NULL, NULL), BM_EINVAL);
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(m.calls, 1);
    assert_int_equal(m.decide_rc, 0);
    assert_int_equal(m.seen, 4);
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(w.body, "{\"dependent_root\":\"y\"}");
    /* every node answered by about t0 + 40: only the pending timer held the race */
    assert_true(w.at_ms >= t0 + 200 && w.at_ms <= t0 + 200 + SLACK_MS);
    RUN_FOR(&f->loop, 50);
    assert_int_equal(m.calls, 1); /* the second timer never fires */
    rec_dispose(&w);
}

/* bm_race_decide refuses what is not an HTTP answer of the race, and a race that decided. */
static void on_decide_check(bm_race_t *r, void *ud)
{
    int *rc = ud;
    size_t n;
    const bm_race_answer_t *v = bm_race_answers(r, &n);
    assert_int_equal(n, 2); /* the refused node's failure is an answer too */
    bm_race_answer_t foreign = v[0];
    foreign.node = NULL;
    rc[0] = bm_race_decide(r, &foreign);
    const bm_race_answer_t *failed = v[0].err ? &v[0] : &v[1];
    const bm_race_answer_t *good = v[0].err ? &v[1] : &v[0];
    rc[1] = bm_race_decide(r, failed);
    rc[2] = bm_race_decide(r, good);
    rc[3] = bm_race_decide(r, good);
    rc[4] = bm_race_at(r, 0, on_decide_check, ud);
}

static void test_decide_checks(void **state)
{
    fx_t *f = *state;
    fake_node_add_refused(&f->nodes);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(5, "{}"));
    bm_race_policy_t p = {.accept = accept_none};
    rec_t w;
    rec_init(&w, f);
    bm_race_t *race = start(f, "GET", "/x", &p, NULL, NULL);
    wait_on(&w, race);
    int rc[5] = {1, 1, 1, 1, 1};
    assert_int_equal(bm_race_at(race, bm_clock_now_ms() + 100, on_decide_check, rc), 0);
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_int_equal(rc[0], BM_EINVAL);
    assert_int_equal(rc[1], BM_EINVAL);
    assert_int_equal(rc[2], 0);
    assert_int_equal(rc[3], BM_ECLOSED);
    assert_int_equal(rc[4], BM_ECLOSED);
    assert_ptr_equal(w.node, b->node);
    rec_dispose(&w);
}

/* Draining bounds writes at shutdown: done runs at the bound, the hung write is cut (its
 * server sees it), its waiter still gets one answer. Reads are not touched. */
typedef struct drained {
    int calls;
    uint64_t at_ms;
} drained_t;

static void on_drained(bm_race_engine_t *e, void *ud)
{
    drained_t *d = ud;
    (void)e;
    d->calls++;
    d->at_ms = bm_clock_now_ms();
}

static void test_drain_bounds_writes(void **state)
{
    fx_t *f = *state;
    fake_node_t *a =
        fake_node_add1(&f->nodes, FAKE_STATUS(500, 10, "{\"code\":500,\"message\":\"boom\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.write = true};
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "POST", "/eth/v1/beacon/pool/attestations", &p, NULL, &c));
    RUN_UNTIL(&f->loop, a->answered == 1 && b->requests == 1, BOUND_MS);
    drained_t d = {0};
    uint64_t t0 = bm_clock_now_ms();
    bm_race_engine_drain(f->eng, 200, on_drained, &d);
    assert_int_equal(d.calls, 0);
    RUN_UNTIL(&f->loop, d.calls == 1, BOUND_MS);
    assert_true(d.at_ms >= t0 + 200 && d.at_ms <= t0 + 200 + SLACK_MS);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 500);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.err[1], BM_ECANCELED);
    RUN_UNTIL(&f->loop, b->aborted == 1, BOUND_MS);
    assert_int_equal(in_flight(f), 0);
    rec_dispose(&w);
}

static void test_drain_waits_for_writes(void **state)
{
    fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(150, "{}"));
    bm_race_policy_t p = {.write = true};
    crec_t c = {0};
    start(f, "POST", "/eth/v1/validator/prepare_beacon_proposer", &p, NULL, &c);
    drained_t d = {0};
    uint64_t t0 = bm_clock_now_ms();
    bm_race_engine_drain(f->eng, 3000, on_drained, &d);
    RUN_UNTIL(&f->loop, d.calls == 1, BOUND_MS);
    assert_int_equal(b->answered, 1);
    assert_int_equal(c.calls, 1);
    assert_true(d.at_ms >= t0 + 150 && d.at_ms < t0 + 1500);
    /* nothing to wait for: done from the loop, not inside the call */
    drained_t d2 = {0};
    bm_race_engine_drain(f->eng, 3000, on_drained, &d2);
    assert_int_equal(d2.calls, 0);
    RUN_UNTIL(&f->loop, d2.calls == 1, BOUND_MS);
    assert_int_equal(d2.calls, 1);
}

/* Freeing the engine with races in flight: no callback runs, transfers are cancelled and
 * the loop closes cleanly (the teardown checks uv_loop_close). */
static void test_free_in_flight(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(100, "{}"));
    crec_t c1 = {0}, c2 = {0};
    rec_t w1, w2;
    rec_init(&w1, f);
    rec_init(&w2, f);
    bm_race_policy_t wp = {.write = true};
    wait_on(&w1, start(f, "GET", "/x", &plain_read, "k", &c1));
    wait_on(&w2, start(f, "POST", "/y", &wp, NULL, &c2));
    drained_t d = {0};
    bm_race_engine_drain(f->eng, 1000, on_drained, &d);
    RUN_UNTIL(&f->loop, a->requests == 2 && b->requests == 2, BOUND_MS);
    bm_race_engine_free(f->eng);
    f->eng = NULL;
    assert_int_equal(in_flight(f), 0);
    RUN_UNTIL(&f->loop, a->aborted == 2 && b->aborted + b->answered == 2, BOUND_MS);
    RUN_FOR(&f->loop, 150);
    assert_int_equal(w1.calls + w2.calls + c1.calls + c2.calls + d.calls, 0);
    rec_dispose(&w1);
    rec_dispose(&w2);
}

/* Waiter callbacks may do anything: leave a waiter not yet answered (it is not called),
 * start a new race under the same key, free the engine (nothing more is called). */
static void test_waiter_reentrancy(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    rec_t w1, w2, w3;
    rec_init(&w1, f);
    rec_init(&w2, f);
    rec_init(&w3, f);
    crec_t c = {0};
    bm_race_t *race = start(f, "GET", "/x", &plain_read, "k", &c);
    wait_on(&w1, race);
    wait_on(&w2, race);
    wait_on(&w3, race);
    w1.leave_other = w2.w;
    w1.restart_key = "k";
    w3.leave_other = w3.w; /* leaving oneself inside one's own callback does nothing */
    RUN_UNTIL(&f->loop, w1.calls == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(w2.calls, 0);
    assert_int_equal(w3.calls, 1);
    assert_ptr_equal(bm_race_find(f->eng, "k"), w1.restarted);

    /* the new race's waiter frees the engine; the other waiter is not called */
    rec_t w4, w5;
    rec_init(&w4, f);
    rec_init(&w5, f);
    wait_on(&w4, w1.restarted);
    wait_on(&w5, w1.restarted);
    w4.free_engine = true;
    RUN_UNTIL(&f->loop, w4.calls == 1, BOUND_MS);
    RUN_FOR(&f->loop, 50);
    assert_null(f->eng);
    assert_int_equal(w5.calls, 0);
    assert_int_equal(a->requests, 2);
    assert_string_equal(fake_node_last(a)->target, "/again");
    rec_t *all[] = {&w1, &w2, &w3, &w4, &w5};
    for (size_t i = 0; i < 5; i++)
        rec_dispose(all[i]);
}

/* A context a race owns (ud_dispose). */
typedef struct owned {
    int *disposed; /* incremented by dispose */
    int judged;    /* predicates called with it, copied to *judged_out by dispose */
    int *judged_out;
} owned_t;

static void owned_dispose(void *ud)
{
    owned_t *o = ud;
    (*o->disposed)++;
    if (o->judged_out)
        *o->judged_out = o->judged;
    free(o);
}

static bool owned_accept(const bm_race_answer_t *a, void *ud)
{
    (void)a;
    ((owned_t *)ud)->judged++;
    return true;
}

static owned_t *owned_new(int *disposed)
{
    owned_t *o = calloc(1, sizeof *o);
    assert_non_null(o);
    o->disposed = disposed;
    return o;
}

/* A race may own its policy's context: the predicates get it, bm_race_ctx returns it, and
 * it is released once, after every callback, however the race ended (answered, cancelled
 * by its last waiter leaving, the engine freed); a race that did not start leaves it to
 * the caller. */
static void test_owned_context(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    int disposed[3] = {0};

    /* answered: released after the completion */
    owned_t *o = owned_new(&disposed[0]);
    int judged = -1;
    o->judged_out = &judged;
    bm_race_policy_t p = {.accept = owned_accept, .ud = o, .ud_dispose = owned_dispose};
    crec_t c = {0};
    bm_node_t *one = a->node;
    bm_race_request_t q = {"GET", "/x", NULL, NULL};
    bm_race_t *race = bm_race_start(f->eng, &q, &one, 1, &p, "owned", on_complete, &c);
    assert_non_null(race);
    assert_ptr_equal(bm_race_ctx(race), o);
    assert_ptr_equal(bm_race_ctx(bm_race_find(f->eng, "owned")), o);
    assert_null(bm_race_ctx(NULL));
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, race);
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(c.calls, 1);
    RUN_UNTIL(&f->loop, disposed[0] == 1, BOUND_MS);
    assert_int_equal(disposed[0], 1);
    assert_int_equal(judged, 1); /* the predicate had it */

    /* cancelled: the last waiter leaves a read */
    one = b->node;
    p.ud = owned_new(&disposed[1]);
    race = bm_race_start(f->eng, &q, &one, 1, &p, NULL, NULL, NULL);
    assert_non_null(race);
    rec_t w2;
    rec_init(&w2, f);
    wait_on(&w2, race);
    RUN_UNTIL(&f->loop, b->requests == 1, BOUND_MS);
    bm_race_leave(w2.w);
    assert_int_equal(disposed[1], 0); /* never inside a call */
    RUN_UNTIL(&f->loop, disposed[1] == 1 && b->aborted == 1, BOUND_MS);
    assert_int_equal(disposed[1], 1);
    assert_int_equal(w2.calls, 0);

    /* not started: the context stays the caller's */
    owned_t *kept = owned_new(&disposed[2]);
    p.ud = kept;
    assert_null(bm_race_start(f->eng, NULL, &one, 1, &p, NULL, NULL, NULL));

    /* the engine freed with the race running: released from the loop all the same */
    p.ud = kept;
    race = bm_race_start(f->eng, &q, &one, 1, &p, NULL, NULL, NULL);
    assert_non_null(race);
    RUN_UNTIL(&f->loop, b->requests == 2, BOUND_MS);
    bm_race_engine_free(f->eng);
    f->eng = NULL;
    assert_int_equal(disposed[2], 0);
    RUN_UNTIL(&f->loop, disposed[2] == 1, BOUND_MS);
    assert_int_equal(disposed[2], 1);
    RUN_FOR(&f->loop, 50);
    assert_int_equal(disposed[0] + disposed[1] + disposed[2], 3);
    rec_dispose(&w);
    rec_dispose(&w2);
}

/* Answers carry the node's end-to-end header fields, never the hop-by-hop ones. */
static void test_answer_headers(void **state)
{
    fx_t *f = *state;
    fake_node_add1(&f->nodes, (fake_step_t){.status = 200,
                                            .body = "{\"data\":1}",
                                            .hdrs = {{"Eth-Consensus-Version", "fulu"}}});
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/x", &plain_read, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_string_equal(bm_hdrs_get(&w.hdrs, "eth-consensus-version"), "fulu");
    assert_string_equal(bm_hdrs_get(&w.hdrs, "content-type"), "application/json");
    assert_null(bm_hdrs_get(&w.hdrs, "content-length"));
    assert_null(bm_hdrs_get(&w.hdrs, "connection"));
    assert_null(bm_hdrs_get(&w.hdrs, "transfer-encoding"));
    assert_null(bm_hdrs_get(&w.hdrs, "keep-alive"));
    rec_dispose(&w);
}

/* Every finished transfer is recorded in the pool; in-flight counts follow the transfers. */
static void test_pool_records(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_STATUS(500, 10, "{}"));
    bm_race_policy_t wp = {.write = true};
    crec_t c = {0};
    start(f, "POST", "/x", &wp, NULL, &c);
    assert_int_equal(in_flight(f), 2);
    RUN_UNTIL(&f->loop, c.calls == 1, BOUND_MS);
    assert_int_equal(in_flight(f), 0);
    assert_int_equal(a->node->stats.requests, 1);
    assert_int_equal(a->node->stats.errors, 0);
    assert_true(a->node->stats.last_ok_ms > 0);
    assert_int_equal(b->node->stats.requests, 1);
    assert_int_equal(b->node->stats.errors, 1);
    assert_true(b->node->reachable);
}

/* Bad arguments give clear errors, never a crash; the error body is escaped JSON. */
static void test_bad_args_and_error_body(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(0, "{}"));
    bm_race_request_t q = {"GET", "/x", NULL, NULL};
    bm_node_t *nodes[2] = {a->node, NULL};
    assert_null(bm_race_start(NULL, &q, nodes, 1, &plain_read, NULL, NULL, NULL));
    assert_null(bm_race_start(f->eng, NULL, nodes, 1, &plain_read, NULL, NULL, NULL));
    assert_null(bm_race_start(f->eng, &q, nodes, 1, NULL, NULL, NULL, NULL));
    assert_null(bm_race_start(f->eng, &q, NULL, 1, &plain_read, NULL, NULL, NULL));
    assert_null(bm_race_start(f->eng, &q, nodes, 2, &plain_read, NULL, NULL, NULL));
    bm_race_request_t q2 = {NULL, "/x", NULL, NULL};
    assert_null(bm_race_start(f->eng, &q2, nodes, 1, &plain_read, NULL, NULL, NULL));
    assert_null(bm_race_wait(NULL, on_answer, NULL));
    bm_race_leave(NULL);
    assert_int_equal(bm_race_waiters(NULL), 0);
    assert_null(bm_race_find(f->eng, NULL));
    assert_int_equal(bm_race_decide(NULL, NULL), BM_EINVAL);
    assert_int_equal(bm_race_engine_active(f->eng), 0);

    /* a target the URL joiner refuses fails every node without any transfer */
    bm_race_request_t q3 = {"GET", "relative", NULL, NULL};
    rec_t w;
    rec_init(&w, f);
    bm_race_t *race = bm_race_start(f->eng, &q3, nodes, 1, &plain_read, NULL, NULL, NULL);
    assert_non_null(race);
    assert_null(bm_race_wait(race, NULL, NULL));
    wait_on(&w, race);
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_int_equal(w.status, 503);
    assert_int_equal(a->requests, 0);

    bm_buf_t *b = bm_race_error_body(400, "bad \"slot\"\n\\");
    assert_non_null(b);
    assert_string_equal(b->data, "{\"code\":400,\"message\":\"bad \\\"slot\\\"\\n\\\\\"}");
    bm_buf_unref(b);
    rec_dispose(&w);
}

/* ---- the witness (the duty journal's first node alone) ------------------------------------- */

typedef struct seen_rec {
    int n;
    bm_node_t *node[16];
    bm_race_judged_t how[16];
    unsigned attempt[16];
    uint64_t at_ms[16];
} seen_rec_t;

static void on_seen(const bm_race_answer_t *a, bm_race_judged_t how, void *ud)
{
    seen_rec_t *s = ud;
    if (s->n == 16)
        return;
    s->node[s->n] = a->node;
    s->how[s->n] = how;
    s->attempt[s->n] = a->attempt;
    s->at_ms[s->n] = bm_clock_now_ms();
    s->n++;
}

/* The index in `s` of `node`'s first report, or -1. */
static int seen_of(const seen_rec_t *s, const bm_node_t *node)
{
    for (int i = 0; i < s->n; i++)
        if (s->node[i] == node)
            return i;
    return -1;
}

/* A candidate witness slower than the winner: the waiter is not held for it, its first
 * transfer is not cancelled by the decision, its answer is reported unjudged, and the
 * completion waits for it. */
static void test_witness_outlives_decision(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(150, "{\"root\":\"stale\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(5, "{\"root\":\"fresh\"}"));
    seen_rec_t seen = {0};
    bm_race_policy_t p = {.accept = accept_fresh,
                          .seen = on_seen,
                          .ud = &seen,
                          .witness = a->node,
                          .repoll = BM_REPOLL_UNTIL_ACCEPTED};
    p.deadline_ms = bm_clock_now_ms() + 1000;
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/att", &p, NULL, &c));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_ptr_equal(w.node, b->node);
    assert_int_equal(c.calls, 0); /* the witness still runs */
    int ib = seen_of(&seen, b->node);
    assert_true(ib >= 0);
    assert_int_equal(seen.how[ib], BM_RACE_ACCEPTED);
    RUN_UNTIL(&f->loop, c.calls == 1, BOUND_MS);
    int ia = seen_of(&seen, a->node);
    assert_true(ia > ib);
    assert_int_equal(seen.how[ia], BM_RACE_UNJUDGED);
    assert_int_equal(seen.attempt[ia], 0);
    assert_true(c.at_ms >= seen.at_ms[ia]);
    assert_int_equal(a->aborted, 0);
    assert_int_equal(a->requests, 1);
    assert_int_equal(c.status[0], 200); /* the completion has the witness's answer */
    assert_string_equal(c.body[0], "{\"root\":\"stale\"}");
    assert_int_equal(in_flight(f), 0);
    rec_dispose(&w);
}

/* A hung witness is cut at the deadline, not earlier and not at the hard timeout; it never
 * reports an answer. */
static void test_witness_cut_at_deadline(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_add1(&f->nodes, FAKE_OK(5, "{\"root\":\"fresh\"}"));
    seen_rec_t seen = {0};
    bm_race_policy_t p = {.accept = accept_fresh, .seen = on_seen, .ud = &seen, .witness = a->node};
    p.deadline_ms = bm_clock_now_ms() + 200;
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/att", &p, NULL, &c));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_true(w.at_ms < p.deadline_ms);
    RUN_UNTIL(&f->loop, c.calls == 1 && a->aborted == 1, BOUND_MS);
    assert_true(c.at_ms >= p.deadline_ms);
    assert_true(c.at_ms <= p.deadline_ms + SLACK_MS);
    assert_int_equal(c.err[0], BM_ECANCELED);
    assert_int_equal(seen_of(&seen, a->node), -1);
    assert_int_equal(a->node->stats.errors, 0); /* cut by the race: no failure of the node */
    assert_int_equal(in_flight(f), 0);
    rec_dispose(&w);
}

/* A witness that is not a candidate is asked once beside the race; even a fresh answer of
 * it is never accepted nor served, and the completion does not list it. */
static void test_witness_not_candidate(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(5, "{\"root\":\"fresh\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(20, "{\"root\":\"stale\"}"));
    seen_rec_t seen = {0};
    bm_race_policy_t p = {.accept = accept_fresh,
                          .seen = on_seen,
                          .ud = &seen,
                          .witness = a->node,
                          .repoll = BM_REPOLL_UNTIL_ACCEPTED};
    p.deadline_ms = bm_clock_now_ms() + 300;
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    bm_race_request_t q = {"GET", "/att", NULL, NULL};
    bm_race_t *race = bm_race_start(f->eng, &q, &b->node, 1, &p, NULL, on_complete, &c);
    assert_non_null(race);
    wait_on(&w, race);
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1, BOUND_MS);
    /* stale, when nothing fresher can come any more: the witness is no candidate */
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(w.body, "{\"root\":\"stale\"}");
    int ia = seen_of(&seen, a->node);
    assert_true(ia >= 0);
    assert_int_equal(seen.how[ia], BM_RACE_UNJUDGED);
    assert_int_equal(a->requests, 1); /* never re-asked */
    assert_true(b->requests > 1);     /* the candidate was */
    assert_int_equal(c.n, 1);
    assert_ptr_equal(c.node[0], b->node);
    assert_int_equal(a->node->stats.requests, 1); /* its exchange counts for the node */
    assert_int_equal(in_flight(f), 0);
    rec_dispose(&w);
}

/* Without a deadline the witness ends with the decision, like any loser. */
static void test_witness_without_deadline(void **state)
{
    fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_add1(&f->nodes, FAKE_OK(5, "{}"));
    bm_race_policy_t p = {.witness = a->node};
    crec_t c = {0};
    rec_t w;
    rec_init(&w, f);
    wait_on(&w, start(f, "GET", "/x", &p, NULL, &c));
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1 && a->aborted == 1, BOUND_MS);
    assert_int_equal(c.err[0], BM_ECANCELED);
    assert_int_equal(in_flight(f), 0);
    rec_dispose(&w);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_hung_node_deadline),
        T(test_one_answer_coalesced),
        T(test_no_candidates),
        T(test_accept_wins_cancels_losers),
        T(test_score_grace),
        T(test_complete_ends_grace),
        T(test_deadline_best_usable),
        T(test_past_deadline_first_usable),
        T(test_all_failed_before_deadline),
        T(test_repoll_until_accepted),
        T(test_repolls_stop_at_deadline),
        T(test_repoll_until_any_2xx),
        T(test_error_priority),
        T(test_error_priority_5xx),
        T(test_all_network_errors),
        T(test_cut_mid_body),
        T(test_sequential),
        T(test_sequential_deadline),
        T(test_sequential_repoll),
        T(test_sequential_not_accepted),
        T(test_leave_read),
        T(test_write_detached),
        T(test_write_answers_first_then_runs_on),
        T(test_hard_timeout),
        T(test_decide_at_majority),
        T(test_decide_checks),
        T(test_drain_bounds_writes),
        T(test_drain_waits_for_writes),
        T(test_free_in_flight),
        T(test_waiter_reentrancy),
        T(test_owned_context),
        T(test_answer_headers),
        T(test_pool_records),
        T(test_bad_args_and_error_body),
        T(test_witness_outlives_decision),
        T(test_witness_cut_at_deadline),
        T(test_witness_not_candidate),
        T(test_witness_without_deadline),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
