/* SPDX-License-Identifier: MIT */
/*
 * race: the generic multi-node request engine (docs/race-engine.md). One race sends
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
 * HTTP connections or policies: policies give callbacks (and may hand a race their
 * judging context to own), the engine gives answers. Serving a client request from a
 * race is duties/serve.h, above this.
 *
 * Cancellation of losing transfers goes through bm_upstream_cancel, which defers the
 * libcurl work until curl's socket action has returned.
 *
 * Callbacks and re-entrancy: waiters' answer callbacks, completion callbacks and bm_race_at
 * callbacks run only from the loop (a transfer's on_done or the race's own timer), never
 * inside a bm_race_* call; they may call anything, bm_race_engine_free included. The
 * policy predicates (accept, usable, score, complete) run while the engine updates the
 * race: they must only look at the answer and never call into the engine.
 *
 * Time: the engine runs on the clock it is given (base/clock.h: the real one in beaconmux,
 * a manual one in unit tests); it reads no other. Times in a policy are wall times of that
 * clock (Unix ms, as slot arithmetic gives them). A race reads the wall clock once, at its
 * start, and measures from there with the clock's monotonic time, so a wall clock step
 * during a race neither stretches nor shortens it. Every limit of a race is on that clock,
 * the per-transfer one (transfer_timeout_ms) included; the upstream client only gets a
 * backstop well past it (real time), which the race's own timer always beats. The connect
 * timeout is the upstream client's (real time).
 *
 * Every finished transfer is recorded in the pool (bm_pool_record) and counted in the
 * node's stats.in_flight while it runs. Only a node's own failure counts against it: its
 * answer, a refused or broken connection, or its transfer's own limit
 * (transfer_timeout_ms). A race that ends itself records nothing for the transfers it
 * cancels: decided (the losers of a read), abandoned by its waiters, cut by its hard
 * timeout or a drain. Their nodes are reported as BM_ECANCELED or BM_ETIMEDOUT to the
 * waiters and the completion, never to the pool (a past deadline leaves a race maxHold,
 * which says nothing about a node).
 */
#ifndef BM_RACE_H
#define BM_RACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/hdrs.h"
#include "cluster/pool.h"
#include "http/upstream.h"

typedef struct bm_race_engine bm_race_engine_t;
typedef struct bm_race bm_race_t;

typedef struct bm_race_waiter bm_race_waiter_t;

/** How the engine judged an answer when it arrived (bm_race_answer_t `judged`). */
typedef enum bm_race_judged {
    BM_RACE_UNJUDGED = 0, /* a 2xx that came once nothing was judged any more (after the
                             decision: a write's nodes, kept losers, the witness), or from the
                             witness that is not a candidate */
    BM_RACE_ACCEPTED,     /* a 2xx that passed accept */
    BM_RACE_USABLE,       /* a 2xx that failed accept and passed usable */
    BM_RACE_REJECTED,     /* a 2xx that was neither */
    BM_RACE_ERROR,        /* an answer outside 2xx, or a failure without one (err set) */
} bm_race_judged_t;

/** One node's answer (or failure) as the engine saw it. Borrowed in callbacks: copy the
 *  fields or take a reference on the body to keep them. */
typedef struct bm_race_answer {
    bm_node_t *node;          /* who answered; NULL for the synthesized 503 */
    int err;                  /* 0, or the BM_E* network error (then status is 0); in the
                                 complete callback BM_ECANCELED for a node never asked or
                                 cancelled before it answered, BM_ETIMEDOUT for one cut by
                                 the hard timeout */
    int status;               /* HTTP status */
    const bm_hdrs_t *headers; /* response headers (hop-by-hop removed); never NULL */
    bm_buf_t *body;           /* complete body (take a ref to keep it); never NULL when err == 0 */
    uint64_t elapsed_us;      /* from this transfer's start (real time, the upstream's) */
    uint64_t arrived_ms;      /* wall time (Unix ms, the engine's clock) it arrived (0: never
                                 arrived) */
    unsigned attempt;         /* 0 for the first transfer to this node, 1+ for repolls */
    bm_race_judged_t judged;  /* how it was judged (BM_RACE_ERROR for the synthesized 503) */
} bm_race_answer_t;

