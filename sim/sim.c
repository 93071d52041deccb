/* SPDX-License-Identifier: MIT */
/*
 * sim: the beaconsim runtime (servers, timers, behaviours that touch the network).
 * See sim.h.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"

#define KEEPALIVE_MS 15000
#define SHUTDOWN_GRACE_MS 200

/* A request held by `hang` or delayed by `slow`. */
struct bs_pending {
    bm_link_t link; /* on its node's pending */
    bs_simnode_t *sn;
    bm_req_t *req;
    int route;
    uv_timer_t timer;
    bool has_timer;
};

uint64_t bs_sim_now(void)
{
    return bm_clock_now_ms();
}

void bs_sim_cfg_default(bs_sim_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    bs_chain_cfg_default(&c->chain);
    c->nodes = 3;
    strcpy(c->host, "127.0.0.1");
    strcpy(c->control_host, "127.0.0.1");
    for (int i = 0; i < BS_MAX_NODES; i++)
        bs_behav_default(&c->behav[i]);
}

static void maybe_done(bs_sim_t *s)
{
    if (s->stopping && s->servers_open == 0 && s->handles_open == 0 && s->stop_done) {
        void (*done)(bs_sim_t *, void *) = s->stop_done;
        s->stop_done = NULL;
        done(s, s->stop_ud);
    }
}

static void handle_closed(uv_handle_t *h)
{
    bs_sim_t *s = h->data;
    s->handles_open--;
    maybe_done(s);
}

static void import_timer_cb(uv_timer_t *t)
{
    bs_simnode_t *sn = t->data;
    bs_node_advance(&sn->node, bs_sim_now());
    bs_sim_rearm(sn);
}

void bs_sim_rearm(bs_simnode_t *sn)
{
    if (sn->sim->stopping)
        return;
    uint64_t due = bs_node_next_due_ms(&sn->node);
    if (due == UINT64_MAX) {
        uv_timer_stop(&sn->timer);
        return;
    }
    uint64_t now = bs_sim_now();
    uint64_t delay = due > now ? due - now : 1;
    uv_timer_start(&sn->timer, import_timer_cb, delay, 0);
}

void bs_sim_touch_all(bs_sim_t *s)
{
    uint64_t now = bs_sim_now();
    for (uint32_t i = 0; i < s->nnodes; i++) {
        bs_node_advance(&s->nodes[i].node, now);
        bs_sim_rearm(&s->nodes[i]);
    }
}

/* ---- held and delayed requests --------------------------------------------------------- */

static void pending_unlink(bs_pending_t *p)
{
    bm_link_unlink(&p->link);
}

static void pending_timer_closed(uv_handle_t *h)
{
    bs_pending_t *p = h->data;
    free(p);
}

static void pending_free(bs_pending_t *p)
{
    if (p->has_timer) {
        uv_timer_stop(&p->timer);
        uv_close((uv_handle_t *)&p->timer, pending_timer_closed);
    } else {
        free(p);
    }
}

static void pending_abort(bm_req_t *req, void *ud)
{
    bs_pending_t *p = ud;
    pending_unlink(p);
    bm_resp_end(req);
    pending_free(p);
}

static void slow_timer_cb(uv_timer_t *t)
{
    bs_pending_t *p = t->data;
    bs_simnode_t *sn = p->sn;
    bm_req_t *req = p->req;
    int route = p->route;
    pending_unlink(p);
    bm_req_on_abort(req, NULL, NULL);
    pending_free(p);
    if (sn->node.behav.hang) {
        /* became hung while waiting: hold it */
        bs_pending_t *h = calloc(1, sizeof *h);
        if (!h) {
            bm_resp_error(req, 500, "out of memory");
            return;
        }
        h->sn = sn;
        h->req = req;
        h->route = route;
        bm_list_push_front(&sn->pending, &h->link);
        bm_req_on_abort(req, pending_abort, h);
        return;
    }
    bs_api_dispatch(sn, req, route);
}

static void node_handler(bm_req_t *req, void *ud)
{
    bs_simnode_t *sn = ud;
    bs_node_t *n = &sn->node;
    size_t plen;
    const char *path = bm_req_path(req, &plen);
    int r = bs_api_route_find(bm_req_method(req), path, plen);
    if (r >= 0 && r < BS_MAX_ROUTES)
        n->req_counts[r]++;
    else
        n->req_other++;
    if (sn->sim->stopping) {
        bm_resp_error(req, 503, "shutting down");
        return;
    }
    if (!n->behav.hang && n->behav.slow_ms == 0) {
        bs_api_dispatch(sn, req, r);
        return;
    }
    bs_pending_t *p = calloc(1, sizeof *p);
    if (!p) {
        bm_resp_error(req, 500, "out of memory");
        return;
    }
    p->sn = sn;
    p->req = req;
    p->route = r;
    bm_list_push_front(&sn->pending, &p->link);
    if (!n->behav.hang) {
        uv_timer_init(sn->sim->loop, &p->timer);
        p->timer.data = p;
        p->has_timer = true;
        /* at least slow_ms from now: libuv counts a timer in whole ms from the loop's cached
         * time, which is truncated and as old as this turn of the loop (a 300 ms delay was
         * once measured 299.9 ms by a client that started its clock before sending) */
        uv_update_time(sn->sim->loop);
        uv_timer_start(&p->timer, slow_timer_cb, n->behav.slow_ms + 1, 0);
    }
    bm_req_on_abort(req, pending_abort, p);
}

