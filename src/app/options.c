/* SPDX-License-Identifier: MIT */
/*
 * options: which key of the configuration feeds which module option (see options.h).
 */
#include "app/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"

/*
 * One line per pair: the key's field in bm_config_t, then the option's field in
 * bm_options_t. A key feeds every option listed after it. Each line is an assignment whose
 * types the compiler checks; the assertion refuses a narrowing one (a 64-bit size into a
 * 32-bit option).
 */
// clang-format off
#define BINDINGS(B)                                                                                \
    /* tls */                                                                                      \
    B(tls.verify,                        upstream.tls_verify)                                      \
    B(tls.ca_file,                       upstream.ca_file)                                         \
    /* server */                                                                                   \
    B(server.max_body_bytes,             server.max_body_bytes)                                    \
    B(server.max_header_bytes,           server.max_header_bytes)                                  \
    B(server.max_target_bytes,           server.max_target_bytes)                                  \
    B(server.header_timeout_ms,          server.header_timeout_ms)                                 \
    B(server.body_timeout_ms,            server.body_timeout_ms)                                   \
    B(server.body_deadline_ms,           server.body_deadline_ms)                                  \
    B(server.idle_timeout_ms,            server.idle_timeout_ms)                                   \
    B(server.max_connections,            server.max_connections)                                   \
    B(server.max_connections_per_client, server.max_connections_per_client)                        \
    B(server.send_timeout_ms,            server.send_timeout_ms)                                   \
    B(server.reuse_port,                 server.reuse_port)                                        \
    /* timeouts.connect: every module that connects to nodes */                                    \
    B(timeouts.connect_ms,               discovery.connect_timeout_ms)                             \
    B(timeouts.connect_ms,               readpath.connect_timeout_ms)                              \
    B(timeouts.connect_ms,               monitor.connect_timeout_ms)                               \
    B(timeouts.connect_ms,               events.connect_timeout_ms)                                \
    B(timeouts.connect_ms,               attest.connect_timeout_ms)                                \
    B(timeouts.connect_ms,               produce.connect_timeout_ms)                               \
    B(timeouts.connect_ms,               aggregate.connect_timeout_ms)                             \
    B(timeouts.connect_ms,               duties.connect_timeout_ms)                                \
    B(timeouts.connect_ms,               replay.connect_timeout_ms)                                \
    B(timeouts.connect_ms,               broadcast.connect_timeout_ms)                             \
    /* timeouts.read, timeouts.write */                                                            \
    B(timeouts.read_ms,                  readpath.read_timeout_ms)                                 \
    B(timeouts.read_ms,                  monitor.request_timeout_ms)                               \
    B(timeouts.read_ms,                  broadcast.read_timeout_ms)                                \
    B(timeouts.write_ms,                 readpath.write_timeout_ms)                                \
    /* the read path (failsafe.retry.maxAttempts is in bm_options_from_config) */                  \
    B(failsafe.timeout_ms,               readpath.timeout_ms)                                      \
    B(failsafe.heavy_timeout_ms,         readpath.heavy_timeout_ms)                                \
    B(failsafe.retry.delay_ms,           readpath.retry_delay_ms)                                  \
    B(failsafe.retry.backoff,            readpath.retry_backoff_milli)                             \
    B(failsafe.retry.max_delay_ms,       readpath.retry_max_delay_ms)                              \
    B(failsafe.retry.jitter_ms,          readpath.retry_jitter_ms)                                 \
    B(failsafe.hedge.delay_ms,           readpath.hedge_delay_ms)                                  \
    B(failsafe.hedge.max_count,          readpath.hedge_max_count)                                 \
    B(failsafe.hedge.max_ratio,          readpath.hedge_max_ratio_milli)                           \
    B(failsafe.hedge.max_priority,       readpath.hedge_max_priority)                              \
    B(failsafe.circuit_breaker.failure_threshold, readpath.breaker.failure_threshold)              \
    B(failsafe.circuit_breaker.success_threshold, readpath.breaker.success_threshold)              \
    B(failsafe.circuit_breaker.half_open_after_ms, readpath.breaker.half_open_after_ms)            \
    B(routing.load_balancing,            readpath.strategy)                                        \
    B(routing.score_weights.error_rate,  readpath.weights.error_rate)                              \
    B(routing.score_weights.latency,     readpath.weights.latency)                                 \
    B(routing.score_weights.head_lag,    readpath.weights.head_lag)                                \
    B(routing.score_weights.sync_distance, readpath.weights.sync_distance)                         \
    B(routing.sticky.enabled,            readpath.sticky)                                          \
    B(routing.sticky.rebalance_factor,   readpath.sticky_factor_milli)                             \
    B(routing.retention.blob_epochs,     readpath.retention.blob_epochs)                           \
    B(routing.retention.block_epochs,    readpath.retention.block_epochs)                          \
    B(routing.retention.state_slots,     readpath.retention.state_slots)                           \
    /* discovery, health */                                                                        \
    B(discovery.retry_interval_ms,       discovery.retry_interval_ms)                              \
    B(health.max_head_lag,               health.max_head_lag)                                      \
    B(health.head_quorum,                health.head_quorum)                                       \
    /* events */                                                                                   \
    B(events.keepalive_ms,               events.keepalive_ms)                                      \
    B(events.subscriber_max_pending,     events.subscriber_max_pending)                            \
    B(events.dedup_window,               events.dedup_window)                                      \
    B(events.headers_timeout_ms,         events.headers_timeout_ms)                                \
    B(events.headers_timeout_ms,         monitor.headers_timeout_ms)                               \
    /* duties (the per-duty holds are in bm_options_from_config) */                                \
    B(duties.proposal_deadline_ms,       produce.proposal_deadline_ms)                             \
    B(duties.max_hold_ms,                produce.max_hold_ms)                                      \
    B(duties.block_selection,            produce.selection)                                        \
    B(duties.best_value_grace_ms,        produce.best_value_grace_ms)                              \
    B(duties.aggregate_grace_ms,         aggregate.grace_ms)                                       \
    B(duties.checkpoint_quorum,          attest.checkpoint_quorum)                                 \
    B(duties.checkpoint_mode,            attest.checkpoint_mode)                                   \
    B(duties.duties_majority_after_ms,   duties.majority_after_ms)                                 \
    B(duties.write_timeout_ms,           replay.timeout_ms)                                        \
    B(duties.write_timeout_ms,           broadcast.write_timeout_ms)                               \
    /* cache */                                                                                    \
    B(cache.enabled,                     cache.enabled)                                            \
    B(cache.max_entries,                 cache.max_entries)                                        \
    B(cache.max_bytes,                   cache.max_bytes)                                          \
    B(cache.max_entry_bytes,             cache.max_entry_bytes)                                    \
    B(cache.chain_ttl_ms,                cache.chain_ttl_ms)                                       \
    B(cache.clock_ttl_ms,                cache.clock_ttl_ms)                                       \
    B(cache.gzip_min_bytes,              cache.gzip_min_bytes)                                     \
    B(cache.gzip_level,                  cache.gzip_level)                                         \
    /* observe */                                                                                  \
    B(log.access,                        observe.access_log)                                       \
    B(metrics.enabled,                   observe.metrics)                                          \
    B(journal.slots,                     observe.journal_slots)                                    \
    B(ui.enabled,                        observe.ui)
