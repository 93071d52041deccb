/* SPDX-License-Identifier: MIT */
/*
 * admin: renders the status document with bm_str_t (no JSON library needed to write) and
 * answers the admin routes and the cluster's synthetic node endpoints. Everything is read
 * at request time from the pool (states), the tracker (heads) and the monitor (streams):
 * nothing is cached, so an answer is never older than the last event.
 */
#include "app/admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "base/memtrim.h"
#include "cluster/head.h"
#include "cluster/monitor.h"
#include "cluster/nodestream.h"
#include "read/readpath.h"

struct bm_admin {
    bm_pool_t *pool;
    bm_discovery_t *disc;
    bm_monitor_t *monitor;   /* may be NULL */
    bm_readpath_t *readpath; /* may be NULL */
    uint64_t started_ms;
    struct {
        char name[32];
        bm_admin_section_fn fn;
        void *ud;
    } sections[BM_ADMIN_MAX_SECTIONS];
    size_t n_sections;
};

int bm_admin_add_section(bm_admin_t *a, const char *name, bm_admin_section_fn fn, void *ud)
{
    for (size_t i = 0; i < a->n_sections; i++)
        if (strcmp(a->sections[i].name, name) == 0) { /* a reload's new front replaces its own */
            a->sections[i].fn = fn;
            a->sections[i].ud = ud;
            return 0;
        }
    if (a->n_sections == BM_ADMIN_MAX_SECTIONS || strlen(name) >= sizeof a->sections[0].name)
        return BM_ENOMEM;
    snprintf(a->sections[a->n_sections].name, sizeof a->sections[0].name, "%s", name);
    a->sections[a->n_sections].fn = fn;
    a->sections[a->n_sections].ud = ud;
    a->n_sections++;
    return 0;
}

bm_admin_t *bm_admin_new(bm_pool_t *pool, bm_discovery_t *disc)
{
    bm_admin_t *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->pool = pool;
    a->disc = disc;
    a->started_ms = bm_clock_now_ms();
    return a;
}

void bm_admin_free(bm_admin_t *a)
{
    free(a);
}

void bm_admin_set_monitor(bm_admin_t *a, bm_monitor_t *m)
{
    a->monitor = m;
}

void bm_admin_set_readpath(bm_admin_t *a, bm_readpath_t *rp)
{
    a->readpath = rp;
}

static void json_kv_str(bm_str_t *o, const char *k, const char *v, bool comma)
{
    bm_str_printf(o, "%s\"%s\":", comma ? "," : "", k);
    if (v)
        bm_str_json_string(o, v, strlen(v));
    else
        bm_str_puts(o, "null");
}

static void root_json(bm_str_t *o, const char *key, const uint8_t root[32])
{
    char hex[BM_ROOT_HEX_LEN + 1];
    bm_root_to_hex(root, hex);
    bm_str_printf(o, ",\"%s\":\"%s\"", key, hex);
}

static const char *node_id(const bm_admin_t *a, int i)
{
    const bm_node_t *n = i >= 0 ? bm_pool_node(a->pool, (size_t)i) : NULL;
    return n ? n->id : NULL;
}

/* "head_guarantee": whether answers can be checked against a cluster head now. Off (and
 * loud) when the chain runs without one: duty reads then take the first answer. */
static void guarantee_json(const bm_admin_t *a, bm_head_t *t, uint64_t now, bm_str_t *o)
{
    const bm_chain_info_t *c = bm_discovery_chain(a->disc);
    bm_head_info_t h;
    uint64_t since = 0;
    bool ok;
    char why[200];
    if (!c->known) {
        ok = false;
        snprintf(why, sizeof why, "the chain is not known yet: no node has been discovered");
    } else if (now < c->clock.genesis_ms) {
        ok = true;
        snprintf(why, sizeof why, "the chain has not started");
    } else if (t && bm_head_cluster(t, &h)) {
        ok = true;
        snprintf(why, sizeof why, "the cluster head is at slot %llu", (unsigned long long)h.slot);
    } else {
        ok = false;
        if (!a->monitor || !bm_monitor_head_missing(a->monitor, now, &since))
            since = bm_slot_at(&c->clock, now);
        snprintf(why, sizeof why,
                 "NO CLUSTER HEAD while the chain runs (slot %llu, since slot %llu): no answer "
                 "can be checked for freshness",
                 (unsigned long long)bm_slot_at(&c->clock, now), (unsigned long long)since);
    }
    bm_str_printf(o, ",\"head_guarantee\":{\"ok\":%s", ok ? "true" : "false");
    json_kv_str(o, "reason", why, true);
    bm_str_putc(o, '}');
}