/* Dispatches the requests a hang held, once the node answers again. */
static void release_held(bs_simnode_t *sn)
{
    bm_link_t *l, *nx;
    bm_list_for_each_safe (l, nx, &sn->pending) {
        bs_pending_t *p = bm_list_entry(l, bs_pending_t, link);
        if (!p->has_timer) {
            bm_req_t *req = p->req;
            int route = p->route;
            pending_unlink(p);
            bm_req_on_abort(req, NULL, NULL);
            pending_free(p);
            bs_api_dispatch(sn, req, route);
        }
    }
}

static void end_all_pending(bs_simnode_t *sn)
{
    while (!bm_list_empty(&sn->pending)) {
        bs_pending_t *p = bm_list_first(&sn->pending, bs_pending_t, link);
        bm_req_t *req = p->req;
        pending_unlink(p);
        bm_req_on_abort(req, NULL, NULL);
        pending_free(p);
        bm_resp_error(req, 503, "node stopped");
    }
}

/* ---- servers ------------------------------------------------------------------------------ */

static void server_closed(bm_server_t *srv, void *ud)
{
    bs_sim_t *s = ud;
    bm_server_free(srv);
    s->servers_open--;
    maybe_done(s);
}

static int node_listen(bs_simnode_t *sn)
{
    bs_sim_t *s = sn->sim;
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    /* every client of a simulated node is on 127.0.0.1 (bench/events.sh opens 5,000 event
     * streams to one node as its baseline): one address may hold every connection */
    o.max_connections_per_client = o.max_connections;
    bm_server_t *srv = bm_server_new(s->loop, &o, node_handler, sn);
    if (!srv)
        return BM_ENOMEM;
    int rc = bm_server_listen(srv, s->cfg.host, sn->port);
    if (rc) {
        bm_server_free(srv);
        return rc;
    }
    sn->port = bm_server_port(srv);
    sn->srv = srv;
    s->servers_open++;
    return 0;
}

static void node_close(bs_simnode_t *sn, uint32_t grace)
{
    if (!sn->srv)
        return;
    bm_server_t *srv = sn->srv;
    sn->srv = NULL;
    bs_events_close_all(sn);
    end_all_pending(sn);
    bm_server_shutdown(srv, grace, server_closed, sn->sim);
}

bs_sim_t *bs_sim_new(uv_loop_t *loop, const bs_sim_cfg_t *cfg)
{
    if (cfg->nodes == 0 || cfg->nodes > BS_MAX_NODES)
        return NULL;
    bs_sim_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->loop = loop;
    s->cfg = *cfg;
    uint64_t now = bs_sim_now();
    if (!cfg->chain.genesis_ms)
        s->cfg.chain.genesis_ms = (now + cfg->genesis_delay_ms + 999) / 1000 * 1000;
    s->cfg.chain.nodes = cfg->nodes;
    s->chain = bs_chain_new(&s->cfg.chain);
    s->nodes = calloc(cfg->nodes, sizeof *s->nodes);
    if (!s->chain || !s->nodes) {
        bs_chain_free(s->chain);
        free(s->nodes);
        free(s);
        return NULL;
    }
    s->nnodes = cfg->nodes;
    for (uint32_t i = 0; i < s->nnodes; i++) {
        bs_simnode_t *sn = &s->nodes[i];
        sn->sim = s;
        bm_link_init(&sn->pending);
        bm_link_init(&sn->subs);
        sn->port = cfg->base_port ? cfg->base_port + (int)i : 0;
        if (bs_node_init(&sn->node, s->chain, i, &cfg->behav[i], now) != 0) {
            for (uint32_t j = 0; j <= i; j++)
                bs_node_dispose(&s->nodes[j].node);
            bs_chain_free(s->chain);
            free(s->nodes);
            free(s);
            return NULL;
        }
        sn->node.emit = bs_events_emit;
        sn->node.emit_ud = sn;
        uv_timer_init(loop, &sn->timer);
        sn->timer.data = sn;
        uv_timer_init(loop, &sn->keepalive);
        sn->keepalive.data = sn;
        s->handles_open += 2;
    }
    return s;
}

