/* SPDX-License-Identifier: MIT */
/*
 * main: parses the command line, loads the configuration, creates the loop and wires the
 * global pieces to the networks:
 *
 *   server -> front (allowed clients, API keys, network prefix, CORS, rate limits)
 *          -> the network's router -> its policies (app/network.h builds one network)
 *   server (end of every request) -> the request's network's observe (counts, access log)
 *   metrics: on a network's router, on metrics.listen's own server, and with several
 *            networks one /metrics for all of them (the front's process routes)
 *
 * docs/architecture.md draws the whole. It owns nothing else: no module is reached
 * through a global. SIGTERM/SIGINT start a graceful shutdown (stop accepting, finish
 * in-flight requests within the configured bound, let detached writes reach the nodes); a
 * second signal exits at once.
 */
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <uv.h>

#include "app/cli.h"
#include "app/config.h"
#include "app/fdlimit.h"
#include "app/network.h"
#include "app/options.h"
#include "app/sharedlimit.h"
#include "app/systemd.h"
#include "app/tlslisten.h"
#include "base/err.h"
#include "base/log.h"
#include "edge/front.h"
#include "http/router.h"
#include "http/server.h"
#include "observe/observe.h"

#define MAX_NETWORKS 64
_Static_assert(MAX_NETWORKS <= BM_OBSERVE_MAX_NETWORKS, "every network has its place in /metrics");

typedef struct app {
    uv_loop_t loop;
    bm_config_t *cfg;
    bm_options_t opts;      /* the global modules' options (server) */
    bm_edge_options_t edge; /* the front's */
    bm_network_t *net[MAX_NETWORKS];
    size_t n_net;
    size_t draining; /* networks whose writes are still draining */
    bm_front_t *front;
    bm_sharedlimit_t *limits; /* state.driver redis: the global buckets shared */
    bm_server_t *server;
    bm_server_t *tls_server; /* server.tls: the same handler behind TLS, or NULL */
    int servers_draining;
    bm_observe_set_t observed;   /* every network's observe, for one /metrics */
    bm_router_t *global_router;  /* several networks: the merged /metrics on the API listener */
    bm_router_t *metrics_router; /* metrics.listen: a listener of their own */
    bm_server_t *metrics_server;
    uv_signal_t sigterm;
    uv_signal_t sigint;
    int signals;
    int exit_code;
    bool no_wait;        /* --no-wait: READY=1 once listening */
    bool ready_sent;     /* READY=1 went to systemd */
    uv_timer_t watchdog; /* WATCHDOG=1 from the loop, when systemd asks for it */
    bool watchdog_on;
    bool running; /* built and in the loop: a signal shuts down (before: the start failed) */
} app_t;

/* systemd (Type=notify): ready once clients can be served, which needs the listener and a
 * node that discovery found usable (or the listener alone with --no-wait). */
static void notify_ready(app_t *a, const char *why)
{
    if (a->ready_sent)
        return;
    a->ready_sent = true;
    char msg[200];
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=serving (%s)", why);
    if (bm_systemd_notify(msg) != 0)
        bm_log(BM_LOG_WARN, "systemd: cannot notify NOTIFY_SOCKET");
}

static void on_node_state(bm_node_t *node, bm_node_state_t old, void *ud)
{
    app_t *a = ud;
    (void)old;
    if (node->state != BM_NODE_UNKNOWN && node->state != BM_NODE_UNREACHABLE &&
        node->state != BM_NODE_WRONG_NETWORK)
        notify_ready(a, "a beacon node is discovered");
}

static void on_watchdog(uv_timer_t *t)
{
    bm_systemd_notify("WATCHDOG=1"); /* sent from the loop: a frozen loop sends nothing */
    (void)t;
}

/* WatchdogSec=: a ping at half the interval, as systemd recommends. */
static void start_watchdog(app_t *a)
{
    uint64_t ms = bm_systemd_watchdog_ms();
    if (!ms)
        return;
    uv_timer_init(&a->loop, &a->watchdog);
    a->watchdog_on = true;
    uv_timer_start(&a->watchdog, on_watchdog, ms / 2 ? ms / 2 : 1, ms / 2 ? ms / 2 : 1);
    bm_log(BM_LOG_INFO, "systemd: watchdog every %llu ms", (unsigned long long)(ms / 2));
}

