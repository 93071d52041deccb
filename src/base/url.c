/* SPDX-License-Identifier: MIT */
/*
 * url: validation of upstream base URLs, joining a base with a request path, and masking
 * of credentials. The parser here is deliberately narrow: it accepts the URLs an operator
 * writes for a beacon node (http or https, a host name or IP literal, an optional port,
 * user info and path prefix) and rejects everything else, because a URL it accepts is
 * handed to libcurl verbatim and must mean the same thing there.
 *
 * Joining never parses the client's path as a URL: the configured base, including its
 * authority, is copied first and the path is appended after it, so "//evil.com/x" or
 * "/@evil" remain paths on the configured node. Dot segments ("/../") are refused so that
 * a client cannot climb out of a configured path prefix (libcurl would otherwise remove
 * them before sending, and servers remove them on arrival).
 */
#include "base/url.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"

bool bm_url_printable(const char *p, size_t n)
{
    /* Eight bytes at a time: a byte below 0x21 or above 0x7e sets its high bit in one of
     * the two masks (the classic "has less than" / "has more than" word tricks). */
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        uint64_t below = (x - ones * 0x21) & ~x & highs;
        uint64_t above = ((x + ones * (127 - 0x7e)) | x) & highs;
        if (below | above)
            return false;
    }
    for (; i < n; i++)
        if ((unsigned char)p[i] <= 0x20 || (unsigned char)p[i] >= 0x7f)
            return false;
    return true;
}

/* Length of "http://" or "https://" at the start of `url` (any case), else 0. */
static size_t scheme_len(const char *url)
{
    if (strncasecmp(url, "http://", 7) == 0)
        return 7;
    if (strncasecmp(url, "https://", 8) == 0)
        return 8;
    return 0;
}

static bool is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_unreserved(unsigned char c)
{
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

static bool is_sub_delim(unsigned char c)
{
    return c != 0 && strchr("!$&'()*+,;=", c) != NULL;
}

/* True when p[i] starts a well-formed percent escape ("%" HEXDIG HEXDIG). */
static bool pct_ok(const char *p, size_t n, size_t i)
{
    return i + 2 < n && is_hex((unsigned char)p[i + 1]) && is_hex((unsigned char)p[i + 2]);
}

/* RFC 3986 userinfo: unreserved / pct-encoded / sub-delims / ":"; not empty. */
static bool valid_userinfo(const char *p, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '%') {
            if (!pct_ok(p, n, i))
                return false;
            i += 2;
        } else if (!is_unreserved(c) && !is_sub_delim(c) && c != ':') {
            return false;
        }
    }
    return true;
}

/* ":" port with 1 to 5 digits, 1..65535. */
static bool valid_port(const char *p, size_t n)
{
    if (n < 2 || n > 6 || p[0] != ':')
        return false;
    unsigned v = 0;
    for (size_t i = 1; i < n; i++) {
        if (!is_digit((unsigned char)p[i]))
            return false;
        v = v * 10 + (unsigned)(p[i] - '0');
    }
    return v >= 1 && v <= 65535;
}

/* host [":" port], where host is a DNS name / IPv4 literal or a bracketed IPv6 literal. */
static bool valid_hostport(const char *p, size_t n)
{
    size_t h = 0;
    if (n > 0 && p[0] == '[') {
        bool colon = false;
        for (h = 1; h < n && p[h] != ']'; h++) {
            unsigned char c = (unsigned char)p[h];
            if (c == ':')
                colon = true;
            else if (!is_hex(c) && c != '.')
                return false;
        }
        if (h >= n || h < 3 || !colon)
            return false;
        h++; /* past ']' */
    } else {
        while (h < n && p[h] != ':') {
            unsigned char c = (unsigned char)p[h];
            if (!is_alpha(c) && !is_digit(c) && c != '-' && c != '.' && c != '_')
                return false;
            h++;
        }
        if (h == 0)
            return false;
    }
    return h == n || valid_port(p + h, n - h);
}

static bool split(const char *url, size_t *auth, size_t *len);

/*
 * What is wrong with an absolute path with an optional query (when `query_ok`), or NULL:
 * printable ASCII only, no fragment, no backslash, well-formed percent escapes and no dot
 * segments in the path part. The query part is passed on as the client wrote it. One pass:
 * this runs for every proxied request.
 */
