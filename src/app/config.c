/* SPDX-License-Identifier: MIT */
/*
 * config: the configuration model's life (new, free, read from a file), its validation as a
 * whole, and its dump as YAML. The key table and the meaning of each value are in
 * config_keys.c, the YAML walk in config_yaml.c, the command line in cli.c.
 */
#include "app/config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "app/config_keys.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/url.h"

/* ---- construction, destruction ----------------------------------------------------- */

bm_config_t *bm_config_new(void)
{
    bm_config_t *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return NULL;
    if (bm_cfg_defaults(&bm_cfg_root, cfg) != 0) {
        bm_config_free(cfg);
        return NULL;
    }
    return cfg;
}

void bm_config_free(bm_config_t *cfg)
{
    if (!cfg)
        return;
    bm_cfg_dispose(&bm_cfg_root, cfg);
    free(cfg->path);
    free(cfg);
}

static char *read_file(const char *path, size_t *len, bm_config_err_t *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;
    if (!f) {
        bm_cfg_err(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    buf = malloc(BM_CONFIG_MAX_FILE_BYTES + 1);
    if (!buf) {
        fclose(f);
        bm_cfg_err(err, "%s: out of memory", path);
        return NULL;
    }
    n = fread(buf, 1, BM_CONFIG_MAX_FILE_BYTES + 1, f);
    if (ferror(f)) {
        bm_cfg_err(err, "%s: cannot read: %s", path, strerror(errno));
        goto fail;
    }
    if (n > BM_CONFIG_MAX_FILE_BYTES) {
        bm_cfg_err(err, "%s: larger than %u bytes", path, BM_CONFIG_MAX_FILE_BYTES);
        goto fail;
    }
    fclose(f);
    *len = n;
    return buf;
fail:
    fclose(f);
    free(buf);
    return NULL;
}

bm_config_t *bm_config_read(const char *path, bm_config_err_t *err)
{
    size_t len;
    if (err)
        err->msg[0] = '\0';
    char *text = read_file(path, &len, err);
    if (!text)
        return NULL;
    bm_config_t *cfg = bm_config_parse(text, len, path, NULL, NULL, err);
    free(text);
    if (cfg && !(cfg->path = strdup(path))) {
        bm_cfg_err(err, "out of memory");
        bm_config_free(cfg);
        return NULL;
    }
    return cfg;
}

/* ---- validation of the whole ------------------------------------------------------- */

/* Every single value of `sec` in `obj`, in file order, sub-sections included. */
static int check_keys(const bm_cfg_section_t *sec, const void *obj, const char *prefix,
                      bm_config_err_t *err)
{
    char msg[400], path[160];
    for (size_t i = 0; i < sec->n_keys; i++) {
        const bm_cfg_key_t *k = &sec->keys[i];
        snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", k->name);
        if (k->kind == BM_CFG_SECTION) {
            if (check_keys(k->sub, (const char *)obj + k->off, path, err) != 0)
                return BM_EINVAL;
        } else if (k->kind != BM_CFG_LIST && k->kind != BM_CFG_MAP && k->kind != BM_CFG_STRINGS &&
                   !bm_cfg_check(k, obj, msg, sizeof msg)) {
            bm_cfg_err(err, "%s: %s", path, msg);
            return BM_EINVAL;
        }
    }
    return 0;
}

static int check_headers(const bm_config_upstream_t *up, size_t i, bm_config_err_t *err)
{
    const char *why;
    bm_cfg_quote_t q;
    if (up->n_headers > BM_CONFIG_MAX_HEADERS) {
        bm_cfg_err(err, "upstreams[%zu] (%s): more than %d headers", i, up->id,
                   BM_CONFIG_MAX_HEADERS);
        return BM_EINVAL;
    }
    for (size_t h = 0; h < up->n_headers; h++) {
        const bm_config_header_t *hd = &up->headers[h];
        if (!hd->name || !hd->value) {
            bm_cfg_err(err, "upstreams[%zu] (%s): header %zu is incomplete", i, up->id, h);
            return BM_EINVAL;
        }
        if ((why = bm_cfg_header_name_problem(hd->name)) ||
            (why = bm_cfg_header_value_problem(hd->value))) {
            bm_cfg_err(err, "upstreams[%zu] (%s): header %s %s", i, up->id,
                       bm_cfg_quote(&q, hd->name), why);
            return BM_EINVAL;
        }
        for (size_t j = 0; j < h; j++) {
            if (strcasecmp(up->headers[j].name, hd->name) == 0) {
                bm_cfg_err(err, "upstreams[%zu] (%s): header %s is given twice", i, up->id,
                           bm_cfg_quote(&q, hd->name));
                return BM_EINVAL;
            }
        }
    }
    return 0;
}

static int check_upstreams(const bm_config_t *cfg, bm_config_err_t *err)
{
    const char *why;
    bm_cfg_quote_t q;
    if (cfg->n_upstreams == 0) {
        bm_cfg_err(err, "no upstream configured: give --upstream URL, or list \"upstreams\" in "
                        "the configuration file");
        return BM_EINVAL;
    }
    if (cfg->n_upstreams > BM_CONFIG_MAX_UPSTREAMS) {
        bm_cfg_err(err, "more than %d upstreams", BM_CONFIG_MAX_UPSTREAMS);
        return BM_EINVAL;
    }
    for (size_t i = 0; i < cfg->n_upstreams; i++) {
        const bm_config_upstream_t *up = &cfg->upstreams[i];
        if (!up->id || (why = bm_cfg_id_problem(up->id))) {
            bm_cfg_err(err, "upstreams[%zu]: id %s %s", i,
                       up->id ? bm_cfg_quote(&q, up->id) : "(none)", up->id ? why : "is missing");
            return BM_EINVAL;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(cfg->upstreams[j].id, up->id) == 0) {
                bm_cfg_err(err, "upstreams[%zu]: id %s is already used by upstreams[%zu]", i,
                           bm_cfg_quote(&q, up->id), j);
                return BM_EINVAL;
            }
        }
        if (!up->url || (why = bm_cfg_url_problem(up->url))) {
            bm_cfg_err(err, "upstreams[%zu] (%s): url %s %s", i, up->id,
                       up->url ? bm_cfg_quote_url(&q, up->url) : "(none)",
                       up->url ? why : "is missing");
            return BM_EINVAL;
        }
        if (check_headers(up, i, err) != 0)
            return BM_EINVAL;
    }
    if (bm_config_serving_upstreams(cfg) == 0) {
        bm_cfg_err(err, "every upstream is a shadow: at least one must serve (shadow: false)");
        return BM_EINVAL;
    }
    return 0;
}

static int check_holds(const bm_config_t *cfg, bm_config_err_t *err)
{
    char a[32], b[32];
    if (cfg->duties.hold_floor_ms > cfg->duties.max_hold_ms) {
        bm_cfg_format_duration(a, sizeof a, cfg->duties.hold_floor_ms);
        bm_cfg_format_duration(b, sizeof b, cfg->duties.max_hold_ms);
        bm_cfg_err(err, "duties.holdFloor (%s) must not be greater than duties.maxHold (%s)", a, b);
        return BM_EINVAL;
    }
    for (int d = 0; d < BM_CONFIG_DUTY_COUNT; d++) {
        const bm_config_duty_hold_t *h = &cfg->duties.hold[d];
        uint32_t floor, max;
        bm_config_duty_hold(cfg, (bm_config_duty_t)d, &floor, &max);
        if (floor <= max)
            continue;
        bm_cfg_format_duration(a, sizeof a, floor);
        bm_cfg_format_duration(b, sizeof b, max);
        bm_cfg_err(err, "duties.%s: holdFloor (%s%s) must not be greater than maxHold (%s%s)",
                   bm_config_duty_name((bm_config_duty_t)d), a,
                   h->hold_floor_ms == BM_CONFIG_UNSET ? ", from duties.holdFloor" : "", b,
                   h->max_hold_ms == BM_CONFIG_UNSET ? ", from duties.maxHold" : "");
        return BM_EINVAL;
    }
    return 0;
}

/* The position of upstream `id`, or -1. */
static long upstream_index(const bm_config_t *cfg, const char *id)
{
    for (size_t i = 0; i < cfg->n_upstreams; i++)
        if (cfg->upstreams[i].id && strcmp(cfg->upstreams[i].id, id) == 0)
            return (long)i;
    return -1;
}

static int check_ids(const bm_config_t *cfg, const char *where, char *const *ids, size_t n,
                     bm_config_err_t *err)
{
    bm_cfg_quote_t q;
    for (size_t j = 0; j < n; j++) {
        long k = upstream_index(cfg, ids[j]);
        if (k < 0) {
            bm_cfg_err(err, "%s.upstreams[%zu]: no upstream has the id %s", where, j,
                       bm_cfg_quote(&q, ids[j]));
            return BM_EINVAL;
        }
        if (cfg->upstreams[k].shadow) {
            bm_cfg_err(err, "%s.upstreams[%zu]: %s is a shadow: it serves no request", where, j,
                       bm_cfg_quote(&q, ids[j]));
            return BM_EINVAL;
        }
    }
    return 0;
}

/* Upstream read settings, client routes and route rules: what one value cannot say alone. */
static int check_read_path(const bm_config_t *cfg, bm_config_err_t *err)
{
    char where[64];
    for (size_t i = 0; i < cfg->n_upstreams; i++) {
        const bm_config_autotune_t *a = &cfg->upstreams[i].auto_tune;
        if (a->max && a->min > a->max) {
            bm_cfg_err(err,
                       "upstreams[%zu] (%s): autoTune.min (%u) must not be greater than "
                       "autoTune.max (%u)",
                       i, cfg->upstreams[i].id, a->min, a->max);
            return BM_EINVAL;
        }
    }
    for (size_t i = 0; i < cfg->n_client_routes; i++) {
        const bm_config_client_route_t *r = &cfg->client_routes[i];
        snprintf(where, sizeof where, "clientRoutes[%zu]", i);
        if ((r->n_upstreams > 0) == (r->client != NULL)) {
            bm_cfg_err(err, "%s: give either upstreams or client", where);
            return BM_EINVAL;
        }
        if (check_ids(cfg, where, r->upstreams, r->n_upstreams, err) != 0)
            return BM_EINVAL;
    }
    for (size_t i = 0; i < cfg->n_route_rules; i++) {
        const bm_config_route_rule_t *r = &cfg->route_rules[i];
        snprintf(where, sizeof where, "routeRules[%zu]", i);
        if (check_ids(cfg, where, r->upstreams, r->n_upstreams, err) != 0)
            return BM_EINVAL;
        const bm_config_consensus_t *c = &r->consensus;
        if ((c->query == 0) != (c->agree == 0) || c->agree > c->query) {
            bm_cfg_err(err, "%s.consensus: agree (%u) must be between 1 and query (%u), both given",
                       where, c->agree, c->query);
            return BM_EINVAL;
        }
        if (c->query > cfg->n_upstreams) {
            bm_cfg_err(err, "%s.consensus: query (%u) is more than the %zu upstreams", where,
                       c->query, cfg->n_upstreams);
            return BM_EINVAL;
        }
    }
    return 0;
}

uint32_t bm_config_max_attempts(const bm_config_t *cfg)
{
    if (cfg->failsafe.retry.max_attempts != BM_CONFIG_UNSET)
        return cfg->failsafe.retry.max_attempts;
    if (cfg->failover.max_attempts != BM_CONFIG_UNSET)
        return cfg->failover.max_attempts;
    return BM_DEFAULT_FAILOVER_MAX_ATTEMPTS;
}

const char *bm_config_deprecation(const bm_config_t *cfg)
{
    if (cfg->failover.max_attempts == BM_CONFIG_UNSET)
        return NULL;
    if (cfg->failsafe.retry.max_attempts != BM_CONFIG_UNSET)
        return "failover.maxAttempts is deprecated and ignored: failsafe.retry.maxAttempts is "
               "set";
    return "failover.maxAttempts is deprecated: write failsafe.retry.maxAttempts instead";
}

size_t bm_config_network_count(const bm_config_t *cfg)
{
    return cfg->n_networks ? cfg->n_networks : 1;
}

void bm_config_network(const bm_config_t *cfg, size_t i, bm_config_t *out)
{
    *out = *cfg;
    if (cfg->n_networks == 0 || i >= cfg->n_networks)
        return;
    const bm_config_t *net = &cfg->networks[i];
    out->networks = NULL;
    out->n_networks = 0;
    out->network_id = net->network_id;
    /* each row the entry gave replaces the top level's value: the field, and for a list its
     * count too */
    const bm_cfg_section_t *sec = &bm_cfg_network;
    for (size_t r = 1; r < sec->n_keys; r++) {
        const bm_cfg_key_t *k = &sec->keys[r];
        bool given = net->network_given & (1ull << r);
        if (!given && !(k->kind == BM_CFG_LIST && strcmp(k->name, "upstreams") == 0))
            continue; /* upstreams are never inherited: each network names its nodes */
        size_t size = k->kind == BM_CFG_SECTION ? k->sub->size : sizeof(void *);
        memcpy((char *)out + k->off, (const char *)net + k->off, size);
        if (k->kind == BM_CFG_LIST || k->kind == BM_CFG_STRINGS)
            memcpy((char *)out + k->aux, (const char *)net + k->aux, sizeof(size_t));
    }
}

/* The checks of one network's effective configuration. */
/* A quorum (the key `key`) that more nodes than `serving` must reach: the error says what
 * could then never happen (`never`). */
static bool quorum_too_large(bm_config_err_t *err, const char *key, uint32_t quorum, size_t serving,
                             const char *never)
{
    if (quorum <= serving)
        return false;
    bm_cfg_err(err,
               "%s (%" PRIu32 ") is larger than the number of upstreams that are not shadows "
               "(%zu): %s",
               key, quorum, serving, never);
    return true;
}

static int validate_network(const bm_config_t *cfg, bm_config_err_t *err)
{
    if (check_upstreams(cfg, err) != 0 || check_holds(cfg, err) != 0 ||
        check_read_path(cfg, err) != 0)
        return BM_EINVAL;
    if (cfg->metrics.listen && *cfg->metrics.listen) {
        char host[64];
        uint16_t port = 0;
        bm_config_parse_listen(cfg->metrics.listen, host, sizeof host, &port);
        if (port != 0 && port == cfg->listen_port && strcmp(host, cfg->listen_host) == 0) {
            bm_cfg_err(err,
                       "metrics.listen (%s) is the address of listen: leave it out to serve "
                       "metrics on that listener",
                       cfg->metrics.listen);
            return BM_EINVAL;
        }
    }
    /* shadow nodes count for no quorum: only the serving ones can reach it */
    size_t serving = bm_config_serving_upstreams(cfg);
    if (quorum_too_large(err, "duties.checkpointQuorum", cfg->duties.checkpoint_quorum, serving,
                         "no attestation data could ever reach it") ||
        quorum_too_large(err, "health.headQuorum", cfg->health.head_quorum, serving,
                         "the cluster head could never move except by extension"))
        return BM_EINVAL;
    return 0;
}

size_t bm_config_serving_upstreams(const bm_config_t *cfg)
{
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_upstreams; i++)
        n += !cfg->upstreams[i].shadow;
    return n;
}

