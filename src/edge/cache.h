/* SPDX-License-Identifier: MIT */
/*
 * cache: the reorg-safe response cache and read coalescing, in front of the read path. It
 * is the router's fallback: duty routes, writes, the event stream and the static endpoints
 * have routes of their own and never come here.
 *
 * For a GET or HEAD it asks edge/cachekey what the read is (immutable, chain-relative,
 * clock-relative or not cacheable) with the chain as beaconmux knows it now: the cluster
 * head and its ancestry (the head tracker), the head block's state root (asked once per
 * head with headers/{root}), the finalized checkpoint (the cluster stream's
 * finalized_checkpoint) and the justified one (the head state's finality_checkpoints, once
 * per epoch). Then:
 *   - a client's `Cache-Control: no-cache` (or no-store), or an uncacheable read: the read
 *     path as before;
 *   - a live entry: served from memory, identity or gzip as the client accepts, its
 *     `finalized` / `execution_optimistic` flags set from what is known now;
 *   - else one detached read (bm_readpath_fetch) per key, sent with the rewritten target
 *     (a root of the cluster chain for `head`, slots after finality, `finalized`); every
 *     identical read arriving meanwhile joins it and gets the same bytes; a joiner that
 *     leaves cancels nothing. A 200 of the expected content type, complete, under
 *     maxEntryBytes is stored once (gzip compressed once when large enough); any other
 *     answer goes to the waiting clients unstored; an answer too large to hold sends each
 *     waiting client down the read path on its own.
 * When the finalized checkpoint moves, chain-relative entries at or before it are promoted
 * (no TTL) or dropped (edge/store.h).
 */
#ifndef BM_CACHE_H
#define BM_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "cluster/discovery.h"
#include "cluster/events.h"
#include "cluster/head.h"
#include "edge/store.h"
#include "http/router.h"
#include "read/readpath.h"

typedef struct bm_cache_opts {
    bool enabled;             /* cache.enabled; off: every read goes to the read path */
    uint32_t max_entries;     /* cache.maxEntries */
    uint64_t max_bytes;       /* cache.maxBytes */
    uint64_t max_entry_bytes; /* cache.maxEntryBytes: larger answers are not stored */
    uint32_t chain_ttl_ms;    /* cache.chainTtl: chain-relative entries */
    uint32_t clock_ttl_ms;    /* cache.clockTtl: node identity and version; 0: not cached */
    uint64_t gzip_min_bytes;  /* cache.gzipMinBytes: smaller bodies are not compressed */
    uint32_t gzip_level;      /* cache.gzipLevel 1..9 */
} bm_cache_opts_t;

/** Fills `o` with the defaults (base/defaults.h). */
void bm_cache_opts_default(bm_cache_opts_t *o);

typedef struct bm_cache bm_cache_t;

/**
 * The cache in front of `rp`, reading the cluster chain from `head` and the slot clock from
 * `disc` (neither owned; they must outlive it). NULL on no memory.
 */
bm_cache_t *bm_cache_new(uv_loop_t *loop, bm_readpath_t *rp, bm_head_t *head, bm_discovery_t *disc,
                         const bm_cache_opts_t *o);

/** Learns finalized checkpoints from the cluster stream (a tap; not owned). */
void bm_cache_attach_events(bm_cache_t *c, bm_events_t *ev);

/** Cancels what is in flight (answering waiting clients 503); before the read path stops. */
void bm_cache_stop(bm_cache_t *c);

/** Frees it (after bm_cache_stop). */
void bm_cache_free(bm_cache_t *c);

/** Route adapter (the router's fallback): `ud` is the cache. */
void bm_cache_route(bm_req_t *req, const bm_route_params_t *params, void *ud);

/** Appends the figures as a JSON object (an admin status section). */
void bm_cache_status_json(bm_str_t *out, void *ud);

/** Figures per route class (bm_ck_route_t), for the status page and tests. `tier_hits`:
 *  misses of the memory answered by the second tier (no node asked). */
typedef struct bm_cache_counters {
    uint64_t hits, misses, bypassed, coalesced, stored, not_stored, too_big, bytes_served,
        gzip_served, tier_hits;
} bm_cache_counters_t;

/** A second tier's answer: the record put under the key, or NULL (not there, or the tier is
 *  not available). Borrowed for the call. */
typedef void (*bm_cache_tier_done_fn)(void *ctx, const char *rec, size_t len);

/**
 * A second tier under the memory (state.driver redis: one cache for every instance, wired
 * by app). On a miss of the memory, `get` is asked first: it returns 0 and calls
 * `done(ctx, ...)` exactly once, later (never inside get), or returns a negative code when
 * it cannot ask now (done never runs) and the nodes are asked at once. An answer a node gave
 * and the memory stored is given to `put` as a record (the fields an entry is served with,
 * then the body) with the entry's time to live (0: immutable, no expiry). Every identical
 * read arriving meanwhile waits for the one lookup, as for a node's answer.
 */
typedef struct bm_cache_tier {
    int (*get)(void *ud, const char *key, size_t n, bm_cache_tier_done_fn done, void *ctx);
    void (*put)(void *ud, const char *key, size_t n, const char *rec, size_t len, uint32_t ttl_ms);
    void *ud;
} bm_cache_tier_t;

/** Sets the second tier (copied; NULL removes it). Its `ud` must outlive the cache's use. */
void bm_cache_set_tier(bm_cache_t *c, const bm_cache_tier_t *tier);

/** The counters of route class `route`. */
const bm_cache_counters_t *bm_cache_counters(const bm_cache_t *c, int route);

/** What the cache holds now, and what its bounds and TTLs took out (for the exposition). */
typedef struct bm_cache_size {
    bool enabled;
    size_t entries;
    uint64_t bytes, max_bytes;
    const bm_store_stats_t *store; /* evictions by route class, expirations */
} bm_cache_size_t;

/** Fills `out` (the store's stats borrowed until the next call into the cache). */
void bm_cache_size(const bm_cache_t *c, bm_cache_size_t *out);

#endif /* BM_CACHE_H */
