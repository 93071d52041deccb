/* SPDX-License-Identifier: MIT */
/*
 * discovery: learns what each node is and which network it follows, and serves the
 * static endpoints from that knowledge.
 *
 * Every node is asked for /eth/v1/node/version, /eth/v1/beacon/genesis,
 * /eth/v1/config/spec, /eth/v1/config/fork_schedule and /eth/v1/config/deposit_contract:
 * at start, every epoch, when it comes back after being unreachable, and (until it
 * answers) every retry interval. Between rounds, a discovered node's version is probed
 * once a slot: that keeps its reachability current when no request goes to it, and an
 * upgraded node (new version) is re-discovered at once. The client brand comes from the
 * version. The cluster's
 * genesis_validators_root is the configured one, else the majority's; a node that
 * disagrees, or whose critical spec keys (slot constants, fork versions and epochs)
 * disagree with the reference node's, is marked wrong-network.
 *
 * genesis, spec, fork_schedule and deposit_contract are then served as one usable node's
 * body, verbatim (never merged: clients return different key sets and validator clients
 * check them), from the reference node while it stays usable. Until the first success
 * they answer 503, never 404 (Lighthouse reads 404 on genesis as "before genesis").
 */
#ifndef BM_DISCOVERY_H
#define BM_DISCOVERY_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/clock.h"
#include "cluster/chain.h"
#include "cluster/pool.h"
#include "http/router.h"
#include "http/upstream.h"

typedef struct bm_discovery bm_discovery_t;

typedef struct bm_discovery_opts {
    uint32_t retry_interval_ms;  /* a failed node is asked again after (discovery.retryInterval) */
    uint32_t probe_interval_ms;  /* version probe of a discovered node; 0: once a slot */
    uint32_t connect_timeout_ms; /* default timeouts.connect */
    uint32_t timeout_ms;         /* each discovery request (default 5000) */
    bool has_genesis_root;       /* genesis_root below is set (genesisValidatorsRoot) */
    uint8_t genesis_root[32];
} bm_discovery_opts_t;

/** Fills `o` with the defaults. */
void bm_discovery_opts_default(bm_discovery_opts_t *o);

/** Called when the cluster's chain information appears or changes. */
typedef void (*bm_discovery_chain_fn)(const bm_chain_info_t *chain, void *ud);

/** Creates discovery for every node of `pool`, its retry, probe and epoch timers on `clock`
 *  (borrowed; it outlives discovery). Nothing is sent before bm_discovery_start. */
bm_discovery_t *bm_discovery_new(bm_clock_t *clock, bm_upstream_t *up, bm_pool_t *pool,
                                 const bm_discovery_opts_t *opts);

/** Starts the first round on every node and the periodic refresh. Returns 0 or BM_E*. */
int bm_discovery_start(bm_discovery_t *d);

/** Asks one node again now (after a reconnect). Does nothing while a round runs for it. */
void bm_discovery_refresh(bm_discovery_t *d, bm_node_t *n);

/** Registers a listener for chain information changes (at most 8). Returns 0 or BM_ENOMEM. */
int bm_discovery_on_chain(bm_discovery_t *d, bm_discovery_chain_fn fn, void *ud);

/** Removes every listener registered with `ud`. */
void bm_discovery_off_chain(bm_discovery_t *d, void *ud);

/** The cluster's chain information (known == false until the first node was discovered). */
const bm_chain_info_t *bm_discovery_chain(const bm_discovery_t *d);

/** The node whose static bodies are served, or NULL before the first success. */
const bm_node_t *bm_discovery_reference(const bm_discovery_t *d);

/** Stops timers and cancels requests; handles close asynchronously (run the loop after). */
void bm_discovery_stop(bm_discovery_t *d);

/** Frees discovery. Call after bm_discovery_stop and one loop run. */
void bm_discovery_free(bm_discovery_t *d);

/** Route handler for the four static endpoints (the path says which). `ud` = discovery. */
void bm_discovery_route(bm_req_t *req, const bm_route_params_t *params, void *ud);

#endif /* BM_DISCOVERY_H */
