/* SPDX-License-Identifier: MIT */
/*
 * broadcast: every write of the Beacon API goes to every node (docs/broadcast.md).
 *
 * A validator's block, attestation or subscription helps only on the nodes that got it,
 * and the one node a validator client would have picked may be the slow, hung or
 * restarting one. So each write (publish, pool, subscription, preparation, registration,
 * preferences) is sent, body, query string (`broadcast_validation`) and headers unchanged,
 * to every usable node that is not unreachable, lagging and syncing ones included (they
 * still gossip), all at once through the race engine. The client is answered at the first
 * 2xx; the other transfers are detached from it and run until every node answered or
 * `write_timeout_ms` passed, even when the client hangs up (a block must still reach the
 * other nodes). When no node took the write, the client gets the most specific error (the
 * race engine's rule: a 4xx body beats a 5xx beats a network error).
 *
 * Batches (pool and publish writes) whose nodes refuse some items with the Beacon API's
 * indexed error ({"failures":[{"index":N,"message":...}]}) are merged item by item
 * (duties/indexed.h): an item failed only if it failed on every node that answered, and one
 * a node calls duplicate, already known or already seen counts as taken. The client gets 200
 * as soon as every item was taken somewhere (the nodes still running carry on), else, once
 * every node answered, 400 with only the items that failed everywhere.
 *
 * Exceptions, each for a reason:
 *   - blinded blocks go first to the node that produced the block (only it may be able to
 *     unblind it), then to everyone else: when the producer answered or after
 *     `producer_headstart_ms`, whichever comes first. The producer is asked of the
 *     production policy (bm_broadcast_set_producer) by the block's slot, read from the
 *     JSON `message.slot` or the SSZ offsets, and its state_root must match when known;
 *   - the stateful Gloas envelope read (GET /eth/v1/validator/execution_payload_envelopes/
 *     {slot}/{root}) is a read that only the producing node can serve: producer first, then
 *     the others, one at a time, first 2xx;
 *   - DVT selections (beacon_committee_selections, sync_committee_selections) are reads in
 *     disguise: the middleware combines partial selection proofs and answers the result,
 *     and asking several middlewares would start several combinations: one node at a time,
 *     first 2xx, never broadcast.
 *
 * SSZ bodies: a node that answers 415 is remembered per node and endpoint, with the
 * version the node reported then (until it comes back from being unreachable, reports
 * another version, or `ssz_memory_ms`). A gossip object (block, blinded block,
 * envelope, bid) is never answered 415 when some node took it: it is not sent as SSZ to
 * the nodes known to refuse it (they get it by gossip), and the client gets the answer of
 * the node that took it; only when none did is the answer 415, so that the client resends
 * JSON. Any other write, once a node refused SSZ, is delivered to the nodes that took it
 * and answered 415 so that the client resends JSON to everyone; from then on an SSZ copy
 * of that endpoint is answered 415 at once, before anything is sent, so that no node
 * receives the same submission twice (see docs/broadcast.md).
 *
 * Successful writes of node-local state are fed to the replay module (replay.h), which
 * gives them again to a node that restarted.
 */
#ifndef BM_BROADCAST_H
#define BM_BROADCAST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/clock.h"
#include "base/hist.h"
#include "cluster/pool.h"
#include "duties/race.h"
#include "duties/replay.h"
#include "http/router.h"
#include "http/server.h"

typedef struct bm_broadcast bm_broadcast_t;

/** How a route is served. */
typedef enum bm_bcast_class {
    BM_BCAST_PUBLISH = 0,  /* gossip objects: never answered 415 when a node took them */
    BM_BCAST_POOL,         /* pool submissions and duty messages */
    BM_BCAST_STATE,        /* node-local state, fed to replay */
    BM_BCAST_SELECTIONS,   /* DVT selections: one node at a time, first 2xx */
    BM_BCAST_PRODUCER_READ /* stateful envelope read: producer first, one at a time */
} bm_bcast_class_t;

