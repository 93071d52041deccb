/* SPDX-License-Identifier: MIT */
/*
 * rules: compiled path patterns and the read path's table of blocked paths, client routes
 * and route rules (see rules.h).
 */
#include "read/rules.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/json.h"
#include "read/sticky.h"

#define MAX_SEGMENTS 32
#define NORM_MAX 2048

typedef struct segment {
    const char *text; /* into the pattern's copy; NULL for `*` */
    size_t len;
} segment_t;

struct bm_pattern {
    char *text;
    char *copy; /* segments point into it */
    segment_t seg[MAX_SEGMENTS];
    size_t n;
    bool rest; /* the last segment is `*`: matches one or more segments */
};

struct bm_rules {
    bm_pattern_t **blocked;
    size_t n_blocked;
    bm_rule_t *rules;
    size_t n_rules;
    bm_client_route_t *routes;
    size_t n_routes;
};

const char *bm_pattern_problem(const char *text)
{
    size_t n = strlen(text), segs = 0;
    if (n == 0 || text[0] != '/')
        return "must start with '/'";
    if (n > BM_PATTERN_MAX)
        return "is longer than 512 bytes";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c <= 0x20 || c == 0x7f)
            return "must not contain spaces or control characters";
        if (c == '?' || c == '#' || c == '%')
            return "must not contain '?', '#' or '%' (a pattern matches the decoded path)";
    }
    if (n == 1)
        return NULL; /* "/" alone: the root */
    for (const char *s = text + 1;; segs++) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == 0)
            return e ? "has an empty segment (\"//\")" : "must not end with '/'";
        if (memchr(s, '*', len) && len != 1)
            return "may use '*' only as a whole segment (\"/states/*/validators\")";
        if (segs + 1 > MAX_SEGMENTS)
            return "has more than 32 segments";
        if (!e)
            break;
        s = e + 1;
    }
    return NULL;
}

bm_pattern_t *bm_pattern_compile(const char *text)
{
    if (bm_pattern_problem(text))
        return NULL;
    bm_pattern_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->text = strdup(text);
    p->copy = strdup(text);
    if (!p->text || !p->copy) {
        bm_pattern_free(p);
        return NULL;
    }
    for (char *s = p->copy + 1; *s;) {
        char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        p->seg[p->n].text = (len == 1 && *s == '*') ? NULL : s;
        p->seg[p->n].len = len;
        p->n++;
        if (!e)
            break;
        s = e + 1;
    }
    p->rest = p->n > 0 && !p->seg[p->n - 1].text;
    return p;
}

void bm_pattern_free(bm_pattern_t *p)
{
    if (!p)
        return;
    free(p->text);
    free(p->copy);
    free(p);
}

const char *bm_pattern_text(const bm_pattern_t *p)
{
    return p->text;
}

/* A path's segments, split once so that several patterns are matched without scanning it
 * again: the text after the leading '/', cut at each '/'. A trailing '/' leaves an empty last
 * segment, which no pattern matches (patterns have no empty segment). */
typedef struct path_segs {
    uint32_t off[MAX_SEGMENTS + 1], len[MAX_SEGMENTS + 1];
    size_t n; /* MAX_SEGMENTS + 1: more than any pattern has (only a trailing * takes them) */
} path_segs_t;

static bool split_path(const char *path, size_t n, path_segs_t *ps)
{
    ps->n = 0;
    if (n == 0 || path[0] != '/')
        return false;
    for (size_t i = 1; n > 1 && ps->n <= MAX_SEGMENTS;) {
        const char *e = memchr(path + i, '/', n - i);
        size_t len = e ? (size_t)(e - (path + i)) : n - i;
        ps->off[ps->n] = (uint32_t)i;
        ps->len[ps->n++] = (uint32_t)len;
        if (!e)
            break;
        i += len + 1;
    }
    return true;
}