/* API keys: the networks they name exist. */
static int check_auth(const bm_config_t *cfg, bm_config_err_t *err)
{
    bm_cfg_quote_t q;
    for (size_t i = 0; i < cfg->auth.n_keys; i++) {
        const bm_config_key_t *k = &cfg->auth.keys[i];
        for (size_t j = 0; j < k->n_networks; j++) {
            bool found = false;
            for (size_t n = 0; n < cfg->n_networks && !found; n++)
                found = strcmp(cfg->networks[n].network_id, k->networks[j]) == 0;
            if (!found) {
                bm_cfg_err(err, "auth.keys[%zu] (%s): networks[%zu]: no network has the id %s%s", i,
                           k->id, j, bm_cfg_quote(&q, k->networks[j]),
                           cfg->n_networks ? "" : " (there is no networks: list)");
                return BM_EINVAL;
            }
        }
    }
    return 0;
}

/* server.tls: all or nothing (files without a listener would be ignored silently), and a
 * port of its own. The files themselves are loaded by bm_tls_ctx_new at start and --check. */
static int check_server_tls(const bm_config_t *cfg, bm_config_err_t *err)
{
    const bm_config_server_tls_t *t = &cfg->server.tls;
    if (!t->listen_host) {
        if (t->cert_file || t->key_file || t->client_ca_file || t->require_client_cert) {
            bm_cfg_err(err, "server.tls: certificate settings are given but server.tls.listen "
                            "is not: set the address the TLS listener binds");
            return BM_EINVAL;
        }
        return 0;
    }
    if (!t->cert_file || !t->key_file) {
        bm_cfg_err(err, "server.tls: listen is set, so certFile and keyFile are both needed");
        return BM_EINVAL;
    }
    if (t->require_client_cert && !t->client_ca_file) {
        bm_cfg_err(err, "server.tls.requireClientCert needs server.tls.clientCaFile (the CAs "
                        "client certificates must chain to)");
        return BM_EINVAL;
    }
    if (t->listen_port != 0 && t->listen_port == cfg->listen_port) {
        bm_cfg_err(err,
                   "server.tls.listen: port %u is the plain listener's (listen): give the "
                   "TLS listener a port of its own",
                   t->listen_port);
        return BM_EINVAL;
    }
    return 0;
}

