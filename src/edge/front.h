/* SPDX-License-Identifier: MIT */
/*
 * front: the server's handler, in front of each network's router. For every request, in
 * this order (docs/edge.md says why):
 *   1. server.allowedClients: a peer outside the list gets 403;
 *   2. the client address: the peer, or through trustedProxies the X-Forwarded-For hop;
 *   3. API keys (auth.keys): a key from Bearer, X-Api-Key, Basic or a /{secret}/ prefix
 *      (removed from the target before anything logs it); none or a wrong one: 401, except
 *      /healthz; a key without the route class or the network: 403;
 *   4. the network: /{networkId}/... selects it (the prefix removed); with one network the
 *      prefix is optional; an unknown id is 404; several networks and no prefix: /healthz
 *      and /beaconmux/v1/status answer for all of them, anything else is 404;
 *   5. CORS: a preflight is answered here (204 or 403), never forwarded; an allowed
 *      origin's request gets the CORS fields on whatever answer it gets;
 *   6. rate limits: writes (pool, publish, preparations...) are never limited (a dropped
 *      submission is a missed duty); duty reads take from the duty buckets, everything
 *      else from the read buckets (per client or per key, and global); over a limit: 429
 *      with Retry-After;
 *   7. the network's router.
 * Times are the loop's (uv_now).
 */
#ifndef BM_FRONT_H
#define BM_FRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "edge/addr.h"
#include "edge/auth.h"
#include "edge/cors.h"
#include "edge/limit.h"
#include "edge/spends.h"
#include "http/router.h"
#include "http/server.h"

typedef struct bm_front_opts {
    const bm_auth_key_t *keys; /* auth.keys (borrowed); none: no authentication */
    size_t n_keys;
    const bm_cidr_t *trusted; /* trustedProxies (borrowed) */
    size_t n_trusted;
    const bm_cidr_t *allowed; /* server.allowedClients (borrowed); none: everyone */
    size_t n_allowed;
    bm_cors_opts_t cors;
    bm_rate_t per_client, global;               /* rateLimit.perClient, .global */
    bm_rate_t duties_per_client, duties_global; /* rateLimit.duties.perClient, .global */
    uint32_t max_clients;                       /* per-client buckets kept */
} bm_front_opts_t;

/** One network behind the front. Everything is borrowed and must outlive the front. */
typedef struct bm_front_network {
    const char *id; /* the path prefix; NULL for the one unnamed network */
    bm_router_t *router;
    int (*health)(void *ud);                 /* /healthz's status code */
    void (*status)(bm_str_t *out, void *ud); /* the status page's JSON object */
    void *ud;
} bm_front_network_t;

typedef struct bm_front bm_front_t;

/** A front on `loop` (for the buckets' time). NULL on no memory. */
bm_front_t *bm_front_new(uv_loop_t *loop, const bm_front_opts_t *o);
void bm_front_free(bm_front_t *f);

/** Adds a network (copied; at most 64). Returns 0, BM_EINVAL or BM_ENOMEM. */
int bm_front_add_network(bm_front_t *f, const bm_front_network_t *n);

/**
 * Paths the front counts as admin routes beside /beaconmux/...: `path` itself and what is
 * under `path`/ (metrics.path, the dashboard's /ui). Borrowed; at most 8. 0 or BM_EINVAL.
 */
int bm_front_add_admin_path(bm_front_t *f, const char *path);

/**
 * Routes of the process rather than of one network (the merged /metrics of several
 * networks): with several networks, a request without a network prefix that `r` has a route
 * for goes there (after keys, CORS and limits, as an admin route when its path is one).
 * Borrowed. NULL: none.
 */
void bm_front_set_global(bm_front_t *f, bm_router_t *r);

/** The server handler: pass the front as the server's `ud`. The network chosen is the
 *  request's scope (bm_req_set_scope: its bm_front_network_t.ud). */
void bm_front_handle(bm_req_t *req, void *front);

/** The front's counters since its start. */
typedef struct bm_front_counters {
    uint64_t requests, unauthorized, forbidden, not_allowed_client, unknown_network, preflights,
        cors_denied, limited_read, limited_duties, path_keys;
} bm_front_counters_t;

/** Its counters (for the exposition). */
const bm_front_counters_t *bm_front_counters(const bm_front_t *f);

/** Appends the front's counters as a JSON object (an admin status section). */
void bm_front_status_json(bm_str_t *out, void *ud);

/**
 * Why listening on `host` would open duty and write routes to anyone (a non-loopback
 * address with no API key and no allowed-client list), or NULL when it is safe.
 */
const char *bm_front_exposure_problem(const char *host, size_t n_keys, size_t n_allowed);

/**
 * Why `id` cannot be a network id (it would shadow a route: eth, beaconmux, healthz,
 * metrics, ui, the client prefixes; or it is not [A-Za-z0-9][A-Za-z0-9._-]*), or NULL.
 */
const char *bm_front_network_id_problem(const char *id);

/* ---- global limits shared by several instances (app/sharedlimit.c) ----------------------------
 */

/** The global rates: [0] rateLimit.global, [1] rateLimit.duties.global (rate 0: none). */
void bm_front_global_rates(const bm_front_t *f, bm_rate_t out[2]);

/** The tokens the global buckets ([0] reads, [1] duty reads) gave since the last call; the
 *  counts start again from 0. */
void bm_front_global_spent(bm_front_t *f, uint32_t spent[2]);

/**
 * The bucket every instance shares held `left` tokens (may be negative: a debt) when it was
 * last asked, which was at the last bm_front_global_spent: global bucket `which` (0 reads,
 * 1 duty reads) keeps at most that, less what it gave since.
 */
void bm_front_global_cap(bm_front_t *f, int which, double left);

/* ---- per-client limits shared by several instances (app/sharedlimit.c) ---------------------- */

/** True when some per-client limit is configured (rateLimit.perClient, .duties.perClient, or
 *  a key's own rate). */
bool bm_front_client_limits(const bm_front_t *f);

/** Starts counting what each client's buckets give (bm_front_clients_spent), at most `cap`
 *  clients per period. Returns 0 or BM_ENOMEM. */
int bm_front_share_clients(bm_front_t *f, size_t cap);

/** Hands each client's tokens given since the last call to `fn` (class 0 reads, 1 duty
 *  reads; its limiter key; its rate) and starts counting again. Returns the clients. */
size_t bm_front_clients_spent(bm_front_t *f, bm_spends_fn fn, void *ud);

/**
 * The client's bucket shared by every instance held `left` tokens when it was last asked
 * (at the last bm_front_clients_spent): the client's bucket of class `cls` keeps at most
 * that, less what it gave since.
 */
void bm_front_client_cap(bm_front_t *f, int cls, const char *key, size_t n, const bm_rate_t *r,
                         double left);

/** Clients whose spending could not be counted for sharing (too many in one period). */
uint64_t bm_front_clients_unshared(const bm_front_t *f);

#endif /* BM_FRONT_H */
