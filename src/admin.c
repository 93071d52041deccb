/* SPDX-License-Identifier: MIT */
/*
 * admin: renders the status document with bm_str_t (no JSON library needed to write) and
 * answers the two admin routes.
 */
#include "admin.h"

#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "clock.h"
#include "err.h"

struct bm_admin {
    bm_pool_t *pool;
    bm_discovery_t *disc;
    uint64_t started_ms;
};

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

static void json_kv_str(bm_str_t *o, const char *k, const char *v, bool comma)
{
    bm_str_printf(o, "%s\"%s\":", comma ? "," : "", k);
    if (v)
        bm_str_json_string(o, v, strlen(v));
    else
        bm_str_puts(o, "null");
}

void bm_admin_status_json(bm_admin_t *a, bm_str_t *o)
{
    uint64_t now = bm_clock_now_ms();
    const bm_chain_info_t *c = bm_discovery_chain(a->disc);
    bm_str_puts(o, "{\"version\":\"" BM_VERSION "\"");
    bm_str_printf(o, ",\"uptime_s\":%llu", (unsigned long long)((now - a->started_ms) / 1000));
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
    bm_str_puts(o, ",\"upstreams\":[");
    for (size_t i = 0; i < bm_pool_count(a->pool); i++) {
        const bm_node_t *n = bm_pool_node(a->pool, i);
        const bm_node_stats_t *s = &n->stats;
        bm_str_puts(o, i ? ",{" : "{");
        json_kv_str(o, "id", n->id, false);
        json_kv_str(o, "url", n->url_masked, true);
        json_kv_str(o, "state", bm_node_state_name(n->state), true);
        json_kv_str(o, "reason", n->state_reason, true);
        bm_str_printf(o, ",\"state_since_ms\":%llu", (unsigned long long)n->state_since_ms);
        json_kv_str(o, "client", bm_client_name(n->client), true);
        json_kv_str(o, "version", n->version, true);
        bm_str_printf(o,
                      ",\"requests\":%llu,\"errors\":%llu,\"in_flight\":%llu,"
                      "\"latency_ms\":{\"ewma\":%.2f,\"p50\":%.0f,\"p99\":%.0f}}",
                      (unsigned long long)s->requests, (unsigned long long)s->errors,
                      (unsigned long long)s->in_flight, s->latency_ewma_ms,
                      bm_node_latency_pct(n, 50), bm_node_latency_pct(n, 99));
    }
    bm_str_puts(o, "]}");
}

static void route_status(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    bm_str_t o = BM_STR_INIT;
    bm_admin_status_json(ud, &o);
    bm_buf_t *b = bm_str_finish(&o);
    if (!b) {
        bm_resp_error(req, 500, "out of memory");
        return;
    }
    bm_resp_send(req, 200, "application/json", b, NULL);
    bm_buf_unref(b);
}

static void route_healthz(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    bm_admin_t *a = ud;
    (void)params;
    size_t usable = 0;
    for (size_t i = 0; i < bm_pool_count(a->pool); i++) {
        const bm_node_t *n = bm_pool_node(a->pool, i);
        usable += n->state != BM_NODE_WRONG_NETWORK && n->state != BM_NODE_UNREACHABLE &&
                  n->state != BM_NODE_UNKNOWN;
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

int bm_admin_register(bm_admin_t *a, bm_router_t *r)
{
    int rc = bm_router_add(r, "GET", "/healthz", route_healthz, a);
    if (!rc)
        rc = bm_router_add(r, "GET", "/beaconmux/v1/status", route_status, a);
    return rc;
}
