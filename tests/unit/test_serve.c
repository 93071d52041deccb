/* SPDX-License-Identifier: MIT */
/*
 * test_serve: one client request served from a race, end to end in the miniature beaconmux
 * of fake_node.h: a route of this file serves its requests with bm_serve and a trivial
 * policy whose context records what happened to it. Proven: requests with the same key
 * share one race and its context (the joiner's copy is released at once), every waiter
 * gets the race's answer as the node gave it, a client that leaves a read cancels the race,
 * an answer built from every node's answer comes from the completion and a client leaving
 * it does not stop the race, a race that cannot start answers 503, and every context is
 * released exactly once. Time is a manual clock the test advances.
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

#include "base/clock.h"
#include "base/err.h"
#include "duties/serve.h"
#include "fake_node.h"

#define BOUND_MS 5000

/* What the test's policy saw. */
typedef struct seen {
    int answers;    /* on_answer calls */
    int responds;   /* respond calls */
    int completes;  /* on_complete calls */
    int disposed;   /* ctx_dispose calls */
    int by_ctx[4];  /* on_answer calls per context id */
    size_t n_every; /* answers respond saw */
    bool complete_after_respond;
} seen_t;

/* The policy's context: which request made it, and a heap part to release. */
typedef struct ctx {
    seen_t *seen;
    int id;
    char *heap;
} ctx_t;

typedef struct tfx {
    fake_mux_t *m;
    seen_t seen;
    int next_id;
    bool every;       /* answer from every node's answer */
    bool bad_nodes;   /* give the engine a candidate list it refuses */
    bm_race_t *last;  /* the race bm_serve returned */
    bool last_joined; /* ... and whether it was joined */
    /* a record of what was served: node a is the witness; `witness_only`: not a candidate */
    bool record;
    bool witness_only;
    int records;
    bm_served_t rec;
} tfx_t;

/* The fake bodies name their root as "r":N (the root is N 32 times); "fresh" is accepted. */
static int root_of(const bm_race_answer_t *a, void *ctx, uint8_t root[32], int *index)
{
    (void)ctx;
    const char *p = a->body ? memmem(a->body->data, a->body->len, "\"r\":", 4) : NULL;
    if (!p)
        return BM_EINVAL;
    memset(root, atoi(p + 4), 32);
    *index = 0;
    return 0;
}

static bool accept_fresh(const bm_race_answer_t *a, void *ud)
{
    (void)ud;
    return a->body && memmem(a->body->data, a->body->len, "fresh", 5) != NULL;
}

static void on_record(const bm_served_t *r, void *ud)
{
    tfx_t *t = ud;
    t->records++;
    t->rec = *r;
}

static void ctx_dispose(void *c)
{
    ctx_t *x = c;
    x->seen->disposed++;
    free(x->heap);
}

static void on_answer(bm_req_t *req, const bm_race_answer_t *a, void *c)
{
    ctx_t *x = c;
    (void)req;
    (void)a;
    x->seen->answers++;
    x->seen->by_ctx[x->id]++;
}

static void respond(bm_req_t *req, const bm_race_answer_t *as, size_t n, void *c)
{
    ctx_t *x = c;
    x->seen->responds++;
    x->seen->n_every = n;
    bm_resp_error(req, 200, "every: %zu", n);
}

static void on_complete(const bm_race_answer_t *as, size_t n, void *c)
{
    ctx_t *x = c;
    (void)as;
    (void)n;
    x->seen->completes++;
    x->seen->complete_after_respond = x->seen->responds > 0;
}

/* Answered from every node's answer: the race must wait for all of them. */
static bool accept_none(const bm_race_answer_t *a, void *ud)
{
    (void)a;
    (void)ud;
    return false;
}