static bool match_segs(const bm_pattern_t *p, const char *path, const path_segs_t *ps)
{
    if (p->n == 0)
        return ps->n == 0; /* "/" alone */
    if (ps->n < p->n || (!p->rest && ps->n != p->n))
        return false;
    for (size_t k = 0; k < p->n; k++) {
        size_t len = ps->len[k];
        if (len == 0)
            return false;
        if (p->rest && k == p->n - 1)
            return true; /* the rest of the path, one or more segments */
        const segment_t *g = &p->seg[k];
        if (g->text && (g->len != len || memcmp(g->text, path + ps->off[k], len) != 0))
            return false;
    }
    return true;
}

bool bm_pattern_match(const bm_pattern_t *p, const char *path, size_t n)
{
    path_segs_t ps;
    return split_path(path, n, &ps) && match_segs(p, path, &ps);
}

size_t bm_rules_normalise(const char *path, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    const char *q = memchr(path, '?', n);
    if (q)
        n = (size_t)(q - path);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)path[i];
        if (c == '%' && i + 2 < n && bm_hexval(path[i + 1]) >= 0 && bm_hexval(path[i + 2]) >= 0) {
            c = (unsigned char)(bm_hexval(path[i + 1]) * 16 + bm_hexval(path[i + 2]));
            i += 2;
        }
        if (c < 0x20 || c == 0x7f)
            return (size_t)-1;
        if (c == '/' && o > 0 && out[o - 1] == '/')
            continue;
        if (o + 1 >= cap)
            return (size_t)-1;
        out[o++] = (char)c;
    }
    if (o > 1 && out[o - 1] == '/')
        o--; /* "/a/b/" is "/a/b" */
    out[o] = '\0';
    return o;
}

bm_rules_t *bm_rules_new(void)
{
    return calloc(1, sizeof(bm_rules_t));
}

void bm_rules_free(bm_rules_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_blocked; i++)
        bm_pattern_free(t->blocked[i]);
    for (size_t i = 0; i < t->n_rules; i++)
        bm_pattern_free(t->rules[i].path);
    for (size_t i = 0; i < t->n_routes; i++)
        free(t->routes[i].prefix);
    free(t->blocked);
    free(t->rules);
    free(t->routes);
    free(t);
}

const char *const bm_rules_default_blocked[] = {
    "/lighthouse/database/*",   /* reconstruct, historical_blocks: write the node's store */
    "/lighthouse/logging",      /* the node's log stream */
    "/lighthouse/add_peer",     /* peers added and removed */
    "/lighthouse/remove_peer",  /* */
    "/lighthouse/compaction",   /* a database compaction on demand */
    "/eth/v1/lodestar/*",       /* heap dumps, profiles, peers connected and dropped */
    "/teku/v1/admin/log_level", /* the log level; readiness and liveness stay open */
    "/eth/v1/keystores",        /* keymanager API: keys imported, listed and deleted */
    "/eth/v1/remotekeys",
    "/eth/v1/validator/*/feerecipient",
    "/eth/v1/validator/*/gas_limit",
    "/eth/v1/validator/*/graffiti",
    "/eth/v1/validator/*/voluntary_exit", /* signs an exit with the node's own keys */
    NULL,
};

int bm_rules_add_blocked(bm_rules_t *t, const char *pattern)
{
    if (bm_pattern_problem(pattern))
        return BM_EINVAL;
    bm_pattern_t **g = realloc(t->blocked, (t->n_blocked + 1) * sizeof *g);
    if (!g)
        return BM_ENOMEM;
    t->blocked = g;
    if (!(g[t->n_blocked] = bm_pattern_compile(pattern)))
        return BM_ENOMEM;
    t->n_blocked++;
    return 0;
}

