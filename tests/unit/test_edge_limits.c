/* SPDX-License-Identifier: MIT */
/* Unit tests of the edge's pure decisions: limit (token bucket math, the bounded per-client
 * table), addr (CIDR, X-Forwarded-For, loopback), cors and auth (key extraction, constant
 * time compare, route classes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "duties/replay.h"
#include "edge/addr.h"
#include "edge/auth.h"
#include "edge/cors.h"
#include "edge/front.h"
#include "edge/limit.h"
#include "edge/spends.h"

static void test_bucket_math(void **state)
{
    (void)state;
    bm_bucket_t b = {0};
    bm_rate_t r = {.rate = 10, .burst = 3};
    uint32_t retry = 0;
    for (int i = 0; i < 3; i++)
        assert_true(bm_bucket_take(&b, &r, 1000, &retry)); /* starts full: the burst */
    assert_false(bm_bucket_take(&b, &r, 1000, &retry));
    assert_int_equal(retry, 100); /* one token per 100 ms */
    assert_false(bm_bucket_take(&b, &r, 1099, &retry));
    assert_int_equal(retry, 1);
    assert_true(bm_bucket_take(&b, &r, 1100, &retry));
    /* never more than the burst after a long idle */
    int got = 0;
    while (bm_bucket_take(&b, &r, 100000, &retry))
        got++;
    assert_int_equal(got, 3);
    bm_rate_t off = {0};
    assert_true(bm_bucket_take(&b, &off, 0, &retry));
}

/* Shared global limits: a bucket capped to what the shared bucket holds, a debt refilled first. */
static void test_bucket_cap(void **state)
{
    (void)state;
    bm_rate_t r = {10, 10};
    bm_bucket_t b = {0};
    uint32_t retry = 0;
    bm_bucket_cap(&b, &r, 1000, 3); /* starts full (10), keeps 3 */
    for (int i = 0; i < 3; i++)
        assert_true(bm_bucket_take(&b, &r, 1000, &retry));
    assert_false(bm_bucket_take(&b, &r, 1000, &retry));
    assert_int_equal(retry, 100);
    bm_bucket_cap(&b, &r, 1000, -5); /* others spent 5 more than there was */
    assert_false(bm_bucket_take(&b, &r, 1000, &retry));
    assert_int_equal(retry, 600); /* six tokens to earn before one is there */
    assert_false(bm_bucket_take(&b, &r, 1590, &retry));
    assert_true(bm_bucket_take(&b, &r, 1600, &retry));
    bm_bucket_cap(&b, &r, 1600, 50); /* a cap above what it holds changes nothing */
    assert_false(bm_bucket_take(&b, &r, 1600, &retry));
    bm_rate_t none = {0, 0};
    bm_bucket_t n = {0};
    bm_bucket_cap(&n, &none, 1000, -100); /* no limit: nothing to cap */
    assert_true(bm_bucket_take(&n, &none, 1000, &retry));
}

static void test_limiter_isolates_clients(void **state)
{
    (void)state;
    bm_limiter_t *l = bm_limiter_new(128);
    bm_rate_t r = {.rate = 1, .burst = 2};
    uint32_t retry;
    assert_true(bm_limiter_take(l, "a", 1, &r, 0, &retry));
    assert_true(bm_limiter_take(l, "a", 1, &r, 0, &retry));
    assert_false(bm_limiter_take(l, "a", 1, &r, 0, &retry));
    assert_true(bm_limiter_take(l, "b", 1, &r, 0, &retry)); /* another client is unaffected */
    /* a flood of distinct clients stays in the table's slots; the hammering one keeps its
     * bucket or gets a new full one, never more than burst at once */
    char k[16];
    for (int i = 0; i < 10000; i++) {
        snprintf(k, sizeof k, "c%d", i);
        bm_limiter_take(l, k, strlen(k), &r, 0, &retry);
    }
    bm_limiter_free(l);
}

