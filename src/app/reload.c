/* SPDX-License-Identifier: MIT */
/*
 * reload: generations of the running set (reload.h). The pieces:
 *   - cfg_ref: a configuration and the number of generations and networks that borrow it;
 *   - slot: one running network and the configuration it was built from, with the
 *     generations that route to it (`gens`) and the client requests dispatched to it that
 *     have not ended (`in_flight`, counted with bm_req_on_end). Both at zero, it is retired:
 *     drained, stopped and freed;
 *   - gen: a front over the slots, each behind a "lane" (a router with only a fallback that
 *     counts the request on its slot, then dispatches it to the network's router). The
 *     front holds nothing of a request once its handler returned, so a replaced generation
 *     is freed on the next turn of the loop; only slots wait for their requests;
 *   - the reload in progress: the new configuration, the diff, the networks being built,
 *     and the timer that waits for them to settle.
 */
#include "app/reload.h"

#include <stdlib.h>
#include <string.h>

#include "app/network.h"
#include "app/options.h"
#include "app/reload_diff.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/log.h"
#include "edge/front.h"
#include "http/router.h"
#include "observe/observe.h"

/* How long networks built by a reload may take to settle before they take requests anyway
 * (a node that is down stays unknown until discovery gives up on its first attempts). */
#define RELOAD_SETTLE_MAX_MS 10000
#define RELOAD_SETTLE_POLL_MS 20

typedef struct cfg_ref {
    bm_config_t *cfg;
    size_t refs;
} cfg_ref_t;

typedef struct slot {
    bm_reload_t *rl;
    struct slot *next; /* every slot alive, retiring ones included */
    bm_network_t *net;
    cfg_ref_t *cfg;
    size_t gens;      /* generations routing to it: the current one, or the one being built */
    size_t in_flight; /* client requests dispatched to it that have not ended */
    bool retiring;
} slot_t;

typedef struct gen {
    bm_reload_t *rl;
    struct gen *next; /* replaced generations waiting to be freed */
    cfg_ref_t *cfg;
    bm_edge_options_t edge; /* the front's options (borrow from cfg) */
    bm_front_t *front;
    slot_t *slot[BM_RELOAD_MAX_NETWORKS];
    bm_router_t *lane[BM_RELOAD_MAX_NETWORKS]; /* the front's router for slot i */
    size_t n;
    /* observe: the networks' expositions merged for one /metrics (several networks, on the
     * API listener: the front's process routes), and metrics.listen's routes */
    bm_observe_set_t observed;
    bm_router_t *global_router;
    bm_router_t *metrics_router;
    bool detached; /* replaced: its slots' `gens` no longer count it */
    uint64_t number;
} gen_t;

struct bm_reload {
    uv_loop_t *loop;
    const bm_cli_t *cli;
    bm_reload_server_t server;
    bm_server_t *listener;       /* the API listener whose connections the expositions show */
    bm_pool_state_fn node_state; /* bm_reload_on_node_state: on every network built */
    void *node_state_ud;
    cfg_ref_t *listen_cfg; /* the one whose listen address is bound */
    gen_t *cur;
    gen_t *replaced; /* generations replaced, freed from the retire timer */
    slot_t *slots;
    uint64_t next_number;
    uv_timer_t retire_timer; /* frees and retires outside the stack of whoever ended a request */
    bool stopping;
    /* the reload in progress */
    bool busy, again;
    cfg_ref_t *next_cfg;
    bm_reload_diff_t diff;
    slot_t *built[BM_RELOAD_MAX_NETWORKS]; /* new network i built anew, else NULL */
    uv_timer_t settle_timer;
    uint64_t settle_deadline;
    /* the status page's "reload" section */
    uint64_t n_applied, n_unchanged, n_refused, n_failed;
    const char *last; /* "none", "applied", "unchanged", "refused", "failed" */
    uint64_t last_at_ms;
    /* shutdown */
    size_t draining;
    void (*drained)(void *ud);
    void *drained_ud;
};

static cfg_ref_t *cfg_ref_new(bm_config_t *cfg)
{
    cfg_ref_t *r = calloc(1, sizeof *r);
    if (!r) {
        bm_config_free(cfg);
        return NULL;
    }
    r->cfg = cfg;
    r->refs = 1;
    return r;
}

