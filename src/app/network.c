/* SPDX-License-Identifier: MIT */
/*
 * network: the modules of one network, wired in the direction data flows (network.h):
 *
 *   router -> policies (discovery's static endpoints, admin, duties, broadcast, events)
 *          -> fallback: the response cache -> the read path -> pool -> upstream
 *   discovery -> pool (network verdicts) -> health (states)
 *   monitor (per-node event streams) -> head tracker -> health, cluster event stream, cache
 *   duty policies (attest, produce, aggregate, duties) -> race engine -> upstream
 *   observe <- every module's counters, records of served duty reads, the tracker's moves
 *              and ticks, finalized checkpoints (/metrics, the journal, the dashboard)
 *
 * docs/architecture.md draws the whole.
 */
#include "app/network.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/admin.h"
#include "app/options.h"
#include "app/report.h"
#include "app/sharing.h"
#include "app/statedir.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "cluster/discovery.h"
#include "cluster/events.h"
#include "cluster/head.h"
#include "cluster/health.h"
#include "cluster/monitor.h"
#include "cluster/pool.h"
#include "duties/aggregate.h"
#include "duties/attest.h"
#include "duties/broadcast.h"
#include "duties/duties.h"
#include "duties/hint.h"
#include "duties/produce.h"
#include "duties/race.h"
#include "duties/replay.h"
#include "duties/shadow.h"
#include "edge/cache.h"
#include "http/upstream.h"
#include "observe/observe.h"
#include "read/readpath.h"

struct bm_network {
    uv_loop_t *loop;
    bm_config_t cfg;   /* its effective configuration (borrowed from the file's) */
    bm_options_t opts; /* every module's options, from cfg */
    bm_clock_t *clock; /* every module's clock: the real one */
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_health_t *health;
    bm_head_t *head;       /* the cluster head tracker */
    bm_monitor_t *monitor; /* per-node event streams feeding it */
    bm_events_t *events;   /* the cluster event stream for subscribers */
    bm_discovery_t *disc;
    bm_readpath_t *readpath;
    bm_cache_t *cache; /* in front of the read path */
    bm_aggregate_t *aggregate;
    bm_duties_t *duties;
    bm_admin_t *admin;
    bm_race_engine_t *race; /* the shared race engine (duty policies, broadcast) */
    bm_hint_t *hint;        /* the expected head and hold of duty reads */
    bm_attest_t *attest;
    bm_produce_t *produce;
    bm_shadow_t *shadow; /* every duty read mirrored to the shadow nodes, and their score */
    bm_replay_t *replay; /* replay of node-local state */
    bm_broadcast_t *bcast;
    bm_sharing_t *sharing; /* state.driver redis: replay and producer memories shared */
    bm_statedir_t *state;  /* stateDir's file of this network, or NULL */
    bm_observe_t *observe; /* metrics, journal, dashboard; the access log of its requests */
    bm_router_t *router;
    void (*drained)(void *ud);
    void *drained_ud;
    uint64_t drain_until;   /* mono ms: the end of the shutdown bound (bm_network_drain) */
    uv_idle_t release_idle; /* bm_network_release's steps; the network is freed in its close */
    int release_step;
    void (*released)(void *ud);
    void *released_ud;
};

const char *bm_network_id(const bm_network_t *n)
{
    return n->cfg.network_id;
}

bm_router_t *bm_network_router(bm_network_t *n)
{
    return n->router;
}

bm_observe_t *bm_network_observe(bm_network_t *n)
{
    return n->observe;
}

int bm_network_health(void *ud)
{
    bm_network_t *n = ud;
    return bm_admin_health_code(n->admin);
}

void bm_network_status(bm_str_t *out, void *ud)
{
    bm_network_t *n = ud;
    bm_admin_status_json(n->admin, out);
}

int bm_network_on_node_state(bm_network_t *n, bm_pool_state_fn fn, void *ud)
{
    return bm_pool_on_state(n->pool, fn, ud);
}

int bm_network_add_status(bm_network_t *n, const char *name, void (*fn)(bm_str_t *out, void *ud),
                          void *ud)
{
    return bm_admin_add_section(n->admin, name, fn, ud);
}