/* "cluster_head": the tracker's head, or null before the first one. */
static void cluster_head_json(const bm_admin_t *a, bm_head_t *t, bm_str_t *o)
{
    bm_head_info_t h;
    if (!t || !bm_head_cluster(t, &h)) {
        bm_str_puts(o, ",\"cluster_head\":null");
    } else {
        bm_str_printf(o, ",\"cluster_head\":{\"slot\":\"%llu\"", (unsigned long long)h.slot);
        root_json(o, "root", h.root);
        if (h.parent_known)
            root_json(o, "parent_root", h.parent);
        bm_str_printf(o, ",\"since_ms\":%llu,\"first_seen_ms\":%llu",
                      (unsigned long long)h.since_ms, (unsigned long long)h.first_seen_ms);
        json_kv_str(o, "node", node_id(a, h.first_node), true);
        bm_str_printf(o, ",\"payload_full\":%s}", h.payload_full ? "true" : "false");
    }
    if (!t)
        return;
    const bm_head_stats_t *st = bm_head_stats(t);
    bm_str_printf(o,
                  ",\"tracker\":{\"quorum\":%u,\"moves\":{\"first\":%llu,\"extend\":%llu,"
                  "\"reorg\":%llu,\"jump\":%llu},\"header_requests\":%llu,"
                  "\"header_failures\":%llu,\"header_timeouts\":%llu,\"blocks\":%zu}",
                  bm_head_quorum(t), (unsigned long long)st->moves[BM_HEAD_MOVE_FIRST],
                  (unsigned long long)st->moves[BM_HEAD_MOVE_EXTEND],
                  (unsigned long long)st->moves[BM_HEAD_MOVE_REORG],
                  (unsigned long long)st->moves[BM_HEAD_MOVE_JUMP], (unsigned long long)st->fetches,
                  (unsigned long long)st->fetch_failures, (unsigned long long)st->fetch_timeouts,
                  bm_head_block_count(t));
}

