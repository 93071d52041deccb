/* SPDX-License-Identifier: MIT */
/* race_kit: the race engine tests' fixture (see race_kit.h). */
#include "race_kit.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/log.h"

/* ---- fixture ------------------------------------------------------------------------------ */

static bm_clock_t *race_test_clock; /* the running test's, for the recorders */

int race_setup(void **state)
{
    race_fx_t *f = calloc(1, sizeof *f);
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
    f->clock = bm_clock_manual_new(&f->loop, 1700000000000ull);
    f->eng = f->clock ? bm_race_engine_new(f->clock, f->up, f->pool) : NULL;
    if (!f->eng)
        return -1;
    race_test_clock = f->clock;
    fake_nodes_init(&f->nodes, &f->loop, f->pool);
    fake_nodes_set_clock(&f->nodes, f->clock);
    *state = f;
    return 0;
}

int race_teardown(void **state)
{
    race_fx_t *f = *state;
    if (f->eng)
        bm_race_engine_free(f->eng);
    bm_upstream_free(f->up);
    fake_nodes_close(&f->nodes);
    bm_clock_free(f->clock);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    bm_pool_free(f->pool);
    free(f);
    return 0;
}

/* ---- recording waiters and completions ------------------------------------------------- */

void race_rec_init(race_rec_t *r, race_fx_t *f)
{
    memset(r, 0, sizeof *r);
    r->f = f;
    bm_hdrs_init(&r->hdrs);
}

void race_rec_dispose(race_rec_t *r)
{
    bm_hdrs_dispose(&r->hdrs);
}

const bm_race_policy_t race_plain_read; /* everything default */

void race_on_answer(bm_race_waiter_t *w, const bm_race_answer_t *a, void *ud)
{
    race_rec_t *r = ud;
    assert_ptr_equal(w, r->w);
    r->calls++;
    r->status = a->status;
    r->err = a->err;
    r->node = a->node;
    r->at_ms = bm_clock_wall_now(race_test_clock);
    r->attempt = a->attempt;
    r->accepted = a->judged == BM_RACE_ACCEPTED;
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
        r->restarted =
            bm_race_start(r->f->eng, &q, &n, 1, &race_plain_read, r->restart_key, NULL, NULL);
        assert_non_null(r->restarted);
    }
    if (r->free_engine) {
        bm_race_engine_free(r->f->eng);
        r->f->eng = NULL;
    }
}

void race_wait_on(race_rec_t *rec, bm_race_t *race)
{
    rec->w = bm_race_wait(race, race_on_answer, rec);
    assert_non_null(rec->w);
}

void race_watch(race_rec_t *rec, race_fx_t *f, bm_race_t *race)
{
    race_rec_init(rec, f);
    race_wait_on(rec, race);
}

void race_on_complete(bm_race_t *race, const bm_race_answer_t *v, size_t n, void *ud)
{
    race_crec_t *c = ud;
    (void)race;
    c->calls++;
    c->n = n;
    c->at_ms = bm_clock_wall_now(race_test_clock);
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

bool race_body_has(const bm_race_answer_t *a, const char *word)
{
    return a->body && memmem(a->body->data, a->body->len, word, strlen(word)) != NULL;
}

bool race_accept_fresh(const bm_race_answer_t *a, void *ud)
{
    (void)ud;
    return race_body_has(a, "fresh");
}

bool race_usable_not_empty(const bm_race_answer_t *a, void *ud)
{
    (void)ud;
    return !race_body_has(a, "empty");
}

double race_score_field(const bm_race_answer_t *a, void *ud)
{
    (void)ud;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%.*s", a->body ? (int)a->body->len : 0,
             a->body ? a->body->data : "");
    const char *p = strstr(tmp, "\"score\":");
    return p ? atof(p + 8) : 0;
}

bool race_complete_at_5(const bm_race_answer_t *a, void *ud)
{
    (void)ud;
    return race_score_field(a, NULL) >= 5;
}

bm_race_t *race_start(race_fx_t *f, const char *method, const char *target,
                      const bm_race_policy_t *p, const char *key, race_crec_t *c)
{
    bm_node_t *nodes[MAX_NODES];
    for (int i = 0; i < f->nodes.n; i++)
        nodes[i] = f->nodes.node[i].node;
    bm_race_request_t q = {method, target, NULL, NULL};
    bm_race_t *r = bm_race_start(f->eng, &q, nodes, (size_t)f->nodes.n, p, key,
                                 c ? race_on_complete : NULL, c);
    assert_non_null(r);
    return r;
}

/* The wall time on the test's clock. */
uint64_t race_now(const race_fx_t *f)
{
    return bm_clock_wall_now(f->clock);
}

/* Moves time `ms` forward one due timer at a time, letting what each sets off land before
 * the next (fake_nodes_advance). */
void race_go(race_fx_t *f, uint64_t ms)
{
    fake_nodes_advance(&f->nodes, ms);
}

uint64_t race_in_flight(race_fx_t *f)
{
    uint64_t n = 0;
    for (int i = 0; i < f->nodes.n; i++)
        n += f->nodes.node[i].node->stats.in_flight;
    return n;
}