static const char *path_problem(const char *p, bool query_ok)
{
    if (p[0] != '\0' && p[0] != '/' && p[0] != '?')
        return "has a path that does not start with '/'";
    size_t n = strlen(p);
    if (!memchr(p, '.', n) && !memchr(p, '%', n) && bm_url_printable(p, n) && !memchr(p, '#', n) &&
        !memchr(p, '\\', n) && (query_ok || !memchr(p, '?', n)))
        return NULL; /* no dot segment, no escape: the usual Beacon API path takes this way */
    bool in_path = true;
    int dots = 0;          /* "." or "%2e" in the current segment */
    bool only_dots = true; /* and nothing else */
    for (size_t i = p[0] == '/' ? 1 : 0;; i++) {
        unsigned char c = (unsigned char)p[i];
        if (in_path && (c == '/' || c == '?' || c == '\0')) {
            if (i > 0 && only_dots && (dots == 1 || dots == 2))
                return "has a dot segment (\".\" or \"..\") in its path";
            dots = 0;
            only_dots = true;
            if (c == '?') {
                if (!query_ok)
                    return "must not contain a query or a fragment";
                in_path = false;
            }
        }
        if (c == '\0')
            return NULL;
        if (c >= 0x80)
            return "must not contain non-ASCII bytes (percent-encode them)";
        if (c <= 0x20 || c == 0x7f)
            return "must not contain spaces or control characters";
        if (c == '#')
            return "must not contain a query or a fragment";
        if (c == '\\')
            return "must not contain a backslash";
        if (!in_path || c == '/' || c == '?')
            continue;
        if (c == '.') {
            dots++;
        } else if (c == '%') {
            if (!is_hex((unsigned char)p[i + 1]) || !is_hex((unsigned char)p[i + 2]))
                return "has a malformed percent escape in its path";
            if (p[i + 1] == '2' && (p[i + 2] | 0x20) == 'e')
                dots++;
            else
                only_dots = false;
            i += 2;
        } else {
            only_dots = false;
        }
    }
}

static bool valid_path(const char *p, bool query_ok)
{
    return path_problem(p, query_ok) == NULL;
}

const char *bm_url_target_problem(const char *target)
{
    if (!target || target[0] != '/')
        return "the request target must be a path starting with '/' (origin-form)";
    return path_problem(target, true);
}

const char *bm_url_base_path_problem(const char *url)
{
    size_t a = 0, alen = 0;
    if (!url || !split(url, &a, &alen))
        return NULL;
    return path_problem(url + a + alen, false);
}

/* Offsets of the authority of an absolute http(s) URL: [*auth, *auth + *len). */
static bool split(const char *url, size_t *auth, size_t *len)
{
    size_t s = scheme_len(url);
    if (s == 0)
        return false;
    *auth = s;
    *len = strcspn(url + s, "/?#");
    return true;
}

bool bm_url_valid(const char *url)
{
    if (!url)
        return false;
    size_t a = 0, alen = 0;
    if (!split(url, &a, &alen))
        return false;
    const char *auth = url + a;
    /* The authority itself must be printable; the path is checked by valid_path. */
    if (!bm_url_printable(auth, alen))
        return false;
    const char *at = memrchr(auth, '@', alen);
    const char *host = auth;
    if (at) {
        if (!valid_userinfo(auth, (size_t)(at - auth)))
            return false;
        host = at + 1;
    }
    if (!valid_hostport(host, (size_t)(auth + alen - host)))
        return false;
    return valid_path(auth + alen, false);
}

int bm_url_join(bm_str_t *out, const char *base, const char *path_and_query)
{
    if (!base || !bm_url_valid(base))
        return BM_EINVAL;
    return bm_url_join_valid_base(out, base, path_and_query);
}

int bm_url_join_valid_base(bm_str_t *out, const char *base, const char *path_and_query)
{
    if (!base || !path_and_query || path_and_query[0] != '/')
        return BM_EINVAL;
    if (!valid_path(path_and_query, true))
        return BM_EINVAL;
    size_t a = 0, alen = 0;
    split(base, &a, &alen);
    size_t keep = strlen(base);
    /* Drop the base path's trailing slashes; never reach into the authority. */
    while (keep > a + alen && base[keep - 1] == '/')
        keep--;
    bm_str_append(out, base, keep);
    bm_str_puts(out, path_and_query);
    return out->oom ? BM_ENOMEM : 0;
}

/* True for a path segment that looks like a key (hosted providers put theirs in the path:
 * https://host/v2/KEY): 20 bytes or more of letters, digits, '-' and '_', with at least one
 * letter and one digit. A word path ("eth-mainnet") never is one. */
static bool secret_like(const char *s, size_t n)
{
    if (n < 20)
        return false;
    bool digit = false, letter = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= '0' && c <= '9')
            digit = true;
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
            letter = true;
        else if (c != '-' && c != '_')
            return false;
    }
    return digit && letter;
}

