/* SPDX-License-Identifier: MIT */
/*
 * spends: the tokens each client's rate-limit buckets gave since they were last told to the
 * other instances (state.driver redis shares the per-client buckets: app/sharedlimit.c).
 * A client is a class (0: reads, 1: duty reads) and its limiter key (an address or
 * "key:<id>"); each entry also keeps the rate it was limited under, so that the shared
 * bucket in Redis uses the same one.
 *
 * Bounded: at most `cap` clients between two drains (one sync period, 100 ms); a client
 * beyond that is not counted (bm_spends_add returns false and the overflow is counted), so
 * that a flood of addresses costs neither memory nor Redis commands: such a client is
 * limited by its own instance alone until a later period has room. Pure: no clock, no I/O.
 */
#ifndef BM_SPENDS_H
#define BM_SPENDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edge/limit.h"

#define BM_SPENDS_KEY_MAX 95 /* longer client keys are not counted */

typedef struct bm_spends bm_spends_t;

/** A table for `cap` clients per drain (at least 1). NULL on no memory. */
bm_spends_t *bm_spends_new(size_t cap);

/** Frees it (NULL is ignored). */
void bm_spends_free(bm_spends_t *s);

/** Counts one token given to client key[0..n) of class `cls` under rate `r` (copied; the
 *  latest one counts). False when the client could not be counted (table full, key too
 *  long). */
bool bm_spends_add(bm_spends_t *s, int cls, const char *key, size_t n, const bm_rate_t *r);

/** The tokens counted for the client since the last drain (0 when none). */
uint32_t bm_spends_get(const bm_spends_t *s, int cls, const char *key, size_t n);

/** One client's spending: its key is borrowed for the call. */
typedef void (*bm_spends_fn)(void *ud, int cls, const char *key, size_t n, const bm_rate_t *r,
                             uint32_t spent);

/** Calls `fn` for every client counted, in the order they were first counted, then empties
 *  the table (NULL fn: just empties it). Returns the clients drained. */
size_t bm_spends_drain(bm_spends_t *s, bm_spends_fn fn, void *ud);

/** Clients not counted because the table was full or the key too long, since the start. */
uint64_t bm_spends_overflow(const bm_spends_t *s);

#endif /* BM_SPENDS_H */
