/* SPDX-License-Identifier: MIT */
/* Unit tests of cachekey: the class, key and target of every id form, and a re-org or a new
 * head changing the key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "edge/cachekey.h"

/* A chain where slot s has the block root {s, branch} unless s is in `empty`. */
typedef struct fake {
    uint8_t branch;
    uint64_t empty; /* the one empty slot (0: none) */
    uint64_t reach; /* links reach back to this slot */
} fake_t;

static void root_of(uint64_t slot, uint8_t branch, uint8_t out[32])
{
    memset(out, 0, 32);
    out[0] = (uint8_t)slot;
    out[1] = (uint8_t)(slot >> 8);
    out[31] = branch;
}

static int at_slot(void *ud, uint64_t slot, uint8_t out[32])
{
    fake_t *f = ud;
    if (slot < f->reach)
        return -1;
    if (f->empty && slot == f->empty)
        slot--; /* the latest block at or before it */
    root_of(slot, f->branch, out);
    return 0;
}

static bm_ck_chain_t chain(fake_t *f)
{
    bm_ck_chain_t c = {.slots_per_epoch = 8, .has_head = true, .head_slot = 100};
    root_of(100, f->branch, c.head_root);
    c.has_head_state = true;
    memset(c.head_state_root, 0xaa, 32);
    c.has_finalized = true;
    c.fin_epoch = 10; /* final through slot 80 */
    root_of(80, 0, c.fin_root);
    c.has_fin_state = true;
    memset(c.fin_state_root, 0xbb, 32);
    c.has_justified = true;
    c.just_epoch = 11;
    root_of(88, 0, c.just_root);
    c.root_at_slot = at_slot;
    c.ud = f;
    return c;
}

static const bm_ck_ttls_t TTLS = {.chain_ms = 12000, .clock_ms = 2000};

static bm_ck_t derive(const char *path, const char *query, bool ssz, const bm_ck_chain_t *c)
{
    bm_ck_t ck;
    assert_int_equal(
        bm_ck_derive(path, strlen(path), query, query ? strlen(query) : 0, ssz, c, &TTLS, &ck), 0);
    return ck;
}

static void hex(char out[67], const uint8_t r[32])
{
    static const char h[] = "0123456789abcdef";
    out[0] = '0';
    out[1] = 'x';
    for (int i = 0; i < 32; i++) {
        out[2 + 2 * i] = h[r[i] >> 4];
        out[3 + 2 * i] = h[r[i] & 15];
    }
    out[66] = 0;
}

static void test_root_is_immutable_and_lowercased(void **state)
{
    (void)state;
    fake_t f = {0};
    bm_ck_chain_t c = chain(&f);
    char path[128];
    snprintf(path, sizeof path, "/eth/v2/beacon/blocks/0x%s",
             "ABCDEF0000000000000000000000000000000000000000000000000000000001");
    bm_ck_t ck = derive(path, NULL, false, &c);
    assert_int_equal(ck.cls, BM_CK_IMMUTABLE);
    assert_int_equal(ck.ttl_ms, 0);
    assert_non_null(strstr(bm_str_data(&ck.key), "0xabcdef"));
    assert_true(ck.rewritten); /* sent lower-cased */
    bm_ck_dispose(&ck);
}

static void test_head_resolves_to_root_and_changes_with_head(void **state)
{
    (void)state;
    fake_t f = {0};
    bm_ck_chain_t c = chain(&f);
    bm_ck_t a = derive("/eth/v2/beacon/blocks/head", NULL, false, &c);
    assert_int_equal(a.cls, BM_CK_CHAIN);
    assert_int_equal(a.ttl_ms, 12000);
    assert_int_equal(a.slot, 100);
    char r[67];
    hex(r, c.head_root);
    char want[128];
    snprintf(want, sizeof want, "/eth/v2/beacon/blocks/%s", r);
    assert_string_equal(bm_str_data(&a.target), want);
    assert_true(a.rewritten);
    /* asked by root: the same entry */
    bm_ck_t byroot = derive(want, NULL, false, &c);
    assert_string_equal(bm_str_data(&byroot.key), bm_str_data(&a.key));
    /* a new head: another key */
    c.head_slot = 101;
    root_of(101, 0, c.head_root);
    bm_ck_t b = derive("/eth/v2/beacon/blocks/head", NULL, false, &c);
    assert_string_not_equal(bm_str_data(&a.key), bm_str_data(&b.key));
    bm_ck_dispose(&a);
    bm_ck_dispose(&b);
    bm_ck_dispose(&byroot);
}