static void route(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    tfx_t *t = ud;
    (void)p;
    bm_node_t *nodes[FAKE_MAX_NODES] = {NULL};
    size_t n = t->bad_nodes ? 1 : (size_t)t->m->nodes.n;
    for (size_t i = 0; i < n && !t->bad_nodes; i++)
        nodes[i] = t->m->nodes.node[i].node;
    if (t->witness_only) { /* every node but the first (the witness) */
        n--;
        memmove(nodes, nodes + 1, n * sizeof *nodes);
    }
    ctx_t c = {.seen = &t->seen, .id = t->next_id++, .heap = malloc(16)};
    assert_non_null(c.heap);
    bm_serve_record_t rec = {
        .duty = BM_DUTY_READ_ATTESTATION_DATA,
        .slot = 77,
        .n_nodes = (size_t)t->m->nodes.n,
        .witness = t->m->nodes.node[0].node,
        .root_of = root_of,
        .fn = on_record,
        .ud = t,
    };
    bm_serve_t s = {
        .policy = {.accept = t->every ? accept_none : NULL},
        .key = "test /x",
        .nodes = nodes,
        .n = n,
        .ctx = &c,
        .ctx_size = sizeof c,
        .ctx_dispose = ctx_dispose,
        .on_answer = t->every ? NULL : on_answer,
        .respond = t->every ? respond : NULL,
        .on_complete = on_complete,
    };
    if (t->record) {
        s.record = &rec;
        s.policy.accept = accept_fresh;
        s.policy.deadline_ms = bm_clock_wall_now(t->m->clock) + 300;
        s.policy.repoll = BM_REPOLL_UNTIL_ACCEPTED;
    }
    t->last = bm_serve(t->m->eng, req, &s, &t->last_joined);
}

static tfx_t *tfx_new(void)
{
    tfx_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    t->m = fake_mux_new_manual(true);
    assert_int_equal(bm_router_add(t->m->router, "GET", "/x", route, t), 0);
    return t;
}

static void tfx_free(tfx_t *t)
{
    fake_mux_free(t->m);
    free(t);
}

/* Requests with one key share the race: one request to the node, the same answer for
 * both, judged with the first request's context; the joiner's context is released at
 * once, the race's when it is freed. */
static void test_join_shares_race_and_context(void **state)
{
    (void)state;
    tfx_t *t = tfx_new();
    fake_step_t s = FAKE_OK(100, "{\"data\":1}");
    s.hdrs[0][0] = "Eth-Consensus-Version";
    s.hdrs[0][1] = "fulu";
    fake_node_t *a = fake_node_add1(&t->m->nodes, s);
    fake_call_t *c1 = fake_mux_get(t->m, "/x", NULL);
    RUN_UNTIL(&t->m->loop, t->next_id == 1, BOUND_MS);
    assert_false(t->last_joined);
    fake_call_t *c2 = fake_mux_get(t->m, "/x", NULL);
    RUN_UNTIL(&t->m->loop, t->next_id == 2, BOUND_MS);
    assert_true(t->last_joined);
    assert_int_equal(t->seen.disposed, 1); /* the joiner's context: never the race's */
    fake_mux_advance(t->m, 100);
    fake_mux_wait(t->m, c1);
    fake_mux_wait(t->m, c2);
    assert_int_equal(fake_call_ms(c1), 100);
    for (int i = 0; i < 2; i++) {
        fake_call_t *c = i ? c2 : c1;
        assert_int_equal(c->status, 200);
        assert_string_equal(c->body, "{\"data\":1}");
        assert_string_equal(fake_call_header(c, "eth-consensus-version"), "fulu");
        assert_string_equal(fake_call_header(c, "content-type"), "application/json");
    }
    assert_int_equal(a->requests, 1);
    assert_int_equal(t->seen.answers, 2);
    assert_int_equal(t->seen.by_ctx[0], 2); /* both judged with the race's own context */
    RUN_UNTIL(&t->m->loop, t->seen.disposed == 2, BOUND_MS);
    assert_int_equal(t->seen.disposed, 2);
    assert_int_equal(t->seen.completes, 1);
    assert_int_equal(t->seen.responds, 0);
    tfx_free(t);
}

/* The last client of a read leaving cancels its race: the node sees its request go, the
 * policy never sees an answer, the context is released once. */
static void test_client_leaving_cancels(void **state)
{
    (void)state;
    tfx_t *t = tfx_new();
    fake_node_t *a = fake_node_add1(&t->m->nodes, FAKE_HANG);
    fake_call_t *c = fake_mux_get(t->m, "/x", NULL);
    RUN_UNTIL(&t->m->loop, a->requests == 1, BOUND_MS);
    bm_upstream_cancel(c->x);
    c->x = NULL;
    RUN_UNTIL(&t->m->loop, a->aborted == 1 && t->seen.disposed == 1, BOUND_MS);
    assert_int_equal(a->aborted, 1);
    assert_int_equal(t->seen.disposed, 1);
    assert_int_equal(t->seen.answers, 0);
    assert_int_equal(bm_race_engine_active(t->m->eng), 0);
    tfx_free(t);
}

/* Answered from every node's answer: `respond` at the completion, before on_complete. A
 * client that leaves does not stop the race: the nodes still answer, the completion still
 * runs, `respond` does not. */
