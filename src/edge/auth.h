/* SPDX-License-Identifier: MIT */
/*
 * auth: API keys. Which key a request presents (Authorization: Bearer, X-Api-Key, HTTP
 * Basic with the secret as password, or a first path segment /{secret}/ for clients that
 * can only take a URL), which key that is (secrets compared in constant time against every
 * key, so the time taken says nothing of how close a guess was), and whether it may use a
 * route class on a network. The route class of a request is decided here too. Pure.
 */
#ifndef BM_AUTH_H
#define BM_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hdrs.h"
#include "edge/limit.h"

/** Route classes a key may be given (auth.keys[].routes). */
enum {
    BM_ROUTE_READ = 1 << 0,   /* ordinary reads, the event stream, static endpoints */
    BM_ROUTE_DUTIES = 1 << 1, /* validator duty reads and every write (pool, publish, ...) */
    BM_ROUTE_ADMIN = 1 << 2,  /* /beaconmux/... (status page, admin) */
};

/** One key. Strings are borrowed from the configuration. */
typedef struct bm_auth_key {
    const char *id;
    const char *secret;
    const char *const *networks; /* allowed network ids; n_networks 0: every network */
    size_t n_networks;
    unsigned routes; /* BM_ROUTE_* */
    bm_rate_t rate;  /* its own per-client limit (rate 0: rateLimit.perClient) */
} bm_auth_key_t;

/** Where the key was presented. */
typedef enum bm_auth_source {
    BM_AUTH_NONE = 0,
    BM_AUTH_BEARER,
    BM_AUTH_API_KEY,
    BM_AUTH_BASIC,
    BM_AUTH_PATH,
} bm_auth_source_t;

/**
 * The key `hdrs` present (Bearer, X-Api-Key or Basic, in that order), or else the first
 * segment of path[0..path_len) when it equals a key's secret. Returns the key (borrowed)
 * or NULL; sets *source (NONE when nothing was presented, also when a presented secret is
 * no key's: then *presented is true) and, for a path key, *skip: the bytes of "/{secret}"
 * to remove from the path.
 */
const bm_auth_key_t *bm_auth_find(const bm_auth_key_t *keys, size_t n, const bm_hdrs_t *hdrs,
                                  const char *path, size_t path_len, bm_auth_source_t *source,
                                  bool *presented, size_t *skip);

/** Whether `key` may use route `cls` (BM_ROUTE_*) on network `net` (NULL: the only one). */
bool bm_auth_allows(const bm_auth_key_t *key, unsigned cls, const char *net);

/**
 * The route class of a request: ADMIN for /beaconmux/..., DUTIES for validator routes
 * (/eth/v*\/validator/...), the duty read blocks/head/root and every write (a POST that is
 * not one of the Beacon API's reads), READ otherwise.
 */
unsigned bm_auth_route_class(const char *method, const char *path, size_t path_len);

/** Whether the request is a write (a POST that is not a read): never rate limited. */
bool bm_auth_is_write(const char *method, const char *path, size_t path_len);

/** "read", "duties", "admin" -> BM_ROUTE_*; 0 for anything else. */
unsigned bm_auth_route_parse(const char *name);

/** Constant-time equality of a[0..an) and b[0..bn) (time depends on bn only). */
bool bm_auth_equal(const char *a, size_t an, const char *b, size_t bn);

#endif /* BM_AUTH_H */
