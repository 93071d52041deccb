/* SPDX-License-Identifier: MIT */
/*
 * duties: the policy for the epoch bookkeeping reads of a validator client,
 *
 *   POST /eth/v1/validator/duties/attester/{epoch}
 *   GET  /eth/v1/validator/duties/proposer/{epoch}     (deprecated v1)
 *   GET  /eth/v2/validator/duties/proposer/{epoch}
 *   POST /eth/v1/validator/duties/sync/{epoch}
 *   POST /eth/v1/validator/duties/ptc/{epoch}          (Gloas)
 *   POST /eth/v1/validator/liveness/{epoch}            (doppelganger protection)
 *
 * Duties are a function of the chain a node follows, named by the answer's
 * `dependent_root`. A validator that takes its duties from a node on a minority fork, or
 * from a node that has not imported the epoch's last block yet, attests in the wrong slot
 * for a whole epoch. So the duties are raced among the ready, non-optimistic nodes (all
 * usable nodes only when none is ready) and the answer is the 2xx whose dependent_root
 * equals the cluster chain's block root at that endpoint's dependent slot
 * (VALIDATOR-FLOWS.md section 2): start(E-1) - 1 for attester, proposer v2 and ptc,
 * start(E) - 1 for proposer v1, the genesis block on underflow, the cluster head itself
 * when the slot is at or after it (bm_head_root_at_slot). A node whose 2xx names another
 * root is re-asked every `repoll_ms`: it may just not have imported that block yet.
 *
 * Without a known root (no head tracker, or its links do not reach back that far) the
 * first non-optimistic 2xx is the answer. After `majority_after_ms` (dutiesMajorityAfter,
 * 1 s) the majority answer in hand wins: grouped by dependent_root, or for sync duties
 * (no dependent root; fixed per sync period) by the canonical hash of `data`; ties go to
 * the group that answered first. Nodes whose 2xx answers disagree are counted and logged
 * (rate-limited).
 *
 * Liveness is different: every reachable node is asked and all answers are collected
 * (until each answered, or `liveness_timeout_ms`); `is_live` is the OR of the nodes'
 * answers per index, because a validator seen by any node is live. The answer is 503
 * unless one node that answered was `ready` continuously since the start of the queried
 * epoch (ready-since times are tracked from the pool's state changes), so that
 * doppelganger protection never passes on the word of a node, or of a beaconmux, that
 * just restarted and could not have seen the validator's messages. Without any 2xx, a node's
 * 4xx is relayed, else a 503 names each node's failure.
 */
#ifndef BM_DUTIES_H
#define BM_DUTIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/clock.h"
#include "cluster/chain.h"
#include "cluster/head.h"
#include "cluster/pool.h"
#include "duties/race.h"
#include "duties/shadow.h"
#include "http/router.h"

typedef struct bm_duties bm_duties_t;

/** The duty endpoints. */
typedef enum bm_duty_kind {
    BM_DUTY_ATTESTER = 0,
    BM_DUTY_PROPOSER_V1,
    BM_DUTY_PROPOSER_V2,
    BM_DUTY_SYNC,
    BM_DUTY_PTC,
    BM_DUTY_KINDS
} bm_duty_kind_t;

typedef struct bm_duties_opts {
    uint32_t majority_after_ms;   /* default duties.dutiesMajorityAfter */
    uint32_t repoll_ms;           /* re-ask interval of a node whose 2xx was not accepted
                                     (default 250) */
    uint32_t tail_ms;             /* after the majority time with no 2xx at all, wait at
                                     most this long for one (default 500) */
    uint32_t liveness_timeout_ms; /* liveness waits for every node at most (default 1500) */
    uint32_t connect_timeout_ms;  /* per node (default timeouts.connect) */
} bm_duties_opts_t;

