/* SPDX-License-Identifier: MIT */
/*
 * test_race: the race engine against real beacon-node stand-ins on loopback: the fake
 * nodes of fake_node.h, answering from scripts (status, body, header fields, delay, or
 * never; a sequence across re-asks; or a refused port). Each node counts its requests,
 * its answers and the requests whose client went away before the answer (the engine
 * cancelled the transfer), and every event goes into one ordered log ("a>" request to a,
 * "a<" answer from a), so sequencing is asserted, not guessed.
 *
 * The engine when nodes fail (error priority, re-asks, the 503 naming each node, hard and
 * per-transfer time-outs, observe) is tested in test_race_errors.c; both share the fixture
 * of race_kit.h.
 *
 * Time is a manual clock (base/clock.h) that the engine and the nodes' scripts share: it
 * moves only when a test advances it, so a test puts time where it wants (a node's delay
 * over, a deadline reached) and then runs the loop until what that set off has happened
 * (race_go: nothing in transit between engine and nodes). Times asserted are therefore exact:
 * an answer at the deadline comes at the deadline's millisecond, and no test waits for
 * real time. Every test ends with uv_loop_close() == 0 (in the teardown).
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
#include "race_kit.h"

/* ---- tests ------------------------------------------------------------------------------ */

/* A hung node never delays the answer past the deadline: a usable (not accepted) answer
 * in hand is given at the deadline, and the hung node's transfer is cancelled. */
static void test_hung_node_deadline(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"stale\"}"));
    bm_race_policy_t p = {.accept = race_accept_fresh};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 200;
    race_crec_t c = {0};
    race_rec_t w;
    race_rec_init(&w, f);
    bm_race_t *race = race_start(f, "GET", "/att", &p, NULL, &c);
    race_wait_on(&w, race);
    race_go(f, 10); /* the stale answer */
    race_called_1ms_after(f, &w, 189);
    assert_int_equal(w.status, 200);
    assert_string_equal(w.body, "{\"root\":\"stale\"}");
    assert_ptr_equal(w.node, f->nodes.node[1].node);
    assert_int_equal(w.at_ms, p.deadline_ms);
    /* the hung node's server sees its client go away; the completion reports it */
    assert_int_equal(a->aborted, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.err[0], BM_ECANCELED);
    assert_int_equal(c.status[1], 200);
    assert_int_equal(race_in_flight(f), 0);
    assert_int_equal(bm_race_engine_active(f->eng), 0);
    race_rec_dispose(&w);
}

/* Exactly one answer per race, to every waiter; coalesced waiters get the same one; the
 * race is joinable until it answered, never afterwards; the answer never runs inside
 * bm_race_start or bm_race_wait. */
static void test_one_answer_coalesced(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(30, "{\"root\":\"fresh\"}"));
    fake_node_add1(&f->nodes, FAKE_OK(60, "{\"root\":\"fresh\",\"other\":1}"));
    race_rec_t w[3];
    race_crec_t c = {0};
    uint64_t t0 = race_now(f);
    bm_race_t *race = race_start(f, "GET", "/att?slot=1", &race_plain_read, "att:1", &c);
    for (int i = 0; i < 3; i++) {
        race_rec_init(&w[i], f);
        bm_race_t *found = bm_race_find(f->eng, "att:1");
        assert_ptr_equal(found, race);
        race_wait_on(&w[i], found);
    }
    assert_null(bm_race_find(f->eng, "att:2"));
    assert_int_equal(bm_race_waiters(race), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(w[i].calls, 0);
    race_go(f, 30);
    assert_int_equal(c.calls, 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(w[i].calls, 1);
        assert_int_equal(w[i].status, 200);
        assert_string_equal(w[i].body, "{\"root\":\"fresh\"}");
        assert_ptr_equal(w[i].node, a->node);
        assert_int_equal(w[i].at_ms, t0 + 30);
    }
    assert_null(bm_race_find(f->eng, "att:1"));
    race_go(f, 100);
    for (int i = 0; i < 3; i++)
        assert_int_equal(w[i].calls, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(a->requests, 1);
    assert_int_equal(f->nodes.node[1].requests, 1);
    assert_int_equal(f->nodes.node[1].aborted, 1);
    for (int i = 0; i < 3; i++)
        race_rec_dispose(&w[i]);
}

/* A race with no candidate answers a 503 of its own, from the loop, never inside the
 * call; a waiter may join until then. */
static void test_no_candidates(void **state)
{
    race_fx_t *f = *state;
    bm_race_request_t q = {"GET", "/x", NULL, NULL};
    race_crec_t c = {0};
    bm_race_t *race =
        bm_race_start(f->eng, &q, NULL, 0, &race_plain_read, "k", race_on_complete, &c);
    assert_non_null(race);
    race_rec_t w;
    race_rec_init(&w, f);
    assert_ptr_equal(bm_race_find(f->eng, "k"), race); /* decided, not answered yet */
    race_wait_on(&w, race);
    assert_int_equal(w.calls, 0);
    RUN_UNTIL(&f->loop, w.calls == 1 && c.calls == 1, BOUND_MS);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 503);
    assert_null(w.node);
    assert_string_equal(w.body, "{\"code\":503,\"message\":\"no upstream available\"}");
    assert_string_equal(bm_hdrs_get(&w.hdrs, "content-type"), "application/json");
    assert_int_equal(c.n, 0);
    race_rec_dispose(&w);
}

