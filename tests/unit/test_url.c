/* SPDX-License-Identifier: MIT */
/*
 * test_url: base URL validation, joining a base with a client path (the result must
 * always name the configured node), and masking of credentials.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/url.h"

static void test_valid(void **state)
{
    (void)state;
    static const char *const good[] = {
        "http://localhost",
        "http://localhost/",
        "https://node.example.com",
        "HTTPS://Node.Example.COM:5052/",
        "http://127.0.0.1:5052",
        "http://[::1]:5052/",
        "http://[2001:db8::1]",
        "https://user:pass@host.example/api/key/",
        "https://TOKEN@host.example",
        "https://u%40x:p%3Aw!$&'()*+,;=@h/",
        "http://h:65535/a/b%20c/",
        "http://h:1",
        "http://my_host-1.internal/prefix",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (!bm_url_valid(good[i]))
            fail_msg("should be valid: %s", good[i]);
    }
    static const char *const bad[] = {
        NULL,
        "",
        "localhost:5052",
        "ftp://host/",
        "file:///etc/passwd",
        "http:/host",
        "http://",
        "http:///path",
        "https:///user:s3cret@host/x", /* empty authority: the '@' is in the path */
        "https:/user:s3cret@host/x",
        "http://:80/",
        "http://@host/",
        "http://host:/",
        "http://host:0/",
        "http://host:65536/",
        "http://host:123456/",
        "http://host:80a/",
        "http://ho st/",
        "http://host/a b",
        "http://host/a\tb",
        "http://host/a\r\nX: y",
        "http://host\x01/",
        "http://h\xc3\xa9st/",
        "http://host/?q=1",
        "http://host/p?x",
        "http://host/#frag",
        "http://host/a\\b",
        "http://host/a/../b",
        "http://host/a/%2e%2E/b",
        "http://host/./",
        "http://host/%zz",
        "http://host/%4",
        "http://[::1/",
        "http://[zz::1]/",
        "http://[]/",
        "http://a@b@host/",
        "http://us er@host/",
        "http://host!/",
        " http://host/",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bm_url_valid(bad[i]))
            fail_msg("should be invalid: %s", bad[i] ? bad[i] : "(null)");
    }
}

/* Joins and returns the result in a static buffer, or NULL on error. With a valid base,
 * bm_url_join_valid_base (no check of the base) must give the same result and code. */
static const char *join(const char *base, const char *path)
{
    static char out[512];
    bm_str_t s = BM_STR_INIT;
    int rc = bm_url_join(&s, base, path);
    if (base && bm_url_valid(base)) {
        bm_str_t v = BM_STR_INIT;
        assert_int_equal(bm_url_join_valid_base(&v, base, path), rc);
        assert_int_equal(bm_str_len(&v), bm_str_len(&s));
        if (rc == 0)
            assert_string_equal(bm_str_data(&v), bm_str_data(&s));
        bm_str_dispose(&v);
    }
    if (rc != 0) {
        assert_int_equal(bm_str_len(&s), 0);
        bm_str_dispose(&s);
        return NULL;
    }
    snprintf(out, sizeof out, "%s", bm_str_data(&s));
    bm_str_dispose(&s);
    return out;
}

/* The authority (user info, host, port) of an absolute URL, as a client would parse it. */
static const char *authority(const char *url)
{
    static char out[256];
    const char *a = strstr(url, "://");
    assert_non_null(a);
    a += 3;
    size_t n = strcspn(a, "/?#");
    snprintf(out, sizeof out, "%.*s", (int)n, a);
    return out;
}

