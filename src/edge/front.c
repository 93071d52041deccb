/* SPDX-License-Identifier: MIT */
/*
 * front: authentication, network selection, CORS and rate limits before the router (see
 * front.h and docs/edge.md).
 */
#include "edge/front.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/defaults.h"
#include "base/err.h"
#include "base/log.h"
#include "cluster/pool.h"
#include "http/router.h"

#define MAX_NETWORKS 64
#define MAX_ADMIN_PATHS 8

struct bm_front {
    uv_loop_t *loop;
    bm_front_opts_t o;
    bm_front_network_t nets[MAX_NETWORKS];
    size_t n_nets;
    bm_router_t *process; /* unprefixed routes of the process (several networks) */
    const char *admin_paths[MAX_ADMIN_PATHS];
    size_t n_admin_paths;
    bm_limiter_t *clients;      /* read buckets per client or key */
    bm_limiter_t *duty_clients; /* duty buckets per client or key */
    bm_bucket_t global, duty_global;
    uint32_t global_spent[2]; /* tokens the global buckets gave since bm_front_global_spent */
    bm_spends_t *spends;      /* per client, since bm_front_clients_spent; NULL: not shared */
    bool limits;              /* any rate limit is configured (else step 6 has nothing to do) */
    bm_front_counters_t c;
    bm_log_limit_t lim;
};

bm_front_t *bm_front_new(uv_loop_t *loop, const bm_front_opts_t *o)
{
    bm_front_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->loop = loop;
    f->o = *o;
    f->limits = o->per_client.rate > 0 || o->global.rate > 0 || o->duties_per_client.rate > 0 ||
                o->duties_global.rate > 0;
    for (size_t i = 0; i < o->n_keys; i++)
        f->limits = f->limits || o->keys[i].rate.rate > 0;
    size_t slots = o->max_clients ? o->max_clients : BM_DEFAULT_RATE_LIMIT_CLIENTS;
    f->clients = bm_limiter_new(slots);
    f->duty_clients = bm_limiter_new(slots);
    if (!f->clients || !f->duty_clients) {
        bm_front_free(f);
        return NULL;
    }
    return f;
}

void bm_front_free(bm_front_t *f)
{
    if (!f)
        return;
    bm_limiter_free(f->clients);
    bm_limiter_free(f->duty_clients);
    bm_spends_free(f->spends);
    free(f);
}

void bm_front_global_rates(const bm_front_t *f, bm_rate_t out[2])
{
    out[0] = f->o.global;
    out[1] = f->o.duties_global;
}

void bm_front_global_spent(bm_front_t *f, uint32_t spent[2])
{
    for (int i = 0; i < 2; i++) {
        spent[i] = f->global_spent[i];
        f->global_spent[i] = 0;
    }
}

void bm_front_global_cap(bm_front_t *f, int which, double left)
{
    bm_bucket_t *b = which ? &f->duty_global : &f->global;
    const bm_rate_t *r = which ? &f->o.duties_global : &f->o.global;
    bm_bucket_cap(b, r, uv_now(f->loop), left - f->global_spent[which ? 1 : 0]);
}

bool bm_front_client_limits(const bm_front_t *f)
{
    bool any = f->o.per_client.rate > 0 || f->o.duties_per_client.rate > 0;
    for (size_t i = 0; i < f->o.n_keys && !any; i++)
        any = f->o.keys[i].rate.rate > 0;
    return any;
}

int bm_front_share_clients(bm_front_t *f, size_t cap)
{
    if (!f->spends && !(f->spends = bm_spends_new(cap)))
        return BM_ENOMEM;
    return 0;
}

size_t bm_front_clients_spent(bm_front_t *f, bm_spends_fn fn, void *ud)
{
    return f->spends ? bm_spends_drain(f->spends, fn, ud) : 0;
}

void bm_front_client_cap(bm_front_t *f, int cls, const char *key, size_t n, const bm_rate_t *r,
                         double left)
{
    uint32_t since = f->spends ? bm_spends_get(f->spends, cls, key, n) : 0;
    bm_limiter_cap(cls ? f->duty_clients : f->clients, key, n, r, uv_now(f->loop),
                   left - (double)since);
}

uint64_t bm_front_clients_unshared(const bm_front_t *f)
{
    return f->spends ? bm_spends_overflow(f->spends) : 0;
}

