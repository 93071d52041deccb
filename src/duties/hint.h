/* SPDX-License-Identifier: MIT */
/*
 * hint: the hint Prysm passes inside its own validator client (PR 17075), inferred here
 * for every validator client: which head a duty read should be built on, and how long a
 * race may hold the client waiting for an answer built on it.
 *
 *   - expected head: the cluster head (src/cluster/head.h) when its slot is at or before the
 *     requested slot; for a past slot, the cluster chain's block at that slot
 *     (get_block_root_at_slot). Unknown before the first cluster head (start-up): the
 *     policies then take the first 2xx.
 *   - deadline: min(max(now + holdFloor, due), now + maxHold), per duty. A validator
 *     client gives up after a while (Vero 0.5 s on attestation data, Vouch 2 s, Lighthouse
 *     a quarter slot: docs/duties.md has the table), so a race holds at least holdFloor
 *     (time for a lagging node to catch up), never past the duty's due time unless that
 *     is still within holdFloor, and never longer than maxHold.
 *   - due: the spec's *_DUE_BPS of the requested slot (src/cluster/chain.h; 1/3 and 2/3 of the
 *     slot before Gloas, 1/4, 1/2, 3/4 from Gloas when a node's spec lacks them).
 *   - end: max(now + maxHold, due). With no usable answer at the deadline a race goes on
 *     asking every node (a node that recovers can still serve the duty) until this, and
 *     then answers with the most specific error: never later, whatever hangs.
 *
 * The hint reads the head tracker and the chain information; it owns neither. Reads are
 * live: a policy asks again at every answer, so a cluster head that moves during a race
 * moves what the race accepts.
 */
#ifndef BM_HINT_H
#define BM_HINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/fork.h"
#include "cluster/chain.h"
#include "cluster/head.h"
#include "cluster/pool.h"

/* The duty reads a race holds for (each has its own holdFloor and maxHold). */
typedef enum bm_hint_duty {
    BM_HINT_ATTESTATION_DATA = 0, /* GET attestation_data: attestation due */
    BM_HINT_HEAD_ROOT,            /* GET beacon/blocks/head/root: sync committee message due */
    BM_HINT_PAYLOAD_ATTESTATION,  /* GET payload_attestation_data (Gloas): PTC due */
    BM_HINT_AGGREGATE,            /* GET aggregate_attestation: aggregate due */
    BM_HINT_SYNC_CONTRIBUTION,    /* GET sync_committee_contribution: contribution due */
    BM_HINT_DUTY_COUNT
} bm_hint_duty_t;

/** How long a race may hold a client, for one duty. */
typedef struct bm_hint_hold {
    uint32_t hold_floor_ms; /* hold at least this long (when nothing was accepted) */
    uint32_t max_hold_ms;   /* and never longer than this */
} bm_hint_hold_t;

typedef struct bm_hint_opts {
    bm_hint_hold_t hold[BM_HINT_DUTY_COUNT];
} bm_hint_opts_t;

/** Fills `o` with the defaults (duties.holdFloor and duties.maxHold for every duty). */
void bm_hint_opts_default(bm_hint_opts_t *o);

/** The head a duty read is expected to be built on. */
typedef struct bm_expected {
    bool known;       /* false: no cluster head yet, or the chain does not reach that slot */
    uint8_t root[32]; /* the expected head block root */
    bool slot_known;  /* `slot` is the block's own slot */
    uint64_t slot;    /* the block's slot when slot_known (else some slot before the asked one) */
    bool is_cluster_head; /* the cluster head itself, not an ancestor looked up for a past slot */
    bool payload_full;    /* is_cluster_head and its payload is known full (Gloas) */
    bool parent_known;    /* is_cluster_head and its parent is known */
    uint8_t parent[32];
    uint64_t first_seen_ms; /* is_cluster_head: when a node first announced it (0: unknown) */
} bm_expected_t;

typedef struct bm_hint bm_hint_t;

/** A hint source with `opts` (NULL: defaults; copied). NULL on allocation failure. */
bm_hint_t *bm_hint_new(const bm_hint_opts_t *opts);

/** Frees the hint source (not the tracker nor the chain information it reads). */
void bm_hint_free(bm_hint_t *h);

/** The cluster head tracker to read (borrowed; must outlive the hint, or be replaced
 *  first). NULL: no expected head is ever known (every policy takes the first 2xx). */
