/* SPDX-License-Identifier: MIT */
/*
 * auth: key extraction and constant-time matching (see auth.h).
 */
#include "edge/auth.h"

#include <string.h>
#include <strings.h>

#include "read/rules.h"

bool bm_auth_equal(const char *a, size_t an, const char *b, size_t bn)
{
    /* every byte of b is compared, whatever a is; a length mismatch is folded in */
    unsigned char diff = (unsigned char)(an != bn);
    for (size_t i = 0; i < bn; i++) {
        unsigned char x = i < an ? (unsigned char)a[i] : 0;
        diff |= (unsigned char)(x ^ (unsigned char)b[i]);
    }
    return diff == 0;
}

/* The key whose secret is s[0..n), comparing against every key. */
static const bm_auth_key_t *match_secret(const bm_auth_key_t *keys, size_t nk, const char *s,
                                         size_t n)
{
    const bm_auth_key_t *found = NULL;
    for (size_t i = 0; i < nk; i++) {
        bool eq = bm_auth_equal(s, n, keys[i].secret, strlen(keys[i].secret));
        if (eq && !found)
            found = &keys[i];
    }
    return found;
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Decodes base64 s into out (NUL-terminated); false when malformed or too long. */
static bool b64_decode(const char *s, char *out, size_t cap, size_t *len)
{
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (; *s && *s != '='; s++) {
        int v = b64_value((unsigned char)*s);
        if (v < 0)
            return false;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o + 1 >= cap)
                return false;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[o] = '\0';
    *len = o;
    return true;
}

const bm_auth_key_t *bm_auth_find(const bm_auth_key_t *keys, size_t n, const bm_hdrs_t *hdrs,
                                  const char *path, size_t path_len, bm_auth_source_t *source,
                                  bool *presented, size_t *skip)
{
    *source = BM_AUTH_NONE;
    *presented = false;
    *skip = 0;
    const char *az = hdrs ? bm_hdrs_get(hdrs, "authorization") : NULL;
    const char *xk = hdrs ? bm_hdrs_get(hdrs, "x-api-key") : NULL;
    const bm_auth_key_t *k = NULL;
    if (az && strncasecmp(az, "Bearer ", 7) == 0) {
        const char *s = az + 7;
        while (*s == ' ')
            s++;
        *presented = true;
        k = match_secret(keys, n, s, strlen(s));
        *source = k ? BM_AUTH_BEARER : BM_AUTH_NONE;
        return k;
    }
    if (xk) {
        *presented = true;
        k = match_secret(keys, n, xk, strlen(xk));
        *source = k ? BM_AUTH_API_KEY : BM_AUTH_NONE;
        return k;
    }
    if (az && strncasecmp(az, "Basic ", 6) == 0) {
        char dec[512];
        size_t len;
        const char *s = az + 6;
        while (*s == ' ')
            s++;
        *presented = true;
        if (!b64_decode(s, dec, sizeof dec, &len))
            return NULL;
        const char *colon = memchr(dec, ':', len);
        const char *pw = colon ? colon + 1 : dec; /* user:secret, or the secret alone */
        k = match_secret(keys, n, pw, len - (size_t)(pw - dec));
        *source = k ? BM_AUTH_BASIC : BM_AUTH_NONE;
        return k;
    }
    /* /{secret}/...: only a segment followed by more path */
    if (path_len > 1 && path[0] == '/') {
        const char *seg = path + 1;
        const char *slash = memchr(seg, '/', path_len - 1);
        if (slash && slash > seg) {
            k = match_secret(keys, n, seg, (size_t)(slash - seg));
            if (k) {
                *presented = true;
                *source = BM_AUTH_PATH;
                *skip = (size_t)(slash - path);
            }
        }
    }
    return k;
}

bool bm_auth_allows(const bm_auth_key_t *key, unsigned cls, const char *net)
{
    if (!key || !(key->routes & cls))
        return false;
    if (key->n_networks == 0 || !net)
        return true;
    for (size_t i = 0; i < key->n_networks; i++)
        if (strcmp(key->networks[i], net) == 0)
            return true;
    return false;
}

static bool has_prefix(const char *p, size_t n, const char *z)
{
    size_t zl = strlen(z);
    return n >= zl && memcmp(p, z, zl) == 0;
}

bool bm_auth_is_write(const char *method, const char *path, size_t path_len)
{
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 || strcmp(method, "OPTIONS") == 0)
        return false;
    return !bm_rules_is_read(method, path, path_len);
}

unsigned bm_auth_route_class(const char *method, const char *path, size_t path_len)
{
    if (has_prefix(path, path_len, "/beaconmux/") ||
        (path_len == 10 && memcmp(path, "/beaconmux", 10) == 0))
        return BM_ROUTE_ADMIN;
    /* /eth/vN/validator/... */
    if (has_prefix(path, path_len, "/eth/v")) {
        const char *s = memchr(path + 6, '/', path_len - 6);
        if (s && has_prefix(s, path_len - (size_t)(s - path), "/validator/"))
            return BM_ROUTE_DUTIES;
    }
    static const char head_root[] = "/eth/v1/beacon/blocks/head/root";
    if (path_len == sizeof head_root - 1 && memcmp(path, head_root, path_len) == 0)
        return BM_ROUTE_DUTIES;
    if (bm_auth_is_write(method, path, path_len))
        return BM_ROUTE_DUTIES;
    return BM_ROUTE_READ;
}

unsigned bm_auth_route_parse(const char *name)
{
    if (strcmp(name, "read") == 0)
        return BM_ROUTE_READ;
    if (strcmp(name, "duties") == 0)
        return BM_ROUTE_DUTIES;
    if (strcmp(name, "admin") == 0)
        return BM_ROUTE_ADMIN;
    return 0;
}
