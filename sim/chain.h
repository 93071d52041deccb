/* SPDX-License-Identifier: MIT */
/*
 * chain: the ground truth of the simulated network. Blocks are named by (branch, slot);
 * their roots are hashes of the seed and those coordinates, so every node and every test
 * derives the same roots without sharing state. Branch 0 is the canonical chain; each
 * `fork` behaviour opens a new branch that starts at the forking node's head; competing
 * blocks live on the pseudo-branch BS_BRANCH_ALT. Parent links follow from the skip rate
 * and the scenarios (a late block is orphaned: the next proposer builds on its parent).
 *
 * The chain has no timers and never reads the clock: callers pass times. It also holds
 * the deterministic duty assignment (committees, proposers, sync committee, PTC), which
 * depends on the dependent root of the asking node's view, and the block values.
 */
#ifndef BS_CHAIN_H
#define BS_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/clock.h"
#include "hash.h"

#define BS_BRANCH_CANON 0u
#define BS_BRANCH_ALT 0xFFFFFFFFu
#define BS_FAR_FUTURE UINT64_MAX
#define BS_MAX_NODES 64
#define BS_SYNC_COMMITTEE_SIZE 512
#define BS_SYNC_SUBNETS 4
#define BS_EPOCHS_PER_SYNC_PERIOD 256
#define BS_PTC_MEMBERS 16

typedef enum { BS_FORK_FULU = 0, BS_FORK_GLOAS = 1 } bs_fork_t;

/** The name of a fork as used in Eth-Consensus-Version ("fulu", "gloas"). */
const char *bs_fork_name(bs_fork_t f);

/** A block: a slot on a branch. Slot 0 is the genesis block of every branch. */
typedef struct bs_block_id {
    uint32_t branch;
    uint64_t slot;
} bs_block_id_t;

bool bs_block_id_eq(bs_block_id_t a, bs_block_id_t b);

typedef struct bs_chain_cfg {
    uint64_t seed;
    uint64_t genesis_ms;      /* Unix ms of slot 0 */
    uint32_t slot_ms;         /* slot duration */
    uint32_t slots_per_epoch; /* SLOTS_PER_EPOCH */
    double skip_rate;         /* probability that a slot of a branch has no block */
    uint32_t validators;      /* validator count */
    uint32_t nodes;           /* node count (for competing-block majorities) */
    uint64_t gloas_epoch;     /* BS_FAR_FUTURE: not scheduled */
    uint32_t tx_bytes;        /* each block carries one transaction this large (larger bodies) */
} bs_chain_cfg_t;

/** Fills defaults: seed 1, 12 s slots, 32 slots per epoch, 64 validators, fulu. */
void bs_chain_cfg_default(bs_chain_cfg_t *c);

typedef struct bs_chain bs_chain_t;

/** A new chain (copies cfg). NULL on allocation failure or invalid cfg. Caller frees. */
bs_chain_t *bs_chain_new(const bs_chain_cfg_t *cfg);
void bs_chain_free(bs_chain_t *c);

/** The configuration in force (gloas_epoch can change at run time). */
const bs_chain_cfg_t *bs_chain_config(const bs_chain_t *c);

/** The slot clock of the chain. */
bm_slot_clock_t bs_chain_clock(const bs_chain_t *c);

/** The slot at wall time now_ms (0 before genesis). */
uint64_t bs_chain_slot_at(const bs_chain_t *c, uint64_t now_ms);
uint64_t bs_chain_slot_start(const bs_chain_t *c, uint64_t slot);
uint64_t bs_chain_epoch_of(const bs_chain_t *c, uint64_t slot);
uint64_t bs_chain_epoch_start(const bs_chain_t *c, uint64_t epoch);

/* ---- blocks --------------------------------------------------------------------- */

/** True when the block exists (not skipped; alternatives only where a scenario put one). */
bool bs_chain_exists(bs_chain_t *c, bs_block_id_t id);

/** True when the slot of the canonical branch was skipped by the skip rate. */
bool bs_chain_skipped(bs_chain_t *c, uint64_t slot);

/** Parent of a block; false for genesis (slot 0). */
bool bs_chain_parent(bs_chain_t *c, bs_block_id_t id, bs_block_id_t *parent);

bs_root_t bs_chain_root(const bs_chain_t *c, bs_block_id_t id);
bs_root_t bs_chain_state_root(const bs_chain_t *c, bs_block_id_t id);
bs_root_t bs_chain_body_root(const bs_chain_t *c, bs_block_id_t id);
bs_root_t bs_chain_genesis_root(const bs_chain_t *c);
/** Execution block hash of a block (and of its payload). */
bs_root_t bs_chain_exec_hash(const bs_chain_t *c, bs_block_id_t id);

/** Wall time at which the block is published (slot start, or later for a late block). */
uint64_t bs_chain_publish_ms(bs_chain_t *c, bs_block_id_t id);

/** The newest block at or before `slot` among `head` and its ancestors. */
bs_block_id_t bs_chain_block_at(bs_chain_t *c, bs_block_id_t head, uint64_t slot);

/** True when `anc` is `desc` or one of its ancestors. */
bool bs_chain_is_ancestor(bs_chain_t *c, bs_block_id_t anc, bs_block_id_t desc);