void bm_rule_init(bm_rule_t *r)
{
    *r = (bm_rule_t){0};
    r->timeout_ms = r->max_attempts = r->delay_ms = r->backoff_milli = BM_RULE_INHERIT;
    r->max_delay_ms = r->jitter_ms = r->hedge_delay_ms = r->hedge_max_count = BM_RULE_INHERIT;
    r->strategy = -1;
}

int bm_rules_add_rule(bm_rules_t *t, const bm_rule_t *r)
{
    bm_rule_t *g = realloc(t->rules, (t->n_rules + 1) * sizeof *g);
    if (!g) {
        bm_pattern_free(r->path);
        return BM_ENOMEM;
    }
    t->rules = g;
    g[t->n_rules++] = *r;
    return 0;
}

int bm_rules_add_client_route(bm_rules_t *t, const char *prefix, int client, uint64_t nodes,
                              bool strip_prefix)
{
    size_t n = strlen(prefix);
    if (n < 2 || prefix[0] != '/' || prefix[n - 1] == '/')
        return BM_EINVAL;
    for (size_t i = 0; i < t->n_routes; i++)
        if (strcmp(t->routes[i].prefix, prefix) == 0)
            return 0;
    bm_client_route_t *g = realloc(t->routes, (t->n_routes + 1) * sizeof *g);
    if (!g)
        return BM_ENOMEM;
    t->routes = g;
    char *copy = strdup(prefix);
    if (!copy)
        return BM_ENOMEM;
    g[t->n_routes++] = (bm_client_route_t){copy, client, nodes, strip_prefix};
    return 0;
}

bool bm_rules_blocked(const bm_rules_t *t, const char *path, size_t n)
{
    char norm[NORM_MAX];
    if (t->n_blocked == 0)
        return false;
    size_t nn = bm_rules_normalise(path, n, norm, sizeof norm);
    if (nn == (size_t)-1)
        return true; /* a path that cannot be normalised is refused rather than guessed at */
    const char *q = memchr(path, '?', n);
    size_t raw = q ? (size_t)(q - path) : n;
    /* the path as written and as decoded, each split once; most paths need no decoding */
    path_segs_t as_written, decoded;
    bool written_ok = split_path(path, raw, &as_written);
    bool differs = nn != raw || memcmp(norm, path, raw) != 0;
    bool decoded_ok = differs && split_path(norm, nn, &decoded);
    for (size_t i = 0; i < t->n_blocked; i++) {
        if (written_ok && match_segs(t->blocked[i], path, &as_written))
            return true;
        if (decoded_ok && match_segs(t->blocked[i], norm, &decoded))
            return true;
    }
    return false;
}

const bm_rule_t *bm_rules_match(const bm_rules_t *t, const char *method, const char *path, size_t n)
{
    char norm[NORM_MAX];
    if (t->n_rules == 0)
        return NULL;
    size_t nn = bm_rules_normalise(path, n, norm, sizeof norm);
    path_segs_t segs; /* split once for every rule */
    if (nn == (size_t)-1 || !split_path(norm, nn, &segs))
        return NULL;
    for (size_t i = 0; i < t->n_rules; i++) {
        const bm_rule_t *r = &t->rules[i];
        if (r->method[0] && strcasecmp(r->method, method) != 0)
            continue;
        if (match_segs(r->path, norm, &segs))
            return r;
    }
    return NULL;
}

const bm_client_route_t *bm_rules_client_route(const bm_rules_t *t, const char *path, size_t n,
                                               size_t *rest)
{
    for (size_t i = 0; i < t->n_routes; i++) {
        const bm_client_route_t *r = &t->routes[i];
        if (n < 2 || path[1] != r->prefix[1]) /* a prefix is '/' and at least one byte */
            continue;
        size_t len = strlen(r->prefix);
        if (n < len || memcmp(path, r->prefix, len) != 0)
            continue;
        if (n > len && path[len] != '/' && path[len] != '?')
            continue;
        *rest = len;
        return r;
    }
    return NULL;
}

size_t bm_rules_client_route_count(const bm_rules_t *t)
{
    return t->n_routes;
}