static cfg_ref_t *cfg_ref(cfg_ref_t *r)
{
    r->refs++;
    return r;
}

static void cfg_unref(cfg_ref_t *r)
{
    if (r && --r->refs == 0) {
        bm_config_free(r->cfg);
        free(r);
    }
}

bm_front_t *bm_reload_front(const bm_reload_t *rl)
{
    return rl->cur->front;
}

const bm_config_t *bm_reload_config(const bm_reload_t *rl)
{
    return rl->cur->cfg->cfg;
}

static void on_retire_timer(uv_timer_t *t);

static void schedule_retire(bm_reload_t *rl)
{
    uv_timer_start(&rl->retire_timer, on_retire_timer, 0, 0);
}

/* ---- networks ---------------------------------------------------------------------- */

static slot_t *slot_new(bm_reload_t *rl, cfg_ref_t *cfg, size_t i)
{
    slot_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->rl = rl;
    s->net = bm_network_new(rl->loop, cfg->cfg, i); /* logs why it failed */
    if (!s->net) {
        free(s);
        return NULL;
    }
    s->cfg = cfg_ref(cfg);
    s->next = rl->slots;
    rl->slots = s;
    if (rl->node_state && bm_network_on_node_state(s->net, rl->node_state, rl->node_state_ud)) {
        schedule_retire(rl); /* routed to by nothing: released from the loop */
        return NULL;
    }
    return s;
}

static void slot_unlink(slot_t *s)
{
    for (slot_t **pp = &s->rl->slots; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            return;
        }
}

static void on_slot_released(void *ud)
{
    slot_t *s = ud;
    slot_unlink(s);
    cfg_unref(s->cfg);
    free(s);
}

static void on_slot_drained(void *ud)
{
    slot_t *s = ud;
    bm_network_release(s->net, on_slot_released, s);
}

/* No generation routes to the network and none of its client requests is in flight: its
 * detached writes get the grace period, then it is stopped and freed. */
static void slot_retire(slot_t *s, uint32_t grace_ms)
{
    const char *id = bm_network_id(s->net);
    bm_log(BM_LOG_INFO, "reload: %s%s retired: finishing its writes, then stopping",
           id ? "network " : "the network", id ? id : "");
    s->retiring = true;
    bm_network_stop_streams(s->net);
    bm_network_drain(s->net, grace_ms, on_slot_drained, s);
}

static void on_slot_req_end(void *ud)
{
    slot_t *s = ud;
    if (--s->in_flight == 0 && s->gens == 0)
        schedule_retire(s->rl);
}

/* A lane: the request is the slot's until it ends. */
static void lane_dispatch(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    slot_t *s = ud;
    (void)params;
    s->in_flight++;
    bm_req_on_end(req, on_slot_req_end, s);
    bm_router_dispatch(req, bm_network_router(s->net));
}

/* ---- generations ------------------------------------------------------------------- */

static gen_t *gen_new(bm_reload_t *rl, cfg_ref_t *cfg)
{
    gen_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->rl = rl;
    g->cfg = cfg_ref(cfg);
    g->number = rl->next_number++;
    return g;
}

/* Routes the generation to `s` too. 0 or BM_ENOMEM. */
static int gen_attach(gen_t *g, slot_t *s)
{
    bm_router_t *lane = bm_router_new();
    if (!lane)
        return BM_ENOMEM;
    bm_router_set_fallback(lane, lane_dispatch, s);
    s->gens++;
    g->slot[g->n] = s;
    g->lane[g->n++] = lane;
    return 0;
}

/* The generation takes no new request any more. */
static void gen_detach(gen_t *g)
{
    if (g->detached)
        return;
    g->detached = true;
    for (size_t i = 0; i < g->n; i++)
        g->slot[i]->gens--;
}

/* Frees the generation (never from inside its front's handler); slots that nothing routes
 * to and nothing is in flight on are retired by the next retire run. */
static void gen_free(gen_t *g)
{
    if (!g)
        return;
    gen_detach(g);
    for (size_t i = 0; i < g->n; i++)
        bm_router_free(g->lane[i]);
    bm_router_free(g->global_router);
    bm_router_free(g->metrics_router);
    bm_front_free(g->front);
    bm_options_edge_dispose(&g->edge);
    cfg_unref(g->cfg);
    free(g);
}