int bm_config_validate(const bm_config_t *cfg, bm_config_err_t *err)
{
    if (!cfg) {
        bm_cfg_err(err, "no configuration");
        return BM_EINVAL;
    }
    if (check_keys(&bm_cfg_root, cfg, "", err) != 0 || check_auth(cfg, err) != 0 ||
        check_server_tls(cfg, err) != 0)
        return BM_EINVAL;
    if (cfg->state.driver == BM_STATE_REDIS && !cfg->state.redis.url) {
        bm_cfg_err(err, "state.driver is redis: give state.redis.url");
        return BM_EINVAL;
    }
    if (cfg->n_networks == 0)
        return validate_network(cfg, err);
    if (cfg->n_upstreams) {
        bm_cfg_err(err, "upstreams are given at the top level and networks are listed: give "
                        "each network its upstreams under networks[]");
        return BM_EINVAL;
    }
    for (size_t i = 0; i < cfg->n_networks; i++) {
        bm_config_t view;
        bm_config_network(cfg, i, &view);
        bm_config_err_t e;
        if (validate_network(&view, &e) != 0) {
            bm_cfg_err(err, "networks[%zu] (%s): %s", i, view.network_id, e.msg);
            return BM_EINVAL;
        }
    }
    return 0;
}

/* ---- per-duty holds ------------------------------------------------------------------- */

