/* SPDX-License-Identifier: MIT */
/*
 * network: everything beaconmux runs for one network, owned by one object: the upstream
 * client, the pool of nodes, discovery, health, the head tracker and the monitor that feeds
 * it, the cluster event stream, the race engine and the duty policies, broadcast and
 * replay, the read path and its response cache, observe (metrics, the duty journal, the
 * dashboard), the admin routes and the router that maps
 * this network's routes to them. A process serves one network (the configuration's top
 * level) or several (`networks:`); the server, the log and the edge's front are global and
 * live in main.
 *
 * Life: bm_network_new builds and wires it (nothing runs yet); bm_network_start starts
 * discovery and the node streams; on shutdown bm_network_stop_streams ends the event
 * stream's subscribers at once, bm_network_drain lets detached writes finish within a
 * bound, and bm_network_free tears everything down (the loop is run inside to let handles
 * close).
 */
#ifndef BM_NETWORK_H
#define BM_NETWORK_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "app/config.h"
#include "base/buf.h"
#include "cluster/pool.h"
#include "http/router.h"
#include "observe/observe.h"

typedef struct bm_network bm_network_t;

/**
 * Builds network `i` of `cfg` (bm_config_network) on `loop`. `cfg` must outlive it. NULL on
 * failure (logged).
 */
bm_network_t *bm_network_new(uv_loop_t *loop, const bm_config_t *cfg, size_t i);

/** Starts discovery and the monitor. 0 or a BM_E* code. */
int bm_network_start(bm_network_t *n);

/** Its id (NULL for the one network of a file without `networks:`). */
const char *bm_network_id(const bm_network_t *n);

/** The router of its routes. */
bm_router_t *bm_network_router(bm_network_t *n);

/** Its observe (metrics, journal, dashboard), for the process's /metrics and its requests. */
bm_observe_t *bm_network_observe(bm_network_t *n);

/** /healthz's status for it (200 when a node is usable, else 503); `ud` is the network. */
int bm_network_health(void *ud);

/** Appends its status page object; `ud` is the network. */
void bm_network_status(bm_str_t *out, void *ud);

/** Adds a section to its status page (the front's counters); 0 or BM_ENOMEM. */
int bm_network_add_status(bm_network_t *n, const char *name, void (*fn)(bm_str_t *out, void *ud),
                          void *ud);

/** Shutdown, first step: the event stream's subscribers end now, cached reads stop. */
void bm_network_stop_streams(bm_network_t *n);

/**
 * Shutdown, after the clients were answered: broadcasts stop taking new writes, writes
 * still reaching nodes get up to `grace_ms`; then background work stops and `done` runs
 * once, from the loop.
 */
void bm_network_drain(bm_network_t *n, uint32_t grace_ms, void (*done)(void *ud), void *ud);

/**
 * Reload: true once every node left its first "unknown" state (discovered, or found
 * unreachable or on the wrong network) and, when a node is ready, the cluster head is known:
 * a network built by a reload takes clients from then on.
 */
bool bm_network_settled(const bm_network_t *n);

/**
 * Reload: copies the replay memory of `from` (preparations, registrations, proposer
 * preferences, committee and sync subscriptions, each with its expiry) into `to`, which was
 * built and not started: when `to` starts, each node it discovers is replayed to, a node new
 * in the configuration included. The producer memory too (slot -> producing node, by node
 * id: a node `to` does not configure is left out), so that a blinded block or envelope still
 * goes to its producer first after the reload, and with state.driver redis both are
 * written to the Redis `to` connects to (which may be another, or empty). The clients that
 * stick to a node (routing.stickySessions) and the nodes' SSZ refusals too, by node id, so
 * that a reload does not move a client's reads nor cost a 415 again. 0 or a BM_E* code.
 */
int bm_network_adopt_memory(bm_network_t *to, const bm_network_t *from);

/** Reload, a network kept as it runs: with state.driver redis, its local records are
 *  written back to Redis (newer wins), as after an outage: a Redis flushed (or replaced at
 *  the same address) since is filled again by a SIGHUP. Nothing otherwise. */
void bm_network_share_again(bm_network_t *n);

/** Reload, a replaced network: its event stream subscribers end now (they reconnect to the
 *  network that replaced it); requests in flight go on. */
void bm_network_end_subscribers(bm_network_t *n);

/**
 * Reload, once no client request of `n` is in flight any more and bm_network_drain's `done`
 * ran: stops and frees it without running the loop (the loop is running: this is called
 * from it). `done` runs from the loop once it is freed. Replaces bm_network_free.
 */
void bm_network_release(bm_network_t *n, void (*done)(void *ud), void *ud);

/** A network a reload built replaces this one: it writes the stateDir file from now on,
 *  this one saves no more (not at its stop either). */
void bm_network_hand_over_state(bm_network_t *n);

/** Tears it down (runs the loop to let handles close). NULL is ignored. */
void bm_network_free(bm_network_t *n);

/** Registers a listener of the network's node state transitions (bm_pool_on_state):
 *  main's readiness report to systemd. Returns 0 or BM_ENOMEM. */
int bm_network_on_node_state(bm_network_t *n, bm_pool_state_fn fn, void *ud);

#endif /* BM_NETWORK_H */
