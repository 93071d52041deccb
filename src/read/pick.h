/* SPDX-License-Identifier: MIT */
/*
 * pick: the read path's candidate order. Pure logic over plain figures: no clock, no I/O.
 *
 * Candidates narrow in this order, falling to the next set only when the previous one has
 * nobody available:
 *   1. ready nodes (on the cluster chain, within maxHeadLag),
 *   2. other nodes that answer (lagging, syncing, optimistic, forked, time-discrepant, and
 *      any state added later, such as no-head),
 *   3. unknown and unreachable nodes (they may be back).
 * wrong-network nodes never. Inside a set, `priority` is a hard tier: a higher tier is used
 * only when no node of a lower one is available (excluded by a rule or the client route,
 * open-circuited, out of tokens, or already tried). Inside a tier, the strategy orders
 * (read/balance.h). For a historical read past the retention windows archive nodes come
 * first, ahead of the sets; after a pruned answer only archive nodes remain.
 */
#ifndef BM_PICK_H
#define BM_PICK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/pool.h"
#include "read/balance.h"

/** The candidate sets, best first. */
enum {
    BM_PICK_READY = 0,
    BM_PICK_ANSWERING = 1,
    BM_PICK_MAYBE_BACK = 2,
    BM_PICK_NEVER = 3,
};

/** The set of a node state. */
int bm_pick_set_of(bm_node_state_t s);

/** One node as the order sees it. */
typedef struct bm_pick_node {
    int set;           /* BM_PICK_* */
    uint32_t priority; /* tier, lower first */
    bool archive;      /* upstreams[].archive */
    bool available;    /* false: excluded for this pick */
    bm_balance_item_t item;
} bm_pick_node_t;

typedef struct bm_pick_opts {
    bm_balance_strategy_t strategy;
    bool archive_first; /* archive nodes ahead of every set */
    bool archive_only;  /* nobody else */
} bm_pick_opts_t;

/**
 * Writes into order[] the indices of up to `want` available nodes of nodes[0..n), best
 * first; returns how many. The strategy runs on one tier at a time, and only on the tiers
 * needed to fill `want` (so round-robin advances once per pick). n is at most 64.
 */
size_t bm_pick_order(const bm_pick_node_t *nodes, size_t n, const bm_pick_opts_t *o, size_t want,
                     bm_rng_t *rng, size_t *order);

#endif /* BM_PICK_H */