/* An accepted 2xx wins at once; the losers' transfers are cancelled (their servers see the
 * client go away); the completion has every node in candidate order. */
static void test_accept_wins_cancels_losers(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(300, "{\"root\":\"fresh\",\"n\":\"a\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(20, "{\"root\":\"fresh\",\"n\":\"b\"}"));
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.accept = race_accept_fresh};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 2000;
    race_crec_t c = {0};
    race_rec_t w;
    race_rec_init(&w, f);
    bm_race_t *race = race_start(f, "GET", "/att", &p, NULL, &c);
    race_wait_on(&w, race);
    race_go(f, 20);
    assert_int_equal(w.calls, 1);
    assert_ptr_equal(w.node, b->node);
    assert_int_equal(w.at_ms, t0 + 20); /* neither the slower node nor the deadline */
    assert_int_equal(a->aborted, 1);
    assert_int_equal(a->answered, 0);
    assert_int_equal(c3->aborted, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.n, 3);
    assert_ptr_equal(c.node[0], a->node);
    assert_int_equal(c.err[0], BM_ECANCELED);
    assert_int_equal(c.status[1], 200);
    assert_int_equal(c.err[2], BM_ECANCELED);
    assert_int_equal(race_in_flight(f), 0);
    race_rec_dispose(&w);
}

/* With a score and a grace, a better-scoring accepted answer within the grace wins; one
 * after the grace does not count. */
static void test_score_grace(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"fresh\",\"score\":1}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(60, "{\"root\":\"fresh\",\"score\":5}"));
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_OK(800, "{\"root\":\"fresh\",\"score\":9}"));
    bm_race_policy_t p = {.accept = race_accept_fresh, .score = race_score_field, .grace_ms = 200};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 3000;
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/agg", &p, NULL, NULL));
    race_go(f, 10); /* the first accepted answer opens the grace: it ends at t0 + 210 */
    race_go(f, 50); /* a better one within it */
    race_called_1ms_after(f, &w, 149);
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(w.body, "{\"root\":\"fresh\",\"score\":5}");
    assert_int_equal(w.at_ms, t0 + 210);
    assert_int_equal(c3->aborted, 1);
    assert_int_equal(c3->answered, 0);
    race_rec_dispose(&w);
}

/* `complete` ends the grace early, and the grace never runs past the deadline. */
static void test_complete_ends_grace(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"fresh\",\"score\":1}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(50, "{\"root\":\"fresh\",\"score\":5}"));
    fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.accept = race_accept_fresh,
                          .score = race_score_field,
                          .complete = race_complete_at_5,
                          .grace_ms = 3000};
    uint64_t t0 = race_now(f);
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/agg", &p, NULL, NULL));
    race_go(f, 10);
    assert_int_equal(w.calls, 0);
    race_go(f, 40);
    assert_int_equal(w.calls, 1);
    assert_ptr_equal(w.node, b->node);
    assert_int_equal(w.at_ms, t0 + 50); /* not the 3 s grace */

    /* same without `complete`, with a deadline before the grace end */
    bm_race_policy_t p2 = {
        .accept = race_accept_fresh, .score = race_score_field, .grace_ms = 3000};
    t0 = race_now(f);
    p2.deadline_ms = t0 + 250;
    race_rec_t w2;
    race_watch(&w2, f, race_start(f, "GET", "/agg2", &p2, NULL, NULL));
    race_go(f, 10);
    race_go(f, 40);
    race_called_1ms_after(f, &w2, 199);
    assert_ptr_equal(w2.node, b->node);
    assert_int_equal(w2.at_ms, p2.deadline_ms);
    race_rec_dispose(&w);
    race_rec_dispose(&w2);
}

/* Nothing accepted: at the deadline the best-scoring usable 2xx wins (an unusable one
 * never does). */
static void test_deadline_best_usable(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"stale\",\"score\":2}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(30, "{\"root\":\"stale\",\"score\":7}"));
    fake_node_add1(&f->nodes, FAKE_OK(20, "{\"root\":\"empty\",\"score\":99}"));
    fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {
        .accept = race_accept_fresh, .usable = race_usable_not_empty, .score = race_score_field};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 200;
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/att", &p, NULL, NULL));
    race_go(f, 10);
    race_go(f, 10);
    race_go(f, 10);
    race_called_1ms_after(f, &w, 169);
    assert_ptr_equal(w.node, b->node);
    assert_int_equal(w.at_ms, p.deadline_ms);
    race_rec_dispose(&w);
}

/* No usable 2xx at the deadline: the first usable one to arrive after it wins. When
 * everything has failed, the race ends without waiting for the deadline. */