static bool metrics_on_own_listener(const bm_config_t *c)
{
    return c->metrics.enabled && c->metrics.listen && *c->metrics.listen;
}

/* The generation's observe routes: metrics and the dashboard are admin routes for API
 * keys; several networks share one /metrics (the front's process route, unless
 * metrics.listen has its own listener); metrics.listen's router serves one network's
 * routes or every network's /metrics. Built from this generation's networks, so that a
 * scrape lists exactly the networks that take requests. */
static int gen_build_observe(gen_t *g)
{
    const bm_config_t *c = g->cfg->cfg;
    for (size_t i = 0; i < g->n; i++) {
        g->observed.obs[i] = bm_network_observe(g->slot[i]->net);
        g->observed.ids[i] = bm_network_id(g->slot[i]->net);
    }
    g->observed.n = g->n;
    int rc = bm_front_add_admin_path(g->front,
                                     c->metrics.path ? c->metrics.path : BM_DEFAULT_METRICS_PATH);
    if (!rc)
        rc = bm_front_add_admin_path(g->front, "/ui");
    if (rc)
        return rc;
    if (metrics_on_own_listener(c)) {
        if (!(g->metrics_router = bm_router_new()))
            return BM_ENOMEM;
        bm_router_set_class(g->metrics_router, "metrics");
        if (g->n == 1)
            return bm_observe_register(bm_network_observe(g->slot[0]->net), g->metrics_router,
                                       true);
        return bm_observe_register_merged(&g->observed, g->metrics_router);
    }
    if (g->n < 2)
        return 0;
    if (!(g->global_router = bm_router_new()))
        return BM_ENOMEM;
    bm_router_set_class(g->global_router, "observe");
    bm_front_set_global(g->front, g->global_router);
    return bm_observe_register_merged(&g->observed, g->global_router);
}

/* The front over the generation's lanes; each network's status shows this front. */
static int gen_build_front(gen_t *g)
{
    int rc = bm_options_edge(&g->edge, g->cfg->cfg);
    if (rc)
        return rc;
    if (!(g->front = bm_front_new(g->rl->loop, &g->edge.front)))
        return BM_ENOMEM;
    if ((rc = gen_build_observe(g)) != 0)
        return rc;
    for (size_t i = 0; i < g->n; i++) {
        bm_network_t *n = g->slot[i]->net;
        bm_front_network_t fn = {bm_network_id(n), g->lane[i], bm_network_health, bm_network_status,
                                 n};
        if ((rc = bm_front_add_network(g->front, &fn)) != 0)
            return rc;
    }
    return 0;
}

/* The status page's "reload" section: what the last reloads did. */
static void status_json(bm_str_t *out, void *ud)
{
    const bm_reload_t *rl = ud;
    bm_str_printf(out,
                  "{\"generation\":%llu,\"applied\":%llu,\"unchanged\":%llu,\"refused\":%llu,"
                  "\"failed\":%llu,\"last\":\"%s\",\"last_at_ms\":%llu}",
                  (unsigned long long)rl->cur->number, (unsigned long long)rl->n_applied,
                  (unsigned long long)rl->n_unchanged, (unsigned long long)rl->n_refused,
                  (unsigned long long)rl->n_failed, rl->last, (unsigned long long)rl->last_at_ms);
}

/* `what` happened to the reload (a static string), for the status page. */
static void outcome(bm_reload_t *rl, uint64_t *counter, const char *what)
{
    (*counter)++;
    rl->last = what;
    rl->last_at_ms = bm_clock_now_ms();
}

/* The status pages show the current front's counters and the reloads. */
static int gen_show_front(gen_t *g)
{
    for (size_t i = 0; i < g->n; i++) {
        bm_network_t *n = g->slot[i]->net;
        int rc = bm_network_add_status(n, "edge", bm_front_status_json, g->front);
        if (!rc)
            rc = bm_network_add_status(n, "reload", status_json, g->rl);
        if (rc)
            return rc;
    }
    return 0;
}

/* Frees the replaced generations, and retires the networks nothing routes to and no
 * request is in flight on (from the timer: never inside the stack of a request's end). */