/* What the configuration says of a base URL's path: each problem bm_url_valid refuses, named. */
static void test_base_path_problem(void **state)
{
    (void)state;
    static const struct {
        const char *url, *why; /* NULL: no problem */
    } cases[] = {
        {"http://h", NULL},
        {"http://h/", NULL},
        {"https://h/api/KEY/eth", NULL},
        {"http://h/a..b/.x/%2e%2e%2e/%41", NULL},
        {"http://h/../x", "has a dot segment (\".\" or \"..\") in its path"},
        {"http://h/a/..", "has a dot segment (\".\" or \"..\") in its path"},
        {"http://h/%2E%2E", "has a dot segment (\".\" or \"..\") in its path"},
        {"http://h/.%2e/x", "has a dot segment (\".\" or \"..\") in its path"},
        {"http://h/%2E", "has a dot segment (\".\" or \"..\") in its path"},
        {"http://h:80/a/./b", "has a dot segment (\".\" or \"..\") in its path"},
        {"http://h/caf\xc3\xa9", "must not contain non-ASCII bytes (percent-encode them)"},
        {"http://h/a%zz", "has a malformed percent escape in its path"},
        {"http://h/a%2", "has a malformed percent escape in its path"},
        {"http://h/a\\b", "must not contain a backslash"},
        {"http://h/a b", "must not contain spaces or control characters"},
        {"http://h/x?q", "must not contain a query or a fragment"},
        {"http://h/x#f", "must not contain a query or a fragment"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *why = bm_url_base_path_problem(cases[i].url);
        if ((why == NULL) != (cases[i].why == NULL) || (why && strcmp(why, cases[i].why) != 0))
            fail_msg("%s: got \"%s\", want \"%s\"", cases[i].url, why ? why : "(none)",
                     cases[i].why ? cases[i].why : "(none)");
        /* the two agree: a URL with a path problem is never valid, and the others are */
        if (bm_url_valid(cases[i].url) != (cases[i].why == NULL))
            fail_msg("%s: bm_url_valid disagrees", cases[i].url);
    }
}

static void test_join(void **state)
{
    (void)state;
    assert_string_equal(join("http://h:5052", "/eth/v1/node/health"),
                        "http://h:5052/eth/v1/node/health");
    assert_string_equal(join("http://h:5052/", "/eth/v1/node/health"),
                        "http://h:5052/eth/v1/node/health");
    assert_string_equal(join("https://h/api/key/", "/eth/v1/x?a=1&b=2"),
                        "https://h/api/key/eth/v1/x?a=1&b=2");
    assert_string_equal(join("https://h/prefix", "/eth/v1/x"), "https://h/prefix/eth/v1/x");
    assert_string_equal(join("https://h/prefix///", "/x"), "https://h/prefix/x");
    assert_string_equal(join("http://u:p@h", "/"), "http://u:p@h/");
    /* The query passes as the client wrote it, including '/', '?' and dots. */
    assert_string_equal(join("http://h", "/e?topics=head&topics=block&x=../y?z"),
                        "http://h/e?topics=head&topics=block&x=../y?z");
    assert_string_equal(join("http://h", "/a/.well-known/..x/...?"),
                        "http://h/a/.well-known/..x/...?");

    /* Invalid bases and paths. */
    assert_null(join("http://h/?q=1", "/x"));
    assert_null(join("http://h/#f", "/x"));
    assert_null(join("ftp://h/", "/x"));
    assert_null(join("http://h", "x"));
    assert_null(join("http://h", ""));
    assert_null(join("http://h", "http://evil.com/"));
    assert_null(join("http://h", "/a b"));
    assert_null(join("http://h", "/a\r\nHost: evil"));
    assert_null(join("http://h", "/a#frag"));
    assert_null(join("http://h", "/a\\b"));
    assert_null(join("http://h", "/x\x80"));
    assert_null(join("http://h", "/%zz"));
    assert_null(join("https://h/api/key/", "/../../admin"));
    assert_null(join("https://h/api/key/", "/.."));
    assert_null(join("https://h/api/key/", "/a/%2e%2e/b"));
    assert_null(join("https://h/api/key/", "/./x"));
    bm_str_t s = BM_STR_INIT;
    assert_int_equal(bm_url_join(&s, NULL, "/x"), BM_EINVAL);
    assert_int_equal(bm_url_join(&s, "http://h", NULL), BM_EINVAL);
    bm_str_dispose(&s);
}

/* A path that looks like a URL or an authority stays a path on the configured host. */
static void test_join_never_changes_authority(void **state)
{
    (void)state;
    static const char *const bases[] = {
        "http://node:5052", "http://node:5052/", "https://u:p@node/api/key/",
        "http://node/p",    "http://[::1]:80",
    };
    static const char *const paths[] = {
        "//evil.com/x", "/@evil",       "/@evil.com:80/x", "///evil.com",
        "/:80@evil/",   "/?@evil.com/", "//user:pw@evil/", "/x?http://evil.com/",
        "/%2f%2fevil",  "/;@evil.com/", "//[::1]:22/",
    };
    for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
        char want[128];
        snprintf(want, sizeof want, "%s", authority(bases[b]));
        for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
            const char *r = join(bases[b], paths[p]);
            if (!r)
                fail_msg("join(%s, %s) failed", bases[b], paths[p]);
            if (strcmp(authority(r), want) != 0)
                fail_msg("join(%s, %s) = %s changed the authority", bases[b], paths[p], r);
            /* The client's path follows the base verbatim. */
            size_t rl = strlen(r), pl = strlen(paths[p]);
            assert_true(rl >= pl);
            assert_string_equal(r + rl - pl, paths[p]);
        }
    }
    assert_string_equal(join("http://node", "//evil.com/x"), "http://node//evil.com/x");
    assert_string_equal(join("http://node/", "/@evil"), "http://node/@evil");
}

