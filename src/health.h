/* SPDX-License-Identifier: MIT */
/*
 * health: decides each node's state from its inputs, in one place. Inputs are what the
 * pool records (reachability), what discovery concludes (network verdict) and, with the
 * head tracker, how the node's head compares with the cluster's. A node's own claims can
 * only make its state worse, never better. Every change goes through bm_pool_set_state,
 * which logs it once and tells the listeners.
 */
#ifndef BM_HEALTH_H
#define BM_HEALTH_H

#include "pool.h"

typedef struct bm_health bm_health_t;

typedef struct bm_health_opts {
    uint32_t max_head_lag; /* slots behind the cluster head still counted ready (default 1) */
} bm_health_opts_t;

/** Fills `o` with the defaults. */
void bm_health_opts_default(bm_health_opts_t *o);

/**
 * Creates the health judge for `pool` and registers it as the pool's input listener, so
 * that every input change re-evaluates the node. NULL on allocation failure.
 */
bm_health_t *bm_health_new(bm_pool_t *pool, const bm_health_opts_t *opts);

/** Frees the judge (the pool must outlive it). */
void bm_health_free(bm_health_t *h);

/** Re-evaluates one node's state from its current inputs. */
void bm_health_eval(bm_health_t *h, bm_node_t *n);

/** Re-evaluates every node. */
void bm_health_eval_all(bm_health_t *h);

#endif /* BM_HEALTH_H */
