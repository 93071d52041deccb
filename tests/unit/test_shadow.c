/* SPDX-License-Identifier: MIT */
/*
 * test_shadow: the shadow nodes' mirror and score, end to end in the miniature beaconmux of
 * fake_node.h: a route of this file serves its requests with bm_serve over the two serving
 * nodes, and the shadow module mirrors every race it starts to the shadow node. An answer is
 * a block root in hex; the block relations come from a synthetic chain (fake_chain.h):
 * 1 <- 2 <- 3 <- 4, and 102 on 1 (another branch).
 *
 * Proven: the shadow is asked once per race (never re-asked, never a candidate, one mirror
 * for coalesced requests) and what it answers never reaches a client, even when it is the
 * only node with a 2xx; its answer is scored against the one served: agreed and in time,
 * agreed but after the race's deadline, behind (an ancestor: it lags), ahead, other (another
 * branch: it forks), checkpoints; errors (a 5xx, an unreadable 2xx, a hang cut at the race's
 * end); answers only (no comparison) when the race built its answer from every node's, or
 * when the client left before the race answered; a mirror still running when everything is
 * torn down leaks nothing. Time is a manual clock the test advances.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include <uv.h>

#include "base/err.h"
#include "base/json.h"
#include "duties/serve.h"
#include "duties/shadow.h"
#include "fake_chain.h"
#include "fake_node.h"

#define BOUND_MS 5000
#define DEADLINE_MS 100 /* the route's races: deadline 100 ms after the request, end 200 ms */
#define END_MS 200

typedef struct tfx {
    fake_mux_t *m;
    fake_chain_t chain;
    bm_shadow_t *shadow;
    fake_node_t *a, *b, *s; /* two serving nodes, one shadow */
    bool every;             /* the route answers from every node's answer */
    char hex[5][67];        /* roots 1..4 in hex, [0]: 102 */
} tfx_t;

/* The route's answers are a root in hex, checkpoints "c<N>" after it (optional). */
static bool read_root(const bm_hdrs_t *h, const bm_buf_t *body, uint32_t arg, bm_shadow_view_t *out)
{
    (void)h;
    (void)arg;
    if (!body || body->len < BM_ROOT_HEX_LEN)
        return false;
    char hex[BM_ROOT_HEX_LEN + 1];
    memcpy(hex, body->data, BM_ROOT_HEX_LEN);
    hex[BM_ROOT_HEX_LEN] = '\0';
    if (bm_hex_to_root(hex, out->root) != 0)
        return false;
    out->has_root = true;
    if (body->len > BM_ROOT_HEX_LEN + 1 && body->data[BM_ROOT_HEX_LEN] == 'c') {
        out->has_checkpoints = true;
        out->checkpoints.source.epoch = 4;
        out->checkpoints.target.epoch = (uint64_t)(body->data[BM_ROOT_HEX_LEN + 1] - '0');
    }
    return true;
}

static bool accept_none(const bm_race_answer_t *a, void *ud)
{
    (void)a;
    (void)ud;
    return false;
}

static void respond(bm_req_t *req, const bm_race_answer_t *as, size_t n, void *c)
{
    (void)as;
    (void)c;
    bm_resp_error(req, 200, "every: %zu", n);
}

static void route(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    tfx_t *t = ud;
    (void)p;
    bm_node_t *nodes[2] = {t->a->node, t->b->node};
    uint64_t now = bm_clock_wall_now(t->m->clock);
    bm_serve_t s = {
        .policy = {.accept = t->every ? accept_none : NULL,
                   .deadline_ms = now + DEADLINE_MS,
                   .hard_timeout_ms = now + END_MS},
        .key = "test /r",
        .nodes = nodes,
        .n = 2,
        .respond = t->every ? respond : NULL,
        .shadow = t->shadow,
        .shadow_read = {BM_SHADOW_ATTESTATION_DATA, read_root, 0},
    };
    bm_serve(t->m->eng, req, &s, NULL);
}

static void module_free(void *module)
{
    bm_shadow_free(module);
}

