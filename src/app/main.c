/* SPDX-License-Identifier: MIT */
/*
 * main: parses the command line, loads the configuration, creates the loop and wires the
 * modules together in the direction data flows:
 *
 *   server -> router -> policies (discovery's static endpoints, admin, the read path)
 *                                  -> pool -> upstream (libcurl multi on the loop)
 *   discovery -> pool (network verdicts) -> health (states)
 *   monitor (per-node event streams) -> head tracker -> health (cluster-relative states)
 *   router -> duty policies (attest, produce: fresh head) -> race engine -> upstream
 *   observe <- every module's counters, records of served duty reads, the tracker's
 *              moves and ticks, finalized checkpoints, ended requests (/metrics, the
 *              journal, the dashboard, the access log)
 *
 * docs/architecture.md draws the whole.
 *
 * It owns nothing else: no module is reached through a global. SIGTERM/SIGINT start a
 * graceful shutdown (stop accepting, finish in-flight requests within the configured
 * bound); a second signal exits at once.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "app/admin.h"
#include "app/cli.h"
#include "app/config.h"
#include "app/options.h"
#include "app/report.h"
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
#include "http/router.h"
#include "http/server.h"
#include "http/upstream.h"
#include "observe/observe.h"
#include "read/readpath.h"

typedef struct app {
    uv_loop_t loop;
    bm_clock_t *clock; /* the duty layer's clock: the real one */
    bm_config_t *cfg;
    bm_options_t opts; /* every module's options, from cfg */
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_health_t *health;
    bm_head_t *head;       /* the cluster head tracker */
    bm_monitor_t *monitor; /* per-node event streams feeding it */
    bm_events_t *events;   /* the cluster event stream for subscribers */
    bm_discovery_t *disc;
    bm_readpath_t *readpath;
    /* aggregation reads, duties and liveness */
    bm_aggregate_t *aggregate;
    bm_duties_t *duties;
    bm_admin_t *admin;
    bm_race_engine_t *race; /* the shared race engine (duty policies, broadcast) */
    /* the expected head and hold of duty reads, and the fresh-head policies */
    bm_hint_t *hint;
    bm_attest_t *attest;
    bm_produce_t *produce;
    /* every write to every node; replay of node-local state */
    bm_replay_t *replay;
    bm_broadcast_t *bcast;
    bm_observe_t *observe; /* metrics, journal, dashboard, access log */
    bm_router_t *router;
    bm_server_t *server;
    bm_router_t *metrics_router; /* metrics.listen: a listener of their own */
    bm_server_t *metrics_server;
    uv_signal_t sigterm;
    uv_signal_t sigint;
    int signals;
    int exit_code;
} app_t;

static int build_pool(app_t *a)
{
    a->pool = bm_pool_new();
    if (!a->pool)
        return BM_ENOMEM;
    for (size_t i = 0; i < a->cfg->n_upstreams; i++) {
        const bm_config_upstream_t *u = &a->cfg->upstreams[i];
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
        /* the node's pool (http://; https:// nodes share libcurl's connections) */
        if (bm_upstream_set_node_limit(a->up, u->url, u->max_connections) != 0) {
            bm_log(BM_LOG_ERROR, "upstream %s: cannot set its connection limit", u->id);
            return BM_ENOMEM;
        }
        bm_log(BM_LOG_INFO, "upstream %s: %s", n->id, n->url_masked);
    }
    return 0;
}

static int build_routes(app_t *a)
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
        rc = bm_router_add(r, "GET", statics[i], bm_discovery_route, a->disc);
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
    if (!rc)
        rc =
            bm_observe_register(a->observe, r, !a->cfg->metrics.listen || !*a->cfg->metrics.listen);
    /* the read path (owner: readpath): everything else, client routes included */
    bm_router_set_class(r, "read");
    bm_router_set_fallback(r, bm_readpath_route, a->readpath);
    return rc;
}

/* broadcast: the producing node of a slot, for blinded blocks and the
 * stateful envelope read, from block production's memory. */
static int producer_of_slot(void *ud, uint64_t slot, uint8_t state_root[32], bool *has_state_root)
{
    return bm_produce_node_for_slot(ud, slot, state_root, has_state_root);
}

/* broadcast: replay state fed by broadcast's successful writes, replayed
 * to a node that comes back, is first discovered or becomes ready after syncing (pool
 * states) and to a node whose event stream reconnects (the monitor's connection listener);
 * blinded blocks and the stateful envelope read first to the producing node. */
