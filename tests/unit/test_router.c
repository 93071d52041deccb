/* SPDX-License-Identifier: MIT */
/* Unit tests of the route table: specificity, parameters, methods, fallback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "fake_node.h"
#include "http/router.h"

static int tag_a, tag_b, tag_c, tag_d, tag_fb;
static void fn_a(bm_req_t *r, const bm_route_params_t *p, void *u) {}
static void fn_b(bm_req_t *r, const bm_route_params_t *p, void *u) {}
static void fn_fb(bm_req_t *r, const bm_route_params_t *p, void *u) {}

static bm_router_t *make(void)
{
    bm_router_t *r = bm_router_new();
    assert_int_equal(bm_router_add(r, "GET", "/eth/v1/validator/attestation_data", fn_a, &tag_a),
                     0);
    assert_int_equal(
        bm_router_add(r, "POST", "/eth/v1/validator/duties/attester/{epoch}", fn_b, &tag_b), 0);
    assert_int_equal(bm_router_add(r, "GET", "/eth/v1/beacon/blocks/{block_id}/root", fn_a, &tag_c),
                     0);
    assert_int_equal(bm_router_add(r, "GET", "/eth/v1/beacon/blocks/head/root", fn_b, &tag_d), 0);
    assert_int_equal(bm_router_add(r, NULL, "/lighthouse/*", fn_a, &tag_a), 0);
    bm_router_set_fallback(r, fn_fb, &tag_fb);
    return r;
}

static void *match(bm_router_t *r, const char *method, const char *path, bm_route_params_t *p)
{
    void *ud = NULL;
    bm_router_match(r, method, path, strlen(path), p, &ud);
    return ud;
}

static void test_literal_and_method(void **state)
{
    bm_router_t *r = make();
    bm_route_params_t p;
    assert_ptr_equal(match(r, "GET", "/eth/v1/validator/attestation_data", &p), &tag_a);
    assert_int_equal(p.n, 0);
    /* same path, other method: the fallback (the node answers 405 itself) */
    assert_ptr_equal(match(r, "POST", "/eth/v1/validator/attestation_data", &p), &tag_fb);
    /* a trailing slash or extra segment is another path */
    assert_ptr_equal(match(r, "GET", "/eth/v1/validator/attestation_data/", &p), &tag_fb);
    assert_ptr_equal(match(r, "GET", "/eth/v1/validator/attestation_data/x", &p), &tag_fb);
    assert_ptr_equal(match(r, "GET", "/eth/v1/validator", &p), &tag_fb);
    bm_router_free(r);
}

static void test_params(void **state)
{
    bm_router_t *r = make();
    bm_route_params_t p;
    char epoch[32];
    assert_ptr_equal(match(r, "POST", "/eth/v1/validator/duties/attester/12345", &p), &tag_b);
    assert_int_equal(p.n, 1);
    assert_int_equal(bm_route_param(&p, "epoch", epoch, sizeof epoch), 5);
    assert_string_equal(epoch, "12345");
    assert_int_equal(bm_route_param(&p, "slot", epoch, sizeof epoch), -1);
    /* too small an output buffer is refused, not truncated */
    assert_int_equal(bm_route_param(&p, "epoch", epoch, 3), -1);
    /* an empty parameter segment does not match */
    assert_ptr_equal(match(r, "POST", "/eth/v1/validator/duties/attester/", &p), &tag_fb);
    bm_router_free(r);
}

static void test_literal_beats_param(void **state)
{
    bm_router_t *r = make();
    bm_route_params_t p;
    char id[80];
    assert_ptr_equal(match(r, "GET", "/eth/v1/beacon/blocks/head/root", &p), &tag_d);
    assert_ptr_equal(match(r, "GET", "/eth/v1/beacon/blocks/finalized/root", &p), &tag_c);
    assert_int_equal(bm_route_param(&p, "block_id", id, sizeof id), 9);
    assert_string_equal(id, "finalized");
    bm_router_free(r);
}