static tfx_t *tfx_new(const fake_step_t *shadow_steps, int n_steps)
{
    tfx_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    t->m = fake_mux_new_manual(true);
    uint64_t now = bm_clock_wall_now(t->m->clock);
    fake_chain_init(&t->chain, 2, &t->m->chain, now);
    fake_block(&t->chain, 1, 37, 0);
    fake_block(&t->chain, 2, 38, 1);
    fake_block(&t->chain, 3, 39, 2);
    fake_block(&t->chain, 4, 40, 3);
    fake_block(&t->chain, 102, 38, 1);
    for (unsigned id = 1; id <= 4; id++)
        fake_head(&t->chain, 0, id, now, BM_PAYLOAD_UNKNOWN);
    fake_head(&t->chain, 1, 102, now, BM_PAYLOAD_UNKNOWN);
    fake_root_hex(102, t->hex[0]);
    for (unsigned id = 1; id <= 4; id++)
        fake_root_hex(id, t->hex[id]);
    assert_int_equal(bm_router_add(t->m->router, "GET", "/r", route, t), 0);
    t->a = fake_mux_node(t->m, &FAKE_OK(10, t->hex[3]), 1);
    t->b = fake_mux_node(t->m, &FAKE_OK(20, t->hex[3]), 1);
    if (shadow_steps)
        t->s = fake_mux_node(t->m, shadow_steps, n_steps);
    else
        t->s = fake_mux_node(t->m, &FAKE_OK(5, t->hex[3]), 1);
    bm_pool_set_shadow(t->s->node, true);
    t->shadow = bm_shadow_new(t->m->eng, t->m->pool, t->chain.t);
    assert_non_null(t->shadow);
    assert_int_equal(bm_shadow_count(t->shadow), 1);
    t->m->module = t->shadow; /* freed after the engine, as beaconmux does */
    t->m->module_free = module_free;
    return t;
}

static void tfx_free(tfx_t *t)
{
    fake_mux_free(t->m);
    fake_chain_dispose(&t->chain);
    free(t);
}

static bm_shadow_counts_t counts(const tfx_t *t)
{
    bm_shadow_stats_t st;
    assert_int_equal(bm_shadow_node_stats(t->shadow, (size_t)t->s->node->index, &st), 0);
    /* one duty only here: its counters are the totals */
    assert_memory_equal(&st.total, &st.duty[BM_SHADOW_ATTESTATION_DATA], sizeof st.total);
    return st.total;
}

/* One request through the front, time moved until the race and its mirror are done. */
static fake_call_t *one(tfx_t *t)
{
    fake_call_t *c = fake_mux_get(t->m, "/r", NULL);
    fake_mux_advance(t->m, END_MS + 10);
    fake_mux_wait(t->m, c);
    return c;
}

/* The shadow answers, in turn: the served block fast; the served block after the
 * deadline; its parent (it lags); another branch (it forks); the next block (ahead). Each is
 * scored against the root served, which is always the serving nodes' (root 3). */
static void test_scored_against_what_was_served(void **state)
{
    (void)state;
    tfx_t *t = tfx_new(NULL, 0);
    fake_step_t steps[] = {FAKE_OK(5, NULL), FAKE_OK(150, NULL), FAKE_OK(5, NULL), FAKE_OK(5, NULL),
                           FAKE_OK(5, NULL)};
    steps[0].body = t->hex[3];
    steps[1].body = t->hex[3];
    steps[2].body = t->hex[2];
    steps[3].body = t->hex[0]; /* 102 */
    steps[4].body = t->hex[4];
    fake_node_script(t->s, steps, 5);
    for (int i = 0; i < 5; i++) {
        fake_call_t *c = one(t);
        assert_int_equal(c->status, 200);
        assert_string_equal(c->body, t->hex[3]); /* always the serving nodes' */
        assert_int_equal(fake_call_ms(c), 10);   /* never later for the shadow */
    }
    bm_shadow_counts_t k = counts(t);
    assert_int_equal(t->s->requests, 5); /* once per race: never re-asked */
    assert_int_equal(k.mirrored, 5);
    assert_int_equal(k.answered, 5);
    assert_int_equal(k.errors, 0);
    assert_int_equal(k.compared, 5);
    assert_int_equal(k.agreed, 2);
    assert_int_equal(k.in_time, 1);
    assert_int_equal(k.late, 1);
    assert_int_equal(k.behind, 1);
    assert_int_equal(k.other, 1);
    assert_int_equal(k.ahead, 1);
    bm_shadow_stats_t st;
    bm_shadow_node_stats(t->shadow, (size_t)t->s->node->index, &st);
    assert_true(st.latency_p50_ms >= 0 && st.latency_p90_ms >= st.latency_p50_ms);
    assert_int_equal(bm_shadow_node_stats(t->shadow, (size_t)t->a->node->index, &st), BM_EINVAL);
    tfx_free(t);
}

