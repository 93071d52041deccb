/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for url (bm_url_valid, bm_url_join, bm_url_mask). The input is a base
 * URL, a newline, and a request path with query ("http://h:1/p\n/eth/v1/x?y=1"); without
 * a newline the whole input is tried as both. NUL bytes end a string, as in C.
 *
 * Properties, each checked on its own (a __builtin_trap when one fails):
 *   - join appends exactly the trimmed base and the path, verbatim, or nothing at all
 *     (BM_EINVAL), and the bytes do not depend on what the builder already held;
 *   - join never changes the authority of the base: the joined URL's scheme and
 *     authority equal the base's, by the RFC 3986 split (authority up to the first of
 *     "/?#") and, when libcurl accepts both URLs, by libcurl's own parse (user, password,
 *     host, port), which is what a request is sent with;
 *   - mask hides what a reader takes for a password: the user info of the authority as a
 *     reader finds it (after "scheme:" and any number of slashes, up to "/?#"; RFC 3986's
 *     authority for "scheme://host", and also the text RFC 3986 puts in the path when the
 *     authority is empty or absent, "https:///user:pw@host") becomes "user:***" or "***";
 *     the text outside it is unchanged but for key-like path segments, which may become
 *     "***" (and only those); masking twice changes nothing more; and when
 *     libcurl finds a password (or a lone user name) in the input, however many slashes
 *     it took, it finds "***" in the masked URL, with the same host and port;
 *   - validation is a pure function, and a join succeeds only for a valid base.
 * ASan and UBSan watch every run for out-of-bounds access and undefined behaviour.
 */
#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/url.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

/* Offset and length of the authority after "scheme://" (RFC 3986: up to "/?#"); false
 * when there is no "://". */
static bool authority(const char *u, size_t *off, size_t *len)
{
    const char *sep = strstr(u, "://");
    if (!sep)
        return false;
    *off = (size_t)(sep + 3 - u);
    *len = strcspn(u + *off, "/?#");
    return true;
}

/* The parts of a URL as libcurl sees them; false when libcurl refuses the URL. */
typedef struct parts {
    char *scheme, *user, *password, *host, *port;
} parts_t;

static bool curl_parts(const char *url, parts_t *p)
{
    memset(p, 0, sizeof *p);
    CURLU *h = curl_url();
    if (!h)
        abort();
    bool ok = curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK;
    if (ok) {
        curl_url_get(h, CURLUPART_SCHEME, &p->scheme, 0);
        curl_url_get(h, CURLUPART_USER, &p->user, 0);
        curl_url_get(h, CURLUPART_PASSWORD, &p->password, 0);
        curl_url_get(h, CURLUPART_HOST, &p->host, 0);
        curl_url_get(h, CURLUPART_PORT, &p->port, CURLU_DEFAULT_PORT);
    }
    curl_url_cleanup(h);
    return ok;
}

static void parts_free(parts_t *p)
{
    curl_free(p->scheme);
    curl_free(p->user);
    curl_free(p->password);
    curl_free(p->host);
    curl_free(p->port);
}

static bool same(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static bool same_nocase(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcasecmp(a, b) == 0);
}

static void check_join(const char *base, const char *path)
{
    bool valid = bm_url_valid(base);
    CHECK(valid == bm_url_valid(base));

    bm_str_t out = BM_STR_INIT;
    int rc = bm_url_join(&out, base, path);
    CHECK(rc == 0 || rc == BM_EINVAL);
    if (rc != 0) {
        CHECK(bm_str_len(&out) == 0); /* nothing appended */
        bm_str_dispose(&out);
        return;
    }
    CHECK(valid && path[0] == '/');
    const char *j = bm_str_data(&out);
    size_t jlen = bm_str_len(&out), plen = strlen(path), blen = strlen(base);
    /* the base (less trailing slashes of its path), then the path verbatim */
    CHECK(jlen >= plen && strcmp(j + jlen - plen, path) == 0);
    size_t keep = jlen - plen;
    CHECK(keep <= blen && memcmp(j, base, keep) == 0);
    for (size_t i = keep; i < blen; i++)
        CHECK(base[i] == '/');

    /* the same bytes after whatever the builder held */
    bm_str_t pre = BM_STR_INIT;
    bm_str_puts(&pre, "prefix");
    CHECK(bm_url_join(&pre, base, path) == 0);
    CHECK(bm_str_len(&pre) == 6 + jlen && memcmp(bm_str_data(&pre) + 6, j, jlen) == 0);
    bm_str_dispose(&pre);

    /* the authority is the base's: RFC 3986 split ... */
    size_t bo, bl, jo, jl;
    CHECK(authority(base, &bo, &bl) && authority(j, &jo, &jl));
    CHECK(bo == jo && bl == jl && memcmp(base, j, bo + bl) == 0);

    /* ... and libcurl's parse, when it takes both */
    parts_t pb, pj;
    bool okb = curl_parts(base, &pb), okj = curl_parts(j, &pj);
    if (okb && okj) {
        CHECK(same_nocase(pb.scheme, pj.scheme));
        CHECK(same(pb.user, pj.user));
        CHECK(same(pb.password, pj.password));
        CHECK(same(pb.host, pj.host));
        CHECK(same(pb.port, pj.port));
    }
    parts_free(&pb);
    parts_free(&pj);
    bm_str_dispose(&out);
}