static void test_past_deadline_first_usable(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 10, "{\"code\":500,\"message\":\"boom\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(400, "{\"root\":\"stale\"}"));
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_OK(900, "{\"root\":\"stale\",\"n\":3}"));
    bm_race_policy_t p = {.accept = race_accept_fresh};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 150;
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/att", &p, NULL, NULL));
    race_go(f, 10);
    race_go(f, 140); /* the deadline, with nothing usable in hand */
    race_called_1ms_after(f, &w, 249);
    assert_ptr_equal(w.node, b->node);
    assert_int_equal(w.at_ms, t0 + 400);
    assert_int_equal(c3->aborted, 1);
    race_rec_dispose(&w);
}

static void test_all_failed_before_deadline(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_STATUS(404, 10, "{\"code\":404,\"message\":\"nope\"}"));
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 20, "{\"code\":500,\"message\":\"boom\"}"));
    bm_race_policy_t p = {.accept = race_accept_fresh};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 2000;
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/att", &p, NULL, NULL));
    race_go(f, 10);
    assert_int_equal(w.calls, 0);
    race_go(f, 10);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 404);
    assert_int_equal(w.at_ms, t0 + 20);
    race_rec_dispose(&w);
}

/* until-accepted: a node answering stale twice then fresh is re-asked about every 50 ms
 * and its fresh answer wins long before the deadline. */
static void test_repoll_until_accepted(void **state)
{
    race_fx_t *f = *state;
    fake_step_t s[] = {FAKE_OK(0, "{\"root\":\"stale\"}"), FAKE_OK(0, "{\"root\":\"stale\"}"),
                       FAKE_OK(0, "{\"root\":\"fresh\"}")};
    fake_node_t *a = fake_node_add(&f->nodes, s, 3);
    fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.accept = race_accept_fresh, .repoll = BM_REPOLL_UNTIL_ACCEPTED};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 1500;
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/att", &p, NULL, NULL));
    race_go(f, 0); /* the first stale answer */
    race_go(f, 49);
    assert_int_equal(a->requests, 1); /* never faster than the interval */
    race_go(f, 1);
    assert_int_equal(a->requests, 2);
    race_go(f, 50);
    assert_int_equal(w.calls, 1);
    assert_string_equal(w.body, "{\"root\":\"fresh\"}");
    assert_ptr_equal(w.node, a->node);
    assert_int_equal(w.attempt, 2);
    assert_int_equal(a->requests, 3);
    assert_int_equal(w.at_ms, t0 + 100);
    for (int i = 1; i < 3; i++)
        assert_int_equal(a->reqs[i].at_ms - a->reqs[i - 1].at_ms, 50);
    race_rec_dispose(&w);
}

/* Repolls stop at the deadline: no re-ask starts at or after it, the stale answer is given
 * by then, and nothing more is asked afterwards. */
static void test_repolls_stop_at_deadline(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(0, "{\"root\":\"stale\"}"));
    bm_race_policy_t p = {.accept = race_accept_fresh, .repoll = BM_REPOLL_UNTIL_ACCEPTED};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 250;
    race_crec_t c = {0};
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/att", &p, NULL, &c));
    race_go(f, 0);
    for (int i = 0; i < 3; i++)
        race_go(f, 50);
    assert_int_equal(w.calls, 0);
    /* the re-ask at 200 is the last that starts before the deadline (the next would be at
     * 250): once it answered nothing more can change the answer, which goes out at once */
    race_go(f, 50);
    assert_int_equal(w.calls, 1);
    assert_int_equal(c.calls, 1);
    assert_string_equal(w.body, "{\"root\":\"stale\"}");
    assert_int_equal(w.at_ms, t0 + 200);
    assert_int_equal(a->requests, 5);
    assert_int_equal(c.attempt[0], 4);
    race_go(f, 200);
    assert_int_equal(a->requests, 5);
    race_rec_dispose(&w);
}

/* until-any-2xx: a node whose 2xx is not usable goes on being re-asked past the deadline
 * until it has something usable; until-accepted in the same situation stops at the
 * deadline and answers the most specific answer in hand (a 5xx beats an unusable 2xx). */
static void test_repoll_until_any_2xx(void **state)
{
    race_fx_t *f = *state;
    fake_step_t s[] = {FAKE_OK(0, "{\"root\":\"empty\"}"), FAKE_OK(0, "{\"root\":\"empty\"}"),
                       FAKE_OK(0, "{\"root\":\"empty\"}"), FAKE_OK(0, "{\"root\":\"empty\"}"),
                       FAKE_OK(0, "{\"root\":\"empty\"}"), FAKE_OK(0, "{\"root\":\"empty\"}"),
                       FAKE_OK(0, "{\"root\":\"stale\"}")};
    fake_node_t *a = fake_node_add(&f->nodes, s, 7);
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 5, "{\"code\":500,\"message\":\"boom\"}"));
    bm_race_policy_t p = {.accept = race_accept_fresh,
                          .usable = race_usable_not_empty,
                          .repoll = BM_REPOLL_UNTIL_ANY_2XX};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 120;
    p.hard_timeout_ms = t0 + 3000;
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/agg", &p, NULL, NULL));
    race_go(f, 0);
    race_go(f, 5);
    race_go(f, 45);
    for (int i = 0; i < 4; i++)
        race_go(f, 50); /* past the deadline (120): the empty answers are re-asked */
    assert_int_equal(w.calls, 0);
    race_go(f, 50); /* the seventh answer, at 300, is usable */
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 200);
    assert_string_equal(w.body, "{\"root\":\"stale\"}");
    assert_int_equal(a->requests, 7);
    assert_int_equal(w.at_ms, t0 + 300);

    /* until-accepted: the same node script from the start */
    a->requests = 0;
    p.repoll = BM_REPOLL_UNTIL_ACCEPTED;
    t0 = race_now(f);
    p.deadline_ms = t0 + 120;
    p.hard_timeout_ms = t0 + 3000;
    race_rec_t w2;
    race_watch(&w2, f, race_start(f, "GET", "/agg", &p, NULL, NULL));
    race_go(f, 0);
    race_go(f, 5);
    race_go(f, 45);
    assert_int_equal(w2.calls, 0);
    /* the re-ask at 100 is the last before the deadline: once answered, nothing more can
     * come, so the most specific answer in hand goes out at once (a 5xx beats an unusable
     * 2xx) */
    race_go(f, 50);
    assert_int_equal(w2.calls, 1);
    assert_int_equal(w2.status, 500);
    assert_int_equal(w2.at_ms, t0 + 100);
    assert_int_equal(a->requests, 3);
    race_rec_dispose(&w);
    race_rec_dispose(&w2);
}

