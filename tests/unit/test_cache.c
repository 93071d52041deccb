/* SPDX-License-Identifier: MIT */
/* Unit tests of cache (the I/O of the response cache) on beaconmux in miniature: one upstream
 * request for many identical reads, hits, poisoned answers never stored (5xx, wrong content
 * type, cut), answers too large to hold sent down the read path, bypass, gzip served as
 * stored, the store's bounds, and a stop that answers whoever waits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "base/json.h"
#include "edge/cache.h"
#include "edge/cachekey.h"
#include "fake_node.h"
#include "read/readpath.h"

#define BLOCK "/eth/v2/beacon/blocks/genesis"

typedef struct cfx {
    bm_readpath_t *rp;
    bm_cache_t *cache;
} cfx_t;

static void stop_module(void *p)
{
    cfx_t *m = p;
    bm_cache_stop(m->cache);
}

static void free_module(void *p)
{
    cfx_t *m = p;
    bm_cache_free(m->cache);
    bm_readpath_free(m->rp);
    free(m);
}

/* The cache (with `o`, or the defaults) in front of a read path on the mux's nodes. */
static cfx_t *make(fake_mux_t *f, const bm_cache_opts_t *o)
{
    cfx_t *m = calloc(1, sizeof *m);
    assert_non_null(m);
    bm_readpath_opts_t ro;
    bm_readpath_opts_default(&ro);
    ro.hedge_max_count = 0; /* one read, one request */
    m->rp = bm_readpath_new(&f->loop, f->up, f->pool, NULL, &ro);
    assert_non_null(m->rp);
    bm_readpath_set_rules(m->rp, bm_rules_new());
    m->cache = bm_cache_new(&f->loop, m->rp, NULL, NULL, o);
    assert_non_null(m->cache);
    bm_router_set_fallback(f->router, bm_cache_route, m->cache);
    f->module = m;
    f->module_stop = stop_module;
    f->module_free = free_module;
    return m;
}

static const char *big_json(size_t n)
{
    static char buf[64 * 1024];
    assert_true(n < sizeof buf);
    int k = snprintf(buf, sizeof buf, "{\"version\":\"fulu\",\"finalized\":true,\"data\":\"");
    for (size_t i = (size_t)k; i < n - 2; i++)
        buf[i] = (char)('a' + i % 7);
    memcpy(buf + n - 2, "\"}", 3);
    return buf;
}

static void test_identical_reads_share_one_request(void **state)
{
    fake_mux_t *f = *state;
    fake_step_t st = FAKE_OK(200, "{\"finalized\":true,\"data\":{\"x\":1}}");
    st.hdrs[0][0] = "Eth-Consensus-Version";
    st.hdrs[0][1] = "fulu";
    fake_node_t *a = fake_mux_node(f, &st, 1);
    cfx_t *m = make(f, NULL);
    fake_call_t *c[8];
    for (int i = 0; i < 8; i++)
        c[i] = fake_mux_get(f, BLOCK, NULL);
    for (int i = 0; i < 8; i++) {
        fake_mux_wait(f, c[i]);
        assert_int_equal(c[i]->status, 200);
        assert_string_equal(c[i]->body, "{\"finalized\":true,\"data\":{\"x\":1}}");
        assert_string_equal(fake_call_header(c[i], "eth-consensus-version"), "fulu");
    }
    assert_int_equal(a->requests, 1);
    const bm_cache_counters_t *k = bm_cache_counters(m->cache, BM_CK_ROUTE_BLOCK);
    assert_int_equal(k->misses, 1);
    assert_int_equal(k->coalesced, 7);
    /* and later: a hit, no request */
    fake_call_t *h = fake_mux_get(f, BLOCK, NULL);
    fake_mux_wait(f, h);
    assert_string_equal(fake_call_header(h, "x-beaconmux-cache"), "hit");
    assert_int_equal(a->requests, 1);
    assert_int_equal(k->hits, 1);
    /* JSON and SSZ are two keys */
    fake_call_t *s = fake_mux_get(f, BLOCK, "application/octet-stream");
    fake_mux_wait(f, s);
    assert_int_equal(a->requests, 2);
}

/* One read through the cache, waited for. */
static fake_call_t *get(fake_mux_t *f)
{
    fake_call_t *c = fake_mux_get(f, BLOCK, NULL);
    fake_mux_wait(f, c);
    return c;
}