/** One route of the table. */
typedef struct bm_broadcast_route {
    const char *method;
    const char *pattern;      /* router pattern */
    const char *operation_id; /* the spec's operationId (legacy: the v1 one) */
    bm_bcast_class_t cls;
    bool ssz_body;       /* the spec accepts an SSZ request body */
    bool producer_first; /* goes first to the producing node */
    bool legacy;         /* removed from the spec in v4.0.0; kept for older clients and nodes */
    int replay;          /* bm_replay_kind_t fed by a successful write, or -1 */
} bm_broadcast_route_t;

/** The route table (static storage); `n` gets its length. */
const bm_broadcast_route_t *bm_broadcast_routes(size_t *n);

/**
 * The production policy's memory (bm_produce_node_for_slot): the pool index of the node
 * that produced the block for `slot`, and, when known (*has_state_root), that block's
 * state_root; -1 when unknown.
 */
typedef int (*bm_broadcast_producer_fn)(void *ud, uint64_t slot, uint8_t state_root[32],
                                        bool *has_state_root);

typedef struct bm_broadcast_opts {
    uint32_t write_timeout_ms;      /* duties.writeTimeout: a write's transfers run at most
                                       this long (default duties.writeTimeout) */
    uint32_t connect_timeout_ms;    /* default timeouts.connect */
    uint32_t read_timeout_ms;       /* per node, for the sequential reads (default timeouts.read) */
    uint32_t producer_headstart_ms; /* blinded blocks: the others get the block when the
                                       producer answered or after this (default 1000) */
    uint32_t ssz_probe_grace_ms;    /* an SSZ write to an endpoint some node's SSZ support
                                       of is unknown waits this long after the first 2xx for
                                       a 415 (default 100) */
    uint32_t ssz_memory_ms;         /* a 415 is remembered this long (default 1 hour) */
} bm_broadcast_opts_t;

/** Fills `o` with the defaults above. */
void bm_broadcast_opts_default(bm_broadcast_opts_t *o);

/**
 * Creates the policy. `clock` (the engine's: time limits, head starts and the SSZ memory
 * are on it), `race` and `pool` are borrowed and must outlive it; `replay` (may be NULL:
 * nothing is fed) too. The nodes are the pool's as it is now. NULL on allocation failure.
 */
bm_broadcast_t *bm_broadcast_new(bm_clock_t *clock, bm_race_engine_t *race, bm_pool_t *pool,
                                 bm_replay_t *replay, const bm_broadcast_opts_t *opts);

/** Sets the producing-node lookup (NULL: none; blinded blocks then go to everyone at once). */
void bm_broadcast_set_producer(bm_broadcast_t *b, bm_broadcast_producer_fn fn, void *ud);

/** Adds every route of the table to `r` (each `ud` points into `b`). Returns 0 or BM_E*. */
int bm_broadcast_register(bm_broadcast_t *b, bm_router_t *r);

/** Writes in flight: requests not answered yet plus detached transfers still running. */
size_t bm_broadcast_active(const bm_broadcast_t *b);

/**
 * Closes the timer; blinded blocks still waiting for their producer's head start go to
 * the others at once. Call it before draining the race engine. Run the loop (the timer's
 * close callback), then bm_broadcast_free.
 */
void bm_broadcast_stop(bm_broadcast_t *b);

/** Frees the policy (after bm_broadcast_stop and a loop run, with the race engine drained
 *  or freed: what it still tracks is dropped). NULL is ignored. */
void bm_broadcast_free(bm_broadcast_t *b);

/** What a node answered to an SSZ body of an endpoint. */
typedef enum bm_ssz_support {
    BM_SSZ_UNKNOWN = 0,
    BM_SSZ_ACCEPTED, /* any answer but 415 (the node read the body's type) */
    BM_SSZ_REFUSED,  /* 415, within ssz_memory_ms */
} bm_ssz_support_t;

