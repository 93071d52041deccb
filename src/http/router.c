/* SPDX-License-Identifier: MIT */
/*
 * router: patterns are split into segments once, at registration. Matching walks every
 * route (there are a few dozen) comparing segments in place, without allocating, and keeps
 * the most specific match: at the first differing segment a literal beats a parameter and
 * a parameter beats "*".
 */
#include "http/router.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define MAX_SEGMENTS 16

typedef enum { SEG_LITERAL, SEG_PARAM, SEG_REST } seg_kind_t;

typedef struct {
    seg_kind_t kind;
    char *text; /* literal text or parameter name */
    size_t len;
} segment_t;

typedef struct {
    char *method; /* NULL: any */
    char *pattern;
    segment_t seg[MAX_SEGMENTS];
    size_t n_seg;
    bm_route_fn fn;
    void *ud;
    const char *cls;
    bool trailing; /* the pattern ends with '/': it matches only a path that does too */
} route_t;

struct bm_router {
    route_t *routes;
    size_t n;
    size_t cap;
    bm_route_fn fallback;
    void *fallback_ud;
    const char *fallback_cls;
    const char *cls; /* of the routes added next (bm_router_set_class) */
};

int bm_route_param(const bm_route_params_t *params, const char *name, char *out, size_t cap)
{
    for (size_t i = 0; i < params->n; i++) {
        if (strcmp(params->p[i].name, name) != 0)
            continue;
        if (params->p[i].len + 1 > cap)
            return -1;
        memcpy(out, params->p[i].value, params->p[i].len);
        out[params->p[i].len] = '\0';
        return (int)params->p[i].len;
    }
    return -1;
}

bm_router_t *bm_router_new(void)
{
    return calloc(1, sizeof(bm_router_t));
}

static void route_dispose(route_t *rt)
{
    free(rt->method);
    free(rt->pattern);
    for (size_t i = 0; i < rt->n_seg; i++)
        free(rt->seg[i].text);
}

void bm_router_free(bm_router_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        route_dispose(&r->routes[i]);
    free(r->routes);
    free(r);
}

static int parse_pattern(route_t *rt, const char *pattern)
{
    if (pattern[0] != '/')
        return BM_EINVAL;
    const char *p = pattern + 1;
    while (*p) {
        if (rt->n_seg == MAX_SEGMENTS)
            return BM_EINVAL;
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0)
            return BM_EINVAL;
        segment_t *s = &rt->seg[rt->n_seg];
        if (len == 1 && p[0] == '*') {
            if (end)
                return BM_EINVAL; /* "*" only as the last segment */
            s->kind = SEG_REST;
            s->text = strdup("*");
            s->len = 1;
        } else if (p[0] == '{' && p[len - 1] == '}' && len > 2) {
            s->kind = SEG_PARAM;
            s->text = strndup(p + 1, len - 2);
            s->len = len - 2;
        } else {
            if (memchr(p, '{', len) || memchr(p, '}', len) || memchr(p, '*', len))
                return BM_EINVAL;
            s->kind = SEG_LITERAL;
            s->text = strndup(p, len);
            s->len = len;
        }
        if (!s->text)
            return BM_ENOMEM;
        rt->n_seg++;
        p = end ? end + 1 : p + len;
    }
    size_t n = strlen(pattern);
    rt->trailing = n > 1 && pattern[n - 1] == '/';
    if (rt->trailing && rt->n_seg && rt->seg[rt->n_seg - 1].kind == SEG_REST)
        return BM_EINVAL; /* "*" already takes what follows */
    return 0;
}

int bm_router_add(bm_router_t *r, const char *method, const char *pattern, bm_route_fn fn, void *ud)
{
    route_t rt = {0};
    int rc = parse_pattern(&rt, pattern);
    if (rc == 0) {
        rt.pattern = strdup(pattern);
        rt.method = method ? strdup(method) : NULL;
        if (!rt.pattern || (method && !rt.method))
            rc = BM_ENOMEM;
    }
    if (rc) {
        route_dispose(&rt);
        return rc;
    }
    rt.fn = fn;
    rt.ud = ud;
    rt.cls = r->cls;
    for (size_t i = 0; i < r->n; i++) {
        route_t *old = &r->routes[i];
        bool same_method = (!old->method && !method) ||
                           (old->method && method && strcmp(old->method, method) == 0);
        if (same_method && strcmp(old->pattern, pattern) == 0) {
            route_dispose(old);
            *old = rt;
            return 0;
        }
    }
    if (r->n == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 32;
        route_t *routes = realloc(r->routes, ncap * sizeof *routes);
        if (!routes) {
            route_dispose(&rt);
            return BM_ENOMEM;
        }
        r->routes = routes;
        r->cap = ncap;
    }
    r->routes[r->n++] = rt;
    return 0;
}

