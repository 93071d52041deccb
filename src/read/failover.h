/* SPDX-License-Identifier: MIT */
/*
 * failover: the default read path. A request goes to the best-ranked usable node (ready
 * first, then configuration order); on a connection error, a timeout or a 5xx answer it
 * goes to the next one, a bounded number of times. The first answer below 500 goes to the
 * client: held until complete when it is small (so a node that dies mid-body can still be
 * replaced), streamed with backpressure when it is large or an event stream. When every
 * attempt failed the client gets the last node's 5xx answer, or 503 naming why when no
 * node answered at all. A failure after the first byte reached the client aborts the
 * client connection rather than splicing two answers. Client-specific paths (/lighthouse/...,
 * /prysm/..., ...) only go to nodes of that client.
 */
#ifndef BM_FAILOVER_H
#define BM_FAILOVER_H

#include <stdint.h>

#include "cluster/pool.h"
#include "http/router.h"
#include "http/server.h"
#include "http/upstream.h"

typedef struct bm_failover bm_failover_t;

typedef struct bm_failover_opts {
    uint32_t connect_timeout_ms; /* per attempt (default timeouts.connect) */
    uint32_t read_timeout_ms;    /* GET/HEAD: longest silence from a node (timeouts.read) */
    uint32_t write_timeout_ms;   /* other methods: whole attempt (timeouts.write) */
    uint32_t max_attempts;       /* nodes tried per request (failover.maxAttempts) */
    size_t hold_bytes;           /* answers up to this size are held until complete, so a
                                    node failing mid-body can still be replaced (1 MiB) */
} bm_failover_opts_t;

/** Fills `o` with the defaults. */
void bm_failover_opts_default(bm_failover_opts_t *o);

/** Creates the policy. The pool and the upstream client must outlive it. */
bm_failover_t *bm_failover_new(bm_upstream_t *up, bm_pool_t *pool, const bm_failover_opts_t *o);

/** Frees the policy. Requests still in flight must have ended. */
void bm_failover_free(bm_failover_t *f);

/** Number of requests in flight. */
size_t bm_failover_active(const bm_failover_t *f);

/** Proxies `req` to the nodes of `only` (BM_CLIENT_UNKNOWN: any node). Ends the request. */
void bm_failover_handle(bm_failover_t *f, bm_req_t *req, bm_client_t only);

/**
 * Proxies `req` to ready nodes only (best rank, then configuration order), with the
 * same retries; 503 {"code":503,...} when no node is ready. Ends the request.
 */
void bm_failover_handle_ready(bm_failover_t *f, bm_req_t *req);

/** Route adapter: any node. `ud` is the bm_failover_t. */
void bm_failover_route(bm_req_t *req, const bm_route_params_t *params, void *ud);

/**
 * Route adapter for "/{client}/...": the first path segment names the client
 * (lighthouse, prysm, teku, nimbus, lodestar, ...). `ud` is the bm_failover_t.
 */
void bm_failover_route_client(bm_req_t *req, const bm_route_params_t *params, void *ud);

#endif /* BM_FAILOVER_H */
