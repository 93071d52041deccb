/* SPDX-License-Identifier: MIT */
/*
 * reload_diff: each group of keys is compared through its projection: a copy of the
 * defaults holding only that group's values from one configuration, written out with
 * bm_config_dump (secrets unmasked, so a new password counts as a change). Two
 * configurations agree on a group when the two texts are equal, which covers every key of
 * the table without a comparison per field that a new key could be forgotten in.
 */
#include "app/reload_diff.h"

#include <string.h>

#include "base/err.h"

/* The global keys no network reads (they belong to main, the server, the log or the
 * front), reset to the defaults in a network's projection. */
static void clear_globals(bm_config_t *x, const bm_config_t *defaults)
{
    x->path = NULL;
    x->listen_host = defaults->listen_host;
    x->listen_port = defaults->listen_port;
    bool access = x->log.access; /* each network's observe writes its access log */
    x->log = defaults->log;
    x->log.access = access;
    x->server = defaults->server;
    x->auth = defaults->auth;
    x->cors = defaults->cors;
    x->rate_limit = defaults->rate_limit;
    x->trusted_proxies = defaults->trusted_proxies;
    x->n_trusted_proxies = defaults->n_trusted_proxies;
    x->networks = NULL;
    x->n_networks = 0;
    x->network_given = 0;
}

static int dump_network(const bm_config_t *c, size_t i, const bm_config_t *defaults, bm_str_t *out)
{
    bm_config_t x;
    bm_config_network(c, i, &x);
    clear_globals(&x, defaults);
    return bm_config_dump(&x, false, out);
}

static int dump_front(const bm_config_t *c, const bm_config_t *defaults, bm_str_t *out)
{
    bm_config_t x = *defaults;
    x.auth = c->auth;
    x.cors = c->cors;
    x.rate_limit = c->rate_limit;
    x.trusted_proxies = c->trusted_proxies;
    x.n_trusted_proxies = c->n_trusted_proxies;
    x.server.allowed_clients = c->server.allowed_clients;
    x.server.n_allowed_clients = c->server.n_allowed_clients;
    return bm_config_dump(&x, false, out);
}

static int dump_server(const bm_config_t *c, const bm_config_t *defaults, bm_str_t *out)
{
    bm_config_t x = *defaults;
    x.server = c->server;
    x.server.allowed_clients = defaults->server.allowed_clients; /* the front's */
    x.server.n_allowed_clients = defaults->server.n_allowed_clients;
    return bm_config_dump(&x, false, out);
}

typedef int (*dump_fn)(const bm_config_t *c, const bm_config_t *defaults, bm_str_t *out);

/* 1: the group differs, 0: same, <0: no memory. */
static int group_differs(dump_fn fn, const bm_config_t *a, const bm_config_t *b,
                         const bm_config_t *defaults)
{
    bm_str_t x = BM_STR_INIT, y = BM_STR_INIT;
    int rc = fn(a, defaults, &x);
    if (!rc)
        rc = fn(b, defaults, &y);
    if (!rc)
        rc = bm_str_len(&x) != bm_str_len(&y) ||
             memcmp(bm_str_data(&x), bm_str_data(&y), bm_str_len(&x)) != 0;
    bm_str_dispose(&x);
    bm_str_dispose(&y);
    return rc;
}