void bm_config_duty_hold(const bm_config_t *cfg, bm_config_duty_t duty, uint32_t *hold_floor_ms,
                         uint32_t *max_hold_ms)
{
    uint32_t floor = cfg->duties.hold_floor_ms, max = cfg->duties.max_hold_ms;
    if ((int)duty >= 0 && duty < BM_CONFIG_DUTY_COUNT) {
        const bm_config_duty_hold_t *h = &cfg->duties.hold[duty];
        if (h->hold_floor_ms != BM_CONFIG_UNSET)
            floor = h->hold_floor_ms;
        if (h->max_hold_ms != BM_CONFIG_UNSET)
            max = h->max_hold_ms;
    }
    *hold_floor_ms = floor;
    *max_hold_ms = max;
}

/* ---- dump ---------------------------------------------------------------------------- */

/*
 * Appends s as a YAML double-quoted scalar that libyaml reads back byte for byte: escapes
 * what YAML may not carry literally (control characters, line breaks, DEL, C1 controls,
 * U+FEFF, U+2028/2029), and with `dollar`, doubles '$' for the ${VAR} substitution.
 */
static void dump_quoted(bm_str_t *out, const char *s, bool dollar)
{
    const unsigned char *p = (const unsigned char *)s;
    bm_str_putc(out, '"');
    while (*p) {
        unsigned c = p[0];
        size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
        uint32_t cp = c;
        bool valid = c < 0x80 || (c >= 0xC2 && c <= 0xF4);
        for (size_t i = 1; valid && i < n; i++)
            valid = (p[i] & 0xC0) == 0x80;
        if (valid && n > 1) {
            cp = c & (0xFF >> (n + 1));
            for (size_t i = 1; i < n; i++)
                cp = (cp << 6) | (p[i] & 0x3F);
            valid = !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
                    !(cp >= 0xD800 && cp <= 0xDFFF);
        }
        if (!valid) {
            bm_str_printf(out, "\\x%02x", c); /* not UTF-8: shown, not preserved */
            p++;
            continue;
        }
        if (c == '"' || c == '\\') {
            bm_str_putc(out, '\\');
            bm_str_putc(out, (char)c);
        } else if (c == '$' && dollar) {
            bm_str_puts(out, "$$");
        } else if (c == '\t') {
            bm_str_puts(out, "\\t");
        } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F)) {
            bm_str_printf(out, "\\x%02x", (unsigned)cp);
        } else if (cp == 0xFEFF || cp == 0x2028 || cp == 0x2029 || cp == 0xFFFE || cp == 0xFFFF) {
            bm_str_printf(out, "\\u%04x", (unsigned)cp);
        } else {
            bm_str_append(out, p, n);
        }
        p += n;
    }
    bm_str_putc(out, '"');
}