/** Counters for the status page. */
typedef struct bm_duties_stats {
    uint64_t requests[BM_DUTY_KINDS]; /* client requests per endpoint */
    uint64_t by_root;       /* answered with a 2xx whose dependent_root matched the cluster's */
    uint64_t first;         /* answered with the first 2xx (no root known, or sync duties) */
    uint64_t majority;      /* answered by the majority rule */
    uint64_t late;          /* answered with the first 2xx after the majority time */
    uint64_t errors;        /* answered with an error */
    uint64_t mismatches;    /* 2xx answers whose dependent_root was not the cluster's */
    uint64_t disagreements; /* requests in which the nodes' 2xx answers disagreed */
    uint64_t liveness;      /* liveness requests */
    uint64_t liveness_unavailable; /* liveness answered 503: no node ready through the epoch */
} bm_duties_stats_t;

/** Fills `o` with the defaults. */
void bm_duties_opts_default(bm_duties_opts_t *o);

/**
 * Creates the policy and registers a state listener on `pool` (ready-since times; nodes
 * already ready count as ready from now). `clock` (the engine's: every time of the policy
 * is read on it), `race`, `pool` and `chain` (the cluster's chain information, updated in
 * place by its owner, e.g. bm_discovery_chain()) are borrowed and must outlive the policy.
 * NULL on bad arguments or allocation failure.
 */
bm_duties_t *bm_duties_new(bm_clock_t *clock, bm_race_engine_t *race, bm_pool_t *pool,
                           const bm_chain_info_t *chain, const bm_duties_opts_t *o);

/** Sets the cluster head tracker the dependent roots are read from (borrowed; NULL: none,
 *  every duty read then takes the first 2xx). */
void bm_duties_set_head(bm_duties_t *d, const bm_head_t *head);

/** Mirrors every race of the policy (duties and liveness) to the shadow nodes (borrowed;
 *  NULL: none). */
void bm_duties_set_shadow(bm_duties_t *d, bm_shadow_t *shadow);

/**
 * Frees the policy. Every client request it served must have ended (free it after the
 * server drained), and the pool must not change a node's state afterwards (the pool has
 * no way to remove the listener: free this right before the pool). Free the race engine
 * first: its races judge with this policy (their contexts are the races' own).
 */
void bm_duties_free(bm_duties_t *d);

/** Adds the six routes. Returns 0 or the router's error. */
int bm_duties_register(bm_duties_t *d, bm_router_t *r);

/** The counters (live; valid while the policy lives). */
const bm_duties_stats_t *bm_duties_stats(const bm_duties_t *d);

/**
 * The dependent slot of `kind`'s answer for `epoch` (VALIDATOR-FLOWS.md section 2):
 * start(epoch - 1) - 1 for attester, proposer v2 and ptc; start(epoch) - 1 for proposer
 * v1; 0 (the genesis block) on underflow. False for sync duties (no dependent root) and
 * for slots_per_epoch == 0.
 */
bool bm_duties_dependent_slot(bm_duty_kind_t kind, uint64_t epoch, uint32_t slots_per_epoch,
                              uint64_t *slot);

/**
 * The root `kind`'s answer for `epoch` must carry: the cluster chain's block root at the
 * dependent slot. Returns 0, BM_EINVAL (sync duties, or no valid clock), BM_EUNAVAIL (no
 * tracker or no cluster head) or BM_ENOTFOUND (the tracker's links do not reach).
 */
int bm_duties_expected_root(const bm_head_t *head, const bm_chain_info_t *chain,
                            bm_duty_kind_t kind, uint64_t epoch, uint8_t out[32]);

/** Wall time (Unix ms) since which `node` has been ready without interruption; 0 when it
 *  is not ready now. */
uint64_t bm_duties_ready_since(const bm_duties_t *d, const bm_node_t *node);

/**
 * The liveness answer from the nodes' answers: for each requested index (`indices`, in
 * request order), is_live = OR over `answers[0..n)` (bodies of 2xx answers; NULL entries
 * are skipped) of that index's `is_live`; an index no node reported is not live. Writes
 * {"data":[{"index":"I","is_live":B},...]} to `out`. `valid` (may be NULL) gets, per
 * answer, whether it was a readable liveness answer (unreadable ones count for nothing).
 * Returns the number of readable answers, or BM_ENOMEM.
 */
int bm_duties_liveness_merge(const uint64_t *indices, size_t n_indices, bm_buf_t *const *answers,
                             size_t n, bool *valid, bm_str_t *out);

#endif /* BM_DUTIES_H */