static int build_broadcast(app_t *a)
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

/* The hint (expected head from the monitor's tracker, due times from discovery's
 * chain, per-duty holds), attestation data / head root / payload attestation data, and
 * block production, all racing on the shared engine. */
static int build_fresh(app_t *a)
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

/* readpath: ordinary reads, with each upstream's tier, weight, archive flag and bucket, and
 * the rules (blocked paths, route rules, client routes) compiled from the configuration. */
static int build_readpath(app_t *a)
{
    a->readpath = bm_readpath_new(&a->loop, a->up, a->pool, a->disc, &a->opts.readpath);
    bm_rules_t *rules = bm_options_rules(a->cfg);
    if (!a->readpath || !rules) {
        bm_rules_free(rules);
        return BM_ENOMEM;
    }
    bm_readpath_set_rules(a->readpath, rules);
    for (size_t i = 0; i < a->cfg->n_upstreams; i++) {
        bm_readpath_node_opts_t no;
        bm_options_readpath_node(a->cfg, i, &no);
        bm_readpath_set_node(a->readpath, i, &no);
    }
    return bm_admin_add_section(a->admin, "read_path", bm_readpath_status_json, a->readpath);
}

static void status_json(bm_str_t *out, void *ud)
{
    bm_admin_status_json(ud, out);
}

/* observe: the figures only it keeps, read with every module's counters at scrape time. */
static int build_observe(app_t *a)
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
    };
    a->observe = bm_observe_new(&src, &a->opts.observe);
    if (!a->observe)
        return BM_ENOMEM;
    bm_observe_set_status(a->observe, status_json, a->admin);
    return 0;
}

/* metrics.listen: /metrics on a listener of its own. */
static int listen_metrics(app_t *a)
{
    const char *l = a->cfg->metrics.listen;
    if (!l || !*l || !a->cfg->metrics.enabled)
        return 0;
    char host[64];
    uint16_t port;
    if (bm_config_parse_listen(l, host, sizeof host, &port) != 0)
        return BM_EINVAL; /* validated: cannot happen */
    a->metrics_router = bm_router_new();
    if (!a->metrics_router)
        return BM_ENOMEM;
    bm_router_set_class(a->metrics_router, "metrics");
    int rc = bm_observe_register(a->observe, a->metrics_router, true);
    if (rc)
        return rc;
    a->metrics_server =
        bm_server_new(&a->loop, &a->opts.server, bm_router_dispatch, a->metrics_router);
    if (!a->metrics_server)
        return BM_ENOMEM;
    bm_observe_add_server(a->observe, a->metrics_server);
    rc = bm_server_listen(a->metrics_server, host, port);
    if (rc) {
        bm_log(BM_LOG_ERROR, "cannot listen on %s for metrics: %s", l, bm_strerror(rc));
        return rc;
    }
    bool v6 = strchr(host, ':') != NULL;
    bm_log(BM_LOG_INFO, "metrics on http://%s%s%s:%d%s", v6 ? "[" : "", host, v6 ? "]" : "",
           bm_server_port(a->metrics_server), a->opts.observe.metrics_path);
    return 0;
}