/* Sequential dispatch: the second node is asked only after the first failed; the third
 * is never asked once the second answered. */
static void test_sequential(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_STATUS(500, 20, "{\"code\":500,\"message\":\"boom\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(20, "{\"root\":\"fresh\"}"));
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_OK(0, "{\"root\":\"fresh\"}"));
    bm_race_policy_t p = {.sequential = true};
    uint64_t t0 = race_now(f);
    race_crec_t c = {0};
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &p, NULL, &c));
    race_go(f, 20); /* a fails: b is asked */
    assert_string_equal(f->nodes.log, "a>a<b>");
    race_go(f, 20);
    assert_int_equal(w.calls, 1);
    assert_int_equal(c.calls, 1);
    assert_ptr_equal(w.node, b->node);
    assert_int_equal(w.at_ms, t0 + 40);
    assert_string_equal(f->nodes.log, "a>a<b>b<");
    assert_int_equal(c3->requests, 0);
    assert_int_equal(c.err[2], BM_ECANCELED); /* never asked */
    assert_int_equal(c.status[0], 500);
    race_rec_dispose(&w);
}

/* Sequential with a deadline answers by the deadline with what it has, even while a later
 * node hangs. */
static void test_sequential_deadline(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"stale\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.sequential = true, .accept = race_accept_fresh};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 200;
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &p, NULL, NULL));
    race_go(f, 10); /* a's stale answer: b is asked, and hangs */
    race_called_1ms_after(f, &w, 189);
    assert_ptr_equal(w.node, a->node);
    assert_int_equal(w.at_ms, p.deadline_ms);
    assert_int_equal(b->aborted, 1);
    assert_string_equal(f->nodes.log, "a>a<b>b!");
    race_rec_dispose(&w);
}

/* Sequential with until-accepted: once every node was asked, the due re-asks run one at
 * a time, earliest first, until an accepted answer. */
static void test_sequential_repoll(void **state)
{
    race_fx_t *f = *state;
    fake_step_t s[] = {FAKE_OK(0, "{\"root\":\"stale\"}"), FAKE_OK(0, "{\"root\":\"stale\"}"),
                       FAKE_OK(0, "{\"root\":\"fresh\"}")};
    fake_node_t *a = fake_node_add(&f->nodes, s, 3);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(0, "{\"root\":\"stale\"}"));
    bm_race_policy_t p = {
        .sequential = true, .accept = race_accept_fresh, .repoll = BM_REPOLL_UNTIL_ACCEPTED};
    uint64_t t0 = race_now(f);
    p.deadline_ms = t0 + 2000;
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &p, NULL, NULL));
    race_go(f, 0);
    assert_string_equal(f->nodes.log, "a>a<b>b<");
    race_go(f, 50); /* both re-asks are due: one at a time, a first */
    assert_string_equal(f->nodes.log, "a>a<b>b<a>a<b>b<");
    race_go(f, 50);
    assert_int_equal(w.calls, 1);
    assert_ptr_equal(w.node, a->node);
    assert_string_equal(w.body, "{\"root\":\"fresh\"}");
    assert_int_equal(w.at_ms, t0 + 100);
    assert_int_equal(a->requests, 3);
    assert_int_equal(b->requests, 2);
    assert_string_equal(f->nodes.log, "a>a<b>b<a>a<b>b<a>a<"); /* never two at once */
    race_rec_dispose(&w);
}

/* Sequential: a refused node and a 2xx that is not accepted move on to the next; the
 * unaccepted 2xx stays the fallback when nobody has better. */
