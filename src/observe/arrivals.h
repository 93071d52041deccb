/* SPDX-License-Identifier: MIT */
/*
 * arrivals: when each node's head arrived, slot by slot, for the dashboard's heatmap (nodes
 * x the last 64 slots) and the per-node arrival histograms of /metrics.
 *
 * It is fed each node's view from the head tracker (cluster/head.h) whenever it changes:
 * a believed head the node had not announced before is one arrival, at its receipt time
 * minus its slot's start (negative for a head that came early). A head beaconmux learnt by
 * asking the node (a poll: before its stream's first event, or with no stream) is an
 * arrival without a time: it says which block the node had, not when it got it. Each node keeps the
 * last BM_ARRIVALS_SLOTS slots it announced a head for, with the root and whether it was
 * optimistic. What a cell means is decided when it is read, against the canonical chain
 * as it is then (a caller's function): the node's head at that slot was the canonical block
 * (ok) or another one (off_chain: a fork, or a block later re-orged), or the node announced
 * nothing for a slot that has a block (missed), or nothing for an empty slot (empty).
 * Slots before a node's first arrival (for a node never heard, before any node's first) are
 * unknown: beaconmux was not watching yet.
 * Pure: no I/O, no clock; the histograms never allocate.
 */
#ifndef BM_ARRIVALS_H
#define BM_ARRIVALS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/hist.h"
#include "cluster/head.h"

#define BM_ARRIVALS_SLOTS 64

/** What a cell of the heatmap says. */
typedef enum bm_arrival_mark {
    BM_ARRIVAL_PENDING = 0, /* the cluster has not judged the slot yet (at or past its head) */
    BM_ARRIVAL_OK,          /* the node's head at that slot was the canonical block */
    BM_ARRIVAL_OFF_CHAIN,   /* its head at that slot was another block (fork, re-orged) */
    BM_ARRIVAL_MISSED,      /* the slot has a canonical block the node never announced */
    BM_ARRIVAL_EMPTY,       /* the slot has no block and the node announced none */
    BM_ARRIVAL_UNKNOWN,     /* the canonical chain does not reach the slot */
} bm_arrival_mark_t;

/** The canonical chain's block root at `slot` (get_block_root_at_slot): 0, or non-zero
 *  when it is not known (past the cluster head, or not reachable). */
typedef int (*bm_arrivals_canon_fn)(uint64_t slot, uint8_t root[32], void *ud);

typedef struct bm_arrivals bm_arrivals_t;

/** Arrivals of `n_nodes` nodes (1..BM_MAX_NODES). NULL on bad size or no memory. */
bm_arrivals_t *bm_arrivals_new(size_t n_nodes);

/** Frees it (NULL is ignored). */
void bm_arrivals_free(bm_arrivals_t *a);

/**
 * Node `node`'s view as the tracker has it now, on `clock`. Records an arrival when the view
 * holds a believed head the node had not announced before. Returns true when it did.
 */
bool bm_arrivals_on_view(bm_arrivals_t *a, size_t node, const bm_head_node_view_t *v,
                         const bm_slot_clock_t *clock);

/** The node's arrival delays in seconds (buckets from 50 ms to 12 s). */
const bm_hist_t *bm_arrivals_hist(const bm_arrivals_t *a, size_t node);

/**
 * The mark of `node` at `slot` against the canonical chain `canon` (with `ud`), and its
 * arrival delay in ms into *delay_ms when it announced a head at that slot (else, and for
 * a polled head, INT32_MIN); *optimistic says whether that head was announced optimistic.
 */
bm_arrival_mark_t bm_arrivals_mark(const bm_arrivals_t *a, size_t node, uint64_t slot,
                                   bm_arrivals_canon_fn canon, void *ud, int32_t *delay_ms,
                                   bool *optimistic);

/** "pending", "ok", "off_chain", "missed", "empty", "unknown". */
const char *bm_arrival_mark_name(bm_arrival_mark_t m);

/**
 * Appends the heatmap of the BM_ARRIVALS_SLOTS slots up to `to_slot` as JSON: the slots,
 * whether each has a canonical block of its own, and per node (ids[i], "#i" past n_ids)
 * one cell per slot {"d": delay ms or null, "m": mark, "o": optimistic}.
 */
void bm_arrivals_json(const bm_arrivals_t *a, uint64_t to_slot, bm_arrivals_canon_fn canon,
                      void *ud, const char *const *ids, size_t n_ids, bm_str_t *o);

#endif /* BM_ARRIVALS_H */
