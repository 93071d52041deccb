/* SPDX-License-Identifier: MIT */
/*
 * cachekey: what the response cache may keep of a read, under which key, for how long, and
 * the target the read must be sent with so that the answer stored is exactly the one keyed.
 * Pure judgement: the chain as beaconmux knows it comes in as a value (bm_ck_chain_t), no
 * I/O, no clock. docs/cache.md explains the rules; in short, by the id in the path:
 *
 *   - a root (0x + 64 hex), `genesis`, a slot at or before the finalized checkpoint's slot:
 *     IMMUTABLE, kept until evicted;
 *   - `head`, a slot after finality (a block id): CHAIN, keyed by the block root it resolves
 *     to on the cluster chain now, the target rewritten to that root (blocks by block root,
 *     states by the head header's state root), with a TTL; an empty or future slot, or one
 *     the known parent links do not reach, is not cached;
 *   - `finalized`: IMMUTABLE under the finalized checkpoint's block (or state) root, the
 *     target rewritten to it; `justified` (states): CHAIN under the justified checkpoint;
 *   - node identity and version: CLOCK, a short TTL; anything else: not cached.
 * JSON and SSZ answers have distinct keys; the content encoding is not part of a key.
 */
#ifndef BM_CACHEKEY_H
#define BM_CACHEKEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/** How an entry lives. */
typedef enum bm_ck_class {
    BM_CK_NONE = 0,  /* not cacheable */
    BM_CK_IMMUTABLE, /* by root, genesis or finalized history: no TTL */
    BM_CK_CHAIN,     /* keyed by a root of the cluster chain now: TTL, promoted at finality */
    BM_CK_CLOCK,     /* node identity and version: short TTL */
} bm_ck_class_t;

/** Route classes of the status page's figures. */
typedef enum bm_ck_route {
    BM_CK_ROUTE_BLOCK = 0, /* blocks, blinded blocks, headers, attestations, rewards */
    BM_CK_ROUTE_BLOB,      /* blob sidecars, blobs */
    BM_CK_ROUTE_STATE,     /* states/{id}/..., debug states */
    BM_CK_ROUTE_NODE,      /* node identity, version */
    BM_CK_ROUTE_COUNT
} bm_ck_route_t;

/**
 * The cluster chain as known now. Roots are raw bytes. `root_at_slot` gives the block root
 * of the cluster chain at a slot (the latest block at or before it): 0, or non-zero when
 * unknown (no head, parent links do not reach); may be NULL (nothing after finality is
 * resolved).
 */
typedef struct bm_ck_chain {
    uint32_t slots_per_epoch; /* 0: unknown (slots are never judged final) */
    bool has_head;
    uint8_t head_root[32];
    uint64_t head_slot;
    bool has_head_state; /* the head block's state root (from its header) */
    uint8_t head_state_root[32];
    bool has_finalized;
    uint64_t fin_epoch;
    uint8_t fin_root[32];
    bool has_fin_state;
    uint8_t fin_state_root[32];
    bool has_justified;
    uint64_t just_epoch;
    uint8_t just_root[32];
    int (*root_at_slot)(void *ud, uint64_t slot, uint8_t out[32]);
    void *ud;
} bm_ck_chain_t;

/** Lifetimes, milliseconds. */
typedef struct bm_ck_ttls {
    uint32_t chain_ms; /* CHAIN entries (cache.chainTtl) */
    uint32_t clock_ms; /* CLOCK entries (cache.clockTtl); 0: not cached */
} bm_ck_ttls_t;

/** A decision. Dispose with bm_ck_dispose. */
typedef struct bm_ck {
    bm_ck_class_t cls;
    bm_ck_route_t route;
    bool ssz;        /* the SSZ form was asked for */
    uint32_t ttl_ms; /* 0: none */
    uint64_t slot;   /* CHAIN with a block root: the slot of that root (promotion); else
                        UINT64_MAX */
    bool has_root;   /* CHAIN: the block root the entry stands for */
    uint8_t root[32];
    bool rewritten;  /* target differs from the client's */
    bool final;      /* finalized history (genesis, `finalized`, a slot at or before it) */
    bm_str_t key;    /* the key (cls != NONE) */
    bm_str_t target; /* what to send (cls != NONE): path (rewritten) and query */
} bm_ck_t;

/**
 * Decides for a GET of path[0..path_len) with query[0..query_len) (no '?'; may be NULL);
 * `ssz` when the client prefers application/octet-stream. Always fills `out` (cls NONE
 * when not cacheable). Returns 0 or BM_ENOMEM.
 */
int bm_ck_derive(const char *path, size_t path_len, const char *query, size_t query_len, bool ssz,
                 const bm_ck_chain_t *chain, const bm_ck_ttls_t *ttls, bm_ck_t *out);

/** Frees what `ck` holds. */
void bm_ck_dispose(bm_ck_t *ck);

/** "block", "blob", "state", "node". */
const char *bm_ck_route_name(bm_ck_route_t r);

/** "none", "immutable", "chain", "clock". */
const char *bm_ck_class_name(bm_ck_class_t c);

#endif /* BM_CACHEKEY_H */
