/* SPDX-License-Identifier: MIT */
/*
 * pool: the beacon nodes behind beaconmux. It owns one bm_node_t per configured upstream:
 * identity (id, URL, masked URL, extra headers), what discovery learned (client brand and
 * version), the node's state, and its figures (requests, errors, latency). It does not
 * decide states by itself: discovery, the request path and later the health module set
 * them through bm_pool_set_state(), which logs each transition once and tells listeners
 * (replay, events) so that nothing has to poll.
 */
#ifndef BM_POOL_H
#define BM_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hdrs.h"

/* Node states (docs/head-tracker.md, "Health"). UNKNOWN is the state before the first contact. */
typedef enum bm_node_state {
    BM_NODE_UNKNOWN = 0,
    BM_NODE_READY,
    BM_NODE_LAGGING,
    BM_NODE_SYNCING,
    BM_NODE_OPTIMISTIC,
    BM_NODE_FORKED,
    BM_NODE_TIME_DISCREPANCY,
    BM_NODE_UNREACHABLE,
    BM_NODE_WRONG_NETWORK,
    BM_NODE_NO_HEAD, /* the chain runs and its head is unknown: its freshness cannot be judged */
    BM_NODE_STATE_COUNT
} bm_node_state_t;

/* Client brands, detected from /eth/v1/node/version. */
typedef enum bm_client {
    BM_CLIENT_UNKNOWN = 0,
    BM_CLIENT_LIGHTHOUSE,
    BM_CLIENT_PRYSM,
    BM_CLIENT_TEKU,
    BM_CLIENT_NIMBUS,
    BM_CLIENT_LODESTAR,
    BM_CLIENT_GRANDINE,
    BM_CLIENT_CAPLIN,
    BM_CLIENT_COUNT
} bm_client_t;

/* Latency buckets in milliseconds (upper bounds) for per-node histograms. */
#define BM_LATENCY_BUCKETS 16

/* Exchanges in a node's rolling windows (recent outcomes, recent latencies). */
#define BM_RECENT_WINDOW 64

/* What discovery concluded about a node's network (genesis root and critical spec keys). */
typedef enum bm_network_verdict {
    BM_NET_UNKNOWN = 0, /* not discovered yet */
    BM_NET_OK,          /* same network as the cluster */
    BM_NET_WRONG,       /* another network, or disagreeing critical spec keys */
} bm_network_verdict_t;

/* Outcome of one transfer, as far as reachability is concerned. */
typedef enum bm_outcome {
    BM_OUTCOME_OK = 0,    /* an HTTP answer below 500 */
    BM_OUTCOME_HTTP_5XX,  /* an HTTP answer of 500 or above: reachable, but failing */
    BM_OUTCOME_NET_ERROR, /* no HTTP answer: refused, reset, timed out */
} bm_outcome_t;

/* A node's last /eth/v1/node/syncing answer (written by health). */
typedef struct bm_node_syncing {
    bool known; /* an answer was recorded */
    bool is_syncing;
    bool is_optimistic;
    bool el_offline;
    uint64_t head_slot;
    uint64_t sync_distance;
    uint64_t at_ms; /* when it was recorded */
} bm_node_syncing_t;

typedef struct bm_node_stats {
    uint64_t requests;   /* transfers finished (any outcome) */
    uint64_t errors;     /* network errors, timeouts and 5xx */
    uint64_t errors_5xx; /* ... of which HTTP answers of 500 or above */
    uint64_t refused;    /* ... of which refused connections (the rest: other network errors) */
    uint64_t in_flight;  /* transfers running now */
    uint64_t last_ok_ms; /* wall time of the last successful answer (0: never) */
    uint32_t consecutive_failures;
    double latency_ewma_ms; /* exponentially weighted mean of successful answers */
    uint64_t latency_hist[BM_LATENCY_BUCKETS]; /* successful answers, by bm_latency_bucket_ms */
    uint64_t latency_sum_us;                   /* ... and the sum of their latencies */
    /* rolling windows over the last BM_RECENT_WINDOW exchanges (every module's requests,
     * health probes included), for the read path's score */
    uint64_t recent_failed;                   /* bit i: exchange i of the ring failed */
    uint32_t recent_n;                        /* exchanges in the ring (at most BM_RECENT_WINDOW) */
    uint32_t recent_pos;                      /* next slot of the ring */
    uint32_t recent_lat_us[BM_RECENT_WINDOW]; /* successful exchanges' latencies */
    uint32_t recent_lat_n, recent_lat_pos;
    /* the same latencies in ascending order, kept so as each one is recorded: the read path
     * asks for a percentile of every candidate of every request */
    uint32_t recent_lat_sorted[BM_RECENT_WINDOW];
} bm_node_stats_t;

