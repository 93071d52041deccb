/* SPDX-License-Identifier: MIT */
/*
 * observe: what beaconmux shows of itself. It gathers, at the moment they happen, the few
 * figures no other module keeps (each served duty read and its race time, the duty
 * journal, head arrivals per node and slot, cluster head moves by cause, the cluster's
 * finalized epoch, requests by route class and status class), and serves:
 *   - /metrics: the Prometheus exposition (observe/metrics.h), read from every module's own
 *     counters at scrape time and from the figures above;
 *   - /beaconmux/v1/journal?from_slot=&to_slot=: the duty journal (observe/journal.h);
 *   - /ui/: the web dashboard (observe/ui.h), and /beaconmux/v1/dashboard, the one document
 *     it polls (the status page, the head arrivals of the last 64 slots, the journal's
 *     last slots and its counts);
 *   - the access log (log.access): one line per request.
 *
 * How the journal is fed: every duty read served by attest and produce comes as a record
 * (duties/serve.h); at every slot start (the head tracker's tick) the slot two slots back
 * is settled against the cluster chain (bm_head_root_at_slot: get_block_root_at_slot on the
 * chain the tracker follows), and when a node reports a finalized checkpoint that is on the
 * cluster chain, every slot up to its epoch's start is settled finally.
 *
 * With several networks there is one observe per network (app/network.c); the server and
 * the front are the process's, and app/main.c hands each ended request to its network's
 * observe (bm_observe_request_ended) and serves the networks' expositions merged under
 * one /metrics (bm_metrics_write_merged).
 *
 * Everything it reads is borrowed and must outlive it; it writes to no other module. All
 * callbacks run on the loop; nothing here allocates per request (the access log formats on
 * the stack and through the logger).
 */
#ifndef BM_OBSERVE_H
#define BM_OBSERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/hist.h"
#include "cluster/chain.h"
#include "cluster/events.h"
#include "cluster/head.h"
#include "cluster/monitor.h"
#include "cluster/pool.h"
#include "duties/aggregate.h"
#include "duties/attest.h"
#include "duties/broadcast.h"
#include "duties/duties.h"
#include "duties/produce.h"
#include "duties/replay.h"
#include "duties/serve.h"
#include "edge/cache.h"
#include "edge/front.h"
#include "http/router.h"
#include "http/server.h"
#include "observe/arrivals.h"
#include "observe/journal.h"
#include "read/readpath.h"

#define BM_OBSERVE_MAX_CLASSES 16 /* route classes counted (more share the last, "other") */

typedef struct bm_observe_opts {
    uint32_t journal_slots;   /* journal.slots; 0: no journal (and no witness requests) */
    bool access_log;          /* log.access */
    bool metrics;             /* metrics.enabled */
    const char *metrics_path; /* metrics.path (copied) */
    bool ui;                  /* ui.enabled */
} bm_observe_opts_t;

/** Fills `o` with the defaults of the configuration. */
void bm_observe_opts_default(bm_observe_opts_t *o);

/** The modules it reads; any but pool may be NULL (their figures are left out). */
typedef struct bm_observe_sources {
    bm_pool_t *pool;
    bm_head_t *head;
    bm_monitor_t *monitor;
    const bm_chain_info_t *chain; /* the chain's clock: discovery's, read live */
    bm_events_t *events;
    bm_attest_t *attest;
    bm_produce_t *produce;
    bm_aggregate_t *aggregate;
    bm_duties_t *duties;
    bm_broadcast_t *broadcast;
    bm_replay_t *replay;
    bm_readpath_t *readpath;
    bm_cache_t *cache;       /* the response cache in front of the read path */
    bm_server_t *server;     /* the API listener (connections); or bm_observe_set_server */
    const bm_front_t *front; /* keys, CORS, rate limits: the process's (bm_observe_set_front) */
} bm_observe_sources_t;

/** Status classes of responses: 1xx..5xx, and none (the client left before one). */
enum {
    BM_CODE_NONE = 0,
    BM_CODE_1XX,
    BM_CODE_2XX,
    BM_CODE_3XX,
    BM_CODE_4XX,
    BM_CODE_5XX,
    BM_CODE_CLASSES
};

/** The figures observe keeps itself, for the exposition. */
typedef struct bm_observe_figures {
    /* served duty reads, per bm_duty_read_t */
    bm_hist_t race[BM_DUTY_READ_COUNT];                         /* seconds, 1 ms to 2 s */
    uint64_t served[BM_DUTY_READ_COUNT][BM_ANSWER_CLASS_COUNT]; /* requests by served class */
    uint64_t races[BM_DUTY_READ_COUNT];                         /* races that served */
    uint64_t remote_records; /* ... of which served by other instances (shared state) */
    /* the cluster head */
    uint64_t moves_extension, moves_quorum, moves_reorg;
    bm_hist_t reorg_depth; /* slots */
    bool finalized_known;
    uint64_t finalized_epoch;
    /* requests by route class x status class */
    const char *classes[BM_OBSERVE_MAX_CLASSES];
    size_t n_classes;
    uint64_t requests[BM_OBSERVE_MAX_CLASSES][BM_CODE_CLASSES];
    bm_hist_t request_seconds[BM_OBSERVE_MAX_CLASSES];
    /* the journal and the arrivals (NULL when off / before the first node) */
    const bm_journal_t *journal;
    const bm_arrivals_t *arrivals;
} bm_observe_figures_t;

