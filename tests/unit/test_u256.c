/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for u256: decimal parsing and formatting at the interesting boundaries
 * (2^63, 2^64, 2^128, 2^256-1), arithmetic with overflow detection, and the
 * builder_boost_factor rule. Expected values were computed with Python's big integers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/u256.h"

#define P2_63 "9223372036854775808"
#define P2_64 "18446744073709551616"
#define P2_128 "340282366920938463463374607431768211456"
#define P2_256_M1 "115792089237316195423570985008687907853269984665640564039457584007913129639935"
#define P2_256 "115792089237316195423570985008687907853269984665640564039457584007913129639936"

static bm_u256_t parse_ok(const char *s)
{
    bm_u256_t v;
    assert_int_equal(bm_u256_parse_z(s, &v), 0);
    return v;
}

static void assert_formats_as(const bm_u256_t *v, const char *want)
{
    char buf[BM_U256_DEC_MAX];
    size_t n = bm_u256_format(v, buf);
    assert_string_equal(buf, want);
    assert_int_equal(n, strlen(want));
}

static void test_parse_format_roundtrip(void **state)
{
    (void)state;
    const char *vals[] = {"0",
                          "1",
                          "9",
                          "10",
                          "12345",
                          "18446744073709551615",
                          P2_63,
                          P2_64,
                          P2_128,
                          P2_256_M1,
                          "10000000000000000000",
                          "9999999999999999999",
                          "100000000000000000000000000000000000000"};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        bm_u256_t v = parse_ok(vals[i]);
        assert_formats_as(&v, vals[i]);
    }
}

static void test_parse_limbs(void **state)
{
    (void)state;
    bm_u256_t v = parse_ok(P2_63);
    assert_true(v.w[0] == (1ULL << 63) && v.w[1] == 0 && v.w[2] == 0 && v.w[3] == 0);
    v = parse_ok(P2_64);
    assert_true(v.w[0] == 0 && v.w[1] == 1 && v.w[2] == 0 && v.w[3] == 0);
    v = parse_ok(P2_128);
    assert_true(v.w[0] == 0 && v.w[1] == 0 && v.w[2] == 1 && v.w[3] == 0);
    v = parse_ok(P2_256_M1);
    for (int i = 0; i < 4; i++)
        assert_true(v.w[i] == UINT64_MAX);
    uint64_t small;
    assert_true(bm_u256_to_u64(&(bm_u256_t){{42, 0, 0, 0}}, &small));
    assert_true(small == 42);
    assert_false(bm_u256_to_u64(&v, &small));
}

static void test_parse_leading_zeros(void **state)
{
    (void)state;
    bm_u256_t v = parse_ok("000000000000000000000000000000000000000000000000000000000000000000"
                           "000000000000000000000000000000000042");
    assert_formats_as(&v, "42");
    v = parse_ok("0000");
    assert_true(bm_u256_is_zero(&v));
}

static void test_parse_rejects(void **state)
{
    (void)state;
    bm_u256_t v = bm_u256_from_u64(7);
    const char *bad[] = {"",
                         "-1",
                         "+1",
                         " 1",
                         "1 ",
                         "0x10",
                         "1e3",
                         "1.0",
                         "abc",
                         "12a",
                         "١٢",
                         P2_256,
                         "999999999999999999999999999999999"
                         "999999999999999999999999999999999999"
                         "999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(bm_u256_parse_z(bad[i], &v), BM_EINVAL);
        assert_true(v.w[0] == 7); /* untouched on error */
    }
    assert_int_equal(bm_u256_parse_z(NULL, &v), BM_EINVAL);
    /* Length-delimited: an embedded NUL is a non-digit, a prefix is parsed alone. */
    assert_int_equal(bm_u256_parse("12\0"
                                   "3",
                                   4, &v),
                     BM_EINVAL);
    assert_int_equal(bm_u256_parse("123", 2, &v), 0);
    assert_formats_as(&v, "12");
}

static void test_cmp(void **state)
{
    (void)state;
    const char *ordered[] = {
        "0", "1", "9223372036854775807", P2_63, "18446744073709551615", P2_64, P2_128, P2_256_M1};
    size_t n = sizeof ordered / sizeof *ordered;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            bm_u256_t a = parse_ok(ordered[i]), b = parse_ok(ordered[j]);
            int want = i < j ? -1 : i > j ? 1 : 0;
            assert_int_equal(bm_u256_cmp(&a, &b), want);
        }
    }
    /* A high limb decides even when the low limbs say the opposite. */
    bm_u256_t a = {{UINT64_MAX, 0, 0, 1}}, b = {{0, 0, 1, 0}};
    assert_int_equal(bm_u256_cmp(&a, &b), 1);
}

static void test_add(void **state)
{
    (void)state;
    bm_u256_t a = parse_ok("18446744073709551615"), one = bm_u256_from_u64(1), r;
    assert_int_equal(bm_u256_add(&a, &one, &r), 0);
    assert_formats_as(&r, P2_64);
    a = parse_ok(P2_63);
    assert_int_equal(bm_u256_add(&a, &a, &r), 0);
    assert_formats_as(&r, P2_64);
    /* Carry through every limb up to the top one. */
    a = parse_ok("6277101735386680763835789423207666416102355444464034512895"); /* 2^192-1 */
    assert_int_equal(bm_u256_add(&a, &one, &r), 0);
    assert_true(r.w[0] == 0 && r.w[1] == 0 && r.w[2] == 0 && r.w[3] == 1);
    /* Overflow is reported and the output left alone. */
    a = parse_ok(P2_256_M1);
    r = bm_u256_from_u64(99);
    assert_int_equal(bm_u256_add(&a, &one, &r), BM_ETOOBIG);
    assert_formats_as(&r, "99");
    bm_u256_t zero = bm_u256_from_u64(0);
    assert_int_equal(bm_u256_add(&a, &zero, &r), 0);
    assert_formats_as(&r, P2_256_M1);
    bm_u256_t h =
        parse_ok("57896044618658097711785492504343953926634992332820282019728792003956564819968");
    assert_int_equal(bm_u256_add(&h, &h, &r), BM_ETOOBIG); /* 2^255 + 2^255 */
}

