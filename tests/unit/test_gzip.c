/* SPDX-License-Identifier: MIT */
/* Unit tests of gzip (round trips, refusals, Accept-Encoding) and flags (the top-level
 * finalized / execution_optimistic booleans found and rewritten). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "edge/flags.h"
#include "edge/gzip.h"

static void test_round_trip(void **state)
{
    (void)state;
    size_t n = 200000;
    char *p = malloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = "{\"slot\":\"123\",\"root\":\"0xabc\"}"[i % 30];
    bm_buf_t *z = bm_gzip_compress(p, n, 6);
    assert_non_null(z);
    assert_true(z->len < n / 10);
    assert_int_equal((unsigned char)z->data[0], 0x1f); /* gzip magic */
    assert_int_equal((unsigned char)z->data[1], 0x8b);
    bm_buf_t *back = bm_gzip_inflate(z->data, z->len, n);
    assert_non_null(back);
    assert_int_equal(back->len, n);
    assert_memory_equal(back->data, p, n);
    assert_null(bm_gzip_inflate(z->data, z->len, n - 1)); /* larger than allowed */
    assert_null(bm_gzip_inflate(z->data, z->len / 2, n)); /* truncated */
    assert_null(bm_gzip_inflate(p, 100, n));              /* not gzip */
    bm_buf_unref(z);
    bm_buf_unref(back);
    free(p);
}

static void test_incompressible_not_kept(void **state)
{
    (void)state;
    unsigned char r[4096];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof r; i++) {
        x = x * 1103515245u + 12345u;
        r[i] = (unsigned char)(x >> 16);
    }
    assert_null(bm_gzip_compress(r, sizeof r, 6));
}

static void test_accept_encoding(void **state)
{
    (void)state;
    assert_true(bm_gzip_accepted("gzip"));
    assert_true(bm_gzip_accepted("deflate, GZIP;q=0.5, br"));
    assert_true(bm_gzip_accepted("x-gzip"));
    assert_true(bm_gzip_accepted("*"));
    assert_false(bm_gzip_accepted(NULL));
    assert_false(bm_gzip_accepted("identity"));
    assert_false(bm_gzip_accepted("gzip;q=0"));
    assert_false(bm_gzip_accepted("*, gzip;q=0"));
    assert_false(bm_gzip_accepted("br, deflate"));
}

static void test_flags(void **state)
{
    (void)state;
    const char *b = "{\"version\":\"fulu\",\"execution_optimistic\":true,"
                    "\"data\":{\"finalized\":true,\"x\":\"}\\\"\"},\"finalized\":false}";
    bm_flags_t f;
    assert_true(bm_flags_scan(b, strlen(b), &f));
    assert_true(f.optimistic);
    assert_false(f.finalized); /* the nested one is not the answer's */
    assert_true(f.finalized_off > 0 && f.optimistic_off > 0);
    assert_null(bm_flags_patch(b, strlen(b), &f, 0, 1)); /* nothing changes */
    bm_buf_t *p = bm_flags_patch(b, strlen(b), &f, 1, 0);
    assert_non_null(p);
    const char *want = "{\"version\":\"fulu\",\"execution_optimistic\":false,"
                       "\"data\":{\"finalized\":true,\"x\":\"}\\\"\"},\"finalized\":true}";
    assert_int_equal(p->len, strlen(want));
    assert_memory_equal(p->data, want, p->len);
    bm_buf_unref(p);
    assert_false(bm_flags_scan("[1,2]", 5, &f));
    assert_false(bm_flags_scan("{\"a\":", 5, &f));
    assert_true(bm_flags_scan("{}", 2, &f));
    assert_int_equal(f.finalized_off, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_incompressible_not_kept),
        cmocka_unit_test(test_accept_encoding),
        cmocka_unit_test(test_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