// clang-format on

#define ASSIGN(from, to)                                                                           \
    _Static_assert(sizeof(((bm_options_t *)0)->to) >= sizeof(((bm_config_t *)0)->from),            \
                   #from " does not fit " #to);                                                    \
    o->to = cfg->from;

int bm_options_from_config(bm_options_t *o, const bm_config_t *cfg)
{
    /* the per-duty holds: hint's duties and aggregate's kinds, each with its config duty */
    static const struct {
        bm_hint_duty_t hint;
        bm_config_duty_t cfg;
    } hint_holds[] = {
        {BM_HINT_ATTESTATION_DATA, BM_CONFIG_DUTY_ATTESTATION_DATA},
        {BM_HINT_HEAD_ROOT, BM_CONFIG_DUTY_HEAD_ROOT},
        {BM_HINT_PAYLOAD_ATTESTATION, BM_CONFIG_DUTY_PAYLOAD_ATTESTATION_DATA},
        {BM_HINT_AGGREGATE, BM_CONFIG_DUTY_AGGREGATE_ATTESTATION},
        {BM_HINT_SYNC_CONTRIBUTION, BM_CONFIG_DUTY_SYNC_COMMITTEE_CONTRIBUTION},
    };
    memset(o, 0, sizeof *o);
    bm_upstream_opts_default(&o->upstream);
    bm_server_opts_default(&o->server);
    bm_health_opts_default(&o->health);
    bm_discovery_opts_default(&o->discovery);
    bm_readpath_opts_default(&o->readpath);
    bm_monitor_opts_default(&o->monitor);
    bm_events_opts_default(&o->events);
    bm_hint_opts_default(&o->hint);
    bm_attest_opts_default(&o->attest);
    bm_produce_opts_default(&o->produce);
    bm_aggregate_opts_default(&o->aggregate);
    bm_duties_opts_default(&o->duties);
    bm_replay_opts_default(&o->replay);
    bm_broadcast_opts_default(&o->broadcast);
    bm_cache_opts_default(&o->cache);
    bm_observe_opts_default(&o->observe);

    BINDINGS(ASSIGN)
    if (cfg->metrics.path)
        o->observe.metrics_path = cfg->metrics.path;
    o->readpath.max_attempts = bm_config_max_attempts(cfg);
    const char *sk = cfg->routing.sticky.key;
    o->readpath.sticky_header = sk && strcmp(sk, "address") != 0 ? sk : NULL;

    /* events.headersTimeout unset: the streams' own rule alone (at least two slots) */
    if (cfg->events.headers_timeout_ms == BM_CONFIG_UNSET) {
        o->events.headers_timeout_ms = BM_DEFAULT_EVENTS_HEADERS_TIMEOUT_MS;
        o->monitor.headers_timeout_ms = BM_DEFAULT_EVENTS_HEADERS_TIMEOUT_MS;
    }

    for (size_t i = 0; i < sizeof hint_holds / sizeof hint_holds[0]; i++)
        bm_config_duty_hold(cfg, hint_holds[i].cfg, &o->hint.hold[hint_holds[i].hint].hold_floor_ms,
                            &o->hint.hold[hint_holds[i].hint].max_hold_ms);
    bm_config_duty_hold(cfg, BM_CONFIG_DUTY_AGGREGATE_ATTESTATION,
                        &o->aggregate.hold_floor_ms[BM_AGGREGATE_ATTESTATION],
                        &o->aggregate.max_hold_ms[BM_AGGREGATE_ATTESTATION]);
    bm_config_duty_hold(cfg, BM_CONFIG_DUTY_SYNC_COMMITTEE_CONTRIBUTION,
                        &o->aggregate.hold_floor_ms[BM_AGGREGATE_CONTRIBUTION],
                        &o->aggregate.max_hold_ms[BM_AGGREGATE_CONTRIBUTION]);
    if (cfg->genesis_validators_root) {
        if (bm_hex_to_root(cfg->genesis_validators_root, o->discovery.genesis_root) != 0)
            return BM_EINVAL;
        o->discovery.has_genesis_root = true;
    }
    return 0;
}

void bm_options_readpath_node(const bm_config_t *cfg, size_t i, bm_readpath_node_opts_t *o)
{
    const bm_config_upstream_t *u = &cfg->upstreams[i];
    *o = (bm_readpath_node_opts_t){u->priority,      u->weight,        u->archive,
                                   u->auto_tune.min, u->auto_tune.max, u->max_connections};
}

/* The node positions named by ids and by tiers (priorities given as text). */
static uint64_t nodes_of(const bm_config_t *cfg, char *const *ids, size_t n_ids, char *const *tiers,
                         size_t n_tiers)
{
    uint64_t m = 0;
    for (size_t i = 0; i < cfg->n_upstreams && i < 64; i++) {
        for (size_t j = 0; j < n_ids; j++)
            if (strcmp(cfg->upstreams[i].id, ids[j]) == 0)
                m |= 1ull << i;
        for (size_t j = 0; j < n_tiers; j++)
            if (strtoul(tiers[j], NULL, 10) == cfg->upstreams[i].priority)
                m |= 1ull << i;
    }
    return m;
}

static int add_route_rule(bm_rules_t *t, const bm_config_t *cfg, const bm_config_route_rule_t *c)
{
    bm_rule_t r;
    bm_rule_init(&r);
    if (c->method)
        snprintf(r.method, sizeof r.method, "%s", c->method);
    if (!(r.path = bm_pattern_compile(c->path)))
        return BM_ENOMEM;
    r.timeout_ms = c->timeout_ms;
    r.max_attempts = c->retry.max_attempts;
    r.delay_ms = c->retry.delay_ms;
    r.backoff_milli = c->retry.backoff;
    r.max_delay_ms = c->retry.max_delay_ms;
    r.jitter_ms = c->retry.jitter_ms;
    r.hedge_delay_ms = c->hedge.delay_ms;
    r.hedge_max_count = c->hedge.max_count;
    r.consensus_query = c->consensus.query;
    r.consensus_agree = c->consensus.agree;
    r.strategy = c->strategy - 1;
    r.restrict_nodes = c->n_upstreams > 0 || c->n_tiers > 0;
    r.nodes = nodes_of(cfg, c->upstreams, c->n_upstreams, c->tiers, c->n_tiers);
    r.blocked = c->blocked;
    return bm_rules_add_rule(t, &r);
}

bm_rules_t *bm_options_rules(const bm_config_t *cfg)
{
    static const char *const builtin[] = {"lighthouse", "prysm",    "teku",  "nimbus",
                                          "lodestar",   "grandine", "caplin"};
    bm_rules_t *t = bm_rules_new();
    int rc = t ? 0 : BM_ENOMEM;
    for (size_t i = 0; !rc && i < cfg->n_blocked_paths; i++)
        rc = bm_rules_add_blocked(t, cfg->blocked_paths[i]);
    for (size_t i = 0; !rc && i < cfg->n_route_rules; i++)
        rc = add_route_rule(t, cfg, &cfg->route_rules[i]);
    for (size_t i = 0; !rc && i < cfg->n_client_routes; i++) {
        const bm_config_client_route_t *c = &cfg->client_routes[i];
        int client = c->client ? (int)bm_client_parse(c->client, strlen(c->client)) : 0;
        rc = bm_rules_add_client_route(t, c->prefix, client,
                                       nodes_of(cfg, c->upstreams, c->n_upstreams, NULL, 0),
                                       c->strip_prefix);
    }
    for (size_t i = 0; !rc && i < sizeof builtin / sizeof builtin[0]; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "/%s", builtin[i]);
        rc = bm_rules_add_client_route(
            t, prefix, (int)bm_client_parse(builtin[i], strlen(builtin[i])), 0, false);
    }
    if (rc) {
        bm_rules_free(t);
        return NULL;
    }
    return t;
}