int bm_front_add_network(bm_front_t *f, const bm_front_network_t *n)
{
    if (f->n_nets >= MAX_NETWORKS || !n->router)
        return BM_EINVAL;
    f->nets[f->n_nets++] = *n;
    return 0;
}

int bm_front_add_admin_path(bm_front_t *f, const char *path)
{
    if (f->n_admin_paths == MAX_ADMIN_PATHS || !path || path[0] != '/')
        return BM_EINVAL;
    f->admin_paths[f->n_admin_paths++] = path;
    return 0;
}

void bm_front_set_global(bm_front_t *f, bm_router_t *r)
{
    f->process = r;
}

/* ---- pure checks ------------------------------------------------------------------------ */

const char *bm_front_exposure_problem(const char *host, size_t n_keys, size_t n_allowed)
{
    if (bm_host_is_loopback(host) || n_keys > 0 || n_allowed > 0)
        return NULL;
    return "refusing to listen on a non-loopback address while duty and write routes are open "
           "to anyone: anyone who can POST prepare_beacon_proposer can set a validator's fee "
           "recipient on every node. Configure auth.keys or server.allowedClients, or listen "
           "on 127.0.0.1";
}

const char *bm_front_network_id_problem(const char *id)
{
    static const char *const reserved[] = {"eth", "beaconmux", "healthz", "metrics", "ui"};
    size_t n = strlen(id);
    if (n == 0 || n > 64)
        return "must be 1 to 64 characters";
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        bool alnum =
            (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!alnum && (i == 0 || (ch != '.' && ch != '_' && ch != '-')))
            return "must start with a letter or digit and hold only letters, digits, '.', '_', '-'";
    }
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcmp(id, reserved[i]) == 0)
            return "would shadow a route of beaconmux";
    for (int c = BM_CLIENT_UNKNOWN + 1; c < BM_CLIENT_COUNT; c++)
        if (strcmp(id, bm_client_name((bm_client_t)c)) == 0)
            return "would shadow a client route";
    return NULL;
}

/* ---- the steps ----------------------------------------------------------------------------- */

/* The first path segment of path[0..n) ("/x/..." -> "x"), with its length. */
static const char *first_segment(const char *path, size_t n, size_t *len)
{
    if (n < 2 || path[0] != '/') {
        *len = 0;
        return NULL;
    }
    const char *s = path + 1;
    const char *slash = memchr(s, '/', n - 1);
    *len = slash ? (size_t)(slash - s) : n - 1;
    return s;
}

/* Removes the first `skip` bytes of the path from the request target (a network id, a key). */
static int strip_prefix(bm_req_t *req, size_t skip)
{
    const char *t = bm_req_target(req);
    size_t pl;
    const char *path = bm_req_path(req, &pl);
    size_t off = (size_t)(path - t) + skip;
    const char *rest = t + off;
    if (*rest == '/')
        return bm_req_set_target(req, rest, strlen(rest));
    /* "/mainnet" alone or "/mainnet?x": the network's root */
    char buf[4096];
    int n = snprintf(buf, sizeof buf, "/%s", rest);
    if (n < 0 || (size_t)n >= sizeof buf)
        return BM_EINVAL;
    return bm_req_set_target(req, buf, (size_t)n);
}

static bool is_healthz(const char *path, size_t n)
{
    return n == 8 && memcmp(path, "/healthz", 8) == 0;
}

/* Several networks and no prefix: /healthz (200 when every network has a usable node) and
 * the status page for all of them. */
