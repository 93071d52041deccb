/* SPDX-License-Identifier: MIT */
/*
 * cors: origin matching and the fields of the Fetch standard's CORS protocol.
 */
#include "edge/cors.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool origin_allowed(const bm_cors_opts_t *o, const char *origin, bool *wildcard)
{
    *wildcard = false;
    for (size_t i = 0; i < o->n_origins; i++) {
        if (strcmp(o->origins[i], "*") == 0) {
            *wildcard = true;
            return true;
        }
        if (strcasecmp(o->origins[i], origin) == 0)
            return true;
    }
    return false;
}

/* Whether `method` is one of the comma-separated `list`. */
static bool method_listed(const char *list, const char *method)
{
    size_t ml = strlen(method);
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ", ");
        if (n == ml && strncasecmp(p, method, n) == 0)
            return true;
        p += n;
    }
    return false;
}

static void allow_origin(const bm_cors_opts_t *o, const char *origin, bool wildcard, bm_hdrs_t *out)
{
    /* with credentials a wildcard cannot be sent: the origin is echoed instead */
    bm_hdrs_add_z(out, "Access-Control-Allow-Origin", wildcard && !o->credentials ? "*" : origin);
    if (!wildcard || o->credentials)
        bm_hdrs_add_z(out, "Vary", "Origin");
    if (o->credentials)
        bm_hdrs_add_z(out, "Access-Control-Allow-Credentials", "true");
}

bm_cors_verdict_t bm_cors_decide(const bm_cors_opts_t *o, const char *method, const char *origin,
                                 const char *acr_method, const char *acr_headers, bm_hdrs_t *out)
{
    if (!o || o->n_origins == 0 || !origin)
        return BM_CORS_NONE;
    bool wildcard;
    bool ok = origin_allowed(o, origin, &wildcard);
    bool preflight = strcmp(method, "OPTIONS") == 0 && acr_method != NULL;
    if (!preflight) {
        if (!ok)
            return BM_CORS_DENIED;
        allow_origin(o, origin, wildcard, out);
        if (o->exposed && *o->exposed)
            bm_hdrs_add_z(out, "Access-Control-Expose-Headers", o->exposed);
        return BM_CORS_ALLOWED;
    }
    if (!ok || !method_listed(o->methods, acr_method))
        return BM_CORS_PREFLIGHT_BAD;
    allow_origin(o, origin, wildcard, out);
    bm_hdrs_add_z(out, "Access-Control-Allow-Methods", o->methods);
    const char *h = o->headers && *o->headers ? o->headers : acr_headers;
    if (h && *h)
        bm_hdrs_add_z(out, "Access-Control-Allow-Headers", h);
    char age[16];
    snprintf(age, sizeof age, "%u", o->max_age_s);
    bm_hdrs_add_z(out, "Access-Control-Max-Age", age);
    return BM_CORS_PREFLIGHT;
}