/* A node's head, lag, stream and arrival delays (members appended to its object). */
static void node_json(const bm_admin_t *a, bm_head_t *t, size_t i, const bm_node_t *n, bm_str_t *o)
{
    bm_head_node_view_t v;
    if (bm_head_node_view(t, i, &v) != 0)
        return;
    if (v.has_head) {
        bm_str_printf(o, ",\"head\":{\"slot\":\"%llu\"", (unsigned long long)v.slot);
        root_json(o, "root", v.root);
        bm_monitor_node_info_t hi;
        bool polled = bm_monitor_node_info(a->monitor, i, &hi) == 0 && hi.head_polled;
        bm_str_printf(o,
                      ",\"optimistic\":%s,\"stale\":%s,\"polled\":%s,\"payload\":\"%s\","
                      "\"received_ms\":%llu}",
                      v.optimistic ? "true" : "false", v.stale ? "true" : "false",
                      polled ? "true" : "false", bm_payload_status_name(v.payload),
                      (unsigned long long)v.received_ms);
    } else {
        bm_str_puts(o, ",\"head\":null");
    }
    if (n->head_lag_known)
        bm_str_printf(o, ",\"lag\":%lld", (long long)n->head_lag);
    else
        bm_str_puts(o, ",\"lag\":null");
    bm_str_printf(o,
                  ",\"relation\":\"%s\",\"forked\":%s,\"time_discrepancy\":%s,"
                  "\"voter\":%s,\"heads_first\":%llu,\"delays_ms\":[",
                  bm_head_relation_name(v.relation), v.forked ? "true" : "false",
                  v.time_discrepancy ? "true" : "false", v.voter ? "true" : "false",
                  (unsigned long long)v.firsts);
    for (uint32_t k = 0; k < v.n_delays && k < BM_HEAD_DELAYS; k++)
        bm_str_printf(o, "%s%d", k ? "," : "", (int)v.delays_ms[k]);
    bm_str_putc(o, ']');
    if (n->syncing.known)
        bm_str_printf(
            o,
            ",\"syncing\":{\"head_slot\":\"%llu\",\"sync_distance\":\"%llu\","
            "\"is_syncing\":%s,\"is_optimistic\":%s,\"el_offline\":%s}",
            (unsigned long long)n->syncing.head_slot, (unsigned long long)n->syncing.sync_distance,
            n->syncing.is_syncing ? "true" : "false", n->syncing.is_optimistic ? "true" : "false",
            n->syncing.el_offline ? "true" : "false");
    bm_monitor_node_info_t mi;
    if (bm_monitor_node_info(a->monitor, i, &mi) != 0)
        return;
    bm_str_printf(o,
                  ",\"stream\":{\"connected\":%s,\"state\":\"%s\",\"waiting_since_ms\":%llu,"
                  "\"topic\":\"%s\",\"payload_topic\":%s,\"connects\":%llu,\"failures\":%llu,"
                  "\"events\":%llu,\"bad_events\":%llu,\"up_since_ms\":%llu,"
                  "\"last_event_ms\":%llu,\"last_error\":\"%s\",\"last_status\":%d,"
                  "\"syncing_polls\":%llu,\"header_requests\":%llu}",
                  mi.connected ? "true" : "false",
                  bm_nodestream_state_name((bm_nodestream_state_t)mi.stream_state),
                  (unsigned long long)mi.waiting_since_ms, mi.head_v2 ? "head_v2" : "head",
                  mi.payload_topic ? "true" : "false", (unsigned long long)mi.connects,
                  (unsigned long long)mi.failures, (unsigned long long)mi.events,
                  (unsigned long long)mi.bad_events, (unsigned long long)mi.up_since_ms,
                  (unsigned long long)mi.last_event_ms, mi.last_err ? bm_strerror(mi.last_err) : "",
                  mi.last_status, (unsigned long long)mi.syncing_polls,
                  (unsigned long long)mi.header_fetches);
    bm_str_printf(o,
                  ",\"head_polls\":{\"sent\":%llu,\"answered\":%llu,\"failed\":%llu,"
                  "\"unanswered\":%llu,\"last_ms\":%llu",
                  (unsigned long long)mi.head_polls, (unsigned long long)mi.polled_heads,
                  (unsigned long long)mi.poll_failures, (unsigned long long)mi.unanswered,
                  (unsigned long long)mi.last_poll_ms);
    json_kv_str(o, "last_why", mi.last_poll_why, true);
    bm_str_putc(o, '}');
}