static void test_cidr_and_forwarded(void **state)
{
    (void)state;
    bm_cidr_t c[3];
    assert_int_equal(bm_cidr_parse("10.0.0.0/8", &c[0]), 0);
    assert_int_equal(bm_cidr_parse("127.0.0.1", &c[1]), 0);
    assert_int_equal(bm_cidr_parse("fd00::/8", &c[2]), 0);
    assert_true(bm_cidr_match(c, 3, "10.200.3.4"));
    assert_true(bm_cidr_match(c, 3, "::ffff:10.1.1.1")); /* IPv4-mapped */
    assert_true(bm_cidr_match(c, 3, "fd12::1"));
    assert_false(bm_cidr_match(c, 3, "11.0.0.1"));
    assert_false(bm_cidr_match(c, 3, "127.0.0.2"));
    assert_false(bm_cidr_match(c, 3, "garbage"));
    assert_non_null(bm_cidr_problem("10.0.0.0/33"));
    assert_non_null(bm_cidr_problem("10.0.0/8"));
    assert_null(bm_cidr_problem("::1/128"));
    char out[64];
    /* the peer is a trusted proxy: the rightmost untrusted hop is the client */
    assert_string_equal(bm_client_addr("127.0.0.1", "1.2.3.4, 10.0.0.5", c, 3, out, sizeof out),
                        "1.2.3.4");
    /* spoofed leftmost entries do not matter */
    assert_string_equal(bm_client_addr("127.0.0.1", "6.6.6.6, 1.2.3.4", c, 3, out, sizeof out),
                        "1.2.3.4");
    /* an untrusted peer's header is ignored */
    assert_string_equal(bm_client_addr("8.8.8.8", "1.2.3.4", c, 3, out, sizeof out), "8.8.8.8");
    /* malformed: the last trusted hop stands */
    assert_string_equal(bm_client_addr("127.0.0.1", "nonsense", c, 3, out, sizeof out),
                        "127.0.0.1");
    assert_true(bm_host_is_loopback("127.0.0.1"));
    assert_true(bm_host_is_loopback("::1"));
    assert_true(bm_host_is_loopback("localhost"));
    assert_false(bm_host_is_loopback("0.0.0.0"));
    assert_false(bm_host_is_loopback("::"));
    assert_false(bm_host_is_loopback("192.168.1.1"));
}

static void test_cors(void **state)
{
    (void)state;
    const char *origins[] = {"https://app.example"};
    bm_cors_opts_t o = {origins, 1, "GET, POST", NULL, "Eth-Consensus-Version", false, 600};
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    assert_int_equal(bm_cors_decide(&o, "GET", NULL, NULL, NULL, &h), BM_CORS_NONE);
    assert_int_equal(bm_cors_decide(&o, "GET", "https://evil.example", NULL, NULL, &h),
                     BM_CORS_DENIED);
    assert_int_equal(h.n, 0);
    assert_int_equal(bm_cors_decide(&o, "GET", "https://app.example", NULL, NULL, &h),
                     BM_CORS_ALLOWED);
    assert_string_equal(bm_hdrs_get(&h, "access-control-allow-origin"), "https://app.example");
    assert_string_equal(bm_hdrs_get(&h, "access-control-expose-headers"), "Eth-Consensus-Version");
    bm_hdrs_clear(&h);
    assert_int_equal(
        bm_cors_decide(&o, "OPTIONS", "https://app.example", "POST", "content-type", &h),
        BM_CORS_PREFLIGHT);
    assert_string_equal(bm_hdrs_get(&h, "access-control-allow-headers"), "content-type");
    assert_string_equal(bm_hdrs_get(&h, "access-control-max-age"), "600");
    bm_hdrs_clear(&h);
    assert_int_equal(bm_cors_decide(&o, "OPTIONS", "https://app.example", "DELETE", NULL, &h),
                     BM_CORS_PREFLIGHT_BAD);
    assert_int_equal(bm_cors_decide(&o, "OPTIONS", "https://x.example", "GET", NULL, &h),
                     BM_CORS_PREFLIGHT_BAD);
    const char *star[] = {"*"};
    bm_cors_opts_t w = {star, 1, "GET", NULL, NULL, true, 0};
    assert_int_equal(bm_cors_decide(&w, "GET", "https://x.example", NULL, NULL, &h),
                     BM_CORS_ALLOWED);
    /* credentials: the origin is echoed, never "*" */
    assert_string_equal(bm_hdrs_get(&h, "access-control-allow-origin"), "https://x.example");
    bm_cors_opts_t off = {0};
    assert_int_equal(bm_cors_decide(&off, "GET", "https://x.example", NULL, NULL, &h),
                     BM_CORS_NONE);
    bm_hdrs_dispose(&h);
}