/*
 * Re-asking a node whose 2xx was not accepted, at most once per repoll_interval (counted
 * from the previous request to that node). Errors (non-2xx, network) are re-asked only
 * with the policy's reask_failures.
 */
typedef enum bm_race_repoll {
    BM_REPOLL_NONE = 0,
    /* re-ask until the deadline (the hard timeout without one); a request in flight at the
     * deadline may still win */
    BM_REPOLL_UNTIL_ACCEPTED,
    /* the same until the deadline; past it the race is still running only when no usable
     * answer exists at all, and nodes whose 2xx was not usable go on being re-asked until
     * one is (or the hard timeout) */
    BM_REPOLL_UNTIL_ANY_2XX,
} bm_race_repoll_t;

/**
 * The policy of one race; copied by bm_race_start. Function pointers may be NULL (see
 * each). How an answer is judged:
 *   - a 2xx that passes accept is accepted (and counts as usable); the first accepted
 *     answer opens the grace; without a score function it wins at once;
 *   - a 2xx that fails accept but passes usable is a fallback for the deadline; the best
 *     score wins, the first to arrive among equals;
 *   - the race ends at once when nothing more can arrive (no transfer in flight, no repoll
 *     or untried node left, no bm_race_at timer pending): the best accepted, else the best
 *     usable, else the most specific other answer: a 4xx beats a 3xx beats a 5xx beats a
 *     2xx that was not usable (first to arrive among equals); with no HTTP answer at all
 *     (with name_failures: no 4xx either), a synthesized 503 naming each node's failure;
 *   - the same choice is made at the hard timeout, whatever is still in flight.
 * Once decided, a race starts no new transfer: a read cancels what is still running, a
 * write lets it finish (a sequential write stops at its answer).
 */
typedef struct bm_race_policy {
    /* ask one node at a time in candidate order; the next one is asked when the current
     * one failed, answered non-2xx or answered a 2xx that was not accepted; the first
     * accepted answer wins (no grace: nobody else is running) */
    bool sequential;
    bool write; /* detached: survives its waiters, never cancels losers */
    /* a 2xx answer that may end the race at once; NULL: every 2xx is accepted */
    bool (*accept)(const bm_race_answer_t *a, void *ud);
    /* a 2xx answer usable as a fallback at the deadline; NULL: every 2xx is usable */
    bool (*usable)(const bm_race_answer_t *a, void *ud);
    /* higher is better among accepted (and, at the deadline, among usable) answers;
     * NULL: first come wins */
    double (*score)(const bm_race_answer_t *a, void *ud);
    /* optional: an answer with this score ends the grace early (e.g. all bits set) */
    bool (*complete)(const bm_race_answer_t *a, void *ud);
    /* optional: sees every answer the race takes (an HTTP answer or a network failure), after
     * it was judged, from the loop (a transfer's on_done), in any state of the race; it may
     * call anything, bm_race_decide and bm_race_leave included. Borrowed answer */
    void (*observe)(bm_race_t *r, const bm_race_answer_t *a, void *ud);
    void *ud; /* the policy's context for the race, passed to the callbacks above (and
                 returned by bm_race_ctx): borrowed, unless ud_dispose is set */
    /* optional: the race owns `ud` from a successful bm_race_start on, and calls
     * ud_dispose(ud) once when it is freed, whatever ended it (completion, cancellation,
     * bm_race_engine_free): from the loop, in the race's close callback, after every other
     * callback of the race. It must only release the context's own memory: the policy
     * that made it may be gone by then. When bm_race_start fails, `ud` stays the caller's */
    void (*ud_dispose)(void *ud);
    uint32_t grace_ms;        /* after the first accepted answer, wait this long for a
                                 better-scoring one (0: answer at once); never past
                                 the deadline */
    uint64_t deadline_ms;     /* wall time (Unix ms) of the fallback decision; 0: none.
                                 Past it with no usable answer in hand, the first
                                 usable 2xx to arrive wins */
    uint64_t hard_timeout_ms; /* wall time after which the race ends whatever it has;
                                 0: deadline + 10 s (or 30 s without a deadline) */
    bm_race_repoll_t repoll;
    uint32_t repoll_interval_ms; /* default 50 */
    /* a node whose answer was a failure a later attempt may not repeat (a 5xx, a 429, a
     * network error) is asked again every repoll_interval until the hard timeout, while
     * the race runs: a node that recovers can still answer. A 4xx is an answer */
    bool reask_failures;
    /* with nothing accepted or usable, only a 4xx is relayed as the answer; otherwise the
     * answer is the engine's 503 naming each node's failure (its status and error message,
     * its network error, or that it gave no answer), rather than one node's 5xx */
    bool name_failures;
    /* a read that decided lets the transfers still running finish (at most until the hard
     * timeout) instead of cancelling them: their answers change nothing but reach observe
     * (a policy that learns from every node's answer). A read abandoned by its waiters is
     * still cancelled */
    bool keep_losers;
    uint32_t connect_timeout_ms;  /* per transfer (default timeouts.connect) */
    uint32_t transfer_timeout_ms; /* per transfer (default: until the hard timeout); a node
                                     that times out counts as failed (sequential: next) */
    size_t max_response_bytes;    /* per transfer (default 64 MiB) */
    /* optional: a node whose answer to its first request the race learns whatever else
     * happens (the duty journal's "what would this node alone have answered"). Among the
     * candidates, its first transfer is not cancelled by the decision of a read (its answer
     * reaches `observe`); not among them, it is asked once beside them and its answer goes
     * to `witnessed` only (never judged, accepted or served, never given to `observe`, not
     * in the completion's answers). Either way that transfer is cut at witness_until_ms
     * (not recorded in the pool: the race stopped listening, the node did not fail), unless
     * keep_losers keeps it. The waiters never wait for it; the completion does */
    bm_node_t *witness;
    uint64_t witness_until_ms; /* wall time; 0: the deadline (without one: the decision) */
    /* optional: the answer of the witness that is not a candidate, from the loop, as
     * `observe` (it may call anything) */
    void (*witnessed)(bm_race_t *r, const bm_race_answer_t *a, void *ud);
} bm_race_policy_t;

