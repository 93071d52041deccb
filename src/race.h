/* SPDX-License-Identifier: MIT */
/*
 * race: the generic multi-node request engine (DESIGN.md "Race engine"). One race sends
 * one request to a set of candidate nodes, at once or one after another, and decides
 * which single answer its waiters get:
 *
 *   - accept(answer): a 2xx that passes is the answer at once (after an optional grace
 *     to let a better-scoring accepted answer arrive); the other transfers are cancelled
 *     unless the race is a write;
 *   - score(answer): among acceptable answers, the best within the grace wins;
 *   - deadline: when it passes, the best usable 2xx in hand is the answer (voting stale
 *     beats not voting); with none in hand the race goes on until one arrives or every
 *     node failed, bounded by the hard timeout;
 *   - repoll: until-accepted re-asks a node whose 2xx was not accepted every
 *     repoll_interval until the deadline; until-any-2xx keeps waiting past the deadline
 *     only while no usable answer exists at all;
 *   - when everything failed, the most specific error wins: a 4xx body beats a 5xx beats
 *     a network error (then a 503 in the Beacon API shape naming each node's failure).
 *
 * Exactly one answer per race, never an empty one. Several waiters may share one race
 * (coalescing: identical reads join the race already running under the same key); each
 * gets the same answer. A waiter that leaves a read removes only itself; a read race
 * whose last waiter left is cancelled. A write race (detached) runs on without waiters
 * until every node answered or the hard timeout passed, and its completion callback
 * reports every node's outcome (for broadcast bookkeeping). Nothing here knows about
 * HTTP connections or policies: policies give callbacks, the engine gives answers.
 *
 * Cancellation of losing transfers goes through bm_upstream_cancel, which defers the
 * libcurl work until curl's socket action has returned.
 */
#ifndef BM_RACE_H
#define BM_RACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "hdrs.h"
#include "pool.h"
#include "upstream.h"

typedef struct bm_race_engine bm_race_engine_t;
typedef struct bm_race bm_race_t;
typedef struct bm_race_waiter bm_race_waiter_t;

/** One node's answer (or failure) as the engine saw it. Borrowed in callbacks. */
typedef struct bm_race_answer {
    bm_node_t *node;          /* who answered; NULL for the synthesized 503 */
    int err;                  /* 0, or the BM_E* network error (then status is 0) */
    int status;               /* HTTP status */
    const bm_hdrs_t *headers; /* response headers (hop-by-hop removed) */
    bm_buf_t *body;           /* complete body (take a ref to keep it); never NULL when err == 0 */
    uint64_t elapsed_us;      /* from this transfer's start */
    uint64_t arrived_ms;      /* wall time (Unix ms) it arrived */
    unsigned attempt;         /* 0 for the first transfer to this node, 1+ for repolls */
} bm_race_answer_t;

typedef enum bm_race_repoll {
    BM_REPOLL_NONE = 0,
    BM_REPOLL_UNTIL_ACCEPTED, /* re-ask a node whose 2xx was not accepted, until the deadline */
    BM_REPOLL_UNTIL_ANY_2XX,  /* past the deadline, wait only while no usable answer exists */
} bm_race_repoll_t;

/** The policy of one race. Function pointers may be NULL (see each). */
typedef struct bm_race_policy {
    bool sequential;  /* ask one node at a time in candidate order, next on failure */
    bool write;       /* detached: survives its waiters, never cancels losers */
    /* a 2xx answer that may end the race at once; NULL: every 2xx is accepted */
    bool (*accept)(const bm_race_answer_t *a, void *ud);
    /* a 2xx answer usable as a fallback at the deadline; NULL: every 2xx is usable */
    bool (*usable)(const bm_race_answer_t *a, void *ud);
    /* higher is better among accepted (and, at the deadline, among usable) answers;
     * NULL: first come wins */
    double (*score)(const bm_race_answer_t *a, void *ud);
    /* optional: an answer with this score ends the grace early (e.g. all bits set) */
    bool (*complete)(const bm_race_answer_t *a, void *ud);
    void *ud;                     /* passed to the callbacks above */
    uint32_t grace_ms;            /* after the first accepted answer, wait this long for a
                                     better-scoring one (0: answer at once) */
    uint64_t deadline_ms;         /* wall time (Unix ms) of the fallback decision; 0: none */
    uint64_t hard_timeout_ms;     /* wall time after which the race ends whatever it has;
                                     0: deadline + 10 s (or 30 s without a deadline) */
    bm_race_repoll_t repoll;
    uint32_t repoll_interval_ms;  /* default 50 */
    uint32_t connect_timeout_ms;  /* per transfer (default 1000) */
    uint32_t transfer_timeout_ms; /* per transfer (default: until the hard timeout) */
    size_t max_response_bytes;    /* per transfer (default 64 MiB) */
} bm_race_policy_t;

