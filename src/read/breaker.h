/* SPDX-License-Identifier: MIT */
/*
 * breaker: one upstream's circuit breaker for ordinary reads. Pure logic: no clock, no I/O;
 * every input carries `now_ms` (monotonic milliseconds), so the state machine is unit-tested
 * directly.
 *
 *   closed --(failure_threshold failures in a row)--> open
 *   open --(half_open_after elapsed, checked by bm_breaker_allows)--> half-open
 *   half-open --(success_threshold successes in a row)--> closed
 *   half-open --(any failure)--> open (the wait starts again)
 *
 * A failure is what says the node cannot serve: a connection error, a timeout, a 5xx. A 4xx
 * is an answer (the request was wrong, or the data is not there) and counts as a success for
 * the breaker. While half-open, one probe at a time is let through, so a node that comes
 * back is not flooded before it proved itself. Only the read path consults the breaker: the
 * duty races and the broadcast still try an open node, because they must not lose the one
 * node that answers.
 */
#ifndef BM_BREAKER_H
#define BM_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

typedef enum bm_breaker_state {
    BM_BREAKER_CLOSED = 0,
    BM_BREAKER_OPEN,
    BM_BREAKER_HALF_OPEN,
} bm_breaker_state_t;

typedef struct bm_breaker_opts {
    uint32_t failure_threshold; /* consecutive failures that open it (0: never opens) */
    uint32_t success_threshold; /* consecutive half-open successes that close it (>= 1) */
    uint32_t half_open_after_ms;
} bm_breaker_opts_t;

/** One breaker; embed it and start it with bm_breaker_init. Plain data. */
typedef struct bm_breaker {
    bm_breaker_opts_t opts;
    bm_breaker_state_t state;
    uint32_t failures;  /* in a row, while closed */
    uint32_t successes; /* in a row, while half-open */
    uint32_t probes;    /* half-open attempts in flight */
    uint64_t opened_ms; /* when it last opened */
    uint64_t opens;     /* how many times it opened (for the status page) */
} bm_breaker_t;

/** Fills `o` with the defaults (failsafe.circuitBreaker). */
void bm_breaker_opts_default(bm_breaker_opts_t *o);

/** A closed breaker with `o` (copied; NULL: the defaults). */
void bm_breaker_init(bm_breaker_t *b, const bm_breaker_opts_t *o);

/**
 * May a read be sent now? Closed: yes. Open: no, until half_open_after has passed, when the
 * breaker turns half-open. Half-open: yes when no probe is in flight. Does not reserve
 * anything: call bm_breaker_start for the attempt actually sent.
 */
bool bm_breaker_allows(bm_breaker_t *b, uint64_t now_ms);

/** An attempt was sent (counts a half-open probe in flight). */
void bm_breaker_start(bm_breaker_t *b);

/** The attempt ended: `failed` for a connection error, timeout or 5xx; false for any other
 *  answer. A cancelled attempt (a hedge that lost) passes `cancelled` and counts as neither. */
void bm_breaker_done(bm_breaker_t *b, bool failed, bool cancelled, uint64_t now_ms);

/** "closed", "open", "half-open". */
const char *bm_breaker_state_name(bm_breaker_state_t s);

#endif /* BM_BREAKER_H */
