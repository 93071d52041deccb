/* SPDX-License-Identifier: MIT */
/*
 * readpath_int: the read path's types (the read path, its per-node state, an exchange and
 * its attempts), private to readpath.c; kept apart so that the module's code stays one
 * file under the size limit.
 */
#ifndef BM_READPATH_INT_H
#define BM_READPATH_INT_H

#include "read/readpath.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "read/aimd.h"
#include "read/breaker.h"
#include "read/duelist.h"
#include "read/sticky.h"

#define MAX_PARALLEL 16                /* attempts of one exchange at once */
#define MAX_KEPT_BODY (64 * 1024)      /* a failed answer kept to relay if all fail */
#define MAX_CONSENSUS_BODY (64u << 20) /* an answer compared for consensus */
#define SSZ_MEMORY 16                  /* routes remembered per node as refusing SSZ */

typedef struct exchange exchange_t;

typedef struct node_state {
    bm_readpath_node_opts_t o;
    bm_breaker_t breaker;
    bm_aimd_t bucket;
    int64_t rr;
    uint64_t no_ssz[SSZ_MEMORY]; /* route keys refused with 415 */
    uint64_t no_ssz_until[SSZ_MEMORY];
    size_t no_ssz_next;
} node_state_t;

struct bm_readpath {
    uv_loop_t *loop;
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_discovery_t *disc;
    bm_readpath_opts_t opts;
    node_state_t node[BM_MAX_NODES];
    bm_rules_t *rules;
    bm_sticky_t *sticky;
    bm_readpath_sticky_fn on_sticky; /* shared state: a client stuck to another node */
    void *on_sticky_ud;
    bm_rng_t rng;
    bm_hedge_budget_t budget;
    bm_readpath_counters_t c;
    size_t active;
    bm_log_limit_t limit;
    bm_str_t url;      /* scratch for an attempt's URL (copied by bm_upstream_start) */
    bm_duelist_t *due; /* the exchanges waiting for a time, under one timer */
    exchange_t *spare; /* finished exchanges for reuse (linked by spare_next) */
    size_t n_spare;
};

typedef enum { AT_IDLE = 0, AT_HEAD, AT_KEEP, AT_HELD, AT_STREAM } at_phase_t;

typedef struct attempt {
    exchange_t *ex;
    bm_node_t *node;
    bm_xfer_t *xfer; /* NULL when not running */
    at_phase_t phase;
    bool hedge;
    bool inspect; /* a blob 400: read the body before deciding */
    bool pruned;  /* a pruned answer (fall-through to archive nodes) */
    bool done;    /* finished (consensus: a result to compare) */
    bool failed;  /* finished without a usable answer */
    int status;
    int64_t length;
    /* the answer's fields: the transfer's own (`view`, valid until its on_done returned), or
     * `hdrs`, a copy made when the answer must outlive its transfer or drop fields */
    const bm_hdrs_t *view;
    bm_hdrs_t hdrs;
    bm_str_t body;
} attempt_t;

/* What a request may do, after its rule. */
typedef struct settings {
    uint64_t deadline; /* loop ms */
    uint32_t timeout_ms;
    uint32_t max_attempts; /* attempts in all (hedges included) */
    uint32_t delay_ms, backoff_milli, max_delay_ms, jitter_ms;
    uint32_t hedge_delay_ms, hedge_max;
    uint32_t query, agree; /* consensus; 0: none */
    bm_balance_strategy_t strategy;
    bool restrict_nodes;
    uint64_t nodes;
    int client; /* bm_client_t brand, or 0 */
    bool ready_only;
} settings_t;

/* What an exchange forwards: borrowed from the client's request, or owned copies for a
 * detached read (bm_readpath_fetch). */
typedef struct view {
    const char *method, *target, *path, *query, *peer;
    size_t path_len, query_len;
    const bm_hdrs_t *headers;
    bm_buf_t *body;
} view_t;

/* A detached read's own copies and where its answer goes. */
typedef struct detached {
    bm_str_t method, target, peer;
    bm_hdrs_t headers;
    size_t max_bytes;
    bool missing_moves_on;    /* a 404 moves on: the node lacks what the cluster chain has */
    bm_readpath_answer_fn cb; /* NULL once answered or cancelled */
    void *ud;
} detached_t;

struct exchange {
    bm_readpath_t *rp;
    bm_req_t *req;     /* NULL for a detached read */
    detached_t *fetch; /* a detached read, or NULL */
    view_t v;
    bm_duelink_t due;       /* on the read path's list of times while waiting for one */
    exchange_t *spare_next; /* on the read path's spare list */
    settings_t s;
    bool is_read, ssz_accept;
    uint64_t route_key; /* of the 415 memory */
    bm_hist_id_t hist;
    bool archive_first, archive_only;
    size_t target_off; /* forward bm_req_target() from here (a stripped prefix) */
    bool strip;        /* the forwarded target needs a leading '/' */
    uint64_t tried;    /* bit i: node i was asked */
    uint32_t started, hedges, running;
    uint32_t rounds;             /* times every candidate was asked */
    uint64_t retry_at, hedge_at; /* loop ms; 0: none */
    bool sticky;
    uint64_t sticky_key;
    int winner; /* the chosen attempt, or -1 */
    bool committed, finished, paused, timed_out;
    bool event_stream; /* the committed answer is an event stream: no total deadline */
    unsigned busy;
    bm_str_t errors; /* "n1: connection refused; n2: HTTP 503" */
    int kept;        /* the attempt whose failed answer is kept, or -1 */
    bool invalid;    /* a node answered what HTTP does not allow (an unasked 1xx, a length
                        that cannot be): that node's answer counts as a 502 */
    int used;        /* at[0..used) were used (the rest is as new) */
    attempt_t at[MAX_PARALLEL]; /* last: a reused exchange clears the fields above at once */
};

#endif /* BM_READPATH_INT_H */
