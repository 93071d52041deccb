/* SPDX-License-Identifier: MIT */
/*
 * aimd: two small counters of the read path, pure logic with time passed in (monotonic
 * milliseconds), no clock and no I/O.
 *
 * bm_aimd_t, the per-upstream request budget of a hosted provider (upstreams[].autoTune):
 * a token bucket whose rate (requests per second) falls by half on every 429 and climbs
 * additively on success, by one request per second for every `rate` successes (so about
 * +1/s per second of traffic, as TCP grows its window per round trip), always within
 * [min, max]. The bucket holds at most one second of tokens. A 429's Retry-After closes the
 * bucket until then. A read that finds no token waits for one up to its deadline, or moves
 * to another node.
 *
 * bm_hedge_budget_t, the hedging budget: every read earns `ratio` of a hedge, a hedge spends
 * one, and the balance is capped at `burst`, so hedges stay at most `ratio` of reads over any
 * long stretch and a burst of slow answers cannot double the load on the nodes.
 */
#ifndef BM_AIMD_H
#define BM_AIMD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct bm_aimd {
    double min, max;          /* requests per second; max == 0: no bucket (always allows) */
    double rate;              /* current rate */
    double tokens;            /* available now, at most max(rate, 1) */
    uint64_t last_ms;         /* when tokens were last refilled */
    uint64_t closed_until_ms; /* Retry-After: no request before this */
    uint64_t throttled;       /* 429s seen */
} bm_aimd_t;

/** A bucket for [min, max] requests per second starting full at `max` (max 0: disabled). */
void bm_aimd_init(bm_aimd_t *b, double min, double max, uint64_t now_ms);

/** True when the bucket limits anything (autoTune configured). */
bool bm_aimd_enabled(const bm_aimd_t *b);

/**
 * Takes one token when one is there and returns 0. Otherwise returns how many milliseconds
 * until one will be (>= 1), taking nothing. A disabled bucket always returns 0 unless a
 * Retry-After closed it.
 */
uint64_t bm_aimd_take(bm_aimd_t *b, uint64_t now_ms);

/** Milliseconds until a token is there (0: now), taking nothing. */
uint64_t bm_aimd_wait_ms(bm_aimd_t *b, uint64_t now_ms);

/** A 429: halves the rate (not below min) and, with `retry_after_ms` > 0, closes the bucket
 *  for that long. */
void bm_aimd_throttled(bm_aimd_t *b, uint32_t retry_after_ms, uint64_t now_ms);

/** Any other answer: the rate climbs by 1/rate (not above max). */
void bm_aimd_success(bm_aimd_t *b);

typedef struct bm_hedge_budget {
    double ratio;   /* hedges earned per read (0.1: 10 %) */
    double burst;   /* most hedges saved up */
    double balance; /* hedges available */
    uint64_t spent, refused;
} bm_hedge_budget_t;

/** A budget of `ratio` hedges per read, saving at most `burst` (starts with one hedge). */
void bm_hedge_budget_init(bm_hedge_budget_t *h, double ratio, double burst);

/** A read started: earns `ratio`. */
void bm_hedge_budget_earn(bm_hedge_budget_t *h);

/** Spends one hedge when available (true), else counts a refusal (false). */
bool bm_hedge_budget_spend(bm_hedge_budget_t *h);

#endif /* BM_AIMD_H */