static void dump_section(bm_str_t *out, const bm_cfg_section_t *sec, const void *obj, bool mask,
                         size_t indent);

/* A string value: quoted, '$' doubled; a URL with its password masked on request. */
static void dump_string(bm_str_t *out, const bm_cfg_key_t *k, const char *v, bool mask)
{
    if ((k->flags & BM_CFG_SECRET) && mask) {
        dump_quoted(out, "***", true);
    } else if ((k->flags & BM_CFG_MASK_URL) && mask) {
        bm_str_t m = BM_STR_INIT;
        bm_url_mask(&m, v);
        dump_quoted(out, bm_str_data(&m), true);
        bm_str_dispose(&m);
    } else {
        dump_quoted(out, v, true);
    }
}

/* The entries of a list: "- " before the first key of each, the others under it. */
static void dump_list(bm_str_t *out, const bm_cfg_key_t *k, const void *obj, bool mask,
                      size_t indent)
{
    const char *arr = *(char *const *)((const char *)obj + k->off);
    size_t count = *(const size_t *)((const char *)obj + k->aux);
    if (count == 0) {
        bm_str_printf(out, "%*s%s: []\n", (int)indent, "", k->name);
        return;
    }
    bm_str_printf(out, "%*s%s:\n", (int)indent, "", k->name);
    for (size_t i = 0; i < count; i++) {
        bm_str_t entry = BM_STR_INIT;
        const void *item = arr + i * k->sub->size;
        bm_config_t net;
        if (k->sub == &bm_cfg_network) {
            /* a network as it runs: the rows its entry left out hold what it inherits from
             * the top level, not the defaults the entry was read over */
            bm_config_network(obj, i, &net);
            item = &net;
        }
        dump_section(&entry, k->sub, item, mask, indent + 4);
        if (bm_str_len(&entry) == 0) {
            bm_str_printf(out, "%*s- {}\n", (int)indent + 2, "");
        } else {
            bm_str_printf(out, "%*s- ", (int)indent + 2, "");
            bm_str_append(out, bm_str_data(&entry) + indent + 4, bm_str_len(&entry) - indent - 4);
        }
        out->oom |= entry.oom;
        bm_str_dispose(&entry);
    }
}