static bool same_id(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static const char *network_id(const bm_config_t *c, size_t i)
{
    return c->n_networks ? c->networks[i].network_id : NULL;
}

/* Matches the networks by id: kept when the projections agree, else built anew. */
static int diff_networks(const bm_config_t *old, const bm_config_t *new,
                         const bm_config_t *defaults, bm_reload_diff_t *d)
{
    for (size_t j = 0; j < d->n_old; j++)
        d->retire[j] = true;
    for (size_t i = 0; i < d->n_new; i++) {
        d->keep[i] = d->replaces[i] = -1;
        for (size_t j = 0; j < d->n_old; j++) {
            if (!same_id(network_id(old, j), network_id(new, i)))
                continue;
            bm_str_t x = BM_STR_INIT, y = BM_STR_INIT;
            int rc = dump_network(old, j, defaults, &x);
            if (!rc)
                rc = dump_network(new, i, defaults, &y);
            bool same = !rc && bm_str_len(&x) == bm_str_len(&y) &&
                        memcmp(bm_str_data(&x), bm_str_data(&y), bm_str_len(&x)) == 0;
            bm_str_dispose(&x);
            bm_str_dispose(&y);
            if (rc)
                return rc;
            if (same) {
                d->keep[i] = (int)j;
                d->retire[j] = false;
            } else {
                d->replaces[i] = (int)j;
            }
            break;
        }
    }
    return 0;
}

int bm_reload_diff(const bm_config_t *old, const bm_config_t *new, bm_reload_diff_t *d)
{
    memset(d, 0, sizeof *d);
    d->n_old = bm_config_network_count(old);
    d->n_new = bm_config_network_count(new);
    if (d->n_old > BM_RELOAD_MAX_NETWORKS || d->n_new > BM_RELOAD_MAX_NETWORKS)
        return BM_EINVAL;
    bm_config_t *defaults = bm_config_new();
    if (!defaults)
        return BM_ENOMEM;
    d->log = old->log.level != new->log.level || old->log.format != new->log.format;
    d->listen =
        old->listen_port != new->listen_port || !same_id(old->listen_host, new->listen_host);
    int rc = group_differs(dump_front, old, new, defaults);
    if (rc >= 0) {
        d->front = rc == 1;
        rc = group_differs(dump_server, old, new, defaults);
    }
    if (rc >= 0) {
        d->server = rc == 1;
        rc = diff_networks(old, new, defaults, d);
    }
    bm_config_free(defaults);
    return rc < 0 ? rc : 0;
}

size_t bm_reload_diff_built(const bm_reload_diff_t *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->n_new; i++)
        n += d->keep[i] < 0;
    return n;
}

size_t bm_reload_diff_retired(const bm_reload_diff_t *d)
{
    size_t n = 0;
    for (size_t j = 0; j < d->n_old; j++)
        n += d->retire[j];
    return n;
}

bool bm_reload_diff_empty(const bm_reload_diff_t *d)
{
    return !d->log && !d->front && !d->listen && !d->server && bm_reload_diff_built(d) == 0 &&
           bm_reload_diff_retired(d) == 0;
}

static void put_network(bm_str_t *out, const char *id, const char *what)
{
    bm_str_printf(out, "%s%s%s: %s", bm_str_len(out) ? "; " : "", id ? "network " : "the network",
                  id ? id : "", what);
}

int bm_reload_diff_describe(const bm_reload_diff_t *d, const bm_config_t *old,
                            const bm_config_t *new, bm_str_t *out)
{
    size_t start = bm_str_len(out);
    for (size_t i = 0; i < d->n_new; i++)
        if (d->keep[i] < 0)
            put_network(out, network_id(new, i), d->replaces[i] >= 0 ? "rebuilt" : "added");
    for (size_t j = 0; j < d->n_old; j++) {
        bool replaced = false;
        for (size_t i = 0; i < d->n_new; i++)
            replaced |= d->replaces[i] == (int)j;
        if (d->retire[j] && !replaced)
            put_network(out, network_id(old, j), "removed");
    }
    const char *sep = bm_str_len(out) > start ? "; " : "";
    if (d->front) {
        bm_str_printf(out, "%sfront (keys, CORS, rate limits, clients): new", sep);
        sep = "; ";
    }
    if (d->log) {
        bm_str_printf(out, "%slog: applied", sep);
        sep = "; ";
    }
    if (d->listen) {
        bm_str_printf(out, "%slisten: re-bound", sep);
        sep = "; ";
    }
    if (d->server)
        bm_str_printf(out, "%sserver limits: applied", sep);
    if (bm_str_len(out) == start)
        bm_str_puts(out, "nothing changed");
    return out->oom ? BM_ENOMEM : 0;
}