void bm_admin_status_json(bm_admin_t *a, bm_str_t *o)
{
    uint64_t now = bm_clock_now_ms();
    const bm_chain_info_t *c = bm_discovery_chain(a->disc);
    bm_str_puts(o, "{\"version\":\"" BM_VERSION "\"");
    bm_str_printf(o, ",\"uptime_s\":%llu", (unsigned long long)((now - a->started_ms) / 1000));
    bm_memtrim_stats_t mt = bm_memtrim_stats();
    bm_str_printf(o,
                  ",\"memory\":{\"trim_interval_ms\":%llu,\"trims\":%llu,\"trims_released\":%llu,"
                  "\"last_trim_us\":%llu,\"max_trim_us\":%llu}",
                  (unsigned long long)mt.every_ms, (unsigned long long)mt.runs,
                  (unsigned long long)mt.released, (unsigned long long)mt.last_us,
                  (unsigned long long)mt.max_us);
    if (c->known) {
        uint64_t slot = bm_slot_at(&c->clock, now);
        bm_str_printf(o,
                      ",\"chain\":{\"genesis_time\":\"%llu\",\"slot_ms\":%u,\"slots_per_epoch\":%u,"
                      "\"current_slot\":\"%llu\",\"current_epoch\":\"%llu\",\"fork\":\"%s\"}",
                      (unsigned long long)(c->clock.genesis_ms / 1000), c->clock.slot_ms,
                      c->clock.slots_per_epoch, (unsigned long long)slot,
                      (unsigned long long)bm_epoch_of_slot(&c->clock, slot),
                      bm_fork_name(bm_chain_fork_at_slot(c, slot)));
    } else {
        bm_str_puts(o, ",\"chain\":null");
    }
    const bm_node_t *ref = bm_discovery_reference(a->disc);
    json_kv_str(o, "static_source", ref ? ref->id : NULL, true);
    bm_head_t *t = a->monitor ? bm_monitor_head(a->monitor) : NULL;
    guarantee_json(a, t, now, o);
    cluster_head_json(a, t, o);
    bm_str_puts(o, ",\"upstreams\":[");
    for (size_t i = 0; i < bm_pool_count(a->pool); i++) {
        const bm_node_t *n = bm_pool_node(a->pool, i);
        const bm_node_stats_t *s = &n->stats;
        bm_str_puts(o, i ? ",{" : "{");
        json_kv_str(o, "id", n->id, false);
        json_kv_str(o, "url", n->url_masked, true);
        if (n->shadow)
            bm_str_puts(o, ",\"shadow\":true");
        json_kv_str(o, "state", bm_node_state_name(n->state), true);
        json_kv_str(o, "reason", n->state_reason, true);
        bm_str_printf(o, ",\"state_since_ms\":%llu", (unsigned long long)n->state_since_ms);
        json_kv_str(o, "client", bm_client_name(n->client), true);
        json_kv_str(o, "version", n->version, true);
        bm_str_printf(o,
                      ",\"requests\":%llu,\"errors\":%llu,\"in_flight\":%llu,"
                      "\"latency_ms\":{\"ewma\":%.2f,\"p50\":%.0f,\"p99\":%.0f}",
                      (unsigned long long)s->requests, (unsigned long long)s->errors,
                      (unsigned long long)s->in_flight, s->latency_ewma_ms,
                      bm_node_latency_pct(n, 50), bm_node_latency_pct(n, 99));
        if (t)
            node_json(a, t, i, n, o);
        if (a->readpath)
            bm_readpath_node_json(a->readpath, i, o);
        bm_str_putc(o, '}');
    }
    bm_str_putc(o, ']');
    for (size_t i = 0; i < a->n_sections; i++) {
        bm_str_printf(o, ",\"%s\":", a->sections[i].name);
        a->sections[i].fn(o, a->sections[i].ud);
    }
    bm_str_putc(o, '}');
}

static void route_status(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    bm_str_t o = BM_STR_INIT;
    bm_admin_status_json(ud, &o);
    bm_resp_send_str(req, "application/json", &o);
}

static void route_healthz(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    bm_admin_t *a = ud;
    (void)params;
    size_t usable = 0;
    for (size_t i = 0; i < bm_pool_count(a->pool); i++) {
        const bm_node_t *n = bm_pool_node(a->pool, i);
        usable += bm_node_usable(n) && n->state != BM_NODE_UNREACHABLE &&
                  n->state != BM_NODE_UNKNOWN; /* a shadow serves nothing */
    }
    bm_buf_t *b;
    if (usable) {
        b = bm_buf_from_str("{\"status\":\"ok\"}");
        bm_resp_send(req, 200, "application/json", b, NULL);
        bm_buf_unref(b);
    } else {
        bm_resp_error(req, 503, "no usable upstream");
    }
}

/* ---- the cluster's node endpoints ------------------------------------------------------ */

static bool any_in(const bm_admin_t *a, bm_node_state_t st)
{
    return bm_pool_count_state(a->pool, st) > 0;
}

int bm_admin_health_code(const bm_admin_t *a)
{
    /* Without a cluster head while the chain runs, no answer can be checked for freshness:
     * a ready node still answers, but the cluster is not healthy in the sense a validator
     * client relies on, so never 200. */
    bool missing = a->monitor && bm_monitor_head_missing(a->monitor, bm_clock_now_ms(), NULL);
    if (any_in(a, BM_NODE_READY))
        return missing ? 206 : 200;
    /* the best node still answers and is catching up (its own sync, its EL, or the head),
     * or answers while its head is unknown */
    if (any_in(a, BM_NODE_LAGGING) || any_in(a, BM_NODE_SYNCING) || any_in(a, BM_NODE_OPTIMISTIC) ||
        any_in(a, BM_NODE_NO_HEAD))
        return 206;
    return 503;
}

