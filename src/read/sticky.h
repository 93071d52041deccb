/* SPDX-License-Identifier: MIT */
/*
 * sticky: which node each client sticks to (routing.stickySessions). A client is a 64-bit
 * key (a hash of its address or of a header's value); the table maps it to a node index.
 * Pure data structure, time passed in: a bounded open-addressed table whose oldest entry in
 * a probe window is replaced when the window is full, so a flood of new clients cannot
 * grow it. It also counts the clients per node, for the rebalancing rule: a node holding
 * more than `factor` times its weighted share of the clients loses new ones to others.
 */
#ifndef BM_STICKY_H
#define BM_STICKY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/defaults.h"

typedef struct bm_sticky bm_sticky_t;

/** A table of `cap` entries (rounded up to a power of two, at least 64). NULL on OOM. */
bm_sticky_t *bm_sticky_new(size_t cap);

void bm_sticky_free(bm_sticky_t *s);

/** The node `key` sticks to, or -1. Refreshes the entry's time. */
int bm_sticky_get(bm_sticky_t *s, uint64_t key, uint64_t now_ms);

/** Sticks `key` to `node` (0..63), replacing what it stuck to. */
void bm_sticky_set(bm_sticky_t *s, uint64_t key, int node, uint64_t now_ms);

/** Forgets `key`. */
void bm_sticky_drop(bm_sticky_t *s, uint64_t key);

/** Calls fn(ud, key, node, used_ms) for every client in the table (the time of its last
 *  use, on the clock of the callers' now_ms); the table must not change meanwhile. */
void bm_sticky_each(const bm_sticky_t *s,
                    void (*fn)(void *ud, uint64_t key, int node, uint64_t used_ms), void *ud);

/** Clients stuck to `node`, and in total. */
size_t bm_sticky_count(const bm_sticky_t *s, int node);
size_t bm_sticky_total(const bm_sticky_t *s);

/**
 * True when `node` holds more than factor x share of the clients, where share is its
 * weight over the candidates' total weight (0..1). False while fewer than 8 clients stick.
 */
bool bm_sticky_overloaded(const bm_sticky_t *s, int node, double share, double factor);

/** The 64-bit key of a client text (an address or a header value): FNV-1a. */
uint64_t bm_sticky_key(const char *text, size_t n);

#endif /* BM_STICKY_H */
