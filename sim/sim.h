/* SPDX-License-Identifier: MIT */
/*
 * sim: the beaconsim runtime. One libuv loop runs every node's HTTP server, each node's
 * import timer (armed at the node's next due import, so an idle cluster sleeps), the
 * event-stream keep-alives and the control server. It applies behaviour changes that
 * touch the network (down closes the port, hang holds requests, slow delays them) and
 * owns the per-node state that the api, events_out and control modules share.
 */
#ifndef BS_SIM_H
#define BS_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "chain.h"
#include "node.h"
#include "base/list.h"
#include "http/server.h"
#include "spec.h"

typedef struct bs_sim bs_sim_t;
typedef struct bs_sub bs_sub_t;
typedef struct bs_pending bs_pending_t;

typedef struct bs_sim_cfg {
    bs_chain_cfg_t chain;      /* genesis_ms is computed by bs_sim_new from the delay */
    uint32_t genesis_delay_ms; /* genesis = now + delay, rounded up to a whole second */
    uint32_t nodes;            /* 1..BS_MAX_NODES */
    int base_port;             /* node i on base_port + i; 0: free ports */
    char host[64];             /* listen address of the nodes (default 127.0.0.1) */
    char control_host[64];     /* control API address */
    int control_port;          /* 0: free port */
    bs_behav_t behav[BS_MAX_NODES];
} bs_sim_cfg_t;

/** Defaults: 3 nodes, 12 s slots, 32 slots per epoch, free ports on 127.0.0.1. */
void bs_sim_cfg_default(bs_sim_cfg_t *c);

/** Runtime state of one node. */
typedef struct bs_simnode {
    bs_node_t node;
    bs_sim_t *sim;
    bm_server_t *srv; /* NULL while down */
    int port;
    uv_timer_t timer;     /* next import / payload arrival */
    uv_timer_t keepalive; /* ":" comments on event streams */
    bool keepalive_on;
    bm_link_t subs;    /* event-stream subscribers (bs_sub_t) */
    bm_link_t pending; /* requests held by hang or delayed by slow (bs_pending_t) */
    uint32_t nsubs;
} bs_simnode_t;

struct bs_sim {
    uv_loop_t *loop;
    bs_sim_cfg_t cfg;
    bs_chain_t *chain;
    bs_simnode_t *nodes;
    uint32_t nnodes;
    bm_server_t *control;
    int control_port;
    bool stopping;
    int servers_open; /* servers whose shutdown has not completed */
    void (*stop_done)(bs_sim_t *s, void *ud);
    void *stop_ud;
    int handles_open; /* timers not yet closed */
    void *api_cache;  /* cluster-wide answers (spec, fork schedule), owned by api */
};

/** Creates the runtime (chain, nodes) on `loop`; nothing listens yet. NULL on failure. */
bs_sim_t *bs_sim_new(uv_loop_t *loop, const bs_sim_cfg_t *cfg);

/** Binds every node and the control server. Returns 0 or a BM_E* code. */
int bs_sim_start(bs_sim_t *s);

/** Stops everything; `done` runs when every server and handle is closed. */
void bs_sim_stop(bs_sim_t *s, void (*done)(bs_sim_t *s, void *ud), void *ud);

/** Frees the runtime (after stop completed, or if it never started). */
void bs_sim_free(bs_sim_t *s);

/** Applies a behaviour change to node i (reset: from the default behaviour first). */
int bs_sim_set_behav(bs_sim_t *s, uint32_t i, const bs_behav_t *delta, bool reset);

/** Re-arms node i's import timer after anything that changed its schedule. */
void bs_sim_rearm(bs_simnode_t *sn);

/** Advances every node to now (after a scenario changed the chain) and re-arms them. */
void bs_sim_touch_all(bs_sim_t *s);

/** Wall-clock milliseconds (the one clock the runtime uses). */
uint64_t bs_sim_now(void);

/* ---- provided by api.c ------------------------------------------------------------- */

/** Handles one request to node sn (after hang/slow are applied); `route` comes from
 *  bs_api_route_find on the same request. */
void bs_api_dispatch(bs_simnode_t *sn, bm_req_t *req, int route);

/** Route index for (method, path); -1 unknown path, -2 known path but wrong method. */
int bs_api_route_find(const char *method, const char *path, size_t len);

/** Route name by index (operationId), and the count of routes. */
const char *bs_api_route_name(int i);
int bs_api_route_count(void);

/** Frees cluster-wide caches. */
void bs_api_free_cache(bs_sim_t *s);

/* ---- provided by events_out.c ------------------------------------------------------- */

/** Turns a GET /eth/v1/events request into a subscriber (answers 400 on bad topics). */
void bs_events_open(bs_simnode_t *sn, bm_req_t *req);

/** The node emit hook: writes an event to the node's subscribers. */
void bs_events_emit(bs_node_t *n, bs_topic_t topic, bm_buf_t *data, void *ud);

/** Writes ":" keep-alive comments to every subscriber of a node. */
void bs_events_keepalive(bs_simnode_t *sn);

/** Closes every event stream of the node (down, shutdown). */
void bs_events_close_all(bs_simnode_t *sn);

/* ---- provided by control.c ----------------------------------------------------------- */

/** Handles one control API request. */
void bs_control_handle(bm_req_t *req, void *ud);

#endif /* BS_SIM_H */