static bool answer_unprefixed(bm_front_t *f, bm_req_t *req, const char *path, size_t n,
                              const bm_auth_key_t *key)
{
    static const char status[] = "/beaconmux/v1/status";
    bool is_status = n == sizeof status - 1 && memcmp(path, status, n) == 0;
    if ((is_healthz(path, n) || is_status) && strcmp(bm_req_method(req), "GET") != 0) {
        bm_router_refuse_method(req, "GET");
        return true;
    }
    if (is_healthz(path, n)) {
        int worst = 200;
        bm_str_t s = BM_STR_INIT;
        bm_str_puts(&s, "{\"networks\":{");
        for (size_t i = 0; i < f->n_nets; i++) {
            int code = f->nets[i].health ? f->nets[i].health(f->nets[i].ud) : 200;
            if (code > worst)
                worst = code;
            bm_str_printf(&s, "%s\"%s\":%d", i ? "," : "", f->nets[i].id, code);
        }
        bm_str_puts(&s, "}}");
        bm_buf_t *b = bm_str_finish(&s);
        bm_resp_send(req, worst, "application/json", b, NULL);
        bm_buf_unref(b);
        return true;
    }
    if (is_status) {
        /* every network's page: a key needs admin on every network */
        if (f->o.n_keys && !(key && (key->routes & BM_ROUTE_ADMIN) && key->n_networks == 0)) {
            f->c.forbidden++;
            bm_resp_error(req, 403, "the status of every network needs an admin key for all");
            return true;
        }
        bm_str_t s = BM_STR_INIT;
        bm_str_puts(&s, "{\"networks\":{");
        for (size_t i = 0; i < f->n_nets; i++) {
            bm_str_printf(&s, "%s\"%s\":", i ? "," : "", f->nets[i].id);
            if (f->nets[i].status)
                f->nets[i].status(&s, f->nets[i].ud);
            else
                bm_str_puts(&s, "{}");
        }
        bm_str_puts(&s, "}}");
        bm_buf_t *b = bm_str_finish(&s);
        bm_resp_send(req, 200, "application/json", b, NULL);
        bm_buf_unref(b);
        return true;
    }
    return false;
}

/* The route class of path[0..n): an admin path of the process (metrics, the dashboard) is
 * admin like /beaconmux/... */
static unsigned route_class(const bm_front_t *f, const char *method, const char *path, size_t n)
{
    for (size_t i = 0; i < f->n_admin_paths; i++) {
        size_t al = strlen(f->admin_paths[i]);
        if (n >= al && memcmp(path, f->admin_paths[i], al) == 0 && (n == al || path[al] == '/'))
            return BM_ROUTE_ADMIN;
    }
    return bm_auth_route_class(method, path, n);
}

/* A process route (bm_front_set_global) for an unprefixed request of several networks. */
static bool is_global(const bm_front_t *f, bm_req_t *req, const char *path, size_t n)
{
    if (!f->process || f->n_nets < 2)
        return false;
    bm_route_params_t p;
    void *ud;
    return bm_router_match(f->process, bm_req_method(req), path, n, &p, &ud) != NULL;
}

/* Step 4: the network of the request (its prefix removed), or NULL when answered here or
 * when it is a process route (*global). */
static const bm_front_network_t *pick_network(bm_front_t *f, bm_req_t *req,
                                              const bm_auth_key_t *key, bool *global)
{
    *global = false;
    size_t pl, sl;
    const char *path = bm_req_path(req, &pl);
    const char *seg = first_segment(path, pl, &sl);
    for (size_t i = 0; seg && i < f->n_nets; i++) {
        const char *id = f->nets[i].id;
        if (id && strlen(id) == sl && memcmp(id, seg, sl) == 0) {
            if (strip_prefix(req, 1 + sl) != 0) {
                bm_resp_error(req, 400, "bad request target");
                return NULL;
            }
            return &f->nets[i];
        }
    }
    if (f->n_nets == 1)
        return &f->nets[0]; /* one network: prefix-free */
    if (is_global(f, req, path, pl)) {
        *global = true;
        return NULL;
    }
    if (answer_unprefixed(f, req, path, pl, key))
        return NULL;
    f->c.unknown_network++;
    bm_resp_error(req, 404, "unknown network \"%.*s\": ask /{network}/..., networks: %s%s",
                  (int)(sl > 64 ? 64 : sl), seg ? seg : "", f->n_nets ? f->nets[0].id : "",
                  f->n_nets > 1 ? ", ..." : "");
    return NULL;
}