/* ---- the edge --------------------------------------------------------------------------- */

/* The items of a list joined with ", " (NULL for none; caller frees). */
static char *joined(char *const *items, size_t n)
{
    if (n == 0)
        return NULL;
    bm_str_t s = BM_STR_INIT;
    for (size_t i = 0; i < n; i++) {
        if (i)
            bm_str_puts(&s, ", ");
        bm_str_puts(&s, items[i]);
    }
    char *r = s.oom ? NULL : strdup(bm_str_data(&s));
    bm_str_dispose(&s);
    return r;
}

static bm_rate_t rate_of(const bm_config_rate_t *r)
{
    return (bm_rate_t){(double)r->rate, (double)(r->burst ? r->burst : r->rate)};
}

static int cidrs_of(char *const *items, size_t n, bm_cidr_t **out)
{
    *out = n ? calloc(n, sizeof **out) : NULL;
    if (n && !*out)
        return BM_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (bm_cidr_parse(items[i], &(*out)[i]) != 0)
            return BM_EINVAL;
    return 0;
}

int bm_options_edge(bm_edge_options_t *e, const bm_config_t *cfg)
{
    memset(e, 0, sizeof *e);
    bm_front_opts_t *f = &e->front;
    int rc = cidrs_of(cfg->trusted_proxies, cfg->n_trusted_proxies, &e->trusted);
    if (!rc)
        rc = cidrs_of(cfg->server.allowed_clients, cfg->server.n_allowed_clients, &e->allowed);
    if (rc)
        return rc;
    f->trusted = e->trusted;
    f->n_trusted = cfg->n_trusted_proxies;
    f->allowed = e->allowed;
    f->n_allowed = cfg->server.n_allowed_clients;
    size_t nk = cfg->auth.n_keys;
    e->keys = nk ? calloc(nk, sizeof *e->keys) : NULL;
    if (nk && !e->keys)
        return BM_ENOMEM;
    for (size_t i = 0; i < nk; i++) {
        const bm_config_key_t *k = &cfg->auth.keys[i];
        bm_auth_key_t *a = &e->keys[i];
        a->id = k->id;
        a->secret = k->secret;
        a->networks = (const char *const *)k->networks;
        a->n_networks = k->n_networks;
        for (size_t r = 0; r < k->n_routes; r++)
            a->routes |= bm_auth_route_parse(k->routes[r]);
        if (k->n_routes == 0)
            a->routes = BM_ROUTE_READ;
        a->rate = rate_of(&k->rate_limit);
    }
    f->keys = e->keys;
    f->n_keys = nk;
    const bm_config_cors_t *c = &cfg->cors;
    e->methods = joined(c->allowed_methods, c->n_allowed_methods);
    e->headers = joined(c->allowed_headers, c->n_allowed_headers);
    e->exposed = joined(c->exposed_headers, c->n_exposed_headers);
    f->cors = (bm_cors_opts_t){
        .origins = (const char *const *)c->allowed_origins,
        .n_origins = c->n_allowed_origins,
        .methods = e->methods ? e->methods : BM_DEFAULT_CORS_METHODS,
        .headers = e->headers,
        .exposed = e->exposed ? e->exposed : BM_DEFAULT_CORS_EXPOSED,
        .credentials = c->allow_credentials,
        .max_age_s = c->max_age_ms / 1000,
    };
    const bm_config_rate_limit_t *rl = &cfg->rate_limit;
    f->per_client = rate_of(&rl->per_client);
    f->global = rate_of(&rl->global);
    f->duties_per_client = rate_of(&rl->duties.per_client);
    f->duties_global = rate_of(&rl->duties.global);
    f->max_clients = rl->max_clients;
    return 0;
}

void bm_options_edge_dispose(bm_edge_options_t *e)
{
    free(e->keys);
    free(e->trusted);
    free(e->allowed);
    free(e->methods);
    free(e->headers);
    free(e->exposed);
    memset(e, 0, sizeof *e);
}
