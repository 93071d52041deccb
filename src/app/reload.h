/* SPDX-License-Identifier: MIT */
/*
 * reload: the running configuration and everything built from it (the front and the
 * networks), and its replacement on SIGHUP without a restart.
 *
 * A reload reads the file again with the very code of the start and of `--check` (the
 * command line still overlaid), validates it in full, and on any error keeps running as it
 * was and logs why (file:line:col). Then it compares (app/reload_diff.h) and applies:
 *   1. every network whose keys changed, and every new one, is built beside the running
 *      ones, gets the replay memory of the network it replaces, and is started: its nodes
 *      are discovered, their event streams connect, and each discovered node is given the
 *      replayed validator state (a node new in the file included);
 *   2. once each of them settled (bm_network_settled, or at most RELOAD_SETTLE_MAX_MS), a
 *      new generation takes every new request: a new front (keys, CORS, rate limits,
 *      clients) over the kept and the new networks; the log level and format apply;
 *   3. a network the new generation does not route to lives on until the last request
 *      dispatched to it ended (counted per network with bm_req_on_end): requests in flight
 *      finish on the objects they started on. Its event stream subscribers are ended at the
 *      switch (they reconnect and land on the new network). Then it lets its detached
 *      writes reach the nodes (server.shutdownTimeout), stops and is freed. The replaced
 *      front holds nothing of a request once its handler returned: it is freed at once.
 * The server is main's: new limits and timeouts are handed to it (they apply to what
 * starts afterwards), and a new listen address is bound by it while the old listener
 * stops accepting and lets its connections finish what they are doing; an address that
 * cannot be bound leaves the old one listening (logged) and the rest of the reload applied.
 *
 * A SIGHUP while a reload runs (step 1) is remembered: one more reload follows when it ends
 * (any number of signals meanwhile make one). bm_reload_stop (SIGTERM) abandons a reload in
 * progress: the networks it built never took a request and are stopped and freed.
 *
 * Ownership: the module owns every configuration it applied (a network borrows from the one
 * it was built from, which lives as long as the network), every generation and network.
 * All callbacks run from the loop.
 */
#ifndef BM_RELOAD_H
#define BM_RELOAD_H

#include <stdint.h>
#include <uv.h>

#include "app/cli.h"
#include "app/config.h"
#include "cluster/pool.h"
#include "edge/front.h"
#include "http/server.h"

typedef struct bm_reload bm_reload_t;

/** What a reload asks of the server's owner (main). Called from the loop, at the switch. */
typedef struct bm_reload_server {
    /* server.* (limits, timeouts) changed: apply `cfg`'s */
    void (*set_limits)(const bm_config_t *cfg, void *ud);
    /* listen changed: listen on `cfg`'s address, the old listener drains. 0, or a BM_E*
     * code (logged by it) when the old one keeps listening */
    int (*rebind)(const bm_config_t *cfg, void *ud);
    /* at every switch: metrics.listen as `cfg` says (bound anew when it changed, the old
     * listener drains; none when it went) */
    void (*metrics_listen)(const bm_config_t *cfg, void *ud);
    /* after every switch, `front` the new generation's (the previous one is freed on the
     * next turn of the loop): whatever holds the front is handed the new one */
    void (*switched)(const bm_config_t *cfg, bm_front_t *front, void *ud);
    void *ud;
} bm_reload_server_t;

/**
 * Builds the first generation from `cfg` (validated; ownership taken, even on failure) on
 * `loop`. `cli` (borrowed, must outlive it) is what a reload reads the file with; `server`
 * is copied. Nothing runs yet. NULL on failure (logged).
 */
bm_reload_t *bm_reload_new(uv_loop_t *loop, bm_config_t *cfg, const bm_cli_t *cli,
                           const bm_reload_server_t *server);

/** Starts the networks (discovery, node streams). 0 or a BM_E* code (logged). */
int bm_reload_start(bm_reload_t *rl);

/** The server handler: pass the module as the server's `ud`. */
void bm_reload_handle(bm_req_t *req, void *rl);

/** The metrics.listen server's handler (`ud` the module): the current generation's
 *  metrics routes (one network's, or every network's /metrics). */
void bm_reload_handle_metrics(bm_req_t *req, void *rl);

/** The servers' end listener (bm_server_on_end, `ud` the module): every ended request is
 *  counted and logged by the observe of the network that took it, else the first one's. */
void bm_reload_request_ended(const bm_req_summary_t *s, void *rl);

/** The API listener (main's, and again after a rebind): every network's observe shows its
 *  connections. At every switch the networks' observes are pointed at the new front too. */
void bm_reload_set_listener(bm_reload_t *rl, bm_server_t *srv);

/** Node state changes of every network, those a reload builds later included (main's
 *  readiness notice). 0 or BM_ENOMEM. */
int bm_reload_on_node_state(bm_reload_t *rl, bm_pool_state_fn fn, void *ud);

/** The current generation's front (borrowed; valid until the next switch). */
bm_front_t *bm_reload_front(const bm_reload_t *rl);

/** The configuration applied last (borrowed; valid until the next reload applies). */
const bm_config_t *bm_reload_config(const bm_reload_t *rl);

/** SIGHUP: reloads now, or once more after the reload that runs (see above). */
void bm_reload_request(bm_reload_t *rl);

/**
 * Shutdown, first step: no reload any more (one in progress is abandoned), the current
 * networks' event stream subscribers end now. Call before bm_server_shutdown.
 */
void bm_reload_stop(bm_reload_t *rl);

/**
 * Shutdown, after the server drained: the current networks let their detached writes reach
 * the nodes within `grace_ms`, then stop; `done` runs once, from the loop.
 */
void bm_reload_drain(bm_reload_t *rl, uint32_t grace_ms, void (*done)(void *ud), void *ud);

/** Frees everything once the loop has ended (runs the loop inside). NULL is ignored. */
void bm_reload_free(bm_reload_t *rl);

#endif /* BM_RELOAD_H */
