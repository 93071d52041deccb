/* SPDX-License-Identifier: MIT */
/*
 * hist: fixed-bound histograms (see hist.h). A linear walk over at most two dozen bounds
 * beats a binary search at this size and keeps the code obvious.
 */
#include "base/hist.h"

#include <math.h>
#include <string.h>

#include "base/log.h"

void bm_hist_init(bm_hist_t *h, const double *bounds, size_t n)
{
    bm_assert(n <= BM_HIST_MAX_BOUNDS);
    for (size_t i = 1; i < n; i++)
        bm_assert(bounds[i - 1] < bounds[i]);
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_bounds = (uint32_t)n;
}

void bm_hist_add(bm_hist_t *h, double v)
{
    if (isnan(v))
        return;
    uint32_t i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

uint64_t bm_hist_cumulative(const bm_hist_t *h, uint32_t i)
{
    uint64_t c = 0;
    for (uint32_t k = 0; k <= i && k <= h->n_bounds; k++)
        c += h->counts[k];
    return c;
}