static void test_join_appends(void **state)
{
    (void)state;
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "GET ");
    assert_int_equal(bm_url_join(&s, "http://h/", "/a"), 0);
    assert_string_equal(bm_str_data(&s), "GET http://h/a");
    assert_int_equal(bm_url_join(&s, "http://h/", "bad"), BM_EINVAL);
    assert_string_equal(bm_str_data(&s), "GET http://h/a");
    bm_str_dispose(&s);
}

static const char *mask(const char *url)
{
    static char out[512];
    bm_str_t s = BM_STR_INIT;
    bm_url_mask(&s, url);
    snprintf(out, sizeof out, "%s", bm_str_data(&s));
    bm_str_dispose(&s);
    return out;
}

static void test_mask(void **state)
{
    (void)state;
    assert_string_equal(mask("https://user:s3cret@host:5052/eth/v1"),
                        "https://user:***@host:5052/eth/v1");
    assert_string_equal(mask("https://TOKEN123@host/"), "https://***@host/");
    assert_string_equal(mask("http://user:@host"), "http://user:***@host");
    assert_string_equal(mask("http://a:b:c@host/x"), "http://a:***@host/x");
    assert_string_equal(mask("http://host/path@x?y=u:p@z#f@g"), "http://host/path@x?y=u:p@z#f@g");
    assert_string_equal(mask("http://host:5052/"), "http://host:5052/");
    /* libcurl accepts one or three slashes too: the password is hidden all the same */
    assert_string_equal(mask("https:/user:s3cret@host/"), "https:/user:***@host/");
    assert_string_equal(mask("https:///user:s3cret@host/"), "https:///user:***@host/");
    assert_string_equal(mask("not a url"), "not a url");
    assert_string_equal(mask(""), "");
    /* A password with '@' written raw: the last '@' ends the user info. */
    assert_string_equal(mask("http://u:p@ss@host/"), "http://u:***@host/");
    /* a key in the path (hosted providers) is hidden; words and short segments are not */
    assert_string_equal(mask("https://eth-mainnet.example.com/v2/aB3dE5fG7hJ9kL1mN3pQ5rS7"),
                        "https://eth-mainnet.example.com/v2/***");
    assert_string_equal(mask("https://u:pw@h/api/9aa3d95b3bc440fa88ea12eaa4456161/beacon"),
                        "https://u:***@h/api/***/beacon");
    assert_string_equal(mask("http://h/eth-mainnet-archive-node/x1"),
                        "http://h/eth-mainnet-archive-node/x1");
    assert_string_equal(mask("http://h/a1b2c3d4e5f6a7b8c9d0"), "http://h/***");
    assert_string_equal(mask("http://h/a1b2c3d4e5f6a7b8c9d?q=a1b2c3d4e5f6a7b8c9d0e1"),
                        "http://h/a1b2c3d4e5f6a7b8c9d?q=a1b2c3d4e5f6a7b8c9d0e1");
    assert_string_equal(mask("http://h/a1b2c3d4e5f6a7b8c9d0/"), "http://h/***/");
    const char *m = mask("https://u:hunter2@h/?k=v");
    assert_null(strstr(m, "hunter2"));
    /* NULL appends nothing. */
    bm_str_t s = BM_STR_INIT;
    bm_url_mask(&s, NULL);
    assert_int_equal(bm_str_len(&s), 0);
    bm_str_dispose(&s);
}

/* upstreams[].secretPath: a declared base's whole path is hidden, in any URL built on it,
 * keys the heuristic lets through included (short, or all letters). */