static int build_pool(bm_network_t *a)
{
    a->pool = bm_pool_new();
    if (!a->pool)
        return BM_ENOMEM;
    for (size_t i = 0; i < a->cfg.n_upstreams; i++) {
        const bm_config_upstream_t *u = &a->cfg.upstreams[i];
        bm_hdrs_t extra;
        bm_hdrs_init(&extra);
        for (size_t h = 0; h < u->n_headers; h++)
            bm_hdrs_add_z(&extra, u->headers[h].name, u->headers[h].value);
        bm_node_t *n = bm_pool_add(a->pool, u->id, u->url, &extra);
        bm_hdrs_dispose(&extra);
        if (!n) {
            bm_log(BM_LOG_ERROR, "upstream %s: cannot be added", u->id);
            return BM_EINVAL;
        }
        n->forwarded_for = u->forwarded_for;
        /* the node's pool (http://; https:// nodes share libcurl's connections) */
        if (bm_upstream_set_node_limit(a->up, u->url, u->max_connections) != 0) {
            bm_log(BM_LOG_ERROR, "upstream %s: cannot set its connection limit", u->id);
            return BM_ENOMEM;
        }
        bm_pool_set_shadow(n, u->shadow);
        bm_log(BM_LOG_INFO, "%s%supstream %s: %s%s", a->cfg.network_id ? a->cfg.network_id : "",
               a->cfg.network_id ? ": " : "", n->id, n->url_masked,
               u->shadow ? " (shadow: mirrored and scored, never served)" : "");
    }
    return 0;
}

static int build_routes(bm_network_t *a)
{
    static const char *const statics[] = {"/eth/v1/beacon/genesis", "/eth/v1/config/spec",
                                          "/eth/v1/config/fork_schedule",
                                          "/eth/v1/config/deposit_contract"};
    bm_router_t *r = a->router = bm_router_new();
    if (!r)
        return BM_ENOMEM;
    int rc = 0;
    /* each group names its route class (the metrics and the access log count by class) */
    bm_router_set_class(r, "static");
    for (size_t i = 0; i < sizeof statics / sizeof statics[0] && !rc; i++)
        rc = bm_router_add_only(r, "GET", statics[i], bm_discovery_route, a->disc);
    bm_router_set_class(r, "admin");
    if (!rc)
        rc = bm_admin_register(a->admin, r);
    /* aggregation reads, duties and liveness */
    bm_router_set_class(r, "duty");
    if (!rc)
        rc = bm_aggregate_register(a->aggregate, r);
    if (!rc)
        rc = bm_duties_register(a->duties, r);
    /* attestation data, head root, payload attestation data, block production */
    if (!rc)
        rc = bm_attest_register(a->attest, r);
    if (!rc)
        rc = bm_produce_register(a->produce, r);
    bm_router_set_class(r, "events");
    if (!rc)
        rc = bm_events_register(a->events, r); /* the cluster event stream */
    /* broadcast: pool and publish POSTs, subscriptions, preparations,
     * registrations, preferences, DVT selections, the stateful envelope read */
    bm_router_set_class(r, "write");
    if (!rc)
        rc = bm_broadcast_register(a->bcast, r);
    /* metrics (unless on a listener of their own), the journal, the dashboard */
    bm_router_set_class(r, "observe");
    const char *ml = a->cfg.metrics.listen;
    if (!rc)
        rc = bm_observe_register(a->observe, r, !ml || !*ml);
    /* everything else: the response cache, in front of the read path (client routes
     * included); no duty route reaches it */
    bm_router_set_class(r, "read");
    bm_router_set_fallback(r, bm_cache_route, a->cache);
    return rc;
}

/* broadcast: the producing node of a slot, for blinded blocks and the
 * stateful envelope read, from block production's memory. */
static int producer_of_slot(void *ud, uint64_t slot, uint8_t state_root[32], bool *has_state_root)
{
    return bm_produce_node_for_slot(ud, slot, state_root, has_state_root);
}

/* broadcast: replay state fed by broadcast's successful writes, replayed to a node that
 * comes back, is first discovered or becomes ready after syncing (pool states) and to a
 * node whose event stream reconnects (the monitor's connection listener); blinded blocks
 * and the stateful envelope read first to the producing node. */