static void dump_map(bm_str_t *out, const bm_cfg_key_t *k, const void *obj, bool mask,
                     size_t indent)
{
    const bm_config_header_t *pairs = *(bm_config_header_t *const *)((const char *)obj + k->off);
    size_t count = *(const size_t *)((const char *)obj + k->aux);
    if (count == 0)
        return;
    bm_str_printf(out, "%*s%s:\n", (int)indent, "", k->name);
    for (size_t i = 0; i < count; i++) {
        bm_str_printf(out, "%*s", (int)indent + 2, "");
        dump_quoted(out, pairs[i].name ? pairs[i].name : "", false); /* names are not expanded */
        bm_str_puts(out, ": ");
        dump_quoted(out, mask ? "***" : (pairs[i].value ? pairs[i].value : ""), true);
        bm_str_putc(out, '\n');
    }
}

/* A sub-section is written only when it holds something (per-duty holds left unset). */
static void dump_subsection(bm_str_t *out, const bm_cfg_key_t *k, const void *obj, bool mask,
                            size_t indent)
{
    bm_str_t body = BM_STR_INIT;
    dump_section(&body, k->sub, (const char *)obj + k->off, mask, indent + 2);
    if (bm_str_len(&body) > 0) {
        bm_str_printf(out, "%*s%s:\n", (int)indent, "", k->name);
        bm_str_append(out, bm_str_data(&body), bm_str_len(&body));
    }
    out->oom |= body.oom;
    bm_str_dispose(&body);
}