typedef struct bm_observe bm_observe_t;

/**
 * Creates the module over `src` (copied; the modules borrowed) with `opts` (NULL:
 * defaults). It starts listening at once: to the tracker (ticks, moves, node views), the
 * monitor (finalized checkpoints), attest and produce (records of served reads) and the
 * server (ended requests). NULL on allocation failure.
 */
bm_observe_t *bm_observe_new(const bm_observe_sources_t *src, const bm_observe_opts_t *opts);

/** Stops listening and frees it. Before the modules it reads. NULL is ignored. */
void bm_observe_free(bm_observe_t *o);

/** The listener whose connections the exposition shows (the API's; the server is made
 *  after the networks). */
void bm_observe_set_server(bm_observe_t *o, bm_server_t *srv);

/** The front before the API listener (its rejections and rate limits in the exposition). */
void bm_observe_set_front(bm_observe_t *o, const bm_front_t *front);

/**
 * A request that ended (a server's end listener, bm_server_on_end, with `ud` the observe
 * of the request's network): counted by route class and status class, and written to the
 * access log when log.access is on, with this network's node ids.
 */
void bm_observe_request_ended(const bm_req_summary_t *s, void *ud);

/**
 * The status document (the admin module's) for /beaconmux/v1/dashboard: `fn` appends it.
 * Without one the dashboard document carries none.
 */
void bm_observe_set_status(bm_observe_t *o, void (*fn)(bm_str_t *out, void *ud), void *ud);

/**
 * Registers on `r`: /metrics at metrics.path (when metrics are on and `with_metrics`), the
 * journal, the dashboard document and /ui/ (when the UI is on). Returns 0 or BM_ENOMEM.
 */
int bm_observe_register(bm_observe_t *o, bm_router_t *r, bool with_metrics);

/** The figures it keeps. */
const bm_observe_figures_t *bm_observe_figures(const bm_observe_t *o);

/** The sources it reads. */
const bm_observe_sources_t *bm_observe_sources(const bm_observe_t *o);

/** The record sink of served duty reads (what attest and produce call): exported for tests. */
void bm_observe_served(const bm_served_t *s, void *ud);

/** Calls `fn` with every record of this instance once it was taken (shared state publishes
 *  it to the other instances); NULL stops it. */
void bm_observe_on_local_served(bm_observe_t *o, bm_served_fn fn, void *ud);

/** Families of a module above this layer (shared state's Redis connections), appended to
 *  the network's exposition by `fn` at every scrape (NULL: none). */
void bm_observe_set_metrics_extra(bm_observe_t *o, void (*fn)(bm_str_t *out, void *ud), void *ud);

/** Appends those families (nothing when none are set). */
void bm_observe_metrics_extra(const bm_observe_t *o, bm_str_t *out);

/** A record served by another instance: its answers counted and journaled as if served
 *  here (the journal merges it with identical records of its slot; the race time
 *  histogram stays this instance's own), counted in remote_records, and never handed to
 *  the listener above (so it is never sent back). */
void bm_observe_served_remote(bm_observe_t *o, const bm_served_t *s);

/**
 * Settles the journal as the clock and the cluster chain say at `now_ms`: every slot up
 * to two before the current one provisionally. Runs at every tick of the tracker;
 * exported for tests.
 */
void bm_observe_tick(bm_observe_t *o, uint64_t now_ms);

/**
 * A finalized checkpoint reported by `node`: when its root is the cluster chain's at the
 * epoch's first slot and the epoch is newer, the slots up to that first slot are settled
 * finally. Exported for tests.
 */
void bm_observe_finalized(bm_observe_t *o, size_t node, uint64_t epoch, const uint8_t root[32]);

/**
 * State kept across restarts (app/statedir.h sections; `ud` is the observe): the duty
 * journal's counts and newest slots (bm_journal_export / bm_journal_import, nodes by their
 * pool ids). Both return BM_ENOTFOUND when the journal is off (journal.slots: 0).
 */
int bm_observe_export_journal(void *ud, uint64_t now_ms, bm_str_t *out);
int bm_observe_import_journal(void *ud, const char *json, size_t len, uint64_t now_ms);

/** Several networks' observes, for the process's /metrics. */
#define BM_OBSERVE_MAX_NETWORKS 64
typedef struct bm_observe_set {
    const bm_observe_t *obs[BM_OBSERVE_MAX_NETWORKS];
    const char *ids[BM_OBSERVE_MAX_NETWORKS]; /* each network's id, its label value */
    size_t n;
} bm_observe_set_t;

/**
 * Registers /metrics (metrics.path of the first) on `r` for every network of `set` at
 * once (bm_metrics_write_merged); `set` is borrowed. Nothing when metrics are off or the
 * set is empty. 0 or BM_ENOMEM.
 */
int bm_observe_register_merged(const bm_observe_set_t *set, bm_router_t *r);

#endif /* BM_OBSERVE_H */