static int build_broadcast(bm_network_t *a)
{
    a->replay =
        bm_replay_new(a->clock, a->up, a->pool, bm_discovery_chain(a->disc), &a->opts.replay);
    a->bcast = bm_broadcast_new(a->clock, a->race, a->pool, a->replay, &a->opts.broadcast);
    if (!a->replay || !a->bcast)
        return BM_ENOMEM;
    bm_broadcast_set_producer(a->bcast, producer_of_slot, a->produce);
    int rc = bm_pool_on_state(a->pool, bm_replay_node_state, a->replay);
    if (!rc)
        rc = bm_pool_on_state(a->pool, bm_broadcast_node_state, a->bcast);
    if (!rc)
        rc = bm_monitor_on_connection(a->monitor, bm_replay_node_connection, a->replay);
    return rc;
}

static void local_state_json(bm_str_t *out, void *ud)
{
    (void)ud;
    bm_str_puts(out, "{\"driver\":\"local\"}");
}

/* state.driver redis: the replay and producer memories shared with the other instances
 * (app/sharing.h); the status page's "state" section either way. */
static int build_sharing(bm_network_t *a)
{
    if (a->cfg.state.driver != BM_STATE_REDIS)
        return bm_admin_add_section(a->admin, "state", local_state_json, NULL);
    a->sharing = bm_sharing_new(a->loop, a->clock, &a->cfg, a->cfg.network_id, a->pool, a->replay,
                                a->produce, a->bcast, a->readpath);
    if (!a->sharing)
        return BM_ENOMEM;
    bm_cache_tier_t tier = {bm_sharing_cache_get, bm_sharing_cache_put, a->sharing};
    bm_cache_set_tier(a->cache, &tier);
    return bm_admin_add_section(a->admin, "state", bm_sharing_status_json, a->sharing);
}

/* The hint (expected head from the monitor's tracker, due times from discovery's
 * chain, per-duty holds), attestation data / head root / payload attestation data, and
 * block production, all racing on the shared engine. */
static int build_fresh(bm_network_t *a)
{
    a->hint = bm_hint_new(&a->opts.hint);
    if (!a->hint)
        return BM_ENOMEM;
    bm_hint_set_chain(a->hint, bm_discovery_chain(a->disc));
    bm_hint_set_head(a->hint, bm_monitor_head(a->monitor));
    a->attest = bm_attest_new(a->clock, a->race, a->pool, a->hint, &a->opts.attest);
    a->produce = bm_produce_new(a->clock, a->race, a->pool, a->hint, &a->opts.produce);
    return a->attest && a->produce ? 0 : BM_ENOMEM;
}

/* shadow: every duty policy's races mirrored to the shadow nodes, scored against what was
 * served (the status page's "shadow" section); nothing else of a shadow node is used. */
static int build_shadow(bm_network_t *a)
{
    a->shadow = bm_shadow_new(a->race, a->pool, a->head);
    if (!a->shadow)
        return BM_ENOMEM;
    bm_attest_set_shadow(a->attest, a->shadow);
    bm_produce_set_shadow(a->produce, a->shadow);
    bm_aggregate_set_shadow(a->aggregate, a->shadow);
    bm_duties_set_shadow(a->duties, a->shadow);
    return bm_admin_add_section(a->admin, "shadow", bm_shadow_status_json, a->shadow);
}

/* readpath: ordinary reads, with each upstream's tier, weight, archive flag and bucket, and
 * the rules (blocked paths, route rules, client routes) compiled from the configuration. */
static int build_readpath(bm_network_t *a)
{
    a->readpath = bm_readpath_new(a->loop, a->up, a->pool, a->disc, &a->opts.readpath);
    bm_rules_t *rules = bm_options_rules(&a->cfg);
    if (!a->readpath || !rules) {
        bm_rules_free(rules);
        return BM_ENOMEM;
    }
    bm_readpath_set_rules(a->readpath, rules);
    for (size_t i = 0; i < a->cfg.n_upstreams; i++) {
        bm_readpath_node_opts_t no;
        bm_options_readpath_node(&a->cfg, i, &no);
        bm_readpath_set_node(a->readpath, i, &no);
    }
    return bm_admin_add_section(a->admin, "read_path", bm_readpath_status_json, a->readpath);
}

/* The head tracker, health judged against it, the per-node streams; the race engine and
 * the duty policies; the cluster event stream; the cache in front of the read path. */
