/* SPDX-License-Identifier: MIT */
/*
 * reload_diff: what a reload has to do, decided from the running configuration and the new
 * one alone (no loop, no I/O), so that the decision is unit-tested directly.
 *
 * The keys fall in four groups:
 *   - per network (upstreams, routing, failsafe, routeRules, blockedPaths, clientRoutes,
 *     cache, duties, health, events, genesisValidatorsRoot, and the global keys a network's
 *     modules read: timeouts, failover, discovery, tls): a network whose effective
 *     configuration (bm_config_network) changed in any of them is built anew beside the
 *     running one and replaces it; an unchanged network is kept as it runs. Networks are
 *     matched by id (the one network of a file without `networks:` matches its like);
 *   - the front (auth, cors, rateLimit, trustedProxies, server.allowedClients): a new front;
 *   - log (level, format): applied at once;
 *   - the listener and the server's limits (listen, server.* but allowedClients): handed
 *     to the server (a new listener beside the old one, which drains).
 */
#ifndef BM_RELOAD_DIFF_H
#define BM_RELOAD_DIFF_H

#include <stdbool.h>
#include <stddef.h>

#include "app/config.h"
#include "base/buf.h"

#define BM_RELOAD_MAX_NETWORKS 64

typedef struct bm_reload_diff {
    bool log;    /* log.level or log.format changed */
    bool front;  /* auth, cors, rateLimit, trustedProxies or server.allowedClients changed */
    bool listen; /* the listen address changed */
    bool server; /* a server limit or timeout changed (server.* but allowedClients) */
    size_t n_old, n_new; /* networks before and after */
    /* new network i: the old network kept as it runs (its index), or -1: built anew */
    int keep[BM_RELOAD_MAX_NETWORKS];
    /* new network i built anew: the old network of the same id it replaces (its replay
     * memory is carried over), or -1 (a new network) */
    int replaces[BM_RELOAD_MAX_NETWORKS];
    /* old network j: not kept (replaced or removed) */
    bool retire[BM_RELOAD_MAX_NETWORKS];
} bm_reload_diff_t;

/**
 * Compares the running configuration `old` with the new `new` (both validated) into `d`.
 * Returns 0, BM_EINVAL (more than BM_RELOAD_MAX_NETWORKS networks) or BM_ENOMEM.
 */
int bm_reload_diff(const bm_config_t *old, const bm_config_t *new, bm_reload_diff_t *d);

/** True when applying `d` changes nothing. */
bool bm_reload_diff_empty(const bm_reload_diff_t *d);

/** Networks `d` builds anew, and old networks it retires. */
size_t bm_reload_diff_built(const bm_reload_diff_t *d);
size_t bm_reload_diff_retired(const bm_reload_diff_t *d);

/**
 * Appends a one-line summary of `d` for the log, naming networks by their ids taken from
 * `old` and `new` ("network main: rebuilt; front: new; log: applied; listen: needs a
 * (re-bound"). Returns 0 or BM_ENOMEM.
 */
int bm_reload_diff_describe(const bm_reload_diff_t *d, const bm_config_t *old,
                            const bm_config_t *new, bm_str_t *out);

#endif /* BM_RELOAD_DIFF_H */