static void test_sequential_not_accepted(void **state)
{
    race_fx_t *f = *state;
    fake_node_add_refused(&f->nodes);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"stale\"}"));
    fake_node_t *c3 =
        fake_node_add1(&f->nodes, FAKE_STATUS(503, 10, "{\"code\":503,\"message\":\"syncing\"}"));
    bm_race_policy_t p = {.sequential = true, .accept = race_accept_fresh};
    uint64_t t0 = race_now(f);
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &p, NULL, NULL));
    race_go(f, 0);  /* the refused node: b is asked */
    race_go(f, 10); /* b's stale answer: c is asked */
    assert_int_equal(w.calls, 0);
    race_go(f, 10);
    assert_int_equal(w.calls, 1);
    assert_ptr_equal(w.node, b->node);
    assert_int_equal(w.at_ms, t0 + 20);
    assert_string_equal(f->nodes.log, "b>b<c>c<");
    assert_int_equal(c3->requests, 1);
    race_rec_dispose(&w);
}

/* A waiter leaving a read race removes only itself; the last one leaving cancels the race:
 * the servers see the cancel, the completion runs once, nobody is answered. */
static void test_leave_read(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    race_crec_t c = {0};
    race_rec_t w1, w2;
    race_rec_init(&w1, f);
    race_rec_init(&w2, f);
    bm_race_t *race = race_start(f, "GET", "/att", &race_plain_read, "k", &c);
    race_wait_on(&w1, race);
    race_wait_on(&w2, bm_race_find(f->eng, "k"));
    race_go(f, 0);
    assert_int_equal(a->requests + b->requests, 2);
    assert_int_equal(race_in_flight(f), 2);
    bm_race_leave(w1.w);
    assert_int_equal(bm_race_waiters(race), 1);
    race_go(f, 50);
    assert_int_equal(a->aborted + b->aborted, 0);
    assert_ptr_equal(bm_race_find(f->eng, "k"), race);
    bm_race_leave(w2.w);
    assert_null(bm_race_find(f->eng, "k"));
    assert_int_equal(c.calls, 0); /* never inside bm_race_leave */
    assert_int_equal(race_in_flight(f), 0);
    race_go(f, 0);
    assert_int_equal(a->aborted + b->aborted, 2);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.err[0], BM_ECANCELED);
    assert_int_equal(c.err[1], BM_ECANCELED);
    race_go(f, 50);
    assert_int_equal(c.calls, 1);
    assert_int_equal(w1.calls + w2.calls, 0);
    assert_int_equal(bm_race_engine_active(f->eng), 0);
    /* nothing was recorded for the cancelled transfers */
    assert_int_equal(a->node->stats.requests, 0);
    race_rec_dispose(&w1);
    race_rec_dispose(&w2);
}

/* A write survives its only waiter leaving right after the start: every node still gets
 * the request (with its body) and answers; the completion reports them all. */
static void test_write_detached(void **state)
{
    race_fx_t *f = *state;
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
    race_crec_t c = {0};
    uint64_t t0 = race_now(f);
    bm_race_t *race = bm_race_start(f->eng, &q, nodes, 3, &p, NULL, race_on_complete, &c);
    assert_non_null(race);
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
    race_rec_t w;
    race_watch(&w, f, race);
    bm_race_leave(w.w); /* the client hung up */
    race_go(f, 10);
    race_go(f, 90);
    race_called_1ms_after(f, &c, 199);
    assert_int_equal(c.at_ms, t0 + 300);
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
    assert_int_equal(race_in_flight(f), 0);
    race_rec_dispose(&w);
}

/* A write answers its waiter at the first 2xx and goes on until every node answered. */
static void test_write_answers_first_then_runs_on(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(300, "{}"));
    bm_race_policy_t p = {.write = true};
    race_crec_t c = {0};
    race_rec_t w;
    race_rec_init(&w, f);
    uint64_t t0 = race_now(f);
    race_wait_on(&w, race_start(f, "POST", "/eth/v1/beacon/pool/attestations", &p, NULL, &c));
    race_go(f, 10);
    assert_int_equal(w.calls, 1);
    assert_ptr_equal(w.node, a->node);
    assert_int_equal(w.at_ms, t0 + 10);
    assert_int_equal(c.calls, 0);
    race_go(f, 290);
    assert_int_equal(c.calls, 1);
    assert_int_equal(b->answered, 1);
    assert_int_equal(b->aborted, 0);
    assert_int_equal(c.at_ms, t0 + 300);
    race_rec_dispose(&w);
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
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"dependent_root\":\"x\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(20, "{\"dependent_root\":\"y\"}"));
    fake_node_add1(&f->nodes, FAKE_OK(30, "{\"dependent_root\":\"y\"}"));
    fake_node_add1(&f->nodes, FAKE_OK(40, "{\"dependent_root\":\"y\"}"));
    bm_race_policy_t p = {.accept = accept_none};
    uint64_t t0 = race_now(f);
    race_crec_t c = {0};
    race_rec_t w;
    race_rec_init(&w, f);
    bm_race_t *race = race_start(f, "GET", "/duties", &p, NULL, &c);
    race_wait_on(&w, race);
    majority_t m = {0};
    assert_int_equal(bm_race_at(race, t0 + 200, decide_majority, &m), 0);
    assert_int_equal(bm_race_at(race, t0 + 5000, decide_majority, &m), 0);
    assert_int_equal(bm_race_at(race, t0, NULL, NULL), BM_EINVAL);
    for (int i = 0; i < 4; i++)
        race_go(f, 10);
    /* every node answered by t0 + 40: only the pending timer holds the race */
    race_called_1ms_after(f, &w, 159);
    assert_int_equal(c.calls, 1);
    assert_int_equal(m.calls, 1);
    assert_int_equal(m.decide_rc, 0);
    assert_int_equal(m.seen, 4);
    assert_ptr_equal(w.node, b->node);
    assert_string_equal(w.body, "{\"dependent_root\":\"y\"}");
    assert_int_equal(w.at_ms, t0 + 200);
    race_go(f, 5000);
    assert_int_equal(m.calls, 1); /* the second timer never fires */
    race_rec_dispose(&w);
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
    race_fx_t *f = *state;
    fake_node_add_refused(&f->nodes);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(5, "{}"));
    bm_race_policy_t p = {.accept = accept_none};
    race_rec_t w;
    race_rec_init(&w, f);
    bm_race_t *race = race_start(f, "GET", "/x", &p, NULL, NULL);
    race_wait_on(&w, race);
    int rc[5] = {1, 1, 1, 1, 1};
    assert_int_equal(bm_race_at(race, race_now(f) + 100, on_decide_check, rc), 0);
    race_go(f, 5);
    assert_int_equal(w.calls, 0);
    race_go(f, 95);
    assert_int_equal(w.calls, 1);
    assert_int_equal(rc[0], BM_EINVAL);
    assert_int_equal(rc[1], BM_EINVAL);
    assert_int_equal(rc[2], 0);
    assert_int_equal(rc[3], BM_ECLOSED);
    assert_int_equal(rc[4], BM_ECLOSED);
    assert_ptr_equal(w.node, b->node);
    race_rec_dispose(&w);
}