void bm_hint_set_head(bm_hint_t *h, const bm_head_t *head);

/** The chain information to read (borrowed, read live: discovery's bm_discovery_chain()).
 *  NULL, or not known yet: due times are unknown and the fork is taken as unknown. */
void bm_hint_set_chain(bm_hint_t *h, const bm_chain_info_t *chain);

/** The tracker set with bm_hint_set_head, or NULL. */
const bm_head_t *bm_hint_head(const bm_hint_t *h);

/** The chain information when known, else NULL. */
const bm_chain_info_t *bm_hint_chain(const bm_hint_t *h);

/** The hold of `duty` in use. */
bm_hint_hold_t bm_hint_get_hold(const bm_hint_t *h, bm_hint_duty_t duty);

/**
 * The expected head for a duty read about `slot`, read now from the tracker: the cluster
 * head when its slot is <= `slot`, else the cluster chain's block at `slot` (its own slot
 * is known when it differs from the block at slot - 1). Fills `out` (known == false when
 * there is none) and returns out->known.
 */
bool bm_hint_expected(const bm_hint_t *h, uint64_t slot, bm_expected_t *out);

/**
 * Wall time (Unix ms) at which `duty` is due in `slot` by the fork of that slot, or 0 when
 * the chain is unknown.
 */
uint64_t bm_hint_due_ms(const bm_hint_t *h, bm_hint_duty_t duty, uint64_t slot);

/** min(max(now + hold_floor, due), now + max_hold); a due of 0 (unknown) counts as past. */
uint64_t bm_hint_deadline_at(uint64_t now_ms, uint64_t due_ms, uint32_t hold_floor_ms,
                             uint32_t max_hold_ms);

/** The deadline of a race for `duty` about `slot` starting at `now_ms`. */
uint64_t bm_hint_deadline(const bm_hint_t *h, bm_hint_duty_t duty, uint64_t slot, uint64_t now_ms);

/** max(now + max_hold, due): the end of a duty read without a usable answer. */
uint64_t bm_hint_end_at(uint64_t now_ms, uint64_t due_ms, uint32_t max_hold_ms);

/** The end (bm_hint_end_at) of a race for `duty` about `slot` starting at `now_ms`; an
 *  unknown due time counts as past. */
uint64_t bm_hint_end(const bm_hint_t *h, bm_hint_duty_t duty, uint64_t slot, uint64_t now_ms);

/**
 * True when the expected head arrived after its own slot's attestation due time (an
 * honest proposer of the next slot re-orgs such a late block: get_proposer_head). False
 * when anything needed is unknown (the block's slot, its arrival, the chain).
 */
bool bm_hint_arrived_late(const bm_hint_t *h, const bm_expected_t *e);

/**
 * True when the cluster head is about to move: a voting node announced a head above the
 * cluster head's slot (and at or below `slot`) whose ancestry the tracker is fetching
 * right now (one header request, a few milliseconds). An answer on the current cluster
 * head is then not yet fresh enough to be accepted: the race re-asks a moment later.
 */
bool bm_hint_head_moving(const bm_hint_t *h, uint64_t slot);

/**
 * True when the tracker knows `node`'s (pool index) head and it is behind the cluster
 * head on the cluster chain (an ancestor of it). A node building on the late head's parent
 * is then simply stale, not re-orging the late block on purpose.
 */
bool bm_hint_node_behind(const bm_hint_t *h, size_t node);

/**
 * The fork of `slot`. Returns false (and BM_FORK_PHASE0 in *out) when the chain is
 * unknown.
 */
bool bm_hint_fork(const bm_hint_t *h, uint64_t slot, bm_fork_t *out);

/** The current slot at `now_ms`; false when the chain is unknown. */
bool bm_hint_slot_at(const bm_hint_t *h, uint64_t now_ms, uint64_t *slot);

/**
 * The candidates of a duty race, in pool order: the ready nodes; when none is ready,
 * every node that can take requests (not wrong-network), best state first. Never a shadow
 * node (bm_node_usable): the shadow module mirrors the race to it instead. Writes at most
 * `cap` borrowed pointers (the pool owns the nodes) and returns how many.
 */
size_t bm_hint_candidates(const bm_pool_t *pool, bm_node_t **out, size_t cap);

#endif /* BM_HINT_H */
