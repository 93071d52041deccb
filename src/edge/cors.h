/* SPDX-License-Identifier: MIT */
/*
 * cors: the decisions of Cross-Origin Resource Sharing for browser clients (dashboards,
 * explorers): whether an origin may read an answer, and the answer to a preflight, which
 * beaconmux gives itself and never forwards to a node. Pure: header values in, header
 * fields out.
 */
#ifndef BM_CORS_H
#define BM_CORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hdrs.h"

typedef struct bm_cors_opts {
    const char *const *origins; /* cors.allowedOrigins: exact origins, or "*" */
    size_t n_origins;           /* 0: CORS off (no field is ever added) */
    const char *methods;        /* cors.allowedMethods, joined: "GET, POST" */
    const char *headers;        /* cors.allowedHeaders, joined; NULL or "": echo the request's */
    const char *exposed;        /* cors.exposedHeaders, joined */
    bool credentials;           /* cors.allowCredentials */
    uint32_t max_age_s;         /* cors.maxAge */
} bm_cors_opts_t;

typedef enum bm_cors_verdict {
    BM_CORS_NONE = 0,      /* not a CORS request (no Origin), or CORS off: nothing to add */
    BM_CORS_ALLOWED,       /* an actual request from an allowed origin: add `out` */
    BM_CORS_DENIED,        /* an actual request from another origin: served without fields */
    BM_CORS_PREFLIGHT,     /* a preflight to answer 204 with `out` */
    BM_CORS_PREFLIGHT_BAD, /* a preflight from another origin or for another method: 403 */
} bm_cors_verdict_t;

/**
 * Decides for a request with `method`, `origin` (the Origin field or NULL), and for an
 * OPTIONS request the Access-Control-Request-Method/-Headers fields (or NULL). Appends the
 * fields to send to `out` (ALLOWED, PREFLIGHT).
 */
bm_cors_verdict_t bm_cors_decide(const bm_cors_opts_t *o, const char *method, const char *origin,
                                 const char *acr_method, const char *acr_headers, bm_hdrs_t *out);

#endif /* BM_CORS_H */
