/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for json: strict parsing with offsets in the errors, the size and depth
 * guards, 64-bit integer bounds (json-c alone would clamp), quoted-decimal access, hex
 * roots, Bitvector/Bitlist bit counts, the canonical form and its SipHash (checked against
 * the reference vectors of the SipHash paper), and one-line compaction.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"

static struct json_object *parse_ok(const char *s)
{
    struct json_object *o = NULL;
    bm_json_error_t e;
    int rc = bm_json_parse(s, strlen(s), 0, &o, &e);
    if (rc != 0)
        fail_msg("parse of %s failed: %s at %zu", s, e.msg, e.offset);
    return o;
}

static int parse_rc(const char *s, size_t n, bm_json_error_t *e)
{
    struct json_object *o = (struct json_object *)1;
    int rc = bm_json_parse(s, n, 0, &o, e);
    if (rc != 0)
        assert_null(o); /* nothing handed out on failure */
    json_object_put(o);
    return rc;
}

/* ---- parse ------------------------------------------------------------------------- */

static void test_parse_ok(void **state)
{
    (void)state;
    struct json_object *o = parse_ok(" \r\n\t{\"data\":{\"slot\":\"12\"}} \n");
    assert_true(json_object_is_type(o, json_type_object));
    json_object_put(o);
    /* any value at top level (RFC 8259) */
    const char *scalars[] = {
        "123",   "-0", "1.5e-3", "\"s\"",   "true",
        "false", "[]", "{}",     "[[],{}]", "\"\\u00e9\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
        "1E+2"};
    for (size_t i = 0; i < sizeof scalars / sizeof *scalars; i++) {
        o = parse_ok(scalars[i]);
        json_object_put(o);
    }
    /* a null document parses, to NULL */
    bm_json_error_t e;
    assert_int_equal(parse_rc("null", 4, &e), 0);
    /* from a buffer */
    bm_buf_t *b = bm_buf_from_str("{\"a\":[1,2,3]}");
    assert_int_equal(bm_json_parse_buf(b, 0, &o, &e), 0);
    assert_int_equal(json_object_array_length(bm_json_get(o, "/a")), 3);
    json_object_put(o);
    bm_buf_unref(b);
    assert_int_equal(bm_json_parse_buf(NULL, 0, &o, &e), BM_EINVAL);
}

static void test_parse_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t off;
    } bad[] = {
        {"", 0},
        {"   ", 3},
        {"{", 1},
        {"{\"a\":}", 5},
        {"[1,]", 3},
        {"{\"a\" 1}", 5},
        {"'a'", 0},
        {"NaN", 0},
        {"{\"a\":NaN}", 5},
        {"Infinity", 0},
        {"01", 1},
        {"-01", 2},
        {"1.", 2},
        {".5", 0},
        {"-", 1},
        {"1e", 2},
        {"1e+", 3},
        {"+1", 0},
        {"\"a\tb\"", 2},
        {"\"a\nb\"", 2},
        {"\"\\x\"", 1},
        {"\"\\u12G4\"", 1},
        {"\"\\u12", 5},
        {"tru", 0},
        {"nul", 0},
        {"True", 0},
        {"[1] 2", 4},
        {"{\"a\":1}}", 7},
        {"{\"a\":1} x", 8},
        {"]", 0},
        {"\"abc", 4},
        {"{\"a\":1,}", 7},
        {"{1:2}", 1},
        {"[1 2]", 3},
        {"[}", 1},
        {"{]", 1},
        {"[1,2}", 4},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bm_json_error_t e;
        memset(&e, 0, sizeof e);
        int rc = parse_rc(bad[i].in, strlen(bad[i].in), &e);
        if (rc != BM_EINVAL)
            fail_msg("%s: rc %d", bad[i].in, rc);
        assert_true(e.msg[0] != '\0');
        if (e.offset != bad[i].off)
            fail_msg("%s: offset %zu, want %zu (%s)", bad[i].in, e.offset, bad[i].off, e.msg);
    }
    /* a NUL byte inside or after the document */
    bm_json_error_t e;
    assert_int_equal(parse_rc("{\"a\":1}\0", 8, &e), BM_EINVAL);
    assert_int_equal(parse_rc("[\"a\0b\"]", 7, &e), BM_EINVAL);
    assert_int_equal(e.offset, 3);
    /* err may be NULL */
    struct json_object *o;
    assert_int_equal(bm_json_parse("{", 1, 0, &o, NULL), BM_EINVAL);
}