/* Draining bounds writes at shutdown: done runs at the bound, the hung write is cut (its
 * server sees it), its waiter still gets one answer. Reads are not touched. */
typedef struct drained {
    bm_clock_t *clock;
    int calls;
    uint64_t at_ms;
} drained_t;

static void on_drained(bm_race_engine_t *e, void *ud)
{
    drained_t *d = ud;
    (void)e;
    d->calls++;
    d->at_ms = bm_clock_wall_now(d->clock);
}

static void test_drain_bounds_writes(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a =
        fake_node_add1(&f->nodes, FAKE_STATUS(500, 10, "{\"code\":500,\"message\":\"boom\"}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    bm_race_policy_t p = {.write = true};
    race_crec_t c = {0};
    race_rec_t w;
    race_watch(&w, f, race_start(f, "POST", "/eth/v1/beacon/pool/attestations", &p, NULL, &c));
    race_go(f, 10);
    assert_int_equal(a->answered + b->requests, 2);
    drained_t d = {.clock = f->clock};
    uint64_t t0 = race_now(f);
    bm_race_engine_drain(f->eng, 200, on_drained, &d);
    assert_int_equal(d.calls, 0);
    race_called_1ms_after(f, &d, 199);
    assert_int_equal(d.at_ms, t0 + 200);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 500);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.err[1], BM_ECANCELED);
    assert_int_equal(b->aborted, 1);
    assert_int_equal(race_in_flight(f), 0);
    race_rec_dispose(&w);
}

static void test_drain_waits_for_writes(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(150, "{}"));
    bm_race_policy_t p = {.write = true};
    race_crec_t c = {0};
    race_start(f, "POST", "/eth/v1/validator/prepare_beacon_proposer", &p, NULL, &c);
    drained_t d = {.clock = f->clock};
    uint64_t t0 = race_now(f);
    bm_race_engine_drain(f->eng, 3000, on_drained, &d);
    race_go(f, 10);
    race_called_1ms_after(f, &d, 139);
    assert_int_equal(b->answered, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(d.at_ms, t0 + 150); /* when the last write ended, not the bound */
    /* nothing to wait for: done from the loop, not inside the call */
    drained_t d2 = {.clock = f->clock};
    bm_race_engine_drain(f->eng, 3000, on_drained, &d2);
    assert_int_equal(d2.calls, 0);
    race_go(f, 0);
    assert_int_equal(d2.calls, 1);
}

/* Freeing the engine with races in flight: no callback runs, transfers are cancelled and
 * the loop closes cleanly (the teardown checks uv_loop_close). */
static void test_free_in_flight(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_OK(100, "{}"));
    race_crec_t c1 = {0}, c2 = {0};
    race_rec_t w1, w2;
    race_rec_init(&w1, f);
    race_rec_init(&w2, f);
    bm_race_policy_t wp = {.write = true};
    race_wait_on(&w1, race_start(f, "GET", "/x", &race_plain_read, "k", &c1));
    race_wait_on(&w2, race_start(f, "POST", "/y", &wp, NULL, &c2));
    drained_t d = {.clock = f->clock};
    bm_race_engine_drain(f->eng, 1000, on_drained, &d);
    race_go(f, 0);
    assert_int_equal(a->requests + b->requests, 4);
    bm_race_engine_free(f->eng);
    f->eng = NULL;
    assert_int_equal(race_in_flight(f), 0);
    race_go(f, 0);
    assert_int_equal(a->aborted, 2);
    assert_int_equal(b->aborted, 2);
    race_go(f, 2000); /* past every time the races and the drain had */
    assert_int_equal(w1.calls + w2.calls + c1.calls + c2.calls + d.calls, 0);
    race_rec_dispose(&w1);
    race_rec_dispose(&w2);
}

