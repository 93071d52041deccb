/* SPDX-License-Identifier: MIT */
/*
 * router: patterns are split into segments once, at registration, and entered into a tree
 * of segments: a node per pattern prefix, with its literal children, one child for any
 * parameter, the routes that end there and the routes whose "*" starts there. Matching
 * walks the path's segments down the tree without allocating, trying at every level the
 * literal child first, then the parameter child, then "*"; the first route found this way
 * (whose method fits) is the most specific one: at the first differing segment a literal
 * beats a parameter and a parameter beats "*". A request costs a few hundred instructions
 * however many routes there are (walking all of them cost 7k per proxied request).
 */
#include "http/router.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/hdrs.h"

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

typedef struct rnode rnode_t;

/* A list of routes (indexes into bm_router.routes), in the order they were added. */
typedef struct {
    size_t *idx;
    size_t n, cap;
} rlist_t;

typedef struct {
    const char *text; /* the route's segment text (owned by the route that added it) */
    size_t len;
    rnode_t *child;
} rlit_t;

struct rnode {
    rlit_t *lits;
    size_t n_lits, cap_lits;
    rnode_t *param; /* the child for a {name} segment, whatever the name */
    rlist_t end;    /* routes whose last segment is this node's */
    rlist_t slash;  /* ... and whose pattern ends with '/' after it ("/ui/") */
    rlist_t rest;   /* routes with "*" right after this node */
};

