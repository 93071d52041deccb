/* SPDX-License-Identifier: MIT */
/*
 * config_edge: the key table's sections of the client edge: cache, cors, rateLimit and
 * auth (docs/cache.md, docs/edge.md), with the checks of their values. The rows follow the
 * rules of config_keys.h; the networks[] rows, which reuse the read path's sections, stay
 * beside them in config_keys.c.
 */
#include <stdio.h>
#include <string.h>

#include "app/config_keys.h"
#include "app/config_rows.h"
#include "base/defaults.h"
#include "base/err.h"
#include "edge/auth.h"
#include "edge/front.h"

/* A rate with a burst: the burst defaults to the rate (one second of requests). */
static int rate_finish(const bm_cfg_entry_t *e, char *msg, size_t n, bm_cfg_pos_t *at)
{
    (void)msg;
    (void)n;
    (void)at;
    bm_config_rate_t *r = (bm_config_rate_t *)e->entries + e->index;
    if (r->rate && !r->burst)
        r->burst = r->rate;
    return 0;
}

/* Key ids unique; no secret shared by two keys. */
static int key_finish(const bm_cfg_entry_t *e, char *msg, size_t n, bm_cfg_pos_t *at)
{
    bm_config_key_t *keys = e->entries, *k = &keys[e->index];
    bm_cfg_quote_t q;
    for (size_t j = 0; j < e->index; j++) {
        if (k->id && keys[j].id && strcmp(keys[j].id, k->id) == 0) {
            *at = e->value_at[0];
            snprintf(msg, n, "%s: id %s is already used by %s[%zu]", e->path,
                     bm_cfg_quote(&q, k->id), e->list, j);
            return BM_EINVAL;
        }
        if (k->secret && keys[j].secret && strcmp(keys[j].secret, k->secret) == 0) {
            *at = e->value_at[1];
            snprintf(msg, n, "%s: its secret is the secret of %s[%zu] too", e->path, e->list, j);
            return BM_EINVAL;
        }
    }
    return 0;
}

static const char *secret_problem(const char *s)
{
    size_t n = strlen(s);
    if (n < 8)
        return "must be at least 8 characters";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f || c == '/')
            return "must not contain spaces, control characters or '/'";
    }
    return NULL;
}

static const char *route_problem(const char *s)
{
    return bm_auth_route_parse(s) ? NULL : "must be read, duties or admin";
}

static const char *origin_problem(const char *s)
{
    if (strcmp(s, "*") == 0)
        return NULL;
    const char *sep = strstr(s, "://");
    if (!sep || (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0))
        return "must be \"*\" or an origin such as \"https://app.example\"";
    const char *host = sep + 3;
    if (!*host || strchr(host, '/'))
        return "must be an origin: scheme, host and optional port, no path";
    for (const char *c = s; *c; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f)
            return "must not contain spaces or control characters";
    return NULL;
}

// clang-format off

#define T bm_config_cache_t
static const bm_cfg_key_t cache_keys[] = {
    BOOL(T,     "enabled",       enabled,         BM_DEFAULT_CACHE_ENABLED),
    COUNT(T,    "maxEntries",    max_entries,     1, 1u << 26, BM_DEFAULT_CACHE_MAX_ENTRIES),
    SIZE(T,     "maxBytes",      max_bytes,       KB, 64 * GB, BM_DEFAULT_CACHE_MAX_BYTES),
    SIZE(T,     "maxEntryBytes", max_entry_bytes, 1, 4 * GB, BM_DEFAULT_CACHE_MAX_ENTRY_BYTES),
    DURATION(T, "chainTtl",      chain_ttl_ms,    1, D_MAX, BM_DEFAULT_CACHE_CHAIN_TTL_MS),
    DURATION(T, "clockTtl",      clock_ttl_ms,    0, D_MAX, BM_DEFAULT_CACHE_CLOCK_TTL_MS),
    SIZE(T,     "gzipMinBytes",  gzip_min_bytes,  0, 4 * GB, BM_DEFAULT_CACHE_GZIP_MIN_BYTES),
    COUNT(T,    "gzipLevel",     gzip_level,      1, 9, BM_DEFAULT_CACHE_GZIP_LEVEL),
};
#undef T