static void test_auth_keys(void **state)
{
    (void)state;
    const char *nets[] = {"mainnet"};
    bm_auth_key_t keys[] = {
        {"dash", "s3cret-dash", nets, 1, BM_ROUTE_READ, {0, 0}},
        {"ops", "s3cret-ops", NULL, 0, BM_ROUTE_READ | BM_ROUTE_DUTIES | BM_ROUTE_ADMIN, {0, 0}},
    };
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_auth_source_t src;
    bool presented;
    size_t skip;
    const char *p = "/eth/v1/node/version";
    assert_null(bm_auth_find(keys, 2, &h, p, strlen(p), &src, &presented, &skip));
    assert_false(presented);
    bm_hdrs_add_z(&h, "Authorization", "Bearer s3cret-ops");
    assert_ptr_equal(bm_auth_find(keys, 2, &h, p, strlen(p), &src, &presented, &skip), &keys[1]);
    assert_int_equal(src, BM_AUTH_BEARER);
    bm_hdrs_clear(&h);
    bm_hdrs_add_z(&h, "X-Api-Key", "s3cret-dash");
    assert_ptr_equal(bm_auth_find(keys, 2, &h, p, strlen(p), &src, &presented, &skip), &keys[0]);
    bm_hdrs_clear(&h);
    bm_hdrs_add_z(&h, "X-Api-Key", "s3cret-das"); /* a prefix of a secret is no key */
    assert_null(bm_auth_find(keys, 2, &h, p, strlen(p), &src, &presented, &skip));
    assert_true(presented);
    bm_hdrs_clear(&h);
    /* Basic vc:s3cret-ops (what http://vc:s3cret-ops@host sends) */
    bm_hdrs_add_z(&h, "Authorization", "Basic dmM6czNjcmV0LW9wcw==");
    assert_ptr_equal(bm_auth_find(keys, 2, &h, p, strlen(p), &src, &presented, &skip), &keys[1]);
    assert_int_equal(src, BM_AUTH_BASIC);
    bm_hdrs_clear(&h);
    const char *pk = "/s3cret-dash/eth/v1/node/version";
    assert_ptr_equal(bm_auth_find(keys, 2, &h, pk, strlen(pk), &src, &presented, &skip), &keys[0]);
    assert_int_equal(src, BM_AUTH_PATH);
    assert_int_equal(skip, strlen("/s3cret-dash"));
    bm_hdrs_dispose(&h);
    assert_true(bm_auth_allows(&keys[0], BM_ROUTE_READ, "mainnet"));
    assert_false(bm_auth_allows(&keys[0], BM_ROUTE_READ, "hoodi"));
    assert_false(bm_auth_allows(&keys[0], BM_ROUTE_DUTIES, "mainnet"));
    assert_true(bm_auth_allows(&keys[1], BM_ROUTE_ADMIN, "hoodi"));
    assert_true(bm_auth_equal("abc", 3, "abc", 3));
    assert_false(bm_auth_equal("abc", 3, "abd", 3));
    assert_false(bm_auth_equal("ab", 2, "abc", 3));
    assert_false(bm_auth_equal("abcd", 4, "abc", 3));
}

