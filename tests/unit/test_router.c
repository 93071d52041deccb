/* SPDX-License-Identifier: MIT */
/* Unit tests of the route table: specificity, parameters, methods, fallback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literal_and_method),       cmocka_unit_test(test_params),
        cmocka_unit_test(test_literal_beats_param),      cmocka_unit_test(test_rest_and_any_method),
        cmocka_unit_test(test_bad_patterns_and_replace), cmocka_unit_test(test_not_origin_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