/** The request every candidate receives. Copied by bm_race_start. */
typedef struct bm_race_request {
    const char *method;
    const char *target;       /* path and query, e.g. "/eth/v1/validator/attestation_data?slot=5" */
    const bm_hdrs_t *headers; /* end-to-end client headers (the upstream module filters) */
    bm_buf_t *body;           /* a reference is taken; may be NULL */
} bm_race_request_t;

/** Called once per waiter with the race's single answer. Borrowed: copy or ref. The
 *  waiter is freed after the callback returns. */
typedef void (*bm_race_answer_fn)(bm_race_waiter_t *w, const bm_race_answer_t *a, void *ud);

/** Called once when a race has finished every transfer (or was cancelled or timed out):
 *  every node's last answer, in candidate order (failures included; see `err` for the
 *  nodes without one). Borrowed. It runs after the waiters got their answer, and the race
 *  is freed right after it returns. */
typedef void (*bm_race_complete_fn)(bm_race_t *r, const bm_race_answer_t *answers, size_t n,
                                    void *ud);

/** The engine: shared by every race on one loop. `clock` (its timers run on the loop of
 *  `up`), `up` and `pool` (may be NULL: nothing is recorded) are borrowed and must outlive
 *  the engine. NULL on allocation failure. */
bm_race_engine_t *bm_race_engine_new(bm_clock_t *clock, bm_upstream_t *up, bm_pool_t *pool);

/** Cancels every race (no callbacks run any more, not even a pending drain's) and frees
 *  the engine. May be called from inside any of its callbacks. Every race and waiter
 *  pointer is invalid afterwards (end the clients' requests first). Free it before the
 *  upstream client. Handles close asynchronously: run the loop afterwards. */
void bm_race_engine_free(bm_race_engine_t *e);

/** Races running now. */
size_t bm_race_engine_active(const bm_race_engine_t *e);

/**
 * Waits until no write race is running, or `bound_ms` passed (then cancels them: waiters
 * still waiting get the best answer in hand, complete callbacks run with the unanswered
 * nodes as BM_ECANCELED), and calls `done` from the loop, never inside this call. For
 * graceful shutdown: writes are drained within a bound. Races started meanwhile are
 * waited for too. A second call while draining replaces `done` and keeps the earlier bound.
 */
void bm_race_engine_drain(bm_race_engine_t *e, uint32_t bound_ms,
                          void (*done)(bm_race_engine_t *e, void *ud), void *ud);