static void test_every_node(void **state)
{
    (void)state;
    tfx_t *t = tfx_new();
    t->every = true;
    fake_node_t *a = fake_node_add1(&t->m->nodes, FAKE_OK(5, "{}"));
    fake_node_t *b = fake_node_add1(&t->m->nodes, FAKE_OK(60, "{}"));
    fake_call_t *c = fake_mux_get(t->m, "/x", NULL);
    fake_mux_done_1ms_after(t->m, c, 59);
    assert_int_equal(c->status, 200);
    assert_string_equal(c->body, "{\"code\":200,\"message\":\"every: 2\"}");
    assert_int_equal(t->seen.n_every, 2);
    assert_int_equal(fake_call_ms(c), 60); /* when the slower node answered */
    assert_int_equal(t->seen.completes, 1);
    assert_true(t->seen.complete_after_respond);
    assert_false(t->last_joined); /* never joined, key or not */

    /* the client leaves while b still works */
    fake_node_script(b, &(fake_step_t){.status = 200, .delay_ms = 300, .body = "{}"}, 1);
    c = fake_mux_get(t->m, "/x", NULL);
    fake_mux_settle(t->m);
    assert_int_equal(a->requests + b->requests, 3);
    bm_upstream_cancel(c->x);
    c->x = NULL;
    fake_mux_advance(t->m, 300);
    assert_int_equal(t->seen.completes, 2);
    assert_int_equal(t->seen.responds, 1);
    assert_int_equal(b->answered, 2); /* both races: the second without its client */
    assert_int_equal(b->aborted, 0);
    RUN_UNTIL(&t->m->loop, t->seen.disposed == 2, BOUND_MS);
    assert_int_equal(t->seen.disposed, 2);
    tfx_free(t);
}

/* A race the engine refuses to start: a 503 at once, the context released once. */
static void test_cannot_start(void **state)
{
    (void)state;
    tfx_t *t = tfx_new();
    t->bad_nodes = true;
    for (int every = 0; every <= 1; every++) {
        t->every = every;
        fake_call_t *c = fake_mux_get(t->m, "/x", NULL);
        fake_mux_wait(t->m, c);
        assert_int_equal(c->status, 503);
        assert_string_equal(c->body, "{\"code\":503,\"message\":\"cannot start a race\"}");
        assert_null(t->last);
        assert_int_equal(t->seen.disposed, every + 1);
    }
    assert_int_equal(t->seen.answers + t->seen.responds + t->seen.completes, 0);
    tfx_free(t);
}

/* The record of a coalesced read: what was served to how many, each node's class when it
 * went out, and the first node's own first answer (here stale: the vote it would have cast
 * alone). The times are the manual clock's, exact. */
static void test_record(void **state)
{
    (void)state;
    tfx_t *t = tfx_new();
    t->record = true;
    fake_node_t *a = fake_node_add1(&t->m->nodes, FAKE_OK(5, "{\"r\":1}"));
    fake_node_add1(&t->m->nodes, FAKE_OK(60, "{\"r\":2,\"fresh\":1}"));
    fake_node_t *c = fake_node_add1(&t->m->nodes, FAKE_HANG);
    uint64_t t0 = bm_clock_wall_now(t->m->clock);
    fake_call_t *c1 = fake_mux_get(t->m, "/x", NULL);
    RUN_UNTIL(&t->m->loop, t->next_id == 1, BOUND_MS);
    fake_call_t *c2 = fake_mux_get(t->m, "/x", NULL);
    RUN_UNTIL(&t->m->loop, t->next_id == 2, BOUND_MS);
    fake_mux_advance(t->m, 60);
    fake_mux_wait(t->m, c1);
    fake_mux_wait(t->m, c2);
    assert_string_equal(c1->body, "{\"r\":2,\"fresh\":1}");
    fake_mux_advance(t->m, 240); /* the hung node's transfer ends (cancelled) */
    RUN_UNTIL(&t->m->loop, t->records == 1 && c->aborted == 1, BOUND_MS);
    const bm_served_t *r = &t->rec;
    assert_int_equal(r->duty, BM_DUTY_READ_ATTESTATION_DATA);
    assert_int_equal(r->slot, 77);
    assert_int_equal(r->started_ms, t0);
    assert_int_equal(r->requests, 2);
    assert_int_equal(r->node, 1);
    assert_int_equal(r->served.status, 200);
    assert_true(r->served.has_root);
    assert_int_equal(r->served.root[31], 2);
    assert_int_equal(r->served.cls, BM_ANSWER_FRESH);
    assert_int_equal(r->race_ms, 60);
    assert_int_equal(r->n_nodes, 3);
    assert_int_equal(r->classes[0], BM_ANSWER_STALE); /* re-asked, still stale */
    assert_int_equal(r->classes[1], BM_ANSWER_FRESH);
    assert_int_equal(r->classes[2], BM_ANSWER_HUNG);
    assert_int_equal(r->first_node, 0);
    assert_int_equal(r->first.status, 200);
    assert_int_equal(r->first.root[0], 1);
    assert_int_equal(r->first.cls, BM_ANSWER_STALE);
    assert_int_equal(r->first.ms, 5);
    assert_true(a->requests > 1);
    assert_int_equal(t->records, 1);
    tfx_free(t);
}