static void on_retire_timer(uv_timer_t *t)
{
    bm_reload_t *rl = t->data;
    while (rl->replaced) {
        gen_t *g = rl->replaced;
        rl->replaced = g->next;
        bm_log(BM_LOG_DEBUG, "reload: generation %llu freed", (unsigned long long)g->number);
        gen_free(g);
    }
    uint32_t grace = rl->cur->cfg->cfg->server.shutdown_timeout_ms;
    for (slot_t *s = rl->slots; s; s = s->next)
        if (!s->retiring && s->gens == 0 && s->in_flight == 0)
            slot_retire(s, grace);
}

void bm_reload_handle(bm_req_t *req, void *ud)
{
    bm_reload_t *rl = ud;
    bm_front_handle(req, rl->cur->front);
}

void bm_reload_handle_metrics(bm_req_t *req, void *ud)
{
    bm_reload_t *rl = ud;
    if (rl->cur->metrics_router)
        bm_router_dispatch(req, rl->cur->metrics_router);
    else /* metrics.listen removed by a reload: its listener stays until a restart */
        bm_resp_error(req, 404, "metrics are not served on this listener any more");
}

void bm_reload_request_ended(const bm_req_summary_t *s, void *ud)
{
    bm_reload_t *rl = ud;
    /* the scope is the network the front dispatched to: alive until the request's end
     * (bm_req_on_end runs after the end listener); what the front answered before choosing
     * one is counted with the current first network's */
    bm_network_t *n = s->scope ? s->scope : rl->cur->slot[0]->net;
    bm_observe_request_ended(s, bm_network_observe(n));
}

/* Every live network's observe reads the current front and listener: none keeps a pointer
 * to a front a switch freed or a listener a rebind replaced (retiring networks included:
 * their in-flight requests may still be a scrape). */
static void point_observes(bm_reload_t *rl)
{
    for (slot_t *s = rl->slots; s; s = s->next) {
        bm_observe_t *o = bm_network_observe(s->net);
        bm_observe_set_front(o, rl->cur->front);
        bm_observe_set_server(o, rl->listener);
    }
}

int bm_reload_on_node_state(bm_reload_t *rl, bm_pool_state_fn fn, void *ud)
{
    rl->node_state = fn;
    rl->node_state_ud = ud;
    for (slot_t *s = rl->slots; s; s = s->next) {
        int rc = bm_network_on_node_state(s->net, fn, ud);
        if (rc)
            return rc;
    }
    return 0;
}

void bm_reload_set_listener(bm_reload_t *rl, bm_server_t *srv)
{
    rl->listener = srv;
    point_observes(rl);
}

/* ---- the reload -------------------------------------------------------------------- */

static void begin(bm_reload_t *rl);

/* The reload ended (applied, refused or failed): the next one, if a SIGHUP came meanwhile. */
static void finish(bm_reload_t *rl)
{
    rl->busy = false;
    if (rl->again && !rl->stopping) {
        rl->again = false;
        bm_log(BM_LOG_INFO, "reload: the signal that came meanwhile reloads again");
        begin(rl);
    }
}

/* The networks this reload built never took a request: stopped and freed at once. */
static void abandon(bm_reload_t *rl)
{
    uv_timer_stop(&rl->settle_timer);
    for (size_t i = 0; i < BM_RELOAD_MAX_NETWORKS; i++)
        if (rl->built[i]) {
            slot_retire(rl->built[i], 0);
            rl->built[i] = NULL;
        }
    cfg_unref(rl->next_cfg);
    rl->next_cfg = NULL;
}

/* The new file, read and validated as at the start and by --check, and the checks main
 * makes before it listens. NULL (logged) when it cannot run. */
static bm_config_t *load(bm_reload_t *rl)
{
    bm_config_err_t err;
    bm_config_t *c = bm_cli_load(rl->cli, &err);
    if (!c) {
        bm_log(BM_LOG_ERROR, "reload: %s; the running configuration stays", err.msg);
        return NULL;
    }
    /* the keys must protect the address listened on now and the one the file names (a
     * rebind that fails keeps the old one) */
    const char *hosts[] = {rl->listen_cfg->cfg->listen_host, c->listen_host};
    for (size_t i = 0; i < 2; i++) {
        const char *exposed =
            bm_front_exposure_problem(hosts[i], c->auth.n_keys, c->server.n_allowed_clients);
        if (exposed) {
            bm_log(BM_LOG_ERROR, "reload: listen %s: %s; the running configuration stays", hosts[i],
                   exposed);
            bm_config_free(c);
            return NULL;
        }
    }
    const char *deprecated = bm_config_deprecation(c);
    if (deprecated)
        bm_log(BM_LOG_WARN, "reload: %s", deprecated);
    return c;
}

