/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the response cache's byte parsers: cachekey (a request path and
 * query into a class, a key and a target), flags (the top-level `finalized` and
 * `execution_optimistic` of a JSON answer, found and rewritten) and gzip's Accept-Encoding.
 * The input is a path, a newline, then a body ("/eth/v2/beacon/blocks/head\n{...}"); the
 * first byte also picks SSZ or JSON and the chain view.
 *
 * Properties, each checked on its own (a __builtin_trap when one fails):
 *   - derivation is a pure function: twice the same input, the same class, key and target;
 *   - a key always starts with "J " or "S " as asked, and a cacheable target starts with
 *     the route's path prefix and ends with the query as given;
 *   - a flag offset found points at "true" or "false" inside the body, and patching to the
 *     opposite values gives a body whose scan finds the new values at the same places
 *     (shifted by the length difference of an earlier edit), everything else unchanged;
 *   - Accept-Encoding parsing never reads past the string (ASan) and is pure.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "edge/cachekey.h"
#include "edge/flags.h"
#include "edge/gzip.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static int at_slot(void *ud, uint64_t slot, uint8_t out[32])
{
    (void)ud;
    if (slot < 10)
        return -1;
    memset(out, 0, 32);
    out[0] = (uint8_t)(slot / 2); /* every odd slot is empty */
    return 0;
}

static void check_key(const char *path, size_t pn, const char *query, size_t qn, bool ssz,
                      const bm_ck_chain_t *c)
{
    bm_ck_ttls_t ttls = {12000, 2000};
    bm_ck_t a, b;
    if (bm_ck_derive(path, pn, query, qn, ssz, c, &ttls, &a) != 0)
        return;
    CHECK(bm_ck_derive(path, pn, query, qn, ssz, c, &ttls, &b) == 0);
    CHECK(a.cls == b.cls);
    if (a.cls != BM_CK_NONE) {
        CHECK(strcmp(bm_str_data(&a.key), bm_str_data(&b.key)) == 0);
        CHECK(strcmp(bm_str_data(&a.target), bm_str_data(&b.target)) == 0);
        CHECK(memcmp(bm_str_data(&a.key), ssz ? "S " : "J ", 2) == 0);
        const char *t = bm_str_data(&a.target);
        size_t tn = bm_str_len(&a.target);
        CHECK(tn >= 5 && memcmp(t, "/eth/", 5) == 0);
        if (query)
            CHECK(tn > qn && memcmp(t + tn - qn, query, qn) == 0 && t[tn - qn - 1] == '?');
    }
    bm_ck_dispose(&a);
    bm_ck_dispose(&b);
}

static void check_flags(const char *p, size_t n)
{
    bm_flags_t f;
    bool ok = bm_flags_scan(p, n, &f);
    if (!ok)
        return;
    if (f.finalized_off >= 0)
        CHECK(memcmp(p + f.finalized_off, f.finalized ? "true" : "false", f.finalized ? 4 : 5) ==
              0);
    if (f.optimistic_off >= 0)
        CHECK(memcmp(p + f.optimistic_off, f.optimistic ? "true" : "false", f.optimistic ? 4 : 5) ==
              0);
    bm_buf_t *q = bm_flags_patch(p, n, &f, !f.finalized, !f.optimistic);
    if (!q) {
        CHECK(f.finalized_off < 0 && f.optimistic_off < 0);
        return;
    }
    bm_flags_t g;
    CHECK(bm_flags_scan(q->data, q->len, &g));
    CHECK((g.finalized_off >= 0) == (f.finalized_off >= 0));
    CHECK((g.optimistic_off >= 0) == (f.optimistic_off >= 0));
    if (f.finalized_off >= 0)
        CHECK(g.finalized == !f.finalized);
    if (f.optimistic_off >= 0)
        CHECK(g.optimistic == !f.optimistic);
    long delta = (long)q->len - (long)n;
    CHECK(delta >= -2 && delta <= 2);
    bm_buf_unref(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t sel = data[0];
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    const char *nl = memchr(in, '\n', n);
    size_t first = nl ? (size_t)(nl - in) : n;
    /* the first line: a path with an optional query */
    const char *q = memchr(in, '?', first);
    size_t pn = q ? (size_t)(q - in) : first;
    bm_ck_chain_t c = {0};
    if (sel & 1) {
        c.slots_per_epoch = 8;
        c.has_head = true;
        c.head_slot = 100;
        memset(c.head_root, 0xaa, 32);
        c.has_head_state = sel & 2;
        c.has_finalized = true;
        c.fin_epoch = 5;
        c.has_fin_state = sel & 4;
        c.has_justified = sel & 8;
        c.root_at_slot = at_slot;
    }
    check_key(in, pn, q ? q + 1 : NULL, q ? first - pn - 1 : 0, sel & 16, &c);
    if (nl)
        check_flags(nl + 1, n - first - 1);
    /* Accept-Encoding: the first line as a C string */
    char *ae = malloc(first + 1);
    if (ae) {
        memcpy(ae, in, first);
        ae[first] = '\0';
        bool a = bm_gzip_accepted(ae);
        CHECK(a == bm_gzip_accepted(ae));
        free(ae);
    }
    return 0;
}
