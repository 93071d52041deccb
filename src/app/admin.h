/* SPDX-License-Identifier: MIT */
/*
 * admin: beaconmux's own endpoints. /healthz for load balancers and orchestrators (200
 * when at least one upstream is usable for requests, else 503) and /beaconmux/v1/status,
 * the operator's view: per upstream its id, masked URL, state and why, client, version,
 * requests, errors and latency; with the monitor attached also the cluster head, whether
 * the freshness guarantee holds (`head_guarantee`: off when the chain runs without a
 * cluster head) and, per node, its head (and whether it was polled rather than announced
 * by its stream), lag, event stream, head polls and recent arrival delays. Credentials
 * never appear: only masked URLs are printed.
 *
 * The node endpoints a validator client asks its beacon node about itself are answered
 * for the cluster (docs/head-tracker.md, "Health"): /eth/v1/node/health (200 when a node is
 * ready and the cluster head is known, 206 or `syncing_status` when the best is syncing,
 * lagging, optimistic or no-head, or when the chain runs without a cluster head, else 503),
 * /eth/v1/node/syncing from the cluster head and the clock (all five fields), and
 * /eth/v1/node/peer_count forwarded to the best ready node.
 */
#ifndef BM_ADMIN_H
#define BM_ADMIN_H

#include "cluster/discovery.h"
#include "cluster/pool.h"
#include "http/router.h"

typedef struct bm_admin bm_admin_t;
struct bm_monitor;
struct bm_readpath;

/** Creates the admin endpoints over `pool` and `disc` (both must outlive it). */
bm_admin_t *bm_admin_new(bm_pool_t *pool, bm_discovery_t *disc);

/** Frees it. */
void bm_admin_free(bm_admin_t *a);

/**
 * Attaches the monitor (not owned; outlives the admin), the source of the cluster head,
 * per-node heads and streams. Without it the synthetic endpoints judge by node states only.
 */
void bm_admin_set_monitor(bm_admin_t *a, struct bm_monitor *m);

/** Attaches the read path (not owned): it forwards /eth/v1/node/peer_count to ready nodes,
 *  and each upstream on the status page shows its read-path figures. */
void bm_admin_set_readpath(bm_admin_t *a, struct bm_readpath *rp);

/**
 * The status code of /eth/v1/node/health for the cluster now: 200, 206 or 503 (before
 * `syncing_status` replaces a 206).
 */
int bm_admin_health_code(const bm_admin_t *a);

/**
 * Registers /healthz, /beaconmux/v1/status, /eth/v1/node/health, /eth/v1/node/syncing and
 * /eth/v1/node/peer_count on `r`. Returns 0 or BM_ENOMEM.
 */
int bm_admin_register(bm_admin_t *a, bm_router_t *r);

/** Writes one JSON value (an object) describing a module's figures. */
typedef void (*bm_admin_section_fn)(bm_str_t *out, void *ud);

#define BM_ADMIN_MAX_SECTIONS 16

/**
 * Adds a section to the status document: `"name": <what fn writes>`, after the upstreams.
 * Modules above admin (events, policies) report their counters this way, so admin needs
 * to know none of them. Returns 0 or BM_ENOMEM.
 */
int bm_admin_add_section(bm_admin_t *a, const char *name, bm_admin_section_fn fn, void *ud);

/** Appends the status document (JSON) to `out`. */
void bm_admin_status_json(bm_admin_t *a, bm_str_t *out);

#endif /* BM_ADMIN_H */
