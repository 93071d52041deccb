/* SPDX-License-Identifier: MIT */
/*
 * url: the few URL operations a proxy needs: validate an upstream's base URL, join it
 * with a request path (the path is appended, never interpreted as a URL, so a client can
 * never make beaconmux contact anything but a configured node), and mask credentials
 * for logs and the status page.
 */
#ifndef BM_URL_H
#define BM_URL_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

/**
 * Appends base + path_and_query to `out`: the base URL's trailing slashes are dropped and
 * path_and_query is appended verbatim, never interpreted as a URL (so "//evil.com/x" stays
 * a path on the base's host). Returns 0, BM_ENOMEM, or BM_EINVAL (nothing appended) when
 * `base` fails bm_url_valid, or path_and_query does not start with '/', holds a byte
 * outside printable ASCII, a '#' or a backslash, a malformed %-escape in the path, or a "." or
 * ".." path segment (which would climb out of the base's path prefix).
 */
int bm_url_join(bm_str_t *out, const char *base, const char *path_and_query);

/**
 * bm_url_join for a base already known to pass bm_url_valid (a node's URL, checked when the
 * node was added): only path_and_query is checked. The read path and the races join a
 * node's URL for every request; checking it again each time cost ~600 instructions.
 */
int bm_url_join_valid_base(bm_str_t *out, const char *base, const char *path_and_query);

/**
 * Appends `url` to `out` with its credentials hidden: "user:pass@" becomes "user:***@", and
 * a user name without password (usually a token, https://TOKEN@host) becomes "***@".
 * The user info is looked for after "scheme:" and any number of slashes, wider than RFC
 * 3986: in "https:///user:pass@host/x" RFC 3986 sees an empty authority and a path holding
 * the '@', but libcurl and any reader take "pass" for a password, so it is hidden too. Any
 * text without user info is appended unchanged. Used on invalid URLs as well (error messages).
 * A path segment that looks like a key (hosted providers' https://host/v2/KEY: 20 bytes or
 * more of letters, digits, '-' and '_', with a letter and a digit) becomes "***" too.
 */
void bm_url_mask(bm_str_t *out, const char *url);

/**
 * Declares the whole path of `base` (a node's base URL, upstreams[].secretPath) secret: from
 * then on bm_url_mask shows any URL that starts with it (followed by nothing, '/', '?' or
 * '#') with that whole path replaced by one masked segment, and the request's own path after
 * it kept (masked by the heuristic only). Process-wide, for the process's life (the
 * configuration calls it before anything is logged); `base` is copied. Returns 0, BM_EINVAL
 * for an empty base, or BM_ENOMEM.
 */
int bm_url_secret_path_add(const char *base);

/** Forgets every base declared with bm_url_secret_path_add (tests, and the end of main). */
void bm_url_secret_path_clear(void);

/**
 * True when `url` is usable as an upstream's base URL: an absolute http:// or https:// URL
 * (scheme in any case) with a non-empty host name, IPv4 or bracketed IPv6 literal, an
 * optional user info and port (1..65535) and an optional path without dot segments.
 * Queries, fragments, spaces, control and non-ASCII bytes are refused.
 */
bool bm_url_valid(const char *url);

/**
 * What is wrong with the path of an upstream's base URL (`url` is a whole http(s) URL), as
 * a phrase for a message ("has a dot segment ..."), or NULL when the path is one
 * bm_url_valid accepts (or `url` has no http(s) scheme: that is for the caller to say).
 * Static storage.
 */
const char *bm_url_base_path_problem(const char *url);

/**
 * What is wrong with a client's request target (path and query, as bm_url_join takes it), as
 * a phrase, or NULL when bm_url_join accepts it: it must start with '/' (origin-form: no
 * absolute URL, no '*'), be printable ASCII, hold no fragment or backslash, and its path no
 * malformed escape and no "." or ".." segment, written or escaped. Static storage.
 */
const char *bm_url_target_problem(const char *target);

/** True when p[0..n) is visible ASCII only (0x21 to 0x7e): no space, control or
 *  non-ASCII byte. Checks eight bytes at a time (it runs on every request URL). */
bool bm_url_printable(const char *p, size_t n);

/**
 * The value of query parameter `name` in query[0..len) (no '?'; may be NULL), copied
 * NUL-terminated into out[0..cap) as it stands (not percent-decoded; the first
 * occurrence; a bare `name` has the empty value). Returns its length, BM_ENOTFOUND when
 * the parameter is absent, or BM_ETOOBIG when its value does not fit in cap - 1 bytes.
 */
int bm_url_query_param(const char *query, size_t len, const char *name, char *out, size_t cap);

#endif /* BM_URL_H */
