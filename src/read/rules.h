/* SPDX-License-Identifier: MIT */
/*
 * rules: what the read path knows of a request before it asks any node, from its method and
 * path alone. Pure logic, no I/O; patterns are compiled once, when the configuration is
 * loaded, so a pattern that cannot compile is a configuration error and never a surprise
 * at run time.
 *
 * Path patterns: a pattern starts with '/' and is made of segments; a segment is literal
 * text or a star. A star in the middle matches exactly one segment (the validators of any
 * state: "/eth/v1/beacon/states/", star, "/validators"); a star as the last segment matches
 * the rest of the path (one or more segments), so "/eth/v1/debug/" and a star cover
 * everything under /eth/v1/debug/ (docs/read-path.md has the examples). No other
 * wildcard, no empty segment, no query ('?'), fragment ('#'), '%', space or control
 * character. Matching is on the path without its query, after percent-decoding and with
 * repeated slashes collapsed, so "/eth/v1/%64ebug//x" is "/eth/v1/debug/x"; a blocked path is
 * also checked as written.
 *
 * The table holds, in order of use:
 *   - blockedPaths: patterns answered 403 (a default deny list is just a list given first);
 *   - clientRoutes: a path prefix and the nodes it goes to (by node, or by client brand),
 *     optionally stripping the prefix; first match wins;
 *   - routeRules: method and pattern -> settings; first match wins.
 * And the route knowledge the read path needs: which POSTs are reads (validators,
 * validator_balances, ...), and which reads are heavy (full states, every validator).
 */
#ifndef BM_RULES_H
#define BM_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** A rule's number that is not set: the failsafe value applies. */
#define BM_RULE_INHERIT UINT32_MAX

/** Longest pattern, in bytes. */
#define BM_PATTERN_MAX 512

typedef struct bm_pattern bm_pattern_t;

/** Why `text` is not a valid pattern, or NULL. */
const char *bm_pattern_problem(const char *text);

/** Compiles `text`; NULL when it is invalid or memory ran out. Free with bm_pattern_free. */
bm_pattern_t *bm_pattern_compile(const char *text);

void bm_pattern_free(bm_pattern_t *p);

/** The text it was compiled from. */
const char *bm_pattern_text(const bm_pattern_t *p);

/** True when the path p[0..n) (no query; already normalised) matches. */
bool bm_pattern_match(const bm_pattern_t *p, const char *path, size_t n);

/**
 * Normalises a request path for matching: drops the query, percent-decodes, collapses
 * repeated '/'. Writes at most cap-1 bytes and a NUL into out; returns the length, or
 * (size_t)-1 when it does not fit or decodes to a NUL or a control character.
 */
size_t bm_rules_normalise(const char *path, size_t n, char *out, size_t cap);

/** One route rule with its settings; numbers at BM_RULE_INHERIT take the failsafe value. */
typedef struct bm_rule {
    char method[8];        /* "" = any method; else upper case ("GET") */
    bm_pattern_t *path;    /* owned */
    uint32_t timeout_ms;   /* the read's total deadline */
    uint32_t max_attempts; /* retry */
    uint32_t delay_ms;
    uint32_t backoff_milli; /* multiplier x 1000 */
    uint32_t max_delay_ms;
    uint32_t jitter_ms;
    uint32_t hedge_delay_ms; /* a hedge set here also hedges a heavy route */
    uint32_t hedge_max_count;
    uint32_t consensus_query; /* 0: no consensus */
    uint32_t consensus_agree;
    int strategy;        /* bm_balance_strategy_t, or -1 to inherit */
    bool restrict_nodes; /* only the nodes in `nodes` */
    uint64_t nodes;      /* bit i: the node of configuration position i */
    bool blocked;        /* answered 403 */
} bm_rule_t;

/** A client route: requests under `prefix` go to these nodes only. */
typedef struct bm_client_route {
    char *prefix;      /* owned; "/lighthouse" */
    int client;        /* a bm_client_t brand (cluster/pool.h) or 0 for `nodes` */
    uint64_t nodes;    /* bit i: node i (when client == 0) */
    bool strip_prefix; /* forward the path without the prefix */
} bm_client_route_t;

typedef struct bm_rules bm_rules_t;

/** An empty table. NULL on allocation failure. */
bm_rules_t *bm_rules_new(void);

void bm_rules_free(bm_rules_t *t);

/**
 * The default of blockedPaths (NULL-terminated): the nodes' own administration routes, which
 * change a node or read what is not the chain's (Lighthouse's database and logs, peers
 * added or removed, Lodestar's admin routes and Teku's log level, the keymanager API a node with a
 * built-in validator client serves). A configured blockedPaths replaces the whole list.
 * GET debug routes are not in it: checkpoint sync reads /eth/v2/debug/beacon/states/finalized.
 */
extern const char *const bm_rules_default_blocked[];

/** Adds a blocked pattern. Returns 0, BM_EINVAL (bad pattern) or BM_ENOMEM. */
int bm_rules_add_blocked(bm_rules_t *t, const char *pattern);

/** Adds a rule; `r` is copied and its `path` taken over (also on failure). 0 or BM_ENOMEM. */
int bm_rules_add_rule(bm_rules_t *t, const bm_rule_t *r);

/** A rule with every setting inherited and no path: fill it, then add it. */
void bm_rule_init(bm_rule_t *r);

/**
 * Adds a client route (prefix copied). A prefix already present is not added again (the
 * first one given wins), so built-in entries added after the configured ones yield to them.
 * Returns 0, BM_EINVAL (a prefix not starting with '/' or ending with one) or BM_ENOMEM.
 */
int bm_rules_add_client_route(bm_rules_t *t, const char *prefix, int client, uint64_t nodes,
                              bool strip_prefix);

/** True when the path (as written, with or without query) is blocked. */
bool bm_rules_blocked(const bm_rules_t *t, const char *path, size_t n);

/** The first rule matching method and path, or NULL. */
const bm_rule_t *bm_rules_match(const bm_rules_t *t, const char *method, const char *path,
                                size_t n);

/**
 * The client route whose prefix the path falls under (the path equals the prefix or
 * continues with '/' or '?'), or NULL. *rest gets the offset where the path continues
 * after the prefix.
 */
const bm_client_route_t *bm_rules_client_route(const bm_rules_t *t, const char *path, size_t n,
                                               size_t *rest);

/** Number of client routes, and the i-th. */
size_t bm_rules_client_route_count(const bm_rules_t *t);
const bm_client_route_t *bm_rules_client_route_at(const bm_rules_t *t, size_t i);

/** True for the read methods (GET, HEAD) and the Beacon API's reads sent as POST
 *  (states/{id}/validators, validator_balances, validator_identities, rewards). */
bool bm_rules_is_read(const char *method, const char *path, size_t n);

/**
 * True for heavy reads that are not hedged unless a rule says so: full states
 * (/eth/v2/debug/beacon/states/{id}) and every validator or balance of a state (no `id` in
 * the query of a GET, no id in the body of a POST).
 */
bool bm_rules_is_heavy(const char *method, const char *path, size_t n, const char *query,
                       size_t qlen, const char *body, size_t blen);

/**
 * A route's key: the method and the path (its query left out) with its ids (segments that
 * start with a digit, 0x values) replaced, hashed, so that /blocks/1 and /blocks/2 share
 * one key; the read path remembers per key and node what a node said (a 415 to SSZ).
 */
uint64_t bm_rules_route_key(const char *method, const char *path, size_t n);

#endif /* BM_RULES_H */