/* Step 5: false when answered (a preflight). */
static bool cors_step(bm_front_t *f, bm_req_t *req)
{
    bool preflight = strcmp(bm_req_method(req), "OPTIONS") == 0 && bm_req_header(req, "origin") &&
                     bm_req_header(req, "access-control-request-method");
    if (f->o.cors.n_origins == 0) {
        if (!preflight)
            return true;
        f->c.preflights++;
        f->c.cors_denied++; /* answered here all the same: a node has nothing to say to it */
        bm_resp_error(req, 403, "CORS is off: cors.allowedOrigins names no origin");
        return false;
    }
    bm_hdrs_t out;
    bm_hdrs_init(&out);
    bm_cors_verdict_t v =
        bm_cors_decide(&f->o.cors, bm_req_method(req), bm_req_header(req, "origin"),
                       bm_req_header(req, "access-control-request-method"),
                       bm_req_header(req, "access-control-request-headers"), &out);
    bool go_on = true;
    if (v == BM_CORS_ALLOWED) {
        bm_req_add_resp_fields(req, &out);
    } else if (v == BM_CORS_DENIED) {
        f->c.cors_denied++;
    } else if (v == BM_CORS_PREFLIGHT) {
        f->c.preflights++;
        bm_resp_start(req, 204, &out, 0);
        bm_resp_end(req);
        go_on = false;
    } else if (v == BM_CORS_PREFLIGHT_BAD) {
        f->c.preflights++;
        f->c.cors_denied++;
        bm_resp_error(req, 403, "CORS: this origin or method is not allowed");
        go_on = false;
    }
    bm_hdrs_dispose(&out);
    return go_on;
}

/* Step 6: false when answered 429. */
static bool limit_step(bm_front_t *f, bm_req_t *req, unsigned cls, const bm_auth_key_t *key)
{
    if (!f->limits)
        return true;
    size_t pl;
    const char *path = bm_req_path(req, &pl);
    if (bm_auth_is_write(bm_req_method(req), path, pl))
        return true; /* a dropped submission is a missed duty */
    uint64_t now = uv_now(f->loop);
    bool duties = cls == BM_ROUTE_DUTIES;
    bm_limiter_t *table = duties ? f->duty_clients : f->clients;
    const bm_rate_t *per = duties ? &f->o.duties_per_client : &f->o.per_client;
    if (key && key->rate.rate > 0 && !duties)
        per = &key->rate;
    char kbuf[96], client[64];
    const char *who = client;
    if (key) {
        snprintf(kbuf, sizeof kbuf, "key:%s", key->id);
        who = kbuf;
    } else {
        /* the client's address: the peer, or through trusted proxies the forwarded one */
        const char *xff = f->o.n_trusted ? bm_req_header(req, "x-forwarded-for") : NULL;
        bm_client_addr(bm_req_peer(req), xff, f->o.trusted, f->o.n_trusted, client, sizeof client);
    }
    uint32_t retry = 0;
    bool ok = bm_limiter_take(table, who, strlen(who), per, now, &retry) &&
              bm_bucket_take(duties ? &f->duty_global : &f->global,
                             duties ? &f->o.duties_global : &f->o.global, now, &retry);
    if (ok) {
        f->global_spent[duties]++;
        if (f->spends && per->rate > 0) /* told to the other instances at the next sync */
            bm_spends_add(f->spends, duties, who, strlen(who), per);
        return true;
    }
    if (duties)
        f->c.limited_duties++;
    else
        f->c.limited_read++;
    char ra[16];
    snprintf(ra, sizeof ra, "%u", (retry + 999) / 1000);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Retry-After", ra);
    bm_req_add_resp_fields(req, &h);
    bm_hdrs_dispose(&h);
    bm_resp_error(req, 429, "rate limit exceeded: retry after %u ms", retry);
    return false;
}

/* Step 3: the key (NULL without keys configured); false when answered. */
static bool auth_step(bm_front_t *f, bm_req_t *req, const bm_auth_key_t **key)
{
    *key = NULL;
    if (f->o.n_keys == 0)
        return true;
    size_t pl, skip;
    const char *path = bm_req_path(req, &pl);
    bm_auth_source_t src;
    bool presented;
    *key = bm_auth_find(f->o.keys, f->o.n_keys, bm_req_headers(req), path, pl, &src, &presented,
                        &skip);
    /* a credential for beaconmux never reaches a node (hosted providers log headers) */
    bm_req_remove_header(req, "authorization");
    bm_req_remove_header(req, "x-api-key");
    if (*key && src == BM_AUTH_PATH) {
        f->c.path_keys++;
        bm_req_mask_path_prefix(req, skip); /* the access log never shows it */
        if (strip_prefix(req, skip) != 0) {
            bm_resp_error(req, 400, "bad request target");
            return false;
        }
        return true;
    }
    if (*key)
        return true;
    path = bm_req_path(req, &pl);
    size_t sl;
    const char *seg = first_segment(path, pl, &sl);
    bool health = is_healthz(path, pl);
    /* /{network}/healthz needs no key either */
    for (size_t i = 0; !health && seg && i < f->n_nets; i++) {
        const char *id = f->nets[i].id;
        health = id && strlen(id) == sl && memcmp(id, seg, sl) == 0 &&
                 is_healthz(path + 1 + sl, pl - 1 - sl);
    }
    if (health)
        return true;
    f->c.unauthorized++;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "WWW-Authenticate", "Bearer realm=\"beaconmux\"");
    bm_req_add_resp_fields(req, &h);
    bm_hdrs_dispose(&h);
    bm_resp_error(req, 401, presented ? "this API key is not known" : "an API key is required");
    return false;
}