static int build(app_t *a)
{
    const bm_config_t *c = a->cfg;
    bm_options_t *o = &a->opts;
    int rc = bm_options_from_config(o, c);
    if (rc)
        return rc;
    a->up = bm_upstream_new(&a->loop, &o->upstream);
    if (!a->up)
        return BM_EIO;
    a->clock = bm_clock_real_new(&a->loop);
    if (!a->clock)
        return BM_ENOMEM;
    if ((rc = build_pool(a)) != 0)
        return rc;
    a->health = bm_health_new(a->pool, &o->health);
    a->disc = bm_discovery_new(&a->loop, a->up, a->pool, &o->discovery);
    a->admin = bm_admin_new(a->pool, a->disc);
    if (!a->health || !a->disc || !a->admin || (rc = build_readpath(a)) != 0)
        return rc ? rc : BM_ENOMEM;

    /* monitor: the head tracker, health judged against it, the per-node streams */
    a->head = bm_head_new(bm_pool_count(a->pool), NULL);
    if (!a->head || (rc = bm_health_set_head(a->health, a->head)) != 0)
        return a->head ? rc : BM_ENOMEM;
    a->monitor = bm_monitor_new(&a->loop, a->up, a->pool, a->disc, a->head, a->health, &o->monitor);
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
    /* the cluster event stream, fed by the tracker and every node's streams */
    a->events = bm_events_new(&a->loop, &o->events);
    if (!a->events || bm_events_attach_head(a->events, a->head) != 0 ||
        bm_monitor_on_event(a->monitor, bm_events_node_event, a->events) != 0 ||
        bm_monitor_on_connection(a->monitor, bm_events_node_conn, a->events) != 0)
        return BM_ENOMEM;
    bm_events_attach_nodes(a->events, a->up, a->pool);
    bm_events_attach_discovery(a->events, a->disc);

    if ((rc = build_broadcast(a)) != 0)
        return rc;
    if ((rc = build_observe(a)) != 0)
        return rc;
    if ((rc = build_routes(a)) != 0)
        return rc;
    bm_report_sources_t rs = {a->events, a->attest, a->produce, a->aggregate,
                              a->duties, a->bcast,  a->replay};
    if ((rc = bm_report_register(a->admin, &rs)) != 0)
        return rc;

    a->server = bm_server_new(&a->loop, &o->server, bm_router_dispatch, a->router);
    if (!a->server)
        return BM_ENOMEM;
    bm_observe_add_server(a->observe, a->server);
    rc = bm_server_listen(a->server, c->listen_host, c->listen_port);
    if (rc) {
        bm_log(BM_LOG_ERROR, "cannot listen on %s:%u: %s", c->listen_host, c->listen_port,
               bm_strerror(rc));
        return rc;
    }
    const char *h = c->listen_host;
    bool v6 = strchr(h, ':') != NULL;
    bm_log(BM_LOG_INFO, "listening on http://%s%s%s:%d", v6 ? "[" : "", h, v6 ? "]" : "",
           bm_server_port(a->server));
    if ((rc = listen_metrics(a)) != 0)
        return rc;
    if ((rc = bm_discovery_start(a->disc)) != 0)
        return rc;
    return bm_monitor_start(a->monitor); /* monitor */
}

static void close_signals(app_t *a)
{
    if (!uv_is_closing((uv_handle_t *)&a->sigterm))
        uv_close((uv_handle_t *)&a->sigterm, NULL);
    if (!uv_is_closing((uv_handle_t *)&a->sigint))
        uv_close((uv_handle_t *)&a->sigint, NULL);
}

/* Everything after the writes drained: stop background work, close the loop's handles. */
static void on_writes_drained(bm_race_engine_t *e, void *ud)
{
    app_t *a = ud;
    (void)e;
    bm_monitor_stop(a->monitor); /* monitor: streams and polls end before curl goes */
    bm_discovery_stop(a->disc);
    bm_replay_stop(a->replay);
    bm_race_engine_free(a->race); /* before curl: it cancels what still runs */
    a->race = NULL;
    /* nothing runs any more: close curl's sockets and timers so that the loop ends */
    bm_upstream_free(a->up);
    a->up = NULL;
    close_signals(a);
}

/* The clients are answered; writes detached from them (broadcast) may still be running:
 * they get the rest of the shutdown bound to reach every node. */
static void on_server_drained(bm_server_t *srv, void *ud)
{
    app_t *a = ud;
    (void)srv;
    bm_log(BM_LOG_INFO, "shutdown: connections drained");
    bm_broadcast_stop(a->bcast);
    if (bm_race_engine_active(a->race))
        bm_log(BM_LOG_INFO, "shutdown: %zu write(s) still reaching nodes (up to %u ms)",
               bm_race_engine_active(a->race), a->cfg->server.shutdown_timeout_ms);
    bm_race_engine_drain(a->race, a->cfg->server.shutdown_timeout_ms, on_writes_drained, a);
}

static void on_signal(uv_signal_t *s, int signum)
{
    app_t *a = s->data;
    if (++a->signals > 1) {
        bm_log(BM_LOG_WARN, "second signal: exiting now");
        exit(1);
    }
    bm_log(BM_LOG_INFO, "%s: shutting down (in-flight requests get up to %u ms)",
           signum == SIGTERM ? "SIGTERM" : "SIGINT", a->cfg->server.shutdown_timeout_ms);
    bm_events_shutdown(a->events); /* streams end now, not after the grace period */
    if (a->metrics_server)
        bm_server_shutdown(a->metrics_server, a->cfg->server.shutdown_timeout_ms, NULL, NULL);
    bm_server_shutdown(a->server, a->cfg->server.shutdown_timeout_ms, on_server_drained, a);
}