static void route_node_health(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    int code = bm_admin_health_code(ud);
    char v[16];
    int n = bm_req_query_param(req, "syncing_status", v, sizeof v);
    if (n == BM_ETOOBIG) {
        bm_resp_error(req, 400, "Invalid syncing_status: too long (200..599)");
        return;
    }
    if (n >= 0) {
        uint64_t s;
        /* the spec allows 100..599, but an informational status cannot end an exchange */
        if (bm_json_parse_u64(v, strlen(v), &s) != 0 || s < 200 || s > 599) {
            bm_resp_error(req, 400, "Invalid syncing_status: %s (200..599)", v);
            return;
        }
        if (code == 206)
            code = (int)s;
    }
    bm_resp_start(req, code, NULL, 0); /* no body, as the spec says */
    bm_resp_end(req);
}

static void route_node_syncing(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    bm_admin_t *a = ud;
    (void)params;
    const bm_chain_info_t *c = bm_discovery_chain(a->disc);
    if (!c->known) {
        bm_resp_error(req, 503, "no upstream discovered yet");
        return;
    }
    uint64_t now = bm_clock_now_ms();
    uint64_t current = bm_slot_at(&c->clock, now);
    bool ready = any_in(a, BM_NODE_READY);
    bm_head_t *t = a->monitor ? bm_monitor_head(a->monitor) : NULL;
    bm_head_info_t h;
    uint64_t head_slot = 0;
    bool have = false;
    if (t && bm_head_cluster(t, &h)) {
        head_slot = h.slot;
        have = true;
    }
    bool optimistic = false, el_offline = false;
    for (size_t i = 0; i < bm_pool_count(a->pool); i++) {
        const bm_node_t *n = bm_pool_node(a->pool, i);
        if (!bm_node_usable(n) || n->state == BM_NODE_UNREACHABLE || n->state == BM_NODE_UNKNOWN)
            continue;
        /* without a cluster head: the best node's own word, ready nodes first */
        if (!have && n->syncing.known && (n->state == BM_NODE_READY || !ready) &&
            n->syncing.head_slot > head_slot)
            head_slot = n->syncing.head_slot;
        if (!ready) {
            optimistic |= n->state == BM_NODE_OPTIMISTIC;
            el_offline |= n->syncing.known && n->syncing.el_offline;
        }
    }
    if (head_slot > current)
        head_slot = current; /* the cluster head is capped by the clock; the nodes' word too */
    bm_str_t o = BM_STR_INIT;
    bm_str_printf(&o,
                  "{\"data\":{\"head_slot\":\"%llu\",\"sync_distance\":\"%llu\","
                  "\"is_syncing\":%s,\"is_optimistic\":%s,\"el_offline\":%s}}",
                  (unsigned long long)head_slot, (unsigned long long)(current - head_slot),
                  ready ? "false" : "true", optimistic ? "true" : "false",
                  el_offline ? "true" : "false");
    bm_resp_send_str(req, "application/json", &o);
}

static void route_peer_count(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    bm_admin_t *a = ud;
    (void)params;
    if (!a->readpath) {
        bm_resp_error(req, 503, "no ready upstream");
        return;
    }
    bm_readpath_handle_ready(a->readpath, req);
}

/* A path under /beaconmux/ that is none of its routes: beaconmux's, never a node's. */
static void route_not_ours(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    (void)ud;
    size_t n;
    const char *path = bm_req_path(req, &n);
    bm_resp_error(req, 404, "no such beaconmux route: %.*s", (int)(n > 128 ? 128 : n), path);
}

int bm_admin_register(bm_admin_t *a, bm_router_t *r)
{
    /* beaconmux's own routes and those it answers itself take GET only: another method gets
     * 405 and never reaches a node, nor does any path under /beaconmux/ */
    int rc = bm_router_add_only(r, "GET", "/healthz", route_healthz, a);
    if (!rc)
        rc = bm_router_add_only(r, "GET", "/beaconmux/v1/status", route_status, a);
    if (!rc)
        rc = bm_router_add(r, NULL, "/beaconmux/*", route_not_ours, a);
    if (!rc)
        rc = bm_router_add_only(r, "GET", "/eth/v1/node/health", route_node_health, a);
    if (!rc)
        rc = bm_router_add_only(r, "GET", "/eth/v1/node/syncing", route_node_syncing, a);
    if (!rc)
        rc = bm_router_add_only(r, "GET", "/eth/v1/node/peer_count", route_peer_count, a);
    return rc;
}