/*
 * One beacon node. Read-only outside pool.c, except for the fields marked "owner:" which
 * the named module maintains.
 */
typedef struct bm_node {
    int index;        /* position in configuration order, 0-based */
    char *id;         /* configured id */
    char *url;        /* base URL, with credentials: never log this */
    char *url_masked; /* base URL with the password replaced, for logs and status */
    bm_hdrs_t extra;  /* per-node request headers (API keys) */
    /* a shadow node (upstreams[].shadow; set once, before anything runs, with
     * bm_pool_set_shadow): followed and judged like any node, asked a copy of every duty
     * read, but never serving and counting for nothing (duties/shadow.h) */
    bool shadow;
    bool forwarded_for; /* owner: the network; the node is told the client's address
                           (X-Forwarded-For, upstreams[].forwardedFor) */
    bm_node_state_t state;
    char state_reason[160]; /* why the node is in its state, for logs and status */
    char input_reason[160]; /* written by pool; the last discovery verdict */
    char reach_reason[160]; /* written by pool; why it is unreachable (the last network error,
                               or the probe it left unanswered) */
    uint64_t state_since_ms;
    bool reachable; /* written by pool (bm_pool_record, bm_pool_set_unresponsive); false after
                       repeated network errors, or a probe left unanswered */
    bm_network_verdict_t network; /* written by discovery (bm_pool_set_network) */
    bm_client_t client;           /* written by discovery */
    char *version;                /* written by discovery; NULL until known */
    bm_node_stats_t stats;

    /* ---- written by health (bm_health_set_syncing, bm_health_eval) ------------------- */
    bm_node_syncing_t syncing; /* last syncing answer; can only make the state worse */
    bool head_lag_known;       /* a cluster head and a head of this node both exist */
    int64_t head_lag;          /* cluster head slot - node head slot (negative: ahead) */
} bm_node_t;

typedef struct bm_pool bm_pool_t;

/** Listener for state transitions; `old` is the previous state. */
typedef void (*bm_pool_state_fn)(bm_node_t *node, bm_node_state_t old, void *ud);

/**
 * Listener for changes of a node's raw inputs (reachable, network verdict): the health
 * module registers one and re-evaluates the node's state.
 */
typedef void (*bm_pool_input_fn)(bm_node_t *node, void *ud);

/** An empty pool. NULL on allocation failure. */
bm_pool_t *bm_pool_new(void);

/** Frees the pool and its nodes. */
void bm_pool_free(bm_pool_t *p);

/**
 * Adds a node. `url` must be a valid http(s) URL; `extra` (may be NULL) is copied.
 * Returns the node (owned by the pool) or NULL on error.
 */
bm_node_t *bm_pool_add(bm_pool_t *p, const char *id, const char *url, const bm_hdrs_t *extra);

/** Number of nodes. */
size_t bm_pool_count(const bm_pool_t *p);

/** Node at position i (configuration order). */
bm_node_t *bm_pool_node(const bm_pool_t *p, size_t i);

/** Node by id, or NULL. */
bm_node_t *bm_pool_find(const bm_pool_t *p, const char *id);

/**
 * Moves a node to `state` with a reason (printf-style). Logs one line per actual change
 * and calls the listeners; a call that changes nothing only refreshes the reason.
 */