struct bm_router {
    route_t *routes;
    size_t n;
    size_t cap;
    rnode_t root;
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

static void rnode_dispose(rnode_t *nd)
{
    for (size_t i = 0; i < nd->n_lits; i++) {
        rnode_dispose(nd->lits[i].child);
        free(nd->lits[i].child);
        free((char *)nd->lits[i].text);
    }
    free(nd->lits);
    if (nd->param) {
        rnode_dispose(nd->param);
        free(nd->param);
    }
    free(nd->end.idx);
    free(nd->slash.idx);
    free(nd->rest.idx);
}

void bm_router_free(bm_router_t *r)
{
    if (!r)
        return;
    rnode_dispose(&r->root);
    for (size_t i = 0; i < r->n; i++)
        route_dispose(&r->routes[i]);
    free(r->routes);
    free(r);
}

static int rlist_add(rlist_t *l, size_t idx)
{
    size_t *grown = bm_grow(l->idx, l->n, &l->cap, sizeof *grown, 2);
    if (!grown)
        return BM_ENOMEM;
    l->idx = grown;
    l->idx[l->n++] = idx;
    return 0;
}

/* The literal child of `nd` for seg[0..len), created when `create`; NULL if none. */
static rnode_t *rnode_literal(rnode_t *nd, const char *seg, size_t len, bool create)
{
    for (size_t i = 0; i < nd->n_lits; i++)
        if (nd->lits[i].len == len && memcmp(nd->lits[i].text, seg, len) == 0)
            return nd->lits[i].child;
    if (!create)
        return NULL;
    rlit_t *grown = bm_grow(nd->lits, nd->n_lits, &nd->cap_lits, sizeof *grown, 4);
    if (!grown)
        return NULL;
    nd->lits = grown;
    rnode_t *child = calloc(1, sizeof *child);
    char *text = strndup(seg, len);
    if (!child || !text) {
        free(child);
        free(text);
        return NULL;
    }
    nd->lits[nd->n_lits++] = (rlit_t){text, len, child};
    return child;
}

/* Enters route `idx` into the tree. */
static int tree_add(bm_router_t *r, size_t idx)
{
    const route_t *rt = &r->routes[idx];
    rnode_t *nd = &r->root;
    for (size_t i = 0; i < rt->n_seg; i++) {
        const segment_t *s = &rt->seg[i];
        if (s->kind == SEG_REST)
            return rlist_add(&nd->rest, idx);
        if (s->kind == SEG_LITERAL) {
            nd = rnode_literal(nd, s->text, s->len, true);
        } else {
            if (!nd->param)
                nd->param = calloc(1, sizeof *nd->param);
            nd = nd->param;
        }
        if (!nd)
            return BM_ENOMEM;
    }
    return rlist_add(rt->trailing ? &nd->slash : &nd->end, idx);
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
    route_t *routes = bm_grow(r->routes, r->n, &r->cap, sizeof *routes, 32);
    if (!routes) {
        route_dispose(&rt);
        return BM_ENOMEM;
    }
    r->routes = routes;
    r->routes[r->n] = rt;
    rc = tree_add(r, r->n);
    if (rc) {
        route_dispose(&r->routes[r->n]);
        return rc;
    }
    r->n++;
    return 0;
}

void bm_router_set_class(bm_router_t *r, const char *cls)
{
    r->cls = cls;
}

void bm_router_refuse_method(bm_req_t *req, const char *allow)
{
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    if (bm_hdrs_add_z(&h, "Allow", allow) == 0)
        bm_req_add_resp_fields(req, &h);
    bm_hdrs_dispose(&h);
    bm_resp_error(req, 405, "method %s is not allowed here (%s only)", bm_req_method(req), allow);
}

static void route_refuse_method(bm_req_t *req, const bm_route_params_t *params, void *allow)
{
    (void)params;
    bm_router_refuse_method(req, allow);
}

int bm_router_add_only(bm_router_t *r, const char *method, const char *pattern, bm_route_fn fn,
                       void *ud)
{
    int rc = bm_router_add(r, method, pattern, fn, ud);
    return rc ? rc : bm_router_add(r, NULL, pattern, route_refuse_method, (void *)method);
}

void bm_router_set_fallback(bm_router_t *r, bm_route_fn fn, void *ud)
{
    r->fallback = fn;
    r->fallback_ud = ud;
    r->fallback_cls = r->cls;
}

/* The state of one match: the path's segments as found so far. */
typedef struct {
    const bm_router_t *r;
    const char *method;
    const char *end; /* end of the path */
    struct {
        const char *p;
        size_t len;
    } seg[MAX_SEGMENTS];
} walk_t;

/* The first route of `l` for the method: one that names it, else one for any method. */
static const route_t *pick(const walk_t *w, const rlist_t *l)
{
    const route_t *any = NULL;
    for (size_t i = 0; i < l->n; i++) {
        const route_t *rt = &w->r->routes[l->idx[i]];
        if (!rt->method) {
            if (!any)
                any = rt;
        } else if (strcmp(rt->method, w->method) == 0) {
            return rt;
        }
    }
    return any;
}

/* Searches below `nd` for the path from p (segment `depth`): the most specific route. */
static const route_t *walk(walk_t *w, const rnode_t *nd, const char *p, size_t depth)
{
    if (p == NULL) /* the path ended with the previous segment */
        return pick(w, &nd->end);
    if (depth == MAX_SEGMENTS)
        return NULL;
    const char *slash = memchr(p, '/', (size_t)(w->end - p));
    const char *seg_end = slash ? slash : w->end;
    size_t len = (size_t)(seg_end - p);
    w->seg[depth].p = p;
    w->seg[depth].len = len;
    if (len == 0) /* an empty segment ("//", a trailing '/'): only a "*" takes it */
        return p < w->end ? pick(w, &nd->rest) : pick(w, &nd->slash);
    const char *next = slash ? slash + 1 : NULL;
    const route_t *rt = NULL;
    const rnode_t *lit = rnode_literal((rnode_t *)nd, p, len, false);
    if (lit)
        rt = walk(w, lit, next, depth + 1);
    if (!rt && nd->param)
        rt = walk(w, nd->param, next, depth + 1);
    if (!rt)
        rt = pick(w, &nd->rest);
    return rt;
}

/* Fills the parameters of the route `rt` that matched the walk. False when it has more
 * than BM_ROUTE_MAX_PARAMS. */
static bool fill_params(const walk_t *w, const route_t *rt, bm_route_params_t *params)
{
    params->n = 0;
    for (size_t i = 0; i < rt->n_seg; i++) {
        const segment_t *s = &rt->seg[i];
        if (s->kind == SEG_LITERAL)
            continue;
        if (params->n == BM_ROUTE_MAX_PARAMS)
            return false;
        params->p[params->n].name = s->text;
        params->p[params->n].value = w->seg[i].p;
        params->p[params->n].len =
            s->kind == SEG_REST ? (size_t)(w->end - w->seg[i].p) : w->seg[i].len;
        params->n++;
    }
    return true;
}

bm_route_fn bm_router_match(const bm_router_t *r, const char *method, const char *path,
                            size_t path_len, bm_route_params_t *params, void **ud)
{
    params->n = 0;
    if (path_len > 0 && path[0] == '/') {
        walk_t w = {.r = r, .method = method, .end = path + path_len};
        const route_t *best = walk(&w, &r->root, path + 1, 0);
        if (best && fill_params(&w, best, params)) {
            *ud = best->ud;
            params->route_class = best->cls;
            return best->fn;
        }
    }
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