#define T bm_config_cors_t
static const bm_cfg_key_t cors_keys[] = {
    STRINGS(T, "allowedOrigins",   allowed_origins, n_allowed_origins, 256, origin_problem),
    STRINGS(T, "allowedMethods",   allowed_methods, n_allowed_methods, 32, bm_cfg_method_problem),
    STRINGS(T, "allowedHeaders",   allowed_headers, n_allowed_headers, 64,
            bm_cfg_header_name_problem),
    STRINGS(T, "exposedHeaders",   exposed_headers, n_exposed_headers, 64,
            bm_cfg_header_name_problem),
    BOOL(T,    "allowCredentials", allow_credentials, false),
    DURATION(T, "maxAge",          max_age_ms, 0, D_MAX, BM_DEFAULT_CORS_MAX_AGE_MS),
};
#undef T

static const bm_cfg_key_t rate_keys[] = {
    COUNT(bm_config_rate_t, "rate",  rate,  0, 10000000, 0),
    COUNT(bm_config_rate_t, "burst", burst, 0, 10000000, 0),
};
static const bm_cfg_section_t rate_section = SECTION_OF(bm_config_rate_t, rate_keys, rate_finish);

static const bm_cfg_key_t rate_duties_keys[] = {
    SECTION(bm_config_rate_duties_t, "perClient", per_client, bm_config_rate_t, rate_section),
    SECTION(bm_config_rate_duties_t, "global",    global,     bm_config_rate_t, rate_section),
};
static const bm_cfg_section_t rate_duties_section =
    SECTION_OF(bm_config_rate_duties_t, rate_duties_keys, NULL);

#define T bm_config_rate_limit_t
static const bm_cfg_key_t rate_limit_keys[] = {
    SECTION(T, "perClient",  per_client, bm_config_rate_t,        rate_section),
    SECTION(T, "global",     global,     bm_config_rate_t,        rate_section),
    SECTION(T, "duties",     duties,     bm_config_rate_duties_t, rate_duties_section),
    COUNT(T,   "maxClients", max_clients, 64, 1u << 24, BM_DEFAULT_RATE_LIMIT_CLIENTS),
};
#undef T

#define T bm_config_key_t
static const bm_cfg_key_t key_keys[] = {
    TEXT(T,    "id",        id,     bm_cfg_id_problem, BM_CFG_REQUIRED), /* row 0 */
    TEXT(T,    "secret",    secret, secret_problem,    BM_CFG_REQUIRED | BM_CFG_SECRET),
    STRINGS(T, "networks",  networks, n_networks, 64, bm_front_network_id_problem),
    STRINGS(T, "routes",    routes,   n_routes,   3,  route_problem),
    SECTION(T, "rateLimit", rate_limit, bm_config_rate_t, rate_section),
};
#undef T
static const bm_cfg_section_t key_section = SECTION_OF(bm_config_key_t, key_keys, key_finish);

static const bm_cfg_key_t auth_keys[] = {
    LIST(bm_config_auth_t, "keys", keys, bm_config_key_t, n_keys, key_section, 256),
};
const bm_cfg_section_t bm_cfg_auth = SECTION_OF(bm_config_auth_t, auth_keys, NULL);
const bm_cfg_section_t bm_cfg_cache = SECTION_OF(bm_config_cache_t, cache_keys, NULL);
const bm_cfg_section_t bm_cfg_cors = SECTION_OF(bm_config_cors_t, cors_keys, NULL);
const bm_cfg_section_t bm_cfg_rate_limit =
    SECTION_OF(bm_config_rate_limit_t, rate_limit_keys, NULL);

// clang-format on