static void test_rest_and_any_method(void **state)
{
    bm_router_t *r = make();
    bm_route_params_t p;
    char rest[64];
    assert_ptr_equal(match(r, "GET", "/lighthouse/peers", &p), &tag_a);
    assert_ptr_equal(match(r, "POST", "/lighthouse/validator_inclusion/3/global", &p), &tag_a);
    assert_int_equal(bm_route_param(&p, "*", rest, sizeof rest), 28);
    assert_string_equal(rest, "validator_inclusion/3/global");
    /* "*" needs at least one segment */
    assert_ptr_equal(match(r, "GET", "/lighthouse", &p), &tag_fb);
    assert_ptr_equal(match(r, "GET", "/lighthousex/peers", &p), &tag_fb);
    bm_router_free(r);
}

static void test_bad_patterns_and_replace(void **state)
{
    bm_router_t *r = bm_router_new();
    assert_int_equal(bm_router_add(r, "GET", "no/slash", fn_a, NULL), BM_EINVAL);
    assert_int_equal(bm_router_add(r, "GET", "/a//b", fn_a, NULL), BM_EINVAL);
    assert_int_equal(bm_router_add(r, "GET", "/a/*/b", fn_a, NULL), BM_EINVAL);
    assert_int_equal(bm_router_add(r, "GET", "/a/x{y}", fn_a, NULL), BM_EINVAL);
    assert_int_equal(bm_router_add(r, "GET", "/a/{b}", fn_a, &tag_a), 0);
    assert_int_equal(bm_router_add(r, "GET", "/a/{b}", fn_b, &tag_b), 0); /* replaces */
    bm_route_params_t p;
    assert_ptr_equal(match(r, "GET", "/a/1", &p), &tag_b);
    /* no fallback set: the match returns NULL */
    void *ud = &tag_a;
    assert_null(bm_router_match(r, "GET", "/zzz", 4, &p, &ud));
    bm_router_free(r);
}

static void test_not_origin_form(void **state)
{
    bm_router_t *r = make();
    bm_route_params_t p;
    /* an absolute-form target never matches a route */
    assert_ptr_equal(match(r, "GET", "http://evil.example/eth/v1/validator/attestation_data", &p),
                     &tag_fb);
    bm_router_free(r);
}

/* A pattern with a trailing slash is its own path: "/ui/" and "/ui" are two routes. */
static void test_trailing_slash(void **state)
{
    (void)state;
    bm_router_t *r = bm_router_new();
    assert_int_equal(bm_router_add(r, "GET", "/ui", fn_a, &tag_a), 0);
    assert_int_equal(bm_router_add(r, "GET", "/ui/", fn_b, &tag_b), 0);
    assert_int_equal(bm_router_add(r, "GET", "/ui/{file}", fn_a, &tag_c), 0);
    assert_int_equal(bm_router_add(r, "GET", "/x/*/", fn_a, &tag_d), BM_EINVAL);
    bm_router_set_fallback(r, fn_fb, &tag_fb);
    bm_route_params_t p;
    assert_ptr_equal(match(r, "GET", "/ui", &p), &tag_a);
    assert_ptr_equal(match(r, "GET", "/ui/", &p), &tag_b);
    assert_ptr_equal(match(r, "GET", "/ui/app.js", &p), &tag_c);
    assert_ptr_equal(match(r, "GET", "/ui//", &p), &tag_fb);
    assert_ptr_equal(match(r, "GET", "/ui/app.js/", &p), &tag_fb);
    bm_router_free(r);
}

/* Routes carry the class named before they were added, the fallback its own. */
static void test_route_class(void **state)
{
    (void)state;
    bm_router_t *r = bm_router_new();
    bm_router_set_class(r, "duty");
    assert_int_equal(bm_router_add(r, "GET", "/a", fn_a, &tag_a), 0);
    bm_router_set_class(r, "admin");
    assert_int_equal(bm_router_add(r, "GET", "/b/{x}", fn_b, &tag_b), 0);
    bm_router_set_class(r, "read");
    bm_router_set_fallback(r, fn_fb, &tag_fb);
    bm_route_params_t p;
    match(r, "GET", "/a", &p);
    assert_string_equal(p.route_class, "duty");
    match(r, "GET", "/b/1", &p);
    assert_string_equal(p.route_class, "admin");
    match(r, "GET", "/c", &p);
    assert_string_equal(p.route_class, "read");
    bm_router_free(r);
}