static int build_chain(bm_network_t *a)
{
    bm_options_t *o = &a->opts;
    int rc = 0;
    a->head = bm_head_new(bm_pool_count(a->pool), NULL);
    if (!a->head || (rc = bm_health_set_head(a->health, a->head)) != 0)
        return a->head ? rc : BM_ENOMEM;
    a->monitor = bm_monitor_new(a->clock, a->up, a->pool, a->disc, a->head, a->health, &o->monitor);
    if (!a->monitor)
        return BM_ENOMEM;
    bm_admin_set_monitor(a->admin, a->monitor);
    bm_admin_set_readpath(a->admin, a->readpath);
    a->race = bm_race_engine_new(a->clock, a->up, a->pool);
    if (!a->race)
        return BM_ENOMEM;
    if ((rc = build_fresh(a)) != 0)
        return rc;
    /* aggregation reads (most bits), duties (dependent root) and liveness (OR) */
    a->aggregate =
        bm_aggregate_new(a->clock, a->race, a->pool, bm_discovery_chain(a->disc), &o->aggregate);
    a->duties = bm_duties_new(a->clock, a->race, a->pool, bm_discovery_chain(a->disc), &o->duties);
    if (!a->aggregate || !a->duties)
        return BM_ENOMEM;
    bm_duties_set_head(a->duties, bm_monitor_head(a->monitor));
    if ((rc = build_shadow(a)) != 0)
        return rc;
    /* the cluster event stream, fed by the tracker and every node's streams */
    a->events = bm_events_new(a->clock, &o->events);
    if (!a->events || bm_events_attach_head(a->events, a->head) != 0 ||
        bm_monitor_on_event(a->monitor, bm_events_node_event, a->events) != 0 ||
        bm_monitor_on_connection(a->monitor, bm_events_node_conn, a->events) != 0)
        return BM_ENOMEM;
    bm_events_attach_nodes(a->events, a->up, a->pool);
    bm_events_attach_discovery(a->events, a->disc);
    /* the response cache: keys from the tracker, finality from the cluster stream */
    a->cache = bm_cache_new(a->loop, a->readpath, a->head, a->disc, &o->cache);
    if (!a->cache)
        return BM_ENOMEM;
    bm_cache_attach_events(a->cache, a->events);
    return bm_admin_add_section(a->admin, "cache", bm_cache_status_json, a->cache);
}

/* statedir sections: the replay memory and the SSZ refusals (the journal's are observe's) */
static int export_replay(void *ud, uint64_t now_ms, bm_str_t *out)
{
    return bm_replay_export(ud, now_ms, out);
}

static int import_replay(void *ud, const char *json, size_t len, uint64_t now_ms)
{
    return bm_replay_import(ud, json, len, now_ms);
}

static int export_ssz(void *ud, uint64_t now_ms, bm_str_t *out)
{
    return bm_broadcast_export_ssz(ud, now_ms, out);
}

static int import_ssz(void *ud, const char *json, size_t len, uint64_t now_ms)
{
    return bm_broadcast_import_ssz(ud, json, len, now_ms);
}

/* stateDir: restores what the last run saved while the network is built, before anything
 * listens or discovers, so that the first discovery of each node replays it (a node that
 * restarted while beaconmux was down gets its validators' state again); bm_network_start
 * starts the periodic saves. */
static int build_state(bm_network_t *a)
{
    const char *dir = a->cfg.state_dir;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
        bm_log(BM_LOG_ERROR, "stateDir %s: not a writable directory", dir);
        return BM_EINVAL;
    }
    char file[160];
    if (a->cfg.network_id)
        snprintf(file, sizeof file, "state-%s.json", a->cfg.network_id);
    else
        snprintf(file, sizeof file, "state.json");
    bm_statedir_opts_t o = {dir, file, a->cfg.network_id ? a->cfg.network_id : "default",
                            a->cfg.genesis_validators_root, 0};
    a->state = bm_statedir_new(a->clock, &o);
    if (!a->state ||
        bm_statedir_add(a->state, "replay", export_replay, import_replay, a->replay) != 0 ||
        bm_statedir_add(a->state, "sszRefusals", export_ssz, import_ssz, a->bcast) != 0)
        return BM_ENOMEM;
    /* the duty journal and the dashboard it feeds (journal.slots 0: none to keep) */
    if (a->opts.observe.journal_slots &&
        bm_statedir_add(a->state, "journal", bm_observe_export_journal, bm_observe_import_journal,
                        a->observe) != 0)
        return BM_ENOMEM;
    bm_statedir_load(a->state);
    return 0;
}

