/* SPDX-License-Identifier: MIT */
/*
 * admin: beaconmux's own endpoints. /healthz for load balancers and orchestrators (200
 * when at least one upstream is usable for requests, else 503) and /beaconmux/v1/status,
 * the operator's view: per upstream its id, masked URL, state and why, client, version,
 * requests, errors and latency. Credentials never appear: only masked URLs are printed.
 */
#ifndef BM_ADMIN_H
#define BM_ADMIN_H

#include "discovery.h"
#include "pool.h"
#include "router.h"

typedef struct bm_admin bm_admin_t;

/** Creates the admin endpoints over `pool` and `disc` (both must outlive it). */
bm_admin_t *bm_admin_new(bm_pool_t *pool, bm_discovery_t *disc);

/** Frees it. */
void bm_admin_free(bm_admin_t *a);

/** Registers /healthz and /beaconmux/v1/status on `r`. Returns 0 or BM_ENOMEM. */
int bm_admin_register(bm_admin_t *a, bm_router_t *r);

/** Appends the status document (JSON) to `out`. */
void bm_admin_status_json(bm_admin_t *a, bm_str_t *out);

#endif /* BM_ADMIN_H */