/* Checkpoints: the served head with other checkpoints is not agreement (a wrong target is a
 * wrong vote), and it is counted. */
static void test_checkpoints_compared(void **state)
{
    (void)state;
    static char served[80], same[80], wrong[80];
    tfx_t *t = tfx_new(NULL, 0);
    snprintf(served, sizeof served, "%sc5", t->hex[3]);
    snprintf(same, sizeof same, "%sc5", t->hex[3]);
    snprintf(wrong, sizeof wrong, "%sc6", t->hex[3]);
    fake_node_script(t->a, &FAKE_OK(10, served), 1);
    fake_node_script(t->b, &FAKE_OK(20, served), 1);
    fake_step_t steps[] = {FAKE_OK(5, same), FAKE_OK(5, wrong)};
    fake_node_script(t->s, steps, 2);
    for (int i = 0; i < 2; i++)
        assert_string_equal(one(t)->body, served);
    bm_shadow_counts_t k = counts(t);
    assert_int_equal(k.compared, 2);
    assert_int_equal(k.agreed, 2); /* the head */
    assert_int_equal(k.checkpoints_compared, 2);
    assert_int_equal(k.checkpoints_agreed, 1);
    assert_int_equal(k.in_time, 1);
    assert_int_equal(k.late, 0);
    tfx_free(t);
}

/* The serving nodes fail, the shadow answers at once: the client still gets the serving
 * nodes' error, never the shadow's 200. A 5xx, an unreadable 2xx and a hang (cut at the
 * race's end) are the shadow's errors. */
static void test_nothing_reaches_a_client(void **state)
{
    (void)state;
    tfx_t *t = tfx_new(NULL, 0);
    fake_node_script(t->a, &FAKE_STATUS(500, 10, "{\"code\":500,\"message\":\"a\"}"), 1);
    fake_node_script(t->b, &FAKE_STATUS(500, 20, "{\"code\":500,\"message\":\"b\"}"), 1);
    fake_step_t steps[] = {FAKE_OK(1, NULL), FAKE_STATUS(503, 1, "{}"), FAKE_OK(1, "zz"),
                           FAKE_HANG};
    steps[0].body = t->hex[3];
    fake_node_script(t->s, steps, 4);
    fake_call_t *c = one(t);
    assert_int_equal(c->status, 500);
    assert_null(strstr(c->body, t->hex[3]));
    assert_int_equal(t->s->requests, 1);
    bm_shadow_counts_t k = counts(t);
    assert_int_equal(k.answered, 1);
    assert_int_equal(k.compared, 0); /* nothing served to compare with */
    /* its own failures */
    fake_node_script(t->a, &FAKE_OK(10, t->hex[3]), 1);
    fake_node_script(t->b, &FAKE_OK(20, t->hex[3]), 1);
    for (int i = 0; i < 3; i++) {
        c = one(t);
        assert_int_equal(c->status, 200);
        assert_string_equal(c->body, t->hex[3]);
        assert_int_equal(fake_call_ms(c), 10);
    }
    k = counts(t);
    assert_int_equal(k.mirrored, 4);
    assert_int_equal(k.answered, 1);
    assert_int_equal(k.errors, 3); /* 503, "zz", the hang cut at the end */
    assert_int_equal(k.compared, 0);
    assert_int_equal(t->s->aborted, 1); /* the hang, cut */
    tfx_free(t);
}

/* Coalesced requests share one race and one mirror; a race built from every node's answer
 * is mirrored but not compared; a client gone before the answer leaves the shadow's answer
 * counted, not compared. */
