/* SPDX-License-Identifier: MIT */
/*
 * hist: a histogram with fixed bucket bounds, for the figures /metrics exposes as Prometheus
 * histograms (a duty race's duration, a head's arrival delay, a broadcast's first 2xx). The
 * bounds are a static array of the caller's (one per quantity, chosen for it), the counts
 * live inside the histogram: recording a value is a few comparisons and two additions, never
 * an allocation, so it can sit on a request's path.
 *
 * Values are in the quantity's base unit (seconds for durations), as the exposition wants
 * them. Counts are per bucket (not cumulative); bm_hist_cumulative gives what a `le` bucket
 * of the exposition holds.
 */
#ifndef BM_HIST_H
#define BM_HIST_H

#include <stddef.h>
#include <stdint.h>

#define BM_HIST_MAX_BOUNDS 24 /* finite upper bounds at most; +Inf is implicit */

typedef struct bm_hist {
    const double *bounds; /* ascending finite upper bounds, borrowed (static) */
    uint32_t n_bounds;
    uint64_t counts[BM_HIST_MAX_BOUNDS + 1]; /* counts[n_bounds]: above every bound */
    uint64_t count;                          /* values recorded */
    double sum;                              /* their sum */
} bm_hist_t;

/**
 * Empties `h` over `bounds[0..n)` (ascending, finite; borrowed: must outlive `h`). More than
 * BM_HIST_MAX_BOUNDS bounds, or bounds out of order, are a programming error (asserted).
 */
void bm_hist_init(bm_hist_t *h, const double *bounds, size_t n);

/** Records `v` in the first bucket whose bound is >= v (Prometheus's `le`). NaN is ignored. */
void bm_hist_add(bm_hist_t *h, double v);

/** Values recorded at or below bounds[i] (i == n_bounds: every value). */
uint64_t bm_hist_cumulative(const bm_hist_t *h, uint32_t i);

#endif /* BM_HIST_H */
