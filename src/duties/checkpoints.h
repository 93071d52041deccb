/* SPDX-License-Identifier: MIT */
/*
 * checkpoints: what the nodes say the source and target checkpoints of an epoch are, and
 * when a quorum of them agrees. Attestation data carries them; a node with a fork-choice
 * bug in justification hands out data on the right head with the wrong source or target,
 * and a validator that signs it misses the vote (or worse, votes for a target its chain
 * does not have). Validator clients such as Vouch and Vero refuse data whose checkpoints a
 * majority of their nodes does not share; beaconmux does it for every client
 * (docs/duties.md, duties.checkpointMode).
 *
 * The book keeps, per epoch (the last few), every (source, target) pair the nodes answered
 * and which nodes answered it. A pair that `quorum` nodes answered is the epoch's agreement
 * for its target root: within an epoch on one chain neither checkpoint changes, so the
 * agreement is remembered for the epoch, keyed by target root (two chains of one epoch have
 * two target roots). The book also remembers the pairs that were served before any
 * agreement existed, so that a later agreement that contradicts one is reported once.
 *
 * Pure bookkeeping: no clock, no I/O; the attestation policy feeds it every answer.
 */
#ifndef BM_CHECKPOINTS_H
#define BM_CHECKPOINTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** A checkpoint: an epoch and the root of its boundary block. */
typedef struct bm_checkpoint {
    uint64_t epoch;
    uint8_t root[32];
} bm_checkpoint_t;

/** The checkpoints of one attestation data answer. */
typedef struct bm_checkpoint_pair {
    bm_checkpoint_t source;
    bm_checkpoint_t target;
} bm_checkpoint_pair_t;

/** True when both checkpoints of `a` and `b` are equal. */
bool bm_checkpoint_pair_equal(const bm_checkpoint_pair_t *a, const bm_checkpoint_pair_t *b);

typedef struct bm_checkpoints bm_checkpoints_t;

/** An empty book. NULL on allocation failure. */
bm_checkpoints_t *bm_checkpoints_new(void);

/** Frees the book. NULL is ignored. */
void bm_checkpoints_free(bm_checkpoints_t *b);

/**
 * Node `node` (its pool index; nodes from 64 on are not counted) answered `pair` for the
 * epoch of its target. Once `quorum` (at least 1) distinct nodes answered the same pair,
 * it becomes the epoch's agreement for its target root (the first pair to get there
 * stays). Returns how many pairs served before that agreement it contradicts (the same
 * target with another source, or a target without an agreement of its own; each one is
 * reported once; 0 when the call made no agreement). Idempotent for a node and a pair.
 * Epochs older than the four newest seen are forgotten.
 */
size_t bm_checkpoints_note(bm_checkpoints_t *b, size_t node, const bm_checkpoint_pair_t *pair,
                           uint32_t quorum);

/** True when the target's epoch has an agreement (for any target root). */
bool bm_checkpoints_epoch_agreed(const bm_checkpoints_t *b, uint64_t epoch);

/**
 * Whether `pair` is the agreement of its epoch: true when an agreement exists for its
 * target (epoch and root) and its source equals the agreed one. False when the target has
 * none (even when the epoch has one for another target root).
 */
bool bm_checkpoints_agreed(const bm_checkpoints_t *b, const bm_checkpoint_pair_t *pair);

/** Records that `pair` was served while its epoch had no agreement (see note). */
void bm_checkpoints_served(bm_checkpoints_t *b, const bm_checkpoint_pair_t *pair);

#endif /* BM_CHECKPOINTS_H */
