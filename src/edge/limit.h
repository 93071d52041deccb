/* SPDX-License-Identifier: MIT */
/*
 * limit: token buckets for the rate limits of the edge (rateLimit.perClient, .global,
 * .duties, and a key's own). A bucket holds up to `burst` tokens and gains `rate` per
 * second; a request takes one or is refused with the time until one is there. The table
 * keeps one bucket per client (an address or an API key id) in a fixed number of slots, so
 * that a flood of distinct addresses cannot grow memory: a new client takes the slot of
 * the fullest (least active) bucket in its probe window. Pure: time comes in as now_ms.
 */
#ifndef BM_LIMIT_H
#define BM_LIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** A rate: tokens per second and the bucket size; rate 0 is no limit. */
typedef struct bm_rate {
    double rate, burst;
} bm_rate_t;

typedef struct bm_bucket {
    double tokens;
    uint64_t last_ms;
    bool started;
} bm_bucket_t;

/**
 * Takes a token from `b` at `now_ms` under `r` (a bucket starts full). True when one was
 * there; else false with *retry_ms the wait until one will be (at least 1).
 */
bool bm_bucket_take(bm_bucket_t *b, const bm_rate_t *r, uint64_t now_ms, uint32_t *retry_ms);

/** Refills `b` to `now_ms` under `r`, then keeps at most `most` tokens (below zero: a debt
 *  that refills first). Nothing happens under no limit. */
void bm_bucket_cap(bm_bucket_t *b, const bm_rate_t *r, uint64_t now_ms, double most);

typedef struct bm_limiter bm_limiter_t;

/** A table of `slots` per-client buckets (rounded up to a power of two). NULL on no memory. */
bm_limiter_t *bm_limiter_new(size_t slots);
void bm_limiter_free(bm_limiter_t *l);

/** bm_bucket_take on the bucket of client key[0..n) (created full when new). */
bool bm_limiter_take(bm_limiter_t *l, const char *key, size_t n, const bm_rate_t *r,
                     uint64_t now_ms, uint32_t *retry_ms);

/** bm_bucket_cap on the bucket of client key[0..n), when the table holds one (a client it
 *  forgot meanwhile starts full again, as any new client). */
void bm_limiter_cap(bm_limiter_t *l, const char *key, size_t n, const bm_rate_t *r, uint64_t now_ms,
                    double most);

#endif /* BM_LIMIT_H */