void bm_pool_set_state(bm_pool_t *p, bm_node_t *n, bm_node_state_t state, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** Registers a state listener (at most 8). Returns 0 or BM_ENOMEM. */
int bm_pool_on_state(bm_pool_t *p, bm_pool_state_fn fn, void *ud);

/** Registers an input listener (at most 8). Returns 0 or BM_ENOMEM. */
int bm_pool_on_input(bm_pool_t *p, bm_pool_input_fn fn, void *ud);

/** Consecutive network errors after which a node counts as unreachable. */
#define BM_POOL_UNREACHABLE_AFTER 2

/**
 * Records a finished transfer and its latency. A network error counts towards
 * unreachability (BM_POOL_UNREACHABLE_AFTER in a row, or one refused connection); any
 * HTTP answer makes the node reachable again. Input listeners run when that flips.
 * `refused` says the failure was a refused connection (the node is certainly down);
 * `detail` (may be NULL) describes a network error for the state's reason.
 */
void bm_pool_record(bm_pool_t *p, bm_node_t *n, bm_outcome_t outcome, bool refused,
                    uint64_t latency_us, const char *detail);

/**
 * A probe the node did not answer in time (the monitor's head poll, sent because the node
 * did not follow the cluster head): the node is unreachable, ready for no new work, until
 * its next HTTP answer (bm_pool_record), whatever its figures said. `fmt` says why, for
 * the state's reason. Input listeners run when that flips; a node already unreachable only
 * keeps its reason.
 */
void bm_pool_set_unresponsive(bm_pool_t *p, bm_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Sets discovery's verdict on a node's network; input listeners run when it changes. */
void bm_pool_set_network(bm_pool_t *p, bm_node_t *n, bm_network_verdict_t verdict, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));

/** Why the node's network is what it is (discovery's last verdict), for states. */
const char *bm_node_input_reason(const bm_node_t *n);

/** Why the node is unreachable (its last network error, or the probe it left unanswered). */
const char *bm_node_reach_reason(const bm_node_t *n);

/** Marks `n` a shadow node (or not). Before the modules that read it start. */
void bm_pool_set_shadow(bm_node_t *n, bool shadow);

/** Number of serving nodes (shadows are not counted) in `state`. */
size_t bm_pool_count_state(const bm_pool_t *p, bm_node_state_t state);

/**
 * True when the node may serve requests at all: not a shadow, and in every state but
 * wrong-network. Every candidate set (duty races, broadcast, the read path) starts from it.
 */
bool bm_node_usable(const bm_node_t *n);

/**
 * Rank used to order candidates: lower is better. READY first, then states that still
 * answer (lagging and no-head, syncing, optimistic, time-discrepancy, forked), then unknown
 * and unreachable (tried last, they may have come back). Wrong-network nodes are never used.
 */
int bm_node_rank(const bm_node_t *n);

/** Which usable nodes a request asks first; the others only when none of these is there. */
typedef enum bm_pool_prefer {
    BM_POOL_PREFER_READY,     /* ready nodes */
    BM_POOL_PREFER_REACHABLE, /* nodes the pool reached lately (node->reachable) */
    BM_POOL_PREFER_ANSWERING, /* nodes not known unreachable */
    BM_POOL_PREFER_ANY,       /* every usable node (unknown and unreachable ones ranked last) */
} bm_pool_prefer_t;

/**
 * A request's candidates: the usable nodes `prefer` names, or every usable node when none
 * of them is there (one may be back before the pool noticed); into `out`, best rank first
 * (bm_node_rank, pool order among equals) when `ranked`, in pool order otherwise, the first
 * `cap` of that order. Returns how many. The duty policies' races start from it; the read path
 * orders its own sets (read/pick.h) from the same ranks.
 */
size_t bm_pool_candidates(const bm_pool_t *p, bm_pool_prefer_t prefer, bool ranked, bm_node_t **out,
                          size_t cap);

/** The failed share (0..1) of the node's last BM_RECENT_WINDOW exchanges (0 with none). */
double bm_node_recent_error_rate(const bm_node_t *n);

/** The `pct` percentile (0..100) in milliseconds of the node's last BM_RECENT_WINDOW
 *  successful exchanges (0 with none). Exact, from the window, not from buckets. */
double bm_node_recent_latency_ms(const bm_node_t *n, double pct);

/** Latency percentile (0..100) from the node's histogram, in milliseconds. */
double bm_node_latency_pct(const bm_node_t *n, double pct);

/** Upper bound of latency bucket i in ms (the last bucket is open: returns +inf). */
double bm_latency_bucket_ms(int i);

/** "ready", "lagging", ... */
const char *bm_node_state_name(bm_node_state_t s);

/** "lighthouse", "prysm", ..., "unknown". */
const char *bm_client_name(bm_client_t c);

/** Detects the client from a /eth/v1/node/version string ("Lighthouse/v7.0.0/..."). */
bm_client_t bm_client_detect(const char *version);

/** Parses a client name as used in paths and config ("lighthouse"). BM_CLIENT_UNKNOWN if none. */
bm_client_t bm_client_parse(const char *name, size_t len);

#endif /* BM_POOL_H */