static void test_route_classes(void **state)
{
    (void)state;
#define CLS(m, p) bm_auth_route_class(m, p, strlen(p))
    assert_int_equal(CLS("GET", "/beaconmux/v1/status"), BM_ROUTE_ADMIN);
    assert_int_equal(CLS("GET", "/eth/v1/validator/attestation_data"), BM_ROUTE_DUTIES);
    assert_int_equal(CLS("POST", "/eth/v1/validator/duties/attester/3"), BM_ROUTE_DUTIES);
    assert_int_equal(CLS("GET", "/eth/v3/validator/blocks/5"), BM_ROUTE_DUTIES);
    assert_int_equal(CLS("GET", "/eth/v1/beacon/blocks/head/root"), BM_ROUTE_DUTIES);
    assert_int_equal(CLS("POST", "/eth/v1/beacon/pool/attestations"), BM_ROUTE_DUTIES);
    assert_int_equal(CLS("POST", "/eth/v2/beacon/blocks"), BM_ROUTE_DUTIES);
    assert_int_equal(CLS("POST", "/eth/v1/beacon/states/head/validators"), BM_ROUTE_READ);
    assert_int_equal(CLS("GET", "/eth/v2/beacon/blocks/head"), BM_ROUTE_READ);
    assert_int_equal(CLS("GET", "/eth/v1/events"), BM_ROUTE_READ);
    assert_true(bm_auth_is_write("POST", "/eth/v1/beacon/pool/attestations", 32));
    assert_false(bm_auth_is_write("GET", "/eth/v1/beacon/pool/attestations", 32));
    assert_int_equal(bm_auth_route_parse("duties"), BM_ROUTE_DUTIES);
    /* every write the replay memory remembers needs a key with `duties`: a read-only key
     * cannot fill it (issue 12) */
    bm_auth_key_t reader = {"dash", "s3cret", NULL, 0, BM_ROUTE_READ, {0, 0}};
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++) {
        const char *rp = bm_replay_kind_path((bm_replay_kind_t)k);
        assert_int_equal(CLS("POST", rp), BM_ROUTE_DUTIES);
        assert_false(bm_auth_allows(&reader, CLS("POST", rp), NULL));
    }
    assert_int_equal(bm_auth_route_parse("write"), 0);
#undef CLS
}