void bm_router_set_class(bm_router_t *r, const char *cls)
{
    r->cls = cls;
}

void bm_router_set_fallback(bm_router_t *r, bm_route_fn fn, void *ud)
{
    r->fallback = fn;
    r->fallback_ud = ud;
    r->fallback_cls = r->cls;
}

/*
 * Matches one route. On success fills `params` and `score`: one digit per segment
 * (2 literal, 1 parameter, 0 rest), so comparing scores compares specificity from the left.
 */
static bool match_route(const route_t *rt, const char *path, size_t path_len,
                        bm_route_params_t *params, uint64_t *score)
{
    const char *p = path + 1; /* skip the leading '/' */
    const char *end = path + path_len;
    params->n = 0;
    *score = 0;
    for (size_t i = 0; i < rt->n_seg; i++) {
        const segment_t *s = &rt->seg[i];
        if (s->kind == SEG_REST) {
            if (p >= end)
                return false;
            params->p[params->n].name = s->text;
            params->p[params->n].value = p;
            params->p[params->n].len = (size_t)(end - p);
            params->n++;
            *score *= 10;
            for (size_t k = i + 1; k < MAX_SEGMENTS; k++)
                *score *= 10;
            return true;
        }
        if (p > end)
            return false;
        const char *slash = memchr(p, '/', (size_t)(end - p));
        const char *seg_end = slash ? slash : end;
        size_t len = (size_t)(seg_end - p);
        if (len == 0)
            return false;
        if (s->kind == SEG_LITERAL) {
            if (len != s->len || memcmp(p, s->text, len) != 0)
                return false;
            *score = *score * 10 + 2;
        } else {
            if (params->n == BM_ROUTE_MAX_PARAMS)
                return false;
            params->p[params->n].name = s->text;
            params->p[params->n].value = p;
            params->p[params->n].len = len;
            params->n++;
            *score = *score * 10 + 1;
        }
        p = seg_end + (slash ? 1 : 0);
        if (!slash) {
            /* path exhausted: every pattern segment must have been used */
            if (i + 1 != rt->n_seg || rt->trailing)
                return false;
            for (size_t k = rt->n_seg; k < MAX_SEGMENTS; k++)
                *score *= 10;
            return true;
        }
    }
    if (rt->trailing && rt->n_seg && p == end) { /* "/ui/": the pattern's own slash */
        for (size_t k = rt->n_seg; k < MAX_SEGMENTS; k++)
            *score *= 10;
        return true;
    }
    return false; /* path has more segments (or a trailing slash) than the pattern */
}

bm_route_fn bm_router_match(const bm_router_t *r, const char *method, const char *path,
                            size_t path_len, bm_route_params_t *params, void **ud)
{
    const route_t *best = NULL;
    uint64_t best_score = 0;
    bm_route_params_t cand;
    params->n = 0;
    if (path_len == 0 || path[0] != '/')
        goto fallback;
    for (size_t i = 0; i < r->n; i++) {
        const route_t *rt = &r->routes[i];
        if (rt->method && strcmp(rt->method, method) != 0)
            continue;
        uint64_t score;
        if (!match_route(rt, path, path_len, &cand, &score))
            continue;
        if (!best || score > best_score || (score == best_score && rt->method && !best->method)) {
            best = rt;
            best_score = score;
            *params = cand;
        }
    }
    if (best) {
        *ud = best->ud;
        params->route_class = best->cls;
        return best->fn;
    }
fallback:
    params->n = 0;
    params->route_class = r->fallback_cls;
    *ud = r->fallback_ud;
    return r->fallback;
}

void bm_router_dispatch(bm_req_t *req, void *router)
{
    const bm_router_t *r = router;
    size_t len;
    const char *path = bm_req_path(req, &len);
    if (len == 0 || path[0] != '/') {
        bm_resp_error(req, 400, "request target must be a path starting with '/'");
        return;
    }
    bm_route_params_t params;
    void *ud = NULL;
    bm_route_fn fn = bm_router_match(r, bm_req_method(req), path, len, &params, &ud);
    bm_req_set_route_class(req, params.route_class);
    if (!fn) {
        bm_resp_error(req, 404, "no route for %s", bm_req_method(req));
        return;
    }
    fn(req, &params, ud);
}