static void test_parse_guards(void **state)
{
    (void)state;
    const char *doc = "{\"a\":\"0123456789\"}";
    size_t n = strlen(doc);
    struct json_object *o;
    bm_json_error_t e;
    assert_int_equal(bm_json_parse(doc, n, n, &o, &e), 0);
    json_object_put(o);
    assert_int_equal(bm_json_parse(doc, n, n - 1, &o, &e), BM_ETOOBIG);
    assert_null(o);
    assert_non_null(strstr(e.msg, "exceeds"));

    /* nesting: BM_JSON_MAX_DEPTH levels are fine, one more is refused */
    char deep[2 * (BM_JSON_MAX_DEPTH + 1) + 1];
    for (int levels = BM_JSON_MAX_DEPTH; levels <= BM_JSON_MAX_DEPTH + 1; levels++) {
        size_t k = 0;
        for (int i = 0; i < levels; i++)
            deep[k++] = '[';
        for (int i = 0; i < levels; i++)
            deep[k++] = ']';
        int rc = bm_json_parse(deep, k, 0, &o, &e);
        if (levels == BM_JSON_MAX_DEPTH) {
            assert_int_equal(rc, 0);
            json_object_put(o);
        } else {
            assert_int_equal(rc, BM_EINVAL);
            assert_int_equal(e.offset, BM_JSON_MAX_DEPTH);
        }
    }
}

static void test_huge_numbers(void **state)
{
    (void)state;
    bm_json_error_t e;
    uint64_t v = 0;
    struct json_object *o = parse_ok("{\"max\":18446744073709551615,\"min\":-9223372036854775808,"
                                     "\"big\":123456789012345678901234567890.5,\"exp\":1e400}");
    assert_int_equal(bm_json_get_u64(o, "/max", &v), 0);
    assert_true(v == UINT64_MAX);
    assert_int_equal(bm_json_get_u64(o, "/min", &v), BM_EINVAL);
    assert_int_equal(json_object_get_int64(bm_json_get(o, "/min")), INT64_MIN);
    assert_int_equal(bm_json_get_u64(o, "/big", &v), BM_EINVAL); /* a double */
    assert_int_equal(bm_json_get_u64(o, "/exp", &v), BM_EINVAL);
    json_object_put(o);
    /* plain integers beyond 64 bits would be clamped by json-c: refused */
    const char *over[] = {"18446744073709551616", "[99999999999999999999999]",
                          "-9223372036854775809", "{\"slot\":184467440737095516150}"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(parse_rc(over[i], strlen(over[i]), &e), BM_EINVAL);
        assert_non_null(strstr(e.msg, "range"));
    }
}

/* ---- access ------------------------------------------------------------------------ */