/* A first node that is no candidate (not ready) is asked beside the race: its fresh answer
 * is recorded as what it would have served alone, never served itself; one that hangs is
 * recorded as hung once the deadline passed (300 ms), not before; an unreachable one is not
 * asked and recorded as hung. */
static void test_record_witness_outside(void **state)
{
    (void)state;
    tfx_t *t = tfx_new();
    t->record = true;
    t->witness_only = true;
    fake_node_t *a = fake_node_add1(&t->m->nodes, FAKE_OK(5, "{\"r\":2,\"fresh\":1}"));
    fake_node_t *b = fake_node_add1(&t->m->nodes, FAKE_OK(40, "{\"r\":2,\"fresh\":1}"));
    fake_call_t *c1 = fake_mux_get(t->m, "/x", NULL);
    RUN_UNTIL(&t->m->loop, t->next_id == 1, BOUND_MS);
    fake_mux_advance(t->m, 40);
    fake_mux_wait(t->m, c1);
    RUN_UNTIL(&t->m->loop, t->records == 1, BOUND_MS);
    assert_int_equal(t->rec.node, 1);
    assert_int_equal(t->rec.classes[0], BM_ANSWER_NOT_ASKED);
    assert_int_equal(t->rec.classes[1], BM_ANSWER_FRESH);
    assert_int_equal(t->rec.first.cls, BM_ANSWER_FRESH);
    assert_int_equal(t->rec.first.root[0], 2);
    assert_int_equal(t->rec.first.ms, 5);
    assert_int_equal(a->requests, 1);
    assert_int_equal(b->requests, 1);

    fake_node_script(a, &FAKE_HANG, 1);
    fake_call_t *c2 = fake_mux_get(t->m, "/x", NULL);
    RUN_UNTIL(&t->m->loop, t->next_id == 2, BOUND_MS);
    fake_mux_advance(t->m, 40);
    fake_mux_wait(t->m, c2);
    assert_int_equal(c2->status, 200);
    fake_mux_advance(t->m, 259);
    assert_int_equal(t->records, 1); /* the witness still has its time */
    fake_mux_advance(t->m, 1);
    RUN_UNTIL(&t->m->loop, t->records == 2 && a->aborted == 1, BOUND_MS);
    assert_int_equal(t->rec.first.cls, BM_ANSWER_HUNG);
    assert_int_equal(t->rec.first.status, 0);
    assert_false(t->rec.first.has_root);

    /* unreachable: not asked at all (nothing queued on a stopped node), counted as no answer */
    a->node->state = BM_NODE_UNREACHABLE;
    size_t asked = a->requests;
    fake_call_t *c3 = fake_mux_get(t->m, "/x", NULL);
    RUN_UNTIL(&t->m->loop, t->next_id == 3, BOUND_MS);
    fake_mux_advance(t->m, 40);
    fake_mux_wait(t->m, c3);
    assert_int_equal(c3->status, 200);
    fake_mux_advance(t->m, 300);
    RUN_UNTIL(&t->m->loop, t->records == 3, BOUND_MS);
    assert_int_equal(a->requests, asked);
    assert_int_equal(t->rec.first_node, 0);
    assert_int_equal(t->rec.first.cls, BM_ANSWER_HUNG);
    assert_int_equal(t->rec.first.status, 0);
    tfx_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_shares_race_and_context),
        cmocka_unit_test(test_client_leaving_cancels),
        cmocka_unit_test(test_every_node),
        cmocka_unit_test(test_cannot_start),
        cmocka_unit_test(test_record),
        cmocka_unit_test(test_record_witness_outside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