/* What changes, logged; the listen address against the one bound. */
static int plan(bm_reload_t *rl, const bm_config_t *c)
{
    int rc = bm_reload_diff(rl->cur->cfg->cfg, c, &rl->diff);
    if (rc) {
        bm_log(BM_LOG_ERROR,
               "reload: cannot compare the configurations: %s; the running "
               "configuration stays",
               bm_strerror(rc));
        return rc;
    }
    const bm_config_t *bound = rl->listen_cfg->cfg;
    rl->diff.listen =
        bound->listen_port != c->listen_port || strcmp(bound->listen_host, c->listen_host) != 0;
    bm_str_t s = BM_STR_INIT;
    bm_reload_diff_describe(&rl->diff, rl->cur->cfg->cfg, c, &s);
    bm_log(BM_LOG_INFO, "reload: %s", bm_str_data(&s));
    bm_str_dispose(&s);
    return 0;
}

/* Builds and starts the networks the diff asks for, each with the replay and producer
 * memories of the network it replaces (written to Redis when it connects). 0, or a BM_E* code with
 * everything built abandoned. */
static int build_networks(bm_reload_t *rl)
{
    const bm_reload_diff_t *d = &rl->diff;
    for (size_t i = 0; i < d->n_new; i++) {
        if (d->keep[i] >= 0)
            continue;
        if (!(rl->built[i] = slot_new(rl, rl->next_cfg, i)))
            return BM_EINVAL;
        if (d->replaces[i] >= 0) {
            int rc = bm_network_adopt_memory(rl->built[i]->net, rl->cur->slot[d->replaces[i]]->net);
            if (rc)
                return rc;
        }
    }
    for (size_t i = 0; i < d->n_new; i++) {
        int rc = rl->built[i] ? bm_network_start(rl->built[i]->net) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

/* The new generation takes every new request from now on. */
static void swap(bm_reload_t *rl)
{
    const bm_reload_diff_t *d = &rl->diff;
    gen_t *old = rl->cur, *g = gen_new(rl, rl->next_cfg);
    int rc = g ? 0 : BM_ENOMEM;
    for (size_t i = 0; i < d->n_new && !rc; i++)
        rc = gen_attach(g, d->keep[i] >= 0 ? old->slot[d->keep[i]] : rl->built[i]);
    if (!rc)
        rc = gen_build_front(g);
    if (rc) {
        bm_log(BM_LOG_ERROR,
               "reload: the front cannot be built: %s; the running configuration "
               "stays",
               bm_strerror(rc));
        if (g)
            gen_free(g); /* never took a request */
        abandon(rl);     /* the networks built for it */
        outcome(rl, &rl->n_failed, "failed");
        return;
    }
    memset(rl->built, 0, sizeof rl->built);
    cfg_unref(rl->next_cfg); /* the generation holds its own reference */
    rl->next_cfg = NULL;
    if (gen_show_front(g) != 0)
        bm_log(BM_LOG_WARN, "reload: the status page cannot show the new front");
    const bm_config_t *c = g->cfg->cfg;
    if (d->log)
        bm_log_setup(c->log.level, c->log.format, NULL);
    if (d->server && rl->server.set_limits)
        rl->server.set_limits(c, rl->server.ud);
    if (rl->server.metrics_listen)
        rl->server.metrics_listen(c, rl->server.ud);
    if (d->listen && rl->server.rebind && rl->server.rebind(c, rl->server.ud) == 0) {
        cfg_unref(rl->listen_cfg);
        rl->listen_cfg = cfg_ref(g->cfg);
    }
    for (size_t j = 0; j < d->n_old; j++)
        if (d->retire[j])
            bm_network_end_subscribers(old->slot[j]->net); /* they reconnect to the new one */
    for (size_t i = 0; i < d->n_new; i++)
        if (d->keep[i] < 0 && d->replaces[i] >= 0) /* the new one saves the state file now */
            bm_network_hand_over_state(old->slot[d->replaces[i]]->net);
    for (size_t i = 0; i < d->n_new; i++) /* the built ones write theirs back as they connect */
        if (d->keep[i] >= 0)
            bm_network_share_again(old->slot[d->keep[i]]->net);
    gen_detach(old);
    old->next = rl->replaced;
    rl->replaced = old;
    rl->cur = g;
    point_observes(rl); /* before the old front is freed (the retire timer's next run) */
    if (rl->server.switched)
        rl->server.switched(c, g->front, rl->server.ud);
    size_t finishing = 0;
    for (slot_t *s = rl->slots; s; s = s->next)
        if (s->gens == 0 && !s->retiring)
            finishing += s->in_flight;
    schedule_retire(rl);
    for (size_t i = 0; i < g->n; i++)
        if (c->n_networks && d->keep[i] < 0)
            bm_log(BM_LOG_INFO, "network %s: served under /%s/", bm_network_id(g->slot[i]->net),
                   bm_network_id(g->slot[i]->net));
    outcome(rl, &rl->n_applied, "applied");
    bm_log(BM_LOG_INFO,
           "reload: applied (generation %llu); %zu request(s) finish on the networks it "
           "replaced",
           (unsigned long long)g->number, finishing);
}

static void on_settle_timer(uv_timer_t *t)
{
    bm_reload_t *rl = t->data;
    bool late = uv_now(rl->loop) >= rl->settle_deadline;
    for (size_t i = 0; i < rl->diff.n_new; i++) {
        slot_t *s = rl->built[i];
        if (!s || bm_network_settled(s->net))
            continue;
        if (!late)
            return;
        const char *id = bm_network_id(s->net);
        bm_log(BM_LOG_WARN, "reload: %s%s not settled after %u ms; it takes requests anyway",
               id ? "network " : "the network", id ? id : "", RELOAD_SETTLE_MAX_MS);
    }
    uv_timer_stop(t);
    swap(rl);
    finish(rl);
}

static void begin(bm_reload_t *rl)
{
    bm_log(BM_LOG_INFO, "reload: reading %s",
           rl->cli->config_path ? rl->cli->config_path : "the command line");
    bm_config_t *c = load(rl);
    if (!c) {
        outcome(rl, &rl->n_refused, "refused");
        return;
    }
    cfg_ref_t *r = cfg_ref_new(c);
    if (!r || plan(rl, c) != 0) {
        cfg_unref(r);
        outcome(rl, &rl->n_failed, "failed");
        return;
    }
    if (bm_reload_diff_built(&rl->diff) == 0 && bm_reload_diff_retired(&rl->diff) == 0 &&
        !rl->diff.front && !rl->diff.log && !rl->diff.server && !rl->diff.listen) {
        cfg_unref(r);                           /* nothing the running set would do differently */
        for (size_t i = 0; i < rl->cur->n; i++) /* but Redis may have been flushed */
            bm_network_share_again(rl->cur->slot[i]->net);
        outcome(rl, &rl->n_unchanged, "unchanged");
        return;
    }
    rl->busy = true;
    rl->next_cfg = r;
    int rc = build_networks(rl);
    if (rc) {
        bm_log(BM_LOG_ERROR,
               "reload: the new networks cannot be built or started: %s; the "
               "running configuration stays",
               bm_strerror(rc));
        abandon(rl);
        outcome(rl, &rl->n_failed, "failed");
        finish(rl);
        return;
    }
    rl->settle_deadline = uv_now(rl->loop) + RELOAD_SETTLE_MAX_MS;
    if (bm_reload_diff_built(&rl->diff) == 0) {
        swap(rl);
        finish(rl);
        return;
    }
    uv_timer_start(&rl->settle_timer, on_settle_timer, RELOAD_SETTLE_POLL_MS,
                   RELOAD_SETTLE_POLL_MS);
}

void bm_reload_request(bm_reload_t *rl)
{
    if (rl->stopping) {
        bm_log(BM_LOG_INFO, "reload: shutting down; SIGHUP ignored");
        return;
    }
    if (rl->busy) {
        rl->again = true;
        bm_log(BM_LOG_INFO, "reload: one is running; another follows when it ends");
        return;
    }
    begin(rl);
}

/* ---- life -------------------------------------------------------------------------- */

bm_reload_t *bm_reload_new(uv_loop_t *loop, bm_config_t *cfg, const bm_cli_t *cli,
                           const bm_reload_server_t *server)
{
    bm_reload_t *rl = calloc(1, sizeof *rl);
    cfg_ref_t *r = cfg_ref_new(cfg);
    if (!rl || !r) {
        free(rl);
        cfg_unref(r);
        return NULL;
    }
    rl->loop = loop;
    rl->cli = cli;
    rl->server = *server;
    rl->listen_cfg = r;
    rl->last = "none";
    uv_timer_init(loop, &rl->retire_timer);
    uv_timer_init(loop, &rl->settle_timer);
    rl->retire_timer.data = rl->settle_timer.data = rl;
    gen_t *g = rl->cur = gen_new(rl, r);
    int rc = g ? 0 : BM_ENOMEM;
    size_t n = bm_config_network_count(cfg);
    for (size_t i = 0; i < n && i < BM_RELOAD_MAX_NETWORKS && !rc; i++) {
        slot_t *s = slot_new(rl, r, i);
        rc = s ? gen_attach(g, s) : BM_EINVAL;
    }
    if (!rc)
        rc = gen_build_front(g);
    if (!rc)
        rc = gen_show_front(g);
    if (rc) {
        if (rc != BM_EINVAL) /* a network that cannot be built said why */
            bm_log(BM_LOG_ERROR, "the front cannot be built: %s", bm_strerror(rc));
        bm_reload_free(rl);
        return NULL;
    }
    return rl;
}

int bm_reload_start(bm_reload_t *rl)
{
    const bm_config_t *c = rl->cur->cfg->cfg;
    for (size_t i = 0; i < rl->cur->n; i++) {
        bm_network_t *n = rl->cur->slot[i]->net;
        if (c->n_networks)
            bm_log(BM_LOG_INFO, "network %s: served under /%s/", bm_network_id(n),
                   bm_network_id(n));
        int rc = bm_network_start(n);
        if (rc)
            return rc;
    }
    return 0;
}

void bm_reload_stop(bm_reload_t *rl)
{
    rl->stopping = true;
    if (rl->busy) {
        bm_log(BM_LOG_INFO, "reload: abandoned (shutting down)");
        abandon(rl);
        rl->busy = false;
    }
    for (size_t i = 0; i < rl->cur->n; i++)
        bm_network_stop_streams(rl->cur->slot[i]->net);
}

static void on_current_drained(void *ud)
{
    bm_reload_t *rl = ud;
    if (--rl->draining == 0 && rl->drained)
        rl->drained(rl->drained_ud);
}

void bm_reload_drain(bm_reload_t *rl, uint32_t grace_ms, void (*done)(void *ud), void *ud)
{
    rl->drained = done;
    rl->drained_ud = ud;
    rl->draining = rl->cur->n;
    for (size_t i = 0; i < rl->cur->n; i++)
        bm_network_drain(rl->cur->slot[i]->net, grace_ms, on_current_drained, rl);
}

void bm_reload_free(bm_reload_t *rl)
{
    if (!rl)
        return;
    uv_timer_stop(&rl->retire_timer); /* nothing is retired from here on but by this call */
    abandon(rl);
    while (rl->replaced) {
        gen_t *g = rl->replaced;
        rl->replaced = g->next;
        gen_free(g);
    }
    gen_free(rl->cur);
    rl->cur = NULL;
    /* networks not drained (the start failed) stop now too: their timers would keep the
     * loop; after a drain this only closes what is left */
    for (slot_t *s = rl->slots, *next; s; s = next) {
        next = s->next;
        if (!s->retiring) {
            s->retiring = true;
            bm_network_release(s->net, on_slot_released, s);
        }
    }
    uv_run(rl->loop, UV_RUN_DEFAULT); /* networks being retired finish their release */
    /* the rest were drained at shutdown (or never started) */
    while (rl->slots) {
        slot_t *s = rl->slots;
        rl->slots = s->next;
        bm_network_free(s->net); /* runs the loop to let its handles close */
        cfg_unref(s->cfg);
        free(s);
    }
    uv_close((uv_handle_t *)&rl->retire_timer, NULL);
    uv_close((uv_handle_t *)&rl->settle_timer, NULL);
    uv_run(rl->loop, UV_RUN_DEFAULT);
    cfg_unref(rl->listen_cfg);
    free(rl);
}
