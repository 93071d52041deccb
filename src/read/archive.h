/* SPDX-License-Identifier: MIT */
/*
 * archive: which reads ask for history a pruned node may no longer keep, and which answers
 * say it did not. Pure logic over the path, the current slot and an answer's status and
 * body; no I/O, no clock.
 *
 * Kinds of historical data and the Beacon API paths that carry their id:
 *   blob   /eth/v1/beacon/blob_sidecars/{id}, /eth/v1/beacon/blobs/{id},
 *          /eth/v1/debug/beacon/data_column_sidecars/{id}
 *   block  /eth/v2/beacon/blocks/{id}[/...], /eth/v1/beacon/blocks/{id}/..., headers/{id},
 *          blinded_blocks/{id}, rewards/blocks/{id}, rewards/sync_committee/{id}
 *   state  /eth/v1/beacon/states/{id}/..., /eth/v2/debug/beacon/states/{id},
 *          rewards/attestations/{epoch} (an epoch: its first slot)
 * An id is a slot (decimal), a root (0x...), "genesis" (slot 0), or a name of the moving
 * chain (head, finalized, justified), which is never historical.
 *
 * Proactive routing: a slot older than its kind's retention window below the current slot
 * (blob sidecars 4096 epochs, blocks 33024 epochs, states 8192 slots by default) goes to
 * archive nodes first. Fall-through: a 404 for a historical id (a slot not after the current
 * one, or a root), or a blob endpoint's 400 that speaks of custody or pruning, means this
 * node pruned it; the remaining attempts go to archive nodes.
 */
#ifndef BM_ARCHIVE_H
#define BM_ARCHIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum bm_hist_kind {
    BM_HIST_NONE = 0, /* not a historical read */
    BM_HIST_BLOB,
    BM_HIST_BLOCK,
    BM_HIST_STATE,
} bm_hist_kind_t;

/** What a path asks for. */
typedef struct bm_hist_id {
    bm_hist_kind_t kind;
    bool has_slot; /* a slot (or an epoch's first slot, or genesis) */
    uint64_t slot;
    bool root; /* a 0x root: its age is unknown */
} bm_hist_id_t;

/** Retention windows (routing.retention). */
typedef struct bm_retention {
    uint32_t blob_epochs;
    uint32_t block_epochs;
    uint32_t state_slots;
} bm_retention_t;

/** Fills `r` with the defaults. */
void bm_retention_default(bm_retention_t *r);

/** Classifies the path p[0..n) (a query is ignored). */
void bm_archive_classify(const char *p, size_t n, uint32_t slots_per_epoch, bm_hist_id_t *out);

/** True when the id is a slot older than its kind's window below `current_slot`. */
bool bm_archive_beyond_retention(const bm_hist_id_t *id, const bm_retention_t *r,
                                 uint64_t current_slot, uint32_t slots_per_epoch);

/**
 * True when an answer (status, body[0..n)) says the node pruned the history asked for: a
 * 404 for a slot not after `current_slot` or a root; for a blob kind also a 400 whose body
 * mentions custody or pruning.
 */
bool bm_archive_pruned_answer(const bm_hist_id_t *id, int status, const char *body, size_t n,
                              uint64_t current_slot);

#endif /* BM_ARCHIVE_H */
