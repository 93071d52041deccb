/* SPDX-License-Identifier: MIT */
/*
 * health: decides each node's state from its inputs, in one place. Inputs are what the
 * pool records (reachability), what discovery concludes (network verdict), the node's
 * /eth/v1/node/syncing answers and, with the head tracker attached, how the node's head
 * compares with the cluster head (lag, forked, optimistic, time-discrepancy). A node's
 * own claims can only make its state worse, never better. Every change goes through
 * bm_pool_set_state, which logs it once and tells the listeners.
 *
 * Precedence (the first that applies wins; docs/head-tracker.md explains why):
 *   wrong-network > unreachable > unknown (discovery pending) > time-discrepancy >
 *   forked > syncing > optimistic > no-head (the chain runs, its head is unknown) >
 *   lagging > ready
 *
 * Health also sets the tracker's inputs that belong to it: whether a node may vote
 * (right network, not syncing, not optimistic or EL-offline by its own answer), whether it
 * is an observer (a shadow node: judged like any node, counted for nothing) and the head
 * quorum (configured, or 2 when three or more nodes count, else 1; nodes count when they
 * are not shadows, reachable, on the right network and neither time-discrepant, forked,
 * syncing nor optimistic, whatever their lag, so that the quorum never feeds back into
 * itself).
 */
#ifndef BM_HEALTH_H
#define BM_HEALTH_H

#include "cluster/head.h"
#include "cluster/pool.h"

typedef struct bm_health bm_health_t;

typedef struct bm_health_opts {
    uint32_t max_head_lag; /* slots behind the cluster head still ready (health.maxHeadLag) */
    uint32_t head_quorum;  /* health.headQuorum; 0 = automatic (default) */
} bm_health_opts_t;

/** Fills `o` with the defaults. */
void bm_health_opts_default(bm_health_opts_t *o);

/**
 * Creates the health judge for `pool` and registers it as the pool's input listener, so
 * that every input change re-evaluates the node. NULL on allocation failure.
 */
bm_health_t *bm_health_new(bm_pool_t *pool, const bm_health_opts_t *opts);

/**
 * Frees the judge (the pool must outlive it). Detaches it from the tracker first, so the
 * tracker may outlive it.
 */
void bm_health_free(bm_health_t *h);

/**
 * Attaches the head tracker (not owned; its node i is the pool's node with index i), or
 * detaches it with NULL. Registers a tracker listener (head moves and slot ticks
 * re-evaluate every node, node view changes that node), pushes vote flags and the
 * quorum, and re-evaluates every node. Returns 0, BM_EINVAL when the tracker has fewer
 * nodes than the pool, or BM_ENOMEM.
 */
int bm_health_set_head(bm_health_t *h, bm_head_t *t);

/**
 * Records `n`'s /eth/v1/node/syncing answer (`s` copied; it stands until the next one)
 * at `now_ms`, passes its head_slot to the tracker's time-discrepancy check and
 * re-evaluates the node. A failed poll is not an answer: report it to the pool
 * (bm_pool_record) and keep the last answer.
 */
void bm_health_set_syncing(bm_health_t *h, bm_node_t *n, const bm_node_syncing_t *s,
                           uint64_t now_ms);

/** Re-evaluates one node's state from its current inputs. */
void bm_health_eval(bm_health_t *h, bm_node_t *n);

/** Re-evaluates every node. */
void bm_health_eval_all(bm_health_t *h);

/** Nodes that count for the automatic quorum now (see above). */
size_t bm_health_quorum_base(const bm_health_t *h);

/** The head quorum health sets: configured, else 2 when the base is >= 3, else 1. */
uint32_t bm_health_quorum(const bm_health_t *h);

#endif /* BM_HEALTH_H */