/* Waiter callbacks may do anything: leave a waiter not yet answered (it is not called),
 * start a new race under the same key, free the engine (nothing more is called). */
static void test_waiter_reentrancy(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    race_rec_t w1, w2, w3;
    race_rec_init(&w1, f);
    race_rec_init(&w2, f);
    race_rec_init(&w3, f);
    race_crec_t c = {0};
    bm_race_t *race = race_start(f, "GET", "/x", &race_plain_read, "k", &c);
    race_wait_on(&w1, race);
    race_wait_on(&w2, race);
    race_wait_on(&w3, race);
    w1.leave_other = w2.w;
    w1.restart_key = "k";
    w3.leave_other = w3.w; /* leaving oneself inside one's own callback does nothing */
    race_go(f, 10);
    assert_int_equal(w1.calls, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(w2.calls, 0);
    assert_int_equal(w3.calls, 1);
    assert_ptr_equal(bm_race_find(f->eng, "k"), w1.restarted);

    /* the new race's waiter frees the engine; the other waiter is not called */
    race_rec_t w4, w5;
    race_rec_init(&w4, f);
    race_rec_init(&w5, f);
    race_wait_on(&w4, w1.restarted);
    race_wait_on(&w5, w1.restarted);
    w4.free_engine = true;
    race_go(f, 10);
    assert_int_equal(w4.calls, 1);
    race_go(f, 50);
    assert_null(f->eng);
    assert_int_equal(w5.calls, 0);
    assert_int_equal(a->requests, 2);
    assert_string_equal(fake_node_last(a)->target, "/again");
    race_rec_t *all[] = {&w1, &w2, &w3, &w4, &w5};
    for (size_t i = 0; i < 5; i++)
        race_rec_dispose(all[i]);
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
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    int disposed[3] = {0};

    /* answered: released after the completion */
    owned_t *o = owned_new(&disposed[0]);
    int judged = -1;
    o->judged_out = &judged;
    bm_race_policy_t p = {.accept = owned_accept, .ud = o, .ud_dispose = owned_dispose};
    race_crec_t c = {0};
    bm_node_t *one = a->node;
    bm_race_request_t q = {"GET", "/x", NULL, NULL};
    bm_race_t *race = bm_race_start(f->eng, &q, &one, 1, &p, "owned", race_on_complete, &c);
    assert_non_null(race);
    assert_ptr_equal(bm_race_ctx(race), o);
    assert_ptr_equal(bm_race_ctx(bm_race_find(f->eng, "owned")), o);
    assert_null(bm_race_ctx(NULL));
    race_rec_t w;
    race_watch(&w, f, race);
    race_go(f, 10);
    assert_int_equal(w.calls, 1);
    assert_int_equal(c.calls, 1);
    RUN_UNTIL(&f->loop, disposed[0] == 1, BOUND_MS); /* the race's close callback */
    assert_int_equal(disposed[0], 1);
    assert_int_equal(judged, 1); /* the predicate had it */

    /* cancelled: the last waiter leaves a read */
    one = b->node;
    p.ud = owned_new(&disposed[1]);
    race = bm_race_start(f->eng, &q, &one, 1, &p, NULL, NULL, NULL);
    assert_non_null(race);
    race_rec_t w2;
    race_watch(&w2, f, race);
    race_go(f, 0);
    assert_int_equal(b->requests, 1);
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
    race_go(f, 0);
    assert_int_equal(b->requests, 2);
    bm_race_engine_free(f->eng);
    f->eng = NULL;
    assert_int_equal(disposed[2], 0);
    RUN_UNTIL(&f->loop, disposed[2] == 1, BOUND_MS);
    assert_int_equal(disposed[2], 1);
    race_go(f, 50);
    assert_int_equal(disposed[0] + disposed[1] + disposed[2], 3);
    race_rec_dispose(&w);
    race_rec_dispose(&w2);
}

/* Answers carry the node's end-to-end header fields, never the hop-by-hop ones. */
static void test_answer_headers(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, (fake_step_t){.status = 200,
                                            .body = "{\"data\":1}",
                                            .hdrs = {{"Eth-Consensus-Version", "fulu"}}});
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/x", &race_plain_read, NULL, NULL));
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_string_equal(bm_hdrs_get(&w.hdrs, "eth-consensus-version"), "fulu");
    assert_string_equal(bm_hdrs_get(&w.hdrs, "content-type"), "application/json");
    assert_null(bm_hdrs_get(&w.hdrs, "content-length"));
    assert_null(bm_hdrs_get(&w.hdrs, "connection"));
    assert_null(bm_hdrs_get(&w.hdrs, "transfer-encoding"));
    assert_null(bm_hdrs_get(&w.hdrs, "keep-alive"));
    race_rec_dispose(&w);
}