static void dump_key(bm_str_t *out, const bm_cfg_key_t *k, const void *obj, bool mask,
                     size_t indent)
{
    char b[64];
    const char *s;
    switch (k->kind) {
    case BM_CFG_SECTION:
        dump_subsection(out, k, obj, mask, indent);
        return;
    case BM_CFG_LIST:
        dump_list(out, k, obj, mask, indent);
        return;
    case BM_CFG_MAP:
        dump_map(out, k, obj, mask, indent);
        return;
    case BM_CFG_STRINGS: {
        char *const *arr = *(char **const *)((const char *)obj + k->off);
        size_t count = *(const size_t *)((const char *)obj + k->aux);
        if (count == 0 && !k->def_list)
            return;
        if (count == 0) { /* said, or reading the dump back would bring the default */
            bm_str_printf(out, "%*s%s: []\n", (int)indent, "", k->name);
            return;
        }
        bm_str_printf(out, "%*s%s: [", (int)indent, "", k->name);
        for (size_t i = 0; i < count; i++) {
            if (i)
                bm_str_puts(out, ", ");
            dump_quoted(out, arr[i], true);
        }
        bm_str_puts(out, "]\n");
        return;
    }
    case BM_CFG_LISTEN: {
        if (!bm_cfg_str(k, obj) && !k->def_text)
            return; /* a listener that is off */
        const char *h = (s = bm_cfg_str(k, obj)) ? s : "";
        bool v6 = strchr(h, ':') != NULL;
        bm_str_printf(out, "%*s%s: \"%s%s%s:%u\"\n", (int)indent, "", k->name, v6 ? "[" : "", h,
                      v6 ? "]" : "", *(const uint16_t *)((const char *)obj + k->aux));
        return;
    }
    case BM_CFG_ROOT:
    case BM_CFG_PATH:
    case BM_CFG_TEXT:
        if (!(s = bm_cfg_str(k, obj)))
            return; /* not set: absent from the file reads back the same */
        bm_str_printf(out, "%*s%s: ", (int)indent, "", k->name);
        dump_string(out, k, s, mask);
        bm_str_putc(out, '\n');
        return;
    default:
        if (bm_cfg_unset(k, obj))
            return; /* inherited: absent from the file reads back the same */
        bm_cfg_format(b, sizeof b, k, bm_cfg_num(k, obj));
        bm_str_printf(out, "%*s%s: %s\n", (int)indent, "", k->name, b);
        return;
    }
}

static void dump_section(bm_str_t *out, const bm_cfg_section_t *sec, const void *obj, bool mask,
                         size_t indent)
{
    for (size_t i = 0; i < sec->n_keys; i++)
        dump_key(out, &sec->keys[i], obj, mask, indent);
}

int bm_config_dump(const bm_config_t *cfg, bool mask_secrets, bm_str_t *out)
{
    dump_section(out, &bm_cfg_root, cfg, mask_secrets, 0);
    return out->oom ? BM_ENOMEM : 0;
}
