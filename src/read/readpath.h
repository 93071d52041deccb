/* SPDX-License-Identifier: MIT */
/*
 * readpath: every request no duty policy claims, sent to the best node for it. This is the
 * I/O half of the read path; its judgement lives in pure modules: the candidate order
 * (pick, balance: sets, tiers, strategies, the score), the circuit breakers (breaker), the
 * auto-tuned buckets and the hedge budget (aimd), route rules, blocked paths and client
 * routes (rules), historical ids (archive), consensus equality (canon) and sticky clients
 * (sticky). docs/read-path.md explains the whole; in short, one exchange per request:
 *
 *   - blocked (blockedPaths, a rule's `blocked`): 403, no node asked;
 *   - attempts: one node at a time, best first; a connection error, a timeout, a 5xx, a 429
 *     (the node's bucket closes for its Retry-After), a 415 to an SSZ Accept (remembered per
 *     node and route), and a pruned answer to a historical read when archive nodes exist
 *     move to the next node at once; when every candidate was asked, a new round after the
 *     retry delay (delay x backoff^(round-1), at most maxDelay, plus jitter); at most
 *     maxAttempts attempts; any other write is sent once, twice when the first node refused
 *     the connection (nothing was sent);
 *   - a hedge: when no answer head came within hedge.delay, the same read goes to the next
 *     candidate of a tier up to hedge.maxPriority, within the hedge budget; heavy reads are
 *     not hedged unless a rule says so; the first usable answer wins, the others are cancelled;
 *   - consensus (a rule's consensus: {query, agree}): `query` nodes at once, served when
 *     `agree` of them gave the same status and the same canonical body; else 502 naming them;
 *   - one deadline (failsafe.timeout or the rule's) for everything until the answer is
 *     committed to the client; after it, 504 (or the last failed answer when one came);
 *   - holding versus streaming as before: an answer up to hold_bytes is held until complete,
 *     so a node dying mid-body is replaced; a larger one or an event stream is streamed with
 *     backpressure, and nothing is retried after a byte reached the client.
 * Races, broadcasts, the event stream and the static endpoints never come here, and nothing
 * here changes what they do: an open breaker only keeps ordinary reads off a node.
 *
 * Re-entrancy as in the rest: every entry point holds `busy`; an exchange is freed (its timer
 * closed) when it is finished, nobody is inside and no transfer is left.
 */
#ifndef BM_READPATH_H
#define BM_READPATH_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "cluster/discovery.h"
#include "cluster/pool.h"
#include "http/router.h"
#include "http/server.h"
#include "http/upstream.h"
#include "read/archive.h"
#include "read/balance.h"
#include "read/breaker.h"
#include "read/rules.h"

typedef struct bm_readpath bm_readpath_t;

/** One upstream's read-path settings (upstreams[]). */
typedef struct bm_readpath_node_opts {
    uint32_t priority; /* tier, lower first */
    uint32_t weight;   /* >= 1 */
    bool archive;
    uint32_t autotune_min, autotune_max; /* requests per second; max 0: no bucket */
    /* busy at this many requests in flight (its connection pool is full): passed over while
     * another node of the set and tier is not; 0: never busy */
    uint32_t max_in_flight;
} bm_readpath_node_opts_t;

typedef struct bm_readpath_opts {
    uint32_t connect_timeout_ms; /* per attempt (timeouts.connect) */
    uint32_t read_timeout_ms;    /* reads: longest silence from a node (timeouts.read) */
    uint32_t write_timeout_ms;   /* other methods: whole attempt (timeouts.write) */
    size_t hold_bytes;           /* answers up to this are held until complete (1 MiB) */
    uint32_t timeout_ms;         /* a read's total deadline (failsafe.timeout) */
    uint32_t heavy_timeout_ms;   /* a heavy read's (failsafe.heavyTimeout) */
    uint32_t max_attempts;       /* failsafe.retry.maxAttempts */
    uint32_t retry_delay_ms, retry_backoff_milli, retry_max_delay_ms, retry_jitter_ms;
    uint32_t hedge_delay_ms, hedge_max_count, hedge_max_ratio_milli, hedge_max_priority;
    bm_breaker_opts_t breaker;
    bm_balance_strategy_t strategy;
    bm_score_weights_t weights;
    bool sticky;
    const char *sticky_header; /* NULL: the client's address; borrowed */
    uint32_t sticky_factor_milli;
    bm_retention_t retention;
    uint64_t seed; /* of the strategies' randomness (0: from the clock) */
} bm_readpath_opts_t;

/** Fills `o` with the defaults. */
void bm_readpath_opts_default(bm_readpath_opts_t *o);

/**
 * Creates the read path. The pool, the upstream client and discovery (for the current slot
 * of archive routing; may be NULL) must outlive it. Every node starts with the default node
 * options (tier 0, weight 1). NULL on allocation failure.
 */
bm_readpath_t *bm_readpath_new(uv_loop_t *loop, bm_upstream_t *up, bm_pool_t *pool,
                               bm_discovery_t *disc, const bm_readpath_opts_t *o);

/** Frees it. Requests still in flight must have ended; spare handles close on the loop. */
void bm_readpath_free(bm_readpath_t *rp);

/** Sets node i's options (configuration order). */
void bm_readpath_set_node(bm_readpath_t *rp, size_t i, const bm_readpath_node_opts_t *o);

/** Installs the rules (blocked paths, client routes, route rules); takes ownership. The
 *  built-in client routes (/lighthouse, /prysm, ...) should be added after configured ones. */
void bm_readpath_set_rules(bm_readpath_t *rp, bm_rules_t *rules);

/** Number of exchanges in flight. */
size_t bm_readpath_active(const bm_readpath_t *rp);

