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
 * docs/architecture.md draws the whole. The front and the networks are built and owned by
 * app/reload.h, which replaces them on SIGHUP; main owns the loop, the server and the
 * signals, and nothing is reached through a global. SIGTERM/SIGINT start a graceful
 * shutdown (stop accepting, finish in-flight requests within the configured bound, let
 * detached writes reach the nodes); a second signal exits at once. SIGHUP reloads the
 * configuration file (docs/operations.md).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "app/cli.h"
#include "app/config.h"
#include "app/fdlimit.h"
#include "app/options.h"
#include "app/reload.h"
#include "app/sharedlimit.h"
#include "app/systemd.h"
#include "app/tlslisten.h"
#include "base/err.h"
#include "base/log.h"
#include "base/memtrim.h"
#include "edge/front.h"
#include "http/router.h"
#include "http/server.h"
#include "observe/observe.h"

#define MAX_OLD_SERVERS 8

/* The listeners a socket from systemd can serve, each matched by its address. */
enum { LISTENER_API, LISTENER_TLS, LISTENER_METRICS, N_LISTENERS };
static const char *const LISTENER_KEYS[N_LISTENERS] = {"listen", "server.tls.listen",
                                                       "metrics.listen"};

typedef struct app {
    uv_loop_t loop;
    bm_cli_t cli;
    bm_reload_t *reload; /* the running configuration: front and networks (app/reload.h) */
    bm_server_t *server;
    bm_server_t *old_servers[MAX_OLD_SERVERS]; /* listeners a reload replaced, draining */
    size_t n_old_servers;
    bm_server_t *metrics_server; /* metrics.listen: a listener of its own */
    char metrics_addr[128];      /* the address it listens on, or "" */
    bm_server_t *tls_server;     /* server.tls: the same handler behind TLS, or NULL */
    char tls_addr[128];          /* the address it was opened for (tls_addr_of), or "" */
    int servers_draining;        /* the API listeners still finishing at shutdown */
    bm_sharedlimit_t *limits;    /* state.driver redis: the current front's global buckets shared */
    uv_signal_t sigterm;
    uv_signal_t sigint;
    uv_signal_t sighup;
    int signals;
    int exit_code;
    bool no_wait;        /* --no-wait: READY=1 once listening */
    bool ready_sent;     /* READY=1 went to systemd */
    uv_timer_t watchdog; /* WATCHDOG=1 from the loop, when systemd asks for it */
    bool watchdog_on;
    bool running; /* built and in the loop: a signal shuts down (before: the start failed) */
    int activated[N_LISTENERS]; /* the socket from systemd each listener serves, or -1 */
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

static bool metrics_on_own_listener(const bm_config_t *c)
{
    return c->metrics.enabled && c->metrics.listen && *c->metrics.listen;
}

/* metrics.listen: /metrics on a listener of its own (one network's routes, or every
 * network's /metrics), served from the current generation (app/reload.h). */
static int listen_metrics(app_t *a, const bm_config_t *c)
{
    const char *l = c->metrics.listen;
    if (!metrics_on_own_listener(c))
        return 0;
    char host[64];
    uint16_t port;
    if (bm_config_parse_listen(l, host, sizeof host, &port) != 0)
        return BM_EINVAL; /* validated: cannot happen */
    bm_options_t o;
    int rc = bm_options_from_config(&o, c);
    if (rc)
        return rc;
    a->metrics_server = bm_server_new(&a->loop, &o.server, bm_reload_handle_metrics, a->reload);
    if (!a->metrics_server)
        return BM_ENOMEM;
    bm_server_on_end(a->metrics_server, bm_reload_request_ended, a->reload);
    int fd = a->activated[LISTENER_METRICS];
    a->activated[LISTENER_METRICS] = -1; /* the first listener only: a reload binds its own */
    rc = fd >= 0 ? bm_server_listen_fd(a->metrics_server, fd)
                 : bm_server_listen(a->metrics_server, host, port);
    if (rc) {
        bm_log(BM_LOG_ERROR, "cannot listen on %s for metrics: %s", l, bm_strerror(rc));
        return rc;
    }
    snprintf(a->metrics_addr, sizeof a->metrics_addr, "%s", l);
    bool v6 = strchr(host, ':') != NULL;
    bm_log(BM_LOG_INFO, "metrics on http://%s%s%s:%d%s%s", v6 ? "[" : "", host, v6 ? "]" : "",
           bm_server_port(a->metrics_server), o.observe.metrics_path,
           fd >= 0 ? " (socket from systemd)" : "");
    return 0;
}

static void log_listening(const bm_config_t *c, const bm_server_t *srv)
{
    const char *h = c->listen_host;
    bool v6 = strchr(h, ':') != NULL;
    bm_log(BM_LOG_INFO, "listening on http://%s%s%s:%d", v6 ? "[" : "", h, v6 ? "]" : "",
           bm_server_port(srv));
}

/* A server for `c`'s limits on `c`'s address, or NULL (logged). */
static bm_server_t *listen_on(app_t *a, const bm_config_t *c)
{
    bm_options_t o;
    if (bm_options_from_config(&o, c) != 0)
        return NULL;
    bm_server_t *srv = bm_server_new(&a->loop, &o.server, bm_reload_handle, a->reload);
    if (srv)
        bm_server_on_end(srv, bm_reload_request_ended, a->reload);
    int rc = srv ? bm_server_listen(srv, c->listen_host, c->listen_port) : BM_ENOMEM;
    if (rc) {
        bm_log(BM_LOG_ERROR, "cannot listen on %s:%u: %s", c->listen_host, c->listen_port,
               bm_strerror(rc));
        if (srv)
            bm_server_free(srv); /* never listened: its handles close from the loop */
        return NULL;
    }
    log_listening(c, srv);
    return srv;
}

/* A configuration with no listener but the API's: a lone socket from systemd is the API's
 * whatever its address (the socket unit's ListenStream= decides, as it always did). */
static bool only_the_api_listens(const bm_config_t *c)
{
    return !c->server.tls.listen_host && !metrics_on_own_listener(c);
}

/* Socket activation: each socket systemd passed goes to the listener whose configured
 * address it is bound to (getsockname); a listener no socket matches binds its address
 * itself. A socket that matches no listener, or a listener two sockets match, stops the
 * start: serving a socket meant for TLS as plain HTTP, or leaving one unanswered, would
 * be worse than not starting. */
static int match_activated(app_t *a, const bm_config_t *c)
{
    for (int l = 0; l < N_LISTENERS; l++)
        a->activated[l] = -1;
    int n = bm_systemd_listen_fds();
    const char *host[N_LISTENERS] = {c->listen_host, c->server.tls.listen_host, NULL};
    uint16_t port[N_LISTENERS] = {c->listen_port, c->server.tls.listen_port, 0};
    char mhost[64];
    if (metrics_on_own_listener(c) && bm_config_parse_listen(c->metrics.listen, mhost, sizeof mhost,
                                                             &port[LISTENER_METRICS]) == 0)
        host[LISTENER_METRICS] = mhost;
    for (int fd = BM_SYSTEMD_FIRST_FD; fd < BM_SYSTEMD_FIRST_FD + n; fd++) {
        int l = 0;
        while (l < N_LISTENERS && !(host[l] && bm_systemd_socket_is(fd, host[l], port[l])))
            l++;
        if (l == N_LISTENERS && n == 1 && only_the_api_listens(c))
            l = LISTENER_API;
        char addr[80];
        bm_systemd_socket_name(fd, addr, sizeof addr);
        if (l == N_LISTENERS) {
            bm_log(BM_LOG_ERROR,
                   "the socket from systemd on %s (fd %d) matches no listener of the "
                   "configuration (listen, server.tls.listen, metrics.listen): make the socket "
                   "unit's ListenStream= and the configuration name the same addresses",
                   addr, fd);
            return BM_EINVAL;
        }
        if (a->activated[l] >= 0) {
            bm_log(BM_LOG_ERROR, "the sockets from systemd fd %d and fd %d both match %s %s",
                   a->activated[l], fd, LISTENER_KEYS[l], addr);
            return BM_EINVAL;
        }
        a->activated[l] = fd;
    }
    return 0;
}

/* The API listener: the socket systemd handed over for it (socket activation), else `c`'s
 * address. A reload that changes listen binds the new address itself (listen_on). */
static bm_server_t *open_listener(app_t *a, const bm_config_t *c)
{
    int fd = a->activated[LISTENER_API];
    if (fd < 0)
        return listen_on(a, c);
    a->activated[LISTENER_API] = -1;
    bm_options_t o;
    if (bm_options_from_config(&o, c) != 0)
        return NULL;
    bm_server_t *srv = bm_server_new(&a->loop, &o.server, bm_reload_handle, a->reload);
    if (!srv)
        return NULL;
    bm_server_on_end(srv, bm_reload_request_ended, a->reload);
    char addr[80];
    bm_systemd_socket_name(fd, addr, sizeof addr);
    int rc = bm_server_listen_fd(srv, fd);
    if (rc) {
        bm_log(BM_LOG_ERROR, "cannot listen on the socket from systemd: %s", bm_strerror(rc));
        bm_server_free(srv);
        return NULL;
    }
    bm_log(BM_LOG_INFO, "listening on http://%s (socket from systemd)", addr);
    return srv;
}

static void check_fd_limit(const bm_config_t *cfg);

/* reload: server.* changed (more connections may need more descriptors) */
static void set_server_limits(const bm_config_t *c, void *ud)
{
    app_t *a = ud;
    bm_options_t o;
    if (bm_options_from_config(&o, c) == 0) {
        bm_server_set_opts(a->server, &o.server);
        if (a->tls_server)
            bm_server_set_opts(a->tls_server, &o.server);
    }
    check_fd_limit(c);
    if (a->running)
        bm_memtrim_set(&a->loop, c->server.memory_trim_interval_ms);
}

static void on_old_server_drained(bm_server_t *srv, void *ud)
{
    app_t *a = ud;
    for (size_t i = 0; i < a->n_old_servers; i++)
        if (a->old_servers[i] == srv) {
            a->old_servers[i] = a->old_servers[--a->n_old_servers];
            break;
        }
    bm_log(BM_LOG_INFO, "reload: the previous listener's connections are done");
    bm_server_free(srv);
}

/* reload: listen changed. The new listener first; the old one then stops accepting, and
 * its connections finish their requests (idle ones close) within server.shutdownTimeout. */
static int rebind(const bm_config_t *c, void *ud)
{
    app_t *a = ud;
    if (a->n_old_servers == MAX_OLD_SERVERS) {
        bm_log(BM_LOG_ERROR, "reload: %d previous listeners still draining; listen stays",
               MAX_OLD_SERVERS);
        return BM_ETOOBIG;
    }
    bm_server_t *srv = listen_on(a, c);
    if (!srv) {
        bm_log(BM_LOG_ERROR, "reload: still listening on the previous address");
        return BM_EIO;
    }
    bm_server_t *old = a->server;
    a->server = srv;
    bm_reload_set_listener(a->reload, srv); /* the old one is freed once it drained */
    a->old_servers[a->n_old_servers++] = old;
    bm_server_shutdown(old, c->server.shutdown_timeout_ms, on_old_server_drained, a);
    return 0;
}

/* reload: metrics.listen as `c` says. A new address is bound first, then the old listener
 * drains like the API's; one that cannot be bound leaves the old one serving (logged). */
static void set_metrics_listener(const bm_config_t *c, void *ud)
{
    app_t *a = ud;
    const char *want = metrics_on_own_listener(c) ? c->metrics.listen : "";
    if (strcmp(want, a->metrics_addr) == 0)
        return;
    bm_server_t *old = a->metrics_server;
    a->metrics_server = NULL;
    if (*want && listen_metrics(a, c) != 0) {
        if (a->metrics_server)
            bm_server_free(a->metrics_server); /* never listened */
        a->metrics_server = old;
        bm_log(BM_LOG_ERROR, "reload: metrics stay where they were served");
        return;
    }
    if (!*want)
        a->metrics_addr[0] = '\0';
    if (!old)
        return;
    if (a->n_old_servers < MAX_OLD_SERVERS)
        a->old_servers[a->n_old_servers++] = old;
    bm_server_shutdown(old, c->server.shutdown_timeout_ms, on_old_server_drained, a);
}

/* The TLS listener's address as `c` configures it ("" when there is none). */
static void tls_addr_of(const bm_config_t *c, char *out, size_t cap)
{
    const bm_config_server_tls_t *t = &c->server.tls;
    if (t->listen_host)
        snprintf(out, cap, "%s|%u", t->listen_host, t->listen_port);
    else
        snprintf(out, cap, "%s", "");
}

/* server.tls: a second server with the same handler, so both listeners serve alike; on
 * the socket from systemd for it (at the start), else on `c`'s address. NULL on failure
 * (logged). */
static bm_server_t *open_tls_listener(app_t *a, const bm_config_t *c)
{
    const bm_config_server_tls_t *t = &c->server.tls;
    char why[512];
    bm_tls_ctx_t *ctx = bm_tlslisten_ctx(t, why, sizeof why);
    if (!ctx) {
        bm_log(BM_LOG_ERROR, "server.tls: %s", why);
        return NULL;
    }
    bm_options_t o;
    bm_server_t *srv = NULL;
    if (bm_options_from_config(&o, c) == 0)
        srv = bm_server_new(&a->loop, &o.server, bm_reload_handle, a->reload);
    if (!srv) {
        bm_tls_ctx_unref(ctx);
        return NULL;
    }
    bm_server_on_end(srv, bm_reload_request_ended, a->reload); /* metrics, access log */
    bm_server_set_tls(srv, ctx);
    bm_tls_ctx_unref(ctx);
    int fd = a->activated[LISTENER_TLS];
    a->activated[LISTENER_TLS] = -1; /* the first listener only: a reload binds its own */
    int rc = fd >= 0 ? bm_server_listen_fd(srv, fd)
                     : bm_server_listen(srv, t->listen_host, t->listen_port);
    if (rc) {
        bm_log(BM_LOG_ERROR, "cannot listen on %s:%u: %s", t->listen_host, t->listen_port,
               bm_strerror(rc));
        bm_server_free(srv); /* never listened: its handles close from the loop */
        return NULL;
    }
    bool v6 = strchr(t->listen_host, ':') != NULL;
    bm_log(BM_LOG_INFO, "listening on https://%s%s%s:%d%s%s", v6 ? "[" : "", t->listen_host,
           v6 ? "]" : "", bm_server_port(srv),
           t->require_client_cert ? " (client certificates required)" : "",
           fd >= 0 ? " (socket from systemd)" : "");
    tls_addr_of(c, a->tls_addr, sizeof a->tls_addr);
    return srv;
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

/* SIGHUP: the TLS listener's certificate, key and client CA are read again from the paths
 * the configuration applied last names (a renewed certificate at the same path, or new
 * paths); a file that does not load keeps the context it had (logged). */
static void reload_tls(app_t *a)
{
    const bm_config_t *c = bm_reload_config(a->reload);
    if (a->tls_server && c->server.tls.listen_host)
        bm_tlslisten_reload(a->tls_server, &c->server.tls);
}

/* reload: server.tls.listen as `c` says. At the same address the listener stays and reads
 * its files again (reload_tls). At a new one (or a first one) a new listener is opened
 * first, with `c`'s certificate; the old one then stops accepting and its connections
 * finish within server.shutdownTimeout, as the API's rebind does. A new listener that
 * cannot be opened (a certificate that does not load, an address in use, a public address
 * with nothing to guard it) leaves the old one serving (logged). */
static void set_tls_listener(app_t *a, const bm_config_t *c)
{
    char want[sizeof a->tls_addr];
    tls_addr_of(c, want, sizeof want);
    if (strcmp(want, a->tls_addr) == 0) {
        reload_tls(a); /* server.tls's paths may have changed with the file */
        return;
    }
    bm_server_t *srv = NULL;
    if (*want) {
        const char *exposed = tls_exposure(c);
        if (exposed)
            bm_log(BM_LOG_ERROR, "reload: server.tls.listen %s: %s", c->server.tls.listen_host,
                   exposed);
        else if (a->n_old_servers == MAX_OLD_SERVERS)
            bm_log(BM_LOG_ERROR, "reload: %d previous listeners still draining", MAX_OLD_SERVERS);
        else
            srv = open_tls_listener(a, c);
        if (!srv) {
            bm_log(BM_LOG_ERROR, "reload: the TLS listener stays as it was");
            return;
        }
    }
    bm_server_t *old = a->tls_server;
    a->tls_server = srv;
    if (!srv) {
        a->tls_addr[0] = '\0';
        bm_log(BM_LOG_INFO, "reload: server.tls.listen removed: the TLS listener closes");
    }
    if (!old)
        return;
    if (a->n_old_servers < MAX_OLD_SERVERS)
        a->old_servers[a->n_old_servers++] = old;
    bm_server_shutdown(old, c->server.shutdown_timeout_ms, on_old_server_drained, a);
}

/* At every switch (and at the start): state.driver redis shares the new front's global
 * buckets; the previous sharing stops before its front is freed. */
static void on_switch(const bm_config_t *c, bm_front_t *front, void *ud)
{
    app_t *a = ud;
    bm_sharedlimit_free(a->limits);
    a->limits = c->state.driver == BM_STATE_REDIS ? bm_sharedlimit_new(&a->loop, c, front) : NULL;
    if (a->running)
        set_tls_listener(a, c);
}

/* Takes `cfg` (validated). */
static int build(app_t *a, bm_config_t *cfg)
{
    /* secure by default: duty and write routes are never open to a whole network */
    const char *exposed = bm_front_exposure_problem(cfg->listen_host, cfg->auth.n_keys,
                                                    cfg->server.n_allowed_clients);
    if (exposed) {
        bm_log(BM_LOG_ERROR, "listen %s: %s", cfg->listen_host, exposed);
        bm_config_free(cfg);
        return BM_EINVAL;
    }
    if ((exposed = tls_exposure(cfg)) != NULL) {
        bm_log(BM_LOG_ERROR, "server.tls.listen %s: %s", cfg->server.tls.listen_host, exposed);
        bm_config_free(cfg);
        return BM_EINVAL;
    }
    bm_reload_server_t hooks = {set_server_limits, rebind, set_metrics_listener, on_switch, a};
    if (!(a->reload = bm_reload_new(&a->loop, cfg, &a->cli, &hooks)))
        return BM_EINVAL;
    const bm_config_t *c = bm_reload_config(a->reload);
    on_switch(c, bm_reload_front(a->reload), a);
    int rc = match_activated(a, c);
    if (rc)
        return rc;
    /* first, so that a certificate that does not load stops the start before any listens */
    if (c->server.tls.listen_host && !(a->tls_server = open_tls_listener(a, c)))
        return BM_ETLS;
    /* before the API: once "listening on" is logged, every listener is bound */
    if ((rc = listen_metrics(a, c)) != 0)
        return rc;
    if (!(a->server = open_listener(a, c)))
        return BM_EIO;
    bm_reload_set_listener(a->reload, a->server);
    /* READY=1 once a node is usable: of the networks of every generation (a reload before
     * the first node came may replace them) */
    if ((rc = bm_reload_on_node_state(a->reload, on_node_state, a)) != 0)
        return rc;
    if (a->no_wait)
        notify_ready(a, "--no-wait");
    return bm_reload_start(a->reload);
}

static void close_signals(app_t *a)
{
    if (a->watchdog_on && !uv_is_closing((uv_handle_t *)&a->watchdog))
        uv_close((uv_handle_t *)&a->watchdog, NULL);
    bm_memtrim_stop();
    uv_signal_t *s[] = {&a->sigterm, &a->sigint, &a->sighup};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (!uv_is_closing((uv_handle_t *)s[i]))
            uv_close((uv_handle_t *)s[i], NULL);
}

/* The networks' detached writes are done; nothing keeps the loop any more. */
static void on_networks_drained(void *ud)
{
    close_signals(ud);
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
    bm_reload_drain(a->reload, bm_reload_config(a->reload)->server.shutdown_timeout_ms,
                    on_networks_drained, a);
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
    uint32_t grace = bm_reload_config(a->reload)->server.shutdown_timeout_ms;
    bm_log(BM_LOG_INFO, "%s: shutting down (in-flight requests get up to %u ms)",
           signum == SIGTERM ? "SIGTERM" : "SIGINT", grace);
    bm_systemd_notify("STOPPING=1\nSTATUS=draining");
    bm_reload_stop(a->reload); /* a reload in progress is abandoned */
    a->servers_draining = a->tls_server ? 2 : 1;
    if (a->metrics_server)
        bm_server_shutdown(a->metrics_server, grace, NULL, NULL);
    bm_server_shutdown(a->server, grace, on_server_drained, a);
    if (a->tls_server)
        bm_server_shutdown(a->tls_server, grace, on_server_drained, a);
    for (size_t i = 0; i < a->n_old_servers; i++) /* already draining: a no-op but the log */
        bm_server_shutdown(a->old_servers[i], grace, on_old_server_drained, a);
}

/* SIGHUP: read the configuration file again and apply what changed (app/reload.h); the TLS
 * listener's files are read again at once, whatever the file says (a renewed certificate
 * at the same path), and again at the switch if the reload applies new paths. */
static void on_sighup(uv_signal_t *s, int signum)
{
    app_t *a = s->data;
    (void)signum;
    bm_log(BM_LOG_INFO, "SIGHUP: reloading the configuration");
    reload_tls(a);
    bm_reload_request(a->reload);
}

/* The start failed: the listeners that opened stop accepting now. An open listener would
 * keep the loop running (the process would hang instead of exiting), and the loop that
 * closes the networks must not accept clients for them. */
static void close_listeners_after_failed_start(app_t *a)
{
    bm_server_t *open[] = {a->server, a->tls_server, a->metrics_server};
    for (size_t i = 0; i < sizeof open / sizeof open[0]; i++)
        if (open[i])
            bm_server_shutdown(open[i], 0, NULL, NULL); /* no client was accepted yet */
}

/* The start failed (`rc`): one line that says so, and the same to systemd, which then
 * sees the process exit with status 1 (a unit that was told READY=1 with --no-wait is
 * told it stops). */
static void report_failed_start(app_t *a, int rc)
{
    bm_log(BM_LOG_ERROR, "start failed (%s): exiting with status 1", bm_strerror(rc));
    char msg[200];
    snprintf(msg, sizeof msg, "%sSTATUS=start failed: %s (see the log)",
             a->ready_sent ? "STOPPING=1\n" : "", bm_strerror(rc));
    if (bm_systemd_notify(msg) != 0)
        bm_log(BM_LOG_WARN, "systemd: cannot notify NOTIFY_SOCKET");
}

static void teardown(app_t *a)
{
    bm_sharedlimit_free(a->limits);
    a->limits = NULL;
    if (!a->running)
        close_listeners_after_failed_start(a);
    /* the networks' observes go with the reload module: no request reaches them any more */
    if (a->server)
        bm_server_on_end(a->server, NULL, NULL);
    if (a->tls_server)
        bm_server_on_end(a->tls_server, NULL, NULL);
    if (a->metrics_server)
        bm_server_on_end(a->metrics_server, NULL, NULL);
    for (size_t i = 0; i < a->n_old_servers; i++)
        bm_server_on_end(a->old_servers[i], NULL, NULL);
    if (a->reload)
        bm_reload_set_listener(a->reload, NULL); /* freed below */
    if (!a->running) { /* the start failed: networks built but never started nor drained */
        bm_reload_free(a->reload);
        a->reload = NULL;
    }
    uv_run(&a->loop, UV_RUN_DEFAULT);
    if (a->server)
        bm_server_free(a->server);
    if (a->tls_server)
        bm_server_free(a->tls_server);
    if (a->metrics_server)
        bm_server_free(a->metrics_server);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    bm_reload_free(a->reload); /* the networks, the front and every configuration */
    if (uv_loop_close(&a->loop) != 0)
        bm_log(BM_LOG_WARN, "shutdown: handles still open on the loop");
}

/* --check: the configuration as it would run, warnings on stderr. Takes `cfg`. */
static int check(bm_config_t *cfg)
{
    const char *deprecated = bm_config_deprecation(cfg);
    if (deprecated)
        fprintf(stderr, "beaconmux: warning: %s\n", deprecated);
    const char *exposed = bm_front_exposure_problem(cfg->listen_host, cfg->auth.n_keys,
                                                    cfg->server.n_allowed_clients);
    if (exposed)
        fprintf(stderr, "beaconmux: warning: listen %s: %s\n", cfg->listen_host, exposed);
    if ((exposed = tls_exposure(cfg)) != NULL)
        fprintf(stderr, "beaconmux: warning: server.tls.listen %s: %s\n",
                cfg->server.tls.listen_host, exposed);
    char why[512];
    bm_tls_ctx_t *tls = NULL;
    if (cfg->server.tls.listen_host &&
        !(tls = bm_tlslisten_ctx(&cfg->server.tls, why, sizeof why))) {
        fprintf(stderr, "beaconmux: server.tls: %s\n", why);
        bm_config_free(cfg);
        return 2;
    }
    bm_tls_ctx_unref(tls);
    bm_str_t dump = BM_STR_INIT;
    bm_config_dump(cfg, true, &dump);
    printf("configuration OK%s%s\n%s", cfg->path ? ": " : "", cfg->path ? cfg->path : "",
           bm_str_data(&dump));
    bm_str_dispose(&dump);
    bm_config_free(cfg);
    return 0;
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
    static app_t a; /* the command line it holds is read again by every reload */
    bm_config_err_t err;
    if (bm_cli_parse(argc, argv, &a.cli, &err) != 0) {
        fprintf(stderr, "beaconmux: %s\n", err.msg); /* the message carries the usage */
        return 2;
    }
    if (a.cli.help) {
        fputs(bm_cli_help(), stdout);
        return 0;
    }
    if (a.cli.version) {
        printf("beaconmux %s\n", BM_VERSION);
        return 0;
    }
    bm_config_t *cfg = bm_cli_load(&a.cli, &err);
    if (!cfg) {
        fprintf(stderr, "beaconmux: %s\n", err.msg);
        return 2;
    }
    if (a.cli.check)
        return check(cfg);
    bm_log_setup(cfg->log.level, cfg->log.format, NULL);
    const char *deprecated = bm_config_deprecation(cfg);
    if (deprecated)
        bm_log(BM_LOG_WARN, "%s", deprecated);
    signal(SIGPIPE, SIG_IGN);
    check_fd_limit(cfg);
    uv_loop_init(&a.loop);
    uv_signal_init(&a.loop, &a.sigterm);
    uv_signal_init(&a.loop, &a.sigint);
    uv_signal_init(&a.loop, &a.sighup);
    a.sigterm.data = a.sigint.data = a.sighup.data = &a;
    a.no_wait = a.cli.no_wait;
    for (int l = 0; l < N_LISTENERS; l++)
        a.activated[l] = -1; /* until build matches the sockets from systemd */
    if (cfg->n_networks)
        bm_log(BM_LOG_INFO, "beaconmux %s starting with %zu networks", BM_VERSION, cfg->n_networks);
    else
        bm_log(BM_LOG_INFO, "beaconmux %s starting with %zu upstream%s", BM_VERSION,
               cfg->n_upstreams, cfg->n_upstreams == 1 ? "" : "s");
    /* before anything says it listens or is ready: a SIGTERM sent right after READY=1 (or
     * after the "listening" line) must start a graceful shutdown, not kill the process. The
     * callbacks run only once the loop runs, after build; until then the handles do not
     * keep the loop alive (a network that fails to build runs the loop to close its own). */
    uv_signal_start(&a.sigterm, on_signal, SIGTERM);
    uv_signal_start(&a.sigint, on_signal, SIGINT);
    uv_unref((uv_handle_t *)&a.sigterm);
    uv_unref((uv_handle_t *)&a.sigint);
    int rc = build(&a, cfg);
    if (rc != 0) {
        report_failed_start(&a, rc);
        a.exit_code = 1;
        close_signals(&a);
    } else {
        uv_ref((uv_handle_t *)&a.sigterm);
        uv_ref((uv_handle_t *)&a.sigint);
        uv_signal_start(&a.sighup, on_sighup, SIGHUP);
        start_watchdog(&a);
        bm_memtrim_set(&a.loop, bm_reload_config(a.reload)->server.memory_trim_interval_ms);
        a.running = true;
        uv_run(&a.loop, UV_RUN_DEFAULT);
        bm_log(BM_LOG_INFO, "stopped");
    }
    teardown(&a);
    return a.exit_code;
}