/** The request every candidate receives. Copied by bm_race_start. */
typedef struct bm_race_request {
    const char *method;
    const char *target;       /* path and query, e.g. "/eth/v1/validator/attestation_data?slot=5" */
    const bm_hdrs_t *headers; /* end-to-end client headers (the upstream module filters) */
    bm_buf_t *body;           /* a reference is taken; may be NULL */
} bm_race_request_t;

/** Called once per waiter with the race's single answer. Borrowed: copy or ref. */
typedef void (*bm_race_answer_fn)(bm_race_waiter_t *w, const bm_race_answer_t *a, void *ud);

/** Called once when a race has finished every transfer (or was cancelled or timed out):
 *  every node's last answer, in candidate order (failures included). */
typedef void (*bm_race_complete_fn)(bm_race_t *r, const bm_race_answer_t *answers, size_t n,
                                    void *ud);

/** The engine: shared by every race on one loop. */
bm_race_engine_t *bm_race_engine_new(uv_loop_t *loop, bm_upstream_t *up);

/** Cancels every race (no callbacks) and frees the engine. Run the loop afterwards. */
void bm_race_engine_free(bm_race_engine_t *e);

/** Races running now. */
size_t bm_race_engine_active(const bm_race_engine_t *e);

/**
 * Waits until no write race is running, or `bound_ms` passed (then cancels them), and
 * calls `done`. For graceful shutdown: writes are drained within a bound.
 */
void bm_race_engine_drain(bm_race_engine_t *e, uint32_t bound_ms,
                          void (*done)(bm_race_engine_t *e, void *ud), void *ud);

/**
 * Starts a race over `nodes[0..n)` (in this order for sequential races). `key` (may be
 * NULL) makes the race joinable by bm_race_find until it answered. `complete` (may be
 * NULL) runs when every transfer finished. Returns the race, or NULL on allocation
 * failure. The race answers its waiters asynchronously, never inside this call.
 */
bm_race_t *bm_race_start(bm_race_engine_t *e, const bm_race_request_t *req, bm_node_t *const *nodes,
                         size_t n, const bm_race_policy_t *policy, const char *key,
                         bm_race_complete_fn complete, void *complete_ud);

/** The running race registered under `key` that has not answered yet, or NULL. */
bm_race_t *bm_race_find(bm_race_engine_t *e, const char *key);

/**
 * Adds a waiter to a race that has not answered yet. `fn` runs exactly once with the
 * answer, unless the waiter leaves first. Returns the waiter or NULL.
 */
bm_race_waiter_t *bm_race_wait(bm_race_t *r, bm_race_answer_fn fn, void *ud);

/**
 * Removes a waiter before its answer (its client went away). When a read race loses its
 * last waiter, it is cancelled (its complete callback runs with what it has). Must not be
 * called after the waiter's answer callback ran.
 */
void bm_race_leave(bm_race_waiter_t *w);

/** Number of waiters still waiting. */
size_t bm_race_waiters(const bm_race_t *r);

/** The answers received so far (every node's latest), for policies that decide by
 *  majority; valid until the next event of the race. */
const bm_race_answer_t *bm_race_answers(const bm_race_t *r, size_t *n);

/**
 * Ends the race now with `a` as its answer (a policy that decided by itself, e.g. by
 * majority). `a` must be one of bm_race_answers(). For reads the remaining transfers are
 * cancelled; writes go on.
 */
void bm_race_decide(bm_race_t *r, const bm_race_answer_t *a);

/**
 * Sets a timer on the race: `fn` runs at wall time `at_ms` unless the race answered
 * before (for policy rules such as "after 1 s the majority answer").
 */
void bm_race_at(bm_race_t *r, uint64_t at_ms, void (*fn)(bm_race_t *r, void *ud), void *ud);

/** Formats the engine's own error answer ({"code":N,"message":...}) into a buffer. */
bm_buf_t *bm_race_error_body(int code, const char *message);

#endif /* BM_RACE_H */