static void test_reorg_changes_slot_key(void **state)
{
    (void)state;
    fake_t f = {0};
    bm_ck_chain_t c = chain(&f);
    bm_ck_t a = derive("/eth/v1/beacon/headers/95", NULL, false, &c);
    assert_int_equal(a.cls, BM_CK_CHAIN);
    f.branch = 1; /* the cluster chain re-orged: slot 95 holds another block */
    root_of(100, 1, c.head_root);
    bm_ck_t b = derive("/eth/v1/beacon/headers/95", NULL, false, &c);
    assert_int_equal(b.cls, BM_CK_CHAIN);
    assert_string_not_equal(bm_str_data(&a.key), bm_str_data(&b.key));
    assert_string_not_equal(bm_str_data(&a.target), bm_str_data(&b.target));
    bm_ck_dispose(&a);
    bm_ck_dispose(&b);
}

static void test_slots_final_empty_future_unreachable(void **state)
{
    (void)state;
    fake_t f = {.empty = 97, .reach = 90};
    bm_ck_chain_t c = chain(&f);
    bm_ck_t fin = derive("/eth/v2/beacon/blocks/80", NULL, false, &c);
    assert_int_equal(fin.cls, BM_CK_IMMUTABLE); /* at the finalized checkpoint's slot */
    assert_false(fin.rewritten);
    bm_ck_t empty = derive("/eth/v2/beacon/blocks/97", NULL, false, &c);
    assert_int_equal(empty.cls, BM_CK_NONE);
    bm_ck_t future = derive("/eth/v2/beacon/blocks/101", NULL, false, &c);
    assert_int_equal(future.cls, BM_CK_NONE);
    bm_ck_t far = derive("/eth/v2/beacon/blocks/85", NULL, false, &c);
    assert_int_equal(far.cls, BM_CK_NONE); /* links do not reach */
    bm_ck_t after = derive("/eth/v2/beacon/blocks/81", NULL, false, &c);
    assert_int_equal(after.cls, BM_CK_NONE);
    bm_ck_t ok = derive("/eth/v2/beacon/blocks/98", NULL, false, &c);
    assert_int_equal(ok.cls, BM_CK_CHAIN);
    bm_ck_dispose(&fin);
    bm_ck_dispose(&ok);
}

static void test_finalized_justified_genesis_states(void **state)
{
    (void)state;
    fake_t f = {0};
    bm_ck_chain_t c = chain(&f);
    bm_ck_t fb = derive("/eth/v2/beacon/blocks/finalized", NULL, false, &c);
    assert_int_equal(fb.cls, BM_CK_IMMUTABLE);
    char r[67];
    hex(r, c.fin_root);
    assert_non_null(strstr(bm_str_data(&fb.target), r));
    bm_ck_t fs = derive("/eth/v1/beacon/states/finalized/fork", NULL, false, &c);
    hex(r, c.fin_state_root);
    assert_non_null(strstr(bm_str_data(&fs.target), r));
    bm_ck_t hs = derive("/eth/v1/beacon/states/head/finality_checkpoints", NULL, false, &c);
    assert_int_equal(hs.cls, BM_CK_CHAIN);
    hex(r, c.head_state_root);
    assert_non_null(strstr(bm_str_data(&hs.target), r));
    bm_ck_t js = derive("/eth/v1/beacon/states/justified/root", NULL, false, &c);
    assert_int_equal(js.cls, BM_CK_CHAIN);
    assert_false(js.rewritten);
    c.just_epoch = 12;
    root_of(96, 0, c.just_root);
    bm_ck_t js2 = derive("/eth/v1/beacon/states/justified/root", NULL, false, &c);
    assert_string_not_equal(bm_str_data(&js.key), bm_str_data(&js2.key));
    bm_ck_t g = derive("/eth/v1/beacon/states/genesis/fork", NULL, false, &c);
    assert_int_equal(g.cls, BM_CK_IMMUTABLE);
    bm_ck_t s90 = derive("/eth/v1/beacon/states/90/root", NULL, false, &c);
    assert_int_equal(s90.cls, BM_CK_NONE); /* a state after finality has no root to send */
    c.has_head_state = false;
    bm_ck_t nohs = derive("/eth/v1/beacon/states/head/root", NULL, false, &c);
    assert_int_equal(nohs.cls, BM_CK_NONE);
    bm_ck_dispose(&fb);
    bm_ck_dispose(&fs);
    bm_ck_dispose(&hs);
    bm_ck_dispose(&js);
    bm_ck_dispose(&js2);
    bm_ck_dispose(&g);
}