static void teardown(app_t *a)
{
    bm_monitor_stop(a->monitor); /* monitor */
    bm_events_free(a->events);   /* after the monitor, before curl and the tracker */
    a->events = NULL;
    if (a->disc)
        bm_discovery_stop(a->disc);
    bm_replay_stop(a->replay);
    bm_broadcast_stop(a->bcast);
    if (a->race)
        bm_race_engine_free(a->race);
    a->race = NULL;
    if (a->up)
        bm_upstream_free(a->up);
    a->up = NULL;
    /* let close callbacks of timers, polls and sockets run */
    uv_run(&a->loop, UV_RUN_DEFAULT);
    bm_observe_free(a->observe); /* before what it listens to: servers, policies, tracker */
    if (a->server)
        bm_server_free(a->server);
    if (a->metrics_server)
        bm_server_free(a->metrics_server);
    bm_router_free(a->metrics_router);
    bm_discovery_free(a->disc);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    bm_admin_free(a->admin);
    bm_attest_free(a->attest); /* after the engine, whose races they judge */
    bm_produce_free(a->produce);
    bm_hint_free(a->hint);
    bm_broadcast_free(a->bcast);
    bm_replay_free(a->replay);
    bm_readpath_free(a->readpath);
    bm_router_free(a->router);
    bm_monitor_free(a->monitor); /* its handles closed in the runs above */
    bm_health_free(a->health);
    if (a->head)
        bm_head_free(a->head); /* after health, which listens to it */
    /* aggregation reads and duties: after the engine (its races judged with their rules),
     * right before the pool (whose state listener they hold) */
    bm_aggregate_free(a->aggregate);
    bm_duties_free(a->duties);
    bm_pool_free(a->pool);
    bm_clock_free(a->clock); /* after every module that made timers on it */
    uv_run(&a->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&a->loop) != 0)
        bm_log(BM_LOG_WARN, "shutdown: handles still open on the loop");
}

int main(int argc, char **argv)
{
    bm_cli_t cli;
    bm_config_err_t err;
    if (bm_cli_parse(argc, argv, &cli, &err) != 0) {
        fprintf(stderr, "beaconmux: %s\n", err.msg); /* the message carries the usage */
        return 2;
    }
    if (cli.help) {
        fputs(bm_cli_help(), stdout);
        return 0;
    }
    if (cli.version) {
        printf("beaconmux %s\n", BM_VERSION);
        return 0;
    }
    app_t a;
    memset(&a, 0, sizeof a);
    a.cfg = bm_cli_load(&cli, &err);
    if (!a.cfg) {
        fprintf(stderr, "beaconmux: %s\n", err.msg);
        return 2;
    }
    const char *deprecated = bm_config_deprecation(a.cfg);
    if (cli.check) {
        if (deprecated)
            fprintf(stderr, "beaconmux: warning: %s\n", deprecated);
        bm_str_t dump = BM_STR_INIT;
        bm_config_dump(a.cfg, true, &dump);
        printf("configuration OK%s%s\n%s", a.cfg->path ? ": " : "", a.cfg->path ? a.cfg->path : "",
               bm_str_data(&dump));
        bm_str_dispose(&dump);
        bm_config_free(a.cfg);
        return 0;
    }
    bm_log_setup(a.cfg->log.level, a.cfg->log.format, NULL);
    if (deprecated)
        bm_log(BM_LOG_WARN, "%s", deprecated);
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&a.loop);
    uv_signal_init(&a.loop, &a.sigterm);
    uv_signal_init(&a.loop, &a.sigint);
    a.sigterm.data = a.sigint.data = &a;
    bm_log(BM_LOG_INFO, "beaconmux %s starting with %zu upstream%s", BM_VERSION, a.cfg->n_upstreams,
           a.cfg->n_upstreams == 1 ? "" : "s");
    int rc = build(&a);
    if (rc) {
        a.exit_code = 1;
        close_signals(&a);
    } else {
        uv_signal_start(&a.sigterm, on_signal, SIGTERM);
        uv_signal_start(&a.sigint, on_signal, SIGINT);
        uv_run(&a.loop, UV_RUN_DEFAULT);
        bm_log(BM_LOG_INFO, "stopped");
    }
    teardown(&a);
    bm_config_free(a.cfg);
    return a.exit_code;
}