int bs_sim_start(bs_sim_t *s)
{
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    s->control = bm_server_new(s->loop, &o, bs_control_handle, s);
    if (!s->control)
        return BM_ENOMEM;
    int rc = bm_server_listen(s->control, s->cfg.control_host, s->cfg.control_port);
    if (rc) {
        bm_log(BM_LOG_ERROR, "control: cannot listen on %s:%d: %s", s->cfg.control_host,
               s->cfg.control_port, bm_strerror(rc));
        bm_server_free(s->control);
        s->control = NULL;
        return rc;
    }
    s->control_port = bm_server_port(s->control);
    s->servers_open++;
    for (uint32_t i = 0; i < s->nnodes; i++) {
        bs_simnode_t *sn = &s->nodes[i];
        if (sn->node.behav.down && sn->port != 0) {
            bs_sim_rearm(sn);
            continue;
        }
        rc = node_listen(sn);
        if (rc) {
            bm_log(BM_LOG_ERROR, "node %u: cannot listen on %s:%d: %s", i, s->cfg.host, sn->port,
                   bm_strerror(rc));
            return rc;
        }
        if (sn->node.behav.down) /* a port was picked for it; now close it */
            node_close(sn, 0);
        bs_sim_rearm(sn);
    }
    return 0;
}

static void keepalive_cb(uv_timer_t *t)
{
    bs_events_keepalive(t->data);
}

int bs_sim_set_behav(bs_sim_t *s, uint32_t i, const bs_behav_t *delta, bool reset)
{
    if (i >= s->nnodes)
        return BM_ENOTFOUND;
    bs_simnode_t *sn = &s->nodes[i];
    bs_node_t *n = &sn->node;
    bool was_down = n->behav.down, was_hang = n->behav.hang;
    bool was_lazy = n->behav.sse_head_with_event;
    uint32_t was_late = n->behav.sse_first_event_late_ms;
    uint64_t now = bs_sim_now();
    if (reset) {
        bs_behav_t full;
        bs_behav_default(&full);
        full.set = BS_B_ALL;
        bs_node_set_behav(n, &full, now);
    }
    bs_node_set_behav(n, delta, now);
    if (!s->stopping) {
        if (n->behav.down && !was_down) {
            node_close(sn, 0);
        } else if (!n->behav.down && was_down && !sn->srv) {
            int rc = node_listen(sn);
            if (rc)
                bm_log(BM_LOG_ERROR, "node %u: cannot listen again on port %d: %s", i, sn->port,
                       bm_strerror(rc));
        }
        if (was_hang && !n->behav.hang)
            release_held(sn);
        /* a slow start happens at the start of a stream: the open ones end and their
         * clients reconnect under the new behaviour (as after a restart of the node) */
        if (was_lazy != n->behav.sse_head_with_event ||
            was_late != n->behav.sse_first_event_late_ms)
            bs_events_close_all(sn);
    }
    bs_sim_rearm(sn);
    return 0;
}

/* Called by events_out when the subscriber count changes. */
void bs_sim_keepalive_update(bs_simnode_t *sn);
void bs_sim_keepalive_update(bs_simnode_t *sn)
{
    if (sn->sim->stopping)
        return;
    if (sn->nsubs > 0 && !sn->keepalive_on) {
        uv_timer_start(&sn->keepalive, keepalive_cb, KEEPALIVE_MS, KEEPALIVE_MS);
        sn->keepalive_on = true;
    } else if (sn->nsubs == 0 && sn->keepalive_on) {
        uv_timer_stop(&sn->keepalive);
        sn->keepalive_on = false;
    }
}

void bs_sim_stop(bs_sim_t *s, void (*done)(bs_sim_t *s, void *ud), void *ud)
{
    if (s->stopping)
        return;
    s->stopping = true;
    s->stop_done = done;
    s->stop_ud = ud;
    for (uint32_t i = 0; i < s->nnodes; i++) {
        bs_simnode_t *sn = &s->nodes[i];
        bs_events_close_all(sn);
        end_all_pending(sn);
        node_close(sn, SHUTDOWN_GRACE_MS);
        uv_timer_stop(&sn->timer);
        uv_timer_stop(&sn->keepalive);
        sn->keepalive_on = false;
        sn->timer.data = s;
        sn->keepalive.data = s;
        uv_close((uv_handle_t *)&sn->timer, handle_closed);
        uv_close((uv_handle_t *)&sn->keepalive, handle_closed);
    }
    if (s->control) {
        bm_server_t *c = s->control;
        s->control = NULL;
        bm_server_shutdown(c, SHUTDOWN_GRACE_MS, server_closed, s);
    }
    maybe_done(s);
}

void bs_sim_free(bs_sim_t *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->nnodes; i++)
        bs_node_dispose(&s->nodes[i].node);
    bs_api_free_cache(s);
    bs_chain_free(s->chain);
    free(s->nodes);
    free(s);
}
