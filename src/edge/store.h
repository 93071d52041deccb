/* SPDX-License-Identifier: MIT */
/*
 * store: the response cache's memory. A hash table of entries under their keys (edge/
 * cachekey.h) with one LRU order, bounded by entries and by bytes (cache.maxEntries,
 * cache.maxBytes): storing past either bound evicts the least recently used entries first,
 * so the store never holds more. No I/O, no clock: times come in as `now_ms` (any monotonic
 * millisecond clock, the same for every call).
 *
 * An entry's bodies are immutable reference-counted buffers: a response being written when
 * its entry is evicted or replaced keeps its own reference and finishes unharmed.
 * Finality-aware promotion: bm_store_promote turns the CHAIN entries at or before a newly
 * finalized slot into IMMUTABLE ones (no TTL) when their root is on the finalized chain, and
 * drops those that are not (an orphaned block cannot be asked for by slot any more).
 */
#ifndef BM_STORE_H
#define BM_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/hdrs.h"
#include "base/list.h"
#include "edge/cachekey.h"
#include "edge/flags.h"

/** One stored answer. Fields are set before bm_store_put and never change after, except
 *  `cls` and `expires_ms` (promotion). */
typedef struct bm_entry {
    char *key; /* owned */
    size_t key_len;
    bm_buf_t *body;    /* owned reference: the identity body */
    bm_buf_t *gz;      /* owned reference: the gzip body, or NULL (small or incompressible) */
    bm_hdrs_t hdrs;    /* the fields served with the identity body (Content-Type, consensus
                          headers, Vary) */
    bm_hdrs_t hdrs_gz; /* the same with Content-Encoding: gzip (when gz) */
    bool json;         /* a JSON body: `flags` says where its flags are */
    bm_flags_t flags;
    bool final; /* its block is known finalized (finalized history, promoted) */
    bm_ck_class_t cls;
    bm_ck_route_t route;
    uint64_t expires_ms; /* 0: never */
    uint64_t slot;       /* CHAIN with a root: its slot, else UINT64_MAX */
    bool has_root;
    uint8_t root[32];
    size_t bytes; /* what it counts against maxBytes */
    /* the store's own */
    uint64_t hash;
    struct bm_entry *next_in_bucket;
    bm_link_t lru; /* on the store's LRU list */
} bm_entry_t;

typedef struct bm_store_stats {
    uint64_t evictions[BM_CK_ROUTE_COUNT]; /* by the bounds */
    uint64_t expirations;                  /* found past their TTL */
    uint64_t promotions, orphans_dropped;
    uint64_t refused; /* larger than maxBytes on their own */
} bm_store_stats_t;

typedef struct bm_store bm_store_t;

/** A store bounded by `max_entries` (>= 1) and `max_bytes`. NULL on no memory. */
bm_store_t *bm_store_new(size_t max_entries, uint64_t max_bytes);

/** Frees the store and every entry (bodies are unreferenced). */
void bm_store_free(bm_store_t *s);

/**
 * A new entry for key[0..n), with `body` referenced (and `gz` when not NULL), nothing else
 * set; the caller fills the rest and puts it, or frees it with bm_entry_free. NULL on no
 * memory.
 */
bm_entry_t *bm_entry_new(const char *key, size_t n, bm_buf_t *body, bm_buf_t *gz);

/** Frees an entry that was never put. */
void bm_entry_free(bm_entry_t *e);

/**
 * The live entry under key[0..n), made the most recently used; NULL when there is none
 * (an entry past its TTL is dropped and counted as an expiration). Borrowed: valid until
 * the next call that changes the store.
 */
bm_entry_t *bm_store_get(bm_store_t *s, const char *key, size_t n, uint64_t now_ms);

/**
 * Stores `e` (takes it), replacing the entry under the same key, then evicts least recently
 * used entries until both bounds hold. An entry larger than max_bytes on its own is freed
 * and refused: returns BM_ETOOBIG; else 0.
 */
int bm_store_put(bm_store_t *s, bm_entry_t *e);

/**
 * Replaces a stored entry's bodies (references taken; the old ones are released): a served
 * body whose flags were rewritten is stored once rather than rewritten per hit.
 */
void bm_store_update(bm_store_t *s, bm_entry_t *e, bm_buf_t *body, bm_buf_t *gz);

/** Drops the entry under key[0..n) if any. */
void bm_store_remove(bm_store_t *s, const char *key, size_t n);

/**
 * Finality: every CHAIN entry with a root at a slot <= `final_slot` becomes IMMUTABLE when
 * `canonical(root, slot)` says its root is the finalized chain's block at that slot, and is
 * dropped otherwise.
 */
void bm_store_promote(bm_store_t *s, uint64_t final_slot,
                      bool (*canonical)(void *ud, const uint8_t root[32], uint64_t slot), void *ud);

size_t bm_store_count(const bm_store_t *s);
uint64_t bm_store_bytes(const bm_store_t *s);
const bm_store_stats_t *bm_store_stats(const bm_store_t *s);

/** Entries per class now (index bm_ck_class_t). */
void bm_store_class_counts(const bm_store_t *s, size_t out[4]);

#endif /* BM_STORE_H */