/**
 * Starts a race over `nodes[0..n)` (in this order for sequential races; borrowed, the
 * pool owns them). The request, the policy and `key` are copied. `key` (may be NULL)
 * makes the race joinable by bm_race_find until it answered. `complete` (may be NULL)
 * runs when every transfer finished. Returns the race, or NULL on bad arguments or
 * allocation failure. The race answers its waiters asynchronously, never inside this
 * call; with no candidate it answers a 503. Keep the race pointer only until its complete
 * callback returned; without one, only until the answer was delivered or the last waiter
 * of a read left (the race is freed when its last transfer ended).
 */
bm_race_t *bm_race_start(bm_race_engine_t *e, const bm_race_request_t *req, bm_node_t *const *nodes,
                         size_t n, const bm_race_policy_t *policy, const char *key,
                         bm_race_complete_fn complete, void *complete_ud);

/** The running race registered under `key` that has not answered yet, or NULL. */
bm_race_t *bm_race_find(bm_race_engine_t *e, const char *key);

/** The policy context of a race (its policy's `ud`), e.g. for a request that joins a race
 *  found by key and judges its answer with the same context. Valid while the race is (see
 *  bm_race_start for how long a race pointer may be kept). */
void *bm_race_ctx(const bm_race_t *r);

/**
 * Adds a waiter to a race that has not answered yet. `fn` runs exactly once with the
 * answer, unless the waiter leaves first; never inside this call, even when the answer is
 * known already. Returns the waiter, or NULL when the race answered or was cancelled
 * already, or on allocation failure.
 */
bm_race_waiter_t *bm_race_wait(bm_race_t *r, bm_race_answer_fn fn, void *ud);

/**
 * Removes a waiter before its answer (its client went away) and frees it. When a read
 * race loses its last waiter, it is cancelled: its transfers are cancelled at once and its
 * complete callback runs from the loop with what it has. A write race goes on. Must not
 * be called after the waiter's answer callback returned (inside it, it does nothing).
 */
void bm_race_leave(bm_race_waiter_t *w);

/** Number of waiters still waiting. */
size_t bm_race_waiters(const bm_race_t *r);

/** The answers received so far (every node's latest, failures included, in candidate
 *  order; nodes that did not answer yet are left out), for policies that decide by
 *  majority; valid until the next event of the race. */
const bm_race_answer_t *bm_race_answers(const bm_race_t *r, size_t *n);

/**
 * Ends the race now with `a` as its answer (a policy that decided by itself, e.g. by
 * majority). `a` must be one of bm_race_answers() (any answer of that node, in fact: its
 * latest is used) and an HTTP answer (err == 0). For reads the remaining transfers are
 * cancelled at once; writes go on. The waiters get the answer from the loop, never inside
 * this call. Returns 0, BM_EINVAL (not an answer of this race) or BM_ECLOSED (the race
 * has decided already).
 */
int bm_race_decide(bm_race_t *r, const bm_race_answer_t *a);

/**
 * Sets a timer on the race: `fn` runs at wall time `at_ms` unless the race decided
 * before (for policy rules such as "after 1 s the majority answer"). A pending timer keeps
 * a race whose transfers all finished from ending before it ran, so that the policy gets
 * its say. Returns 0, BM_EINVAL (no `fn`), BM_ECLOSED (the race has decided) or
 * BM_ENOMEM.
 */
int bm_race_at(bm_race_t *r, uint64_t at_ms, void (*fn)(bm_race_t *r, void *ud), void *ud);

/** Wall time (Unix ms) on the race's clock: the start's wall time advanced by the monotonic
 *  clock (see "Times" above). */
uint64_t bm_race_now_ms(const bm_race_t *r);

/** Wall time (Unix ms) at which the race started. */
uint64_t bm_race_started_ms(const bm_race_t *r);

/** Formats the engine's own error answer ({"code":N,"message":...}, the message JSON
 *  escaped) into a new buffer (caller owns the reference). NULL on allocation failure. */
bm_buf_t *bm_race_error_body(int code, const char *message);

/**
 * Appends what one node's answer said, as the 503 of name_failures names it: its network
 * error ("timed out"), "<status>, not usable" for a 2xx, or the status and the `message` of
 * a Beacon API error body (at most 120 characters, quotes and controls replaced).
 */
void bm_race_describe(bm_str_t *m, const bm_race_answer_t *a);

#endif /* BM_RACE_H */