static void test_ssz_query_and_routes(void **state)
{
    (void)state;
    fake_t f = {0};
    bm_ck_chain_t c = chain(&f);
    bm_ck_t j = derive("/eth/v2/beacon/blocks/head", NULL, false, &c);
    bm_ck_t s = derive("/eth/v2/beacon/blocks/head", NULL, true, &c);
    assert_string_not_equal(bm_str_data(&j.key), bm_str_data(&s.key));
    bm_ck_t q1 = derive("/eth/v1/beacon/states/genesis/validators", "id=1", false, &c);
    bm_ck_t q2 = derive("/eth/v1/beacon/states/genesis/validators", "id=2", false, &c);
    assert_string_not_equal(bm_str_data(&q1.key), bm_str_data(&q2.key));
    assert_string_equal(bm_str_data(&q1.target), "/eth/v1/beacon/states/genesis/validators?id=1");
    bm_ck_t v = derive("/eth/v1/beacon/states/genesis/validators/7", NULL, false, &c);
    assert_int_equal(v.cls, BM_CK_IMMUTABLE);
    bm_ck_t id = derive("/eth/v1/node/identity", NULL, false, &c);
    assert_int_equal(id.cls, BM_CK_CLOCK);
    assert_int_equal(id.ttl_ms, 2000);
    /* not cacheable: unknown suffixes, duty-ish and pool routes, no id */
    const char *none[] = {
        "/eth/v1/beacon/states/head/unknown", "/eth/v1/node/peers",
        "/eth/v1/beacon/pool/attestations",   "/eth/v2/beacon/blocks/",
        "/eth/v1/beacon/states/genesis",      "/eth/v1/beacon/blocks/head/root/x"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        bm_ck_t n = derive(none[i], NULL, false, &c);
        assert_int_equal(n.cls, BM_CK_NONE);
    }
    bm_ck_t b = derive("/eth/v1/beacon/blob_sidecars/head", NULL, false, &c);
    assert_int_equal(b.route, BM_CK_ROUTE_BLOB);
    bm_ck_dispose(&j);
    bm_ck_dispose(&s);
    bm_ck_dispose(&q1);
    bm_ck_dispose(&q2);
    bm_ck_dispose(&v);
    bm_ck_dispose(&id);
    bm_ck_dispose(&b);
}

static void test_nothing_known(void **state)
{
    (void)state;
    bm_ck_chain_t c = {0};
    bm_ck_t h = derive("/eth/v2/beacon/blocks/head", NULL, false, &c);
    assert_int_equal(h.cls, BM_CK_NONE);
    bm_ck_t s = derive("/eth/v2/beacon/blocks/5", NULL, false, &c);
    assert_int_equal(s.cls, BM_CK_NONE);
    bm_ck_t f = derive("/eth/v2/beacon/blocks/finalized", NULL, false, &c);
    assert_int_equal(f.cls, BM_CK_NONE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_root_is_immutable_and_lowercased),
        cmocka_unit_test(test_head_resolves_to_root_and_changes_with_head),
        cmocka_unit_test(test_reorg_changes_slot_key),
        cmocka_unit_test(test_slots_final_empty_future_unreachable),
        cmocka_unit_test(test_finalized_justified_genesis_states),
        cmocka_unit_test(test_ssz_query_and_routes),
        cmocka_unit_test(test_nothing_known),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