/* observe: the figures only it keeps, read with every module's counters at scrape time;
 * the dashboard shows this network's status page. */
static int build_observe(bm_network_t *a)
{
    bm_observe_sources_t src = {
        .pool = a->pool,
        .head = a->head,
        .monitor = a->monitor,
        .chain = bm_discovery_chain(a->disc),
        .events = a->events,
        .attest = a->attest,
        .produce = a->produce,
        .aggregate = a->aggregate,
        .duties = a->duties,
        .broadcast = a->bcast,
        .replay = a->replay,
        .readpath = a->readpath,
        .cache = a->cache,
    };
    a->observe = bm_observe_new(&src, &a->opts.observe);
    if (!a->observe)
        return BM_ENOMEM;
    bm_observe_set_status(a->observe, bm_network_status, a);
    if (a->sharing) /* state.driver redis: the journal is the instances' together */
        bm_sharing_set_observe(a->sharing, a->observe);
    return 0;
}

static int build(bm_network_t *a)
{
    bm_options_t *o = &a->opts;
    int rc = bm_options_from_config(o, &a->cfg);
    if (rc)
        return rc;
    a->up = bm_upstream_new(a->loop, &o->upstream);
    if (!a->up)
        return BM_EIO;
    a->clock = bm_clock_real_new(a->loop);
    if (!a->clock)
        return BM_ENOMEM;
    if ((rc = build_pool(a)) != 0)
        return rc;
    a->health = bm_health_new(a->pool, &o->health);
    a->disc = bm_discovery_new(a->clock, a->up, a->pool, &o->discovery);
    a->admin = bm_admin_new(a->pool, a->disc);
    if (!a->health || !a->disc || !a->admin || (rc = build_readpath(a)) != 0)
        return rc ? rc : BM_ENOMEM;
    if ((rc = build_chain(a)) != 0)
        return rc;
    if ((rc = build_broadcast(a)) != 0)
        return rc;
    if ((rc = build_sharing(a)) != 0)
        return rc;
    if ((rc = build_observe(a)) != 0)
        return rc;
    if ((rc = build_routes(a)) != 0)
        return rc;
    if (a->cfg.state_dir && *a->cfg.state_dir && (rc = build_state(a)) != 0)
        return rc;
    /* the status page's counters come from the modules the metrics read */
    return bm_report_register(a->admin, bm_observe_sources(a->observe));
}

bm_network_t *bm_network_new(uv_loop_t *loop, const bm_config_t *cfg, size_t i)
{
    bm_network_t *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->loop = loop;
    bm_config_network(cfg, i, &a->cfg);
    int rc = build(a);
    if (rc) {
        bm_log(BM_LOG_ERROR, "%s%scannot be built: %s", a->cfg.network_id ? "network " : "",
               a->cfg.network_id ? a->cfg.network_id : "", bm_strerror(rc));
        bm_network_free(a);
        return NULL;
    }
    return a;
}

int bm_network_start(bm_network_t *a)
{
    bm_statedir_start(a->state);
    int rc = bm_discovery_start(a->disc);
    return rc ? rc : bm_monitor_start(a->monitor);
}

void bm_network_hand_over_state(bm_network_t *a)
{
    bm_statedir_disown(a->state);
}

void bm_network_stop_streams(bm_network_t *a)
{
    bm_events_shutdown(a->events); /* streams end now, not after the grace period */
    bm_cache_stop(a->cache);
}

/* The last records are in Redis (or there is none): close the rest of the loop's handles. */
static void on_records_flushed(void *ud)
{
    bm_network_t *a = ud;
    bm_sharing_free(a->sharing); /* its connections and timers close: the loop can end */
    a->sharing = NULL;
    bm_race_engine_free(a->race); /* before curl: it cancels what still runs */
    a->race = NULL;
    /* nothing runs any more: close curl's sockets and timers so that the loop ends */
    bm_upstream_free(a->up);
    a->up = NULL;
    if (a->drained)
        a->drained(a->drained_ud);
}

/* Everything after the writes drained: stop background work, then let the records made
 * by the last answers reach Redis within what is left of the shutdown bound (at least
 * FLUSH_MIN_MS: a local Redis answers in well under a millisecond). */