/** Route adapter (the router's fallback): client routes, then any node. `ud` is the read path. */
void bm_readpath_route(bm_req_t *req, const bm_route_params_t *params, void *ud);

/** A read made for beaconmux itself (the response cache), detached from any client. */
typedef struct bm_readpath_fetch bm_readpath_fetch_t;

/** What a detached read asks. Everything is copied by bm_readpath_fetch. */
typedef struct bm_readpath_fetch_req {
    const char *method;       /* "GET" */
    const char *target;       /* origin-form target sent to the node ("/eth/v1/...?...") */
    const bm_hdrs_t *headers; /* end-to-end fields to send (Accept), or NULL */
    const char *peer;         /* the client address sticky sessions key on, or NULL */
    size_t max_bytes;         /* a larger answer is not held: `too_big` (0: hold_bytes) */
    bool missing_moves_on;    /* a 404 moves on to the next node, like a 5xx (the target names
                                 a root of the cluster chain: a node one slot behind lacks it);
                                 relayed when every node said so */
} bm_readpath_fetch_req_t;

/** The answer of a detached read. Borrowed for the duration of the callback. */
typedef struct bm_readpath_answer {
    int status;            /* HTTP status; 0 with too_big */
    const bm_hdrs_t *hdrs; /* the node's fields (its Connection ones removed), or NULL for
                              an answer of beaconmux's own (503, 504, 502) */
    bm_buf_t *body;        /* the complete body (take a reference to keep it), or NULL */
    bool from_node;        /* the node's answer, not beaconmux's error */
    bool too_big;          /* the answer is larger than max_bytes, or a stream: not held */
    int node;              /* the answering node's index, or -1 */
} bm_readpath_answer_t;

typedef void (*bm_readpath_answer_fn)(const bm_readpath_answer_t *ans, void *ud);

/**
 * Starts a detached read with every mechanism of an ordinary read (candidates, retries,
 * hedges, breakers, buckets, archive routing, route rules), the answer held whole. `cb`
 * runs exactly once with the answer unless the read is cancelled first; it may run from
 * inside this call, which then returns NULL. Returns NULL without calling `cb` when the
 * path is blocked or memory ran out (the caller answers by itself); else the handle, valid
 * until `cb` ran or the read was cancelled.
 */
bm_readpath_fetch_t *bm_readpath_fetch(bm_readpath_t *rp, const bm_readpath_fetch_req_t *f,
                                       bm_readpath_answer_fn cb, void *ud);

/** Cancels a detached read: its transfers end, `cb` never runs. */
void bm_readpath_fetch_cancel(bm_readpath_fetch_t *f);

/** Proxies `req` to ready nodes only, with the same attempts; 503 when none is ready. */
void bm_readpath_handle_ready(bm_readpath_t *rp, bm_req_t *req);

/** Appends node i's read-path figures as `,"read":{...}` (score and its four terms, breaker,
 *  bucket, tier) for the status page. */
void bm_readpath_node_json(bm_readpath_t *rp, size_t i, bm_str_t *out);

/** Appends the read path's counters as a JSON object (an admin status section). */
void bm_readpath_status_json(bm_str_t *out, void *ud);

/** A client (its sticky key, bm_sticky_key) now sticks to the node at pool index `node`:
 *  it was new, or stuck to another node before. */
typedef void (*bm_readpath_sticky_fn)(void *ud, uint64_t key, int node);

/** Calls `fn` at every such change (shared state tells the other instances). NULL stops
 *  it. Nothing is called without routing.stickySessions. */
void bm_readpath_on_sticky(bm_readpath_t *rp, bm_readpath_sticky_fn fn, void *ud);

/** Calls fn(ud, key, node, age_ms) for every client that sticks to a node, age_ms since
 *  it was last routed (shared state writes them back when Redis returns). Nothing is
 *  called without routing.stickySessions. */
void bm_readpath_sticky_each(bm_readpath_t *rp,
                             void (*fn)(void *ud, uint64_t key, int node, uint64_t age_ms),
                             void *ud);

/** Another instance stuck client `key` to the node at pool index `node`: this one sticks it
 *  there too, unheard by the listener. Ignored without routing.stickySessions. */
void bm_readpath_sticky_learn(bm_readpath_t *rp, uint64_t key, int node);

/** A network this one replaces (a reload rebuilt it) had client `key` stuck to the node now
 *  at pool index `node`, last routed age_ms ago: this one sticks it there, as old as it was.
 *  Ignored without routing.stickySessions. */
void bm_readpath_sticky_adopt(bm_readpath_t *rp, uint64_t key, int node, uint64_t age_ms);

/** How many clients stick to a node (0 without routing.stickySessions). */
size_t bm_readpath_sticky_clients(const bm_readpath_t *rp);

/** The counters (docs/read-path.md names the metrics they will become). */
typedef struct bm_readpath_counters {
    uint64_t reads, attempts, retries, hedges, hedges_won, hedges_refused, blocked,
        deadline_exceeded, breaker_skips, bucket_waits, throttled, ssz_refused, archive_routed,
        archive_fallthrough, archive_missing, consensus_agreed, consensus_failed, sticky_moves,
        busy_skips, busy_waits;
} bm_readpath_counters_t;

/** The current counters. */
const bm_readpath_counters_t *bm_readpath_counters(const bm_readpath_t *rp);

/** The balancing strategy inside a tier (routing.loadBalancing). */
bm_balance_strategy_t bm_readpath_strategy(const bm_readpath_t *rp);

/** Node i's breaker (for tests and the status page). */
const bm_breaker_t *bm_readpath_breaker(const bm_readpath_t *rp, size_t i);

#endif /* BM_READPATH_H */