/* Appends `rest` (what follows the authority) with every key-like path segment as "***". */
static void mask_path(bm_str_t *out, const char *rest)
{
    size_t plen = strcspn(rest, "?#");
    const char *p = rest, *end = rest + plen;
    while (p < end) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        const char *seg_end = slash ? slash : end;
        if (secret_like(p, (size_t)(seg_end - p)))
            bm_str_puts(out, "***");
        else
            bm_str_append(out, p, (size_t)(seg_end - p));
        if (!slash)
            break;
        bm_str_putc(out, '/');
        p = slash + 1;
    }
    bm_str_puts(out, end);
}

/* Base URLs whose whole path is secret (upstreams[].secretPath), without a trailing '/'.
 * Process-wide: set while the configuration is read, before anything is logged. */
static char **secret_bases;
static size_t n_secret_bases;

int bm_url_secret_path_add(const char *base)
{
    size_t len = base ? strlen(base) : 0;
    while (len && base[len - 1] == '/')
        len--;
    if (!len)
        return BM_EINVAL;
    for (size_t i = 0; i < n_secret_bases; i++)
        if (strlen(secret_bases[i]) == len && memcmp(secret_bases[i], base, len) == 0)
            return 0;
    char **bases = realloc(secret_bases, (n_secret_bases + 1) * sizeof *bases);
    if (!bases)
        return BM_ENOMEM;
    secret_bases = bases;
    if (!(secret_bases[n_secret_bases] = strndup(base, len)))
        return BM_ENOMEM;
    n_secret_bases++;
    return 0;
}

void bm_url_secret_path_clear(void)
{
    for (size_t i = 0; i < n_secret_bases; i++)
        free(secret_bases[i]);
    free(secret_bases);
    secret_bases = NULL;
    n_secret_bases = 0;
}

/* The path and what follows (`rest`, inside `url`): a secret base's path becomes one "***",
 * what the request adds after it (and any other path) is masked by the heuristic. */
static void mask_rest(bm_str_t *out, const char *url, const char *rest)
{
    size_t before = (size_t)(rest - url);
    for (size_t i = 0; i < n_secret_bases; i++) {
        size_t len = strlen(secret_bases[i]);
        if (len <= before || strncmp(url, secret_bases[i], len) != 0 ||
            (url[len] && !strchr("/?#", url[len])))
            continue;
        bm_str_puts(out, "/***");
        mask_path(out, url + len);
        return;
    }
    mask_path(out, rest);
}

void bm_url_mask(bm_str_t *out, const char *url)
{
    /* Nothing to append (bm_str_append of zero bytes to an empty builder is avoided). */
    if (!url || !*url)
        return;
    /* The user info is looked for after "scheme:" and however many slashes follow. By RFC
     * 3986, "https:/user:pw@host" has no authority and "https:///user:pw@host" an empty one,
     * the '@' being in the path; but libcurl takes both as user "user", password "pw" at
     * "host", and so does anyone reading a log: what looks like a password is hidden. */
    size_t scheme =
        strspn(url, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.");
    if (scheme == 0 || url[scheme] != ':') {
        bm_str_puts(out, url);
        return;
    }
    const char *auth = url + scheme + 1;
    while (*auth == '/')
        auth++;
    size_t alen = strcspn(auth, "/?#");
    const char *at = memrchr(auth, '@', alen);
    if (!at) {
        bm_str_append(out, url, (size_t)(auth + alen - url));
        mask_rest(out, url, auth + alen);
        return;
    }
    bm_str_append(out, url, (size_t)(auth - url));
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    if (colon) {
        /* user:password: keep the user name, hide the password. */
        bm_str_append(out, auth, (size_t)(colon - auth));
        bm_str_puts(out, ":***");
    } else {
        /* A lone user name is usually a token (https://TOKEN@host): hide all of it. */
        bm_str_puts(out, "***");
    }
    bm_str_append(out, at, (size_t)(auth + alen - at));
    mask_rest(out, url, auth + alen);
}

int bm_url_query_param(const char *query, size_t len, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    const char *p = query, *end = query ? query + len : NULL;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        const char *kend = eq ? eq : stop;
        if ((size_t)(kend - p) == nlen && memcmp(p, name, nlen) == 0) {
            const char *v = eq ? eq + 1 : stop;
            size_t vlen = (size_t)(stop - v);
            if (vlen + 1 > cap)
                return BM_ETOOBIG;
            memcpy(out, v, vlen);
            out[vlen] = '\0';
            return (int)vlen;
        }
        p = amp ? amp + 1 : NULL;
    }
    return BM_ENOTFOUND;
}
