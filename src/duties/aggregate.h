/* SPDX-License-Identifier: MIT */
/*
 * aggregate: the policy for the two aggregation reads of a validator client,
 *
 *   GET /eth/v2/validator/aggregate_attestation   (JSON or SSZ; also the deprecated v1)
 *   GET /eth/v1/validator/sync_committee_contribution
 *
 * An aggregator signs whatever aggregate its beacon node hands it, so the value of the
 * answer is its participation: the number of set bits in `aggregation_bits`. Every node
 * sees a different share of the committee's gossip, so beaconmux races all of them and
 * keeps the answer with the most bits (docs/duties-reads.md):
 *
 *   - an answer is usable when it is a 2xx whose aggregation_bits has at least one bit
 *     set (a Bitlist for attestations, delimiter excluded; a Bitvector[128] for sync
 *     contributions), read from JSON or SSZ by the answer's own Content-Type; an answer
 *     with no bit set, or that cannot be read, is ignored (it would only be rejected on
 *     gossip);
 *   - the answer goes out at the earliest of: the first usable answer + `grace_ms`
 *     (aggregateGrace, 100 ms) with the best one in hand, a "full" answer (every bit
 *     set: nothing can beat it), or the deadline min(max(now + holdFloor, due),
 *     now + maxHold) where due is the slot's aggregate (contribution) due time;
 *   - a 404 from one node ("no aggregate here") never wins over another node's 2xx: errors
 *     are only relayed when no node has anything usable (then the most specific one);
 *   - past the deadline with nothing usable the first usable answer still wins, and every
 *     node is asked again after a failure, until max(now + maxHold, due); then the most
 *     specific error: a 4xx (a 404 "no aggregate"), else a 503 naming each node's failure.
 *
 * Identical requests (same target and Accept) share one race, so the aggregators of one
 * committee cost one request per node; each gets the winner's status, headers and body.
 */
#ifndef BM_AGGREGATE_H
#define BM_AGGREGATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/clock.h"
#include "cluster/chain.h"
#include "cluster/pool.h"
#include "duties/race.h"
#include "duties/shadow.h"
#include "http/router.h"

typedef struct bm_aggregate bm_aggregate_t;

/** Which aggregation read. */
typedef enum bm_aggregate_kind {
    BM_AGGREGATE_ATTESTATION = 0, /* aggregate_attestation (v1, v2): an Attestation */
    BM_AGGREGATE_CONTRIBUTION,    /* sync_committee_contribution: a SyncCommitteeContribution */
    BM_AGGREGATE_KINDS
} bm_aggregate_kind_t;

typedef struct bm_aggregate_opts {
    /* per kind: duties.aggregateAttestation.* and duties.syncCommitteeContribution.*
     * (defaults duties.holdFloor and duties.maxHold) */
    uint32_t hold_floor_ms[BM_AGGREGATE_KINDS];
    uint32_t max_hold_ms[BM_AGGREGATE_KINDS];
    uint32_t grace_ms;           /* default duties.aggregateGrace */
    uint32_t connect_timeout_ms; /* per node (default timeouts.connect) */
} bm_aggregate_opts_t;

/** Counters for the status page. */
typedef struct bm_aggregate_stats {
    uint64_t requests[BM_AGGREGATE_KINDS]; /* client requests */
    uint64_t races;                        /* races started (coalesced requests share one) */
    uint64_t full;                         /* answered with every bit set */
    uint64_t partial;                      /* answered with the best partial aggregate in hand */
    uint64_t errors;  /* answered with an error (no node had a usable aggregate) */
    uint64_t ignored; /* 2xx answers ignored: no bit set, or unreadable */
} bm_aggregate_stats_t;

/** Fills `o` with the defaults. */
void bm_aggregate_opts_default(bm_aggregate_opts_t *o);

/**
 * Creates the policy. `clock` (the engine's: deadlines are read on it), `race`, `pool` and
 * `chain` (the cluster's chain information, updated in place by its owner, e.g.
 * bm_discovery_chain()) are borrowed and must outlive the policy. NULL on bad arguments or
 * allocation failure.
 */
bm_aggregate_t *bm_aggregate_new(bm_clock_t *clock, bm_race_engine_t *race, bm_pool_t *pool,
                                 const bm_chain_info_t *chain, const bm_aggregate_opts_t *o);

/** Mirrors every race of the policy to the shadow nodes (borrowed; NULL: none). */
void bm_aggregate_set_shadow(bm_aggregate_t *a, bm_shadow_t *shadow);

/**
 * Frees the policy. Every client request it served must have ended (free it after the
 * server drained), and the race engine must be freed first: its races judge with this
 * policy (their contexts are the races' own and go with them).
 */
void bm_aggregate_free(bm_aggregate_t *a);

/** Adds the routes (GET v1 and v2 aggregate_attestation, GET sync_committee_contribution).
 *  Returns 0 or the router's error. */
int bm_aggregate_register(bm_aggregate_t *a, bm_router_t *r);

/** The counters (live; valid while the policy lives). */
const bm_aggregate_stats_t *bm_aggregate_stats(const bm_aggregate_t *a);

/**
 * Counts the participants of an aggregation answer's body. `content_type` (may be NULL:
 * JSON) picks the encoding: application/octet-stream is SSZ, anything else JSON. For SSZ
 * attestations `fork` (an Eth-Consensus-Version name) picks the layout (phase0..deneb or
 * electra+). JSON attestations read `data.aggregation_bits` as a Bitlist (delimiter not
 * counted; `*total` is the list length); contributions read it as a Bitvector (`*total`
 * is its size in bits). Returns 0, or BM_EINVAL when the body cannot be read.
 */
int bm_aggregate_count_bits(bm_aggregate_kind_t kind, const char *content_type, const char *fork,
                            const void *body, size_t len, size_t *set, size_t *total);

#endif /* BM_AGGREGATE_H */