static void test_mask_secret_path(void **state)
{
    (void)state;
    assert_string_equal(mask("https://u:pw@host/api/shortkey/eth/v1/node/version"),
                        "https://u:***@host/api/shortkey/eth/v1/node/version");
    assert_int_equal(bm_url_secret_path_add("https://u:pw@host/api/shortkey/"), 0);
    assert_int_equal(bm_url_secret_path_add("http://h2/OnlyLettersKeyHere"), 0);
    assert_int_equal(bm_url_secret_path_add(""), BM_EINVAL);
    assert_string_equal(mask("https://u:pw@host/api/shortkey/eth/v1/node/version"),
                        "https://u:***@host/***/eth/v1/node/version");
    assert_string_equal(mask("https://u:pw@host/api/shortkey"), "https://u:***@host/***");
    assert_string_equal(mask("http://h2/OnlyLettersKeyHere?x=1"), "http://h2/***?x=1");
    assert_string_equal(mask("http://h2/OnlyLettersKeyHere/"), "http://h2/***/");
    /* the request's own path after the base still gets the heuristic */
    assert_string_equal(mask("http://h2/OnlyLettersKeyHere/a1b2c3d4e5f6a7b8c9d0"),
                        "http://h2/***/***");
    /* only at a segment boundary, and only that base */
    assert_string_equal(mask("http://h2/OnlyLettersKeyHereToo"), "http://h2/OnlyLettersKeyHereToo");
    assert_string_equal(mask("http://h3/OnlyLettersKeyHere"), "http://h3/OnlyLettersKeyHere");
    bm_url_secret_path_clear();
    assert_string_equal(mask("http://h2/OnlyLettersKeyHere"), "http://h2/OnlyLettersKeyHere");
}

/* The word-at-a-time check says what a byte-by-byte one says, at every length and
 * alignment, for the bytes around both edges. */
static void test_printable(void **state)
{
    (void)state;
    static const unsigned char edge[] = {0x00, 0x01, 0x1f, 0x20, 0x21,
                                         0x41, 0x7e, 0x7f, 0x80, 0xff};
    char buf[48];
    uint32_t rnd = 7;
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)(round % 40);
        size_t off = (size_t)(round % 8);
        bool want = true;
        for (size_t i = 0; i < n; i++) {
            rnd = rnd * 1103515245u + 12345u;
            /* mostly plain bytes, now and then one from the edges */
            unsigned char c = (rnd >> 16) % 9 ? (unsigned char)('a' + (rnd >> 20) % 26)
                                              : edge[(rnd >> 20) % sizeof edge];
            buf[off + i] = (char)c;
            if (c <= 0x20 || c >= 0x7f)
                want = false;
        }
        if (bm_url_printable(buf + off, n) != want)
            fail_msg("round %d: length %zu", round, n);
    }
}

static void test_query_param(void **state)
{
    (void)state;
    char v[8];
    const char *q = "slots=1&slot=12&committee_index=3&flag&empty=";
    size_t n = strlen(q);
    assert_int_equal(bm_url_query_param(q, n, "slot", v, sizeof v), 2);
    assert_string_equal(v, "12");
    assert_int_equal(bm_url_query_param(q, n, "committee_index", v, sizeof v), 1);
    assert_string_equal(v, "3");
    assert_int_equal(bm_url_query_param(q, n, "flag", v, sizeof v), 0);
    assert_string_equal(v, "");
    assert_int_equal(bm_url_query_param(q, n, "empty", v, sizeof v), 0);
    assert_int_equal(bm_url_query_param(q, n, "missing", v, sizeof v), BM_ENOTFOUND);
    assert_int_equal(bm_url_query_param(q, n, "slo", v, sizeof v), BM_ENOTFOUND);
    /* the length bounds the search; too long a value does not fit */
    assert_int_equal(bm_url_query_param(q, 7, "slot", v, sizeof v), BM_ENOTFOUND);
    assert_int_equal(bm_url_query_param("slot=123456789", 14, "slot", v, sizeof v), BM_ETOOBIG);
    assert_int_equal(bm_url_query_param(NULL, 0, "slot", v, sizeof v), BM_ENOTFOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query_param),
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_base_path_problem),
        cmocka_unit_test(test_join),
        cmocka_unit_test(test_join_never_changes_authority),
        cmocka_unit_test(test_join_appends),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_mask_secret_path),
        cmocka_unit_test(test_printable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