/* ---- what a request was, once it ended (the server's summary) ------------------------------ */

typedef struct ends {
    int n;
    bm_req_summary_t last;
    char target[64], cls[16];
} ends_t;

static void on_end(const bm_req_summary_t *s, void *ud)
{
    ends_t *e = ud;
    e->n++;
    e->last = *s;
    snprintf(e->target, sizeof e->target, "%s", s->target);
    snprintf(e->cls, sizeof e->cls, "%s", s->route_class ? s->route_class : "-");
    e->last.target = e->target;
    e->last.route_class = e->cls;
    e->last.method = e->last.peer = NULL; /* borrowed for the call only */
}

static void route_served(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    (void)p;
    (void)ud;
    bm_req_add_upstream(req, 0);
    bm_req_add_upstream(req, 5);
    bm_req_add_upstream(req, 64); /* out of range: ignored */
    bm_buf_t *b = bm_buf_from_str("{\"data\":\"12345\"}");
    bm_resp_send(req, 201, "application/json", b, NULL);
    bm_buf_unref(b);
}

static void test_request_summary(void **state)
{
    (void)state;
    fake_mux_t *m = fake_mux_new(false);
    ends_t e = {0};
    bm_server_on_end(m->front, on_end, &e);
    bm_router_set_class(m->router, "duty");
    assert_int_equal(bm_router_add(m->router, "GET", "/served", route_served, NULL), 0);
    fake_call_t *c = fake_mux_get(m, "/served?x=1", NULL);
    fake_mux_wait(m, c);
    RUN_UNTIL(&m->loop, e.n == 1, FAKE_BOUND_MS);
    assert_int_equal(e.last.status, 201);
    assert_int_equal(e.last.body_bytes, strlen("{\"data\":\"12345\"}"));
    assert_string_equal(e.target, "/served?x=1");
    assert_string_equal(e.cls, "duty");
    assert_int_equal(e.last.upstreams, (1u << 0) | (1u << 5));
    assert_false(e.last.cut);
    assert_true(e.last.duration_us < 5000000);
    /* an unknown path: the router's own 404 (no fallback here), no upstream */
    c = fake_mux_get(m, "/nothing", NULL);
    fake_mux_wait(m, c);
    RUN_UNTIL(&m->loop, e.n == 2, FAKE_BOUND_MS);
    assert_int_equal(e.last.status, 404);
    assert_int_equal(e.last.upstreams, 0);
    bm_server_stats_t st;
    bm_server_stats(m->front, &st);
    assert_int_equal(st.requests, 2);
    assert_true(st.accepted >= 1);
    assert_int_equal(st.rejected, 0);
    fake_mux_free(m);
}

/* ---- the tree against the definition: walk every route, keep the most specific ---------- */

typedef struct ref_route {
    const char *method;
    char pattern[64];
    int id;
} ref_route_t;

/* Score of `pattern` for `path` as the router defines specificity: one digit per segment
 * (2 literal, 1 parameter, 0 rest), compared from the left; -1 when it does not match. */
static long long ref_score(const char *pattern, const char *path)
{
    long long score = 0;
    int depth = 0;
    const char *p = path + 1, *q = pattern + 1;
    for (;;) {
        size_t qlen = strcspn(q, "/");
        if (qlen == 1 && q[0] == '*') {
            if (*p == '\0')
                return -1;
            for (; depth < 16; depth++)
                score *= 10;
            return score;
        }
        size_t plen = strcspn(p, "/");
        if (plen == 0)
            return -1;
        if (q[0] == '{')
            score = score * 10 + 1;
        else if (qlen == plen && memcmp(p, q, plen) == 0)
            score = score * 10 + 2;
        else
            return -1;
        depth++;
        bool p_end = p[plen] == '\0', q_end = q[qlen] == '\0';
        if (p_end || q_end) {
            if (!p_end || !q_end)
                return -1;
            for (; depth < 16; depth++)
                score *= 10;
            return score;
        }
        p += plen + 1;
        q += qlen + 1;
    }
}

