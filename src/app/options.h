/* SPDX-License-Identifier: MIT */
/*
 * options: every module's options, as the configuration sets them.
 *
 * A module's options start at its `_opts_default()` (whose configurable values are the
 * constants of base/defaults.h, the same ones the key table gives a key absent from the
 * file), and then every key that feeds a module option overwrites it. Which key feeds which
 * option is one table in options.c (timeouts.connect feeds ten modules), so main only
 * wires modules together and a new key reaches its modules by adding a line there.
 */
#ifndef BM_OPTIONS_H
#define BM_OPTIONS_H

#include "app/config.h"
#include "cluster/discovery.h"
#include "cluster/events.h"
#include "cluster/health.h"
#include "cluster/monitor.h"
#include "duties/aggregate.h"
#include "duties/attest.h"
#include "duties/broadcast.h"
#include "duties/duties.h"
#include "duties/hint.h"
#include "duties/produce.h"
#include "duties/replay.h"
#include "edge/cache.h"
#include "edge/front.h"
#include "http/server.h"
#include "http/upstream.h"
#include "observe/observe.h"
#include "read/readpath.h"
#include "read/rules.h"

/** The options of every module main creates. */
typedef struct bm_options {
    bm_upstream_opts_t upstream;
    bm_server_opts_t server;
    bm_health_opts_t health;
    bm_discovery_opts_t discovery;
    bm_readpath_opts_t readpath;
    bm_monitor_opts_t monitor;
    bm_events_opts_t events;
    bm_hint_opts_t hint;
    bm_attest_opts_t attest;
    bm_produce_opts_t produce;
    bm_aggregate_opts_t aggregate;
    bm_duties_opts_t duties;
    bm_replay_opts_t replay;
    bm_broadcast_opts_t broadcast;
    bm_observe_opts_t observe;
    bm_cache_opts_t cache;
} bm_options_t;

/**
 * Fills `o` (zeroed first) with every module's defaults, then with what `cfg` sets.
 * Strings are borrowed from `cfg` (tls.caFile), which must outlive `o`. Returns 0, or
 * BM_EINVAL when cfg holds a value its validation refuses (genesisValidatorsRoot).
 */
int bm_options_from_config(bm_options_t *o, const bm_config_t *cfg);

/** Upstream i's read-path options (priority, weight, archive, autoTune). */
void bm_options_readpath_node(const bm_config_t *cfg, size_t i, bm_readpath_node_opts_t *o);

/**
 * The read path's rules from the configuration: blockedPaths, route rules (upstream ids and
 * tiers resolved to node positions), client routes, then the built-in client routes
 * (/lighthouse, /prysm, /teku, /nimbus, /lodestar, /grandine, /caplin: nodes of that
 * client, path unchanged) unless a configured one has the same prefix. NULL on allocation
 * failure (the configuration was validated, so nothing else can fail).
 */
bm_rules_t *bm_options_rules(const bm_config_t *cfg);

/** The front's options (edge/front.h) and the arrays they point into. */
typedef struct bm_edge_options {
    bm_front_opts_t front;
    bm_auth_key_t *keys; /* owned; strings borrowed from the configuration */
    bm_cidr_t *trusted, *allowed;
    char *methods, *headers, *exposed; /* owned; joined lists */
} bm_edge_options_t;

/**
 * The front's options from the global keys (auth, cors, rateLimit, trustedProxies,
 * server.allowedClients). Borrows strings from cfg, which must outlive `e`. Returns 0,
 * BM_EINVAL (a CIDR the configuration should have refused) or BM_ENOMEM; dispose in every
 * case.
 */
int bm_options_edge(bm_edge_options_t *e, const bm_config_t *cfg);

/** Frees what bm_options_edge allocated. */
void bm_options_edge_dispose(bm_edge_options_t *e);

#endif /* BM_OPTIONS_H */