static void test_get_u64(void **state)
{
    (void)state;
    struct json_object *o = parse_ok(
        "{\"data\":{\"slot\":\"12345\",\"plain\":12345,\"zero\":\"0\",\"max\":"
        "\"18446744073709551615\",\"over\":\"18446744073709551616\",\"empty\":\"\",\"neg\":\"-1\","
        "\"plus\":\"+1\",\"sp\":\" 1\",\"sp2\":\"1 \",\"hex\":\"0x10\",\"frac\":\"1.0\","
        "\"pneg\":-1,\"pfrac\":1.0,\"t\":true,\"nul\":null,\"obj\":{},\"lead\":\"007\","
        "\"p63\":\"9223372036854775808\",\"pp63\":9223372036854775808,\"list\":[\"7\",\"8\"],"
        "\"nulbyte\":\"1\\u00002\",\"a/b\":\"5\",\"m~n\":\"6\"}}");
    static const struct {
        const char *ptr;
        int rc;
        uint64_t want;
    } cases[] = {
        {"/data/slot", 0, 12345},
        {"/data/plain", 0, 12345},
        {"/data/zero", 0, 0},
        {"/data/max", 0, UINT64_MAX},
        {"/data/over", BM_EINVAL, 0},
        {"/data/empty", BM_EINVAL, 0},
        {"/data/neg", BM_EINVAL, 0},
        {"/data/plus", BM_EINVAL, 0},
        {"/data/sp", BM_EINVAL, 0},
        {"/data/sp2", BM_EINVAL, 0},
        {"/data/hex", BM_EINVAL, 0},
        {"/data/frac", BM_EINVAL, 0},
        {"/data/pneg", BM_EINVAL, 0},
        {"/data/pfrac", BM_EINVAL, 0},
        {"/data/t", BM_EINVAL, 0},
        {"/data/nul", BM_EINVAL, 0},
        {"/data/obj", BM_EINVAL, 0},
        {"/data/lead", 0, 7},
        {"/data/p63", 0, 9223372036854775808ULL},
        {"/data/pp63", 0, 9223372036854775808ULL},
        {"/data/list/1", 0, 8},
        {"/data/list/2", BM_ENOTFOUND, 0},
        {"/data/nulbyte", BM_EINVAL, 0},
        {"/data/a~1b", 0, 5},
        {"/data/m~0n", 0, 6},
        {"/data/missing", BM_ENOTFOUND, 0},
        {"/nope/slot", BM_ENOTFOUND, 0},
        {"data/slot", BM_ENOTFOUND, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint64_t v = 0xdead;
        int rc = bm_json_get_u64(o, cases[i].ptr, &v);
        if (rc != cases[i].rc)
            fail_msg("%s: rc %d, want %d", cases[i].ptr, rc, cases[i].rc);
        if (rc == 0 && v != cases[i].want)
            fail_msg("%s: %llu", cases[i].ptr, (unsigned long long)v);
        if (rc != 0 && v != 0xdead)
            fail_msg("%s: output written on error", cases[i].ptr);
    }
    uint64_t v;
    assert_int_equal(bm_json_get_u64(NULL, "/x", &v), BM_ENOTFOUND);
    assert_int_equal(bm_json_parse_u64("12", 1, &v), 0);
    assert_true(v == 1);
    json_object_put(o);
}

/* Field lookups find what json-c's own json_pointer_get finds, for members, arrays,
 * nulls, escapes, empty and long names, and paths through values that are not objects. */
static void test_get_matches_json_pointer(void **state)
{
    (void)state;
    struct json_object *o =
        parse_ok("{\"data\":{\"slot\":\"5\",\"list\":[{\"a\":1},2],\"nul\":null,\"\":{\"e\":3},"
                 "\"a/b\":4,\"m~n\":5,\"s\":\"x\",\"a_member_name_longer_than_sixty_four_bytes_"
                 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\":6},\"top\":7}");
    const char *ptrs[] = {
        "",
        "/",
        "/data",
        "/data/slot",
        "/data/list",
        "/data/list/0",
        "/data/list/0/a",
        "/data/list/1",
        "/data/list/2",
        "/data/list/-",
        "/data/list/01",
        "/data/nul",
        "/data/nul/x",
        "/data/",
        "/data//e",
        "/data/a~1b",
        "/data/m~0n",
        "/data/a/b",
        "/data/s/x",
        "/data/missing",
        "/data/missing/x",
        "/top",
        "/top/x",
        "data",
        "//",
        "/data/a_member_name_longer_than_sixty_four_bytes_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    };
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) {
        struct json_object *want = NULL;
        bool found = json_pointer_get(o, ptrs[i], &want) == 0;
        struct json_object *got = bm_json_get(o, ptrs[i]);
        if (got != (found ? want : NULL))
            fail_msg("%s: a different value than json_pointer_get's", ptrs[i]);
        bool b;
        int rc = bm_json_get_bool(o, ptrs[i], &b);
        if ((rc == BM_ENOTFOUND) == found)
            fail_msg("%s: found %d, json_pointer_get %d", ptrs[i], rc != BM_ENOTFOUND, found);
    }
    json_object_put(o);
}

static void test_get_other(void **state)
{
    (void)state;
    struct json_object *o = parse_ok(
        "{\"data\":{\"beacon_block_root\":\"0xCF8E0d4e9587369b2301d0790347320302cc0943d5a1884560"
        "367e8208d920f2\",\"short\":\"0xcf8e\",\"n\":5,\"b\":false,\"s\":\"x\",\"nul\":null}}");
    assert_string_equal(bm_json_get_str(o, "/data/s"), "x");
    assert_null(bm_json_get_str(o, "/data/n"));
    assert_null(bm_json_get_str(o, "/data/missing"));
    assert_null(bm_json_get(o, "/data/nul"));
    assert_non_null(bm_json_get(o, ""));
    bool b = true;
    assert_int_equal(bm_json_get_bool(o, "/data/b", &b), 0);
    assert_false(b);
    assert_int_equal(bm_json_get_bool(o, "/data/s", &b), BM_EINVAL);
    assert_int_equal(bm_json_get_bool(o, "/data/nul", &b), BM_EINVAL);
    assert_int_equal(bm_json_get_bool(o, "/data/zz", &b), BM_ENOTFOUND);
    uint8_t root[32];
    assert_int_equal(bm_json_get_root(o, "/data/beacon_block_root", root), 0);
    assert_int_equal(root[0], 0xcf);
    assert_int_equal(root[31], 0xf2);
    assert_int_equal(bm_json_get_root(o, "/data/short", root), BM_EINVAL);
    assert_int_equal(bm_json_get_root(o, "/data/n", root), BM_EINVAL);
    assert_int_equal(bm_json_get_root(o, "/data/zz", root), BM_ENOTFOUND);
    json_object_put(o);
}

/* ---- hex --------------------------------------------------------------------------- */

#define ROOT_LC "0xcf8e0d4e9587369b2301d0790347320302cc0943d5a1884560367e8208d920f2"
#define ROOT_UC "0xCF8E0D4E9587369B2301D0790347320302CC0943D5A1884560367E8208D920F2"

static void test_hex_roots(void **state)
{
    (void)state;
    uint8_t r[32], r2[32];
    assert_int_equal(bm_hex_to_root(ROOT_LC, r), 0);
    assert_int_equal(bm_hex_to_root(ROOT_UC, r2), 0);
    assert_memory_equal(r, r2, 32);
    char s[BM_ROOT_HEX_LEN + 1];
    bm_root_to_hex(r, s);
    assert_string_equal(s, ROOT_LC);
    const char *bad[] = {"",
                         "0x",
                         "cf8e0d4e9587369b2301d0790347320302cc0943d5a1884560367e8208d920f2",
                         "0Xcf8e0d4e9587369b2301d0790347320302cc0943d5a1884560367e8208d920f2",
                         "0xcf8e0d4e9587369b2301d0790347320302cc0943d5a1884560367e8208d920f",
                         "0xcf8e0d4e9587369b2301d0790347320302cc0943d5a1884560367e8208d920f2a",
                         "0xcf8e0d4e9587369b2301d0790347320302cc0943d5a1884560367e8208d920f2aa",
                         "0xgf8e0d4e9587369b2301d0790347320302cc0943d5a1884560367e8208d920f2",
                         " 0xcf8e0d4e9587369b2301d0790347320302cc0943d5a1884560367e8208d920f2"};
    memset(r2, 0x11, 32);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(bm_hex_to_root(bad[i], r2), BM_EINVAL);
        assert_int_equal(r2[0], 0x11);
        assert_false(bm_hex_root_eq(bad[i], ROOT_LC));
    }
    assert_int_equal(bm_hex_to_root(NULL, r2), BM_EINVAL);
    assert_true(bm_hex_root_eq(ROOT_LC, ROOT_UC));
    assert_false(bm_hex_root_eq(
        ROOT_LC, "0xcf8e0d4e9587369b2301d0790347320302cc0943d5a1884560367e8208d920f3"));
    assert_false(bm_hex_root_eq(NULL, NULL));

    uint8_t buf[4];
    size_t n = 99;
    assert_int_equal(bm_hex_decode("0x", 2, buf, 4, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(bm_hex_decode("0x0aFf", 6, buf, 4, &n), 0);
    assert_int_equal(n, 2);
    assert_true(buf[0] == 0x0a && buf[1] == 0xff);
    assert_int_equal(bm_hex_decode("0x0102030405", 12, buf, 4, &n), BM_ETOOBIG);
    assert_int_equal(bm_hex_decode("0x012", 5, buf, 4, &n), BM_EINVAL);
    assert_int_equal(bm_hex_decode("0x0g", 4, buf, 4, &n), BM_EINVAL);
    /* a bad digit anywhere, high or low nibble, is found by the one decoding pass */
    assert_int_equal(bm_hex_decode("0xg0", 4, buf, 4, &n), BM_EINVAL);
    assert_int_equal(bm_hex_decode("0x0a0bG0", 8, buf, 4, &n), BM_EINVAL);
    assert_int_equal(bm_hex_decode("0x0a0b0c\xff"
                                   "0",
                                   10, buf, 4, &n),
                     BM_EINVAL);
    assert_int_equal(bm_hex_decode("0x0a0b0c0:", 10, buf, 4, &n), BM_EINVAL);
    assert_int_equal(bm_hex_decode("0xzz0102030405", 14, buf, 4, &n), BM_EINVAL); /* not hex */
}

static void test_hex_bits(void **state)
{
    (void)state;
    static const struct {
        const char *hex;
        int rc_vec;
        size_t vec;
        int rc_list;
        size_t list;
        size_t len;
    } cases[] = {
        {"0x0f01", 0, 5, 0, 4, 8},
        {"0x0F01", 0, 5, 0, 4, 8},
        {"0x01", 0, 1, 0, 0, 0},
        {"0xff03", 0, 10, 0, 9, 9},
        {"0xFF", 0, 8, 0, 7, 7},
        {"0x80", 0, 1, 0, 0, 7},
        {"0xffffffffffffffffffffffffffffffff", 0, 128, 0, 127, 127},
        {"0x0000000000000001", 0, 1, 0, 0, 56},
        {"0x00", 0, 0, BM_EINVAL, 0, 0},
        {"0x0100", 0, 1, BM_EINVAL, 0, 0},
        {"0x", BM_EINVAL, 0, BM_EINVAL, 0, 0},
        {"0x0", BM_EINVAL, 0, BM_EINVAL, 0, 0},
        {"0x0f0", BM_EINVAL, 0, BM_EINVAL, 0, 0},
        {"0X0f", BM_EINVAL, 0, BM_EINVAL, 0, 0},
        {"0f01", BM_EINVAL, 0, BM_EINVAL, 0, 0},
        {"0xzz", BM_EINVAL, 0, BM_EINVAL, 0, 0},
        {"", BM_EINVAL, 0, BM_EINVAL, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t c = 999, len = 999;
        int rc = bm_json_hex_bits_set(cases[i].hex, &c);
        if (rc != cases[i].rc_vec || (rc == 0 && c != cases[i].vec))
            fail_msg("bitvector %s: rc %d count %zu", cases[i].hex, rc, c);
        c = 999;
        rc = bm_json_hex_bitlist_bits_set(cases[i].hex, &c, &len);
        if (rc != cases[i].rc_list || (rc == 0 && (c != cases[i].list || len != cases[i].len)))
            fail_msg("bitlist %s: rc %d count %zu len %zu", cases[i].hex, rc, c, len);
    }
    size_t c;
    assert_int_equal(bm_json_hex_bits_set(NULL, &c), BM_EINVAL);
    assert_int_equal(bm_json_hex_bitlist_bits_set("0x0f01", &c, NULL), 0);
    assert_int_equal(c, 4);
}

/* ---- canonical form ---------------------------------------------------------------- */

static char *canonical(const char *doc)
{
    struct json_object *o = parse_ok(doc);
    bm_str_t s = BM_STR_INIT;
    assert_int_equal(bm_json_canonical_string(o, &s), 0);
    char *r = strdup(bm_str_data(&s));
    bm_str_dispose(&s);
    json_object_put(o);
    return r;
}

static uint64_t hash_of(const char *doc, const uint8_t *key)
{
    struct json_object *o = parse_ok(doc);
    uint64_t h = 0;
    assert_int_equal(bm_json_canonical_hash(o, key, &h), 0);
    json_object_put(o);
    return h;
}

static void test_canonical(void **state)
{
    (void)state;
    char *c = canonical("{ \"g\": 1.50, \"f\" : 18446744073709551615, \"e\":-5, \"d\":true,\n"
                        "  \"c\":null, \"b\":\"s\\u0041\\/\", \"a\":[{\"y\":2,\"x\":1}, []],"
                        "  \"B\": {\"z\": {}, \"\\u00e9\": \"\\n\\u0001\"} }");
    assert_string_equal(c, "{\"B\":{\"z\":{},\"\xc3\xa9\":\"\\n\\u0001\"},\"a\":[{\"x\":1,"
                           "\"y\":2},[]],\"b\":\"sA/\",\"c\":null,\"d\":true,\"e\":-5,"
                           "\"f\":18446744073709551615,\"g\":1.50}");
    free(c);

    /* key order and whitespace do not matter */
    const char *a = "{\"slot\":\"10\",\"block\":\"0x9a\",\"execution_optimistic\":false,"
                    "\"nested\":{\"x\":[1,2,{\"p\":1,\"q\":2}],\"y\":\"z\"}}";
    const char *b = "{ \"execution_optimistic\" : false ,\n \"nested\": {\"y\":\"z\",\"x\":[1, 2,"
                    " {\"q\":2,\"p\":1}]},\r\n\t\"block\": \"0x9a\", \"slot\": \"10\" }";
    assert_true(hash_of(a, NULL) == hash_of(b, NULL));
    char *ca = canonical(a), *cb = canonical(b);
    assert_string_equal(ca, cb);
    free(ca);
    free(cb);
    /* an escape and the character it stands for agree */
    assert_true(hash_of("{\"k\":\"A\"}", NULL) == hash_of("{\"k\":\"\\u0041\"}", NULL));

    /* different values differ */
    const char *others[] = {
        "{\"slot\":\"11\",\"block\":\"0x9a\",\"execution_optimistic\":false,"
        "\"nested\":{\"x\":[1,2,{\"p\":1,\"q\":2}],\"y\":\"z\"}}",
        "{\"slot\":\"10\",\"block\":\"0x9a\",\"execution_optimistic\":true,"
        "\"nested\":{\"x\":[1,2,{\"p\":1,\"q\":2}],\"y\":\"z\"}}",
        "{\"slot\":\"10\",\"block\":\"0x9a\",\"execution_optimistic\":false,"
        "\"nested\":{\"x\":[2,1,{\"p\":1,\"q\":2}],\"y\":\"z\"}}", /* array order matters */
        "{\"slot\":10,\"block\":\"0x9a\",\"execution_optimistic\":false,"
        "\"nested\":{\"x\":[1,2,{\"p\":1,\"q\":2}],\"y\":\"z\"}}", /* a number is not a string */
        "{\"slot\":\"10\",\"block\":\"0x9a\",\"execution_optimistic\":false,"
        "\"nested\":{\"x\":[1,2,{\"p\":1,\"q\":2}],\"Y\":\"z\"}}", /* keys are case-sensitive */
        "{\"slot\":\"10\",\"block\":\"0x9a\",\"execution_optimistic\":false}",
    };
    uint64_t h = hash_of(a, NULL);
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        assert_true(hash_of(others[i], NULL) != h);
    /* the key changes the hash */
    uint8_t key[16] = {1};
    assert_true(hash_of(a, key) != h);
    assert_true(hash_of(a, key) == hash_of(b, key));
    /* scalars and null */
    c = canonical(" \"x\" ");
    assert_string_equal(c, "\"x\"");
    free(c);
    bm_str_t s = BM_STR_INIT;
    assert_int_equal(bm_json_canonical_string(NULL, &s), 0);
    assert_string_equal(bm_str_data(&s), "null");
    bm_str_dispose(&s);
}

static void test_siphash_vectors(void **state)
{
    (void)state;
    /* SipHash paper, appendix A, and the reference implementation's vectors.h: key
     * 00..0f, messages 00..(n-1). */
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    assert_true(bm_json_siphash(key, msg, 0) == 0x726fdb47dd0e0e31ULL);
    assert_true(bm_json_siphash(key, msg, 15) == 0xa129ca6149be45e5ULL);
    /* every length gives a different hash (all block/tail splits are exercised) */
    for (size_t n = 1; n < 64; n++)
        assert_true(bm_json_siphash(key, msg, n) != bm_json_siphash(key, msg, n - 1));
}

/* ---- compact ----------------------------------------------------------------------- */

static void test_compact(void **state)
{
    (void)state;
    bm_str_t s = BM_STR_INIT;
    const char *pretty = "{\n  \"version\" : \"gloas\",\r\n  \"data\" : {\n    \"slot\" : \"10\",\n"
                         "    \"text\" : \"a b\\n\\\"c\\\" \\u00e9\",\n    \"list\" : [ 1 , 2.50 ,"
                         " -3e+2 , true , null , { } , [ ] ]\n  }\n}\n";
    bm_str_puts(&s, "data: ");
    assert_int_equal(bm_json_compact(pretty, strlen(pretty), &s, NULL), 0);
    assert_string_equal(bm_str_data(&s),
                        "data: {\"version\":\"gloas\",\"data\":{\"slot\":\"10\",\"text\":\"a "
                        "b\\n\\\"c\\\" \\u00e9\",\"list\":[1,2.50,-3e+2,true,null,{},[]]}}");
    assert_null(strchr(bm_str_data(&s), '\n'));
    assert_null(strchr(bm_str_data(&s), '\r'));

    /* already compact input comes back byte for byte */
    bm_str_clear(&s);
    const char *head = "{\"slot\":\"10\",\"block\":\"0x9a2fefd2fdb57f74993c7780ea5b9030d2897b615b8"
                       "9f808011ca5aebed54eaf\",\"execution_optimistic\":false}";
    assert_int_equal(bm_json_compact(head, strlen(head), &s, NULL), 0);
    assert_string_equal(bm_str_data(&s), head);

    /* malformed input: nothing appended */
    bm_str_clear(&s);
    bm_str_puts(&s, "keep");
    bm_json_error_t e;
    const char *bad[] = {"{\"a\":1", "{\"a\":\"x\ny\"}", "[1,]", "", "{} {}", "[01]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(bm_json_compact(bad[i], strlen(bad[i]), &s, &e), BM_EINVAL);
        assert_string_equal(bm_str_data(&s), "keep");
    }
    assert_int_equal(bm_json_compact(NULL, 0, &s, &e), BM_EINVAL);
    bm_str_dispose(&s);
}

/* pick reads what the tree holds: every pointer gives the same code and value both ways. */
static void pick_agrees(const char *doc, const char *const *ptrs, size_t n)
{
    bm_json_pick_t f[BM_JSON_PICK_MAX];
    for (size_t k = 0; k < n; k++)
        f[k].ptr = ptrs[k];
    assert_int_equal(bm_json_pick(doc, strlen(doc), 0, f, n), 0);
    struct json_object *o = parse_ok(doc);
    for (size_t k = 0; k < n; k++) {
        uint64_t u1 = 0, u2 = 0;
        int r1 = bm_json_pick_u64(&f[k], &u1), r2 = bm_json_get_u64(o, ptrs[k], &u2);
        if (r1 != r2 || (r1 == 0 && u1 != u2))
            fail_msg("%s in %s: u64 %d/%llu, tree %d/%llu", ptrs[k], doc, r1,
                     (unsigned long long)u1, r2, (unsigned long long)u2);
        uint8_t h1[32], h2[32];
        r1 = bm_json_pick_root(&f[k], h1);
        r2 = bm_json_get_root(o, ptrs[k], h2);
        if (r1 != r2 || (r1 == 0 && memcmp(h1, h2, 32) != 0))
            fail_msg("%s in %s: root %d, tree %d", ptrs[k], doc, r1, r2);
        bool b1 = false, b2 = false;
        r1 = bm_json_pick_bool(&f[k], &b1);
        r2 = bm_json_get_bool(o, ptrs[k], &b2);
        if (r1 != r2 || (r1 == 0 && b1 != b2))
            fail_msg("%s in %s: bool %d, tree %d", ptrs[k], doc, r1, r2);
    }
    json_object_put(o);
}

static void test_pick(void **state)
{
    (void)state;
    const char *root = "\"0x"
                       "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF\"";
    char doc[1024];
    /* the value read is the one json-c keeps: the last member of a name; under an object
     * named twice, only what the last one holds */
    snprintf(doc, sizeof doc,
             "{\"data\":{\"slot\":\"1\",\"slot\":\"2\",\"source\":{\"epoch\":\"3\"},"
             "\"source\":{\"root\":%s},\"r\":%s}, \"top\":{\"a\":true}}",
             root, root);
    bm_json_pick_t f[] = {{.ptr = "/data/slot"},
                          {.ptr = "/data/source/epoch"},
                          {.ptr = "/data/source/root"},
                          {.ptr = "/top/a"}};
    assert_int_equal(bm_json_pick(doc, strlen(doc), 0, f, 4), 0);
    uint64_t u;
    assert_int_equal(bm_json_pick_u64(&f[0], &u), 0);
    assert_int_equal(u, 2);
    assert_int_equal(bm_json_pick_u64(&f[1], &u), BM_ENOTFOUND);
    uint8_t r[32];
    assert_int_equal(bm_json_pick_root(&f[2], r), 0);
    assert_int_equal(r[31], 0xff);
    bool b = false;
    assert_int_equal(bm_json_pick_bool(&f[3], &b), 0);
    assert_true(b);

    const char *const ptrs[] = {"/data/slot",         "/data/index", "/data/r", "/data/source/root",
                                "/data/source/epoch", "/data",       "/top/a",  "/data/list"};
    const size_t np = sizeof ptrs / sizeof ptrs[0];
    pick_agrees(doc, ptrs, np);
    const char *const docs[] = {
        "{\"data\":{\"slot\":12,\"index\":-0,\"r\":1.0,\"list\":[{\"slot\":\"1\"}]}}",
        "{\"data\":{\"slot\":-1,\"index\":1e2,\"r\":null,\"source\":[1]},\"top\":{\"a\":false}}",
        "{\"data\":{\"slot\":18446744073709551615,\"index\":\"18446744073709551616\"}}",
        "{\"data\":{\"slot\":\"\",\"index\":\" 1\",\"r\":\"0x12\",\"\":{\"x\":\"4\"}}}",
        "{\"\":{\"\":1},\"data\":null}",
        "{\"data\":{\"slot\":\"1\"},\"data\":7}",
        "{\"data\":{\"slot\":\"1\"},\"data\":{}}",
        "[{\"data\":{\"slot\":\"1\"}}]",
        "\"data\"",
        "  {\"data\" : { \"slot\" : \"9\" , \"index\" : { } } }  ",
        "{\"data\":{\"source\":{\"root\":{\"a\":[]}},\"top\":{\"a\":true}},\"top\":{\"a\":\"true\"}"
        "}",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++)
        pick_agrees(docs[i], ptrs, np);

    /* escapes are the tree's to read; a text bm_json_parse refuses is refused */
    const char *esc = "{\"data\":{\"slot\":\"1\\u0032\"}}";
    assert_int_equal(bm_json_pick(esc, strlen(esc), 0, f, 1), 1);
    const char *const bad[] = {
        "{\"data\":{\"slot\":\"1\",}}", "{\"data\":01}", "", "{} x", "{\"a\":\"\x01\"}",
        "{\"data\":{\"slot\":1e}}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(bm_json_pick(bad[i], strlen(bad[i]), 0, f, 1), BM_EINVAL);
        assert_null(f[0].at);
    }
    assert_int_equal(bm_json_pick("{}", 2, 1, f, 1), BM_ETOOBIG);
    /* pointers pick cannot follow */
    bm_json_pick_t g[] = {{.ptr = ""},  {.ptr = "/a~1b"},    {.ptr = "/a/b/c/d/e/f/g/h/i"},
                          {.ptr = "/"}, {.ptr = "/data//x"}, {.ptr = "/data/0"}};
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(bm_json_pick("{}", 2, 0, &g[i], 1), BM_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ok),
        cmocka_unit_test(test_parse_malformed),
        cmocka_unit_test(test_parse_guards),
        cmocka_unit_test(test_huge_numbers),
        cmocka_unit_test(test_get_u64),
        cmocka_unit_test(test_get_other),
        cmocka_unit_test(test_hex_roots),
        cmocka_unit_test(test_hex_bits),
        cmocka_unit_test(test_canonical),
        cmocka_unit_test(test_siphash_vectors),
        cmocka_unit_test(test_compact),
        cmocka_unit_test(test_pick),
        cmocka_unit_test(test_get_matches_json_pointer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