static int ref_match(const ref_route_t *routes, int n, const char *method, const char *path)
{
    int best = -1;
    long long best_score = -1;
    for (int i = 0; i < n; i++) {
        if (routes[i].method && strcmp(routes[i].method, method) != 0)
            continue;
        long long sc = ref_score(routes[i].pattern, path);
        if (sc < 0)
            continue;
        if (best < 0 || sc > best_score ||
            (sc == best_score && routes[i].method && !routes[best].method)) {
            best = i;
            best_score = sc;
        }
    }
    return best < 0 ? -1 : routes[best].id;
}

static void test_tree_matches_definition(void **state)
{
    static const char *const segs[] = {"a", "b", "{x}", "{y}", "*"};
    static const char *const methods[] = {"GET", "POST", NULL};
    static const char *const path_segs[] = {"a", "b", "c", ""};
    static int ids[64];
    uint32_t rnd = 12345;
#define RND() (rnd = rnd * 1103515245u + 12345u, (rnd >> 16) & 0x7fff)
    for (int round = 0; round < 200; round++) {
        bm_router_t *r = bm_router_new();
        ref_route_t routes[24];
        int n = 0;
        for (int i = 0; i < 24; i++) {
            ref_route_t *rt = &routes[n];
            rt->method = methods[RND() % 3];
            size_t len = 0;
            int nseg = 1 + (int)(RND() % 4);
            for (int k = 0; k < nseg; k++) {
                const char *sg = segs[RND() % 5];
                if (sg[0] == '*' && k + 1 < nseg)
                    sg = "a";
                len += (size_t)snprintf(rt->pattern + len, sizeof rt->pattern - len, "/%s", sg);
            }
            rt->id = i;
            ids[i] = i;
            assert_int_equal(bm_router_add(r, rt->method, rt->pattern, fn_a, &ids[i]), 0);
            /* a later route with the same method and pattern takes the earlier one's place */
            bool replaced = false;
            for (int k = 0; k < n && !replaced; k++)
                if (strcmp(routes[k].pattern, rt->pattern) == 0 &&
                    ((!routes[k].method && !rt->method) ||
                     (routes[k].method && rt->method &&
                      strcmp(routes[k].method, rt->method) == 0))) {
                    routes[k].id = i;
                    replaced = true;
                }
            if (!replaced)
                n++;
        }
        for (int t = 0; t < 50; t++) {
            char path[64];
            size_t len = 0;
            int nseg = 1 + (int)(RND() % 4);
            for (int k = 0; k < nseg; k++)
                len += (size_t)snprintf(path + len, sizeof path - len, "/%s", path_segs[RND() % 4]);
            const char *method = RND() % 2 ? "GET" : "POST";
            int want = ref_match(routes, n, method, path);
            bm_route_params_t p;
            void *ud = NULL;
            bm_route_fn fn = bm_router_match(r, method, path, len, &p, &ud);
            int got = fn ? *(int *)ud : -1;
            if (got != want) {
                for (int k = 0; k < n; k++)
                    print_message("route %d: %s %s\n", routes[k].id,
                                  routes[k].method ? routes[k].method : "ANY", routes[k].pattern);
                fail_msg("%s %s: route %d, want %d", method, path, got, want);
            }
        }
        bm_router_free(r);
    }
#undef RND
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literal_and_method),       cmocka_unit_test(test_params),
        cmocka_unit_test(test_literal_beats_param),      cmocka_unit_test(test_rest_and_any_method),
        cmocka_unit_test(test_bad_patterns_and_replace), cmocka_unit_test(test_not_origin_form),
        cmocka_unit_test(test_tree_matches_definition),  cmocka_unit_test(test_route_class),
        cmocka_unit_test(test_trailing_slash),           cmocka_unit_test(test_request_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
