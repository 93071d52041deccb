/* SPDX-License-Identifier: MIT */
/*
 * test_hdrs: header lists as the server and the client keep them, the one SSZ media type
 * check every policy uses, the hop-by-hop set (decided by length and name whatever the
 * case) and the case-insensitive comparison of names.
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "base/hdrs.h"

static const char *const hop[] = {
    "te",
    "host",
    "expect",
    "trailer",
    "upgrade",
    "connection",
    "keep-alive",
    "content-length",
    "proxy-connection",
    "transfer-encoding",
    "proxy-authenticate",
    "proxy-authorization",
};

static bool in_list(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
        if (strlen(hop[i]) == len && strncasecmp(hop[i], name, len) == 0)
            return true;
    return false;
}

static void test_hop_by_hop(void **state)
{
    (void)state;
    char up[64];
    for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++) {
        size_t n = strlen(hop[i]);
        assert_true(bm_header_is_hop_by_hop(hop[i], n));
        for (size_t j = 0; j < n; j++)
            up[j] = (char)toupper((unsigned char)hop[i][j]);
        assert_true(bm_header_is_hop_by_hop(up, n));
        /* a prefix, or the name with one byte changed, is not */
        assert_false(bm_header_is_hop_by_hop(hop[i], n - 1));
        memcpy(up, hop[i], n);
        up[n - 1] ^= 0x01;
        assert_false(bm_header_is_hop_by_hop(up, n));
    }
    /* fields that every answer carries, and names of every length from 0 to 24 */
    const char *others[] = {"server",   "date",        "content-type", "eth-consensus-version",
                            "x-custom", "connections", "te-",          "authorization",
                            ""};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        assert_false(bm_header_is_hop_by_hop(others[i], strlen(others[i])));
    const char *s = "proxy-authorization-and-more";
    for (size_t n = 0; n <= strlen(s); n++)
        assert_true(bm_header_is_hop_by_hop(s, n) == in_list(s, n));
}

/* bm_ascii_case_eq agrees with strncasecmp (C locale) on every pair of non-NUL bytes, at
 * every position of a longer string. */
static void test_ascii_case_eq(void **state)
{
    (void)state;
    char a[4] = "x-y", b[4] = "x-y";
    for (int x = 1; x < 256; x++) {
        for (int y = 1; y < 256; y++) {
            for (size_t at = 0; at < 3; at++) {
                memcpy(a, "x-y", 3);
                memcpy(b, "x-y", 3);
                a[at] = (char)x;
                b[at] = (char)y;
                bool want = strncasecmp(a, b, 3) == 0;
                assert_true(bm_ascii_case_eq(a, b, 3) == want);
            }
        }
    }
    assert_true(bm_ascii_case_eq("Content-Length", "content-length", 14));
    assert_false(bm_ascii_case_eq("Content-Lengtx", "content-length", 14));
    assert_true(bm_ascii_case_eq("", "", 0));
    /* a lookup finds a field whatever its case, and only a whole name */
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    assert_int_equal(bm_hdrs_add_z(&h, "Content-Type", "application/json"), 0);
    assert_int_equal(bm_hdrs_add_z(&h, "X-A", "1"), 0);
    assert_string_equal(bm_hdrs_get(&h, "content-type"), "application/json");
    assert_string_equal(bm_hdrs_get(&h, "x-a"), "1");
    assert_null(bm_hdrs_get(&h, "content-typ"));
    assert_null(bm_hdrs_get(&h, "x-ab"));
    assert_true(bm_header_listed_in_connection("keep-alive, X-A", "x-a", 3));
    assert_false(bm_header_listed_in_connection("keep-alive, X-AB", "x-a", 3));
    bm_hdrs_dispose(&h);
}

static void test_get_is_case_insensitive(void **state)
{
    (void)state;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    assert_int_equal(bm_hdrs_add_z(&h, "Content-Type", "application/json"), 0);
    assert_int_equal(bm_hdrs_add_z(&h, "content-type", "text/plain"), 0);
    assert_string_equal(bm_hdrs_get(&h, "CONTENT-TYPE"), "application/json"); /* the first */
    assert_null(bm_hdrs_get(&h, "Accept"));
    assert_int_equal(bm_hdrs_remove(&h, "Content-type"), 2);
    assert_null(bm_hdrs_get(&h, "content-type"));
    bm_hdrs_dispose(&h);
}

static void test_ssz_media_type(void **state)
{
    (void)state;
    static const char *const yes[] = {
        "application/octet-stream",        "Application/Octet-Stream",
        "  application/octet-stream",      "\tapplication/octet-stream",
        "application/octet-stream; q=1",   "application/octet-stream ;x=y",
        "application/octet-stream\t; x=1",
    };
    static const char *const no[] = {
        "",
        "application/json",
        "application/octet-streamx",
        "application/octet",
        "text/application/octet-stream",
        "application/octet-stream2",
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (!bm_content_type_is_ssz(yes[i]))
            fail_msg("\"%s\" is SSZ", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (bm_content_type_is_ssz(no[i]))
            fail_msg("\"%s\" is not SSZ", no[i]);
    assert_false(bm_content_type_is_ssz(NULL));

    bm_hdrs_t h;
    bm_hdrs_init(&h);
    assert_false(bm_hdrs_is_ssz(&h)); /* no Content-Type */
    assert_false(bm_hdrs_is_ssz(NULL));
    assert_int_equal(bm_hdrs_add_z(&h, "content-type", "application/octet-stream"), 0);
    assert_true(bm_hdrs_is_ssz(&h));
    bm_hdrs_dispose(&h);
}

/* tchar: exactly the RFC 9110 token bytes (the 15 symbols, digits and letters). */
static void test_tchar(void **state)
{
    (void)state;
    const char *sym = "!#$%&'*+-.^_`|~";
    int n = 0;
    for (int c = 0; c < 256; c++) {
        bool want = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c != 0 && strchr(sym, c) != NULL);
        if (bm_tchar[c] != want)
            fail_msg("byte 0x%02x: tchar %d", c, bm_tchar[c]);
        n += bm_tchar[c];
    }
    assert_int_equal(n, 15 + 10 + 26 + 26);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_is_case_insensitive),
        cmocka_unit_test(test_ssz_media_type),
        cmocka_unit_test(test_hop_by_hop),
        cmocka_unit_test(test_tchar),
        cmocka_unit_test(test_ascii_case_eq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