/** The remembered SSZ support of node `node` (pool index) for route `route`. */
bm_ssz_support_t bm_broadcast_ssz_support(const bm_broadcast_t *b, size_t node, size_t route);

/** Forgets what node `node` said about SSZ (it restarted: it may have been upgraded). */
void bm_broadcast_forget_node(bm_broadcast_t *b, size_t node);

/** Pool state listener (`ud` = the broadcast): a node that comes back from unknown or
 *  unreachable is forgotten (bm_broadcast_forget_node), except the first time after
 *  bm_broadcast_import_ssz restored refusals of it (its first discovery after a restart). */
void bm_broadcast_node_state(bm_node_t *node, bm_node_state_t old, void *ud);

/**
 * State kept across restarts (app/statedir.h): appends the SSZ refusals still remembered
 * as one JSON array [{"node":id,"method":"POST","route":pattern,"sinceMs":"wall ms",
 * "version":"the node's version then" (when known)}].
 * Returns 0 or BM_ENOMEM.
 */
int bm_broadcast_export_ssz(const bm_broadcast_t *b, uint64_t now_ms, bm_str_t *out);

/**
 * Restores what bm_broadcast_export_ssz wrote: refusals of nodes (by id) and routes still
 * configured and younger than `ssz_memory_ms` at `now_ms` (wall). Returns how many, or
 * BM_EINVAL when `json` is not such an array (nothing restored).
 */
int bm_broadcast_import_ssz(bm_broadcast_t *b, const char *json, size_t len, uint64_t now_ms);

/** What the policy did so far. */
#define BM_BROADCAST_NODE_STATS 64

typedef struct bm_broadcast_stats {
    uint64_t requests;            /* client requests served */
    uint64_t answered_2xx;        /* ... answered with a node's 2xx */
    uint64_t answered_error;      /* ... answered with an error (415s included) */
    uint64_t ssz_refused_at_once; /* SSZ writes answered 415 before sending (memory) */
    uint64_t ssz_refused_late;    /* a node refused SSZ after the client had its 2xx */
    uint64_t node_deliveries;     /* node answers 2xx to a write */
    uint64_t node_failures;       /* node answers non-2xx or no answer to a write */
    uint64_t producer_first;      /* writes and reads sent to the producing node first */
    uint64_t indexed_merged;      /* answered with the merge of the nodes' indexed errors */
    /* per node (pool index; nodes past BM_BROADCAST_NODE_STATS are only in the totals) */
    uint64_t deliveries_by[BM_BROADCAST_NODE_STATS];
    uint64_t failures_by[BM_BROADCAST_NODE_STATS];
    bm_hist_t first_2xx; /* seconds from the request to the client's 2xx (1 ms to 2 s) */
} bm_broadcast_stats_t;

/** Copies the counters into `out`. */
void bm_broadcast_stats(const bm_broadcast_t *b, bm_broadcast_stats_t *out);

/* ---- shared state (src/state/: several instances, one memory) ---------------------------- */

/** A node (pool index) answered 415 to an SSZ body on the endpoint `pattern` (static, e.g.
 *  "/eth/v1/validator/register_validator") and was not known to refuse it before. */
typedef void (*bm_broadcast_ssz_fn)(void *ud, size_t node, const char *pattern);

/** Calls `fn` for each such new refusal (shared with the other instances). NULL stops it. */
void bm_broadcast_on_ssz_refusal(bm_broadcast_t *b, bm_broadcast_ssz_fn fn, void *ud);

/** Another instance saw the node at pool index `node` refuse SSZ on `pattern` while it
 *  reported `version` (NULL or "": unknown): remembered as if seen here, from now (the
 *  listener does not hear it), unless the node reports another version now (the refusal
 *  is then stale and ignored). Returns 0, or BM_ENOTFOUND when no endpoint has that
 *  pattern or there is no such node. */
int bm_broadcast_learn_ssz_refusal(bm_broadcast_t *b, size_t node, const char *pattern,
                                   const char *version);

#endif /* BM_BROADCAST_H */