/* Every finished transfer is recorded in the pool; in-flight counts follow the transfers. */
static void test_pool_records(void **state)
{
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(10, "{}"));
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_STATUS(500, 10, "{}"));
    bm_race_policy_t wp = {.write = true};
    race_crec_t c = {0};
    race_start(f, "POST", "/x", &wp, NULL, &c);
    assert_int_equal(race_in_flight(f), 2);
    race_go(f, 10);
    assert_int_equal(c.calls, 1);
    assert_int_equal(race_in_flight(f), 0);
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
    race_fx_t *f = *state;
    fake_node_t *a = fake_node_add1(&f->nodes, FAKE_OK(0, "{}"));
    bm_race_request_t q = {"GET", "/x", NULL, NULL};
    bm_node_t *nodes[2] = {a->node, NULL};
    assert_null(bm_race_start(NULL, &q, nodes, 1, &race_plain_read, NULL, NULL, NULL));
    assert_null(bm_race_start(f->eng, NULL, nodes, 1, &race_plain_read, NULL, NULL, NULL));
    assert_null(bm_race_start(f->eng, &q, nodes, 1, NULL, NULL, NULL, NULL));
    assert_null(bm_race_start(f->eng, &q, NULL, 1, &race_plain_read, NULL, NULL, NULL));
    assert_null(bm_race_start(f->eng, &q, nodes, 2, &race_plain_read, NULL, NULL, NULL));
    bm_race_request_t q2 = {NULL, "/x", NULL, NULL};
    assert_null(bm_race_start(f->eng, &q2, nodes, 1, &race_plain_read, NULL, NULL, NULL));
    assert_null(bm_race_wait(NULL, race_on_answer, NULL));
    bm_race_leave(NULL);
    assert_int_equal(bm_race_waiters(NULL), 0);
    assert_null(bm_race_find(f->eng, NULL));
    assert_int_equal(bm_race_decide(NULL, NULL), BM_EINVAL);
    assert_int_equal(bm_race_engine_active(f->eng), 0);

    /* a target the URL joiner refuses fails every node without any transfer */
    bm_race_request_t q3 = {"GET", "relative", NULL, NULL};
    race_rec_t w;
    race_rec_init(&w, f);
    bm_race_t *race = bm_race_start(f->eng, &q3, nodes, 1, &race_plain_read, NULL, NULL, NULL);
    assert_non_null(race);
    assert_null(bm_race_wait(race, NULL, NULL));
    race_wait_on(&w, race);
    RUN_UNTIL(&f->loop, w.calls == 1, BOUND_MS);
    assert_int_equal(w.status, 503);
    assert_int_equal(a->requests, 0);

    bm_buf_t *b = bm_race_error_body(400, "bad \"slot\"\n\\");
    assert_non_null(b);
    assert_string_equal(b->data, "{\"code\":400,\"message\":\"bad \\\"slot\\\"\\n\\\\\"}");
    bm_buf_unref(b);
    race_rec_dispose(&w);
}

/* The race's verdict stays with its answer: every waiter of a coalesced race is told that
 * the answer it gets was accepted, without judging it again. */
static void test_verdict_accepted(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"stale\"}"));
    fake_node_add1(&f->nodes, FAKE_OK(20, "{\"root\":\"fresh\"}"));
    bm_race_policy_t p = {.accept = race_accept_fresh};
    race_rec_t w1, w2;
    race_rec_init(&w1, f);
    race_rec_init(&w2, f);
    race_wait_on(&w1, race_start(f, "GET", "/att", &p, "k", NULL));
    race_wait_on(&w2, bm_race_find(f->eng, "k"));
    race_go(f, 20);
    assert_int_equal(w1.calls + w2.calls, 2);
    assert_string_equal(w1.body, "{\"root\":\"fresh\"}");
    assert_string_equal(w2.body, "{\"root\":\"fresh\"}");
    assert_true(w1.accepted && w2.accepted);
    race_rec_dispose(&w1);
    race_rec_dispose(&w2);
}

/* ... and that an answer was not accepted: the usable one served at the deadline. */
static void test_verdict_fallback(void **state)
{
    race_fx_t *f = *state;
    fake_node_add1(&f->nodes, FAKE_OK(10, "{\"root\":\"stale\"}"));
    bm_race_policy_t p = {.accept = race_accept_fresh};
    p.deadline_ms = race_now(f) + 100;
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/att", &p, NULL, NULL));
    race_go(f, 100);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 200);
    assert_false(w.accepted);
    race_rec_dispose(&w);
}

/* ... nor the 503 the engine writes when no node answered. */
static void test_verdict_synthesized(void **state)
{
    race_fx_t *f = *state;
    fake_node_add_refused(&f->nodes);
    bm_race_policy_t p = {.accept = race_accept_fresh, .name_failures = true};
    race_rec_t w;
    race_watch(&w, f, race_start(f, "GET", "/att", &p, NULL, NULL));
    race_go(f, 0);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, 503);
    assert_null(w.node);
    assert_false(w.accepted);
    race_rec_dispose(&w);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, race_setup, race_teardown)
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
        T(test_sequential),
        T(test_sequential_deadline),
        T(test_sequential_repoll),
        T(test_sequential_not_accepted),
        T(test_leave_read),
        T(test_write_detached),
        T(test_write_answers_first_then_runs_on),
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
        T(test_verdict_accepted),
        T(test_verdict_fallback),
        T(test_verdict_synthesized),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