const bm_client_route_t *bm_rules_client_route_at(const bm_rules_t *t, size_t i)
{
    return i < t->n_routes ? &t->routes[i] : NULL;
}

/* True when the path's segments are `a` / any / `b` with a = "/eth/v1/beacon/states". */
static bool state_sub(const char *path, size_t n, const char *sub)
{
    static const char pre[] = "/eth/v1/beacon/states/";
    size_t pl = sizeof pre - 1, sl = strlen(sub);
    if (n <= pl + sl + 1 || memcmp(path, pre, pl) != 0)
        return false;
    const char *id_end = memchr(path + pl, '/', n - pl);
    if (!id_end || id_end == path + pl)
        return false;
    size_t after = (size_t)(id_end + 1 - path);
    return n - after == sl && memcmp(id_end + 1, sub, sl) == 0;
}

static bool has_prefix(const char *path, size_t n, const char *pre)
{
    size_t l = strlen(pre);
    return n > l && memcmp(path, pre, l) == 0;
}

static size_t path_len(const char *path, size_t n)
{
    const char *q = memchr(path, '?', n);
    return q ? (size_t)(q - path) : n;
}

bool bm_rules_is_read(const char *method, const char *path, size_t n)
{
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
        return true;
    if (strcmp(method, "POST") != 0)
        return false;
    n = path_len(path, n);
    return state_sub(path, n, "validators") || state_sub(path, n, "validator_balances") ||
           state_sub(path, n, "validator_identities") ||
           has_prefix(path, n, "/eth/v1/beacon/rewards/sync_committee/") ||
           has_prefix(path, n, "/eth/v1/beacon/rewards/attestations/");
}

/* True when the text holds a validator id: a digit or a 0x public key. */
static bool names_an_id(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] >= '0' && s[i] <= '9')
            return true;
    return false;
}

bool bm_rules_is_heavy(const char *method, const char *path, size_t n, const char *query,
                       size_t qlen, const char *body, size_t blen)
{
    n = path_len(path, n);
    if (has_prefix(path, n, "/eth/v2/debug/beacon/states/") ||
        has_prefix(path, n, "/eth/v1/debug/beacon/states/"))
        return true;
    if (!state_sub(path, n, "validators") && !state_sub(path, n, "validator_balances"))
        return false;
    if (strcmp(method, "POST") == 0)
        return !body || !names_an_id(body, blen);
    /* GET: heavy without an `id` parameter */
    for (size_t i = 0; query && i + 3 <= qlen; i++)
        if ((i == 0 || query[i - 1] == '&') && memcmp(query + i, "id=", 3) == 0)
            return false;
    return true;
}

/* A route's key (see rules.h): the method and the path with its ids (numbers, 0x
 * values) replaced, so that /blocks/1 and /blocks/2 share what a node said. */
uint64_t bm_rules_route_key(const char *method, const char *path, size_t n)
{
    char shape[512];
    size_t o = 0;
    const char *q = memchr(path, '?', n);
    if (q)
        n = (size_t)(q - path);
    for (size_t i = 0; i < n && o + 2 < sizeof shape;) {
        size_t len = strcspn(path + i, "/");
        if (len > n - i)
            len = n - i;
        bool id = len > 0 && ((path[i] >= '0' && path[i] <= '9') ||
                              (len > 2 && path[i] == '0' && path[i + 1] == 'x'));
        if (id) {
            shape[o++] = '*';
        } else {
            size_t c = len < sizeof shape - o - 2 ? len : sizeof shape - o - 2;
            memcpy(shape + o, path + i, c);
            o += c;
        }
        i += len;
        if (i < n && o + 1 < sizeof shape) {
            shape[o++] = '/';
            i++;
        }
    }
    uint64_t h = bm_sticky_key(method, strlen(method));
    return h ^ bm_sticky_key(shape, o);
}