void bm_front_handle(bm_req_t *req, void *ud)
{
    bm_front_t *f = ud;
    f->c.requests++;
    const char *peer = bm_req_peer(req);
    if (f->o.n_allowed && !bm_cidr_match(f->o.allowed, f->o.n_allowed, peer)) {
        f->c.not_allowed_client++;
        bm_resp_error(req, 403, "this client address is not allowed (server.allowedClients)");
        return;
    }
    if (f->o.n_trusted) { /* the access log names the client, not the proxy in front */
        char client[64];
        bm_client_addr(peer, bm_req_header(req, "x-forwarded-for"), f->o.trusted, f->o.n_trusted,
                       client, sizeof client);
        bm_req_set_client(req, client);
    }
    /* a preflight carries no credentials: answered before keys are asked for */
    if (strcmp(bm_req_method(req), "OPTIONS") == 0 && bm_req_header(req, "origin") &&
        bm_req_header(req, "access-control-request-method")) {
        cors_step(f, req);
        return;
    }
    const bm_auth_key_t *key;
    if (!auth_step(f, req, &key))
        return;
    bool global;
    const bm_front_network_t *net = pick_network(f, req, key, &global);
    if (!net && !global)
        return;
    if (net)
        bm_req_set_scope(req, net->ud);
    size_t pl;
    const char *path = bm_req_path(req, &pl);
    unsigned cls = route_class(f, bm_req_method(req), path, pl);
    /* a process route shows every network: a key needs them all */
    bool allowed =
        !key || (bm_auth_allows(key, cls, net ? net->id : NULL) && (net || key->n_networks == 0));
    if (!allowed) {
        f->c.forbidden++;
        bm_resp_error(req, 403, "API key \"%s\" may not use %s routes%s%s", key->id,
                      cls == BM_ROUTE_ADMIN    ? "admin"
                      : cls == BM_ROUTE_DUTIES ? "duty"
                                               : "read",
                      net && net->id ? " on network " : (net ? "" : " of every network"),
                      net && net->id ? net->id : "");
        return;
    }
    if (!cors_step(f, req))
        return;
    if (!limit_step(f, req, cls, key))
        return;
    bm_router_dispatch(req, net ? net->router : f->process);
}

const bm_front_counters_t *bm_front_counters(const bm_front_t *f)
{
    return &f->c;
}

void bm_front_status_json(bm_str_t *o, void *ud)
{
    const bm_front_t *f = ud;
    const bm_front_counters_t *c = &f->c;
    bm_str_printf(o,
                  "{\"networks\":%zu,\"keys\":%zu,\"requests\":%llu,\"unauthorized\":%llu,"
                  "\"forbidden\":%llu,\"client_not_allowed\":%llu,\"unknown_network\":%llu,"
                  "\"cors_preflights\":%llu,\"cors_denied\":%llu,\"rate_limited_reads\":%llu,"
                  "\"rate_limited_duties\":%llu,\"path_keys\":%llu}",
                  f->n_nets, f->o.n_keys, (unsigned long long)c->requests,
                  (unsigned long long)c->unauthorized, (unsigned long long)c->forbidden,
                  (unsigned long long)c->not_allowed_client, (unsigned long long)c->unknown_network,
                  (unsigned long long)c->preflights, (unsigned long long)c->cors_denied,
                  (unsigned long long)c->limited_read, (unsigned long long)c->limited_duties,
                  (unsigned long long)c->path_keys);
}