/* The listener: the socket systemd handed over (socket activation), else our own. */
static int open_listener(app_t *a)
{
    const bm_config_t *c = a->cfg;
    int n = bm_systemd_listen_fds();
    if (n > 1)
        bm_log(BM_LOG_WARN, "systemd passed %d sockets; the first serves, the others are unused",
               n);
    if (n == 0) {
        int rc = bm_server_listen(a->server, c->listen_host, c->listen_port);
        if (rc) {
            bm_log(BM_LOG_ERROR, "cannot listen on %s:%u: %s", c->listen_host, c->listen_port,
                   bm_strerror(rc));
            return rc;
        }
        const char *h = c->listen_host;
        bool v6 = strchr(h, ':') != NULL;
        bm_log(BM_LOG_INFO, "listening on http://%s%s%s:%d", v6 ? "[" : "", h, v6 ? "]" : "",
               bm_server_port(a->server));
        return 0;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    if (getsockname(BM_SYSTEMD_FIRST_FD, (struct sockaddr *)&ss, &sl) == 0)
        inet_ntop(ss.ss_family,
                  ss.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                           : (void *)&((struct sockaddr_in *)&ss)->sin_addr,
                  host, sizeof host);
    int rc = bm_server_listen_fd(a->server, BM_SYSTEMD_FIRST_FD);
    if (rc)
        return rc;
    bool v6 = strchr(host, ':') != NULL;
    bm_log(BM_LOG_INFO, "listening on http://%s%s%s:%d (socket from systemd)", v6 ? "[" : "", host,
           v6 ? "]" : "", bm_server_port(a->server));
    return 0;
}

/* Every ended request goes to the observe of the network that took it (the front's scope);
 * what the front answered before choosing one (a missing key, an unknown network, the
 * process's /metrics) is counted and logged with the first network's. */
static void on_request_end(const bm_req_summary_t *s, void *ud)
{
    app_t *a = ud;
    bm_network_t *n = s->scope ? s->scope : a->net[0];
    bm_observe_request_ended(s, bm_network_observe(n));
}

static bool metrics_on_own_listener(const bm_config_t *c)
{
    return c->metrics.enabled && c->metrics.listen && *c->metrics.listen;
}

/* Metrics and the dashboard are admin routes for API keys; several networks share one
 * /metrics on the API listener unless it has its own. */
static int observe_front(app_t *a)
{
    for (size_t i = 0; i < a->n_net; i++) {
        a->observed.obs[i] = bm_network_observe(a->net[i]);
        a->observed.ids[i] = bm_network_id(a->net[i]);
    }
    a->observed.n = a->n_net;
    int rc = bm_front_add_admin_path(a->front, a->opts.observe.metrics_path);
    if (!rc)
        rc = bm_front_add_admin_path(a->front, "/ui");
    if (rc || a->n_net < 2 || metrics_on_own_listener(a->cfg))
        return rc;
    if (!(a->global_router = bm_router_new()))
        return BM_ENOMEM;
    bm_router_set_class(a->global_router, "observe");
    bm_front_set_global(a->front, a->global_router);
    return bm_observe_register_merged(&a->observed, a->global_router);
}

/* metrics.listen: /metrics on a listener of its own (one network's, or every network's). */
static int listen_metrics(app_t *a)
{
    const char *l = a->cfg->metrics.listen;
    if (!metrics_on_own_listener(a->cfg))
        return 0;
    char host[64];
    uint16_t port;
    if (bm_config_parse_listen(l, host, sizeof host, &port) != 0)
        return BM_EINVAL; /* validated: cannot happen */
    a->metrics_router = bm_router_new();
    if (!a->metrics_router)
        return BM_ENOMEM;
    bm_router_set_class(a->metrics_router, "metrics");
    int rc = a->n_net == 1
                 ? bm_observe_register(bm_network_observe(a->net[0]), a->metrics_router, true)
                 : bm_observe_register_merged(&a->observed, a->metrics_router);
    if (rc)
        return rc;
    a->metrics_server =
        bm_server_new(&a->loop, &a->opts.server, bm_router_dispatch, a->metrics_router);
    if (!a->metrics_server)
        return BM_ENOMEM;
    bm_server_on_end(a->metrics_server, on_request_end, a);
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

static int build_front(app_t *a)
{
    int rc = bm_options_edge(&a->edge, a->cfg);
    if (rc)
        return rc;
    a->front = bm_front_new(&a->loop, &a->edge.front);
    if (!a->front)
        return BM_ENOMEM;
    if ((rc = observe_front(a)) != 0)
        return rc;
    for (size_t i = 0; i < a->n_net; i++) {
        bm_front_network_t fn = {bm_network_id(a->net[i]), bm_network_router(a->net[i]),
                                 bm_network_health, bm_network_status, a->net[i]};
        if ((rc = bm_front_add_network(a->front, &fn)) != 0 ||
            (rc = bm_network_add_status(a->net[i], "edge", bm_front_status_json, a->front)) != 0)
            return rc;
    }
    return 0;
}

/* server.tls: a second server with the same front, so both listeners serve alike. */
static int build_tls_listener(app_t *a)
{
    const bm_config_server_tls_t *t = &a->cfg->server.tls;
    char why[512];
    bm_tls_ctx_t *ctx = bm_tlslisten_ctx(t, why, sizeof why);
    if (!ctx) {
        bm_log(BM_LOG_ERROR, "server.tls: %s", why);
        return BM_ETLS;
    }
    a->tls_server = bm_server_new(&a->loop, &a->opts.server, bm_front_handle, a->front);
    if (!a->tls_server) {
        bm_tls_ctx_unref(ctx);
        return BM_ENOMEM;
    }
    bm_server_on_end(a->tls_server, on_request_end, a); /* metrics and the access log too */
    bm_server_set_tls(a->tls_server, ctx);
    bm_tls_ctx_unref(ctx);
    int rc = bm_server_listen(a->tls_server, t->listen_host, t->listen_port);
    if (rc) {
        bm_log(BM_LOG_ERROR, "cannot listen on %s:%u: %s", t->listen_host, t->listen_port,
               bm_strerror(rc));
        return rc;
    }
    bool v6 = strchr(t->listen_host, ':') != NULL;
    bm_log(BM_LOG_INFO, "listening on https://%s%s%s:%d%s", v6 ? "[" : "", t->listen_host,
           v6 ? "]" : "", bm_server_port(a->tls_server),
           t->require_client_cert ? " (client certificates required)" : "");
    return 0;
}

/* A listener on a public address needs keys or an allow list; required client
 * certificates are a gate of their own on the TLS listener. */
static const char *tls_exposure(const bm_config_t *c)
{
    const bm_config_server_tls_t *t = &c->server.tls;
    if (!t->listen_host || t->require_client_cert)
        return NULL;
    return bm_front_exposure_problem(t->listen_host, c->auth.n_keys, c->server.n_allowed_clients);
}

static int build(app_t *a)
{
    const bm_config_t *c = a->cfg;
    int rc = bm_options_from_config(&a->opts, c);
    if (rc)
        return rc;
    /* secure by default: duty and write routes are never open to a whole network */
    const char *exposed =
        bm_front_exposure_problem(c->listen_host, c->auth.n_keys, c->server.n_allowed_clients);
    if (exposed) {
        bm_log(BM_LOG_ERROR, "listen %s: %s", c->listen_host, exposed);
        return BM_EINVAL;
    }
    if ((exposed = tls_exposure(c)) != NULL) {
        bm_log(BM_LOG_ERROR, "server.tls.listen %s: %s", c->server.tls.listen_host, exposed);
        return BM_EINVAL;
    }
    a->n_net = bm_config_network_count(c);
    for (size_t i = 0; i < a->n_net; i++)
        if (!(a->net[i] = bm_network_new(&a->loop, c, i)))
            return BM_EINVAL;
    if ((rc = build_front(a)) != 0)
        return rc;
    if (c->state.driver == BM_STATE_REDIS)
        a->limits = bm_sharedlimit_new(&a->loop, c, a->front); /* NULL: no global limit */
    /* first, so that a certificate that does not load stops the start before any listens */
    if (c->server.tls.listen_host && (rc = build_tls_listener(a)) != 0)
        return rc;
    a->server = bm_server_new(&a->loop, &a->opts.server, bm_front_handle, a->front);
    if (!a->server)
        return BM_ENOMEM;
    bm_server_on_end(a->server, on_request_end, a);
    for (size_t i = 0; i < a->n_net; i++) {
        bm_observe_set_server(bm_network_observe(a->net[i]), a->server);
        bm_observe_set_front(bm_network_observe(a->net[i]), a->front);
    }
    /* before the API: once "listening on" is logged, every listener is bound */
    if ((rc = listen_metrics(a)) != 0)
        return rc;
    if ((rc = open_listener(a)) != 0)
        return rc;
    for (size_t i = 0; i < a->n_net; i++)
        if ((rc = bm_network_on_node_state(a->net[i], on_node_state, a)) != 0)
            return rc;
    if (a->no_wait)
        notify_ready(a, "--no-wait");
    for (size_t i = 0; i < a->n_net; i++) {
        if (c->n_networks)
            bm_log(BM_LOG_INFO, "network %s: served under /%s/", bm_network_id(a->net[i]),
                   bm_network_id(a->net[i]));
        if ((rc = bm_network_start(a->net[i])) != 0)
            return rc;
    }
    return 0;
}

static void close_signals(app_t *a)
{
    if (a->watchdog_on && !uv_is_closing((uv_handle_t *)&a->watchdog))
        uv_close((uv_handle_t *)&a->watchdog, NULL);
    if (!uv_is_closing((uv_handle_t *)&a->sigterm))
        uv_close((uv_handle_t *)&a->sigterm, NULL);
    if (!uv_is_closing((uv_handle_t *)&a->sigint))
        uv_close((uv_handle_t *)&a->sigint, NULL);
}

/* One network's detached writes are done; after the last, nothing keeps the loop. */
static void on_network_drained(void *ud)
{
    app_t *a = ud;
    if (--a->draining == 0)
        close_signals(a);
}

/* The clients are answered; writes detached from them (broadcast) may still be running:
 * they get the rest of the shutdown bound to reach every node. */
static void on_server_drained(bm_server_t *srv, void *ud)
{
    app_t *a = ud;
    (void)srv;
    if (--a->servers_draining > 0)
        return; /* the other listener still has clients */
    bm_log(BM_LOG_INFO, "shutdown: connections drained");
    bm_sharedlimit_free(a->limits); /* its connection and timer must not keep the loop */
    a->limits = NULL;
    a->draining = a->n_net;
    for (size_t i = 0; i < a->n_net; i++)
        bm_network_drain(a->net[i], a->cfg->server.shutdown_timeout_ms, on_network_drained, a);
}

static void on_signal(uv_signal_t *s, int signum)
{
    app_t *a = s->data;
    if (!a->running)
        return; /* a network that failed to build runs the loop to close; we exit anyway */
    if (++a->signals > 1) {
        bm_log(BM_LOG_WARN, "second signal: exiting now");
        exit(1);
    }
    bm_log(BM_LOG_INFO, "%s: shutting down (in-flight requests get up to %u ms)",
           signum == SIGTERM ? "SIGTERM" : "SIGINT", a->cfg->server.shutdown_timeout_ms);
    bm_systemd_notify("STOPPING=1\nSTATUS=draining");
    for (size_t i = 0; i < a->n_net; i++)
        bm_network_stop_streams(a->net[i]);
    a->servers_draining = a->tls_server ? 2 : 1;
    if (a->metrics_server)
        bm_server_shutdown(a->metrics_server, a->cfg->server.shutdown_timeout_ms, NULL, NULL);
    bm_server_shutdown(a->server, a->cfg->server.shutdown_timeout_ms, on_server_drained, a);
    if (a->tls_server)
        bm_server_shutdown(a->tls_server, a->cfg->server.shutdown_timeout_ms, on_server_drained, a);
}

static void teardown(app_t *a)
{
    bm_sharedlimit_free(a->limits);
    a->limits = NULL;
    /* the networks' observes go with them: no request reaches them any more */
    if (a->server)
        bm_server_on_end(a->server, NULL, NULL);
    if (a->tls_server)
        bm_server_on_end(a->tls_server, NULL, NULL);
    if (a->metrics_server)
        bm_server_on_end(a->metrics_server, NULL, NULL);
    for (size_t i = 0; i < a->n_net; i++)
        bm_network_free(a->net[i]); /* runs the loop to let its handles close */
    uv_run(&a->loop, UV_RUN_DEFAULT);
    if (a->server)
        bm_server_free(a->server);
    if (a->tls_server)
        bm_server_free(a->tls_server);
    if (a->metrics_server)
        bm_server_free(a->metrics_server);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    bm_router_free(a->metrics_router);
    bm_router_free(a->global_router);
    bm_front_free(a->front);
    bm_options_edge_dispose(&a->edge);
    if (uv_loop_close(&a->loop) != 0)
        bm_log(BM_LOG_WARN, "shutdown: handles still open on the loop");
}

/* Raises the soft descriptor limit to the hard one and says when it is still short. */
static void check_fd_limit(const bm_config_t *cfg)
{
    bm_fdlimit_t f;
    if (bm_fdlimit_raise(bm_fdlimit_need(cfg), &f) != 0) {
        bm_log(BM_LOG_WARN, "cannot read the limit of open files");
        return;
    }
    if (f.raised)
        bm_log(BM_LOG_INFO, "open files: soft limit raised from %llu to %llu",
               (unsigned long long)f.soft_before, (unsigned long long)f.soft);
    if (f.short_of_need)
        bm_log(BM_LOG_WARN,
               "open files: the limit is %llu, and server.maxConnections with the upstreams' "
               "pools may need %llu; raise it (LimitNOFILE= in the unit, ulimit -n) or lower "
               "server.maxConnections",
               (unsigned long long)f.soft, (unsigned long long)f.need);
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
        const char *exposed = bm_front_exposure_problem(a.cfg->listen_host, a.cfg->auth.n_keys,
                                                        a.cfg->server.n_allowed_clients);
        if (exposed)
            fprintf(stderr, "beaconmux: warning: listen %s: %s\n", a.cfg->listen_host, exposed);
        if ((exposed = tls_exposure(a.cfg)) != NULL)
            fprintf(stderr, "beaconmux: warning: server.tls.listen %s: %s\n",
                    a.cfg->server.tls.listen_host, exposed);
        char why[512];
        bm_tls_ctx_t *tls = NULL;
        if (a.cfg->server.tls.listen_host &&
            !(tls = bm_tlslisten_ctx(&a.cfg->server.tls, why, sizeof why))) {
            fprintf(stderr, "beaconmux: server.tls: %s\n", why);
            bm_config_free(a.cfg);
            return 2;
        }
        bm_tls_ctx_unref(tls);
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
    check_fd_limit(a.cfg);
    uv_loop_init(&a.loop);
    uv_signal_init(&a.loop, &a.sigterm);
    uv_signal_init(&a.loop, &a.sigint);
    a.sigterm.data = a.sigint.data = &a;
    a.no_wait = cli.no_wait;
    if (a.cfg->n_networks)
        bm_log(BM_LOG_INFO, "beaconmux %s starting with %zu networks", BM_VERSION,
               a.cfg->n_networks);
    else
        bm_log(BM_LOG_INFO, "beaconmux %s starting with %zu upstream%s", BM_VERSION,
               a.cfg->n_upstreams, a.cfg->n_upstreams == 1 ? "" : "s");
    /* before anything says it listens or is ready: a SIGTERM sent right after READY=1 (or
     * after the "listening" line) must start a graceful shutdown, not kill the process. The
     * callbacks run only once the loop runs, after build; until then the handles do not
     * keep the loop alive (a network that fails to build runs the loop to close its own). */
    uv_signal_start(&a.sigterm, on_signal, SIGTERM);
    uv_signal_start(&a.sigint, on_signal, SIGINT);
    uv_unref((uv_handle_t *)&a.sigterm);
    uv_unref((uv_handle_t *)&a.sigint);
    int rc = build(&a);
    if (rc) {
        a.exit_code = 1;
        close_signals(&a);
    } else {
        uv_ref((uv_handle_t *)&a.sigterm);
        uv_ref((uv_handle_t *)&a.sigint);
        start_watchdog(&a);
        a.running = true;
        uv_run(&a.loop, UV_RUN_DEFAULT);
        bm_log(BM_LOG_INFO, "stopped");
    }
    teardown(&a);
    bm_config_free(a.cfg);
    return a.exit_code;
}
