/* SPDX-License-Identifier: MIT */
/*
 * race_kit: the fixture of the race engine's unit tests (test_race.c, test_race_errors.c),
 * on top of the fake nodes of fake_node.h: a loop, an upstream client, a pool, a manual
 * clock that the engine and the nodes' scripts share, and the engine; recording waiters
 * and completions; predicates over the fake bodies; time moved by hand.
 *
 * Time moves only when a test advances it (race_go): each due timer in turn, and what it
 * set off (a node's answer, the engine's decision) lands before time moves on. Times
 * asserted are therefore exact, and no test waits for real time.
 */
#ifndef BM_TEST_RACE_KIT_H
#define BM_TEST_RACE_KIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/clock.h"
#include "base/hdrs.h"
#include "cluster/pool.h"
#include "duties/race.h"
#include "http/upstream.h"
#include "fake_node.h"

#define BOUND_MS 5000 /* every wait ends within this (real time), or the test fails */
#define MAX_NODES FAKE_MAX_NODES

typedef struct race_fx {
    uv_loop_t loop;
    bm_clock_t *clock;
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_race_engine_t *eng;
    fake_nodes_t nodes;
} race_fx_t;

/** cmocka setup and teardown: a fresh fixture in *state, with no node yet; the teardown
 *  frees everything and asserts uv_loop_close() == 0. */
int race_setup(void **state);
int race_teardown(void **state);

/** A waiter that records the answer it was given (and can re-enter the engine). */
typedef struct race_rec {
    race_fx_t *f;
    int calls;
    int status;
    int err;
    bm_node_t *node;
    char body[512];
    uint64_t at_ms; /* wall time on the fixture's clock */
    unsigned attempt;
    bool accepted; /* the race's verdict, as the answer carried it */
    bm_hdrs_t hdrs;
    bm_race_waiter_t *w;
    /* re-entrancy scripts */
    bm_race_waiter_t *leave_other; /* leave this waiter from the callback */
    bool free_engine;              /* free the engine from the callback */
    const char *restart_key;       /* start a new race under this key from the callback */
    bm_race_t *restarted;
} race_rec_t;

void race_rec_init(race_rec_t *r, race_fx_t *f);
void race_rec_dispose(race_rec_t *r);
/** Waits on `race` with race_on_answer into `rec`. */
void race_wait_on(race_rec_t *rec, bm_race_t *race);
void race_on_answer(bm_race_waiter_t *w, const bm_race_answer_t *a, void *ud);
/** race_rec_init, then race_wait_on: a new waiter recording `race`'s answer. */
void race_watch(race_rec_t *rec, race_fx_t *f, bm_race_t *race);
/** Moves time `ms` forward, asserting `rec` (a waiter, a completion, anything with a
 *  `calls` count) was not called yet, then 1 ms more, asserting it was called once then: the
 *  answer's time to the millisecond. A macro, so that a failure names the test's line. */
#define race_called_1ms_after(f, rec, ms)                                                          \
    do {                                                                                           \
        race_go((f), (ms));                                                                        \
        assert_int_equal((rec)->calls, 0);                                                         \
        race_go((f), 1);                                                                           \
        assert_int_equal((rec)->calls, 1);                                                         \
    } while (0)

/** A completion that records every node's answer. */
typedef struct race_crec {
    int calls;
    size_t n;
    bm_node_t *node[MAX_NODES];
    int status[MAX_NODES];
    int err[MAX_NODES];
    unsigned attempt[MAX_NODES];
    char body[MAX_NODES][128];
    uint64_t at_ms;
} race_crec_t;

void race_on_complete(bm_race_t *race, const bm_race_answer_t *v, size_t n, void *ud);

/** A read with every option at its default. */
extern const bm_race_policy_t race_plain_read;

/* predicates over the fake bodies */
bool race_body_has(const bm_race_answer_t *a, const char *word);
bool race_accept_fresh(const bm_race_answer_t *a, void *ud);     /* the body says "fresh" */
bool race_usable_not_empty(const bm_race_answer_t *a, void *ud); /* it does not say "empty" */
double race_score_field(const bm_race_answer_t *a, void *ud);    /* its "score": number */
bool race_complete_at_5(const bm_race_answer_t *a, void *ud);    /* a score of 5 or more */

/** Starts a race over every node of the fixture (completion into `c` when not NULL). */
bm_race_t *race_start(race_fx_t *f, const char *method, const char *target,
                      const bm_race_policy_t *p, const char *key, race_crec_t *c);

/** The wall time on the fixture's clock. */
uint64_t race_now(const race_fx_t *f);

/** Moves time `ms` forward one due timer at a time, letting what each sets off land before
 *  the next (fake_nodes_advance). */
void race_go(race_fx_t *f, uint64_t ms);

/** Transfers the pool counts in flight over the fixture's nodes. */
uint64_t race_in_flight(race_fx_t *f);

#endif /* BM_TEST_RACE_KIT_H */