static void test_poisoned_answers_are_not_stored(void **state)
{
    fake_mux_t *f = *state;
    fake_node_t *a = fake_mux_node1(f, FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"x\"}"));
    cfx_t *m = make(f, NULL);
    const bm_cache_counters_t *k = bm_cache_counters(m->cache, BM_CK_ROUTE_BLOCK);
    /* a 500: relayed, not kept */
    assert_int_equal(get(f)->status, 500);
    /* a 200 of the wrong content type: relayed, not kept */
    fake_step_t text = {.status = 200, .body = "not json", .ctype = "text/plain"};
    fake_node_script(a, &text, 1);
    fake_call_t *c = get(f);
    assert_int_equal(c->status, 200);
    assert_string_equal(c->body, "not json");
    assert_int_equal(k->stored, 0);
    assert_int_equal(k->not_stored, 2);
    /* cut mid-body: the read path asks again; what is stored is the whole answer */
    fake_step_t cut[] = {
        {.status = 200, .body = "{\"data\":\"0123456789\"}", .cut = true, .cut_at = 5},
        FAKE_OK(0, "{\"data\":\"0123456789\"}"),
    };
    fake_node_script(a, cut, 2);
    c = get(f);
    assert_int_equal(c->status, 200);
    assert_string_equal(c->body, "{\"data\":\"0123456789\"}");
    assert_int_equal(k->stored, 1);
    assert_int_equal(a->requests, 2);
    c = get(f);
    assert_string_equal(fake_call_header(c, "x-beaconmux-cache"), "hit");
    assert_int_equal(a->requests, 2);
}

static void test_too_big_goes_down_the_read_path(void **state)
{
    fake_mux_t *f = *state;
    const char *body = big_json(20000);
    fake_node_t *a = fake_mux_node1(f, FAKE_OK(100, body));
    bm_cache_opts_t o;
    bm_cache_opts_default(&o);
    o.max_entry_bytes = 10000;
    cfx_t *m = make(f, &o);
    fake_call_t *c1 = fake_mux_get(f, BLOCK, NULL);
    fake_call_t *c2 = fake_mux_get(f, BLOCK, NULL);
    fake_mux_wait(f, c1);
    fake_mux_wait(f, c2);
    assert_int_equal(c1->status, 200);
    assert_int_equal(c1->body_len, strlen(body));
    assert_memory_equal(c2->body, body, strlen(body));
    const bm_cache_counters_t *k = bm_cache_counters(m->cache, BM_CK_ROUTE_BLOCK);
    assert_int_equal(k->too_big, 1);
    assert_int_equal(k->stored, 0);
    assert_int_equal(a->requests, 3); /* the held try, then each client on its own */
}

static void test_stored_once_with_its_gzip_form(void **state)
{
    fake_mux_t *f = *state;
    const char *body = big_json(30000);
    fake_node_t *a = fake_mux_node1(f, FAKE_OK(0, body));
    cfx_t *m = make(f, NULL);
    for (int i = 0; i < 3; i++) {
        fake_call_t *c = get(f);
        assert_int_equal(c->body_len, strlen(body));
        assert_memory_equal(c->body, body, strlen(body));
        /* compressed once when stored: every answer says it varies by encoding */
        assert_string_equal(fake_call_header(c, "vary"), "Accept-Encoding");
        assert_string_equal(fake_call_header(c, "content-encoding"), "");
    }
    assert_int_equal(a->requests, 1);
    const bm_cache_counters_t *k = bm_cache_counters(m->cache, BM_CK_ROUTE_BLOCK);
    assert_int_equal(k->hits, 2);
    assert_int_equal(k->bytes_served, 3 * strlen(body));
    assert_int_equal(k->gzip_served, 0); /* these clients asked for identity */
}