static void test_sub(void **state)
{
    (void)state;
    bm_u256_t a = parse_ok(P2_128), one = bm_u256_from_u64(1), r;
    assert_int_equal(bm_u256_sub(&a, &one, &r), 0);
    assert_formats_as(&r, "340282366920938463463374607431768211455");
    assert_int_equal(bm_u256_sub(&one, &a, &r), BM_EINVAL);
    assert_int_equal(bm_u256_sub(&a, &a, &r), 0);
    assert_true(bm_u256_is_zero(&r));
}

static void test_mul_u64(void **state)
{
    (void)state;
    bm_u256_t a = parse_ok("340282366920938463463374607431768211461"), r; /* 2^128 + 5 */
    assert_int_equal(bm_u256_mul_u64(&a, UINT64_MAX, &r), 0);
    assert_formats_as(&r, "6277101735386680763495507056286727952731214557400814059515");
    a = parse_ok(P2_63);
    assert_int_equal(bm_u256_mul_u64(&a, 2, &r), 0);
    assert_formats_as(&r, P2_64);
    assert_int_equal(bm_u256_mul_u64(&a, 0, &r), 0);
    assert_true(bm_u256_is_zero(&r));
    a = parse_ok(P2_256_M1);
    assert_int_equal(bm_u256_mul_u64(&a, 1, &r), 0);
    assert_formats_as(&r, P2_256_M1);
    r = bm_u256_from_u64(5);
    assert_int_equal(bm_u256_mul_u64(&a, 2, &r), BM_ETOOBIG);
    assert_formats_as(&r, "5");
    /* 2^192 * 2^64 = 2^256: just over. */
    a = parse_ok("6277101735386680763835789423207666416102355444464034512896");
    assert_int_equal(bm_u256_mul_u64(&a, UINT64_MAX, &r), 0);
    assert_int_equal(bm_u256_mul_u64(&r, 2, &r), BM_ETOOBIG);
}

static void test_div_u64(void **state)
{
    (void)state;
    bm_u256_t a = parse_ok(P2_256_M1), q;
    uint64_t rem = 0;
    assert_int_equal(bm_u256_div_u64(&a, 100, &q, &rem), 0);
    assert_formats_as(
        &q, "1157920892373161954235709850086879078532699846656405640394575840079131296399");
    assert_true(rem == 35);
    assert_int_equal(bm_u256_div_u64(&a, 7, &q, &rem), 0);
    assert_true(rem == 1);
    assert_int_equal(bm_u256_div_u64(&a, UINT64_MAX, &q, &rem), 0);
    assert_formats_as(&q, "6277101735386680764176071790128604879584176795969512275969");
    assert_true(rem == 0);
    a = parse_ok(P2_64);
    assert_int_equal(bm_u256_div_u64(&a, 3, &q, &rem), 0);
    assert_formats_as(&q, "6148914691236517205");
    assert_true(rem == 1);
    /* In place, and without a remainder pointer. */
    assert_int_equal(bm_u256_div_u64(&a, 2, &a, NULL), 0);
    assert_formats_as(&a, P2_63);
    q = bm_u256_from_u64(3);
    assert_int_equal(bm_u256_div_u64(&a, 0, &q, &rem), BM_EINVAL);
    assert_formats_as(&q, "3");
}

static void test_boost_rule(void **state)
{
    (void)state;
    bm_u256_t local = parse_ok("1000"), builder = parse_ok("1099");
    /* boost 100: local >= 100 * (1099 / 100) = 1000 */
    assert_true(bm_u256_boost_prefers_local(&local, &builder, 100));
    builder = parse_ok("1100");
    assert_false(bm_u256_boost_prefers_local(&local, &builder, 100));
    /* boost 0: local always wins, even against a huge builder value. */
    builder = parse_ok(P2_256_M1);
    assert_true(bm_u256_boost_prefers_local(&local, &builder, 0));
    /* boost 2^64-1 with a builder value whose boosted product overflows: builder wins. */
    local = parse_ok(P2_256_M1);
    assert_false(bm_u256_boost_prefers_local(&local, &builder, UINT64_MAX));
    /* Without overflow a large boost still scales: (2^128 / 100) * (2^64-1) < 2^256-1. */
    builder = parse_ok(P2_128);
    assert_true(bm_u256_boost_prefers_local(&local, &builder, UINT64_MAX));
    /* boost 90 (prefer local by 10%), values above 2^64. */
    local = parse_ok("18000000000000000000");
    builder = parse_ok("20000000000000000000");
    assert_true(bm_u256_boost_prefers_local(&local, &builder, 90));
    assert_false(bm_u256_boost_prefers_local(&local, &builder, 91));
    /* Values between 2^63 and 2^64 compare correctly (not as signed integers). */
    local = parse_ok("9223372036854775809");
    builder = parse_ok("9223372036854775899");
    assert_true(bm_u256_boost_prefers_local(&local, &builder, 100));
    builder = parse_ok("9223372036854776000");
    assert_false(bm_u256_boost_prefers_local(&local, &builder, 100));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_format_roundtrip),
        cmocka_unit_test(test_parse_limbs),
        cmocka_unit_test(test_parse_leading_zeros),
        cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_cmp),
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_sub),
        cmocka_unit_test(test_mul_u64),
        cmocka_unit_test(test_div_u64),
        cmocka_unit_test(test_boost_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