/*
 * Where a reader looks for "user:password@": after "scheme:" and any number of slashes, up
 * to the first of "/?#". With "scheme://" and a host this is RFC 3986's authority. With one
 * slash, or three ("https:///user:pw@host/x"), RFC 3986 sees no or an empty authority and
 * puts "user:pw@host" in the path, yet libcurl, browsers and a person reading a log take it
 * for user:password@host: the secret is there all the same. (Whenever RFC 3986 finds user
 * info, its authority starts right after "scheme://" and is this one.) False without
 * "scheme:".
 */
static bool reader_authority(const char *u, size_t *off, size_t *len)
{
    size_t scheme = strspn(u, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.");
    if (scheme == 0 || u[scheme] != ':')
        return false;
    *off = scheme + 1 + strspn(u + scheme + 1, "/");
    *len = strcspn(u + *off, "/?#");
    return true;
}

/* A segment a key may be: 20 bytes or more of [A-Za-z0-9_-] holding a letter and a digit. */
static bool key_like(const char *s, size_t n)
{
    static const char keyset[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
    char seg[256];
    if (n < 20 || n >= sizeof seg)
        return n >= sizeof seg && strspn(s, keyset) >= n; /* long ones: charset only */
    memcpy(seg, s, n);
    seg[n] = '\0';
    return strspn(seg, keyset) == n && strpbrk(seg, "0123456789") &&
           strpbrk(seg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
}

/* True when `m` is `orig` with some '/'-separated segments before the first '?' or '#'
 * replaced by "***", each of them key-like; everything from the '?' or '#' on is equal. */
static bool same_but_keys(const char *orig, const char *m)
{
    size_t plen = strcspn(orig, "?#");
    const char *p = orig, *end = orig + plen;
    for (;;) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        size_t n = (size_t)((slash ? slash : end) - p);
        if (strncmp(m, p, n) == 0 && (m[n] == '/' || m[n] == '\0' || m[n] == '?' || m[n] == '#'))
            m += n;
        else if (strncmp(m, "***", 3) == 0 && key_like(p, n))
            m += 3;
        else
            return false;
        if (!slash)
            break;
        if (*m != '/')
            return false;
        m++;
        p = slash + 1;
    }
    return strcmp(m, end) == 0;
}

static void check_mask(const char *url)
{
    bm_str_t m = BM_STR_INIT;
    bm_url_mask(&m, url);
    const char *s = bm_str_data(&m);
    size_t off, alen;
    const char *at = NULL;
    if (reader_authority(url, &off, &alen))
        at = memrchr(url + off, '@', alen);
    if (!at) {
        CHECK(same_but_keys(url, s)); /* no user info: unchanged but for keys in the path */
    } else {
        /* unchanged before the user info, and from the '@' on but for keys in the path */
        CHECK(bm_str_len(&m) >= off && memcmp(s, url, off) == 0);
        /* the user info is "user:***" (user = text before the first ':') or "***" */
        const char *ui = url + off;
        size_t ui_len = (size_t)(at - ui);
        const char *colon = memchr(ui, ':', ui_len);
        size_t user_len = colon ? (size_t)(colon - ui) : 0;
        size_t mid = colon ? user_len + 4 : 3;
        CHECK(bm_str_len(&m) >= off + mid);
        if (colon)
            CHECK(memcmp(s + off, ui, user_len) == 0 && memcmp(s + off + user_len, ":***", 4) == 0);
        else
            CHECK(memcmp(s + off, "***", 3) == 0);
        CHECK(same_but_keys(at, s + off + mid));
    }
    /* masking again changes nothing more */
    bm_str_t m2 = BM_STR_INIT;
    bm_url_mask(&m2, s);
    CHECK(strcmp(bm_str_data(&m2), s) == 0);
    bm_str_dispose(&m2);

    /* What libcurl would send as credentials is gone, however many slashes it took. */
    parts_t pu, pm;
    if (curl_parts(url, &pu) && ((pu.password && *pu.password) || (pu.user && *pu.user))) {
        CHECK(curl_parts(s, &pm));
        if (pu.password) /* "user:password": the password is hidden, the user kept */
            CHECK(pm.password && strcmp(pm.password, "***") == 0 && same(pu.user, pm.user));
        else /* a lone user name (a token) is hidden */
            CHECK(pm.user && strcmp(pm.user, "***") == 0 && !pm.password);
        CHECK(same(pu.host, pm.host) && same(pu.port, pm.port));
        parts_free(&pm);
    }
    parts_free(&pu);
    bm_str_dispose(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *in = malloc(size + 1);
    if (!in)
        abort();
    memcpy(in, data, size);
    in[size] = '\0';
    char *nl = memchr(in, '\n', strlen(in));
    const char *base = in, *path = in;
    if (nl) {
        *nl = '\0';
        path = nl + 1;
    }
    check_join(base, path);
    check_mask(base);
    if (nl)
        check_mask(path);
    free(in);
    return 0;
}