static void test_bounds_evict(void **state)
{
    fake_mux_t *f = *state;
    const char *body = big_json(5000);
    fake_node_t *a = fake_mux_node1(f, FAKE_OK(0, body));
    bm_cache_opts_t o;
    bm_cache_opts_default(&o);
    o.max_bytes = 16 * 1024; /* room for about two */
    o.gzip_min_bytes = 1u << 30;
    cfx_t *m = make(f, &o);
    char path[160];
    for (int i = 1; i <= 5; i++) {
        snprintf(path, sizeof path, "/eth/v2/beacon/blocks/0x%064x", i);
        fake_call_t *c = fake_mux_get(f, path, NULL);
        fake_mux_wait(f, c);
        assert_int_equal(c->status, 200);
    }
    assert_int_equal(a->requests, 5);
    /* never more than maxBytes; what went was counted as evicted */
    bm_str_t s = BM_STR_INIT;
    bm_cache_status_json(&s, m->cache);
    struct json_object *doc = NULL;
    assert_int_equal(bm_json_parse(bm_str_data(&s), bm_str_len(&s), 0, &doc, NULL), 0);
    uint64_t entries = 0, bytes = 0, evicted = 0;
    assert_int_equal(bm_json_get_u64(doc, "/entries", &entries), 0);
    assert_int_equal(bm_json_get_u64(doc, "/bytes", &bytes), 0);
    assert_int_equal(bm_json_get_u64(doc, "/routes/block/evictions", &evicted), 0);
    assert_true(entries >= 1 && entries < 5);
    assert_true(bytes <= 16 * 1024);
    assert_int_equal(evicted, 5 - entries);
    json_object_put(doc);
    bm_str_dispose(&s);
    /* the newest is still there, the first went */
    snprintf(path, sizeof path, "/eth/v2/beacon/blocks/0x%064x", 5);
    fake_call_t *c = fake_mux_get(f, path, NULL);
    fake_mux_wait(f, c);
    assert_int_equal(a->requests, 5);
    snprintf(path, sizeof path, "/eth/v2/beacon/blocks/0x%064x", 1);
    c = fake_mux_get(f, path, NULL);
    fake_mux_wait(f, c);
    assert_int_equal(a->requests, 6);
}

static void test_a_node_without_the_root_is_passed_over(void **state)
{
    fake_mux_t *f = *state;
    fake_step_t missing = FAKE_STATUS(404, 0, "{\"code\":404,\"message\":\"not found\"}");
    fake_step_t found = FAKE_OK(0, "{\"data\":{\"root\":\"0xab\"}}");
    fake_node_t *a = fake_mux_node(f, &missing, 1);
    fake_node_t *b = fake_mux_node(f, &found, 1);
    cfx_t *m = make(f, NULL);
    /* a is asked first (tier 0), b only after it (tier 1) */
    bm_readpath_node_opts_t no = {.priority = 0, .weight = 1};
    bm_readpath_set_node(m->rp, 0, &no);
    no.priority = 1;
    bm_readpath_set_node(m->rp, 1, &no);
    /* a root in upper case is sent in lower case: a root of the chain, which a node behind
     * lacks: its 404 moves the read on */
    const char *path =
        "/eth/v2/beacon/blocks/0xABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB";
    fake_call_t *c = fake_mux_get(f, path, NULL);
    fake_mux_wait(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(a->requests, 1);
    assert_int_equal(b->requests, 1);
    assert_non_null(strstr(fake_node_last(b)->target, "0xabab"));
    /* when every node lacks it, the 404 is what the client gets (and nothing is stored) */
    fake_node_script(b, &missing, 1);
    c = fake_mux_get(
        f,
        "/eth/v2/beacon/blocks/0xCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCD",
        NULL);
    fake_mux_wait(f, c);
    assert_int_equal(c->status, 404);
}

static void test_stop_answers_the_waiting(void **state)
{
    fake_mux_t *f = *state;
    fake_mux_node1(f, FAKE_HANG);
    cfx_t *m = make(f, NULL);
    fake_call_t *c1 = fake_mux_get(f, BLOCK, NULL);
    fake_call_t *c2 = fake_mux_get(f, BLOCK, NULL);
    fake_mux_settle(f);
    bm_cache_stop(m->cache);
    fake_mux_wait(f, c1);
    fake_mux_wait(f, c2);
    assert_int_equal(c1->status, 503);
    assert_int_equal(c2->status, 503);
    /* the second joined the first's read */
    assert_int_equal(bm_cache_counters(m->cache, BM_CK_ROUTE_BLOCK)->coalesced, 1);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fake_mux_setup, fake_mux_teardown)
    const struct CMUnitTest tests[] = {
        T(test_identical_reads_share_one_request),
        T(test_poisoned_answers_are_not_stored),
        T(test_too_big_goes_down_the_read_path),
        T(test_stored_once_with_its_gzip_form),
        T(test_bounds_evict),
        T(test_a_node_without_the_root_is_passed_over),
        T(test_stop_answers_the_waiting),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