#define FLUSH_MIN_MS 200u
static void on_writes_drained(bm_race_engine_t *e, void *ud)
{
    bm_network_t *a = ud;
    (void)e;
    bm_monitor_stop(a->monitor); /* monitor: streams and polls end before curl goes */
    bm_discovery_stop(a->disc);
    bm_statedir_stop(a->state); /* the last save: every write has been fed by now */
    bm_replay_stop(a->replay);
    bm_cache_set_tier(a->cache, NULL); /* stopped already (bm_network_stop_streams) */
    uint64_t now = bm_clock_mono_now(a->clock);
    uint64_t left = a->drain_until > now ? a->drain_until - now : 0;
    bm_sharing_flush(a->sharing, left > FLUSH_MIN_MS ? (uint32_t)left : FLUSH_MIN_MS,
                     on_records_flushed, a);
}

void bm_network_drain(bm_network_t *a, uint32_t grace_ms, void (*done)(void *ud), void *ud)
{
    a->drained = done;
    a->drained_ud = ud;
    a->drain_until = bm_clock_mono_now(a->clock) + grace_ms;
    bm_broadcast_stop(a->bcast);
    if (bm_race_engine_active(a->race))
        bm_log(BM_LOG_INFO, "shutdown: %zu write(s) still reaching nodes (up to %u ms)",
               bm_race_engine_active(a->race), grace_ms);
    bm_race_engine_drain(a->race, grace_ms, on_writes_drained, a);
}

bool bm_network_settled(const bm_network_t *a)
{
    bool any_ready = false;
    for (size_t i = 0; i < bm_pool_count(a->pool); i++) {
        const bm_node_t *n = bm_pool_node(a->pool, i);
        if (n->state == BM_NODE_UNKNOWN)
            return false;
        any_ready |= n->state == BM_NODE_READY;
    }
    bm_head_info_t h;
    return !any_ready || bm_head_cluster(a->head, &h);
}

typedef struct adopting {
    bm_network_t *to;
    const bm_network_t *from;
} adopting_t;

/* The node of `to` with the id of `from`'s node at pool index `node`, or NULL: the pools of
 * the two networks may differ (a node added, removed or moved in the list). */
static const bm_node_t *same_node(const adopting_t *x, int node)
{
    const bm_node_t *was = node >= 0 ? bm_pool_node(x->from->pool, (size_t)node) : NULL;
    return was ? bm_pool_find(x->to->pool, was->id) : NULL;
}

/* One slot of the old producer memory, by node id (same_node): a node `to` lacks is left
 * out. */
static void adopt_producer(void *ud, uint64_t slot, int node, const uint8_t *state_root,
                           uint64_t time_ms)
{
    const adopting_t *x = ud;
    const bm_node_t *now = same_node(x, node);
    if (now)
        bm_produce_learn(x->to->produce, slot, (int)now->index, state_root, time_ms);
}

/* One sticky client of the old read path, by node id, as old as it was. */
static void adopt_sticky(void *ud, uint64_t key, int node, uint64_t age_ms)
{
    const adopting_t *x = ud;
    const bm_node_t *now = same_node(x, node);
    if (now)
        bm_readpath_sticky_adopt(x->to->readpath, key, (int)now->index, age_ms);
}

int bm_network_adopt_memory(bm_network_t *to, const bm_network_t *from)
{
    adopting_t x = {to, from};
    bm_produce_each(from->produce, adopt_producer, &x);
    if (from->readpath && to->readpath)
        bm_readpath_sticky_each(from->readpath, adopt_sticky, &x);
    /* the nodes' SSZ refusals, by node id, through the state file's form: kept as a restart
     * keeps them (the first sight of each node keeps them; a node since upgraded is asked
     * again) */
    bm_str_t ssz = BM_STR_INIT;
    uint64_t wall = bm_clock_wall_now(from->clock);
    int rc = from->bcast && to->bcast ? bm_broadcast_export_ssz(from->bcast, wall, &ssz) : 0;
    if (rc == 0 && bm_str_len(&ssz))
        rc = bm_broadcast_import_ssz(to->bcast, bm_str_data(&ssz), bm_str_len(&ssz), wall) < 0
                 ? BM_EINVAL
                 : 0;
    bm_str_dispose(&ssz);
    if (rc)
        return rc;
    return bm_replay_adopt(to->replay, from->replay);
}