static void test_one_mirror_per_race(void **state)
{
    (void)state;
    tfx_t *t = tfx_new(NULL, 0);
    fake_node_script(t->s, &FAKE_OK(5, t->hex[3]), 1);
    fake_call_t *c1 = fake_mux_get(t->m, "/r", NULL);
    fake_call_t *c2 = fake_mux_get(t->m, "/r", NULL);
    fake_mux_advance(t->m, END_MS + 10);
    fake_mux_wait(t->m, c1);
    fake_mux_wait(t->m, c2);
    assert_string_equal(c1->body, t->hex[3]);
    assert_string_equal(c2->body, t->hex[3]);
    assert_int_equal(t->a->requests, 1);
    assert_int_equal(t->s->requests, 1);
    assert_int_equal(counts(t).compared, 1);
    assert_int_equal(counts(t).in_time, 1);

    t->every = true;
    fake_call_t *c = one(t);
    assert_string_equal(c->body, "{\"code\":200,\"message\":\"every: 2\"}"); /* not 3 */
    assert_int_equal(counts(t).mirrored, 2);
    assert_int_equal(counts(t).answered, 2);
    assert_int_equal(counts(t).compared, 1);

    t->every = false;
    fake_node_script(t->a, &FAKE_OK(50, t->hex[3]), 1);
    fake_node_script(t->b, &FAKE_OK(50, t->hex[3]), 1);
    c = fake_mux_get(t->m, "/r", NULL);
    fake_mux_advance(t->m, 10); /* the shadow answered, the race has not */
    bm_upstream_cancel(c->x);
    c->x = NULL;
    fake_mux_advance(t->m, END_MS);
    assert_int_equal(counts(t).mirrored, 3);
    assert_int_equal(counts(t).answered, 3);
    assert_int_equal(counts(t).compared, 1);
    tfx_free(t);
}

/* A mirror whose shadow still hangs when everything is torn down, and a shadow module with no
 * shadow node (nothing mirrored), leak nothing and answer as before. */
static void test_teardown_and_no_shadow(void **state)
{
    (void)state;
    tfx_t *t = tfx_new(&FAKE_HANG, 1);
    fake_call_t *c = fake_mux_get(t->m, "/r", NULL);
    fake_mux_advance(t->m, 15);
    fake_mux_wait(t->m, c);
    assert_string_equal(c->body, t->hex[3]);
    assert_int_equal(t->s->requests, 1);
    tfx_free(t); /* the mirror still runs */

    t = tfx_new(&FAKE_HANG, 1);
    bm_pool_set_shadow(t->s->node, false);
    bm_shadow_free(t->shadow);
    t->shadow = bm_shadow_new(t->m->eng, t->m->pool, NULL);
    t->m->module = t->shadow;
    assert_int_equal(bm_shadow_count(t->shadow), 0);
    bm_race_request_t rq = {.method = "GET", .target = "/r"};
    bm_shadow_read_t how = {BM_SHADOW_HEAD_ROOT, NULL, 0};
    assert_null(bm_shadow_mirror(t->shadow, &rq, &how, 0, 0, 0));
    c = one(t);
    assert_string_equal(c->body, t->hex[3]);
    assert_int_equal(t->s->requests, 0);
    tfx_free(t);
}

static void test_status_json(void **state)
{
    (void)state;
    tfx_t *t = tfx_new(NULL, 0);
    fake_node_script(t->s, &FAKE_OK(5, t->hex[2]), 1);
    one(t);
    bm_str_t o = BM_STR_INIT;
    bm_shadow_status_json(&o, t->shadow);
    const char *j = bm_str_data(&o);
    assert_non_null(strstr(j, "{\"nodes\":[{\"id\":\"c\""));
    assert_non_null(strstr(j, "\"mirrored\":1,\"answered\":1,\"errors\":0,\"compared\":1,"
                              "\"agreed\":0,\"behind\":1"));
    assert_non_null(strstr(j, "\"fresh_in_time\":0.000"));
    assert_non_null(strstr(j, "\"duties\":{\"attestation_data\":{\"mirrored\":1"));
    struct json_object *doc = NULL;
    assert_int_equal(bm_json_parse(j, strlen(j), 0, &doc, NULL), 0);
    json_object_put(doc);
    bm_str_dispose(&o);
    assert_string_equal(bm_shadow_duty_name(BM_SHADOW_BLOCK), "block");
    tfx_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scored_against_what_was_served),
        cmocka_unit_test(test_checkpoints_compared),
        cmocka_unit_test(test_nothing_reaches_a_client),
        cmocka_unit_test(test_one_mirror_per_race),
        cmocka_unit_test(test_teardown_and_no_shadow),
        cmocka_unit_test(test_status_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
