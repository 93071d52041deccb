/* SPDX-License-Identifier: MIT */
/* Unit tests of canon: canonical JSON and the equality of consensus reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "read/canon.h"

static void assert_canon(const char *in, const char *want)
{
    bm_str_t s = BM_STR_INIT;
    int rc = bm_canon_json(in, strlen(in), &s);
    if (rc != 0)
        fail_msg("%s: refused (%d)", in, rc);
    assert_string_equal(bm_str_data(&s), want);
    bm_str_dispose(&s);
}

static void assert_refused(const char *in)
{
    bm_str_t s = BM_STR_INIT;
    if (bm_canon_json(in, strlen(in), &s) != BM_EINVAL)
        fail_msg("%s: accepted", in);
    bm_str_dispose(&s);
}

static bool eq(const char *a, const char *b)
{
    return bm_canon_equal(a, strlen(a), b, strlen(b), false);
}

static void test_keys_sorted_whitespace_gone(void **state)
{
    (void)state;
    assert_canon(" { \"b\" : 1 , \"a\" : [ true , null , false ] } ",
                 "{\"a\":[true,null,false],\"b\":1}");
    assert_canon("{\"z\":{\"y\":1,\"x\":2},\"a\":{}}", "{\"a\":{},\"z\":{\"x\":2,\"y\":1}}");
    assert_canon("[]", "[]");
}

static void test_numbers_normalised(void **state)
{
    (void)state;
    assert_canon("1.50", "15e-1");
    assert_canon("15e-1", "15e-1");
    assert_canon("0.0", "0");
    assert_canon("-0", "0");
    assert_canon("100", "1e2");
    assert_canon("1E+2", "1e2");
    assert_canon("-12.5e1", "-125");
    /* big integers keep every digit */
    assert_canon("123456789012345678901234567890", "12345678901234567890123456789e1");
    assert_true(eq("{\"v\":1.0}", "{\"v\":1}"));
    assert_false(eq("{\"v\":1.0}", "{\"v\":1.01}"));
}

static void test_strings_one_spelling(void **state)
{
    (void)state;
    assert_canon("\"\\u0041\\/\\n\"", "\"A/\\u000a\"");
    assert_canon("\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\"");
    /* hex data in either case is the same bytes; other text keeps its case */
    assert_true(eq("{\"root\":\"0xABcd\"}", "{\"root\":\"0xabcd\"}"));
    assert_false(eq("{\"name\":\"Abc\"}", "{\"name\":\"abc\"}"));
    /* quoted decimals are strings: compared as written */
    assert_false(eq("{\"slot\":\"01\"}", "{\"slot\":\"1\"}"));
}

/* Hex keys are sorted as they are written (lower case): sorted as read, the form of the input
 * fuzz_canon found was not its own form, and the same object with the hex key in either case
 * came out in two orders, unequal. */
static void test_hex_keys_sorted_as_written(void **state)
{
    (void)state;
    const char *found = "{\"0xrr\":\"\",\"0X\":\"\",\"0Xr\":\"0X:\"}";
    const char *form = "{\"0Xr\":\"0X:\",\"0x\":\"\",\"0xrr\":\"\"}";
    assert_canon(found, form);
    assert_canon(form, form);
    assert_true(eq("{\"0X\":1,\"0Xr\":2}", "{\"0x\":1,\"0Xr\":2}"));
    assert_canon("{\"0xAB\":1,\"0xa\":2}", "{\"0xa\":2,\"0xab\":1}");
}

static void test_two_clients_agree(void **state)
{
    (void)state;
    const char *a = "{\"execution_optimistic\":false,\"finalized\":true,\"data\":[{\"index\":\"1\","
                    "\"balance\":\"32000000000\"}]}";
    const char *b = "{\n  \"data\" : [ { \"balance\" : \"32000000000\", \"index\" : \"1\" } ],\n"
                    "  \"finalized\" : true,\n  \"execution_optimistic\" : false\n}\n";
    assert_true(eq(a, b));
    const char *c = "{\"execution_optimistic\":false,\"finalized\":true,\"data\":[{\"index\":\"1\","
                    "\"balance\":\"31000000000\"}]}";
    assert_false(eq(a, c));
    /* SSZ: bytes only */
    assert_true(bm_canon_equal("\x01\x02", 2, "\x01\x02", 2, true));
    assert_false(bm_canon_equal("{\"a\":1}", 7, "{ \"a\":1}", 8, true));
}

static void test_malformed_refused(void **state)
{
    (void)state;
    assert_refused("");
    assert_refused("{");
    assert_refused("{\"a\":1,}");
    assert_refused("[1,]");
    assert_refused("01");
    assert_refused("1.");
    assert_refused("\"\\x\"");
    assert_refused("\"\\udc00\"");
    assert_refused("\"a\nb\"");
    assert_refused("nul");
    assert_refused("1 2");
    char deep[200];
    memset(deep, '[', sizeof deep);
    assert_int_equal(bm_canon_equal(deep, sizeof deep, deep, sizeof deep, false), true);
    bm_str_t s = BM_STR_INIT;
    assert_int_equal(bm_canon_json(deep, sizeof deep, &s), BM_EINVAL);
    bm_str_dispose(&s);
    /* malformed text equals only itself */
    assert_false(eq("{", "{ "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_sorted_whitespace_gone),
        cmocka_unit_test(test_numbers_normalised),
        cmocka_unit_test(test_strings_one_spelling),
        cmocka_unit_test(test_hex_keys_sorted_as_written),
        cmocka_unit_test(test_two_clients_agree),
        cmocka_unit_test(test_malformed_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