void bm_network_share_again(bm_network_t *n)
{
    if (n->sharing)
        bm_sharing_write_back(n->sharing);
}

void bm_network_end_subscribers(bm_network_t *a)
{
    bm_events_shutdown(a->events);
}

/* Stops what still runs (idempotent after bm_network_drain): no callback reaches the
 * network afterwards, only close callbacks of its handles. */
static void stop_all(bm_network_t *a)
{
    if (a->monitor)
        bm_monitor_stop(a->monitor);
    bm_cache_stop(a->cache); /* before the read path: it cancels its detached reads */
    if (a->cache)
        bm_cache_set_tier(a->cache, NULL);
    bm_sharing_free(a->sharing); /* after the cache's lookups were dropped */
    a->sharing = NULL;
    bm_events_free(a->events); /* after the monitor, before curl and the tracker */
    a->events = NULL;
    if (a->disc)
        bm_discovery_stop(a->disc);
    bm_statedir_stop(a->state);
    bm_replay_stop(a->replay);
    bm_broadcast_stop(a->bcast);
    if (a->race)
        bm_race_engine_free(a->race);
    a->race = NULL;
    if (a->up)
        bm_upstream_free(a->up);
    a->up = NULL;
}

/* Frees the modules whose handles were closed (one loop run after stop_all, observe's and
 * discovery's own after they were freed), in the order bm_network_free keeps. */
static void free_modules(bm_network_t *a)
{
    bm_admin_free(a->admin);
    bm_attest_free(a->attest); /* after the engine, whose races they judge */
    bm_produce_free(a->produce);
    bm_shadow_free(a->shadow); /* after the engine, whose mirrors report to it */
    bm_hint_free(a->hint);
    bm_statedir_free(a->state);
    bm_broadcast_free(a->bcast);
    bm_replay_free(a->replay);
    bm_cache_free(a->cache); /* before the tracker it listens to */
    bm_readpath_free(a->readpath);
    bm_router_free(a->router);
    bm_monitor_free(a->monitor); /* its handles closed in the runs before */
    bm_health_free(a->health);
    if (a->head)
        bm_head_free(a->head); /* after health, which listens to it */
    /* aggregation reads and duties: after the engine (its races judged with their rules),
     * right before the pool (whose state listener they hold) */
    bm_aggregate_free(a->aggregate);
    bm_duties_free(a->duties);
    bm_pool_free(a->pool);
    bm_clock_free(a->clock); /* after every module that made timers on it */
}

static void on_release_closed(uv_handle_t *h)
{
    bm_network_t *a = h->data;
    void (*done)(void *) = a->released;
    void *ud = a->released_ud;
    free(a);
    if (done)
        done(ud);
}

/* One step per loop iteration (an idle handle runs once per iteration, and the close
 * callbacks of an iteration run between two of its calls): each step comes after the close
 * callbacks the previous one caused, which is the "one loop run" the modules ask for. */
static void on_release_step(uv_idle_t *h)
{
    bm_network_t *a = h->data;
    switch (a->release_step++) {
    case 0: /* stop_all's close callbacks have not run yet */
        break;
    case 1:
        bm_observe_free(a->observe); /* before what it listens to: policies, monitor, tracker */
        a->observe = NULL;
        bm_discovery_free(a->disc);
        a->disc = NULL;
        break;
    case 2:
        free_modules(a);
        break;
    default:
        uv_idle_stop(h);
        uv_close((uv_handle_t *)h, on_release_closed);
        break;
    }
}

void bm_network_release(bm_network_t *a, void (*done)(void *ud), void *ud)
{
    a->released = done;
    a->released_ud = ud;
    stop_all(a);
    uv_idle_init(a->loop, &a->release_idle);
    a->release_idle.data = a;
    a->release_step = 0;
    uv_idle_start(&a->release_idle, on_release_step);
}

void bm_network_free(bm_network_t *a)
{
    if (!a)
        return;
    stop_all(a);
    /* let close callbacks of timers, polls and sockets run */
    uv_run(a->loop, UV_RUN_DEFAULT);
    bm_observe_free(a->observe); /* before what it listens to: policies, monitor, tracker */
    bm_discovery_free(a->disc);
    uv_run(a->loop, UV_RUN_DEFAULT);
    free_modules(a);
    uv_run(a->loop, UV_RUN_DEFAULT);
    free(a);
}