/** The newest common ancestor of two blocks. */
bs_block_id_t bs_chain_common_ancestor(bs_chain_t *c, bs_block_id_t a, bs_block_id_t b);

/** The canonical head as of `slot`: the newest canonical, non-orphaned block <= slot. */
bs_block_id_t bs_chain_canon_at(bs_chain_t *c, uint64_t slot);

/** The dependent root for duties of `epoch` seen from `head` (VALIDATOR-FLOWS.md §2):
 *  root of the block at start_slot(epoch - lookback) - 1, genesis on underflow. */
bs_root_t bs_chain_dependent_root(bs_chain_t *c, bs_block_id_t head, uint64_t epoch,
                                  unsigned lookback);

/** The fork of a slot. */
bs_fork_t bs_chain_fork_at(const bs_chain_t *c, uint64_t slot);

/* ---- branches and scenarios ------------------------------------------------------ */

/** Opens a new branch whose first block may be at `first_slot`, built on `base`.
 *  Returns the branch id (>= 1) or 0 on allocation failure. */
uint32_t bs_chain_new_branch(bs_chain_t *c, bs_block_id_t base, uint64_t first_slot);

/** Scenario: the canonical block of `slot` is published `delay_ms` after its slot start,
 *  and the proposer of slot+1 builds on its parent. Returns 0 or BM_EINVAL. */
int bs_chain_set_late(bs_chain_t *c, uint64_t slot, uint32_t delay_ms);

/** Scenario: two blocks at `slot`; nodes in `mask` see the alternative (bit i = node i).
 *  The block seen by fewer nodes is the alternative; the next block builds on the other.
 *  Returns 0 or BM_EINVAL. */
int bs_chain_set_competing(bs_chain_t *c, uint64_t slot, uint64_t mask);

/** Scenario: Gloas activates at `epoch` (BS_FAR_FUTURE: unscheduled). */
void bs_chain_set_gloas_epoch(bs_chain_t *c, uint64_t epoch);

/** Scenario: block values above 2^63 / 2^64 Wei for every node. */
void bs_chain_set_big_values(bs_chain_t *c, bool on);
bool bs_chain_big_values(const bs_chain_t *c);

/** Per-slot scenario facts for the truth API. */
typedef struct bs_slot_info {
    bool skipped;      /* no canonical block */
    bool late;         /* published late and orphaned */
    uint32_t late_ms;  /* delay after slot start */
    bool competing;    /* an alternative block exists */
    uint64_t alt_mask; /* nodes that see the alternative */
} bs_slot_info_t;

void bs_chain_slot_info(bs_chain_t *c, uint64_t slot, bs_slot_info_t *out);

/** True when node `node` sees the alternative block of a competing slot. */
bool bs_chain_sees_alt(bs_chain_t *c, uint64_t slot, uint32_t node);

/** The block of `slot` that node `node` imports when following `branch`, if any. */
bool bs_chain_block_for(bs_chain_t *c, uint32_t branch, uint64_t slot, uint32_t node,
                        bs_block_id_t *out);

/** True when the block is the late (orphaned) block of a late-block scenario. */
bool bs_chain_is_late(bs_chain_t *c, bs_block_id_t id);

/* ---- values and duties ------------------------------------------------------------ */

typedef unsigned __int128 bs_u128_t;

/** Writes v in decimal into out (at least 40 bytes). */
void bs_u128_dec(bs_u128_t v, char out[48]);

/** Deterministic execution and consensus block values (Wei) for a node's block at slot. */
void bs_chain_block_values(const bs_chain_t *c, uint32_t node, uint64_t slot, bool big,
                           bs_u128_t *exec_value, bs_u128_t *cons_value);

/** Pubkey of a validator (48 bytes). */
void bs_chain_pubkey(const bs_chain_t *c, uint32_t validator, uint8_t out[48]);

/** Finds a validator by pubkey; -1 when unknown. */
int64_t bs_chain_validator_by_pubkey(const bs_chain_t *c, const uint8_t pk[48]);

/** Proposer of `slot` for a view whose duties dependent root (v2) is `dep`. */
uint32_t bs_chain_proposer(const bs_chain_t *c, const bs_root_t *dep, uint64_t slot);

/** Attester assignment of validator v in `epoch` under dependent root `dep`. */
typedef struct bs_attester_duty {
    uint64_t slot;
    uint32_t committee_index;
    uint32_t committee_length;
    uint32_t committees_at_slot;
    uint32_t validator_committee_index;
} bs_attester_duty_t;

int bs_chain_attester_duty(bs_chain_t *c, const bs_root_t *dep, uint64_t epoch, uint32_t v,
                           bs_attester_duty_t *out);

/** Committee length of (slot, committee 0) under dependent root `dep`. */
uint32_t bs_chain_committee_length(bs_chain_t *c, const bs_root_t *dep, uint64_t slot);

/** Sync committee positions of validator v in the period of `epoch` (up to max). */
size_t bs_chain_sync_positions(const bs_chain_t *c, uint64_t epoch, uint32_t v, uint32_t *pos,
                               size_t max);

/** PTC members of `slot` under `dep` (deduplicated, up to BS_PTC_MEMBERS). */
size_t bs_chain_ptc_members(const bs_chain_t *c, const bs_root_t *dep, uint64_t slot,
                            uint32_t *out);

#endif /* BS_CHAIN_H */
