/* SPDX-License-Identifier: MIT */
/*
 * metrics: the /metrics exposition of beaconmux (Prometheus text format 0.0.4, written with
 * observe/expo.h). Nothing is counted here: at scrape time it reads each module's own
 * counters (the same ones the status page shows) and the figures observe keeps, so a scrape
 * costs formatting only and the request path carries no metric bookkeeping of its own.
 *
 * Conventions (docs/observability.md lists every metric with its meaning): the `beaconmux_`
 * prefix, base units (`_seconds`, `_bytes`, `_slots`), `_total` for counters, histograms
 * whose buckets suit the quantity (duty races 1 ms to 2 s, head arrivals 50 ms to 12 s),
 * and labels from bounded sets only: an upstream's configured id, a state, a duty, an
 * outcome, a route class, a status class; never a path or a client address. A node's
 * client and version go in an info metric (value 1), bounded by the writer's label limit.
 */
#ifndef BM_METRICS_H
#define BM_METRICS_H

#include "base/buf.h"
#include "observe/observe.h"

/** Appends the whole exposition of `o` (the process's families and one network's). */
void bm_metrics_write(const bm_observe_t *o, bm_str_t *out);

/**
 * Several networks under one /metrics: the process's families once (process_*, build
 * info, the listener's connections: from obs[0]'s server), then every network family with
 * network="ids[i]" first on each of its samples (bm_expo_merge). 0, BM_EINVAL (more than
 * BM_OBSERVE_MAX_NETWORKS) or BM_ENOMEM.
 */
int bm_metrics_write_merged(const bm_observe_t *const *obs, const char *const *ids, size_t n,
                            bm_str_t *out);

#endif /* BM_METRICS_H */