static void test_exposure_and_network_ids(void **state)
{
    (void)state;
    /* secure by default: a non-loopback listener needs keys or an allowed-client list */
    assert_non_null(bm_front_exposure_problem("0.0.0.0", 0, 0));
    assert_non_null(bm_front_exposure_problem("::", 0, 0));
    assert_non_null(bm_front_exposure_problem("192.168.1.10", 0, 0));
    assert_null(bm_front_exposure_problem("0.0.0.0", 1, 0));
    assert_null(bm_front_exposure_problem("0.0.0.0", 0, 1));
    assert_null(bm_front_exposure_problem("127.0.0.1", 0, 0));
    assert_null(bm_front_exposure_problem("localhost", 0, 0));
    /* ids that would shadow a route */
    const char *bad[] = {"eth",  "beaconmux", "healthz", "metrics", "ui", "lighthouse",
                         "teku", "",          "-x",      "a/b",     "a b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_non_null(bm_front_network_id_problem(bad[i]));
    assert_null(bm_front_network_id_problem("mainnet"));
    assert_null(bm_front_network_id_problem("hoodi-2.b_c"));
}

typedef struct drained {
    int n;
    int cls[4];
    char key[4][32];
    uint32_t spent[4];
    double rate[4];
} drained_t;

static void on_drained(void *ud, int cls, const char *key, size_t n, const bm_rate_t *r,
                       uint32_t spent)
{
    drained_t *d = ud;
    if (d->n < 4) {
        d->cls[d->n] = cls;
        snprintf(d->key[d->n], sizeof d->key[0], "%.*s", (int)n, key);
        d->spent[d->n] = spent;
        d->rate[d->n] = r->rate;
    }
    d->n++;
}

/* Shared per-client buckets: what each client spent per period, bounded, per class. */
static void test_spends(void **state)
{
    (void)state;
    bm_spends_t *s = bm_spends_new(2);
    assert_non_null(s);
    bm_rate_t r5 = {5, 5}, r9 = {9, 9};
    assert_true(bm_spends_add(s, 0, "10.0.0.1", 8, &r5));
    assert_true(bm_spends_add(s, 0, "10.0.0.1", 8, &r5));
    assert_true(bm_spends_add(s, 1, "10.0.0.1", 8, &r9));  /* duty reads: another bucket */
    assert_false(bm_spends_add(s, 0, "10.0.0.2", 8, &r5)); /* two clients per period */
    assert_int_equal(bm_spends_overflow(s), 1);
    assert_int_equal(bm_spends_get(s, 0, "10.0.0.1", 8), 2);
    assert_int_equal(bm_spends_get(s, 1, "10.0.0.1", 8), 1);
    assert_int_equal(bm_spends_get(s, 0, "10.0.0.2", 8), 0);
    drained_t d = {0};
    assert_int_equal(bm_spends_drain(s, on_drained, &d), 2);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.cls[0], 0);
    assert_string_equal(d.key[0], "10.0.0.1");
    assert_int_equal(d.spent[0], 2);
    assert_true(d.rate[0] == 5);
    assert_int_equal(d.cls[1], 1);
    assert_int_equal(d.spent[1], 1);
    assert_true(d.rate[1] == 9);
    /* a new period starts empty, with room again */
    assert_int_equal(bm_spends_get(s, 0, "10.0.0.1", 8), 0);
    assert_true(bm_spends_add(s, 0, "10.0.0.2", 8, &r5));
    char long_key[BM_SPENDS_KEY_MAX + 2];
    memset(long_key, 'k', sizeof long_key);
    assert_false(bm_spends_add(s, 0, long_key, sizeof long_key, &r5));
    d.n = 0;
    assert_int_equal(bm_spends_drain(s, on_drained, &d), 1);
    assert_string_equal(d.key[0], "10.0.0.2");
    bm_spends_free(s);
}

/* A client's bucket capped with what the shared bucket holds, less what it gave since. */
static void test_limiter_cap(void **state)
{
    (void)state;
    bm_limiter_t *l = bm_limiter_new(64);
    bm_rate_t r = {.rate = 10, .burst = 10};
    uint32_t retry;
    assert_true(bm_limiter_take(l, "a", 1, &r, 1000, &retry)); /* 9 left */
    bm_limiter_cap(l, "a", 1, &r, 1000, 2.0);                  /* the others took 7 */
    assert_true(bm_limiter_take(l, "a", 1, &r, 1000, &retry));
    assert_true(bm_limiter_take(l, "a", 1, &r, 1000, &retry));
    assert_false(bm_limiter_take(l, "a", 1, &r, 1000, &retry));
    bm_limiter_cap(l, "b", 1, &r, 1000, 0.0); /* unknown here: nothing to cap */
    assert_true(bm_limiter_take(l, "b", 1, &r, 1000, &retry));
    bm_limiter_cap(l, "a", 1, &r, 1000, -5.0); /* a debt: refilled before the next token */
    assert_false(bm_limiter_take(l, "a", 1, &r, 1500, &retry));
    assert_true(bm_limiter_take(l, "a", 1, &r, 1600, &retry));
    bm_limiter_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_math),
        cmocka_unit_test(test_bucket_cap),
        cmocka_unit_test(test_limiter_isolates_clients),
        cmocka_unit_test(test_cidr_and_forwarded),
        cmocka_unit_test(test_cors),
        cmocka_unit_test(test_auth_keys),
        cmocka_unit_test(test_route_classes),
        cmocka_unit_test(test_exposure_and_network_ids),
        cmocka_unit_test(test_spends),
        cmocka_unit_test(test_limiter_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
