/* SPDX-License-Identifier: MIT */
/*
 * router: the route table. Maps a method and a path pattern to the policy that serves it
 * ("/eth/v1/validator/duties/attester/{epoch}" -> duties; "/eth/v1/events" -> the cluster
 * stream).  Patterns are matched segment by segment; literal segments beat
 * parameters, parameters beat a trailing "*". Anything unmatched goes to the fallback
 * (the default read path). The router knows nothing of upstreams.
 */
#ifndef BM_ROUTER_H
#define BM_ROUTER_H

#include <stddef.h>

#include "http/server.h"

#define BM_ROUTE_MAX_PARAMS 8

/** Values captured by {name} segments (and "*" as the name "*"). Not percent-decoded. */
typedef struct bm_route_params {
    const char *route_class; /* the matched route's class (bm_router_set_class), or NULL */
    size_t n;
    struct {
        const char *name;  /* the pattern's name, NUL-terminated */
        const char *value; /* points into the request target; not NUL-terminated */
        size_t len;
    } p[BM_ROUTE_MAX_PARAMS];
} bm_route_params_t;

/** Copies parameter `name` into out[0..cap) NUL-terminated. Returns its length or -1. */
int bm_route_param(const bm_route_params_t *params, const char *name, char *out, size_t cap);

typedef void (*bm_route_fn)(bm_req_t *req, const bm_route_params_t *params, void *ud);

typedef struct bm_router bm_router_t;

/** An empty table. NULL on allocation failure. */
bm_router_t *bm_router_new(void);

/** Frees the table. */
void bm_router_free(bm_router_t *r);

/**
 * Adds a route. `method` is "GET", "POST", ... or NULL for any method. `pattern` starts
 * with '/', segments are literals, {name} parameters, or a final "*" matching the rest
 * (one or more segments). A pattern ending with '/' ("/ui/") matches only paths that end
 * with it, one without it only paths that do not. A later route with the same method and pattern
 * replaces the earlier one. Returns 0, BM_EINVAL for a bad pattern, or BM_ENOMEM.
 */
int bm_router_add(bm_router_t *r, const char *method, const char *pattern, bm_route_fn fn,
                  void *ud);

/**
 * Adds a route that only `method` may use: `method` is routed to `fn`, any other method on
 * the same pattern gets 405 with an Allow field, and never reaches the fallback (and so no
 * node). For beaconmux's own routes (/healthz, /beaconmux/...). `method` must outlive the
 * table (a string literal). Returns as bm_router_add.
 */
int bm_router_add_only(bm_router_t *r, const char *method, const char *pattern, bm_route_fn fn,
                       void *ud);

/** Answers 405 {"code":405,...} with `Allow: allow`: a method a route class does not take. */
void bm_router_refuse_method(bm_req_t *req, const char *allow);

/** Sets the handler for requests no route matches. */
void bm_router_set_fallback(bm_router_t *r, bm_route_fn fn, void *ud);

/**
 * Names the class of the routes added from now on and of a fallback set from now on
 * ("duty", "write", "read", ...): a few words for the metrics and the access log, which
 * count requests by class, never by path. `cls` must be a string that outlives the router
 * (a literal); NULL: none.
 */
void bm_router_set_class(bm_router_t *r, const char *cls);

/**
 * Finds the handler for `method` and `path` (no query). Returns it and fills `params`,
 * or returns the fallback (params empty). `ud` receives the route's user pointer.
 */
bm_route_fn bm_router_match(const bm_router_t *r, const char *method, const char *path,
                            size_t path_len, bm_route_params_t *params, void **ud);

/**
 * The server handler: rejects targets that are not origin-form ("/...") with 400, then
 * dispatches, after naming the request's route class (bm_req_set_route_class). Pass the
 * router as the server's `ud`.
 */
void bm_router_dispatch(bm_req_t *req, void *router);

#endif /* BM_ROUTER_H */
